"""Pooling ops (PyTorch's layout: ``(N, C, *spatial)`` or unbatched ``(C, *spatial)``):
max, average, adaptive and Lp pooling, max-unpooling, and pixel (un)shuffle.

Each kind of pooling is one N-d op: the public ``*1d/2d/3d`` functions check their arguments
and call it with the number of spatial dimensions implied by ``kernel_size``'s length. Every
leading dimension (batch and channels) is a plane: the ops see ``x`` as ``(planes, *spatial)``.

- Max pooling takes the window's first maximal element (NaN wins, as in PyTorch); forward saves
  the flat per-plane index of each chosen element (PyTorch's ``return_indices``), and backward
  scatters ``gy`` through those indices, never searching the windows again.
- Average pooling sums each window one spatial dimension at a time (``k`` strided slices per
  dimension, not ``prod(k)``), then divides by PyTorch's divisor, a product of one count per
  dimension; backward is the adjoint: the same slices, added into.
- Adaptive average pooling reshapes and averages where each output cell covers the same number
  of inputs, and otherwise contracts each dimension with its (output x input) averaging matrix.

The scattering backwards (max pooling's put through indices, average pooling's slice adds) have
``differentiable_backward`` twins written with ferro ops, for double backward.
"""

from __future__ import annotations

import math

import numpy as np

from ferro._C.cpu_kernels import row_sums
from ferro._C.tensor import TensorBase, wrap
from ferro.backend import xp_of
from ferro.errors import (
    ArgumentError,
    ArgumentTypeError,
    DtypeError,
    IndexOutOfRangeError,
    ShapeError,
)
from ferro.ops.registry import apply, register
from ferro.ops.shape import _index_operand, _int, _on_device_of, gather, scatter_add

# ---------------------------------------------------------------------------------------------
# Argument checks, shared by the public functions


def _ntuple(value, n, op, what, low):
    """``value`` (an int, or a sequence of 1 or ``n`` ints) as a tuple of ``n`` ints >= low."""
    if isinstance(value, (tuple, list)):
        if len(value) == 1:
            value = tuple(value) * n
        if len(value) != n:
            raise ArgumentError(f"{op}: {what} must be an int or {n} ints, got {tuple(value)}")
        out = tuple(_int(v, op, what) for v in value)
    else:
        out = (_int(value, op, what),) * n
    if any(v < low for v in out):
        bound = "positive" if low == 1 else "non-negative"
        raise ArgumentError(f"{op}: {what} must be {bound}, got {out}")
    return out


def _check_input(x, nd, op, floating=True):
    if not isinstance(x, TensorBase):
        raise ArgumentTypeError(f"{op}: input must be a Tensor, got {type(x).__name__}")
    if x.ndim not in (nd + 1, nd + 2):
        raise ShapeError(
            f"{op}: expected a {nd + 1}-D (unbatched) or {nd + 2}-D (batched) input, got "
            f"shape {tuple(x.shape)}"
        )
    if any(s == 0 for s in x.shape[-nd - 1 :]):
        raise ShapeError(
            f"{op}: expected non-zero sizes in every dimension but the batch one, got shape "
            f"{tuple(x.shape)}"
        )
    if floating and x.dtype.kind != "f":
        raise DtypeError(f"{op}: expected a floating point input, got dtype {x.dtype}")


def _pool_size(n, k, s, p, d, ceil_mode):
    """PyTorch's output length of a pooling window sliding over ``n`` elements."""
    span = n + 2 * p - d * (k - 1) - 1
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1  # the last window would start in the right padding: PyTorch drops it
    return out


def _pool_geometry(x, nd, op, kernel_size, stride, padding, dilation, ceil_mode):
    """The checked window parameters and the output's spatial size."""
    k = _ntuple(kernel_size, nd, op, "kernel_size", 1)
    s = k if stride is None or (isinstance(stride, (tuple, list)) and not stride) else stride
    s = _ntuple(s, nd, op, "stride", 1)
    p = _ntuple(padding, nd, op, "padding", 0)
    d = _ntuple(dilation, nd, op, "dilation", 1)
    if any(pi > ki // 2 for pi, ki in zip(p, k, strict=True)):
        raise ArgumentError(
            f"{op}: padding {p} must be at most half of kernel_size {k} in every dimension"
        )
    spatial = tuple(x.shape[-nd:])
    out = tuple(
        _pool_size(n, *a, bool(ceil_mode)) for n, *a in zip(spatial, k, s, p, d, strict=True)
    )
    if any(o < 1 for o in out):
        raise ShapeError(
            f"{op}: output size {out} is too small: input {tuple(x.shape)}, kernel_size {k}, "
            f"stride {s}, padding {p}, dilation {d}"
        )
    return k, s, p, d, out


# ---------------------------------------------------------------------------------------------
# Array helpers (NumPy or CuPy through xp)


def _planes(x, nd):
    """``x`` as ``(planes, *spatial)``."""
    return x.reshape((-1,) + tuple(x.shape[-nd:]))


def _tail_pad(out, k, s, p, d, n):
    """How far the last window reaches past the input's end (negative: it stops short)."""
    return (out - 1) * s + d * (k - 1) + 1 - n - p


def _padded(xp, x2, lo, hi, fill):
    """``x2`` (planes, *spatial) padded by ``lo`` before and ``max(hi, 0)`` after each spatial
    dimension with ``fill``."""
    if not any(lo) and all(h <= 0 for h in hi):
        return x2
    shape = (x2.shape[0],) + tuple(
        a + n + max(b, 0) for a, n, b in zip(lo, x2.shape[1:], hi, strict=True)
    )
    buf = xp.full(shape, fill, dtype=x2.dtype)
    buf[(slice(None),) + tuple(slice(a, a + n) for a, n in zip(lo, x2.shape[1:], strict=True))] = x2
    return buf


def _windows(xp, xp_, out, k, s, d):
    """The strided view ``(planes, *out, *k)`` of every window of the padded ``xp_``."""
    st = xp_.strides
    nd = len(k)
    strides = (st[0],) + tuple(st[1 + i] * s[i] for i in range(nd))
    strides += tuple(st[1 + i] * d[i] for i in range(nd))
    return xp.lib.stride_tricks.as_strided(xp_, (xp_.shape[0],) + out + k, strides)


def _flat_index(xp, positions, spatial):
    """Flat per-plane indices from one integer array of positions per spatial dimension."""
    idx = positions[0]
    for pos, n in zip(positions[1:], spatial[1:], strict=True):
        idx = idx * n + pos
    return idx


def _scatter_planes(xp, gy, idx, shape, nd, unique):
    """Zeros of ``shape`` with ``gy`` added at the flat per-plane indices ``idx``."""
    spatial = tuple(shape[-nd:])
    plane = math.prod(spatial)
    g2 = gy.reshape(-1, math.prod(gy.shape[-nd:]) if gy.ndim else 1)
    i2 = idx.reshape(g2.shape)
    if unique:
        gx = xp.zeros((g2.shape[0], plane), dtype=gy.dtype)
        xp.put_along_axis(gx, i2, g2, axis=1)
        return gx.reshape(shape)
    # Overlapping windows may pick one element several times: add them up, in one pass.
    offsets = xp.arange(g2.shape[0], dtype=i2.dtype)[:, None] * plane
    gx = xp.bincount((i2 + offsets).ravel(), weights=g2.ravel(), minlength=g2.shape[0] * plane)
    return gx.astype(gy.dtype, copy=False).reshape(shape)


def _scatter_planes_differentiable(gy, idx, shape, nd):
    """:func:`_scatter_planes` with ferro ops (differentiable in ``gy``)."""
    idx = idx._data if isinstance(idx, TensorBase) else idx
    plane = math.prod(shape[-nd:])
    planes = math.prod(shape[:-nd])
    g2 = gy.reshape(planes, -1)
    zeros = wrap(xp_of(gy._data).zeros((planes, plane), dtype=gy.dtype))
    return scatter_add(zeros, 1, idx.reshape(planes, -1), g2).reshape(shape)


def _const(arr, like):
    """A constant NumPy array as a tensor of ``like``'s dtype, on its device."""
    return wrap(_on_device_of(np.ascontiguousarray(arr, dtype=like.dtype), like._data))


def _max_of_windows(xp, flat, nd, spatial, positions):
    """The max over the last axis of ``flat`` (planes, *out, K) and, as int64, the flat
    per-plane input index of each one's first occurrence; ``positions(i, kidx)`` maps the
    window offsets along dimension ``i`` to input positions (broadcast against ``out``)."""
    arg = flat.argmax(axis=-1)
    y = xp.take_along_axis(flat, arg[..., None], axis=-1)[..., 0]
    kshape = positions.kernel
    idx = None
    for i in range(nd):
        kidx = (arg // math.prod(kshape[i + 1 :])) % kshape[i]
        pos = positions(i, kidx)
        idx = pos if idx is None else idx * spatial[i] + pos
    return y, idx.astype(xp.int64, copy=False)


def _axis_grid(xp, size, i, nd):
    """``arange(size)`` shaped to broadcast along spatial axis ``i`` of ``(*out)``."""
    return xp.arange(size).reshape((-1,) + (1,) * (nd - 1 - i))


class _Positions:
    """Input positions of window offsets: sliding windows (``o * s - p + j * d``) or adaptive
    ones (a per-dimension table ``[o, j]``)."""

    def __init__(self, xp, kernel, out, stride=None, padding=None, dilation=None, tables=None):
        self.xp, self.kernel, self.out = xp, kernel, out
        self.stride, self.padding, self.dilation, self.tables = stride, padding, dilation, tables

    def __call__(self, i, kidx):
        o = _axis_grid(self.xp, self.out[i], i, len(self.out))
        if self.tables is not None:
            return self.tables[i][o, kidx]
        return o * self.stride[i] - self.padding[i] + kidx * self.dilation[i]


def _max_backward(ctx, gy):
    (idx,) = ctx.saved
    return _scatter_planes(ctx.xp, gy, idx, ctx.shape, ctx.nd, ctx.unique)


def _max_differentiable_backward(ctx, gy, gi=None):
    """Max pooling's backward with ferro ops: ``gy`` scatter-added through the saved indices."""
    (idx,) = ctx.saved
    return _scatter_planes_differentiable(gy, idx, ctx.shape, ctx.nd)


def _index_first_valid(xp, y, idx, out, k, s, p, d, spatial):
    """Point the indices of windows whose maximum is -inf at their first element inside the
    input (as PyTorch does): the argmax over the padded windows may have named padding."""
    where = xp.nonzero(y == -np.inf)
    if not where[0].size:
        return
    flat = 0
    for i in range(len(out)):
        start = where[1 + i] * s[i] - p[i]
        # The first offset j with start + j * d >= 0 (the window holds an element, so j < k).
        j = xp.maximum(-start + d[i] - 1, 0) // d[i]
        flat = flat * spatial[i] + start + j * d[i]
    idx[where] = flat


@register("max_pool")
class MaxPool:
    @staticmethod
    def forward(ctx, x, *, kernel_size, stride, padding, dilation, out_size):
        xp = ctx.xp
        k, s, p, d, out = kernel_size, stride, padding, dilation, out_size
        nd = len(k)
        spatial, lead = tuple(x.shape[-nd:]), tuple(x.shape[:-nd])
        fill = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
        hi = tuple(_tail_pad(*a) for a in zip(out, k, s, p, d, spatial, strict=True))
        win = _windows(xp, _padded(xp, _planes(x, nd), p, hi, fill), out, k, s, d)
        flat = win.reshape(win.shape[: 1 + nd] + (-1,))
        y, idx = _max_of_windows(xp, flat, nd, spatial, _Positions(xp, k, out, s, p, d))
        if fill == -np.inf and (any(p) or any(h > 0 for h in hi)):
            _index_first_valid(xp, y, idx, out, k, s, p, d, spatial)
        idx = idx.reshape(lead + out)
        ctx.save(idx)
        ctx.shape, ctx.nd = x.shape, nd
        # Windows that cannot overlap pick distinct elements: backward can assign, not add.
        ctx.unique = all(si >= di * (ki - 1) + 1 for si, di, ki in zip(s, d, k, strict=True))
        return y.reshape(lead + out), idx

    @staticmethod
    def backward(ctx, gy, gi):
        return _max_backward(ctx, gy)

    differentiable_backward = staticmethod(_max_differentiable_backward)


def _adaptive_bounds(n, out):
    """PyTorch's adaptive windows: ``[floor(o * n / out), ceil((o + 1) * n / out))``."""
    o = np.arange(out)
    return (o * n) // out, -((-(o + 1) * n) // out)


@register("adaptive_max_pool")
class AdaptiveMaxPool:
    @staticmethod
    def forward(ctx, x, *, out_size):
        xp = ctx.xp
        out, nd = out_size, len(out_size)
        spatial, lead = tuple(x.shape[-nd:]), tuple(x.shape[:-nd])
        tables, index = [], [slice(None)]
        for i, (n, m) in enumerate(zip(spatial, out, strict=True)):
            start, end = _adaptive_bounds(n, m)
            kmax = int((end - start).max())
            # Windows shorter than kmax repeat their last element: the max and its first
            # occurrence stay the same.
            table = np.minimum(start[:, None] + np.arange(kmax), end[:, None] - 1)
            tables.append(xp.asarray(table))
            shape = [1] * (2 * nd)
            shape[i], shape[nd + i] = m, kmax
            index.append(tables[-1].reshape(shape))
        win = _planes(x, nd)[tuple(index)]
        flat = win.reshape(win.shape[: 1 + nd] + (-1,))
        kernel = tuple(t.shape[1] for t in tables)
        y, idx = _max_of_windows(xp, flat, nd, spatial, _Positions(xp, kernel, out, tables=tables))
        idx = idx.reshape(lead + out)
        ctx.save(idx)
        ctx.shape, ctx.nd, ctx.unique = x.shape, nd, False
        return y.reshape(lead + out), idx

    @staticmethod
    def backward(ctx, gy, gi):
        return _max_backward(ctx, gy)

    differentiable_backward = staticmethod(_max_differentiable_backward)


# ---------------------------------------------------------------------------------------------
# Average pooling


def _axis_slice(ndim, axis, sl):
    return (slice(None),) * axis + (sl,)


def _avg_divisor(spatial, k, s, p, out, count_include_pad, divisor_override):
    """PyTorch's divisor of each output cell, a product of one count per dimension: a float,
    or a NumPy array of shape ``out`` where the counts differ."""
    if divisor_override is not None:
        return float(divisor_override)
    div = np.ones((), dtype=np.float64)
    for n, ki, si, pi, m in zip(spatial, k, s, p, out, strict=True):
        start = np.arange(m) * si - pi
        end = np.minimum(start + ki, n + pi)
        count = end - start if count_include_pad else np.minimum(end, n) - np.maximum(start, 0)
        div = np.multiply.outer(div, count.astype(np.float64))
    return float(div.flat[0]) if (div == div.flat[0]).all() else div


def _avg_differentiable_backward(ctx, gy):
    """The adjoint of the window sums as one scatter-add of ``gy / divisor`` into the padded
    input's windows, then the crop."""
    nd, k, s, p = ctx.nd, ctx.k, ctx.s, ctx.p
    out = tuple(gy.shape[-nd:])
    padded = ctx.padded_shape[1:]
    pos = []
    for i in range(nd):
        shape = [1] * (2 * nd)
        shape[i], shape[nd + i] = out[i], k[i]
        table = np.arange(out[i])[:, None] * s[i] + np.arange(k[i])
        pos.append(table.reshape(shape))
    idx = pos[0]
    for i in range(1, nd):
        idx = idx * padded[i] + pos[i]
    idx = np.broadcast_to(idx, out + k).reshape(-1)
    planes = math.prod(ctx.shape[:-nd])
    div = ctx.divisor
    g = gy.reshape(planes, -1) / (div if isinstance(div, float) else _const(div.reshape(-1), gy))
    kk = math.prod(k)
    g = g.reshape(planes, -1, 1).expand(planes, g.shape[1], kk).reshape(planes, -1)
    index = np.ascontiguousarray(np.broadcast_to(idx, (planes, idx.size)))
    gx = _scatter_planes_differentiable(g, _on_device_of(index, gy._data), (planes,) + padded, nd)
    spatial = tuple(ctx.shape[-nd:])
    crop = (slice(None),) + tuple(slice(a, a + n) for a, n in zip(p, spatial, strict=True))
    return gx[crop].reshape(ctx.shape)


def _avg_state(ctx, x, k, s, p, out, divisor):
    """Store what avg_pool's backwards read on ``ctx``; the padding past each dimension's end
    (:func:`_tail_pad`)."""
    nd = len(k)
    spatial = tuple(x.shape[-nd:])
    hi = tuple(
        _tail_pad(m, ki, si, pi, 1, n)
        for m, ki, si, pi, n in zip(out, k, s, p, spatial, strict=True)
    )
    padded = tuple(a + n + max(b, 0) for a, n, b in zip(p, spatial, hi, strict=True))
    ctx.padded_shape = (math.prod(x.shape[:-nd]),) + padded
    ctx.shape, ctx.nd, ctx.k, ctx.s, ctx.p = x.shape, nd, k, s, p
    ctx.divisor = divisor
    return hi


@register("avg_pool")
class AvgPool:
    @staticmethod
    def forward(ctx, x, *, kernel_size, stride, padding, out_size, divisor):
        xp = ctx.xp
        k, s, p, out = kernel_size, stride, padding, out_size
        nd = len(k)
        lead = tuple(x.shape[:-nd])
        hi = _avg_state(ctx, x, k, s, p, out, divisor)
        y = _padded(xp, _planes(x, nd), p, hi, 0)
        for i in range(nd):
            # The window sums along dimension i: k[i] strided slices added up.
            stop = s[i] * (out[i] - 1) + 1
            acc = y[_axis_slice(y.ndim, 1 + i, slice(0, stop, s[i]))].copy()
            for j in range(1, k[i]):
                acc += y[_axis_slice(y.ndim, 1 + i, slice(j, j + stop, s[i]))]
            y = acc
        div = divisor if isinstance(divisor, float) else xp.asarray(divisor, dtype=x.dtype)
        return (y / div).astype(x.dtype, copy=False).reshape(lead + out)

    @staticmethod
    def backward(ctx, gy):
        xp = ctx.xp
        nd, k, s, p = ctx.nd, ctx.k, ctx.s, ctx.p
        div = ctx.divisor if isinstance(ctx.divisor, float) else xp.asarray(ctx.divisor)
        g = (_planes(gy, nd) / div).astype(gy.dtype, copy=False)
        for i in range(nd):
            shape = list(g.shape)
            shape[1 + i] = ctx.padded_shape[1 + i]
            acc = xp.zeros(shape, dtype=gy.dtype)
            stop = s[i] * (g.shape[1 + i] - 1) + 1
            for j in range(k[i]):
                acc[_axis_slice(acc.ndim, 1 + i, slice(j, j + stop, s[i]))] += g
            g = acc
        spatial = tuple(ctx.shape[-nd:])
        crop = (slice(None),) + tuple(slice(a, a + n) for a, n in zip(p, spatial, strict=True))
        return g[crop].reshape(ctx.shape)

    differentiable_backward = staticmethod(_avg_differentiable_backward)


# ---------------------------------------------------------------------------------------------
# Adaptive average pooling


def _adaptive_matrix(n, out):
    """The ``(out, n)`` matrix averaging each adaptive window."""
    start, end = _adaptive_bounds(n, out)
    i = np.arange(n)
    inside = (i >= start[:, None]) & (i < end[:, None])
    return inside / (end - start)[:, None]


def _even(spatial, out):
    return all(n % m == 0 for n, m in zip(spatial, out, strict=True))


def _adaptive_avg_differentiable_backward(ctx, gy):
    """The same contraction with each dimension's averaging matrix, as ferro matmuls."""
    nd = ctx.nd
    spatial = tuple(ctx.shape[-nd:])
    out = tuple(gy.shape[-nd:])
    g = gy.reshape((-1,) + out)
    for i, (n, m) in enumerate(zip(spatial, out, strict=True)):
        a = _const(_adaptive_matrix(n, m), gy)
        g = (g.movedim(1 + i, -1) @ a).movedim(-1, 1 + i)
    return g.reshape(ctx.shape)


@register("adaptive_avg_pool")
class AdaptiveAvgPool:
    @staticmethod
    def forward(ctx, x, *, out_size):
        xp = ctx.xp
        out, nd = out_size, len(out_size)
        spatial, lead = tuple(x.shape[-nd:]), tuple(x.shape[:-nd])
        ctx.shape, ctx.nd = x.shape, nd
        x2 = _planes(x, nd)
        if xp is np and all(m == 1 for m in out):  # global: rows on both cores
            flat = x2.reshape(x2.shape[0], -1)
            y = row_sums(flat, 1 / flat.shape[1]) if flat.shape[1] else NotImplemented
            if y is not NotImplemented:
                return y.reshape(lead + out)
        if _even(spatial, out):
            # Every window holds the same number of elements: one reshape, one mean.
            split = sum(((m, n // m) for n, m in zip(spatial, out, strict=True)), ())
            y = x2.reshape((x2.shape[0],) + split).mean(axis=tuple(range(2, 2 + 2 * nd, 2)))
            return y.astype(x.dtype, copy=False).reshape(lead + out)
        y = x2
        for i, (n, m) in enumerate(zip(spatial, out, strict=True)):
            a = xp.asarray(_adaptive_matrix(n, m), dtype=x.dtype)
            y = xp.moveaxis(xp.moveaxis(y, 1 + i, -1) @ a.T, -1, 1 + i)
        return y.reshape(lead + out)

    @staticmethod
    def backward(ctx, gy):
        xp, nd = ctx.xp, ctx.nd
        spatial = tuple(ctx.shape[-nd:])
        out = tuple(gy.shape[-nd:])
        g = _planes(gy, nd)
        if _even(spatial, out):
            size = math.prod(n // m for n, m in zip(spatial, out, strict=True))
            split = sum(((m, 1) for m in out), ())
            full = sum(((m, n // m) for n, m in zip(spatial, out, strict=True)), ())
            g = xp.broadcast_to(g.reshape((g.shape[0],) + split) / size, (g.shape[0],) + full)
            return g.astype(gy.dtype, copy=False).reshape(ctx.shape)
        for i, (n, m) in enumerate(zip(spatial, out, strict=True)):
            a = xp.asarray(_adaptive_matrix(n, m), dtype=gy.dtype)
            g = xp.moveaxis(xp.moveaxis(g, 1 + i, -1) @ a, -1, 1 + i)
        return g.reshape(ctx.shape)

    differentiable_backward = staticmethod(_adaptive_avg_differentiable_backward)


# ---------------------------------------------------------------------------------------------
# GPU overrides (Note [Fused overrides]): average and adaptive pooling have kernels on the GPU
# only (ferro.cuda.pooling); their forwards leave ctx as the generic ones do, and a backward
# whose arrays the kernels do not take runs the generic code.


def avg_pool_override(backend):
    """``(forward, backward)`` of avg_pool on ``backend``'s window kernels."""
    fwd, bwd, accepts = backend.avg_pool_fwd, backend.avg_pool_bwd, backend.accepts

    def forward(ctx, x, *, kernel_size, stride, padding, out_size, divisor):
        if not accepts((x,)):
            return NotImplemented
        _avg_state(ctx, x, kernel_size, stride, padding, out_size, divisor)
        return fwd(x, kernel_size, stride, padding, out_size, divisor)

    def backward(ctx, gy):
        gy = ctx.xp.ascontiguousarray(gy)
        if not accepts((gy,)):
            return AvgPool.backward(ctx, gy)
        return bwd(gy, ctx.shape, ctx.k, ctx.s, ctx.p, ctx.divisor)

    return forward, backward


def adaptive_pool_override(op):
    """The adapter of adaptive average (``op`` :class:`AdaptiveAvgPool`) or max pooling
    (:class:`AdaptiveMaxPool`) on the backend's ``adaptive_<avg|max>_pool_<fwd|bwd>``."""
    is_max = op is AdaptiveMaxPool
    name = "adaptive_max_pool" if is_max else "adaptive_avg_pool"

    def adapter(backend):
        fwd_kernel, bwd_kernel = getattr(backend, f"{name}_fwd"), getattr(backend, f"{name}_bwd")
        accepts = backend.accepts

        def forward(ctx, x, *, out_size):
            if not accepts((x,)):
                return NotImplemented
            ctx.shape, ctx.nd = x.shape, len(out_size)
            if not is_max:
                return fwd_kernel(x, out_size)
            y, idx = fwd_kernel(x, out_size)
            ctx.save(idx)
            ctx.unique = False
            return y, idx

        def backward(ctx, gy, *gi):
            gy = ctx.xp.ascontiguousarray(gy)
            if not accepts((gy,)):
                return op.backward(ctx, gy, *gi)
            if not is_max:
                return bwd_kernel(gy, ctx.shape, ctx.nd)
            idx = ctx.xp.ascontiguousarray(ctx.saved[0])
            return bwd_kernel(gy, idx, ctx.shape, ctx.nd)

        return forward, backward

    return adapter


# ---------------------------------------------------------------------------------------------
# Max unpooling


def _unpool_differentiable_backward(ctx, gy):
    """Max-unpooling's backward with ferro ops: ``gy`` gathered at the indices."""
    (indices,) = ctx.saved
    indices = indices._data if isinstance(indices, TensorBase) else indices
    g2 = gy.reshape(-1, math.prod(gy.shape[-ctx.nd :]))
    gx = gather(g2, 1, indices.reshape(g2.shape[0], -1))
    return gx.reshape(ctx.shape), None


@register("max_unpool", same_dtype=False)
class MaxUnpool:
    @staticmethod
    def forward(ctx, x, indices, *, out_size):
        xp, nd = ctx.xp, len(out_size)
        lead = tuple(x.shape[:-nd])
        x2 = x.reshape(-1, math.prod(x.shape[-nd:]))
        i2 = indices.reshape(x2.shape)
        y = xp.zeros((x2.shape[0], math.prod(out_size)), dtype=x.dtype)
        xp.put_along_axis(y, i2, x2, axis=1)
        ctx.save(indices)
        ctx.shape, ctx.nd = x.shape, nd
        return y.reshape(lead + out_size)

    @staticmethod
    def backward(ctx, gy):
        (indices,) = ctx.saved
        g2 = gy.reshape(-1, math.prod(gy.shape[-ctx.nd :]))
        gx = ctx.xp.take_along_axis(g2, indices.reshape(g2.shape[0], -1), axis=1)
        return gx.reshape(ctx.shape), None

    differentiable_backward = staticmethod(_unpool_differentiable_backward)


# ---------------------------------------------------------------------------------------------
# Public functions


def _max_pool(nd, x, kernel_size, stride, padding, dilation, ceil_mode, return_indices):
    op = f"max_pool{nd}d"
    _check_input(x, nd, op, floating=False)
    k, s, p, d, out = _pool_geometry(x, nd, op, kernel_size, stride, padding, dilation, ceil_mode)
    y, idx = apply(MaxPool, x, kernel_size=k, stride=s, padding=p, dilation=d, out_size=out)
    return (y, idx) if return_indices else y


def max_pool1d(
    input,  # noqa: A002 - PyTorch's name
    kernel_size,
    stride=None,
    padding=0,
    dilation=1,
    ceil_mode: bool = False,
    return_indices: bool = False,
):
    """1-D max pooling over ``(N, C, L)`` or ``(C, L)``; ``stride`` defaults to
    ``kernel_size``, padding is implicit ``-inf``. With ``return_indices``: ``(values,
    indices)``, indices int64 and flat within each plane (as :func:`max_unpool1d` takes them).

    Gradient: gx = gy added at each window's first maximal element (the saved indices).
    """
    return _max_pool(1, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool2d(
    input,  # noqa: A002 - PyTorch's name
    kernel_size,
    stride=None,
    padding=0,
    dilation=1,
    ceil_mode: bool = False,
    return_indices: bool = False,
):
    """2-D max pooling over ``(N, C, H, W)`` or ``(C, H, W)``; see :func:`max_pool1d`.
    Indices are flat in each ``H x W`` plane (``h * W + w``), as PyTorch's.

    Example: ``max_pool2d(x, 2)`` halves H and W.

    Gradient: gx = gy added at each window's first maximal element (the saved indices).
    """
    return _max_pool(2, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool3d(
    input,  # noqa: A002 - PyTorch's name
    kernel_size,
    stride=None,
    padding=0,
    dilation=1,
    ceil_mode: bool = False,
    return_indices: bool = False,
):
    """3-D max pooling over ``(N, C, D, H, W)`` or ``(C, D, H, W)``; see :func:`max_pool1d`.

    Gradient: gx = gy added at each window's first maximal element (the saved indices).
    """
    return _max_pool(3, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def _avg_pool(nd, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    op = f"avg_pool{nd}d"
    _check_input(x, nd, op)
    k, s, p, _, out = _pool_geometry(x, nd, op, kernel_size, stride, padding, 1, ceil_mode)
    if divisor_override is not None:
        divisor_override = _int(divisor_override, op, "divisor_override")
        if divisor_override == 0:
            raise ArgumentError(f"{op}: divisor_override must be non-zero")
    spatial = tuple(x.shape[-nd:])
    div = _avg_divisor(spatial, k, s, p, out, bool(count_include_pad), divisor_override)
    return apply(AvgPool, x, kernel_size=k, stride=s, padding=p, out_size=out, divisor=div)


def avg_pool1d(
    input,  # noqa: A002 - PyTorch's name
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
):
    """1-D average pooling over ``(N, C, L)`` or ``(C, L)``; ``stride`` defaults to
    ``kernel_size``, padding is zeros, counted in the divisor when ``count_include_pad``
    (windows that reach past the padding under ``ceil_mode`` never count that part).

    Gradient: gx = the sum over the windows holding an element of gy / divisor.
    """
    return _avg_pool(1, input, kernel_size, stride, padding, ceil_mode, count_include_pad, None)


def avg_pool2d(
    input,  # noqa: A002 - PyTorch's name
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override=None,
):
    """2-D average pooling over ``(N, C, H, W)`` or ``(C, H, W)``; see :func:`avg_pool1d`.
    ``divisor_override`` replaces every window's divisor.

    Gradient: gx = the sum over the windows holding an element of gy / divisor.
    """
    return _avg_pool(
        2, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
    )


def avg_pool3d(
    input,  # noqa: A002 - PyTorch's name
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override=None,
):
    """3-D average pooling over ``(N, C, D, H, W)`` or ``(C, D, H, W)``; see
    :func:`avg_pool2d`.

    Gradient: gx = the sum over the windows holding an element of gy / divisor.
    """
    return _avg_pool(
        3, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
    )


def _adaptive_size(x, nd, output_size, op):
    """The output's spatial size; ``None`` entries keep the input's size."""
    if isinstance(output_size, (tuple, list)):
        sizes = tuple(output_size)
        if len(sizes) == 1:
            sizes *= nd
    else:
        sizes = (output_size,) * nd
    if len(sizes) != nd:
        raise ArgumentError(f"{op}: output_size must be an int or {nd} ints, got {output_size}")
    spatial = tuple(x.shape[-nd:])
    out = tuple(
        n if m is None else _int(m, op, "output_size") for n, m in zip(spatial, sizes, strict=True)
    )
    if any(m < 1 for m in out):
        raise ArgumentError(f"{op}: output_size must be positive, got {out}")
    return out


def _adaptive_avg(nd, x, output_size):
    op = f"adaptive_avg_pool{nd}d"
    _check_input(x, nd, op)
    return apply(AdaptiveAvgPool, x, out_size=_adaptive_size(x, nd, output_size, op))


def adaptive_avg_pool1d(input, output_size):  # noqa: A002 - PyTorch's name
    """Average pooling of ``(N, C, L)`` or ``(C, L)`` to length ``output_size``: cell ``o``
    averages ``[floor(o L / out), ceil((o + 1) L / out))``.

    Gradient: gx = gy / (window size) spread over each window holding the element.
    """
    return _adaptive_avg(1, input, output_size)


def adaptive_avg_pool2d(input, output_size):  # noqa: A002 - PyTorch's name
    """Adaptive average pooling of ``(N, C, H, W)`` or ``(C, H, W)`` to ``output_size`` (an
    int, or a pair whose ``None`` keeps that size); see :func:`adaptive_avg_pool1d`.

    Example: ``adaptive_avg_pool2d(x, 1)`` is the global average over H and W.

    Gradient: gx = gy / (window size) spread over each window holding the element.
    """
    return _adaptive_avg(2, input, output_size)


def adaptive_avg_pool3d(input, output_size):  # noqa: A002 - PyTorch's name
    """Adaptive average pooling of ``(N, C, D, H, W)`` or ``(C, D, H, W)``; see
    :func:`adaptive_avg_pool2d`.

    Gradient: gx = gy / (window size) spread over each window holding the element.
    """
    return _adaptive_avg(3, input, output_size)


def _adaptive_max(nd, x, output_size, return_indices):
    op = f"adaptive_max_pool{nd}d"
    _check_input(x, nd, op, floating=False)
    y, idx = apply(AdaptiveMaxPool, x, out_size=_adaptive_size(x, nd, output_size, op))
    return (y, idx) if return_indices else y


def adaptive_max_pool1d(input, output_size, return_indices: bool = False):  # noqa: A002
    """Max pooling of ``(N, C, L)`` or ``(C, L)`` over PyTorch's adaptive windows (see
    :func:`adaptive_avg_pool1d`); with ``return_indices``: ``(values, indices)``.

    Gradient: gx = gy added at each window's first maximal element (the saved indices).
    """
    return _adaptive_max(1, input, output_size, return_indices)


def adaptive_max_pool2d(input, output_size, return_indices: bool = False):  # noqa: A002
    """Adaptive max pooling of ``(N, C, H, W)`` or ``(C, H, W)``; see
    :func:`adaptive_max_pool1d` and :func:`adaptive_avg_pool2d`.

    Gradient: gx = gy added at each window's first maximal element (the saved indices).
    """
    return _adaptive_max(2, input, output_size, return_indices)


def adaptive_max_pool3d(input, output_size, return_indices: bool = False):  # noqa: A002
    """Adaptive max pooling of ``(N, C, D, H, W)`` or ``(C, D, H, W)``; see
    :func:`adaptive_max_pool1d`.

    Gradient: gx = gy added at each window's first maximal element (the saved indices).
    """
    return _adaptive_max(3, input, output_size, return_indices)


def _max_unpool(nd, x, indices, kernel_size, stride, padding, output_size):
    op = f"max_unpool{nd}d"
    _check_input(x, nd, op)
    k = _ntuple(kernel_size, nd, op, "kernel_size", 1)
    s = k if stride is None or (isinstance(stride, (tuple, list)) and not stride) else stride
    s = _ntuple(s, nd, op, "stride", 1)
    p = _ntuple(padding, nd, op, "padding", 0)
    spatial = tuple(x.shape[-nd:])
    default = tuple(
        (n - 1) * si - 2 * pi + ki for n, si, pi, ki in zip(spatial, s, p, k, strict=True)
    )
    if output_size is None:
        out = default
    else:
        sizes = tuple(_int(m, op, "output_size") for m in output_size)
        if len(sizes) == nd + 2 or (len(sizes) == nd + 1 and x.ndim == nd + 1):
            sizes = sizes[-nd:]
        if len(sizes) != nd:
            raise ShapeError(f"{op}: output_size must have {nd} spatial sizes, got {output_size}")
        low = tuple(dm - si + 1 for dm, si in zip(default, s, strict=True))
        high = tuple(dm + si - 1 for dm, si in zip(default, s, strict=True))
        if any(not a <= m <= b for a, m, b in zip(low, sizes, high, strict=True)):
            raise ShapeError(f"{op}: output_size {sizes} must lie between {low} and {high}")
        out = sizes
    if any(m < 1 for m in out):
        raise ShapeError(f"{op}: output size {out} is too small for input {tuple(x.shape)}")
    operand, idx = _index_operand(indices, x, op)
    if tuple(idx.shape) != tuple(x.shape):
        raise ShapeError(
            f"{op}: indices of shape {tuple(idx.shape)} must match the input's {tuple(x.shape)}"
        )
    plane = math.prod(out)
    if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= plane):
        raise IndexOutOfRangeError(
            f"{op}: indices must lie in [0, {plane}) for output size {out}, got values in "
            f"[{int(idx.min())}, {int(idx.max())}]"
        )
    if idx.dtype != np.int64:
        operand = idx = idx.astype(np.int64)
    return apply(MaxUnpool, x, operand, out_size=out)


def max_unpool1d(input, indices, kernel_size, stride=None, padding=0, output_size=None):  # noqa: A002
    """The partial inverse of :func:`max_pool1d`: zeros of the pooled input's size with each
    value put at its index (``indices`` as ``max_pool1d(..., return_indices=True)`` gives them).

    Gradient: gx = gy gathered at ``indices``.
    """
    return _max_unpool(1, input, indices, kernel_size, stride, padding, output_size)


def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None):  # noqa: A002
    """The partial inverse of :func:`max_pool2d`; see :func:`max_unpool1d`.

    Gradient: gx = gy gathered at ``indices``.
    """
    return _max_unpool(2, input, indices, kernel_size, stride, padding, output_size)


def max_unpool3d(input, indices, kernel_size, stride=None, padding=0, output_size=None):  # noqa: A002
    """The partial inverse of :func:`max_pool3d`; see :func:`max_unpool1d`.

    Gradient: gx = gy gathered at ``indices``.
    """
    return _max_unpool(3, input, indices, kernel_size, stride, padding, output_size)


def _lp_pool(nd, x, norm_type, kernel_size, stride, ceil_mode):
    """PyTorch's composition: ``(sign(a) * relu(|a|) * prod(k)) ** (1 / p)`` with ``a`` the
    average of ``x ** p`` over the windows."""
    from ferro.ops.activation import relu
    from ferro.ops.elementwise import abs as _abs
    from ferro.ops.elementwise import real_arg, sign

    op = f"lp_pool{nd}d"
    p = real_arg(norm_type, "norm_type", op)
    _check_input(x, nd, op)
    k = _ntuple(kernel_size, nd, op, "kernel_size", 1)
    a = _avg_pool(nd, x**p, k, stride, 0, ceil_mode, True, None)
    return (sign(a) * relu(_abs(a)) * math.prod(k)) ** (1.0 / p)


def lp_pool1d(input, norm_type, kernel_size, stride=None, ceil_mode: bool = False):  # noqa: A002
    """Power-average pooling: ``(sum over the window of x**p) ** (1/p)`` over ``(N, C, L)`` or
    ``(C, L)`` (``p = norm_type``; p = 1 is sum pooling, large p approaches max pooling).

    Gradient: through the composition (x**p, window sums, the 1/p power).
    """
    return _lp_pool(1, input, norm_type, kernel_size, stride, ceil_mode)


def lp_pool2d(input, norm_type, kernel_size, stride=None, ceil_mode: bool = False):  # noqa: A002
    """Power-average pooling over ``(N, C, H, W)`` or ``(C, H, W)``; see :func:`lp_pool1d`.

    Gradient: through the composition (x**p, window sums, the 1/p power).
    """
    return _lp_pool(2, input, norm_type, kernel_size, stride, ceil_mode)


def lp_pool3d(input, norm_type, kernel_size, stride=None, ceil_mode: bool = False):  # noqa: A002
    """Power-average pooling over ``(N, C, D, H, W)`` or ``(C, D, H, W)``; see
    :func:`lp_pool1d`.

    Gradient: through the composition (x**p, window sums, the 1/p power).
    """
    return _lp_pool(3, input, norm_type, kernel_size, stride, ceil_mode)


def _shuffle_factor(factor, x, op, what):
    if not isinstance(x, TensorBase):
        raise ArgumentTypeError(f"{op}: input must be a Tensor, got {type(x).__name__}")
    r = _int(factor, op, what)
    if r < 1:
        raise ArgumentError(f"{op}: {what} must be positive, got {r}")
    if x.ndim < 3:
        raise ShapeError(f"{op}: expected an input of at least 3 dimensions, got {tuple(x.shape)}")
    return r


def pixel_shuffle(input, upscale_factor: int):  # noqa: A002 - PyTorch's name
    """Rearrange ``(*, C r^2, H, W)`` into ``(*, C, H r, W r)`` (sub-pixel convolution's
    upsampling): ``out[c, h r + i, w r + j] = in[c r^2 + i r + j, h, w]``.

    Gradient: gx = gy rearranged back (pixel_unshuffle of gy).
    """
    r = _shuffle_factor(upscale_factor, input, "pixel_shuffle", "upscale_factor")
    *lead, c, h, w = input.shape
    if c % (r * r):
        raise ShapeError(
            f"pixel_shuffle: channels ({c}) must be divisible by upscale_factor**2 ({r * r}), "
            f"got shape {tuple(input.shape)}"
        )
    n = len(lead)
    y = input.reshape(*lead, c // (r * r), r, r, h, w)
    y = y.permute(*range(n), n, n + 3, n + 1, n + 4, n + 2)
    return y.reshape(*lead, c // (r * r), h * r, w * r)


def pixel_unshuffle(input, downscale_factor: int):  # noqa: A002 - PyTorch's name
    """Rearrange ``(*, C, H r, W r)`` into ``(*, C r^2, H, W)``, the inverse of
    :func:`pixel_shuffle`.

    Gradient: gx = gy rearranged back (pixel_shuffle of gy).
    """
    r = _shuffle_factor(downscale_factor, input, "pixel_unshuffle", "downscale_factor")
    *lead, c, h, w = input.shape
    if h % r or w % r:
        raise ShapeError(
            f"pixel_unshuffle: height and width must be divisible by downscale_factor ({r}), "
            f"got shape {tuple(input.shape)}"
        )
    n = len(lead)
    y = input.reshape(*lead, c, h // r, r, w // r, r)
    y = y.permute(*range(n), n, n + 2, n + 4, n + 1, n + 3)
    return y.reshape(*lead, c * r * r, h // r, w // r)


# The family's public functions (ferro.ops exports their union): a new op's name goes here.
__all__ = [
    "adaptive_avg_pool1d",
    "adaptive_avg_pool2d",
    "adaptive_avg_pool3d",
    "adaptive_max_pool1d",
    "adaptive_max_pool2d",
    "adaptive_max_pool3d",
    "avg_pool1d",
    "avg_pool2d",
    "avg_pool3d",
    "lp_pool1d",
    "lp_pool2d",
    "lp_pool3d",
    "max_pool1d",
    "max_pool2d",
    "max_pool3d",
    "max_unpool1d",
    "max_unpool2d",
    "max_unpool3d",
    "pixel_shuffle",
    "pixel_unshuffle",
]
