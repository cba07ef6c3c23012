# cython: language_level=3
"""The tensor core: a Cython extension type holding the array and the autograd fields.

The Python face (operators, methods that call ops) is ``ferro.tensor.Tensor``, a subclass with
no ``__dict__``; it registers itself with :func:`set_tensor_type` so the engine creates outputs
of that type without going through Python.
"""

from cpython.object cimport PyObject, PyTypeObject

from ferro._C.cpu_kernels cimport Pending, realize
from ferro._C.state cimport Flags, flags

import weakref

from ferro.errors import ArgumentTypeError, DeviceError, DtypeError, GraphError, ShapeError

cdef type _tensor_type = TensorBase
cdef tuple _EMPTY = ()
cdef Flags _F = flags()
# Note [Lazy elementwise chains] (ferro/_C/cpu_kernels.pyx): weak references to the tensors
# made with a Pending; _F.n_pending counts them (dead ones too, until the next flush).
cdef list _pending = []

# The dtypes a tensor may hold; only the floating ones may require grad.
_FLOAT_KINDS = frozenset("f")


def set_tensor_type(type cls):
    """Make the engine create tensors of ``cls`` (a subclass of TensorBase)."""
    global _tensor_type
    if not issubclass(cls, TensorBase):
        raise ArgumentTypeError(f"set_tensor_type: {cls!r} is not a subclass of TensorBase")
    _tensor_type = cls


cdef VersionCounter version_counter(TensorBase t):
    if t._vc is None:
        t._vc = VersionCounter()
    return t._vc


cdef class VersionCounter:
    """How many in-place modifications the data of a tensor (and its views) has seen."""

    def __repr__(self):
        return f"VersionCounter({self.value})"


cdef TensorBase new_tensor(object data):
    # tp_new directly: no __init__, no argument parsing.
    cdef TensorBase t = <TensorBase>(<PyTypeObject*>_tensor_type).tp_new(
        _tensor_type, <PyObject*>_EMPTY, NULL)
    t._arr = data
    return t


cdef int register_pending(TensorBase t) except -1:
    # t holds a Pending: flush() computes it before any array leaves ferro's hands. The list
    # drops the tensors that died before it grows past 64 (chains made and never read).
    global _pending
    if len(_pending) >= 64:
        _pending = [r for r in _pending if r() is not None]
        if len(_pending) >= 64:
            flush()
        _F.n_pending = len(_pending)
    _pending.append(weakref.ref(t))
    _F.n_pending += 1
    return 0


cpdef int flush() except -1:
    """Compute every pending chain (Note [Lazy elementwise chains]) and put each result in its
    tensor: after this, no tensor holds a Pending."""
    return flush_except(None)


cpdef int flush_except(TensorBase keep) except -1:
    """:func:`flush`, but ``keep`` (None: none) stays pending and registered: the fused update
    reads its program's leaves itself (Note [Fused update] in ferro/_C/graph.pyx)."""
    cdef TensorBase t
    cdef object kept = None
    while _pending:
        ref = _pending.pop()
        t = ref()
        if t is keep and keep is not None:
            kept = ref
        elif t is not None and type(t._arr) is Pending:
            try:
                t._arr = realize(<Pending>t._arr)
            except BaseException:  # (out of memory) t stays pending, and registered
                _pending.append(ref)
                if kept is not None:
                    _pending.append(kept)
                _F.n_pending = len(_pending)
                raise
    if kept is not None:
        _pending.append(kept)
    _F.n_pending = len(_pending)
    return 0


def is_pending(TensorBase t):
    """True while ``t`` holds a chain not computed yet (Note [Lazy elementwise chains])."""
    return type(t._arr) is Pending


cdef object data_of(TensorBase t):
    if _F.n_pending:
        flush()
    return t._arr


cdef int _check_array(object value, str who) except -1:
    # The array types a tensor may hold: NumPy's (native byte order) and CuPy's.
    t = type(value)
    if t.__module__.split(".")[0] not in ("numpy", "cupy") or t.__name__ != "ndarray":
        raise ArgumentTypeError(
            f"{who}: expected a numpy.ndarray, a cupy.ndarray or a Tensor, got "
            f"{t.__module__}.{t.__name__}"
        )
    if not value.dtype.isnative:
        raise DtypeError(
            f"{who}: the array has non-native byte order ({value.dtype.str}); convert it with "
            "arr.astype(arr.dtype.newbyteorder('='))"
        )
    return 0


cdef class TensorBase:
    """Compiled core of :class:`ferro.Tensor`. Use ``ferro.tensor`` and friends to create one."""

    @property
    def _data(self):
        """The array (ferro's own raw accessor): every pending chain is computed first."""
        return data_of(self)

    @property
    def _meta(self):
        """The array, or the Pending that stands for it (Note [Lazy elementwise chains]): read
        its shape, dtype, ndim and size only. Nothing is computed."""
        return self._arr

    @property
    def data(self):
        """A tensor sharing this one's memory, without history, as PyTorch's ``.data``.

        It is a new leaf that does not require grad and has its own version counter: in-place
        changes through it (``p.data.add_(u)``, ``p.data[0] = 1``) are seen by this tensor but
        not by autograd's version checks (use ``detach()`` to keep those checks). The raw array
        is ``t.numpy()`` (CPU), ``numpy.asarray(t)`` or ``t.__dlpack__()``; ``t.data = value``
        replaces the memory (a Tensor or an array of a floating dtype when grad is required).
        """
        return new_tensor(data_of(self))

    @data.setter
    def data(self, value):
        if isinstance(value, TensorBase):
            value = data_of(<TensorBase>value)
        cur = data_of(self)
        _check_array(value, "Tensor.data")
        if self._requires_grad and value.dtype.kind not in _FLOAT_KINDS:
            raise DtypeError(
                f"Tensor.data: a tensor that requires grad needs floating point data, got dtype "
                f"{value.dtype}"
            )
        if self._is_grad and (value.shape != cur.shape or value.dtype != cur.dtype
                              or type(value) is not type(cur)):
            # A .grad's data must keep fitting the tensor it belongs to; the next backward would
            # otherwise fail halfway through (or broadcast silently).
            raise ShapeError(
                f"Tensor.data: this tensor is a .grad of shape {cur.shape} and dtype "
                f"{cur.dtype}; got an array of shape {value.shape} and dtype {value.dtype}. "
                "Assign the tensor's .grad instead (or set it to None)"
            )
        self._arr = value

    @property
    def requires_grad(self):
        """Whether gradients are computed for this tensor."""
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, bint value):
        self._set_requires_grad(value)

    cdef int _set_requires_grad(self, bint value) except -1:
        if self._grad_fn is not None and not value:
            raise GraphError(
                "requires_grad: only leaf tensors can change requires_grad; "
                "use .detach() to get a tensor that does not require grad"
            )
        if value and self._arr.dtype.kind not in _FLOAT_KINDS:
            raise DtypeError(
                f"requires_grad: only floating point tensors can require gradients, "
                f"got dtype {self._arr.dtype}"
            )
        self._requires_grad = value
        return 0

    def requires_grad_(self, bint requires_grad=True):
        """Set ``requires_grad`` in place and return ``self``."""
        self._set_requires_grad(requires_grad)
        return self

    @property
    def grad(self):
        """The accumulated gradient (a Tensor) of a leaf, or None."""
        return self._grad

    @grad.setter
    def grad(self, value):
        if value is not None:
            if not isinstance(value, TensorBase):
                raise ArgumentTypeError(
                    f"Tensor.grad: expected a Tensor or None, got {type(value).__name__}"
                )
            g = data_of(<TensorBase>value)
            cur = data_of(self)
            if type(g) is not type(cur):
                raise DeviceError(
                    f"Tensor.grad: the gradient is a {type(g).__module__}.{type(g).__name__}, "
                    f"the tensor's data a {type(cur).__module__}."
                    f"{type(cur).__name__}; move it to the tensor's device first"
                )
            if g.shape != cur.shape:
                raise ShapeError(
                    f"Tensor.grad: gradient shape {g.shape} does not match tensor shape "
                    f"{cur.shape}"
                )
            if g.dtype != cur.dtype:
                raise DtypeError(
                    f"Tensor.grad: gradient dtype {g.dtype} does not match tensor dtype "
                    f"{cur.dtype}"
                )
            (<TensorBase>value)._is_grad = True
        self._grad = value

    @property
    def grad_fn(self):
        """The node that created this tensor, or None for a leaf."""
        return self._grad_fn

    @property
    def output_nr(self):
        """Which output of ``grad_fn`` this tensor is."""
        return self._output_nr

    @property
    def is_leaf(self):
        """True for tensors not created by a recorded op (user-created, or created with
        ``requires_grad=False`` inputs)."""
        return self._grad_fn is None

    @property
    def is_inference(self):
        """True for tensors created under ``ferro.inference_mode``."""
        return self._is_inference

    @property
    def _version(self):
        """In-place modification counter (shared by views of the same data)."""
        return 0 if self._vc is None else self._vc.value

    @property
    def shape(self):
        """The shape as a tuple of ints."""
        return self._arr.shape

    @property
    def dtype(self):
        """The NumPy dtype of the data."""
        return self._arr.dtype

    @property
    def ndim(self):
        """Number of dimensions."""
        return self._arr.ndim

    def dim(self):
        """Number of dimensions."""
        return self._arr.ndim

    def numel(self):
        """Number of elements."""
        return self._arr.size

    def size(self, dim=None):
        """The shape, or the length of dimension ``dim``."""
        if dim is None:
            return self._arr.shape
        return self._arr.shape[dim]

    def _accept_view_write(self):
        """Take the current version as this tensor's own (internal, for ``t[i] op= v``).

        ``t[i] *= 2`` runs ``v = t[i]; v.__imul__(2); t[i] = v``: the in-place op on the view
        bumps the version ``t`` shares, which makes ``t``'s history look stale to the next op.
        ``setitem`` calls this only when ``v`` is exactly the view ``t[i]`` it overwrites, so
        the changed elements are the ones the recorded write replaces.
        """
        if self._vc is not None:
            self._birth = self._vc.value

    def __len__(self):
        if self._arr.ndim == 0:
            raise ArgumentTypeError("len() of a 0-d tensor")
        return self._arr.shape[0]


def wrap(data):
    """Wrap an array as a Tensor without copying or checking (internal; use ferro.from_numpy)."""
    return new_tensor(data)
