"""Parallel backward: run independent branches of the graph on several threads.

Off by default (one thread). ``set_num_threads(n)`` changes the process-wide default; the
``parallel(n)`` context manager (also a decorator) sets it for the code inside, in this thread or
asyncio task only; ``backward(num_threads=n)`` and ``grad(num_threads=n)`` set it for one call.
Gradients are bit-identical to serial backward whatever the thread count and timing, each node
runs under the caller's grad mode, saved-tensor hooks and profiler, and backward stays atomic
(docs/autograd.md, "Parallel backward"; Note [Parallel backward] in docs/design.md).

Example:
    >>> x = ferro.ones(3, requires_grad=True)
    >>> loss = (x.exp() + x.sin()).sum()
    >>> with ferro.autograd.parallel(2):
    ...     loss.backward()
"""

from __future__ import annotations

import functools

from ferro._C.engine import _pop_threads, _push_threads, get_num_threads, set_num_threads


class parallel:
    """Backward calls inside use ``num_threads`` threads (the calling thread included)."""

    def __init__(self, num_threads: int) -> None:
        self.num_threads = int(num_threads)
        self._tokens: list = []

    def __enter__(self):
        self._tokens.append(_push_threads(self.num_threads))
        return self

    def __exit__(self, *exc) -> None:
        _pop_threads(self._tokens.pop())

    def __call__(self, func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with parallel(self.num_threads):
                return func(*args, **kwargs)

        return wrapper


__all__ = ["parallel", "set_num_threads", "get_num_threads"]
