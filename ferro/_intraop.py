"""Intra-op splits: a CPU op runs independent parts of its own work on several cores.

Note [Intra-op split]: NumPy's matmul runs OpenBLAS, which splits each GEMM over its own
threads; for the small GEMMs that convolution chunks and recurrent steps make, that split gains
little. On the 2-core development machine 160 stacked (64x64) @ (64x256) float32 products took
61 ms at one BLAS thread, 46 ms at two (1.33x), and 31 ms as two threads each running half of
the products with ONE BLAS thread (1.95x; matmul releases the GIL). With two BLAS threads,
two such callers gained nothing (46 ms). So an op whose work falls into independent parts
(a convolution's batch chunks, say) can :func:`run` them here: the parts run on a small pool
of threads (the caller's thread takes part 0) while OpenBLAS runs one thread per GEMM, and
ferro's OpenMP kernels called inside a part run one thread too. The BLAS thread count is
process-wide (OpenBLAS has no per-thread setting: even ``openblas_set_num_threads_local`` sets
the global count), so it is set to one while any split runs and given back when the last one
ends; another thread's GEMM in that window runs on one thread too, whose bits may differ from
two threads' (so no split runs beside a parallel backward walk's other nodes: Note [Nodes that
run alone] below).

:func:`parts` says how many parts to cut: 1 (run serially, as before) where the BLAS's
thread count cannot be controlled (a BLAS other than OpenBLAS), where it is one
(``OPENBLAS_NUM_THREADS=1``, one core, or a process per core as in ferro.distributed), inside a
part (no nesting), or for too little work. Ops must make their results independent of how many
parts run, or state where they are not (a sum of partial results in a different order).
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy  # noqa: F401  (loaded first: its BLAS is what _load_functions looks for)

from ferro._C import gemm as _gemm


def _load_functions():
    """OpenBLAS's ``(get, set, library)`` thread-count functions and libgomp's: ``None``
    for either library that is not loaded (or not Linux, where /proc/self/maps is missing)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "/" in line}
    except OSError:
        return None, None

    def functions(match, names):
        for path in sorted(p for p in paths if match(os.path.basename(p))):
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                continue
            for get, put in names:
                if hasattr(lib, get) and hasattr(lib, put):
                    get_fn, set_fn = getattr(lib, get), getattr(lib, put)
                    get_fn.restype, get_fn.argtypes = ctypes.c_int, []
                    set_fn.restype, set_fn.argtypes = None, [ctypes.c_int]
                    return get_fn, set_fn, lib
        return None

    blas = functions(
        lambda name: "openblas" in name,
        [
            ("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
            ("openblas_get_num_threads64_", "openblas_set_num_threads64_"),
            ("openblas_get_num_threads", "openblas_set_num_threads"),
        ],
    )
    # ferro's kernels link the system libgomp (soname libgomp.so.1); a vendored copy under
    # another name (PyTorch's, scikit-learn's) is another runtime and not ferro's.
    gomp = functions(
        lambda name: name == "libgomp.so.1" or name.startswith("libgomp.so.1."),
        [("omp_get_max_threads", "omp_set_num_threads")],
    )
    return blas, gomp


_BLAS, _GOMP = _load_functions()


def blas_library():
    """The OpenBLAS whose thread count this module controls (a ``ctypes.CDLL``; ``None`` where
    there is none): NumPy's. Ops that call its CBLAS directly look their symbols up here."""
    return None if _BLAS is None else _BLAS[2]


# The CBLAS names' prefix and suffix, and the library's config function, in the order tried.
_CBLAS_NAMES = (
    ("scipy_cblas_", "64_", "scipy_openblas_get_config64_"),
    ("cblas_", "64_", "openblas_get_config64_"),
    ("cblas_", "", "openblas_get_config"),
)


def cblas(*names):
    """``(addresses, wide)`` of the CBLAS functions ``names`` (``"sgemm"``, ...) of
    :func:`blas_library`, the first naming of _CBLAS_NAMES it exports them all under, or
    ``None``. ``wide``: they take 64-bit ints, where the library's config says USE64BITINT (an
    ILP64 build), else where the names end in 64_. For compiled code that calls NumPy's BLAS."""
    lib = blas_library()
    for pre, suf, config in _CBLAS_NAMES if lib is not None else ():
        full = [f"{pre}{name}{suf}" for name in names]
        if all(hasattr(lib, name) for name in full):
            wide = suf == "64_"
            if hasattr(lib, config):
                getattr(lib, config).restype = ctypes.c_char_p
                wide = b"USE64BITINT" in (getattr(lib, config)() or b"")
            return tuple(ctypes.cast(getattr(lib, n), ctypes.c_void_p).value for n in full), wide
    return None


def blas_threads():
    """The addresses of the BLAS's ``(get, set)`` thread-count functions, or ``None``."""
    if _BLAS is None:
        return None
    return tuple(ctypes.cast(f, ctypes.c_void_p).value for f in _BLAS[:2])


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pool: ThreadPoolExecutor | None = None
        self.workers = 0  # the pool's size
        self.active = 0  # splits running
        self.local = threading.local()  # .inside: this thread runs a part
        self.threads = (_BLAS or _GOMP or (lambda: 1,))[0]()


_state = _State()


def _after_fork() -> None:
    # A forked child has none of the pool's threads and may inherit a lock held mid-split.
    global _state
    threads = _state.threads
    _state = _State()
    _state.threads = threads


os.register_at_fork(after_in_child=_after_fork)


def num_threads() -> int:
    """How many threads one CPU op may use (``ferro.get_num_threads``)."""
    return _state.threads


get_num_threads = num_threads


def set_num_threads(n: int) -> None:
    """PyTorch's ``torch.set_num_threads``: one CPU op uses at most ``n`` threads (1: every
    op on the calling thread, as with one core). Sets three things: how many parts an intra-op
    split runs (Note [Intra-op split]), OpenBLAS's thread count (process-wide) and the OpenMP
    thread count of ferro's kernels in the calling thread (libgomp keeps it per thread: other
    threads you start keep libgomp's default, ``OMP_NUM_THREADS`` or the cores). Results do not
    change, only speed. At import the count is OpenBLAS's (``OPENBLAS_NUM_THREADS``,
    ``OMP_NUM_THREADS`` or the cores), or OpenMP's where the BLAS cannot be controlled.

    Example:
        >>> before = ferro.get_num_threads()
        >>> ferro.set_num_threads(1)
        >>> ferro.get_num_threads()
        1
        >>> ferro.set_num_threads(before)
    """
    from ferro.errors import ArgumentError, ArgumentTypeError

    if isinstance(n, bool) or not isinstance(n, int):
        raise ArgumentTypeError(f"set_num_threads: expected an int, got {type(n).__name__}")
    if n < 1:
        raise ArgumentError(f"set_num_threads: the number of threads must be >= 1, got {n}")
    state = _state
    with state.lock:
        state.threads = n
        if _BLAS is not None:  # during a hold, the count given back at its end
            _gemm.give_back(n)
    if _GOMP is not None:
        _GOMP[1](n)


def parts(work: int, minimum: int = 1) -> int:
    """How many parts to cut ``work`` units into, each of at least ``minimum`` units: at most
    :func:`num_threads`, and 1 where a split cannot help (module docstring)."""
    n = min(_state.threads, work // max(minimum, 1))
    if n < 2 or _BLAS is None or getattr(_state.local, "inside", False) or _gemm.walk.on:
        return 1
    return n


# Note [Nodes that run alone]: ``ferro._C.gemm.walk.on`` is true in a thread that runs nodes
# of a parallel backward walk beside other threads (ferro._C.engine sets it). OpenBLAS's thread
# count is process-wide and its bits at one thread and two differ for some products (a sum over
# more than ~450 float32 rows or ~150 float64 ones: its one-thread and threaded drivers cut K
# differently), so a split there, which holds the count at one, would change the bits of the
# GEMMs the other walk threads run. There :func:`parts` is 1 and :func:`one_blas_thread` holds
# nothing. An op whose backward must split to give the serial walk's bits sets ``ctx._alone``
# in forward (the recurrent layer when its steps split): the walk runs that node alone (the
# other threads wait for it, and it waits for their nodes to end), with the flag off, so it
# splits and holds as in a serial walk. Where the two-core GEMM is on (``gemm.set_least``), a
# walk thread's product holds the count too (its parts are one-thread calls, the serial walk's
# bits), so an op whose backward runs NumPy's threaded BLAS itself sets ``ctx._alone`` as well:
# the stacked products of ``matmul`` from OpenBLAS's threading threshold, and the
# decompositions (LAPACK). The recurrent layer's own products do not yet, which is one reason
# the two-core GEMM stays off by default (Note [Two-core GEMM] in docs/design.md).


def _part(fn, i):
    local = _state.local
    local.inside = True
    omp = _GOMP[0]() if _GOMP is not None else 1
    if omp != 1:
        _GOMP[1](1)
    try:
        return fn(i)
    finally:
        if omp != 1:
            _GOMP[1](omp)
        local.inside = False


def run(fn, n: int) -> list:
    """``[fn(0), ..., fn(n - 1)]`` with the calls on ``n`` threads (``fn(0)`` on the caller's),
    OpenBLAS and ferro's OpenMP at one thread each meanwhile; ``n`` from :func:`parts`. A part
    that no pool thread has started by the time the caller's part ends (the pool busy with
    another split) runs on the caller's thread. Every call finishes before this returns; the
    first exception (by part) is raised then."""
    if n <= 1:
        return [fn(i) for i in range(n)]
    state = _state
    with state.lock:
        _hold(state)
        if state.workers < n - 1:
            if state.pool is not None:
                state.pool.shutdown(wait=False)
            state.pool = ThreadPoolExecutor(n - 1, thread_name_prefix="ferro-intraop")
            state.workers = n - 1
        pool = state.pool
    # Each pool thread runs its part in a copy of the caller's context: NumPy keeps its memory
    # handler in a context variable, and ferro's (64-byte aligned, caching: ferro._C.allocator)
    # is installed in the importing context only. Run in the pool threads' own empty context,
    # the parts' buffers came from NumPy's default handler, 16 bytes past a cache line: the 3-d
    # Winograd transforms' vector stores then split lines, 0.73 -> 1.5 us a call (issue 16).
    context = contextvars.copy_context()
    try:
        futures = [pool.submit(context.copy().run, _part, fn, i) for i in range(1, n)]
        results, error = [None] * n, None
        try:
            results[0] = _part(fn, 0)
        except BaseException as exc:  # noqa: BLE001 - re-raised below, after the others end
            error = exc
        for i, future in enumerate(futures, 1):
            try:  # a part no pool thread has started (another split holds it) runs here
                results[i] = _part(fn, i) if future.cancel() else future.result()
            except BaseException as exc:  # noqa: BLE001
                error = error or exc
        if error is not None:
            raise error
        return results
    finally:
        _release(state)


def _hold(state) -> None:
    # Under state.lock: OpenBLAS at one thread, through the one count that ferro._C.gemm's
    # products share (the count before the first holder is given back by the last).
    state.active += 1
    _gemm.hold()


def _release(state) -> None:
    with state.lock:
        state.active -= 1
        _gemm.release()


@contextlib.contextmanager
def one_blas_thread():
    """OpenBLAS at one thread for the code inside, as during a split (nestable and shared
    across threads: the count is given back when the last holder leaves): for compiled code
    that runs its own threads and calls the BLAS from each (ferro/ops/recurrent.py's hidden-unit
    split). The count is process-wide, so another thread's GEMMs meanwhile run at
    one thread too (Note [Parallel backward] says why the backward walk does not hold it)."""
    state = _state
    if _BLAS is None or _gemm.walk.on:  # Note [Nodes that run alone]
        yield
        return
    with state.lock:
        _hold(state)
    try:
        yield
    finally:
        _release(state)
