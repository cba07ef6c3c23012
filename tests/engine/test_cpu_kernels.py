"""The nogil kernels against their generic NumPy references (parity)."""

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
    IndexOutOfRangeError,
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
        (
            lambda: cpu_kernels.activation_backward("tanh", np.ones(10, _F), np.ones(2, _F)),
            ShapeError,
        ),
        (
            lambda: cpu_kernels.activation_backward("nope", np.ones(2, _F), np.ones(2, _F)),
            ArgumentError,
        ),
        (lambda: cpu_kernels.silu_backward(np.ones(3, _F), np.ones(3, _F), np.ones(3)), DtypeError),
        (lambda: cpu_kernels.softmax_backward(np.ones((2, 3)), np.ones((2, 3), _F)), DtypeError),
        (lambda: cpu_kernels.softmax_backward(np.ones((2, 3)), np.ones((3, 2))), ShapeError),
        (lambda: cpu_kernels.gelu_forward(np.ones((3, 2)).T), ArgumentError),
        (lambda: cpu_kernels.all_finite(np.ones(3, np.int64)), DtypeError),
        (lambda: cpu_kernels.all_finite(None), ArgumentTypeError),
        (lambda: cpu_kernels.sum_to_shape(None, ()), ArgumentTypeError),
        (
            lambda: cpu_kernels.cross_entropy_forward(
                np.ones((3, 4), _F), np.array([0, 1, 9]), None, -100, 0.0
            ),
            IndexOutOfRangeError,
        ),
        (
            lambda: cpu_kernels.cross_entropy_forward(
                np.ones((3, 4), _F), np.array([0, 1]), None, -100, 0.0
            ),
            ShapeError,
        ),
        (
            lambda: cpu_kernels.cross_entropy_forward(
                np.ones((3, 4), _F), np.array([0, 1, 2]), np.ones(3, _F), -100, 0.0
            ),
            ShapeError,
        ),
        (
            lambda: cpu_kernels.cross_entropy_forward(
                np.ones((3, 4), _F), np.array([0.0, 1.0, 2.0]), None, -100, 0.0
            ),
            DtypeError,
        ),
        (lambda: cpu_kernels.cross_entropy_forward(None, None, None, -100, 0.0), ArgumentTypeError),
        (
            # Used to read through None's pointers and crash the interpreter.
            lambda: cpu_kernels.cross_entropy_backward(
                np.ones((2, 3)), np.zeros(2, np.int64), None, -100, 0.0, None, None, None
            ),
            ArgumentTypeError,
        ),
        (
            # A strided lse used to be read as if contiguous (wrong values, reads past its end).
            lambda: cpu_kernels.cross_entropy_backward(
                np.ones((2, 3)),
                np.zeros(2, np.int64),
                None,
                -100,
                0.0,
                np.zeros((2, 5))[:, 0],
                np.zeros((2, 5))[:, 0],
                np.ones(1),
            ),
            ArgumentError,
        ),
        (
            lambda: cpu_kernels.cross_entropy_backward(
                np.ones((2, 3)),
                np.zeros(2, np.int64),
                None,
                -100,
                0.0,
                np.zeros(2, _F),
                np.zeros(2, _F),
                np.ones(1),
            ),
            DtypeError,
        ),
        (
            lambda: cpu_kernels.cross_entropy_backward(
                np.ones((2, 3)),
                np.zeros(2, np.int64),
                None,
                -100,
                0.0,
                np.zeros(2),
                np.zeros(2),
                np.ones(3),
            ),
            ShapeError,
        ),
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
