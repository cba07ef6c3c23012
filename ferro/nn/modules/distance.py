"""CosineSimilarity and PairwiseDistance."""

from __future__ import annotations

from ferro.nn import functional as F
from ferro.nn.module import Module


class CosineSimilarity(Module):
    """``cosine_similarity(x1, x2, dim, eps)`` as a module (PyTorch shows no arguments in its
    repr, and neither does ferro)."""

    def __init__(self, dim: int = 1, eps: float = 1e-8) -> None:
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1, x2):
        return F.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    """``pairwise_distance(x1, x2, p, eps, keepdim)`` as a module."""

    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> None:
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1, x2):
        return F.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)


__all__ = ["CosineSimilarity", "PairwiseDistance"]
