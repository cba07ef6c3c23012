"""Dropout."""

from __future__ import annotations

from ferro.errors import (
    ArgumentError,
)
from ferro.nn import functional as F
from ferro.nn.module import Module


class Dropout(Module):
    """Dropout with probability ``p`` in training mode; the identity in eval mode.

    ``inplace=True`` is accepted (PyTorch's signature) but ferro computes out of place: the
    result is the same, the input is not overwritten.
    """

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ArgumentError(f"Dropout: p must be in [0, 1], got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, x):
        return F.dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


__all__ = ["Dropout"]
