# cython: language_level=3
"""ferro's autograd engine: op application, the in-place commit, and the backward walk.

Read docs/design.md first. The core is four modules, each with its ``.pxd`` contract:
``state`` (grad mode, switches, counters, profiler/anomaly flags), ``graph`` (OpDef, Node/ctx,
version counters, hooks), ``accumulate`` (Note [Grad ownership]: slots, the one in-place add,
sum-to-shape, the commit lock) and this one:

* :func:`apply` runs one op: it reads grad mode, unwraps the arrays, calls the op's Python
  ``forward`` once with a fresh :class:`Node` as ``ctx``, and, when some input requires grad,
  links that node to its inputs (a leaf input is its own target; a non-leaf input's target is its
  ``grad_fn``) and wraps the outputs.
* :func:`commit_inplace` finishes an in-place op.
* :func:`run_backward` collects the nodes reachable from the roots with an explicit stack (no
  recursion), counts dependencies, and runs nodes in Kahn order. Each node's Python ``backward``
  is called once with the summed gradient of each output. Broadcasting is undone here, in one
  place, and every gradient is checked against the shape and dtype of the tensor it belongs to.
* Nothing the user can see is touched until the walk has succeeded: ``.grad`` writes
  (accumulation, retain_grad) and the release of saved arrays are committed at the end (Note
  [Commit order]), so an error inside backward leaves the graph and every ``.grad`` as they were.

The Python-level functions of ``state``, ``graph`` and ``accumulate`` are re-exported here: this
module is the core's one Python face (``ferro._C.engine``).
"""

cimport numpy as cnp
from cpython.ref cimport Py_INCREF, Py_REFCNT
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM


cdef extern from "Python.h":
    object PyObject_GenericGetDict(object o, void *context)
    int PyObject_GenericSetDict(object o, object value, void *context) except -1

from ferro._C cimport cpu_kernels, gemm
from ferro._C.cpu_kernels cimport Pending
from ferro._C.accumulate cimport (
    _add_to,
    _check_commit,
    _commit_grad,
    _Entry,
    _lock_commits,
    _slot,
    _sum_to_shape,
    _unlock_commits,
)
from ferro._C.graph cimport (
    DIRECT_ADD,
    DIRECT_MATMUL,
    DIRECT_MEAN,
    DIRECT_MUL,
    DIRECT_RELU,
    DIRECT_SUB,
    DIRECT_SUM,
    DIRECT_TANH,
    FUSED_BACKWARD,
    FUSED_FORWARD,
    Node,
    OpDef,
    no_edges,
    node_save,
    unrecorded_ctx,
    _as_array,
    _check_versions,
    _device_name,
    _is_array,
    _is_float_array,
    _out_dtype,
    _out_shape,
    _record_saved_versions,
    _retarget_version,
    _same_descr,
    _same_dtype,
    _shape_is,
    _share_version,
    _xp_of,
)
from ferro._C.state cimport (
    MODE_GRAD,
    MODE_INFERENCE,
    Flags,
    backward_threads,
    clock_ns,
    flags,
    grad_mode,
    op_depth,
)
from ferro._C.tensor cimport (TensorBase, VersionCounter, data_of, new_tensor, register_pending,
                              version_counter)

import numpy as np

from ferro._C.accumulate import (
    set_gpu_backend,
    sum_to_shape,
    sum_to_shape_generic,
)
from ferro._C.gemm import walk as _walk  # Note [Nodes that run alone] (ferro/_intraop.py)
from ferro._C.graph import (
    RemovableHandle,
    bump_version,
    inplace_direct,
    register_node_hook,
    register_node_prehook,
    register_post_accumulate_grad_hook,
    register_tensor_hook,
    retain_grad,
    retains_grad,
)
from ferro._C.state import (
    GUARD_KINDS,
    ModeGuard,
    _get_mode,
    _pop_threads,
    _push_threads,
    _pop_saved_hooks,
    _push_saved_hooks,
    _reset_mode,
    _set_mode,
    get_profiler,
    is_anomaly_enabled,
    is_grad_enabled,
    is_inference_mode_enabled,
    get_num_threads,
    now_ns,
    overrides_enabled,
    reset_stats,
    set_anomaly,
    set_overrides_enabled,
    set_num_threads,
    set_profiler,
    stats,
)
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

# The core's Python face: the engine's own functions and the re-exported ones of its modules.
__all__ = [
    "apply",
    "arith",
    "compiled",
    "commit_inplace",
    "run_backward",
    "set_gpu_backend",
    "sum_to_shape",
    "sum_to_shape_generic",
    "RemovableHandle",
    "bump_version",
    "inplace_direct",
    "register_node_hook",
    "register_node_prehook",
    "register_post_accumulate_grad_hook",
    "register_tensor_hook",
    "retain_grad",
    "retains_grad",
    "GUARD_KINDS",
    "ModeGuard",
    "_get_mode",
    "_pop_threads",
    "_push_threads",
    "_pop_saved_hooks",
    "_push_saved_hooks",
    "_reset_mode",
    "_set_mode",
    "get_profiler",
    "is_anomaly_enabled",
    "is_grad_enabled",
    "is_inference_mode_enabled",
    "get_num_threads",
    "now_ns",
    "overrides_enabled",
    "reset_stats",
    "set_anomaly",
    "set_overrides_enabled",
    "set_num_threads",
    "set_profiler",
    "stats",
]

cnp.import_array()

cdef object _np = np
cdef object _generic = np.generic
cdef Flags _F = flags()

import os as _os
_FERRO_DIR = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))


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


cdef TensorBase _wrap(object arr, Node node, Py_ssize_t nr, bint inference):
    cdef TensorBase t = new_tensor(arr)
    if type(arr) is Pending:  # Note [Lazy elementwise chains]
        register_pending(t)
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
    return _apply(op, args, params)


def arith(OpDef op, slow, bint reverse=False):
    """A compiled ``Tensor`` operator method for the binary op ``op`` (``Tensor.__add__`` ...):
    ``apply(op, self, other)`` (``other, self`` with ``reverse``) when ``self`` is a floating
    tensor, where the op's Python wrapper ``slow(a, b)`` changes nothing (its integer-to-float
    promotion needs an integer tensor), else ``slow``. No Python frame between the operator and
    the engine: ``h * w`` on small tensors spent a tenth of its time in the wrapper's."""

    def method(self, other):
        if isinstance(self, TensorBase) and _is_float_array((<TensorBase>self)._arr):
            return _apply(op, (other, self) if reverse else (self, other), None)
        return slow(other, self) if reverse else slow(self, other)

    method.__name__ = method.__qualname__ = getattr(slow, "__name__", op.name)
    method.__doc__ = getattr(slow, "__doc__", None)
    return method


# The params of a reduction of every element (Note [Direct ops]): the one dict compiled() passes
cdef dict _ALL = {"axes": None, "keepdims": False}


def compiled(OpDef op, slow):
    """The compiled public function (and ``Tensor`` method) of the direct op ``op``, without
    the Python frames of ``slow``, the function it replaces (Note [Direct ops]): ``apply(op,
    x)`` for a one-tensor op (``ferro.tanh``), ``apply(op, a, b)`` for two tensors of NumPy
    matrices whose shapes align (``matmul``), ``apply(op, x, axes=None, keepdims=False)`` for
    ``sum`` or ``mean`` of a floating tensor and no other argument; ``slow`` for the rest."""
    cdef int kind = op.direct

    def fn(x, *args, **kwargs):
        if not kwargs and isinstance(x, TensorBase):
            a = (<TensorBase>x)._arr  # a Pending answers the tests below as an array would
            if kind >= DIRECT_SUM:
                if not args and _is_float_array(a):
                    return _apply(op, (x,), _ALL)
            elif kind == DIRECT_MATMUL:
                if len(args) == 1 and isinstance(args[0], TensorBase) and _aligned(
                        a, (<TensorBase>args[0])._arr):
                    return _apply(op, (x, args[0]), None)
            elif not args:
                return _apply(op, (x,), None)
        return slow(x, *args, **kwargs)

    fn.__name__ = fn.__qualname__ = slow.__name__
    fn.__doc__ = slow.__doc__
    fn.__module__ = slow.__module__
    fn.__wrapped__ = slow  # inspect.signature shows slow's
    return fn


cdef object _apply(OpDef op, tuple args, dict params):
    cdef Py_ssize_t n = len(args), i, k, n_out
    cdef long mode = grad_mode()
    cdef bint record = False, inference = mode == MODE_INFERENCE
    cdef TensorBase t, first_t = None
    cdef Node node = None
    cdef object arr, first_arr = None, a, ctx
    cdef bint is_array, fused = False, raw = False, mixed = False
    cdef tuple call = PyTuple_New(n + 1)
    cdef type atype = None, at
    # Note [Lazy elementwise chains] (ferro/_C/cpu_kernels.pyx): the ops that take Pendings,
    # where nothing watches; own >= 0 once an operand is one or has least elements (a bit per
    # argument whose array its tensor alone references)
    cdef Py_ssize_t least = cpu_kernels.lazy_least() if (
        ((DIRECT_ADD <= op.direct <= DIRECT_MUL and not params)
         or (op.direct == DIRECT_SUM and params is _ALL))
        and op.cpu_forward is None and _F.profiler is None and not _F.anomaly
        and _F.n_hook_contexts == 0) else 0
    cdef int own = 0
    cdef bint lazy = False

    # call = (ctx, *arrays); slot 0 is filled below, once we know whether a Node is needed.
    for i in range(n):
        a = args[i]
        if isinstance(a, TensorBase):
            t = <TensorBase>a
            if least <= 0:
                arr = t._arr if not _F.n_pending else data_of(t)
            else:
                arr = t._arr  # these ops write no input: other chains may stay pending
                if type(arr) is cnp.ndarray:
                    lazy = lazy or cnp.PyArray_SIZE(<cnp.ndarray>arr) >= least
                    if i < 2 and Py_REFCNT(arr) == 2:  # t._arr and arr alone
                        own |= 1 << i
                else:
                    lazy = lazy or type(arr) is Pending
            is_array = True
            if t._requires_grad and mode == MODE_GRAD:
                record = True
            if first_t is None:
                first_t = t
        elif type(a) is cnp.ndarray:
            arr = a
            is_array = True
            raw = True
        elif isinstance(a, _generic):
            # NumPy scalars promote strongly; a Python scalar keeps the tensor's dtype.
            arr = a.item()
            is_array = False
        else:
            arr = a
            is_array = _is_array(a)
        if is_array:
            at = cnp.ndarray if type(arr) is Pending else type(arr)  # a Pending: NumPy's
            if atype is None:
                atype = at
                first_arr = arr
            else:
                if at is not atype or (
                    atype is not cnp.ndarray and arr.device != first_arr.device
                ):
                    raise DeviceError(
                        f"{op.name}: arguments are on different devices: "
                        f"{_device_name(first_arr)} and {_device_name(arr)}"
                    )
                if op.same_dtype and not mixed and not _same_dtype(first_arr, arr):
                    mixed = True  # Note [Type promotion]: cast below, off the common path
        Py_INCREF(arr)
        PyTuple_SET_ITEM(call, i + 1, arr)
    if atype is None:
        raise ArgumentTypeError(f"{op.name}: expected at least one tensor argument")
    xp = np if atype is cnp.ndarray else _xp_of(first_arr)
    record = record and op.differentiable
    if record or op.private_ctx:
        node = Node.__new__(Node)
        node.op = op
        node.xp = xp
        node._prof_id = -1
        if record:
            _link(node, args, n, op)
            if _F.anomaly:
                node._site = _user_site()
        else:
            node._next = no_edges(n)
        ctx = node
    else:
        # Note [ctx contract]: nothing is recorded, so no Node is allocated.
        ctx = unrecorded_ctx(xp, n)
    Py_INCREF(ctx)
    PyTuple_SET_ITEM(call, 0, ctx)
    if record and raw:
        call = _copy_raw_arrays(call)  # after slot 0 is set: the tuple is complete
    if not lazy and least > 0 and op.direct == DIRECT_MUL and node is None and n == 2:
        lazy = cpu_kernels.scale_lazy(call[1], call[2])  # Note [Fused update]: lr * g
    if not lazy:
        own = -1
    if mixed:
        if own >= 0:
            call = tuple([cpu_kernels.realize(x) if type(x) is Pending else x for x in call])
        call = _promote(op, call)
        if node is not None:
            node._promoted = True

    # Note [Fused overrides]: the backend's fused forward, when overrides are on, returns
    # NotImplemented where its kernel does not take the arrays; the generic forward runs then.
    # Only a kernel that ran is recorded (node._fused), for the backward to pair with.
    fwd = None
    if _F.overrides:
        fwd = op.cpu_forward if atype is cnp.ndarray else op.gpu_forward
    cdef long long t0 = 0
    if _F.profiler is not None:
        t0 = clock_ns()
    cdef int *depth = op_depth()  # Note [Floating-point warnings]
    depth[0] += 1
    try:
        out = NotImplemented
        if fwd is not None:
            out = fwd(*call, **params) if params else fwd(*call)
            fused = out is not NotImplemented
        if not fused:
            if op.direct and (not params or params is _ALL):
                out = _direct_forward(op, node, xp, call, own)
            else:
                out = op.forward(*call, **params) if params else op.forward(*call)
    except ValueError:
        if op.broadcasts:
            _check_broadcast(op, call)
        raise
    finally:
        depth[0] -= 1

    if type(out) is tuple:
        outs = tuple([_as_array(o) for o in out])
        n_out = len(outs)
        if node is not None and node._saved is not None:
            for k in range(n_out):
                if outs[k] is not out[k]:
                    _resave(node, out[k], outs[k])
    else:
        outs = None
        a = _as_array(out)
        if a is not out and node is not None and node._saved is not None:
            _resave(node, out, a)
        out = a
        n_out = 1
    if _F.profiler is not None:
        prof_id = _F.profiler.record_forward(
            op.name, call, outs if outs is not None else out, t0, clock_ns(), record
        )
        if node is not None:
            node._prof_id = prof_id

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

    node._fused = FUSED_FORWARD if fused else 0
    node._n_out = n_out
    if outs is None:
        node._shape0 = _shape_of(out)
        node._dtype0 = out.dtype
        if _is_float_array(out) and not _is_nondiff(node, out):
            res = _wrap(out, node, 0, False)
        else:
            res = _wrap(out, None, 0, False)
        if op.view and first_t is not None:
            _share_version(<TensorBase>res, first_t)
        if node._saved is not None:
            _record_saved_versions(node, args, n, res, call)
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
        _record_saved_versions(node, args, n, results, call)
    return results


# Note [Direct ops]: the forward and first-order backward of add, sub, mul and tanh, compiled:
# the array expressions of their classes in ferro.ops.elementwise (which stay the reference, and
# run under create_graph), without a Python frame per op. A chain of small ops spent a fifth of
# its time in those frames.
cdef object _direct_forward(OpDef op, Node node, object xp, tuple call, int own):
    # own >= 0: the operands may be Pendings, and the result may be one (Note [Lazy
    # elementwise chains]); bit i set when operand i's array is referenced by its tensor alone
    cdef int kind = op.direct
    a = call[1]
    if kind >= DIRECT_SUM:
        return _reduce_forward(op, node, call)
    if kind == DIRECT_MATMUL:
        b = call[2]
        if not _matrices(a, b):
            return op.forward(*call)
        if node is not None:
            node_save(node, (a, b))
        return gemm.mm(a, b, _matmul)  # Note [Two-core GEMM]
    if kind == DIRECT_TANH or kind == DIRECT_RELU:
        y = xp.tanh(a) if kind == DIRECT_TANH else xp.maximum(a, 0)
        if node is not None:
            node_save(node, (y,))
        return y
    b = call[2]
    if kind == DIRECT_MUL and node is not None:  # save only what backward reads
        if own >= 0:  # a saved array is computed (and no longer lazy() 's leaf to take)
            if node._next[1] is not None and type(a) is Pending:
                a = cpu_kernels.realize(a)
            if node._next[0] is not None and type(b) is Pending:
                b = cpu_kernels.realize(b)
        node_save(node, (a if node._next[1] is not None else None,
                         b if node._next[0] is not None else None))
    if own >= 0:
        y = cpu_kernels.lazy(kind - DIRECT_ADD, a, b, own & 1, own & 2)
        if y is not NotImplemented:
            return y
        a = cpu_kernels.realize(a) if type(a) is Pending else a
        b = cpu_kernels.realize(b) if type(b) is Pending else b
    if cpu_kernels.big(a, b):  # Note [Two-core elementwise ops]
        y = cpu_kernels.binary(kind - DIRECT_ADD, a, b, None, 1.0)
        if y is not NotImplemented:
            return y
    if kind == DIRECT_ADD:
        return a + b
    if kind == DIRECT_SUB:
        return a - b
    return a * b


cdef inline bint _matrices(object a, object b) noexcept:
    return (type(a) is cnp.ndarray and type(b) is cnp.ndarray and cnp.PyArray_NDIM(
        <cnp.ndarray>a) == 2 and cnp.PyArray_NDIM(<cnp.ndarray>b) == 2)


cdef inline bint _aligned(object a, object b) noexcept:
    return _matrices(a, b) and cnp.PyArray_DIMS(<cnp.ndarray>a)[1] == cnp.PyArray_DIMS(
        <cnp.ndarray>b)[0]


cdef object _matmul = np.matmul
cdef object _add_reduce = np.add.reduce
cdef object _intp = np.intp


cdef object _reduce_forward(OpDef op, Node node, tuple call):
    # Sum.forward / Mean.forward (ferro.ops.reduction) of every element of a NumPy array, with
    # the same attributes on the node (their backward reads them); the class's forward for
    # anything else (a CuPy array, an empty mean, float16).
    cdef cnp.ndarray a
    cdef Py_ssize_t n
    x = call[1]
    if op.direct == DIRECT_SUM and (type(x) is cnp.ndarray or type(x) is Pending):
        # a Pending's values are summed, never stored (Note [Lazy elementwise chains])
        y = cpu_kernels.sum_all(x)
        if y is NotImplemented:  # Note [Two-core elementwise ops]
            y = _add_reduce(cpu_kernels.realize(x) if type(x) is Pending else x,
                            None, None, None, False)
        if node is not None:
            PyObject_GenericSetDict(node, {"shape": x.shape, "axes": None,
                                           "keepdims": False}, NULL)
        return y
    if type(x) is Pending:
        call = (call[0], cpu_kernels.realize(x))
    if type(call[1]) is not cnp.ndarray:
        return op.forward(*call, **_ALL)
    a = <cnp.ndarray>call[1]
    n = cnp.PyArray_SIZE(a)
    if not n or cnp.PyArray_ITEMSIZE(a) < 4:
        return op.forward(*call, **_ALL)
    y = _add_reduce(a, None, None, None, False)  # a NumPy scalar: Mean.forward's division
    y = y.dtype.type(y / _intp(n))
    if node is not None:
        PyObject_GenericSetDict(node, {"shape": (<object>a).shape, "axes": None,
                                       "keepdims": False, "scale": 1.0 / n}, NULL)
    return y


cdef tuple _direct_backward(int kind, Node node, object gy):
    if kind == DIRECT_ADD:
        return (gy, gy)
    if kind == DIRECT_SUB:
        return (gy, -gy if node._next[1] is not None else None)
    if kind == DIRECT_MUL:
        a, b = <tuple>node._saved
        return (_mul(gy, b, node._next[0]) if node._next[0] is not None else None,
                _mul(gy, a, node._next[1]) if node._next[1] is not None else None)
    if kind == DIRECT_MATMUL:  # Matmul.backward's common case
        a, b = <tuple>node._saved
        if not _matrices(a, b):
            return node.op.backward(node, gy)
        return (gemm.mm(gy, b.T, _matmul) if node._next[0] is not None else None,
                gemm.mm(a.T, gy, _matmul) if node._next[1] is not None else None)
    if kind >= DIRECT_SUM:
        d = <dict>PyObject_GenericGetDict(node, NULL)
        g = _as_array(gy * d["scale"]) if kind == DIRECT_MEAN else gy
        if type(g) is cnp.ndarray and cnp.PyArray_NDIM(<cnp.ndarray>g) == 0 and (
                cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>g)):
            return (_broadcast_scalar(<cnp.ndarray>g, <tuple>d["shape"]),)
        return (node.op.backward(node, gy),)
    (y,) = <tuple>node._saved
    if kind == DIRECT_TANH:
        return (gy * (1 - y * y),)
    return (gy * (y > 0),)


cdef object _broadcast_scalar(cnp.ndarray g, tuple shape):
    # reduction._expand_back of a 0-d gradient: a read-only view of its one value in ``shape``,
    # every stride 0 (the upstream gradient that kernels and binary() take as it is)
    cdef Py_ssize_t nd = len(shape), i
    cdef cnp.npy_intp dims[64]  # NPY_MAXDIMS
    cdef cnp.npy_intp strides[64]
    for i in range(nd):
        dims[i] = <cnp.npy_intp>shape[i]
        strides[i] = 0
    out = cnp.PyArray_New(cnp.ndarray, <int>nd, dims, cnp.PyArray_TYPE(g), strides,
                          cnp.PyArray_DATA(g), 0, 0, None)
    Py_INCREF(g)  # SetBaseObject steals it
    cnp.PyArray_SetBaseObject(<cnp.ndarray>out, g)
    return out


cdef inline object _mul(object g, object v, object target):
    if cpu_kernels.big(g, v):  # Note [Two-core elementwise ops]; [Streaming stores]: a leaf's
        r = cpu_kernels.binary(2, g, v, None, 1.0, cpu_kernels.BIG_MIN, type(target) is not Node)
        if r is not NotImplemented:
            return r
    return g * v


cdef tuple _last_shape = ()


cdef tuple _shape_of(object arr):
    # ``arr.shape``, as the tuple of the previous call when the shape is the same: a chain of
    # ops on one shape allocates no shape tuple (one GC-tracked object less a node).
    global _last_shape
    if not (type(arr) is cnp.ndarray and _shape_is(arr, _last_shape)):
        _last_shape = arr.shape
    return _last_shape


cdef int _resave(Node node, object scalar, object arr) except -1:
    # A 0-d forward result came back from NumPy as a scalar and was saved as one: save the
    # output array instead, so the saved value is known to be the output (Note [Double
    # backward]: it then connects to the graph under create_graph).
    node._saved = tuple([arr if s is scalar else s for s in <tuple>node._saved])
    return 0


cdef int _category(object dtype) except -1:
    # PyTorch's type categories: bool < integer < floating.
    k = dtype.kind
    if k == "b":
        return 0
    if k in "iu":
        return 1
    if k == "f":
        return 2
    raise DtypeError(f"type promotion: ferro holds no {dtype} tensors")


cdef tuple _promote(OpDef op, tuple call):
    """Note [Type promotion]: cast the array arguments of a same-dtype op to PyTorch's result
    type. The highest category (bool < integer < floating) wins; within it, the widest dtype
    among the arguments with dimensions, else among the 0-d ones (a 0-d tensor does not widen a
    dimensioned one of its category, as in PyTorch). Python scalars never reach here."""
    arrays = [a for a in call[1:] if _is_array(a)]
    top = max([_category(a.dtype) for a in arrays])
    pool = [a.dtype for a in arrays if _category(a.dtype) == top and a.ndim > 0]
    if not pool:
        pool = [a.dtype for a in arrays if _category(a.dtype) == top]
    target = _np.result_type(*pool)
    out = [call[0]]
    for a in call[1:]:
        out.append(a.astype(target) if _is_array(a) and a.dtype != target else a)
    return tuple(out)


cdef tuple _copy_raw_arrays(tuple call):
    # A NumPy array passed to a recorded op (not a Tensor) has no version counter, so the op
    # may not save it as is: the caller could change it before backward and get a wrong
    # gradient. A writeable one is copied (a read-only one cannot change through this name).
    out = list(call)
    for i in range(1, len(out)):
        a = out[i]
        if type(a) is cnp.ndarray and cnp.PyArray_ISWRITEABLE(<cnp.ndarray>a):
            out[i] = a.copy()
    return tuple(out)


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


cdef inline bint _is_nondiff(Node node, object arr) noexcept:
    if node._nondiff is None:
        return False
    for a in node._nondiff:
        if a is arr:
            return True
    return False


cdef int _link(Node node, tuple args, Py_ssize_t n, OpDef op) except -1:
    """Record the node's edges (before forward runs, so forward can read needs_input_grad)."""
    cdef tuple nexts = PyTuple_New(n)
    cdef tuple nrs = None  # made only when an edge leads to an output other than 0
    cdef TensorBase t
    # Both must be Python objects held by a variable: PyTuple_SET_ITEM steals the reference
    # Py_INCREF gave. Left to inference, nr_obj became a C integer, and each use made a
    # temporary int that was freed at once, leaving the tuple a dangling pointer for output
    # numbers above 256 (smaller ints are cached by CPython and survived by luck).
    cdef object target, nr_obj
    cdef Py_ssize_t i, k
    for i in range(n):
        a = args[i]
        target = None
        nr_obj = 0
        if isinstance(a, TensorBase):
            t = <TensorBase>a
            if t._is_inference:
                raise GraphError(
                    f"{op.name}: an inference tensor cannot take part in a recorded op; "
                    "clone it outside inferencegrad_mode() first"
                )
            if t._requires_grad:
                if t._vc is not None and t._grad_fn is not None and t._vc.value != t._birth:
                    raise GraphError(
                        f"{op.name}: an input of shape {tuple(t._arr.shape)} was modified in "
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
        if nrs is None and nr_obj != 0:
            nrs = PyTuple_New(n)
            for k in range(i):
                Py_INCREF(_ZERO)
                PyTuple_SET_ITEM(nrs, k, _ZERO)
        if nrs is not None:
            Py_INCREF(nr_obj)
            PyTuple_SET_ITEM(nrs, i, nr_obj)
    node._next = nexts
    # The common case shares one tuple of zeros per arity: one GC-tracked object less a node.
    node._next_nr = nrs if nrs is not None else _zeros(n)
    return 0


cdef object _ZERO = 0
cdef list _ZEROS = []


cdef tuple _zeros(Py_ssize_t n):
    while len(_ZEROS) <= n:
        _ZEROS.append((0,) * len(_ZEROS))
    return <tuple>_ZEROS[n]


def commit_inplace(TensorBase t, TensorBase out, str op_name):
    """Finish an in-place op: write ``out``'s values into ``t``'s memory and give ``t`` the
    history of ``out`` (``t`` becomes a non-leaf when ``out`` was recorded).

    A leaf that requires grad cannot be modified in place while grad mode is on.
    """
    if t._grad_fn is None and t._requires_grad and grad_mode() == MODE_GRAD:
        raise GraphError(
            f"{op_name}: a leaf tensor that requires grad cannot be modified in place; "
            "wrap the update in ferro.no_grad() or work on a clone"
        )
    td, od = data_of(t), data_of(out)  # any pending chain runs before t is written
    if tuple(od.shape) != tuple(td.shape):
        raise ShapeError(
            f"{op_name}: the result has shape {tuple(od.shape)} but the tensor modified in "
            f"place has shape {tuple(td.shape)}"
        )
    if not _same_dtype(od, td):
        raise DtypeError(
            f"{op_name}: the result has dtype {od.dtype} but the tensor modified in place "
            f"has dtype {td.dtype}"
        )
    if type(td) is cnp.ndarray and not cnp.PyArray_ISWRITEABLE(<cnp.ndarray>td):
        raise ReadOnlyError(
            f"{op_name}: the tensor modified in place (shape {tuple(td.shape)}, dtype "
            f"{td.dtype}) wraps read-only memory (a read-only memory map, np.frombuffer of "
            "bytes, ...); copy it first (t.clone()) or make the array writeable"
        )
    if od is not td:
        td[...] = od
    cdef VersionCounter vc = version_counter(t)
    vc.value += 1
    if out._grad_fn is not None:
        t._grad_fn = out._grad_fn
        t._output_nr = out._output_nr
        t._requires_grad = True
        t._birth = t._vc.value
        # The recorded output is now t: later in-place changes to t must be seen by the node.
        if (<Node>out._grad_fn)._saved is not None:
            _retarget_version(<Node>out._grad_fn, od, vc)
    return t


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
    if not (type(g) is cnp.ndarray and isinstance(dtype, cnp.dtype)
            and _same_descr(<cnp.dtype>cnp.PyArray_DESCR(<cnp.ndarray>g), <cnp.dtype>dtype)) \
            and g.dtype != dtype:
        if type(who) is Node and (<Node>who)._promoted and dtype.kind == "f":
            # Note [Type promotion]: the op ran in the promoted dtype; each input's gradient
            # goes back in the input's own dtype (PyTorch casts there too).
            return g.astype(dtype)
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
            r = data_of(<TensorBase>r)
        name = getattr(fn, "__qualname__", repr(fn))
        g = _check_grad(r, f"hook {name} on {who}", 0, shape, dtype, False)
    return g


cdef inline int _push(list stack, Py_ssize_t* n, object x) except -1:
    # ``stack[:n]`` is the stack; the slots above it hold None and are reused.
    if n[0] < len(stack):
        stack[n[0]] = x
    else:
        stack.append(x)
    n[0] += 1
    return 0


cdef inline object _pop(list stack, Py_ssize_t* n):
    n[0] -= 1
    x = stack[n[0]]
    stack[n[0]] = None
    return x


cdef inline bint _fits(object g, object arr) except -1:
    # A NumPy gradient of exactly the shape and dtype of the NumPy array it flows to: nothing
    # for _check_grad to check or undo (it would read arr.shape, a new tuple, to say so).
    cdef int i, nd
    if type(g) is not cnp.ndarray or type(arr) is not cnp.ndarray:
        return False
    nd = cnp.PyArray_NDIM(<cnp.ndarray>g)
    if nd != cnp.PyArray_NDIM(<cnp.ndarray>arr):
        return False
    for i in range(nd):
        if cnp.PyArray_DIMS(<cnp.ndarray>g)[i] != cnp.PyArray_DIMS(<cnp.ndarray>arr)[i]:
            return False
    return _same_descr(<cnp.dtype>cnp.PyArray_DESCR(<cnp.ndarray>g),
                       <cnp.dtype>cnp.PyArray_DESCR(<cnp.ndarray>arr))


cdef inline int _decrement(_Entry child, list ready) except -1:
    child.deps -= 1
    if child.deps == 0:
        ready.append(child)
    return 0


def run_backward(tuple roots, tuple root_grads, bint retain_graph=False, tuple inputs=None,
                 bint accumulate=True, bint allow_unused=False, Py_ssize_t num_threads=0):
    """The first-order backward walk (create_graph=False): grad mode is off while it runs, so
    hooks and Function backwards see ``is_grad_enabled() == False``, as in PyTorch.

    See :func:`_run_backward` for the arguments; ``create_graph`` backward is
    ``ferro.autograd._higher`` (Note [Double backward]).
    """
    token = _set_mode(0) if grad_mode() == MODE_GRAD else None
    try:
        return _run_backward(roots, root_grads, retain_graph, inputs, accumulate, allow_unused,
                             num_threads)
    finally:
        if token is not None:
            _reset_mode(token)


cdef object _run_backward(tuple roots, tuple root_grads, bint retain_graph, tuple inputs,
                          bint accumulate, bint allow_unused, Py_ssize_t num_threads):
    """The backward walk behind ``Tensor.backward``, ``autograd.backward`` and ``autograd.grad``.

    Args:
        roots: tensors to differentiate.
        root_grads: per root, the gradient array (or None for an implicit 1 on a 1-element root).
        retain_graph: keep saved arrays for another backward.
        inputs: tensors whose gradients are wanted; None means every leaf that requires grad.
        accumulate: write into ``.grad`` (backward) or return gradients (grad).
        allow_unused: with ``accumulate=False``, return None for inputs the roots do not reach.
        num_threads: threads for this backward, the caller included (0: the context's setting,
            ``ferro.autograd.parallel`` / ``set_num_threads``; 1: serial).

    Returns:
        With ``accumulate=False``, a tuple of arrays (or None) aligned with ``inputs``.
    """
    cdef dict table = {}
    cdef list stack = []
    cdef list ready = []
    cdef list ran = []
    cdef list commits = []         # (_Entry holding the final array, tensor)
    cdef _Entry e, s, child
    cdef Node node = None
    cdef TensorBase t
    cdef Py_ssize_t k, i, n_in, nr, n_out, stage = 0
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
        arr = data_of(t)  # any pending chain runs before backward reads or writes arrays
        if not t._requires_grad:
            raise GraphError(
                f"backward: element {k} of tensors does not require grad and has no grad_fn"
            )
        g = root_grads[k]
        if g is None:
            if arr.size != 1:
                raise GraphError(
                    f"backward: grad can be implicitly created only for 1-element outputs; "
                    f"got shape {tuple(arr.shape)}. Pass gradient= of that shape"
                )
            # empty + fill: xp.ones is the same two steps behind Python frames (numeric.ones,
            # copyto's dispatcher), once per backward of every small step.
            g = _xp_of(arr).empty(arr.shape, dtype=arr.dtype)
            g.fill(1)
            owned = True
        else:
            if isinstance(g, TensorBase):
                g = data_of(<TensorBase>g)
            if type(g) is not type(arr):
                raise DeviceError(
                    f"backward: gradient {k} is a {type(g).__module__}.{type(g).__name__}, the "
                    f"tensor's data a {type(arr).__module__}.{type(arr).__name__}"
                )
            if not _shape_is(g, arr.shape):
                raise ShapeError(
                    f"backward: gradient {k} has shape {tuple(g.shape)}, expected the tensor's "
                    f"shape {tuple(arr.shape)}"
                )
            if not _same_dtype(g, arr):
                raise DtypeError(
                    f"backward: gradient {k} has dtype {g.dtype}, expected the tensor's dtype "
                    f"{arr.dtype}"
                )
            owned = False
        target, nr = _target_of(t)
        e = table.get(target)
        if e is None:
            e = _Entry.__new__(_Entry)
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

    # Collect the reachable graph and count dependencies (explicit stack: no recursion). The
    # stack and the ready list below never shrink (_push/_pop keep a count): a list popped empty
    # is reallocated twice a node, which in a chain is every node.
    cdef Py_ssize_t n_stack = len(stack), n_ready
    while n_stack:
        node = <Node>_pop(stack, &n_stack)
        for target in node._next:
            if target is None:
                continue
            e = table.get(target)
            if e is None:
                e = _Entry.__new__(_Entry)
                e.target = target
                e.deps = 1
                e.needed = True
                table[target] = e
                if type(target) is Node:
                    _push(stack, &n_stack, target)
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
                        f"grad: input {k} (shape {tuple(t._arr.shape)}) was not used in the "
                        "graph of the outputs; pass allow_unused=True to get None for it"
                    )
                continue
            e.wanted = True
            if e.captures is None:
                e.captures = []
            e.captures.append((nr, k, t))
        _mark_needed(table, root_entries)

    ready = [e for e in root_entries if e.deps == 0]
    if num_threads == 0:
        num_threads = backward_threads()
    cdef Py_ssize_t popped = 0
    n_ready = len(ready)
    try:
        while n_ready:
            if num_threads > 1 and n_ready > 1 and _runnable(ready[:n_ready]) > 1:
                # Two nodes could run at once: the rest of the walk goes parallel. Until now it
                # was serial, so what has been added so far was added in serial order.
                node = None
                del ready[n_ready:]
                _walk_parallel(table, ready, ran, commits, results, selective, accumulate,
                               num_threads, popped)
                # Commits in serial order: post-accumulate hooks run as they do serially.
                commits.sort(key=_commit_rank)
                break
            e = <_Entry>_pop(ready, &n_ready)
            e.rank = popped
            popped += 1
            node = _take(e, selective, accumulate, results, commits)
            if node is None:
                continue
            n_out = node._n_out
            n_in = len(node._next)
            if not e.needed or not _has_grad(e, n_out):
                for i in range(n_in):
                    target = node._next[i]
                    if target is not None:
                        child = <_Entry>table[target]
                        child.deps -= 1
                        if child.deps == 0:
                            _push(ready, &n_ready, child)
                continue
            stage = _early_stage(node, table) if node.op.early else 0
            if stage:
                # Note [Early gradients]: the early leaves are finished (their hooks run) between
                # the passes, in the order the walk would pop them after the whole backward.
                gys = _grad_outputs(node, e, n_out)
                grads = _backward_pass(node, gys, n_in, stage)
                for i in range(n_in - 1, -1, -1):
                    if stage >> i & 1:
                        child = <_Entry>table[node._next[i]]
                        _deliver_leaf(node, i, grads[i], child)
                        child.rank = popped
                        popped += 1
                        _take(child, selective, accumulate, results, commits)
                grads = _backward_pass(node, gys, n_in, ((1 << n_in) - 1) & ~stage)
                gys = None
            else:
                grads = _run_node(node, e, n_out, n_in)
            ran.append(node)
            for i in range(n_in):
                target = node._next[i]
                if target is None or stage >> i & 1:
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
                        if not _fits(g, data_of(t)):
                            g = _check_grad(g, node, i, t._arr.shape, t._arr.dtype,
                                            node.op.broadcasts)
                        _add_to(child, g)
                g = None
                child.deps -= 1
                if child.deps == 0:
                    _push(ready, &n_ready, child)
            grads = None
    except Exception as exc:
        if node is not None:
            site = node._site
            where = f", created at {site[0]}:{site[1]}" if site is not None else ""
            exc.add_note(f"(raised while running {node.name()} in backward{where})")
        raise

    # The walk succeeded (Note [Atomic backward]: nothing was written before). Note [Commit
    # order]: check every .grad the commit will write, then accumulate into the leaves' .grad,
    # run their post-accumulate hooks, store retained non-leaf gradients, free the graph. Once
    # the first .grad is written the backward has happened: a post-accumulate hook that raises
    # stops the remaining hooks, but the retained gradients are still stored and the graph still
    # freed (the `finally`), so retrying the backward cannot count a gradient twice.
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


cdef Node _take(_Entry e, bint selective, bint accumulate, list results, list commits):
    """A target just popped from the ready list, in both walks: a leaf is finished here (None is
    returned); a node's output hooks, captures and retained gradients run, and the node is
    returned for its backward."""
    target = e.target
    if type(target) is not Node:
        _finish_leaf(e, <TensorBase>target, selective, accumulate, results, commits)
        return None
    cdef Node node = <Node>target
    if node._tensor_hooks is not None or node._retained is not None or e.captures is not None:
        _finish_outputs(e, node, accumulate, results, commits)
    return node


cdef bint _has_grad(_Entry e, Py_ssize_t n_out) except -1:
    if n_out == 1:
        return e.grad is not None
    if e.subs is None:
        return False
    for s in e.subs:
        if s is not None and (<_Entry>s).grad is not None:
            return True
    return False


cdef int _mark_needed(dict table, list root_entries) except -1:
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
    return 0


cdef int _finish_leaf(_Entry e, TensorBase t, bint selective, bint accumulate, list results,
                      list commits) except -1:
    """A leaf's gradient is complete: tensor hooks, then capture or a deferred .grad write."""
    if e.grad is None:
        return 0
    if selective and not e.wanted:
        return 0
    if t._hooks:
        g = _run_tensor_hooks(t._hooks, e.grad, "a leaf tensor", t._arr.shape, t._arr.dtype)
        if g is not e.grad:
            e.grad = g
            e.owned = False
        g = None
    if e.captures is not None and not accumulate:
        for cap in e.captures:
            results[cap[1]] = e.grad
        return 0
    if accumulate and t._requires_grad:
        commits.append((e, t))
    return 0


cdef int _finish_outputs(_Entry e, Node node, bint accumulate, list results,
                         list commits) except -1:
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
                    h = _Entry.__new__(_Entry)
                    h.grad = s.grad
                    h.rank = e.rank
                    commits.append((h, cap[2]))
                else:
                    results[cap[1]] = s.grad
        if accumulate and node._retained is not None:
            ref = node._retained.get(nr)
            tensor = ref() if ref is not None else None
            if tensor is not None:
                h = _Entry.__new__(_Entry)
                h.grad = s.grad
                h.rank = e.rank
                commits.append((h, tensor))
    return 0


cdef tuple _run_node(Node node, _Entry e, Py_ssize_t n_out, Py_ssize_t n_in):
    """Call the node's backward once; returns one gradient (or None) per positional input."""
    return _call_backward(node, _grad_outputs(node, e, n_out), n_in)


cdef inline list _grad_outputs(Node node, _Entry e, Py_ssize_t n_out):
    """Take the node's output gradients from its entry and run its pre-hooks on them."""
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
    return gys


cdef inline tuple _call_backward(Node node, list gys, Py_ssize_t n_in):
    """Run the node's backward (its fused override where it applies) on ``gys``; check and
    post-hook the gradients it returns, one (or None) per positional input."""
    if node.op.backward is None:
        raise GraphError(f"{node.name()}: op {node.op.name} is not differentiable")
    if node._n_sv and not node._released:
        _check_versions(node)
    # Note [Fused overrides]: a paired override's backward runs exactly when its forward kernel
    # ran (it reads state only that forward leaves); any other fused backward runs while
    # overrides are on and returns NotImplemented where its kernel does not take the arrays.
    cdef OpDef op = node.op
    cdef bint cpu = node.xp is _np
    cdef bint paired = op.cpu_paired if cpu else op.gpu_paired
    bwd = op.cpu_backward if cpu else op.gpu_backward
    if paired:
        if not node._fused & FUSED_FORWARD:
            bwd = None
    elif not _F.overrides:
        bwd = None
    cdef long long t0 = 0
    if _F.profiler is not None:
        t0 = clock_ns()
    res = NotImplemented
    if (bwd is not None and cpu and op.cpu_direct_kernel is not None and node._unpack is None
            and not node._stage and not node._released):
        # Note [Direct ops]: what tanh's and relu's fused backward does, without its frame
        bwd = None
        y = (<tuple>node._saved)[0]
        if cpu_kernels.accepts_grad(gys[0], (y,)):
            res = op.cpu_direct_kernel(gys[0], y)
            node._fused |= FUSED_BACKWARD
    if bwd is not None:
        res = bwd(node, gys[0]) if len(gys) == 1 else bwd(node, *gys)
        if res is not NotImplemented:
            node._fused |= FUSED_BACKWARD
        elif paired:
            raise GraphError(
                f"{node.name()}: the fused backward of op {op.name} refused the state its own "
                "forward left (a bug in its override)"
            )
    if res is NotImplemented:
        # Note [Direct ops]: not for saved-tensor hooks' packed values, a staged pass or a
        # released node (the class's backward reads them through ctx, or raises).
        if op.direct and node._unpack is None and not node._stage and not node._released:
            res = _direct_backward(op.direct, node, gys[0])
        else:
            res = op.backward(node, gys[0]) if len(gys) == 1 else op.backward(node, *gys)
    if _F.profiler is not None:
        _F.profiler.record_backward(
            node.name(), node.op.name, node._prof_id, node.xp, gys, res, t0, clock_ns()
        )
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
    if _F.anomaly and _F.anomaly_nan:
        _check_finite(node, res)
    if node._post_hooks:
        for fn in list(node._post_hooks.values()):
            r = fn(tuple([None if g is None else new_tensor(_as_array(g)) for g in res]),
                   tuple([new_tensor(g) for g in gys]))
            if r is not None:
                res = _check_post_hook(r, node, fn, res)
    return res


# Note [Early gradients] (docs/design.md).
cdef Py_ssize_t _early_stage(Node node, dict table) except -1:
    """The inputs (a bitmask) whose gradients this node can deliver in a first pass of its
    backward, or 0 when staging would change nothing observable or the order of anything: every
    input from ``op.early`` on is None or a leaf that this node's gradient completes, one of
    them has tensor hooks, an earlier input needs a gradient, and nothing reads all of the
    node's gradients at once (post-hooks) or counts its unpacks (saved-tensor hooks)."""
    cdef Py_ssize_t i, n = len(node._next), mask = 0
    cdef bint hooked = False, rest = False
    if n > 62 or node._post_hooks or node._unpack is not None:
        return 0
    for i in range(n):
        target = node._next[i]
        if target is None:
            continue
        if i < node.op.early:
            rest = True
        elif type(target) is Node or (<_Entry>table[target]).deps != 1:
            return 0
        else:
            mask |= 1 << i
            if (<TensorBase>target)._hooks:
                hooked = True
    return mask if hooked and rest else 0


cdef tuple _backward_pass(Node node, list gys, Py_ssize_t n_in, Py_ssize_t stage):
    """One pass of a staged backward: ``ctx.needs_input_grad`` shows only the inputs in
    ``stage``."""
    node._stage = stage
    try:
        return _call_backward(node, gys, n_in)
    finally:
        node._stage = 0


cdef int _deliver_leaf(Node node, Py_ssize_t i, object g, _Entry child) except -1:
    """Serial walk: add input ``i``'s early gradient into its leaf's entry; the entry is ready."""
    cdef TensorBase t = <TensorBase>node._next[i]
    if g is not None and child.needed | child.wanted:
        _add_to(child, _check_grad(g, node, i, t._arr.shape, t._arr.dtype, node.op.broadcasts))
    child.deps -= 1
    return 0


cdef int _check_finite(Node node, tuple res) except -1:
    for i, g in enumerate(res):
        if g is None or not hasattr(g, "dtype") or g.dtype.kind != "f":
            continue
        xp = node.xp
        if cpu_kernels.accepts((g,)):
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


cdef list _check_hook_grads(object r, Node node, object fn, list gys):
    name = getattr(fn, "__qualname__", repr(fn))
    if not isinstance(r, (tuple, list)) or len(r) != len(gys):
        raise GradientError(
            f"pre-hook {name} on {node.name()} must return None or a tuple of {len(gys)} gradients"
        )
    out = []
    for nr, g in enumerate(r):
        if isinstance(g, TensorBase):
            g = data_of(<TensorBase>g)
        out.append(_check_grad(g, f"pre-hook {name} on {node.name()}", nr, _out_shape(node, nr),
                               _out_dtype(node, nr), False))
    return out


cdef tuple _check_post_hook(object r, Node node, object fn, tuple res):
    name = getattr(fn, "__qualname__", repr(fn))
    if not isinstance(r, (tuple, list)) or len(r) != len(res):
        raise GradientError(
            f"hook {name} on {node.name()} must return None or a tuple of {len(res)} gradients"
        )
    return tuple([data_of(<TensorBase>g) if isinstance(g, TensorBase) else g for g in r])


# ---------------------------------------------------------------------------------------------
# Parallel backward. Note [Parallel backward] (docs/design.md):
#
# * Every thread of the walk (the caller and ``n_threads - 1`` persistent workers) runs the same
#   loop: under the walk's lock it pops a ready target (LIFO, so a thread follows its own chain),
#   finishes it (leaf and output hooks), releases the lock to run the node's backward, and
#   retakes it to deliver the gradients and count the edges done; a thread with nothing ready
#   waits until another one delivers. No thread hands its results to another: a worker's child
#   node is ready, and usually run by that worker, the moment the worker delivers.
# * Workers are persistent threads (started on first use, one job queue; a job asks a worker to
#   join one walk). A worker runs its part of the walk in a copy of the caller's context (grad
#   mode, saved-tensor hooks, profiler stack and every other ContextVar), so nodes and hooks see
#   what they would see in serial backward. NumPy and the nogil kernels release the GIL, which is
#   where branches overlap.
# * Determinism: every contribution a slot will receive has a key, (the serial pop rank of the
#   producing node, the edge index), from a dry run of the serial walk. A slot adds its
#   contributions in key order, parking any that arrives early: the order the serial walk adds
#   them in, so gradients are bit-identical to serial whichever thread delivers them.
# * Failure: an exception in any thread (a KeyboardInterrupt in the caller too) stops the
#   scheduling; the caller waits until every worker has left the walk and propagates it before
#   any commit: backward stays atomic.
# ---------------------------------------------------------------------------------------------

cdef object _jobs = None          # queue.SimpleQueue of jobs, or None before first use
cdef list _workers = []


def _after_fork_in_child():
    # A forked child (a DataLoader worker) has none of the parent's threads: start anew.
    global _jobs, _workers
    _jobs = None
    _workers = []


_os.register_at_fork(after_in_child=_after_fork_in_child)


def _worker_loop(jobs):
    """A persistent backward worker: joins walks until it gets None (never, in practice)."""
    while True:
        job = jobs.get()
        if job is None:
            return
        context, walk = job
        job = None
        context.run(_join, walk)
        context = walk = None


cdef object _pool(Py_ssize_t n):
    """The job queue, with at least ``n`` workers listening."""
    global _jobs
    import queue
    import threading
    if _jobs is None:
        _jobs = queue.SimpleQueue()
        # A worker thread gets a malloc arena of its own, which returns freed pages to the OS:
        # glibc's thresholds are fixed here too (ferro._C.allocator.tune_heap: the caching
        # allocator's install does it at import, unless FERRO_CACHING_ALLOCATOR=0).
        from ferro._C.allocator import tune_heap
        tune_heap()
    while len(_workers) < n:
        w = threading.Thread(target=_worker_loop, args=(_jobs,), daemon=True,
                             name=f"ferro-backward-{len(_workers)}")
        w.start()
        _workers.append(w)
    return _jobs


def _commit_rank(item):
    return (<_Entry>item[0]).rank


cdef int _runnable(list ready) except -1:
    # How many ready targets are nodes (leaves only finish; nodes run a backward).
    cdef int n = 0
    for e in ready:
        if type((<_Entry>e).target) is Node:
            n += 1
    return n


cdef Py_ssize_t _assign_ranks(dict table, list ready, Py_ssize_t first) except -1:
    """Dry run of the rest of the serial walk, from its current state (the ready list and the
    dependency counts): each target's pop rank, from ``first`` on, and each slot's expected keys.
    """
    cdef list order = list(ready)
    cdef list slots = []
    cdef dict left = {}
    cdef Py_ssize_t r = first, i, n, width = 1
    cdef _Entry e, c, slot
    cdef Node node
    for e in table.values():
        if type(e.target) is Node and len((<Node>e.target)._next) + 1 > width:
            width = len((<Node>e.target)._next) + 1
    while order:
        e = <_Entry>order.pop()
        e.rank = r
        r += 1
        if type(e.target) is not Node:
            continue
        node = <Node>e.target
        for i in range(len(node._next)):
            target = node._next[i]
            if target is None:
                continue
            c = <_Entry>table[target]
            if type(target) is Node:
                slot = _slot(c, node._next_nr[i], (<Node>target)._n_out)
            else:
                slot = c
            if slot.expect is None:
                slot.expect = []
                slots.append(slot)
            slot.expect.append(e.rank * width + i)
            n = left.get(c, c.deps) - 1
            left[c] = n
            if n == 0:
                order.append(c)
    # A slot whose sum cannot depend on the order skips the ordering: one contribution left, or
    # two into an empty slot (IEEE addition commutes; a third term makes the order matter).
    for slot in slots:
        if len(slot.expect) == 1 or (len(slot.expect) == 2 and slot.grad is None):
            slot.next_key = -1
    return width


cdef int _add_in_order(_Entry slot, Py_ssize_t key, object g) except -1:
    """Add ``g`` (None: nothing) into ``slot`` when it is the contribution due, else park it."""
    if slot.next_key < 0:
        # Order cannot matter here (see _assign_ranks).
        if g is not None:
            _add_to(slot, g)
        return 0
    if slot.expect[slot.next_key] != key:
        if slot.parked is None:
            slot.parked = {}
        slot.parked[key] = g
        return 0
    if g is not None:
        _add_to(slot, g)
    slot.next_key += 1
    while slot.parked and slot.next_key < len(slot.expect):
        k = slot.expect[slot.next_key]
        if k not in slot.parked:
            break
        g = slot.parked.pop(k)
        if g is not None:
            _add_to(slot, g)
        slot.next_key += 1
    return 0


cdef list _checked(Node node, object grads, dict table):
    """A finished node's gradients, each checked against (and summed to the shape of) the
    target it flows to, None where the target needs none. Reads only what the walk never
    changes, so it runs outside the walk's lock."""
    cdef Py_ssize_t i, nr, n = len(node._next)
    cdef _Entry child
    cdef TensorBase t
    cdef list out = [None] * n
    for i in range(n):
        target = node._next[i]
        g = grads[i]
        if target is None or g is None:
            continue
        child = <_Entry>table[target]
        if not (child.needed | child.wanted):
            continue
        if type(target) is Node:
            nr = node._next_nr[i]
            out[i] = _check_grad(g, node, i, _out_shape(<Node>target, nr),
                                 _out_dtype(<Node>target, nr), node.op.broadcasts)
        else:
            t = <TensorBase>target
            out[i] = _check_grad(g, node, i, t._arr.shape, t._arr.dtype, node.op.broadcasts)
    return out


cdef int _deliver(Node node, Py_ssize_t rank, Py_ssize_t width, list grads, dict table,
                  list ready, Py_ssize_t skip) except -1:
    """Route a finished node's checked gradients (None: it did not run) to its inputs' slots in
    key order, and count the edges done (under the walk's lock); the inputs in the bitmask
    ``skip`` are left out (Note [Early gradients]: delivered by the other pass)."""
    cdef Py_ssize_t i
    cdef _Entry child, slot
    for i in range(len(node._next)):
        target = node._next[i]
        if target is None or skip >> i & 1:
            continue
        child = <_Entry>table[target]
        if type(target) is Node:
            slot = _slot(child, node._next_nr[i], (<Node>target)._n_out)
        else:
            slot = child
        _add_in_order(slot, rank * width + i, None if grads is None else grads[i])
        _decrement(child, ready)
    return 0


cdef int _note_node(BaseException exc, Node node) except -1:
    if node is not None:
        site = node._site
        where = f", created at {site[0]}:{site[1]}" if site is not None else ""
        exc.add_note(f"(raised while running {node.name()} in backward{where})")
    return 0


cdef class _Walk:
    """The shared state of one parallel walk; every field is read and written under ``cond``'s
    lock, except the immutable graph that ``_checked`` and the nodes' backwards read."""
    cdef dict table
    cdef list ready, ran, commits, results
    cdef bint selective, accumulate, finished
    cdef bint alone  # a node that runs alone (Note [Nodes that run alone]) waits or runs
    cdef Py_ssize_t width, running, active, idle
    cdef object cond
    cdef object error
    cdef Node failed


cdef int _participate(_Walk w) except -1:
    """One thread's share of the walk (see the Note above); returns when the walk is over or
    failed. Any exception is recorded in ``w`` for the caller to raise, never raised here."""
    cdef _Entry e
    cdef Node node = None
    cdef bint held = False, in_node = False, alone = False, outer = _walk.on
    cdef Py_ssize_t n_out, n_in, stage, rest, k
    cond = w.cond
    try:
        _walk.on = True
        cond.acquire()
        held = True
        while w.error is None:
            if not w.ready or w.alone:
                if w.running == 0:
                    break
                w.idle += 1
                try:
                    cond.wait()
                finally:
                    w.idle -= 1
                continue
            node = None
            e = <_Entry>w.ready.pop()
            node = _take(e, w.selective, w.accumulate, w.results, w.commits)
            if node is None:
                continue
            n_out = node._n_out
            if not e.needed or not _has_grad(e, n_out):
                _deliver(node, e.rank, w.width, None, w.table, w.ready, 0)
                continue
            n_in = len(node._next)
            stage = _early_stage(node, w.table) if node.op.early else 0
            w.ran.append(node)
            w.running += 1
            in_node = True
            if getattr(node, "_alone", False):  # Note [Nodes that run alone]
                w.alone = alone = True
                while w.running > 1 and w.error is None:
                    cond.wait()
                if w.error is not None:
                    break
                _walk.on = False
            elif w.ready and w.idle:
                cond.notify()  # more ready work than this thread is taking: wake a waiting one
            cond.release()
            held = False
            if stage:
                # Note [Early gradients]: deliver the first pass's gradients, and finish their
                # leaves here (the last targets appended to the ready list: each one's last
                # edge), in the order the serial walk does.
                rest = ((1 << n_in) - 1) & ~stage
                gys = _grad_outputs(node, e, n_out)
                grads = _checked(node, _backward_pass(node, gys, n_in, stage), w.table)
                cond.acquire()
                held = True
                k = len(w.ready)
                _deliver(node, e.rank, w.width, grads, w.table, w.ready, rest)
                while len(w.ready) > k:
                    _take(<_Entry>w.ready.pop(), w.selective, w.accumulate, w.results, w.commits)
                cond.release()
                held = False
                grads = _checked(node, _backward_pass(node, gys, n_in, rest), w.table)
                gys = None
            else:
                grads = _checked(node, _run_node(node, e, n_out, n_in), w.table)
            cond.acquire()
            held = True
            w.running -= 1
            in_node = False
            if alone:
                w.alone = alone = False
                _walk.on = True
            _deliver(node, e.rank, w.width, grads, w.table, w.ready, stage)
            grads = None
            if w.alone or w.idle and (len(w.ready) > 1 or (not w.ready and w.running == 0)):
                cond.notify_all()
        if in_node:  # the walk failed while this node waited to run alone
            w.running -= 1
            w.alone = in_node = alone = False
    except BaseException as exc:
        if not held:
            cond.acquire()
            held = True
        if in_node:
            w.running -= 1
        if alone:
            w.alone = False
        if w.error is None:
            w.error, w.failed = exc, node
    finally:
        if held:
            if w.idle or w.alone:
                cond.notify_all()
            cond.release()
        _walk.on = outer  # a walk inside another's node (a nested backward) gives it back
    return 0


def _join(_Walk w):
    """A worker's part of a walk (in a copy of the caller's context), unless it is over."""
    with w.cond:
        if w.finished:
            return
        w.active += 1
    try:
        _participate(w)
    finally:
        with w.cond:
            w.active -= 1
            w.cond.notify_all()


cdef int _walk_parallel(dict table, list ready, list ran, list commits, list results,
                        bint selective, bint accumulate, Py_ssize_t n_threads,
                        Py_ssize_t first_rank) except -1:
    """The rest of the backward walk on ``n_threads`` threads (the caller's included), from the
    serial walk's current state; see the Note above."""
    import contextvars
    import threading
    cdef _Walk w = _Walk.__new__(_Walk)
    w.table, w.ready, w.ran, w.commits, w.results = table, ready, ran, commits, results
    w.selective, w.accumulate = selective, accumulate
    w.width = _assign_ranks(table, ready, first_rank)
    w.cond = threading.Condition(threading.Lock())
    jobs = _pool(n_threads - 1)
    context = contextvars.copy_context()
    for _ in range(n_threads - 1):
        jobs.put((context.copy(), w))
    try:
        _participate(w)
    finally:
        # Every worker leaves the walk before the caller goes on (to the commit, or to raise):
        # none is running a node or touching the walk's state after this.
        with w.cond:
            w.finished = True
            while w.active:
                try:
                    w.cond.wait()
                except BaseException as exc:  # an interrupt while waiting: still wait
                    if w.error is None:
                        w.error = exc
        # A join job still queued (every worker busy elsewhere) holds only this empty shell.
        w.table = w.ready = w.ran = w.commits = w.results = None
    if w.error is not None:
        error = w.error
        _note_node(error, w.failed)
        w.error = None
        raise error
    return 0
