"""In-memory data: ``TensorDataset`` and ``DataLoader`` (batching, shuffling with ferro's
generator, ``drop_last``)."""

from __future__ import annotations

import numpy as np

from ferro._C.tensor import TensorBase, wrap
from ferro.errors import ArgumentError, ArgumentTypeError, ShapeError
from ferro.random import default_generator


class TensorDataset:
    """Samples are the ``i``-th rows of tensors that share their first dimension."""

    def __init__(self, *tensors) -> None:
        if not tensors:
            raise ArgumentError("TensorDataset: give at least one tensor")
        n = tensors[0].shape[0]
        for t in tensors:
            if not isinstance(t, TensorBase):
                raise ArgumentTypeError(f"TensorDataset: expected Tensors, got {type(t).__name__}")
            if t.shape[0] != n:
                raise ShapeError(
                    f"TensorDataset: first dimensions differ: {[tuple(t.shape) for t in tensors]}"
                )
        self.tensors = tensors

    def __len__(self) -> int:
        return self.tensors[0].shape[0]

    def __getitem__(self, i):
        return tuple(t[i] for t in self.tensors)


class DataLoader:
    """Iterate over a dataset in batches.

    A ``TensorDataset`` is batched by indexing its arrays once per batch; any other dataset
    (``__len__`` and ``__getitem__`` returning tensors or tuples of them) is collated by
    stacking its samples.

    Example:
        >>> loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
        >>> for xb, yb in loader: ...
    """

    def __init__(
        self, dataset, batch_size: int = 1, shuffle: bool = False, drop_last: bool = False
    ) -> None:
        if batch_size < 1:
            raise ArgumentError(f"DataLoader: batch_size must be >= 1, got {batch_size}")
        self.dataset, self.batch_size = dataset, batch_size
        self.shuffle, self.drop_last = shuffle, drop_last

    def __len__(self) -> int:
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self):
        n = len(self.dataset)
        order = default_generator().permutation(n) if self.shuffle else np.arange(n)
        for k in range(len(self)):
            idx = order[k * self.batch_size : (k + 1) * self.batch_size]
            if isinstance(self.dataset, TensorDataset):
                yield tuple(wrap(t.data[idx]) for t in self.dataset.tensors)
            else:
                yield _collate([self.dataset[int(i)] for i in idx])


def _collate(samples):
    first = samples[0]
    if isinstance(first, tuple):
        return tuple(_collate([s[j] for s in samples]) for j in range(len(first)))
    if isinstance(first, TensorBase):
        return wrap(np.stack([s.data for s in samples]))
    return wrap(np.asarray(samples))


__all__ = [
    "TensorDataset",
    "DataLoader",
]
