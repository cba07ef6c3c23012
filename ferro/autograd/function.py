"""``ferro.autograd.Function``: user-defined ops with a hand-written backward.

Subclass it with static ``forward(ctx, *args)`` and ``backward(ctx, *grad_outputs)`` working on
Tensors (as in PyTorch) and call ``MyFunction.apply(*args)``. The class becomes one op in the
compiled engine, so it gets everything an op gets: saved-tensor hooks, version checks on saved
tensors, anomaly detection, and a typed error that names the Function when backward returns the
wrong number, shape or dtype of gradients.

``ctx`` offers ``save_for_backward``, ``saved_tensors``, ``needs_input_grad`` (already during
forward), ``mark_non_differentiable``, ``mark_dirty``, ``set_materialize_grads``,
``save_for_forward`` and free attributes.

Under ``create_graph=True`` the backward runs with grad mode on, on Tensors whose graph reaches
the inputs (``ctx.saved_tensors`` too), so a backward written with ferro ops is differentiable
again (Note [Double backward]); :func:`once_differentiable` marks one that is not.
"""

from __future__ import annotations

import functools

from ferro._C.engine import apply, commit_inplace
from ferro._C.graph import OpDef
from ferro._C.tensor import TensorBase, wrap
from ferro.autograd.grad_mode import is_grad_enabled, no_grad
from ferro.backend import is_array
from ferro.errors import ArgumentTypeError, GradientError, GraphError, NotSupportedError


class FunctionCtx:
    """The ``ctx`` a Function's ``forward`` receives: the node's attributes (what ``backward``
    will read), plus ``mark_dirty`` and ``save_for_forward``."""

    __slots__ = ("_node", "_box")

    def __init__(self, node, box):
        object.__setattr__(self, "_node", node)
        object.__setattr__(self, "_box", box)

    def __getattr__(self, name):
        return getattr(object.__getattribute__(self, "_node"), name)

    def __setattr__(self, name, value):
        setattr(self._node, name, value)

    def mark_dirty(self, *tensors):
        """Declare inputs that forward modified in place (and returns): the caller's tensors
        then take the output's history and their version counters move on."""
        self._box["dirty"] = [t._data for t in tensors]

    def save_for_forward(self, *tensors):
        """Save tensors for :meth:`Function.jvp` (read back as ``ctx.saved_for_forward``)."""
        self._node.saved_for_forward = tuple(tensors)


def _make_opdef(cls) -> OpDef:
    name = cls.__name__

    def forward(ctx, *args, _ferro_box=None, **kwargs):
        inputs = [wrap(a) if is_array(a) else a for a in args]
        ctx._ferro_n_inputs = len(args)
        with no_grad():
            out = cls.forward(
                FunctionCtx(ctx, _ferro_box if _ferro_box is not None else {}), *inputs, **kwargs
            )
        outs = out if isinstance(out, tuple) else (out,)
        for k, o in enumerate(outs):
            if not isinstance(o, TensorBase):
                raise ArgumentTypeError(
                    f"{name}.forward must return Tensors, got a {type(o).__name__} as output {k}"
                )
        if isinstance(out, tuple):
            return tuple(o._data for o in outs)
        return out._data

    def gradients(ctx, res) -> tuple:
        res = tuple(res) if isinstance(res, (tuple, list)) else (res,)
        for k, g in enumerate(res):
            if g is not None and not isinstance(g, TensorBase):
                raise GradientError(
                    f"{name}.backward returned a {type(g).__name__} as gradient {k}; expected a "
                    "Tensor or None"
                )
        # As in PyTorch, gradients past the inputs may be returned when they are None (a
        # backward written for optional arguments the call left at their defaults).
        n = ctx._ferro_n_inputs
        return res[:n] if len(res) > n and all(g is None for g in res[n:]) else res

    def backward(ctx, *grad_outputs):
        gys = [None if g is None else wrap(g) for g in grad_outputs]
        with no_grad():
            res = gradients(ctx, cls.backward(ctx, *gys))
        return tuple(None if g is None else g._data for g in res)

    def differentiable_backward(ctx, *grad_outputs):
        # create_graph: grad mode is on, the grads and ctx.saved_tensors have history.
        return gradients(ctx, cls.backward(ctx, *grad_outputs))

    return OpDef(
        f"function:{cls.__module__}.{cls.__qualname__}",
        forward,
        backward,
        same_dtype=False,
        display=name,
        private_ctx=True,  # user code may read back what it stores on ctx
        differentiable_backward=differentiable_backward,
    )


class Function:
    """Base class of user-defined differentiable ops.

    Example:
        >>> class Cube(ferro.autograd.Function):
        ...     @staticmethod
        ...     def forward(ctx, x):
        ...         ctx.save_for_backward(x)
        ...         return x * x * x
        ...     @staticmethod
        ...     def backward(ctx, gy):
        ...         (x,) = ctx.saved_tensors
        ...         return gy * 3 * x * x
        >>> y = Cube.apply(ferro.tensor([2.0], requires_grad=True))
    """

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("Function subclasses must define forward(ctx, ...)")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("Function subclasses must define backward(ctx, ...)")

    @staticmethod
    def jvp(ctx, *grad_inputs):
        """Forward mode: the output tangents for input tangents ``grad_inputs`` (optional; see
        :meth:`apply_jvp`). Reads what forward stored with ``ctx.save_for_forward``."""
        raise NotSupportedError("this Function defines no jvp(ctx, *grad_inputs)")

    @classmethod
    def apply(cls, *args, **kwargs):
        """Run the Function on ``args`` (Tensors and other values), recording it for backward."""
        op = cls.__dict__.get("_ferro_opdef")
        if op is None:
            op = _make_opdef(cls)
            cls._ferro_opdef = op
        box = {}
        out = apply(op, *args, _ferro_box=box, **kwargs)
        if "dirty" in box:
            out = _commit_dirty(cls.__name__, args, out, box["dirty"])
        return out

    @classmethod
    def apply_jvp(cls, args, tangents, **kwargs):
        """Forward-mode derivative through this Function's ``jvp``: returns ``(outputs,
        output tangents)`` for ``tangents`` (one per argument; None for non-tensors)."""
        if cls.jvp is Function.jvp:
            raise NotSupportedError(f"{cls.__name__} defines no jvp(ctx, *grad_inputs)")
        box = {}
        op = cls.__dict__.get("_ferro_opdef")
        if op is None:
            op = cls._ferro_opdef = _make_opdef(cls)
        from ferro._C.graph import Node

        ctx = Node.__new__(Node)
        fwd_out = op.forward(
            ctx,
            *[a._data if isinstance(a, TensorBase) else a for a in args],
            _ferro_box=box,
            **kwargs,
        )
        with no_grad():
            tangent = cls.jvp(ctx, *tangents)
        outs = tuple(wrap(o) for o in fwd_out) if isinstance(fwd_out, tuple) else wrap(fwd_out)
        return outs, tangent


def _commit_dirty(name, args, out, dirty):
    """mark_dirty: each output that is a dirty input's memory becomes that input (the caller's
    tensor), which takes the output's history."""
    outs = out if isinstance(out, tuple) else (out,)
    res = []
    for o in outs:
        src = None
        for a in args:
            if (
                isinstance(a, TensorBase)
                and a._data is o._data
                and any(o._data is d for d in dirty)
            ):
                src = a
                break
        res.append(o if src is None else commit_inplace(src, o, name))
    return tuple(res) if isinstance(out, tuple) else res[0]


def once_differentiable(backward):
    """Decorate a Function's ``backward`` that is not itself differentiable: under
    ``create_graph`` it runs without recording, and differentiating its result raises.

    Example:
        >>> class Clip(ferro.autograd.Function):
        ...     @staticmethod
        ...     def forward(ctx, x):
        ...         return x.clamp(-1, 1)
        ...     @staticmethod
        ...     @ferro.autograd.function.once_differentiable
        ...     def backward(ctx, gy):
        ...         return gy
    """

    @functools.wraps(backward)
    def wrapper(ctx, *grads):
        with no_grad():
            res = backward(ctx, *[g.detach() if isinstance(g, TensorBase) else g for g in grads])
        if not is_grad_enabled():
            return res
        needs = [g for g in grads if isinstance(g, TensorBase) and g.requires_grad]
        if not needs:
            return res
        one = not isinstance(res, (tuple, list))
        out = tuple(
            apply(_ONCE, g, *needs) if isinstance(g, TensorBase) else g
            for g in ((res,) if one else res)
        )
        return out[0] if one else out

    return wrapper


def _once_forward(ctx, g, *deps):
    return g.copy()


def _once_backward(ctx, *grads):
    raise GraphError(
        "trying to differentiate twice a Function whose backward is marked @once_differentiable"
    )


_ONCE = OpDef(
    "once_differentiable",
    _once_forward,
    _once_backward,
    same_dtype=False,
    display="OnceDifferentiable",
)
