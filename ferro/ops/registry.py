"""The op registry: every differentiable op is an :class:`~ferro._C.graph.OpDef` registered here.

An op is written as a class with static ``forward(ctx, *args, **params)`` and
``backward(ctx, *grad_outputs)`` against ``ctx.xp`` (NumPy or CuPy), and registered with
:func:`register`, which turns the class into its OpDef::

    @register("tanh")
    class Tanh:
        @staticmethod
        def forward(ctx, x):
            y = ctx.xp.tanh(x)
            ctx.save(y)
            return y

        @staticmethod
        def backward(ctx, gy):
            (y,) = ctx.saved
            return gy * (1 - y * y)

    def tanh(x):
        return apply(Tanh, x)

``backward`` returns one gradient per positional argument of ``forward`` (None where none
flows; ``ctx.needs_input_grad`` says which are wanted). The engine undoes broadcasting for ops
registered with ``broadcasts=True`` and checks every gradient's shape and dtype.

Under ``create_graph`` the same ``backward`` runs on differentiable arrays (Note [Double
backward]); an op whose backward cannot (it calls a compiled kernel, say) also defines
``differentiable_backward(ctx, *grad_outputs)`` with ferro ops on Tensors.
"""

from __future__ import annotations

from ferro._C.engine import apply
from ferro._C.graph import OpDef
from ferro.errors import ArgumentError

REGISTRY: dict[str, OpDef] = {}


def array_of(x):
    """The array behind an index/target/weight argument: a Tensor's data, or ``np.asarray``."""
    from ferro._C.tensor import TensorBase

    if isinstance(x, TensorBase):
        return x._data
    import numpy as np

    return x if type(x).__module__.startswith("cupy") else np.asarray(x)


def register(name: str, **flags) -> callable:
    """Class decorator: build the OpDef for an op class and record it under ``name``."""

    def deco(cls) -> OpDef:
        if name in REGISTRY:
            raise ArgumentError(f"register: op {name!r} is registered twice")
        op = OpDef(
            name,
            cls.forward,
            getattr(cls, "backward", None),
            display=cls.__name__,
            differentiable_backward=getattr(cls, "differentiable_backward", None),
            **flags,
        )
        REGISTRY[name] = op
        return op

    return deco


def unary_op(name, forward, reads, gradient, doc, grad_doc, module):
    """Register the one-tensor op of a table row and return its public function: ``forward(xp,
    x)`` makes ``y``; ``reads`` names the array saved for the backward (``"x"`` or ``"y"``),
    and ``gradient(xp, gy, saved)`` makes ``gx`` with ``xp`` alone, so it runs again on the
    differentiable namespace under ``create_graph``. ``module`` is the family that owns it."""

    def fwd(ctx, x):
        y = forward(ctx.xp, x)
        ctx.save(y if reads == "y" else x)
        return y

    def bwd(ctx, gy):
        (s,) = ctx.saved
        return gradient(ctx.xp, gy, s)

    fwd.__module__ = bwd.__module__ = module
    cls = type(name.capitalize(), (), {"forward": staticmethod(fwd), "backward": staticmethod(bwd)})
    op = register(name)(cls)

    def fn(x):
        return apply(op, x)

    fn.__name__ = fn.__qualname__ = name
    fn.__module__ = module
    fn.__doc__ = f"{doc}\n\n    Gradient: gx = {grad_doc}.\n    "
    return fn


__all__ = ["REGISTRY", "register", "apply", "array_of", "OpDef", "unary_op"]
