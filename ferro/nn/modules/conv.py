"""Convolution layers: Conv1d/2d/3d and ConvTranspose1d/2d/3d, as PyTorch's.

Same parameter names, shapes (``weight`` ``(out, in/groups, *kernel)``, transposed
``(in, out/groups, *kernel)``; ``bias`` ``(out,)``), default initialization (weight
kaiming-uniform with a = sqrt(5), bias uniform in ±1/sqrt(fan_in)) and reprs, so a PyTorch
``state_dict`` loads unchanged. The math is :mod:`ferro.ops.conv`.
"""

from __future__ import annotations

import math

from ferro.creation import empty
from ferro.errors import ArgumentError, ShapeError
from ferro.nn import functional as F
from ferro.nn import init
from ferro.nn.module import Module
from ferro.nn.parameter import Parameter
from ferro.ops.conv import _tuple

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def _circular_pad(x, widths):
    """Wrap-around padding: ``widths`` one ``(lo, hi)`` per trailing spatial dim."""
    from ferro.ops.shape import cat

    nd = len(widths)
    for i, (lo, hi) in enumerate(widths):
        dim = x.ndim - nd + i
        size = x.shape[dim]
        if lo > size or hi > size:
            raise ShapeError(
                f"circular padding {widths[i]} is larger than spatial dim {i} of size {size} "
                f"(input {tuple(x.shape)})"
            )
        head = (slice(None),) * dim
        parts = [x[head + (slice(size - lo, size),)]] if lo else []
        parts.append(x)
        if hi:
            parts.append(x[head + (slice(0, hi),)])
        x = cat(parts, dim) if len(parts) > 1 else x
    return x


class _ConvNd(Module):
    _nd = 0
    _transposed = False

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
        padding_mode: str = "zeros",
        output_padding=0,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        name, nd = type(self).__name__, self._nd
        if groups <= 0:
            raise ArgumentError(f"{name}: groups must be a positive integer, got {groups}")
        if in_channels % groups:
            raise ArgumentError(f"{name}: in_channels {in_channels} not divisible by {groups=}")
        if out_channels % groups:
            raise ArgumentError(f"{name}: out_channels {out_channels} not divisible by {groups=}")
        if padding_mode not in _PADDING_MODES:
            raise ArgumentError(
                f"{name}: padding_mode must be one of {_PADDING_MODES}, got {padding_mode!r}"
            )
        if self._transposed and padding_mode != "zeros":
            raise ArgumentError(f'{name}: only "zeros" padding mode is supported, as in PyTorch')
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = _tuple(kernel_size, nd, "kernel_size", name, 1)
        self.stride = _tuple(stride, nd, "stride", name, 1)
        self.dilation = _tuple(dilation, nd, "dilation", name, 1)
        if isinstance(padding, str):
            if self._transposed or padding not in ("same", "valid"):
                raise ArgumentError(f"{name}: invalid padding string {padding!r}")
            if padding == "same" and any(s != 1 for s in self.stride):
                raise ArgumentError(
                    f"{name}: padding='same' is not supported for strided convolutions"
                )
            self.padding = padding
        else:
            self.padding = _tuple(padding, nd, "padding", name, 0)
        self.output_padding = _tuple(output_padding, nd, "output_padding", name, 0)
        self.groups, self.padding_mode, self.transposed = groups, padding_mode, self._transposed
        # F.pad's order (last dim first), each side, as PyTorch keeps it.
        if padding == "same":
            total = [d * (k - 1) for d, k in zip(self.dilation, self.kernel_size, strict=True)]
            widths = [(t // 2, t - t // 2) for t in total]
        elif padding == "valid":
            widths = [(0, 0)] * nd
        else:
            widths = [(p, p) for p in self.padding]
        self._reversed_padding_repeated_twice = [p for lo_hi in reversed(widths) for p in lo_hi]
        if self._transposed:
            shape = (in_channels, out_channels // groups, *self.kernel_size)
        else:
            shape = (out_channels, in_channels // groups, *self.kernel_size)
        self.weight = Parameter(empty(*shape, dtype=dtype))
        if bias:
            self.bias = Parameter(empty(out_channels, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()
        if device is not None:
            self.to(device)

    def reset_parameters(self) -> None:
        """Draw the weight and bias again (PyTorch's convolution initialization)."""
        if self.weight.numel() == 0:
            return
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.weight.shape[1] * math.prod(self.kernel_size)
            if fan_in:
                bound = 1 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def extra_repr(self) -> str:
        nd = self._nd
        padding = self.padding
        s = (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}"
        )
        if padding != (0,) * nd:
            s += f", padding={padding}"
        if self.dilation != (1,) * nd:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * nd:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class _Conv(_ConvNd):
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
        padding_mode: str = "zeros",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            dilation,
            groups,
            bias,
            padding_mode,
            device=device,
            dtype=dtype,
        )

    def forward(self, input):  # noqa: A002
        conv = getattr(F, f"conv{self._nd}d")
        if self.padding_mode == "zeros":
            return conv(
                input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups
            )
        pads = self._reversed_padding_repeated_twice
        if self.padding_mode == "circular":
            widths = [(pads[2 * i], pads[2 * i + 1]) for i in range(self._nd)][::-1]
            x = _circular_pad(input, widths)
        else:
            x = F.pad(input, pads, mode=self.padding_mode)
        return conv(x, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)


class _ConvTranspose(_ConvNd):
    _transposed = True

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        output_padding=0,
        groups: int = 1,
        bias: bool = True,
        dilation=1,
        padding_mode: str = "zeros",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            dilation,
            groups,
            bias,
            padding_mode,
            output_padding,
            device=device,
            dtype=dtype,
        )

    def _output_padding(self, input, output_size):  # noqa: A002
        """The output_padding that gives ``output_size`` (PyTorch's rule: between the smallest
        output size and that plus stride - 1)."""
        if output_size is None:
            return self.output_padding
        nd, name = self._nd, type(self).__name__
        output_size = tuple(output_size)
        if len(output_size) in (nd + 1, nd + 2):
            output_size = output_size[-nd:]
        if len(output_size) != nd:
            raise ShapeError(
                f"{name}: output_size must have {nd} or {nd + 2} elements, got {output_size}"
            )
        padding = []
        for i in range(nd):
            smallest = (
                (input.shape[input.ndim - nd + i] - 1) * self.stride[i]
                - 2 * self.padding[i]
                + self.dilation[i] * (self.kernel_size[i] - 1)
                + 1
            )
            if not smallest <= output_size[i] < smallest + self.stride[i]:
                raise ShapeError(
                    f"{name}: requested output_size {output_size} is not reachable from input "
                    f"{tuple(input.shape)}: dim {i} must be in [{smallest}, "
                    f"{smallest + self.stride[i] - 1}]"
                )
            padding.append(output_size[i] - smallest)
        return tuple(padding)

    def forward(self, input, output_size=None):  # noqa: A002
        conv_transpose = getattr(F, f"conv_transpose{self._nd}d")
        return conv_transpose(
            input,
            self.weight,
            self.bias,
            self.stride,
            self.padding,
            self._output_padding(input, output_size),
            self.groups,
            self.dilation,
        )


class Conv1d(_Conv):
    """1-d convolution over ``(N, C_in, L)``: ``F.conv1d`` with a learned weight
    ``(out_channels, in_channels/groups, k)`` and bias.

    Example:
        >>> ferro.nn.Conv1d(3, 8, 5, padding=2)(ferro.ones(2, 3, 16)).shape
        ferro.Size([2, 8, 16])
    """

    _nd = 1


class Conv2d(_Conv):
    """2-d convolution over ``(N, C_in, H, W)``: ``F.conv2d`` with a learned weight
    ``(out_channels, in_channels/groups, kH, kW)`` and bias.

    Example:
        >>> ferro.nn.Conv2d(3, 16, 3)
        Conv2d(3, 16, kernel_size=(3, 3), stride=(1, 1))
    """

    _nd = 2


class Conv3d(_Conv):
    """3-d convolution over ``(N, C_in, D, H, W)``: ``F.conv3d`` with a learned weight
    ``(out_channels, in_channels/groups, kD, kH, kW)`` and bias.

    Example:
        >>> ferro.nn.Conv3d(1, 2, 3)(ferro.ones(1, 1, 4, 4, 4)).shape
        ferro.Size([1, 2, 2, 2, 2])
    """

    _nd = 3


class ConvTranspose1d(_ConvTranspose):
    """1-d transposed convolution over ``(N, C_in, L)``: ``F.conv_transpose1d`` with a learned
    weight ``(in_channels, out_channels/groups, k)``; ``forward(x, output_size=None)``.

    Example:
        >>> ferro.nn.ConvTranspose1d(4, 2, 3, stride=2)(ferro.ones(1, 4, 5)).shape
        ferro.Size([1, 2, 11])
    """

    _nd = 1


class ConvTranspose2d(_ConvTranspose):
    """2-d transposed convolution over ``(N, C_in, H, W)``: ``F.conv_transpose2d`` with a
    learned weight ``(in_channels, out_channels/groups, kH, kW)``.

    Example:
        >>> up = ferro.nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1)
        >>> up(ferro.ones(1, 8, 5, 5), output_size=(10, 10)).shape
        ferro.Size([1, 4, 10, 10])
    """

    _nd = 2


class ConvTranspose3d(_ConvTranspose):
    """3-d transposed convolution over ``(N, C_in, D, H, W)``: ``F.conv_transpose3d`` with a
    learned weight ``(in_channels, out_channels/groups, kD, kH, kW)``.

    Example:
        >>> ferro.nn.ConvTranspose3d(2, 1, 2)(ferro.ones(1, 2, 2, 2, 2)).shape
        ferro.Size([1, 1, 3, 3, 3])
    """

    _nd = 3


__all__ = ["Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"]
