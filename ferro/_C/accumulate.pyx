# cython: language_level=3
"""Note [Grad ownership] as code: the slot a pending gradient lives in, the exclusivity and
writability checks, the one in-place add (used by the gradient table and by the ``.grad``
commit), sum-to-shape, the GPU accumulation hooks, and the commit lock.

The rule (docs/design.md, Note [Grad ownership]): a slot's first gradient is stored as is; a
later one is added in place only into an array the slot *owns* and that nothing else holds
(:func:`_slot_exclusive`, the one refcount check, calibrated at import); otherwise the add is out
of place and its fresh result becomes owned. A leaf's ``.grad`` takes an owned array without a
copy ("stealing"); later backward calls add into ``.grad`` in place, as PyTorch does.
"""

cimport cython
cimport numpy as cnp
from cpython.object cimport PyObject
from cpython.pythread cimport (
    NOWAIT_LOCK,
    WAIT_LOCK,
    PyThread_acquire_lock,
    PyThread_allocate_lock,
    PyThread_release_lock,
    PyThread_type_lock,
)

from ferro._C cimport cpu_kernels
from ferro._C.graph cimport _as_array, _same_dtype, _shape_is
from ferro._C.state cimport Flags, flags
from ferro._C.tensor cimport TensorBase, data_of, new_tensor

import numpy as np

from ferro.errors import DeviceError, DtypeError, GraphError, ShapeError

cnp.import_array()

cdef extern from "Python.h":
    Py_ssize_t _refcnt "Py_REFCNT"(PyObject* o)

cdef object _np = np
cdef Flags _F = flags()


@cython.no_gc  # see accumulate.pxd
cdef class _Entry:
    """Per-walk state of one graph target (a Node, or a leaf tensor) or one node output."""


cdef _Entry _slot(_Entry e, Py_ssize_t nr, Py_ssize_t n_out):
    # The entry for output ``nr`` of a target: the target's own entry unless it is a node with
    # several outputs.
    if n_out == 1:
        return e
    if e.subs is None:
        e.subs = [None] * n_out
    s = e.subs[nr]
    if s is None:
        s = _Entry.__new__(_Entry)
        e.subs[nr] = s
    return <_Entry>s


# Refcount of an array held by exactly one _Entry, as _slot_exclusive reads it. Calibrated at
# import so the rule follows the interpreter (3.14's borrowed references, free-threading).
cdef Py_ssize_t _REF_BASELINE = -1


cdef bint _slot_exclusive(_Entry e) noexcept:
    """True if ``e.grad`` is referenced by ``e`` and nothing else. The one refcount check."""
    return _refcnt(<PyObject*>e.grad) == _REF_BASELINE


cdef bint _plain_array(object arr) noexcept:
    # An exact ndarray that owns writeable, C-contiguous data: writing it touches nobody else.
    if type(arr) is not cnp.ndarray:
        return False
    cdef cnp.ndarray a = <cnp.ndarray>arr
    return (cnp.PyArray_CHKFLAGS(a, cnp.NPY_ARRAY_OWNDATA)
            and cnp.PyArray_ISWRITEABLE(a)
            and cnp.PyArray_IS_C_CONTIGUOUS(a))


# The GPU backend (the composition root, ferro/__init__.py, registers ferro.cuda.ops; None
# until then): whether a CuPy array owns its memory as _plain_array asks of NumPy arrays, the
# layout predicate of its kernels, ``dst += src`` in place, and sum-to-shape.
cdef object _gpu_owns = None
cdef object _gpu_accepts = None
cdef object _gpu_accumulate = None
cdef object _gpu_sum_to_shape = None


def set_gpu_backend(owns, accepts, accumulate, sum_to_shape):
    """Register the GPU accumulation and sum-to-shape kernels (``ferro/__init__.py`` does).

    ``owns(arr)``: the CuPy array owns writeable, C-contiguous memory nobody else sees.
    ``accepts(arrays) -> bool``: the kernels take these arrays (one float dtype and shape,
    C-contiguous); asked first, so nothing is refused by an exception. ``accumulate(dst, src)``:
    ``dst += src`` in place. ``sum_to_shape(g, shape)``: a new array of ``shape``.
    Both kernels run only while overrides are on (``set_overrides_enabled``).
    """
    global _gpu_owns, _gpu_accepts, _gpu_accumulate, _gpu_sum_to_shape
    _gpu_owns, _gpu_accepts = owns, accepts
    _gpu_accumulate, _gpu_sum_to_shape = accumulate, sum_to_shape


cdef bint _can_write(_Entry e) except -1:
    """Note [Grad ownership]: may the engine write into ``e.grad`` now?"""
    if not e.owned and _slot_exclusive(e) and (
        _plain_array(e.grad)
        or (_gpu_owns is not None and type(e.grad) is not cnp.ndarray and _gpu_owns(e.grad))
    ):
        e.owned = True
    return e.owned and _slot_exclusive(e)


cdef int _add_inplace(object dst, object src) except -1:
    """``dst += src`` in place if ``dst`` can take it (the one in-place add); 1 if done, else 0.

    The caller has decided that writing ``dst`` is allowed (an owned slot, or a ``.grad``); this
    checks that it is possible: same array type, shape and dtype, and for NumPy a writeable
    C-contiguous ``dst`` the nogil kernel accepts.
    """
    if type(dst) is cnp.ndarray:
        if (cpu_kernels.supports(dst) and _shape_is(src, dst.shape) and _same_dtype(dst, src)
                and cnp.PyArray_ISWRITEABLE(<cnp.ndarray>dst)
                and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>dst)):
            cpu_kernels.add_inplace(<cnp.ndarray>dst,
                                    src if type(src) is cnp.ndarray else _np.asarray(src))
            _F.n_inplace_adds += 1
            return 1
        return 0
    if type(src) is not type(dst) or not _shape_is(src, dst.shape) or not _same_dtype(dst, src):
        return 0
    # A CuPy array: the accumulation kernel when overrides are on and it takes the arrays,
    # CuPy's in-place add otherwise.
    if _F.overrides and _gpu_accumulate is not None and _gpu_accepts((dst, src)):
        _gpu_accumulate(dst, src)
    else:
        dst += src
    _F.n_inplace_adds += 1
    return 1


def _calibrate():
    global _REF_BASELINE
    cdef _Entry probe = _Entry.__new__(_Entry)
    probe.grad = np.empty(1)
    _REF_BASELINE = _refcnt(<PyObject*>probe.grad)
    # The rule must accept an array only the entry holds and refuse one held twice.
    if not _slot_exclusive(probe):
        raise GraphError("ferro: refcount calibration failed")
    _second_holder = probe.grad
    if _slot_exclusive(probe):
        raise GraphError("ferro: refcount calibration cannot see a second holder")
    return _REF_BASELINE


_calibrate()


cdef int _add_to(_Entry e, object g) except -1:
    """Accumulate ``g`` into ``e`` following Note [Grad ownership]."""
    if e.grad is None:
        e.grad = g
        e.owned = False
        return 0
    if _can_write(e) and _add_inplace(e.grad, g):
        return 0
    e.grad = _as_array(e.grad + g)
    e.owned = True
    _F.n_outofplace_adds += 1
    return 0


cdef object _sum_to_shape(object g, tuple shape):
    """Undo broadcasting: sum ``g`` back to ``shape``. The one place it happens."""
    if cpu_kernels.supports(g):
        return cpu_kernels.sum_to_shape(<cnp.ndarray>g, shape)
    if (_F.overrides and _gpu_sum_to_shape is not None and type(g) is not cnp.ndarray
            and _gpu_accepts((g,))):
        return _gpu_sum_to_shape(g, shape)
    return sum_to_shape_generic(g, shape)


def sum_to_shape_generic(g, tuple shape):
    """Reference implementation of sum-to-shape with array-API calls (NumPy or CuPy)."""
    cdef Py_ssize_t lead = g.ndim - len(shape)
    if lead < 0:
        raise ShapeError(f"sum_to_shape: cannot reduce shape {g.shape} to {shape}")
    axes = list(range(lead))
    for i, s in enumerate(shape):
        gs = g.shape[lead + i]
        if s == 1 and gs != 1:
            axes.append(lead + i)
        elif s != gs:
            raise ShapeError(f"sum_to_shape: cannot reduce shape {g.shape} to {shape}")
    if axes:
        g = g.sum(axis=tuple(axes), keepdims=True)
    if lead:
        g = g.reshape(shape)
    return _as_array(g)


def sum_to_shape(g, tuple shape):
    """Sum the array ``g`` back to ``shape`` (one kernel on the CPU and the GPU, generic for
    other arrays)."""
    if _shape_is(g, shape):
        return g
    return _sum_to_shape(g, shape)


# Note [Commit lock] (docs/design.md): commits from several threads may meet in one leaf's
# .grad; they are serialized by one process-wide lock, taken without the GIL when contended (the
# holder needs the GIL to finish) and never held while user code runs.
cdef PyThread_type_lock _commit_lock = PyThread_allocate_lock()


cdef int _lock_commits() except -1:
    if not PyThread_acquire_lock(_commit_lock, NOWAIT_LOCK):
        with nogil:
            PyThread_acquire_lock(_commit_lock, WAIT_LOCK)
    return 0


cdef void _unlock_commits() noexcept:
    PyThread_release_lock(_commit_lock)


cdef int _check_commit(_Entry s, TensorBase t) except -1:
    # Before any .grad is written: the existing .grad must still fit the gradient (it can stop
    # fitting when the user replaced t.data by an array of another shape).
    cur = t._grad
    if cur is None:
        return 0
    arr = data_of(<TensorBase>cur)
    if type(arr) is not type(s.grad):
        raise DeviceError(
            f"backward: the existing .grad of a tensor of shape {tuple(t._arr.shape)} is a "
            f"{type(arr).__module__}.{type(arr).__name__}, the new gradient a "
            f"{type(s.grad).__module__}.{type(s.grad).__name__}"
        )
    if not _shape_is(arr, tuple(s.grad.shape)):
        raise ShapeError(
            f"backward: the existing .grad has shape {tuple(arr.shape)} but the new gradient of "
            f"the tensor has shape {tuple(s.grad.shape)}; set .grad to None first"
        )
    if not _same_dtype(arr, s.grad):
        raise DtypeError(
            f"backward: the existing .grad has dtype {arr.dtype} but the new gradient of the "
            f"tensor has dtype {s.grad.dtype}; set .grad to None first"
        )
    return 0


cdef int _commit_grad(_Entry s, TensorBase t) except -1:
    """Write a finished gradient into ``t.grad``: steal it when owned, else copy; later calls
    add into ``.grad`` in place, as PyTorch does (out of place when ``.grad`` cannot take it:
    read-only, non-contiguous, or a view the user made)."""
    cur = t._grad
    if cur is None:
        if _can_write(s):
            t._grad = new_tensor(s.grad)
            _F.n_steals += 1
        else:  # (a large NumPy view copied on both cores: Note [Two-core elementwise ops])
            g = cpu_kernels.materialize(s.grad, True)
            t._grad = new_tensor(s.grad.copy() if g is NotImplemented else g)
            _F.n_grad_copies += 1
    elif not _add_inplace(data_of(<TensorBase>cur), s.grad):
        t._grad = new_tensor(_as_array(data_of(<TensorBase>cur) + s.grad))
        _F.n_outofplace_adds += 1
    (<TensorBase>t._grad)._is_grad = True
    s.grad = None
    return 0
