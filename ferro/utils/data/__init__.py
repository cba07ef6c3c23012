"""Data loading as ``torch.utils.data``: datasets, samplers, collation and ``DataLoader`` with
worker processes. See docs/data.md.

Example:
    >>> x, y = ferro.randn(100, 3), ferro.randint(0, 2, (100,))
    >>> loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
    >>> [tuple(xb.shape) for xb, yb in loader]
    [(32, 3), (32, 3), (32, 3), (4, 3)]
"""

from ferro.utils.data.collate import default_collate, default_convert
from ferro.utils.data.dataloader import DataLoader
from ferro.utils.data.dataset import (
    ChainDataset,
    ConcatDataset,
    Dataset,
    IterableDataset,
    Subset,
    TensorDataset,
    random_split,
)
from ferro.utils.data.distributed import DistributedSampler
from ferro.utils.data.sampler import (
    BatchSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)
from ferro.utils.data.worker import WorkerInfo, get_worker_info

__all__ = [
    "Dataset",
    "IterableDataset",
    "TensorDataset",
    "ConcatDataset",
    "ChainDataset",
    "Subset",
    "random_split",
    "Sampler",
    "SequentialSampler",
    "RandomSampler",
    "DistributedSampler",
    "SubsetRandomSampler",
    "WeightedRandomSampler",
    "BatchSampler",
    "DataLoader",
    "default_collate",
    "default_convert",
    "get_worker_info",
    "WorkerInfo",
]
