"""The GPU normalization kernels (``ferro.cuda.norm``, ``kernels/norm.cu``) against the CPU
kernels of the same names (``ferro._C.norm_kernels``, themselves checked against the generic
ops by tests/ops/test_fused.py), on the CPU emulation of test_kernels.py everywhere and on a
device where there is one."""

import sys

import numpy as np
import pytest
from test_kernels import _FAKE_CUPY, _EmuKernel, _emulator, _symbol, host

import ferro
from ferro._C import norm_kernels as cpu
from ferro.cuda import norm as K


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
    monkeypatch.setitem(sys.modules, "cupy", _FAKE_CUPY)
    monkeypatch.setattr(K, "kernel", lambda name, expr: _EmuKernel(getattr(lib, _symbol(expr))))
    return np


def _same(got, want, dtype):
    tol = dict(rtol=2e-5, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-12)
    for g, w in zip(got, want, strict=True):
        assert (g is None) == (w is None)
        if w is not None:
            np.testing.assert_allclose(host(g), w, **tol)


def _arrays(rng, dtype, *shapes, offset=0.0):
    return [(rng.standard_normal(s) + offset).astype(dtype) for s in shapes]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows, cols", [(1, 1), (3, 5), (4, 300), (2, 1031), (200, 37)])
@pytest.mark.parametrize("affine", [True, False])
def test_layer_and_rms_norm_rows(xp, dtype, rows, cols, affine):
    rng = np.random.default_rng(cols)
    x, w, b, gy = _arrays(rng, dtype, (rows, cols), (cols,), (cols,), (rows, cols), offset=0)
    x += 50  # far from zero: the two passes keep the digits
    w, b = (w, b) if affine else (None, None)
    d = [None if a is None else xp.asarray(a) for a in (x, w, b, gy)]
    want = cpu.layer_norm_fwd(x, w, b, 1e-5)
    got = K.layer_norm_fwd(d[0], d[1], d[2], 1e-5)
    _same(got, want, dtype)
    _, mean, rstd, _ = want
    _same(
        K.layer_norm_bwd(d[3], d[0], d[1], xp.asarray(mean), xp.asarray(rstd), True),
        cpu.layer_norm_bwd(gy, x, w, mean, rstd, True),
        dtype,
    )
    want = cpu.rms_norm_fwd(x, w, 1e-3)
    _same(K.rms_norm_fwd(d[0], d[1], 1e-3), want, dtype)
    _same(
        K.rms_norm_bwd(d[3], d[0], d[1], xp.asarray(want[1]), affine),
        cpu.rms_norm_bwd(gy, x, w, want[1], affine),
        dtype,
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n, c, s, groups", [(2, 6, 5, 3), (3, 4, 1, 4), (1, 8, 40, 1)])
def test_group_norm(xp, dtype, n, c, s, groups):
    rng = np.random.default_rng(s)
    x, w, b, gy = _arrays(rng, dtype, (n, c, s), (c,), (c,), (n, c, s))
    d = [xp.asarray(a) for a in (x, w, b, gy)]
    want = cpu.group_norm_fwd(x, w, b, groups, 1e-5)
    _same(K.group_norm_fwd(d[0], d[1], d[2], groups, 1e-5), want, dtype)
    _, mean, rstd, _ = want
    _same(
        K.group_norm_bwd(d[3], d[0], d[1], xp.asarray(mean), xp.asarray(rstd), groups, True),
        cpu.group_norm_bwd(gy, x, w, mean, rstd, groups, True),
        dtype,
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n, c, s", [(4, 3, 1), (2, 5, 33), (3, 2, 150)])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm(xp, dtype, n, c, s, affine):
    rng = np.random.default_rng(n * s)
    x, w, b, gy = _arrays(rng, dtype, (n, c, s), (c,), (c,), (n, c, s))
    w, b = (w, b) if affine else (None, None)
    d = [None if a is None else xp.asarray(a) for a in (x, w, b, gy)]
    want = cpu.batch_norm_fwd(x, w, b, 1e-5)
    _same(K.batch_norm_fwd(d[0], d[1], d[2], 1e-5), want, dtype)
    _, mean, rstd, _ = want
    _same(
        K.batch_norm_bwd(d[3], d[0], d[1], xp.asarray(mean), xp.asarray(rstd)),
        cpu.batch_norm_bwd(gy, x, w, mean, rstd),
        dtype,
    )


def test_the_gpu_backend_offers_the_cpu_kernels_names():
    assert K.FUSED_KERNELS == cpu.FUSED_KERNELS
    assert not K.accepts((np.ones((2, 3)).T,))
    assert K.accepts((np.ones((2, 3)), None, np.ones(3)))
    assert not K.accepts((np.ones((2, 3)), np.ones(3, np.float32)))


class _Ctx:
    """A stand-in for the node the engine passes as ctx."""

    def __init__(self, xp, n_inputs):
        self.xp = xp
        self.needs_input_grad = (True,) * n_inputs
        self._saved = ()

    def save(self, *arrays):
        self._saved = arrays

    @property
    def saved(self):
        return self._saved


def _override_cases():
    rs = {"running_mean": None, "running_var": None, "momentum": 0.1}
    return {
        "layer_norm": ((6, 5, 8), (5, 8), True, {"normalized_shape": (5, 8), "eps": 1e-5}),
        "rms_norm": ((6, 8), (8,), False, {"normalized_shape": (8,), "eps": 1e-6}),
        "group_norm": ((4, 6, 3, 2), (6,), True, {"groups": 3, "eps": 1e-5, **rs}),
        "instance_norm": ((4, 6, 5), (6,), True, {"groups": 6, "eps": 1e-5, **rs}),
        "batch_norm": ((4, 6, 5), (6,), True, {"training": True, "eps": 1e-5, **rs}),
    }


@pytest.mark.parametrize("name", sorted(_override_cases()))
def test_gpu_overrides_match_the_generic_op(xp, name):
    """The adapters of ferro/ops/norm.py bound to ferro.cuda.norm (as ferro/__init__.py
    installs them) against the generic forward and backward, with the upstream gradient
    contiguous, strided and one broadcast value (made contiguous by the adapter)."""
    from ferro.ops.registry import REGISTRY

    op = REGISTRY[name]
    xshape, pshape, has_bias, params = _override_cases()[name]
    rng = np.random.default_rng(11)
    arrays = [xp.asarray(rng.normal(size=xshape) * 2 + 1), xp.asarray(rng.normal(size=pshape))]
    if has_bias:
        arrays.append(xp.asarray(rng.normal(size=pshape)))
    gys = {
        "contiguous": xp.asarray(rng.normal(size=xshape)),
        "strided": xp.asarray(rng.normal(size=(*xshape[:-1], 2 * xshape[-1])))[..., ::2],
        "broadcast scalar": xp.broadcast_to(xp.asarray(0.75), xshape),
    }
    mine, ref = _Ctx(xp, len(arrays)), _Ctx(xp, len(arrays))
    got = op.gpu_forward(mine, *arrays, **params)
    assert got is not NotImplemented
    np.testing.assert_allclose(host(got), host(op.forward(ref, *arrays, **params)), rtol=1e-12)
    for kind, gy in gys.items():
        for g, w in zip(op.gpu_backward(mine, gy), op.backward(ref, gy), strict=True):
            np.testing.assert_allclose(host(g), host(w), rtol=1e-10, atol=1e-12, err_msg=kind)
