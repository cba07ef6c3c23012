"""Anomaly detection and graph export."""

import math

import numpy as np
import pytest

import ferro
from ferro.autograd import detect_anomaly, set_detect_anomaly
from ferro.errors import AnomalyError

# sqrt'(0) is a deliberate 0/0 here; NumPy's warning about it is expected.
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")


def _make_nan():
    x = ferro.tensor([0.0, 1.0], requires_grad=True)
    y = ferro.sqrt(x)  # d sqrt / dx at 0 is inf
    return x, (y * 0.0).sum()


def test_anomaly_names_the_op_and_the_user_line_that_created_it():
    with detect_anomaly():
        x, loss = _make_nan()
        with pytest.raises(AnomalyError) as info:
            loss.backward()
    msg = str(info.value)
    assert "SqrtBackward" in msg and "test_anomaly_viz.py" in msg and "_make_nan" in msg
    assert x.grad is None


def test_without_anomaly_mode_the_nan_passes_silently():
    x, loss = _make_nan()
    loss.backward()
    assert math.isnan(x.grad.tolist()[0])


def test_check_nan_false_records_sites_only_and_set_detect_anomaly_restores():
    with detect_anomaly(check_nan=False):
        x, loss = _make_nan()
        assert loss.grad_fn.creation_site[0].endswith("test_anomaly_viz.py")
        loss.backward()
    assert not ferro.autograd.is_anomaly_enabled()
    with set_detect_anomaly(True):
        assert ferro.autograd.is_anomaly_enabled()
    assert not ferro.autograd.is_anomaly_enabled()
    assert ferro.ones(1, requires_grad=True).exp().grad_fn.creation_site is None


def test_other_errors_in_backward_get_the_creation_site_as_a_note():
    class Boom(ferro.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1.0

        @staticmethod
        def backward(ctx, g):
            raise ValueError("boom")

    with detect_anomaly():
        y = Boom.apply(ferro.ones(1, requires_grad=True))
        with pytest.raises(ValueError) as info:
            y.sum().backward()
    assert any("test_anomaly_viz.py" in n for n in info.value.__notes__)


def test_to_dot_lists_nodes_leaves_shapes_and_saved_arrays():
    w = ferro.randn(3, 2, requires_grad=True)
    x = ferro.randn(4, 3)
    y = (x @ w).tanh().sum()
    dot = ferro.viz.to_dot(y)
    assert dot.startswith("digraph backward {") and dot.rstrip().endswith("}")
    for part in (
        "SumBackward",
        "TanhBackward",
        "MatmulBackward",
        "leaf (3, 2)",
        "saved: float32(4, 2)",
        "out: (4, 2)",
    ):
        assert part in dot
    assert dot.count("->") == 3  # sum <- tanh <- matmul <- w (x needs no gradient)
    assert np.isfinite(1.0)
