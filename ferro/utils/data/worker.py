"""DataLoader worker processes: what a worker runs, what it knows about itself
(:func:`get_worker_info`), and how its errors reach the main process.

Note [Worker protocol]: the main process puts tasks ``((epoch, task), index)`` on a worker's own
index queue and reads ``((epoch, task), payload)`` from one result queue shared by all workers;
``payload`` is the pickled batch, an :class:`ExceptionWrapper`, or an :class:`IterableEnd` once
the worker's iterable dataset is exhausted. The worker pickles the batch itself, so a batch
that cannot be pickled becomes an error for the main process instead of being lost in the
queue's feeder thread (which would leave the main process waiting). ``None`` tells the worker to
exit; a :class:`Resume` starts the next epoch of a persistent worker (its dataset iterator is
made anew; tasks of older epochs are ignored by the main process). A worker also exits once the
shared ``done_event`` is set, even if the ``None`` never comes (an iterator collected as part of
a reference cycle: the garbage collector may close its queues before ``__del__`` runs), and when
its parent died.
"""

from __future__ import annotations

import os
import pickle
import queue
import random
import traceback
from dataclasses import dataclass
from multiprocessing.reduction import ForkingPickler

import numpy as np

from ferro import random as _random
from ferro.utils.data.fetch import IterableFetcher, MapFetcher

# How often a waiting worker checks that it should stop or that its parent died (seconds).
_POLL = 0.2


@dataclass(frozen=True)
class WorkerInfo:
    """What a worker process knows about itself (:func:`get_worker_info`).

    Attributes:
        id: the worker's number, in ``[0, num_workers)``.
        num_workers: how many workers the ``DataLoader`` runs.
        seed: the seed of this worker's generators (``base_seed + id``, as PyTorch): ferro's
            default generator and Python's ``random``; NumPy's global generator gets a state
            derived from it.
        dataset: this worker's copy of the dataset.
    """

    id: int
    num_workers: int
    seed: int
    dataset: object


_worker_info: WorkerInfo | None = None


def get_worker_info() -> WorkerInfo | None:
    """In a ``DataLoader`` worker process, its :class:`WorkerInfo`; None in the main process.

    An ``IterableDataset`` uses it to give each worker its own share of the stream.
    """
    return _worker_info


class IterableEnd:
    """A worker's iterable dataset is exhausted; it takes no more tasks this epoch."""

    def __init__(self, worker_id: int) -> None:
        self.worker_id = worker_id


class Resume:
    """Start the next epoch (persistent workers)."""


class ExceptionWrapper:
    """An exception raised in a worker, carried to the main process with its traceback."""

    def __init__(self, worker_id: int, exc: BaseException) -> None:
        self.where = f"in DataLoader worker process {worker_id}"
        self.type_name = type(exc).__qualname__
        self.traceback = "".join(traceback.format_exception(exc))
        self.pickled = _dumps_or_none(exc)
        self.exc_type = type(exc) if _dumps_or_none(type(exc)) is not None else None

    def exception(self, failure) -> BaseException:
        """The exception to raise in the main process: the worker's own exception object with
        the worker's traceback as a note; else (an exception that does not survive pickling)
        one of its type built from the traceback text, as PyTorch does; else ``failure(text)``.
        """
        text = f"Caught {self.type_name} {self.where}.\nOriginal {self.traceback}"
        if self.pickled is not None:
            try:
                exc = pickle.loads(self.pickled)
            except Exception:
                exc = None
            if isinstance(exc, BaseException):
                exc.add_note(f"Raised {self.where}; the worker's traceback:\n{self.traceback}")
                return exc
        if self.exc_type is not None:
            try:
                return self.exc_type(text)
            except Exception:
                pass
        return failure(text)


def _dumps_or_none(obj) -> bytes | None:
    try:
        payload = ForkingPickler.dumps(obj, pickle.HIGHEST_PROTOCOL)
        pickle.loads(payload)
    except Exception:
        return None
    return bytes(payload)


def _seed_worker(base_seed: int, worker_id: int) -> int:
    """Seed the worker's generators as PyTorch does; NumPy's global generator gets the state
    PyTorch's ``_generate_state`` computes (which is NumPy's ``SeedSequence``)."""
    seed = base_seed + worker_id
    random.seed(seed)
    _random.manual_seed(seed)
    entropy = [worker_id, base_seed & 0xFFFFFFFF, base_seed >> 32, 0]
    np.random.seed(np.random.SeedSequence(entropy).generate_state(4))
    return seed


def _payload(worker_id: int, data) -> bytes:
    try:
        return bytes(ForkingPickler.dumps(data, pickle.HIGHEST_PROTOCOL))
    except Exception as exc:
        exc.add_note("DataLoader: the worker could not pickle the batch to send it back")
        return bytes(ForkingPickler.dumps(ExceptionWrapper(worker_id, exc)))


def worker_loop(
    iterable: bool,
    dataset,
    index_queue,
    data_queue,
    done_event,
    auto_collation: bool,
    collate_fn,
    drop_last: bool,
    base_seed: int,
    init_fn,
    worker_id: int,
    num_workers: int,
) -> None:
    """The body of a worker process (Note [Worker protocol])."""
    global _worker_info
    try:
        seed = _seed_worker(base_seed, worker_id)
        _worker_info = WorkerInfo(worker_id, num_workers, seed, dataset)
        make_fetcher = IterableFetcher if iterable else MapFetcher
        init_error = None
        try:
            if init_fn is not None:
                init_fn(worker_id)
            fetcher = make_fetcher(dataset, auto_collation, collate_fn, drop_last)
        except Exception as exc:
            init_error = ExceptionWrapper(worker_id, exc)
        ended = False
        parent = os.getppid()
        while True:
            try:
                task = index_queue.get(timeout=_POLL)
            except queue.Empty:
                if done_event.is_set() or os.getppid() != parent:
                    break
                continue
            if task is None:
                break
            if isinstance(task, Resume):
                ended = False
                if init_error is None:
                    fetcher = make_fetcher(dataset, auto_collation, collate_fn, drop_last)
                continue
            if done_event.is_set() or ended:
                continue
            key, index = task
            if init_error is not None:
                data = init_error  # the worker cannot fetch: every task gets the error
            else:
                try:
                    data = fetcher.fetch(index)
                except StopIteration as exc:
                    if iterable:
                        data, ended = IterableEnd(worker_id), True
                    else:
                        data = ExceptionWrapper(worker_id, exc)
                except Exception as exc:
                    data = ExceptionWrapper(worker_id, exc)
            data_queue.put((key, _payload(worker_id, data)))
            del data
    except KeyboardInterrupt:
        pass  # the main process gets it too, and shuts the workers down
    if done_event.is_set():
        data_queue.cancel_join_thread()  # do not block exiting on results nobody will read
    data_queue.close()
