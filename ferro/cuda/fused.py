"""GPU overrides: ferro's RawKernels (:mod:`ferro.cuda.ops`) registered on the ops and in the
engine, as :mod:`ferro.ops.fused` registers the CPU kernels.

- fused backward of relu, leaky_relu, sigmoid, tanh, gelu (exact) and silu, from the array the
  generic forward saved;
- softmax and log_softmax forward and backward along the last axis;
- cross-entropy from logits and class indices (no weights, no label smoothing): the forward
  keeps only each row's logsumexp, the backward writes the gradient in one pass;
- in the engine: gradient accumulation into buffers it owns, and sum-to-shape.

Every override falls back to the generic CuPy expression where its kernel refuses the arrays
(ValueError: a layout, dtype or shape it does not take; a non-contiguous upstream gradient is
made contiguous first, one copy being cheaper than the generic chain), so the generic path
stays the reference; ``ferro._C.engine.set_overrides_enabled(False)`` turns them all off.
Nothing here imports CuPy until a kernel runs: registering is free on machines without it.
"""

from __future__ import annotations

from ferro._C import engine
from ferro.cuda import ops as K
from ferro.ops import activation as act
from ferro.ops import elementwise as ew
from ferro.ops import loss


def _owns(arr) -> bool:
    """A CuPy array the engine may write once nothing else references it: not a view, laid out
    C-contiguously, on memory CuPy allocated (not borrowed through DLPack or a raw pointer)."""
    if arr.base is not None or not arr.flags.c_contiguous:
        return False
    from cupy.cuda.memory import UnownedMemory

    mem = arr.data.mem
    return mem is not None and not isinstance(mem, UnownedMemory)


engine.set_gpu_backend(_owns, K.accumulate, K.sum_to_shape)


def _backward_from_saved(op_def, name, index=0, slope_attr=None):
    """Backward ``gx = f(gy, saved[index])`` in one kernel."""
    generic = op_def.backward

    def backward(ctx, gy):
        v = ctx.saved[index]
        slope = getattr(ctx, slope_attr) if slope_attr else 0.0
        try:
            return K.activation_backward(name, ctx.xp.ascontiguousarray(gy), v, slope)
        except ValueError:
            return generic(ctx, gy)

    op_def.set_gpu_override(backward=backward)


_backward_from_saved(act.Relu, "relu")  # saves y
_backward_from_saved(act.LeakyRelu, "leaky_relu", slope_attr="slope")  # saves x
_backward_from_saved(ew.Sigmoid, "sigmoid")  # saves y
_backward_from_saved(ew.Tanh, "tanh")  # saves y
_backward_from_saved(act.Silu, "silu")  # saves (x, sigmoid(x)): the kernel needs x


def _gelu_backward(ctx, gy):
    if ctx.approximate == "none":
        try:
            return K.activation_backward("gelu", ctx.xp.ascontiguousarray(gy), ctx.saved[0])
        except ValueError:
            pass
    return act.Gelu.backward(ctx, gy)


act.Gelu.set_gpu_override(backward=_gelu_backward)


def _softmax_pair(op_def, log: bool):
    generic_fwd, generic_bwd = op_def.forward, op_def.backward

    def forward(ctx, x, *, axis):
        if axis in (-1, x.ndim - 1) and x.ndim:
            try:
                y = K.softmax_forward(x, log)
            except ValueError:
                pass
            else:
                ctx.save(y)
                ctx.axis = axis
                return y
        ctx.fused = False  # the generic forward's state: the generic backward
        return generic_fwd(ctx, x, axis=axis)

    def backward(ctx, gy):
        if getattr(ctx, "fused", True):
            try:
                return K.softmax_backward(ctx.xp.ascontiguousarray(gy), ctx.saved[0], log)
            except ValueError:
                pass
        return generic_bwd(ctx, gy)

    op_def.set_gpu_override(forward=forward, backward=backward)


_softmax_pair(act.Softmax, log=False)
_softmax_pair(act.LogSoftmax, log=True)


def _ce_forward(ctx, logits, **params):
    target, ignore, reduction = params["target"], params["ignore_index"], params["reduction"]
    if params["weight"] is None and not params["smoothing"]:
        try:
            per_row, lse = K.cross_entropy_forward(logits, target, ignore)
        except ValueError:
            pass
        else:
            ctx.save(logits)
            ctx.fused = True
            ctx.target, ctx.ignore, ctx.lse, ctx.reduction = target, ignore, lse, reduction
            if reduction == "mean":
                # Rows not ignored, counted on the device: nothing waits for the GPU here.
                ctx.denom = denom = (target != ignore).sum().astype(logits.dtype)
                return per_row.sum() / denom
            ctx.denom = ctx.xp.ones((), dtype=logits.dtype)
            return per_row if reduction == "none" else per_row.sum()
    ctx.fused = False
    return loss.CrossEntropy.forward(ctx, logits, **params)


def _ce_backward(ctx, gy):
    if not ctx.fused:
        return loss.CrossEntropy.backward(ctx, gy)
    # The forward kernel took these logits, so the backward kernel takes them too (it makes gy
    # and denom contiguous itself).
    return K.cross_entropy_backward(ctx.saved[0], ctx.target, ctx.lse, gy, ctx.denom, ctx.ignore)


loss.CrossEntropy.set_gpu_override(forward=_ce_forward, backward=_ce_backward)
