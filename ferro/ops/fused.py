"""Fused CPU overrides: nogil kernels (``ferro._C.cpu_kernels``, loops in ``kernels.h``)
registered on ops where ``benchmarks/bench_ops.py`` shows the generic NumPy expression is slower.

Where NumPy already runs a SIMD single pass (``tanh``, ``exp``, ``maximum`` forwards) the
forward stays generic and only the backward, a chain of NumPy temporaries, is fused. Exact gelu
is fused both ways: NumPy has no vectorized erf. The kernels read only exact, C-contiguous,
aligned, native-byte-order float32/float64 arrays of one dtype and shape; each override tests
that with ``same_layout`` (array flags, no exception on the way) and otherwise runs the generic
implementation, which handles any layout or byte order. The kernels also check it themselves,
raising a typed error, for direct callers. The generic implementation stays the reference:
every override is
parity-tested against it (``tests/ops/test_fused.py``), and
``ferro._C.engine.set_overrides_enabled(False)`` switches them all off. An override forward
that used a kernel sets ``ctx.fused``; its backward then uses the matching kernel.
"""

from __future__ import annotations

import numpy as np

from ferro._C import cpu_kernels as K
from ferro.ops import activation as act
from ferro.ops import elementwise as ew
from ferro.ops import loss


def _fused_backward(op_def, name):
    """Backward ``gx = f(gy, saved)`` in one pass, from the array the generic forward saved."""
    generic = op_def.backward

    def backward(ctx, gy):
        (v,) = ctx.saved
        if K.same_layout((gy, v)):
            return K.activation_backward(name, gy, v)
        return generic(ctx, gy)

    op_def.set_cpu_override(backward=backward)


_fused_backward(ew.Tanh, "tanh")
_fused_backward(ew.Sigmoid, "sigmoid")
_fused_backward(act.Relu, "relu")


def _silu_backward(ctx, gy):
    x, s = ctx.saved
    if K.same_layout((gy, x, s)):
        return K.silu_backward(gy, x, s)
    return act.Silu.backward(ctx, gy)


act.Silu.set_cpu_override(backward=_silu_backward)


def _gelu_forward(ctx, x, *, approximate):
    if approximate != "none" or not K.same_layout((x,)):
        return act.Gelu.forward(ctx, x, approximate=approximate)
    ctx.save(x)
    ctx.approximate = approximate
    ctx.fused = True
    return K.gelu_forward(x)


def _gelu_backward(ctx, gy):
    (x,) = ctx.saved
    if getattr(ctx, "fused", False) and K.same_layout((gy, x)):
        return K.activation_backward("gelu", gy, x)
    return act.Gelu.backward(ctx, gy)


act.Gelu.set_cpu_override(forward=_gelu_forward, backward=_gelu_backward)


def _softmax_backward(ctx, gy):
    (y,) = ctx.saved
    if ctx.axis == y.ndim - 1 and K.same_layout((gy, y)):
        return K.softmax_backward(gy, y)
    return act.Softmax.backward(ctx, gy)


# Softmax's forward stays NumPy (its SIMD exp beats a scalar loop); the backward is arithmetic
# over each row and fuses well. log_softmax gains nothing from fusing and stays generic.
act.Softmax.set_cpu_override(backward=_softmax_backward)


def _ce_forward(ctx, logits, *, target, weight, ignore_index, smoothing, reduction):
    if not K.same_layout((logits,)) or logits.ndim != 2:
        return loss.CrossEntropy.forward(
            ctx,
            logits,
            target=target,
            weight=weight,
            ignore_index=ignore_index,
            smoothing=smoothing,
            reduction=reduction,
        )
    per_row, lse, wy = K.cross_entropy_forward(logits, target, weight, ignore_index, smoothing)
    ctx.save(logits)
    ctx.fused = True
    ctx.target, ctx.weight, ctx.ignore, ctx.smoothing = target, weight, ignore_index, smoothing
    ctx.lse, ctx.reduction, ctx.wy = lse, reduction, wy
    dt = logits.dtype
    if reduction == "none":
        return per_row.astype(dt)
    ctx.denom = denom = wy.sum() if reduction == "mean" else 1.0
    total = per_row.sum()
    return (total / denom if reduction == "mean" else total).astype(dt)


def _ce_backward(ctx, gy):
    if not getattr(ctx, "fused", False):
        return loss.CrossEntropy.backward(ctx, gy)
    (logits,) = ctx.saved
    if ctx.reduction == "none":
        scale = np.asarray(gy, dtype=np.float64)
    else:
        scale = np.asarray([float(gy) / ctx.denom])
    return K.cross_entropy_backward(
        logits, ctx.target, ctx.weight, ctx.ignore, ctx.smoothing, ctx.lse, ctx.wy, scale
    )


loss.CrossEntropy.set_cpu_override(forward=_ce_forward, backward=_ce_backward)
