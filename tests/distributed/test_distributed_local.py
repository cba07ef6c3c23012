"""What ``ferro.distributed`` does without a launcher: the import does not need MPI, misuse
raises typed errors, and DistributedSampler's splits (no MPI needed when ranks are given)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import ferro
import ferro.distributed as dist
from ferro.distributed.run import command, find_mpiexec
from ferro.errors import ArgumentError, DistributedError
from ferro.utils.data import DistributedSampler


def test_import_ferro_does_not_import_mpi4py():
    code = "import sys, ferro, ferro.distributed, ferro.nn.parallel; print('mpi4py' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_collective_without_process_group_is_a_clear_error():
    assert not dist.is_initialized()
    with pytest.raises(DistributedError, match="init_process_group"):
        dist.all_reduce(ferro.ones(2))
    with pytest.raises(DistributedError, match="init_process_group"):
        dist.get_rank()


def test_unknown_backend_is_refused():
    with pytest.raises(ArgumentError, match="'mpi'"):
        dist.init_process_group("nccl")


@pytest.mark.parametrize("n, replicas", [(10, 3), (9, 3), (2, 3), (7, 2), (0, 2)])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
def test_distributed_sampler_splits(n, replicas, drop_last, shuffle):
    data = list(range(n))
    parts = [
        list(DistributedSampler(data, replicas, r, shuffle=shuffle, seed=3, drop_last=drop_last))
        for r in range(replicas)
    ]
    lengths = {len(p) for p in parts}
    assert len(lengths) <= 1, "every rank gets the same number of samples"
    every = [i for p in parts for i in p]
    if drop_last:
        assert len(every) == n - n % replicas and len(set(every)) == len(every)
    else:
        assert set(every) == set(data) and len(every) == -(-n // replicas) * replicas
    for r, p in enumerate(parts):
        assert len(DistributedSampler(data, replicas, r, drop_last=drop_last)) == len(p)


def test_distributed_sampler_epochs():
    data = list(range(20))
    s = DistributedSampler(data, 2, 0, seed=1)
    first = list(s)
    assert list(s) == first, "the same epoch gives the same order"
    s.set_epoch(1)
    assert list(s) != first
    other = DistributedSampler(data, 2, 1, seed=1)
    other.set_epoch(1)
    assert not set(s) & set(other), "ranks of one epoch are disjoint"
    assert list(DistributedSampler(data, 2, 0, shuffle=False)) == list(range(0, 20, 2))


def test_distributed_sampler_bad_rank():
    with pytest.raises(ArgumentError, match="rank 2"):
        DistributedSampler([1, 2, 3], num_replicas=2, rank=2)


@pytest.mark.skipif(find_mpiexec() is None, reason="mpiexec is not installed ([mpi] extra)")
def test_launcher_command():
    cmd = command(3, ["train.py", "--epochs", "2"])
    assert cmd[1:4] == ["-n", "3", sys.executable] and cmd[-3:] == ["train.py", "--epochs", "2"]
    assert command(2, ["ferro.examples.digits"], module=True)[-2:] == [
        "-m",
        "ferro.examples.digits",
    ]


def test_reduce_op_names():
    assert {op.name for op in dist.ReduceOp} >= {"SUM", "AVG", "PRODUCT", "MIN", "MAX"}
    assert np.dtype(np.float32)  # keeps numpy imported for the parametrized cases above
