"""Moving tensors between devices: ``to_device`` (differentiable: the gradient moves back).

Which device an array is on, and how it moves, is ferro/backend.py's; this is the op over it.
"""

from __future__ import annotations

from ferro.backend import device_of, is_on, move, parse_device
from ferro.ops.registry import apply, register


@register("to_device", same_dtype=False)
class ToDevice:
    @staticmethod
    def forward(ctx, x, *, device):
        ctx.source = device_of(x)
        return move(x, device)

    @staticmethod
    def backward(ctx, gy):
        return move(gy, ctx.source)


def to_device(x, device):
    """``x`` on ``device`` (a string or a ``ferro.device``); ``x`` itself when it is there
    already (see ``ferro.backend.is_on``: ``"cuda"`` matches any CUDA device).

    Gradient: gx = gy moved back to x's device.
    """
    target = parse_device(device)
    if is_on(x._data, target):
        return x
    return apply(ToDevice, x, device=target)


# The family's public functions (ferro.ops exports their union): a new op's name goes here.
__all__ = ["to_device"]
