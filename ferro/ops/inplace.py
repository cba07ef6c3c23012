"""In-place ops: ``add_``, ``sub_``, ``mul_``, ``div_``, ``clamp_``, ``fill_``, ``zero_`` and the
augmented operators (``+=`` ...).

Each computes the out-of-place result with the differentiable op, then
:func:`ferro._C.engine.commit_inplace` writes it into the tensor's memory, bumps the version
counter shared with its views, and moves the tensor's history to the new node. Backward then
refuses any node that saved the old contents (the versions differ) instead of computing a wrong
gradient. A leaf that requires grad cannot be modified in place while grad mode is on.
"""

from __future__ import annotations

from ferro._C.engine import commit_inplace
from ferro._C.tensor import wrap
from ferro.backend import xp_of
from ferro.dtypes import fill_value
from ferro.ops import elementwise as ew


def add_(t, other):
    """``t += other`` in place; returns ``t``."""
    return commit_inplace(t, ew.add(t, other), "add_")


def sub_(t, other):
    """``t -= other`` in place; returns ``t``."""
    return commit_inplace(t, ew.sub(t, other), "sub_")


def mul_(t, other):
    """``t *= other`` in place; returns ``t``."""
    return commit_inplace(t, ew.mul(t, other), "mul_")


def div_(t, other):
    """``t /= other`` in place; returns ``t``."""
    return commit_inplace(t, ew.div(t, other), "div_")


def clamp_(t, min=None, max=None):  # noqa: A002 - PyTorch's argument names
    """Clamp ``t`` to ``[min, max]`` in place; returns ``t``."""
    return commit_inplace(t, ew.clamp(t, min, max), "clamp_")


def fill_(t, value):
    """Set every element of ``t`` to ``value`` (cast to ``t``'s dtype); returns ``t``.

    The values are made directly, not as ``t * 0 + value``: that gives NaN where ``t`` holds
    Inf or NaN.
    """
    from ferro._C.engine import is_grad_enabled

    data = t.data
    value, dt = fill_value(value, data.dtype, "fill_")
    filled = wrap(xp_of(data).full(data.shape, value, dtype=dt))
    if t.grad_fn is not None and is_grad_enabled():
        # A non-leaf keeps a history: the new values depend on nothing, so the gradient that
        # flows back through t is zero (PyTorch's FillBackward). where(False, t, filled) records
        # exactly that without computing t * 0 (NaN where t is Inf).
        filled = ew.where(wrap(xp_of(data).zeros(data.shape, dtype=bool)), t, filled)
    return commit_inplace(t, filled, "fill_")


def zero_(t):
    """Set every element of ``t`` to zero; returns ``t``."""
    return fill_(t, 0)


# The family's public functions (ferro.ops exports their union): a new op's name goes here.
__all__ = [
    "add_",
    "clamp_",
    "div_",
    "fill_",
    "mul_",
    "sub_",
    "zero_",
]
