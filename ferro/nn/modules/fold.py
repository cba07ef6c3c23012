"""Unfold and Fold: im2col and col2im as layers, as PyTorch's ``nn.Unfold`` and ``nn.Fold``."""

from __future__ import annotations

from ferro.nn import functional as F
from ferro.nn.module import Module


class Unfold(Module):
    """Sliding blocks of ``(N, C, H, W)`` as columns ``(N, C*kH*kW, L)`` (``F.unfold``).

    Example:
        >>> ferro.nn.Unfold(kernel_size=2)(ferro.ones(1, 3, 4, 4)).shape
        ferro.Size([1, 12, 9])
    """

    def __init__(self, kernel_size, dilation=1, padding=0, stride=1) -> None:
        super().__init__()
        self.kernel_size, self.dilation = kernel_size, dilation
        self.padding, self.stride = padding, stride

    def forward(self, input):  # noqa: A002
        return F.unfold(input, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return (
            f"kernel_size={self.kernel_size}, dilation={self.dilation}, "
            f"padding={self.padding}, stride={self.stride}"
        )


class Fold(Module):
    """Columns ``(N, C*kH*kW, L)`` summed back into ``(N, C, *output_size)`` (``F.fold``).

    Example:
        >>> ferro.nn.Fold(output_size=(4, 4), kernel_size=2)(ferro.ones(1, 12, 9)).shape
        ferro.Size([1, 3, 4, 4])
    """

    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1) -> None:
        super().__init__()
        self.output_size, self.kernel_size = output_size, kernel_size
        self.dilation, self.padding, self.stride = dilation, padding, stride

    def forward(self, input):  # noqa: A002
        return F.fold(
            input, self.output_size, self.kernel_size, self.dilation, self.padding, self.stride
        )

    def extra_repr(self) -> str:
        return (
            f"output_size={self.output_size}, kernel_size={self.kernel_size}, "
            f"dilation={self.dilation}, padding={self.padding}, stride={self.stride}"
        )


__all__ = ["Fold", "Unfold"]
