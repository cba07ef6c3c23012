"""Fetching one batch (or one sample) of a dataset, in the main process or in a worker."""

from __future__ import annotations

import numpy as np

from ferro.utils.data.collate import default_collate
from ferro.utils.data.dataset import Subset, TensorDataset


def _tensor_rows(dataset):
    """For a :class:`TensorDataset`, possibly inside :class:`Subset` s with integer indices:
    its tensors and the index arrays of the subsets, outermost first. Otherwise None."""
    chain = []
    while type(dataset) is Subset:
        indices = np.asarray(dataset.indices)
        if indices.ndim != 1 or indices.dtype.kind not in "iu":
            return None
        chain.append(indices)
        dataset = dataset.dataset
    if type(dataset) is not TensorDataset:
        return None
    return dataset.tensors, chain


class MapFetcher:
    """Fetch from a map-style dataset: ``dataset[i]`` per index (or ``__getitems__`` once per
    batch when the dataset has it), then ``collate_fn``.

    A ``TensorDataset`` (also inside ``Subset`` s, as ``random_split`` makes) collated by
    ``default_collate`` is batched by indexing each tensor once with the batch's rows: the same
    batch as stacking its samples, without a Python loop over them.
    """

    def __init__(self, dataset, auto_collation: bool, collate_fn, drop_last: bool) -> None:
        self.dataset, self.auto_collation, self.collate_fn = dataset, auto_collation, collate_fn
        batched = auto_collation and collate_fn is default_collate
        self._tensor_rows = _tensor_rows(dataset) if batched else None

    def fetch(self, index):
        if not self.auto_collation:
            return self.collate_fn(self.dataset[index])
        if self._tensor_rows is not None:
            tensors, chain = self._tensor_rows
            rows = np.asarray(index, dtype=np.int64)
            for indices in chain:
                rows = indices[rows]
            return [t[rows] for t in tensors]
        getitems = getattr(self.dataset, "__getitems__", None)
        samples = getitems(list(index)) if getitems else [self.dataset[i] for i in index]
        return self.collate_fn(samples)


class IterableFetcher:
    """Fetch from an iterable dataset: the next sample, or the next ``len(index)`` samples
    collated. Raises ``StopIteration`` when the stream is exhausted (or, with ``drop_last``,
    when only a short batch is left)."""

    def __init__(self, dataset, auto_collation: bool, collate_fn, drop_last: bool) -> None:
        self.auto_collation, self.collate_fn, self.drop_last = auto_collation, collate_fn, drop_last
        self._it = iter(dataset)
        self._ended = False

    def fetch(self, index):
        if self._ended:
            raise StopIteration
        if not self.auto_collation:
            return self.collate_fn(next(self._it))
        samples = []
        for _ in index:
            try:
                samples.append(next(self._it))
            except StopIteration:
                self._ended = True
                break
        if not samples or (self.drop_last and len(samples) < len(index)):
            raise StopIteration
        return self.collate_fn(samples)
