"""Padding layers (constant, zero, reflection, replication, circular), as PyTorch's: padding
given as an int or as ``(left, right[, top, bottom[, front, back]])``, stored as that tuple."""

from __future__ import annotations

from ferro.errors import ArgumentError, ShapeError
from ferro.nn import functional as F
from ferro.nn.module import Module


def _padding(padding, nd, cls):
    if isinstance(padding, (tuple, list)):
        if len(padding) != 2 * nd:
            raise ArgumentError(
                f"{cls}: padding must be an int or {2 * nd} ints, got {tuple(padding)}"
            )
        return tuple(padding)
    return (padding,) * (2 * nd)


class _PadNd(Module):
    _nd = 0
    _mode = "constant"

    def __init__(self, padding) -> None:
        super().__init__()
        self.padding = _padding(padding, self._nd, type(self).__name__)

    def forward(self, x):
        nd = self._nd
        if x.ndim not in (nd + 1, nd + 2):
            raise ShapeError(
                f"{type(self).__name__}: expected a {nd + 1}-D or {nd + 2}-D input, got shape "
                f"{tuple(x.shape)}"
            )
        return F.pad(x, self.padding, self._mode)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class _ConstantPadNd(Module):
    _nd = 0

    def __init__(self, padding, value: float) -> None:
        super().__init__()
        self.value = value
        self.padding = _padding(padding, self._nd, type(self).__name__)

    def forward(self, x):
        return F.pad(x, self.padding, "constant", self.value)

    def extra_repr(self) -> str:
        return f"padding={self.padding}, value={self.value}"


class ConstantPad1d(_ConstantPadNd):
    """Pads the last dimension with ``value``."""

    _nd = 1


class ConstantPad2d(_ConstantPadNd):
    """Pads the last two dimensions with ``value``."""

    _nd = 2


class ConstantPad3d(_ConstantPadNd):
    """Pads the last three dimensions with ``value``."""

    _nd = 3


class ZeroPad1d(ConstantPad1d):
    """Pads the last dimension with zeros."""

    def __init__(self, padding) -> None:
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class ZeroPad2d(ConstantPad2d):
    """Pads the last two dimensions with zeros."""

    def __init__(self, padding) -> None:
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class ZeroPad3d(ConstantPad3d):
    """Pads the last three dimensions with zeros."""

    def __init__(self, padding) -> None:
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class ReflectionPad1d(_PadNd):
    """Pads the last dimension with its reflection (the edge not repeated)."""

    _nd, _mode = 1, "reflect"


class ReflectionPad2d(_PadNd):
    """Pads the last two dimensions with their reflection."""

    _nd, _mode = 2, "reflect"


class ReflectionPad3d(_PadNd):
    """Pads the last three dimensions with their reflection."""

    _nd, _mode = 3, "reflect"


class ReplicationPad1d(_PadNd):
    """Pads the last dimension by repeating its edge."""

    _nd, _mode = 1, "replicate"


class ReplicationPad2d(_PadNd):
    """Pads the last two dimensions by repeating their edges."""

    _nd, _mode = 2, "replicate"


class ReplicationPad3d(_PadNd):
    """Pads the last three dimensions by repeating their edges."""

    _nd, _mode = 3, "replicate"


class CircularPad1d(_PadNd):
    """Pads the last dimension by wrapping around."""

    _nd, _mode = 1, "circular"


class CircularPad2d(_PadNd):
    """Pads the last two dimensions by wrapping around."""

    _nd, _mode = 2, "circular"


class CircularPad3d(_PadNd):
    """Pads the last three dimensions by wrapping around."""

    _nd, _mode = 3, "circular"


__all__ = [
    "CircularPad1d",
    "CircularPad2d",
    "CircularPad3d",
    "ConstantPad1d",
    "ConstantPad2d",
    "ConstantPad3d",
    "ReflectionPad1d",
    "ReflectionPad2d",
    "ReflectionPad3d",
    "ReplicationPad1d",
    "ReplicationPad2d",
    "ReplicationPad3d",
    "ZeroPad1d",
    "ZeroPad2d",
    "ZeroPad3d",
]
