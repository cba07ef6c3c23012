"""The GPU kernels: launch wrappers for ferro's CUDA kernels (CuPy arrays in, CuPy arrays out).

This module is the GPU half of ferro's override mechanism (``ferro.ops.fused``): the names in
:data:`FUSED_KERNELS` mean the same kernel, with the same arguments, as in
``ferro._C.cpu_kernels``, and the per-element math is ``kernels/formulas.cuh``, which the CPU
kernels compile too. :func:`accepts` and :func:`accepts_grad` are the predicates the adapter and
the engine ask first (no exception, no message on that path); each wrapper still checks what its
kernel assumes and raises a typed error for a direct caller. The host-side planning
(:func:`plan_sum_to_shape`, :func:`sum_launch`) is plain Python. Nothing here imports CuPy until
a kernel runs, so the composition root (``ferro/__init__.py``) registers it everywhere.
``tests/cuda/test_kernels.py`` runs these wrappers and the kernel sources against NumPy twice: on
a device when there is one, and everywhere on a CPU emulation of the CUDA features the kernels
use (``cuda_emu.h``).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ferro.cuda import get_rng_state, set_rng_state
from ferro.cuda.loader import ctype, grid_for, kernel, row_block
from ferro.errors import ArgumentError, DtypeError, ShapeError

# ---------------------------------------------------------------------------------------------
# Host-side planning (no CuPy needed)
# ---------------------------------------------------------------------------------------------

MAX_DIMS = 8  # coalesced dims the sum-to-shape kernel takes


def plan_sum_to_shape(src_shape: tuple, shape: tuple):
    """How the sum-to-shape kernel sees ``src_shape`` summed to ``shape``.

    Returns ``(lens, red_mask, n_out, n_red)``: the coalesced C-order dims of the source, a
    bitmask of the summed ones, and the output and reduced sizes; or None when more than
    :data:`MAX_DIMS` dims remain. Raises ValueError when ``src_shape`` does not broadcast from
    ``shape``.
    """
    src_shape, shape = tuple(src_shape), tuple(shape)
    lead = len(src_shape) - len(shape)
    if lead < 0 or any(s != g and s != 1 for s, g in zip(shape, src_shape[lead:], strict=True)):
        raise ShapeError(f"sum_to_shape: cannot reduce shape {src_shape} to {shape}")
    kinds = [True] * lead + [
        s == 1 and g != 1 for s, g in zip(shape, src_shape[lead:], strict=True)
    ]
    dims: list[list] = []  # [length, summed]
    for g, red in zip(src_shape, kinds, strict=True):
        if g == 1:
            continue  # a length-1 dim changes no offset
        if dims and dims[-1][1] == red:
            dims[-1][0] *= g  # C-contiguous neighbours of one kind merge
        else:
            dims.append([g, red])
    if len(dims) > MAX_DIMS:
        return None
    lens = tuple(d[0] for d in dims)
    red_mask = sum(1 << k for k, d in enumerate(dims) if d[1])
    n_out = math.prod(d[0] for d in dims if not d[1])
    n_red = math.prod(d[0] for d in dims if d[1])
    return lens, red_mask, n_out, n_red


def sum_launch(lens: tuple, red_mask: int, n_out: int, n_red: int, sm_count: int):
    """Grid and block for the sum-to-shape kernel: ``((gx, gy), (bx, by))``.

    When the innermost dim is kept, a warp's threads take neighbouring outputs (coalesced
    reads); when it is summed, a block's threads split one output's reduction. The reduction is
    split across ``gy`` blocks when the outputs alone would leave the GPU idle (about four
    blocks per multiprocessor), keeping at least 16 elements per thread.
    """
    inner_summed = bool(lens) and bool((red_mask >> (len(lens) - 1)) & 1)
    if inner_summed:
        bx = 1
    else:
        bx = 1
        while bx < 32 and bx < n_out:
            bx *= 2
    by = 256 // bx
    gx = -(-n_out // bx)
    want = -(-4 * sm_count // gx)
    most = max(1, -(-n_red // (by * 16)))
    gy = max(1, min(want, most, 1024))
    return (gx, gy), (bx, by)


# ---------------------------------------------------------------------------------------------
# Accept predicates and launch wrappers
# ---------------------------------------------------------------------------------------------

# The fused kernels this backend implements (ferro._C.cpu_kernels implements the same names).
FUSED_KERNELS = frozenset(
    {
        "tanh_bwd",
        "sigmoid_bwd",
        "relu_bwd",
        "leaky_relu_bwd",
        "gelu_bwd",
        "silu_bwd",
        "gelu_fwd",
        "softmax_fwd",
        "softmax_bwd",
        "log_softmax_fwd",
        "log_softmax_bwd",
        "cross_entropy_fwd",
        "cross_entropy_bwd",
    }
)

_FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def accepts(arrays: tuple) -> bool:
    """True if the kernels take ``arrays``: one float32/float64 dtype, one shape, C-contiguous.

    The engine only hands CuPy arrays of one device to the GPU backend; this reads their flags.
    """
    if not arrays:
        return False
    a0 = arrays[0]
    if a0.dtype not in _FLOAT_DTYPES:
        return False
    for a in arrays:
        if a.dtype != a0.dtype or a.shape != a0.shape or not a.flags.c_contiguous:
            return False
    return True


def _grad_stride(gy) -> int:
    # 0 when gy is one value broadcast (every dimension longer than 1 has stride 0: the
    # gradient of .sum() or .mean()), else 1 (any other layout is made contiguous first: one
    # copy costs less than the generic chain of kernels).
    for n, st in zip(gy.shape, gy.strides, strict=True):
        if n > 1 and st != 0:
            return 1
    return 0


def accepts_grad(gy, arrays: tuple) -> bool:
    """True if a backward kernel takes upstream gradient ``gy`` with the saved ``arrays``:
    :func:`accepts` of ``arrays``, and ``gy`` of their dtype and shape in any layout."""
    return accepts(arrays) and gy.dtype == arrays[0].dtype and gy.shape == arrays[0].shape


def _check(who: str, *arrays):
    if not accepts(arrays):
        a0 = arrays[0]
        for a in arrays:
            if a.dtype not in _FLOAT_DTYPES or a.dtype != a0.dtype:
                raise DtypeError(f"{who}: arrays must be float32 or float64 of one dtype")
            if a.shape != a0.shape:
                raise ShapeError(f"{who}: shapes {a0.shape} and {a.shape} differ")
        raise ArgumentError(f"{who}: the kernel needs C-contiguous arrays")
    return ctype(arrays[0].dtype)


def _grad_args(who: str, gy, saved: tuple):
    """The C type, gy as the kernel reads it, and its stride (0: one broadcast value)."""
    import cupy

    t = _check(who, *saved)
    if gy.dtype != saved[0].dtype or gy.shape != saved[0].shape:
        raise ShapeError(
            f"{who}: gy ({gy.dtype}, {gy.shape}) does not match ({saved[0].dtype}, "
            f"{saved[0].shape})"
        )
    gs = _grad_stride(gy)
    if gs and not gy.flags.c_contiguous:
        gy = cupy.ascontiguousarray(gy)
    return t, gy, gs


@functools.cache
def _sm_count(device_id: int) -> int:
    import cupy

    return cupy.cuda.Device(device_id).attributes["MultiProcessorCount"]


def _sm_count_of(arr) -> int:
    """Multiprocessors of the device holding ``arr`` (the emulated-kernel tests replace it)."""
    return _sm_count(arr.device.id)


def owns(arr) -> bool:
    """A CuPy array the engine may write once nothing else references it: not a view, laid out
    C-contiguously, on memory CuPy allocated (not borrowed through DLPack or a raw pointer)."""
    if arr.base is not None or not arr.flags.c_contiguous:
        return False
    from cupy.cuda.memory import UnownedMemory

    mem = arr.data.mem
    return mem is not None and not isinstance(mem, UnownedMemory)


def accumulate(dst, src) -> None:
    """``dst += src`` in place (dst owned by the engine)."""
    t = _check("accumulate", dst, src)
    if dst.size:
        grid, block = grid_for(dst.size)
        kernel("accumulate", f"ferro_accumulate<{t}>")(grid, block, (dst, src, np.int64(dst.size)))


def sum_to_shape(src, shape: tuple):
    """Sum the broadcast ``src`` back to ``shape`` in one kernel; returns a new array (the
    generic reduction where more than :data:`MAX_DIMS` dims remain after coalescing)."""
    import cupy

    t = _check("sum_to_shape", src)
    plan = plan_sum_to_shape(src.shape, shape)
    if plan is None:
        from ferro._C.accumulate import sum_to_shape_generic

        return sum_to_shape_generic(src, tuple(shape))
    lens, red_mask, n_out, n_red = plan
    if n_out == 0 or n_red == 0:
        return cupy.zeros(shape, dtype=src.dtype)
    out = cupy.empty(shape, dtype=src.dtype)
    (gx, gy), block = sum_launch(lens, red_mask, n_out, n_red, _sm_count_of(src))
    if gy > 1:
        ws = cupy.empty((gy, n_out), dtype=np.float64)
        counter = cupy.zeros(gx, dtype=np.uint32)
    else:
        ws = counter = out  # not read with one split; any device pointer will do
    padded = [np.int64(n) for n in lens] + [np.int64(1)] * (MAX_DIMS - len(lens))
    kernel("sum_to_shape", f"ferro_sum_to_shape<{t}>")(
        (gx, gy),
        block,
        (
            src,
            out,
            ws,
            counter,
            np.int64(n_out),
            np.int64(n_red),
            np.int32(len(lens)),
            np.int32(red_mask),
            *padded,
        ),
    )
    return out


def _grad_map(name: str, gy, saved: tuple, a: float = 0.0):
    """Launch ``ferro_<name><T>``: gx = formula(gy, saved..., a) elementwise."""
    import cupy

    t, gy, gs = _grad_args(name, gy, saved)
    v = saved[0]
    gx = cupy.empty_like(v)
    if v.size:
        grid, block = grid_for(v.size)
        w = saved[1] if len(saved) > 1 else v  # not read by one-array formulas
        kernel("activation", f"ferro_{name}<{t}>")(
            grid, block, (gy, np.int64(gs), v, w, gx, np.int64(v.size), v.dtype.type(a))
        )
    return gx


def tanh_bwd(gy, y):
    """tanh backward from the output: ``gy * (1 - y**2)``."""
    return _grad_map("tanh_bwd", gy, (y,))


def sigmoid_bwd(gy, y):
    """sigmoid backward from the output: ``gy * y * (1 - y)``."""
    return _grad_map("sigmoid_bwd", gy, (y,))


def relu_bwd(gy, y):
    """relu backward from the output: ``gy`` where ``y > 0``, else 0."""
    return _grad_map("relu_bwd", gy, (y,))


def leaky_relu_bwd(gy, x, slope: float):
    """leaky_relu backward from the input: ``gy`` where ``x > 0``, else ``gy * slope``."""
    return _grad_map("leaky_relu_bwd", gy, (x,), slope)


def _gelu_form(who: str, approximate) -> str:
    if approximate not in ("none", "tanh"):
        raise ArgumentError(f"{who}: approximate must be 'none' or 'tanh', got {approximate!r}")
    return "gelu_tanh" if approximate == "tanh" else "gelu"


def gelu_bwd(gy, x, approximate="none"):
    """gelu backward from the input: ``gy * (Phi(x) + x * phi(x))``, or with
    ``approximate="tanh"`` the derivative of ``x (1 + tanh(c (x + k x^3))) / 2``."""
    return _grad_map(f"{_gelu_form('gelu_bwd', approximate)}_bwd", gy, (x,))


def silu_bwd(gy, x, s):
    """silu backward from x and ``s = sigmoid(x)``: ``gy * s * (1 + x * (1 - s))``."""
    return _grad_map("silu_bwd", gy, (x, s))


def gelu_fwd(x, approximate="none"):
    """gelu ``x * Phi(x)``, or with ``approximate="tanh"`` ``x (1 + tanh(c (x + k x^3))) / 2``,
    in one pass."""
    import cupy

    form = _gelu_form("gelu_fwd", approximate)
    t = _check("gelu_fwd", x)
    y = cupy.empty_like(x)
    if x.size:
        grid, block = grid_for(x.size)
        kernel("activation", f"ferro_{form}_fwd<{t}>")(grid, block, (x, y, np.int64(x.size)))
    return y


def _rows(x):
    cols = x.shape[-1] if x.ndim else 1
    return (x.size // cols if cols else 0), cols


def _softmax_fwd(who: str, x, log: bool):
    import cupy

    t = _check(who, x)
    y = cupy.empty_like(x)
    rows, cols = _rows(x)
    if rows:
        kernel("softmax", f"ferro_softmax_fwd<{t}>")(
            (rows,), (row_block(cols),), (x, y, np.int64(cols), np.int32(log))
        )
    return y


def _softmax_bwd(who: str, gy, y, log: bool):
    import cupy

    t, gy, gs = _grad_args(who, gy, (y,))
    gx = cupy.empty_like(y)
    rows, cols = _rows(y)
    if rows:
        kernel("softmax", f"ferro_softmax_bwd<{t}>")(
            (rows,), (row_block(cols),), (gy, np.int64(gs), y, gx, np.int64(cols), np.int32(log))
        )
    return gx


def softmax_fwd(x):
    """Softmax over the last axis, one block per row."""
    return _softmax_fwd("softmax_fwd", x, False)


def log_softmax_fwd(x):
    """Log-softmax over the last axis, one block per row."""
    return _softmax_fwd("log_softmax_fwd", x, True)


def softmax_bwd(gy, y):
    """Softmax backward over the last axis from the output: ``y * (gy - sum(gy * y))``."""
    return _softmax_bwd("softmax_bwd", gy, y, False)


def log_softmax_bwd(gy, y):
    """Log-softmax backward over the last axis from the output: ``gy - exp(y) * sum(gy)``."""
    return _softmax_bwd("log_softmax_bwd", gy, y, True)


def _ce_args(who: str, logits, target):
    import cupy

    t = _check(who, logits)
    if logits.ndim != 2 or target.shape != logits.shape[:1]:
        raise ShapeError(
            f"{who}: logits {logits.shape} and target {target.shape} are not (N, C), (N,)"
        )
    return t, cupy.ascontiguousarray(target, dtype=cupy.int64)


def cross_entropy_fwd(logits, target, ignore_index: int = -100):
    """Per-row loss ``logsumexp(x) - x[t]`` (0 where ignored) and ``logsumexp(x)``."""
    import cupy

    t, target = _ce_args("cross_entropy_fwd", logits, target)
    rows, classes = logits.shape
    loss = cupy.empty(rows, dtype=logits.dtype)
    lse = cupy.empty(rows, dtype=logits.dtype)
    if rows:
        kernel("cross_entropy", f"ferro_cross_entropy_fwd<{t}>")(
            (rows,),
            (row_block(classes),),
            (logits, target, loss, lse, np.int64(classes), np.int64(ignore_index)),
        )
    return loss, lse


def cross_entropy_bwd(logits, target, lse, gy, denom, ignore_index: int = -100):
    """``(softmax(x) - onehot(t)) * gy / denom`` per row (0 where ignored). ``gy`` has one
    entry per row or is a scalar; ``denom`` is a one-element device array."""
    import cupy

    who = "cross_entropy_bwd"
    t, target = _ce_args(who, logits, target)
    rows, classes = logits.shape
    per_row = gy.ndim == 1
    if (per_row and gy.shape != (rows,)) or (not per_row and gy.size != 1) or denom.size != 1:
        raise ShapeError(f"{who}: gy {gy.shape}, denom {denom.shape}")
    gy = cupy.ascontiguousarray(gy, dtype=logits.dtype)
    denom = cupy.ascontiguousarray(denom, dtype=logits.dtype)
    _check(who, lse)
    grad = cupy.empty_like(logits)
    if rows:
        kernel("cross_entropy", f"ferro_cross_entropy_bwd<{t}>")(
            (rows,),
            (row_block(classes),),
            (
                logits,
                target,
                lse,
                gy,
                denom,
                grad,
                np.int64(classes),
                np.int64(ignore_index),
                np.int32(per_row),
            ),
        )
    return grad


def dropout_mask(shape, p: float, dtype, device: int = 0):
    """A dropout mask (0 or ``1/(1-p)``) from ``device``'s counter-based generator, whose
    offset advances by the mask's size (so saving and restoring the state replays it)."""
    import cupy

    t = ctype(dtype)
    seed, offset = get_rng_state(device)
    mask = cupy.empty(shape, dtype=dtype)
    n = mask.size
    if n:
        grid, block = grid_for(n)
        kernel("dropout", f"ferro_dropout_mask<{t}>")(
            grid,
            block,
            (
                mask,
                np.int64(n),
                np.uint64(seed),
                np.uint64(offset),
                np.uint32(min(int(p * 2**32), 2**32 - 1)),
                np.dtype(dtype).type(1 / (1 - p)),
            ),
        )
    set_rng_state((seed, offset + n), device)
    return mask
