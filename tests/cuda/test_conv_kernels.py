"""The depthwise convolution's CUDA kernels (``ferro.cuda.conv``) against the generic NumPy code,
run like tests/cuda/test_kernels.py: on a device (marked gpu) and everywhere on the CPU
emulation of the CUDA features the kernels use (the real sources compiled with g++, launched
with the real grids and blocks)."""

import sys
import types

import numpy as np
import pytest
import test_kernels as T

import ferro
from ferro.cuda import conv as K
from ferro.errors import ArgumentError, ShapeError
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
    # A grouped (not depthwise) convolution is not the kernels': the generic op runs.
    w2 = xp.asarray(rng.normal(size=(4, 2, 3, 3)))
    assert op.gpu_forward(T._Ctx(xp), x, w2, None, **{**params, "groups": 2}) is NotImplemented
