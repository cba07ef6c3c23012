"""The resampling family's CUDA kernels (``ferro/cuda/kernels/resampling.cu``), through their
wrappers in ``ferro.cuda.resampling``, against the CPU kernels of the same names (which
tests/nn/test_resampling.py checks against the generic NumPy path): on a device where there is
one, and everywhere on the CPU emulation of tests/cuda/test_kernels.py."""

import sys
import types

import numpy as np
import pytest
import test_kernels as emu

import ferro
from ferro._C import resampling_kernels as cpu
from ferro.cuda import resampling as K
from ferro.errors import DtypeError, ShapeError


@pytest.fixture(params=["emu", pytest.param("cuda", marks=pytest.mark.gpu)])
def xp(request, monkeypatch):
    if request.param == "cuda":
        cp = pytest.importorskip("cupy")
        if not ferro.cuda.is_available():
            pytest.skip("no CUDA device")
        return cp
    lib = emu._emulator()
    if lib is None:
        pytest.skip("no g++ for the CPU emulation of the kernels")
    fake = types.SimpleNamespace(**vars(emu._FAKE_CUPY), asarray=np.asarray)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(
        K, "kernel", lambda name, expr: emu._EmuKernel(getattr(lib, emu._symbol(expr)))
    )
    return np


# (x shape, kernel, stride, padding, dilation, offset groups): odd sizes, groups, strides.
CASES = [
    ((2, 4, 5, 6), (3, 2), (2, 1), (1, 0), (1, 2), 2),
    ((1, 3, 4, 4), (3, 3), (1, 1), (1, 1), (1, 1), 1),
    ((1, 2, 3, 5), (1, 1), (1, 2), (0, 0), (1, 1), 2),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("with_mask", [False, True])
@pytest.mark.parametrize("case", CASES)
def test_deform_kernels_match_the_cpu_kernels(xp, dtype, with_mask, case):
    shape, kernel, stride, padding, dilation, og = case
    rng = np.random.default_rng(0)
    nb, cin, h, w = shape
    kh, kw = kernel
    ho = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (w + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    x = rng.standard_normal(shape).astype(dtype)
    off = rng.uniform(-2.5, 2.5, (nb, 2 * og * kh * kw, ho, wo)).astype(dtype)
    mask = rng.uniform(0, 1, (nb, og * kh * kw, ho, wo)).astype(dtype) if with_mask else None
    params = (kernel, stride, padding, dilation)
    d = [None if a is None else xp.asarray(a) for a in (x, off, mask)]
    cols = emu.host(K.deform_im2col(*d, *params))
    want = cpu.deform_im2col(x, off, mask, *params)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(cols, want, atol=tol)
    gcols = rng.standard_normal(want.shape).astype(dtype)
    got = K.deform_col2im(*d, xp.asarray(gcols), *params)
    for g, ref in zip(got, cpu.deform_col2im(x, off, mask, gcols, *params), strict=True):
        assert (g is None) == (ref is None)
        if ref is not None:
            np.testing.assert_allclose(emu.host(g), ref, atol=10 * tol)
    some = K.deform_col2im(*d, xp.asarray(gcols), *params, False, True, False)
    assert some[0] is None and some[2] is None
    np.testing.assert_allclose(emu.host(some[1]), emu.host(got[1]), atol=10 * tol)


def test_deform_kernel_wrappers_refuse_bad_input(xp):
    x = xp.asarray(np.zeros((1, 2, 4, 4)))
    off = xp.asarray(np.zeros((1, 18, 4, 4)))
    params = ((3, 3), (1, 1), (1, 1), (1, 1))
    with pytest.raises(DtypeError, match="one dtype"):
        K.deform_im2col(x, off.astype(np.float32), None, *params)
    with pytest.raises(ShapeError, match="does not fit"):
        K.deform_im2col(x, xp.asarray(np.zeros((1, 17, 4, 4))), None, *params)
    with pytest.raises(ShapeError, match="mask must have shape"):
        K.deform_im2col(x, off, xp.asarray(np.zeros((1, 9, 4, 3))), *params)
    with pytest.raises(ShapeError, match="gcols must be"):
        K.deform_col2im(x, off, None, xp.asarray(np.zeros((1, 18, 15))), *params)
    assert K.accepts((x, off)) and not K.accepts((x, off.astype(np.float32)))


class _Ctx:
    """A stand-in for the node the engine passes as ctx."""

    def __init__(self, xp, n_inputs):
        self.xp = xp
        self.needs_input_grad = (True,) * n_inputs
        self.saved = ()

    def save(self, *arrays):
        self.saved = arrays


@pytest.mark.parametrize("with_mask", [False, True])
def test_gpu_override_of_deform_conv2d_matches_the_generic_op(xp, with_mask):
    from ferro.ops.registry import REGISTRY

    op = REGISTRY["deform_conv2d"]
    assert op.gpu_forward is not None and op.gpu_paired
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 4, 5, 5))
    off = rng.uniform(-1.5, 1.5, (2, 2 * 2 * 9, 3, 3))
    w = rng.standard_normal((6, 2, 3, 3))
    b = rng.standard_normal(6)
    rest = [b] + ([rng.uniform(0, 1, (2, 2 * 9, 3, 3))] if with_mask else [])
    params = {
        "geom": (2, 3, 3, 3, 3, (2, 2), (1, 1), (1, 1)),
        "groups": 2,
        "has_bias": True,
        "has_mask": with_mask,
    }
    arrays = [xp.asarray(a) for a in (x, off, w, *rest)]
    mine, ref = _Ctx(xp, len(arrays)), _Ctx(xp, len(arrays))
    got = op.gpu_forward(mine, *arrays, **params)
    want = op.forward(ref, *arrays, **params)
    np.testing.assert_allclose(emu.host(got), emu.host(want), atol=1e-12)
    for name, value in params.items():
        setattr(mine, name, value)
        setattr(ref, name, value)
    gy = xp.asarray(rng.standard_normal(tuple(want.shape)))[:, :, ::-1]  # made contiguous
    for g, r in zip(op.gpu_backward(mine, gy), op.backward(ref, gy), strict=True):
        np.testing.assert_allclose(emu.host(g), emu.host(r), atol=1e-11)
