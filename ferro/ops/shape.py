"""Shape ops: reshape/view, transpose/permute. Their outputs are views of their inputs."""

from __future__ import annotations

import numbers

from ferro.errors import ShapeError
from ferro.ops.registry import apply, register


@register("reshape", view=True)
class Reshape:
    @staticmethod
    def forward(ctx, x, *, shape):
        ctx.in_shape = x.shape
        return x.reshape(shape)

    @staticmethod
    def backward(ctx, gy):
        return gy.reshape(ctx.in_shape)


@register("permute", view=True)
class Permute:
    @staticmethod
    def forward(ctx, x, *, axes):
        ctx.axes = axes
        return x.transpose(axes)

    @staticmethod
    def backward(ctx, gy):
        inv = [0] * len(ctx.axes)
        for i, a in enumerate(ctx.axes):
            inv[a] = i
        return gy.transpose(inv)


def _size_args(shape) -> tuple:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    for s in shape:
        if not isinstance(s, numbers.Integral) or isinstance(s, bool):
            raise TypeError(f"reshape: sizes must be ints, got {shape!r}")
    return tuple(int(s) for s in shape)


def reshape(x, *shape):
    """Return ``x`` with a new shape (one size may be -1); ``reshape(x, 2, 3)`` or ``(2, 3)``.

    Gradient: gx = gy reshaped to x's shape.
    """
    shape = _size_args(shape)
    n_infer = sum(1 for s in shape if s == -1)
    known = 1
    for s in shape:
        if s != -1:
            if s < 0:
                raise ShapeError(f"reshape: invalid size {s} in {shape}")
            known *= s
    size = x.numel()
    if (
        n_infer > 1
        or (n_infer == 0 and known != size)
        or (n_infer == 1 and (known == 0 or size % known != 0))
    ):
        raise ShapeError(f"reshape: cannot reshape a tensor of shape {x.shape} into {shape}")
    return apply(Reshape, x, shape=shape)


def _axis(a, ndim, op):
    if not isinstance(a, numbers.Integral) or isinstance(a, bool):
        raise TypeError(f"{op}: dims must be ints, got {a!r}")
    if not -ndim <= a < max(ndim, 1):
        raise ShapeError(f"{op}: dim {a} is out of range for a tensor of {ndim} dimensions")
    return int(a) % ndim if ndim else 0


def permute(x, *dims):
    """Reorder the dimensions of ``x``: ``permute(x, 2, 0, 1)``.

    Gradient: gx = gy permuted by the inverse permutation.
    """
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    axes = tuple(_axis(d, x.ndim, "permute") for d in dims)
    if sorted(axes) != list(range(x.ndim)):
        raise ShapeError(f"permute: {dims} is not a permutation of the {x.ndim} dims of {x.shape}")
    return apply(Permute, x, axes=axes)


def transpose(x, dim0: int, dim1: int):
    """Swap dimensions ``dim0`` and ``dim1``.

    Gradient: gx = gy with the same two dimensions swapped back.
    """
    axes = list(range(x.ndim))
    a, b = _axis(dim0, x.ndim, "transpose"), _axis(dim1, x.ndim, "transpose")
    axes[a], axes[b] = axes[b], axes[a]
    return apply(Permute, x, axes=tuple(axes))


@register("detach", differentiable=False, view=True)
class Detach:
    @staticmethod
    def forward(ctx, x):
        return x


def detach(x):
    """A tensor sharing ``x``'s data (and version counter) that is not part of any graph."""
    return apply(Detach, x)
