"""DataLoader with worker processes: the batches of num_workers=0 in the same order, worker
seeding and info, iterable sharding, errors raised in the main process, no hangs, shutdown.

The datasets are module-level so that they pickle for the spawn start method too."""

import os
import random
import time

import numpy as np
import pytest

import ferro
from ferro.errors import GraphError, ShapeError
from ferro.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset, get_worker_info


class Rows(Dataset):
    def __len__(self):
        return 12

    def __getitem__(self, i):
        return np.full(2, i, np.float32), {"i": i, "half": i / 2}


class WhoAmI(Dataset):
    """Each sample says which worker made it and what its generators give."""

    tag = None

    def __len__(self):
        return 4

    def __getitem__(self, i):
        info = get_worker_info()
        return {
            "worker": info.id,
            "workers": info.num_workers,
            "seed": info.seed,
            "tag": info.dataset.tag,
            "ferro": ferro.rand(1, dtype=ferro.float64).item(),
            "random": random.random(),
            "pid": os.getpid(),
        }


def _tag(worker_id):
    get_worker_info().dataset.tag = 100 + worker_id


class Sharded(IterableDataset):
    def __iter__(self):
        info = get_worker_info()
        return iter(range(10) if info is None else range(info.id, 10, info.num_workers))


class BadInit(Exception):
    def __init__(self, a, b):
        super().__init__(a)


class Fails(Dataset):
    """Index 2 raises ``kind``; index 3 kills its worker ("exit"); index 0 takes 0.5 s ("slow")."""

    def __init__(self, kind):
        self.kind = kind

    def __len__(self):
        return 6

    def __getitem__(self, i):
        if i == 2 and self.kind == "key":
            raise KeyError("no sample 2")
        if i == 2 and self.kind == "shape":
            raise ShapeError("sample 2 has the wrong shape")
        if i == 2 and self.kind == "badinit":
            raise BadInit("cannot be rebuilt", 0)
        if i == 3 and self.kind == "exit":
            os._exit(3)
        if i == 0 and self.kind == "slow":
            time.sleep(0.5)
        return i


def _values(batches):
    return [(b[0].numpy().tolist(), b[1]["i"].tolist(), b[1]["half"].tolist()) for b in batches]


def test_workers_give_the_batches_of_the_main_process_in_the_same_order():
    ferro.manual_seed(5)
    main = _values(DataLoader(Rows(), batch_size=5, shuffle=True))
    ferro.manual_seed(5)
    loader = DataLoader(Rows(), batch_size=5, shuffle=True, num_workers=2)
    workers = list(loader)
    assert _values(workers) == main and len(main) == 3
    assert workers[0][0].dtype == np.float32 and workers[0][1]["half"].dtype == np.float64
    ferro.manual_seed(5)
    unordered = DataLoader(Rows(), batch_size=5, shuffle=True, num_workers=2, in_order=False)
    assert sorted(_values(unordered)) == sorted(main)


def test_tensor_dataset_through_workers():
    x = ferro.randn(9, 2)
    batches = list(DataLoader(TensorDataset(x, ferro.arange(9)), batch_size=4, num_workers=2))
    np.testing.assert_array_equal(np.concatenate([b[0].numpy() for b in batches]), x.numpy())
    assert [b[1].tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8]]


def test_workers_are_seeded_from_the_base_seed_and_know_who_they_are():
    batches = list(
        DataLoader(
            WhoAmI(),
            batch_size=None,
            num_workers=2,
            generator=ferro.Generator().manual_seed(0),
            worker_init_fn=_tag,
        )
    )
    base = int(np.random.Generator(np.random.PCG64(0)).integers(0, 2**63, dtype=np.int64))
    assert [b["worker"] for b in batches] == [0, 1, 0, 1]  # batch k from worker k % 2
    assert all(b["workers"] == 2 for b in batches)
    assert [b["seed"] for b in batches] == [base, base + 1, base, base + 1]
    assert [b["tag"] for b in batches] == [100, 101, 100, 101]
    for w in (0, 1):
        ref = np.random.Generator(np.random.PCG64(base + w)).random(2)
        assert [b["ferro"] for b in batches if b["worker"] == w] == ref.tolist()
        py = random.Random(base + w)
        assert [b["random"] for b in batches if b["worker"] == w] == [py.random(), py.random()]
    assert len({b["pid"] for b in batches} | {os.getpid()}) == 3


def test_iterable_dataset_is_sharded_with_worker_info():
    got = [b.tolist() for b in DataLoader(Sharded(), batch_size=3, num_workers=2)]
    assert got == [[0, 2, 4], [1, 3, 5], [6, 8], [7, 9]]
    got = [b.tolist() for b in DataLoader(Sharded(), batch_size=3, num_workers=2, drop_last=True)]
    assert got == [[0, 2, 4], [1, 3, 5]]


def test_a_worker_exception_is_raised_as_itself_with_the_workers_traceback():
    it = iter(DataLoader(Fails("key"), batch_size=1, num_workers=2))
    assert [next(it).tolist(), next(it).tolist()] == [[0], [1]]
    with pytest.raises(KeyError, match="no sample 2") as info:
        next(it)
    note = "\n".join(info.value.__notes__)
    assert "worker process 0" in note and "__getitem__" in note and "raise KeyError" in note
    assert next(it).tolist() == [3]  # the loader goes on, as PyTorch's does
    with pytest.raises(ShapeError, match="wrong shape"):
        list(DataLoader(Fails("shape"), batch_size=2, num_workers=2))


def test_an_exception_that_cannot_be_rebuilt_becomes_a_runtime_error_with_its_traceback():
    with pytest.raises(GraphError, match="Caught BadInit in DataLoader worker process") as info:
        list(DataLoader(Fails("badinit"), batch_size=3, num_workers=1))
    assert isinstance(info.value, RuntimeError) and "cannot be rebuilt" in str(info.value)


def test_a_batch_that_cannot_be_pickled_is_an_error_not_a_hang():
    loader = DataLoader(Rows(), batch_size=2, num_workers=1, collate_fn=lambda s: lambda: s)
    with pytest.raises(Exception) as info:
        next(iter(loader))
    assert "could not pickle the batch" in "\n".join(info.value.__notes__)


def test_a_dead_worker_raises_instead_of_hanging():
    start = time.monotonic()
    with pytest.raises(GraphError, match=r"worker \d \(pid \d+\) exited with code 3"):
        list(DataLoader(Fails("exit"), batch_size=1, num_workers=2))
    assert time.monotonic() - start < 10


def test_timeout_raises_and_persistent_workers_start_over_after_it():
    loader = DataLoader(
        Fails("slow"), batch_size=3, num_workers=1, timeout=0.2, persistent_workers=True
    )
    with pytest.raises(GraphError, match="timeout=0.2"):
        next(iter(loader))
    loader.timeout = 0
    assert next(iter(loader)).tolist() == [0, 1, 2]  # fresh workers, not the stopped ones


def test_persistent_workers_serve_every_epoch_and_drop_what_an_early_exit_left():
    loader = DataLoader(
        WhoAmI(), batch_size=2, num_workers=2, persistent_workers=True, worker_init_fn=_tag
    )
    first = next(iter(loader))  # leave the first epoch early
    epochs = [list(loader) for _ in range(2)]
    pids = {p for e in epochs for b in e for p in b["pid"].tolist()} | set(first["pid"].tolist())
    assert len(pids) == 2  # the same two processes throughout
    for e in epochs:
        assert [b["worker"].tolist() for b in e] == [[0, 0], [1, 1]]
    assert iter(loader) is loader._iterator


def test_leaving_an_epoch_early_stops_the_workers():
    it = iter(DataLoader(Rows(), batch_size=2, num_workers=2))
    next(it)
    workers = list(it._workers)
    assert all(w.is_alive() for w in workers)
    del it
    assert not any(w.is_alive() for w in workers)
    done = iter(DataLoader(Rows(), batch_size=6, num_workers=2))
    list(done)
    assert not any(w.is_alive() for w in done._workers)


def test_spawned_workers_pickle_the_dataset():
    loader = DataLoader(Sharded(), batch_size=5, num_workers=1, multiprocessing_context="spawn")
    assert [b.tolist() for b in loader] == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]


@pytest.mark.torch
def test_worker_order_and_sharding_match_pytorch():
    import torch.utils.data as tud

    class TorchSharded(tud.IterableDataset):
        def __iter__(self):
            info = tud.get_worker_info()
            return iter(range(10) if info is None else range(info.id, 10, info.num_workers))

    for drop_last in (False, True):
        ours = DataLoader(Sharded(), batch_size=3, num_workers=2, drop_last=drop_last)
        theirs = tud.DataLoader(TorchSharded(), batch_size=3, num_workers=2, drop_last=drop_last)
        assert [b.tolist() for b in ours] == [b.tolist() for b in theirs]
