"""Embedding."""

from __future__ import annotations

from ferro.creation import empty
from ferro.errors import (
    IndexOutOfRangeError,
    NotSupportedError,
    ShapeError,
)
from ferro.nn import functional as F
from ferro.nn import init
from ferro.nn.module import Module
from ferro.nn.parameter import Parameter


class Embedding(Module):
    """A lookup table of ``num_embeddings`` vectors of size ``embedding_dim`` (N(0, 1) init; the
    ``padding_idx`` row zero and never updated).

    Indices must lie in ``[0, num_embeddings)``; any other raises IndexOutOfRangeError.
    ``max_norm``, ``scale_grad_by_freq`` and ``sparse`` are not supported (NotSupportedError).
    """

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
        _weight=None,
        _freeze: bool = False,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        for name, value, default in (
            ("max_norm", max_norm, None),
            ("scale_grad_by_freq", scale_grad_by_freq, False),
            ("sparse", sparse, False),
        ):
            if value != default:
                raise NotSupportedError(
                    f"Embedding: {name}={value!r} is not supported by ferro; renormalize or "
                    "scale the weight explicitly instead"
                )
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise IndexOutOfRangeError(
                    f"Embedding: padding_idx {padding_idx} is out of range for {num_embeddings} "
                    "embeddings"
                )
            padding_idx %= num_embeddings
        self.padding_idx = padding_idx
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse
        if _weight is None:
            self.weight = Parameter(
                empty(num_embeddings, embedding_dim, dtype=dtype), requires_grad=not _freeze
            )
            self.reset_parameters()
        else:
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise ShapeError(
                    f"Embedding: _weight has shape {tuple(_weight.shape)}, expected "
                    f"{(num_embeddings, embedding_dim)}"
                )
            self.weight = Parameter(_weight, requires_grad=not _freeze)
        if device is not None:
            self.to(device)

    @classmethod
    def from_pretrained(
        cls,
        embeddings,
        freeze: bool = True,
        padding_idx: int | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
    ) -> Embedding:
        """An Embedding whose weight is ``embeddings`` (2-D, shared), frozen unless
        ``freeze=False``."""
        if embeddings.ndim != 2:
            raise ShapeError(
                f"Embedding.from_pretrained: embeddings must be 2-D, got shape "
                f"{tuple(embeddings.shape)}"
            )
        rows, cols = embeddings.shape
        return cls(
            rows,
            cols,
            padding_idx,
            max_norm,
            norm_type,
            scale_grad_by_freq,
            sparse,
            _weight=embeddings,
            _freeze=freeze,
        )

    def reset_parameters(self) -> None:
        """Draw the weight again from N(0, 1), with the padding row zero."""
        init.normal_(self.weight)
        if self.padding_idx is not None:
            self.weight._data[self.padding_idx] = 0

    def forward(self, indices):
        return F.embedding(indices, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        if self.norm_type != 2:
            s += f", norm_type={self.norm_type}"
        return s


__all__ = ["Embedding"]
