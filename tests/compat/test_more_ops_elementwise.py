"""The elementwise ops of issue 13 item 7 against PyTorch as the oracle: the same inputs give
the same values and the same gradients (zero for floor/ceil/round/trunc, only through finite
elements for nan_to_num). The NumPy-reference checks are the op database's
(tests/ops/opdb/elementwise.py)."""

import numpy as np
import pytest

import ferro

pytestmark = pytest.mark.torch

torch = pytest.importorskip("torch")

_RNG = np.random.default_rng(13)
# Halves (round to even), values on both sides of 0, and a quotient sign mix for fmod/remainder.
_X = np.concatenate([[0.5, 1.5, 2.5, -0.5, -2.5, -1.25], _RNG.uniform(-3, 3, 10)])
_Y = np.concatenate([[0.75, -0.75, 1.5, -1.5, 2.0, 0.6], _RNG.uniform(0.5, 2, 10)])
_W = _RNG.uniform(0, 1, _X.size)
_NONFINITE = np.array([np.nan, np.inf, -np.inf, 1.5, -0.25, 0.0])

CASES = {
    "square": (lambda m, x: m.square(x), (_X,)),
    "reciprocal": (lambda m, x: m.reciprocal(x), (_Y,)),
    "log2": (lambda m, x: m.log2(x), (np.abs(_Y),)),
    "log10": (lambda m, x: m.log10(x), (np.abs(_Y),)),
    "exp2": (lambda m, x: m.exp2(x), (_X,)),
    "floor": (lambda m, x: m.floor(x), (_X,)),
    "ceil": (lambda m, x: m.ceil(x), (_X,)),
    "round": (lambda m, x: m.round(x), (_X,)),
    "round_decimals": (lambda m, x: m.round(x * 10, decimals=1), (_X,)),
    "trunc": (lambda m, x: m.trunc(x), (_X,)),
    "frac": (lambda m, x: m.frac(x), (_X,)),
    "fmod": (lambda m, a, b: m.fmod(a, b), (_X, _Y)),
    "remainder": (lambda m, a, b: m.remainder(a, b), (_X, _Y)),
    "fmod_scalar": (lambda m, a: m.fmod(a, -1.5), (_X,)),
    "remainder_scalar": (lambda m, a: m.remainder(a, -1.5), (_X,)),
    "lerp": (lambda m, a, b, w: m.lerp(a, b, w), (_X, _Y, _W)),
    "lerp_scalar": (lambda m, a, b: m.lerp(a, b, 0.25), (_X, _Y)),
    "addcmul": (lambda m, a, b, c: m.addcmul(a, b, c, value=-0.5), (_X, _Y, _W)),
    "addcdiv": (lambda m, a, b, c: m.addcdiv(a, b, c, value=2), (_W, _X, _Y)),
    "clamp_min": (lambda m, x: m.clamp_min(x, -0.5), (_X,)),
    "clamp_max": (lambda m, x: m.clamp_max(x, 0.5), (_X,)),
    "nan_to_num": (lambda m, x: m.nan_to_num(x), (_NONFINITE,)),
    "nan_to_num_values": (
        lambda m, x: m.nan_to_num(x, nan=1.0, posinf=5.0, neginf=-5.0),
        (_NONFINITE,),
    ),
    "tensor_method": (lambda m, x, y: x.lerp(y, 0.5).square().addcmul(x, y).frac(), (_X, _Y)),
}


def _run(lib, fn, arrays):
    tensors = [lib.tensor(a, dtype=lib.float64, requires_grad=True) for a in arrays]
    out = fn(lib, *tensors)
    out.sum().backward()
    return out.detach().numpy(), [t.grad.numpy() for t in tensors]


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_gradients_match_torch(name):
    fn, arrays = CASES[name]
    y, grads = _run(ferro, fn, arrays)
    y_ref, grads_ref = _run(torch, fn, arrays)
    np.testing.assert_allclose(y, y_ref, rtol=1e-12, atol=1e-12)
    for g, g_ref in zip(grads, grads_ref, strict=True):
        np.testing.assert_allclose(g, g_ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["isnan", "isinf", "isfinite"])
def test_predicates_match_torch(name):
    out = getattr(ferro, name)(ferro.tensor(_NONFINITE))
    ref = getattr(torch, name)(torch.tensor(_NONFINITE))
    assert out.dtype == ferro.bool
    np.testing.assert_array_equal(out.numpy(), ref.numpy())


def test_float32_nan_to_num_uses_float32_limits_like_torch():
    x = _NONFINITE.astype(np.float32)
    out = ferro.nan_to_num(ferro.tensor(x)).numpy()
    ref = torch.nan_to_num(torch.tensor(x)).numpy()
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, ref)


def test_rounding_ops_keep_integer_dtypes_like_torch():
    x = np.array([-3, 0, 7])
    for name in ["floor", "ceil", "round", "trunc"]:
        out = getattr(ferro, name)(ferro.tensor(x))
        ref = getattr(torch, name)(torch.tensor(x))
        assert out.dtype == ferro.int64, name
        np.testing.assert_array_equal(out.numpy(), ref.numpy())
