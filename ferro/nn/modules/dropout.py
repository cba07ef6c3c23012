"""Dropout."""

from __future__ import annotations

from ferro.errors import (
    ArgumentError,
)
from ferro.nn import functional as F
from ferro.nn.module import Module


class _DropoutNd(Module):
    """Dropout with probability ``p`` in training mode, the identity in eval mode; with
    ``inplace=True`` the result is written into the input (as PyTorch does)."""

    _fn = staticmethod(F.dropout)

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ArgumentError(f"{type(self).__name__}: p must be in [0, 1], got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, x):
        return self._fn(x, self.p, self.training, inplace=self.inplace)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class Dropout(_DropoutNd):
    """Dropout with probability ``p`` in training mode; the identity in eval mode."""


class Dropout1d(_DropoutNd):
    """Channel dropout of ``(N, C, L)`` inputs (:func:`ferro.nn.functional.dropout1d`)."""

    _fn = staticmethod(F.dropout1d)


class Dropout2d(_DropoutNd):
    """Channel dropout of ``(N, C, H, W)`` inputs (:func:`ferro.nn.functional.dropout2d`)."""

    _fn = staticmethod(F.dropout2d)


class Dropout3d(_DropoutNd):
    """Channel dropout of ``(N, C, D, H, W)`` inputs (:func:`ferro.nn.functional.dropout3d`)."""

    _fn = staticmethod(F.dropout3d)


class AlphaDropout(_DropoutNd):
    """Dropout that keeps SELU's self-normalization (:func:`ferro.nn.functional.alpha_dropout`)."""

    _fn = staticmethod(F.alpha_dropout)


class FeatureAlphaDropout(_DropoutNd):
    """Alpha dropout of whole channels (:func:`ferro.nn.functional.feature_alpha_dropout`)."""

    _fn = staticmethod(F.feature_alpha_dropout)


__all__ = [
    "AlphaDropout",
    "Dropout",
    "Dropout1d",
    "Dropout2d",
    "Dropout3d",
    "FeatureAlphaDropout",
]
