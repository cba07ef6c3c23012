"""More transcendental functions, under PyTorch's names: the inverse trigonometric and the
hyperbolic functions, ``erf``/``erfc``, ``logit``, and the two-argument ``atan2``, ``hypot``,
``xlogy``.

Each is one registered op made from a row of :data:`_UNARY` or :data:`_BINARY`: the forward as a
NumPy/CuPy expression, and the derivative written with ``ctx.xp`` over the saved input (or
output), so under ``create_graph`` the same source runs on the differentiable namespace and the
op is differentiable again (Note [Double backward]).
"""

from __future__ import annotations

import math

from ferro.ops.activation import erf as _erf_array
from ferro.ops.activation import math_ufunc
from ferro.ops.elementwise import real_arg
from ferro.ops.registry import apply, register

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _erfc_array(xp, x):
    return math_ufunc(xp, x, "erfc")


def _ufunc(name):
    return lambda xp, x: getattr(xp, name)(x)


_NAN_OUTSIDE_1 = " (NaN outside [-1, 1])."
# name: (forward(xp, x), the saved array the derivative reads ("x" or "y"), the derivative
# dy/dx(xp, that array), the docstring's first line, its gradient line)
_UNARY = {
    "tan": (_ufunc("tan"), "y", lambda xp, y: 1 + y * y, "Tangent.", "gy * (1 + y**2)"),
    "sinh": (_ufunc("sinh"), "x", lambda xp, x: xp.cosh(x), "Hyperbolic sine.", "gy * cosh(x)"),
    "cosh": (_ufunc("cosh"), "x", lambda xp, x: xp.sinh(x), "Hyperbolic cosine.", "gy * sinh(x)"),
    "asin": (
        _ufunc("arcsin"),
        "x",
        lambda xp, x: 1 / xp.sqrt(1 - x * x),
        "Inverse sine" + _NAN_OUTSIDE_1,
        "gy / sqrt(1 - x**2)",
    ),
    "acos": (
        _ufunc("arccos"),
        "x",
        lambda xp, x: -1 / xp.sqrt(1 - x * x),
        "Inverse cosine" + _NAN_OUTSIDE_1,
        "-gy / sqrt(1 - x**2)",
    ),
    "atan": (
        _ufunc("arctan"),
        "x",
        lambda xp, x: 1 / (1 + x * x),
        "Inverse tangent.",
        "gy / (1 + x**2)",
    ),
    "asinh": (
        _ufunc("arcsinh"),
        "x",
        lambda xp, x: 1 / xp.sqrt(x * x + 1),
        "Inverse hyperbolic sine.",
        "gy / sqrt(x**2 + 1)",
    ),
    "acosh": (
        _ufunc("arccosh"),
        "x",
        lambda xp, x: 1 / xp.sqrt(x * x - 1),
        "Inverse hyperbolic cosine (NaN below 1).",
        "gy / sqrt(x**2 - 1)",
    ),
    "atanh": (
        _ufunc("arctanh"),
        "x",
        lambda xp, x: 1 / (1 - x * x),
        "Inverse hyperbolic tangent" + _NAN_OUTSIDE_1,
        "gy / (1 - x**2)",
    ),
    "erf": (
        _erf_array,
        "x",
        lambda xp, x: _TWO_OVER_SQRT_PI * xp.exp(-x * x),
        "The error function.",
        "gy * 2 / sqrt(pi) * exp(-x**2)",
    ),
    "erfc": (
        _erfc_array,
        "x",
        lambda xp, x: -_TWO_OVER_SQRT_PI * xp.exp(-x * x),
        "The complementary error function ``1 - erf(x)``.",
        "-gy * 2 / sqrt(pi) * exp(-x**2)",
    ),
}


def _unary_op(name, forward, reads, derivative, doc, grad_doc):
    def fwd(ctx, x):
        y = forward(ctx.xp, x)
        ctx.save(y if reads == "y" else x)
        return y

    def bwd(ctx, gy):
        (s,) = ctx.saved
        return gy * derivative(ctx.xp, s)

    op = register(name)(
        type(name.capitalize(), (), {"forward": staticmethod(fwd), "backward": staticmethod(bwd)})
    )

    def fn(x):
        return apply(op, x)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"{doc}\n\n    Gradient: gx = {grad_doc}.\n    "
    return fn


for _name, _row in _UNARY.items():
    globals()[_name] = _unary_op(_name, *_row)


@register("atan2", broadcasts=True)
class Atan2:
    @staticmethod
    def forward(ctx, y, x):
        ctx.save(y, x)
        return ctx.xp.arctan2(y, x)

    @staticmethod
    def backward(ctx, g):
        y, x = ctx.saved
        r2 = x * x + y * y
        return g * x / r2, -g * y / r2


def atan2(input, other):  # noqa: A002 - PyTorch's names
    """The angle of the point ``(other, input)``: ``atan(input / other)`` in the right quadrant
    (broadcasting).

    Gradient: ginput = g * other / r**2, gother = -g * input / r**2, r**2 = input**2 + other**2.
    """
    return apply(Atan2, input, other)


@register("hypot", broadcasts=True)
class Hypot:
    @staticmethod
    def forward(ctx, a, b):
        h = ctx.xp.hypot(a, b)
        ctx.save(a, b, h)
        return h

    @staticmethod
    def backward(ctx, g):
        a, b, h = ctx.saved
        return g * a / h, g * b / h


def hypot(input, other):  # noqa: A002
    """``sqrt(input**2 + other**2)`` without overflow (broadcasting).

    Gradient: ginput = g * input / h, gother = g * other / h.
    """
    return apply(Hypot, input, other)


@register("xlogy", broadcasts=True)
class Xlogy:
    @staticmethod
    def forward(ctx, x, y):
        xp = ctx.xp
        # A Python number takes the other operand's dtype. An array is kept as is: the saved
        # inputs must be the inputs themselves for create_graph (Note [Double backward]).
        if not hasattr(x, "dtype"):
            x = xp.asarray(x, dtype=y.dtype)
        if not hasattr(y, "dtype"):
            y = xp.asarray(y, dtype=x.dtype)
        ctx.save(x, y)
        with_log = x * xp.log(xp.where(x == 0, 1, y))  # no log(0) where it is not used
        return xp.where((x == 0) & xp.isnan(y), y, with_log)

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved
        xp = ctx.xp
        return xp.where(x == 0, 0, g * xp.log(y)), g * x / y


def xlogy(input, other):  # noqa: A002
    """``input * log(other)``, 0 where ``input == 0`` (unless ``other`` is NaN), as PyTorch's.

    Gradient: ginput = g * log(other) (0 where input == 0), gother = g * input / other.
    """
    return apply(Xlogy, input, other)


@register("logit")
class Logit:
    @staticmethod
    def forward(ctx, x, *, eps):
        xp = ctx.xp
        ctx.save(x)
        ctx.eps = eps
        z = x if eps is None else xp.clip(x, eps, 1 - eps)
        return xp.log(z / (1 - z))

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved
        xp = ctx.xp
        gx = g / (x * (1 - x))
        if ctx.eps is None:
            return gx
        return xp.where((x < ctx.eps) | (x > 1 - ctx.eps), 0, gx)


def logit(input, eps=None):  # noqa: A002
    """``log(p / (1 - p))``, the inverse of the sigmoid; with ``eps``, ``p`` is first clamped
    to ``[eps, 1 - eps]``.

    Gradient: gx = g / (x * (1 - x)), 0 outside ``[eps, 1 - eps]`` when clamped.
    """
    return apply(Logit, input, eps=None if eps is None else real_arg(eps, "eps", "logit"))


def deg2rad(input):  # noqa: A002
    """Degrees to radians: ``input * pi / 180``.

    Gradient: gx = g * pi / 180.
    """
    return input * (math.pi / 180.0)


def rad2deg(input):  # noqa: A002
    """Radians to degrees: ``input * 180 / pi``.

    Gradient: gx = g * 180 / pi.
    """
    return input * (180.0 / math.pi)


# NumPy's spellings, which PyTorch accepts too.
arcsin, arccos, arctan, arctan2 = asin, acos, atan, atan2  # noqa: F821 - made by the loop above
arcsinh, arccosh, arctanh = asinh, acosh, atanh  # noqa: F821

__all__ = [
    *_UNARY,
    "arccos",
    "arccosh",
    "arcsin",
    "arcsinh",
    "arctan",
    "arctan2",
    "arctanh",
    "atan2",
    "deg2rad",
    "hypot",
    "logit",
    "rad2deg",
    "xlogy",
]
