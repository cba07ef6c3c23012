"""The nogil kernels against their generic NumPy references (parity)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes

from ferro._C import cpu_kernels
from ferro._C.engine import sum_to_shape, sum_to_shape_generic
from ferro.errors import (
    ArgumentError,
    ArgumentTypeError,
    DtypeError,
    ShapeError,
)


@settings(max_examples=200, deadline=None)
@given(
    big=array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4),
    data=st.data(),
    dtype=st.sampled_from([np.float32, np.float64]),
    transpose=st.booleans(),
)
def test_sum_to_shape_matches_generic(big, data, dtype, transpose):
    # A target that broadcasts to `big`: drop some leading dims, set some others to 1.
    lead = data.draw(st.integers(0, len(big)))
    small = tuple(1 if data.draw(st.booleans()) else s for s in big[lead:])
    rng = np.random.default_rng(0)
    src = rng.normal(size=big[::-1] if transpose else big).astype(dtype)
    if transpose:
        src = src.T  # a non-contiguous view of shape `big`
    got = cpu_kernels.sum_to_shape(src, small)
    want = sum_to_shape_generic(src, small)
    assert got.shape == small and got.dtype == src.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-5)


@pytest.mark.parametrize("n", [3, 65536 * 2 + 5, 1 << 20])
@pytest.mark.parametrize("target", [(), (1,), (1, 1)])
def test_sum_to_one_value_is_sum_alls_blocked_pairwise_sum(n, target):
    # a gradient reduced to one value (a 0-d parameter times a large tensor): sum_all's blocks
    # and bits at any size, not a chain of n dependent float32 adds (which also rounds worse)
    rng = np.random.default_rng(n)
    src = rng.normal(size=(n,) if len(target) < 2 else (n, 1)).astype(np.float32)
    got = cpu_kernels.sum_to_shape(src, target)
    exact = np.sum(src, dtype=np.float64)
    assert got.shape == target
    assert abs(float(got.ravel()[0]) - exact) <= 2 * np.spacing(np.float32(abs(exact)))
    if n >= cpu_kernels.TWO_CORE_MIN:
        assert got.ravel()[0] == cpu_kernels.sum_all(src.ravel())


def test_sum_to_shape_same_shape_is_identity():
    a = np.ones((2, 3))
    assert sum_to_shape(a, (2, 3)) is a


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 7, 1000, 300_000])
def test_add_inplace_matches_numpy(dtype, n):
    rng = np.random.default_rng(n)
    dst = rng.normal(size=n).astype(dtype)
    src = rng.normal(size=n).astype(dtype)
    want = dst + src
    cpu_kernels.add_inplace(dst, src)
    np.testing.assert_array_equal(dst, want)


def test_add_inplace_with_noncontiguous_source():
    dst = np.zeros((3, 4))
    src = np.arange(12.0).reshape(4, 3).T
    cpu_kernels.add_inplace(dst, src)
    np.testing.assert_array_equal(dst, src)


def test_add_inplace_refuses_mismatch():
    with pytest.raises(ShapeError):
        cpu_kernels.add_inplace(np.zeros(3), np.zeros(4))
    with pytest.raises(ShapeError):  # same size, other shape: the loop would mix up elements
        cpu_kernels.add_inplace(np.zeros((2, 3)), np.zeros((3, 2)))
    with pytest.raises(DtypeError):
        cpu_kernels.add_inplace(np.zeros(3), np.zeros(3, np.float32))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 100, 300_000])
@pytest.mark.parametrize("bad", [None, np.nan, np.inf, -np.inf])
def test_all_finite_matches_numpy(dtype, n, bad):
    a = np.random.default_rng(0).normal(size=n).astype(dtype)
    if bad is not None:
        a[n // 2] = bad
    assert cpu_kernels.all_finite(a) == bool(np.isfinite(a).all())
    big = np.full(n, np.finfo(dtype).max, dtype)  # huge but finite: no false alarm
    assert cpu_kernels.all_finite(big)


_F = np.float32


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda: cpu_kernels.tanh_bwd(np.ones(10, _F), np.ones(2, _F)), ShapeError),
        (lambda: cpu_kernels.silu_bwd(np.ones(3, _F), np.ones(3, _F), np.ones(3)), DtypeError),
        (lambda: cpu_kernels.softmax_bwd(np.ones((2, 3)), np.ones((2, 3), _F)), DtypeError),
        (lambda: cpu_kernels.softmax_bwd(np.ones((2, 3)), np.ones((3, 2))), ShapeError),
        (lambda: cpu_kernels.gelu_fwd(np.ones((3, 2)).T), ArgumentError),
        (lambda: cpu_kernels.gelu_fwd(np.ones(3), "exact"), ArgumentError),
        (lambda: cpu_kernels.gelu_bwd(np.ones(3), np.ones(3), None), ArgumentError),
        (lambda: cpu_kernels.all_finite(np.ones(3, np.int64)), DtypeError),
        (lambda: cpu_kernels.all_finite(None), ArgumentTypeError),
        (lambda: cpu_kernels.sum_to_shape(None, ()), ArgumentTypeError),
        (
            lambda: cpu_kernels.sgd_update(
                np.ones(5, _F), np.ones(4, _F), np.ones(5, _F), 0.1, 0.9, 0.0, 0.0, False, True
            ),
            ShapeError,
        ),
        (
            lambda: cpu_kernels.adam_update(
                *(np.ones(5, _F), np.ones(5, _F), np.ones(5, _F), np.ones(5)),
                *(0.1, 0.9, 0.99, 1e-8, 0.0, False, 0.1, 0.01),
            ),
            DtypeError,
        ),
        (
            lambda: cpu_kernels.adagrad_update(
                np.ones(5, _F), np.ones(5, _F), np.ones(6, _F), 0.1, 1e-10, 0.0
            ),
            ShapeError,
        ),
        (lambda: cpu_kernels.sum_to_shape(np.ones((2, 3)), (4,)), ShapeError),
        (lambda: cpu_kernels.sum_to_shape(np.ones((2, 3)), (-1,)), ShapeError),
        (lambda: cpu_kernels.sum_to_shape(np.ones((2, 3)), (3.0,)), ArgumentTypeError),
        (lambda: cpu_kernels.sum_to_shape(np.ones(3), (1, 3)), ShapeError),
        (lambda: cpu_kernels.sum_to_shape(np.ones(3, np.int64), (1,)), DtypeError),
    ],
)
def test_kernels_refuse_bad_arguments_with_a_typed_error(call, error):
    # Importable kernels must raise the error that says what is wrong, never crash the
    # interpreter or read or write out of bounds.
    with pytest.raises(error):
        call()


def _erf(v):
    return np.vectorize(math.erf, otypes=[float])(v)


# kernel: (saved arrays from x, extra args, reference gx from g and x)
def _sig(x):
    return 1 / (1 + np.exp(-x))


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def _gelu_tanh_grad(x):
    t = np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))
    dinner = math.sqrt(2 / math.pi) * (1 + 3 * 0.044715 * x * x)
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * dinner


BACKWARD = {
    "tanh_bwd": (lambda x: (np.tanh(x),), (), lambda g, x: g * (1 - np.tanh(x) ** 2)),
    "sigmoid_bwd": (lambda x: (_sig(x),), (), lambda g, x: g * _sig(x) * (1 - _sig(x))),
    "relu_bwd": (lambda x: (np.maximum(x, 0),), (), lambda g, x: np.where(x > 0, g, 0 * g)),
    "leaky_relu_bwd": (lambda x: (x,), (0.1,), lambda g, x: np.where(x > 0, g, 0.1 * g)),
    "gelu_bwd": (
        lambda x: (x,),
        (),
        lambda g, x: (
            g
            * (0.5 * (1 + _erf(x / math.sqrt(2))) + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi))
        ),
    ),
    # gelu_bwd with approximate="tanh": the kernel name, then what the case passes.
    "gelu_bwd/tanh": (lambda x: (x,), ("tanh",), lambda g, x: g * _gelu_tanh_grad(x)),
    "silu_bwd": (
        lambda x: (x, _sig(x)),
        (),
        lambda g, x: g * _sig(x) * (1 + x * (1 - _sig(x))),
    ),
}


@pytest.mark.parametrize("name", sorted(BACKWARD))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [0, 1, 7, (1 << 20) + 3])  # the last runs the parallel loops
@pytest.mark.parametrize("gy_kind", ["contiguous", "broadcast scalar"])
def test_backward_kernels_match_their_formula(name, dtype, n, gy_kind):
    rng = np.random.default_rng(n)
    x = rng.normal(0, 2, n).astype(dtype)
    if gy_kind == "contiguous":
        g = rng.normal(size=n).astype(dtype)
    else:
        g = np.broadcast_to(np.asarray(-1.5, dtype), (n,))  # what .sum() hands back
    make, extra, ref = BACKWARD[name]
    saved = tuple(a.astype(dtype) for a in make(x.astype(np.float64)))
    assert cpu_kernels.accepts_grad(g, saved)
    got = getattr(cpu_kernels, name.split("/")[0])(g, *saved, *extra)
    want = ref(g.astype(np.float64), x.astype(np.float64))
    assert got.dtype == dtype and got.shape == (n,) and got.flags.c_contiguous
    tol = dict(rtol=2e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(got, want, **tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(5,), (3, 7), (2, 4, 6)])
def test_softmax_bwd_with_contiguous_and_broadcast_gradients(dtype, shape):
    rng = np.random.default_rng(1)
    z = rng.normal(size=shape)
    y = np.exp(z - z.max(-1, keepdims=True))
    y /= y.sum(-1, keepdims=True)
    for g in (rng.normal(size=shape), np.broadcast_to(np.asarray(0.5), shape)):
        got = cpu_kernels.softmax_bwd(g.astype(dtype), y.astype(dtype))
        want = y * (g - (g * y).sum(-1, keepdims=True))
        tol = 1e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("n", [1001, (1 << 16) + 3])  # the last runs the parallel loops
def test_gelu_fwd_matches_its_formula(n):
    x = np.linspace(-6, 6, n)
    for approximate, want in (("none", 0.5 * x * (1 + _erf(x / math.sqrt(2)))),
                              ("tanh", _gelu_tanh(x))):  # fmt: skip
        got = cpu_kernels.gelu_fwd(x, approximate)
        np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-15)
        got = cpu_kernels.gelu_fwd(x.astype(np.float32), approximate)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert np.isnan(cpu_kernels.gelu_fwd(np.array([np.nan]), "tanh")[0])


def test_accepts_grad_takes_contiguous_or_one_broadcast_value_only():
    y = np.ones((3, 4))
    assert cpu_kernels.accepts_grad(np.ones((3, 4)), (y,))
    assert cpu_kernels.accepts_grad(np.broadcast_to(np.asarray(2.0), (3, 4)), (y,))
    assert cpu_kernels.accepts_grad(np.broadcast_to(np.ones((1, 1)), (3, 4)), (y,))
    # A row broadcast down the columns is not one value: the kernel cannot read it.
    assert not cpu_kernels.accepts_grad(np.broadcast_to(np.arange(4.0), (3, 4)), (y,))
    assert not cpu_kernels.accepts_grad(np.ones((4, 3)).T, (y,))
    assert not cpu_kernels.accepts_grad(np.ones((3, 4), np.float32), (y,))
    assert not cpu_kernels.accepts_grad(np.ones((3, 4)).astype(">f8"), (y,))
    assert not cpu_kernels.accepts_grad(np.ones((4, 3)), (y,))
    assert not cpu_kernels.accepts_grad(np.ones((3, 4)), (np.ones((4, 3)).T,))
    assert not cpu_kernels.accepts_grad([[1.0] * 4] * 3, (y,))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("per_row", [False, True])
def test_cross_entropy_kernels_match_the_generic_op(dtype, per_row):
    import ferro
    from ferro._C.engine import set_overrides_enabled

    rng = np.random.default_rng(0)
    x = (rng.normal(size=(7, 37)) * 3).astype(dtype)  # 37: the 8-lane sums and a remainder
    t = rng.integers(0, 37, 7)
    t[3] = -100
    loss, lse = cpu_kernels.cross_entropy_fwd(x, t)
    prev = set_overrides_enabled(False)
    try:
        xt = ferro.tensor(x, requires_grad=True)
        ref = ferro.cross_entropy(xt, ferro.tensor(t), reduction="none")
        gy = (rng.normal(size=7) if per_row else np.array(0.5)).astype(dtype)
        ref.backward(ferro.tensor(gy * np.ones(7, dtype)))
    finally:
        set_overrides_enabled(prev)
    tol = dict(rtol=2e-6, atol=2e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(loss, ref.detach().numpy(), **tol)
    assert loss.dtype == lse.dtype == dtype and loss[3] == 0
    grad = cpu_kernels.cross_entropy_bwd(x, t, lse, gy, np.array([2.0]))
    assert grad.dtype == dtype and not grad[3].any()
    np.testing.assert_allclose(grad * 2, xt.grad.numpy(), **tol)


def test_cross_entropy_kernels_nan_for_a_target_out_of_range_and_checks():
    x = np.zeros((2, 4), np.float32)
    loss, lse = cpu_kernels.cross_entropy_fwd(x, np.array([1, 7]))
    assert np.isfinite(loss[0]) and np.isnan(loss[1])
    grad = cpu_kernels.cross_entropy_bwd(x, np.array([1, 7]), lse, np.ones(()), np.ones(1))
    assert np.isfinite(grad[0]).all() and np.isnan(grad[1]).all()
    with pytest.raises(ArgumentError):  # the kernels index rows of C-contiguous logits
        cpu_kernels.cross_entropy_fwd(np.zeros((4, 2), np.float32).T, np.array([1, 1]))
    with pytest.raises(ShapeError):
        cpu_kernels.cross_entropy_fwd(x, np.array([1, 1, 1]))
    with pytest.raises(ShapeError):
        cpu_kernels.cross_entropy_bwd(x, np.array([1, 1]), lse, np.ones(3, np.float32), 1.0)
    with pytest.raises(ShapeError):
        cpu_kernels.cross_entropy_bwd(x, np.array([1, 1]), lse[:1], np.ones(()), 1.0)
