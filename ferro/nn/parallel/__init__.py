"""``ferro.nn.parallel``: :class:`DistributedDataParallel` (data parallelism over
``ferro.distributed``) and :class:`DataParallel` (PyTorch's single-process wrapper, on one
device)."""

from ferro.nn.parallel.data_parallel import DataParallel
from ferro.nn.parallel.distributed import DistributedDataParallel

__all__ = ["DataParallel", "DistributedDataParallel"]
