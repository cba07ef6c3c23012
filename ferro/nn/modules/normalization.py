"""Normalization layers: BatchNorm1d/2d/3d, InstanceNorm1d/2d/3d, LayerNorm, GroupNorm, RMSNorm
and LocalResponseNorm, with PyTorch's parameter and buffer names (``weight``, ``bias``,
``running_mean``, ``running_var``, ``num_batches_tracked``), defaults and reprs, so a PyTorch
``state_dict`` loads unchanged."""

from __future__ import annotations

import numbers

import numpy as np

from ferro._C.engine import bump_version
from ferro.creation import empty, ones, tensor, zeros
from ferro.errors import ArgumentError, ArgumentTypeError, ShapeError
from ferro.nn import functional as F
from ferro.nn import init
from ferro.nn.module import Module
from ferro.nn.parameter import Parameter


class _NormBase(Module):
    """What batch and instance norm share: ``num_features`` channels, an optional per-channel
    affine (weight ones, bias zeros) and optional running statistics (mean zeros, variance ones,
    and a ``num_batches_tracked`` count)."""

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device=None,
        dtype=None,
        *,
        bias: bool = True,
    ) -> None:
        super().__init__()
        if not isinstance(num_features, numbers.Integral) or num_features < 0:
            raise ArgumentError(
                f"{type(self).__name__}: num_features must be a non-negative int, got "
                f"{num_features!r}"
            )
        self.num_features, self.eps, self.momentum = int(num_features), eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        if affine:
            self.weight = Parameter(empty(num_features, dtype=dtype))
            if bias:
                self.bias = Parameter(empty(num_features, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, dtype=dtype))
            self.register_buffer("running_var", ones(num_features, dtype=dtype))
            self.register_buffer("num_batches_tracked", tensor(0, dtype=np.int64))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)
        self.reset_parameters()
        if device is not None:
            self.to(device)

    def reset_running_stats(self) -> None:
        """Running mean zeros, running variance ones, no batches tracked."""
        if self.track_running_stats:
            init.zeros_(self.running_mean)
            init.ones_(self.running_var)
            init.zeros_(self.num_batches_tracked)

    def reset_parameters(self) -> None:
        """Reset the running statistics, weight ones and bias zeros."""
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
            f"affine={self.affine}, bias={self.bias is not None}, "
            f"track_running_stats={self.track_running_stats}"
        )


def _dims_error(layer: str, expected: str, x) -> ShapeError:
    return ShapeError(
        f"{layer}: expected {expected} input (got {x.ndim}D input of shape {x.shape})"
    )


class _BatchNorm(_NormBase):
    """Batch normalization over (N, C, *): batch statistics in training (updating the running
    ones when tracked), running statistics in evaluation; ``momentum=None`` averages all batches
    seen (``1 / num_batches_tracked``)."""

    _dims: tuple = ()

    def _check_input_dim(self, x) -> None:
        if x.ndim not in self._dims:
            expected = " or ".join(f"{d}D" for d in self._dims)
            raise _dims_error(type(self).__name__, expected, x)

    def forward(self, x):
        self._check_input_dim(x)
        name = type(self).__name__
        # Checked before the count moves: a failed forward leaves the module as it was.
        if x.shape[1] != self.num_features:
            raise ShapeError(
                f"{name}: expected input with {self.num_features} channels (dim 1), got input "
                f"of shape {x.shape}"
            )
        if self.training and x.numel() // max(x.shape[1], 1) <= 1:
            raise ShapeError(
                f"{name}: Expected more than 1 value per channel when training, got input of "
                f"shape {x.shape}"
            )
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked._data[...] += 1
            bump_version(self.num_batches_tracked)
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked.item())
        use_batch = self.training or (self.running_mean is None and self.running_var is None)
        keep = not self.training or self.track_running_stats
        return F.batch_norm(
            x,
            self.running_mean if keep else None,
            self.running_var if keep else None,
            self.weight,
            self.bias,
            use_batch,
            factor,
            self.eps,
        )


class BatchNorm1d(_BatchNorm):
    """Batch normalization of (N, C) or (N, C, L) input.

    Example:
        >>> bn = ferro.nn.BatchNorm1d(4)
        >>> y = bn(ferro.randn(8, 4))  # training: batch statistics; running ones updated
    """

    _dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalization of (N, C, H, W) input."""

    _dims = (4,)


class BatchNorm3d(_BatchNorm):
    """Batch normalization of (N, C, D, H, W) input."""

    _dims = (5,)


class _InstanceNorm(_NormBase):
    """Instance normalization: each (sample, channel) over its spatial dimensions; unbatched
    input (C, *) is accepted. No affine and no running statistics by default, as in PyTorch."""

    _spatial = 0

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = False,
        track_running_stats: bool = False,
        device=None,
        dtype=None,
        *,
        bias: bool = True,
    ) -> None:
        super().__init__(
            num_features, eps, momentum, affine, track_running_stats, device, dtype, bias=bias
        )

    def _check_input_dim(self, x) -> None:
        d = self._spatial + 1
        if x.ndim not in (d, d + 1):
            raise _dims_error(type(self).__name__, f"{d}D or {d + 1}D", x)

    def forward(self, x):
        self._check_input_dim(x)
        unbatched = x.ndim == self._spatial + 1
        channel = 0 if unbatched else 1
        if self.affine and x.shape[channel] != self.num_features:
            # (PyTorch only warns without affine, where num_features is not used)
            raise ShapeError(
                f"{type(self).__name__}: expected input's size at dim={channel} to match "
                f"num_features ({self.num_features}), but got: {x.shape[channel]}"
            )
        if unbatched:
            x = x.reshape((1, *x.shape))
        y = F.instance_norm(
            x,
            self.running_mean,
            self.running_var,
            self.weight,
            self.bias,
            self.training or not self.track_running_stats,
            0.0 if self.momentum is None else self.momentum,
            self.eps,
        )
        return y.reshape(y.shape[1:]) if unbatched else y


class InstanceNorm1d(_InstanceNorm):
    """Instance normalization of (N, C, L) or (C, L) input."""

    _spatial = 1


class InstanceNorm2d(_InstanceNorm):
    """Instance normalization of (N, C, H, W) or (C, H, W) input."""

    _spatial = 2


class InstanceNorm3d(_InstanceNorm):
    """Instance normalization of (N, C, D, H, W) or (C, D, H, W) input."""

    _spatial = 3


def _shape_arg(normalized_shape, layer: str) -> tuple:
    if isinstance(normalized_shape, numbers.Integral) and not isinstance(normalized_shape, bool):
        return (int(normalized_shape),)
    try:
        return tuple(int(s) for s in normalized_shape)
    except TypeError:
        raise ArgumentTypeError(
            f"{layer}: normalized_shape must be an int or a sequence of ints, got "
            f"{normalized_shape!r}"
        ) from None


class LayerNorm(Module):
    """Layer normalization over the trailing ``normalized_shape`` dimensions, with an
    elementwise affine (weight ones, bias zeros) unless ``elementwise_affine=False``;
    ``bias=False`` drops the bias only.

    Example:
        >>> ln = ferro.nn.LayerNorm(16)
        >>> y = ln(ferro.randn(4, 10, 16))
    """

    def __init__(
        self,
        normalized_shape,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        self.normalized_shape = _shape_arg(normalized_shape, "LayerNorm")
        self.eps, self.elementwise_affine = eps, elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(empty(*self.normalized_shape, dtype=dtype))
            if bias:
                self.bias = Parameter(empty(*self.normalized_shape, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.reset_parameters()
        if device is not None:
            self.to(device)

    def reset_parameters(self) -> None:
        """Weight ones, bias zeros."""
        if self.weight is not None:
            init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, "
            f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}"
        )


class GroupNorm(Module):
    """Group normalization: ``num_channels`` channels in ``num_groups`` groups, each normalized
    over its channels and the spatial dimensions, then a per-channel affine.

    Example:
        >>> gn = ferro.nn.GroupNorm(2, 6)
        >>> y = gn(ferro.randn(3, 6, 5, 5))
    """

    def __init__(
        self,
        num_groups: int,
        num_channels: int,
        eps: float = 1e-5,
        affine: bool = True,
        device=None,
        dtype=None,
        *,
        bias: bool = True,
    ) -> None:
        super().__init__()
        if num_groups <= 0 or num_channels % num_groups:
            raise ShapeError(
                f"GroupNorm: num_channels must be divisible by num_groups, got "
                f"num_channels={num_channels}, num_groups={num_groups}"
            )
        self.num_groups, self.num_channels = num_groups, num_channels
        self.eps, self.affine = eps, affine
        if affine:
            self.weight = Parameter(empty(num_channels, dtype=dtype))
            if bias:
                self.bias = Parameter(empty(num_channels, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.reset_parameters()
        if device is not None:
            self.to(device)

    def reset_parameters(self) -> None:
        """Weight ones, bias zeros."""
        if self.weight is not None:
            init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)

    def forward(self, x):
        return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
            f"bias={self.bias is not None}"
        )


class RMSNorm(Module):
    """Root-mean-square normalization over the trailing ``normalized_shape`` dimensions, with
    an elementwise weight (ones) unless ``elementwise_affine=False``; ``eps=None`` is the input
    dtype's machine epsilon.

    Example:
        >>> y = ferro.nn.RMSNorm(16)(ferro.randn(4, 16))
    """

    def __init__(
        self,
        normalized_shape,
        eps: float | None = None,
        elementwise_affine: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        self.normalized_shape = _shape_arg(normalized_shape, "RMSNorm")
        self.eps, self.elementwise_affine = eps, elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(empty(*self.normalized_shape, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()
        if device is not None:
            self.to(device)

    def reset_parameters(self) -> None:
        """Weight ones."""
        if self.weight is not None:
            init.ones_(self.weight)

    def forward(self, x):
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
        )


class LocalResponseNorm(Module):
    """Local response normalization across channels (no parameters).

    Example:
        >>> y = ferro.nn.LocalResponseNorm(3)(ferro.randn(2, 8, 5, 5))
    """

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, x):
        return F.local_response_norm(x, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


__all__ = [
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "GroupNorm",
    "InstanceNorm1d",
    "InstanceNorm2d",
    "InstanceNorm3d",
    "LayerNorm",
    "LocalResponseNorm",
    "RMSNorm",
]
