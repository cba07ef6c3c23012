"""The GPU pooling kernels: launch wrappers for ``kernels/pooling.cu`` (CuPy arrays in, CuPy
arrays out). Max pooling under the names and signatures of ``ferro._C.pooling_kernels``, so the
max_pool adapter of ``ferro.ops.fused`` binds either backend; average pooling and adaptive
average and max pooling are GPU only (the CPU's generic code is a few NumPy passes), bound by
the adapters of ``ferro.ops.pooling``. Forward: one thread per output; backward: one thread per
input element, gathering from the windows that hold it (no atomics, so the sum has a fixed
order). Nothing here imports CuPy until a kernel runs.
"""

from __future__ import annotations

import math

import numpy as np

from ferro.cuda.loader import ctype, grid_for, kernel
from ferro.cuda.ops import accepts, accepts_grad
from ferro.errors import ArgumentError, DtypeError, ShapeError

FUSED_KERNELS = frozenset(
    {
        "max_pool_fwd",
        "max_pool_bwd",
        "avg_pool_fwd",
        "avg_pool_bwd",
        "adaptive_avg_pool_fwd",
        "adaptive_avg_pool_bwd",
        "adaptive_max_pool_fwd",
        "adaptive_max_pool_bwd",
    }
)

__all__ = [
    "FUSED_KERNELS",
    "accepts",
    "accepts_grad",
    "adaptive_avg_pool_bwd",
    "adaptive_avg_pool_fwd",
    "adaptive_max_pool_bwd",
    "adaptive_max_pool_fwd",
    "avg_pool_bwd",
    "avg_pool_fwd",
    "max_pool_bwd",
    "max_pool_fwd",
]


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


def _planes_of(who, x, nd):
    if not 1 <= nd <= 3 or x.ndim < nd + 1:
        raise ShapeError(f"{who}: {nd} spatial dimensions do not fit an array of shape {x.shape}")


def _divisor_args(who, divisor, out_size, like) -> tuple:
    """The kernels' divisor arguments: ``(per-cell array, 1, 0.0)`` for an array of shape
    ``out_size`` (copied to the device), ``(like, 0, value)`` for one value (``like``, any
    device array, stands for the unread pointer)."""
    import cupy

    if isinstance(divisor, (int, float)):
        if divisor == 0:
            raise ArgumentError(f"{who}: the divisor must be non-zero")
        return like, np.int32(0), np.float64(divisor)
    div = np.asarray(divisor, dtype=np.float64)
    if div.shape != tuple(out_size):
        raise ShapeError(f"{who}: divisor of shape {div.shape} must have the output's {out_size}")
    return cupy.asarray(np.ascontiguousarray(div)), np.int32(1), np.float64(0)


def avg_pool_fwd(x, kernel_size, stride, padding, out_size, divisor):
    """Average pooling of ``x`` (``(*lead, *spatial)``, ``len(kernel_size)`` spatial dims, zero
    padding): each window's sum over ``divisor`` (one value, or one per output cell: an array
    of shape ``out_size``, as ``ferro.ops.pooling`` computes PyTorch's)."""
    import cupy

    who = "avg_pool_fwd"
    _check(who, "x", x, _FLOATS)
    nd = len(kernel_size)
    _planes_of(who, x, nd)
    ones = (1,) * nd
    sizes = _sizes(who, x.shape[-nd:], out_size, kernel_size, stride, padding, ones)
    y = cupy.empty(tuple(x.shape[:-nd]) + tuple(out_size), dtype=x.dtype)
    if y.size:
        grid, block = grid_for(y.size)
        div = _divisor_args(who, divisor, out_size, x)
        kernel("pooling", f"ferro_avg_pool_fwd<{ctype(x.dtype)}>")(
            grid, block, (x, y, *div, np.int64(y.size), *sizes)
        )
    return y


def avg_pool_bwd(gy, shape, kernel_size, stride, padding, divisor):
    """:func:`avg_pool_fwd`'s input gradient: for each element of an input of ``shape``, the
    sum of ``gy / divisor`` over the windows that hold it."""
    import cupy

    who = "avg_pool_bwd"
    _check(who, "gy", gy, _FLOATS)
    shape, nd = tuple(shape), len(kernel_size)
    _planes_of(who, gy, nd)
    if len(shape) != gy.ndim or shape[:-nd] != tuple(gy.shape[:-nd]):
        raise ShapeError(f"{who}: gy of shape {gy.shape} does not fit an input of shape {shape}")
    out = tuple(gy.shape[-nd:])
    ones = (1,) * nd
    sizes = _sizes(who, shape[-nd:], out, kernel_size, stride, padding, ones)
    gx = cupy.empty(shape, dtype=gy.dtype)
    if gx.size:
        grid, block = grid_for(gx.size)
        div = _divisor_args(who, divisor, out, gy)
        kernel("pooling", f"ferro_avg_pool_bwd<{ctype(gy.dtype)}>")(
            grid, block, (gy, gx, *div, np.int64(gx.size), *sizes)
        )
    return gx


def _adaptive_sizes(who, spatial, out) -> list:
    nd = len(out)
    if len(spatial) != nd or min((*spatial, *out)) < 1:
        raise ArgumentError(f"{who}: sizes {tuple(spatial)} -> {tuple(out)} must be positive")
    pad = (1,) * (3 - nd)
    return [np.int64(v) for v in pad + tuple(spatial) + pad + tuple(out)]


def _adaptive_fwd(who, mode, x, out_size):
    import cupy

    _check(who, "x", x, _FLOATS)
    nd = len(out_size)
    _planes_of(who, x, nd)
    sizes = _adaptive_sizes(who, x.shape[-nd:], out_size)
    shape = tuple(x.shape[:-nd]) + tuple(out_size)
    y = cupy.empty(shape, dtype=x.dtype)
    idx = cupy.empty(shape, dtype=cupy.int64) if mode else None
    if y.size:
        grid, block = grid_for(y.size)
        kernel("pooling", f"ferro_adaptive_pool_fwd<{ctype(x.dtype)}>")(
            grid, block, (x, y, y if idx is None else idx, np.int32(mode), np.int64(y.size), *sizes)
        )
    return y, idx


def _adaptive_bwd(who, mode, gy, indices, shape, nd):
    import cupy

    _check(who, "gy", gy, _FLOATS)
    shape = tuple(shape)
    _planes_of(who, gy, nd)
    if len(shape) != gy.ndim or shape[:-nd] != tuple(gy.shape[:-nd]):
        raise ShapeError(f"{who}: gy of shape {gy.shape} does not fit an input of shape {shape}")
    if mode:
        _check(who, "indices", indices, (np.dtype(np.int64),))
        if indices.shape != gy.shape:
            raise ShapeError(f"{who}: indices of shape {indices.shape} must match gy's {gy.shape}")
    sizes = _adaptive_sizes(who, shape[-nd:], gy.shape[-nd:])
    gx = cupy.empty(shape, dtype=gy.dtype)
    if gx.size:
        grid, block = grid_for(gx.size)
        kernel("pooling", f"ferro_adaptive_pool_bwd<{ctype(gy.dtype)}>")(
            grid,
            block,
            (gy, gy if indices is None else indices, gx, np.int32(mode), np.int64(gx.size), *sizes),
        )
    return gx


def adaptive_avg_pool_fwd(x, out_size):
    """Adaptive average pooling of ``x`` (``(*lead, *spatial)``, ``len(out_size)`` spatial
    dims): cell ``o`` averages ``[floor(o n / out), ceil((o + 1) n / out))``."""
    return _adaptive_fwd("adaptive_avg_pool_fwd", 0, x, out_size)[0]


def adaptive_max_pool_fwd(x, out_size):
    """Adaptive max pooling: ``(y, indices)``, each window's first maximum (a NaN wins) and its
    flat index within the plane (int64), as :func:`max_pool_fwd` gives them."""
    return _adaptive_fwd("adaptive_max_pool_fwd", 1, x, out_size)


def adaptive_avg_pool_bwd(gy, shape, nd):
    """:func:`adaptive_avg_pool_fwd`'s input gradient for an input of ``shape`` (``nd``
    spatial dims): each element gathers gy / (window size) from the cells that hold it."""
    return _adaptive_bwd("adaptive_avg_pool_bwd", 0, gy, None, shape, nd)


def adaptive_max_pool_bwd(gy, indices, shape, nd):
    """:func:`adaptive_max_pool_fwd`'s input gradient: gy added where ``indices`` name an
    element (a gather over the cells whose windows hold it)."""
    return _adaptive_bwd("adaptive_max_pool_bwd", 1, gy, indices, shape, nd)
