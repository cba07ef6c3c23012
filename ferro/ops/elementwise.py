"""Elementwise ops: arithmetic with NumPy broadcasting, and the transcendental functions.

Naming follows Chainer: ``x, y`` arrays, ``gy`` the output gradient, ``gx`` an input gradient.
"""

from __future__ import annotations

import math

from ferro.ops.registry import apply, register


@register("add", broadcasts=True)
class Add:
    @staticmethod
    def forward(ctx, a, b):
        return a + b

    @staticmethod
    def backward(ctx, gy):
        return gy, gy


@register("sub", broadcasts=True)
class Sub:
    @staticmethod
    def forward(ctx, a, b):
        return a - b

    @staticmethod
    def backward(ctx, gy):
        return gy, (-gy if ctx.needs_input_grad[1] else None)


@register("mul", broadcasts=True)
class Mul:
    @staticmethod
    def forward(ctx, a, b):
        ctx.save(a, b)
        return a * b

    @staticmethod
    def backward(ctx, gy):
        a, b = ctx.saved
        need_a, need_b = ctx.needs_input_grad
        return (gy * b if need_a else None), (gy * a if need_b else None)


@register("div", broadcasts=True)
class Div:
    @staticmethod
    def forward(ctx, a, b):
        y = a / b
        ctx.save(b, y)
        return y

    @staticmethod
    def backward(ctx, gy):
        b, y = ctx.saved
        need_a, need_b = ctx.needs_input_grad
        ga = gy / b if need_a else None
        gb = -gy * y / b if need_b else None
        return ga, gb


@register("neg")
class Neg:
    @staticmethod
    def forward(ctx, x):
        return -x

    @staticmethod
    def backward(ctx, gy):
        return -gy


def _log_scalar(a):
    # A Python float keeps the gradient's dtype (NumPy 2 treats Python scalars as weak).
    return math.log(a) if a > 0 else float("nan")


@register("pow", broadcasts=True)
class Pow:
    @staticmethod
    def forward(ctx, a, b):
        y = a**b
        ctx.save(a, b, y)
        return y

    @staticmethod
    def backward(ctx, gy):
        a, b, y = ctx.saved
        xp = ctx.xp
        need_a, need_b = ctx.needs_input_grad
        ga = gb = None
        if need_a:
            if isinstance(b, (int, float)):
                ga = gy * (b * a ** (b - 1)) if b != 0 else gy * 0
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


@register("cast", same_dtype=False)
class Cast:
    @staticmethod
    def forward(ctx, x, *, dtype):
        ctx.in_dtype = x.dtype
        return x.astype(dtype)

    @staticmethod
    def backward(ctx, gy):
        return gy.astype(ctx.in_dtype)


def add(a, b):
    """``a + b`` with broadcasting.

    Gradient: ga = gy, gb = gy (summed back over broadcast dimensions).
    """
    return apply(Add, a, b)


def sub(a, b):
    """``a - b`` with broadcasting.

    Gradient: ga = gy, gb = -gy.
    """
    return apply(Sub, a, b)


def mul(a, b):
    """``a * b`` with broadcasting.

    Gradient: ga = gy * b, gb = gy * a.
    """
    return apply(Mul, a, b)


def div(a, b):
    """True division ``a / b`` with broadcasting.

    Gradient: ga = gy / b, gb = -gy * a / b**2.
    """
    return apply(Div, a, b)


def neg(x):
    """``-x``.

    Gradient: gx = -gy.
    """
    return apply(Neg, x)


def pow(a, b):  # noqa: A001 - the public name mirrors torch.pow
    """``a ** b`` (either may be a scalar).

    Gradient: ga = gy * b * a**(b-1), gb = gy * a**b * log(a).
    """
    return apply(Pow, a, b)


def exp(x):
    """``e ** x``.

    Gradient: gx = gy * y.
    """
    return apply(Exp, x)


def log(x):
    """Natural logarithm.

    Gradient: gx = gy / x.
    """
    return apply(Log, x)


def tanh(x):
    """Hyperbolic tangent.

    Gradient: gx = gy * (1 - y**2).
    """
    return apply(Tanh, x)


def cast(x, dtype):
    """Convert ``x`` to ``dtype`` (differentiable between float dtypes).

    Gradient: gx = gy converted back to x's dtype.
    """
    from ferro.creation import as_dtype

    dt = as_dtype(dtype, where="cast")
    if x.dtype == dt:
        return x
    return apply(Cast, x, dtype=dt)
