"""Losses with reductions ``"none"``, ``"mean"`` and ``"sum"``.

``cross_entropy`` and ``nll_loss`` are ops of their own (one pass over the logits, and a fused
CPU kernel for the common case); the others are compositions of differentiable ops, so their
gradients follow from those ops'. Targets, class weights and weights given as arrays or lists
go to the input's device (as index arguments do, Note [Index operands]).
"""

from __future__ import annotations

import numpy as np

from ferro.backend import device_of, is_device_array, move
from ferro.errors import ArgumentError, DtypeError, IndexOutOfRangeError, ShapeError
from ferro.ops import elementwise as ew
from ferro.ops import reduction as red
from ferro.ops.activation import log_softmax
from ferro.ops.registry import apply, array_of, register

_REDUCTIONS = ("none", "mean", "sum")


def _check_reduction(reduction, op, extra=()):
    if reduction not in _REDUCTIONS + tuple(extra):
        raise ArgumentError(
            f"{op}: reduction must be one of {_REDUCTIONS + tuple(extra)}, got {reduction!r}"
        )


def _reduce(loss, reduction, weight=None):
    if weight is not None:  # elementwise weights, already on the loss's device (_like_input)
        loss = ew.mul(loss, weight)
    if reduction == "mean":
        return red.mean(loss)
    if reduction == "sum":
        return red.sum(loss)
    return loss


def _same_shape(a, b, op):
    if tuple(a.shape) != tuple(b.shape):
        raise ShapeError(f"{op}: input of shape {a.shape} and target of shape {b.shape} differ")


def _like_input(w, input):  # noqa: A002
    """A weight given as an array or a list (not a Tensor) takes the input's dtype and device;
    Tensors are kept."""
    from ferro._C.tensor import TensorBase

    if w is None or isinstance(w, TensorBase):
        return w
    data = array_of(input)
    arr = w if is_device_array(w) else np.asarray(w)
    return move(arr, device_of(data)).astype(data.dtype, copy=False)


def mse_loss(input, target, reduction: str = "mean"):  # noqa: A002 - PyTorch's names
    """Mean squared error ``(input - target)**2``.

    Gradient: ginput = 2 * (input - target) * gy (divided by n for "mean").
    """
    _check_reduction(reduction, "mse_loss")
    _same_shape(input, target, "mse_loss")
    d = ew.sub(input, target)
    return _reduce(ew.mul(d, d), reduction)


def l1_loss(input, target, reduction: str = "mean"):  # noqa: A002
    """Mean absolute error ``|input - target|``.

    Gradient: ginput = sign(input - target) * gy.
    """
    _check_reduction(reduction, "l1_loss")
    _same_shape(input, target, "l1_loss")
    return _reduce(ew.abs(ew.sub(input, target)), reduction)


def smooth_l1_loss(input, target, reduction: str = "mean", beta: float = 1.0):  # noqa: A002
    """``0.5 d**2 / beta`` where ``|d| < beta``, else ``|d| - 0.5 beta`` (d = input - target).

    Gradient: ginput = d / beta inside, sign(d) outside (times gy).
    """
    _check_reduction(reduction, "smooth_l1_loss")
    _same_shape(input, target, "smooth_l1_loss")
    if beta < 0:
        raise ArgumentError(f"smooth_l1_loss: beta must be >= 0, got {beta}")
    d = ew.sub(input, target)
    a = ew.abs(d)
    if beta == 0:
        return _reduce(a, reduction)
    inside = ew.lt(a.detach(), beta)
    loss = ew.where(inside, ew.mul(ew.mul(d, d), 0.5 / beta), ew.sub(a, 0.5 * beta))
    return _reduce(loss, reduction)


def huber_loss(input, target, reduction: str = "mean", delta: float = 1.0):  # noqa: A002
    """``0.5 d**2`` where ``|d| < delta``, else ``delta * (|d| - 0.5 delta)``.

    Gradient: ginput = d inside, delta * sign(d) outside (times gy).
    """
    if delta <= 0:
        raise ArgumentError(f"huber_loss: delta must be > 0, got {delta}")
    return ew.mul(smooth_l1_loss(input, target, reduction, beta=delta), delta)


def _private_on(arr, like):
    """``arr`` on the device of the array ``like``, in memory nobody else holds."""
    moved = move(arr, device_of(like))
    return moved.copy() if moved is arr else moved


def _targets(target, n_classes, ignore_index, op, like):
    """The class-index target as a private array on the device of ``like`` (validated).

    The ops keep the target (and the class weights) for backward, where the engine cannot see
    a change to them (they are parameters, not operands), so both are copied here: O(rows) and
    O(classes), against O(rows * classes) for the op itself.
    """
    t = _private_on(array_of(target), like)
    if t.dtype.kind not in "iu":
        raise DtypeError(f"{op}: class-index targets must be integer, got {t.dtype}")
    valid = t != ignore_index
    # One reduction, so a GPU target costs one device-to-host read (no boolean indexing).
    if (valid & ((t < 0) | (t >= n_classes))).any():
        raise IndexOutOfRangeError(
            f"{op}: target classes must lie in [0, {n_classes}) (or equal ignore_index "
            f"{ignore_index}); got values in [{int(t[valid].min())}, {int(t[valid].max())}]"
        )
    return t


def _class_weight(weight, n_classes, like, op):
    """The class weights as a private array of ``like``'s dtype and device."""
    if weight is None:
        return None
    w = array_of(weight)
    if w.shape != (n_classes,):
        raise ShapeError(f"{op}: weight must have shape ({n_classes},), got {w.shape}")
    moved = move(w, device_of(like))
    return moved.astype(like.dtype, copy=moved is w)  # kept for backward: see _targets


def _check_logits(input, target, op):
    if input.ndim < 1:
        raise ShapeError(f"{op}: input must have a class dimension, got shape {input.shape}")
    if input.ndim == 1:
        if getattr(target, "ndim", 0) != 0:
            raise ShapeError(f"{op}: 1-D input needs a 0-d target, got shape {target.shape}")
        return
    expected = (input.shape[0],) + tuple(input.shape[2:])
    if tuple(target.shape) != expected:
        raise ShapeError(
            f"{op}: input {input.shape} needs target of shape {expected}, got {target.shape}"
        )


def _to_rows_tensor(x):
    """(N, C, d1, ...) -> (N*d1*..., C): the class dimension last, one row per prediction."""
    from ferro.ops.shape import permute, reshape

    if x.ndim <= 2:
        return x
    perm = (0,) + tuple(range(2, x.ndim)) + (1,)
    return reshape(permute(x, perm), -1, x.shape[1])


def _class_index_loss(op_def, name, input, target, weight, ignore_index, reduction, **params):  # noqa: A002
    """The shared path of cross_entropy and nll_loss with class-index targets: validate, move
    classes last, apply the op on (rows, classes), restore the target's shape for "none"."""
    _check_logits(input, target, name)
    n_classes = input.shape[1] if input.ndim >= 2 else input.shape[0]
    like = array_of(input)
    t = _targets(target, n_classes, ignore_index, name, like)
    w = _class_weight(weight, n_classes, like, name)
    x = input
    if x.ndim == 1:
        x, t = x.reshape(1, -1), t.reshape(1)
    out = apply(
        op_def,
        _to_rows_tensor(x),
        target=t.reshape(-1),
        weight=w,
        ignore_index=ignore_index,
        reduction=reduction,
        **params,
    )
    if reduction == "none":
        out = out.reshape(tuple(target.shape))
    return out


def _cross_entropy_probs(input, target, weight, reduction, smoothing):  # noqa: A002
    from ferro.ops.shape import reshape

    _same_shape(input, target, "cross_entropy")
    c = input.shape[1] if input.ndim >= 2 else input.shape[0]
    axis = 1 if input.ndim >= 2 else 0
    logp = log_softmax(input, axis=axis)
    tgt = target
    if smoothing:
        tgt = ew.add(ew.mul(target, 1 - smoothing), smoothing / c)
    prod = ew.mul(logp, tgt)
    if weight is not None:
        w = _class_weight(weight, c, array_of(input), "cross_entropy")
        shape = (1, c) + (1,) * (input.ndim - 2) if input.ndim >= 2 else (c,)
        prod = ew.mul(prod, w.reshape(shape))
    per = ew.neg(red.sum(prod, axis=axis))
    if reduction == "none":
        return per
    total = red.sum(per)
    if reduction == "mean":
        n = input.shape[0] if input.ndim >= 2 else 1
        for s in input.shape[2:]:
            n *= s
        return ew.div(total, float(n)) if n else ew.mul(total, float("nan"))
    return reshape(total, ())


@register("cross_entropy")
class CrossEntropy:
    """Softmax cross-entropy from logits (M, C) and class indices, with weights, ignore_index
    and label smoothing, as PyTorch defines them.

    Per row i with target y (not ignored), weights w (ones if none), W = sum(w), eps smoothing:
    ``loss_i = -(1 - eps) w_y logp_y - (eps / C) sum_c w_c logp_c``; "mean" divides the sum by
    ``sum_i w_{y_i}`` over rows that are not ignored.
    """

    @staticmethod
    def forward(ctx, logits, *, target, weight, ignore_index, smoothing, reduction):
        xp = ctx.xp
        m, c = logits.shape
        valid = target != ignore_index
        t = xp.where(valid, target, 0)
        z = logits - logits.max(axis=1, keepdims=True)
        lse = xp.log(xp.exp(z).sum(axis=1, keepdims=True))
        logp = z - lse
        w = weight if weight is not None else None
        wy = w[t] if w is not None else xp.ones(m, dtype=logits.dtype)
        wy = xp.where(valid, wy, 0).astype(logits.dtype)
        nll = -xp.take_along_axis(logp, t[:, None], axis=1)[:, 0]
        loss = (1 - smoothing) * wy * nll
        if smoothing:
            wl = logp * w if w is not None else logp
            loss = loss - xp.where(valid, smoothing / c * wl.sum(axis=1), 0)
        denom = wy.sum() if reduction == "mean" else None
        ctx.save(logp, logits)  # logits for differentiable_backward (Note [Double backward])
        ctx.t, ctx.valid, ctx.wy, ctx.w = t, valid, wy, w
        ctx.smoothing, ctx.reduction, ctx.denom = smoothing, reduction, denom
        if reduction == "none":
            return loss
        total = loss.sum()
        return total / denom if reduction == "mean" else total

    @staticmethod
    def backward(ctx, gy):
        logp = ctx.saved[0]
        xp = ctx.xp
        m, c = logp.shape
        p = xp.exp(logp)
        eps = ctx.smoothing
        # d loss_i / d x = (1-eps) w_y (p - onehot_y) + (eps/C) (W p - w)
        g = (1 - eps) * ctx.wy[:, None] * p
        g[xp.arange(m), ctx.t] -= (1 - eps) * ctx.wy
        if eps:
            wsum = ctx.w.sum() if ctx.w is not None else c
            wvec = ctx.w if ctx.w is not None else 1.0
            g += xp.where(ctx.valid[:, None], eps / c * (wsum * p - wvec), 0)
        if ctx.reduction == "none":
            return g * gy[:, None]
        scale = gy / ctx.denom if ctx.reduction == "mean" else gy
        return (g * scale).astype(logp.dtype, copy=False)

    @staticmethod
    def differentiable_backward(ctx, gy):
        # Note [Double backward]: logp is an intermediate (and the fused forward keeps other
        # state): recompute the probabilities from the logits with recorded ops.
        from ferro.ops.activation import softmax
        from ferro.ops.elementwise import where

        xp = ctx.xp
        logits = ctx.saved[-1]
        m, c = logits.shape
        if hasattr(ctx, "lse"):  # the fused forward's state: class indices only
            valid = ctx.target != ctx.ignore  # a float weight: a bool one made float64 grads
            t, wy, w, eps = xp.where(valid, ctx.target, 0), valid.astype(logits.dtype), None, 0.0
        else:
            t, valid, wy, w, eps = ctx.t, ctx.valid, ctx.wy, ctx.w, ctx.smoothing
        p = softmax(logits, dim=1)
        onehot = xp.arange(c)[None, :] == t[:, None]
        g = (p - onehot) * ((1 - eps) * wy[:, None])
        if eps:
            wsum = w.sum() if w is not None else c
            wvec = w if w is not None else 1.0
            g = g + where(valid[:, None], (p * wsum - wvec) * (eps / c), 0.0)
        if ctx.reduction == "none":
            return g * gy[:, None]
        return g * (gy / ctx.denom if ctx.reduction == "mean" else gy)


def cross_entropy(
    input,
    target,
    weight=None,
    ignore_index: int = -100,  # noqa: A002
    reduction: str = "mean",
    label_smoothing: float = 0.0,
):
    """Softmax cross-entropy of logits ``input`` (N, C) or (N, C, d1, ...) against class indices
    (N, d1, ...) or class probabilities (same shape as input), as PyTorch defines it.

    Gradient: ginput = (softmax(input) - target distribution) scaled by the weights and the
    reduction.
    """
    from ferro._C.tensor import TensorBase

    _check_reduction(reduction, "cross_entropy")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ArgumentError(
            f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}"
        )
    probs_target = isinstance(target, TensorBase) and target.dtype.kind == "f"
    if probs_target:
        return _cross_entropy_probs(input, target, weight, reduction, label_smoothing)
    return _class_index_loss(
        CrossEntropy,
        "cross_entropy",
        input,
        target,
        weight,
        ignore_index,
        reduction,
        smoothing=float(label_smoothing),
    )


@register("nll_loss")
class NllLoss:
    @staticmethod
    def forward(ctx, logp, *, target, weight, ignore_index, reduction):
        xp = ctx.xp
        m = logp.shape[0]
        valid = target != ignore_index
        t = xp.where(valid, target, 0)
        wy = weight[t] if weight is not None else xp.ones(m, dtype=logp.dtype)
        wy = xp.where(valid, wy, 0).astype(logp.dtype)
        loss = -wy * xp.take_along_axis(logp, t[:, None], axis=1)[:, 0]
        ctx.shape, ctx.t, ctx.wy, ctx.reduction = logp.shape, t, wy, reduction
        ctx.denom = denom = wy.sum() if reduction == "mean" else None
        if reduction == "none":
            return loss
        return loss.sum() / denom if reduction == "mean" else loss.sum()

    @staticmethod
    def backward(ctx, gy):
        xp = ctx.xp
        m = ctx.shape[0]
        g = xp.zeros(ctx.shape, dtype=gy.dtype)
        scale = (
            gy if ctx.reduction == "none" else (gy / ctx.denom if ctx.reduction == "mean" else gy)
        )
        g[xp.arange(m), ctx.t] = -ctx.wy * scale
        return g


def nll_loss(
    input,
    target,
    weight=None,
    ignore_index: int = -100,  # noqa: A002
    reduction: str = "mean",
):
    """Negative log-likelihood of log-probabilities ``input`` (N, C) or (N, C, d1, ...) at class
    indices ``target``; "mean" divides by the total weight of the rows that are not ignored.

    Gradient: ginput = -w_y * gy at the target class, 0 elsewhere (scaled by the reduction).
    """
    _check_reduction(reduction, "nll_loss")
    return _class_index_loss(NllLoss, "nll_loss", input, target, weight, ignore_index, reduction)


@register("binary_cross_entropy")
class BinaryCrossEntropy:
    # An op of its own, not a composition: at a saturated probability (p exactly 0 or 1, as a
    # float32 sigmoid gives for logits past ~17) the composed log's backward divided 0 by 0 and
    # the step wrote NaN into every parameter. PyTorch's derivative divides by
    # max(p (1 - p), 1e-12) instead; this op takes its forward and both derivatives.
    @staticmethod
    def forward(ctx, p, t):
        if p.size and (p.min() < 0 or p.max() > 1):
            raise ArgumentError(
                "binary_cross_entropy: input must hold probabilities in [0, 1], got values in "
                f"[{float(p.min())}, {float(p.max())}]"
            )
        ctx.save(p, t)
        with np.errstate(divide="ignore"):
            lp, lq = ctx.xp.maximum(ctx.xp.log(p), -100.0), ctx.xp.maximum(ctx.xp.log1p(-p), -100.0)
            return -(t * lp + (1 - t) * lq)

    @staticmethod
    def backward(ctx, gy):
        xp, (p, t) = ctx.xp, ctx.saved
        with np.errstate(divide="ignore", invalid="ignore"):  # gtarget unclamped, as PyTorch's
            return gy * (p - t) / xp.maximum(p * (1 - p), 1e-12), gy * (xp.log1p(-p) - xp.log(p))


def binary_cross_entropy(input, target, weight=None, reduction: str = "mean"):  # noqa: A002
    """``-(t log p + (1 - t) log(1 - p))`` of probabilities ``input``, logs clamped at -100.

    Gradient: ginput = (p - t) / max(p (1 - p), 1e-12) * gy (times weight), as PyTorch's.
    """
    _check_reduction(reduction, "binary_cross_entropy")
    _same_shape(input, target, "binary_cross_entropy")
    target = target if target.dtype == input.dtype else target.to(input.dtype)
    return _reduce(apply(BinaryCrossEntropy, input, target), reduction, _like_input(weight, input))


def binary_cross_entropy_with_logits(
    input,
    target,
    weight=None,
    reduction: str = "mean",
    pos_weight=None,  # noqa: A002
):
    """Sigmoid + binary cross-entropy, stably: ``(1 - t) x + (1 + (pw - 1) t) softplus(-x)``.

    Gradient: ginput = (sigmoid(x) (1 + (pw - 1) t) - pw t) * gy (pw = 1 without pos_weight).
    """
    from ferro.ops.activation import softplus

    _check_reduction(reduction, "binary_cross_entropy_with_logits")
    _same_shape(input, target, "binary_cross_entropy_with_logits")
    sp = softplus(ew.neg(input))
    weight, pos_weight = _like_input(weight, input), _like_input(pos_weight, input)
    if pos_weight is not None:
        sp = ew.mul(ew.add(ew.mul(ew.sub(pos_weight, 1.0), target), 1.0), sp)
    return _reduce(ew.add(ew.mul(ew.sub(1.0, target), input), sp), reduction, weight)


def kl_div(input, target, reduction: str = "mean", log_target: bool = False):  # noqa: A002
    """KL divergence with ``input`` as log-probabilities: ``t (log t - input)`` pointwise
    (``exp(t) (t - input)`` with ``log_target``). "batchmean" divides the sum by the batch size.

    Gradient: ginput = -t * gy; gtarget = (log t + 1 - input) * gy.
    """
    _check_reduction(reduction, "kl_div", extra=("batchmean",))
    _same_shape(input, target, "kl_div")
    if log_target:
        loss = ew.mul(ew.exp(target), ew.sub(target, input))
    else:
        # 0 * log 0 = 0: take log only where t > 0.
        pos = ew.gt(target.detach(), 0)
        safe = ew.where(pos, target, ew.add(ew.mul(target, 0.0), 1.0))
        loss = ew.where(pos, ew.mul(target, ew.sub(ew.log(safe), input)), ew.mul(input, 0.0))
    if reduction == "batchmean":
        return ew.div(red.sum(loss), float(input.shape[0] if input.ndim else 1))
    return _reduce(loss, reduction)


# The family's public functions (ferro.ops exports their union): a new op's name goes here.
__all__ = [
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "cross_entropy",
    "huber_loss",
    "kl_div",
    "l1_loss",
    "mse_loss",
    "nll_loss",
    "smooth_l1_loss",
]
