# Contract of ferro._C.tensor: the tensor core the engine reads and writes directly.

cdef class VersionCounter:
    # Shared by a tensor and its views; bumped by every in-place op on any of them.
    cdef public Py_ssize_t value


cdef class TensorBase:
    # numpy.ndarray (CPU) or cupy.ndarray (GPU), or a cpu_kernels.Pending not computed yet
    # (Note [Lazy elementwise chains]): read it with data_of(t), never as t._arr, unless the
    # code takes a Pending (the engine's lazy ops) or only reads shape, dtype or identity.
    # Readable from Python as ``t._data`` (data_of): ferro's own raw-array accessor (no
    # allocation); users reach the array through numpy(), __array__ or __dlpack__ (``t.data``
    # is a Tensor, as in PyTorch).
    cdef object _arr
    cdef object _grad            # TensorBase or None
    cdef object _grad_fn         # ferro._C.engine.Node or None (leaf)
    cdef Py_ssize_t _output_nr   # which output of _grad_fn this tensor is
    cdef bint _requires_grad
    cdef bint _is_inference      # created under inference_mode
    cdef bint _is_grad           # is (or was) a leaf's .grad: .data keeps its shape and dtype
    cdef VersionCounter _vc      # created lazily: when saved, viewed or modified in place
    cdef Py_ssize_t _birth       # _vc's value when this tensor's history (grad_fn) was made
    cdef dict _hooks             # leaf tensor hooks: handle id -> fn
    cdef dict _post_acc_hooks    # leaf post-accumulate hooks: handle id -> fn
    cdef object __weakref__

    cdef int _set_requires_grad(self, bint value) except -1

cdef TensorBase new_tensor(object data)
cdef VersionCounter version_counter(TensorBase t)
cdef int register_pending(TensorBase t) except -1
cpdef int flush() except -1
cpdef int flush_except(TensorBase keep) except -1
# t's array, every pending chain computed first (Note [Lazy elementwise chains]): what any code
# that writes an array, keeps it or hands it on must read. Hot paths inline its test:
# ``t._arr if not _F.n_pending else data_of(t)``.
cdef object data_of(TensorBase t)
