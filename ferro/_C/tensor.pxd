# Contract of ferro._C.tensor: the tensor core the engine reads and writes directly.

cdef class VersionCounter:
    # Shared by a tensor and its views; bumped by every in-place op on any of them.
    cdef public Py_ssize_t value


cdef class TensorBase:
    # numpy.ndarray (CPU) or cupy.ndarray (GPU). Readable from Python as ``t._data``: ferro's
    # own raw-array accessor (no allocation); users reach the array through numpy(),
    # __array__ or __dlpack__ (``t.data`` is a Tensor, as in PyTorch).
    cdef readonly object _data
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
