"""Full backward hooks for modules: identity Functions around a call's inputs and outputs.

The output side captures the gradients w.r.t. the outputs; the input side, whose backward runs
once the gradients w.r.t. the inputs are known, calls the hooks with both (and may replace the
input gradients). When no input needs a gradient the hooks run from the output side, with
``grad_input`` all None, so they still run exactly once per backward.
"""

from __future__ import annotations

from ferro._C.tensor import TensorBase
from ferro.autograd.function import Function


class _State:
    def __init__(self, module, n_in, need):
        self.module = module
        self.grad_output = None
        self.n_in = n_in
        self.need = need  # positions (among the tensor inputs) that need a gradient


def _run_hooks(state, grad_input):
    for hook, _ in state.module._backward_hooks:
        r = hook(state.module, grad_input, state.grad_output)
        if r is not None:
            grad_input = tuple(r)
    return grad_input


class _HookIn(Function):
    @staticmethod
    def forward(ctx, state, *xs):
        ctx.state = state
        return tuple(x * 1.0 for x in xs) if len(xs) > 1 else xs[0] * 1.0

    @staticmethod
    def backward(ctx, *gs):
        st = ctx.state
        full = [None] * st.n_in
        for k, g in zip(st.need, gs, strict=True):
            full[k] = g
        full = _run_hooks(st, tuple(full))
        return (None, *[full[k] for k in st.need])


class _HookOut(Function):
    @staticmethod
    def forward(ctx, state, inputs_need_grad, *ys):
        ctx.state, ctx.inputs_need_grad = state, inputs_need_grad
        ctx.set_materialize_grads(True)
        return tuple(y * 1.0 for y in ys) if len(ys) > 1 else ys[0] * 1.0

    @staticmethod
    def backward(ctx, *gs):
        for hook, _ in ctx.state.module._backward_pre_hooks:
            r = hook(ctx.state.module, gs)
            if r is not None:
                gs = tuple(r) if isinstance(r, (tuple, list)) else (r,)
        ctx.state.grad_output = gs
        if not ctx.inputs_need_grad:
            _run_hooks(ctx.state, (None,) * ctx.state.n_in)
        return (None, None, *gs)


def wrap_call(module, args, kwargs):
    tensor_pos = [i for i, a in enumerate(args) if isinstance(a, TensorBase)]
    need = [i for i in tensor_pos if args[i].requires_grad]
    state = _State(module, len(tensor_pos), [tensor_pos.index(i) for i in need])
    args = list(args)
    if need:
        wrapped = _HookIn.apply(state, *[args[i] for i in need])
        wrapped = wrapped if isinstance(wrapped, tuple) else (wrapped,)
        for i, w in zip(need, wrapped, strict=True):
            args[i] = w
    out = module.forward(*args, **kwargs)
    outs = out if isinstance(out, tuple) else (out,)
    if not all(isinstance(o, TensorBase) for o in outs) or not any(o.requires_grad for o in outs):
        return out
    res = _HookOut.apply(state, bool(need), *outs)
    return res
