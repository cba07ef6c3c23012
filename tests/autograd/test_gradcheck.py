"""``ferro.testing.gradcheck`` must catch wrong backwards: a checker that cannot fail is useless."""

import numpy as np
import pytest

import ferro
from ferro._C.engine import apply
from ferro._C.graph import OpDef
from ferro.errors import DtypeError, GradcheckError
from ferro.testing import gradcheck


def _x(*shape):
    return ferro.randn(*shape, dtype=ferro.float64, requires_grad=True)


def test_passes_on_correct_backward():
    assert gradcheck(lambda a, b: (a * b).tanh(), (_x(3), _x(3)))


def test_catches_wrong_backward():
    wrong = OpDef(
        "wrong_sin", lambda ctx, x: np.sin(x), lambda ctx, gy: gy * 1.0
    )  # should be gy * cos(x)
    with pytest.raises(GradcheckError, match="Jacobian mismatch for input 0"):
        gradcheck(lambda x: apply(wrong, x), (_x(4),))
    assert gradcheck(lambda x: apply(wrong, x), (_x(4),), raise_exception=False) is False


def test_catches_slightly_wrong_backward():
    slightly = OpDef("slightly", lambda ctx, x: x * x, lambda ctx, gy: gy * 2.001 * ctx.xp.ones(1))

    def fn(x):
        return apply(slightly, x)

    x = ferro.tensor([1.0, 2.0], dtype=ferro.float64, requires_grad=True)
    with pytest.raises(GradcheckError):
        gradcheck(fn, (x,))


def test_catches_non_reentrant_backward():
    state = {"calls": 0}

    def backward(ctx, gy):
        state["calls"] += 1
        return gy * (3.0 if state["calls"] > 1 else 2.0)

    drifting = OpDef("drifting", lambda ctx, x: x * 2.0, backward)
    with pytest.raises(GradcheckError, match="re-entrant"):
        gradcheck(lambda x: apply(drifting, x), (_x(1),))


def test_refuses_float32_inputs():
    with pytest.raises(DtypeError, match="float64"):
        gradcheck(lambda x: x * 2, (ferro.randn(2, requires_grad=True),))


def test_does_not_mutate_inputs():
    x = _x(3)
    before = x._data.copy()
    gradcheck(lambda t: t.exp(), (x,))
    np.testing.assert_array_equal(x._data, before)
    assert x.grad is None


def test_multiple_outputs_and_non_tensor_arguments():
    def fn(a, scale):
        return a * scale, (a * a).sum()

    assert gradcheck(fn, (_x(2, 2), 3.0))
