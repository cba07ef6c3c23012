"""Dropout, drawing its mask from ferro's generator (so ``manual_seed`` reproduces it and
checkpointing can replay it)."""

from __future__ import annotations

from ferro.backend import device_dropout_mask
from ferro.errors import ArgumentError
from ferro.ops.elementwise import mul, real_arg
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


# The family's public functions (ferro.ops exports their union): a new op's name goes here.
__all__ = [
    "dropout",
]
