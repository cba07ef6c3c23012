"""``ferro.nn.parallel``: :class:`DistributedDataParallel` (data parallelism over
``ferro.distributed``)."""

from ferro.nn.parallel.distributed import DistributedDataParallel

__all__ = ["DistributedDataParallel"]
