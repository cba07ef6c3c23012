"""The GPU pooling kernels: launch wrappers for ``kernels/pooling.cu`` (CuPy arrays in, CuPy
arrays out) under the names and signatures of ``ferro._C.pooling_kernels``, so the max_pool
adapter of ``ferro.ops.fused`` binds either backend. Forward: one thread per output; backward:
one thread per input element, gathering from the windows that chose it (no atomics, so the sum
has a fixed order). Nothing here imports CuPy until a kernel runs.
"""

from __future__ import annotations

import math

import numpy as np

from ferro.cuda.loader import ctype, grid_for, kernel
from ferro.cuda.ops import accepts, accepts_grad
from ferro.errors import ArgumentError, DtypeError, ShapeError

FUSED_KERNELS = frozenset({"max_pool_fwd", "max_pool_bwd"})

__all__ = ["FUSED_KERNELS", "accepts", "accepts_grad", "max_pool_bwd", "max_pool_fwd"]


def _check(who: str, name: str, a, dtypes) -> None:
    if a.dtype not in dtypes:
        raise DtypeError(f"{who}: {name} must be {' or '.join(map(str, dtypes))}, got {a.dtype}")
    if not a.flags.c_contiguous:
        raise ArgumentError(f"{who}: {name} must be C-contiguous, got strides {a.strides}")


def _sizes(who: str, spatial, out, kernel_size, stride, padding, dilation) -> list:
    """The kernels' 18 size arguments (input, output, kernel, stride, padding, dilation; each
    left-padded to three dimensions) as int64 scalars."""
    nd = len(kernel_size)
    args = []
    for what, v, fill, low in (
        ("input size", spatial, 1, 1),
        ("out_size", out, 1, 1),
        ("kernel_size", kernel_size, 1, 1),
        ("stride", stride, 1, 1),
        ("padding", padding, 0, 0),
        ("dilation", dilation, 1, 1),
    ):
        v = tuple(v)
        if len(v) != nd or any(e < low for e in v):
            raise ArgumentError(f"{who}: {what} must be {nd} ints >= {low}, got {v}")
        args += [np.int64(e) for e in (fill,) * (3 - nd) + v]
    return args


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def max_pool_fwd(x, kernel_size, stride, padding, dilation, out_size):
    """Max pooling of ``x`` (``(*lead, *spatial)``, ``len(kernel_size)`` spatial dimensions):
    ``(y, indices)`` of shape ``(*lead, *out_size)``, indices int64 and flat per plane."""
    import cupy

    who = "max_pool_fwd"
    _check(who, "x", x, _FLOATS)
    nd = len(kernel_size)
    if not 1 <= nd <= 3 or x.ndim < nd + 1:
        raise ShapeError(f"{who}: {nd} spatial dimensions do not fit x of shape {x.shape}")
    sizes = _sizes(who, x.shape[-nd:], out_size, kernel_size, stride, padding, dilation)
    shape = tuple(x.shape[:-nd]) + tuple(out_size)
    y = cupy.empty(shape, dtype=x.dtype)
    idx = cupy.empty(shape, dtype=cupy.int64)
    n = math.prod(shape)
    if n:
        grid, block = grid_for(n)
        kernel("pooling", f"ferro_max_pool_fwd<{ctype(x.dtype)}>")(
            grid, block, (x, y, idx, np.int64(n), *sizes)
        )
    return y, idx


def max_pool_bwd(gy, indices, shape, kernel_size, stride, padding, dilation):
    """Max pooling's input gradient: zeros of ``shape`` (the input's) with ``gy`` added at the
    flat per-plane ``indices`` (``gy``'s shape, int64); the windows' geometry tells each input
    element which outputs' windows hold it."""
    import cupy

    who = "max_pool_bwd"
    _check(who, "gy", gy, _FLOATS)
    _check(who, "indices", indices, (np.dtype(np.int64),))
    shape, nd = tuple(shape), len(kernel_size)
    if indices.shape != gy.shape:
        raise ShapeError(f"{who}: indices of shape {indices.shape} must match gy's {gy.shape}")
    if not 1 <= nd <= 3 or gy.ndim != len(shape) or tuple(gy.shape[:-nd]) != shape[:-nd]:
        raise ShapeError(f"{who}: gy of shape {gy.shape} does not fit an input of shape {shape}")
    sizes = _sizes(who, shape[-nd:], gy.shape[-nd:], kernel_size, stride, padding, dilation)
    gx = cupy.empty(shape, dtype=gy.dtype)
    n = math.prod(shape)
    if n:
        grid, block = grid_for(n)
        kernel("pooling", f"ferro_max_pool_bwd<{ctype(gy.dtype)}>")(
            grid, block, (gy, indices, gx, np.int64(n), *sizes)
        )
    return gx
