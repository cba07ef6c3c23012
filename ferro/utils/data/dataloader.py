"""``DataLoader``, as ``torch.utils.data.DataLoader``: batches of a dataset in a chosen order,
loaded in the main process or in worker processes.

With ``num_workers > 0`` each batch is fetched and collated in one of ``num_workers`` worker
processes (``multiprocessing``; Note [Worker protocol] in ``worker.py``), batch ``k`` by worker
``k % num_workers``. The main process draws the indices from the sampler and yields the batches
in that order, so they are the ones ``num_workers=0`` gives (unless ``in_order=False``). Each
worker seeds ferro's default generator, Python's ``random`` and NumPy's global generator from
``base_seed + worker_id``, where ``base_seed`` is drawn from the loader's ``generator`` (or
ferro's default generator) at the start of each epoch. An exception in a worker is raised in the
main process as itself, with the worker's traceback in a note; a worker that dies, or a
``timeout`` that passes, raises ``GraphError`` (a ``RuntimeError``, as PyTorch raises). Workers
stop when an epoch ends, when the iterator is dropped, or (``persistent_workers``) with the
loader.

``pin_memory`` is accepted and does nothing: batches stay in ordinary memory; move them with
``.to(device)``.
"""

from __future__ import annotations

import atexit
import itertools
import multiprocessing
import numbers
import os
import pickle
import queue
import time
from typing import Generic, TypeVar

import numpy as np

from ferro.errors import ArgumentError, ArgumentTypeError, GraphError
from ferro.random import numpy_generator
from ferro.utils.data.collate import default_collate, default_convert
from ferro.utils.data.dataset import IterableDataset
from ferro.utils.data.fetch import IterableFetcher, MapFetcher
from ferro.utils.data.sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler
from ferro.utils.data.worker import (
    ExceptionWrapper,
    IterableEnd,
    Resume,
    get_worker_info,
    worker_loop,
)

T_co = TypeVar("T_co", covariant=True)

# How often the main process, waiting for a batch, checks that its workers are alive (seconds).
_POLL = 0.5
# How long a worker gets to exit by itself at shutdown before it is terminated (seconds).
_JOIN = 5.0

_exiting = False


def _set_exiting() -> None:
    # At interpreter exit multiprocessing terminates the daemonic workers itself; an iterator
    # collected after that must not talk to them.
    global _exiting
    _exiting = True


atexit.register(_set_exiting)


def _failure(message: str) -> GraphError:
    """The error for a worker that died or a timeout: a ``RuntimeError``, as PyTorch raises."""
    return GraphError(message)


class _InfiniteConstantSampler(Sampler[None]):
    """``None`` forever: an iterable dataset's fetcher ignores indices."""

    def __iter__(self):
        while True:
            yield None


# Attributes fixed once a DataLoader exists, as in PyTorch (its iterators read them).
_FIXED = ("batch_size", "batch_sampler", "sampler", "drop_last", "dataset", "persistent_workers")


class DataLoader(Generic[T_co]):
    """Iterate over a dataset in batches, as ``torch.utils.data.DataLoader``; see docs/data.md.

    Workers, seeding, errors and shutdown are described in the module docstring.

    Args:
        dataset: a map-style dataset (``__getitem__``, ``__len__``) or an ``IterableDataset``.
        batch_size: samples per batch; None yields samples one by one (not collated, only
            converted by ``default_convert``).
        shuffle: visit the samples in a new random order each epoch (``RandomSampler``).
        sampler: the order of the indices (exclusive with ``shuffle``).
        batch_sampler: yields lists of indices (exclusive with ``batch_size``, ``shuffle``,
            ``sampler`` and ``drop_last``).
        num_workers: worker processes; 0 loads in the main process.
        collate_fn: turns a list of samples into a batch (default :func:`default_collate`).
        pin_memory: accepted for PyTorch programs; does nothing.
        drop_last: drop the last batch if it is short.
        timeout: seconds to wait for a batch from the workers (0: no limit).
        worker_init_fn: called as ``worker_init_fn(worker_id)`` in each worker after seeding.
        multiprocessing_context: a start method name (``"fork"``, ``"spawn"``,
            ``"forkserver"``) or a ``multiprocessing`` context; default: the platform's.
        generator: the ``ferro.Generator`` for shuffling and the workers' base seed.
        prefetch_factor: batches each worker loads ahead (default 2; only with workers).
        persistent_workers: keep the workers between epochs.
        pin_memory_device: accepted for PyTorch programs; ignored.
        in_order: yield batches in sampler order; False yields each as soon as it is ready.

    Raises:
        ArgumentError: options that exclude each other, or a negative count or timeout.

    Example:
        >>> from ferro.utils.data import TensorDataset
        >>> x, y = ferro.randn(100, 3), ferro.randint(0, 2, (100,))
        >>> loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
        >>> [tuple(xb.shape) for xb, yb in loader]
        [(32, 3), (32, 3), (32, 3), (4, 3)]
    """

    def __init__(
        self,
        dataset,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler=None,
        batch_sampler=None,
        num_workers: int = 0,
        collate_fn=None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn=None,
        multiprocessing_context=None,
        generator=None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
    ) -> None:
        if isinstance(num_workers, bool) or not isinstance(num_workers, numbers.Integral):
            raise ArgumentTypeError(
                f"DataLoader: num_workers must be an int, got {type(num_workers).__name__}"
            )
        if num_workers < 0:
            raise ArgumentError(f"DataLoader: num_workers must be >= 0, got {num_workers}")
        if not isinstance(timeout, numbers.Real) or timeout < 0:
            raise ArgumentError(f"DataLoader: timeout must be a number >= 0, got {timeout!r}")
        if num_workers == 0:
            for name, value in (
                ("prefetch_factor", prefetch_factor),
                ("multiprocessing_context", multiprocessing_context),
            ):
                if value is not None:
                    raise ArgumentError(f"DataLoader: {name} needs num_workers > 0")
            if persistent_workers:
                raise ArgumentError("DataLoader: persistent_workers needs num_workers > 0")
        elif prefetch_factor is None:
            prefetch_factor = 2
        elif isinstance(prefetch_factor, bool) or not isinstance(prefetch_factor, int):
            raise ArgumentTypeError(
                f"DataLoader: prefetch_factor must be an int, got {type(prefetch_factor).__name__}"
            )
        elif prefetch_factor < 1:
            raise ArgumentError(f"DataLoader: prefetch_factor must be >= 1, got {prefetch_factor}")
        numpy_generator(generator, "DataLoader")

        iterable = isinstance(dataset, IterableDataset)
        if iterable:
            for name, value in (("sampler", sampler), ("batch_sampler", batch_sampler)):
                if value is not None:
                    raise ArgumentError(
                        f"DataLoader: an IterableDataset decides its own order; got {name}"
                    )
            if shuffle:
                raise ArgumentError(
                    "DataLoader: an IterableDataset decides its own order; got shuffle=True"
                )
        shuffle = bool(shuffle)
        if sampler is not None and shuffle:
            raise ArgumentError("DataLoader: sampler is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ArgumentError(
                    "DataLoader: batch_sampler is mutually exclusive with batch_size, shuffle, "
                    "sampler and drop_last"
                )
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ArgumentError("DataLoader: drop_last needs a batch_size")
        if sampler is None:
            if iterable:
                sampler = _InfiniteConstantSampler()
            elif shuffle:
                sampler = RandomSampler(dataset, generator=generator)
            else:
                sampler = SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)

        self.dataset = dataset
        self.batch_size = batch_size
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.drop_last = drop_last
        self.num_workers = num_workers
        if collate_fn is None:
            collate_fn = default_collate if batch_sampler is not None else default_convert
        self.collate_fn = collate_fn
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = _context(multiprocessing_context)
        self.generator = generator
        self.prefetch_factor = prefetch_factor
        self.persistent_workers = persistent_workers
        self.in_order = in_order
        self._iterable = iterable
        self._iterator = None
        self._initialized = True

    def __setattr__(self, name, value) -> None:
        if name in _FIXED and getattr(self, "_initialized", False):
            raise ArgumentError(f"DataLoader: {name} cannot be changed once the loader exists")
        super().__setattr__(name, value)

    @property
    def _auto_collation(self) -> bool:
        return self.batch_sampler is not None

    @property
    def _index_sampler(self):
        return self.batch_sampler if self._auto_collation else self.sampler

    def __iter__(self):
        if self.num_workers == 0:
            return _SingleProcessIter(self)
        if not self.persistent_workers:
            return _MultiProcessIter(self)
        if self._iterator is None or self._iterator._shutdown:  # none yet, or a worker failed
            self._iterator = _MultiProcessIter(self)
        else:
            self._iterator._reset(self)
        return self._iterator

    def __len__(self) -> int:
        if not self._iterable:
            return len(self._index_sampler)
        n = len(self.dataset)
        if self.batch_size is None:
            return n
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


def _context(spec):
    if spec is None:
        return multiprocessing.get_context()
    if isinstance(spec, str):
        try:
            return multiprocessing.get_context(spec)
        except ValueError:
            raise ArgumentError(
                f"DataLoader: unknown multiprocessing start method {spec!r}; the platform has "
                f"{multiprocessing.get_all_start_methods()}"
            ) from None
    if not hasattr(spec, "Process"):
        raise ArgumentTypeError(
            "DataLoader: multiprocessing_context must be a start method name or a "
            f"multiprocessing context, got {type(spec).__name__}"
        )
    return spec


class _BaseIter:
    def __init__(self, loader: DataLoader) -> None:
        self._loader = loader
        self._iterable = loader._iterable
        self._sampler_iter = iter(loader._index_sampler)
        # Drawn with or without workers, as PyTorch does, so the default generator moves the same
        # way in both and a shuffled epoch visits the samples in the same order.
        rng = numpy_generator(loader.generator, "DataLoader")
        self._base_seed = int(rng.integers(0, 2**63, dtype=np.int64))

    def __iter__(self):
        return self

    def __len__(self) -> int:
        return len(self._loader)


class _SingleProcessIter(_BaseIter):
    def __init__(self, loader: DataLoader) -> None:
        super().__init__(loader)
        make = IterableFetcher if loader._iterable else MapFetcher
        self._fetcher = make(
            loader.dataset, loader._auto_collation, loader.collate_fn, loader.drop_last
        )

    def __next__(self):
        return self._fetcher.fetch(next(self._sampler_iter))


class _MultiProcessIter(_BaseIter):
    """Workers, task bookkeeping and shutdown (Note [Worker protocol])."""

    def __init__(self, loader: DataLoader) -> None:
        self._workers, self._index_queues, self._shutdown = [], [], True
        self._pid = os.getpid()
        super().__init__(loader)
        ctx = loader.multiprocessing_context
        self._num_workers = n = loader.num_workers
        self._timeout = loader.timeout
        self._in_order = loader.in_order
        self._persistent = loader.persistent_workers
        self._prefetch = loader.prefetch_factor * n
        self._data_queue = ctx.Queue()
        self._done_event = ctx.Event()
        self._shutdown = False
        try:
            for i in range(n):
                index_queue = ctx.Queue()
                index_queue.cancel_join_thread()  # a dead worker must not block our exit
                args = (
                    loader._iterable,
                    loader.dataset,
                    index_queue,
                    self._data_queue,
                    self._done_event,
                    loader._auto_collation,
                    loader.collate_fn,
                    loader.drop_last,
                    self._base_seed,
                    loader.worker_init_fn,
                    i,
                    n,
                )
                w = ctx.Process(target=worker_loop, args=args, daemon=True)
                w.start()
                self._index_queues.append(index_queue)
                self._workers.append(w)
        except BaseException:
            self._shutdown_workers()
            raise
        self._epoch = 0
        self._start_epoch()

    def _start_epoch(self) -> None:
        self._send_idx = self._rcvd_idx = 0
        self._tasks = {}  # task number -> (worker,) while pending, (worker, batch) when early
        self._active = [True] * self._num_workers  # False: its iterable dataset is exhausted
        self._cycle = itertools.cycle(range(self._num_workers))
        for _ in range(self._prefetch):
            self._try_put_index()

    def _reset(self, loader: DataLoader) -> None:
        """The next epoch of persistent workers."""
        self._sampler_iter = iter(loader._index_sampler)
        self._epoch += 1
        for q in self._index_queues:
            q.put(Resume())
        self._start_epoch()

    def _try_put_index(self) -> None:
        try:
            index = next(self._sampler_iter)
        except StopIteration:
            return
        for _ in range(self._num_workers):
            worker = next(self._cycle)
            if self._active[worker]:
                break
        else:
            return
        self._index_queues[worker].put(((self._epoch, self._send_idx), index))
        self._tasks[self._send_idx] = (worker,)
        self._send_idx += 1

    def __next__(self):
        while True:
            while self._rcvd_idx < self._send_idx:
                info = self._tasks.get(self._rcvd_idx)
                if info is not None and (len(info) == 2 or self._active[info[0]]):
                    break
                self._tasks.pop(self._rcvd_idx, None)  # taken out of order, or never answered
                self._rcvd_idx += 1
            else:
                if not self._persistent:
                    self._shutdown_workers()
                raise StopIteration
            info = self._tasks[self._rcvd_idx]
            if len(info) == 2:
                del self._tasks[self._rcvd_idx]
                self._rcvd_idx += 1
                return self._process(info[1])
            task, data = self._get_data()
            if isinstance(data, IterableEnd):
                self._active[data.worker_id] = False
                self._try_put_index()
                continue
            if task == self._rcvd_idx or not self._in_order:
                del self._tasks[task]
                if task == self._rcvd_idx:
                    self._rcvd_idx += 1
                return self._process(data)
            self._tasks[task] += (data,)

    def _process(self, data):
        self._try_put_index()
        if isinstance(data, ExceptionWrapper):
            raise data.exception(_failure)
        return data

    def _get_data(self):
        deadline = time.monotonic() + self._timeout if self._timeout > 0 else None
        while True:
            wait = _POLL if deadline is None else max(0.0, min(_POLL, deadline - time.monotonic()))
            try:
                (epoch, task), payload = self._data_queue.get(timeout=wait)
            except queue.Empty:
                self._check_workers()
                if deadline is not None and time.monotonic() >= deadline:
                    self._shutdown_workers()
                    raise _failure(
                        "DataLoader: no batch came from the workers within "
                        f"timeout={self._timeout} s"
                    ) from None
                continue
            if epoch == self._epoch:  # else a late batch of an epoch left early: dropped
                return task, pickle.loads(payload)

    def _check_workers(self) -> None:
        for i, w in enumerate(self._workers):
            if not w.is_alive():
                code = w.exitcode
                how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
                self._shutdown_workers()
                raise _failure(f"DataLoader: worker {i} (pid {w.pid}) {how} unexpectedly")

    def _shutdown_workers(self) -> None:
        # A forked worker inherits this object; only the process that started the workers may
        # stop them.
        if self._shutdown or os.getpid() != self._pid:
            return
        self._shutdown = True
        self._done_event.set()
        for q in self._index_queues:
            q.put(None)
        for w in self._workers:
            w.join(timeout=_JOIN)
            if w.is_alive():
                w.terminate()
                w.join()
        for q in self._index_queues:
            q.close()
        self._data_queue.cancel_join_thread()
        self._data_queue.close()

    def __del__(self) -> None:
        if not _exiting:
            self._shutdown_workers()


__all__ = ["DataLoader", "default_collate", "default_convert", "get_worker_info"]
