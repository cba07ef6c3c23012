"""The ``create_graph=True`` backward walk (Note [Double backward], docs/design.md).

The first-order walk (``ferro._C.engine.run_backward``) holds raw arrays and stays as it is. This
one holds ferro Tensors: every gradient it computes is the output of recorded ops, so it has
history and can be differentiated again. It follows the first-order walk step for step (explicit
stack, dependency counts, Kahn order, the documented hook order, nothing written to ``.grad``
until the walk has succeeded), and differs only in what runs for a node:

* the op's ``differentiable_backward(ctx, *grads)`` when it has one, with Tensors for the
  gradients and ``ctx.saved`` (an op whose backward cannot run on NumPy-named math);
* else the op's own ``backward(ctx, *grads)`` with ``ctx.xp`` bound to the differentiable
  namespace (:mod:`ferro.autograd._xp`) and DArrays for the gradients and ``ctx.saved``.

A saved array that is an input's or an output's data (the engine records which, at forward)
comes back as a tensor whose gradient flows to that input's node or leaf, or to this node's
output: the recorded graph connects to the inputs. Any other saved value is a constant. Fused
overrides never run here. Grad mode is on while it runs (PyTorch: ``create_graph`` decides it).
"""

from __future__ import annotations

import warnings

from ferro._C import engine as _engine
from ferro._C.graph import Node, _graph_tensor, _leaf_hooks
from ferro._C.tensor import TensorBase, wrap
from ferro.autograd._xp import DArray, NotTwiceDifferentiable, namespace
from ferro.autograd.grad_mode import enable_grad
from ferro.errors import (
    AnomalyError,
    ArgumentError,
    ArgumentTypeError,
    DeviceError,
    DtypeError,
    GradientError,
    GraphError,
    NotSupportedError,
    ShapeError,
)


class _Entry:
    __slots__ = ("target", "deps", "grads", "needed", "wanted", "captures", "state")

    def __init__(self, target, deps):
        self.target = target
        self.deps = deps
        self.needed = True
        self.wanted = False
        self.captures = None
        if isinstance(target, Node):
            self.state = target._walk_state()
            self.grads = [None] * self.state[0]
        else:
            self.state = None
            self.grads = [None]


class GraphCtx:
    """The ``ctx`` an op's backward receives under create_graph: the node's attributes, with
    ``xp`` the differentiable namespace and ``saved`` the saved values connected to the graph."""

    __slots__ = ("_node", "xp", "saved", "saved_tensors", "needs_input_grad")

    def __init__(self, node, xp, saved, saved_tensors):
        object.__setattr__(self, "_node", node)
        object.__setattr__(self, "xp", xp)
        object.__setattr__(self, "saved", saved)
        object.__setattr__(self, "saved_tensors", saved_tensors)
        object.__setattr__(self, "needs_input_grad", node.needs_input_grad)

    def __getattr__(self, name):
        return getattr(object.__getattribute__(self, "_node"), name)

    def __setattr__(self, name, value):
        setattr(self._node, name, value)


def _add(a, b):
    from ferro.ops.elementwise import add

    if a is None:
        return b
    return add(a, b)


def _sum_to(g, shape):
    """The differentiable sum-to-shape (undoing broadcasting)."""
    from ferro.ops import reduction
    from ferro.ops import shape as sh

    lead = g.ndim - len(shape)
    if lead < 0:
        raise ShapeError(f"cannot sum a gradient of shape {g.shape} to shape {shape}")
    axes = tuple(range(lead)) + tuple(
        lead + i for i, n in enumerate(shape) if n == 1 and g.shape[lead + i] != 1
    )
    if axes:
        g = reduction.sum(g, axis=axes, keepdims=True)
    if tuple(g.shape) != tuple(shape):
        g = sh.reshape(g, *shape) if shape else sh.reshape(g, ())
    return g


def _check_grad(g, who, index, shape, dtype, broadcasts, promoted):
    if not isinstance(g, TensorBase):
        raise GradientError(
            f"{who} returned a {type(g).__name__} as gradient {index}; expected a Tensor"
        )
    if tuple(g.shape) != tuple(shape):
        if broadcasts:
            try:
                g = _sum_to(g, tuple(shape))
            except (ValueError, ShapeError):
                raise GradientError(
                    f"{who} returned a gradient of shape {tuple(g.shape)} for input {index}, "
                    f"which does not broadcast to the input's shape {tuple(shape)}"
                ) from None
        else:
            raise GradientError(
                f"{who} returned a gradient of shape {tuple(g.shape)} for input {index}; "
                f"expected shape {tuple(shape)}"
            )
    if g.dtype != dtype:
        if promoted and dtype.kind == "f":
            from ferro.ops.elementwise import cast

            return cast(g, dtype)
        raise GradientError(
            f"{who} returned a gradient of dtype {g.dtype} for input {index}; expected {dtype}"
        )
    return g


def _as_tensor(g):
    import numpy as np

    if g is None or isinstance(g, TensorBase):
        return g
    if isinstance(g, DArray):
        return g.tensor
    if isinstance(g, np.generic):
        return wrap(np.asarray(g))
    if hasattr(g, "dtype") and hasattr(g, "shape"):
        return wrap(g)
    return g


def _saved_tensors(node, state):
    """The node's saved values, each array connected to the input or output it is."""
    from ferro.ops.elementwise import cast

    saved = node.saved
    sources = node._saved_sources()
    nxt, nxt_nr, promoted = state[1], state[2], state[8]
    out = []
    for j, s in enumerate(saved):
        k = sources.get(j)
        if s is None or not hasattr(s, "dtype") or not hasattr(s, "shape"):
            out.append(s)
        elif k is None:
            out.append(_as_tensor(s))
        elif k >= 0:
            target = nxt[k]
            if promoted and target is not None:
                want = (
                    target.dtype
                    if isinstance(target, TensorBase)
                    else (target._walk_state()[10][nxt_nr[k]])
                )
                if want != s.dtype:
                    base = _graph_tensor(s.astype(want), target, nxt_nr[k])
                    out.append(cast(base, s.dtype))
                    continue
            out.append(_graph_tensor(s, target, nxt_nr[k]))
        else:
            out.append(_graph_tensor(s, node, -1 - k))
    return tuple(out)


def _run_node(node, e, profiler):
    state = e.state
    n_out, nxt = state[0], state[1]
    pre_hooks, post_hooks, no_mat = state[3], state[4], state[7]
    gys = []
    for nr in range(n_out):
        g = e.grads[nr]
        if g is None and not no_mat:
            from ferro import creation

            g = creation.zeros(*state[9][nr], dtype=state[10][nr])
            if not state[9][nr]:
                g = wrap(g.data.reshape(()))
        gys.append(g)
    if pre_hooks:
        for fn in list(pre_hooks.values()):
            r = fn(tuple(gys))
            if r is not None:
                name = getattr(fn, "__qualname__", repr(fn))
                if not isinstance(r, (tuple, list)) or len(r) != len(gys):
                    raise GradientError(
                        f"pre-hook {name} on {node.name()} must return None or a tuple of "
                        f"{len(gys)} gradients"
                    )
                gys = [
                    _check_grad(
                        _as_tensor(g),
                        f"pre-hook {name} on {node.name()}",
                        nr,
                        state[9][nr],
                        state[10][nr],
                        False,
                        False,
                    )
                    for nr, g in enumerate(r)
                ]
    op = node.op
    if op.backward is None:
        raise GraphError(f"{node.name()}: op {op.name} is not differentiable")
    node._check_saved_versions()
    t0 = _engine.now_ns() if profiler is not None else 0
    saved = _saved_tensors(node, state)
    xp = namespace(node.xp)
    try:
        if op.differentiable_backward is not None:
            ctx = GraphCtx(node, xp, saved, saved)
            res = op.differentiable_backward(ctx, *gys)
        else:
            dsaved = tuple(DArray(s) if isinstance(s, TensorBase) else s for s in saved)
            ctx = GraphCtx(node, xp, dsaved, saved)
            res = op.backward(ctx, *[None if g is None else DArray(g) for g in gys])
    except NotTwiceDifferentiable as exc:
        raise NotSupportedError(
            f"{node.name()}: op {op.name} is not twice differentiable (create_graph=True): {exc}"
        ) from None
    if not isinstance(res, (tuple, list)):
        if len(nxt) == 1:
            res = (res,)
        else:
            raise GradientError(
                f"{node.name()} returned a single gradient; expected {len(nxt)} (one per input)"
            )
    res = tuple(_as_tensor(g) for g in res)
    if len(res) != len(nxt):
        raise GradientError(
            f"{node.name()} returned {len(res)} gradients; expected {len(nxt)} (one per input)"
        )
    if profiler is not None:
        profiler.record_backward(
            node.name(),
            op.name,
            -1,
            node.xp,
            [None if g is None else g.data for g in gys],
            [None if g is None else g.data for g in res],
            t0,
            _engine.now_ns(),
        )
    if _engine.is_anomaly_enabled():
        _check_finite(node, res)
    if post_hooks:
        for fn in list(post_hooks.values()):
            r = fn(res, tuple(gys))
            if r is not None:
                name = getattr(fn, "__qualname__", repr(fn))
                if not isinstance(r, (tuple, list)) or len(r) != len(res):
                    raise GradientError(
                        f"hook {name} on {node.name()} must return None or a tuple of "
                        f"{len(res)} gradients"
                    )
                res = tuple(_as_tensor(g) for g in r)
    return res


def _check_finite(node, res):
    prev = _engine.set_anomaly(True, True)  # reads (enabled, check_nan); restored at once
    _engine.set_anomaly(*prev)
    if not prev[1]:
        return
    for i, g in enumerate(res):
        if g is None or g.dtype.kind != "f":
            continue
        xp = node.xp
        if bool(xp.isfinite(g.data).all()):
            continue
        what = "NaN" if bool(xp.isnan(g.data).any()) else "Inf"
        site = node.creation_site
        where = f"; the node was created at {site[0]}:{site[1]} in {site[2]}" if site else ""
        raise AnomalyError(
            f"{node.name()} returned {what} values in its gradient for input {i}{where}"
        )


def _run_tensor_hooks(hooks, g, who, shape, dtype):
    for fn in list(hooks.values()):
        r = fn(g)
        if r is None:
            continue
        name = getattr(fn, "__qualname__", repr(fn))
        g = _check_grad(_as_tensor(r), f"hook {name} on {who}", 0, shape, dtype, False, False)
    return g


def _seed(t, k, g):
    if g is None:
        if t.numel() != 1:
            raise GraphError(
                f"backward: grad can be implicitly created only for 1-element outputs; got shape "
                f"{tuple(t.shape)}. Pass gradient= of that shape"
            )
        return wrap(_xp_of(t.data).ones(t.shape, dtype=t.data.dtype))
    if not isinstance(g, TensorBase):
        g = wrap(g)
    if type(g.data) is not type(t.data):
        raise DeviceError(
            f"backward: gradient {k} is a {type(g.data).__module__}.{type(g.data).__name__}, the "
            f"tensor's data a {type(t.data).__module__}.{type(t.data).__name__}"
        )
    if tuple(g.shape) != tuple(t.shape):
        raise ShapeError(
            f"backward: gradient {k} has shape {tuple(g.shape)}, expected the tensor's shape "
            f"{tuple(t.shape)}"
        )
    if g.dtype != t.dtype:
        raise DtypeError(
            f"backward: gradient {k} has dtype {g.dtype}, expected the tensor's dtype {t.dtype}"
        )
    return g


def _xp_of(arr):
    import numpy as np

    if type(arr) is np.ndarray:
        return np
    import cupy

    return cupy


def run_backward_graph(
    roots, root_grads, retain_graph=True, inputs=None, accumulate=True, allow_unused=False
):
    """The create_graph walk: same arguments as ``ferro._C.engine.run_backward`` (root
    gradients may be Tensors that require grad: the graph connects to them too).

    Returns, with ``accumulate=False``, a tuple of Tensors (or None) aligned with ``inputs``.
    """
    if len(roots) != len(root_grads):
        raise ArgumentError(f"backward: got {len(roots)} tensors but {len(root_grads)} gradients")
    with enable_grad():
        return _walk(roots, root_grads, retain_graph, inputs, accumulate, allow_unused)


def _target_of(t):
    return (t.grad_fn, t.output_nr) if t.grad_fn is not None else (t, 0)


def _walk(roots, root_grads, retain_graph, inputs, accumulate, allow_unused):
    table = {}
    stack = []
    for k, t in enumerate(roots):
        if not isinstance(t, TensorBase):
            raise ArgumentTypeError(f"backward: element {k} is a {type(t).__name__}, not a Tensor")
        if not t.requires_grad:
            raise GraphError(
                f"backward: element {k} of tensors does not require grad and has no grad_fn"
            )
        g = _seed(t, k, root_grads[k])
        target, nr = _target_of(t)
        e = table.get(id(target))
        if e is None:
            e = table[id(target)] = _Entry(target, 0)
            if isinstance(target, Node):
                stack.append(target)
        e.grads[nr] = _add(e.grads[nr], g)
    root_entries = list(table.values())
    while stack:
        node = stack.pop()
        for target in table[id(node)].state[1]:
            if target is None:
                continue
            e = table.get(id(target))
            if e is None:
                table[id(target)] = _Entry(target, 1)
                if isinstance(target, Node):
                    stack.append(target)
            else:
                e.deps += 1

    selective = inputs is not None
    results = None
    if selective:
        results = [None] * len(inputs)
        for k, t in enumerate(inputs):
            if not isinstance(t, TensorBase):
                raise ArgumentTypeError(
                    f"inputs: element {k} is a {type(t).__name__}, not a Tensor"
                )
            if not t.requires_grad:
                raise GraphError(f"inputs: element {k} does not require grad")
            target, nr = _target_of(t)
            e = table.get(id(target))
            if e is None:
                if not accumulate and not allow_unused:
                    raise GraphError(
                        f"grad: input {k} (shape {tuple(t.shape)}) was not used in the graph of "
                        "the outputs; pass allow_unused=True to get None for it"
                    )
                continue
            e.wanted = True
            if e.captures is None:
                e.captures = []
            e.captures.append((nr, k, t))
        _mark_needed(table, root_entries)

    profiler = _engine.get_profiler()
    ready = [e for e in root_entries if e.deps == 0]
    commits = []
    ran = []
    node = None
    try:
        while ready:
            e = ready.pop()
            target = e.target
            if not isinstance(target, Node):
                _finish_leaf(e, target, selective, accumulate, results, commits)
                continue
            node = target
            state = e.state
            if state[5] is not None or state[6] is not None or e.captures is not None:
                _finish_outputs(e, node, accumulate, results, commits)
            nxt, nxt_nr = state[1], state[2]
            if not e.needed or all(g is None for g in e.grads):
                for t in nxt:
                    if t is not None:
                        _decrement(table[id(t)], ready)
                continue
            grads = _run_node(node, e, profiler)
            e.grads = [None] * len(e.grads)
            ran.append(node)
            for i, t in enumerate(nxt):
                if t is None:
                    continue
                child = table[id(t)]
                g = grads[i]
                if g is not None and (child.needed or child.wanted):
                    if isinstance(t, Node):
                        nr = nxt_nr[i]
                        g = _check_grad(
                            g,
                            node.name(),
                            i,
                            child.state[9][nr],
                            child.state[10][nr],
                            node.op.broadcasts,
                            state[8],
                        )
                        child.grads[nr] = _add(child.grads[nr], g)
                    else:
                        g = _check_grad(
                            g, node.name(), i, t.shape, t.dtype, node.op.broadcasts, state[8]
                        )
                        child.grads[0] = _add(child.grads[0], g)
                _decrement(child, ready)
    except Exception as exc:
        if node is not None:
            site = node.creation_site
            where = f", created at {site[0]}:{site[1]}" if site is not None else ""
            exc.add_note(f"(raised while running {node.name()} in backward{where})")
        raise

    # Commit (Note [Commit order]): leaves' .grad, their post-accumulate hooks, retained grads.
    try:
        warned = False
        for g, t in commits:
            if t.grad_fn is None:
                if not warned:
                    warned = True
                    warnings.warn(
                        "Using backward() with create_graph=True creates a reference cycle "
                        "between a parameter and its gradient (the .grad's graph refers back "
                        "to the parameter): set the .grad fields to None after use, or use "
                        "ferro.autograd.grad, which writes no .grad",
                        UserWarning,
                        stacklevel=4,
                    )
                # PyTorch: under create_graph the sum is out of place, so the .grad keeps the
                # history of both terms.
                t.grad = g if t.grad is None else _add(t.grad, g)
        for _, t in commits:
            if t.grad_fn is None:
                hooks = _leaf_hooks(t)[1]
                if hooks:
                    for fn in list(hooks.values()):
                        fn(t)
    finally:
        for g, t in commits:
            if t.grad_fn is not None:
                t.grad = g
        if not retain_graph:
            for n in ran:
                n._release_saved()
    if results is not None and not accumulate:
        return tuple(results)
    return None


def _decrement(child, ready):
    child.deps -= 1
    if child.deps == 0:
        ready.append(child)


def _mark_needed(table, root_entries):
    deps = {}
    order = []
    ready = [e for e in root_entries if e.deps == 0]
    while ready:
        e = ready.pop()
        order.append(e)
        if isinstance(e.target, Node):
            for target in e.state[1]:
                if target is None:
                    continue
                c = table[id(target)]
                left = deps.get(id(c), c.deps) - 1
                deps[id(c)] = left
                if left == 0:
                    ready.append(c)
    for e in reversed(order):
        e.needed = False
        if not isinstance(e.target, Node):
            continue
        for target in e.state[1]:
            if target is None:
                continue
            c = table[id(target)]
            if c.wanted or c.needed:
                e.needed = True
                break


def _finish_leaf(e, t, selective, accumulate, results, commits):
    g = e.grads[0]
    if g is None or (selective and not e.wanted):
        return
    hooks = _leaf_hooks(t)[0]
    if hooks:
        g = _run_tensor_hooks(hooks, g, "a leaf tensor", t.shape, t.dtype)
    if e.captures is not None and not accumulate:
        for cap in e.captures:
            results[cap[1]] = g
        return
    if accumulate and t.requires_grad:
        commits.append((g, t))


def _finish_outputs(e, node, accumulate, results, commits):
    state = e.state
    tensor_hooks, retained = state[5], state[6]
    for nr in range(state[0]):
        g = e.grads[nr]
        if g is None:
            continue
        if tensor_hooks is not None:
            hooks = tensor_hooks.get(nr)
            if hooks:
                g = _run_tensor_hooks(
                    hooks, g, node.name() + f" output {nr}", state[9][nr], state[10][nr]
                )
                e.grads[nr] = g
        if e.captures is not None:
            for cap in e.captures:
                if cap[0] != nr:
                    continue
                if accumulate:
                    commits.append((g, cap[2]))
                else:
                    results[cap[1]] = g
        if accumulate and retained is not None:
            ref = retained.get(nr)
            tensor = ref() if ref is not None else None
            if tensor is not None:
                commits.append((g, tensor))


__all__ = ["GraphCtx", "run_backward_graph"]
