"""Hypothesis property tests over broadcastable shapes for the elementwise and reduction
families: values match NumPy and gradients match central differences (MyGrad's approach)."""

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays, mutually_broadcastable_shapes

import ferro
from ferro.testing import gradcheck

BINARY = {
    "add": (ferro.add, np.add, (-3, 3)),
    "sub": (ferro.sub, np.subtract, (-3, 3)),
    "mul": (ferro.mul, np.multiply, (-3, 3)),
    "div": (ferro.div, np.divide, (0.5, 3)),
    "maximum": (ferro.maximum, np.maximum, (-3, 3)),
    "pow": (ferro.pow, np.power, (0.5, 2)),
}

REDUCTIONS = {
    "sum": (ferro.sum, np.sum),
    "mean": (ferro.mean, np.mean),
    "amax": (ferro.amax, np.max),
    "logsumexp": (
        ferro.logsumexp,
        lambda x, axis, keepdims: np.log(np.exp(x).sum(axis=axis, keepdims=keepdims)),
    ),
}


def _floats(lo, hi):
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False, width=64)


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    name=st.sampled_from(sorted(BINARY)),
    shapes=mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3),
)
def test_binary_broadcasting_matches_numpy_and_numeric_gradient(data, name, shapes):
    fn, ref, (lo, hi) = BINARY[name]
    a = data.draw(arrays(np.float64, shapes.input_shapes[0], elements=_floats(lo, hi)))
    b = data.draw(arrays(np.float64, shapes.input_shapes[1], elements=_floats(lo, hi)))
    if name == "maximum":
        # Keep away from ties (closer than gradcheck's step), where the derivative jumps.
        assume(np.all(np.abs(np.subtract(a, b)) > 1e-3))
    ta = ferro.from_numpy(a.copy()).requires_grad_()
    tb = ferro.from_numpy(b.copy()).requires_grad_()
    out = fn(ta, tb)
    np.testing.assert_allclose(out.detach().numpy(), ref(a, b), rtol=1e-12)
    assert out.shape == shapes.result_shape
    assert gradcheck(fn, (ta, tb))


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    name=st.sampled_from(sorted(REDUCTIONS)),
    shape=array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4),
    keepdims=st.booleans(),
)
def test_reductions_match_numpy_and_numeric_gradient(data, name, shape, keepdims):
    fn, ref = REDUCTIONS[name]
    x = data.draw(arrays(np.float64, shape, elements=_floats(-3, 3)))
    if name == "amax":
        assume(x.size < 2 or np.diff(np.sort(x.ravel())).min() > 1e-3)  # no (near-)ties
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
    out = fn(t, axis=axis, keepdims=keepdims)
    np.testing.assert_allclose(
        out.detach().numpy(), ref(x, axis=axis, keepdims=keepdims), rtol=1e-10, atol=1e-12
    )
    assert gradcheck(lambda v: fn(v, axis=axis, keepdims=keepdims), (t,))


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
    }
    f_fn, t_fn = cases[case]
    fx = ferro.tensor(x, requires_grad=True)
    tx = torch.tensor(x, requires_grad=True)
    fy, ty = f_fn(fx), t_fn(tx)
    fy.backward()
    ty.backward()
    np.testing.assert_allclose(fy.item(), ty.item(), rtol=1e-10)
    np.testing.assert_allclose(fx.grad.numpy(), tx.grad.numpy(), rtol=1e-8, atol=1e-10)
