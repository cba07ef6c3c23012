"""Flatten and Unflatten."""

from __future__ import annotations

import math

from ferro.errors import ArgumentTypeError, IndexOutOfRangeError, ShapeError
from ferro.nn import functional as F
from ferro.nn.module import Module


class Flatten(Module):
    """Flattens dimensions ``start_dim..end_dim`` (default: all but the batch dimension)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return F.flatten(x, self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Splits dimension ``dim`` into ``unflattened_size`` (one entry may be -1), the inverse of
    :class:`Flatten`: ``Unflatten(1, (2, 3))`` maps ``(N, 6)`` to ``(N, 2, 3)``."""

    def __init__(self, dim: int, unflattened_size) -> None:
        super().__init__()
        if not isinstance(unflattened_size, (tuple, list)):
            raise ArgumentTypeError(
                f"Unflatten: unflattened_size must be a tuple of ints, got {unflattened_size!r}"
            )
        self.dim, self.unflattened_size = dim, unflattened_size

    def forward(self, x):
        d = self.dim + x.ndim if self.dim < 0 else self.dim
        if not 0 <= d < x.ndim:
            raise IndexOutOfRangeError(
                f"Unflatten: dim {self.dim} is out of range for an input of shape {tuple(x.shape)}"
            )
        size = tuple(self.unflattened_size)
        known = math.prod(s for s in size if s != -1)
        if size.count(-1) > 1 or (
            x.shape[d] != known if -1 not in size else known == 0 or x.shape[d] % known
        ):
            raise ShapeError(
                f"Unflatten: unflattened_size {size} does not fit dim {d} of size {x.shape[d]} "
                f"(input shape {tuple(x.shape)})"
            )
        return x.reshape(tuple(x.shape[:d]) + size + tuple(x.shape[d + 1 :]))

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


__all__ = ["Flatten", "Unflatten"]
