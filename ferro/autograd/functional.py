"""``ferro.autograd.functional``: derivatives of whole functions, as ``torch.autograd.functional``.

``vjp``, ``jvp``, ``jacobian``, ``hessian``, ``vhp`` and ``hvp`` take a function of Tensors and the
point (a Tensor or a tuple of Tensors), with PyTorch's signatures and ``create_graph``/``strict``
arguments. They are built on ``ferro.autograd.grad`` with ``create_graph`` (Note [Double
backward]):

* ``jvp`` uses the double-vjp trick: ``u -> J^T u`` is linear in ``u``, so differentiating
  ``<J^T u, v>`` with respect to ``u`` gives ``J v``.
* ``jacobian`` runs the function once and takes one vjp per output element on the retained
  graph (``vectorize=True`` is accepted and takes the same path: ferro has no batched backward).
* ``hvp`` is ``vhp``: the Hessian of a twice continuously differentiable function is symmetric,
  so ``H v = (v^T H)^T``, one backward of the gradient, where the double-vjp trick takes two.
"""

from __future__ import annotations

import numpy as np

from ferro._C.tensor import TensorBase, wrap
from ferro.autograd.grad_mode import enable_grad
from ferro.errors import ArgumentError, ArgumentTypeError, GraphError


def _as_tuple(x, what: str, fn: str):
    if isinstance(x, TensorBase):
        return (x,), False
    if isinstance(x, (tuple, list)) and all(isinstance(t, TensorBase) for t in x):
        return tuple(x), True
    raise ArgumentTypeError(
        f"{fn}: {what} must be a Tensor or a tuple of Tensors, got {type(x).__name__}"
    )


def _grad_preprocess(inputs, create_graph: bool, need_graph: bool):
    # Fresh leaves that require grad: the caller's tensors are not touched; with create_graph
    # they stay connected (a view that requires grad) so the result is differentiable in them.
    out = []
    for t in inputs:
        if create_graph and t.requires_grad:
            out.append(t.view_as(t))
        else:
            out.append(t.detach().requires_grad_(need_graph))
    return tuple(out)


def _postprocess(x, create_graph: bool):
    if isinstance(x, tuple):
        return tuple(_postprocess(t, create_graph) for t in x)
    if x is None or create_graph:
        return x
    return x.detach()


def _zeros_like(t):
    xp = np if isinstance(t._data, np.ndarray) else __import__("cupy")
    return wrap(xp.zeros(t.shape, dtype=t.dtype))


def _fill_unused(grads, inputs, strict: bool, fn: str, what: str):
    out = []
    for i, (g, x) in enumerate(zip(grads, inputs, strict=True)):
        if g is None:
            if strict:
                raise GraphError(
                    f"{fn}: the output is independent of input {i} ({what}); strict=True "
                    "forbids that"
                )
            g = _zeros_like(x)
        out.append(g)
    return tuple(out)


def _check_v(v, outputs, fn: str, what: str):
    vs, _ = _as_tuple(v, "v", fn)
    if len(vs) != len(outputs):
        raise ArgumentError(f"{fn}: v has {len(vs)} tensors, the {what} has {len(outputs)}")
    for i, (a, b) in enumerate(zip(vs, outputs, strict=True)):
        if tuple(a.shape) != tuple(b.shape):
            raise ArgumentError(
                f"{fn}: v[{i}] has shape {tuple(a.shape)}, expected {tuple(b.shape)} (the {what}'s)"
            )
    return vs


def _grad(outputs, inputs, grad_outputs, create_graph):
    from ferro.autograd import grad

    diff = [o for o in outputs if o.requires_grad]
    idx = [k for k, o in enumerate(outputs) if o.requires_grad]
    if not diff:
        return (None,) * len(inputs)
    gos = None if grad_outputs is None else [grad_outputs[k] for k in idx]
    return grad(diff, inputs, gos, retain_graph=True, create_graph=create_graph, allow_unused=True)


def vjp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(inputs), v^T J)``: the vector-Jacobian product at ``inputs``.

    Args:
        func: a function of Tensors returning a Tensor or a tuple of Tensors.
        inputs: a Tensor or a tuple of Tensors.
        v: the vector (like func's output); may be omitted for a 1-element output.
        create_graph: make the result differentiable.
        strict: raise if an input does not affect the output.

    Example:
        >>> x = ferro.tensor([1.0, 2.0])
        >>> out, g = ferro.autograd.functional.vjp(lambda x: (x * x).sum(), x)
        >>> out, g
        (tensor(5.), tensor([2., 4.]))
    """
    ins, tuple_in = _as_tuple(inputs, "inputs", "vjp")
    with enable_grad():
        ins = _grad_preprocess(ins, create_graph, True)
        out = func(*ins)
        outs, tuple_out = _as_tuple(out, "the output of func", "vjp")
        if v is None:
            if len(outs) != 1 or outs[0].numel() != 1:
                raise ArgumentError("vjp: v may be omitted only when func returns one element")
            vs = None
        else:
            vs = _check_v(v, outs, "vjp", "output")
        grads = _grad(outs, ins, vs, create_graph)
        grads = _fill_unused(grads, ins, strict, "vjp", "vjp")
    out = _postprocess(outs if tuple_out else outs[0], create_graph)
    return out, _postprocess(grads if tuple_in else grads[0], create_graph)


def jvp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(inputs), J v)``: the Jacobian-vector product, by the double-vjp trick.

    Example:
        >>> x, v = ferro.tensor([1.0, 2.0]), ferro.tensor([1.0, 0.0])
        >>> out, t = ferro.autograd.functional.jvp(lambda x: x * x, x, v)
        >>> t
        tensor([2., 0.])
    """
    ins, tuple_in = _as_tuple(inputs, "inputs", "jvp")
    if v is None:
        if len(ins) != 1 or ins[0].numel() != 1:
            raise ArgumentError("jvp: v may be omitted only for one 1-element input")
        vs = (wrap(np.ones(ins[0].shape, dtype=ins[0].dtype)),)
    else:
        vs = _check_v(v, ins, "jvp", "input")
    with enable_grad():
        ins = _grad_preprocess(ins, create_graph, True)
        out = func(*ins)
        outs, tuple_out = _as_tuple(out, "the output of func", "jvp")
        # u: a dummy cotangent; J^T u is linear in u, its vjp with v is J v.
        us = tuple(wrap(np.zeros(o.shape, dtype=o.dtype)).requires_grad_(True) for o in outs)
        gs = _grad(outs, ins, us, True)
        pairs = [(g, t) for g, t in zip(gs, vs, strict=True) if g is not None]
        if not pairs:
            if strict:
                raise GraphError("jvp: the output is independent of the inputs; strict=True")
            res = tuple(_zeros_like(o) for o in outs)
        else:
            from ferro.autograd import grad

            res = grad(
                [g for g, _ in pairs],
                us,
                [t for _, t in pairs],
                create_graph=create_graph,
                allow_unused=True,
            )
            res = _fill_unused(res, outs, strict, "jvp", "jvp")
    out = _postprocess(outs if tuple_out else outs[0], create_graph)
    return out, _postprocess(res if tuple_out else res[0], create_graph)


def jacobian(
    func,
    inputs,
    create_graph: bool = False,
    strict: bool = False,
    vectorize: bool = False,
    strategy: str = "reverse-mode",
):
    """The Jacobian of ``func`` at ``inputs``: one Tensor of shape ``out.shape + in.shape``
    per (output, input) pair, nested as PyTorch nests them (a Tensor for one input and one
    output; a tuple over inputs; a tuple over outputs of tuples over inputs).

    Only ``strategy="reverse-mode"`` is implemented: the function runs once and each output
    element takes one vjp on the retained graph.

    Example:
        >>> ferro.autograd.functional.jacobian(lambda x: x * x, ferro.tensor([1.0, 2.0]))
        tensor([[2., 0.],
                [0., 4.]])
    """
    if strategy != "reverse-mode":
        raise ArgumentError(
            f"jacobian: strategy must be 'reverse-mode' (ferro has no forward mode), got "
            f"{strategy!r}"
        )
    from ferro.ops.shape import reshape, stack

    ins, tuple_in = _as_tuple(inputs, "inputs", "jacobian")
    with enable_grad():
        ins = _grad_preprocess(ins, create_graph, True)
        out = func(*ins)
        outs, tuple_out = _as_tuple(out, "the output of func", "jacobian")
        jac = []
        for k, o in enumerate(outs):
            rows = [[] for _ in ins]
            n = o.numel()
            for j in range(n):
                seed = np.zeros(o.shape, dtype=o.dtype)
                seed.reshape(-1)[j] = 1
                gs = (
                    _grad((o,), ins, (wrap(seed),), create_graph)
                    if o.requires_grad
                    else (None,) * len(ins)
                )
                for i, (g, x) in enumerate(zip(gs, ins, strict=True)):
                    if g is None:
                        if strict:
                            raise GraphError(
                                f"jacobian: output {k} is independent of input {i}; strict=True"
                            )
                        g = _zeros_like(x)
                    rows[i].append(g)
            per_in = []
            for i, x in enumerate(ins):
                if n:
                    block = reshape(stack(rows[i], 0), tuple(o.shape) + tuple(x.shape))
                else:
                    block = wrap(np.zeros(tuple(o.shape) + tuple(x.shape), dtype=x.dtype))
                per_in.append(_postprocess(block, create_graph))
            jac.append(tuple(per_in) if tuple_in else per_in[0])
    return tuple(jac) if tuple_out else jac[0]


def hessian(
    func,
    inputs,
    create_graph: bool = False,
    strict: bool = False,
    vectorize: bool = False,
    outer_jacobian_strategy: str = "reverse-mode",
):
    """The Hessian of a scalar ``func`` at ``inputs`` (the Jacobian of its gradient): a Tensor
    of shape ``in.shape + in.shape`` for one input, a tuple of tuples for several.

    Example:
        >>> ferro.autograd.functional.hessian(lambda x: (x ** 3).sum(), ferro.tensor([1.0, 2.0]))
        tensor([[ 6.,  0.],
                [ 0., 12.]])
    """
    ins, tuple_in = _as_tuple(inputs, "inputs", "hessian")

    def gradient(*xs):
        out = func(*xs)
        outs, _ = _as_tuple(out, "the output of func", "hessian")
        if len(outs) != 1 or outs[0].numel() != 1:
            raise ArgumentError("hessian: func must return a single 1-element Tensor")
        gs = _grad(outs, xs, None, True)
        return _fill_unused(gs, xs, strict, "hessian", "hessian")

    res = jacobian(
        gradient,
        ins,
        create_graph=create_graph,
        strict=strict,
        vectorize=vectorize,
        strategy=outer_jacobian_strategy,
    )
    return res if tuple_in else res[0][0]


def _scalar_grad(func, ins, create_graph, strict, fn):
    out = func(*ins)
    outs, _ = _as_tuple(out, "the output of func", fn)
    if len(outs) != 1 or outs[0].numel() != 1:
        raise ArgumentError(f"{fn}: func must return a single 1-element Tensor")
    gs = _grad(outs, ins, None, True)
    return outs[0], gs


def vhp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(inputs), v^T H)`` for a scalar ``func``: one backward of its gradient.

    Example:
        >>> x, v = ferro.tensor([1.0, 2.0]), ferro.tensor([1.0, 1.0])
        >>> out, r = ferro.autograd.functional.vhp(lambda x: (x ** 3).sum(), x, v)
        >>> r
        tensor([ 6., 12.])
    """
    ins, tuple_in = _as_tuple(inputs, "inputs", "vhp")
    if v is None:
        if len(ins) != 1 or ins[0].numel() != 1:
            raise ArgumentError("vhp: v may be omitted only for one 1-element input")
        vs = (wrap(np.ones(ins[0].shape, dtype=ins[0].dtype)),)
    else:
        vs = _check_v(v, ins, "vhp", "input")
    with enable_grad():
        ins = _grad_preprocess(ins, create_graph, True)
        out, gs = _scalar_grad(func, ins, create_graph, strict, "vhp")
        pairs = [(g, t) for g, t in zip(gs, vs, strict=True) if g is not None and g.requires_grad]
        if pairs:
            from ferro.autograd import grad

            res = grad(
                [g for g, _ in pairs],
                ins,
                [t for _, t in pairs],
                create_graph=create_graph,
                allow_unused=True,
            )
        else:
            res = (None,) * len(ins)
        res = _fill_unused(res, ins, strict, "vhp", "vhp")
    return _postprocess(out, create_graph), _postprocess(res if tuple_in else res[0], create_graph)


def hvp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(inputs), H v)`` for a scalar ``func``. The Hessian of a twice continuously
    differentiable function is symmetric, so this is :func:`vhp` (one backward of the
    gradient; PyTorch's double-vjp takes two).

    Example:
        >>> x, v = ferro.tensor([1.0, 2.0]), ferro.tensor([1.0, 1.0])
        >>> out, r = ferro.autograd.functional.hvp(lambda x: (x ** 3).sum(), x, v)
        >>> r
        tensor([ 6., 12.])
    """
    return vhp(func, inputs, v, create_graph=create_graph, strict=strict)


__all__ = ["vjp", "jvp", "jacobian", "hessian", "vhp", "hvp"]
