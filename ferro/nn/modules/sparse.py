"""Embedding and EmbeddingBag."""

from __future__ import annotations

from ferro.creation import empty
from ferro.errors import (
    IndexOutOfRangeError,
    ShapeError,
)
from ferro.nn import functional as F
from ferro.nn import init
from ferro.nn.module import Module
from ferro.nn.parameter import Parameter


def _table(
    module,
    kind,
    num_embeddings,
    embedding_dim,
    padding_idx,
    max_norm,
    norm_type,
    scale_grad_by_freq,
    sparse,
    _weight,
    _freeze,
    dtype,
):
    """Set up the lookup table of an Embedding or EmbeddingBag: refuse the options ferro lacks,
    check ``padding_idx``, and make ``weight`` (drawn by ``reset_parameters``, or ``_weight``)."""
    F._embedding_options(kind, max_norm, scale_grad_by_freq, sparse)
    module.num_embeddings, module.embedding_dim = num_embeddings, embedding_dim
    if padding_idx is not None:
        if not -num_embeddings <= padding_idx < num_embeddings:
            raise IndexOutOfRangeError(
                f"{kind}: padding_idx {padding_idx} is out of range for {num_embeddings} embeddings"
            )
        padding_idx %= num_embeddings
    module.padding_idx = padding_idx
    module.max_norm, module.norm_type = max_norm, norm_type
    module.scale_grad_by_freq, module.sparse = scale_grad_by_freq, sparse
    if _weight is None:
        module.weight = Parameter(
            empty(num_embeddings, embedding_dim, dtype=dtype), requires_grad=not _freeze
        )
        module.reset_parameters()
    else:
        if tuple(_weight.shape) != (num_embeddings, embedding_dim):
            raise ShapeError(
                f"{kind}: _weight has shape {tuple(_weight.shape)}, expected "
                f"{(num_embeddings, embedding_dim)}"
            )
        module.weight = Parameter(_weight, requires_grad=not _freeze)


def _pretrained(cls, embeddings, **kwargs):
    if embeddings.ndim != 2:
        raise ShapeError(
            f"{cls.__name__}.from_pretrained: embeddings must be 2-D, got shape "
            f"{tuple(embeddings.shape)}"
        )
    rows, cols = embeddings.shape
    return cls(rows, cols, _weight=embeddings, **kwargs)


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
        _table(
            self,
            "Embedding",
            num_embeddings,
            embedding_dim,
            padding_idx,
            max_norm,
            norm_type,
            scale_grad_by_freq,
            sparse,
            _weight,
            _freeze,
            dtype,
        )
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
        return _pretrained(
            cls,
            embeddings,
            _freeze=freeze,
            padding_idx=padding_idx,
            max_norm=max_norm,
            norm_type=norm_type,
            scale_grad_by_freq=scale_grad_by_freq,
            sparse=sparse,
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


class EmbeddingBag(Module):
    """Sums, means or maxima (``mode``) of bags of embeddings, as PyTorch's
    ``nn.EmbeddingBag`` (the bags as in :func:`ferro.nn.functional.embedding_bag`). The weight
    is drawn as Embedding's, with the ``padding_idx`` row zero; ``max_norm``,
    ``scale_grad_by_freq`` and ``sparse`` are not supported (NotSupportedError).
    """

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        mode: str = "mean",
        sparse: bool = False,
        _weight=None,
        include_last_offset: bool = False,
        padding_idx: int | None = None,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        F._embedding_options("EmbeddingBag", None, False, False, mode)
        self.mode, self.include_last_offset = mode, include_last_offset
        _table(
            self,
            "EmbeddingBag",
            num_embeddings,
            embedding_dim,
            padding_idx,
            max_norm,
            norm_type,
            scale_grad_by_freq,
            sparse,
            _weight,
            False,
            dtype,
        )
        if device is not None:
            self.to(device)

    @classmethod
    def from_pretrained(
        cls,
        embeddings,
        freeze: bool = True,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        mode: str = "mean",
        sparse: bool = False,
        include_last_offset: bool = False,
        padding_idx: int | None = None,
    ) -> EmbeddingBag:
        """An EmbeddingBag whose weight is ``embeddings`` (2-D, shared), frozen unless
        ``freeze=False``."""
        bag = _pretrained(
            cls,
            embeddings,
            max_norm=max_norm,
            norm_type=norm_type,
            scale_grad_by_freq=scale_grad_by_freq,
            mode=mode,
            sparse=sparse,
            include_last_offset=include_last_offset,
            padding_idx=padding_idx,
        )
        bag.weight.requires_grad = not freeze
        return bag

    reset_parameters = Embedding.reset_parameters

    def forward(self, input, offsets=None, per_sample_weights=None):  # noqa: A002
        return F.embedding_bag(
            input,
            self.weight,
            offsets,
            mode=self.mode,
            per_sample_weights=per_sample_weights,
            include_last_offset=self.include_last_offset,
            padding_idx=self.padding_idx,
        )

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.norm_type != 2:
            s += f", norm_type={self.norm_type}"
        s += f", mode={self.mode!r}"
        if self.include_last_offset:
            s += ", include_last_offset=True"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        return s


__all__ = ["Embedding", "EmbeddingBag"]
