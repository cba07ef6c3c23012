"""Datasets, as ``torch.utils.data.dataset``: map-style (``__getitem__`` and ``__len__``) and
iterable-style (``__iter__``), and the ways to combine and split them."""

from __future__ import annotations

import bisect
import itertools
import math
import numbers
import warnings
from collections.abc import Iterable, Sequence
from typing import Generic, TypeVar

from ferro._C.tensor import TensorBase
from ferro.errors import (
    ArgumentError,
    ArgumentTypeError,
    IndexOutOfRangeError,
    NotSupportedError,
    ShapeError,
)
from ferro.random import Generator, default_generator, numpy_generator

T_co = TypeVar("T_co", covariant=True)


class Dataset(Generic[T_co]):
    """A map-style dataset: subclasses define ``__getitem__(index)`` and usually ``__len__``.

    ``Dataset[T]`` may annotate the sample type, as in PyTorch; ``a + b`` concatenates.
    A subclass may also define ``__getitems__(indices)`` returning a list of samples, which
    ``DataLoader`` then calls once per batch instead of ``__getitem__`` per sample.
    """

    def __getitem__(self, index) -> T_co:
        raise NotSupportedError(f"{type(self).__name__} must define __getitem__")

    def __add__(self, other: Dataset[T_co]) -> ConcatDataset[T_co]:
        return ConcatDataset([self, other])


class IterableDataset(Dataset[T_co]):
    """An iterable-style dataset: subclasses define ``__iter__``.

    With ``DataLoader(num_workers=n)`` each worker process iterates its own copy, so ``__iter__``
    should split the stream by :func:`ferro.utils.data.get_worker_info` (or every sample comes
    ``n`` times). ``a + b`` chains.

    Example:
        >>> class Range(IterableDataset):
        ...     def __iter__(self):
        ...         info = get_worker_info()
        ...         return iter(range(10) if info is None else range(info.id, 10, info.num_workers))
    """

    def __iter__(self):
        raise NotSupportedError(f"{type(self).__name__} must define __iter__")

    def __add__(self, other: Dataset[T_co]) -> ChainDataset:
        return ChainDataset([self, other])


class TensorDataset(Dataset):
    """Samples are the ``i``-th rows of tensors that share their first dimension.

    ``DataLoader`` batches it by indexing each tensor once per batch rather than stacking rows.
    """

    def __init__(self, *tensors) -> None:
        if not tensors:
            raise ArgumentError("TensorDataset: give at least one tensor")
        for t in tensors:
            if not isinstance(t, TensorBase):
                raise ArgumentTypeError(f"TensorDataset: expected Tensors, got {type(t).__name__}")
            if t.ndim == 0:
                raise ShapeError("TensorDataset: a 0-d tensor has no rows to index")
        if len({t.shape[0] for t in tensors}) != 1:
            raise ShapeError(
                f"TensorDataset: first dimensions differ: {[tuple(t.shape) for t in tensors]}"
            )
        self.tensors = tensors

    def __len__(self) -> int:
        return self.tensors[0].shape[0]

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)


class ConcatDataset(Dataset[T_co]):
    """The samples of several map-style datasets, one after the other."""

    def __init__(self, datasets: Iterable[Dataset]) -> None:
        self.datasets = list(datasets)
        if not self.datasets:
            raise ArgumentError("ConcatDataset: give at least one dataset")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise ArgumentTypeError(
                    "ConcatDataset: an IterableDataset cannot be indexed; chain iterable "
                    "datasets with ChainDataset"
                )
        self.cumulative_sizes = list(itertools.accumulate(len(d) for d in self.datasets))

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, index):
        n = len(self)
        if not -n <= index < n:
            raise IndexOutOfRangeError(
                f"ConcatDataset: index {index} is out of range for {n} samples"
            )
        if index < 0:
            index += n
        d = bisect.bisect_right(self.cumulative_sizes, index)
        return self.datasets[d][index - (self.cumulative_sizes[d - 1] if d else 0)]


class ChainDataset(IterableDataset):
    """The samples of several iterable datasets, one stream after the other."""

    def __init__(self, datasets: Iterable[Dataset]) -> None:
        self.datasets = datasets

    def __iter__(self):
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise ArgumentTypeError(
                    f"ChainDataset: expected IterableDatasets, got {type(d).__name__}"
                )
            yield from d

    def __len__(self) -> int:
        return sum(len(d) for d in self.datasets)


class Subset(Dataset[T_co]):
    """The samples of ``dataset`` at ``indices``, in that order."""

    def __init__(self, dataset: Dataset[T_co], indices: Sequence[int]) -> None:
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, index):
        if isinstance(index, list):
            return self.dataset[[self.indices[i] for i in index]]
        return self.dataset[self.indices[index]]

    def __getitems__(self, indices: list[int]) -> list:
        rows = [self.indices[i] for i in indices]
        # A subclass that redefines __getitem__ gets it called, not bypassed.
        if type(self).__getitem__ is not Subset.__getitem__:
            return [self[i] for i in indices]
        getitems = getattr(self.dataset, "__getitems__", None)
        if getitems is not None:
            return getitems(rows)
        return [self.dataset[r] for r in rows]

    def __len__(self) -> int:
        return len(self.indices)


def random_split(
    dataset: Dataset[T_co],
    lengths: Sequence[int | float],
    generator: Generator | None = default_generator,
) -> list[Subset[T_co]]:
    """Split ``dataset`` at random into non-overlapping :class:`Subset` s of the given lengths.

    ``lengths`` are sample counts that sum to ``len(dataset)``, or fractions that sum to 1: then
    split ``i`` gets ``floor(len(dataset) * lengths[i])`` samples and what is left over goes one
    each to the first splits, as in PyTorch.

    Raises:
        ArgumentError: a fraction outside [0, 1], or counts that do not sum to ``len(dataset)``.

    Example:
        >>> train, val = random_split(range(10), [0.8, 0.2], generator=Generator().manual_seed(0))
        >>> len(train), len(val)
        (8, 2)
    """
    rng = numpy_generator(generator, "random_split")
    n = len(dataset)
    lengths = list(lengths)
    for v in lengths:
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise ArgumentTypeError(
                f"random_split: lengths must be ints or fractions, got {type(v).__name__}"
            )
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        for i, frac in enumerate(lengths):
            if not 0 <= frac <= 1:
                raise ArgumentError(f"random_split: fraction {i} ({frac}) is not in [0, 1]")
        counts = [math.floor(n * frac) for frac in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        for i, c in enumerate(counts):
            if c == 0:
                warnings.warn(f"random_split: split {i} is empty", stacklevel=2)
        lengths = counts
    if any(not isinstance(v, numbers.Integral) or v < 0 for v in lengths) or sum(lengths) != n:
        raise ArgumentError(
            f"random_split: lengths {lengths} must be non-negative counts summing to the "
            f"dataset's {n} samples, or fractions summing to 1"
        )
    order = rng.permutation(n).tolist()
    ends = list(itertools.accumulate(lengths))
    return [Subset(dataset, order[end - k : end]) for end, k in zip(ends, lengths, strict=True)]


__all__ = [
    "Dataset",
    "IterableDataset",
    "TensorDataset",
    "ConcatDataset",
    "ChainDataset",
    "Subset",
    "random_split",
]
