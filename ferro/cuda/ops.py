"""Launch wrappers for ferro's CUDA kernels (CuPy arrays in, CuPy arrays out).

Each wrapper checks what its kernel assumes (C-contiguous float32/float64 arrays of one dtype
and matching shapes) and raises ``ValueError`` otherwise, so the overrides in
:mod:`ferro.cuda.fused` can fall back to the generic CuPy expression. The host-side planning
(:func:`plan_sum_to_shape`, :func:`sum_launch`) is plain Python. ``tests/cuda/test_kernels.py``
runs these wrappers and the kernel sources against NumPy twice: on a device when there is one,
and everywhere on a CPU emulation of the CUDA features the kernels use (``cuda_emu.h``).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ferro.cuda import get_rng_state, set_rng_state
from ferro.cuda.loader import ctype, grid_for, kernel, row_block
from ferro.errors import ArgumentError, ShapeError

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
# Launch wrappers
# ---------------------------------------------------------------------------------------------


def _check(*arrays):
    a0 = arrays[0]
    for a in arrays:
        if not a.flags.c_contiguous or a.dtype != a0.dtype:
            raise ArgumentError("ferro.cuda: kernels need C-contiguous arrays of one dtype")
    try:
        return ctype(a0.dtype)
    except TypeError as exc:  # no kernel for this dtype: the caller falls back
        raise ArgumentError(str(exc)) from None


@functools.cache
def _sm_count(device_id: int) -> int:
    import cupy

    return cupy.cuda.Device(device_id).attributes["MultiProcessorCount"]


def _sm_count_of(arr) -> int:
    """Multiprocessors of the device holding ``arr`` (the emulated-kernel tests replace it)."""
    return _sm_count(arr.device.id)


def accumulate(dst, src) -> None:
    """``dst += src`` in place (dst owned by the engine)."""
    t = _check(dst, src)
    if dst.shape != src.shape:
        raise ShapeError(f"accumulate: shapes {dst.shape} and {src.shape} differ")
    if dst.size:
        grid, block = grid_for(dst.size)
        kernel("accumulate", f"ferro_accumulate<{t}>")(grid, block, (dst, src, np.int64(dst.size)))


def sum_to_shape(src, shape: tuple):
    """Sum the broadcast ``src`` back to ``shape`` in one kernel; returns a new array."""
    import cupy

    t = _check(src)
    plan = plan_sum_to_shape(src.shape, shape)
    if plan is None:
        raise ArgumentError(f"sum_to_shape: more than {MAX_DIMS} dims after coalescing")
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


def activation_backward(name: str, gy, saved, slope: float = 0.0):
    """Fused ``gx`` of relu, sigmoid, tanh (saved y) or leaky_relu, gelu, silu (saved x)."""
    import cupy

    t = _check(gy, saved)
    if gy.shape != saved.shape:
        raise ShapeError(f"{name} backward: shapes {gy.shape} and {saved.shape} differ")
    gx = cupy.empty_like(gy)
    if gy.size:
        grid, block = grid_for(gy.size)
        kernel("activation", f"ferro_{name}_bwd<{t}>")(
            grid, block, (gy, saved, gx, np.int64(gy.size), gy.dtype.type(slope))
        )
    return gx


def _rows(x):
    cols = x.shape[-1] if x.ndim else 1
    return (x.size // cols if cols else 0), cols


def softmax_forward(x, log: bool):
    """Softmax (or log-softmax) over the last axis, one block per row."""
    import cupy

    t = _check(x)
    y = cupy.empty_like(x)
    rows, cols = _rows(x)
    if rows:
        kernel("softmax", f"ferro_softmax_fwd<{t}>")(
            (rows,), (row_block(cols),), (x, y, np.int64(cols), np.int32(log))
        )
    return y


def softmax_backward(gy, y, log: bool):
    """Backward of softmax (or log-softmax) over the last axis from the output ``y``."""
    import cupy

    t = _check(gy, y)
    if gy.shape != y.shape:
        raise ShapeError(f"softmax backward: shapes {gy.shape} and {y.shape} differ")
    gx = cupy.empty_like(gy)
    rows, cols = _rows(gy)
    if rows:
        kernel("softmax", f"ferro_softmax_bwd<{t}>")(
            (rows,), (row_block(cols),), (gy, y, gx, np.int64(cols), np.int32(log))
        )
    return gx


def _ce_args(logits, target):
    import cupy

    t = _check(logits)
    if logits.ndim != 2 or target.shape != logits.shape[:1]:
        raise ShapeError(
            f"cross_entropy: logits {logits.shape} and target {target.shape} are not (N, C), (N,)"
        )
    return t, cupy.ascontiguousarray(target, dtype=cupy.int64)


def cross_entropy_forward(logits, target, ignore_index: int = -100):
    """Per-row loss ``logsumexp(x) - x[t]`` (0 where ignored) and ``logsumexp(x)``."""
    import cupy

    t, target = _ce_args(logits, target)
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


def cross_entropy_backward(logits, target, lse, gy, denom, ignore_index: int = -100):
    """``(softmax(x) - onehot(t)) * gy / denom`` per row (0 where ignored). ``gy`` has one
    entry per row or is a scalar; ``denom`` is a one-element device array."""
    import cupy

    t, target = _ce_args(logits, target)
    rows, classes = logits.shape
    per_row = gy.ndim == 1
    if (per_row and gy.shape != (rows,)) or (not per_row and gy.size != 1) or denom.size != 1:
        raise ShapeError(f"cross_entropy backward: gy {gy.shape}, denom {denom.shape}")
    gy = cupy.ascontiguousarray(gy, dtype=logits.dtype)
    denom = cupy.ascontiguousarray(denom, dtype=logits.dtype)
    _check(logits, lse, gy, denom)
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
