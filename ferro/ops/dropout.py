"""Dropout, drawing its mask from ferro's generator (so ``manual_seed`` reproduces it and
checkpointing can replay it)."""

from __future__ import annotations

import warnings

import numpy as np

from ferro._C.tensor import wrap
from ferro.backend import device_dropout_mask, move
from ferro.errors import ArgumentError, ShapeError
from ferro.ops.elementwise import add, mul, real_arg
from ferro.ops.registry import apply, register


@register("dropout")
class Dropout:
    @staticmethod
    def forward(ctx, x, *, p):
        if ctx.xp.__name__ != "numpy":
            # On a GPU the mask comes from that device's counter-based generator (a kernel), so
            # checkpointing replays it by restoring the device's (seed, offset).
            mask = device_dropout_mask(x, p)
        else:
            from ferro.random import numpy_generator

            # uint32 draws against a threshold: the same seed gives the same mask in any dtype.
            bits = numpy_generator().integers(0, 2**32, size=x.shape, dtype="uint32")
            mask = (bits >= int(p * 2**32)) * x.dtype.type(1.0 / (1.0 - p))
        ctx.save(mask)
        return x * mask

    @staticmethod
    def backward(ctx, gy):
        (mask,) = ctx.saved
        return gy * mask


def dropout(x, p: float = 0.5, training: bool = True):
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)``; the
    identity when not ``training`` or ``p == 0``.

    Gradient: gx = gy * mask / (1 - p), with the same mask as the forward.
    """
    p = real_arg(p, "p", "dropout")
    if not 0.0 <= p <= 1.0:
        raise ArgumentError(f"dropout: p must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return mul(x, 0.0)
    return apply(Dropout, x, p=p)


def _p(p, op):
    p = real_arg(p, "p", op)
    if not 0.0 <= p <= 1.0:
        raise ArgumentError(f"{op}: p must be in [0, 1], got {p}")
    return p


def _keep(shape, p, x):
    """A 0/1 array of ``shape`` in ``x``'s dtype and device: 1 with probability ``1 - p``, drawn
    from ferro's generator as dropout's masks are (uint32 draws against a threshold)."""
    from ferro.random import numpy_generator

    bits = numpy_generator().integers(0, 2**32, size=shape, dtype="uint32")
    keep = (bits >= int(p * 2**32)).astype(x._data.dtype)
    return keep if type(x._data) is np.ndarray else move(keep, x.device)


def _channel_dropout(x, p, training, op, spatial):
    p = _p(p, op)
    if x.ndim not in (spatial + 1, spatial + 2):
        raise ShapeError(
            f"{op}: expects a ({spatial + 1}-D unbatched or {spatial + 2}-D batched) input of "
            f"shape (N, C, ...), got shape {tuple(x.shape)}"
        )
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return mul(x, 0.0)
    # One draw per (sample, channel), broadcast over the spatial dimensions.
    shape = tuple(x.shape[: x.ndim - spatial]) + (1,) * spatial
    mask = _keep(shape, p, x) * x._data.dtype.type(1.0 / (1.0 - p))
    return mul(x, wrap(mask))


def dropout1d(input, p: float = 0.5, training: bool = True):  # noqa: A002
    """Zero whole channels of an ``(N, C, L)`` (or ``(C, L)``) input with probability ``p`` and
    scale the rest by ``1 / (1 - p)``, as PyTorch's ``F.dropout1d``.

    Gradient: gx = gy * mask (the same per-channel mask, scaled).
    """
    return _channel_dropout(input, p, training, "dropout1d", 1)


def dropout2d(input, p: float = 0.5, training: bool = True):  # noqa: A002
    """Channel dropout of an ``(N, C, H, W)`` input, as ``F.dropout2d``. Other ranks of at least
    2 are read as PyTorch 2.13 reads them, with a warning: ``(N, C, ...)``, one draw per (N, C)
    entry, so a 3-D input is ``(N, C, L)`` (not ``(C, H, W)``) and a 2-D one plain dropout.

    Gradient: gx = gy * mask (the same per-channel mask, scaled).
    """
    if input.ndim >= 2 and input.ndim != 4:
        why = "one draw per (N, C) entry, as PyTorch does (dropout1d/dropout say it plainly)"
        warnings.warn(
            f"dropout2d: a {input.ndim}-D input is read as (N, C, ...), {why}", stacklevel=3
        )
    spatial = input.ndim - 2 if input.ndim >= 2 else 2
    return _channel_dropout(input, p, training, "dropout2d", spatial)


def dropout3d(input, p: float = 0.5, training: bool = True):  # noqa: A002
    """Channel dropout of an ``(N, C, D, H, W)`` (or ``(C, D, H, W)``) input, as
    ``F.dropout3d``.

    Gradient: gx = gy * mask (the same per-channel mask, scaled).
    """
    return _channel_dropout(input, p, training, "dropout3d", 3)


# SELU's negative saturation value, -scale * alpha (PyTorch's alpha_dropout constant).
_ALPHA_PRIME = -1.7580993408473766


def alpha_dropout(input, p: float = 0.5, training: bool = False):  # noqa: A002
    """Dropout for SELU networks (PyTorch's ``F.alpha_dropout``): dropped elements are set to
    SELU's saturation value and the result is scaled and shifted so the mean and variance of a
    standard normal input are kept. The identity when not ``training`` (the default, as in
    PyTorch) or ``p == 0``.

    Gradient: gx = gy * a * keep, where ``a = ((1 - p) * (1 + p * alpha'**2)) ** -0.5``.
    """
    return _alpha_dropout(input, p, training, "alpha_dropout", tuple(input.shape))


def feature_alpha_dropout(input, p: float = 0.5, training: bool = False):  # noqa: A002
    """:func:`alpha_dropout` dropping whole channels: one draw per (sample, channel) of an
    ``(N, C, ...)`` input, broadcast over the rest (PyTorch's ``F.feature_alpha_dropout``).

    Gradient: gx = gy * a * keep, with the per-channel keep mask.
    """
    if input.ndim < 2:
        raise ShapeError(
            f"feature_alpha_dropout: expects an (N, C, ...) input, got shape {tuple(input.shape)}"
        )
    shape = tuple(input.shape[:2]) + (1,) * (input.ndim - 2)
    return _alpha_dropout(input, p, training, "feature_alpha_dropout", shape)


def _alpha_dropout(input, p, training, op, shape):  # noqa: A002
    p = _p(p, op)
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return mul(input, 0.0)
    a = ((1 - p) * (1 + p * _ALPHA_PRIME**2)) ** -0.5
    b = -a * _ALPHA_PRIME * p
    keep = _keep(shape, p, input)
    dt = input._data.dtype.type
    scale = wrap(keep * dt(a))
    shift = wrap((1 - keep) * dt(a * _ALPHA_PRIME) + dt(b))
    return add(mul(input, scale), shift)


# The family's public functions (ferro.ops exports their union): a new op's name goes here.
__all__ = [
    "alpha_dropout",
    "dropout",
    "dropout1d",
    "dropout2d",
    "dropout3d",
    "feature_alpha_dropout",
]
