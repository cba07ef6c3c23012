"""The functional face of the op library (``ferro.nn.functional as F``), as in PyTorch.

Besides the ops, it holds PyTorch's functional-only helpers that are compositions of ops
(``normalize``, ``cosine_similarity``, ``pairwise_distance``): their gradients are the ops'
gradients, so they need no op of their own.
"""

import math
import numbers

import numpy as np

from ferro.errors import ArgumentError, ArgumentTypeError
from ferro.ops import *  # noqa: F403
from ferro.ops import __all__ as _all
from ferro.ops import abs as _abs
from ferro.ops import clamp, norm
from ferro.ops.elementwise import real_arg


def _p_arg(p, fn: str) -> float:
    p = real_arg(p, "p", fn)
    if not p > 0:
        raise ArgumentError(f"{fn}: p must be positive (ferro has no p <= 0 norm), got {p}")
    return p


def _pnorm(x, p: float, dim, keepdim: bool):
    """The vector p-norm over ``dim``: ``norm``'s own for p in 1, 2, inf, else
    ``sum(|x|**p) ** (1/p)`` from differentiable ops."""
    if p in (1.0, 2.0, math.inf):
        return norm(x, p if p == math.inf else int(p), dim, keepdim)
    return (_abs(x) ** p).sum(dim, keepdim=keepdim) ** (1.0 / p)


def _dim_arg(dim, fn: str) -> int:
    if isinstance(dim, numbers.Integral) and not isinstance(dim, bool):
        return int(dim)
    raise ArgumentTypeError(f"{fn}: dim must be an int, got {type(dim).__name__} {dim!r}")


def normalize(input, p: float = 2.0, dim: int = 1, eps: float = 1e-12):  # noqa: A002
    """``input / max(||input||_p, eps)`` with the p-norm taken over ``dim`` (PyTorch's
    ``F.normalize``): unit vectors along ``dim``, a zero vector staying zero.

    Gradient: through the norm and the division (the norm's, 0 where it is clamped to eps).
    """
    p = _p_arg(p, "normalize")
    eps = real_arg(eps, "eps", "normalize")
    return input / clamp(_pnorm(input, p, _dim_arg(dim, "normalize"), True), min=eps)


def cosine_similarity(x1, x2, dim: int = 1, eps: float = 1e-8):
    """Cosine of the angle between ``x1`` and ``x2`` along ``dim``, after broadcasting them:
    ``sum(x1 / max(||x1||, eps) * x2 / max(||x2||, eps))``, dividing each by its norm first
    as PyTorch does (the result stays within [-1, 1]).

    Gradient: through the norms, divisions and sum; where a norm is below ``eps`` PyTorch still
    differentiates the unclamped norm, ferro the clamp (0): they differ only there.
    """
    dim = _dim_arg(dim, "cosine_similarity")
    eps = real_arg(eps, "eps", "cosine_similarity")
    shape = _broadcast_shape(x1, x2, "cosine_similarity")
    x1, x2 = x1.expand(shape), x2.expand(shape)
    u1 = x1 / clamp(norm(x1, 2, dim, True), min=eps)
    u2 = x2 / clamp(norm(x2, 2, dim, True), min=eps)
    return (u1 * u2).sum(dim)


def pairwise_distance(x1, x2, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
    """The p-norm of ``x1 - x2 + eps`` over the last dimension (PyTorch's
    ``F.pairwise_distance``; ``eps`` keeps the norm differentiable at equal inputs).

    Gradient: through the difference and the p-norm.
    """
    p = _p_arg(p, "pairwise_distance")
    eps = real_arg(eps, "eps", "pairwise_distance")
    return _pnorm(x1 - x2 + eps, p, -1, bool(keepdim))


def _broadcast_shape(a, b, fn: str) -> tuple:
    from ferro.errors import ShapeError

    try:
        return np.broadcast_shapes(tuple(a.shape), tuple(b.shape))
    except ValueError:
        raise ShapeError(
            f"{fn}: shapes {tuple(a.shape)} and {tuple(b.shape)} do not broadcast"
        ) from None


__all__ = [*_all, "cosine_similarity", "normalize", "pairwise_distance"]
