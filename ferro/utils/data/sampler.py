"""Samplers, as ``torch.utils.data.sampler``: iterables of dataset indices (or of lists of
indices, for :class:`BatchSampler`) that decide the order a ``DataLoader`` visits samples in.

The random samplers draw from the ``generator`` given, or from a fresh generator seeded by one
draw of ferro's default generator each time they are iterated (as PyTorch does), so
``ferro.manual_seed`` reproduces an epoch's order. The orders differ from PyTorch's for the same
seed (a different generator); lengths, coverage and replacement are the same.
"""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Iterable, Iterator, Sequence, Sized
from typing import Generic, TypeVar

import numpy as np

from ferro._C.tensor import TensorBase
from ferro.errors import ArgumentError, ArgumentTypeError, NotSupportedError, ShapeError
from ferro.random import Generator, numpy_generator

T_co = TypeVar("T_co", covariant=True)

# PyTorch draws replacement samples 32 at a time, so a long epoch does not hold them all.
_CHUNK = 32


def _positive_int(value, name: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ArgumentTypeError(f"{where}: {name} must be an int, got {type(value).__name__}")
    if value <= 0:
        raise ArgumentError(f"{where}: {name} must be positive, got {value}")
    return int(value)


def _bool(value, name: str, where: str) -> bool:
    if not isinstance(value, bool):
        raise ArgumentTypeError(f"{where}: {name} must be a bool, got {type(value).__name__}")
    return value


def _epoch_rng(generator, where: str) -> np.random.Generator:
    """The NumPy generator for one pass: ``generator``'s, or a fresh one seeded by one draw of
    the default generator (so iterating never advances the default stream by more than that)."""
    if generator is not None:
        return numpy_generator(generator, where)
    seed = int(numpy_generator(None, where).integers(0, 2**63, dtype=np.int64))
    return numpy_generator(Generator().manual_seed(seed), where)


class Sampler(Generic[T_co]):
    """Base class: subclasses define ``__iter__`` (yielding indices) and usually ``__len__``."""

    def __init__(self, data_source: Sized | None = None) -> None:
        pass

    def __iter__(self) -> Iterator[T_co]:
        raise NotSupportedError(f"{type(self).__name__} must define __iter__")


class SequentialSampler(Sampler[int]):
    """``0, 1, ..., len(data_source) - 1``."""

    def __init__(self, data_source: Sized) -> None:
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler[int]):
    """Indices of ``data_source`` in random order.

    Without replacement each pass is a permutation (``num_samples`` larger than the dataset
    chains several); with replacement ``num_samples`` indices are drawn independently.

    Args:
        data_source: the dataset (only its length is used).
        replacement: draw with replacement.
        num_samples: how many indices a pass yields (default: ``len(data_source)``).
        generator: a ``ferro.Generator`` to draw from (default: see the module docstring).
    """

    def __init__(
        self,
        data_source: Sized,
        replacement: bool = False,
        num_samples: int | None = None,
        generator: Generator | None = None,
    ) -> None:
        self.data_source = data_source
        self.replacement = _bool(replacement, "replacement", "RandomSampler")
        self._num_samples = num_samples
        self.generator = generator
        _positive_int(self.num_samples, "num_samples", "RandomSampler")
        numpy_generator(generator, "RandomSampler")

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self) -> Iterator[int]:
        n = len(self.data_source)
        if n == 0:
            raise ArgumentError("RandomSampler: cannot draw indices of an empty dataset")
        rng = _epoch_rng(self.generator, "RandomSampler")
        if self.replacement:
            for start in range(0, self.num_samples, _CHUNK):
                k = min(_CHUNK, self.num_samples - start)
                yield from rng.integers(0, n, size=k, dtype=np.int64).tolist()
        else:
            for _ in range(self.num_samples // n):
                yield from rng.permutation(n).tolist()
            yield from rng.permutation(n)[: self.num_samples % n].tolist()

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler[int]):
    """The given indices in random order (without replacement)."""

    def __init__(self, indices: Sequence[int], generator: Generator | None = None) -> None:
        self.indices = indices
        self.generator = generator
        numpy_generator(generator, "SubsetRandomSampler")

    def __iter__(self) -> Iterator[int]:
        rng = numpy_generator(self.generator, "SubsetRandomSampler")
        for i in rng.permutation(len(self.indices)).tolist():
            yield self.indices[i]

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler[int]):
    """``num_samples`` indices in ``[0, len(weights))``, index ``i`` drawn with probability
    proportional to ``weights[i]``; without replacement an index is drawn at most once.

    Raises:
        ShapeError: ``weights`` is not one-dimensional.
        ArgumentError: a negative or non-finite weight, all weights zero, or (without
            replacement) fewer positive weights than ``num_samples``.
    """

    def __init__(
        self,
        weights: Sequence[float],
        num_samples: int,
        replacement: bool = True,
        generator: Generator | None = None,
    ) -> None:
        self.num_samples = _positive_int(num_samples, "num_samples", "WeightedRandomSampler")
        self.replacement = _bool(replacement, "replacement", "WeightedRandomSampler")
        w = weights.numpy() if isinstance(weights, TensorBase) else weights
        try:
            w = np.array(w, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ArgumentTypeError(
                f"WeightedRandomSampler: weights must be a sequence of numbers ({exc})"
            ) from None
        if w.ndim != 1:
            raise ShapeError(
                f"WeightedRandomSampler: weights must be one-dimensional, got shape {w.shape}"
            )
        if not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
            raise ArgumentError(
                "WeightedRandomSampler: weights must be finite and non-negative with a positive sum"
            )
        if not replacement and self.num_samples > np.count_nonzero(w):
            raise ArgumentError(
                f"WeightedRandomSampler: cannot draw {self.num_samples} distinct indices "
                f"without replacement from {np.count_nonzero(w)} positive weights"
            )
        numpy_generator(generator, "WeightedRandomSampler")
        self.weights = w
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        rng = numpy_generator(self.generator, "WeightedRandomSampler")
        p = self.weights / self.weights.sum()
        draws = rng.choice(len(p), size=self.num_samples, replace=self.replacement, p=p)
        yield from draws.tolist()

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler[list[int]]):
    """Lists of ``batch_size`` indices from ``sampler``; the last one shorter unless
    ``drop_last``.

    Example:
        >>> list(BatchSampler(SequentialSampler(range(5)), batch_size=2, drop_last=False))
        [[0, 1], [2, 3], [4]]
    """

    def __init__(
        self, sampler: Sampler[int] | Iterable[int], batch_size: int, drop_last: bool
    ) -> None:
        self.sampler = sampler
        self.batch_size = _positive_int(batch_size, "batch_size", "BatchSampler")
        self.drop_last = _bool(drop_last, "drop_last", "BatchSampler")

    def __iter__(self) -> Iterator[list[int]]:
        it = iter(self.sampler)
        while batch := list(itertools.islice(it, self.batch_size)):
            if self.drop_last and len(batch) < self.batch_size:
                return
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


__all__ = [
    "Sampler",
    "SequentialSampler",
    "RandomSampler",
    "SubsetRandomSampler",
    "WeightedRandomSampler",
    "BatchSampler",
]
