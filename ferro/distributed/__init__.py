"""``ferro.distributed``: data-parallel training over MPI, with PyTorch's names.

Launch one process per rank with MPI's launcher (``mpiexec -n 2 python train.py``, or
``python -m ferro.distributed.run -n 2 train.py``), then::

    import ferro.distributed as dist
    dist.init_process_group("mpi")
    model = ferro.nn.parallel.DistributedDataParallel(model)

MPI (mpi4py and an MPI library, e.g. the ``mpich`` wheel: ``pip install 'ferro[mpi]'``) is
imported when a process group is first created, so ``import ferro`` works without it.
docs/distributed.md has the launch recipes, the bucketing and overlap design, the timeout and
trust models and the measured scaling.
"""

from ferro.distributed.collectives import *  # noqa: F403
from ferro.distributed.collectives import __all__ as _collectives_all

__all__ = [*_collectives_all]
