"""Scans along a dim beyond ``cumsum``/``cumprod``: ``cummax``, ``cummin`` (with the index of
each running extreme) and ``logcumsumexp``, under PyTorch's names.

On NumPy a scan is the ufunc's ``accumulate`` (one pass). Elsewhere (CuPy, whose ``accumulate``
does not cover every ufunc) it is the doubling scan of :func:`_scan`: ``log2(n)`` passes of
whole-array operations, so it also runs on the differentiable namespace under ``create_graph``.
"""

from __future__ import annotations

from collections import namedtuple

from ferro.errors import DtypeError
from ferro.ops.reduction import _as_1d, _one_dim
from ferro.ops.registry import apply, register


def _scan(xp, name, x):
    """The inclusive scan of the binary ufunc ``name`` along the last axis of ``x``."""
    if xp.__name__ == "numpy":
        return getattr(xp, name).accumulate(x, axis=-1)
    combine, n, s = getattr(xp, name), x.shape[-1], 1
    while s < n:
        x = xp.concatenate([x[..., :s], combine(x[..., s:], x[..., :-s])], axis=-1)
        s *= 2
    return x


def _cumextreme(xp, x, largest):
    """Running maxima (minima) along the last axis and, for each, the index of the last element
    equal to it (PyTorch's choice among ties); a NaN, once met, is the value from there on."""
    values = _scan(xp, "maximum" if largest else "minimum", x)
    hit = x == values
    if x.dtype.kind == "f":
        hit = hit | xp.isnan(x)
    position = xp.arange(x.shape[-1])
    return values, _scan(xp, "maximum", xp.where(hit, position, 0))


@register("cummax")
class Cummax:
    @staticmethod
    def forward(ctx, x, *, axis, largest):
        xp = ctx.xp
        values, idx = _cumextreme(xp, xp.moveaxis(x, axis, -1), largest)
        idx = xp.moveaxis(idx, -1, axis)
        ctx.save(idx)
        ctx.shape, ctx.axis = x.shape, axis
        return xp.moveaxis(values, -1, axis), idx.astype(xp.int64)

    @staticmethod
    def backward(ctx, gy, gi):
        from ferro.ops.shape import _grid, _scatter_add_into_zeros

        (idx,) = ctx.saved
        return _scatter_add_into_zeros(
            ctx.xp, ctx.shape, _grid(ctx.xp, idx, ctx.axis), gy, "cummax/cummin"
        )


#: What ``cummax``/``cummin`` return, as PyTorch's ``torch.return_types``.
CummaxResult = namedtuple("cummax", ("values", "indices"))
CumminResult = namedtuple("cummin", ("values", "indices"))


def _cumextreme_op(x, dim, largest, op):
    a = _one_dim(dim, x, op)
    if x.ndim == 0:
        return _as_1d(_cumextreme_op, x, 0, largest, op)
    values, indices = apply(Cummax, x, axis=a, largest=largest)
    return (CummaxResult if largest else CumminResult)(values, indices)


def cummax(input, dim: int):  # noqa: A002 - PyTorch's argument names
    """The running maximum along ``dim``: a named tuple ``(values, indices)``, ``indices``
    (int64, not differentiable) naming for each position the last element equal to its
    running maximum, as PyTorch's. A NaN propagates from where it stands.

    Gradient: gy of each position goes to the element its index names (summed there).

    Example:
        >>> ferro.cummax(ferro.tensor([1.0, 3.0, 2.0, 3.0]), 0).indices
        tensor([0, 1, 1, 3])
    """
    return _cumextreme_op(input, dim, True, "cummax")


def cummin(input, dim: int):  # noqa: A002
    """The running minimum along ``dim``, as :func:`cummax`.

    Gradient: gy of each position goes to the element its index names (summed there).
    """
    return _cumextreme_op(input, dim, False, "cummin")


def _reverse_affine_scan(xp, a, g):
    """``t_i = g_i + a_i * t_(i+1)`` along the last axis (``t_n = 0``), by doubling: after the
    pass with shift ``s``, ``t_i`` sums the terms ``i .. i+2s-1`` and ``a_i`` is the product of
    the factors that reach ``i+2s``. Only products and sums, so it runs on any namespace."""
    n, s = g.shape[-1], 1
    while s < n:
        g = g + a * xp.concatenate([g[..., s:], xp.zeros_like(g[..., :s])], axis=-1)
        a = a * xp.concatenate([a[..., s:], xp.zeros_like(a[..., :s])], axis=-1)
        s *= 2
    return g


@register("logcumsumexp")
class Logcumsumexp:
    @staticmethod
    def forward(ctx, x, *, axis):
        xp = ctx.xp
        y = xp.moveaxis(_scan(xp, "logaddexp", xp.moveaxis(x, axis, -1)), -1, axis)
        ctx.save(x, y)
        ctx.axis = axis
        return y

    @staticmethod
    def backward(ctx, gy):
        # gx_i = sum over j >= i of gy_j * exp(x_i - y_j) = exp(x_i - y_i) * t_i with
        # t_i = gy_i + exp(y_i - y_(i+1)) * t_(i+1): every factor is at most 1 (y does not
        # decrease), so nothing overflows however far apart the inputs are.
        x, y = ctx.saved
        xp = ctx.xp
        if x.shape[ctx.axis] == 0:
            return gy
        x, y, g = (xp.moveaxis(v, ctx.axis, -1) for v in (x, y, gy))
        decay = xp.concatenate(
            [xp.exp(y[..., :-1] - y[..., 1:]), xp.zeros_like(y[..., :1])], axis=-1
        )
        gx = xp.exp(x - y) * _reverse_affine_scan(xp, decay, g)
        return xp.moveaxis(gx, -1, ctx.axis)


def logcumsumexp(input, dim: int):  # noqa: A002
    """``log(cumsum(exp(input), dim))`` computed without overflow or underflow, as PyTorch's.

    Gradient: gx_i = sum over j >= i of gy_j * exp(x_i - y_j) (the softmax weights of each
    prefix).

    Example:
        >>> ferro.logcumsumexp(ferro.tensor([0.0, 0.0]), 0)
        tensor([0.0000, 0.6931])
    """
    a = _one_dim(dim, input, "logcumsumexp")
    if input.dtype.kind != "f":
        raise DtypeError(f"logcumsumexp: expects a floating tensor, got {input.dtype}")
    if input.ndim == 0:
        return _as_1d(logcumsumexp, input, 0)
    return apply(Logcumsumexp, input, axis=a)


__all__ = ["cummax", "cummin", "logcumsumexp"]
