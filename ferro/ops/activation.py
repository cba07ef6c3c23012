"""Activations: relu and its relatives, gelu, silu, mish, softplus, the hard and gated ones,
softmax, log_softmax, prelu.

Ops whose generic expression makes several passes over memory get fused kernels, listed in the
table of :mod:`ferro.ops.fused`; the classes here stay the reference implementations the
overrides are tested against.
"""

from __future__ import annotations

import math

from ferro._C.engine import compiled
from ferro.errors import ArgumentError, ShapeError
from ferro.ops._args import aliases
from ferro.ops.elementwise import real_arg, sigmoid_array
from ferro.ops.reduction import normalize_axes
from ferro.ops.registry import apply, register

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def math_ufunc(xp, x, name):
    """Elementwise ``math.<name>`` (``erf``, ``erfc``) for NumPy (no SciPy dependency), CuPy,
    or the differentiable namespace."""
    if hasattr(xp, name):
        return getattr(xp, name)(x)
    if xp.__name__ == "numpy":
        # asarray: on a 0-d input frompyfunc returns a Python float, not an array.
        return xp.asarray(xp.frompyfunc(getattr(math, name), 1, 1)(x), dtype=x.dtype)
    import cupyx.scipy.special

    return getattr(cupyx.scipy.special, name)(x)


def erf(xp, x):
    """Elementwise erf (:func:`math_ufunc`)."""
    return math_ufunc(xp, x, "erf")


def _softplus(xp, x):
    # log(1 + exp(x)) without overflow: max(x, 0) + log1p(exp(-|x|)).
    return xp.maximum(x, 0) + xp.log1p(xp.exp(-xp.abs(x)))


def _axis1(axis, ndim, op):
    if ndim == 0:
        raise ShapeError(f"{op}: needs at least 1 dimension")
    (a,) = normalize_axes(axis, ndim, op)
    return a


@register("relu", direct="relu")
class Relu:
    @staticmethod
    def forward(ctx, x):
        y = ctx.xp.maximum(x, 0)
        ctx.save(y)
        return y

    @staticmethod
    def backward(ctx, gy):
        (y,) = ctx.saved
        return gy * (y > 0)


def relu(x):
    """``max(x, 0)``.

    Gradient: gx = gy where x > 0, else 0.
    """
    return apply(Relu, x)


relu = compiled(Relu, relu)  # the same function, compiled (no Python frame per call)


@register("leaky_relu")
class LeakyRelu:
    @staticmethod
    def forward(ctx, x, *, slope):
        ctx.save(x)
        ctx.slope = slope
        return ctx.xp.where(x > 0, x, x * slope)

    @staticmethod
    def backward(ctx, gy):
        (x,) = ctx.saved
        return ctx.xp.where(x > 0, gy, gy * ctx.slope)


def leaky_relu(x, negative_slope: float = 0.01):
    """``x`` for x > 0, else ``negative_slope * x``.

    Gradient: gx = gy where x > 0, else negative_slope * gy.
    """
    return apply(LeakyRelu, x, slope=real_arg(negative_slope, "negative_slope", "leaky_relu"))


@register("elu")
class Elu:
    @staticmethod
    def forward(ctx, x, *, alpha, scale):
        xp = ctx.xp
        neg = alpha * xp.expm1(xp.minimum(x, 0))
        y = scale * xp.where(x > 0, x, neg)
        ctx.save(x, y)
        ctx.alpha, ctx.scale = alpha, scale
        return y

    @staticmethod
    def backward(ctx, gy):
        x, y = ctx.saved
        s = ctx.scale
        return gy * ctx.xp.where(x > 0, s, y + s * ctx.alpha)


def elu(x, alpha: float = 1.0):
    """``x`` for x > 0, else ``alpha * (exp(x) - 1)``.

    Gradient: gx = gy where x > 0, else gy * (y + alpha).
    """
    return apply(Elu, x, alpha=real_arg(alpha, "alpha", "elu"), scale=1.0)


def selu(x):
    """``scale * elu(x, alpha)`` with the self-normalizing constants.

    Gradient: gx = scale * gy where x > 0, else gy * (y + scale * alpha).
    """
    return apply(Elu, x, alpha=SELU_ALPHA, scale=SELU_SCALE)


@register("gelu")
class Gelu:
    @staticmethod
    def forward(ctx, x, *, approximate):
        xp = ctx.xp
        ctx.save(x)
        ctx.approximate = approximate
        if approximate == "tanh":
            return _gelu_tanh(xp, x)
        return 0.5 * x * (1 + erf(xp, x * _INV_SQRT_2))

    @staticmethod
    def backward(ctx, gy):
        (x,) = ctx.saved
        xp = ctx.xp
        if ctx.approximate == "tanh":
            if xp.__name__ in ("numpy", "cupy") and getattr(x, "ndim", 0) > 0:
                return _gelu_tanh_grad(xp, x, gy)
            # The same formula with plain math (this runs on tensors under create_graph).
            inner = _SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)
            t = xp.tanh(inner)
            dinner = _SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x * x)
            return gy * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * dinner)
        cdf = 0.5 * (1 + erf(xp, x * _INV_SQRT_2))
        pdf = _INV_SQRT_2PI * xp.exp(-0.5 * x * x)
        return gy * (cdf + x * pdf)


_GELU_K = 0.044715


def _gelu_tanh(xp, x):
    # 0.5 x (1 + tanh(c (x + k x^3))) in one buffer, updated in place (the plain expression
    # allocates eight temporaries). On a 0-d x NumPy's ufuncs return scalars: plain math there.
    if getattr(x, "ndim", 0) == 0:
        return 0.5 * x * (1 + xp.tanh(_SQRT_2_OVER_PI * (x + _GELU_K * x * x * x)))
    y = xp.multiply(x, x)
    y *= _SQRT_2_OVER_PI * _GELU_K
    y += _SQRT_2_OVER_PI
    y *= x
    xp.tanh(y, out=y)
    y += 1
    y *= x
    y *= 0.5
    return y


def _gelu_tanh_grad(xp, x, gy):
    # gy (0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 k x^2)), t = tanh(c (x + k x^3)), in two
    # buffers updated in place.
    d = xp.multiply(x, x)
    t = d * (_SQRT_2_OVER_PI * _GELU_K)
    t += _SQRT_2_OVER_PI
    t *= x
    xp.tanh(t, out=t)
    d *= 1.5 * _SQRT_2_OVER_PI * _GELU_K
    d += 0.5 * _SQRT_2_OVER_PI
    d *= x  # 0.5 x c (1 + 3 k x^2)
    u = xp.multiply(t, t)
    xp.subtract(1, u, out=u)
    u *= d
    t += 1
    t *= 0.5
    t += u
    t *= gy
    return t


def gelu(x, approximate: str = "none"):
    """Gaussian error linear unit: ``x * Phi(x)`` (``approximate="tanh"`` for the tanh form).

    Gradient: gx = gy * (Phi(x) + x * phi(x)) (or the derivative of the tanh form).
    """
    if approximate not in ("none", "tanh"):
        raise ArgumentError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return apply(Gelu, x, approximate=approximate)


@register("silu")
class Silu:
    @staticmethod
    def forward(ctx, x):
        s = sigmoid_array(ctx.xp, x)
        ctx.save(x, s)
        return x * s

    @staticmethod
    def backward(ctx, gy):
        x, s = ctx.saved
        return gy * s * (1 + x * (1 - s))

    @staticmethod
    def differentiable_backward(ctx, gy):
        # Note [Double backward]: s is an intermediate (the fused backward reads it); recompute it
        # from x so the second derivative sees its dependence on x.
        from ferro.ops.elementwise import sigmoid

        x = ctx.saved[0]
        s = sigmoid(x)
        return gy * s * (1 + x * (1 - s))


def silu(x):
    """``x * sigmoid(x)`` (swish).

    Gradient: gx = gy * s * (1 + x * (1 - s)) with s = sigmoid(x).
    """
    return apply(Silu, x)


@register("mish")
class Mish:
    @staticmethod
    def forward(ctx, x):
        xp = ctx.xp
        t = xp.tanh(_softplus(xp, x))
        ctx.save(x, t)
        return x * t

    @staticmethod
    def backward(ctx, gy):
        x, t = ctx.saved
        s = 0.5 * (1 + ctx.xp.tanh(0.5 * x))
        return gy * (t + x * s * (1 - t * t))

    @staticmethod
    def differentiable_backward(ctx, gy):
        # Note [Double backward]: t = tanh(softplus(x)) is an intermediate: recompute it from x.
        from ferro.ops.elementwise import sigmoid, tanh

        x = ctx.saved[0]
        t = tanh(softplus(x))
        return gy * (t + x * sigmoid(x) * (1 - t * t))


def mish(x):
    """``x * tanh(softplus(x))``.

    Gradient: gx = gy * (t + x * sigmoid(x) * (1 - t**2)) with t = tanh(softplus(x)).
    """
    return apply(Mish, x)


@register("softplus")
class Softplus:
    @staticmethod
    def forward(ctx, x, *, beta, threshold):
        xp = ctx.xp
        bx = x * beta
        ctx.save(x)  # the input, not bx: Note [Double backward]
        ctx.threshold, ctx.beta = threshold, beta
        return xp.where(bx > threshold, x, _softplus(xp, bx) / beta)

    @staticmethod
    def backward(ctx, gy):
        (x,) = ctx.saved
        bx = x * ctx.beta
        xp = ctx.xp
        s = 0.5 * (1 + xp.tanh(0.5 * bx))
        return gy * xp.where(bx > ctx.threshold, 1, s)


def softplus(x, beta: float = 1.0, threshold: float = 20.0):
    """``log(1 + exp(beta * x)) / beta``, linear where ``beta * x > threshold``.

    Gradient: gx = gy * sigmoid(beta * x) (gy in the linear region).
    """
    beta = real_arg(beta, "beta", "softplus")
    return apply(Softplus, x, beta=beta, threshold=real_arg(threshold, "threshold", "softplus"))


@register("hardswish")
class Hardswish:
    @staticmethod
    def forward(ctx, x):
        ctx.save(x)
        return x * ctx.xp.clip(x + 3, 0, 6) / 6

    @staticmethod
    def backward(ctx, gy):
        (x,) = ctx.saved
        xp = ctx.xp
        # PyTorch's choices at the kinks: the outer pieces' slopes, 0 at x = -3 and 1 at x = 3.
        return gy * xp.where(x <= -3, 0, xp.where(x < 3, (2 * x + 3) / 6, 1))


def hardswish(x):
    """``x * relu6(x + 3) / 6``, the piecewise-quadratic swish of MobileNetV3.

    Gradient: gx = 0 for x <= -3, gy * (2x + 3) / 6 for -3 < x < 3, gy for x >= 3.
    """
    return apply(Hardswish, x)


@register("hardsigmoid")
class Hardsigmoid:
    @staticmethod
    def forward(ctx, x):
        ctx.save(x)
        return ctx.xp.clip(x + 3, 0, 6) / 6

    @staticmethod
    def backward(ctx, gy):
        (x,) = ctx.saved
        return gy * ((x > -3) & (x < 3)) / 6


def hardsigmoid(x):
    """``relu6(x + 3) / 6``, a piecewise-linear sigmoid.

    Gradient: gx = gy / 6 for -3 < x < 3, else 0.
    """
    return apply(Hardsigmoid, x)


@register("logsigmoid")
class Logsigmoid:
    @staticmethod
    def forward(ctx, x):
        xp = ctx.xp
        ctx.save(x)
        # -softplus(-x) = min(x, 0) - log1p(exp(-|x|)): no overflow for large |x|.
        return xp.minimum(x, 0) - xp.log1p(xp.exp(-xp.abs(x)))

    @staticmethod
    def backward(ctx, gy):
        (x,) = ctx.saved
        return gy * sigmoid_array(ctx.xp, -x)


def logsigmoid(x):
    """``log(sigmoid(x))``, computed without overflow (``logsigmoid(-1000)`` is ``-1000``).

    Gradient: gx = gy * sigmoid(-x).
    """
    return apply(Logsigmoid, x)


@register("softsign")
class Softsign:
    @staticmethod
    def forward(ctx, x):
        ctx.save(x)  # the input, not 1 + |x|: Note [Double backward]
        return x / (1 + ctx.xp.abs(x))

    @staticmethod
    def backward(ctx, gy):
        (x,) = ctx.saved
        d = 1 + ctx.xp.abs(x)
        return gy / (d * d)


def softsign(x):
    """``x / (1 + |x|)``.

    Gradient: gx = gy / (1 + |x|)**2.
    """
    return apply(Softsign, x)


@register("tanhshrink")
class Tanhshrink:
    @staticmethod
    def forward(ctx, x):
        ctx.save(x)  # the input, not tanh(x): Note [Double backward]
        return x - ctx.xp.tanh(x)

    @staticmethod
    def backward(ctx, gy):
        (x,) = ctx.saved
        t = ctx.xp.tanh(x)
        return gy * t * t


def tanhshrink(x):
    """``x - tanh(x)``.

    Gradient: gx = gy * tanh(x)**2.
    """
    return apply(Tanhshrink, x)


@register("glu")
class Glu:
    @staticmethod
    def forward(ctx, x, *, axis):
        xp = ctx.xp
        a, b = xp.split(x, 2, axis=axis)
        ctx.save(x)  # the input, not its halves: Note [Double backward]
        ctx.axis = axis
        return a * sigmoid_array(xp, b)

    @staticmethod
    def backward(ctx, gy):
        (x,) = ctx.saved
        a, b = ctx.xp.split(x, 2, axis=ctx.axis)
        s = sigmoid_array(ctx.xp, b)
        ga = gy * s
        return ctx.xp.concatenate([ga, ga * a * (1 - s)], axis=ctx.axis)


@aliases
def glu(x, dim: int = -1):
    """Gated linear unit: ``a * sigmoid(b)`` where ``a`` and ``b`` are the two halves of ``x``
    along ``dim`` (whose size must be even).

    Gradient: ga = gy * sigmoid(b), gb = gy * a * sigmoid(b) * (1 - sigmoid(b)), concatenated.
    """
    axis = _axis1(dim, x.ndim, "glu")
    if x.shape[axis] % 2:
        raise ShapeError(
            f"glu: dim {dim} must have an even size to halve, got size {x.shape[axis]} "
            f"(shape {tuple(x.shape)})"
        )
    return apply(Glu, x, axis=axis)


@register("hardtanh")
class Hardtanh:
    @staticmethod
    def forward(ctx, x, *, lo, hi):
        ctx.save(x)
        ctx.lo, ctx.hi = lo, hi
        return ctx.xp.clip(x, lo, hi)

    @staticmethod
    def backward(ctx, gy):
        (x,) = ctx.saved
        return gy * ((x > ctx.lo) & (x < ctx.hi))


def hardtanh(x, min_val: float = -1.0, max_val: float = 1.0):
    """``x`` clipped to ``[min_val, max_val]``.

    Gradient: gx = gy strictly inside the interval, else 0.
    """
    lo, hi = real_arg(min_val, "min_val", "hardtanh"), real_arg(max_val, "max_val", "hardtanh")
    if lo > hi:
        raise ArgumentError(f"hardtanh: min_val must not exceed max_val, got {lo} > {hi}")
    return apply(Hardtanh, x, lo=lo, hi=hi)


@register("softmax")
class Softmax:
    @staticmethod
    def forward(ctx, x, *, axis):
        y = x - x.max(axis=axis, keepdims=True)
        ctx.xp.exp(y, out=y)
        y /= y.sum(axis=axis, keepdims=True)
        ctx.save(y)
        ctx.axis = axis
        return y

    @staticmethod
    def backward(ctx, gy):
        (y,) = ctx.saved
        g = gy - (gy * y).sum(axis=ctx.axis, keepdims=True)
        g *= y
        return g


@aliases
def softmax(x, dim: int = -1):
    """``exp(x) / sum(exp(x))`` along ``dim`` (numerically stable).

    Gradient: gx = y * (gy - sum(gy * y, axis)).
    """
    return apply(Softmax, x, axis=_axis1(dim, x.ndim, "softmax"))


@register("log_softmax")
class LogSoftmax:
    @staticmethod
    def forward(ctx, x, *, axis):
        xp = ctx.xp
        y = x - x.max(axis=axis, keepdims=True)
        y -= xp.log(xp.exp(y).sum(axis=axis, keepdims=True))
        ctx.save(y)
        ctx.axis = axis
        return y

    @staticmethod
    def backward(ctx, gy):
        (y,) = ctx.saved
        xp = ctx.xp
        e = xp.exp(y)
        e *= gy.sum(axis=ctx.axis, keepdims=True)
        return xp.subtract(gy, e, out=e)


@aliases
def log_softmax(x, dim: int = -1):
    """``x - logsumexp(x)`` along ``dim`` (numerically stable).

    Gradient: gx = gy - exp(y) * sum(gy, axis).
    """
    return apply(LogSoftmax, x, axis=_axis1(dim, x.ndim, "log_softmax"))


@register("prelu")
class Prelu:
    @staticmethod
    def forward(ctx, x, w):
        wb = w.reshape((1, -1) + (1,) * (x.ndim - 2)) if x.ndim >= 2 else w
        ctx.save(x, w)  # the input, not its reshaped view: Note [Double backward]
        ctx.w_shape = w.shape
        return ctx.xp.where(x > 0, x, wb * x)

    @staticmethod
    def backward(ctx, gy):
        x, w = ctx.saved
        wb = w.reshape((1, -1) + (1,) * (x.ndim - 2)) if x.ndim >= 2 else w
        xp = ctx.xp
        need_x, need_w = ctx.needs_input_grad
        gx = xp.where(x > 0, gy, gy * wb) if need_x else None
        gw = None
        if need_w:
            contrib = xp.where(x > 0, 0, gy * x)
            if x.ndim >= 2 and ctx.w_shape[0] != 1:
                axes = (0,) + tuple(range(2, x.ndim))
                gw = contrib.sum(axis=axes).reshape(ctx.w_shape)
            else:
                gw = contrib.sum().reshape(ctx.w_shape)
        return gx, gw


def prelu(x, weight):
    """``x`` for x > 0, else ``weight * x``; ``weight`` has 1 or C (= x.shape[1]) elements.

    Gradient: gx = gy where x > 0, else gy * weight; gweight = sum of gy * x where x <= 0.
    """
    if weight.ndim != 1:
        raise ShapeError(f"prelu: weight must be 1-D, got shape {weight.shape}")
    channels = x.shape[1] if x.ndim >= 2 else 1
    if weight.shape[0] not in (1, channels):
        raise ShapeError(
            f"prelu: weight has {weight.shape[0]} elements; x of shape {x.shape} needs 1 or "
            f"{channels}"
        )
    return apply(Prelu, x, weight)


# The family's public functions (ferro.ops exports their union): a new op's name goes here.
def relu6(x):
    """``min(max(x, 0), 6)``: ``hardtanh(x, 0, 6)``.

    Gradient: gx = gy strictly inside (0, 6), else 0.
    """
    return apply(Hardtanh, x, lo=0.0, hi=6.0)


def celu(x, alpha: float = 1.0):
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``: ``alpha * elu(x / alpha)``.

    Gradient: through the scaling and elu's.
    """
    alpha = real_arg(alpha, "alpha", "celu")
    if alpha == 0:
        raise ArgumentError("celu: alpha must not be 0")
    return apply(Elu, x / alpha, alpha=1.0, scale=1.0) * alpha


def threshold(x, threshold: float, value: float):
    """``x`` where ``x > threshold``, else ``value``.

    Gradient: gx = gy where x > threshold, else 0.
    """
    from ferro.ops.elementwise import where

    t = real_arg(threshold, "threshold", "threshold")
    return where(x > t, x, real_arg(value, "value", "threshold"))


def hardshrink(x, lambd: float = 0.5):
    """``x`` where ``|x| > lambd``, else 0.

    Gradient: gx = gy where |x| > lambd, else 0.
    """
    from ferro.ops.elementwise import abs as abs_
    from ferro.ops.elementwise import where

    return where(abs_(x) > real_arg(lambd, "lambd", "hardshrink"), x, 0.0)


def softshrink(x, lambd: float = 0.5):
    """``x - lambd`` above ``lambd``, ``x + lambd`` below ``-lambd``, else 0:
    ``x - clamp(x, -lambd, lambd)``.

    Gradient: gx = gy where |x| > lambd, else 0.
    """
    from ferro.ops.elementwise import clamp

    lambd = real_arg(lambd, "lambd", "softshrink")
    if lambd < 0:
        raise ArgumentError(f"softshrink: lambd must be >= 0, got {lambd}")
    return x - clamp(x, -lambd, lambd)


def softmin(x, dim: int = -1):
    """``softmax(-x, dim)``.

    Gradient: softmax's, negated.
    """
    return softmax(-x, dim)


def rrelu(x, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False):
    """Randomized leaky relu: in training, negative elements are scaled by a slope drawn
    uniformly from ``[lower, upper]`` per element (from ferro's generator); otherwise by
    ``(lower + upper) / 2``.

    Gradient: gx = gy where x >= 0, else gy * slope (the same slopes).
    """
    lower, upper = real_arg(lower, "lower", "rrelu"), real_arg(upper, "upper", "rrelu")
    if not 0 <= lower <= upper:
        raise ArgumentError(f"rrelu: expected 0 <= lower <= upper, got {lower}, {upper}")
    if not training:
        return leaky_relu(x, (lower + upper) / 2)
    from ferro._C.tensor import wrap
    from ferro.backend import move
    from ferro.ops.elementwise import mul
    from ferro.random import numpy_generator

    data = x._data
    a = numpy_generator().uniform(lower, upper, size=data.shape).astype(data.dtype)
    a[data >= 0] = 1
    return mul(x, wrap(a if type(data) is type(a) else move(a, x.device)))


__all__ = [
    "celu",
    "elu",
    "gelu",
    "glu",
    "hardshrink",
    "hardsigmoid",
    "hardswish",
    "hardtanh",
    "leaky_relu",
    "log_softmax",
    "logsigmoid",
    "mish",
    "prelu",
    "relu",
    "relu6",
    "rrelu",
    "selu",
    "silu",
    "softmax",
    "softmin",
    "softplus",
    "softshrink",
    "softsign",
    "tanhshrink",
    "threshold",
]
