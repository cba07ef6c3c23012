# cython: language_level=3
"""Grad mode, process-wide switches, counters, and the profiler and anomaly flags.

Grad mode is one ContextVar: each thread starts with grad enabled (a thread-local in effect) and
asyncio tasks see the mode of the code that created them; :func:`grad_mode` reads it with one C
call per op. Everything process-wide lives in one :class:`Flags` object that the other core
modules hold a typed reference to, so reading a flag on the hot path is a struct field read.
"""

from cpython.contextvars cimport PyContextVar_Get, PyContextVar_Reset, PyContextVar_Set
from cpython.long cimport PyLong_AsLong
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_XDECREF

import contextvars

from ferro.errors import ArgumentError


cdef class Flags:
    """The process-wide switches and counters (one instance, :func:`flags`)."""

    def __cinit__(self):
        self.anomaly_nan = True
        self.overrides = True


cdef Flags _FLAGS = Flags()
cdef tuple _NO_ARGS = ()


cdef Flags flags():
    return _FLAGS


cdef object _MODE = contextvars.ContextVar("ferro_grad_mode", default=MODE_GRAD)
# CPython caches a ContextVar's value per thread only once it was found set in the context: a
# var left at its default is a failed HAMT lookup on every read (0.1 us an op in the engine).
# Setting the default value in the importing thread's context makes its reads cached; other
# threads start from an empty context and read the same default.
_MODE.set(MODE_GRAD)


cdef long grad_mode() except -1:
    cdef PyObject* v = NULL
    PyContextVar_Get(_MODE, NULL, &v)
    cdef long m = PyLong_AsLong(<object>v)
    Py_XDECREF(v)
    return m


def is_grad_enabled():
    """True if ops record a graph in the current thread/context."""
    return grad_mode() == MODE_GRAD


def is_inference_mode_enabled():
    """True inside ``ferro.inference_mode()``."""
    return grad_mode() == MODE_INFERENCE


def _set_mode(int mode):
    """Set the grad mode (0 no_grad, 1 grad, 2 inference); returns a token for
    :func:`_reset_mode`."""
    if mode not in (MODE_NO_GRAD, MODE_GRAD, MODE_INFERENCE):
        raise ArgumentError(f"_set_mode: invalid grad mode {mode}; expected 0, 1 or 2")
    return _MODE.set(mode)


def _reset_mode(token):
    _MODE.reset(token)


def _get_mode():
    return grad_mode()


cdef extern from "pythread.h":
    unsigned long PyThread_get_thread_ident()


# What a ModeGuard sets on entry (its subclass's ``_guard_kind``): no_grad and enable_grad keep
# inference mode if it is on; a fixed guard sets the mode given to ``_set_fixed``; a keep guard
# (``inference_mode(False)``) sets the mode that was current on entry.
GUARD_KINDS = {"no_grad": GUARD_NO_GRAD, "enable_grad": GUARD_ENABLE_GRAD,
               "fixed": GUARD_FIXED, "keep": GUARD_KEEP}


cdef class ModeGuard:
    """Compiled base of ferro's grad-mode context managers (``ferro.autograd.grad_mode``).

    ``with`` sets the mode and restores the previous one on exit, at the cost of a ContextVar
    set and reset: ``with no_grad():`` around one small in-place update is common enough in
    training loops that a Python-level enter/exit (thread-local token stacks) was most of its
    cost. The tokens are kept as (thread, token) pairs in entry order, so one instance entered
    in several threads at once, or re-entered, pops each thread's own innermost token."""

    def __cinit__(self, *args, **kwargs):
        self._kind = getattr(type(self), "_guard_kind", GUARD_NO_GRAD)
        self._fixed = MODE_GRAD

    def _set_kind(self, int kind, long mode=MODE_GRAD):
        """Make this guard a ``kind`` one (GUARD_KINDS); a fixed one sets ``mode`` (0 no_grad,
        1 grad, 2 inference) on every entry."""
        modes = (MODE_NO_GRAD, MODE_GRAD, MODE_INFERENCE)
        if kind not in GUARD_KINDS.values() or mode not in modes:
            raise ArgumentError(f"grad mode: invalid guard kind {kind} or mode {mode}")
        self._kind = kind
        self._fixed = mode

    def _push_now(self):
        """Enter now (``set_grad_enabled(False)`` switches when called, not on ``with``)."""
        self._push()

    def _pop_now(self):
        """Undo the innermost entry of this thread; False if there was none."""
        return bool(self._pop())

    cdef long _target(self) except -1:
        cdef long cur
        if self._kind == GUARD_FIXED:
            return self._fixed
        cur = grad_mode()
        if cur == MODE_INFERENCE or self._kind == GUARD_KEEP:
            return cur
        return MODE_NO_GRAD if self._kind == GUARD_NO_GRAD else MODE_GRAD

    cdef int _push(self) except -1:
        cdef unsigned long me = PyThread_get_thread_ident()
        token = PyContextVar_Set(_MODE, self._target())
        if self._tok0 is None and not self._tokens:
            self._tid0, self._tok0 = me, token  # the common case: no list, no tuple
        else:
            if self._tokens is None:
                self._tokens = []
            self._tokens.append((me, token))
        return 0

    cdef int _pop(self) except -1:
        cdef unsigned long me = PyThread_get_thread_ident()
        cdef Py_ssize_t i
        if self._tokens:
            for i in range(len(self._tokens) - 1, -1, -1):
                entry = self._tokens[i]
                if <unsigned long>entry[0] == me:
                    del self._tokens[i]
                    PyContextVar_Reset(_MODE, entry[1])
                    return 1
        if self._tok0 is not None and self._tid0 == me:
            token, self._tok0 = self._tok0, None
            PyContextVar_Reset(_MODE, token)
            return 1
        return 0

    def __enter__(self):
        self._push()
        return self

    @staticmethod
    def _new(cls, *args, **kwargs):
        """The ``__new__`` of the Python guard classes, compiled: ``with no_grad():`` makes one
        guard a block, and a Python-level ``__new__`` was a third of the block's cost. Without
        arguments it allocates; with some, the class's ``_new_with_args`` decides (a bare
        ``@no_grad`` decorator gets the function)."""
        if args or kwargs:
            return cls._new_with_args(*args, **kwargs)
        if not issubclass(cls, ModeGuard):
            raise ArgumentError(f"ModeGuard._new: {cls!r} is not a ModeGuard subclass")
        # ModeGuard's own tp_new for ``cls`` (``ModeGuard.__new__(cls)`` looked the method up and
        # called it through the type's __new__ wrapper: most of this function's cost).
        return (<PyTypeObject*>ModeGuard).tp_new(cls, <PyObject*>_NO_ARGS, NULL)

    def __exit__(self, exc_type, exc, tb):
        self._pop()


# Saved-tensor hooks: the innermost (pack, unpack) pair of this context. The counter of open hook
# contexts (in any thread) lets Node.save skip the ContextVar read when none is open.
cdef object _SAVED_HOOKS = contextvars.ContextVar("ferro_saved_tensors_hooks", default=None)


cdef object saved_hooks():
    return _SAVED_HOOKS.get()


def _push_saved_hooks(pack, unpack):
    _FLAGS.n_hook_contexts += 1
    return _SAVED_HOOKS.set(None if pack is None else (pack, unpack))


def _pop_saved_hooks(token):
    _FLAGS.n_hook_contexts -= 1
    _SAVED_HOOKS.reset(token)


# Profiler (ferro.profiler): one process-wide recorder object, or None. Off, it costs one pointer
# check per op and per node; on, apply and the backward walk time each forward and backward call
# and hand the raw facts to the recorder.

def now_ns():
    """The profiler's clock (CLOCK_MONOTONIC, nanoseconds)."""
    return clock_ns()


def set_profiler(recorder):
    """Install a profiler recorder (or None); returns the previous one."""
    prev = _FLAGS.profiler
    _FLAGS.profiler = recorder
    return prev


def get_profiler():
    """The installed profiler recorder, or None."""
    return _FLAGS.profiler


# Anomaly detection (process-wide, as PyTorch's): record each node's creation site; check every
# gradient for NaN/Inf when check_nan is on.

def set_anomaly(bint enabled, bint check_nan=True):
    """Turn anomaly detection on or off; returns the previous (enabled, check_nan)."""
    prev = (_FLAGS.anomaly, _FLAGS.anomaly_nan)
    _FLAGS.anomaly = enabled
    _FLAGS.anomaly_nan = check_nan
    return prev


def is_anomaly_enabled():
    """True while anomaly detection is on."""
    return _FLAGS.anomaly


def overrides_enabled():
    """Whether the fused backend overrides (ops and optimizers) are on."""
    return _FLAGS.overrides


def set_overrides_enabled(bint enabled):
    """Turn the fused backend overrides on or off (for parity tests and benchmarks); returns the
    previous setting."""
    prev = _FLAGS.overrides
    _FLAGS.overrides = enabled
    return prev


# Parallel backward (Note [Parallel backward]): how many threads a backward may use, the caller
# included. A process-wide default (set_num_threads) and a per-context override (the
# ferro.autograd.parallel context manager), read once per backward.
cdef Py_ssize_t _default_threads = 1
cdef object _THREADS = contextvars.ContextVar("ferro_backward_threads", default=0)


cdef Py_ssize_t backward_threads() except -1:
    cdef Py_ssize_t n = _THREADS.get()
    return n if n > 0 else _default_threads


def set_num_threads(Py_ssize_t n):
    """Set how many threads backward uses by default (1: serial); returns the previous value."""
    global _default_threads
    if n < 1:
        raise ArgumentError(f"set_num_threads: the number of threads must be >= 1, got {n}")
    prev = _default_threads
    _default_threads = n
    return prev


def get_num_threads():
    """How many threads a backward started here would use (the context's, else the default)."""
    return backward_threads()


def _push_threads(Py_ssize_t n):
    if n < 1:
        raise ArgumentError(f"parallel: the number of threads must be >= 1, got {n}")
    return _THREADS.set(n)


def _pop_threads(token):
    _THREADS.reset(token)


# Note [Floating-point warnings] (ferro/__init__.py): how many ops this thread is inside (the
# engine's apply, the in-place ops), read by the warnings filter that ignores NumPy's
# floating-point warnings raised by ferro's compiled code, which are attributed to the caller.
cdef extern from *:
    """
    static _Thread_local int ferro_op_depth = 0;
    static int *ferro_op_depth_ptr(void) { return &ferro_op_depth; }
    """
    int *ferro_op_depth_ptr() noexcept nogil


cdef int *op_depth() noexcept nogil:
    return ferro_op_depth_ptr()


def in_op():
    """True while this thread runs a ferro op (Note [Floating-point warnings])."""
    return ferro_op_depth_ptr()[0] > 0


def stats():
    """Accumulation counters since the last :func:`reset_stats` (for tests and profiling)."""
    return {
        "inplace_adds": _FLAGS.n_inplace_adds,
        "outofplace_adds": _FLAGS.n_outofplace_adds,
        "steals": _FLAGS.n_steals,
        "grad_copies": _FLAGS.n_grad_copies,
    }


def reset_stats():
    """Zero the accumulation counters."""
    _FLAGS.n_inplace_adds = _FLAGS.n_outofplace_adds = 0
    _FLAGS.n_steals = _FLAGS.n_grad_copies = 0
