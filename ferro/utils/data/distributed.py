"""``DistributedSampler``: each rank of a data-parallel job visits its own share of a dataset,
as ``torch.utils.data.distributed.DistributedSampler``."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator, Sized

import numpy as np

from ferro.errors import ArgumentError, ArgumentTypeError
from ferro.utils.data.sampler import Sampler


def _int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ArgumentTypeError(f"DistributedSampler: {name} must be an int, got {value!r}")
    return int(value)


class DistributedSampler(Sampler[int]):
    """The indices of rank ``rank`` out of ``num_replicas``: every ``num_replicas``-th index of
    one order of the dataset, starting at ``rank``.

    With ``shuffle`` the order is a permutation drawn from ``seed + epoch`` (the same on every
    rank: call :meth:`set_epoch` at the start of each epoch for a new one). The dataset is padded
    by repeating indices from its start so that every rank gets the same number of samples
    (``drop_last=False``), or its tail is dropped to the largest multiple of ``num_replicas``
    (``drop_last=True``). ``num_replicas`` and ``rank`` default to the default process group's.
    """

    def __init__(
        self,
        dataset: Sized,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ):
        if num_replicas is None or rank is None:
            from ferro import distributed as dist

            if num_replicas is None:
                num_replicas = dist.get_world_size()
            if rank is None:
                rank = dist.get_rank()
        num_replicas, rank = _int(num_replicas, "num_replicas"), _int(rank, "rank")
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ArgumentError(
                f"DistributedSampler: rank {rank} must be in [0, num_replicas={num_replicas})"
            )
        self.dataset = dataset
        self.num_replicas, self.rank = num_replicas, rank
        self.shuffle, self.seed, self.drop_last = bool(shuffle), _int(seed, "seed"), bool(drop_last)
        self.epoch = 0
        n = len(dataset)
        if self.drop_last and n % num_replicas:
            self.num_samples = n // num_replicas
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas

    def __iter__(self) -> Iterator[int]:
        n = len(self.dataset)
        if self.shuffle:
            indices = np.random.default_rng(self.seed + self.epoch).permutation(n)
        else:
            indices = np.arange(n)
        if self.drop_last:
            indices = indices[: self.total_size]
        elif self.total_size > n:
            pad = self.total_size - n
            indices = np.concatenate([indices, np.resize(indices, pad)]) if n else indices
        return iter(indices[self.rank : self.total_size : self.num_replicas].tolist())

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Use the order of ``epoch`` from the next iteration on (with ``shuffle``)."""
        self.epoch = _int(epoch, "epoch")


__all__ = ["DistributedSampler"]
