"""The convolution family's CUDA kernels (``ferro.cuda.conv``: depthwise convolution, im2col and
col2im) against the generic NumPy code, run like tests/cuda/test_kernels.py: on a device (marked
gpu) and everywhere on the CPU emulation of the CUDA features the kernels use (the real sources
compiled with g++, launched with the real grids and blocks)."""

import sys
import types

import numpy as np
import pytest
import test_kernels as T

import ferro
from ferro.cuda import conv as K
from ferro.errors import ArgumentError, DtypeError, ShapeError
from ferro.ops import conv as conv_ops

_FAKE_CUPY = types.SimpleNamespace(
    asarray=np.asarray,
    empty=np.empty,
    empty_like=np.empty_like,
    zeros_like=np.zeros_like,
)


@pytest.fixture(params=["emu", pytest.param("cuda", marks=pytest.mark.gpu)])
def xp(request, monkeypatch):
    if request.param == "cuda":
        cp = pytest.importorskip("cupy")
        if not ferro.cuda.is_available():
            pytest.skip("no CUDA device")
        return cp
    lib = T._emulator()
    if lib is None:
        pytest.skip("no g++ for the CPU emulation of the kernels")
    monkeypatch.setitem(sys.modules, "cupy", _FAKE_CUPY)
    monkeypatch.setattr(K, "kernel", lambda name, expr: T._EmuKernel(getattr(lib, T._symbol(expr))))
    return np


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "n, mult, stride, pad, dilation",
    [(2, 1, (1, 1), 1, (1, 1)), (1, 2, (2, 1), 2, (1, 2)), (3, 3, (2, 3), 0, (2, 1))],
)
def test_depthwise_kernels_match_the_generic_code(xp, dtype, n, mult, stride, pad, dilation):
    rng = np.random.default_rng(mult)
    x = rng.normal(size=(n, 3, 9, 8)).astype(dtype)
    w = rng.normal(size=(3 * mult, 1, 3, 2)).astype(dtype)
    pads = ((pad, pad), (pad, pad))
    out = tuple(
        (x.shape[2 + i] + 2 * pad - dilation[i] * (w.shape[2 + i] - 1) - 1) // stride[i] + 1
        for i in range(2)
    )
    geom = (stride, pads, dilation, 3)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    y = K.depthwise2d_fwd(xp.asarray(x), xp.asarray(w), stride, pads, dilation, out)
    assert y.dtype == dtype
    np.testing.assert_allclose(T.host(y), conv_ops._conv_forward(np, x, w, *geom, out), **tol)
    gy = rng.normal(size=y.shape).astype(dtype)
    gx, gw = K.depthwise2d_bwd(
        xp.asarray(gy), xp.asarray(x), xp.asarray(w), stride, pads, dilation, True, True
    )
    want_gx = conv_ops._conv_input_grad(np, gy, w, *geom, (9, 8))
    want_gw = conv_ops._conv_weight_grad(np, x, gy, *geom, (3, 2))
    np.testing.assert_allclose(T.host(gx), want_gx, **tol)
    np.testing.assert_allclose(T.host(gw), want_gw, **tol)


def test_depthwise_kernels_refuse_what_they_cannot_read(xp):
    x, w = xp.asarray(np.ones((1, 2, 5, 5))), xp.asarray(np.ones((2, 1, 3, 3)))
    args = ((1, 1), ((0, 0), (0, 0)), (1, 1), (3, 3))
    assert K.accepts((x, w)) and not K.accepts((x.transpose(0, 1, 3, 2), w))
    with pytest.raises(ArgumentError, match="C-contiguous"):
        K.depthwise2d_fwd(x.transpose(0, 1, 3, 2), w, *args)
    with pytest.raises(ShapeError, match="depthwise"):
        K.depthwise2d_fwd(x, xp.asarray(np.ones((2, 2, 3, 3))), *args)
    with pytest.raises(ArgumentError, match="geometry"):
        K.depthwise2d_fwd(x, w, (1, 1), ((0, 0), (0, 0)), (1, 1), (4, 3))


@pytest.mark.parametrize("bias", [True, False])
def test_conv_gpu_override_matches_the_generic_op(xp, bias):
    """The conv entry of the override table bound to ferro.cuda.conv: the depthwise kernels
    replace the generic forward and backward and leave the state the generic backward reads."""
    from ferro.ops.registry import REGISTRY

    op = REGISTRY["conv"]
    rng = np.random.default_rng(11)
    x = xp.asarray(rng.normal(size=(2, 4, 7, 6)))
    w = xp.asarray(rng.normal(size=(8, 1, 3, 3)))
    b = xp.asarray(rng.normal(size=8)) if bias else None
    params = {
        "stride": (2, 1),
        "pads": ((1, 1), (1, 1)),
        "dilation": (1, 2),
        "groups": 4,
        "size": (4, 4),
    }
    mine, ref = T._Ctx(xp), T._Ctx(xp)
    mine.needs_input_grad = ref.needs_input_grad = (True, True, bias)
    got = op.gpu_forward(mine, x, w, b, **params)
    want = op.forward(ref, x, w, b, **params)
    np.testing.assert_allclose(T.host(got), T.host(want), rtol=1e-12, atol=1e-12)
    assert vars(mine).keys() == vars(ref).keys()
    gy = xp.asarray(rng.normal(size=got.shape))
    for g, r in zip(op.gpu_backward(mine, gy), op.backward(ref, gy), strict=True):
        assert (g is None) == (r is None)
        if r is not None:
            np.testing.assert_allclose(T.host(g), T.host(r), rtol=1e-10, atol=1e-12)
    # A grouped (not depthwise) convolution takes the column kernels' GEMM path: that the
    # override ran shows in ctx.depthwise2d (False), which its backward reads.
    w2 = xp.asarray(rng.normal(size=(4, 2, 3, 3)))
    ctx = T._Ctx(xp)
    ctx.needs_input_grad = (True, True, False)
    assert op.gpu_forward(ctx, x, w2, None, **{**params, "groups": 2}) is not NotImplemented
    assert ctx.depthwise2d is False
    # The CPU's nogil column loops have the same signatures: it takes the GEMM path too.
    if xp is np:
        cpu = T._Ctx(np)
        cpu.needs_input_grad = (True, True, False)
        assert op.cpu_forward(cpu, x, w2, None, **{**params, "groups": 2}) is not NotImplemented
        assert cpu.depthwise2d is False


# --- im2col / col2im ---------------------------------------------------------------------------

COLUMN_CASES = [  # input shape, kernel, stride, (lo, hi) pads, dilation
    ((2, 3, 11), (3,), (2,), ((1, 1),), (2,)),
    ((1, 2, 7, 6), (3, 2), (1, 2), ((1, 1), (0, 0)), (1, 1)),
    ((3, 1, 5, 8), (2, 3), (2, 1), ((1, 2), (2, 1)), (2, 1)),  # asymmetric ('same') padding
    ((1, 2, 4, 5, 3), (2, 3, 1), (1, 2, 1), ((1, 1), (1, 1), (0, 0)), (2, 1, 1)),
]


def _out(shape, kernel, stride, pads, dilation):
    return tuple(
        (n + lo + hi - d * (k - 1) - 1) // s + 1
        for n, k, s, (lo, hi), d in zip(shape[2:], kernel, stride, pads, dilation, strict=True)
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("batch_major", [False, True])
@pytest.mark.parametrize("case", COLUMN_CASES, ids=lambda c: "x".join(map(str, c[0])))
def test_im2col_and_col2im_match_the_strided_views(xp, dtype, batch_major, case):
    shape, kernel, stride, pads, dilation = case
    out = _out(shape, kernel, stride, pads, dilation)
    rng = np.random.default_rng(len(shape))
    x = rng.normal(size=shape).astype(dtype)
    nd = len(kernel)
    want = conv_ops._im2col(np, x, kernel, stride, pads, dilation, out)  # (n, C, *k, *out)
    if not batch_major:  # (C, *k, n, *out)
        want = np.moveaxis(want, 0, 1 + nd)
    got = K.unfold_cols(xp.asarray(x), kernel, stride, pads, dilation, out, None, batch_major)
    assert got.dtype == dtype
    np.testing.assert_array_equal(T.host(got).reshape(want.shape), want)
    g = rng.normal(size=want.shape).astype(dtype)
    col = g if batch_major else np.moveaxis(g, 1 + nd, 0)  # back to (n, C, *k, *out)
    want_x = conv_ops._col2im(np, col, shape[2:], stride, pads, dilation)
    dst = xp.asarray(np.full(shape, np.nan, dtype))  # every element is written
    got_x = K.fold_cols(
        xp.asarray(g.reshape(got.shape)), dst, kernel, stride, pads, dilation, out, batch_major
    )
    tol = 1e-6 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(T.host(got_x), want_x, rtol=tol, atol=tol)
    if not batch_major:  # the CPU backend's signatures, which the conv GEMM path calls
        from ferro._C import conv_kernels as cpu

        col = xp.asarray(np.full(want.shape, np.nan, dtype))
        assert K.im2col(xp.asarray(x), stride, pads, dilation, col) is col
        np.testing.assert_array_equal(T.host(col), want)
        np.testing.assert_array_equal(
            cpu.im2col(x, stride, pads, dilation, np.empty(want.shape, dtype)), want
        )
        dst = xp.asarray(np.full(shape, np.nan, dtype))
        K.col2im(xp.asarray(g), stride, pads, dilation, dst)
        np.testing.assert_allclose(T.host(dst), want_x, rtol=tol, atol=tol)


def test_column_kernels_refuse_what_they_cannot_read(xp):
    x = xp.asarray(np.ones((2, 3, 6, 6)))
    args = ((3, 3), (1, 1), ((0, 0), (0, 0)), (1, 1), (4, 4))
    with pytest.raises(ArgumentError, match="C-contiguous"):
        K.unfold_cols(x.transpose(0, 1, 3, 2), *args)
    with pytest.raises(DtypeError):
        K.unfold_cols(xp.asarray(np.ones((2, 3, 6, 6), np.int64)), *args)
    with pytest.raises(ShapeError):
        K.unfold_cols(x[0], *args)
    with pytest.raises(ArgumentError, match="stride"):
        K.unfold_cols(x, (3, 3), (0, 1), ((0, 0), (0, 0)), (1, 1), (4, 4))
    cols = K.unfold_cols(x, *args)
    with pytest.raises(ShapeError, match="cols"):
        K.fold_cols(cols[:-1], xp.empty_like(x), *args)
    with pytest.raises(ShapeError, match="cols"):
        K.unfold_cols(x, *args, cols[:-1])
    with pytest.raises(DtypeError):
        K.fold_cols(cols, xp.asarray(np.ones((2, 3, 6, 6), np.float32)), *args)
    with pytest.raises(ShapeError, match="do not fit"):
        K.im2col(x, (1, 1), ((0, 0), (0, 0)), (1, 1), xp.empty((3, 3, 3, 4, 4, 4)))
    if xp is np:
        ro = np.empty_like(x)
        ro.flags.writeable = False
        with pytest.raises(ArgumentError, match="read-only"):
            K.fold_cols(cols, ro, *args)


# op -> (inputs, params) run through its GPU override and its generic code.
def _gemm_cases(rng):
    a = rng.normal(size=(5, 4, 7, 6))
    return {
        "conv": (
            (a, rng.normal(size=(6, 2, 3, 2)), rng.normal(size=6)),
            {
                "stride": (2, 1),
                "pads": ((1, 2), (0, 1)),
                "dilation": (1, 2),
                "groups": 2,
                "size": (4, 4),
            },
        ),
        "conv_transpose": (
            (a, rng.normal(size=(4, 3, 3, 2)), None),
            {
                "stride": (2, 3),
                "pads": ((1, 1), (0, 0)),
                "dilation": (1, 2),
                "groups": 1,
                "size": (14, 18),
            },
        ),
        "unfold": (
            (a,),
            {
                "kernel": (2, 3),
                "stride": (2, 1),
                "pads": ((1, 1), (0, 0)),
                "dilation": (1, 2),
                "out": (4, 2),
            },
        ),
        "fold": (
            (rng.normal(size=(5, 4 * 6, 8)),),
            {
                "kernel": (2, 3),
                "stride": (2, 1),
                "pads": ((1, 1), (0, 0)),
                "dilation": (1, 2),
                "out": (4, 2),
                "size": (7, 6),
            },
        ),
    }


@pytest.mark.parametrize("name", ["conv", "conv_transpose", "unfold", "fold"])
def test_gemm_path_overrides_match_the_generic_op(xp, name, monkeypatch):
    """The column kernels in the GEMM path: the same chunks (a workspace small enough for
    several), the same ctx state, the same forward and gradients as the strided views."""
    from ferro.ops.registry import REGISTRY

    monkeypatch.setattr(conv_ops, "WORKSPACE_BYTES", 4000)
    op = REGISTRY[name]
    rng = np.random.default_rng(3)
    arrays, params = _gemm_cases(rng)[name]
    arrays = tuple(None if a is None else xp.asarray(a) for a in arrays)
    mine, ref = T._Ctx(xp), T._Ctx(xp)
    mine.needs_input_grad = ref.needs_input_grad = (True, True, arrays[-1] is not None)[
        : len(arrays)
    ]
    got = op.gpu_forward(mine, *arrays, **params)
    assert got is not NotImplemented
    want = op.forward(ref, *arrays, **params)
    np.testing.assert_allclose(T.host(got), T.host(want), rtol=1e-12, atol=1e-12)
    assert vars(mine).keys() == vars(ref).keys()
    gy = xp.asarray(rng.normal(size=got.shape))
    for g in (gy, xp.asarray(rng.normal(size=(*got.shape[:-1], 2 * got.shape[-1])))[..., ::2]):
        for a, b in zip(op.gpu_backward(mine, g), op.backward(ref, g), strict=True):
            assert (a is None) == (b is None)
            if b is not None:
                np.testing.assert_allclose(T.host(a), T.host(b), rtol=1e-10, atol=1e-12)
    # float32 inputs with a float64 weight are not the kernels': the generic op runs.
    if name in ("conv", "conv_transpose"):
        x32 = xp.asarray(T.host(arrays[0]).astype(np.float32))
        assert op.gpu_forward(T._Ctx(xp), x32, *arrays[1:], **params) is NotImplemented
