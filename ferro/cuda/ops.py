"""Launch wrappers for ferro's CUDA kernels (CuPy arrays in, CuPy arrays out).

Each wrapper checks what its kernel assumes (C-contiguous float32/float64 arrays of matching
shapes) and raises a ``TypeError``/``ValueError`` otherwise; ``tests/cuda/test_kernels_gpu.py``
checks each against NumPy on a device.
"""

from __future__ import annotations

import numpy as np

from ferro.cuda import get_rng_state, set_rng_state
from ferro.cuda.loader import BLOCK, ctype, grid_for, kernel


def _check(*arrays):
    a0 = arrays[0]
    for a in arrays:
        if not a.flags.c_contiguous or a.dtype != a0.dtype:
            raise ValueError("ferro.cuda: kernels need C-contiguous arrays of one dtype")
    return ctype(a0.dtype)


def accumulate(dst, src) -> None:
    """``dst += src`` in place (dst owned by the engine)."""
    t = _check(dst, src)
    if dst.shape != src.shape:
        raise ValueError(f"accumulate: shapes {dst.shape} and {src.shape} differ")
    grid, block = grid_for(dst.size)
    kernel("accumulate", f"ferro_accumulate<{t}>")(grid, block, (dst, src, np.int64(dst.size)))


def sum_to_shape(src, shape: tuple):
    """Sum the broadcast ``src`` back to ``shape`` in one kernel; returns a new array."""
    import cupy

    t = _check(src)
    nd, lead = src.ndim, src.ndim - len(shape)
    full = (1,) * lead + tuple(shape)
    out = cupy.empty(tuple(shape), dtype=src.dtype)
    src_strides = [s // src.itemsize for s in src.strides]
    keep, out_strides, red_shape, red_strides = [], [], [], []
    acc = 1
    ostr = [0] * nd
    for d in range(nd - 1, -1, -1):
        if full[d] == src.shape[d] and full[d] != 1 or (full[d] == 1 and src.shape[d] == 1):
            ostr[d] = acc
            acc *= full[d]
        else:
            red_shape.insert(0, src.shape[d])
            red_strides.insert(0, src_strides[d])
    for d in range(nd):
        keep.append(src_strides[d] if ostr[d] else 0)
        out_strides.append(ostr[d])
    n_red = int(np.prod(red_shape)) if red_shape else 1
    as_dev = lambda v: cupy.asarray(np.asarray(v or [0], dtype=np.int64))  # noqa: E731
    grid, block = grid_for(out.size)
    kernel("sum_to_shape", f"ferro_sum_to_shape<{t}>")(
        grid,
        block,
        (
            src,
            out,
            np.int64(out.size),
            np.int32(nd),
            as_dev(list(src.shape)),
            as_dev(keep),
            as_dev(out_strides),
            np.int32(len(red_shape)),
            as_dev(red_shape),
            as_dev(red_strides),
            np.int64(n_red),
        ),
    )
    return out


def activation_backward(name: str, gy, saved, slope: float = 0.0):
    """Fused ``gx`` of relu, leaky_relu, sigmoid, tanh (saved y) or gelu, silu (saved x)."""
    import cupy

    t = _check(gy, saved)
    gx = cupy.empty_like(gy)
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
            (rows,), (BLOCK,), (x, y, np.int64(cols), np.int32(log)), shared_mem=BLOCK * 8
        )
    return y


def softmax_backward(gy, y, log: bool):
    """Backward of softmax (or log-softmax) over the last axis from the output ``y``."""
    import cupy

    t = _check(gy, y)
    gx = cupy.empty_like(gy)
    rows, cols = _rows(gy)
    if rows:
        kernel("softmax", f"ferro_softmax_bwd<{t}>")(
            (rows,), (BLOCK,), (gy, y, gx, np.int64(cols), np.int32(log)), shared_mem=BLOCK * 8
        )
    return gx


def cross_entropy(logits, target, ignore_index: int = -100, scale: float = 1.0):
    """Per-row softmax cross-entropy and its gradient (times ``scale``) in one kernel."""
    import cupy

    t = _check(logits)
    rows, classes = logits.shape
    target = cupy.ascontiguousarray(target, dtype=cupy.int64)
    loss = cupy.empty(rows, dtype=logits.dtype)
    grad = cupy.empty_like(logits)
    if rows:
        kernel("cross_entropy", f"ferro_cross_entropy<{t}>")(
            (rows,),
            (BLOCK,),
            (
                logits,
                target,
                loss,
                grad,
                np.int64(classes),
                np.int64(ignore_index),
                np.float64(scale),
            ),
            shared_mem=BLOCK * 8,
        )
    return loss, grad


def dropout_mask(shape, p: float, dtype, device: int = 0):
    """A dropout mask (0 or ``1/(1-p)``) from ``device``'s counter-based generator, whose
    offset advances by the mask's size (so saving and restoring the state replays it)."""
    import cupy

    t = ctype(dtype)
    seed, offset = get_rng_state(device)
    mask = cupy.empty(shape, dtype=dtype)
    n = mask.size
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
