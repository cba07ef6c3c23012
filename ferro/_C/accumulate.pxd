# Contract of ferro._C.accumulate: Note [Grad ownership] as code. Pending gradients live in
# slots (_Entry) the engine owns; one in-place add serves the gradient table and the .grad commit.
cimport cython

from ferro._C.tensor cimport TensorBase


# Outside the cyclic GC: an entry lives in one walk's tables only and nothing it holds (a target,
# gradient arrays, lists of entries) refers back to it, so it is never part of a cycle; tracked,
# the ~one entry per node of a backward made the collector run and rescan the graph.
@cython.no_gc
cdef class _Entry:
    cdef object target
    cdef Py_ssize_t deps
    cdef object grad           # the pending (summed) gradient array
    cdef bint owned            # the engine may write into grad (still refcount-checked)
    cdef bint wanted           # its gradient is an output of this walk (grad() / inputs=)
    cdef bint needed           # a node whose backward must run
    cdef list subs             # multi-output nodes: one _Entry per output
    cdef list captures         # positions in the result of grad()
    # Parallel backward (Note [Parallel backward]): the serial pop order of this target, and for a
    # slot the keys of the contributions it will receive in serial order, the next one due, and
    # those that arrived early.
    cdef Py_ssize_t rank
    cdef list expect
    cdef Py_ssize_t next_key
    cdef dict parked


cdef _Entry _slot(_Entry e, Py_ssize_t nr, Py_ssize_t n_out)
cdef int _add_to(_Entry e, object g) except -1
cdef object _sum_to_shape(object g, tuple shape)
cdef int _check_commit(_Entry s, TensorBase t) except -1
cdef int _commit_grad(_Entry s, TensorBase t) except -1
cdef int _lock_commits() except -1
cdef void _unlock_commits() noexcept
