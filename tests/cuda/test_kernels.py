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
from ferro.errors import ArgumentError

HERE = os.path.dirname(os.path.abspath(__file__))


def _symbol(expr: str) -> str:
    return "emu_" + re.sub(r"\W", "_", expr)


@functools.cache
def _emulator():
    """The kernel sources compiled for the CPU emulation (None when there is no g++)."""
    gxx = shutil.which("g++")
    if gxx is None:
        return None
    parts = [f'#include "{os.path.join(HERE, "cuda_emu.h")}"']
    for header in loader.PRELUDE:  # the formulas shared with the CPU kernels, then common.cuh
        with open(os.path.join(loader.KERNEL_DIR, header)) as f:
            parts.append(f.read())
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
    ones=np.ones,
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
        got = host(K.relu_bwd(db, da))
        np.testing.assert_array_equal(got, np.where(a[lo : lo + n] > 0, b[lo : lo + n], 0))
        K.accumulate(da, db)
        np.testing.assert_allclose(host(da), a[lo : lo + n] + b[lo : lo + n], rtol=1e-6)


def _sig(x):
    return 1 / (1 + np.exp(-x))


def _erf(x):
    return np.vectorize(math.erf, otypes=[float])(x)


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def _gelu_tanh_grad(x):
    t = np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))
    dinner = math.sqrt(2 / math.pi) * (1 + 3 * 0.044715 * x * x)
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * dinner


# kernel (a "/variant" suffix is a second case of it): (saved arrays from x, extra arguments,
# reference gx from g and x); the CPU kernels of the same names
# (tests/engine/test_cpu_kernels.py) are checked against the same formulas.
BACKWARD = {
    "relu_bwd": (lambda x: (np.maximum(x, 0),), (), lambda g, x: g * (x > 0)),
    "leaky_relu_bwd": (lambda x: (x,), (0.1,), lambda g, x: np.where(x > 0, g, 0.1 * g)),
    "sigmoid_bwd": (lambda x: (_sig(x),), (), lambda g, x: g * _sig(x) * (1 - _sig(x))),
    "tanh_bwd": (lambda x: (np.tanh(x),), (), lambda g, x: g * (1 - np.tanh(x) ** 2)),
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
    "silu_bwd": (lambda x: (x, _sig(x)), (), lambda g, x: g * _sig(x) * (1 + x * (1 - _sig(x)))),
}


@pytest.mark.parametrize("name", sorted(BACKWARD))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("gy_kind", ["contiguous", "strided", "broadcast scalar"])
def test_backward_kernels(xp, name, dtype, gy_kind):
    rng = np.random.default_rng(0)
    x = rng.normal(size=999) * 3
    g = {
        "contiguous": rng.normal(size=999),
        "strided": rng.normal(size=1998)[::2],
        "broadcast scalar": np.broadcast_to(np.asarray(-1.25), (999,)),  # .sum()'s gradient
    }[gy_kind]
    make, extra, ref = BACKWARD[name]
    saved = tuple(xp.asarray(a.astype(dtype)) for a in make(x))
    gy = xp.asarray(g.astype(dtype)) if gy_kind != "broadcast scalar" else _broadcast(xp, g, dtype)
    assert K.accepts_grad(gy, saved)
    got = getattr(K, name.split("/")[0])(gy, *saved, *extra)
    assert got.dtype == dtype
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(host(got), ref(g, x), **tol)


def _broadcast(xp, g, dtype):
    """A stride-0 view of one value on ``xp``, as ``.sum()`` hands back."""
    return xp.broadcast_to(xp.asarray(g.flat[0], dtype=dtype), g.shape)


def test_gelu_fwd(xp):
    x = np.linspace(-6, 6, 1001)
    for dtype, tol in ((np.float32, 1e-6), (np.float64, 1e-14)):
        got = host(K.gelu_fwd(xp.asarray(x.astype(dtype))))
        np.testing.assert_allclose(got, 0.5 * x * (1 + _erf(x / math.sqrt(2))), rtol=tol, atol=tol)
        got = host(K.gelu_fwd(xp.asarray(x.astype(dtype)), "tanh"))
        np.testing.assert_allclose(got, _gelu_tanh(x), rtol=tol, atol=tol)
    with pytest.raises(ArgumentError, match="approximate must be 'none' or 'tanh'"):
        K.gelu_fwd(xp.asarray(x), "exact")


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("cols", [1, 5, 33, 1000])
def test_softmax_forward_and_backward(xp, log, cols):
    rng = np.random.default_rng(cols)
    x = rng.normal(size=(7, cols)) * 5
    z = x - x.max(1, keepdims=True)
    lsm = z - np.log(np.exp(z).sum(1, keepdims=True))
    y = lsm if log else np.exp(lsm)
    fwd, bwd = (K.log_softmax_fwd, K.log_softmax_bwd) if log else (K.softmax_fwd, K.softmax_bwd)
    np.testing.assert_allclose(host(fwd(xp.asarray(x))), y, rtol=1e-12)
    for g in (rng.normal(size=(7, cols)), np.broadcast_to(np.asarray(0.75), (7, cols))):
        want = (
            g - np.exp(y) * g.sum(1, keepdims=True)
            if log
            else y * (g - (g * y).sum(1, keepdims=True))
        )
        gy = xp.asarray(g) if g.strides[0] else _broadcast(xp, g, np.float64)
        got = bwd(gy, xp.asarray(y))
        np.testing.assert_allclose(host(got), want, rtol=1e-10, atol=1e-12)


def test_softmax_takes_masked_rows(xp):
    """-inf entries (masks) weigh nothing; a NaN poisons its row, as in NumPy."""
    x = np.array(
        [[0.0, -np.inf, 1.0, -np.inf], [-np.inf, 2.0, -np.inf, -np.inf], [0, np.nan, 0, 0]]
    )
    e = np.exp(x - np.nanmax(x, axis=1, keepdims=True))
    want = e / e.sum(axis=1, keepdims=True)
    got = host(K.softmax_fwd(xp.asarray(x)))
    np.testing.assert_allclose(got[:2], want[:2], rtol=1e-12)
    assert np.isnan(got[2]).all()


@pytest.mark.parametrize("per_row", [False, True])
def test_cross_entropy_kernels_match_the_cpu_op(xp, per_row):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(6, 1000)) * 3
    t = rng.integers(0, 1000, 6)
    t[3] = -100
    loss, lse = K.cross_entropy_fwd(xp.asarray(x), xp.asarray(t))
    xt = ferro.tensor(x, requires_grad=True)
    ref = ferro.cross_entropy(xt, ferro.tensor(t), reduction="none")
    gy = rng.normal(size=6) if per_row else np.array(0.5)
    ref.backward(ferro.tensor(gy * np.ones(6)))
    np.testing.assert_allclose(host(loss), ref.detach().numpy(), rtol=1e-10, atol=1e-12)
    grad = K.cross_entropy_bwd(xp.asarray(x), xp.asarray(t), lse, xp.asarray(gy), xp.asarray([2.0]))
    np.testing.assert_allclose(host(grad) * 2, xt.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_cross_entropy_kernels_give_nan_for_a_target_out_of_range(xp):
    x = xp.zeros((2, 4))
    loss, lse = K.cross_entropy_fwd(x, xp.asarray([1, 7]))
    assert np.isfinite(host(loss)[0]) and np.isnan(host(loss)[1])
    grad = host(K.cross_entropy_bwd(x, xp.asarray([1, 7]), lse, xp.ones(()), xp.ones(1)))
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
# The GPU overrides (ferro.ops.fused's table bound to ferro.cuda.ops) against the generic
# forward/backward they replace, on the same two backends, with a stand-in for the node the
# engine passes as ctx. The op list comes from the registry; GPU_CASES gives each op's
# parameters, and a guard fails when an op with a GPU override has no case.
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


# op -> list of (params, whether the kernels take them); inputs are (12, 40) logits or values.
GPU_CASES = {
    "relu": [({}, True)],
    "leaky_relu": [({"slope": 0.2}, True)],
    "sigmoid": [({}, True)],
    "tanh": [({}, True)],
    "gelu": [({"approximate": "none"}, True), ({"approximate": "tanh"}, True)],
    "silu": [({}, True)],
    "softmax": [({"axis": 1}, True), ({"axis": 0}, False)],
    "log_softmax": [({"axis": 1}, True), ({"axis": 0}, False)],
}


def _gpu_ops():
    from ferro.ops.registry import REGISTRY

    return sorted(n for n, op in REGISTRY.items() if op.gpu_forward or op.gpu_backward)


# Ops whose GPU overrides are checked in their family's test module
# (tests/cuda/test_<family>_kernels.py).
FAMILY_GPU_CASES = {
    "adaptive_avg_pool",
    "adaptive_max_pool",
    "avg_pool",
    "batch_norm",
    "conv",
    "conv_transpose",
    "fold",
    "unfold",
    "deform_conv2d",
    "grid_sample",
    "group_norm",
    "instance_norm",
    "interpolate",
    "layer_norm",
    "max_pool",
    "recurrent_layer",
    "rms_norm",
}


def test_every_gpu_override_has_a_case():
    # cross_entropy has its test below; the families' overrides have theirs in their own modules.
    assert set(_gpu_ops()) == set(GPU_CASES) | {"cross_entropy"} | FAMILY_GPU_CASES


@pytest.mark.parametrize("name", sorted(GPU_CASES))
def test_gpu_overrides_match_the_generic_op(xp, name):
    from ferro.ops.registry import REGISTRY

    op = REGISTRY[name]
    rng = np.random.default_rng(5)
    x = xp.asarray(rng.normal(size=(12, 40)) * 3)
    gys = {
        "contiguous": xp.asarray(rng.normal(size=(12, 40))),
        "strided": xp.asarray(rng.normal(size=(12, 80)))[:, ::2],
        "broadcast scalar": _broadcast(xp, np.full((12, 40), 0.75), np.float64),
    }
    for params, takes in GPU_CASES[name]:
        mine, ref = _Ctx(xp), _Ctx(xp)
        want = op.forward(ref, x, **params)
        got = op.gpu_forward(mine, x, **params) if op.gpu_forward else NotImplemented
        if got is NotImplemented:
            assert not (takes and op.gpu_forward)
            got = op.forward(mine, x, **params)
        np.testing.assert_allclose(host(got), host(want), rtol=1e-12, atol=1e-13)
        assert vars(mine).keys() == vars(ref).keys()  # the generic backward can follow it
        for kind, gy in gys.items():
            fused = op.gpu_backward(mine, gy)
            assert (fused is not NotImplemented) == takes, kind
            if takes:
                np.testing.assert_allclose(
                    host(fused), host(op.backward(ref, gy)), rtol=1e-10, atol=1e-12
                )


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("extra", [{}, {"smoothing": 0.1}, {"weight": True}])
def test_cross_entropy_override_matches_the_generic_op(xp, reduction, extra):
    from ferro.ops import loss

    op = loss.CrossEntropy
    assert op.gpu_paired and op.cpu_paired  # the CPU has the same pair of kernels (session 8)
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
    out = op.gpu_forward(mine, x, **params)
    want = op.forward(ref, x, **params)
    if extra:  # weights or smoothing: the kernels do not take them
        assert out is NotImplemented
        return
    np.testing.assert_allclose(host(out), host(want), rtol=1e-12)
    got = op.gpu_backward(mine, gy)
    np.testing.assert_allclose(host(got), host(op.backward(ref, gy)), rtol=1e-10, atol=1e-13)
