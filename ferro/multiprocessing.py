"""``ferro.multiprocessing``: PyTorch's ``torch.multiprocessing`` names, so programs that import
it run: Python's :mod:`multiprocessing` (every public name of it is here) and
:func:`spawn`/:func:`start_processes`, which run ``fn(i, *args)`` in ``nprocs`` new processes
and raise in the parent when one of them fails.

What differs from PyTorch: only tensors moved into shared memory (``t.share_memory_()``,
``module.share_memory()``, CPU only) are sent as memory, by file descriptor (Note
[Shared-memory tensors] in ferro/_shared.py): a child's in-place changes to them (Hogwild
training) are seen by the parent. Any other tensor sent through a queue or as an argument is
pickled, i.e. copied; the sharing-strategy functions exist for the names only. For
data-parallel training across processes use ``ferro.distributed`` launched by ``mpiexec``
(docs/distributed.md): processes started here are not MPI ranks.

Example:
    >>> import ferro.multiprocessing as mp
    >>> mp.get_sharing_strategy()
    'file_descriptor'
"""

from __future__ import annotations

import multiprocessing as _mp
import multiprocessing.connection as _connection
import signal as _signal
import traceback as _traceback
from multiprocessing import *  # noqa: F403  (PyTorch re-exports all of multiprocessing)

from ferro.errors import (
    ArgumentError,
    ProcessException,
    ProcessExitedException,
    ProcessRaisedException,
)

_STRATEGIES = {"file_descriptor", "file_system"}
_strategy = "file_descriptor"


def get_all_sharing_strategies() -> set:
    """PyTorch's tensor-sharing strategies (kept for the names: ferro shares by file descriptor)."""
    return set(_STRATEGIES)


def get_sharing_strategy() -> str:
    """What :func:`set_sharing_strategy` last set (``"file_descriptor"`` at start)."""
    return _strategy


def set_sharing_strategy(new_strategy: str) -> None:
    """Kept for PyTorch programs; shared tensors cross processes by file descriptor either way."""
    global _strategy
    if new_strategy not in _STRATEGIES:
        raise ArgumentError(
            f"set_sharing_strategy: expected one of {sorted(_STRATEGIES)}, got {new_strategy!r}"
        )
    _strategy = new_strategy


def _wrap(fn, i, args, error_queue) -> None:
    try:
        fn(i, *args)
    except KeyboardInterrupt:
        pass  # the parent is stopping everything
    except Exception:  # reported to the parent, then exit code 1 (SystemExit keeps its code)
        error_queue.put(_traceback.format_exc())
        raise SystemExit(1) from None


class ProcessContext:
    """The processes of one :func:`start_processes` call; :meth:`join` waits for them."""

    def __init__(self, processes, error_queues) -> None:
        self.processes = processes
        self.error_queues = error_queues
        self.sentinels = {p.sentinel: i for i, p in enumerate(processes)}

    def pids(self) -> list:
        return [int(p.pid) for p in self.processes]

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the processes (at most ``timeout`` seconds): True when all ended well,
        False on timeout; if one failed, terminate the others and raise its
        :class:`~ferro.errors.ProcessRaisedException` or
        :class:`~ferro.errors.ProcessExitedException`."""
        if not self.sentinels:
            return True
        ready = _connection.wait(list(self.sentinels), timeout=timeout)
        failed = None
        for sentinel in ready:
            i = self.sentinels.pop(sentinel)
            self.processes[i].join()
            if self.processes[i].exitcode != 0 and failed is None:
                failed = i
        if failed is None:
            return not self.sentinels
        for p in self.processes:  # stop the rest, as PyTorch does
            if p.is_alive():
                p.terminate()
            p.join()
        self.sentinels.clear()
        proc, queue = self.processes[failed], self.error_queues[failed]
        if not queue.empty():
            raise ProcessRaisedException(
                f"\n\n-- Process {failed} terminated with the following error:\n{queue.get()}",
                failed,
                proc.pid,
            )
        code = proc.exitcode
        if code < 0:
            name = _signal.Signals(-code).name
            raise ProcessExitedException(
                f"process {failed} terminated with signal {name}", failed, proc.pid, code, name
            )
        raise ProcessExitedException(
            f"process {failed} terminated with exit code {code}", failed, proc.pid, code
        )


def start_processes(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    """Run ``fn(i, *args)`` for ``i`` in ``range(nprocs)``, each in a new process started by
    ``start_method``; with ``join``, wait for all (:meth:`ProcessContext.join`), else return
    the :class:`ProcessContext`."""
    if int(nprocs) < 1:
        raise ArgumentError(f"start_processes: nprocs must be >= 1, got {nprocs}")
    ctx = _mp.get_context(start_method)
    processes, queues = [], []
    for i in range(int(nprocs)):
        queue = ctx.SimpleQueue()
        p = ctx.Process(target=_wrap, args=(fn, i, tuple(args), queue), daemon=daemon)
        p.start()
        processes.append(p)
        queues.append(queue)
    context = ProcessContext(processes, queues)
    if not join:
        return context
    while not context.join():
        pass
    return None


def spawn(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    """PyTorch's ``mp.spawn``: :func:`start_processes` with the ``spawn`` start method by
    default; ``fn`` must be importable (defined at a module's top level)."""
    return start_processes(fn, args, nprocs, join, daemon, start_method)


__all__ = [n for n in _mp.__all__ if not n.startswith("_")] + [
    "ProcessContext",
    "ProcessException",
    "ProcessExitedException",
    "ProcessRaisedException",
    "get_all_sharing_strategies",
    "get_sharing_strategy",
    "set_sharing_strategy",
    "spawn",
    "start_processes",
]
