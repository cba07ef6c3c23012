# cython: language_level=3
"""The graph: ops (:class:`OpDef`), recorded applications (:class:`Node`, the ``ctx`` of an op),
version counters of saved tensors, and hook storage.

An op's Python ``forward``/``backward`` receive the node as ``ctx``; the engine (``engine.pyx``)
creates nodes, links their edges and walks them. The array helpers every core module shares
(which backend an array belongs to, shape and dtype predicates) are declared in ``graph.pxd``.
"""

cimport cython
cimport numpy as cnp

from ferro._C cimport cpu_kernels
from ferro._C.state cimport MODE_GRAD, Flags, flags, grad_mode, op_depth, saved_hooks
from ferro._C.tensor cimport (
    TensorBase, VersionCounter, data_of, flush_except, new_tensor, version_counter
)

import weakref

import numpy as np

from ferro.errors import ArgumentError, ArgumentTypeError, GraphError

cnp.import_array()

cdef object _np = np
cdef object _generic = np.generic
cdef Flags _F = flags()

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


cdef object _scalar_to_array(object x):
    # NumPy turns 0-d results into scalars; the engine only ever holds arrays.
    if isinstance(x, _generic):
        return _np.asarray(x)
    return x


# ---------------------------------------------------------------------------------------------
# Ops and nodes
# ---------------------------------------------------------------------------------------------

cdef dict _DIRECT = {"add": DIRECT_ADD, "sub": DIRECT_SUB, "mul": DIRECT_MUL, "tanh": DIRECT_TANH,
                     "relu": DIRECT_RELU, "sum": DIRECT_SUM, "mean": DIRECT_MEAN,
                     "matmul": DIRECT_MATMUL}


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
        private_ctx: forward reads back attributes it stores on ``ctx``, so it gets a fresh
            :class:`Node` even when nothing is recorded (``autograd.Function``: user code);
            ferro's own ops get the shared :class:`UnrecordedCtx` then (Note [ctx contract]).
        differentiable_backward: ``differentiable_backward(ctx, *grad_outputs)`` written with
            ferro ops on Tensors, which ``create_graph`` backward runs instead of ``backward``
            (Note [Double backward]); None: ``backward`` runs on the differentiable namespace.
        early: Note [Early gradients]: ``backward`` can compute the gradients of the inputs from
            this index on (say a weight's and a bias's) without the others' (through
            ``ctx.needs_input_grad``), so the engine may run it in two passes and hand those
            to their leaves' hooks before the second pass; 0: never staged.
        direct: Note [Direct ops]: ``"add"``, ``"sub"``, ``"mul"``, ``"tanh"``, ``"relu"``,
            ``"matmul"``, ``"sum"`` or ``"mean"`` for the op whose ``forward`` and ``backward``
            the engine also has compiled (the same array expressions, so the same bits) and runs
            instead of them outside ``create_graph``; None for every other op.
    """

    def __init__(self, str name, forward, backward=None, *, bint broadcasts=False,
                 bint differentiable=True, bint same_dtype=True, bint view=False,
                 str display=None, bint private_ctx=False, differentiable_backward=None,
                 Py_ssize_t early=0, str direct=None):
        if differentiable and backward is None:
            raise ArgumentTypeError(f"op {name!r}: a differentiable op needs a backward")
        if early < 0:
            raise ArgumentError(f"op {name!r}: early must be an input index (0: none), got {early}")
        self.name = name
        self.forward = forward
        self.backward = backward
        self.broadcasts = broadcasts
        self.differentiable = differentiable
        self.same_dtype = same_dtype
        self.view = view
        self.private_ctx = private_ctx
        self.differentiable_backward = differentiable_backward
        self.early = early
        if direct is not None and direct not in _DIRECT:
            raise ArgumentError(f"op {name!r}: direct must be one of {sorted(_DIRECT)} or None, "
                                f"got {direct!r}")
        self.direct = _DIRECT[direct] if direct is not None else 0
        self.display = display or "".join(p.capitalize() for p in name.split("_"))

    def set_override(self, str device, forward=None, backward=None, bint paired=False):
        """Register a backend's fused forward and/or backward (``ferro.ops.fused`` does this
        from its table; ``device`` is ``"cpu"`` for NumPy arrays, ``"cuda"`` for CuPy ones).

        They take the generic signatures and return ``NotImplemented`` when their kernel does
        not take the arrays; the engine then runs the generic ``forward``/``backward``, which
        stay the reference. With ``paired`` the fused forward leaves state only the fused
        backward reads, so a node whose forward ran the kernel always runs the fused backward,
        and one whose forward did not, the generic one (Note [Fused overrides],
        docs/design.md). Overrides run only while ``set_overrides_enabled`` is on.
        """
        if device == "cpu":
            self.cpu_forward, self.cpu_backward, self.cpu_paired = forward, backward, paired
            # Note [Direct ops]: the kernel ferro.ops.fused's backward calls (its ``kernel``)
            self.cpu_direct_kernel = None
            if self.direct in (DIRECT_TANH, DIRECT_RELU) and not paired:
                self.cpu_direct_kernel = getattr(backward, "kernel", None)
        elif device == "cuda":
            self.gpu_forward, self.gpu_backward, self.gpu_paired = forward, backward, paired
        else:
            raise ArgumentError(
                f"set_override: op {self.name!r}: device must be 'cpu' or 'cuda', got {device!r}"
            )

    def __repr__(self):
        return f"<OpDef {self.name}>"


cdef class _Packed:
    """A value returned by a saved-tensor pack hook (so unpack knows what to unpack)."""

    def __cinit__(self, value):
        self.value = value


cdef bint _is_array(object a) noexcept:
    return type(a) is cnp.ndarray or type(a) in _xp_by_type


# Note [ctx contract] (docs/design.md): when nothing is recorded (no_grad, inference_mode, or no
# input requires grad) an op's forward gets a shared, stateless ctx instead of a Node: no
# allocation on that path. It has ``xp`` and ``needs_input_grad`` (one False per positional
# input), and drops ``save`` and attribute writes, so a forward must not read back what it
# stored on ctx (tests/ops/test_ctx_contract.py checks every registered op).
cdef class UnrecordedCtx:
    """The ``ctx`` of an op whose application is not recorded (shared; see Note [ctx contract])."""

    @cython.binding(False)  # a plain C method: no CyFunction call with a sliced tuple
    def save(self, *arrays):
        """Nothing is recorded: dropped."""

    def save_for_backward(self, *tensors):
        """Nothing is recorded: dropped."""

    def mark_non_differentiable(self, *outputs):
        """Nothing is recorded: every output is non-differentiable already."""

    def set_materialize_grads(self, bint value):
        """Nothing is recorded: dropped."""

    def __setattr__(self, name, value):
        # Attribute writes are what an op stores for backward, which will not run.
        pass

    def __repr__(self):
        return f"<UnrecordedCtx xp={self.xp.__name__} inputs={len(self.needs_input_grad)}>"


cdef list _unrecorded_np = []
cdef dict _unrecorded_other = {}
cdef list _no_edges = []


cdef tuple no_edges(Py_ssize_t n):
    """``(None,) * n``, cached: the edges of a node that links to nothing."""
    while len(_no_edges) <= n:
        _no_edges.append((None,) * len(_no_edges))
    return <tuple>_no_edges[n]


cdef UnrecordedCtx _new_unrecorded(object xp, Py_ssize_t n):
    cdef UnrecordedCtx c = UnrecordedCtx.__new__(UnrecordedCtx)
    c.xp = xp
    c.needs_input_grad = (False,) * n
    return c


cdef UnrecordedCtx unrecorded_ctx(object xp, Py_ssize_t n):
    """The shared ctx for ``n`` positional inputs on backend ``xp`` (one per pair, immutable)."""
    if xp is _np:
        while len(_unrecorded_np) <= n:
            _unrecorded_np.append(_new_unrecorded(_np, len(_unrecorded_np)))
        return <UnrecordedCtx>_unrecorded_np[n]
    c = _unrecorded_other.get((xp, n))
    if c is None:
        c = _unrecorded_other[(xp, n)] = _new_unrecorded(xp, n)
    return <UnrecordedCtx>c


# needs_input_grad is read in most ops' forward and backward: for up to 4 inputs its tuple is one
# of these, by bitmask of the inputs with an edge (a generator-built tuple was 0.17 us a read).
cdef list _NEEDS = [[tuple([bool(m >> i & 1) for i in range(n)]) for m in range(1 << n)]
                    for n in range(5)]


cdef tuple _needs(tuple nexts):
    if nexts is None:
        return ()
    cdef Py_ssize_t n = len(nexts), i, mask = 0
    if n > 4:
        return tuple([t is not None for t in nexts])
    for i in range(n):
        if nexts[i] is not None:
            mask |= 1 << i
    return <tuple>(<list>_NEEDS[n])[mask]


cdef class Node:
    """One recorded op application: the ``ctx`` its forward and backward receive.

    Ops store what backward needs with :meth:`save` (arrays) or as attributes (anything else).
    """

    @cython.binding(False)  # a plain C method: no CyFunction call with a sliced tuple
    def save(self, *arrays):
        # Note [Saved-hook order] (docs/design.md).
        """Keep ``arrays`` for backward (released after backward unless ``retain_graph``).

        Inside ``ferro.autograd.graph.saved_tensors_hooks(pack, unpack)`` each array is passed to
        ``pack`` (as a Tensor) now and the result to ``unpack`` when backward reads it.
        """
        node_save(self, arrays)

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
            out.append(data_of(<TensorBase>r) if isinstance(r, TensorBase) else r)
        return tuple(out)

    # The torch.autograd.Function face of ctx, for ferro.autograd.Function.

    def save_for_backward(self, *tensors):
        """Save tensors (or None) for backward; read them back with ``saved_tensors``."""
        self.save(*[None if t is None else data_of(<TensorBase>t) for t in tensors])

    @property
    def saved_tensors(self):
        """The tensors given to ``save_for_backward`` (wrapped anew, not requiring grad)."""
        return tuple([None if a is None else new_tensor(a) for a in self.saved])

    def mark_non_differentiable(self, *outputs):
        """Declare outputs (tensors returned by forward) that never require grad."""
        self._nondiff = tuple([data_of(<TensorBase>o) if isinstance(o, TensorBase) else o
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
    def fused_forward(self):
        """True if the forward ran its backend's fused override kernel (recorded after the
        kernel ran, never when the override fell back to the generic forward)."""
        return bool(self._fused & FUSED_FORWARD)

    @property
    def fused_backward(self):
        """True once a backward of this node ran its backend's fused override kernel."""
        return bool(self._fused & FUSED_BACKWARD)

    @property
    def needs_input_grad(self):
        """Per positional input of forward: does a gradient need to flow to it? (In one pass of
        a staged backward, Note [Early gradients]: does this pass compute it?)"""
        if self._stage:
            return tuple([t is not None and bool(self._stage >> i & 1)
                          for i, t in enumerate(self._next)])
        return _needs(self._next)

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

    # The create_graph walk (ferro.autograd._higher, Note [Double backward]) runs in Python and
    # reads the node through these; the first-order walk reads the fields directly.

    def _walk_state(self):
        """``(n_out, next, next_nr, pre_hooks, post_hooks, tensor_hooks, retained,
        no_materialize, promoted, output shapes, output dtypes)``."""
        shapes = (self._shape0,) if self._n_out <= 1 else self._out_shape
        dtypes = (self._dtype0,) if self._n_out <= 1 else self._out_dtype
        return (self._n_out, self._next, self._next_nr, self._pre_hooks, self._post_hooks,
                self._tensor_hooks, self._retained, self._no_materialize, self._promoted,
                shapes, dtypes)

    def _saved_sources(self):
        """``{index in saved: source}`` for the saved arrays that are an input's data (source
        ``k``: positional input k) or an output's (source ``-1 - k``: output k)."""
        out = {}
        if self._n_sv > 0:
            out[self._sj0] = self._sk0
        if self._n_sv > 1:
            out[self._sj1] = self._sk1
        if self._sv_more is not None:
            for j, _, _, k in self._sv_more:
                out[j] = k
        return out

    def _check_saved_versions(self):
        """Raise if a saved tensor was modified in place since it was saved."""
        if self._n_sv and not self._released:
            _check_versions(self)

    def _release_saved(self):
        """Free the saved arrays (the end of a backward without retain_graph)."""
        self._saved = None
        self._released = True

    @property
    def _is_released(self):
        return self._released

    def __repr__(self):
        return f"<{self.name()} at 0x{id(self):x}>"


cdef int node_save(Node node, tuple arrays) except -1:
    """``node.save(*arrays)``, for the engine's direct ops (Note [Direct ops])."""
    if _F.n_hook_contexts:
        hooks = saved_hooks()
        if hooks is not None:
            pack, unpack = hooks
            node._saved_raw = arrays
            # Only arrays are packed; a saved Python scalar (say, mul's constant) stays as is.
            node._saved = tuple([_Packed(pack(new_tensor(a))) if _is_array(a) else a
                                 for a in arrays])
            node._unpack = unpack
            return 0
    node._saved = arrays
    return 0


# ---------------------------------------------------------------------------------------------
# Version counters: a saved tensor modified in place is an error at backward, never a wrong
# gradient.
# ---------------------------------------------------------------------------------------------

cdef inline bint _holds(TensorBase t, object s) noexcept:
    # t's array is s, or t's Pending was computed into s for this op (Note [Lazy elementwise
    # chains]: an operand saved for backward is computed first)
    x = t._arr
    return x is s or (type(x) is Pending and (<Pending>x).result is s)


# Note [Version counters] (docs/design.md).
cdef int _record_saved_versions(Node node, tuple args, Py_ssize_t n, object outputs,
                                tuple call) except -1:
    """For each saved array that is a tensor's data, remember that tensor's version now, and
    which input or output it is (Note [Double backward]).

    Backward compares: a saved tensor modified in place since then is an error, not a silently
    wrong gradient. ``outputs`` is the output tensor or a tuple of them; ``call`` the arrays the
    forward received (cast copies of the inputs' data when the node promoted them).
    """
    cdef TensorBase t
    cdef VersionCounter vc
    cdef Py_ssize_t j, i, k
    cdef tuple saved = node._saved_raw if node._saved_raw is not None else <tuple>node._saved
    node._saved_raw = None  # packed saves must not keep the arrays alive
    for j in range(len(saved)):
        s = saved[j]
        if s is None:
            continue
        t = None
        for i in range(n):
            a = args[i]
            if isinstance(a, TensorBase) and (_holds(<TensorBase>a, s) or (
                    node._promoted and call[i + 1] is s)):
                t = <TensorBase>a
                k = i
                break
        if t is None:
            if isinstance(outputs, TensorBase):
                if _holds(<TensorBase>outputs, s):
                    t = <TensorBase>outputs
                    k = -1
            else:
                for i in range(len(outputs)):
                    if _holds(<TensorBase>outputs[i], s):
                        t = <TensorBase>outputs[i]
                        k = -1 - i
                        break
        if t is None:
            continue
        vc = version_counter(t)
        if node._n_sv == 0:
            node._sj0, node._svc0, node._sv0, node._sk0 = j, vc, vc.value, k
        elif node._n_sv == 1:
            node._sj1, node._svc1, node._sv1, node._sk1 = j, vc, vc.value, k
        else:
            if node._sv_more is None:
                node._sv_more = []
            node._sv_more.append((j, vc, vc.value, k))
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
                          else v, k) for (j, c, v, k) in node._sv_more]
    return 0


cdef void _share_version(TensorBase view, TensorBase src) noexcept:
    view._vc = version_counter(src)
    view._birth = view._vc.value


def _graph_tensor(object data, object target, Py_ssize_t nr):
    """A tensor whose gradient flows to ``target`` (a Node's output ``nr``, or a leaf, which is
    returned itself), holding ``data``: how a saved array re-enters a graph under create_graph
    (Note [Double backward]). ``target`` None: a constant."""
    if isinstance(target, TensorBase):
        return target
    cdef TensorBase t = new_tensor(data)
    if target is not None:
        t._grad_fn = <Node>target
        t._output_nr = nr
        t._requires_grad = True
    return t


def _leaf_hooks(TensorBase t):
    """``(tensor hooks, post-accumulate hooks)`` of a leaf (dicts or None)."""
    return t._hooks, t._post_acc_hooks


def bump_version(TensorBase t):
    """Record an in-place modification of ``t``'s data (shared with its views)."""
    cdef VersionCounter vc = version_counter(t)
    vc.value += 1


# The ufuncs of the direct in-place ops, by op code (ferro.ops.inplace passes the code).
cdef tuple _INPLACE_UFUNCS = ("add", "subtract", "multiply", "true_divide")
cdef tuple _NP_INPLACE = tuple(getattr(np, name) for name in _INPLACE_UFUNCS)


def inplace_direct(TensorBase t, object other, int op, object alpha=1):
    """``t = ufunc(t, alpha * other)`` straight into ``t``'s memory when nothing is recorded
    (Note [In-place ops] in ferro.ops.inplace): ufunc is add, subtract, multiply or true_divide
    for ``op`` 0-3. Returns ``t``, or None where the recorded path must run: grad mode records
    (``t`` or ``other`` requires grad), ``t``'s memory is read-only, or ``other`` is anything
    but a Python number (``t`` of a floating dtype) or a tensor of ``t``'s array type and dtype
    whose shape broadcasts to ``t``'s (the recorded path then promotes, moves or refuses it).
    Compiled because at 1K elements the checks cost more than NumPy's ufunc call."""
    return _inplace_direct(t, other, op, alpha)


def inplace_method(int op, slow):
    """The compiled ``Tensor.add_``, ``sub_`` or ``mul_`` (op 0-2; ``+=``, ``-=``, ``*=`` too):
    :func:`inplace_direct`, else ``slow``, the function of ``ferro.ops.inplace`` it stands for
    (which runs the recorded path, and gives its name and doc). No Python frame on the direct
    path: the hand-written update loop calls it once per parameter."""
    if op < 0 or op > 2:
        raise ArgumentError(f"inplace_method: invalid op code {op}; expected 0-2")
    if op == 2:
        def method(self, other):
            if isinstance(self, TensorBase):
                done = _inplace_direct(<TensorBase>self, other, op, 1)
                if done is not None:
                    return done
            return slow(self, other)
    else:
        def method(self, other, *, alpha=1):
            if isinstance(self, TensorBase):
                done = _inplace_direct(<TensorBase>self, other, op, alpha)
                if done is not None:
                    return done
            return slow(self, other, alpha=alpha)
    method.__name__ = method.__qualname__ = slow.__name__
    method.__doc__ = slow.__doc__
    method.__module__ = slow.__module__
    return method


# Note [Fused update]: the update loop most tutorials write, ``p -= lr * p.grad`` under no_grad,
# is two passes in NumPy and PyTorch: ``lr * g`` into a fresh array, then the subtraction. Here
# the engine makes ``lr * g`` (an array of SCALE_MIN elements or more times a Python number,
# nothing recorded) a Pending (Note [Lazy elementwise chains] in cpu_kernels.pyx), and add_/sub_
# with alpha 1 of such a Pending take its array and number and run ``t - lr * g`` as one pass
# (binary() with alpha: the same two IEEE operations per element, so the same bits), on one
# core below BIG_MIN. Every other pending chain is computed first (one may read t); the Pending
# itself stays pending and registered, so the product is still there for anyone who asks. Not
# where g is t's own array (``p -= lr * p``: the product must read p before it changes).
cdef object _inplace_direct(TensorBase t, object other, int op, object alpha):
    cdef object pair = None  # Note [Fused update]: other holds exactly array * number
    if (op <= 1 and type(alpha) is int and <object>alpha == 1 and isinstance(other, TensorBase)
            and type((<TensorBase>other)._arr) is Pending):
        pair = cpu_kernels.scaled(<Pending>(<TensorBase>other)._arr)
    if pair is not None:
        flush_except(<TensorBase>other)  # every other chain runs before t is written
    cdef object data = t._arr if pair is not None else data_of(t)
    if pair is not None and data is pair[0]:
        pair = None  # p -= lr * p: the product reads p before it changes
    cdef object o
    cdef TensorBase ot
    cdef bint nd = type(data) is cnp.ndarray
    cdef Py_ssize_t i, k, n_o, n_d
    cdef int *depth
    if op < 0 or op > 3:
        raise ArgumentError(f"inplace_direct: invalid op code {op}; expected 0-3")
    if t._requires_grad and grad_mode() == MODE_GRAD:
        return None
    if nd and not cnp.PyArray_ISWRITEABLE(<cnp.ndarray>data):
        return None  # the recorded path raises ReadOnlyError
    if isinstance(other, TensorBase):
        ot = <TensorBase>other
        if ot._requires_grad and grad_mode() == MODE_GRAD:
            return None
        o = data_of(ot) if pair is None else pair[0]
        if type(o) is not type(data):
            return None
        if nd:
            if not cnp.PyArray_EquivArrTypes(<cnp.ndarray>o, <cnp.ndarray>data):
                return None
            n_o = cnp.PyArray_NDIM(<cnp.ndarray>o)
            n_d = cnp.PyArray_NDIM(<cnp.ndarray>data)
            if n_o > n_d:
                return None
            for i in range(1, n_o + 1):
                k = cnp.PyArray_DIMS(<cnp.ndarray>o)[n_o - i]
                if k != 1 and k != cnp.PyArray_DIMS(<cnp.ndarray>data)[n_d - i]:
                    return None
        elif o.dtype != data.dtype or not _broadcasts_to(o.shape, data.shape):
            return None
    elif type(other) is float or type(other) is int:
        if not (cnp.PyArray_ISFLOAT(<cnp.ndarray>data) if nd else data.dtype.kind == "f"):
            return None
        o = other
    else:
        return None
    if pair is not None:
        alpha = pair[1]  # t -= number * array, the product never made
    cdef bint unit = type(alpha) is int and <object>alpha == 1
    if not unit and type(alpha) is not int and type(alpha) is not float:
        return None
    if not unit and (type(o) is float or type(o) is int):
        o = o * alpha  # a number: scaled here, as before
        unit = True
    # Note [Two-core elementwise ops]: t -= alpha * other in one pass, on one core below BIG_MIN
    # (only the fused update runs it there)
    if nd and (pair is not None or cpu_kernels.big(data, o)) and (
        cpu_kernels.binary(op, data, o, data, 1.0 if unit else <double>alpha, 0, False,
                           cnp.PyArray_SIZE(<cnp.ndarray>data) < cpu_kernels.BIG_MIN)
        is not NotImplemented
    ):
        pass
    else:
        depth = op_depth()  # Note [Floating-point warnings]
        depth[0] += 1
        try:
            if not unit:
                o = o * alpha
            if nd:
                (<object>_NP_INPLACE[op])(data, o, data)
            else:
                getattr(_xp_of(data), _INPLACE_UFUNCS[op])(data, o, out=data)
        finally:
            depth[0] -= 1
    cdef VersionCounter vc = version_counter(t)
    vc.value += 1
    return t


cdef bint _broadcasts_to(tuple small, tuple big):
    if len(small) > len(big):
        return False
    for n, m in zip(reversed(small), reversed(big)):
        if n != m and n != 1:
            return False
    return True


# ---------------------------------------------------------------------------------------------
# Hooks storage (the contract and its tests belong to ferro.autograd; the engine runs them).
# ---------------------------------------------------------------------------------------------

cdef Py_ssize_t _next_handle_id = 0


cdef class RemovableHandle:
    """Returned by every ``register_*``; ``remove()`` unregisters (safe during backward)."""

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
        raise ArgumentTypeError(
            f"register hook: the hook must be callable, got {type(fn).__name__}"
        )
    h = RemovableHandle(hooks)
    hooks[h.id] = fn
    return h


def register_tensor_hook(TensorBase t, fn):
    """``t.register_hook(fn)``: ``fn(grad) -> Tensor | None`` runs once on the summed gradient."""
    if not t._requires_grad:
        raise GraphError(
            "register_hook: cannot register a hook on a tensor that does not require grad"
        )
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
        raise GraphError(
            "retain_grad: cannot retain the gradient of a tensor that does not require grad"
        )
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


cdef int _check_versions(Node node) except -1:
    if node._svc0.value != node._sv0:
        _version_error(node, node._sj0, node._sv0, node._svc0.value)
    if node._n_sv > 1 and node._svc1.value != node._sv1:
        _version_error(node, node._sj1, node._sv1, node._svc1.value)
    if node._sv_more is not None:
        for j, vc, v, _ in node._sv_more:
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
