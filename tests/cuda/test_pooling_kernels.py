"""The GPU max-pooling kernels (``ferro.cuda.pooling``, ``kernels/pooling.cu``) against the CPU
kernels of the same names (``ferro._C.pooling_kernels``, themselves checked against the generic
op by tests/ops/test_fused.py), on the CPU emulation of test_kernels.py everywhere and on a
device where there is one."""

import sys

import numpy as np
import pytest
from test_kernels import _FAKE_CUPY, _EmuKernel, _emulator, _symbol, host

import ferro
from ferro._C import pooling_kernels as cpu
from ferro.cuda import pooling as K
from ferro.errors import ArgumentError, DtypeError, ShapeError
from ferro.ops.pooling import _pool_geometry


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
