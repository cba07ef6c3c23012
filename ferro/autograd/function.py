"""``ferro.autograd.Function``: user-defined ops with a hand-written backward.

Subclass it with static ``forward(ctx, *args)`` and ``backward(ctx, *grad_outputs)`` working on
Tensors (as in PyTorch) and call ``MyFunction.apply(*args)``. The class becomes one op in the
compiled engine, so it gets everything an op gets: saved-tensor hooks, version checks on saved
tensors, anomaly detection, and a typed error that names the Function when backward returns the
wrong number, shape or dtype of gradients.

``ctx`` offers ``save_for_backward``, ``saved_tensors``, ``needs_input_grad`` (already during
forward), ``mark_non_differentiable``, ``set_materialize_grads`` and free attributes.
"""

from __future__ import annotations

from ferro._C.engine import apply
from ferro._C.graph import OpDef
from ferro._C.tensor import TensorBase, wrap
from ferro.autograd.grad_mode import no_grad
from ferro.backend import is_array
from ferro.errors import ArgumentTypeError, GradientError


def _make_opdef(cls) -> OpDef:
    name = cls.__name__

    def forward(ctx, *args, **kwargs):
        inputs = [wrap(a) if is_array(a) else a for a in args]
        with no_grad():
            out = cls.forward(ctx, *inputs, **kwargs)
        outs = out if isinstance(out, tuple) else (out,)
        for k, o in enumerate(outs):
            if not isinstance(o, TensorBase):
                raise ArgumentTypeError(
                    f"{name}.forward must return Tensors, got a {type(o).__name__} as output {k}"
                )
        if isinstance(out, tuple):
            return tuple(o._data for o in outs)
        return out._data

    def backward(ctx, *grad_outputs):
        gys = [None if g is None else wrap(g) for g in grad_outputs]
        with no_grad():
            res = cls.backward(ctx, *gys)
        res = res if isinstance(res, (tuple, list)) else (res,)
        out = []
        for k, g in enumerate(res):
            if g is None or isinstance(g, TensorBase):
                out.append(None if g is None else g._data)
            else:
                raise GradientError(
                    f"{name}.backward returned a {type(g).__name__} as gradient {k}; expected a "
                    "Tensor or None"
                )
        return tuple(out)

    return OpDef(
        f"function:{cls.__module__}.{cls.__qualname__}",
        forward,
        backward,
        same_dtype=False,
        display=name,
        private_ctx=True,  # user code may read back what it stores on ctx
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

    @classmethod
    def apply(cls, *args, **kwargs):
        """Run the Function on ``args`` (Tensors and other values), recording it for backward."""
        op = cls.__dict__.get("_ferro_opdef")
        if op is None:
            op = _make_opdef(cls)
            cls._ferro_opdef = op
        return apply(op, *args, **kwargs)
