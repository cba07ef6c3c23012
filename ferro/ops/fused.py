"""Fused CPU overrides: nogil Cython kernels (``ferro._C.cpu_kernels``) registered on the ops
whose generic NumPy expression makes several passes over memory.

Each override takes the kernel path only for C-contiguous float32/float64 arrays of one dtype
and otherwise calls the generic implementation, which stays the reference: every override is
parity-tested against it (``tests/ops/test_fused.py``), and
``ferro._C.engine.set_overrides_enabled(False)`` switches them all off. An override forward sets
``ctx.fused`` when it used a kernel; its backward then uses the matching kernel.
"""

from __future__ import annotations

from ferro._C import cpu_kernels as K
from ferro.ops import activation as act
from ferro.ops import elementwise as ew
from ferro.ops import loss


def _backward_only(op_cls_def, name):
    """Fused backward from the saved array (y or x, as the generic forward saved it)."""
    generic = op_cls_def.backward

    def backward(ctx, gy):
        (v,) = ctx.saved
        if K.same_layout((gy, v)):
            return K.binary_backward(name, gy, v)
        return generic(ctx, gy)

    op_cls_def.set_cpu_override(backward=backward)


_backward_only(ew.Tanh, "tanh")
_backward_only(act.Relu, "relu")


def _elementwise(op_def, name_of):
    """Fused forward (saving x or y as the generic forward does) and backward."""
    generic_fwd, generic_bwd = op_def.forward, op_def.backward

    def forward(ctx, x, **params):
        name = name_of(params)
        if not K.same_layout((x,)):
            return generic_fwd(ctx, x, **params)
        for k, v in params.items():
            setattr(ctx, k, v)
        ctx.fused = name
        y = K.unary_forward(name, x)
        # sigmoid's backward reads y; gelu's and silu's read x (as the generic ones do).
        ctx.save(y if name == "sigmoid" else x)
        return y

    def backward(ctx, gy):
        name = getattr(ctx, "fused", None)
        (v,) = ctx.saved
        if name is None or not K.same_layout((gy, v)):
            return generic_bwd(ctx, gy)
        return K.binary_backward(name, gy, v)

    op_def.set_cpu_override(forward=forward, backward=backward)


_elementwise(ew.Sigmoid, lambda p: "sigmoid")
_elementwise(act.Silu, lambda p: "silu")
_elementwise(act.Gelu, lambda p: "gelu_tanh" if p["approximate"] == "tanh" else "gelu")


def _softmax(op_def, log):
    generic_fwd, generic_bwd = op_def.forward, op_def.backward

    def forward(ctx, x, *, axis):
        if axis != x.ndim - 1 or not K.same_layout((x,)):
            return generic_fwd(ctx, x, axis=axis)
        y = K.softmax_forward(x, log)
        ctx.save(y)
        ctx.axis = axis
        ctx.fused = True
        return y

    def backward(ctx, gy):
        (y,) = ctx.saved
        if not getattr(ctx, "fused", False) or not K.same_layout((gy, y)):
            return generic_bwd(ctx, gy)
        return K.softmax_backward(gy, y, log)

    op_def.set_cpu_override(forward=forward, backward=backward)


_softmax(act.Softmax, False)
_softmax(act.LogSoftmax, True)


def _ce_forward(ctx, logits, *, target, weight, ignore_index, smoothing, reduction):
    if not K.same_layout((logits,)) or logits.ndim != 2:
        return loss.CrossEntropy.forward(ctx, logits, target=target, weight=weight,
                                         ignore_index=ignore_index, smoothing=smoothing,
                                         reduction=reduction)
    per_row, lse, wy = K.cross_entropy_forward(logits, target, weight, ignore_index, smoothing)
    ctx.save(logits)
    ctx.fused = True
    ctx.target, ctx.weight, ctx.ignore, ctx.smoothing = target, weight, ignore_index, smoothing
    ctx.lse, ctx.reduction, ctx.wy = lse, reduction, wy
    dt = logits.dtype
    if reduction == "none":
        return per_row.astype(dt)
    ctx.denom = wy.sum() if reduction == "mean" else 1.0
    return (per_row.sum() / ctx.denom).astype(dt) if reduction == "mean" else per_row.sum().astype(dt)


def _ce_backward(ctx, gy):
    if not getattr(ctx, "fused", False):
        return loss.CrossEntropy.backward(ctx, gy)
    (logits,) = ctx.saved
    import numpy as np

    if ctx.reduction == "none":
        scale = np.asarray(gy, dtype=np.float64)
    else:
        scale = np.asarray([float(gy) / ctx.denom])
    return K.cross_entropy_backward(logits, ctx.target, ctx.weight, ctx.ignore, ctx.smoothing,
                                    ctx.lse, ctx.wy, scale)


loss.CrossEntropy.set_cpu_override(forward=_ce_forward, backward=_ce_backward)
