"""Hypothesis property tests over broadcastable shapes, drawn from the op database: for every
entry marked ``elementwise`` or ``reduction``, values match NumPy and gradients match central
differences on shapes, axes and values Hypothesis chooses (MyGrad's approach)."""

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays, mutually_broadcastable_shapes
from opdb import OPS

import ferro
from ferro.testing import gradcheck

ELEMENTWISE = [op for op in OPS if op.elementwise]
REDUCTIONS = [op for op in OPS if op.reduction]
# How far draws keep from an op's kinks: far beyond gradcheck's step (1e-6), so no central
# difference straddles one.
KINK_MARGIN = 1e-3


def _floats(lo, hi):
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False, width=64)


def _assume_away_from_kinks(op, xs):
    if op.kink is not None:
        assume(np.min(op.kink(*xs), initial=np.inf) > KINK_MARGIN)


@pytest.mark.parametrize("op", ELEMENTWISE, ids=lambda op: op.name)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_elementwise_broadcasting_matches_numpy_and_numeric_gradient(op, data):
    shapes = data.draw(
        mutually_broadcastable_shapes(num_shapes=len(op.domain), max_dims=3, max_side=3)
    )
    xs = [
        data.draw(arrays(np.float64, shape, elements=_floats(lo, hi)))
        for shape, (lo, hi) in zip(shapes.input_shapes, op.domain, strict=True)
    ]
    _assume_away_from_kinks(op, xs)
    tensors = [ferro.from_numpy(x.copy()).requires_grad_() for x in xs]
    out = op.fn(*tensors)
    np.testing.assert_allclose(out.detach().numpy(), op.ref(*xs), rtol=1e-12, atol=1e-12)
    assert out.shape == shapes.result_shape
    if op.grad:
        assert gradcheck(op.fn, tuple(tensors), **op.gradcheck_kwargs)


@pytest.mark.parametrize("op", REDUCTIONS, ids=lambda op: op.name)
@settings(max_examples=15, deadline=None)
@given(
    data=st.data(),
    shape=array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4),
    keepdims=st.booleans(),
)
def test_reductions_match_numpy_and_numeric_gradient(op, data, shape, keepdims):
    ((lo, hi),) = op.domain
    x = data.draw(arrays(np.float64, shape, elements=_floats(lo, hi)))
    _assume_away_from_kinks(op, [x])
    axis = data.draw(
        st.one_of(
            st.none(),
            st.integers(-len(shape), len(shape) - 1),
            st.lists(
                st.integers(0, len(shape) - 1), min_size=1, max_size=len(shape), unique=True
            ).map(tuple),
        )
    )
    t = ferro.from_numpy(x.copy()).requires_grad_()
    out = op.fn(t, axis=axis, keepdims=keepdims)
    np.testing.assert_allclose(
        out.detach().numpy(), op.ref(x, axis=axis, keepdims=keepdims), rtol=1e-10, atol=1e-12
    )
    assert gradcheck(lambda v: op.fn(v, axis=axis, keepdims=keepdims), (t,), **op.gradcheck_kwargs)


def test_clamp_bounds_that_broadcast_the_input_to_a_larger_shape():
    # Found by drawing clamp's shapes from the op database: backward built its mask in x's
    # shape and failed with a bare ValueError when the bounds widened x.
    x = ferro.tensor([0.1, -1.0, 2.0], dtype=ferro.float64, requires_grad=True)
    lo = ferro.tensor(
        [[-0.5, -0.6, -0.7], [-0.2, -0.3, -0.4]], dtype=ferro.float64, requires_grad=True
    )
    hi = ferro.tensor([[0.7], [0.8]], dtype=ferro.float64, requires_grad=True)
    assert ferro.clamp(x, lo, hi).shape == (2, 3)
    assert gradcheck(ferro.clamp, (x, lo, hi))


@pytest.mark.torch
@pytest.mark.parametrize(
    "case",
    [
        "cross_entropy",
        "gelu",
        "softplus",
        "pad_reflect",
        "prod",
        "norm_inf",
        "einsum",
        "kl_div",
        "bce_logits",
        "logaddexp",
    ],
)
def test_against_pytorch(case):
    import torch
    import torch.nn.functional as F

    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 5))
    t = rng.integers(0, 5, 4)
    w = rng.uniform(0.5, 2, 5)
    p = rng.uniform(0.1, 0.9, (4, 5))
    cases = {
        "cross_entropy": (
            lambda a: ferro.cross_entropy(a, ferro.tensor(t), weight=w, label_smoothing=0.1),
            lambda a: F.cross_entropy(
                a, torch.tensor(t), weight=torch.tensor(w), label_smoothing=0.1
            ),
        ),
        "gelu": (lambda a: ferro.gelu(a).sum(), lambda a: F.gelu(a).sum()),
        "softplus": (
            lambda a: ferro.softplus(a, 2.0, 1.0).sum(),
            lambda a: F.softplus(a, 2.0, 1.0).sum(),
        ),
        "pad_reflect": (
            lambda a: (ferro.pad(a, (2, 1), "reflect") ** 2).sum(),
            lambda a: (F.pad(a, (2, 1), "reflect") ** 2).sum(),
        ),
        "prod": (lambda a: ferro.prod(a, axis=1).sum(), lambda a: a.prod(dim=1).sum()),
        "norm_inf": (
            lambda a: ferro.norm(a, float("inf"), axis=1).sum(),
            lambda a: torch.linalg.vector_norm(a, float("inf"), dim=1).sum(),
        ),
        "einsum": (
            lambda a: ferro.einsum("ij,ik->jk", a, a).sum(),
            lambda a: torch.einsum("ij,ik->jk", a, a).sum(),
        ),
        "kl_div": (
            lambda a: ferro.kl_div(ferro.log_softmax(a, 1), ferro.tensor(p), reduction="batchmean"),
            lambda a: F.kl_div(F.log_softmax(a, 1), torch.tensor(p), reduction="batchmean"),
        ),
        "bce_logits": (
            lambda a: ferro.binary_cross_entropy_with_logits(a, ferro.tensor(p), pos_weight=w),
            lambda a: F.binary_cross_entropy_with_logits(
                a, torch.tensor(p), pos_weight=torch.tensor(w)
            ),
        ),
        "logaddexp": (
            lambda a: ferro.logaddexp(a, 3.0 * a[:, :1]).sum(),
            lambda a: torch.logaddexp(a, 3.0 * a[:, :1]).sum(),
        ),
    }
    f_fn, t_fn = cases[case]
    fx = ferro.tensor(x, requires_grad=True)
    tx = torch.tensor(x, requires_grad=True)
    fy, ty = f_fn(fx), t_fn(tx)
    fy.backward()
    ty.backward()
    np.testing.assert_allclose(fy.item(), ty.item(), rtol=1e-10)
    np.testing.assert_allclose(fx.grad.numpy(), tx.grad.numpy(), rtol=1e-8, atol=1e-10)
