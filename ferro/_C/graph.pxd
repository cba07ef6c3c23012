# Contract of ferro._C.graph: ops, nodes (an op's ctx), version counters, hook storage, and the
# array helpers every core module shares.
cimport numpy as cnp

from ferro._C.cpu_kernels cimport Pending
from ferro._C.tensor cimport TensorBase, VersionCounter


cdef class OpDef:
    cdef readonly str name
    cdef readonly object forward
    cdef readonly object backward
    cdef readonly bint broadcasts
    cdef readonly bint differentiable
    cdef readonly bint same_dtype
    cdef readonly bint view
    cdef readonly str display
    # Fused overrides per backend (ferro.ops.fused binds them; None: the generic forward and
    # backward). Each returns NotImplemented when its kernel does not take the arrays. A paired
    # forward leaves state only its own backward reads: Note [Fused overrides].
    cdef readonly object cpu_forward
    cdef readonly object cpu_backward
    cdef readonly bint cpu_paired
    cdef readonly object gpu_forward
    cdef readonly object gpu_backward
    cdef readonly bint gpu_paired
    cdef readonly bint private_ctx   # forward reads back what it stores on ctx (Function)
    # Note [Double backward]: a backward written with ferro ops (Tensors in and out), used under
    # create_graph when ``backward`` cannot run on the differentiable xp namespace; or None.
    cdef readonly object differentiable_backward
    # Note [Early gradients]: the inputs from this index on get their gradients in a first pass
    # of backward when a leaf's hooks can use them early (0: the op does not stage).
    cdef readonly Py_ssize_t early
    # Note [Direct ops]: DIRECT_ADD... when the engine runs this op's forward and first-order
    # backward itself (no Python frame); 0 for every other op.
    cdef readonly int direct
    # A direct one-input op's CPU backward kernel (``cpu_kernels.tanh_bwd``...): the one its
    # fused backward override calls, which the engine then calls itself; None otherwise.
    cdef readonly object cpu_direct_kernel


cdef enum:
    FUSED_FORWARD = 1
    FUSED_BACKWARD = 2


cdef enum:
    DIRECT_ADD = 1
    DIRECT_SUB = 2
    DIRECT_MUL = 3
    DIRECT_TANH = 4
    DIRECT_RELU = 5
    DIRECT_MATMUL = 6  # of two 2-D NumPy arrays (any other operands: the class's code)
    DIRECT_SUM = 7     # of all elements (``x.sum()``, ``x.mean()``: no dim, no keepdim)
    DIRECT_MEAN = 8


cdef class _Packed:
    cdef object value


cdef class Node:
    cdef readonly OpDef op
    cdef readonly object xp
    cdef object _saved
    # Versions of the tensors whose data the node saved (index in _saved, counter, version):
    # two inline slots (no allocation for the common case), more in _sv_more.
    cdef int _n_sv
    cdef Py_ssize_t _sj0, _sj1, _sv0, _sv1
    cdef VersionCounter _svc0, _svc1
    cdef list _sv_more             # (index in _saved, counter, version, source) for the rest
    # Where each recorded saved array came from (Note [Double backward]): input position k as k,
    # output k as -1 - k.
    cdef Py_ssize_t _sk0, _sk1
    cdef bint _released
    cdef unsigned char _fused  # FUSED_FORWARD | FUSED_BACKWARD: which override kernels ran
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
    cdef bint _promoted        # forward cast its inputs to one dtype (Note [Type promotion])
    cdef object _site          # anomaly mode: (filename, lineno, function) of the creating code
    cdef Py_ssize_t _prof_id   # profiler: id of the forward event that created this node (-1)
    cdef Py_ssize_t _stage     # Note [Early gradients]: inputs (bitmask) a pass computes; 0: all
    cdef dict __dict__
    cdef object __weakref__


cdef class UnrecordedCtx:
    cdef readonly object xp
    cdef readonly tuple needs_input_grad


cdef class RemovableHandle:
    cdef object _dict_ref
    cdef readonly Py_ssize_t id


cdef UnrecordedCtx unrecorded_ctx(object xp, Py_ssize_t n)
cdef tuple no_edges(Py_ssize_t n)
cdef int node_save(Node node, tuple arrays) except -1
cdef object _xp_of(object arr)
cdef str _device_name(object arr)
cdef object _scalar_to_array(object x)
cdef bint _is_array(object a) noexcept
cdef int _record_saved_versions(Node node, tuple args, Py_ssize_t n, object outputs,
                                tuple call) except -1
cdef int _retarget_version(Node node, object old_data, VersionCounter vc) except -1
cdef void _share_version(TensorBase view, TensorBase src) noexcept
cdef int _check_versions(Node node) except -1


cdef inline object _as_array(object x):
    # NumPy turns 0-d results into scalars; the engine only ever holds arrays.
    if type(x) is cnp.ndarray or x is None or type(x) is Pending:
        return x
    return _scalar_to_array(x)


cdef inline bint _is_float_array(object arr) except -1:
    if type(arr) is cnp.ndarray:
        return cnp.PyArray_ISFLOAT(<cnp.ndarray>arr)
    return arr.dtype.kind == "f"


cdef inline bint _same_descr(cnp.dtype d, cnp.dtype e) noexcept:
    # One dtype, seen from the descriptors: the same object, or two of one builtin numeric
    # type (bool to complex: the type number and byte order say all) in one byte order. Not
    # every float32 array holds NumPy's singleton (``dtype.newbyteorder("=")`` makes a copy),
    # and ``a.dtype == b.dtype`` costs two attribute reads and a rich compare. False: unknown.
    return d is e or (d.type_num == e.type_num and d.type_num <= cnp.NPY_CLONGDOUBLE
                      and d.byteorder == e.byteorder)


cdef inline bint _same_dtype(object a, object b) except -1:
    if type(a) is cnp.ndarray and type(b) is cnp.ndarray:
        if _same_descr(<cnp.dtype>cnp.PyArray_DESCR(<cnp.ndarray>a),
                       <cnp.dtype>cnp.PyArray_DESCR(<cnp.ndarray>b)):
            return True
    return a.dtype == b.dtype


cdef inline bint _shape_is(object arr, tuple shape) except -1:
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


cdef inline tuple _out_shape(Node node, Py_ssize_t nr):
    return node._shape0 if nr == 0 else <tuple>node._out_shape[nr]


cdef inline object _out_dtype(Node node, Py_ssize_t nr):
    return node._dtype0 if nr == 0 else node._out_dtype[nr]
