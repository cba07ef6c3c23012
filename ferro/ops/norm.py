"""Normalization: ``batch_norm``, ``layer_norm``, ``group_norm``, ``instance_norm``, ``rms_norm``
and ``local_response_norm``, with PyTorch's signatures and numerics.

Each is one op (one node). The batch, layer, group and instance norms share one closed form:
the input is viewed as ``xr`` with the statistics taken over ``axes`` (``(0, 2)`` of
``(N, C, S)`` for batch norm, the last axis of ``(M, D)`` for layer norm, of ``(N, G, K)`` for
group and instance norm), ``xhat = (xr - mean) * rstd`` with ``rstd = 1 / sqrt(var + eps)``
(biased variance, two passes: no cancellation in float32), ``y = xhat * weight + bias``, and

    gx = rstd * (g - mean(g) - xhat * mean(g * xhat)),   g = gy * weight,
    gweight = sum(gy * xhat),   gbias = sum(gy)

with the means over ``axes`` and the sums over every axis the weight is broadcast along.

Note [Norm state]: forward saves only its input and weight (``ctx.save(x, weight)``) and keeps
each statistic's ``mean`` and ``rstd`` as ``ctx`` attributes, which the first-order backward
reads instead of recomputing them. Those are intermediates computed from the input, so the
double-backward path must not treat them as constants: ``differentiable_backward`` recomputes
them from the saved input with ferro ops, and its gradients are differentiable again.

Running statistics (``batch_norm`` and ``instance_norm`` in training) are updated in place,
inside forward, from the batch statistics: ``running = (1 - momentum) * running + momentum *
stat`` with the unbiased variance (``var * n / (n - 1)``), as PyTorch does; the buffers'
version counters are bumped.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ferro._C.engine import bump_version
from ferro._C.tensor import TensorBase
from ferro.backend import device_of
from ferro.errors import ArgumentError, ArgumentTypeError, DeviceError, DtypeError, ShapeError
from ferro.ops.elementwise import real_arg
from ferro.ops.registry import apply, register


def _normalize(xp, xr, axes, eps):
    """``(xhat, mean, rstd, var)`` of ``xr`` over ``axes`` (keepdims), in two passes."""
    mean = xr.mean(axis=axes, keepdims=True)
    xhat = xr - mean
    var = xp.square(xhat).mean(axis=axes, keepdims=True)
    rstd = 1 / xp.sqrt(var + eps)
    xhat *= rstd
    return xhat, mean, rstd, var


def _input_grad(g, xhat, rstd, axes, centered=True):
    """``rstd * (g - mean(g) - xhat * mean(g * xhat))`` over ``axes``, from arrays or Tensors
    (``centered=False``: RMS norm, which subtracts no mean)."""
    proj = xhat * (g * xhat).mean(axis=axes, keepdims=True)
    if centered:
        return rstd * (g - g.mean(axis=axes, keepdims=True) - proj)
    return rstd * (g - proj)


def _stats_of(xr, axes, eps, centered=True):
    """``(xhat, rstd)`` recomputed from a Tensor with ferro ops (the double-backward path)."""
    from ferro.ops.elementwise import rsqrt

    if centered:
        d = xr - xr.mean(axis=axes, keepdims=True)
        rstd = rsqrt((d * d).mean(axis=axes, keepdims=True) + eps)
        return d * rstd, rstd
    rstd = rsqrt((xr * xr).mean(axis=axes, keepdims=True) + eps)
    return xr * rstd, rstd


def _shaped(a, shape):
    """``a``, a fresh array, as ``shape``: itself, or reshaped in place where it is C-contiguous,
    so that it keeps owning its data (a reshape's view, even to the same shape, would make the
    engine copy a gradient: Note [Grad ownership] in docs/design.md). Tensors (the double
    backward) are reshaped."""
    if tuple(a.shape) == shape:
        return a
    if isinstance(a, np.ndarray) and a.flags.c_contiguous and a.flags.owndata:
        a.resize(shape, refcheck=False)  # same size: no copy (NumPy 2.5 deprecates `a.shape =`)
        return a
    if not isinstance(a, (TensorBase, np.ndarray)) and a.flags.c_contiguous:
        a.shape = shape  # CuPy's arrays have no resize; setting the shape is theirs
        return a
    return a.reshape(shape)


def _param_grads(gy, xhat, need_w, need_b, sum_axes, shape):
    gw = _shaped((gy * xhat).sum(axis=sum_axes), shape) if need_w else None
    gb = _shaped(gy.sum(axis=sum_axes), shape) if need_b else None
    return gw, gb


# Batch norm ----------------------------------------------------------------------------------


def _batch_norm_double(ctx, gy):
    """BatchNorm's gradients with ferro ops, the statistics recomputed from the saved input
    (Note [Norm state]): differentiable again, for double backward."""
    x, weight = ctx.saved
    need_x, need_w, need_b = ctx.needs_input_grad
    n, c = x.shape[0], x.shape[1]
    xr, g = x.reshape(n, c, -1), gy.reshape(n, c, -1)
    if ctx.training:
        xhat, rstd = _stats_of(xr, (0, 2), ctx.eps)
    else:
        rstd = ctx.rstd  # from the running statistics: a constant of the graph
        xhat = (xr - ctx.mean) * rstd
    gw, gb = _param_grads(g, xhat, need_w, need_b, (0, 2), (c,))
    gx = None
    if need_x:
        gw3 = g * weight.reshape(1, c, 1) if weight is not None else g
        gx = _input_grad(gw3, xhat, rstd, (0, 2)) if ctx.training else gw3 * rstd
        gx = gx.reshape(x.shape)
    return gx, gw, gb


@register("batch_norm")
class BatchNorm:
    """Per-channel normalization of (N, C, *) with batch statistics (training) or the running
    ones (evaluation); the running statistics are updated in training."""

    @staticmethod
    def forward(ctx, x, weight, bias, *, training, running_mean, running_var, momentum, eps):
        xp = ctx.xp
        n, c = x.shape[0], x.shape[1]
        xr = x.reshape(n, c, -1)
        if training:
            xhat, mean, rstd, var = _normalize(xp, xr, (0, 2), eps)
            if running_mean is not None:
                _update_running(running_mean, running_var, mean, var, momentum, xr.size // c)
        else:
            mean = running_mean.astype(x.dtype).reshape(1, c, 1)
            rstd = 1 / xp.sqrt(running_var.astype(x.dtype).reshape(1, c, 1) + eps)
            xhat = (xr - mean) * rstd
        ctx.save(x, weight)
        ctx.mean, ctx.rstd, ctx.training, ctx.eps = mean, rstd, training, eps
        return _affine(xhat, weight, bias, (1, c, 1)).reshape(x.shape)

    @staticmethod
    def backward(ctx, gy):
        x, weight = ctx.saved
        need_x, need_w, need_b = ctx.needs_input_grad
        n, c = x.shape[0], x.shape[1]
        xhat = (x.reshape(n, c, -1) - ctx.mean) * ctx.rstd
        g = gy.reshape(n, c, -1)
        gw, gb = _param_grads(g, xhat, need_w, need_b, (0, 2), (c,))
        gx = None
        if need_x:
            gw3 = g * weight.reshape(1, c, 1) if weight is not None else g
            if ctx.training:
                gx = _shaped(_input_grad(gw3, xhat, ctx.rstd, (0, 2)), x.shape)
            else:
                gx = _shaped((gw3 * ctx.rstd), x.shape)
        return gx, gw, gb

    differentiable_backward = staticmethod(_batch_norm_double)


def _affine(xhat, weight, bias, shape):
    """``xhat * weight + bias`` with the parameters reshaped to ``shape``, in xhat's buffer."""
    if weight is not None:
        xhat *= weight.reshape(shape)
    if bias is not None:
        xhat += bias.reshape(shape)
    return xhat


def _update_running(running_mean, running_var, mean, var, momentum, n):
    """PyTorch's running-statistics update from a batch's mean and biased variance (of ``n``
    values per statistic); the variance enters unbiased. Statistics of shape (..., C, 1) are
    averaged over their leading axes first (instance norm's batch)."""
    c = running_mean.shape[0]
    mean = mean.reshape(-1, c).mean(axis=0)
    var = (var.reshape(-1, c) * (n / (n - 1))).mean(axis=0)
    running_mean *= 1 - momentum
    running_mean += (momentum * mean).astype(running_mean.dtype, copy=False)
    running_var *= 1 - momentum
    running_var += (momentum * var).astype(running_var.dtype, copy=False)


def _tensor_or_none(t, name: str, fn: str):
    if t is None or isinstance(t, TensorBase):
        return t
    raise ArgumentTypeError(f"{fn}: {name} must be a Tensor or None, got {type(t).__name__}")


def _check_param(t, name: str, shape: tuple, fn: str, x) -> None:
    """A weight, bias or running statistic: a Tensor of ``shape`` on ``x``'s device."""
    if t is None:
        return
    _tensor_or_none(t, name, fn)
    if tuple(t.shape) != tuple(shape):
        raise ShapeError(
            f"{fn}: {name} of shape {tuple(t.shape)} does not fit input of shape "
            f"{tuple(x.shape)} (expected {tuple(shape)})"
        )
    if device_of(t._data) != device_of(x._data):
        raise DeviceError(
            f"{fn}: {name} is on {device_of(t._data)}, the input on {device_of(x._data)}"
        )


def _check_input(x, fn: str, min_dim: int) -> None:
    if not isinstance(x, TensorBase):
        raise ArgumentTypeError(f"{fn}: input must be a Tensor, got {type(x).__name__}")
    if x.ndim < min_dim:
        raise ShapeError(
            f"{fn}: expected input with at least {min_dim} dimensions, got shape {tuple(x.shape)}"
        )
    if x.dtype.kind != "f":
        raise DtypeError(f"{fn}: input must be a floating-point tensor, got {x.dtype}")


def _eps_arg(eps, fn: str) -> float:
    eps = real_arg(eps, "eps", fn)
    if not eps >= 0:
        raise ArgumentError(f"{fn}: eps must be >= 0, got {eps}")
    return eps


def _running_arrays(running_mean, running_var, fn: str):
    """The running statistics' arrays, which forward updates in place (both or neither)."""
    if (running_mean is None) != (running_var is None):
        raise ArgumentError(f"{fn}: give both running_mean and running_var, or neither")
    if running_mean is None:
        return None, None
    for name, t in (("running_mean", running_mean), ("running_var", running_var)):
        if t.dtype.kind != "f":
            raise DtypeError(f"{fn}: {name} must be floating point, got {t.dtype}")
        if not getattr(t._data.flags, "writeable", True):  # CuPy's arrays are always writeable
            from ferro.errors import ReadOnlyError

            raise ReadOnlyError(f"{fn}: {name} is read-only and cannot be updated in place")
    return running_mean._data, running_var._data


def batch_norm(
    input,  # noqa: A002 - PyTorch's argument names
    running_mean,
    running_var,
    weight=None,
    bias=None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
):
    """Batch normalization of ``input`` (N, C, *) per channel, as ``torch.nn.functional.
    batch_norm``: with the batch's statistics in training (updating ``running_mean`` and
    ``running_var`` in place, the variance unbiased), with the running ones otherwise.

    Gradient: training: gx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = gy * weight,
    means over (N, *); eval: gx = gy * weight * rstd; gweight = sum(gy * xhat), gbias = sum(gy).

    Example:
        >>> x = ferro.randn(8, 3, 4)
        >>> rm, rv = ferro.zeros(3), ferro.ones(3)
        >>> y = ferro.batch_norm(x, rm, rv, training=True)  # rm, rv now moved toward the batch
    """
    fn = "batch_norm"
    _check_input(input, fn, 2)
    c = input.shape[1]
    for name, t in (("running_mean", running_mean), ("running_var", running_var)):
        _check_param(_tensor_or_none(t, name, fn), name, (c,), fn, input)
    _check_param(weight, "weight", (c,), fn, input)
    _check_param(bias, "bias", (c,), fn, input)
    eps = _eps_arg(eps, fn)
    momentum = real_arg(momentum, "momentum", fn)
    rm, rv = _running_arrays(running_mean, running_var, fn)
    if training:
        if input.numel() // max(c, 1) <= 1:
            raise ShapeError(
                f"{fn}: Expected more than 1 value per channel when training, got input of "
                f"shape {tuple(input.shape)}"
            )
    elif rm is None:
        raise ArgumentError(f"{fn}: running_mean and running_var are required when training=False")
    out = apply(
        BatchNorm,
        input,
        weight,
        bias,
        training=bool(training),
        running_mean=rm,
        running_var=rv,
        momentum=momentum,
        eps=eps,
    )
    if training and rm is not None:
        bump_version(running_mean)
        bump_version(running_var)
    return out


# Layer norm ----------------------------------------------------------------------------------


def _layer_norm_double(ctx, gy):
    """LayerNorm's gradients with ferro ops, the statistics recomputed from the saved input
    (Note [Norm state]): differentiable again, for double backward."""
    x, weight = ctx.saved
    need_x, need_w, need_b = ctx.needs_input_grad
    m, d = ctx.mean.shape[0], math.prod(ctx.shape)
    xr, g = x.reshape(m, d), gy.reshape(m, d)
    xhat, rstd = _stats_of(xr, (1,), ctx.eps)
    gw, gb = _param_grads(g, xhat, need_w, need_b, (0,), ctx.shape)
    gx = None
    if need_x:
        gw2 = g * weight.reshape(d) if weight is not None else g
        gx = _input_grad(gw2, xhat, rstd, (1,)).reshape(x.shape)
    return gx, gw, gb


@register("layer_norm")
class LayerNorm:
    """Normalization of each (M, D) row, D the product of the trailing ``normalized_shape``."""

    @staticmethod
    def forward(ctx, x, weight, bias, *, normalized_shape, eps):
        xp = ctx.xp
        d = math.prod(normalized_shape)
        xr = x.reshape(x.size // d if d else 0, d)
        xhat, mean, rstd, _ = _normalize(xp, xr, (1,), eps)
        ctx.save(x, weight)
        ctx.mean, ctx.rstd, ctx.eps, ctx.shape = mean, rstd, eps, normalized_shape
        return _affine(xhat, weight, bias, (d,)).reshape(x.shape)

    @staticmethod
    def backward(ctx, gy):
        x, weight = ctx.saved
        need_x, need_w, need_b = ctx.needs_input_grad
        xr_shape = ctx.mean.shape[0], math.prod(ctx.shape)
        xhat = (x.reshape(xr_shape) - ctx.mean) * ctx.rstd
        g = gy.reshape(xr_shape)
        gw, gb = _param_grads(g, xhat, need_w, need_b, (0,), ctx.shape)
        gx = None
        if need_x:
            gw2 = g * weight.reshape(-1) if weight is not None else g
            gx = _shaped(_input_grad(gw2, xhat, ctx.rstd, (1,)), x.shape)
        return gx, gw, gb

    differentiable_backward = staticmethod(_layer_norm_double)


def _normalized_shape_arg(normalized_shape, fn: str) -> tuple:
    if isinstance(normalized_shape, numbers.Integral) and not isinstance(normalized_shape, bool):
        normalized_shape = (normalized_shape,)
    try:
        shape = tuple(int(s) for s in normalized_shape)
    except TypeError:
        raise ArgumentTypeError(
            f"{fn}: normalized_shape must be an int or a sequence of ints, got {normalized_shape!r}"
        ) from None
    if not shape:
        raise ArgumentError(f"{fn}: normalized_shape must have at least one dimension")
    return shape


def _check_normalized(x, shape: tuple, fn: str) -> None:
    if tuple(x.shape[x.ndim - len(shape) :]) != shape or x.ndim < len(shape):
        raise ShapeError(
            f"{fn}: input of shape {tuple(x.shape)} does not end with normalized_shape {shape}"
        )


def layer_norm(input, normalized_shape, weight=None, bias=None, eps: float = 1e-5):  # noqa: A002
    """Layer normalization over the trailing ``normalized_shape`` dimensions, as
    ``torch.nn.functional.layer_norm``: ``(x - mean) / sqrt(var + eps) * weight + bias``.

    Gradient: gx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = gy * weight, means
    over the normalized dimensions; gweight = sum(gy * xhat), gbias = sum(gy) over the others.

    Example:
        >>> x = ferro.randn(4, 10, 16)
        >>> y = ferro.layer_norm(x, (16,))  # each row of 16: mean 0, variance 1
    """
    fn = "layer_norm"
    _check_input(input, fn, 1)
    shape = _normalized_shape_arg(normalized_shape, fn)
    _check_normalized(input, shape, fn)
    _check_param(weight, "weight", shape, fn, input)
    _check_param(bias, "bias", shape, fn, input)
    eps = _eps_arg(eps, fn)
    return apply(LayerNorm, input, weight, bias, normalized_shape=shape, eps=eps)


# Group and instance norm ---------------------------------------------------------------------


def _grouped_double(ctx, gy):
    """_Grouped's gradients with ferro ops, the statistics recomputed from the saved input
    (Note [Norm state]): differentiable again, for double backward."""
    x, weight = ctx.saved
    need_x, need_w, need_b = ctx.needs_input_grad
    n, c, groups = x.shape[0], x.shape[1], ctx.groups
    xhat, rstd = _stats_of(x.reshape(n, groups, -1), (2,), ctx.eps)
    g = gy.reshape(n, c, -1)
    gw, gb = _param_grads(g, xhat.reshape(n, c, -1), need_w, need_b, (0, 2), (c,))
    gx = None
    if need_x:
        gw3 = g * weight.reshape(1, c, 1) if weight is not None else g
        gx = _input_grad(gw3.reshape(n, groups, -1), xhat, rstd, (2,)).reshape(x.shape)
    return gx, gw, gb


class _Grouped:
    """Normalization of (N, C, *) over each of ``groups`` groups of channels and *, with
    a per-channel affine; instance norm (one group per channel) may update running stats."""

    @staticmethod
    def forward(ctx, x, weight, bias, *, groups, eps, running_mean, running_var, momentum):
        xp = ctx.xp
        n, c = x.shape[0], x.shape[1]
        xhat, mean, rstd, var = _normalize(xp, x.reshape(n, groups, -1), (2,), eps)
        if running_mean is not None:
            s = x.size // max(n * c, 1)
            _update_running(running_mean, running_var, mean, var, momentum, s)
        ctx.save(x, weight)
        ctx.mean, ctx.rstd, ctx.groups, ctx.eps = mean, rstd, groups, eps
        return _affine(xhat.reshape(n, c, -1), weight, bias, (1, c, 1)).reshape(x.shape)

    @staticmethod
    def backward(ctx, gy):
        x, weight = ctx.saved
        need_x, need_w, need_b = ctx.needs_input_grad
        n, c, groups = x.shape[0], x.shape[1], ctx.groups
        xhat = (x.reshape(n, groups, -1) - ctx.mean) * ctx.rstd
        g = gy.reshape(n, c, -1)
        gw, gb = _param_grads(g, xhat.reshape(n, c, -1), need_w, need_b, (0, 2), (c,))
        gx = None
        if need_x:
            gw3 = g * weight.reshape(1, c, 1) if weight is not None else g
            gx = _shaped(_input_grad(gw3.reshape(n, groups, -1), xhat, ctx.rstd, (2,)), x.shape)
        return gx, gw, gb

    differentiable_backward = staticmethod(_grouped_double)


@register("group_norm")
class GroupNorm(_Grouped):
    pass


@register("instance_norm")
class InstanceNorm(_Grouped):
    pass


def group_norm(input, num_groups: int, weight=None, bias=None, eps: float = 1e-5):  # noqa: A002
    """Group normalization of ``input`` (N, C, *): the C channels split into ``num_groups``
    groups, each normalized over its channels and *, then a per-channel affine, as
    ``torch.nn.functional.group_norm``.

    Gradient: gx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = gy * weight, means
    over each group; gweight = sum(gy * xhat), gbias = sum(gy) over (N, *).

    Example:
        >>> y = ferro.group_norm(ferro.randn(2, 6, 5), 3)
    """
    fn = "group_norm"
    _check_input(input, fn, 2)
    c = input.shape[1]
    if not isinstance(num_groups, numbers.Integral) or isinstance(num_groups, bool):
        raise ArgumentTypeError(f"{fn}: num_groups must be an int, got {num_groups!r}")
    if num_groups <= 0 or c % num_groups:
        raise ShapeError(
            f"{fn}: Expected number of channels in input to be divisible by num_groups, but "
            f"got input of shape {tuple(input.shape)} and num_groups={num_groups}"
        )
    _check_param(weight, "weight", (c,), fn, input)
    _check_param(bias, "bias", (c,), fn, input)
    eps = _eps_arg(eps, fn)
    return apply(
        GroupNorm,
        input,
        weight,
        bias,
        groups=int(num_groups),
        eps=eps,
        running_mean=None,
        running_var=None,
        momentum=0.0,
    )


def instance_norm(
    input,  # noqa: A002 - PyTorch's argument names
    running_mean=None,
    running_var=None,
    weight=None,
    bias=None,
    use_input_stats: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
):
    """Instance normalization of ``input`` (N, C, *): each (sample, channel) normalized over *,
    as ``torch.nn.functional.instance_norm``. With ``use_input_stats`` the running statistics
    (if given) move toward the batch's average instance statistics; without, the running
    statistics normalize (as batch norm in evaluation).

    Gradient: gx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = gy * weight, means
    over *; gweight = sum(gy * xhat), gbias = sum(gy) over (N, *).

    Example:
        >>> y = ferro.instance_norm(ferro.randn(2, 3, 8))
    """
    fn = "instance_norm"
    _check_input(input, fn, 2)
    c = input.shape[1]
    for name, t in (("running_mean", running_mean), ("running_var", running_var)):
        _check_param(_tensor_or_none(t, name, fn), name, (c,), fn, input)
    if not use_input_stats:
        return batch_norm(input, running_mean, running_var, weight, bias, False, momentum, eps)
    _check_param(weight, "weight", (c,), fn, input)
    _check_param(bias, "bias", (c,), fn, input)
    eps = _eps_arg(eps, fn)
    momentum = real_arg(momentum, "momentum", fn)
    rm, rv = _running_arrays(running_mean, running_var, fn)
    if input.numel() // max(input.shape[0] * c, 1) <= 1:
        raise ShapeError(
            f"{fn}: Expected more than 1 spatial element when training, got input of shape "
            f"{tuple(input.shape)}"
        )
    out = apply(
        InstanceNorm,
        input,
        weight,
        bias,
        groups=c,
        eps=eps,
        running_mean=rm,
        running_var=rv,
        momentum=momentum,
    )
    if rm is not None:
        bump_version(running_mean)
        bump_version(running_var)
    return out


# RMS norm ------------------------------------------------------------------------------------


def _rms_norm_double(ctx, gy):
    """RMSNorm's gradients with ferro ops, the statistics recomputed from the saved input
    (Note [Norm state]): differentiable again, for double backward."""
    x, weight = ctx.saved
    need_x, need_w = ctx.needs_input_grad
    m, d = ctx.rstd.shape[0], math.prod(ctx.shape)
    xhat, rstd = _stats_of(x.reshape(m, d), (1,), ctx.eps, centered=False)
    g = gy.reshape(m, d)
    gw = _shaped((g * xhat).sum(axis=0), ctx.shape) if need_w else None
    gx = None
    if need_x:
        gw2 = g * weight.reshape(d) if weight is not None else g
        gx = _input_grad(gw2, xhat, rstd, (1,), centered=False).reshape(x.shape)
    return gx, gw


@register("rms_norm")
class RMSNorm:
    """``x / sqrt(mean(x^2) + eps) * weight`` over each (M, D) row."""

    @staticmethod
    def forward(ctx, x, weight, *, normalized_shape, eps):
        xp = ctx.xp
        d = math.prod(normalized_shape)
        xr = x.reshape(x.size // d if d else 0, d)
        ms = xp.square(xr).mean(axis=1, keepdims=True)
        ms += eps
        rstd = xp.divide(1, xp.sqrt(ms, out=ms), out=ms)
        y = xr * rstd
        if weight is not None:
            y *= weight.reshape(d)
        ctx.save(x, weight)
        ctx.rstd, ctx.eps, ctx.shape = rstd, eps, normalized_shape
        return y.reshape(x.shape)

    @staticmethod
    def backward(ctx, gy):
        x, weight = ctx.saved
        need_x, need_w = ctx.needs_input_grad
        m, d = ctx.rstd.shape[0], math.prod(ctx.shape)
        xhat = x.reshape(m, d) * ctx.rstd
        g = gy.reshape(m, d)
        gw = _shaped((g * xhat).sum(axis=0), ctx.shape) if need_w else None
        gx = None
        if need_x:
            gw2 = g * weight.reshape(d) if weight is not None else g
            gx = _shaped(_input_grad(gw2, xhat, ctx.rstd, (1,), centered=False), x.shape)
        return gx, gw

    differentiable_backward = staticmethod(_rms_norm_double)


def rms_norm(input, normalized_shape, weight=None, eps: float | None = None):  # noqa: A002
    """Root-mean-square normalization over the trailing ``normalized_shape`` dimensions, as
    ``torch.nn.functional.rms_norm``: ``x / sqrt(mean(x^2) + eps) * weight``; ``eps=None`` is
    the machine epsilon of the input's dtype.

    Gradient: gx = rstd * (g - xhat * mean(g * xhat)) with g = gy * weight, xhat = x * rstd;
    gweight = sum(gy * xhat).

    Example:
        >>> y = ferro.rms_norm(ferro.randn(4, 16), (16,))
    """
    fn = "rms_norm"
    _check_input(input, fn, 1)
    shape = _normalized_shape_arg(normalized_shape, fn)
    _check_normalized(input, shape, fn)
    _check_param(weight, "weight", shape, fn, input)
    eps = float(np.finfo(input.dtype).eps) if eps is None else _eps_arg(eps, fn)
    return apply(RMSNorm, input, weight, normalized_shape=shape, eps=eps)


# Local response norm -------------------------------------------------------------------------


def _window_sum(xp, a, before: int, after: int):
    """``out[:, c] = sum(a[:, c - before : c + after + 1])`` along axis 1, zeros outside."""
    c = a.shape[1]
    padded = xp.zeros((a.shape[0], c + before + after) + a.shape[2:], dtype=a.dtype)
    padded[:, before : before + c] = a
    out = padded[:, 0:c].copy()
    for j in range(1, before + after + 1):
        out += padded[:, j : j + c]
    return out


def _lrn_double(ctx, gy):
    """LocalResponseNorm's gradients with ferro ops, the statistics recomputed from the saved input
    (Note [Norm state]): differentiable again, for double backward."""
    x, y = ctx.saved
    size, alpha, beta = ctx.size, ctx.alpha, ctx.beta
    s = _window_sum_tensor(x * x, size // 2, (size - 1) // 2) * (alpha / size) + ctx.k
    t = _window_sum_tensor(gy * y / s, (size - 1) // 2, size // 2)
    return gy * s ** (-beta) - (2 * alpha * beta / size) * x * t


@register("local_response_norm")
class LocalResponseNorm:
    """``x / (k + alpha / size * sum of x^2 over a window of size channels) ** beta``."""

    @staticmethod
    def forward(ctx, x, *, size, alpha, beta, k):
        xp = ctx.xp
        s = _window_sum(xp, xp.square(x), size // 2, (size - 1) // 2)
        s *= alpha / size
        s += k
        y = x * xp.power(s, -beta)
        ctx.save(x, y)
        ctx.size, ctx.alpha, ctx.beta, ctx.k = size, alpha, beta, k
        return y

    @staticmethod
    def backward(ctx, gy):
        x, y = ctx.saved
        xp = ctx.xp
        size, alpha, beta = ctx.size, ctx.alpha, ctx.beta
        s = _window_sum(xp, xp.square(x), size // 2, (size - 1) // 2)
        s *= alpha / size
        s += ctx.k
        # gx_i = gy_i s_i^-beta - 2 alpha beta / size * x_i * sum_{c: i in window(c)} gy_c y_c / s_c
        t = _window_sum(xp, gy * y / s, (size - 1) // 2, size // 2)
        return gy * xp.power(s, -beta) - (2 * alpha * beta / size) * x * t

    differentiable_backward = staticmethod(_lrn_double)


def _window_sum_tensor(a, before: int, after: int):
    """:func:`_window_sum` with ferro ops (differentiable)."""
    from ferro.ops.shape import pad

    c = a.shape[1]
    padded = pad(a, (0, 0) * (a.ndim - 2) + (before, after))
    out = padded[:, 0:c]
    for j in range(1, before + after + 1):
        out = out + padded[:, j : j + c]
    return out


def local_response_norm(
    input,  # noqa: A002 - PyTorch's argument names
    size: int,
    alpha: float = 1e-4,
    beta: float = 0.75,
    k: float = 1.0,
):
    """Local response normalization across channels of ``input`` (N, C, *), as
    ``torch.nn.functional.local_response_norm``: ``x / (k + alpha / size * s) ** beta`` with
    ``s`` the sum of ``x^2`` over ``size`` neighbouring channels (zero-padded, the window
    starting ``size // 2`` channels before).

    Gradient: gx = gy * d^-beta - 2 alpha beta / size * x * (window sum of gy * y / d), d the
    denominator's base.

    Example:
        >>> y = ferro.local_response_norm(ferro.randn(2, 8, 5, 5), size=3)
    """
    fn = "local_response_norm"
    _check_input(input, fn, 3)
    if not isinstance(size, numbers.Integral) or isinstance(size, bool) or size < 1:
        raise ArgumentError(f"{fn}: size must be a positive int, got {size!r}")
    alpha, beta, k = (real_arg(v, n, fn) for v, n in ((alpha, "alpha"), (beta, "beta"), (k, "k")))
    return apply(LocalResponseNorm, input, size=int(size), alpha=alpha, beta=beta, k=k)


# Fused overrides -----------------------------------------------------------------------------
# Paired adapters (Note [Fused overrides]) for the kernels of ferro/_C/norm_kernels.pyx: each
# forward leaves the state the generic forward leaves (Note [Norm state]), so where its kernel
# cannot read the upstream gradient or a saved array (a saved-tensor hook may hand back another
# layout), the backward runs the generic one instead of refusing.


def _contiguous_grad(xp, gy, x, accepts_grad, arrays):
    """``gy`` as the backward kernel reads it (C-contiguous, x's dtype), or None."""
    if not accepts_grad(gy, arrays):
        gy = xp.ascontiguousarray(gy, dtype=x.dtype)
        if not accepts_grad(gy, arrays):
            return None
    return gy


def _flat(t):
    return None if t is None else t.reshape(-1)


def layer_norm_override(backend):
    """``(forward, backward)`` of layer_norm on ``backend``'s kernels."""
    fwd, bwd, accepts, accepts_grad = (
        backend.layer_norm_fwd,
        backend.layer_norm_bwd,
        backend.accepts,
        backend.accepts_grad,
    )

    def forward(ctx, x, weight, bias, *, normalized_shape, eps):
        d = math.prod(normalized_shape)
        if d == 0 or not accepts((x, weight, bias)):
            return NotImplemented
        y, mean, rstd, _ = fwd(x.reshape(x.size // d, d), _flat(weight), _flat(bias), eps)
        ctx.save(x, weight)
        ctx.mean, ctx.rstd, ctx.eps, ctx.shape = mean, rstd, eps, normalized_shape
        return y.reshape(x.shape)

    def backward(ctx, gy):
        x, weight = ctx.saved
        _, need_w, need_b = ctx.needs_input_grad
        d = math.prod(ctx.shape)
        arrays = (x, weight, ctx.mean, ctx.rstd)
        g = _contiguous_grad(ctx.xp, gy, x, accepts_grad, arrays)
        if g is None:
            return LayerNorm.backward(ctx, gy)
        gx, gw, gb = bwd(
            g.reshape(x.size // d, d),
            x.reshape(x.size // d, d),
            _flat(weight),
            ctx.mean,
            ctx.rstd,
            need_w or need_b,
        )
        return (
            _shaped(gx, x.shape),
            _shaped(gw, ctx.shape) if need_w else None,
            _shaped(gb, ctx.shape) if need_b else None,
        )

    return forward, backward


def rms_norm_override(backend):
    """``(forward, backward)`` of rms_norm on ``backend``'s kernels."""
    fwd, bwd, accepts, accepts_grad = (
        backend.rms_norm_fwd,
        backend.rms_norm_bwd,
        backend.accepts,
        backend.accepts_grad,
    )

    def forward(ctx, x, weight, *, normalized_shape, eps):
        d = math.prod(normalized_shape)
        if d == 0 or not accepts((x, weight)):
            return NotImplemented
        y, rstd = fwd(x.reshape(x.size // d, d), _flat(weight), eps)
        ctx.save(x, weight)
        ctx.rstd, ctx.eps, ctx.shape = rstd, eps, normalized_shape
        return y.reshape(x.shape)

    def backward(ctx, gy):
        x, weight = ctx.saved
        _, need_w = ctx.needs_input_grad
        d = math.prod(ctx.shape)
        g = _contiguous_grad(ctx.xp, gy, x, accepts_grad, (x, weight, ctx.rstd))
        if g is None:
            return RMSNorm.backward(ctx, gy)
        m = x.size // d
        gx, gw = bwd(g.reshape(m, d), x.reshape(m, d), _flat(weight), ctx.rstd, need_w)
        return _shaped(gx, x.shape), _shaped(gw, ctx.shape) if need_w else None

    return forward, backward


def group_norm_override(backend):
    """``(forward, backward)`` of group_norm and instance_norm on ``backend``'s kernels."""
    fwd, bwd, accepts, accepts_grad = (
        backend.group_norm_fwd,
        backend.group_norm_bwd,
        backend.accepts,
        backend.accepts_grad,
    )

    def forward(ctx, x, weight, bias, *, groups, eps, running_mean, running_var, momentum):
        if x.size == 0 or not accepts((x, weight, bias)):
            return NotImplemented
        n, c = x.shape[0], x.shape[1]
        y, mean, rstd, var = fwd(x.reshape(n, c, -1), weight, bias, groups, eps)
        if running_mean is not None:
            _update_running(running_mean, running_var, mean, var, momentum, x.size // (n * c))
        ctx.save(x, weight)
        ctx.mean, ctx.rstd, ctx.groups, ctx.eps = mean, rstd, groups, eps
        return y.reshape(x.shape)

    def backward(ctx, gy):
        x, weight = ctx.saved
        _, need_w, need_b = ctx.needs_input_grad
        n, c = x.shape[0], x.shape[1]
        g = _contiguous_grad(ctx.xp, gy, x, accepts_grad, (x, weight, ctx.mean, ctx.rstd))
        if g is None:
            return GroupNorm.backward(ctx, gy)
        gx, gw, gb = bwd(
            g.reshape(n, c, -1),
            x.reshape(n, c, -1),
            weight,
            ctx.mean,
            ctx.rstd,
            ctx.groups,
            need_w or need_b,
        )
        return _shaped(gx, x.shape), gw if need_w else None, gb if need_b else None

    return forward, backward


def batch_norm_override(backend):
    """``(forward, backward)`` of batch_norm in training on ``backend``'s kernels (evaluation
    is one scale and shift per channel: the generic path)."""
    fwd, bwd, accepts, accepts_grad = (
        backend.batch_norm_fwd,
        backend.batch_norm_bwd,
        backend.accepts,
        backend.accepts_grad,
    )

    def forward(ctx, x, weight, bias, *, training, running_mean, running_var, momentum, eps):
        if not training or x.size == 0 or not accepts((x, weight, bias)):
            return NotImplemented
        n, c = x.shape[0], x.shape[1]
        y, mean, rstd, var = fwd(x.reshape(n, c, -1), weight, bias, eps)
        if running_mean is not None:
            _update_running(running_mean, running_var, mean, var, momentum, x.size // c)
        ctx.save(x, weight)
        ctx.mean, ctx.rstd, ctx.training, ctx.eps = mean, rstd, training, eps
        return y.reshape(x.shape)

    def backward(ctx, gy):
        x, weight = ctx.saved
        _, need_w, need_b = ctx.needs_input_grad
        n, c = x.shape[0], x.shape[1]
        g = _contiguous_grad(ctx.xp, gy, x, accepts_grad, (x, weight, ctx.mean, ctx.rstd))
        if g is None:
            return BatchNorm.backward(ctx, gy)
        gx, gw, gb = bwd(g.reshape(n, c, -1), x.reshape(n, c, -1), weight, ctx.mean, ctx.rstd)
        return _shaped(gx, x.shape), gw if need_w else None, gb if need_b else None

    return forward, backward


__all__ = [
    "batch_norm",
    "group_norm",
    "instance_norm",
    "layer_norm",
    "local_response_norm",
    "rms_norm",
]
