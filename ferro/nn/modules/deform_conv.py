"""DeformConv2d: deformable convolution as torchvision's ``ops.DeformConv2d``."""

from __future__ import annotations

import math

from ferro.creation import empty
from ferro.errors import ArgumentError
from ferro.nn import functional as F
from ferro.nn import init
from ferro.nn.module import Module
from ferro.nn.parameter import Parameter


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


class DeformConv2d(Module):
    """Deformable convolution (DCNv1, and DCNv2 when ``forward`` gets a mask), with
    torchvision's parameters: ``weight`` (out, in/groups, kh, kw) and ``bias`` (out,),
    initialized as torchvision does (kaiming uniform with a = sqrt(5); bias uniform in
    ±1/sqrt(fan_in)). The offsets (and mask) are inputs of ``forward``, usually computed by an
    ordinary convolution of the same input.

    Example:
        >>> ferro.nn.DeformConv2d(3, 8, kernel_size=3, padding=1)
        DeformConv2d(3, 8, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        if groups <= 0 or in_channels % groups or out_channels % groups:
            raise ArgumentError(
                f"DeformConv2d: in_channels {in_channels} and out_channels {out_channels} must "
                f"be divisible by groups {groups}"
            )
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = _pair(kernel_size)
        self.stride, self.padding, self.dilation = _pair(stride), _pair(padding), _pair(dilation)
        self.groups = groups
        self.weight = Parameter(
            empty(out_channels, in_channels // groups, *self.kernel_size, dtype=dtype)
        )
        if bias:
            self.bias = Parameter(empty(out_channels, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()
        if device is not None:
            self.to(device)

    def reset_parameters(self) -> None:
        """Draw the weight and bias again (torchvision's initialization)."""
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.weight.shape[1] * self.kernel_size[0] * self.kernel_size[1]
            bound = 1 / math.sqrt(fan_in)
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input, offset, mask=None):  # noqa: A002 - torchvision's names
        return F.deform_conv2d(
            input,
            offset,
            self.weight,
            self.bias,
            stride=self.stride,
            padding=self.padding,
            dilation=self.dilation,
            mask=mask,
        )

    def extra_repr(self) -> str:
        s = (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}"
        )
        if self.padding != (0, 0):
            s += f", padding={self.padding}"
        if self.dilation != (1, 1):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s


__all__ = ["DeformConv2d"]
