"""Reductions over a dim, a tuple of dims, or everything, with ``keepdim``.

Arguments carry PyTorch's names (``dim``, ``keepdim``); NumPy's ``axis``/``keepdims`` are
accepted as aliases (see :mod:`ferro.ops._args`).
"""

from __future__ import annotations

import builtins
import math
import numbers
from collections import namedtuple

import numpy as np

from ferro._C.cpu_kernels import sum_all
from ferro._C.engine import compiled
from ferro.backend import xp_of
from ferro.errors import ArgumentError, ArgumentTypeError, IndexOutOfRangeError, ShapeError
from ferro.ops._args import aliases
from ferro.ops.registry import apply, register


def normalize_axes(axis, ndim: int, op: str) -> tuple | None:
    """Turn ``axis`` (None, an int or a sequence) into a sorted tuple of non-negative axes."""
    if axis is None:
        return None
    axes = (axis,) if isinstance(axis, numbers.Integral) else axis
    if not isinstance(axes, tuple | list | range) or not builtins.all(
        isinstance(a, numbers.Integral) and not isinstance(a, bool) for a in axes
    ):
        raise ArgumentTypeError(f"{op}: axis must be an int or a tuple of ints, got {axis!r}")
    out = []
    for a in map(int, axes):
        if not -ndim <= a < builtins.max(ndim, 1):
            raise IndexOutOfRangeError(
                f"{op}: axis {a} is out of range for a tensor of {ndim} dimensions"
            )
        out.append(a % ndim if ndim else 0)
    if len(set(out)) != len(out):
        raise ShapeError(f"{op}: repeated axis in {axis!r}")
    return tuple(sorted(out))


def _expand_back(xp, gy, shape, axes, keepdims):
    """The gradient of a reduction: put the reduced axes back, then broadcast to the input
    shape. For a contiguous NumPy ``gy`` the broadcast is built with the ndarray constructor
    (a read-only view, stride 0 along the broadcast dims): np.broadcast_to's Python layers cost
    about seven 1-element ops (2.6 us against 0.7 us), once per sum or mean in every backward."""
    if not keepdims and axes is not None and gy.ndim != len(shape):
        gy = _unsqueeze(gy, len(shape), axes)
    if isinstance(gy, np.generic):
        gy = np.asarray(gy)  # mean's gy * scale of a 0-d gy
    if type(gy) is not np.ndarray or not gy.size or not gy.flags.c_contiguous:
        return xp.broadcast_to(gy, shape)
    if gy.ndim == 0:
        strides = (0,) * len(shape)
    else:
        pad = len(shape) - gy.ndim
        strides = (0,) * pad + tuple(
            0 if n == 1 else s for n, s in zip(gy.shape, gy.strides, strict=True)
        )
    out = np.ndarray(shape, gy.dtype, gy, 0, strides)
    out.flags.writeable = False
    return out


def _count(shape, axes) -> int:
    n = 1
    for a in axes:
        n *= shape[a]
    return n


def _expand(xp, g, ndim, axes, keepdims):
    # Reinsert reduced axes (as size 1) so g broadcasts against the input.
    if not keepdims and axes is not None and g.ndim != ndim:
        g = _unsqueeze(g, ndim, axes)
    return g


def _unsqueeze(g, ndim, axes):
    # xp.expand_dims(g, axes) as one reshape (a view: inserting size-1 dims never copies);
    # expand_dims's Python layers cost several small ops, in every reduction's backward.
    shape, k = [], 0
    for d in range(ndim):
        if d in axes:
            shape.append(1)
        else:
            shape.append(g.shape[k])
            k += 1
    return g.reshape(shape)


def _reduced_shape(shape, axes):
    if axes is None:
        return ()
    return tuple(s for d, s in enumerate(shape) if d not in axes)


def _float_only(x, op):
    if x.dtype.kind != "f":
        from ferro.errors import DtypeError

        raise DtypeError(f"{op}: needs a floating tensor, got {x.dtype}")


def _nonempty(x, axes, op):
    """A maximum or minimum over an empty dimension has no value (no identity): refuse it.
    Reducing the other dimensions of an empty tensor is fine (an empty result)."""
    reduced = range(x.ndim) if axes is None else axes
    if x.numel() == 0 and builtins.any(x.shape[a] == 0 for a in reduced):
        raise ShapeError(
            f"{op}: cannot reduce over an empty dimension (shape {tuple(x.shape)}, "
            f"axis {'all' if axes is None else axes})"
        )


@register("sum", direct="sum")
class Sum:
    @staticmethod
    def forward(ctx, x, *, axes, keepdims):
        ctx.shape = x.shape
        ctx.axes = axes
        ctx.keepdims = keepdims
        if type(x) is np.ndarray:  # ndarray.sum's Python layer (_methods._sum) calls this
            y = sum_all(x) if axes is None and not keepdims else NotImplemented
            if y is not NotImplemented:  # Note [Two-core elementwise ops]
                return y
            return np.add.reduce(x, axes, None, None, keepdims)
        return x.sum(axis=axes, keepdims=keepdims)

    @staticmethod
    def backward(ctx, gy):
        return _expand_back(ctx.xp, gy, ctx.shape, ctx.axes, ctx.keepdims)


@aliases
def sum(x, dim=None, keepdim: bool = False):  # noqa: A001 - mirrors torch.sum
    """Sum over ``dim`` (an int or a tuple; None: all elements).

    Gradient: gx = gy broadcast back over the reduced axes.
    """
    axes = None if dim is None else normalize_axes(dim, x.ndim, "sum")
    return apply(Sum, x, axes=axes, keepdims=bool(keepdim))


sum = compiled(Sum, sum)  # noqa: A001 - compiled for ``x.sum()`` (Note [Direct ops])


@register("mean", direct="mean")
class Mean:
    @staticmethod
    def forward(ctx, x, *, axes, keepdims):
        ctx.shape = x.shape
        ctx.axes = axes
        ctx.keepdims = keepdims
        n = x.size if axes is None else _count(x.shape, axes)
        ctx.scale = 1.0 / n if n else float("nan")
        if type(x) is np.ndarray and n and x.dtype.itemsize >= 4:
            # NumPy's _methods._mean for float32/64 without its Python layers: the same
            # add.reduce, then the same division by an intp count, so the same bits.
            y = np.add.reduce(x, axes, None, None, keepdims)
            if type(y) is np.ndarray:
                return np.true_divide(y, np.intp(n), out=y, casting="unsafe")
            return y.dtype.type(y / np.intp(n))
        return x.mean(axis=axes, keepdims=keepdims)

    @staticmethod
    def backward(ctx, gy):
        return _expand_back(ctx.xp, gy * ctx.scale, ctx.shape, ctx.axes, ctx.keepdims)


@aliases
def mean(x, dim=None, keepdim: bool = False):
    """Mean over ``dim`` (an int or a tuple; None: all elements).

    Gradient: gx = gy / n broadcast back over the reduced axes (n elements reduced).
    """
    if x.dtype.kind != "f":
        from ferro.errors import DtypeError

        raise DtypeError(f"mean: needs a floating tensor, got {x.dtype}")
    axes = None if dim is None else normalize_axes(dim, x.ndim, "mean")
    return apply(Mean, x, axes=axes, keepdims=bool(keepdim))


mean = compiled(Mean, mean)  # compiled for ``x.mean()`` (Note [Direct ops])


@register("var")
class Var:
    @staticmethod
    def forward(ctx, x, *, axes, correction, keepdims):
        n = x.size if axes is None else _count(x.shape, axes)
        dof = n - correction
        mu = x.mean(axis=axes, keepdims=True)
        d = x - mu
        ctx.save(x)  # the input, not x - mean: Note [Double backward]
        ctx.axes, ctx.keepdims = axes, keepdims
        ctx.scale = scale = 1.0 / dof if dof > 0 else float("nan")
        return (d * d).sum(axis=axes, keepdims=keepdims) * scale

    @staticmethod
    def backward(ctx, gy):
        (x,) = ctx.saved
        d = x - x.mean(axis=ctx.axes, keepdims=True)
        g = _expand(ctx.xp, gy, d.ndim, ctx.axes, ctx.keepdims)
        return g * (2 * ctx.scale) * d


def _correction(op, dim, unbiased, correction):
    """PyTorch's three ways to say the degrees-of-freedom correction, reduced to one number:
    ``op(x, True)`` (the legacy ``unbiased`` overload), ``unbiased=`` and ``correction=``."""
    if isinstance(dim, bool):
        if unbiased is not None:
            raise ArgumentTypeError(f"{op}: got a bool dim {dim!r} and unbiased={unbiased!r}")
        dim, unbiased = None, dim
    if unbiased is not None and correction is not None:
        raise ArgumentTypeError(f"{op}: pass unbiased= or correction=, not both")
    if unbiased is not None:
        if not isinstance(unbiased, bool):
            raise ArgumentTypeError(f"{op}: unbiased must be a bool, got {unbiased!r}")
        return dim, int(unbiased)
    if correction is None:
        return dim, 1
    if not isinstance(correction, numbers.Real) or isinstance(correction, bool):
        raise ArgumentTypeError(f"{op}: correction must be a number, got {correction!r}")
    return dim, correction


@aliases
def var(x, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):
    """Variance over ``dim`` with ``correction`` (1, the default: unbiased; 0: population),
    or PyTorch's older ``unbiased=`` bool; ``var(x, False)`` is the legacy overload.

    Gradient: gx = gy * 2 * (x - mean) / (n - correction).
    """
    _float_only(x, "var")
    dim, correction = _correction("var", dim, unbiased, correction)
    return apply(
        Var,
        x,
        axes=normalize_axes(dim, x.ndim, "var"),
        correction=correction,
        keepdims=bool(keepdim),
    )


@aliases
def std(x, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):
    """Standard deviation over ``dim``: ``sqrt(var(x, dim, ...))``, same arguments as :func:`var`.

    Gradient: gx = gy * (x - mean) / ((n - correction) * y).
    """
    from ferro.ops.elementwise import sqrt

    dim, correction = _correction("std", dim, unbiased, correction)
    return sqrt(var(x, dim, keepdim=keepdim, correction=correction))


@register("prod")
class Prod:
    @staticmethod
    def forward(ctx, x, *, axes, keepdims):
        ctx.save(x)
        ctx.axes, ctx.keepdims = axes, keepdims
        return x.prod(axis=axes, keepdims=keepdims)

    @staticmethod
    def backward(ctx, gy):
        (x,) = ctx.saved
        xp = ctx.xp
        axes = tuple(range(x.ndim)) if ctx.axes is None else ctx.axes
        # Product of all *other* elements of each reduced group, exact even with zeros:
        # move the reduced axes last, flatten them, take exclusive prefix and suffix products.
        keep = [d for d in range(x.ndim) if d not in axes]
        perm = keep + list(axes)
        xt = x.transpose(perm)
        lead = xt.shape[: len(keep)]
        flat = xt.reshape(lead + (-1,))
        ones = xp.ones(lead + (1,), dtype=x.dtype)
        left = xp.cumprod(xp.concatenate([ones, flat[..., :-1]], axis=-1), axis=-1)
        right = xp.flip(
            xp.cumprod(xp.concatenate([ones, xp.flip(flat, -1)[..., :-1]], axis=-1), axis=-1), -1
        )
        others = (left * right).reshape(xt.shape)
        inv = [0] * x.ndim
        for i, p in enumerate(perm):
            inv[p] = i
        others = others.transpose(inv)
        g = _expand(xp, gy, x.ndim, ctx.axes, ctx.keepdims)
        return g * others


@aliases
def prod(x, dim=None, keepdim: bool = False):
    """Product over ``dim`` (an int or a tuple; None: all elements).

    Gradient: gx = gy * (product of the other elements of the group), exact with zeros.
    """
    return apply(Prod, x, axes=normalize_axes(dim, x.ndim, "prod"), keepdims=bool(keepdim))


@register("max_dim")
class MaxDim:
    @staticmethod
    def forward(ctx, x, *, axis, keepdims, largest):
        xp = ctx.xp
        idx = x.argmax(axis=axis) if largest else x.argmin(axis=axis)
        idx_k = xp.expand_dims(idx, axis)
        values = xp.take_along_axis(x, idx_k, axis=axis)
        ctx.save(idx_k)
        ctx.shape, ctx.axis, ctx.keepdims = x.shape, axis, keepdims
        if not keepdims:
            values = values.squeeze(axis)
            idx_k = idx
        return values, idx_k.astype(xp.int64)

    @staticmethod
    def backward(ctx, gy, gi):
        (idx_k,) = ctx.saved
        xp = ctx.xp
        g = gy if ctx.keepdims else xp.expand_dims(gy, ctx.axis)
        gx = xp.zeros(ctx.shape, dtype=gy.dtype)
        xp.put_along_axis(gx, idx_k, g, axis=ctx.axis)
        return gx


@register("amax")
class Amax:
    @staticmethod
    def forward(ctx, x, *, axes, keepdims, largest):
        y = x.max(axis=axes, keepdims=True) if largest else x.min(axis=axes, keepdims=True)
        ctx.save(x, y)
        ctx.axes, ctx.keepdims = axes, keepdims
        return y if keepdims else y.reshape(_reduced_shape(x.shape, axes))

    @staticmethod
    def backward(ctx, gy):
        x, y = ctx.saved
        # Ties share the gradient evenly (PyTorch's convention for amax/amin and max()).
        mask = x == y
        count = mask.sum(axis=ctx.axes, keepdims=True).astype(x.dtype)
        g = _expand(ctx.xp, gy, x.ndim, ctx.axes, ctx.keepdims)
        return g * mask / count


#: What ``max(x, dim)``/``min(x, dim)`` return, as PyTorch's ``torch.return_types``: a tuple
#: ``(values, indices)`` that also has ``.values`` and ``.indices``.
MaxResult = namedtuple("max", ("values", "indices"))
MinResult = namedtuple("min", ("values", "indices"))


def _extreme(x, dim, keepdim, largest, op):
    from ferro._C.tensor import TensorBase

    if isinstance(dim, TensorBase):
        # torch.max(a, b): the elementwise maximum, as PyTorch overloads it.
        from ferro.ops.elementwise import maximum, minimum

        if keepdim:
            raise ArgumentTypeError(f"{op}: keepdim has no meaning with a tensor `other`")
        return maximum(x, dim) if largest else minimum(x, dim)
    if dim is None:
        _nonempty(x, None, op)
        return apply(Amax, x, axes=None, keepdims=False, largest=largest)
    if not isinstance(dim, numbers.Integral) or isinstance(dim, bool):
        raise ArgumentTypeError(
            f"{op}: dim must be an int (use amax/amin for several dims), got {dim!r}"
        )
    (a,) = normalize_axes(dim, x.ndim, op)
    _nonempty(x, (a,), op)
    values, indices = apply(MaxDim, x, axis=a, keepdims=bool(keepdim), largest=largest)
    return (MaxResult if largest else MinResult)(values, indices)


@aliases
def max(x, dim=None, keepdim: bool = False):  # noqa: A001 - mirrors torch.max
    """Maximum. Without ``dim``: the value (ties share the gradient evenly). With an int
    ``dim``: a named tuple ``(values, indices)``; indices are int64 and not differentiable, and
    the gradient goes to the first maximal element, the one ``indices`` names. With a tensor
    in place of ``dim``: the elementwise :func:`~ferro.ops.maximum`, as ``torch.max(a, b)``.

    Gradient: gx = gy at the selected element(s), else 0.
    """
    return _extreme(x, dim, keepdim, True, "max")


@aliases
def min(x, dim=None, keepdim: bool = False):  # noqa: A001 - mirrors torch.min
    """Minimum; see :func:`max` for the return values and tie convention.

    Gradient: gx = gy at the selected element(s), else 0.
    """
    return _extreme(x, dim, keepdim, False, "min")


@aliases
def amax(x, dim=None, keepdim: bool = False):
    """Maximum over ``dim`` (an int or a tuple); ties share the gradient evenly.

    Gradient: gx = gy / (number of maximal elements) at each maximal element, else 0.
    """
    axes = normalize_axes(dim, x.ndim, "amax")
    _nonempty(x, axes, "amax")
    return apply(Amax, x, axes=axes, keepdims=bool(keepdim), largest=True)


@aliases
def amin(x, dim=None, keepdim: bool = False):
    """Minimum over ``dim`` (an int or a tuple); ties share the gradient evenly.

    Gradient: gx = gy / (number of minimal elements) at each minimal element, else 0.
    """
    axes = normalize_axes(dim, x.ndim, "amin")
    _nonempty(x, axes, "amin")
    return apply(Amax, x, axes=axes, keepdims=bool(keepdim), largest=False)


@register("argmax", differentiable=False)
class Argmax:
    @staticmethod
    def forward(ctx, x, *, axis, keepdims, largest):
        xp = ctx.xp
        i = x.argmax(axis=axis) if largest else x.argmin(axis=axis)
        i = xp.asarray(i, dtype=xp.int64)
        if keepdims:
            i = i.reshape((1,) * x.ndim) if axis is None else xp.expand_dims(i, axis)
        return i


def _arg_extreme(x, dim, keepdim, largest, op):
    if dim is not None and (not isinstance(dim, numbers.Integral) or isinstance(dim, bool)):
        raise ArgumentTypeError(f"{op}: dim must be an int or None, got {dim!r}")
    axes = None if dim is None else normalize_axes(dim, x.ndim, op)
    _nonempty(x, axes, op)
    axis = None if axes is None or x.ndim == 0 else axes[0]
    return apply(Argmax, x, axis=axis, keepdims=bool(keepdim), largest=largest)


@aliases
def argmax(x, dim=None, keepdim: bool = False):
    """Index of the first maximum along ``dim`` (of the flattened tensor when None), as an
    int64 tensor; not differentiable."""
    return _arg_extreme(x, dim, keepdim, True, "argmax")


@aliases
def argmin(x, dim=None, keepdim: bool = False):
    """Index of the first minimum along ``dim`` (of the flattened tensor when None), as an
    int64 tensor; not differentiable."""
    return _arg_extreme(x, dim, keepdim, False, "argmin")


@register("logsumexp")
class Logsumexp:
    @staticmethod
    def forward(ctx, x, *, axes, keepdims):
        xp = ctx.xp
        m = x.max(axis=axes, keepdims=True)
        m = xp.where(xp.isfinite(m), m, 0)
        y = m + xp.log(xp.exp(x - m).sum(axis=axes, keepdims=True))
        out = y if keepdims else y.reshape(_reduced_shape(x.shape, axes))
        ctx.save(x, out)  # the output itself: Note [Double backward]
        ctx.axes, ctx.keepdims = axes, keepdims
        return out

    @staticmethod
    def backward(ctx, gy):
        x, y = ctx.saved
        y = _expand(ctx.xp, y, x.ndim, ctx.axes, ctx.keepdims)
        g = _expand(ctx.xp, gy, x.ndim, ctx.axes, ctx.keepdims)
        return g * ctx.xp.exp(x - y)


@aliases
def logsumexp(x, dim=None, keepdim: bool = False):
    """``log(sum(exp(x)))`` over ``dim``, numerically stable.

    Gradient: gx = gy * exp(x - y).
    """
    _float_only(x, "logsumexp")
    return apply(
        Logsumexp, x, axes=normalize_axes(dim, x.ndim, "logsumexp"), keepdims=bool(keepdim)
    )


@register("norm")
class Norm:
    @staticmethod
    def forward(ctx, x, *, p, axes, keepdims):
        xp = ctx.xp
        a = xp.abs(x)
        if p == 1:
            y = a.sum(axis=axes, keepdims=True)
        elif p == 2:
            y = xp.sqrt((x * x).sum(axis=axes, keepdims=True))
        else:
            y = a.max(axis=axes, keepdims=True) if x.size else a.sum(axis=axes, keepdims=True)
        out = y if keepdims else y.reshape(_reduced_shape(x.shape, axes))
        ctx.save(x, out)  # the output itself: Note [Double backward]
        ctx.p, ctx.axes, ctx.keepdims = p, axes, keepdims
        return out

    @staticmethod
    def backward(ctx, gy):
        x, y = ctx.saved
        xp = ctx.xp
        y = _expand(xp, y, x.ndim, ctx.axes, ctx.keepdims)
        g = _expand(xp, gy, x.ndim, ctx.axes, ctx.keepdims)
        if ctx.p == 1:
            return g * xp.sign(x)
        if ctx.p == 2:
            # The subgradient 0 at the origin, as PyTorch defines it.
            safe = xp.where(y == 0, 1, y)
            return xp.where(y == 0, 0, g * x / safe)
        mask = xp.abs(x) == y
        count = xp.maximum(mask.sum(axis=ctx.axes, keepdims=True), 1).astype(x.dtype)
        return g * xp.sign(x) * mask / count


@aliases
def norm(x, p=2, dim=None, keepdim: bool = False):
    """Vector p-norm over ``dim`` for p in 1, 2, inf and ``"fro"`` (the 2-norm of the
    elements, as PyTorch's default).

    Gradient: p=1: gy * sign(x); p=2: gy * x / y (0 at y = 0); p=inf: gy * sign(x) at the
    maximal |x| (ties share evenly).
    """
    if p not in (1, 2, math.inf, "inf", "fro"):
        raise ArgumentError(f"norm: p must be 1, 2, inf or 'fro', got {p!r}")
    p = math.inf if p in ("inf", math.inf) else 2 if p == "fro" else int(p)
    _float_only(x, "norm")
    return apply(Norm, x, p=p, axes=normalize_axes(dim, x.ndim, "norm"), keepdims=bool(keepdim))


@register("cumsum")
class Cumsum:
    @staticmethod
    def forward(ctx, x, *, axis):
        ctx.axis = axis
        return ctx.xp.cumsum(x, axis=axis)

    @staticmethod
    def backward(ctx, gy):
        xp = ctx.xp
        return xp.flip(xp.cumsum(xp.flip(gy, ctx.axis), axis=ctx.axis), ctx.axis)


@aliases
def cumsum(x, dim: int):
    """Cumulative sum along ``dim``.

    Gradient: gx = reversed cumulative sum of gy along ``dim``.
    """
    if not isinstance(dim, numbers.Integral) or isinstance(dim, bool):
        raise ArgumentTypeError(f"cumsum: dim must be an int, got {dim!r}")
    (a,) = normalize_axes(dim, x.ndim, "cumsum")
    if x.ndim == 0:
        from ferro.ops.shape import reshape

        return reshape(apply(Cumsum, reshape(x, 1), axis=0), ())
    return apply(Cumsum, x, axis=a)


@register("all", differentiable=False, same_dtype=False)
class All:
    @staticmethod
    def forward(ctx, x, *, axes, keepdims, every):
        f = ctx.xp.all if every else ctx.xp.any
        return ctx.xp.asarray(f(x, axis=axes, keepdims=keepdims))


def _logical_reduce(x, dim, keepdim, every, op):
    axes = normalize_axes(dim, x.ndim, op)
    return apply(All, x, axes=axes, keepdims=bool(keepdim), every=every)


@aliases
def all(x, dim=None, keepdim: bool = False):  # noqa: A001 - mirrors torch.all
    """Whether every element over ``dim`` (an int or a tuple; None: all elements) is nonzero,
    as a bool tensor; not differentiable."""
    return _logical_reduce(x, dim, keepdim, True, "all")


@aliases
def any(x, dim=None, keepdim: bool = False):  # noqa: A001 - mirrors torch.any
    """Whether any element over ``dim`` (an int or a tuple; None: all elements) is nonzero,
    as a bool tensor; not differentiable."""
    return _logical_reduce(x, dim, keepdim, False, "any")


@register("cumprod")
class Cumprod:
    @staticmethod
    def forward(ctx, x, *, axis):
        y = ctx.xp.cumprod(x, axis=axis)
        ctx.save(x, y)
        ctx.axis = axis
        return y

    @staticmethod
    def backward(ctx, gy):
        x, y = ctx.saved
        xp = ctx.xp
        x, y, gy = (xp.moveaxis(a, ctx.axis, -1) for a in (x, y, gy))
        if bool((x != 0).all()):
            # gx_i = sum_{j >= i} gy_j * y_j / x_i: a reversed cumulative sum, O(n).
            rcs = xp.flip(xp.cumsum(xp.flip(gy * y, -1), axis=-1), -1)
            gx = rcs / x
        else:
            # With a zero, y_j / x_i is 0/0: take prod_{k <= j, k != i} x_k directly as
            # (prod_{k < i} x_k) * (prod_{i < k <= j} x_k), O(n^2) but exact.
            n = x.shape[-1]
            gx = xp.empty_like(gy)
            for i in range(n):
                left = y[..., i - 1 : i] if i else xp.ones_like(x[..., :1])
                right = xp.cumprod(x[..., i + 1 :], axis=-1)
                inner = gy[..., i : i + 1].copy()
                if n - i > 1:
                    inner = inner + (gy[..., i + 1 :] * right).sum(axis=-1, keepdims=True)
                gx[..., i : i + 1] = left * inner
        return xp.moveaxis(gx, -1, ctx.axis)


def _one_dim(dim, x, op):
    if not isinstance(dim, numbers.Integral) or isinstance(dim, bool):
        raise ArgumentTypeError(f"{op}: dim must be an int, got {dim!r}")
    # A 0-d tensor has one dim to name, 0 or -1, as in PyTorch.
    (a,) = normalize_axes(0 if x.ndim == 0 and dim == -1 else dim, x.ndim, op)
    return a


def _as_1d(fn, x, *args, **kwargs):
    """Run ``fn`` on a 0-d tensor as on one element of a 1-D one (NumPy has no axis 0 there)."""
    from ferro.ops.shape import reshape

    out = fn(reshape(x, 1), *args, **kwargs)
    if isinstance(out, tuple):
        return type(out)(*(reshape(o, ()) for o in out))
    return reshape(out, ())


@aliases
def cumprod(x, dim: int):
    """Cumulative product along ``dim``.

    Gradient: gx_i = sum over j >= i of gy_j * (product of x_0..x_j except x_i), exact with
    zeros.
    """
    a = _one_dim(dim, x, "cumprod")
    if x.ndim == 0:
        return _as_1d(cumprod, x, 0)
    return apply(Cumprod, x, axis=a)


#: What ``sort``/``topk`` return, as PyTorch's ``torch.return_types``.
SortResult = namedtuple("sort", ("values", "indices"))
TopkResult = namedtuple("topk", ("values", "indices"))


def _argsort(xp, x, axis, descending):
    # Stable both ways: descending sorts the reversed array and reverses back, so equal
    # elements keep their original order (PyTorch's stable=True).
    if not descending:
        return xp.argsort(x, axis=axis, kind="stable")
    n = x.shape[axis]
    idx = xp.argsort(xp.flip(x, axis), axis=axis, kind="stable")
    return n - 1 - xp.flip(idx, axis)


@register("sort")
class Sort:
    @staticmethod
    def forward(ctx, x, *, axis, descending, k):
        xp = ctx.xp
        idx = _argsort(xp, x, axis, descending)
        if k is not None:
            idx = xp.take(idx, xp.arange(k), axis=axis)
        ctx.save(idx)
        ctx.shape, ctx.axis = x.shape, axis
        return xp.take_along_axis(x, idx, axis=axis), idx.astype(xp.int64)

    @staticmethod
    def backward(ctx, gy, gi):
        (idx,) = ctx.saved
        gx = ctx.xp.zeros(ctx.shape, dtype=gy.dtype)
        ctx.xp.put_along_axis(gx, idx, gy, axis=ctx.axis)
        return gx


def sort(x, dim: int = -1, descending: bool = False, stable: bool = False):
    """``x`` sorted along ``dim``: a named tuple ``(values, indices)``; indices are int64
    and not differentiable. The sort is always stable (``stable`` is accepted for PyTorch's
    signature).

    Gradient: gx = gy put back at the positions ``indices`` names.
    """
    a = _one_dim(dim, x, "sort")
    if x.ndim == 0:
        return _as_1d(sort, x, 0, descending)
    values, indices = apply(Sort, x, axis=a, descending=bool(descending), k=None)
    return SortResult(values, indices)


def topk(x, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):  # noqa: A002
    """The ``k`` largest (``largest=False``: smallest) elements along ``dim``: a named tuple
    ``(values, indices)``, in sorted order (``sorted`` is accepted for PyTorch's signature);
    indices are int64 and not differentiable.

    Gradient: gx = gy put back at the positions ``indices`` names, else 0.
    """
    a = _one_dim(dim, x, "topk")
    if not isinstance(k, numbers.Integral) or isinstance(k, bool):
        raise ArgumentTypeError(f"topk: k must be an int, got {k!r}")
    n = x.shape[a] if x.ndim else 1
    if not 0 <= k <= n:
        raise IndexOutOfRangeError(f"topk: k={k} is out of range for a dimension of size {n}")
    if x.ndim == 0:
        return _as_1d(topk, x, k, 0, largest)
    values, indices = apply(Sort, x, axis=a, descending=bool(largest), k=int(k))
    return TopkResult(values, indices)


@register("argsort", differentiable=False, same_dtype=False)
class Argsort:
    @staticmethod
    def forward(ctx, x, *, axis, descending):
        return _argsort(ctx.xp, x, axis, descending).astype(ctx.xp.int64)


def argsort(x, dim: int = -1, descending: bool = False, stable: bool = False):
    """The int64 indices that sort ``x`` along ``dim`` (stable); not differentiable."""
    a = _one_dim(dim, x, "argsort")
    if x.ndim == 0:
        return _as_1d(argsort, x, 0, descending)
    return apply(Argsort, x, axis=a, descending=bool(descending))


# The family's public functions (ferro.ops exports their union): a new op's name goes here.
def _no_grad_result(arr, like):
    """Wrap an index or count array (int64, no history) computed from ``like``'s data."""
    from ferro._C.tensor import wrap

    return wrap(arr)


def _tensor_data(x, op):
    from ferro._C.tensor import TensorBase

    if not isinstance(x, TensorBase):
        raise ArgumentTypeError(f"{op}: expected a Tensor, got {type(x).__name__}")
    return x._data


def unique(
    input,  # noqa: A002 - PyTorch's argument names
    sorted: bool = True,  # noqa: A002
    return_inverse: bool = False,
    return_counts: bool = False,
    dim=None,
):
    """The distinct elements of ``input`` (flattened when ``dim`` is None), sorted, as
    PyTorch's ``unique``; with ``return_inverse`` also where each element of ``input`` went
    (``input``'s shape), with ``return_counts`` how often each occurs. With ``dim``, the
    distinct slices along ``dim``. The results are not differentiable (no history).

    Example:
        >>> ferro.unique(ferro.tensor([3, 1, 3]), return_counts=True)
        (tensor([1, 3]), tensor([1, 2]))
    """
    data = _tensor_data(input, "unique")
    xp = _xp(data)
    if dim is None:
        values, inverse, counts = xp.unique(data, return_inverse=True, return_counts=True)
        inverse = inverse.reshape(data.shape)
    else:
        a = _one_dim(dim, input, "unique")
        values, inverse, counts = xp.unique(data, return_inverse=True, return_counts=True, axis=a)
        inverse = inverse.reshape(-1)
    out = [_no_grad_result(values, input)]
    if return_inverse:
        out.append(_no_grad_result(inverse.astype("int64"), input))
    if return_counts:
        out.append(_no_grad_result(counts.astype("int64"), input))
    return out[0] if len(out) == 1 else tuple(out)


def unique_consecutive(
    input,  # noqa: A002 - PyTorch's argument names
    return_inverse: bool = False,
    return_counts: bool = False,
    dim=None,
):
    """``input`` (flattened when ``dim`` is None) with each run of equal consecutive elements
    (with ``dim``: slices) kept once, as PyTorch's ``unique_consecutive``; ``return_inverse``
    and ``return_counts`` as in :func:`unique`. The results are not differentiable
    (no history).

    Example:
        >>> ferro.unique_consecutive(ferro.tensor([1, 1, 2, 1]), return_counts=True)
        (tensor([1, 2, 1]), tensor([2, 1, 1]))
    """
    data = _tensor_data(input, "unique_consecutive")
    xp = _xp(data)
    a = 0 if dim is None else _one_dim(dim, input, "unique_consecutive")
    rows = (
        data.reshape(-1, 1) if dim is None else xp.moveaxis(data, a, 0).reshape(data.shape[a], -1)
    )
    starts = xp.concatenate(
        [xp.ones(builtins.min(len(rows), 1), bool), (rows[1:] != rows[:-1]).any(axis=1)]
    )
    first = xp.nonzero(starts)[0]
    values = data.reshape(-1)[first] if dim is None else xp.take(data, first, axis=a)
    out = [_no_grad_result(values, input)]
    if return_inverse:
        inverse = xp.cumsum(starts) - 1
        out.append(_no_grad_result(inverse.reshape(data.shape if dim is None else -1), input))
    if return_counts:
        counts = xp.diff(xp.concatenate([first, xp.asarray([len(rows)])]))
        out.append(_no_grad_result(counts.astype("int64"), input))
    return out[0] if len(out) == 1 else tuple(out)


def histc(input, bins: int = 100, min=0, max=0):  # noqa: A002
    """The histogram of ``input`` in ``bins`` equal bins over ``[min, max]`` (the last bin
    closed), as PyTorch's ``histc``: with ``min == max`` the data's own range; elements
    outside it (and NaNs) are not counted. Of ``input``'s dtype; not differentiable.

    Example:
        >>> ferro.histc(ferro.tensor([1.0, 2.0, 1.0]), bins=4, min=0, max=3)
        tensor([0., 2., 1., 0.])
    """
    data = _tensor_data(input, "histc")
    _float_only(input, "histc")
    if not isinstance(bins, numbers.Integral) or isinstance(bins, bool) or bins <= 0:
        raise ArgumentError(f"histc: bins must be a positive int, got {bins!r}")
    lo, hi = float(min), float(max)
    if lo > hi:
        raise ArgumentError(f"histc: min ({lo}) must not be greater than max ({hi})")
    xp = _xp(data)
    values = data[~xp.isnan(data)].reshape(-1)
    if lo == hi and values.size:
        lo, hi = float(values.min()), float(values.max())
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    counts, _ = xp.histogram(values, bins=int(bins), range=(lo, hi))
    return _no_grad_result(counts.astype(data.dtype), input)


def count_nonzero(input, dim=None):  # noqa: A002
    """How many elements are not 0, over ``dim`` (an int or a tuple; None: all), int64.
    The count is not differentiable.
    """
    return sum(input != 0, dim)


#: What ``aminmax`` returns, as PyTorch's ``torch.return_types.aminmax``.
AminmaxResult = namedtuple("aminmax", ("min", "max"))


def aminmax(input, *, dim=None, keepdim: bool = False):  # noqa: A002
    """A named tuple ``(min, max)`` of :func:`amin` and :func:`amax` over ``dim``.

    Gradient: as amin's and amax's (ties share it evenly).
    """
    return AminmaxResult(amin(input, dim, keepdim), amax(input, dim, keepdim))


def var_mean(input, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):  # noqa: A002
    """The tuple ``(var, mean)`` over ``dim``, as PyTorch's ``var_mean``.

    Gradient: as var's and mean's.
    """
    v = var(input, dim, unbiased, keepdim, correction=correction)
    return v, mean(input, dim, keepdim)


def std_mean(input, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):  # noqa: A002
    """The tuple ``(std, mean)`` over ``dim``, as PyTorch's ``std_mean``.

    Gradient: as std's and mean's.
    """
    s = std(input, dim, unbiased, keepdim, correction=correction)
    return s, mean(input, dim, keepdim)


_QUANTILE_MODES = ("linear", "lower", "higher", "nearest", "midpoint")


def quantile(input, q, dim=None, keepdim: bool = False, *, interpolation: str = "linear"):  # noqa: A002
    """The ``q``-th quantiles (``q`` a number or a 1-D tensor in [0, 1]) along ``dim`` (None:
    of all elements), as PyTorch's: between the two order statistics around ``q * (n - 1)``
    by ``interpolation`` (``linear``, ``lower``, ``higher``, ``nearest``, ``midpoint``). A 1-D
    ``q`` puts its dimension first. A NaN makes its slice's quantiles NaN.

    Gradient: gy shared by the two elements picked, by the interpolation weights.
    """
    from ferro._C.tensor import TensorBase, wrap

    if interpolation not in _QUANTILE_MODES:
        raise ArgumentError(
            f"quantile: interpolation must be one of {_QUANTILE_MODES}, got {interpolation!r}"
        )
    _float_only(input, "quantile")
    qs = q._data if isinstance(q, TensorBase) else np.asarray(q, dtype=np.float64)
    if qs.ndim > 1:
        raise ShapeError(f"quantile: q must be a number or a 1-D tensor, got shape {qs.shape}")
    xp = xp_of(input._data)
    qs = xp.asarray(qs, dtype=np.float64)
    if bool(((qs < 0) | (qs > 1)).any()):
        raise ArgumentError("quantile: q must be in [0, 1]")
    x = input.reshape(-1) if dim is None else input
    a = 0 if dim is None else _one_dim(dim, input, "quantile")
    if x.ndim == 0:
        x = x.reshape(1)
    n = x.shape[a]
    if n == 0:
        raise IndexOutOfRangeError(f"quantile: dimension {a} of shape {tuple(x.shape)} is empty")
    values = sort(x, a).values  # NaN sorts last
    pos = qs.reshape(-1) * (n - 1)
    if interpolation == "lower":
        pos = xp.floor(pos)
    elif interpolation == "higher":
        pos = xp.ceil(pos)
    elif interpolation == "nearest":
        pos = xp.round(pos)  # half to even, as PyTorch's
    lo = xp.floor(pos).astype(xp.int64)
    hi = xp.minimum(lo + 1, n - 1)
    frac = pos - lo if interpolation != "midpoint" else xp.where(pos > lo, 0.5, 0.0)

    shape = [1] * x.ndim
    shape[a] = pos.size
    w = wrap(xp.asarray(frac, dtype=input._data.dtype).reshape(shape))
    below = values.index_select(a, wrap(lo))
    out = below + (values.index_select(a, wrap(hi)) - below) * w
    has_nan = xp.isnan(x._data).any(axis=a, keepdims=True)
    out = out.masked_fill(wrap(xp.broadcast_to(has_nan, out.shape)), float("nan"))
    out = out.movedim(a, 0)  # the q dimension first
    if keepdim:
        keep = (pos.size,) + tuple(
            1 if dim is None or d == a else s for d, s in enumerate(input.shape)
        )
        out = out.reshape(keep)
    if qs.ndim == 0:
        out = out.squeeze(0)
    return out


def isin(elements, test_elements, *, assume_unique: bool = False, invert: bool = False):
    """Whether each element of ``elements`` is among ``test_elements`` (tensors or numbers),
    a bool tensor of ``elements``' shape; not differentiable.
    """
    from ferro._C.tensor import TensorBase, wrap

    e = elements._data if isinstance(elements, TensorBase) else np.asarray(elements)
    t = test_elements._data if isinstance(test_elements, TensorBase) else np.asarray(test_elements)
    xp = _xp(e if isinstance(elements, TensorBase) else t)
    return wrap(xp.asarray(xp.isin(e, t, invert=bool(invert))))


def bincount(input, weights=None, minlength: int = 0):  # noqa: A002
    """How often each value ``0 .. max`` occurs in the 1-D non-negative integer ``input`` (at
    least ``minlength`` bins), or the sums of ``weights`` per value; not differentiable.
    """
    data = _tensor_data(input, "bincount")
    if data.ndim != 1 or data.dtype.kind not in "iu":
        raise ShapeError(
            f"bincount: expects a 1-D integer tensor, got shape {tuple(data.shape)} {data.dtype}"
        )
    if data.size and int(data.min()) < 0:
        raise ArgumentError("bincount: the values must be non-negative")
    w = None if weights is None else _tensor_data(weights, "bincount")
    out = _xp(data).bincount(data, weights=w, minlength=int(minlength))
    return _no_grad_result(out.astype(w.dtype if w is not None else "int64"), input)


def _xp(arr):
    from ferro.backend import xp_of

    return xp_of(arr)


def searchsorted(
    sorted_sequence,
    input,  # noqa: A002
    *,
    out_int32: bool = False,
    right: bool = False,
    side=None,
    sorter=None,
):
    """For each value of ``input``, the index in the last dimension of ``sorted_sequence``
    where it would be inserted to keep the order, as PyTorch's ``searchsorted``: the first such
    index, or the last with ``right=True`` (or ``side="right"``); ``sorter`` gives the indices
    that sort an unsorted sequence. A N-D sequence searches row by row (``input`` then has the
    same leading dimensions). int64 (int32 with ``out_int32``); not differentiable.

    Example:
        >>> ferro.searchsorted(ferro.tensor([1, 3, 5]), ferro.tensor([3, 6]))
        tensor([1, 3])
    """
    seq = _tensor_data(sorted_sequence, "searchsorted")
    from ferro._C.tensor import TensorBase

    scalar = not isinstance(input, TensorBase)
    values = _xp(seq).asarray(input) if scalar else input._data
    if side is not None:
        if side not in ("left", "right"):
            raise ArgumentError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
        if right and side == "left":
            raise ArgumentError("searchsorted: right=True contradicts side='left'")
        right = side == "right"
    if sorter is not None:
        order = _tensor_data(sorter, "searchsorted")
        seq = _xp(seq).take_along_axis(seq, order, axis=-1)
    how = "right" if right else "left"
    xp = _xp(seq)
    if seq.ndim <= 1:
        found = xp.searchsorted(seq, values, side=how)
    else:
        if tuple(values.shape[:-1]) != tuple(seq.shape[:-1]):
            raise ShapeError(
                f"searchsorted: the leading dimensions of the sequence {tuple(seq.shape)} and of "
                f"the values {tuple(values.shape)} differ"
            )
        rows_s = seq.reshape(-1, seq.shape[-1])
        rows_v = values.reshape(-1, values.shape[-1])
        found = xp.stack(
            [xp.searchsorted(r, v, side=how) for r, v in zip(rows_s, rows_v, strict=True)]
        ).reshape(values.shape)
    return _no_grad_result(xp.asarray(found).astype("int32" if out_int32 else "int64"), input)


def bucketize(input, boundaries, *, out_int32: bool = False, right: bool = False):  # noqa: A002
    """The bucket of each value of ``input`` given 1-D increasing ``boundaries``, as PyTorch's
    ``bucketize``: ``i`` with ``boundaries[i-1] < x <= boundaries[i]`` (``right=False``) or
    ``boundaries[i-1] <= x < boundaries[i]`` (``right=True``). int64; not differentiable.

    Example:
        >>> ferro.bucketize(ferro.tensor([1, 5, 9]), ferro.tensor([2, 5, 8]))
        tensor([0, 1, 3])
    """
    b = _tensor_data(boundaries, "bucketize")
    if b.ndim != 1:
        raise ShapeError(f"bucketize: boundaries must be 1-D, got shape {tuple(b.shape)}")
    return searchsorted(boundaries, input, out_int32=out_int32, right=right)


#: What ``median(x, dim)`` returns, as PyTorch's ``torch.return_types.median``.
MedianResult = namedtuple("median", ("values", "indices"))


def median(x, dim=None, keepdim: bool = False):
    """The lower median: with ``dim=None`` the ``(n - 1) // 2``-th smallest element of all of
    ``x`` (NaN for an empty tensor); with ``dim`` a named tuple ``(values, indices)`` along it
    (indices int64, not differentiable). As in PyTorch, a NaN makes the result NaN.

    Gradient: gy goes to the element the median picked (the sort's backward).
    """
    if dim is None:
        flat = x.reshape(-1)
        if flat.shape[0] == 0:
            return x.sum() * float("nan")
        nans = flat.isnan()
        values = sort(flat).values
        k = (flat.shape[0] - 1) // 2
        if bool(nans.any()):  # PyTorch propagates NaN; sort puts NaNs last
            k = flat.shape[0] - 1
        return values[k]
    a = _one_dim(dim, x, "median")
    if x.ndim == 0:
        return MedianResult(x * 1, _no_grad_result(xp_of(x._data).zeros((), "int64"), x))
    n = x.shape[a]
    if n == 0:
        raise IndexOutOfRangeError(f"median: dimension {dim} of shape {tuple(x.shape)} is empty")
    values, indices = sort(x, a)
    # A NaN sorts last and is the median of its slice, as in PyTorch.
    xp = xp_of(x._data)
    has_nan = xp.isnan(x._data).any(axis=a, keepdims=True) if x._data.dtype.kind == "f" else None
    k = xp.full(values.shape[:a] + (1,) + values.shape[a + 1 :], (n - 1) // 2, dtype=xp.int64)
    if has_nan is not None:
        k = xp.where(has_nan, n - 1, k)
    return _pick_sorted(values, indices, a, k, keepdim, MedianResult)


def _pick_sorted(values, indices, a, k, keepdim, result):
    """The ``k``-th (an int64 array, one per slice, size 1 along ``a``) of sorted
    ``values``/``indices`` along ``a``, as a named tuple ``result``."""
    from ferro._C.tensor import wrap

    kt = wrap(k)
    v, i = values.gather(a, kt), indices.gather(a, kt)
    if not keepdim:
        v, i = v.squeeze(a), i.squeeze(a)
    return result(v, i)


#: What ``kthvalue``/``nanmedian`` return, as PyTorch's ``torch.return_types``.
KthvalueResult = namedtuple("kthvalue", ("values", "indices"))
NanmedianResult = namedtuple("nanmedian", ("values", "indices"))


def kthvalue(input, k: int, dim: int = -1, keepdim: bool = False):  # noqa: A002
    """The ``k``-th smallest element (``k`` from 1) along ``dim``: a named tuple
    ``(values, indices)``; indices int64, not differentiable. NaN counts as the largest.

    Gradient: gy goes to the element picked (the sort's backward).

    Example:
        >>> ferro.kthvalue(ferro.tensor([3.0, 1.0, 2.0]), 2)
        kthvalue(values=tensor(2.), indices=tensor(2))
    """
    a = _one_dim(dim, input, "kthvalue")
    if not isinstance(k, numbers.Integral) or isinstance(k, bool):
        raise ArgumentTypeError(f"kthvalue: k must be an int, got {k!r}")
    n = input.shape[a] if input.ndim else 1
    if not 1 <= k <= n:
        raise IndexOutOfRangeError(
            f"kthvalue: k={k} is out of range for dimension {dim} of shape {tuple(input.shape)}"
        )
    if input.ndim == 0:
        return _as_1d(kthvalue, input, k, 0)
    values, indices = sort(input, a)
    xp = xp_of(input._data)
    k_arr = xp.full(values.shape[:a] + (1,) + values.shape[a + 1 :], k - 1, dtype=xp.int64)
    return _pick_sorted(values, indices, a, k_arr, keepdim, KthvalueResult)


def nanmedian(input, dim=None, keepdim: bool = False):  # noqa: A002
    """:func:`median` of the values that are not NaN (NaN where all are), as PyTorch's: the
    lower median, with ``dim`` a named tuple ``(values, indices)``.

    Gradient: gy goes to the element the median picked (the sort's backward).
    """
    xp = xp_of(input._data)
    floating = input._data.dtype.kind == "f"
    if dim is None:
        flat = input.reshape(-1)
        if flat.shape[0] == 0:
            return input.sum() * float("nan")
        count = int((~xp.isnan(flat._data)).sum()) if floating else flat.shape[0]
        return sort(flat).values[builtins.max((count - 1) // 2, 0)]
    a = _one_dim(dim, input, "nanmedian")
    if input.ndim == 0 or not floating:
        return NanmedianResult(*median(input, a, keepdim))
    if input.shape[a] == 0:
        raise IndexOutOfRangeError(
            f"nanmedian: dimension {dim} of shape {tuple(input.shape)} is empty"
        )
    values, indices = sort(input, a)
    count = (~xp.isnan(input._data)).sum(axis=a, keepdims=True)
    k = xp.maximum((count - 1) // 2, 0).astype(xp.int64)
    return _pick_sorted(values, indices, a, k, keepdim, NanmedianResult)


def _nan_zeroed(x):
    return x.masked_fill(x.isnan(), 0.0) if x._data.dtype.kind == "f" else x


@aliases
def nansum(input, dim=None, keepdim: bool = False, *, dtype=None):  # noqa: A002
    """:func:`sum` with NaN counted as 0.

    Gradient: gx = gy, 0 at the NaNs.
    """
    x = _nan_zeroed(input)
    return sum(x if dtype is None else x.to(dtype), dim, keepdim)


@aliases
def nanmean(input, dim=None, keepdim: bool = False, *, dtype=None):  # noqa: A002
    """:func:`mean` of the values that are not NaN (NaN where all are).

    Gradient: gx = gy / (the count of non-NaN values), 0 at the NaNs.
    """
    _float_only(input, "nanmean")
    from ferro._C.tensor import wrap

    x = input if dtype is None else input.to(dtype)
    xp = xp_of(x._data)
    present = wrap(xp.asarray(~xp.isnan(x._data), dtype=x._data.dtype))
    return nansum(x, dim, keepdim) / sum(present, dim, keepdim)


__all__ = [
    "aminmax",
    "bincount",
    "count_nonzero",
    "isin",
    "quantile",
    "std_mean",
    "var_mean",
    "histc",
    "kthvalue",
    "unique_consecutive",
    "median",
    "nanmean",
    "nanmedian",
    "nansum",
    "bucketize",
    "searchsorted",
    "unique",
    "all",
    "amax",
    "amin",
    "any",
    "argmax",
    "argmin",
    "argsort",
    "cumprod",
    "cumsum",
    "logsumexp",
    "max",
    "mean",
    "min",
    "norm",
    "prod",
    "std",
    "sort",
    "sum",
    "topk",
    "var",
]
