"""The GPU pooling kernels (``ferro.cuda.pooling``, ``kernels/pooling.cu``), on the CPU emulation
of test_kernels.py everywhere and on a device where there is one: max pooling against the CPU
kernels of the same names (``ferro._C.pooling_kernels``, themselves checked against the generic
op by tests/ops/test_fused.py); average and adaptive pooling, and the GPU overrides of all
three, against the generic ops."""

import sys
import types

import numpy as np
import pytest
from test_kernels import _FAKE_CUPY, _Ctx, _EmuKernel, _emulator, _symbol, host

import ferro
from ferro._C import pooling_kernels as cpu
from ferro.cuda import pooling as K
from ferro.errors import ArgumentError, DtypeError, ShapeError
from ferro.ops import pooling as P
from ferro.ops.pooling import _pool_geometry
from ferro.ops.registry import REGISTRY


@pytest.fixture(params=["emu", pytest.param("cuda", marks=pytest.mark.gpu)])
def xp(request, monkeypatch):
    if request.param == "cuda":
        cp = pytest.importorskip("cupy")
        if not ferro.cuda.is_available():
            pytest.skip("no CUDA device")
        return cp
    lib = _emulator()
    if lib is None:
        pytest.skip("no g++ for the CPU emulation of the kernels")
    monkeypatch.setitem(
        sys.modules, "cupy", types.SimpleNamespace(**vars(_FAKE_CUPY), asarray=np.asarray)
    )
    monkeypatch.setattr(K, "kernel", lambda name, expr: _EmuKernel(getattr(lib, _symbol(expr))))
    return np


CASES = [  # input shape, kernel_size, stride, padding, dilation, ceil_mode
    ((2, 3, 9), 3, 2, 1, 1, True),
    ((1, 2, 7, 6), 2, None, 0, 1, False),
    ((2, 1, 7, 8), 3, 2, 1, 2, True),
    ((3, 5, 5), (3, 2), 1, (1, 0), 1, False),  # overlapping windows: an element chosen twice
    ((1, 2, 4, 5, 4), 2, (1, 2, 2), 1, 1, True),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[0])))
def test_max_pool_kernels_match_the_cpu_kernels(xp, dtype, case):
    shape, k, s, p, d, ceil = case
    rng = np.random.default_rng(len(shape))
    x = rng.standard_normal(shape).astype(dtype)
    x.reshape(-1)[::7] = x.reshape(-1)[0]  # ties: the first maximum wins on both
    nd = {3: 1, 4: 2, 5: 3}[len(shape)] if isinstance(k, int) else len(k)
    geometry = _pool_geometry(ferro.tensor(x), nd, "test", k, s, p, d, ceil)
    kernel_size, stride, padding, dilation, out = geometry
    want_y, want_i = cpu.max_pool_fwd(x, kernel_size, stride, padding, dilation, out)
    got_y, got_i = K.max_pool_fwd(xp.asarray(x), kernel_size, stride, padding, dilation, out)
    np.testing.assert_array_equal(host(got_y), want_y)
    np.testing.assert_array_equal(host(got_i), want_i)
    gy = rng.standard_normal(want_y.shape).astype(dtype)
    want = cpu.max_pool_bwd(gy, want_i, shape, kernel_size, stride, padding, dilation)
    got = K.max_pool_bwd(xp.asarray(gy), got_i, shape, kernel_size, stride, padding, dilation)
    tol = 1e-6 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(host(got), want, rtol=tol, atol=tol)


def test_max_pool_kernels_refuse_bad_arrays(xp):
    x = xp.asarray(np.zeros((2, 4, 4), np.float32))
    with pytest.raises(DtypeError):
        K.max_pool_fwd(xp.asarray(np.zeros((2, 4), np.int64)), (2,), (2,), (0,), (1,), (2,))
    with pytest.raises(ArgumentError, match="stride"):
        K.max_pool_fwd(x, (2,), (0,), (0,), (1,), (2,))
    with pytest.raises(ShapeError):
        K.max_pool_fwd(x[0, 0], (2, 2), (2, 2), (0, 0), (1, 1), (2, 2))
    gy = xp.asarray(np.ones((2, 4, 2), np.float32))
    idx = xp.asarray(np.zeros((2, 4, 2), np.int64))
    with pytest.raises(ShapeError):
        K.max_pool_bwd(gy, idx[:1], (2, 4, 4), (2,), (2,), (0,), (1,))
    with pytest.raises(DtypeError, match="int64"):
        K.max_pool_bwd(
            gy, xp.asarray(np.zeros((2, 4, 2), np.int32)), (2, 4, 4), (2,), (2,), (0,), (1,)
        )


# --- average pooling ---------------------------------------------------------------------------

AVG_CASES = [  # input shape, kernel_size, stride, padding, ceil_mode, count_include_pad, override
    ((2, 3, 9), 3, 2, 1, True, True, None),
    ((2, 3, 9), 3, 2, 1, True, False, None),  # the last window reaches past the padding
    ((1, 2, 7, 6), (3, 2), (2, 1), (1, 1), False, False, None),
    ((2, 1, 7, 8), 3, 2, 1, True, True, 5),
    ((3, 5, 5), (3, 2), 1, (1, 0), False, True, None),
    ((1, 2, 4, 5, 4), 2, (1, 2, 2), 1, True, False, None),
]


def _avg_params(x, case):
    shape, k, s, p, ceil, include, override = case
    nd = {3: 1, 4: 2, 5: 3}[len(shape)] if isinstance(k, int) else len(k)
    k, s, p, _, out = _pool_geometry(ferro.tensor(x), nd, "test", k, s, p, 1, ceil)
    div = P._avg_divisor(x.shape[-nd:], k, s, p, out, include, override)
    return dict(kernel_size=k, stride=s, padding=p, out_size=out, divisor=div)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", AVG_CASES, ids=lambda c: "x".join(map(str, c[0])) + str(c[4:]))
def test_avg_pool_kernels_match_the_generic_op(xp, dtype, case):
    rng = np.random.default_rng(len(case[0]))
    x = rng.standard_normal(case[0]).astype(dtype)
    params = _avg_params(x, case)
    ref = _Ctx(np)
    want = P.AvgPool.forward(ref, x, **params)
    got = K.avg_pool_fwd(xp.asarray(x), *params.values())
    tol = 1e-6 if dtype == np.float32 else 1e-13
    assert got.dtype == dtype
    np.testing.assert_allclose(host(got), want, rtol=tol, atol=tol)
    gy = rng.standard_normal(want.shape).astype(dtype)
    k, s, p, _, div = params.values()
    got = K.avg_pool_bwd(xp.asarray(gy), x.shape, k, s, p, div)
    np.testing.assert_allclose(host(got), P.AvgPool.backward(ref, gy), rtol=tol, atol=tol)


# --- adaptive pooling --------------------------------------------------------------------------

ADAPTIVE_CASES = [  # input shape, output size
    ((2, 3, 10), (4,)),  # uneven windows that overlap
    ((1, 2, 3), (5,)),  # more outputs than inputs
    ((2, 7, 6), (3, 2)),
    ((1, 2, 5, 7), (4, 3)),
    ((1, 2, 6, 6), (3, 3)),  # even windows (the generic reshape path)
    ((1, 1, 3, 5, 4), (2, 3, 3)),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", ADAPTIVE_CASES, ids=lambda c: "x".join(map(str, c[0])))
def test_adaptive_pool_kernels_match_the_generic_ops(xp, dtype, case):
    shape, out = case
    nd = len(out)
    rng = np.random.default_rng(len(shape))
    x = rng.standard_normal(shape).astype(dtype)
    x.reshape(-1)[::5] = x.reshape(-1)[0]  # ties: the first maximum wins on both
    tol = 1e-6 if dtype == np.float32 else 1e-13
    ref = _Ctx(np)
    want = P.AdaptiveAvgPool.forward(ref, x, out_size=out)
    got = K.adaptive_avg_pool_fwd(xp.asarray(x), out)
    np.testing.assert_allclose(host(got), want, rtol=tol, atol=tol)
    gy = rng.standard_normal(want.shape).astype(dtype)
    got = K.adaptive_avg_pool_bwd(xp.asarray(gy), shape, nd)
    want_gx = P.AdaptiveAvgPool.backward(ref, gy)
    np.testing.assert_allclose(host(got), want_gx, rtol=tol, atol=tol)
    ref = _Ctx(np)
    want_y, want_i = P.AdaptiveMaxPool.forward(ref, x, out_size=out)
    got_y, got_i = K.adaptive_max_pool_fwd(xp.asarray(x), out)
    np.testing.assert_array_equal(host(got_y), want_y)
    np.testing.assert_array_equal(host(got_i), want_i)
    got = K.adaptive_max_pool_bwd(xp.asarray(gy), got_i, shape, nd)
    want_gx = P.AdaptiveMaxPool.backward(ref, gy, None)
    np.testing.assert_allclose(host(got), want_gx, rtol=tol, atol=tol)


def test_adaptive_max_pool_kernel_lets_a_nan_win(xp):
    x = np.array([[[1.0, np.nan, 3.0, np.nan, 0.0]]])
    y, idx = K.adaptive_max_pool_fwd(xp.asarray(x), (2,))
    assert np.isnan(host(y)).all() and host(idx).tolist() == [[[1, 3]]]


def test_window_kernels_refuse_bad_arrays(xp):
    x = xp.asarray(np.zeros((2, 4, 4)))
    with pytest.raises(DtypeError):
        K.avg_pool_fwd(xp.asarray(np.zeros((2, 4), np.int64)), (2,), (2,), (0,), (2,), 2.0)
    with pytest.raises(ShapeError, match="divisor"):
        K.avg_pool_fwd(x, (2,), (2,), (0,), (2,), np.ones(3))
    with pytest.raises(ArgumentError, match="non-zero"):
        K.avg_pool_fwd(x, (2,), (2,), (0,), (2,), 0.0)
    with pytest.raises(ShapeError):
        K.avg_pool_bwd(x, (3, 4, 4), (2,), (2,), (0,), 2.0)
    with pytest.raises(ArgumentError, match="C-contiguous"):
        K.adaptive_avg_pool_fwd(x.transpose(0, 2, 1), (2,))
    with pytest.raises(ArgumentError, match="positive"):
        K.adaptive_max_pool_fwd(x, (0,))
    gy = xp.asarray(np.ones((2, 4, 2)))
    with pytest.raises(DtypeError, match="int64"):
        K.adaptive_max_pool_bwd(gy, xp.asarray(np.zeros((2, 4, 2), np.int32)), (2, 4, 4), 1)
    with pytest.raises(ShapeError, match="indices"):
        K.adaptive_max_pool_bwd(gy, xp.asarray(np.zeros((2, 4, 1), np.int64)), (2, 4, 4), 1)


# --- the GPU overrides -------------------------------------------------------------------------

OVERRIDE_CASES = {
    "avg_pool": _avg_params(np.zeros((2, 3, 9, 7)), ((2, 3, 9, 7), 3, 2, 1, True, False, None)),
    "adaptive_avg_pool": {"out_size": (4, 3)},
    "adaptive_max_pool": {"out_size": (4, 3)},
}


@pytest.mark.parametrize("name", sorted(OVERRIDE_CASES))
def test_pooling_gpu_overrides_match_the_generic_ops(xp, name):
    """Bound to ferro.cuda.pooling (GPU only: the CPU keeps the generic code): the same
    forward, ctx state (the double backward reads it) and gradients as the generic op, for a
    contiguous and a strided gy; integer input is not the kernels'."""
    op, params = REGISTRY[name], OVERRIDE_CASES[name]
    assert op.cpu_forward is None and op.gpu_paired
    rng = np.random.default_rng(2)
    x = xp.asarray(rng.standard_normal((2, 3, 9, 7)))
    mine, ref = _Ctx(xp), _Ctx(xp)
    got, want = op.gpu_forward(mine, x, **params), op.forward(ref, x, **params)
    for g, w in zip(
        *((r,) if name != "adaptive_max_pool" else r for r in (got, want)), strict=True
    ):
        np.testing.assert_allclose(host(g), host(w), rtol=1e-12, atol=1e-13)
    assert vars(mine).keys() == vars(ref).keys()
    y = got[0] if isinstance(got, tuple) else got
    for gy in (rng.standard_normal(y.shape), rng.standard_normal((*y.shape[:-1], 2 * y.shape[-1]))):
        gy = xp.asarray(gy)[..., : y.shape[-1]] if gy.shape != y.shape else xp.asarray(gy)
        extra = (None,) if name == "adaptive_max_pool" else ()
        g, w = op.gpu_backward(mine, gy, *extra), op.backward(ref, gy, *extra)
        np.testing.assert_allclose(host(g), host(w), rtol=1e-12, atol=1e-13)
    xi = xp.asarray(np.arange(2 * 3 * 9 * 7).reshape(2, 3, 9, 7))
    assert op.gpu_forward(_Ctx(xp), xi, **params) is NotImplemented
