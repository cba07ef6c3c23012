"""Elementwise ops: arithmetic with NumPy broadcasting, and the transcendental functions.

Naming follows Chainer: ``x, y`` arrays, ``gy`` the output gradient, ``gx`` an input gradient.
"""

from __future__ import annotations

import math
import numbers
import operator

from ferro._C.cpu_kernels import binary as _binary
from ferro._C.engine import compiled
from ferro._C.tensor import TensorBase
from ferro.dtypes import as_dtype, default_float
from ferro.errors import ArgumentError, ArgumentTypeError, DtypeError
from ferro.ops.registry import apply, register, unary_op


def real_arg(value, name: str, op: str) -> float:
    """``value`` as a float, for an op's real-valued parameter (a slope, a bound, ``p``): a
    Python or NumPy real number. Anything else (a str, None, a bool) is an ArgumentTypeError
    naming the op and the parameter, not a ValueError from ``float()`` later."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    raise ArgumentTypeError(
        f"{op}: {name} must be a real number, got {type(value).__name__} {value!r}"
    )


def sigmoid_array(xp, x):
    """``1 / (1 + exp(-x))`` as ``0.5 * (1 + tanh(x / 2))``: no overflow for large |x|, and
    computed in one fresh buffer (x is only read)."""
    y = xp.multiply(x, 0.5, out=xp.empty_like(x))  # an array even for 0-d x
    xp.tanh(y, out=y)
    y += 1
    y *= 0.5
    return y


def _split_ties(xp, gy, a_wins, tie):
    # PyTorch's convention for maximum/minimum: ties share the gradient evenly.
    ga = xp.where(tie, gy * 0.5, xp.where(a_wins, gy, 0))
    gb = xp.where(tie, gy * 0.5, xp.where(a_wins, 0, gy))
    return ga, gb


_ARITH = (operator.add, operator.sub, operator.mul, operator.truediv)


def _arith(op, a, b):
    # a + b, a - b, a * b or a / b (op 0-3) of two arrays or an array and a number: on both
    # cores where Note [Two-core elementwise ops] applies, else the operator
    r = _binary(op, a, b, None, 1.0)
    return _ARITH[op](a, b) if r is NotImplemented else r


@register("add", broadcasts=True, direct="add")
class Add:
    @staticmethod
    def forward(ctx, a, b):
        return _arith(0, a, b)

    @staticmethod
    def backward(ctx, gy):
        return gy, gy


def _floated(a, b, true_div=False):
    """PyTorch's promotion for an integer (or bool) tensor with a Python float, and for true
    division of integers: the result has the default float dtype (NumPy would give float64).
    Returns ``(a, b)`` with such integer tensors cast to the default dtype."""
    ta, tb = isinstance(a, TensorBase), isinstance(b, TensorBase)
    if ta and a._meta.dtype.kind in "biu":
        if type(b) is float or (true_div and _not_float(b)):
            a = cast(a, default_float())
    if tb and b._meta.dtype.kind in "biu":
        if type(a) is float or (true_div and _not_float(a)):
            b = cast(b, default_float())
    return a, b


def _not_float(v) -> bool:
    if isinstance(v, TensorBase):
        return v._meta.dtype.kind in "biu"
    return isinstance(v, (int, float)) and type(v) is not float


def add(a, b, *, alpha=1):
    """``a + alpha * b`` with broadcasting (``alpha``: PyTorch's keyword, 1 by default).

    Gradient: ga = gy, gb = alpha * gy (summed back over broadcast dimensions).
    """
    if alpha != 1:
        b = mul(b, alpha)
    if type(a) is float or type(b) is float:
        a, b = _floated(a, b)
    return apply(Add, a, b)


@register("sub", broadcasts=True, direct="sub")
class Sub:
    @staticmethod
    def forward(ctx, a, b):
        return _arith(1, a, b)

    @staticmethod
    def backward(ctx, gy):
        return gy, (-gy if ctx.needs_input_grad[1] else None)


def sub(a, b, *, alpha=1):
    """``a - alpha * b`` with broadcasting (``alpha``: PyTorch's keyword, 1 by default).

    Gradient: ga = gy, gb = -alpha * gy.
    """
    if alpha != 1:
        b = mul(b, alpha)
    if type(a) is float or type(b) is float:
        a, b = _floated(a, b)
    return apply(Sub, a, b)


@register("mul", broadcasts=True, direct="mul")
class Mul:
    @staticmethod
    def forward(ctx, a, b):
        need_a, need_b = ctx.needs_input_grad
        # Save only what backward reads: gb needs a, ga needs b.
        ctx.save(a if need_b else None, b if need_a else None)
        return _arith(2, a, b)

    @staticmethod
    def backward(ctx, gy):
        a, b = ctx.saved
        need_a, need_b = ctx.needs_input_grad
        return (_arith(2, gy, b) if need_a else None), (_arith(2, gy, a) if need_b else None)


def mul(a, b):
    """``a * b`` with broadcasting.

    Gradient: ga = gy * b, gb = gy * a.
    """
    if type(a) is float or type(b) is float:
        a, b = _floated(a, b)
    return apply(Mul, a, b)


@register("div", broadcasts=True)
class Div:
    @staticmethod
    def forward(ctx, a, b):
        y = _arith(3, a, b)
        need_b = ctx.needs_input_grad[1]
        ctx.save(b, y if need_b else None)
        return y

    @staticmethod
    def backward(ctx, gy):
        b, y = ctx.saved
        need_a, need_b = ctx.needs_input_grad
        ga = _arith(3, gy, b) if need_a else None
        gb = -gy * y / b if need_b else None
        return ga, gb


def div(a, b):
    """True division ``a / b`` with broadcasting.

    Gradient: ga = gy / b, gb = -gy * a / b**2.
    """
    a, b = _floated(a, b, true_div=True)
    return apply(Div, a, b)


@register("clone")
class Clone:
    @staticmethod
    def forward(ctx, x):
        return x.copy()

    @staticmethod
    def backward(ctx, gy):
        return gy


def clone(x):
    """A copy of ``x`` with its own memory (C-contiguous); gradients flow back to ``x``.

    Gradient: gx = gy.

    Example:
        >>> x = ferro.ones(2, requires_grad=True)
        >>> ferro.clone(x)
        tensor([1., 1.], grad_fn=<CloneBackward>)
    """
    return apply(Clone, x)


@register("neg")
class Neg:
    @staticmethod
    def forward(ctx, x):
        return -x

    @staticmethod
    def backward(ctx, gy):
        return -gy


def neg(x):
    """``-x``.

    Gradient: gx = -gy.
    """
    return apply(Neg, x)


def _log_scalar(a):
    # A Python float keeps the gradient's dtype (NumPy 2 treats Python scalars as weak).
    return math.log(a) if a > 0 else float("nan")


def _pow_fast(xp, a, b):
    """``a ** b`` by multiplications and square roots for the exponents Transformer code uses
    (``x ** 3`` in tanh-GELU, ``x ** 2``, ``x ** 0.5``, ``x ** -1``, ...), or None for any
    other exponent: NumPy's ``power`` is a slow libm call per element (7.8 ms against 0.03 ms
    for ``x * x * x`` on a (64, 11, 192) float32 array). A fresh array; float arrays only."""
    if b == 2:
        return xp.multiply(a, a)
    if b == 3:
        y = xp.multiply(a, a)
        y *= a
        return y
    if b == 4:
        y = xp.multiply(a, a)
        y *= y
        return y
    if b == 1:
        return a.copy()
    if b == 0:
        return xp.ones_like(a)
    if b == 0.5:
        return xp.sqrt(a)
    if b == 1.5:
        y = xp.sqrt(a)
        y *= a
        return y
    if b == -1:
        return xp.divide(1, a)
    if b == -2:
        y = xp.multiply(a, a)
        return xp.divide(1, y, out=y)
    if b == -0.5:
        y = xp.sqrt(a)
        return xp.divide(1, y, out=y)
    return None


def _fast_pow_args(a, b) -> bool:
    # A float array (not 0-d: NumPy's ufuncs return scalars there) to a Python real power.
    return (
        type(b) in (int, float)
        and getattr(a, "ndim", 0) > 0
        and getattr(getattr(a, "dtype", None), "kind", None) == "f"
    )


@register("pow", broadcasts=True)
class Pow:
    @staticmethod
    def forward(ctx, a, b):
        y = _pow_fast(ctx.xp, a, b) if _fast_pow_args(a, b) else None
        if y is None:
            y = a**b
        # y serves only the exponent's gradient: a Python exponent has none, and then only a is
        # kept (as PyTorch does; the output stays unreferenced by the graph).
        ctx.save(a, b, None if isinstance(b, (int, float)) else y)
        return y

    @staticmethod
    def backward(ctx, gy):
        a, b, y = ctx.saved
        xp = ctx.xp
        need_a, need_b = ctx.needs_input_grad
        ga = gb = None
        if need_a:
            if isinstance(b, (int, float)):
                if b == 0:
                    ga = gy * 0
                else:
                    d = None
                    if _fast_pow_args(a, b):
                        d = a if b == 2 else _pow_fast(xp, a, b - 1)
                    ga = gy * (b * (a ** (b - 1) if d is None else d))
            else:
                ga = gy * b * a ** (b - 1)
        if need_b:
            if isinstance(a, (int, float)):
                gb = gy * y * _log_scalar(a)
            else:
                # log(a) only where it is real; the where keeps log away from a <= 0 (no warning).
                gb = gy * y * xp.where(a > 0, xp.log(xp.where(a > 0, a, 1)), math.nan)
                # 0 ** b with b > 0 has derivative 0 in b (the limit), as PyTorch defines it.
                gb = xp.where((a == 0) & (b > 0), 0, gb).astype(gy.dtype, copy=False)
        return ga, gb


def pow(a, b):  # noqa: A001 - the public name mirrors torch.pow
    """``a ** b`` (either may be a scalar). Small integer and half-integer scalar exponents
    (-2, -1, -0.5, 0, 0.5, 1, 1.5, 2, 3, 4) are computed by multiplications and square roots,
    forward and backward.

    Gradient: ga = gy * b * a**(b-1), gb = gy * a**b * log(a).
    """
    return apply(Pow, a, b)


@register("exp")
class Exp:
    @staticmethod
    def forward(ctx, x):
        y = ctx.xp.exp(x)
        ctx.save(y)
        return y

    @staticmethod
    def backward(ctx, gy):
        (y,) = ctx.saved
        return gy * y


def exp(x):
    """``e ** x``.

    Gradient: gx = gy * y.
    """
    return apply(Exp, x)


@register("log")
class Log:
    @staticmethod
    def forward(ctx, x):
        ctx.save(x)
        return ctx.xp.log(x)

    @staticmethod
    def backward(ctx, gy):
        (x,) = ctx.saved
        return gy / x


def log(x):
    """Natural logarithm.

    Gradient: gx = gy / x.
    """
    return apply(Log, x)


@register("logaddexp", broadcasts=True)
class Logaddexp:
    @staticmethod
    def forward(ctx, a, b):
        ctx.save(a, b)
        return ctx.xp.logaddexp(a, b)

    @staticmethod
    def backward(ctx, gy):
        a, b = ctx.saved
        xp = ctx.xp
        need_a, need_b = ctx.needs_input_grad
        # exp(a - y) = sigmoid(a - b), from e = exp(-|a - b|) <= 1: nothing overflows, and no
        # rounding error of a large y enters (a - y loses an ulp of y: 1e-13 at y = 1000).
        e = xp.exp(-xp.abs(a - b))
        a_larger = a >= b
        ga = gy * xp.where(a_larger, 1, e) / (1 + e) if need_a else None
        gb = gy * xp.where(a_larger, e, 1) / (1 + e) if need_b else None
        return ga, gb


def logaddexp(a, b):
    """``log(exp(a) + exp(b))`` with broadcasting, without overflow (``logaddexp(1000, 1000)``
    is ``1000 + log 2``).

    Gradient: ga = gy * exp(a - y), gb = gy * exp(b - y) (the softmax weights of a and b).
    """
    return apply(Logaddexp, a, b)


@register("tanh", direct="tanh")
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
    """Hyperbolic tangent.

    Gradient: gx = gy * (1 - y**2).
    """
    return apply(Tanh, x)


tanh = compiled(Tanh, tanh)  # the same function, compiled (no Python frame per call)


@register("cast", same_dtype=False)
class Cast:
    @staticmethod
    def forward(ctx, x, *, dtype):
        ctx.in_dtype = x.dtype
        return x.astype(dtype)

    @staticmethod
    def backward(ctx, gy):
        return gy.astype(ctx.in_dtype)


def cast(x, dtype):
    """Convert ``x`` to ``dtype`` (differentiable between float dtypes).

    Gradient: gx = gy converted back to x's dtype.
    """
    dt = as_dtype(dtype, where="cast")
    if x.dtype == dt:
        return x
    return apply(Cast, x, dtype=dt)


@register("abs")
class Abs:
    @staticmethod
    def forward(ctx, x):
        ctx.save(x)
        return ctx.xp.abs(x)

    @staticmethod
    def backward(ctx, gy):
        (x,) = ctx.saved
        return gy * ctx.xp.sign(x)


def abs(x):  # noqa: A001 - mirrors torch.abs
    """Absolute value.

    Gradient: gx = gy * sign(x) (0 at x = 0).
    """
    return apply(Abs, x)


@register("clamp", same_dtype=False, broadcasts=True)
class Clamp:
    @staticmethod
    def forward(ctx, x, lo, hi):
        xp = ctx.xp
        ctx.save(x, lo, hi)
        y = x
        if lo is not None:
            y = xp.maximum(y, lo)
        if hi is not None:
            y = xp.minimum(y, hi)
        return y if y is not x else x.copy()

    @staticmethod
    def backward(ctx, gy):
        x, lo, hi = ctx.saved
        xp = ctx.xp
        need_x, need_lo, need_hi = ctx.needs_input_grad
        inside = xp.ones(gy.shape, dtype=bool)  # the broadcast shape: bounds may widen x
        if lo is not None:
            inside &= x >= lo
        if hi is not None:
            inside &= x <= hi
        gx = xp.where(inside, gy, 0) if need_x else None
        glo = xp.where(x < lo, gy, 0) if need_lo else None
        ghi = xp.where(x > hi, gy, 0) if need_hi else None
        if need_lo and hi is not None:
            glo = xp.where(x > hi, 0, glo)
        return gx, glo, ghi


def clamp(x, min=None, max=None):  # noqa: A002 - PyTorch's argument names
    """Limit ``x`` to ``[min, max]``; each bound may be None, a scalar or a tensor.

    Gradient: gx = gy where min <= x <= max, else 0; a tensor bound receives gy where it is the
    value taken.
    """
    if min is None and max is None:
        raise ArgumentError("clamp: at least one of min and max must be given, got neither")
    for bound in (min, max):
        if hasattr(bound, "dtype") and bound.dtype != x.dtype:
            raise DtypeError(
                f"clamp: bound dtype {bound.dtype} differs from tensor dtype {x.dtype}"
            )
    return apply(Clamp, x, min, max)


clip = clamp


@register("sigmoid")
class Sigmoid:
    @staticmethod
    def forward(ctx, x):
        y = sigmoid_array(ctx.xp, x)
        ctx.save(y)
        return y

    @staticmethod
    def backward(ctx, gy):
        (y,) = ctx.saved
        return gy * y * (1 - y)


def sigmoid(x):
    """Logistic sigmoid ``1 / (1 + exp(-x))``.

    Gradient: gx = gy * y * (1 - y).
    """
    return apply(Sigmoid, x)


@register("maximum", broadcasts=True)
class Maximum:
    @staticmethod
    def forward(ctx, a, b):
        ctx.save(a, b)
        return ctx.xp.maximum(a, b)

    @staticmethod
    def backward(ctx, gy):
        a, b = ctx.saved
        return _split_ties(ctx.xp, gy, a > b, a == b)


def maximum(a, b):
    """Elementwise maximum with broadcasting.

    Gradient: to the larger input; ties split gy evenly (PyTorch's convention).
    """
    return apply(Maximum, a, b)


@register("minimum", broadcasts=True)
class Minimum:
    @staticmethod
    def forward(ctx, a, b):
        ctx.save(a, b)
        return ctx.xp.minimum(a, b)

    @staticmethod
    def backward(ctx, gy):
        a, b = ctx.saved
        return _split_ties(ctx.xp, gy, a < b, a == b)


def minimum(a, b):
    """Elementwise minimum with broadcasting.

    Gradient: to the smaller input; ties split gy evenly (PyTorch's convention).
    """
    return apply(Minimum, a, b)


@register("where", broadcasts=True, same_dtype=False)
class Where:
    @staticmethod
    def forward(ctx, cond, a, b):
        ctx.save(cond)
        return ctx.xp.where(cond, a, b)

    @staticmethod
    def backward(ctx, gy):
        (cond,) = ctx.saved
        xp = ctx.xp
        _, need_a, need_b = ctx.needs_input_grad
        ga = xp.where(cond, gy, 0) if need_a else None
        gb = xp.where(cond, 0, gy) if need_b else None
        return None, ga, gb


def where(cond, a=None, b=None):
    """``a`` where ``cond`` is true, else ``b`` (all three broadcast). ``where(cond)`` alone is
    ``nonzero(cond, as_tuple=True)``, as in PyTorch.

    Gradient: ga = gy where cond, gb = gy where not cond; cond gets none.
    """
    if a is None and b is None:
        from ferro.ops.shape import nonzero

        return nonzero(cond, as_tuple=True)
    if a is None or b is None:
        raise ArgumentTypeError("where: give both a and b, or neither (where(cond) = nonzero)")
    if getattr(cond, "dtype", None) is None or cond.dtype != bool:
        raise DtypeError(
            f"where: cond must be a bool tensor, got {getattr(cond, 'dtype', type(cond))}"
        )
    da, db = getattr(a, "dtype", None), getattr(b, "dtype", None)
    if da is not None and db is not None and da != db:
        raise DtypeError(f"where: a and b have different dtypes: {da} and {db}")
    return apply(Where, cond, a, b)


def _comparison(name, fn):
    @register(name, differentiable=False, broadcasts=True, same_dtype=False)
    class Compare:
        forward = staticmethod(lambda ctx, a, b: fn(a, b))

    return Compare


Eq = _comparison("eq", lambda a, b: a == b)


def eq(a, b):
    """``a == b`` elementwise (bool tensor; not differentiable)."""
    return apply(Eq, a, b)


Ne = _comparison("ne", lambda a, b: a != b)


def ne(a, b):
    """``a != b`` elementwise (bool tensor; not differentiable)."""
    return apply(Ne, a, b)


Lt = _comparison("lt", lambda a, b: a < b)


def lt(a, b):
    """``a < b`` elementwise (bool tensor; not differentiable)."""
    return apply(Lt, a, b)


Le = _comparison("le", lambda a, b: a <= b)


def le(a, b):
    """``a <= b`` elementwise (bool tensor; not differentiable)."""
    return apply(Le, a, b)


Gt = _comparison("gt", lambda a, b: a > b)


def gt(a, b):
    """``a > b`` elementwise (bool tensor; not differentiable)."""
    return apply(Gt, a, b)


Ge = _comparison("ge", lambda a, b: a >= b)


def ge(a, b):
    """``a >= b`` elementwise (bool tensor; not differentiable)."""
    return apply(Ge, a, b)


@register("sign", differentiable=False)
class Sign:
    @staticmethod
    def forward(ctx, x):
        return ctx.xp.sign(x)


def sign(x):
    """-1, 0 or 1 by the sign of ``x``, in x's dtype (not differentiable: its gradient is 0)."""
    return apply(Sign, x)


# name: (forward(xp, x), the saved array the gradient reads ("x" or "y"), the gradient
# gx(xp, gy, that array), the docstring's first line, its gradient line): see unary_op.
_UNARY = {
    "expm1": (
        lambda xp, x: xp.expm1(x),
        "y",
        lambda xp, gy, y: gy * (y + 1),
        "``exp(x) - 1``, accurate near 0.",
        "gy * (y + 1)",
    ),
    "log1p": (
        lambda xp, x: xp.log1p(x),
        "x",
        lambda xp, gy, x: gy / (x + 1),
        "``log(1 + x)``, accurate near 0.",
        "gy / (1 + x)",
    ),
    "sqrt": (
        lambda xp, x: xp.sqrt(x),
        "y",
        lambda xp, gy, y: gy / (2 * y),
        "Square root.",
        "gy / (2 * y)",
    ),
    "rsqrt": (
        lambda xp, x: 1 / xp.sqrt(x),
        "y",
        lambda xp, gy, y: gy * (-0.5 * y * y * y),
        "``1 / sqrt(x)``.",
        "-gy * y**3 / 2",
    ),
    "sin": (lambda xp, x: xp.sin(x), "x", lambda xp, gy, x: gy * xp.cos(x), "Sine.", "gy * cos(x)"),
    "cos": (
        lambda xp, x: xp.cos(x),
        "x",
        lambda xp, gy, x: -gy * xp.sin(x),
        "Cosine.",
        "-gy * sin(x)",
    ),
    "square": (
        lambda xp, x: xp.square(x),
        "x",
        lambda xp, gy, x: gy * (2 * x),
        "``x * x``.",
        "2 * gy * x",
    ),
    "reciprocal": (
        lambda xp, x: xp.reciprocal(x),
        "y",
        lambda xp, gy, y: -gy * (y * y),
        "``1 / x``.",
        "-gy * y**2",
    ),
    "log2": (
        lambda xp, x: xp.log2(x),
        "x",
        lambda xp, gy, x: gy / (x * math.log(2)),
        "Base-2 logarithm.",
        "gy / (x * log(2))",
    ),
    "log10": (
        lambda xp, x: xp.log10(x),
        "x",
        lambda xp, gy, x: gy / (x * math.log(10)),
        "Base-10 logarithm.",
        "gy / (x * log(10))",
    ),
    "exp2": (
        lambda xp, x: xp.exp2(x),
        "y",
        lambda xp, gy, y: gy * (y * math.log(2)),
        "``2 ** x``.",
        "gy * y * log(2)",
    ),
}
for _name, _row in _UNARY.items():
    globals()[_name] = unary_op(_name, *_row, __name__)


def divide(input, other, *, rounding_mode=None):  # noqa: A002 - PyTorch's names
    """``input / other``: true division (``rounding_mode=None``), or its quotient rounded
    towards 0 (``"trunc"``) or down (``"floor"``), integer when both operands are.

    Gradient: ga = gy / b, gb = -gy * a / b**2 (true division); 0 when rounded.
    """
    if rounding_mode is None:
        return div(input, other)
    if rounding_mode not in ("trunc", "floor"):
        raise ArgumentError(
            f"divide: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}"
        )
    q = div(input, other)
    q = q.trunc() if rounding_mode == "trunc" else q.floor()
    integral = all(_integral(v) for v in (input, other))
    return cast(q, "int64") if integral else q


def _integral(v) -> bool:
    if isinstance(v, TensorBase):
        return v.dtype.kind in "iu"
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _rounding(name, fn):
    # Piecewise constant: the gradient is 0 everywhere (PyTorch's choice, also at the jumps), so
    # backward returns zeros rather than the op being non-differentiable: a graph through
    # floor(x) still reaches x. An integer tensor is already integral and keeps its dtype.
    class Rounding:
        @staticmethod
        def forward(ctx, x, **kwargs):
            if x.dtype.kind in "biu":
                return x.copy()
            return fn(ctx.xp, x, **kwargs)

        @staticmethod
        def backward(ctx, gy):
            return ctx.xp.zeros_like(gy)

    Rounding.__name__ = name.capitalize()  # the node's name: FloorBackward, as PyTorch's
    return register(name)(Rounding)


Floor = _rounding("floor", lambda xp, x: xp.floor(x))


def floor(x):
    """The largest integer not above ``x``, in x's dtype.

    Gradient: gx = 0 (piecewise constant, as in PyTorch).
    """
    return apply(Floor, x)


Ceil = _rounding("ceil", lambda xp, x: xp.ceil(x))


def ceil(x):
    """The smallest integer not below ``x``, in x's dtype.

    Gradient: gx = 0 (piecewise constant, as in PyTorch).
    """
    return apply(Ceil, x)


Round = _rounding("round", lambda xp, x, decimals: xp.round(x, decimals))


def round(x, *, decimals=0):  # noqa: A001 - mirrors torch.round
    """``x`` rounded to ``decimals`` decimal places, halves to even (``round(2.5)`` is 2).

    Gradient: gx = 0 (piecewise constant, as in PyTorch).
    """
    if not isinstance(decimals, numbers.Integral) or isinstance(decimals, bool):
        raise ArgumentTypeError(
            f"round: decimals must be an int, got {type(decimals).__name__} {decimals!r}"
        )
    return apply(Round, x, decimals=int(decimals))


Trunc = _rounding("trunc", lambda xp, x: xp.trunc(x))


def trunc(x):
    """``x`` rounded toward zero, in x's dtype.

    Gradient: gx = 0 (piecewise constant, as in PyTorch).
    """
    return apply(Trunc, x)


@register("frac")
class Frac:
    @staticmethod
    def forward(ctx, x):
        return x - ctx.xp.trunc(x)

    @staticmethod
    def backward(ctx, gy):
        return gy


def frac(x):
    """The fractional part ``x - trunc(x)``, with the sign of ``x``.

    Gradient: gx = gy.
    """
    return apply(Frac, x)


@register("fmod", broadcasts=True)
class Fmod:
    @staticmethod
    def forward(ctx, a, b):
        ctx.save(a, b)
        return ctx.xp.fmod(a, b)

    @staticmethod
    def backward(ctx, gy):
        a, b = ctx.saved
        need_a, need_b = ctx.needs_input_grad
        ga = gy if need_a else None
        gb = -gy * ctx.xp.trunc(a / b) if need_b else None
        return ga, gb


def fmod(input, other):  # noqa: A002 - PyTorch's argument names
    """C's ``fmod``: ``input - trunc(input / other) * other``, with the sign of ``input``.

    Gradient: ga = gy, gb = -gy * trunc(a / b).
    """
    return apply(Fmod, input, other)


@register("remainder", broadcasts=True)
class Remainder:
    @staticmethod
    def forward(ctx, a, b):
        ctx.save(a, b)
        return ctx.xp.remainder(a, b)

    @staticmethod
    def backward(ctx, gy):
        a, b = ctx.saved
        need_a, need_b = ctx.needs_input_grad
        ga = gy if need_a else None
        gb = -gy * ctx.xp.floor(a / b) if need_b else None
        return ga, gb


def remainder(input, other):  # noqa: A002 - PyTorch's argument names
    """Python's ``%``: ``input - floor(input / other) * other``, with the sign of ``other``.

    Gradient: ga = gy, gb = -gy * floor(a / b).
    """
    return apply(Remainder, input, other)


@register("lerp", broadcasts=True)
class Lerp:
    @staticmethod
    def forward(ctx, start, end, weight):
        ctx.save(start, end, weight)
        return start + weight * (end - start)

    @staticmethod
    def backward(ctx, gy):
        start, end, weight = ctx.saved
        need_start, need_end, need_weight = ctx.needs_input_grad
        g_start = gy * (1 - weight) if need_start else None
        g_end = gy * weight if need_end else None
        g_weight = gy * (end - start) if need_weight else None
        return g_start, g_end, g_weight


def lerp(input, end, weight):  # noqa: A002 - PyTorch's argument names
    """Linear interpolation ``input + weight * (end - input)``; ``weight`` a scalar or a tensor.

    Gradient: g_input = gy * (1 - weight), g_end = gy * weight,
    g_weight = gy * (end - input).
    """
    if not hasattr(weight, "dtype"):
        weight = real_arg(weight, "weight", "lerp")
    return apply(Lerp, input, end, weight)


@register("addcmul", broadcasts=True)
class Addcmul:
    @staticmethod
    def forward(ctx, x, t1, t2, value):
        ctx.save(t1, t2)
        ctx.value = value
        return x + value * (t1 * t2)

    @staticmethod
    def backward(ctx, gy):
        t1, t2 = ctx.saved
        need_x, need_t1, need_t2 = ctx.needs_input_grad
        gx = gy if need_x else None
        g1 = gy * (ctx.value * t2) if need_t1 else None
        g2 = gy * (ctx.value * t1) if need_t2 else None
        return gx, g1, g2


def addcmul(input, tensor1, tensor2, *, value=1):  # noqa: A002 - PyTorch's argument names
    """``input + value * tensor1 * tensor2`` with broadcasting.

    Gradient: g_input = gy, g_tensor1 = gy * value * tensor2, g_tensor2 = gy * value * tensor1.
    """
    return apply(Addcmul, input, tensor1, tensor2, value=real_arg(value, "value", "addcmul"))


@register("addcdiv", broadcasts=True)
class Addcdiv:
    @staticmethod
    def forward(ctx, x, t1, t2, value):
        ctx.save(t1, t2)
        ctx.value = value
        return x + value * (t1 / t2)

    @staticmethod
    def backward(ctx, gy):
        t1, t2 = ctx.saved
        need_x, need_t1, need_t2 = ctx.needs_input_grad
        gx = gy if need_x else None
        g1 = gy * (ctx.value / t2) if need_t1 else None
        g2 = -gy * (ctx.value * t1 / (t2 * t2)) if need_t2 else None
        return gx, g1, g2


def addcdiv(input, tensor1, tensor2, *, value=1):  # noqa: A002 - PyTorch's argument names
    """``input + value * tensor1 / tensor2`` with broadcasting.

    Gradient: g_input = gy, g_tensor1 = gy * value / tensor2,
    g_tensor2 = -gy * value * tensor1 / tensor2**2.
    """
    return apply(Addcdiv, input, tensor1, tensor2, value=real_arg(value, "value", "addcdiv"))


def clamp_min(input, min):  # noqa: A002 - PyTorch's argument names
    """``clamp(input, min=min)``: the lower bound alone.

    Gradient: gx = gy where x >= min, else 0; a tensor bound receives gy where it is taken.
    """
    return clamp(input, min=min)


def clamp_max(input, max):  # noqa: A002 - PyTorch's argument names
    """``clamp(input, max=max)``: the upper bound alone.

    Gradient: gx = gy where x <= max, else 0; a tensor bound receives gy where it is taken.
    """
    return clamp(input, max=max)


def _predicate(name, fn):
    @register(name, differentiable=False, same_dtype=False)
    class Predicate:
        forward = staticmethod(lambda ctx, x: fn(ctx.xp, x))

    return Predicate


Isnan = _predicate("isnan", lambda xp, x: xp.isnan(x))


def isnan(input):  # noqa: A002 - PyTorch's argument names
    """Whether each element is NaN (bool tensor; not differentiable)."""
    return apply(Isnan, input)


Isinf = _predicate("isinf", lambda xp, x: xp.isinf(x))


def isinf(input):  # noqa: A002 - PyTorch's argument names
    """Whether each element is +inf or -inf (bool tensor; not differentiable)."""
    return apply(Isinf, input)


Isfinite = _predicate("isfinite", lambda xp, x: xp.isfinite(x))


def isfinite(input):  # noqa: A002 - PyTorch's argument names
    """Whether each element is neither NaN nor infinite (bool tensor; not differentiable)."""
    return apply(Isfinite, input)


@register("nan_to_num")
class NanToNum:
    @staticmethod
    def forward(ctx, x, nan, posinf, neginf):
        xp = ctx.xp
        ctx.save(x)
        if x.dtype.kind != "f":
            return x.copy()
        return xp.nan_to_num(x, copy=True, nan=nan, posinf=posinf, neginf=neginf)

    @staticmethod
    def backward(ctx, gy):
        (x,) = ctx.saved
        # A replaced element is a constant: only the finite ones pass the gradient (PyTorch).
        return ctx.xp.where(ctx.xp.isfinite(x), gy, 0)


def nan_to_num(input, nan=0.0, posinf=None, neginf=None):  # noqa: A002 - PyTorch's names
    """``input`` with NaN replaced by ``nan``, +inf by ``posinf`` and -inf by ``neginf`` (None:
    the dtype's largest and smallest finite values).

    Gradient: gx = gy where x is finite, else 0.
    """
    nan = real_arg(nan, "nan", "nan_to_num")
    posinf = None if posinf is None else real_arg(posinf, "posinf", "nan_to_num")
    neginf = None if neginf is None else real_arg(neginf, "neginf", "nan_to_num")
    return apply(NanToNum, input, nan=nan, posinf=posinf, neginf=neginf)


# The family's public functions (ferro.ops exports their union): a new op's name goes here.
def _operand_arrays(op, *values):
    out = []
    for v in values:
        if isinstance(v, TensorBase):
            out.append(v._data)
        elif isinstance(v, numbers.Number):
            out.append(v)
        else:
            raise ArgumentTypeError(f"{op}: expected Tensors or numbers, got {type(v).__name__}")
    return out


def isclose(input, other, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False):  # noqa: A002
    """Elementwise ``|input - other| <= atol + rtol * |other|`` (broadcast), as a bool tensor;
    NaNs are equal only with ``equal_nan``. The result is not differentiable.

    Example:
        >>> ferro.isclose(ferro.tensor([1.0, 2.0]), ferro.tensor([1.0 + 1e-9, 2.1])).tolist()
        [True, False]
    """
    from ferro._C.tensor import wrap
    from ferro.backend import xp_of

    a, b = _operand_arrays("isclose", input, other)
    like = a if hasattr(a, "shape") else b
    xp = xp_of(like)
    return wrap(xp.asarray(xp.isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)))


def allclose(input, other, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False):  # noqa: A002
    """True if :func:`isclose` holds everywhere (a Python bool, as PyTorch's ``allclose``);
    not differentiable.

    Example:
        >>> ferro.allclose(ferro.ones(2), ferro.ones(2) + 1e-9)
        True
    """
    return bool(isclose(input, other, rtol, atol, equal_nan)._data.all())


def equal(input, other) -> bool:  # noqa: A002
    """True if the two tensors have the same shape and elements (a Python bool, as PyTorch's
    ``equal``); not differentiable.

    Example:
        >>> ferro.equal(ferro.tensor([1, 2]), ferro.tensor([1, 2]))
        True
    """
    a, b = _operand_arrays("equal", input, other)
    if getattr(a, "shape", None) != getattr(b, "shape", None):
        return False
    return bool((a == b).all())


def _boolean(name, fn, arity=2):
    @register(name, differentiable=False, broadcasts=True, same_dtype=False)
    class Boolean:
        forward = staticmethod(lambda ctx, *arrays: fn(*arrays))

    def public(*operands):
        for t in operands:
            kind = getattr(t, "dtype", None)
            if name.startswith("bitwise") and kind is not None and as_dtype(kind).kind not in "biu":
                raise DtypeError(f"{name}: expects bool or integer tensors, got dtype {kind}")
        return apply(Boolean, *operands)

    public.__name__ = public.__qualname__ = name
    what = "logical" if name.startswith("logical") else "bitwise (logical on bool)"
    public.__doc__ = f"Elementwise {what} {name.split('_')[1]} (not differentiable)."
    return public


logical_and = _boolean("logical_and", lambda a, b: (a != 0) & (b != 0))
logical_or = _boolean("logical_or", lambda a, b: (a != 0) | (b != 0))
logical_xor = _boolean("logical_xor", lambda a, b: (a != 0) ^ (b != 0))
bitwise_and = _boolean("bitwise_and", lambda a, b: a & b)
bitwise_or = _boolean("bitwise_or", lambda a, b: a | b)
bitwise_xor = _boolean("bitwise_xor", lambda a, b: a ^ b)
bitwise_not = _boolean("bitwise_not", lambda a: ~a, arity=1)


def logical_not(x):
    """Elementwise logical not: ``x == 0`` (bool; not differentiable)."""
    return eq(x, 0)


def positive(x):
    """``x`` itself (PyTorch's ``positive``).

    Gradient: gx = gy.
    """
    return x


# NumPy's and PyTorch's other spellings.
absolute, negative, multiply, subtract, true_divide = abs, neg, mul, sub, div
greater, greater_equal, less, less_equal, not_equal = gt, ge, lt, le, ne


__all__ = [
    *_UNARY,
    "divide",
    "allclose",
    "equal",
    "isclose",
    "abs",
    "add",
    "addcdiv",
    "addcmul",
    "cast",
    "ceil",
    "clamp",
    "clamp_max",
    "clamp_min",
    "clip",
    "clone",
    "absolute",
    "bitwise_and",
    "bitwise_not",
    "bitwise_or",
    "bitwise_xor",
    "greater",
    "greater_equal",
    "less",
    "less_equal",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "multiply",
    "negative",
    "not_equal",
    "positive",
    "subtract",
    "true_divide",
    "div",
    "eq",
    "exp",
    "floor",
    "fmod",
    "frac",
    "ge",
    "gt",
    "isfinite",
    "isinf",
    "isnan",
    "le",
    "lerp",
    "log",
    "logaddexp",
    "lt",
    "maximum",
    "minimum",
    "mul",
    "nan_to_num",
    "ne",
    "neg",
    "pow",
    "remainder",
    "round",
    "sigmoid",
    "sign",
    "sub",
    "tanh",
    "trunc",
    "where",
]
