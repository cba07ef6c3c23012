"""ferro.multiprocessing: PyTorch's torch.multiprocessing names, spawn/start_processes and
their failure reports."""

import multiprocessing

import pytest

import ferro
import ferro.multiprocessing as mp
from ferro.errors import ArgumentError, ProcessExitedException, ProcessRaisedException


def _square_into(i, queue, base):
    t = ferro.tensor([float(i)]) + base
    queue.put((i, (t * t).tolist()))


def _fail_on_one(i):
    if i == 1:
        raise ValueError("rank one is unhappy")


def _exit_three(i):
    if i == 0:
        raise SystemExit(3)
    import time

    time.sleep(60)  # terminated by the parent once process 0 has failed


def test_every_multiprocessing_name_is_there():
    for name in multiprocessing.__all__:
        assert getattr(mp, name) is getattr(multiprocessing, name)
    assert mp.get_all_sharing_strategies() == {"file_descriptor", "file_system"}
    mp.set_sharing_strategy("file_system")
    assert mp.get_sharing_strategy() == "file_system"
    mp.set_sharing_strategy("file_descriptor")
    with pytest.raises(ArgumentError, match="set_sharing_strategy"):
        mp.set_sharing_strategy("shm")


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_spawn_runs_fn_with_its_index_and_args(method):
    queue = multiprocessing.get_context(method).SimpleQueue()
    assert mp.start_processes(_square_into, (queue, 0.5), nprocs=3, start_method=method) is None
    got = sorted(queue.get() for _ in range(3))
    assert got == [(0, [0.25]), (1, [2.25]), (2, [6.25])]


def test_a_raising_process_is_reported_with_its_traceback():
    with pytest.raises(ProcessRaisedException, match="rank one is unhappy") as info:
        mp.spawn(_fail_on_one, nprocs=2, start_method="fork")
    assert info.value.error_index == 1 and "ValueError" in str(info.value)
    assert isinstance(info.value, RuntimeError)


def test_an_exit_code_stops_the_others_and_is_reported():
    ctx = mp.start_processes(_exit_three, nprocs=2, join=False, start_method="fork")
    assert len(ctx.pids()) == 2
    with pytest.raises(ProcessExitedException, match="exit code 3") as info:
        while not ctx.join(timeout=30):
            pass
    assert info.value.exit_code == 3 and info.value.error_index == 0
    assert all(not p.is_alive() for p in ctx.processes)


def test_nprocs_must_be_positive():
    with pytest.raises(ArgumentError, match="nprocs"):
        mp.spawn(_fail_on_one, nprocs=0)
