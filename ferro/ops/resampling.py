"""Resampling: ``interpolate`` (and its ``upsample`` aliases), ``grid_sample``, ``affine_grid``
and ``deform_conv2d`` (torchvision's deformable convolution), in PyTorch's layouts.

``interpolate`` is separable: each spatial axis is resampled by a constant (out, in) matrix
built on the host from PyTorch's exact index and weight formulas (a gather for the nearest
modes), so forward is one matrix product per axis (cuBLAS on the GPU) and backward the
products with the transposes, as ``jax.image.resize`` does. ``grid_sample`` and
``deform_conv2d`` sample bilinearly at computed coordinates: a gather from the flattened input
at the corners of each sample, and in backward the transpose, a scatter-add (``xp.add.at``)
into zeros. Each op saves only its inputs (and integer shapes/parameters): the corner indices
and weights are recomputed in backward, so the same backward source also serves a
differentiable namespace (Note [ctx contract], higher-order gradients).
"""

from __future__ import annotations

import functools
import itertools
import math
import numbers
import types

import numpy as np

from ferro.backend import add_at, device_of, move, xp_of
from ferro.errors import (
    ArgumentError,
    ArgumentTypeError,
    DtypeError,
    NotSupportedError,
    ShapeError,
)
from ferro.ops.linalg import matmul
from ferro.ops.registry import apply, array_of, register
from ferro.ops.shape import gather, index_select, scatter_add, stack

# --------------------------------------------------------------------------------------------
# interpolate
# --------------------------------------------------------------------------------------------

#: Modes and the number of spatial dimensions each takes (None: 1, 2 or 3).
_MODES = {
    "nearest": None,
    "nearest-exact": None,
    "area": None,
    "linear": 1,
    "bilinear": 2,
    "bicubic": 2,
    "trilinear": 3,
}
_LINEAR = ("linear", "bilinear", "trilinear")
_NEAREST = ("nearest", "nearest2d", "nearest-exact")
_INTERPOLATING = ("linear", "bilinear", "bicubic", "trilinear")
_CUBIC_A = -0.75  # PyTorch's (and OpenCV's) bicubic convolution coefficient


def _scale_value(scale, n_in, n_out):
    """PyTorch's ``compute_scales_value``: 1/scale_factor when one was given, else in/out."""
    return 1.0 / scale if scale is not None and scale > 0 else n_in / n_out


def _source_coords(n_in, n_out, align_corners, scale, cubic):
    """PyTorch's ``area_pixel_compute_source_index`` for every output index, in float64."""
    dst = np.arange(n_out, dtype=np.float64)
    if align_corners:
        s = (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
        return s * dst
    src = _scale_value(scale, n_in, n_out) * (dst + 0.5) - 0.5
    return src if cubic else np.maximum(src, 0.0)


def _nearest_index(mode, n_in, n_out, scale, wide):
    """The source index of each output index as PyTorch's CPU kernels compute it:
    ``floor(dst * scale)`` (``nearest``) or ``floor((dst + 0.5) * scale)`` (``nearest-exact``),
    in float32 for float32 data and in float64 (dividing by the scale factor) for float64
    (``wide``): the two round exact integer boundaries differently (``69 / 2.3``)."""
    if mode == "nearest2d":  # PyTorch's 2-D kernel keeps nearest_idx's two shortcuts
        if n_out == n_in:
            return np.arange(n_out)
        if n_out == 2 * n_in:
            return np.arange(n_out) >> 1
    off = 0.5 if mode == "nearest-exact" else 0.0
    if wide:
        dst = np.arange(n_out) + off
        src = dst / scale if scale is not None and scale > 0 else dst * (n_in / n_out)
    else:
        dst = np.arange(n_out, dtype=np.float32) + np.float32(off)
        src = dst * np.float32(_scale_value(scale, n_in, n_out))
    return np.minimum(np.floor(src).astype(np.int64), n_in - 1)


def _cubic_weights(t):
    """The four cubic-convolution weights of taps -1, 0, 1, 2 at fractional offset ``t``."""
    a = _CUBIC_A

    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return far(t + 1), near(t), near(1 - t), far(2 - t)


#: Axes with at most this many (out * in) matrix entries are resampled by one GEMM with the
#: dense matrix (BLAS outruns a few NumPy passes there); larger ones by their 1 to 4 taps per
#: output (a gather each), so a big image costs O(out) per row, not O(out * in).
_DENSE_MAX = 1 << 16


@functools.lru_cache(maxsize=64)
def _axis_taps(mode, n_in, n_out, align_corners, scale, wide):
    """``(index, weight)``, each (taps, n_out): output o of the axis is
    ``sum_k weight[k, o] * input[index[k, o]]`` (read-only, cached)."""
    rows = np.arange(n_out)
    if mode in _NEAREST:
        idx = _nearest_index(mode, n_in, n_out, scale, wide)[None]
        w = np.ones((1, n_out))
    elif mode == "area":
        # adaptive average pooling: out i averages inputs floor(i*in/out) .. ceil((i+1)*in/out)
        start = rows * n_in // n_out
        end = ((rows + 1) * n_in + n_out - 1) // n_out
        k = np.arange(int((end - start).max()) if n_out else 1)[:, None]
        idx = np.minimum(start + k, np.maximum(end - 1, 0))
        w = np.where(start + k < end, 1.0 / np.maximum(end - start, 1), 0.0)
    elif mode == "bicubic":
        src = _source_coords(n_in, n_out, align_corners, scale, cubic=True)
        i0 = np.floor(src)
        idx = np.stack([np.clip(i0.astype(np.int64) - 1 + k, 0, n_in - 1) for k in range(4)])
        w = np.stack(_cubic_weights(src - i0))
    else:
        src = _source_coords(n_in, n_out, align_corners, scale, cubic=False)
        i0 = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
        lam = np.clip(src - i0, 0.0, 1.0)
        idx = np.stack([i0, np.minimum(i0 + 1, n_in - 1)])
        w = np.stack([1.0 - lam, lam])
    idx, w = idx.astype(np.int64), w.astype(np.float64)
    idx.flags.writeable = w.flags.writeable = False
    return idx, w


@functools.lru_cache(maxsize=64)
def _axis_taps_transposed(mode, n_in, n_out, align_corners, scale, wide):
    """The taps of the transpose (in, out): ``(index, weight)``, each (taps, n_in), input i
    receiving ``sum_k weight[k, i] * gy[index[k, i]]``; padded with zero weights. The matrix
    is banded, so its transpose is too: backward is gathers as well, not a scatter."""
    idx, w = _axis_taps(mode, n_in, n_out, align_corners, scale, wide)
    src = idx.reshape(-1)
    dst = np.broadcast_to(np.arange(n_out), idx.shape).reshape(-1)
    order = np.argsort(src, kind="stable")
    src, dst, wt = src[order], dst[order], w.reshape(-1)[order]
    counts = np.bincount(src, minlength=n_in)
    slot = np.arange(src.size) - np.repeat(np.cumsum(counts) - counts, counts)
    tidx = np.zeros((max(int(counts.max()) if n_in else 1, 1), n_in), dtype=np.int64)
    tw = np.zeros(tidx.shape)
    tidx[slot, src] = dst
    tw[slot, src] = wt
    tidx.flags.writeable = tw.flags.writeable = False
    return tidx, tw


@functools.lru_cache(maxsize=64)
def _axis_matrix(mode, n_in, n_out, align_corners, scale, dtype):
    """The (n_out, n_in) matrix that resamples one axis (read-only, cached)."""
    idx, w = _axis_taps(mode, n_in, n_out, align_corners, scale, np.dtype(dtype).itemsize == 8)
    m = np.zeros((n_out, n_in), dtype=np.float64)
    rows = np.arange(n_out)
    for k in range(idx.shape[0]):
        np.add.at(m, (rows, idx[k]), w[k])
    m = m.astype(dtype)
    m.flags.writeable = False
    return m


def _resample_axis(xp, y, step, transpose=False):
    """Axis ``step[0]`` of ``y`` resampled by the plan step (or by its transpose: backward)."""
    axis, mode, n_in, n_out, align, scale = step
    if n_in * n_out <= _DENSE_MAX:
        m = _axis_matrix(mode, n_in, n_out, align, scale, np.dtype(y.dtype).str)
        return _along_axis(xp, y, xp.asarray(m.T if transpose else m), axis)
    taps = _axis_taps_transposed if transpose else _axis_taps
    idx, w = taps(mode, n_in, n_out, align, scale, np.dtype(y.dtype).itemsize == 8)
    bshape = [1] * y.ndim
    bshape[axis] = idx.shape[1]
    out = 0
    for k in range(idx.shape[0]):
        wk = xp.asarray(w[k].astype(y.dtype).reshape(bshape))
        out = out + xp.take(y, xp.asarray(idx[k]), axis=axis) * wk
    return out


@functools.lru_cache(maxsize=512)
def _is_identity(mode, n, align_corners, scale):
    return bool((_axis_matrix(mode, n, n, align_corners, scale, "<f8") == np.eye(n)).all())


@functools.lru_cache(maxsize=512)
def _axis_index(mode, n_in, n_out, scale, wide):
    idx = _nearest_index(mode, n_in, n_out, scale, wide)
    idx.flags.writeable = False
    return idx


def _along_axis(xp, y, m, axis):
    """``y`` with axis ``axis`` multiplied by the matrix ``m`` (out, in): one batched GEMM,
    with no transpose of ``y`` (the axis in the middle is the row axis of ``m @ y3``)."""
    shape = y.shape
    if axis == len(shape) - 1:
        return xp.matmul(y, m.T)
    lead = math.prod(shape[:axis])
    y3 = y.reshape(lead, shape[axis], math.prod(shape[axis + 1 :]))
    return xp.matmul(m, y3).reshape(shape[:axis] + (m.shape[0],) + shape[axis + 1 :])


#: The namespace :func:`_along_axis` needs, over Tensors.
_TENSOR_OPS = types.SimpleNamespace(matmul=matmul)


def _interpolate_differentiable_backward(ctx, gy):
    """Interpolate's backward in differentiable ferro ops: ``gy`` times each axis matrix's
    transpose (``matmul`` with constant arrays) or, on large axes, the transpose's taps
    (``index_select``); linear in the Tensor ``gy``."""
    g = gy
    device = device_of(array_of(g))
    for step in reversed(ctx.plan):
        axis, mode, n_in, n_out, align, scale = step
        if n_in * n_out <= _DENSE_MAX:
            m = _axis_matrix(mode, n_in, n_out, align, scale, np.dtype(g.dtype).str)
            g = _along_axis(_TENSOR_OPS, g, move(np.ascontiguousarray(m.T), device), axis)
            continue
        wide = np.dtype(g.dtype).itemsize == 8
        idx, w = _axis_taps_transposed(mode, n_in, n_out, align, scale, wide)
        bshape = [1] * g.ndim
        bshape[axis] = n_in
        out = 0
        for k in range(idx.shape[0]):
            wk = move(w[k].astype(g.dtype).reshape(bshape), device)
            out = out + index_select(g, axis, move(idx[k], device)) * wk
        g = out
    return g


@register("interpolate")
class Interpolate:
    """Separable resampling: per spatial axis a gather (nearest modes) or a product with the
    axis's (out, in) matrix; backward multiplies ``gy`` by each matrix's transpose.

    ``plan`` holds, per resampled axis, ``(axis, mode, n_in, n_out, align_corners, scale)``:
    constants of the shapes, so nothing is saved.
    """

    @staticmethod
    def forward(ctx, x, *, plan):
        xp = ctx.xp
        ctx.plan = plan
        y = x
        for step in plan:
            axis, mode, n_in, n_out, _, scale = step
            if mode in _NEAREST:
                wide = np.dtype(y.dtype).itemsize == 8
                idx = _axis_index(mode, n_in, n_out, scale, wide)
                y = xp.take(y, xp.asarray(idx), axis=axis)
            else:
                y = _resample_axis(xp, y, step)
        return y

    @staticmethod
    def backward(ctx, gy):
        xp = ctx.xp
        g = gy
        for step in reversed(ctx.plan):
            g = _resample_axis(xp, g, step, transpose=True)
        return g

    differentiable_backward = staticmethod(_interpolate_differentiable_backward)


@functools.lru_cache(maxsize=128)
def _device_taps(step, transpose, dtype, device):
    """``(index, weight)`` of a plan step (of its transpose: backward) on ``device``, weight in
    ``dtype``: the tables :func:`_resample_axis` reads, for a backend's ``resample_axis``."""
    _, mode, n_in, n_out, align, scale = step
    taps = _axis_taps_transposed if transpose else _axis_taps
    idx, w = taps(mode, n_in, n_out, align, scale, np.dtype(dtype).itemsize == 8)
    return move(idx, device), move(np.ascontiguousarray(w, dtype=dtype), device)


def interpolate_override(backend):
    """The paired override of interpolate on ``backend``'s ``resample_axis``: per plan step one
    kernel over the axis's taps (every mode), and backward the same kernel over the transpose's
    taps. The forward leaves ``ctx`` as the generic one does (``plan``); the backward falls back
    to the generic one where the kernel does not take ``gy``."""
    kernel, accepts = backend.resample_axis, backend.accepts

    def run(y, steps, transpose):
        device = device_of(y)
        for step in steps:
            y = kernel(y, step[0], *_device_taps(step, transpose, y.dtype.str, device))
        return y

    def forward(ctx, x, *, plan):
        if not accepts((x,)):
            return NotImplemented
        ctx.plan = plan
        return run(x, plan, False)

    def backward(ctx, gy):
        g = ctx.xp.ascontiguousarray(gy)
        if not accepts((g,)):
            return Interpolate.backward(ctx, gy)
        return run(g, reversed(ctx.plan), True)

    return forward, backward


def _int_tuple(value, n, what, op):
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return (int(value),) * n
    try:
        items = tuple(value)
    except TypeError:
        raise ArgumentTypeError(
            f"{op}: {what} must be an int or a sequence of {n} ints, got {type(value).__name__}"
        ) from None
    if len(items) != n or not all(
        isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in items
    ):
        raise ArgumentError(f"{op}: {what} must be an int or {n} ints, got {value!r}")
    return tuple(int(v) for v in items)


def _float_tuple(value, n, what, op):
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        items = (float(value),) * n
    else:
        try:
            items = tuple(float(v) for v in value)
        except (TypeError, ValueError):
            raise ArgumentTypeError(
                f"{op}: {what} must be a number or a sequence of {n} numbers, got {value!r}"
            ) from None
        if len(items) != n:
            raise ArgumentError(
                f"{op}: {what} must have one entry per spatial dimension ({n}), got {value!r}"
            )
    if not all(math.isfinite(v) and v > 0 for v in items):
        raise ArgumentError(f"{op}: {what} must be positive and finite, got {value!r}")
    return items


def _interpolate_plan(
    shape, size, scale_factor, mode, align_corners, recompute_scale_factor, op="interpolate"
):
    if mode not in _MODES:
        raise ArgumentError(f"{op}: mode must be one of {tuple(_MODES)}, got {mode!r}")
    dims = len(shape) - 2
    want = _MODES[mode]
    if dims < 1 or dims > 3 or (want is not None and dims != want):
        need = f"{want + 2}-D" if want is not None else "3-D, 4-D or 5-D"
        raise ShapeError(
            f"{op}: mode {mode!r} takes {need} input (N, C, *spatial), got shape {tuple(shape)}"
        )
    if align_corners is not None and mode not in _INTERPOLATING:
        raise ArgumentError(
            f"{op}: align_corners can only be set with the interpolating modes "
            f"{_INTERPOLATING}, got mode {mode!r}"
        )
    align = bool(align_corners)
    if (size is None) == (scale_factor is None):
        raise ArgumentError(
            f"{op}: give exactly one of size and scale_factor, got size={size!r} and "
            f"scale_factor={scale_factor!r}"
        )
    spatial = tuple(shape[2:])
    if size is not None:
        if recompute_scale_factor:
            raise ArgumentError(
                f"{op}: recompute_scale_factor is meaningless with an explicit size"
            )
        out = _int_tuple(size, dims, "size", op)
        scales = (None,) * dims
    else:
        scales = _float_tuple(scale_factor, dims, "scale_factor", op)
        out = tuple(math.floor(n * s) for n, s in zip(spatial, scales, strict=True))
        if recompute_scale_factor:
            scales = (None,) * dims
    least = 0 if mode == "area" else 1  # adaptive average pooling allows an empty output
    if any(n < least for n in out) or any(n <= 0 for n in spatial):
        raise ArgumentError(
            f"{op}: input and output sizes must be greater than 0, got input {spatial} and "
            f"output {out}"
        )
    plan = []
    for d in reversed(range(dims)):  # last axis first: the row-major layout's cheap one
        n_in, n_out = spatial[d], out[d]
        kind = "nearest2d" if mode == "nearest" and dims == 2 else mode
        # PyTorch's linear kernels copy an axis whose size does not change, whatever the scale
        if n_in == n_out and (kind in _LINEAR or _is_identity(kind, n_in, align, scales[d])):
            continue
        plan.append((d + 2, kind, n_in, n_out, align, scales[d]))
    return tuple(plan)


def interpolate(
    input,  # noqa: A002 - PyTorch's names
    size=None,
    scale_factor=None,
    mode: str = "nearest",
    align_corners: bool | None = None,
    recompute_scale_factor: bool | None = None,
    antialias: bool = False,
):
    """Resample ``input`` (N, C, *spatial) to ``size`` or by ``scale_factor`` (PyTorch's
    ``F.interpolate``): modes ``nearest``, ``nearest-exact``, ``linear`` (3-D input),
    ``bilinear``, ``bicubic`` (4-D), ``trilinear`` (5-D) and ``area`` (adaptive average).

    PyTorch's index and weight formulas: with ``scale_factor`` the output size is
    ``floor(in * scale)`` and the coordinates use ``1/scale`` (unless
    ``recompute_scale_factor``), with ``size`` ``in/out``; ``align_corners`` maps the corner
    pixels' centres onto each other. ``antialias=True`` is not supported.

    Gradient: ginput = gy resampled by the transpose of each axis's interpolation matrix.

    Example:
        >>> x = ferro.arange(4.0).reshape(1, 1, 2, 2)
        >>> ferro.nn.functional.interpolate(x, scale_factor=2, mode="nearest").shape
        ferro.Size([1, 1, 4, 4])
    """
    if antialias:
        raise NotSupportedError("interpolate: antialias=True is not supported by ferro")
    if mode not in ("nearest", "nearest-exact") and input.dtype.kind != "f":
        raise DtypeError(f"interpolate: mode {mode!r} needs a float input, got {input.dtype}")
    plan = _interpolate_plan(
        tuple(input.shape), size, scale_factor, mode, align_corners, recompute_scale_factor
    )
    return apply(Interpolate, input, plan=plan)


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):  # noqa: A002
    """PyTorch's deprecated alias of :func:`interpolate`.

    Gradient: as interpolate's.
    """
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):  # noqa: A002
    """``interpolate(input, size, scale_factor, mode="nearest")``.

    Gradient: as interpolate's (each gy summed into the input element it copies).
    """
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):  # noqa: A002
    """``interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)``, as
    PyTorch's ``upsample_bilinear``.

    Gradient: as interpolate's.
    """
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


# --------------------------------------------------------------------------------------------
# Sampling at computed coordinates (grid_sample, deform_conv2d)
# --------------------------------------------------------------------------------------------


def _corners(xp, coords, sizes, values=None):
    """The 2**d corners of linear interpolation at ``coords`` (one float array per spatial
    dim, all of one shape) inside a grid of ``sizes``, zero outside.

    Returns a list of ``(lin, weight, grads)``: the flat index into the spatial grid (0 where
    the corner lies outside), the corner's weight (0 outside) and its derivative along each
    coordinate. For the differentiable backward ``coords`` are ferro Tensors and ``values``
    their arrays: the indices come from the values, the weights are Tensors.
    """
    values = coords if values is None else values
    lows = [xp.floor(v) for v in values]
    fracs = [c - lo for c, lo in zip(coords, lows, strict=True)]
    lows = [lo.astype(np.int64) for lo in lows]
    strides = [math.prod(sizes[k + 1 :]) for k in range(len(sizes))]
    out = []
    for bits in itertools.product((0, 1), repeat=len(sizes)):
        idx = [lo + b for lo, b in zip(lows, bits, strict=True)]
        valid = None
        lin = 0
        for i, n, s in zip(idx, sizes, strides, strict=True):
            inside = (i >= 0) & (i < n)
            valid = inside if valid is None else valid & inside
            lin = lin + i * s
        factors = [f if b else 1 - f for f, b in zip(fracs, bits, strict=True)]
        mask = valid.astype(values[0].dtype)
        weight = _product(factors) * mask
        grads = []
        for k, b in enumerate(bits):
            g = _product([f for j, f in enumerate(factors) if j != k]) * mask
            grads.append(g if b else -g)
        out.append((xp.where(valid, lin, 0), weight, grads))
    return out


def _product(factors):
    return functools.reduce(lambda a, b: a * b, factors)


def _flat_index(xp, lin, batch, channels, size):
    """Flat indices into an array (batch, channels, size) of the points ``lin`` (batch, P):
    (batch, channels, P)."""
    base = (xp.arange(batch * channels, dtype=np.int64) * size).reshape(batch, channels, 1)
    return base + lin.reshape(batch, 1, -1)


def _gather(xp, x, lin):
    """``x`` (B, C, S) read at the points ``lin`` (B, P): (B, C, P)."""
    b, c, s = x.shape
    return xp.take(x.reshape(-1), _flat_index(xp, lin, b, c, s))


def _scatter(xp, shape, lin, values, op):
    """Zeros of ``shape`` (B, C, S) with ``values`` (B, C, P) added at the points ``lin``."""
    b, c, s = shape
    out = xp.zeros(b * c * s, dtype=values.dtype)
    add_at(xp, out, _flat_index(xp, lin, b, c, s).reshape(-1), values.reshape(-1), op)
    return out.reshape(shape)


def _index_grid(xp, lin, channels):
    """The points ``lin`` (B, P) as a gather/scatter index (B, channels, P) along dim 2."""
    b = lin.shape[0]
    return xp.ascontiguousarray(
        xp.broadcast_to(lin.reshape(b, 1, -1), (b, channels, lin.size // b))
    )


def _tgather(x, lin):
    """:func:`_gather` on a Tensor ``x`` (B, C, S), differentiably (``gather``)."""
    return gather(x, 2, _index_grid(xp_of(lin), lin, x.shape[1]))


def _tscatter(shape, lin, values):
    """:func:`_scatter` of a Tensor ``values`` (B, C, P), differentiably (``scatter_add``)."""
    xp = xp_of(lin)
    zeros = xp.zeros(shape, dtype=values.dtype)
    return scatter_add(zeros, 2, _index_grid(xp, lin, shape[1]), values)


# --------------------------------------------------------------------------------------------
# grid_sample, affine_grid
# --------------------------------------------------------------------------------------------

_GRID_MODES = ("bilinear", "nearest")
_PADDING_MODES = ("zeros", "border", "reflection")


def _clip(xp, c, n, d):
    """PyTorch's ``clip_coordinates_set_grad``: c clipped to [0, n-1], its slope 0 outside."""
    inside = (c > 0) & (c < n - 1)
    return xp.clip(c, 0, n - 1), d * inside


def _reflect(xp, c, twice_low, twice_high, d):
    """PyTorch's ``reflect_coordinates_set_grad``: c reflected into [low, high]."""
    if twice_low == twice_high:
        return xp.zeros_like(c), d * 0
    low = twice_low / 2
    span = (twice_high - twice_low) / 2
    c = c - low
    sign = xp.where(c < 0, -1.0, 1.0).astype(c.dtype)
    c = xp.abs(c)
    extra = xp.fmod(c, span)
    even = (xp.floor(c / span) % 2) == 0
    out = xp.where(even, extra + low, span - extra + low)
    return out, d * xp.where(even, sign, -sign)


def _grid_coords(xp, grid, sizes, padding_mode, align_corners):
    """The source coordinate (in pixels) along each spatial dim, and d coord / d grid.

    ``grid[..., 0]`` addresses the last spatial dim (x), ``grid[..., 1]`` the one before (y)...
    """
    coords, slopes = [], []
    d = len(sizes)
    for k, n in enumerate(sizes):
        g = grid[..., d - 1 - k]
        if align_corners:
            c, s = (g + 1) * ((n - 1) / 2), (n - 1) / 2
        else:
            c, s = ((g + 1) * n - 1) / 2, n / 2
        slope = xp.full(c.shape, s, dtype=c.dtype)
        if padding_mode == "border":
            c, slope = _clip(xp, c, n, slope)
        elif padding_mode == "reflection":
            if align_corners:
                c, slope = _reflect(xp, c, 0, 2 * (n - 1), slope)
            else:
                c, slope = _reflect(xp, c, -1, 2 * n - 1, slope)
            c, slope = _clip(xp, c, n, slope)
        coords.append(c)
        slopes.append(slope)
    return coords, slopes


def _grid_sample_differentiable_backward(ctx, gy):
    """The backward in differentiable ferro ops (gather, scatter_add, products) of Tensors
    ``gy`` and ``ctx.saved``: the coordinates are piecewise linear in the grid, so each is
    ``grid * slope + intercept`` with slope and intercept constant where the grid is."""
    x, grid = ctx.saved
    xp = xp_of(array_of(x))
    n, c = x.shape[:2]
    sizes = tuple(x.shape[2:])
    d = len(sizes)
    g0 = array_of(grid).reshape(n, -1, d)
    values, slopes = _grid_coords(xp, g0, sizes, ctx.padding_mode, ctx.align_corners)
    gflat = grid.reshape(n, -1, d)
    coords = [
        gflat[..., d - 1 - k] * slopes[k] + (values[k] - slopes[k] * g0[..., d - 1 - k])
        for k in range(d)
    ]
    gyf = gy.reshape(n, c, -1)
    shape = (n, c, math.prod(sizes))
    if ctx.mode == "nearest":
        lin, valid = _nearest_points(xp, values, sizes)
        return _tscatter(shape, lin, gyf * valid[:, None, :]).reshape(x.shape), None
    xf = x.reshape(n, c, -1)
    gx = 0
    dcoord = [0] * d
    for lin, w, grads in _corners(xp, coords, sizes, values):
        gx = gx + _tscatter(shape, lin, gyf * w.reshape(n, 1, -1))
        v = (_tgather(xf, lin) * gyf).sum(1)
        for k in range(d):
            dcoord[k] = dcoord[k] + v * grads[k]
    ggrid = stack([dcoord[d - 1 - j] * slopes[d - 1 - j] for j in range(d)], dim=-1)
    return gx.reshape(x.shape), ggrid.reshape(grid.shape)


@register("grid_sample")
class GridSample:
    """Bilinear or nearest sampling of ``x`` (N, C, *spatial) at ``grid`` (N, *out, d).

    Forward gathers each sample's corners; backward scatters ``gy`` times the corner weights
    into the input's gradient, and for the grid sums ``gy`` times the samples' slopes along
    each coordinate.
    """

    @staticmethod
    def forward(ctx, x, grid, *, mode, padding_mode, align_corners):
        xp = ctx.xp
        ctx.save(x, grid)
        ctx.mode, ctx.padding_mode, ctx.align_corners = mode, padding_mode, align_corners
        n, c = x.shape[:2]
        sizes = x.shape[2:]
        out_spatial = grid.shape[1:-1]
        xf = x.reshape(n, c, -1)
        coords, _ = _grid_coords(
            xp, grid.reshape(n, -1, len(sizes)), sizes, padding_mode, align_corners
        )
        if mode == "nearest":
            lin, valid = _nearest_points(xp, coords, sizes)
            y = _gather(xp, xf, lin) * valid[:, None, :]
        else:
            y = 0
            for lin, w, _ in _corners(xp, coords, sizes):
                y = y + _gather(xp, xf, lin) * w[:, None, :]
        return y.reshape((n, c) + tuple(out_spatial))

    @staticmethod
    def backward(ctx, gy):
        x, grid = ctx.saved
        xp = ctx.xp
        n, c = x.shape[:2]
        sizes = x.shape[2:]
        d = len(sizes)
        need_x, need_grid = ctx.needs_input_grad
        gyf = gy.reshape(n, c, -1)
        coords, slopes = _grid_coords(
            xp, grid.reshape(n, -1, d), sizes, ctx.padding_mode, ctx.align_corners
        )
        shape = (n, c, math.prod(sizes))
        gx = ggrid = None
        if ctx.mode == "nearest":
            if need_x:
                lin, valid = _nearest_points(xp, coords, sizes)
                gx = _scatter(xp, shape, lin, gyf * valid[:, None, :], "grid_sample backward")
                gx = gx.reshape(x.shape)
            if need_grid:
                ggrid = xp.zeros_like(grid)
            return gx, ggrid
        corners = _corners(xp, coords, sizes)
        if need_x:
            gx = 0
            for lin, w, _ in corners:
                gx = gx + _scatter(xp, shape, lin, gyf * w[:, None, :], "grid_sample backward")
            gx = gx.reshape(x.shape)
        if need_grid:
            xf = x.reshape(n, c, -1)
            dcoord = [0] * d
            for lin, _, grads in corners:
                v = (_gather(xp, xf, lin) * gyf).sum(axis=1)
                for k in range(d):
                    dcoord[k] = dcoord[k] + v * grads[k]
            # grid[..., j] addresses spatial dim d - 1 - j
            ggrid = xp.stack(
                [dcoord[d - 1 - j] * slopes[d - 1 - j] for j in range(d)], axis=-1
            ).reshape(grid.shape)
        return gx, ggrid

    differentiable_backward = staticmethod(_grid_sample_differentiable_backward)


def grid_sample_override(backend):
    """The paired override of grid_sample on ``backend``'s ``grid_sample_fwd``/``_bwd``: one
    thread per sample point reads its corners in place of index arrays per corner, and backward
    scatters the input's gradient and writes the grid's in one pass. The forward leaves ``ctx``
    as the generic one does; the backward falls back to the generic one where the kernels do
    not take ``gy`` or the saved arrays (a saved-tensor hook may change their layout)."""
    fwd, bwd, accepts = backend.grid_sample_fwd, backend.grid_sample_bwd, backend.accepts

    def forward(ctx, x, grid, *, mode, padding_mode, align_corners):
        if not accepts((x, grid)):
            return NotImplemented
        ctx.save(x, grid)
        ctx.mode, ctx.padding_mode, ctx.align_corners = mode, padding_mode, align_corners
        return fwd(x, grid, mode, padding_mode, align_corners)

    def backward(ctx, gy):
        x, grid = ctx.saved
        g = ctx.xp.ascontiguousarray(gy, dtype=x.dtype)
        if not accepts((g, x, grid)):
            return GridSample.backward(ctx, gy)
        need_x, need_grid = ctx.needs_input_grad
        args = (ctx.mode, ctx.padding_mode, ctx.align_corners, need_x, need_grid)
        return bwd(g, x, grid, *args)

    return forward, backward


def _nearest_points(xp, coords, sizes):
    """The flat index of the nearest grid point (round half to even, as PyTorch's
    ``nearbyint``) and whether it lies inside."""
    valid = None
    lin = 0
    strides = [math.prod(sizes[k + 1 :]) for k in range(len(sizes))]
    for c, n, s in zip(coords, sizes, strides, strict=True):
        i = xp.rint(c).astype(np.int64)
        inside = (i >= 0) & (i < n)
        valid = inside if valid is None else valid & inside
        lin = lin + i * s
    return xp.where(valid, lin, 0), valid.astype(coords[0].dtype)


def grid_sample(
    input,  # noqa: A002
    grid,
    mode: str = "bilinear",
    padding_mode: str = "zeros",
    align_corners: bool | None = None,
):
    """Sample ``input`` (N, C, H, W) or (N, C, D, H, W) at the normalized coordinates ``grid``
    (N, Ho, Wo, 2) or (N, Do, Ho, Wo, 3), as PyTorch's ``F.grid_sample``: ``grid[..., 0]`` is
    x (width), -1 and 1 the edges (``align_corners=False``) or the corner pixels' centres.

    Modes ``bilinear`` (trilinear for 5-D) and ``nearest``; ``padding_mode`` ``zeros``,
    ``border`` or ``reflection``.

    Gradient: ginput = gy scattered with the corner weights; ggrid = gy times the sample's
    slope along x and y, times d(pixel)/d(grid) (0 for nearest and where a coordinate is
    clipped).

    Example:
        >>> x = ferro.randn(1, 1, 4, 4)
        >>> theta = ferro.tensor([[[1.0, 0, 0], [0, 1, 0]]])
        >>> grid = F.affine_grid(theta, (1, 1, 4, 4), align_corners=False)
        >>> y = F.grid_sample(x, grid, align_corners=False)  # the identity map: x itself
        >>> bool(ferro.allclose(y, x, atol=1e-6))
        True
    """
    op = "grid_sample"
    if mode not in _GRID_MODES:
        if mode == "bicubic":
            raise NotSupportedError(f"{op}: mode 'bicubic' is not supported by ferro")
        raise ArgumentError(f"{op}: mode must be one of {_GRID_MODES}, got {mode!r}")
    if padding_mode not in _PADDING_MODES:
        raise ArgumentError(
            f"{op}: padding_mode must be one of {_PADDING_MODES}, got {padding_mode!r}"
        )
    xs, gs = tuple(input.shape), tuple(grid.shape)
    if len(xs) not in (4, 5):
        raise ShapeError(f"{op}: input must be 4-D or 5-D (N, C, *spatial), got shape {xs}")
    d = len(xs) - 2
    if len(gs) != len(xs) or gs[-1] != d or gs[0] != xs[0]:
        raise ShapeError(
            f"{op}: grid must have shape (N, *out, {d}) with N = {xs[0]} for input of shape "
            f"{xs}, got {gs}"
        )
    if input.dtype.kind != "f" or grid.dtype.kind != "f":
        raise DtypeError(f"{op}: input and grid must be float, got {input.dtype} and {grid.dtype}")
    return apply(
        GridSample,
        input,
        grid,
        mode=mode,
        padding_mode=padding_mode,
        align_corners=bool(align_corners),
    )


def _base_grid(sizes, align_corners, dtype):
    """(prod(sizes), d + 1): the normalized coordinates (x, y[, z], 1) of every output pixel."""
    axes = []
    for n in sizes:
        v = np.linspace(-1.0, 1.0, n) if n > 1 else np.zeros(1)
        if not align_corners:
            v = v * (n - 1) / n
        axes.append(v)
    mesh = np.meshgrid(*axes, indexing="ij")  # spatial order (D,) H, W
    cols = [m.reshape(-1) for m in reversed(mesh)] + [np.ones(math.prod(sizes))]
    return np.stack(cols, axis=1).astype(dtype)


def affine_grid(theta, size, align_corners: bool | None = None):
    """The sampling grid of the affine maps ``theta`` (N, 2, 3) or (N, 3, 4) for an output of
    ``size`` (N, C, H, W) or (N, C, D, H, W), as PyTorch's ``F.affine_grid``:
    ``grid[n, ..., :] = theta[n] @ (x, y[, z], 1)``.

    Gradient: gtheta[n] = sum over pixels of ggrid (x, y[, z], 1)^T (through matmul).

    Example:
        >>> theta = ferro.tensor([[[1.0, 0, 0], [0, 1, 0]]])
        >>> F.affine_grid(theta, (1, 1, 2, 3), align_corners=False).shape
        ferro.Size([1, 2, 3, 2])
    """
    op = "affine_grid"
    size = _int_tuple(size, len(size) if hasattr(size, "__len__") else 0, "size", op)
    ts = tuple(theta.shape)
    if len(size) not in (4, 5):
        raise ShapeError(f"{op}: size must be (N, C, H, W) or (N, C, D, H, W), got {size}")
    d = len(size) - 2
    if ts != (size[0], d, d + 1):
        raise ShapeError(
            f"{op}: theta must have shape ({size[0]}, {d}, {d + 1}) for size {size}, got {ts}"
        )
    if any(n <= 0 for n in size):
        raise ArgumentError(f"{op}: size must be positive, got {size}")
    if theta.dtype.kind != "f":
        raise DtypeError(f"{op}: theta must be float, got {theta.dtype}")
    base = _base_grid(size[2:], bool(align_corners), theta.dtype)
    base = move(base, device_of(array_of(theta)))
    grid = matmul(base, theta.transpose(1, 2))  # (N, P, d)
    return grid.reshape((size[0],) + tuple(size[2:]) + (d,))


# --------------------------------------------------------------------------------------------
# deform_conv2d
# --------------------------------------------------------------------------------------------

#: Column-matrix elements one chunk of the batch may hold (16 MiB of float32).
_COLUMN_BUDGET = 1 << 22


def _deform_coords(xp, offset, og, kh, kw, ho, wo, stride, padding, dilation):
    """Sampling rows and columns (nb, og, K, L) of every kernel tap at every output pixel."""
    nb = offset.shape[0]
    k = kh * kw
    off = offset.reshape(nb, og, k, 2, ho * wo)
    ki, kj = np.divmod(np.arange(k), kw)
    oy, ox = np.divmod(np.arange(ho * wo), wo)
    base_y = (oy * stride[0] - padding[0])[None, :] + (ki * dilation[0])[:, None]
    base_x = (ox * stride[1] - padding[1])[None, :] + (kj * dilation[1])[:, None]
    base_y = xp.asarray(base_y.astype(offset.dtype))
    base_x = xp.asarray(base_x.astype(offset.dtype))
    return off[:, :, :, 0] + base_y, off[:, :, :, 1] + base_x


def _deform_samples(xp, x, offset, geom):
    """The unmasked samples (nb*og, Cg, K*L) of a chunk, and the corners they were read at."""
    og, kh, kw, ho, wo, stride, padding, dilation = geom
    nb, cin, h, w = x.shape
    py, px = _deform_coords(xp, offset, og, kh, kw, ho, wo, stride, padding, dilation)
    corners = _corners(xp, [py.reshape(nb * og, -1), px.reshape(nb * og, -1)], (h, w))
    xf = x.reshape(nb * og, cin // og, h * w)
    vals = 0
    for lin, wgt, _ in corners:
        vals = vals + _gather(xp, xf, lin) * wgt[:, None, :]
    return vals, corners


def _deform_im2col(xp, x, offset, mask, geom):
    """A chunk's column matrix (nb, Cin*K, L): the samples times the mask (generic path; the
    CPU kernel ``deform_im2col`` computes the same)."""
    og, kh, kw, ho, wo = geom[:5]
    nb, cin = x.shape[:2]
    vals, _ = _deform_samples(xp, x, offset, geom)
    if mask is not None:
        vals = vals * mask.reshape(nb * og, 1, -1)
    return vals.reshape(nb, cin * kh * kw, ho * wo)


def _deform_col2im(xp, x, offset, mask, gcols, geom, need):
    """The transpose of :func:`_deform_im2col` for the chunk's ``gcols``: ``(ginput, goffset,
    gmask)``, None where ``need`` (three flags) says no (generic path; the CPU kernel
    ``deform_col2im`` computes the same in one pass)."""
    og, kh, kw, ho, wo = geom[:5]
    nb, cin, h, w = x.shape
    k, L = kh * kw, ho * wo
    cg = cin // og
    vals, corners = _deform_samples(xp, x, offset, geom)
    gcols = gcols.reshape(nb * og, cg, k * L)
    gmask = None
    if mask is not None:
        if need[2]:
            gmask = (gcols * vals).sum(axis=1).reshape(mask.shape)
        gcols = gcols * mask.reshape(nb * og, 1, k * L)
    gx = goff = None
    if need[0]:
        gx = 0
        for lin, wgt, _ in corners:
            gx = gx + _scatter(
                xp, (nb * og, cg, h * w), lin, gcols * wgt[:, None, :], "deform_conv2d backward"
            )
        gx = gx.reshape(x.shape)
    if need[1]:
        xf = x.reshape(nb * og, cg, h * w)
        gpy = gpx = 0
        for lin, _, (dy, dx) in corners:
            v = (_gather(xp, xf, lin) * gcols).sum(axis=1)
            gpy = gpy + v * dy
            gpx = gpx + v * dx
        goff = xp.stack([gpy.reshape(nb, og, k, L), gpx.reshape(nb, og, k, L)], axis=3)
        goff = goff.reshape(offset.shape)
    return gx, goff, gmask


def _deform_forward(ctx, im2col, x, offset, weight, rest, geom, groups, has_bias, has_mask):
    """deform_conv2d's forward with the column builder ``im2col(x, offset, mask, geom)`` (the
    generic one or the CPU kernel): per batch chunk, one grouped GEMM of weight and columns."""
    xp = ctx.xp
    ctx.save(x, offset, weight, *rest)
    ctx.geom, ctx.groups, ctx.has_bias, ctx.has_mask = geom, groups, has_bias, has_mask
    mask = rest[-1] if has_mask else None
    og, kh, kw, ho, wo = geom[:5]
    n, cin = x.shape[:2]
    cout = weight.shape[0]
    wg = weight.reshape(groups, cout // groups, -1)
    out = xp.empty((n, cout, ho * wo), dtype=x.dtype)
    for lo, hi in _chunks(n, cin * kh * kw * ho * wo):
        cols = im2col(x[lo:hi], offset[lo:hi], None if mask is None else mask[lo:hi], geom)
        cols = cols.reshape(hi - lo, groups, -1, ho * wo)
        out[lo:hi] = xp.matmul(wg, cols).reshape(hi - lo, cout, ho * wo)
    if has_bias:
        out += rest[0][:, None]
    return out.reshape(n, cout, ho, wo)


def _deform_backward(ctx, im2col, col2im, gy):
    """deform_conv2d's backward with the column builder and its transpose ``col2im(x, offset,
    mask, gcols, geom, need)``: per chunk the columns are rebuilt (only the inputs are saved,
    so the workspace stays one chunk's), gweight = gy @ cols^T, gcols = weight^T @ gy."""
    x, offset, weight, *rest = ctx.saved
    xp = ctx.xp
    geom, groups = ctx.geom, ctx.groups
    mask = rest[-1] if ctx.has_mask else None
    og, kh, kw, ho, wo = geom[:5]
    need = ctx.needs_input_grad
    need_sampled = (need[0], need[1], ctx.has_mask and need[-1])
    n, cin = x.shape[:2]
    cout = weight.shape[0]
    L = ho * wo
    wg = weight.reshape(groups, cout // groups, -1)
    gyg = gy.reshape(n, groups, cout // groups, L)
    gx = xp.empty_like(x) if need[0] else None
    goff = xp.empty_like(offset) if need[1] else None
    gw = xp.zeros_like(wg) if need[2] else None
    gmask = xp.empty_like(mask) if need_sampled[2] else None
    for lo, hi in _chunks(n, cin * kh * kw * L):
        nb = hi - lo
        m = None if mask is None else mask[lo:hi]
        g = gyg[lo:hi]
        if gw is not None:
            cols = im2col(x[lo:hi], offset[lo:hi], m, geom).reshape(nb, groups, -1, L)
            gw += xp.matmul(g, cols.swapaxes(-1, -2)).sum(axis=0)
        if any(need_sampled):
            gcols = xp.matmul(wg.swapaxes(-1, -2), g).reshape(nb, -1, L)
            parts = col2im(x[lo:hi], offset[lo:hi], m, gcols, geom, need_sampled)
            for dst, part in zip((gx, goff, gmask), parts, strict=True):
                if dst is not None:
                    dst[lo:hi] = part
    grads = [gx, goff, gw.reshape(weight.shape) if gw is not None else None]
    if ctx.has_bias:
        grads.append(gy.sum(axis=(0, 2, 3)) if need[3] else None)
    if ctx.has_mask:
        grads.append(gmask)
    return tuple(grads)


def _deform_conv2d_differentiable_backward(ctx, gy):
    """The backward in differentiable ferro ops of Tensors ``gy`` and ``ctx.saved``, over
    the whole batch at once: the sampling rows and columns are ``offset + base``."""
    x, offset, weight, *rest = ctx.saved
    geom, groups = ctx.geom, ctx.groups
    mask = rest[-1] if ctx.has_mask else None
    og, kh, kw, ho, wo = geom[:5]
    xp = xp_of(array_of(x))
    n, cin, h, w = x.shape
    cout = weight.shape[0]
    k, L = kh * kw, ho * wo
    cg = cin // og
    py0, px0 = _deform_coords(xp, array_of(offset), *geom)
    off0 = array_of(offset).reshape(n, og, k, 2, L)
    off = offset.reshape(n, og, k, 2, L)
    coords = [
        (off[:, :, :, 0] + (py0 - off0[:, :, :, 0])).reshape(n * og, k * L),
        (off[:, :, :, 1] + (px0 - off0[:, :, :, 1])).reshape(n * og, k * L),
    ]
    values = [py0.reshape(n * og, k * L), px0.reshape(n * og, k * L)]
    corners = _corners(xp, coords, (h, w), values)
    xf = x.reshape(n * og, cg, h * w)
    vals = 0
    for lin, wgt, _ in corners:
        vals = vals + _tgather(xf, lin) * wgt.reshape(n * og, 1, -1)
    m = mask.reshape(n * og, 1, k * L) if mask is not None else None
    cols = (vals * m if m is not None else vals).reshape(n, groups, -1, L)
    gyg = gy.reshape(n, groups, cout // groups, L)
    wg = weight.reshape(groups, cout // groups, -1)
    gw = matmul(gyg, cols.transpose(2, 3)).sum(0).reshape(weight.shape)
    gcols = matmul(wg.transpose(1, 2), gyg).reshape(n * og, cg, k * L)
    gm = gcols * m if m is not None else gcols
    gx = 0
    gpy = gpx = 0
    for lin, wgt, (dy, dx) in corners:
        gx = gx + _tscatter((n * og, cg, h * w), lin, gm * wgt.reshape(n * og, 1, -1))
        v = (_tgather(xf, lin) * gm).sum(1)
        gpy = gpy + v * dy
        gpx = gpx + v * dx
    goff = stack([gpy.reshape(n, og, k, L), gpx.reshape(n, og, k, L)], dim=3)
    grads = [gx.reshape(x.shape), goff.reshape(offset.shape), gw]
    if ctx.has_bias:
        grads.append(gy.sum((0, 2, 3)))
    if ctx.has_mask:
        grads.append((gcols * vals).sum(1).reshape(mask.shape))
    return tuple(grads)


@register("deform_conv2d")
class DeformConv2d:
    """Deformable convolution (torchvision's ``deform_conv2d``): per batch chunk, bilinear
    samples of the input at the offset kernel taps (times the mask) form the column matrix,
    and one grouped GEMM with the weight gives the output.

    Backward recomputes each chunk's columns (only the inputs are saved, so the workspace stays
    one chunk's): gweight = gy @ cols^T, gcols = weight^T @ gy, then gmask = gcols * samples,
    ginput = gcols * mask scattered with the corner weights, goffset = gcols * mask times the
    samples' slopes.
    """

    @staticmethod
    def forward(ctx, x, offset, weight, *rest, geom, groups, has_bias, has_mask):
        im2col = functools.partial(_deform_im2col, ctx.xp)
        return _deform_forward(
            ctx, im2col, x, offset, weight, rest, geom, groups, has_bias, has_mask
        )

    @staticmethod
    def backward(ctx, gy):
        xp = ctx.xp
        im2col, col2im = (
            functools.partial(_deform_im2col, xp),
            functools.partial(_deform_col2im, xp),
        )
        return _deform_backward(ctx, im2col, col2im, gy)

    differentiable_backward = staticmethod(_deform_conv2d_differentiable_backward)


def _chunks(n, per_item):
    """Batch ranges whose column matrices hold at most ``_COLUMN_BUDGET`` elements."""
    step = max(1, _COLUMN_BUDGET // max(per_item, 1))
    return [(lo, min(lo + step, n)) for lo in range(0, n, step)]


def _pair(value, what, op):
    return _int_tuple(value, 2, what, op)


def deform_conv2d(
    input,  # noqa: A002
    offset,
    weight,
    bias=None,
    stride=1,
    padding=0,
    dilation=1,
    mask=None,
):
    """Deformable convolution v1/v2 (torchvision's ``ops.deform_conv2d``).

    ``input`` (N, Cin, H, W), ``weight`` (Cout, Cin/groups, kh, kw), ``offset``
    (N, 2*offset_groups*kh*kw, Ho, Wo) holding a (dy, dx) pair per kernel tap, ``mask``
    (N, offset_groups*kh*kw, Ho, Wo) the optional modulation (DCNv2). The weight groups and the
    offset groups follow from the shapes. Tap (i, j) of output (y, x) reads the input
    bilinearly at (y*stride - padding + i*dilation + dy, x*stride - padding + j*dilation + dx),
    zero outside.

    Gradient: gweight = gy @ cols^T, gbias = gy summed, gmask = (weight^T gy) * samples, ginput
    and goffset through the bilinear samples (corner weights and slopes).

    Example:
        >>> x, w = ferro.randn(1, 2, 5, 5), ferro.randn(3, 2, 3, 3)
        >>> F.deform_conv2d(x, ferro.zeros(1, 18, 5, 5), w, padding=1).shape  # conv2d
        ferro.Size([1, 3, 5, 5])
    """
    op = "deform_conv2d"
    stride = _pair(stride, "stride", op)
    padding = _pair(padding, "padding", op)
    dilation = _pair(dilation, "dilation", op)
    if min(stride) < 1 or min(dilation) < 1 or min(padding) < 0:
        raise ArgumentError(
            f"{op}: stride and dilation must be >= 1 and padding >= 0, got stride={stride}, "
            f"padding={padding}, dilation={dilation}"
        )
    xs, os_, ws = tuple(input.shape), tuple(offset.shape), tuple(weight.shape)
    if len(xs) != 4 or len(ws) != 4 or len(os_) != 4:
        raise ShapeError(
            f"{op}: input, offset and weight must be 4-D, got shapes {xs}, {os_} and {ws}"
        )
    n, cin, h, w = xs
    cout, cin_g, kh, kw = ws
    if cin_g == 0 or cin % cin_g:
        raise ShapeError(
            f"{op}: input channels {cin} are not a multiple of weight's {cin_g} (weight {ws})"
        )
    groups = cin // cin_g
    if cout % groups:
        raise ShapeError(
            f"{op}: weight's {cout} output channels are not divisible by groups {groups}"
        )
    ho = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (w + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    if ho <= 0 or wo <= 0:
        raise ShapeError(
            f"{op}: the kernel {(kh, kw)} (dilation {dilation}) is larger than the padded "
            f"input {(h + 2 * padding[0], w + 2 * padding[1])}"
        )
    k = kh * kw
    if os_[0] != n or os_[2:] != (ho, wo) or os_[1] == 0 or os_[1] % (2 * k):
        raise ShapeError(
            f"{op}: offset must have shape ({n}, 2*offset_groups*{k}, {ho}, {wo}) for input "
            f"{xs} and weight {ws}, got {os_}"
        )
    og = os_[1] // (2 * k)
    if cin % og:
        raise ShapeError(
            f"{op}: input channels {cin} are not divisible by the {og} offset groups of "
            f"offset {os_}"
        )
    rest = []
    if bias is not None:
        if tuple(bias.shape) != (cout,):
            raise ShapeError(f"{op}: bias must have shape ({cout},), got {tuple(bias.shape)}")
        rest.append(bias)
    if mask is not None:
        if tuple(mask.shape) != (n, og * k, ho, wo):
            raise ShapeError(
                f"{op}: mask must have shape ({n}, {og * k}, {ho}, {wo}) for offset {os_}, "
                f"got {tuple(mask.shape)}"
            )
        rest.append(mask)
    for t in (input, offset, weight, *rest):
        if t.dtype.kind != "f":
            raise DtypeError(f"{op}: every argument must be float, got {t.dtype}")
    geom = (og, kh, kw, ho, wo, stride, padding, dilation)
    return apply(
        DeformConv2d,
        input,
        offset,
        weight,
        *rest,
        geom=geom,
        groups=groups,
        has_bias=bias is not None,
        has_mask=mask is not None,
    )


__all__ = [
    "affine_grid",
    "deform_conv2d",
    "grid_sample",
    "interpolate",
    "upsample",
    "upsample_bilinear",
    "upsample_nearest",
]
