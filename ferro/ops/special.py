"""More transcendental functions, under PyTorch's names: the inverse trigonometric and the
hyperbolic functions, ``erf``/``erfc``/``erfinv``, the gamma family (``lgamma``, ``digamma``,
``polygamma``), ``logit``, and the two-argument ``atan2``, ``hypot``, ``xlogy``.

Each is one registered op made from a row of :data:`_UNARY` or :data:`_BINARY`: the forward as a
NumPy/CuPy expression, and the derivative written with ``ctx.xp`` over the saved input (or
output), so under ``create_graph`` the same source runs on the differentiable namespace and the
op is differentiable again (Note [Double backward]).
"""

from __future__ import annotations

import math

from ferro.errors import ArgumentTypeError
from ferro.ops.activation import erf as _erf_array
from ferro.ops.activation import math_ufunc
from ferro.ops.elementwise import real_arg
from ferro.ops.registry import apply, register, unary_op

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _erfc_array(xp, x):
    return math_ufunc(xp, x, "erfc")


def _floating(xp, x):
    return x if x.dtype.kind == "f" else x.astype(xp.float64)


def _lgamma_scalar(v):
    # math.lgamma raises at the poles (0, -1, -2, ...), where PyTorch returns inf.
    return math.inf if v <= 0 and float(v).is_integer() else math.lgamma(v)


def _lgamma_array(xp, x):
    x = _floating(xp, x)
    if xp.__name__ == "numpy":
        return xp.asarray(xp.frompyfunc(_lgamma_scalar, 1, 1)(x), dtype=x.dtype)
    import cupyx.scipy.special

    return cupyx.scipy.special.gammaln(x)


# B_2k / (2k)! for k = 1..8: the coefficients of the asymptotic series below.
_BERNOULLI = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6, -3617 / 510)
_B_OVER_FACT = tuple(b / math.factorial(2 * k + 2) for k, b in enumerate(_BERNOULLI))


def _digamma(xp, x):
    # Reflection below 1/2, then the recurrence psi(z) = psi(z + 1) - 1/z up to z >= 10 and
    # the asymptotic series psi(z) ~ log z - 1/(2z) - sum B_2k / (2k z^2k): about 1e-16.
    small = x < 0.5
    z = xp.where(small, 1 - x, x)
    acc = xp.zeros_like(z)
    for _ in range(10):
        m = z < 10
        acc = acc - xp.where(m, 1 / xp.where(m, z, 1), 0)
        z = xp.where(m, z + 1, z)
    r = 1 / (z * z)
    series = xp.zeros_like(z)
    for k in range(len(_BERNOULLI) - 1, -1, -1):
        series = (series + _BERNOULLI[k] / (2 * k + 2)) * r
    psi = acc + xp.log(z) - 0.5 / z - series
    pole = (x <= 0) & (x == xp.floor(x))
    psi = xp.where(small, psi - math.pi / xp.tan(math.pi * xp.where(pole, 0.5, x)), psi)
    # PyTorch: -inf at +0, inf at -0, NaN at the negative integers.
    psi = xp.where(pole, xp.where(x == 0, xp.copysign(xp.inf, -x), xp.nan), psi)
    return psi.astype(x.dtype, copy=False)


def _polygamma_array(xp, n, x):
    """``psi^(n)(x)`` elementwise; on the differentiable namespace, the recorded op."""
    if hasattr(xp, "polygamma"):
        return xp.polygamma(n, x)
    x = _floating(xp, x)
    if n == 0:
        return _digamma(xp, x)
    # psi^(n)(x) = (-1)^(n+1) n! zeta(n+1, x): the Hurwitz zeta as the sum of 1/(x+k)^s while
    # x + k is below n + 10 (one step per unit of the distance: slow only far below 0), then
    # its asymptotic series (Euler-Maclaurin), within about 1e-16 from there.
    s, start = n + 1, n + 10.0
    z, acc = x, xp.zeros_like(x)
    live = xp.isfinite(z) & (z < start)
    while bool(live.any()):
        acc = acc + xp.where(live, 1 / xp.where(live & (z != 0), z, 1) ** s, 0)
        acc = xp.where(live & (z == 0), xp.inf, acc)
        z = xp.where(live, z + 1, z)
        live = live & (z < start)
    tail = z ** (1 - s) / (s - 1) + 0.5 * z**-s
    rising, power = float(s), z**-s / z  # s (s+1) ... (s+2k-2), z^-(s+2k-1)
    for k, c in enumerate(_B_OVER_FACT):
        tail = tail + c * rising * power
        rising *= (s + 2 * k + 1) * (s + 2 * k + 2)
        power = power / (z * z)
    out = (-1) ** (n + 1) * math.factorial(n) * (acc + tail)
    return xp.where(x == -xp.inf, xp.nan, out).astype(x.dtype, copy=False)


def _erfinv_array(xp, x):
    # Giles' single-precision approximation (2010), then Newton steps on erf(y) = |x|, each
    # doubling the correct digits (1e-7 -> 1e-14 -> 1e-16; the third is for the far tail). From
    # |x| = 1/2 on, a step solves log erfc(y) = log(1 - |x|) instead: erf(y) near 1 has lost
    # the digits, and the log is near linear in y out in the tail, where the start is off most.
    x = _floating(xp, x)
    a = xp.abs(x)
    inside = a < 1
    a = xp.where(inside, a, 0)
    w = -xp.log((1 - a) * (1 + a))
    central, tail = w - 2.5, xp.sqrt(w) - 3
    p = xp.where(w < 5, 2.81022636e-08, -0.000200214257)
    for c_central, c_tail in _GILES:
        p = xp.where(w < 5, c_central + p * central, c_tail + p * tail)
    y = p * a
    for _ in range(3):
        e = _erfc_array(xp, y)
        step = xp.where(a < 0.5, _erf_array(xp, y) - a, (xp.log1p(-a) - xp.log(e)) * e)
        y = y - step / (_TWO_OVER_SQRT_PI * xp.exp(-y * y))
    y = xp.where(
        inside, xp.copysign(y, x), xp.where(xp.abs(x) == 1, xp.copysign(xp.inf, x), xp.nan)
    )
    return y.astype(x.dtype, copy=False)


_GILES = (
    (3.43273939e-07, 0.000100950558),
    (-3.5233877e-06, 0.00134934322),
    (-4.39150654e-06, -0.00367342844),
    (0.00021858087, 0.00573950773),
    (-0.00125372503, -0.0076224613),
    (-0.00417768164, 0.00943887047),
    (0.246640727, 1.00167406),
    (1.50140941, 2.83297682),
)


def _ufunc(name):
    return lambda xp, x: getattr(xp, name)(x)


_NAN_OUTSIDE_1 = " (NaN outside [-1, 1])."
# name: (forward(xp, x), the saved array the gradient reads ("x" or "y"), the gradient
# gx(xp, gy, that array), the docstring's first line, its gradient line): see unary_op.
_UNARY = {
    "tan": (_ufunc("tan"), "y", lambda xp, gy, y: gy * (1 + y * y), "Tangent.", "gy * (1 + y**2)"),
    "sinh": (
        _ufunc("sinh"),
        "x",
        lambda xp, gy, x: gy * xp.cosh(x),
        "Hyperbolic sine.",
        "gy * cosh(x)",
    ),
    "cosh": (
        _ufunc("cosh"),
        "x",
        lambda xp, gy, x: gy * xp.sinh(x),
        "Hyperbolic cosine.",
        "gy * sinh(x)",
    ),
    "asin": (
        _ufunc("arcsin"),
        "x",
        lambda xp, gy, x: gy * (1 / xp.sqrt(1 - x * x)),
        "Inverse sine" + _NAN_OUTSIDE_1,
        "gy / sqrt(1 - x**2)",
    ),
    "acos": (
        _ufunc("arccos"),
        "x",
        lambda xp, gy, x: gy * (-1 / xp.sqrt(1 - x * x)),
        "Inverse cosine" + _NAN_OUTSIDE_1,
        "-gy / sqrt(1 - x**2)",
    ),
    "atan": (
        _ufunc("arctan"),
        "x",
        lambda xp, gy, x: gy * (1 / (1 + x * x)),
        "Inverse tangent.",
        "gy / (1 + x**2)",
    ),
    "asinh": (
        _ufunc("arcsinh"),
        "x",
        lambda xp, gy, x: gy * (1 / xp.sqrt(x * x + 1)),
        "Inverse hyperbolic sine.",
        "gy / sqrt(x**2 + 1)",
    ),
    "acosh": (
        _ufunc("arccosh"),
        "x",
        lambda xp, gy, x: gy * (1 / xp.sqrt(x * x - 1)),
        "Inverse hyperbolic cosine (NaN below 1).",
        "gy / sqrt(x**2 - 1)",
    ),
    "atanh": (
        _ufunc("arctanh"),
        "x",
        lambda xp, gy, x: gy * (1 / (1 - x * x)),
        "Inverse hyperbolic tangent" + _NAN_OUTSIDE_1,
        "gy / (1 - x**2)",
    ),
    "erf": (
        _erf_array,
        "x",
        lambda xp, gy, x: gy * (_TWO_OVER_SQRT_PI * xp.exp(-x * x)),
        "The error function.",
        "gy * 2 / sqrt(pi) * exp(-x**2)",
    ),
    "erfc": (
        _erfc_array,
        "x",
        lambda xp, gy, x: gy * (-_TWO_OVER_SQRT_PI * xp.exp(-x * x)),
        "The complementary error function ``1 - erf(x)``.",
        "-gy * 2 / sqrt(pi) * exp(-x**2)",
    ),
    "erfinv": (
        _erfinv_array,
        "y",
        lambda xp, gy, y: gy * ((0.5 * math.sqrt(math.pi)) * xp.exp(y * y)),
        "The inverse of erf on (-1, 1): +-inf at +-1, NaN outside.",
        "gy * sqrt(pi) / 2 * exp(y**2)",
    ),
    "lgamma": (
        _lgamma_array,
        "x",
        lambda xp, gy, x: gy * _polygamma_array(xp, 0, x),
        "``log |Gamma(x)|``: inf at 0, -1, -2, ....",
        "gy * digamma(x)",
    ),
    "digamma": (
        lambda xp, x: _polygamma_array(xp, 0, x),
        "x",
        lambda xp, gy, x: gy * _polygamma_array(xp, 1, x),
        "The digamma function, the derivative of lgamma: -inf at +0, inf at -0, NaN at the "
        "negative integers (as PyTorch's).",
        "gy * polygamma(1, x)",
    ),
}


for _name, _row in _UNARY.items():
    globals()[_name] = unary_op(_name, *_row, __name__)


@register("polygamma")
class Polygamma:
    @staticmethod
    def forward(ctx, x, *, n):
        ctx.save(x)
        ctx.n = n
        return _polygamma_array(ctx.xp, n, x)

    @staticmethod
    def backward(ctx, gy):
        (x,) = ctx.saved
        return gy * _polygamma_array(ctx.xp, ctx.n + 1, x)


def polygamma(n, input):  # noqa: A002 - PyTorch's names and order
    """The ``n``-th derivative of the digamma function, ``psi^(n)(input)`` (``n = 0``:
    :func:`digamma`); inf at the non-positive integers for ``n >= 1``, where PyTorch returns
    large finite numbers. Below 0 it takes one step per unit of ``-input``.

    Gradient: gx = gy * polygamma(n + 1, x).
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ArgumentTypeError(f"polygamma: n must be a non-negative int, got {n!r}")
    return apply(Polygamma, input, n=n)


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
    "polygamma",
    "rad2deg",
    "xlogy",
]
