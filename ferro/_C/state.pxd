# Contract of ferro._C.state: grad mode, process-wide switches, counters, profiler and anomaly
# flags. The other core modules read the flags through one shared object (a struct field read
# after import); grad mode through one C call.
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

cdef enum:
    MODE_NO_GRAD = 0
    MODE_GRAD = 1
    MODE_INFERENCE = 2

cdef enum:
    GUARD_NO_GRAD = 0
    GUARD_ENABLE_GRAD = 1
    GUARD_FIXED = 2
    GUARD_KEEP = 3


cdef class Flags:
    cdef bint anomaly              # anomaly detection: record creation sites
    cdef bint anomaly_nan          # ... and check every gradient for NaN/Inf
    cdef bint overrides            # fused backend overrides (ops, accumulation, optimizers) on
    cdef Py_ssize_t n_hook_contexts  # saved-tensor hook contexts open in any thread
    cdef object profiler           # the profiler's recorder, or None
    cdef Py_ssize_t n_pending      # tensors registered with a pending chain (ferro._C.tensor)
    # Accumulation counters (tests read them to check Note [Grad ownership]).
    cdef Py_ssize_t n_inplace_adds
    cdef Py_ssize_t n_outofplace_adds
    cdef Py_ssize_t n_steals
    cdef Py_ssize_t n_grad_copies


cdef class ModeGuard:
    cdef int _kind                 # one of the GUARD_ kinds above
    cdef long _fixed               # the mode a GUARD_FIXED guard sets
    # Open entries, oldest first: the first in (_tid0, _tok0) (a token, or None), any more in
    # _tokens as (thread ident, ContextVar token); a list is made only for nested or concurrent
    # entries of one guard.
    cdef unsigned long _tid0
    cdef object _tok0
    cdef list _tokens
    cdef long _target(self) except -1
    cdef int _push(self) except -1
    cdef int _pop(self) except -1


cdef Flags flags()
cdef long grad_mode() except -1
cdef object saved_hooks()
cdef Py_ssize_t backward_threads() except -1
cdef int *op_depth() noexcept nogil


cdef inline long long clock_ns() noexcept nogil:
    # The profiler's clock: CLOCK_MONOTONIC in nanoseconds.
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <long long>ts.tv_sec * 1000000000 + ts.tv_nsec
