"""Reductions over an axis, a tuple of axes, or everything, with ``keepdims``."""

from __future__ import annotations

from ferro.errors import ShapeError
from ferro.ops.registry import apply, register


def normalize_axes(axis, ndim: int, op: str) -> tuple | None:
    """Turn ``axis`` (None, an int or a sequence) into a sorted tuple of non-negative axes."""
    if axis is None:
        return None
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out = []
    for a in axes:
        if not isinstance(a, int) or isinstance(a, bool):
            raise TypeError(f"{op}: axis must be an int or a tuple of ints, got {axis!r}")
        if not -ndim <= a < max(ndim, 1):
            raise ShapeError(f"{op}: axis {a} is out of range for a tensor of {ndim} dimensions")
        out.append(a % ndim if ndim else 0)
    if len(set(out)) != len(out):
        raise ShapeError(f"{op}: repeated axis in {axis!r}")
    return tuple(sorted(out))


def _expand_back(xp, gy, shape, axes, keepdims):
    # The gradient of a reduction: put the reduced axes back, then broadcast to the input shape.
    if not keepdims and axes is not None and gy.ndim != len(shape):
        gy = xp.expand_dims(gy, axes)
    return xp.broadcast_to(gy, shape)


@register("sum")
class Sum:
    @staticmethod
    def forward(ctx, x, *, axes, keepdims):
        ctx.shape = x.shape
        ctx.axes = axes
        ctx.keepdims = keepdims
        return x.sum(axis=axes, keepdims=keepdims)

    @staticmethod
    def backward(ctx, gy):
        return _expand_back(ctx.xp, gy, ctx.shape, ctx.axes, ctx.keepdims)


@register("mean")
class Mean:
    @staticmethod
    def forward(ctx, x, *, axes, keepdims):
        ctx.shape = x.shape
        ctx.axes = axes
        ctx.keepdims = keepdims
        n = x.size if axes is None else _count(x.shape, axes)
        ctx.scale = 1.0 / n if n else float("nan")
        return x.mean(axis=axes, keepdims=keepdims)

    @staticmethod
    def backward(ctx, gy):
        return _expand_back(ctx.xp, gy * ctx.scale, ctx.shape, ctx.axes, ctx.keepdims)


def _count(shape, axes) -> int:
    n = 1
    for a in axes:
        n *= shape[a]
    return n


def sum(x, axis=None, keepdims: bool = False):  # noqa: A001 - mirrors torch.sum
    """Sum over ``axis`` (None: all elements).

    Gradient: gx = gy broadcast back over the reduced axes.
    """
    return apply(Sum, x, axes=normalize_axes(axis, x.ndim, "sum"), keepdims=bool(keepdims))


def mean(x, axis=None, keepdims: bool = False):
    """Mean over ``axis`` (None: all elements).

    Gradient: gx = gy / n broadcast back over the reduced axes (n elements reduced).
    """
    if x.dtype.kind != "f":
        from ferro.errors import DtypeError

        raise DtypeError(f"mean: needs a floating tensor, got {x.dtype}")
    return apply(Mean, x, axes=normalize_axes(axis, x.ndim, "mean"), keepdims=bool(keepdims))
