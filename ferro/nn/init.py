"""Parameter initializers, drawing from ferro's generator (``ferro.manual_seed`` reproduces them)
or from the ``generator=`` given, as in PyTorch.

Each fills its tensor in place (under ``no_grad``) and returns it.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from ferro.errors import ArgumentError, ShapeError
from ferro.random import numpy_generator


def _fill(t, values):
    t._data[...] = values.astype(t.dtype, copy=False)
    return t


def _fans(t):
    if t.ndim < 2:
        raise ShapeError(f"fan in/out need at least 2 dimensions, got shape {t.shape}")
    receptive = 1
    for s in t.shape[2:]:
        receptive *= s
    return t.shape[1] * receptive, t.shape[0] * receptive


def uniform_(t, a: float = 0.0, b: float = 1.0, generator=None):
    """Fill with U(a, b), drawn from ``generator`` (default: ferro's generator)."""
    return _fill(t, numpy_generator(generator, "uniform_").uniform(a, b, t.shape))


def normal_(t, mean: float = 0.0, std: float = 1.0, generator=None):
    """Fill with N(mean, std^2), drawn from ``generator`` (default: ferro's generator)."""
    return _fill(t, numpy_generator(generator, "normal_").normal(mean, std, t.shape))


def zeros_(t):
    """Fill with zeros."""
    t._data[...] = 0
    return t


def ones_(t):
    """Fill with ones."""
    t._data[...] = 1
    return t


def constant_(t, value: float):
    """Fill with ``value``."""
    t._data[...] = value
    return t


def xavier_uniform_(t, gain: float = 1.0, generator=None):
    """Glorot uniform: U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out))."""
    fan_in, fan_out = _fans(t)
    a = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(t, -a, a, generator)


def xavier_normal_(t, gain: float = 1.0, generator=None):
    """Glorot normal: N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = _fans(t)
    return normal_(t, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), generator)


def _gain(nonlinearity: str, a: float) -> float:
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        return math.sqrt(2.0 / (1 + a * a))
    if nonlinearity in ("linear", "sigmoid"):
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    raise ArgumentError(f"unknown nonlinearity {nonlinearity!r}")


def kaiming_uniform_(
    t, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu", generator=None
):
    """He uniform: U(-b, b) with b = gain * sqrt(3 / fan)."""
    fan_in, fan_out = _fans(t)
    fan = fan_in if mode == "fan_in" else fan_out
    bound = _gain(nonlinearity, a) * math.sqrt(3.0 / fan)
    return uniform_(t, -bound, bound, generator)


def kaiming_normal_(
    t, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu", generator=None
):
    """He normal: N(0, std^2) with std = gain / sqrt(fan)."""
    fan_in, fan_out = _fans(t)
    fan = fan_in if mode == "fan_in" else fan_out
    return normal_(t, 0.0, _gain(nonlinearity, a) / math.sqrt(fan), generator)


def calculate_gain(nonlinearity: str, param=None) -> float:
    """PyTorch's recommended gain for ``nonlinearity`` (``param``: leaky_relu's negative slope,
    0.01 when None)."""
    if nonlinearity in ("linear", "identity", "sigmoid") or nonlinearity.startswith("conv"):
        return 1.0
    if nonlinearity == "selu":
        return 3.0 / 4
    if nonlinearity == "leaky_relu":
        return _gain(nonlinearity, 0.01 if param is None else float(param))
    return _gain(nonlinearity, 0.0)


def trunc_normal_(
    t, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0, generator=None
):
    """Fill with N(mean, std^2) truncated to [a, b] (absolute bounds, as in PyTorch)."""
    if not a < b:
        raise ArgumentError(f"trunc_normal_: need a < b, got a={a}, b={b}")
    rng = numpy_generator(generator, "trunc_normal_")
    out = rng.normal(mean, std, t.shape)
    bad = (out < a) | (out > b)
    while bad.any():
        out[bad] = rng.normal(mean, std, int(bad.sum()))
        bad = (out < a) | (out > b)
    return _fill(t, out)


def orthogonal_(t, gain: float = 1.0, generator=None):
    """Fill with a (semi-)orthogonal matrix (QR of a Gaussian; rows = ``t.shape[0]``, the other
    dimensions flattened), scaled by ``gain``."""
    if t.ndim < 2:
        raise ShapeError(f"orthogonal_: need at least 2 dimensions, got shape {t.shape}")
    rows = t.shape[0]
    cols = t.numel() // rows if rows else 0
    flat = numpy_generator(generator, "orthogonal_").normal(0.0, 1.0, (rows, cols))
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q *= np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    return _fill(t, (gain * q).reshape(t.shape))


def eye_(t):
    """Fill a 2-D tensor with the identity (ones on the diagonal, zeros elsewhere; not square
    is fine), as PyTorch's ``eye_``: a Linear starts as a copy of its input."""
    if t.ndim != 2:
        raise ShapeError(f"eye_: only 2-D tensors are supported, got shape {tuple(t.shape)}")
    return _fill(t, np.eye(*t.shape))


def dirac_(t, groups: int = 1):
    """Fill a 3-, 4- or 5-D convolution weight with the Dirac delta: each of the first
    ``min(out_channels / groups, in_channels)`` output channels of each group copies its input
    channel through the kernel's centre, so the convolution starts as the identity."""
    if t.ndim not in (3, 4, 5):
        raise ShapeError(f"dirac_: only 3-, 4- and 5-D tensors are supported, got {tuple(t.shape)}")
    if groups < 1 or t.shape[0] % groups:
        raise ArgumentError(
            f"dirac_: the first dimension ({t.shape[0]}) must be divisible by groups ({groups})"
        )
    per_group = t.shape[0] // groups
    out = np.zeros(t.shape)
    centre = tuple(k // 2 for k in t.shape[2:])
    for g in range(groups):
        for d in range(min(per_group, t.shape[1])):
            out[(g * per_group + d, d, *centre)] = 1
    return _fill(t, out)


def sparse_(t, sparsity: float, std: float = 0.01, generator=None):
    """Fill a 2-D tensor with N(0, std^2) and zero ``ceil(sparsity * rows)`` random rows of each
    column (PyTorch's ``sparse_``, after Martens 2010)."""
    if t.ndim != 2:
        raise ShapeError(f"sparse_: only 2-D tensors are supported, got shape {tuple(t.shape)}")
    rows, cols = t.shape
    rng = numpy_generator(generator, "sparse_")
    out = rng.normal(0.0, std, (rows, cols))
    zeros = int(math.ceil(sparsity * rows))
    for c in range(cols):
        out[rng.permutation(rows)[:zeros], c] = 0
    return _fill(t, out)


def _deprecated(fill):
    """PyTorch's old spelling of an initializer, without the trailing underscore: it warns
    (FutureWarning, as PyTorch's does) and calls ``fill``."""
    old, new = fill.__name__[:-1], fill.__name__

    def deprecated_init(*args, **kwargs):
        warnings.warn(
            f"`nn.init.{old}` is now deprecated in favor of `nn.init.{new}`.",
            FutureWarning,
            stacklevel=2,
        )
        return fill(*args, **kwargs)

    deprecated_init.__name__ = deprecated_init.__qualname__ = old
    deprecated_init.__doc__ = f"Deprecated: use :func:`{new}`."
    return deprecated_init


uniform = _deprecated(uniform_)
normal = _deprecated(normal_)
constant = _deprecated(constant_)
eye = _deprecated(eye_)
dirac = _deprecated(dirac_)
xavier_uniform = _deprecated(xavier_uniform_)
xavier_normal = _deprecated(xavier_normal_)
kaiming_uniform = _deprecated(kaiming_uniform_)
kaiming_normal = _deprecated(kaiming_normal_)
orthogonal = _deprecated(orthogonal_)
sparse = _deprecated(sparse_)


__all__ = [
    "calculate_gain",
    "trunc_normal_",
    "orthogonal_",
    "uniform_",
    "normal_",
    "zeros_",
    "ones_",
    "constant_",
    "xavier_uniform_",
    "eye_",
    "dirac_",
    "sparse_",
    "uniform",
    "normal",
    "constant",
    "eye",
    "dirac",
    "xavier_uniform",
    "xavier_normal",
    "kaiming_uniform",
    "kaiming_normal",
    "orthogonal",
    "sparse",
    "xavier_normal_",
    "kaiming_uniform_",
    "kaiming_normal_",
]
