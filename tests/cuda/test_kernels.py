"""Each CUDA kernel, through its launch wrapper in ``ferro.cuda.ops``, against NumPy.

Every test runs twice:
- ``cuda``: on a device (marked gpu: skipped without one);
- ``emu``: everywhere, on a CPU emulation of the CUDA features the kernels use
  (``cuda_emu.h``): the real kernel sources are compiled with g++ and launched with the real
  grids and blocks, each block's threads as OS threads. CuPy is replaced by NumPy for the
  wrappers' allocations. It checks the kernels' logic (indexing, reductions, barriers, the
  split reduction, tails and misaligned views), not GPU-specific behaviour (memory model,
  speed, NVRTC's math library), which only the ``cuda`` runs and the NVRTC compile test cover.
"""

import ctypes
import functools
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import types

import numpy as np
import pytest

import ferro
from ferro.cuda import loader
from ferro.cuda import ops as K

HERE = os.path.dirname(os.path.abspath(__file__))


def _symbol(expr: str) -> str:
    return "emu_" + re.sub(r"\W", "_", expr)


@functools.cache
def _emulator():
    """The kernel sources compiled for the CPU emulation (None when there is no g++)."""
    gxx = shutil.which("g++")
    if gxx is None:
        return None
    with open(os.path.join(loader.KERNEL_DIR, "common.cuh")) as f:
        parts = [f'#include "{os.path.join(HERE, "cuda_emu.h")}"', f.read()]
    for name, exprs in loader.SOURCES.items():
        with open(os.path.join(loader.KERNEL_DIR, f"{name}.cu")) as f:
            parts.append(f.read())
        parts += [f"EMU_KERNEL({_symbol(e)}, {e})" for e in exprs]
    out = os.path.join(tempfile.mkdtemp(prefix="ferro_emu_"), "kernels.so")
    cmd = [gxx, "-std=c++17", "-O1", "-pthread", "-shared", "-fPIC", "-fno-strict-aliasing"]
    cmd += ["-w", "-x", "c++", "-", "-o", out]
    res = subprocess.run(cmd, input="\n".join(parts), capture_output=True, text=True)
    if res.returncode:
        pytest.fail(f"the kernels do not compile for the CPU emulation:\n{res.stderr[-4000:]}")
    return ctypes.CDLL(out)


_CTYPES = {
    np.dtype(np.int32): ctypes.c_int32,
    np.dtype(np.int64): ctypes.c_int64,
    np.dtype(np.uint32): ctypes.c_uint32,
    np.dtype(np.uint64): ctypes.c_uint64,
    np.dtype(np.float32): ctypes.c_float,
    np.dtype(np.float64): ctypes.c_double,
}


class _EmuKernel:
    """Called like a ``cupy.RawKernel``: (grid, block, args)."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, grid, block, args, shared_mem=0):
        (gx, gy), (bx, by) = [(tuple(d) + (1, 1))[:2] for d in (grid, block)]
        keep = []
        for a in args:
            if isinstance(a, np.ndarray):
                keep.append(ctypes.c_void_p(a.ctypes.data))
            else:
                keep.append(_CTYPES[a.dtype](a.item()))
        params = (ctypes.c_void_p * len(keep))(
            *[ctypes.cast(ctypes.pointer(k), ctypes.c_void_p) for k in keep]
        )
        assert self.fn(gx, gy, bx, by, params) == 0, "threads diverged around __syncthreads"


_FAKE_CUPY = types.SimpleNamespace(
    empty=np.empty,
    empty_like=np.empty_like,
    zeros=np.zeros,
    ascontiguousarray=np.ascontiguousarray,
    int64=np.int64,
)


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
    monkeypatch.setattr(K, "_sm_count_of", lambda arr: 4)  # small: splits show up sooner
    return np


def host(a):
    return a.get() if hasattr(a, "get") else np.asarray(a)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [0, 1, 3, 4097])
def test_accumulate_and_elementwise_cover_tails_and_misaligned_views(xp, dtype, n):
    """Vector loads for the aligned body, scalars for the tail and for offset views."""
    rng = np.random.default_rng(n)
    a = rng.normal(size=n + 1).astype(dtype)
    b = rng.normal(size=n + 1).astype(dtype)
    for lo in (0, 1):  # an offset of one element breaks 16-byte alignment
        da = xp.asarray(a.copy())[lo : lo + n]  # a copy: accumulate writes into it
        db = xp.asarray(b)[lo : lo + n]
        got = host(K.activation_backward("relu", db, da))
        np.testing.assert_array_equal(got, np.where(a[lo : lo + n] > 0, b[lo : lo + n], 0))
        K.accumulate(da, db)
        np.testing.assert_allclose(host(da), a[lo : lo + n] + b[lo : lo + n], rtol=1e-6)


@pytest.mark.parametrize("name", ["relu", "leaky_relu", "sigmoid", "tanh", "gelu", "silu"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_activation_backward(xp, name, dtype):
    rng = np.random.default_rng(0)
    x = rng.normal(size=999) * 3
    g = rng.normal(size=999)
    s = 1 / (1 + np.exp(-x))
    saved, want = {
        "relu": (np.maximum(x, 0), g * (x > 0)),
        "leaky_relu": (x, np.where(x > 0, g, 0.1 * g)),
        "sigmoid": (s, g * s * (1 - s)),
        "tanh": (np.tanh(x), g * (1 - np.tanh(x) ** 2)),
        "gelu": (
            x,
            g
            * (
                0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
                + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
            ),
        ),
        "silu": (x, g * s * (1 + x * (1 - s))),
    }[name]
    got = K.activation_backward(
        name, xp.asarray(g.astype(dtype)), xp.asarray(saved.astype(dtype)), slope=0.1
    )
    assert got.dtype == dtype
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(host(got), want, **tol)


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("cols", [1, 5, 33, 1000])
def test_softmax_forward_and_backward(xp, log, cols):
    rng = np.random.default_rng(cols)
    x = rng.normal(size=(7, cols)) * 5
    g = rng.normal(size=(7, cols))
    z = x - x.max(1, keepdims=True)
    lsm = z - np.log(np.exp(z).sum(1, keepdims=True))
    y = lsm if log else np.exp(lsm)
    np.testing.assert_allclose(host(K.softmax_forward(xp.asarray(x), log)), y, rtol=1e-12)
    want = (
        g - np.exp(y) * g.sum(1, keepdims=True) if log else y * (g - (g * y).sum(1, keepdims=True))
    )
    got = K.softmax_backward(xp.asarray(g), xp.asarray(y), log)
    np.testing.assert_allclose(host(got), want, rtol=1e-10, atol=1e-12)


def test_softmax_takes_masked_rows(xp):
    """-inf entries (masks) weigh nothing; a NaN poisons its row, as in NumPy."""
    x = np.array(
        [[0.0, -np.inf, 1.0, -np.inf], [-np.inf, 2.0, -np.inf, -np.inf], [0, np.nan, 0, 0]]
    )
    e = np.exp(x - np.nanmax(x, axis=1, keepdims=True))
    want = e / e.sum(axis=1, keepdims=True)
    got = host(K.softmax_forward(xp.asarray(x), False))
    np.testing.assert_allclose(got[:2], want[:2], rtol=1e-12)
    assert np.isnan(got[2]).all()


@pytest.mark.parametrize("per_row", [False, True])
def test_cross_entropy_kernels_match_the_cpu_op(xp, per_row):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(6, 1000)) * 3
    t = rng.integers(0, 1000, 6)
    t[3] = -100
    loss, lse = K.cross_entropy_forward(xp.asarray(x), xp.asarray(t))
    xt = ferro.tensor(x, requires_grad=True)
    ref = ferro.cross_entropy(xt, ferro.tensor(t), reduction="none")
    gy = rng.normal(size=6) if per_row else np.array(0.5)
    ref.backward(ferro.tensor(gy * np.ones(6)))
    np.testing.assert_allclose(host(loss), ref.detach().numpy(), rtol=1e-10, atol=1e-12)
    grad = K.cross_entropy_backward(
        xp.asarray(x), xp.asarray(t), lse, xp.asarray(gy), xp.asarray([2.0])
    )
    np.testing.assert_allclose(host(grad) * 2, xt.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_cross_entropy_kernels_give_nan_for_a_target_out_of_range(xp):
    x = xp.zeros((2, 4))
    loss, lse = K.cross_entropy_forward(x, xp.asarray([1, 7]))
    assert np.isfinite(host(loss)[0]) and np.isnan(host(loss)[1])
    grad = host(K.cross_entropy_backward(x, xp.asarray([1, 7]), lse, xp.ones(()), xp.ones(1)))
    assert np.isfinite(grad[0]).all() and np.isnan(grad[1]).all()


@pytest.mark.parametrize(
    "big, small",
    [
        ((50000,), ()),  # one output: the reduction is split across blocks
        ((300, 70), (70,)),  # bias over a batch
        ((9, 300), (9, 1)),  # summed inner dim (one block per output)
        ((2, 3, 4, 5, 6), (3, 1, 5, 1)),  # several summed dims
        ((4, 3, 5), (3, 1)),
        ((2, 1, 4), (2, 1, 4)),  # nothing summed
        ((0, 3), (3,)),  # empty: zeros
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sum_to_shape(xp, big, small, dtype):
    from ferro._C.engine import sum_to_shape_generic

    a = np.random.default_rng(0).normal(size=big).astype(dtype)
    want = sum_to_shape_generic(a.astype(np.float64), small)
    for _ in range(2):  # the tile counters reset themselves for the next call
        got = host(K.sum_to_shape(xp.asarray(a), small))
        assert got.dtype == dtype and got.shape == small
        np.testing.assert_allclose(
            got,
            want,
            rtol=1e-5 if dtype == np.float32 else 1e-12,
            atol=1e-4 if dtype == np.float32 else 1e-11,
        )


def test_sum_to_shape_split_is_deterministic(xp):
    a = xp.asarray(np.random.default_rng(1).normal(size=(20000,)).astype(np.float32))
    first = host(K.sum_to_shape(a, ()))
    assert all(host(K.sum_to_shape(a, ())) == first for _ in range(3))


def test_dropout_mask_replays_from_saved_state(xp):
    ferro.cuda.manual_seed_all(7)
    state = ferro.cuda.get_rng_state(0)
    m1 = host(K.dropout_mask((3001,), 0.3, np.float32))
    ferro.cuda.set_rng_state(state, 0)
    m2 = host(K.dropout_mask((3001,), 0.3, np.float32))
    assert np.array_equal(m1, m2) and 0.25 < (m1 == 0).mean() < 0.35
    assert np.allclose(m1[m1 != 0], 1 / 0.7)
    m3 = host(K.dropout_mask((3001,), 0.3, np.float32))  # the offset moved on
    assert not np.array_equal(m1, m3)


# ---------------------------------------------------------------------------------------------
# The GPU overrides (ferro/cuda/fused.py) against the generic forward/backward they replace, on
# the same two backends, with a stand-in for the node the engine passes as ctx.
# ---------------------------------------------------------------------------------------------


class _Ctx:
    def __init__(self, xp):
        self.xp = xp
        self._saved = ()

    def save(self, *arrays):
        self._saved = arrays

    @property
    def saved(self):
        return self._saved


def _ops():
    from ferro.ops import activation as act
    from ferro.ops import elementwise as ew

    return {
        "relu": (act.Relu, {}),
        "leaky_relu": (act.LeakyRelu, {"slope": 0.2}),
        "sigmoid": (ew.Sigmoid, {}),
        "tanh": (ew.Tanh, {}),
        "gelu": (act.Gelu, {"approximate": "none"}),
        "gelu_tanh": (act.Gelu, {"approximate": "tanh"}),  # no kernel: the generic backward
        "silu": (act.Silu, {}),
    }


@pytest.mark.parametrize("name", sorted(_ops()))
def test_activation_overrides_match_the_generic_backward(xp, name):
    op, params = _ops()[name]
    rng = np.random.default_rng(5)
    x = xp.asarray(rng.normal(size=(40, 30)) * 3)
    gy_wide = xp.asarray(rng.normal(size=(40, 60)))
    ctx = _Ctx(xp)
    op.forward(ctx, x, **params)
    for gy in (gy_wide[:, :30].copy(), gy_wide[:, ::2]):  # contiguous, then a strided view
        np.testing.assert_allclose(
            host(op.gpu_backward(ctx, gy)), host(op.backward(ctx, gy)), rtol=1e-12, atol=1e-13
        )


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_softmax_overrides_match_the_generic_op(xp, log, axis):
    from ferro.ops import activation as act

    op = act.LogSoftmax if log else act.Softmax
    rng = np.random.default_rng(6)
    x = xp.asarray(rng.normal(size=(9, 50)) * 4)
    gy = xp.asarray(rng.normal(size=(9, 50)))
    mine, ref = _Ctx(xp), _Ctx(xp)
    y = op.gpu_forward(mine, x, axis=axis)
    np.testing.assert_allclose(host(y), host(op.forward(ref, x, axis=axis)), rtol=1e-12)
    got = op.gpu_backward(mine, gy)
    np.testing.assert_allclose(host(got), host(op.backward(ref, gy)), rtol=1e-10, atol=1e-12)
    assert getattr(mine, "fused", True) == (axis != 0)  # axis 0 takes the generic path


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("extra", [{}, {"smoothing": 0.1}, {"weight": True}])
def test_cross_entropy_override_matches_the_generic_op(xp, reduction, extra):
    from ferro.ops import loss

    rng = np.random.default_rng(7)
    x = xp.asarray(rng.normal(size=(12, 40)) * 3)
    t = rng.integers(0, 40, 12)
    t[[2, 5]] = -1
    params = {
        "target": xp.asarray(t),
        "weight": xp.asarray(rng.uniform(0.5, 2, 40)) if extra.get("weight") else None,
        "ignore_index": -1,
        "smoothing": extra.get("smoothing", 0.0),
        "reduction": reduction,
    }
    gy = xp.asarray(rng.normal(size=12) if reduction == "none" else np.array(1.7))
    mine, ref = _Ctx(xp), _Ctx(xp)
    out = loss.CrossEntropy.gpu_forward(mine, x, **params)
    want = loss.CrossEntropy.forward(ref, x, **params)
    np.testing.assert_allclose(host(out), host(want), rtol=1e-12)
    got = loss.CrossEntropy.gpu_backward(mine, gy)
    np.testing.assert_allclose(
        host(got), host(loss.CrossEntropy.backward(ref, gy)), rtol=1e-10, atol=1e-13
    )
    assert mine.fused == (not extra)  # weights or smoothing: the generic path
