# cython: language_level=3
"""ferro's autograd engine: grad mode, op application, the backward walk, accumulation.

Read DESIGN.md first. In short:

* :func:`apply` runs one op: it reads grad mode, unwraps the arrays, calls the op's Python
  ``forward`` once with a fresh :class:`Node` as ``ctx``, and, when some input requires grad,
  links that node to its inputs (a leaf input is its own target; a non-leaf input's target is its
  ``grad_fn``) and wraps the outputs.
* :func:`run_backward` collects the nodes reachable from the roots with an explicit stack (no
  recursion), counts dependencies, and runs nodes in Kahn order. Each node's Python ``backward``
  is called once with the summed gradient of each output. Broadcasting is undone here, in one
  place, and every gradient is checked against the shape and dtype of the tensor it belongs to.
* Note [Grad ownership]: a pending gradient lives in an :class:`_Entry` the engine owns. A later
  contribution is added in place only when the entry's array is owned (the engine allocated it,
  or nobody else holds it and it owns its writeable contiguous data) *and* its refcount shows no
  other holder (:func:`_slot_exclusive`, calibrated at import). Otherwise the add is out of place
  and its fresh result becomes owned. A leaf's ``.grad`` takes an owned array without a copy.
* Nothing the user can see is touched until the walk has succeeded: ``.grad`` writes
  (accumulation, retain_grad) and the release of saved arrays are committed at the end, so an
  error inside backward leaves the graph and every ``.grad`` as they were.
"""

cimport numpy as cnp
from cpython.contextvars cimport PyContextVar_Get
from cpython.long cimport PyLong_AsLong
from cpython.ref cimport Py_INCREF, Py_XDECREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
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
from ferro._C.tensor cimport TensorBase, VersionCounter, new_tensor, version_counter

import contextvars
import weakref

import numpy as np

from ferro.errors import (
    AnomalyError,
    ArgumentError,
    ArgumentTypeError,
    DeviceError,
    DtypeError,
    GradientError,
    GraphError,
    ReadOnlyError,
    ShapeError,
)

cnp.import_array()

cdef extern from "Python.h":
    Py_ssize_t _refcnt "Py_REFCNT"(PyObject* o)

cdef object _np = np
cdef object _generic = np.generic

# ---------------------------------------------------------------------------------------------
# Grad mode. One ContextVar: each thread starts with grad enabled (a thread-local in effect) and
# asyncio tasks see the mode of the code that created them. One C call reads it per op.
# ---------------------------------------------------------------------------------------------

cdef enum:
    MODE_NO_GRAD = 0
    MODE_GRAD = 1
    MODE_INFERENCE = 2

cdef object _MODE = contextvars.ContextVar("ferro_grad_mode", default=MODE_GRAD)


cdef inline long _mode() except -1:
    cdef PyObject* v = NULL
    PyContextVar_Get(_MODE, NULL, &v)
    cdef long m = PyLong_AsLong(<object>v)
    Py_XDECREF(v)
    return m


# Saved-tensor hooks: the innermost (pack, unpack) pair of this context. The C counter of open
# hook contexts (in any thread) lets Node.save skip the ContextVar read when none is open.
cdef object _SAVED_HOOKS = contextvars.ContextVar("ferro_saved_tensors_hooks", default=None)
cdef Py_ssize_t _n_hook_contexts = 0


def _push_saved_hooks(pack, unpack):
    global _n_hook_contexts
    _n_hook_contexts += 1
    return _SAVED_HOOKS.set(None if pack is None else (pack, unpack))


def _pop_saved_hooks(token):
    global _n_hook_contexts
    _n_hook_contexts -= 1
    _SAVED_HOOKS.reset(token)


# Profiler (ferro.profiler): one process-wide recorder object, or None. Off, it costs one pointer
# check per op and per node; on, apply and the backward walk time each forward and backward
# call and hand the raw facts to the recorder.
cdef object _profiler = None

from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec


cdef inline long long _now_ns() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <long long>ts.tv_sec * 1000000000 + ts.tv_nsec


def now_ns():
    """The profiler's clock (CLOCK_MONOTONIC, nanoseconds)."""
    return _now_ns()


def set_profiler(recorder):
    """Install a profiler recorder (or None); returns the previous one."""
    global _profiler
    prev = _profiler
    _profiler = recorder
    return prev


def get_profiler():
    return _profiler


# Anomaly detection (process-wide, as PyTorch's): record each node's creation site; check
# every gradient for NaN/Inf when check_nan is on.
cdef bint _anomaly = False
cdef bint _anomaly_nan = True


def set_anomaly(bint enabled, bint check_nan=True):
    """Turn anomaly detection on or off; returns the previous (enabled, check_nan)."""
    global _anomaly, _anomaly_nan
    prev = (_anomaly, _anomaly_nan)
    _anomaly = enabled
    _anomaly_nan = check_nan
    return prev


def is_anomaly_enabled():
    """True while anomaly detection is on."""
    return _anomaly


import os as _os
_FERRO_DIR = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))


cdef object _user_site():
    # The innermost frame outside the ferro package: where the user's code created the node.
    import sys
    f = sys._getframe(1)
    while f is not None and f.f_code.co_filename.startswith(_FERRO_DIR):
        f = f.f_back
    if f is None:
        return None
    return (f.f_code.co_filename, f.f_lineno, f.f_code.co_name)


def is_grad_enabled():
    """True if ops record a graph in the current thread/context."""
    return _mode() == MODE_GRAD


def is_inference_mode_enabled():
    """True inside ``ferro.inference_mode()``."""
    return _mode() == MODE_INFERENCE


def _set_mode(int mode):
    """Set the grad mode (0 no_grad, 1 grad, 2 inference); returns a token for :func:`_reset_mode`."""
    if mode not in (MODE_NO_GRAD, MODE_GRAD, MODE_INFERENCE):
        raise ArgumentError(f"_set_mode: invalid grad mode {mode}; expected 0, 1 or 2")
    return _MODE.set(mode)


def _reset_mode(token):
    _MODE.reset(token)


def _get_mode():
    return _mode()


# ---------------------------------------------------------------------------------------------
# Counters the tests read to check Note [Grad ownership] (a C increment each; never on a path
# that could not afford it).
# ---------------------------------------------------------------------------------------------

cdef Py_ssize_t _n_inplace_adds = 0
cdef Py_ssize_t _n_outofplace_adds = 0
cdef Py_ssize_t _n_steals = 0
cdef Py_ssize_t _n_grad_copies = 0


def stats():
    """Accumulation counters since the last :func:`reset_stats` (for tests and profiling)."""
    return {
        "inplace_adds": _n_inplace_adds,
        "outofplace_adds": _n_outofplace_adds,
        "steals": _n_steals,
        "grad_copies": _n_grad_copies,
    }


def reset_stats():
    global _n_inplace_adds, _n_outofplace_adds, _n_steals, _n_grad_copies
    _n_inplace_adds = _n_outofplace_adds = _n_steals = _n_grad_copies = 0


# ---------------------------------------------------------------------------------------------
# Backends. An array's type decides it; mixing types (or CuPy devices) in one op is an error.
# ---------------------------------------------------------------------------------------------

cdef dict _xp_by_type = {cnp.ndarray: np}


cdef object _xp_of(object arr):
    cdef type t = type(arr)
    if t is cnp.ndarray:
        return _np
    xp = _xp_by_type.get(t)
    if xp is None:
        mod = t.__module__.split(".")[0]
        if mod == "cupy":
            import cupy
            xp = cupy
        else:
            raise ArgumentTypeError(
                f"ferro: unsupported array type {t.__module__}.{t.__name__}; expected a "
                "numpy.ndarray or cupy.ndarray"
            )
        _xp_by_type[t] = xp
    return xp


cdef str _device_name(object arr):
    if type(arr) is cnp.ndarray:
        return "cpu"
    dev = getattr(arr, "device", None)
    return f"cuda:{getattr(dev, 'id', 0)}" if dev is not None else type(arr).__module__


cdef inline object _as_array(object x):
    # NumPy turns 0-d results into scalars; the engine only ever holds arrays.
    if type(x) is cnp.ndarray or x is None:
        return x
    if isinstance(x, _generic):
        return _np.asarray(x)
    return x


# ---------------------------------------------------------------------------------------------
# Ops and nodes
# ---------------------------------------------------------------------------------------------

cdef class OpDef:
    """A registered op: its name, its Python ``forward``/``backward`` and flags for the engine.

    Args:
        name: registry key (snake_case).
        forward: ``forward(ctx, *arrays, **params) -> array | tuple[array, ...]``.
        backward: ``backward(ctx, *grad_outputs) -> array | None | tuple`` with one entry per
            positional argument of ``forward`` (None where no gradient flows).
        broadcasts: the op broadcasts its inputs, so the engine sums gradients back to shape.
        differentiable: outputs never require grad (comparisons, argmax...).
        same_dtype: every array argument must have one dtype (no silent promotion).
        view: the (single) output shares the first input's memory (shares its version counter).
        display: the class name shown in ``grad_fn`` reprs.
    """

    cdef readonly str name
    cdef readonly object forward
    cdef readonly object backward
    cdef readonly bint broadcasts
    cdef readonly bint differentiable
    cdef readonly bint same_dtype
    cdef readonly bint view
    cdef readonly str display
    cdef readonly object cpu_forward     # fused CPU overrides (None: use forward/backward)
    cdef readonly object cpu_backward
    cdef readonly object gpu_forward     # fused GPU (RawKernel) overrides, likewise
    cdef readonly object gpu_backward

    def __init__(self, str name, forward, backward=None, *, bint broadcasts=False,
                 bint differentiable=True, bint same_dtype=True, bint view=False,
                 str display=None):
        if differentiable and backward is None:
            raise ArgumentTypeError(f"op {name!r}: a differentiable op needs a backward")
        self.name = name
        self.forward = forward
        self.backward = backward
        self.broadcasts = broadcasts
        self.differentiable = differentiable
        self.same_dtype = same_dtype
        self.view = view
        self.display = display or "".join(p.capitalize() for p in name.split("_"))

    def set_cpu_override(self, forward=None, backward=None):
        """Register fused CPU versions of forward and/or backward (same signatures).

        They run for NumPy arrays unless overrides are disabled (:func:`set_overrides_enabled`);
        the generic ``forward``/``backward`` stay the reference they are tested against.
        """
        self.cpu_forward = forward
        self.cpu_backward = backward

    def set_gpu_override(self, forward=None, backward=None):
        """Register GPU (CuPy RawKernel) versions of forward and/or backward (same signatures).

        They run for CuPy arrays unless overrides are disabled, on the same terms as
        :meth:`set_cpu_override`: a node whose forward ran the override runs the backward
        override too; an op with only a backward override takes it for every CuPy node.
        """
        self.gpu_forward = forward
        self.gpu_backward = backward

    def __repr__(self):
        return f"<OpDef {self.name}>"


cdef bint _use_overrides = True


def overrides_enabled():
    """Whether the fused backend overrides (ops and optimizers) are on."""
    return _use_overrides


def set_overrides_enabled(bint enabled):
    """Turn the fused backend overrides on or off (for parity tests and benchmarks); returns
    the previous setting."""
    global _use_overrides
    prev = _use_overrides
    _use_overrides = enabled
    return prev


cdef class _Packed:
    """A value returned by a saved-tensor pack hook (so unpack knows what to unpack)."""

    cdef object value

    def __cinit__(self, value):
        self.value = value


cdef inline bint _is_array(object a):
    return type(a) is cnp.ndarray or type(a) in _xp_by_type


cdef class Node:
    """One recorded op application: the ``ctx`` its forward and backward receive.

    Ops store what backward needs with :meth:`save` (arrays) or as attributes (anything else).
    """

    cdef readonly OpDef op
    cdef readonly object xp
    cdef object _saved
    # Versions of the tensors whose data the node saved (index in _saved, counter, version):
    # two inline slots (no allocation for the common case), more in _sv_more.
    cdef int _n_sv
    cdef Py_ssize_t _sj0, _sj1, _sv0, _sv1
    cdef VersionCounter _svc0, _svc1
    cdef list _sv_more
    cdef bint _released
    cdef bint _fused           # forward ran the op's CPU override: backward must too
    cdef tuple _next           # per positional input: Node, leaf TensorBase, or None
    cdef tuple _next_nr        # per positional input: which output of the target Node
    cdef Py_ssize_t _n_out
    cdef tuple _shape0         # shape and dtype of output 0 (every node has one)
    cdef object _dtype0
    cdef tuple _out_shape      # per output, only when there are several
    cdef tuple _out_dtype
    cdef dict _pre_hooks
    cdef dict _post_hooks
    cdef dict _tensor_hooks    # output nr -> {handle id: fn}
    cdef dict _retained        # output nr -> weakref to the non-leaf tensor
    cdef object _unpack        # saved-tensor hooks: unpack fn when _saved holds packed values
    cdef tuple _saved_raw      # the arrays themselves, until apply has recorded their versions
    cdef tuple _nondiff        # outputs marked non-differentiable (arrays)
    cdef bint _no_materialize  # backward receives None (not zeros) for outputs without grad
    cdef object _site          # anomaly mode: (filename, lineno, function) of the creating code
    cdef Py_ssize_t _prof_id   # profiler: id of the forward event that created this node (-1)
    cdef dict __dict__
    cdef object __weakref__

    def save(self, *arrays):
        """Keep ``arrays`` for backward (released after backward unless ``retain_graph``).

        Inside ``ferro.autograd.graph.saved_tensors_hooks(pack, unpack)`` each array is passed to
        ``pack`` (as a Tensor) now and the result to ``unpack`` when backward reads it.
        """
        if _n_hook_contexts:
            hooks = _SAVED_HOOKS.get()
            if hooks is not None:
                pack, unpack = hooks
                self._saved_raw = arrays
                # Only arrays are packed; a saved Python scalar (say, mul's constant) stays as is.
                self._saved = tuple([_Packed(pack(new_tensor(a))) if _is_array(a) else a
                                     for a in arrays])
                self._unpack = unpack
                return
        self._saved = arrays

    @property
    def saved(self):
        """The arrays given to :meth:`save` (unpacked, in save order, on every access)."""
        if self._released:
            raise GraphError(
                f"{self.name()}: trying to backward through the graph a second time (or to "
                "read saved arrays after they were freed). Saved arrays are released after "
                "backward; pass retain_graph=True to the first backward to keep them."
            )
        if self._saved is None:
            return ()
        if self._unpack is None:
            return self._saved
        out = []
        for p in self._saved:
            if type(p) is not _Packed:
                out.append(p)
                continue
            r = self._unpack((<_Packed>p).value)
            out.append((<TensorBase>r)._data if isinstance(r, TensorBase) else r)
        return tuple(out)

    # The torch.autograd.Function face of ctx, for ferro.autograd.Function.

    def save_for_backward(self, *tensors):
        """Save tensors (or None) for backward; read them back with ``saved_tensors``."""
        self.save(*[None if t is None else (<TensorBase>t)._data for t in tensors])

    @property
    def saved_tensors(self):
        """The tensors given to ``save_for_backward`` (wrapped anew, not requiring grad)."""
        return tuple([None if a is None else new_tensor(a) for a in self.saved])

    def mark_non_differentiable(self, *outputs):
        """Declare outputs (tensors returned by forward) that never require grad."""
        self._nondiff = tuple([(<TensorBase>o)._data if isinstance(o, TensorBase) else o
                               for o in outputs])

    def set_materialize_grads(self, bint value):
        """With False, backward receives None (not zeros) for outputs that got no gradient."""
        self._no_materialize = not value

    @property
    def saved_info(self):
        """What the node saved, without unpacking: ``(shape, dtype)`` per array, ``"packed"``
        for a value held by saved-tensor hooks, None for a gap; ``()`` once released."""
        if self._released or self._saved is None:
            return ()
        if self._unpack is not None:
            return tuple([None if p is None else "packed" if type(p) is _Packed else repr(p)
                          for p in self._saved])
        return tuple([None if a is None else (tuple(a.shape), a.dtype) if hasattr(a, "shape")
                      else repr(a) for a in self._saved])

    @property
    def output_shapes(self):
        """The shape of each output."""
        if self._n_out <= 1:
            return (self._shape0,) if self._shape0 is not None else ()
        return self._out_shape

    @property
    def creation_site(self):
        """(filename, line, function) of the user code that created this node, recorded while
        anomaly detection is on; None otherwise."""
        return self._site

    def register_prehook(self, fn):
        """``fn(grad_outputs) -> tuple | None`` runs before this node's backward."""
        return register_node_prehook(self, fn)

    def register_hook(self, fn):
        """``fn(grad_inputs, grad_outputs) -> tuple | None`` runs after this node's backward."""
        return register_node_hook(self, fn)

    @property
    def needs_input_grad(self):
        """Per positional input of forward: does a gradient need to flow to it?"""
        if self._next is None:
            return ()
        return tuple(t is not None for t in self._next)

    def name(self):
        """``<Op>Backward``, as PyTorch names its nodes."""
        return self.op.display + "Backward"

    @property
    def next_functions(self):
        """Per positional input: ``(target, output_nr)`` where target is a Node, a leaf Tensor
        (which accumulates into ``.grad``) or None."""
        if self._next is None:
            return ()
        return tuple(
            (t, nr) for t, nr in zip(self._next, self._next_nr)
        )

    def __repr__(self):
        return f"<{self.name()} at 0x{id(self):x}>"


cdef inline bint _is_float_array(object arr):
    if type(arr) is cnp.ndarray:
        return cnp.PyArray_ISFLOAT(<cnp.ndarray>arr)
    return arr.dtype.kind == "f"


cdef inline bint _same_dtype(object a, object b):
    if type(a) is cnp.ndarray and type(b) is cnp.ndarray:
        if <object>cnp.PyArray_DESCR(<cnp.ndarray>a) is <object>cnp.PyArray_DESCR(<cnp.ndarray>b):
            return True
    return a.dtype == b.dtype


cdef inline bint _shape_is(object arr, tuple shape):
    cdef int nd, i
    if type(arr) is cnp.ndarray:
        nd = cnp.PyArray_NDIM(<cnp.ndarray>arr)
        if nd != len(shape):
            return False
        for i in range(nd):
            if cnp.PyArray_DIMS(<cnp.ndarray>arr)[i] != <Py_ssize_t>shape[i]:
                return False
        return True
    return arr.shape == shape


cdef TensorBase _wrap(object arr, Node node, Py_ssize_t nr, bint inference):
    cdef TensorBase t = new_tensor(arr)
    t._is_inference = inference
    if node is not None:
        t._grad_fn = node
        t._output_nr = nr
        t._requires_grad = True
    return t


def apply(OpDef op, *args, **params):
    """Run ``op`` on ``args`` (tensors, arrays or Python scalars) and record it when needed.

    Returns one Tensor, or a tuple of Tensors when the op's forward returns a tuple.
    """
    cdef Py_ssize_t n = len(args), i, k, n_out
    cdef long mode = _mode()
    cdef bint record = False, inference = mode == MODE_INFERENCE
    cdef TensorBase t, first_t = None
    cdef Node node = Node.__new__(Node)
    cdef object arr, first_arr = None, a
    cdef bint is_array
    cdef tuple call = PyTuple_New(n + 1)
    cdef type atype = None

    Py_INCREF(node)
    PyTuple_SET_ITEM(call, 0, node)
    node.op = op
    node._prof_id = -1
    for i in range(n):
        a = args[i]
        if isinstance(a, TensorBase):
            t = <TensorBase>a
            arr = t._data
            is_array = True
            if t._requires_grad and mode == MODE_GRAD:
                record = True
            if first_t is None:
                first_t = t
        elif type(a) is cnp.ndarray:
            arr = a
            is_array = True
        elif isinstance(a, _generic):
            # NumPy scalars promote strongly; a Python scalar keeps the tensor's dtype.
            arr = a.item()
            is_array = False
        else:
            arr = a
            is_array = type(a) in _xp_by_type
        if is_array:
            if atype is None:
                atype = type(arr)
                first_arr = arr
            else:
                if type(arr) is not atype or (
                    atype is not cnp.ndarray and arr.device != first_arr.device
                ):
                    raise DeviceError(
                        f"{op.name}: arguments are on different devices: "
                        f"{_device_name(first_arr)} and {_device_name(arr)}"
                    )
                if op.same_dtype and not _same_dtype(first_arr, arr):
                    raise DtypeError(
                        f"{op.name}: arguments have different dtypes: {first_arr.dtype} and "
                        f"{arr.dtype}; convert one with .to(dtype) or .astype"
                    )
        Py_INCREF(arr)
        PyTuple_SET_ITEM(call, i + 1, arr)
    if atype is None:
        raise ArgumentTypeError(f"{op.name}: expected at least one tensor argument")
    node.xp = _xp_of(first_arr)
    record = record and op.differentiable
    if record:
        _link(node, args, n, op)
        if _anomaly:
            node._site = _user_site()

    fwd = op.forward
    if _use_overrides:
        if atype is cnp.ndarray:
            if op.cpu_forward is not None:
                fwd = op.cpu_forward
                node._fused = True
        elif op.gpu_forward is not None:
            fwd = op.gpu_forward
            node._fused = True
    cdef long long t0 = 0
    if _profiler is not None:
        t0 = _now_ns()
    try:
        if params:
            out = fwd(*call, **params)
        else:
            out = fwd(*call)
    except ValueError:
        if op.broadcasts:
            _check_broadcast(op, call)
        raise

    if type(out) is tuple:
        outs = tuple([_as_array(o) for o in out])
        n_out = len(outs)
    else:
        outs = None
        out = _as_array(out)
        n_out = 1
    if _profiler is not None:
        node._prof_id = _profiler.record_forward(op.name, call, outs if outs is not None else out,
                                                 t0, _now_ns(), record)

    if not record:
        if outs is None:
            res = _wrap(out, None, 0, inference)
            if op.view and first_t is not None:
                _share_version(<TensorBase>res, first_t)
            return res
        results = tuple([_wrap(o, None, 0, inference) for o in outs])
        if op.view and first_t is not None:
            for r in results:
                _share_version(<TensorBase>r, first_t)
        return results

    node._n_out = n_out
    if outs is None:
        node._shape0 = out.shape
        node._dtype0 = out.dtype
        if _is_float_array(out) and not _is_nondiff(node, out):
            res = _wrap(out, node, 0, False)
        else:
            res = _wrap(out, None, 0, False)
        if op.view and first_t is not None:
            _share_version(<TensorBase>res, first_t)
        if node._saved is not None:
            _record_saved_versions(node, args, n, res)
        return res
    node._out_shape = tuple([o.shape for o in outs])
    node._out_dtype = tuple([o.dtype for o in outs])
    node._shape0 = node._out_shape[0]
    node._dtype0 = node._out_dtype[0]
    results = []
    for k in range(n_out):
        o = outs[k]
        results.append(_wrap(o, node if _is_float_array(o) and not _is_nondiff(node, o) else None,
                             k, False))
        if op.view and first_t is not None:
            _share_version(<TensorBase>results[k], first_t)
    results = tuple(results)
    if node._saved is not None:
        _record_saved_versions(node, args, n, results)
    return results


cdef int _check_broadcast(OpDef op, tuple call) except -1:
    # Only on the error path of a broadcasting op's forward: if the array arguments' shapes do
    # not broadcast, that is the error to report (whatever the array library's message said).
    shapes = [tuple(x.shape) for x in call[1:] if _is_array(x)]
    try:
        _np.broadcast_shapes(*shapes)
    except ValueError:
        raise ShapeError(
            f"{op.name}: shapes {', '.join(str(sh) for sh in shapes)} do not broadcast together"
        ) from None
    return 0


cdef inline bint _is_nondiff(Node node, object arr):
    if node._nondiff is None:
        return False
    for a in node._nondiff:
        if a is arr:
            return True
    return False


cdef int _link(Node node, tuple args, Py_ssize_t n, OpDef op) except -1:
    """Record the node's edges (before forward runs, so forward can read needs_input_grad)."""
    cdef tuple nexts = PyTuple_New(n)
    cdef tuple nrs = PyTuple_New(n)
    cdef TensorBase t
    # Both must be Python objects held by a variable: PyTuple_SET_ITEM steals the reference
    # Py_INCREF gave. Left to inference, nr_obj became a C integer, and each use made a
    # temporary int that was freed at once, leaving the tuple a dangling pointer for output
    # numbers above 256 (smaller ints are cached by CPython and survived by luck).
    cdef object target, nr_obj
    cdef Py_ssize_t i
    for i in range(n):
        a = args[i]
        target = None
        nr_obj = 0
        if isinstance(a, TensorBase):
            t = <TensorBase>a
            if t._is_inference:
                raise GraphError(
                    f"{op.name}: an inference tensor cannot take part in a recorded op; "
                    "clone it outside inference_mode() first"
                )
            if t._requires_grad:
                if t._vc is not None and t._grad_fn is not None and t._vc.value != t._birth:
                    raise GraphError(
                        f"{op.name}: an input of shape {tuple(t._data.shape)} was modified in "
                        "place through a view or its base after it was computed, so its "
                        "autograd history is stale; clone before modifying in place"
                    )
                if t._grad_fn is None:
                    target = t
                else:
                    target = t._grad_fn
                    nr_obj = t._output_nr
        Py_INCREF(target)
        PyTuple_SET_ITEM(nexts, i, target)
        Py_INCREF(nr_obj)
        PyTuple_SET_ITEM(nrs, i, nr_obj)
    node._next = nexts
    node._next_nr = nrs
    return 0


cdef int _record_saved_versions(Node node, tuple args, Py_ssize_t n, object outputs) except -1:
    """For each saved array that is a tensor's data, remember that tensor's version now.

    Backward compares: a saved tensor modified in place since then is an error, not a silently
    wrong gradient. ``outputs`` is the output tensor or a tuple of them.
    """
    cdef TensorBase t
    cdef VersionCounter vc
    cdef Py_ssize_t j, i
    cdef tuple saved = node._saved_raw if node._saved_raw is not None else <tuple>node._saved
    node._saved_raw = None  # packed saves must not keep the arrays alive
    for j in range(len(saved)):
        s = saved[j]
        if s is None:
            continue
        t = None
        for i in range(n):
            a = args[i]
            if isinstance(a, TensorBase) and (<TensorBase>a)._data is s:
                t = <TensorBase>a
                break
        if t is None:
            if isinstance(outputs, TensorBase):
                if (<TensorBase>outputs)._data is s:
                    t = <TensorBase>outputs
            else:
                for o in outputs:
                    if (<TensorBase>o)._data is s:
                        t = <TensorBase>o
                        break
        if t is None:
            continue
        vc = version_counter(t)
        if node._n_sv == 0:
            node._sj0, node._svc0, node._sv0 = j, vc, vc.value
        elif node._n_sv == 1:
            node._sj1, node._svc1, node._sv1 = j, vc, vc.value
        else:
            if node._sv_more is None:
                node._sv_more = []
            node._sv_more.append((j, vc, vc.value))
        node._n_sv += 1
    return 0


cdef int _retarget_version(Node node, object old_data, VersionCounter vc) except -1:
    # commit_inplace: the node's saved output now lives in another tensor's memory.
    if node._unpack is not None:
        return 0  # packed saves are compared by the hooks' owner, not by identity
    cdef tuple saved = <tuple>node._saved
    if node._n_sv > 0 and saved[node._sj0] is old_data:
        node._svc0, node._sv0 = vc, vc.value
    if node._n_sv > 1 and saved[node._sj1] is old_data:
        node._svc1, node._sv1 = vc, vc.value
    if node._sv_more is not None:
        node._sv_more = [(j, vc if saved[j] is old_data else c, vc.value if saved[j] is old_data
                          else v) for (j, c, v) in node._sv_more]
    return 0


cdef inline void _share_version(TensorBase view, TensorBase src):
    view._vc = version_counter(src)
    view._birth = view._vc.value


def bump_version(TensorBase t):
    """Record an in-place modification of ``t``'s data (shared with its views)."""
    cdef VersionCounter vc = version_counter(t)
    vc.value += 1


def commit_inplace(TensorBase t, TensorBase out, str op_name):
    """Finish an in-place op: write ``out``'s values into ``t``'s memory and give ``t`` the
    history of ``out`` (``t`` becomes a non-leaf when ``out`` was recorded).

    A leaf that requires grad cannot be modified in place while grad mode is on.
    """
    if t._grad_fn is None and t._requires_grad and _mode() == MODE_GRAD:
        raise GraphError(
            f"{op_name}: a leaf tensor that requires grad cannot be modified in place; "
            "wrap the update in ferro.no_grad() or work on a clone"
        )
    if tuple(out._data.shape) != tuple(t._data.shape):
        raise ShapeError(
            f"{op_name}: the result has shape {tuple(out._data.shape)} but the tensor modified in "
            f"place has shape {tuple(t._data.shape)}"
        )
    if not _same_dtype(out._data, t._data):
        raise DtypeError(
            f"{op_name}: the result has dtype {out._data.dtype} but the tensor modified in place "
            f"has dtype {t._data.dtype}"
        )
    if type(t._data) is cnp.ndarray and not cnp.PyArray_ISWRITEABLE(<cnp.ndarray>t._data):
        raise ReadOnlyError(
            f"{op_name}: the tensor modified in place (shape {tuple(t._data.shape)}, dtype "
            f"{t._data.dtype}) wraps read-only memory (a read-only memory map, np.frombuffer of "
            "bytes, ...); copy it first (t.clone()) or make the array writeable"
        )
    if out._data is not t._data:
        t._data[...] = out._data
    cdef VersionCounter vc = version_counter(t)
    vc.value += 1
    if out._grad_fn is not None:
        t._grad_fn = out._grad_fn
        t._output_nr = out._output_nr
        t._requires_grad = True
        t._birth = t._vc.value
        # The recorded output is now t: later in-place changes to t must be seen by the node.
        if (<Node>out._grad_fn)._saved is not None:
            _retarget_version(<Node>out._grad_fn, out._data, vc)
    return t


# ---------------------------------------------------------------------------------------------
# Hooks storage (the contract and its tests belong to ferro.autograd; the engine runs them).
# ---------------------------------------------------------------------------------------------

cdef Py_ssize_t _next_handle_id = 0


cdef class RemovableHandle:
    """Returned by every ``register_*``; ``remove()`` unregisters (safe during backward)."""

    cdef object _dict_ref
    cdef readonly Py_ssize_t id

    def __init__(self, dict hooks):
        global _next_handle_id
        _next_handle_id += 1
        self.id = _next_handle_id
        self._dict_ref = hooks

    def remove(self):
        """Unregister the hook; removing twice is harmless."""
        (<dict>self._dict_ref).pop(self.id, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


cdef RemovableHandle _add_hook(dict hooks, fn):
    if not callable(fn):
        raise ArgumentTypeError(f"register hook: the hook must be callable, got {type(fn).__name__}")
    h = RemovableHandle(hooks)
    hooks[h.id] = fn
    return h


def register_tensor_hook(TensorBase t, fn):
    """``t.register_hook(fn)``: ``fn(grad) -> Tensor | None`` runs once on the summed gradient."""
    if not t._requires_grad:
        raise GraphError("register_hook: cannot register a hook on a tensor that does not require grad")
    cdef Node node
    if t._grad_fn is None:
        if t._hooks is None:
            t._hooks = {}
        return _add_hook(t._hooks, fn)
    node = <Node>t._grad_fn
    if node._tensor_hooks is None:
        node._tensor_hooks = {}
    hooks = node._tensor_hooks.get(t._output_nr)
    if hooks is None:
        hooks = node._tensor_hooks[t._output_nr] = {}
    return _add_hook(hooks, fn)


def register_post_accumulate_grad_hook(TensorBase t, fn):
    """``fn(tensor)`` runs after a leaf's ``.grad`` has been updated."""
    if t._grad_fn is not None or not t._requires_grad:
        raise GraphError(
            "register_post_accumulate_grad_hook: only leaf tensors that require grad accumulate"
        )
    if t._post_acc_hooks is None:
        t._post_acc_hooks = {}
    return _add_hook(t._post_acc_hooks, fn)


def retain_grad(TensorBase t):
    """Make a non-leaf tensor keep its gradient in ``.grad`` (written last, after its hooks)."""
    if not t._requires_grad:
        raise GraphError("retain_grad: cannot retain the gradient of a tensor that does not require grad")
    if t._grad_fn is None:
        return
    cdef Node node = <Node>t._grad_fn
    if node._retained is None:
        node._retained = {}
    node._retained[t._output_nr] = weakref.ref(t)


def retains_grad(TensorBase t):
    if t._grad_fn is None:
        return False
    cdef Node node = <Node>t._grad_fn
    return node._retained is not None and t._output_nr in node._retained


def register_node_prehook(Node node, fn):
    """``fn(grad_outputs) -> tuple | None`` runs before the node's backward."""
    if node._pre_hooks is None:
        node._pre_hooks = {}
    return _add_hook(node._pre_hooks, fn)


def register_node_hook(Node node, fn):
    """``fn(grad_inputs, grad_outputs) -> tuple | None`` runs after the node's backward."""
    if node._post_hooks is None:
        node._post_hooks = {}
    return _add_hook(node._post_hooks, fn)


# ---------------------------------------------------------------------------------------------
# Backward
# ---------------------------------------------------------------------------------------------

cdef class _Entry:
    """Per-walk state of one graph target (a Node, or a leaf tensor) or one node output."""

    cdef object target
    cdef Py_ssize_t deps
    cdef object grad           # the pending (summed) gradient array
    cdef bint owned            # the engine may write into grad (still refcount-checked)
    cdef bint wanted           # its gradient is an output of this walk (grad() / inputs=)
    cdef bint needed           # a node whose backward must run
    cdef list subs             # multi-output nodes: one _Entry per output
    cdef list captures         # positions in the result of grad()


# Refcount of an array held by exactly one _Entry, as _slot_exclusive reads it. Calibrated at
# import so the rule follows the interpreter (3.14's borrowed references, free-threading).
cdef Py_ssize_t _REF_BASELINE = -1


cdef bint _slot_exclusive(_Entry e):
    """True if ``e.grad`` is referenced by ``e`` and nothing else. The one refcount check."""
    return _refcnt(<PyObject*>e.grad) == _REF_BASELINE


cdef bint _plain_array(object arr):
    # An exact ndarray that owns writeable, C-contiguous data: writing it touches nobody else.
    if type(arr) is not cnp.ndarray:
        return False
    cdef cnp.ndarray a = <cnp.ndarray>arr
    return (cnp.PyArray_CHKFLAGS(a, cnp.NPY_ARRAY_OWNDATA)
            and cnp.PyArray_ISWRITEABLE(a)
            and cnp.PyArray_IS_C_CONTIGUOUS(a))


# The GPU backend (ferro.cuda.fused registers it; None until then): whether a CuPy array owns
# its memory as _plain_array asks of NumPy arrays, ``dst += src`` in place, and sum-to-shape.
cdef object _gpu_owns = None
cdef object _gpu_accumulate = None
cdef object _gpu_sum_to_shape = None


def set_gpu_backend(owns, accumulate, sum_to_shape):
    """Register the GPU accumulation and sum-to-shape (``ferro.cuda.fused`` does, at import).

    ``owns(arr)``: the CuPy array owns writeable, C-contiguous memory nobody else sees.
    ``accumulate(dst, src)``: ``dst += src`` in place. ``sum_to_shape(g, shape)``: a new
    array, or ValueError when its kernel cannot take ``g`` (the generic path runs then).
    """
    global _gpu_owns, _gpu_accumulate, _gpu_sum_to_shape
    _gpu_owns, _gpu_accumulate, _gpu_sum_to_shape = owns, accumulate, sum_to_shape


cdef bint _can_write(_Entry e):
    """Note [Grad ownership]: may the engine write into ``e.grad`` now?"""
    if not e.owned and _slot_exclusive(e) and (
        _plain_array(e.grad)
        or (_gpu_owns is not None and type(e.grad) is not cnp.ndarray and _gpu_owns(e.grad))
    ):
        e.owned = True
    return e.owned and _slot_exclusive(e)


cdef int _gpu_add_inplace(object dst, object src) except -1:
    """``dst += src`` for a CuPy ``dst`` the engine may write (the accumulation kernel when
    overrides are on and it takes the arrays, CuPy's in-place add otherwise)."""
    if _use_overrides and _gpu_accumulate is not None:
        try:
            _gpu_accumulate(dst, src)
            return 0
        except ValueError:
            pass
    dst += src
    return 0


def _calibrate():
    global _REF_BASELINE
    cdef _Entry probe = _Entry()
    probe.grad = np.empty(1)
    _REF_BASELINE = _refcnt(<PyObject*>probe.grad)
    # The rule must accept an array only the entry holds and refuse one held twice.
    if not _slot_exclusive(probe):
        raise GraphError("ferro: refcount calibration failed")
    other = probe.grad
    if _slot_exclusive(probe):
        raise GraphError("ferro: refcount calibration cannot see a second holder")
    return _REF_BASELINE


_calibrate()


cdef int _add_to(_Entry e, object g) except -1:
    """Accumulate ``g`` into ``e`` following Note [Grad ownership]."""
    global _n_inplace_adds, _n_outofplace_adds
    if e.grad is None:
        e.grad = g
        e.owned = False
        return 0
    if _can_write(e) and _same_dtype(e.grad, g):
        if cpu_kernels.supports(e.grad):
            cpu_kernels.add_inplace(<cnp.ndarray>e.grad,
                                    g if type(g) is cnp.ndarray else _np.asarray(g))
            _n_inplace_adds += 1
            return 0
        if type(e.grad) is not cnp.ndarray and type(g) is type(e.grad):
            _gpu_add_inplace(e.grad, g)
            _n_inplace_adds += 1
            return 0
    e.grad = _as_array(e.grad + g)
    e.owned = True
    _n_outofplace_adds += 1
    return 0


cdef object _sum_to_shape(object g, tuple shape):
    """Undo broadcasting: sum ``g`` back to ``shape``. The one place it happens."""
    if cpu_kernels.supports(g):
        return cpu_kernels.sum_to_shape(<cnp.ndarray>g, shape)
    if _use_overrides and _gpu_sum_to_shape is not None and type(g) is not cnp.ndarray:
        try:
            return _gpu_sum_to_shape(g, shape)
        except ValueError:
            pass  # shapes that do not broadcast get the generic path's ShapeError
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


cdef inline tuple _out_shape(Node node, Py_ssize_t nr):
    return node._shape0 if nr == 0 else <tuple>node._out_shape[nr]


cdef inline object _out_dtype(Node node, Py_ssize_t nr):
    return node._dtype0 if nr == 0 else node._out_dtype[nr]


cdef inline _Entry _slot(_Entry e, Py_ssize_t nr, Py_ssize_t n_out):
    # The entry for output ``nr`` of a target: the target's own entry unless it is a node with
    # several outputs.
    if n_out == 1:
        return e
    if e.subs is None:
        e.subs = [None] * n_out
    s = e.subs[nr]
    if s is None:
        s = _Entry()
        e.subs[nr] = s
    return <_Entry>s


cdef tuple _target_of(TensorBase t):
    if t._grad_fn is not None:
        return (t._grad_fn, t._output_nr)
    return (t, 0)


cdef object _check_grad(object g, object who, Py_ssize_t index, tuple shape, object dtype,
                        bint broadcasts):
    """Validate one gradient against the tensor it flows to; undo broadcasting if allowed.

    ``who`` names the producer in errors: a Node (its name is only computed on error) or a str.
    """
    if type(g) is not cnp.ndarray:
        g = _as_array(g)
        if not hasattr(g, "shape") or not hasattr(g, "dtype"):
            raise GradientError(
                f"{_who(who)} returned a {type(g).__name__} as gradient {index}; expected an array"
            )
    if not _shape_is(g, shape):
        if broadcasts:
            try:
                g = _sum_to_shape(g, shape)
            except (ValueError, ShapeError):
                raise GradientError(
                    f"{_who(who)} returned a gradient of shape {tuple(g.shape)} for input {index}, "
                    f"which does not broadcast to the input's shape {shape}"
                ) from None
        else:
            raise GradientError(
                f"{_who(who)} returned a gradient of shape {tuple(g.shape)} for input {index}; "
                f"expected shape {shape}"
            )
    if not (type(g) is cnp.ndarray and <object>cnp.PyArray_DESCR(<cnp.ndarray>g) is dtype) \
            and g.dtype != dtype:
        raise GradientError(
            f"{_who(who)} returned a gradient of dtype {g.dtype} for input {index}; "
            f"expected {dtype}"
        )
    return g


cdef str _who(object who):
    return (<Node>who).name() if type(who) is Node else str(who)


cdef object _run_tensor_hooks(dict hooks, object g, str who, tuple shape, object dtype):
    """Run tensor hooks in registration order on the summed gradient ``g``."""
    for fn in list(hooks.values()):
        r = fn(new_tensor(g))
        if r is None:
            continue
        if isinstance(r, TensorBase):
            r = (<TensorBase>r)._data
        name = getattr(fn, "__qualname__", repr(fn))
        g = _check_grad(r, f"hook {name} on {who}", 0, shape, dtype, False)
    return g


cdef inline int _decrement(_Entry child, list ready) except -1:
    child.deps -= 1
    if child.deps == 0:
        ready.append(child)
    return 0


def run_backward(tuple roots, tuple root_grads, bint retain_graph=False, tuple inputs=None,
                 bint accumulate=True, bint allow_unused=False):
    """The backward walk behind ``Tensor.backward``, ``autograd.backward`` and ``autograd.grad``.

    Args:
        roots: tensors to differentiate.
        root_grads: per root, the gradient array (or None for an implicit 1 on a 1-element root).
        retain_graph: keep saved arrays for another backward.
        inputs: tensors whose gradients are wanted; None means every leaf that requires grad.
        accumulate: write into ``.grad`` (backward) or return gradients (grad).
        allow_unused: with ``accumulate=False``, return None for inputs the roots do not reach.

    Returns:
        With ``accumulate=False``, a tuple of arrays (or None) aligned with ``inputs``.
    """
    global _n_steals, _n_grad_copies
    cdef dict table = {}
    cdef list stack = []
    cdef list ready = []
    cdef list ran = []
    cdef list commits = []         # (_Entry holding the final array, tensor)
    cdef _Entry e, s, child
    cdef Node node = None
    cdef TensorBase t
    cdef Py_ssize_t k, i, n_in, nr, n_out
    cdef bint selective = inputs is not None

    if len(roots) != len(root_grads):
        raise ArgumentError(f"backward: got {len(roots)} tensors but {len(root_grads)} gradients")

    # Seed the roots.
    for k in range(len(roots)):
        if not isinstance(roots[k], TensorBase):
            raise ArgumentTypeError(
                f"backward: element {k} is a {type(roots[k]).__name__}, not a Tensor"
            )
        t = <TensorBase>roots[k]
        if not t._requires_grad:
            raise GraphError(
                f"backward: element {k} of tensors does not require grad and has no grad_fn"
            )
        g = root_grads[k]
        if g is None:
            if t._data.size != 1:
                raise GraphError(
                    f"backward: grad can be implicitly created only for 1-element outputs; "
                    f"got shape {tuple(t._data.shape)}. Pass gradient= of that shape"
                )
            g = _xp_of(t._data).ones(t._data.shape, dtype=t._data.dtype)
            owned = True
        else:
            if isinstance(g, TensorBase):
                g = (<TensorBase>g)._data
            if type(g) is not type(t._data):
                raise DeviceError(
                    f"backward: gradient {k} is a {type(g).__module__}.{type(g).__name__}, the "
                    f"tensor's data a {type(t._data).__module__}.{type(t._data).__name__}"
                )
            if not _shape_is(g, t._data.shape):
                raise ShapeError(
                    f"backward: gradient {k} has shape {tuple(g.shape)}, expected the tensor's "
                    f"shape {tuple(t._data.shape)}"
                )
            if not _same_dtype(g, t._data):
                raise DtypeError(
                    f"backward: gradient {k} has dtype {g.dtype}, expected the tensor's dtype "
                    f"{t._data.dtype}"
                )
            owned = False
        target, nr = _target_of(t)
        e = table.get(target)
        if e is None:
            e = _Entry()
            e.target = target
            e.needed = True
            table[target] = e
            if type(target) is Node:
                stack.append(target)
        n_out = (<Node>target)._n_out if type(target) is Node else 1
        s = _slot(e, nr, n_out)
        if s.grad is None:
            s.grad = _as_array(g)
            s.owned = owned
        else:
            _add_to(s, g)

    root_entries = list(table.values())

    # Collect the reachable graph and count dependencies (explicit stack: no recursion).
    while stack:
        node = <Node>stack.pop()
        for target in node._next:
            if target is None:
                continue
            e = table.get(target)
            if e is None:
                e = _Entry()
                e.target = target
                e.deps = 1
                e.needed = True
                table[target] = e
                if type(target) is Node:
                    stack.append(target)
            else:
                e.deps += 1

    results = None
    if selective:
        results = [None] * len(inputs)
        for k in range(len(inputs)):
            if not isinstance(inputs[k], TensorBase):
                raise ArgumentTypeError(
                    f"inputs: element {k} is a {type(inputs[k]).__name__}, not a Tensor"
                )
            t = <TensorBase>inputs[k]
            if not t._requires_grad:
                raise GraphError(f"inputs: element {k} does not require grad")
            target, nr = _target_of(t)
            e = table.get(target)
            if e is None:
                if not accumulate and not allow_unused:
                    raise GraphError(
                        f"grad: input {k} (shape {tuple(t._data.shape)}) was not used in the "
                        "graph of the outputs; pass allow_unused=True to get None for it"
                    )
                continue
            e.wanted = True
            if e.captures is None:
                e.captures = []
            e.captures.append((nr, k, t))
        _mark_needed(table, root_entries)

    ready = [e for e in root_entries if e.deps == 0]
    try:
        while ready:
            e = <_Entry>ready.pop()
            target = e.target
            if type(target) is not Node:
                _finish_leaf(e, <TensorBase>target, selective, accumulate, results, commits)
                continue
            node = <Node>target
            n_out = node._n_out
            if node._tensor_hooks is not None or node._retained is not None or e.captures is not None:
                _finish_outputs(e, node, accumulate, results, commits)
            n_in = len(node._next)
            if not e.needed or not _has_grad(e, n_out):
                for i in range(n_in):
                    target = node._next[i]
                    if target is not None:
                        _decrement(<_Entry>table[target], ready)
                continue
            grads = _run_node(node, e, n_out, n_in)
            ran.append(node)
            for i in range(n_in):
                target = node._next[i]
                if target is None:
                    continue
                child = <_Entry>table[target]
                g = grads[i]
                if g is not None and child.needed | child.wanted:
                    if type(target) is Node:
                        nr = node._next_nr[i]
                        g = _check_grad(g, node, i, _out_shape(<Node>target, nr),
                                        _out_dtype(<Node>target, nr), node.op.broadcasts)
                        _add_to(_slot(child, nr, (<Node>target)._n_out), g)
                    else:
                        t = <TensorBase>target
                        g = _check_grad(g, node, i, t._data.shape, t._data.dtype,
                                        node.op.broadcasts)
                        _add_to(child, g)
                g = None
                _decrement(child, ready)
            grads = None
    except Exception as exc:
        if node is not None:
            site = node._site
            where = f", created at {site[0]}:{site[1]}" if site is not None else ""
            exc.add_note(f"(raised while running {node.name()} in backward{where})")
        raise

    # The walk succeeded. Note [Commit order]: check every .grad the commit will write, then
    # accumulate into the leaves' .grad, run their post-accumulate hooks, store retained
    # non-leaf gradients, free the graph. Once the first .grad is written the backward has
    # happened: a post-accumulate hook that raises stops the remaining hooks, but the retained
    # gradients are still stored and the graph still freed (the `finally`), so retrying the
    # backward cannot count a gradient twice.
    for item in commits:
        _check_commit(<_Entry>item[0], <TensorBase>item[1])
    _lock_commits()
    try:
        for item in commits:
            t = <TensorBase>item[1]
            if t._grad_fn is None:
                _commit_grad(<_Entry>item[0], t)
    finally:
        _unlock_commits()
    try:
        for item in commits:
            t = <TensorBase>item[1]
            if t._post_acc_hooks is not None and t._grad_fn is None:
                for fn in list(t._post_acc_hooks.values()):
                    fn(t)
    except Exception as exc:
        exc.add_note(
            "(raised by a post-accumulate-grad hook: every leaf's .grad had already been "
            "updated by this backward, and its graph is freed unless retain_graph=True)"
        )
        raise
    finally:
        _lock_commits()
        try:
            for item in commits:
                t = <TensorBase>item[1]
                if t._grad_fn is not None:
                    _commit_grad(<_Entry>item[0], t)
        finally:
            _unlock_commits()
        if not retain_graph:
            for node in ran:
                node._saved = None
                node._released = True
    if results is not None and not accumulate:
        return tuple(results)
    return None


# Note [Commit lock]: several threads may run backward at once (each walk's table is its own),
# but their commits may meet in one leaf's .grad. The in-place add releases the GIL, and even the
# out-of-place add is a read-modify-write of t._grad, so commits are serialized by one
# process-wide lock: the result equals the serial sum. The lock is taken without the GIL when it
# is contended (the holder needs the GIL to finish), and never held while user code runs.
cdef PyThread_type_lock _commit_lock = PyThread_allocate_lock()


cdef int _lock_commits() except -1:
    if not PyThread_acquire_lock(_commit_lock, NOWAIT_LOCK):
        with nogil:
            PyThread_acquire_lock(_commit_lock, WAIT_LOCK)
    return 0


cdef inline void _unlock_commits() noexcept:
    PyThread_release_lock(_commit_lock)


cdef int _check_commit(_Entry s, TensorBase t) except -1:
    # Before any .grad is written: the existing .grad must still fit the gradient (it can stop
    # fitting when the user replaced t.data or t.grad.data by an array of another shape).
    cur = t._grad
    if cur is None:
        return 0
    arr = (<TensorBase>cur)._data
    if type(arr) is not type(s.grad):
        raise DeviceError(
            f"backward: the existing .grad of a tensor of shape {tuple(t._data.shape)} is a "
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


cdef bint _has_grad(_Entry e, Py_ssize_t n_out):
    if n_out == 1:
        return e.grad is not None
    if e.subs is None:
        return False
    for s in e.subs:
        if s is not None and (<_Entry>s).grad is not None:
            return True
    return False


cdef void _mark_needed(dict table, list root_entries) except *:
    """With ``inputs=``: a node runs only if one of its edges leads to a wanted target."""
    # Dry Kahn pass for a topological order, then propagate from the leaves up.
    cdef dict deps = {}
    cdef list order = []
    cdef list ready = [e for e in root_entries if e.deps == 0]
    cdef _Entry e, c
    cdef Node node
    while ready:
        e = <_Entry>ready.pop()
        order.append(e)
        if type(e.target) is Node:
            for target in (<Node>e.target)._next:
                if target is None:
                    continue
                c = <_Entry>table[target]
                left = deps.get(c, c.deps) - 1
                deps[c] = left
                if left == 0:
                    ready.append(c)
    for e in reversed(order):
        if type(e.target) is not Node:
            e.needed = False
            continue
        node = <Node>e.target
        e.needed = False
        for target in node._next:
            if target is None:
                continue
            c = <_Entry>table[target]
            if c.wanted or c.needed:
                e.needed = True
                break


cdef void _finish_leaf(_Entry e, TensorBase t, bint selective, bint accumulate, list results,
                       list commits) except *:
    """A leaf's gradient is complete: tensor hooks, then capture or a deferred .grad write."""
    if e.grad is None:
        return
    if selective and not e.wanted:
        return
    if t._hooks:
        g = _run_tensor_hooks(t._hooks, e.grad, "a leaf tensor", t._data.shape, t._data.dtype)
        if g is not e.grad:
            e.grad = g
            e.owned = False
        g = None
    if e.captures is not None and not accumulate:
        for cap in e.captures:
            results[cap[1]] = e.grad
        return
    if accumulate and t._requires_grad:
        commits.append((e, t))


cdef void _finish_outputs(_Entry e, Node node, bint accumulate, list results,
                          list commits) except *:
    """A node's output gradients are complete: tensor hooks, capture, retain_grad (deferred)."""
    cdef Py_ssize_t nr, n_out = node._n_out
    cdef _Entry s, h
    for nr in range(n_out):
        s = _slot(e, nr, n_out)
        if s.grad is None:
            continue
        if node._tensor_hooks is not None:
            hooks = node._tensor_hooks.get(nr)
            if hooks:
                s.grad = _run_tensor_hooks(hooks, s.grad, node.name() + f" output {nr}",
                                           _out_shape(node, nr), _out_dtype(node, nr))
                s.owned = False
        if e.captures is not None:
            for cap in e.captures:
                if cap[0] != nr:
                    continue
                if accumulate:
                    h = _Entry()
                    h.grad = s.grad
                    commits.append((h, cap[2]))
                else:
                    results[cap[1]] = s.grad
        if accumulate and node._retained is not None:
            ref = node._retained.get(nr)
            tensor = ref() if ref is not None else None
            if tensor is not None:
                h = _Entry()
                h.grad = s.grad
                commits.append((h, tensor))


cdef tuple _run_node(Node node, _Entry e, Py_ssize_t n_out, Py_ssize_t n_in):
    """Call the node's backward once; returns one gradient (or None) per positional input."""
    cdef Py_ssize_t nr
    cdef _Entry s
    if n_out == 1:
        gys = [e.grad]
        e.grad = None
    else:
        gys = []
        for nr in range(n_out):
            s = _slot(e, nr, n_out)
            g = s.grad
            s.grad = None
            if g is None and not node._no_materialize:
                g = node.xp.zeros(_out_shape(node, nr), dtype=_out_dtype(node, nr))
            gys.append(g)
    if node._pre_hooks:
        for fn in list(node._pre_hooks.values()):
            r = fn(tuple([new_tensor(g) for g in gys]))
            if r is not None:
                gys = _check_hook_grads(r, node, fn, gys)
    if node.op.backward is None:
        raise GraphError(f"{node.name()}: op {node.op.name} is not differentiable")
    if node._n_sv and not node._released:
        _check_versions(node)
    bwd = node.op.backward
    # An op with a fused forward pairs it with its fused backward (they share saved state); an
    # op with only a fused backward takes it whenever overrides are on.
    if node.xp is _np:
        if node.op.cpu_backward is not None:
            if node._fused if node.op.cpu_forward is not None else _use_overrides:
                bwd = node.op.cpu_backward
    elif node.op.gpu_backward is not None:
        if node._fused if node.op.gpu_forward is not None else _use_overrides:
            bwd = node.op.gpu_backward
    cdef long long t0 = 0
    if _profiler is not None:
        t0 = _now_ns()
    res = bwd(node, *gys)
    if _profiler is not None:
        _profiler.record_backward(node.name(), node.op.name, node._prof_id, node.xp, gys, res,
                                  t0, _now_ns())
    if type(res) is not tuple:
        if type(res) is list:
            res = tuple(res)
        elif n_in == 1:
            res = (res,)
        else:
            raise GradientError(
                f"{node.name()} returned a single gradient; expected {n_in} (one per input)"
            )
    if len(res) != n_in:
        raise GradientError(
            f"{node.name()} returned {len(res)} gradients; expected {n_in} (one per input)"
        )
    if _anomaly and _anomaly_nan:
        _check_finite(node, res)
    if node._post_hooks:
        for fn in list(node._post_hooks.values()):
            r = fn(tuple([None if g is None else new_tensor(_as_array(g)) for g in res]),
                   tuple([new_tensor(g) for g in gys]))
            if r is not None:
                res = _check_post_hook(r, node, fn, res)
    return res


cdef int _check_finite(Node node, tuple res) except -1:
    for i, g in enumerate(res):
        if g is None or not hasattr(g, "dtype") or g.dtype.kind != "f":
            continue
        xp = node.xp
        if cpu_kernels.same_layout((g,)):
            if cpu_kernels.all_finite(<cnp.ndarray>g):
                continue
        elif bool(xp.isfinite(g).all()):
            continue
        what = "NaN" if bool(xp.isnan(g).any()) else "Inf"
        site = node._site
        where = (f"; the node was created at {site[0]}:{site[1]} in {site[2]}"
                 if site is not None else "")
        raise AnomalyError(
            f"{node.name()} returned {what} values in its gradient for input {i}{where}"
        )
    return 0


cdef int _check_versions(Node node) except -1:
    if node._svc0.value != node._sv0:
        _version_error(node, node._sj0, node._sv0, node._svc0.value)
    if node._n_sv > 1 and node._svc1.value != node._sv1:
        _version_error(node, node._sj1, node._sv1, node._svc1.value)
    if node._sv_more is not None:
        for j, vc, v in node._sv_more:
            if (<VersionCounter>vc).value != v:
                _version_error(node, j, v, (<VersionCounter>vc).value)
    return 0


cdef int _version_error(Node node, Py_ssize_t j, Py_ssize_t then, Py_ssize_t now) except -1:
    arr = node._saved[j]
    shape = tuple(arr.shape) if hasattr(arr, "shape") else "?"
    raise GraphError(
        f"{node.name()}: a tensor of shape {shape} that it saved for backward "
        f"was modified in place afterwards (version {then} when saved, {now} now). Clone "
        "the tensor before modifying it, or do the in-place op before it is used."
    )


cdef list _check_hook_grads(object r, Node node, object fn, list gys):
    name = getattr(fn, "__qualname__", repr(fn))
    if not isinstance(r, (tuple, list)) or len(r) != len(gys):
        raise GradientError(
            f"pre-hook {name} on {node.name()} must return None or a tuple of {len(gys)} gradients"
        )
    out = []
    for nr, g in enumerate(r):
        if isinstance(g, TensorBase):
            g = (<TensorBase>g)._data
        out.append(_check_grad(g, f"pre-hook {name} on {node.name()}", nr, _out_shape(node, nr),
                               _out_dtype(node, nr), False))
    return out


cdef tuple _check_post_hook(object r, Node node, object fn, tuple res):
    name = getattr(fn, "__qualname__", repr(fn))
    if not isinstance(r, (tuple, list)) or len(r) != len(res):
        raise GradientError(
            f"hook {name} on {node.name()} must return None or a tuple of {len(res)} gradients"
        )
    return tuple([(<TensorBase>g)._data if isinstance(g, TensorBase) else g for g in r])


cdef int _commit_grad(_Entry s, TensorBase t) except -1:
    """Write a finished gradient into ``t.grad``: steal it when owned, else copy; later calls
    add into ``.grad`` in place, as PyTorch does."""
    global _n_steals, _n_grad_copies, _n_inplace_adds, _n_outofplace_adds
    cur = t._grad
    if cur is None:
        if _can_write(s):
            t._grad = new_tensor(s.grad)
            _n_steals += 1
        else:
            t._grad = new_tensor(s.grad.copy())
            _n_grad_copies += 1
    else:
        arr = (<TensorBase>cur)._data
        if (cpu_kernels.supports(arr) and _shape_is(arr, s.grad.shape)
                and _same_dtype(arr, s.grad) and cnp.PyArray_ISWRITEABLE(<cnp.ndarray>arr)
                and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>arr)):
            cpu_kernels.add_inplace(<cnp.ndarray>arr, <cnp.ndarray>s.grad)
            _n_inplace_adds += 1
        elif (type(arr) is not cnp.ndarray and type(arr) is type(s.grad)
                and _shape_is(arr, s.grad.shape) and _same_dtype(arr, s.grad)):
            _gpu_add_inplace(arr, s.grad)
            _n_inplace_adds += 1
        else:
            t._grad = new_tensor(_as_array(arr + s.grad))
            _n_outofplace_adds += 1
    (<TensorBase>t._grad)._is_grad = True
    s.grad = None
    return 0
