"""PixelShuffle and PixelUnshuffle."""

from __future__ import annotations

from ferro.nn import functional as F
from ferro.nn.module import Module


class PixelShuffle(Module):
    """``(*, C r^2, H, W) -> (*, C, H r, W r)`` (see :func:`ferro.nn.functional.pixel_shuffle`)."""

    def __init__(self, upscale_factor: int) -> None:
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, x):
        return F.pixel_shuffle(x, self.upscale_factor)

    def extra_repr(self) -> str:
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    """``(*, C, H r, W r) -> (*, C r^2, H, W)``, the inverse of :class:`PixelShuffle`."""

    def __init__(self, downscale_factor: int) -> None:
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, x):
        return F.pixel_unshuffle(x, self.downscale_factor)

    def extra_repr(self) -> str:
        return f"downscale_factor={self.downscale_factor}"


__all__ = ["PixelShuffle", "PixelUnshuffle"]
