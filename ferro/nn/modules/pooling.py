"""Pooling layers and pixel (un)shuffle, as PyTorch's: the same constructor arguments, the
same attributes (stored as given, or as tuples where PyTorch stores tuples) and reprs."""

from __future__ import annotations

from ferro.nn import functional as F
from ferro.nn.module import Module


def _ntuple(value, n):
    return tuple(value) if isinstance(value, (tuple, list)) else (value,) * n


class _MaxPoolNd(Module):
    _nd = 0

    def __init__(
        self,
        kernel_size,
        stride=None,
        padding=0,
        dilation=1,
        return_indices: bool = False,
        ceil_mode: bool = False,
    ) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding, self.dilation = padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def forward(self, x):
        fn = getattr(F, f"max_pool{self._nd}d")
        return fn(
            x,
            self.kernel_size,
            self.stride,
            self.padding,
            self.dilation,
            ceil_mode=self.ceil_mode,
            return_indices=self.return_indices,
        )

    def extra_repr(self) -> str:
        return (
            f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
            f"dilation={self.dilation}, ceil_mode={self.ceil_mode}"
        )


class MaxPool1d(_MaxPoolNd):
    """1-D max pooling (see :func:`ferro.nn.functional.max_pool1d`)."""

    _nd = 1


class MaxPool2d(_MaxPoolNd):
    """2-D max pooling (see :func:`ferro.nn.functional.max_pool2d`)."""

    _nd = 2


class MaxPool3d(_MaxPoolNd):
    """3-D max pooling (see :func:`ferro.nn.functional.max_pool3d`)."""

    _nd = 3


class _AvgPoolNd(Module):
    _nd = 0

    def __init__(
        self,
        kernel_size,
        stride=None,
        padding=0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
    ) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad

    def forward(self, x):
        fn = getattr(F, f"avg_pool{self._nd}d")
        args = (self.kernel_size, self.stride, self.padding, self.ceil_mode)
        if self._nd == 1:
            return fn(x, *args, self.count_include_pad)
        return fn(x, *args, self.count_include_pad, self.divisor_override)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool1d(_AvgPoolNd):
    """1-D average pooling (see :func:`ferro.nn.functional.avg_pool1d`); as PyTorch's, it has
    no ``divisor_override`` and stores its sizes as 1-tuples."""

    _nd = 1

    def __init__(
        self,
        kernel_size,
        stride=None,
        padding=0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
    ) -> None:
        stride = stride if stride is not None else kernel_size
        super().__init__(
            _ntuple(kernel_size, 1),
            _ntuple(stride, 1),
            _ntuple(padding, 1),
            ceil_mode,
            count_include_pad,
        )


class _AvgPoolOverride(_AvgPoolNd):
    def __init__(
        self,
        kernel_size,
        stride=None,
        padding=0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override=None,
    ) -> None:
        super().__init__(kernel_size, stride, padding, ceil_mode, count_include_pad)
        self.divisor_override = divisor_override


class AvgPool2d(_AvgPoolOverride):
    """2-D average pooling (see :func:`ferro.nn.functional.avg_pool2d`)."""

    _nd = 2


class AvgPool3d(_AvgPoolOverride):
    """3-D average pooling (see :func:`ferro.nn.functional.avg_pool3d`)."""

    _nd = 3


class _AdaptiveAvgPoolNd(Module):
    _nd = 0

    def __init__(self, output_size) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, x):
        return getattr(F, f"adaptive_avg_pool{self._nd}d")(x, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(_AdaptiveAvgPoolNd):
    """Adaptive 1-D average pooling to ``output_size``."""

    _nd = 1


class AdaptiveAvgPool2d(_AdaptiveAvgPoolNd):
    """Adaptive 2-D average pooling to ``output_size`` (``None`` keeps a size)."""

    _nd = 2


class AdaptiveAvgPool3d(_AdaptiveAvgPoolNd):
    """Adaptive 3-D average pooling to ``output_size`` (``None`` keeps a size)."""

    _nd = 3


class _AdaptiveMaxPoolNd(Module):
    _nd = 0

    def __init__(self, output_size, return_indices: bool = False) -> None:
        super().__init__()
        self.output_size, self.return_indices = output_size, return_indices

    def forward(self, x):
        fn = getattr(F, f"adaptive_max_pool{self._nd}d")
        return fn(x, self.output_size, self.return_indices)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveMaxPool1d(_AdaptiveMaxPoolNd):
    """Adaptive 1-D max pooling to ``output_size``."""

    _nd = 1


class AdaptiveMaxPool2d(_AdaptiveMaxPoolNd):
    """Adaptive 2-D max pooling to ``output_size`` (``None`` keeps a size)."""

    _nd = 2


class AdaptiveMaxPool3d(_AdaptiveMaxPoolNd):
    """Adaptive 3-D max pooling to ``output_size`` (``None`` keeps a size)."""

    _nd = 3


class _MaxUnpoolNd(Module):
    _nd = 0

    def __init__(self, kernel_size, stride=None, padding=0) -> None:
        super().__init__()
        n = self._nd
        self.kernel_size = _ntuple(kernel_size, n)
        self.stride = _ntuple(stride if stride is not None else kernel_size, n)
        self.padding = _ntuple(padding, n)

    def forward(self, x, indices, output_size=None):
        fn = getattr(F, f"max_unpool{self._nd}d")
        return fn(x, indices, self.kernel_size, self.stride, self.padding, output_size)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxUnpool1d(_MaxUnpoolNd):
    """The partial inverse of :class:`MaxPool1d` (see
    :func:`ferro.nn.functional.max_unpool1d`)."""

    _nd = 1


class MaxUnpool2d(_MaxUnpoolNd):
    """The partial inverse of :class:`MaxPool2d`."""

    _nd = 2


class MaxUnpool3d(_MaxUnpoolNd):
    """The partial inverse of :class:`MaxPool3d`."""

    _nd = 3


class _LPPoolNd(Module):
    _nd = 0

    def __init__(self, norm_type: float, kernel_size, stride=None, ceil_mode: bool = False):
        super().__init__()
        self.norm_type, self.kernel_size = norm_type, kernel_size
        self.stride, self.ceil_mode = stride, ceil_mode

    def forward(self, x):
        fn = getattr(F, f"lp_pool{self._nd}d")
        return fn(x, self.norm_type, self.kernel_size, self.stride, self.ceil_mode)

    def extra_repr(self) -> str:
        return (
            f"norm_type={self.norm_type}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}, ceil_mode={self.ceil_mode}"
        )


class LPPool1d(_LPPoolNd):
    """1-D power-average pooling (see :func:`ferro.nn.functional.lp_pool1d`)."""

    _nd = 1


class LPPool2d(_LPPoolNd):
    """2-D power-average pooling (see :func:`ferro.nn.functional.lp_pool2d`)."""

    _nd = 2


class LPPool3d(_LPPoolNd):
    """3-D power-average pooling (see :func:`ferro.nn.functional.lp_pool3d`)."""

    _nd = 3


__all__ = [
    "AdaptiveAvgPool1d",
    "AdaptiveAvgPool2d",
    "AdaptiveAvgPool3d",
    "AdaptiveMaxPool1d",
    "AdaptiveMaxPool2d",
    "AdaptiveMaxPool3d",
    "AvgPool1d",
    "AvgPool2d",
    "AvgPool3d",
    "LPPool1d",
    "LPPool2d",
    "LPPool3d",
    "MaxPool1d",
    "MaxPool2d",
    "MaxPool3d",
    "MaxUnpool1d",
    "MaxUnpool2d",
    "MaxUnpool3d",
]
