# cython: language_level=3
"""nogil CPU loops: the engine's hot spots (in-place accumulation, sum-to-shape), the fused op
kernels and the optimizer updates.

The fused op kernels are the CPU half of ferro's override mechanism (``ferro.ops.fused``): the
names in :data:`FUSED_KERNELS` mean the same kernel, with the same arguments, as in
``ferro.cuda.ops``, and their per-element math is the formulas in
``ferro/cuda/kernels/formulas.cuh``, which the CUDA kernels compile too. ``accepts`` and
``accepts_grad`` are the predicates the adapter asks before it calls a kernel: they read array
flags only, raise nothing and format nothing.

The loops work on raw pointers read through NumPy's C API: a typed memoryview costs about a
microsecond to acquire, which is more than the whole add on a 1-element gradient. Every function
is importable, so each one checks its arguments itself before it touches memory
(docs/design.md, "Kernel accept checks"); an error message is built only when it refuses.
"""

cimport numpy as cnp
from libc.float cimport FLT_MAX
from libc.math cimport fabs, isfinite
from libc.stdint cimport int64_t

from ferro._C.typedefs cimport floating_t

import os

import numpy as np

from ferro.errors import (
    ArgumentError,
    ArgumentTypeError,
    DtypeError,
    ReadOnlyError,
    ShapeError,
)

cnp.import_array()

cdef int MAX_DIMS = 64


# ---------------------------------------------------------------------------------------------
# Accept checks. A loop reads and writes raw pointers by flat index, so every array it touches
# must be an exact ndarray of the float type it was compiled for, in native byte order (a
# big-endian array read as little-endian gives garbage, not an error), aligned, of the layout the
# loop assumes (C-contiguous, or any strides for the strided loops), of matching shape, and
# writeable when the loop writes it (a read-only memory map faults; np.frombuffer's bytes are
# silently changed).
# ---------------------------------------------------------------------------------------------

cdef inline bint _is_float(cnp.ndarray a) noexcept:
    cdef int t = cnp.PyArray_TYPE(a)
    return t == cnp.NPY_FLOAT32 or t == cnp.NPY_FLOAT64


cpdef bint supports(object arr):
    """True if ``arr`` is an exact float32/float64 ndarray in native byte order and aligned, with
    any strides: what ``sum_to_shape`` reads."""
    if type(arr) is not cnp.ndarray:
        return False
    cdef cnp.ndarray a = <cnp.ndarray>arr
    return _is_float(a) and cnp.PyArray_ISNOTSWAPPED(a) and cnp.PyArray_ISALIGNED(a)


cpdef bint accepts(tuple arrays):
    """True if every array is an exact ndarray, C-contiguous, aligned, in native byte order,
    float32/float64, all of one dtype and one shape: what the flat-index loops can read."""
    cdef cnp.ndarray a0, a
    if not arrays or not supports(arrays[0]):
        return False
    a0 = <cnp.ndarray>arrays[0]
    if not cnp.PyArray_ISCARRAY_RO(a0):
        return False
    for o in arrays[1:]:
        if type(o) is not cnp.ndarray:
            return False
        a = <cnp.ndarray>o
        if (cnp.PyArray_TYPE(a) != cnp.PyArray_TYPE(a0) or not cnp.PyArray_ISCARRAY_RO(a)
                or not cnp.PyArray_SAMESHAPE(a, a0)):
            return False
    return True


cdef Py_ssize_t _grad_stride(object gy, object like) noexcept:
    # How a backward kernel reads the upstream gradient ``gy`` next to the array ``like``: 1 for
    # C-contiguous, 0 for one value broadcast (every dimension longer than 1 has stride 0: what
    # .sum() and .mean() hand back), -1 when it cannot (another type, dtype or shape, non-native
    # byte order, misaligned, or any other strides).
    if type(gy) is not cnp.ndarray or type(like) is not cnp.ndarray:
        return -1
    cdef cnp.ndarray g = <cnp.ndarray>gy, v = <cnp.ndarray>like
    cdef int d
    if (cnp.PyArray_TYPE(g) != cnp.PyArray_TYPE(v) or not cnp.PyArray_SAMESHAPE(g, v)
            or not cnp.PyArray_ISNOTSWAPPED(g) or not cnp.PyArray_ISALIGNED(g)):
        return -1
    if cnp.PyArray_ISCARRAY_RO(g):
        return 1
    for d in range(cnp.PyArray_NDIM(g)):
        if cnp.PyArray_DIMS(g)[d] > 1 and cnp.PyArray_STRIDES(g)[d] != 0:
            return -1
    return 0


cpdef bint accepts_grad(object gy, tuple arrays):
    """True if a backward kernel takes upstream gradient ``gy`` with the saved ``arrays``:
    ``accepts(arrays)``, and ``gy`` of their dtype and shape, C-contiguous or one value
    broadcast with stride 0 (the gradient of ``.sum()`` or ``.mean()``)."""
    return accepts(arrays) and _grad_stride(gy, arrays[0]) >= 0


cdef int _accept(str who, tuple names, tuple arrays, unsigned int writes) except -1:
    # The check every flat-index kernel runs first: ``accepts(arrays)``, and each array
    # whose bit is set in ``writes`` writeable. Refusing raises the error that says why.
    cdef Py_ssize_t i
    if not accepts(arrays):
        raise _refusal(who, names, arrays, writes)
    for i in range(len(arrays)):
        if (writes >> i) & 1 and not cnp.PyArray_ISWRITEABLE(<cnp.ndarray>arrays[i]):
            raise _refusal(who, names, arrays, writes)
    return 0


cdef object _refusal(str who, tuple names, tuple arrays, unsigned int writes):
    # Only runs when a check refused: finds the first reason, in the order a user fixes them.
    for name, a in zip(names, arrays):
        if type(a) is not np.ndarray:
            return ArgumentTypeError(
                f"{who}: {name} must be a numpy.ndarray, got {type(a).__module__}."
                f"{type(a).__qualname__}"
            )
    for i, (name, a) in enumerate(zip(names, arrays)):
        if (writes >> i) & 1 and not a.flags.writeable:
            return ReadOnlyError(
                f"{who}: {name} ({a.dtype}, shape {a.shape}) is read-only, and this kernel "
                "writes it in place; copy it into writeable memory first"
            )
    a0, name0 = arrays[0], names[0]
    for name, a in zip(names, arrays):
        if a.dtype.type is not np.float32 and a.dtype.type is not np.float64:
            return DtypeError(f"{who}: {name} must be float32 or float64, got {a.dtype}")
        if not a.dtype.isnative:
            return DtypeError(
                f"{who}: {name} has non-native byte order (dtype {a.dtype.str}); expected "
                f"{a.dtype.newbyteorder('=')} in native order"
            )
        if a.dtype != a0.dtype:
            return DtypeError(
                f"{who}: {name} has dtype {a.dtype} but {name0} has {a0.dtype}; expected one dtype"
            )
        if a.shape != a0.shape:
            return ShapeError(
                f"{who}: {name} has shape {a.shape} but {name0} has {a0.shape}; expected one shape"
            )
        if not a.flags.aligned:
            return ArgumentError(f"{who}: {name} is not aligned to its {a.dtype} elements")
        if not a.flags.c_contiguous:
            return ArgumentError(
                f"{who}: {name} must be C-contiguous, got strides {a.strides} for shape {a.shape}"
            )
    return ArgumentError(f"{who}: expected at least one array")


cdef inline cnp.ndarray _empty_as(cnp.ndarray a):
    # A fresh C-contiguous, native-order output of a's shape and dtype (never a subclass).
    return <cnp.ndarray>cnp.PyArray_EMPTY(cnp.PyArray_NDIM(a), cnp.PyArray_DIMS(a),
                                          cnp.PyArray_TYPE(a), 0)


# The per-node kernels (gradient accumulation, elementwise backward) keep the GIL below this
# many elements, as NumPy's own loops do (NPY_BEGIN_THREADS_THRESHOLDED): for a 1-element array,
# dropping and taking it back cost more than the loop (about 300 instructions per op of a
# 1-element chain forward+backward, callgrind), and no other thread gains anything in that time.
cdef Py_ssize_t NOGIL_MIN = 500


cdef void _add_contig(floating_t* dst, const floating_t* src, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        dst[i] += src[i]


cpdef int add_inplace(object dst, object src) except -1:
    """``dst += src`` in place, for two ndarrays of one float dtype and shape; ``dst`` must be
    writeable (the caller, the engine, has also checked that it owns it: Note [Grad ownership]).

    The nogil loop runs when both pass ``accepts`` and do not overlap other than exactly;
    anything else (strided, misaligned, non-native byte order, overlapping) goes through NumPy's
    add into ``dst``, which handles all of these.
    """
    if (type(dst) is not cnp.ndarray or type(src) is not cnp.ndarray
            or not cnp.PyArray_ISWRITEABLE(<cnp.ndarray>dst)
            or not _is_float(<cnp.ndarray>dst)
            or cnp.PyArray_TYPE(<cnp.ndarray>src) != cnp.PyArray_TYPE(<cnp.ndarray>dst)
            or not cnp.PyArray_SAMESHAPE(<cnp.ndarray>src, <cnp.ndarray>dst)):
        raise _refusal("add_inplace", ("dst", "src"), (dst, src), 0b1)
    cdef cnp.ndarray d = <cnp.ndarray>dst, s = <cnp.ndarray>src
    cdef Py_ssize_t n = cnp.PyArray_SIZE(d)
    cdef Py_ssize_t nbytes = n * cnp.PyArray_ITEMSIZE(d)
    cdef char *dp = <char*>cnp.PyArray_DATA(d)
    cdef char *sp = <char*>cnp.PyArray_DATA(s)
    if (n >= BIG_MIN or not cnp.PyArray_ISCARRAY(d) or not cnp.PyArray_ISCARRAY_RO(s)
            or (sp != dp and sp < dp + nbytes and dp < sp + nbytes)):
        if binary(0, d, s, d, 1.0) is NotImplemented:  # on both cores where it can
            np.add(d, s, out=d)
    elif n <= NOGIL_MIN:
        if cnp.PyArray_TYPE(d) == cnp.NPY_FLOAT32:
            _add_contig(<float*>dp, <const float*>sp, n)
        else:
            _add_contig(<double*>dp, <const double*>sp, n)
    elif cnp.PyArray_TYPE(d) == cnp.NPY_FLOAT32:
        with nogil:
            _add_contig(<float*>dp, <const float*>sp, n)
    else:
        with nogil:
            _add_contig(<double*>dp, <const double*>sp, n)
    return 0


cdef void _sum_to(const floating_t* src, floating_t* dst, int ndim, const Py_ssize_t* shape,
                  const Py_ssize_t* sstride, const Py_ssize_t* dstride) noexcept nogil:
    # Odometer over every dimension but the last; the last is a tight inner loop that either
    # reduces (dst stride 0: accumulate in double) or adds elementwise.
    cdef Py_ssize_t idx[64]
    cdef Py_ssize_t so = 0, do = 0, i, inner = shape[ndim - 1]
    cdef Py_ssize_t ss = sstride[ndim - 1], ds = dstride[ndim - 1]
    cdef int d
    cdef double acc
    for d in range(ndim):
        idx[d] = 0
    while True:
        if ds == 0:
            acc = 0.0
            for i in range(inner):
                acc += src[so + i * ss]
            dst[do] += <floating_t>acc
        else:
            for i in range(inner):
                dst[do + i * ds] += src[so + i * ss]
        d = ndim - 2
        while d >= 0:
            idx[d] += 1
            so += sstride[d]
            do += dstride[d]
            if idx[d] < shape[d]:
                break
            so -= sstride[d] * shape[d]
            do -= dstride[d] * shape[d]
            idx[d] = 0
            d -= 1
        if d < 0:
            return


cpdef object sum_to_shape(object src, tuple shape):
    """Sum a broadcast float array back to ``shape`` (which must broadcast to ``src.shape``).

    ``src`` must pass ``supports`` (any strides: broadcast views have zero strides). Returns a new
    C-contiguous array of ``shape``; ``src`` is only read.
    """
    if not supports(src):
        raise _refusal("sum_to_shape", ("src",), (src,), 0)
    cdef cnp.ndarray s = <cnp.ndarray>src
    cdef int ndim = cnp.PyArray_NDIM(s)
    cdef int tnd = len(shape)
    cdef int lead = ndim - tnd
    cdef int d
    cdef Py_ssize_t itemsize = cnp.PyArray_ITEMSIZE(s)
    cdef Py_ssize_t sshape[64]
    cdef Py_ssize_t sstride[64]
    cdef Py_ssize_t dstride[64]
    cdef Py_ssize_t dsize, acc_stride = 1
    cdef cnp.ndarray dst
    if lead < 0 or ndim > MAX_DIMS:
        raise ShapeError(f"sum_to_shape: cannot reduce shape {src.shape} to {shape}")
    # Validate everything before allocating: the loop trusts these strides and sizes.
    for d in range(ndim - 1, -1, -1):
        sshape[d] = cnp.PyArray_DIMS(s)[d]
        # A size-1 dimension is indexed at 0 only; its stride (which alignment does not
        # constrain) is never used.
        sstride[d] = cnp.PyArray_STRIDES(s)[d] // itemsize if sshape[d] > 1 else 0
        if sshape[d] > 1 and cnp.PyArray_STRIDES(s)[d] % itemsize != 0:
            # Alignment implies this where a type's alignment is its size (x86-64, arm64).
            raise ArgumentError(
                f"sum_to_shape: src strides {src.strides} are not multiples of its {itemsize}-byte "
                "elements"
            )
        if d < lead:
            dstride[d] = 0
            continue
        try:
            dsize = shape[d - lead]
        except TypeError:
            raise ArgumentTypeError(f"sum_to_shape: shape {shape} must hold ints") from None
        except OverflowError:
            dsize = -1  # refused just below, as any size that does not broadcast
        if dsize == sshape[d]:
            dstride[d] = acc_stride
        elif dsize == 1:
            dstride[d] = 0
        else:
            raise ShapeError(f"sum_to_shape: cannot reduce shape {src.shape} to {shape}")
        acc_stride *= dsize
    dst = np.zeros(shape, dtype=s.dtype)
    if cnp.PyArray_SIZE(s) == 0 or cnp.PyArray_SIZE(dst) == 0:
        return dst
    if ndim == 0:
        dst[...] = s
        return dst
    if cnp.PyArray_SIZE(dst) == 1 and cnp.PyArray_ISCARRAY_RO(s):
        _sum_into(s, dst)  # to one value: sum_all's blocks, not one chain of dependent adds
        return dst
    if cnp.PyArray_TYPE(s) == cnp.NPY_FLOAT32:
        with nogil:
            _sum_to(<const float*>cnp.PyArray_DATA(s), <float*>cnp.PyArray_DATA(dst),
                    ndim, sshape, sstride, dstride)
    else:
        with nogil:
            _sum_to(<const double*>cnp.PyArray_DATA(s), <double*>cnp.PyArray_DATA(dst),
                    ndim, sshape, sstride, dstride)
    return dst


# ---------------------------------------------------------------------------------------------
# Fused op kernels (loops in kernels.h over the formulas in formulas.cuh). Each checks its arrays
# and writes only the fresh output it allocates. Backward kernels take the upstream gradient
# first, C-contiguous or one broadcast value (``accepts_grad``), then the saved arrays, then
# scalar parameters; the adapter (ferro/ops/fused.py) asks ``accepts``/``accepts_grad`` first and
# runs the generic op where they say no.
# ---------------------------------------------------------------------------------------------

# The fused kernels this backend implements (ferro.cuda.ops implements the same names).
FUSED_KERNELS = frozenset({
    "tanh_bwd", "sigmoid_bwd", "relu_bwd", "leaky_relu_bwd", "gelu_bwd", "silu_bwd",
    "gelu_fwd", "softmax_bwd", "cross_entropy_fwd", "cross_entropy_bwd",
    "sgd_update", "adam_update", "rmsprop_update", "adagrad_update",
})

ctypedef void (*grad_f32)(const float*, Py_ssize_t, const float*, const float*, float*,
                          Py_ssize_t, double) noexcept nogil
ctypedef void (*grad_f64)(const double*, Py_ssize_t, const double*, const double*, double*,
                          Py_ssize_t, double) noexcept nogil


cdef extern from "kernels.h" nogil:
    # the elementwise backward loops, all of one signature (FERRO_GRAD_LOOP)
    grad_f32 ferro_tanh_bwd_f32, ferro_sigmoid_bwd_f32, ferro_relu_bwd_f32
    grad_f32 ferro_leaky_relu_bwd_f32, ferro_gelu_bwd_f32, ferro_silu_bwd_f32
    grad_f32 ferro_gelu_tanh_bwd_f32
    grad_f64 ferro_tanh_bwd_f64, ferro_sigmoid_bwd_f64, ferro_relu_bwd_f64
    grad_f64 ferro_leaky_relu_bwd_f64, ferro_gelu_bwd_f64, ferro_silu_bwd_f64
    grad_f64 ferro_gelu_tanh_bwd_f64
    void ferro_gelu_fwd_f32(const float*, float*, Py_ssize_t)
    void ferro_gelu_fwd_f64(const double*, double*, Py_ssize_t)
    void ferro_gelu_tanh_fwd_f32(const float*, float*, Py_ssize_t)
    void ferro_gelu_tanh_fwd_f64(const double*, double*, Py_ssize_t)
    void ferro_softmax_bwd_f32(const float*, Py_ssize_t, const float*, float*, Py_ssize_t,
                               Py_ssize_t)
    void ferro_softmax_bwd_f64(const double*, Py_ssize_t, const double*, double*, Py_ssize_t,
                               Py_ssize_t)
    void ferro_sgd_f32(float*, const float*, float*, Py_ssize_t, double, double, double, double,
                       int, int)
    void ferro_sgd_f64(double*, const double*, double*, Py_ssize_t, double, double, double,
                       double, int, int)
    void ferro_adam_f32(float*, const float*, float*, float*, Py_ssize_t, double, double, double,
                        double, double, int, double, double)
    void ferro_adam_f64(double*, const double*, double*, double*, Py_ssize_t, double, double,
                        double, double, double, int, double, double)
    void ferro_rmsprop_f32(float*, const float*, float*, float*, float*, Py_ssize_t, double,
                           double, double, double, double, int)
    void ferro_rmsprop_f64(double*, const double*, double*, double*, double*, Py_ssize_t,
                           double, double, double, double, double, int)
    void ferro_adagrad_f32(float*, const float*, float*, Py_ssize_t, double, double, double)
    void ferro_adagrad_f64(double*, const double*, double*, Py_ssize_t, double, double, double)
    void ferro_ce_fwd_f32(const float*, const int64_t*, float*, float*, Py_ssize_t,
                          Py_ssize_t, long long)
    void ferro_ce_fwd_f64(const double*, const int64_t*, double*, double*, Py_ssize_t,
                          Py_ssize_t, long long)
    void ferro_ce_bwd_f32(const float*, const int64_t*, const float*, const float*,
                          Py_ssize_t, float, float*, Py_ssize_t, Py_ssize_t, long long)
    void ferro_ce_bwd_f64(const double*, const int64_t*, const double*, const double*,
                          Py_ssize_t, double, double*, Py_ssize_t, Py_ssize_t, long long)
    int ferro_all_finite_f32(const float*, Py_ssize_t)
    int ferro_all_finite_f64(const double*, Py_ssize_t)
    void ferro_binary_f32(int, const float*, const float*, Py_ssize_t, float*, Py_ssize_t,
                          double, int, int)
    void ferro_binary_f64(int, const double*, const double*, Py_ssize_t, double*, Py_ssize_t,
                          double, int, int)
    enum: SUM_BLOCK "FERRO_SUM_BLOCK"
    void ferro_sum_all_f32(const float*, Py_ssize_t, double*, float*)
    void ferro_sum_all_f64(const double*, Py_ssize_t, double*, double*)
    void ferro_row_sums_f32(const float*, Py_ssize_t, Py_ssize_t, double, float*)
    void ferro_row_sums_f64(const double*, Py_ssize_t, Py_ssize_t, double, double*)
    enum: EVAL_DEPTH "FERRO_EVAL_DEPTH"
    int FERRO_MAX_THREADS()
    void ferro_fused_f32(const signed char*, int, const float* const*, const Py_ssize_t*,
                         Py_ssize_t, float*)
    void ferro_fused_f64(const signed char*, int, const double* const*, const Py_ssize_t*,
                         Py_ssize_t, double*)
    void ferro_fused_sum_f32(const signed char*, int, const float* const*, const Py_ssize_t*,
                             Py_ssize_t, float*, int, double*, float*)
    void ferro_fused_sum_f64(const signed char*, int, const double* const*, const Py_ssize_t*,
                             Py_ssize_t, double*, int, double*, double*)
    void ferro_expand_f32(const float*, float*, int, const Py_ssize_t*, const Py_ssize_t*, int)
    void ferro_expand_f64(const double*, double*, int, const Py_ssize_t*, const Py_ssize_t*, int)


cdef object _grad_refusal(str who, tuple names, object gy, tuple saved):
    # Only runs when a backward kernel refused: the saved arrays' reason first, then gy's.
    if not accepts(saved):
        return _refusal(who, names[1:], saved, 0)
    if type(gy) is not np.ndarray:
        return ArgumentTypeError(
            f"{who}: gy must be a numpy.ndarray, got {type(gy).__module__}.{type(gy).__qualname__}"
        )
    v = saved[0]
    if not gy.dtype.isnative:
        return DtypeError(f"{who}: gy has non-native byte order (dtype {gy.dtype.str})")
    if gy.dtype != v.dtype:
        return DtypeError(f"{who}: gy has dtype {gy.dtype} but {names[1]} has {v.dtype}")
    if gy.shape != v.shape:
        return ShapeError(f"{who}: gy has shape {gy.shape} but {names[1]} has {v.shape}")
    if not gy.flags.aligned:
        return ArgumentError(f"{who}: gy is not aligned to its {gy.dtype} elements")
    return ArgumentError(
        f"{who}: gy must be C-contiguous or one value broadcast with stride 0, got strides "
        f"{gy.strides} for shape {gy.shape}"
    )


cdef object _grad_map(str who, tuple names, grad_f32 f32, grad_f64 f64, object gy,
                      tuple saved, double a):
    # The elementwise backward driver: gx = formula(gy, saved..., a) in one pass.
    cdef Py_ssize_t gs = _grad_stride(gy, saved[0]) if accepts(saved) else -1
    if gs < 0:
        raise _grad_refusal(who, names, gy, saved)
    cdef cnp.ndarray v = <cnp.ndarray>saved[0]
    cdef cnp.ndarray out = _empty_as(v)
    cdef Py_ssize_t n = cnp.PyArray_SIZE(v)
    cdef const void *gp = cnp.PyArray_DATA(<cnp.ndarray>gy)
    cdef const void *vp = cnp.PyArray_DATA(v)
    cdef const void *wp = cnp.PyArray_DATA(<cnp.ndarray>saved[1]) if len(saved) > 1 else NULL
    if n == 0:
        return out
    cdef bint f = cnp.PyArray_TYPE(v) == cnp.NPY_FLOAT32
    if n <= NOGIL_MIN:
        if f:
            f32(<const float*>gp, gs, <const float*>vp, <const float*>wp,
                <float*>cnp.PyArray_DATA(out), n, a)
        else:
            f64(<const double*>gp, gs, <const double*>vp, <const double*>wp,
                <double*>cnp.PyArray_DATA(out), n, a)
    elif f:
        with nogil:
            f32(<const float*>gp, gs, <const float*>vp, <const float*>wp,
                <float*>cnp.PyArray_DATA(out), n, a)
    else:
        with nogil:
            f64(<const double*>gp, gs, <const double*>vp, <const double*>wp,
                <double*>cnp.PyArray_DATA(out), n, a)
    return out


def tanh_bwd(object gy, object y):
    """tanh backward from the output: ``gy * (1 - y**2)``."""
    return _grad_map("tanh_bwd", ("gy", "y"), ferro_tanh_bwd_f32, ferro_tanh_bwd_f64, gy,
                     (y,), 0.0)


def sigmoid_bwd(object gy, object y):
    """sigmoid backward from the output: ``gy * y * (1 - y)``."""
    return _grad_map("sigmoid_bwd", ("gy", "y"), ferro_sigmoid_bwd_f32, ferro_sigmoid_bwd_f64,
                     gy, (y,), 0.0)


def relu_bwd(object gy, object y):
    """relu backward from the output: ``gy`` where ``y > 0``, else 0."""
    return _grad_map("relu_bwd", ("gy", "y"), ferro_relu_bwd_f32, ferro_relu_bwd_f64, gy,
                     (y,), 0.0)


def leaky_relu_bwd(object gy, object x, double slope):
    """leaky_relu backward from the input: ``gy`` where ``x > 0``, else ``gy * slope``."""
    return _grad_map("leaky_relu_bwd", ("gy", "x"), ferro_leaky_relu_bwd_f32,
                     ferro_leaky_relu_bwd_f64, gy, (x,), slope)


cdef int _check_approximate(str who, object approximate) except -1:
    if approximate != "none" and approximate != "tanh":
        raise ArgumentError(f"{who}: approximate must be 'none' or 'tanh', got {approximate!r}")
    return 0


def gelu_bwd(object gy, object x, object approximate="none"):
    """gelu backward from the input: ``gy * (Phi(x) + x * phi(x))``, or with
    ``approximate="tanh"`` the derivative of ``x (1 + tanh(c (x + k x^3))) / 2``."""
    _check_approximate("gelu_bwd", approximate)
    if approximate == "tanh":
        return _grad_map("gelu_bwd", ("gy", "x"), ferro_gelu_tanh_bwd_f32,
                         ferro_gelu_tanh_bwd_f64, gy, (x,), 0.0)
    return _grad_map("gelu_bwd", ("gy", "x"), ferro_gelu_bwd_f32, ferro_gelu_bwd_f64, gy,
                     (x,), 0.0)


def silu_bwd(object gy, object x, object s):
    """silu backward from x and ``s = sigmoid(x)``: ``gy * s * (1 + x * (1 - s))``."""
    return _grad_map("silu_bwd", ("gy", "x", "s"), ferro_silu_bwd_f32, ferro_silu_bwd_f64, gy,
                     (x, s), 0.0)


def gelu_fwd(object x_, object approximate="none"):
    """gelu ``x * Phi(x)`` (NumPy has no vectorized erf; this is the fast path for it), or with
    ``approximate="tanh"`` ``x (1 + tanh(c (x + k x^3))) / 2`` in one pass."""
    _check_approximate("gelu_fwd", approximate)
    _accept("gelu_fwd", ("x",), (x_,), 0)
    cdef cnp.ndarray x = <cnp.ndarray>x_
    cdef cnp.ndarray out = _empty_as(x)
    cdef Py_ssize_t n = cnp.PyArray_SIZE(x)
    cdef bint tanh_form = approximate == "tanh"
    cdef const void *xp = cnp.PyArray_DATA(x)
    cdef void *op = cnp.PyArray_DATA(out)
    if cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT32:
        with nogil:
            if tanh_form:
                ferro_gelu_tanh_fwd_f32(<const float*>xp, <float*>op, n)
            else:
                ferro_gelu_fwd_f32(<const float*>xp, <float*>op, n)
    else:
        with nogil:
            if tanh_form:
                ferro_gelu_tanh_fwd_f64(<const double*>xp, <double*>op, n)
            else:
                ferro_gelu_fwd_f64(<const double*>xp, <double*>op, n)
    return out


def softmax_bwd(object gy, object y_):
    """Softmax backward over the last axis from the output: ``y * (gy - sum(gy * y))``."""
    cdef Py_ssize_t gs = _grad_stride(gy, y_) if accepts((y_,)) else -1
    if gs < 0:
        raise _grad_refusal("softmax_bwd", ("gy", "y"), gy, (y_,))
    cdef cnp.ndarray y = <cnp.ndarray>y_
    cdef cnp.ndarray out = _empty_as(y)
    cdef Py_ssize_t c = y.shape[y.ndim - 1] if y.ndim else 1
    cdef Py_ssize_t r = cnp.PyArray_SIZE(y) // c if c else 0
    cdef const void *gp = cnp.PyArray_DATA(<cnp.ndarray>gy)
    if c == 0 or r == 0:
        return out
    if cnp.PyArray_TYPE(y) == cnp.NPY_FLOAT32:
        with nogil:
            ferro_softmax_bwd_f32(<const float*>gp, gs, <const float*>cnp.PyArray_DATA(y),
                                  <float*>cnp.PyArray_DATA(out), r, c)
    else:
        with nogil:
            ferro_softmax_bwd_f64(<const double*>gp, gs, <const double*>cnp.PyArray_DATA(y),
                                  <double*>cnp.PyArray_DATA(out), r, c)
    return out


cdef tuple _ce_args(str who, object logits, object target):
    # The logits (accepts, 2-d), their rows and classes, and the targets as C-contiguous int64
    _accept(who, ("logits",), (logits,), 0)
    cdef cnp.ndarray x = <cnp.ndarray>logits
    if x.ndim != 2 or np.shape(target) != (x.shape[0],):
        raise ShapeError(
            f"{who}: logits {np.shape(x)} and target {np.shape(target)} are not (N, C), (N,)"
        )
    return x, x.shape[0], x.shape[1], np.ascontiguousarray(target, dtype=np.int64)


def cross_entropy_fwd(object logits, object target, long long ignore_index=-100):
    """Per-row loss ``logsumexp(x) - x[t]`` (0 where ignored) and ``logsumexp(x)``."""
    cdef cnp.ndarray x, t, loss, lse
    cdef Py_ssize_t r, c
    x, r, c, t = _ce_args("cross_entropy_fwd", logits, target)
    loss, lse = np.empty(r, x.dtype), np.empty(r, x.dtype)
    cdef const int64_t *tp = <const int64_t*>cnp.PyArray_DATA(t)
    with nogil:
        if cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT32:
            ferro_ce_fwd_f32(<const float*>cnp.PyArray_DATA(x), tp, <float*>cnp.PyArray_DATA(loss),
                             <float*>cnp.PyArray_DATA(lse), r, c, ignore_index)
        else:
            ferro_ce_fwd_f64(<const double*>cnp.PyArray_DATA(x), tp,
                             <double*>cnp.PyArray_DATA(loss), <double*>cnp.PyArray_DATA(lse), r,
                             c, ignore_index)
    return loss, lse


def cross_entropy_bwd(object logits, object target, object lse_, object gy_, object denom,
                      long long ignore_index=-100):
    """``(softmax(x) - onehot(t)) * gy / denom`` per row (0 where ignored). ``gy`` has one
    entry per row or is one value; ``denom`` is one value."""
    cdef cnp.ndarray x, t
    cdef Py_ssize_t r, c
    x, r, c, t = _ce_args("cross_entropy_bwd", logits, target)
    cdef cnp.ndarray lse = np.ascontiguousarray(lse_, dtype=x.dtype)
    cdef cnp.ndarray gy = np.ascontiguousarray(gy_, dtype=x.dtype)
    cdef Py_ssize_t gs = np.ndim(gy_) == 1  # (ascontiguousarray makes a 0-d gy 1-d)
    if np.shape(lse) != (r,) or (np.shape(gy) != (r,) if gs else gy.size != 1) or np.size(
            denom) != 1:
        raise ShapeError(f"cross_entropy_bwd: lse {np.shape(lse)}, gy {np.shape(gy)}, denom "
                         f"{np.shape(denom)} for logits {np.shape(x)}")
    cdef cnp.ndarray out = _empty_as(x)
    cdef double den = float(np.asarray(denom).reshape(()))
    cdef const int64_t *tp = <const int64_t*>cnp.PyArray_DATA(t)
    with nogil:
        if cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT32:
            ferro_ce_bwd_f32(<const float*>cnp.PyArray_DATA(x), tp,
                             <const float*>cnp.PyArray_DATA(lse),
                             <const float*>cnp.PyArray_DATA(gy), gs, <float>den,
                             <float*>cnp.PyArray_DATA(out), r, c, ignore_index)
        else:
            ferro_ce_bwd_f64(<const double*>cnp.PyArray_DATA(x), tp,
                             <const double*>cnp.PyArray_DATA(lse),
                             <const double*>cnp.PyArray_DATA(gy), gs, den,
                             <double*>cnp.PyArray_DATA(out), r, c, ignore_index)
    return out


cpdef bint all_finite(object x):
    """True if the float array (``accepts``) holds no NaN or Inf (one pass, no temporary).

    It tests the exponent bits, so an array in non-native byte order must be refused, not read.
    """
    _accept("all_finite", ("x",), (x,), 0)
    cdef cnp.ndarray a = <cnp.ndarray>x
    cdef Py_ssize_t n = cnp.PyArray_SIZE(a)
    cdef int ok
    if cnp.PyArray_TYPE(a) == cnp.NPY_FLOAT32:
        with nogil:
            ok = ferro_all_finite_f32(<const float*>cnp.PyArray_DATA(a), n)
    else:
        with nogil:
            ok = ferro_all_finite_f64(<const double*>cnp.PyArray_DATA(a), n)
    return ok != 0


# ---------------------------------------------------------------------------------------------
# Fused optimizer updates (loops in kernels.h), in place on the parameter and its state. Every
# array must pass ``accepts`` (the optimizer asks it through ferro.ops.fused.kernel_for and
# otherwise takes the generic update) and each one a loop writes must be writeable: the
# optimizer checks that for all its parameters before it updates any, so the check here only
# guards direct calls. An unused
# state array (no momentum, not centered) may be passed as ``p`` itself: it is not read.
# ---------------------------------------------------------------------------------------------

def sgd_update(object p_, object g_, object buf_, double lr, double momentum, double dampening,
               double weight_decay, bint nesterov, bint first):
    """In-place SGD step (PyTorch's formula) on ``p`` and its momentum buffer."""
    _accept("sgd_update", ("p", "g", "buf"), (p_, g_, buf_), 0b101)
    cdef cnp.ndarray p = <cnp.ndarray>p_
    cdef Py_ssize_t n = cnp.PyArray_SIZE(p)
    cdef void *pp = cnp.PyArray_DATA(p)
    cdef void *gp = cnp.PyArray_DATA(<cnp.ndarray>g_)
    cdef void *bp = cnp.PyArray_DATA(<cnp.ndarray>buf_)
    if cnp.PyArray_TYPE(p) == cnp.NPY_FLOAT32:
        with nogil:
            ferro_sgd_f32(<float*>pp, <const float*>gp, <float*>bp, n, lr, momentum, dampening,
                          weight_decay, nesterov, first)
    else:
        with nogil:
            ferro_sgd_f64(<double*>pp, <const double*>gp, <double*>bp, n, lr, momentum,
                          dampening, weight_decay, nesterov, first)


def adam_update(object p_, object g_, object m_, object v_, double lr, double beta1,
                double beta2, double eps, double weight_decay, bint decoupled,
                double bias_correction1, double bias_correction2):
    """In-place Adam (or AdamW with ``decoupled``) step on ``p`` and its two moments."""
    _accept("adam_update", ("p", "g", "m", "v"), (p_, g_, m_, v_), 0b1101)
    cdef cnp.ndarray p = <cnp.ndarray>p_
    cdef Py_ssize_t n = cnp.PyArray_SIZE(p)
    cdef void *pp = cnp.PyArray_DATA(p)
    cdef void *gp = cnp.PyArray_DATA(<cnp.ndarray>g_)
    cdef void *mp = cnp.PyArray_DATA(<cnp.ndarray>m_)
    cdef void *vp = cnp.PyArray_DATA(<cnp.ndarray>v_)
    if cnp.PyArray_TYPE(p) == cnp.NPY_FLOAT32:
        with nogil:
            ferro_adam_f32(<float*>pp, <const float*>gp, <float*>mp, <float*>vp, n, lr, beta1,
                           beta2, eps, weight_decay, decoupled, bias_correction1,
                           bias_correction2)
    else:
        with nogil:
            ferro_adam_f64(<double*>pp, <const double*>gp, <double*>mp, <double*>vp, n, lr,
                           beta1, beta2, eps, weight_decay, decoupled, bias_correction1,
                           bias_correction2)


def rmsprop_update(object p_, object g_, object sq_, object buf_, object gavg_, double lr,
                   double alpha, double eps, double weight_decay, double momentum,
                   bint centered):
    """In-place RMSprop step on ``p`` and its state."""
    _accept("rmsprop_update", ("p", "g", "square_avg", "momentum_buffer", "grad_avg"),
            (p_, g_, sq_, buf_, gavg_), 0b11101)
    cdef cnp.ndarray p = <cnp.ndarray>p_
    cdef Py_ssize_t n = cnp.PyArray_SIZE(p)
    cdef void *pp = cnp.PyArray_DATA(p)
    cdef void *gp = cnp.PyArray_DATA(<cnp.ndarray>g_)
    cdef void *sp = cnp.PyArray_DATA(<cnp.ndarray>sq_)
    cdef void *bp = cnp.PyArray_DATA(<cnp.ndarray>buf_)
    cdef void *ap = cnp.PyArray_DATA(<cnp.ndarray>gavg_)
    if cnp.PyArray_TYPE(p) == cnp.NPY_FLOAT32:
        with nogil:
            ferro_rmsprop_f32(<float*>pp, <const float*>gp, <float*>sp, <float*>bp, <float*>ap,
                              n, lr, alpha, eps, weight_decay, momentum, centered)
    else:
        with nogil:
            ferro_rmsprop_f64(<double*>pp, <const double*>gp, <double*>sp, <double*>bp,
                              <double*>ap, n, lr, alpha, eps, weight_decay, momentum, centered)


def adagrad_update(object p_, object g_, object acc_, double clr, double eps,
                   double weight_decay):
    """In-place Adagrad step on ``p`` and its sum of squares (``clr``: the decayed rate)."""
    _accept("adagrad_update", ("p", "g", "sum"), (p_, g_, acc_), 0b101)
    cdef cnp.ndarray p = <cnp.ndarray>p_
    cdef Py_ssize_t n = cnp.PyArray_SIZE(p)
    cdef void *pp = cnp.PyArray_DATA(p)
    cdef void *gp = cnp.PyArray_DATA(<cnp.ndarray>g_)
    cdef void *ap = cnp.PyArray_DATA(<cnp.ndarray>acc_)
    if cnp.PyArray_TYPE(p) == cnp.NPY_FLOAT32:
        with nogil:
            ferro_adagrad_f32(<float*>pp, <const float*>gp, <float*>ap, n, clr, eps,
                              weight_decay)
    else:
        with nogil:
            ferro_adagrad_f64(<double*>pp, <const double*>gp, <double*>ap, n, clr, eps,
                              weight_decay)


# ---------------------------------------------------------------------------------------------
# Large-array arithmetic on two cores. Note [Two-core elementwise ops]: from BIG_MIN elements
# (cpu_kernels.pxd) add, sub, mul and div, their in-place forms and the gradients of mul, the
# sum of all elements, row sums and copies of views, run as OpenMP loops (kernels.h) instead
# of NumPy's single-threaded ufuncs. ``binary`` is the one place that decides: the engine's
# direct ops, the op classes in ferro.ops.elementwise and the in-place ops all ask it first, and
# it answers NotImplemented
# wherever NumPy must run (small, another dtype or layout, broadcasting other than one value,
# out overlapping an input other than exactly). Its results are NumPy's bit for bit (the same
# IEEE operations in the same precision); it leaves the floating-point status alone, so it
# warns for nothing, as ferro's ops do not (Note [Floating-point warnings] in ferro/__init__.py).
# ---------------------------------------------------------------------------------------------

TWO_CORE_MIN = BIG_MIN  # the size from which binary() and sum_all() apply, for Python

# Note [Streaming stores] in docs/design.md: a leaf's gradient of at least _stream_min bytes is
# written with non-temporal stores (FERRO_STREAM_MIN at import; 0 never).
cdef Py_ssize_t _stream_min = int(os.environ.get("FERRO_STREAM_MIN", 32 << 20))


cdef inline int _streams(cnp.ndarray out) noexcept:
    return _stream_min > 0 and cnp.PyArray_NBYTES(out) >= _stream_min


def set_stream_min(Py_ssize_t nbytes):
    """Write the outputs asked for with ``stream=True`` (leaf gradients) with non-temporal
    stores from ``nbytes`` bytes (0: never); returns the previous value."""
    global _stream_min
    prev, _stream_min = _stream_min, nbytes
    return prev


cdef int _operand(object x, cnp.ndarray like, double *v) except -2:
    # How ``binary`` reads x next to ``like`` (the array that gives the shape and dtype): 1 for a
    # C-contiguous array of like's shape, 0 for one value in memory (like's shape with every
    # stride 0: the gradient of .sum()), 2 for a Python number (into v), -1 refused.
    if type(x) is cnp.ndarray:
        return _grad_stride(x, like)  # the same test as a backward kernel's upstream gradient
    if type(x) is float or (type(x) is int and -(1 << 53) <= x <= (1 << 53)):
        v[0] = <double>x  # an int exact in double, so rounded to T once
    else:
        return -1
    # a finite number beyond float32's range: left to NumPy's own conversion
    return -1 if cnp.PyArray_TYPE(like) == cnp.NPY_FLOAT32 and fabs(v[0]) > FLT_MAX and isfinite(
        v[0]) else 2


cdef inline bint _overlaps(char *o, Py_ssize_t nbytes, object x, int cls) noexcept:
    # True if writing out (at o) could change x before it is read: any overlap but in place
    if cls == 2:
        return False
    cdef char *p = <char*>cnp.PyArray_DATA(<cnp.ndarray>x)
    return not (cls == 1 and p == o) and p < o + nbytes and o < p + (
        nbytes if cls == 1 else cnp.PyArray_ITEMSIZE(<cnp.ndarray>x))


cpdef object binary(int op, object a, object b, object out, double alpha,
                    Py_ssize_t least=BIG_MIN, bint stream=False, bint one=False):
    """``a + alpha b``, ``a - alpha b``, ``a * b`` or ``a / b`` (``op`` 0-3) on both cores, of
    float32/float64 arrays and numbers, into ``out`` (may be ``a``) or a fresh array when None
    (with ``stream``, a leaf's gradient, written by streaming stores from ``stream_min`` bytes).
    NotImplemented where NumPy must run (Note [Two-core elementwise ops]). ``least``, the size
    from which it applies, is lowered by benchmarks/bench_two_core.py, which measures it, and
    with ``one`` (the loop on this thread alone) by the fused update (Note [Fused update])."""
    cdef cnp.ndarray like, o
    cdef double va = 0.0, vb = 0.0
    cdef float fb
    cdef int ca, cb
    if type(a) is cnp.ndarray and (type(b) is not cnp.ndarray or cnp.PyArray_NDIM(
            <cnp.ndarray>a) >= cnp.PyArray_NDIM(<cnp.ndarray>b)):
        like = <cnp.ndarray>a
    elif type(b) is cnp.ndarray:
        like = <cnp.ndarray>b
    else:
        return NotImplemented
    cdef Py_ssize_t n = cnp.PyArray_SIZE(like)
    if n < least or op < 0 or op > 3 or not _is_float(like):
        return NotImplemented
    ca = _operand(a, like, &va)
    cb = _operand(b, like, &vb)
    if ca != 1 and (op & 1) == 0 and alpha == 1.0:  # x + y is y + x, bit for bit (* too)
        a, b, ca, cb, va, vb = b, a, cb, ca, vb, va
    if ca != 1 or cb < 0 or (alpha != 1.0 and (op > 1 or cb == 2)):
        return NotImplemented
    cdef Py_ssize_t nbytes = n * cnp.PyArray_ITEMSIZE(like)
    cdef int streams = 0
    if out is None:
        o = _empty_as(like)
        streams = stream and _streams(o)
    elif type(out) is not cnp.ndarray:
        return NotImplemented
    else:
        o = <cnp.ndarray>out
        if (cnp.PyArray_TYPE(o) != cnp.PyArray_TYPE(like) or not cnp.PyArray_ISCARRAY(o)
                or not cnp.PyArray_ISNOTSWAPPED(o) or not cnp.PyArray_SAMESHAPE(o, like)
                or _overlaps(<char*>cnp.PyArray_DATA(o), nbytes, a, ca)
                or _overlaps(<char*>cnp.PyArray_DATA(o), nbytes, b, cb)):
            return NotImplemented
    op += 4 if alpha != 1.0 else 0
    cdef const void *ap = cnp.PyArray_DATA(<cnp.ndarray>a)
    cdef const void *bp = &vb if cb == 2 else cnp.PyArray_DATA(<cnp.ndarray>b)
    if cnp.PyArray_TYPE(like) == cnp.NPY_FLOAT32:
        fb = <float>vb
        bp = &fb if cb == 2 else bp
        with nogil:
            ferro_binary_f32(op, <const float*>ap, <const float*>bp, cb == 1,
                             <float*>cnp.PyArray_DATA(o), n, alpha, streams, one)
    else:
        with nogil:
            ferro_binary_f64(op, <const double*>ap, <const double*>bp, cb == 1,
                             <double*>cnp.PyArray_DATA(o), n, alpha, streams, one)
    return o


cdef int _sum_into(cnp.ndarray a, cnp.ndarray out) except -1:
    # out[0] = the sum of a (C-contiguous, native, n > 0) as sum_all computes it: pairwise in
    # double by fixed blocks, on both cores from FERRO_PARALLEL_MIN elements
    cdef Py_ssize_t n = cnp.PyArray_SIZE(a)
    cdef cnp.npy_intp nb = (n + SUM_BLOCK - 1) // SUM_BLOCK
    cdef cnp.ndarray parts = <cnp.ndarray>cnp.PyArray_EMPTY(1, &nb, cnp.NPY_FLOAT64, 0)
    cdef double *part = <double*>cnp.PyArray_DATA(parts)
    with nogil:
        if cnp.PyArray_TYPE(a) == cnp.NPY_FLOAT32:
            ferro_sum_all_f32(<const float*>cnp.PyArray_DATA(a), n, part,
                              <float*>cnp.PyArray_DATA(out))
        else:
            ferro_sum_all_f64(<const double*>cnp.PyArray_DATA(a), n, part,
                              <double*>cnp.PyArray_DATA(out))
    return 0


cpdef object sum_all(object x):
    """The sum of every element of a C-contiguous float array of at least BIG_MIN elements, on
    both cores, as a 0-d array (kernels.h: fixed blocks, pairwise in double, so the same result
    on any number of threads); NotImplemented for anything else (NumPy's add.reduce runs). Of a
    Pending chain of as many elements, the same sum of its values, which it never stores (Note
    [Lazy elementwise chains])."""
    if type(x) is Pending:
        if not _valid(<Pending>x) or cnp.PyArray_SIZE((<Pending>x).like) < BIG_MIN:
            return NotImplemented
        return _fused(<Pending>x, True)
    if type(x) is not cnp.ndarray:
        return NotImplemented
    cdef cnp.ndarray a = <cnp.ndarray>x
    cdef Py_ssize_t n = cnp.PyArray_SIZE(a)
    if n < BIG_MIN or not _is_float(a) or not cnp.PyArray_ISCARRAY_RO(a) or not (
            cnp.PyArray_ISNOTSWAPPED(a)):
        return NotImplemented
    cdef cnp.ndarray out = <cnp.ndarray>cnp.PyArray_EMPTY(0, NULL, cnp.PyArray_TYPE(a), 0)
    _sum_into(a, out)
    return out


cpdef object row_sums(object x, double scale):
    """``x.sum(axis=1) * scale`` of a C-contiguous 2-D float array of at least BIG_MIN elements
    (a global average pool: scale 1/c), rows on both cores, each pairwise in double (the same
    bits on any number of threads); NotImplemented for anything else."""
    if type(x) is not cnp.ndarray:
        return NotImplemented
    cdef cnp.ndarray a = <cnp.ndarray>x
    if (cnp.PyArray_SIZE(a) < BIG_MIN or cnp.PyArray_NDIM(a) != 2 or not _is_float(a)
            or not cnp.PyArray_ISCARRAY_RO(a) or not cnp.PyArray_ISNOTSWAPPED(a)):
        return NotImplemented
    cdef cnp.npy_intp r = cnp.PyArray_DIMS(a)[0], c = cnp.PyArray_DIMS(a)[1]
    cdef cnp.ndarray out = <cnp.ndarray>cnp.PyArray_EMPTY(1, &r, cnp.PyArray_TYPE(a), 0)
    with nogil:
        if cnp.PyArray_TYPE(a) == cnp.NPY_FLOAT32:
            ferro_row_sums_f32(<const float*>cnp.PyArray_DATA(a), r, c, scale,
                               <float*>cnp.PyArray_DATA(out))
        else:
            ferro_row_sums_f64(<const double*>cnp.PyArray_DATA(a), r, c, scale,
                               <double*>cnp.PyArray_DATA(out))
    return out


cpdef object materialize(object x, bint stream=False):
    """A C-contiguous copy of a float array of at least BIG_MIN elements of any strides (a
    broadcast gradient, a transposed view) on both cores; NotImplemented for anything else
    (NumPy's copy runs). Its bits are the source's. ``stream``: as binary()'s."""
    if type(x) is not cnp.ndarray:
        return NotImplemented
    cdef cnp.ndarray a = <cnp.ndarray>x
    cdef int nd = cnp.PyArray_NDIM(a), d, k = 0
    cdef Py_ssize_t size = cnp.PyArray_ITEMSIZE(a), step
    cdef Py_ssize_t shape[64]
    cdef Py_ssize_t st[64]
    if (cnp.PyArray_SIZE(a) < BIG_MIN or nd < 1 or nd > MAX_DIMS or not _is_float(a)
            or not cnp.PyArray_ISALIGNED(a) or not cnp.PyArray_ISNOTSWAPPED(a)):
        return NotImplemented
    for d in range(nd):  # drop size-1 dims; merge a dim into the one before where they chain
        if cnp.PyArray_DIMS(a)[d] == 1:
            continue
        if cnp.PyArray_STRIDES(a)[d] % size:
            return NotImplemented
        step = cnp.PyArray_STRIDES(a)[d] // size
        if k and st[k - 1] == step * cnp.PyArray_DIMS(a)[d]:
            shape[k - 1] *= cnp.PyArray_DIMS(a)[d]
            st[k - 1] = step
        else:
            shape[k], st[k] = cnp.PyArray_DIMS(a)[d], step
            k += 1
    cdef cnp.ndarray out = <cnp.ndarray>cnp.PyArray_EMPTY(nd, cnp.PyArray_DIMS(a),
                                                          cnp.PyArray_TYPE(a), 0)
    cdef int streams = stream and _streams(out)
    with nogil:
        if cnp.PyArray_TYPE(a) == cnp.NPY_FLOAT32:
            ferro_expand_f32(<const float*>cnp.PyArray_DATA(a), <float*>cnp.PyArray_DATA(out), k,
                             shape, st, streams)
        else:
            ferro_expand_f64(<const double*>cnp.PyArray_DATA(a), <double*>cnp.PyArray_DATA(out),
                             k, shape, st, streams)
    return out


# ---------------------------------------------------------------------------------------------
# Note [Lazy elementwise chains]: from ``lazy_min()`` elements, the engine's add, sub and mul of
# float arrays of one shape (or an array and a number) return a Pending, the op as a postfix
# program over its leaves, instead of computing it; an op on Pendings merges their programs.
# The chain runs as one two-core loop (kernels.h: ferro_fused) when its value is first needed
# (realize), and ``.sum()`` of a Pending sums the program's values without storing them: in
# ``(a*b + c).sum()`` on 10M floats the forward reads a, b and c once and writes nothing, where
# the ops one at a time moved 280 MB. Each op is the same IEEE operation as binary()'s, in the
# same order, and the sum the same blocks as sum_all()'s: the bits are those of fusion off.
#
# A leaf is read when the chain runs, not when the op was called, so the engine makes a Pending
# only of arrays that nothing can change in between: each array leaf is referenced by its
# tensor alone (the engine checks the reference count, so no NumPy view, from_numpy source or
# buffer export of it exists) and owns its memory; and ferro runs every pending chain before it
# hands any tensor's array to anything that could write it or give it away (``_data``,
# numpy(), in-place ops, backward: ferro._C.tensor.flush).
# ---------------------------------------------------------------------------------------------

cdef enum:
    LAZY_LEAVES = 8
    LAZY_CODE = 16

cdef Py_ssize_t _lazy_min = int(os.environ.get("FERRO_LAZY_MIN", BIG_MIN))


def set_lazy_min(Py_ssize_t n):
    """Make the engine's add, sub and mul lazy from ``n`` elements (0: never; FERRO_LAZY_MIN in
    the environment sets it at import, BIG_MIN by default); returns the previous value."""
    global _lazy_min
    old = _lazy_min
    _lazy_min = n
    return old


def lazy_min():
    """The size from which the engine's add, sub and mul are lazy (0: never)."""
    return _lazy_min


cdef Py_ssize_t lazy_least() noexcept:
    return _lazy_min


cdef bint scale_lazy(object a, object b) noexcept:
    # Note [Fused update]: whether the engine makes ``a * b``, nothing recorded, a Pending below
    # lazy_min(): an array of SCALE_MIN elements or more times a Python number (lr * g)
    if type(b) is cnp.ndarray:
        a, b = b, a
    return (_lazy_min > 0 and type(a) is cnp.ndarray and (type(b) is float or type(b) is int)
            and cnp.PyArray_SIZE(<cnp.ndarray>a) >= SCALE_MIN)


cpdef object scaled(Pending p):
    """``(array, number)`` when ``p`` is exactly ``array * number`` and not computed yet (the
    fused update takes the two, Note [Fused update]); else None."""
    if not _valid(p) or p.ncode != 3 or p.code[2] != -3 or len(p.leaves) != 2:
        return None
    x, s = p.leaves[0], p.leaves[1]
    if type(x) is not cnp.ndarray or type(s) is not float:
        return None
    return x, s


cdef class Pending:
    """An elementwise chain not computed yet (Note [Lazy elementwise chains]): ``shape``,
    ``dtype``, ``ndim`` and ``size`` of its result; realize() computes it."""

    @property
    def shape(self):
        return (<object>self.like).shape

    @property
    def dtype(self):
        return (<object>self.like).dtype

    @property
    def ndim(self):
        return cnp.PyArray_NDIM(self.like)

    @property
    def size(self):
        return cnp.PyArray_SIZE(self.like)

    def __init__(self):
        raise ArgumentTypeError("Pending: made by the engine's lazy ops, not directly")

    def __repr__(self):
        return f"Pending(shape={self.shape}, dtype={self.dtype}, ops={(self.ncode - 1) // 2})"


cdef inline bint _valid(Pending p) noexcept:
    # made by lazy() and not computed yet (Pending.__new__ from Python makes an empty one)
    return p.like is not None and p.result is None and p.leaves is not None


cdef inline int _leaf_class(object x, cnp.ndarray like, bint own, double *v) except -2:
    # How lazy() takes x next to like: 1 an array of like's shape and dtype (a Pending, or a
    # C-contiguous ndarray that its tensor alone references: own), 2 a number (into v), -1 not
    if type(x) is Pending:
        return 1 if _valid(<Pending>x) and cnp.PyArray_TYPE((<Pending>x).like) == (
            cnp.PyArray_TYPE(like)) and cnp.PyArray_SAMESHAPE((<Pending>x).like, like) else -1
    if type(x) is cnp.ndarray:
        return 1 if own and cnp.PyArray_BASE(<cnp.ndarray>x) == NULL and _grad_stride(
            x, like) == 1 else -1
    return _operand(x, like, v)


cdef inline (int, int, int) _size(object x):
    # (codes, leaves, stack depth) of x's program: a leaf's is (1, 1, 1)
    if type(x) is Pending:
        return (<Pending>x).ncode, len((<Pending>x).leaves), (<Pending>x).depth
    return 1, 1, 1


cdef int _append(Pending p, object x, int cls) except -1:
    # x's leaves and code after p's: a Pending's with its leaf numbers moved, else one leaf
    cdef Pending q
    cdef Py_ssize_t k, base = len(p.leaves)
    if type(x) is Pending:
        q = <Pending>x
        p.leaves.extend(q.leaves)
        for k in range(q.ncode):
            p.code[p.ncode + k] = q.code[k] + base if q.code[k] >= 0 else q.code[k]
        p.ncode += q.ncode
    else:
        p.leaves.append(x if cls == 1 else float(x))
        p.code[p.ncode] = base
        p.ncode += 1
    return 0


cpdef object lazy(int op, object a, object b, bint own_a, bint own_b):
    """``a + b``, ``a - b`` or ``a * b`` (``op`` 0-2) as a Pending, or NotImplemented where the
    op must run now: fewer than lazy_min() elements, another dtype, layout or shape, an array
    another object references (``own_a``/``own_b`` False), or a program past its limits."""
    cdef cnp.ndarray like
    cdef double va = 0.0, vb = 0.0
    cdef int ca, cb, na, nb, la, lb, da, db
    if op < 0 or op > 2 or _lazy_min <= 0:
        return NotImplemented
    if type(a) is Pending:
        like = (<Pending>a).like
    elif type(a) is cnp.ndarray:
        like = <cnp.ndarray>a
    elif type(b) is Pending:
        like = (<Pending>b).like
    elif type(b) is cnp.ndarray:
        like = <cnp.ndarray>b
    else:
        return NotImplemented
    cdef Py_ssize_t size = cnp.PyArray_SIZE(like)
    if size < min(_lazy_min, SCALE_MIN) or not _is_float(like):
        return NotImplemented
    ca = _leaf_class(a, like, own_a, &va)
    cb = _leaf_class(b, like, own_b, &vb)
    if ca != 1 and op != 1:  # x + y is y + x, bit for bit (* too): the array first
        a, b, ca, cb = b, a, cb, ca
    if ca != 1 or cb < 0:
        return NotImplemented
    if size < _lazy_min and not (type(a) is Pending or type(b) is Pending or (
            op == 2 and cb == 2)):
        return NotImplemented  # below lazy_min(): an array times a number (scale_lazy), and
        # the ops on such a product, which join its chain
    na, la, da = _size(a)
    nb, lb, db = _size(b)
    if na + nb + 1 > LAZY_CODE or la + lb > LAZY_LEAVES or max(da, db + 1) > EVAL_DEPTH:
        return NotImplemented
    cdef Pending p = Pending.__new__(Pending)
    p.like = (<Pending>a).like if type(a) is Pending else <cnp.ndarray>a
    p.leaves = []
    _append(p, a, ca)
    _append(p, b, cb)
    p.code[p.ncode] = -1 - op
    p.ncode += 1
    p.depth = max(da, db + 1)
    return p


cdef object _fused(Pending p, bint total):
    # realize (total False: the values, into a fresh array) or sum_all (total True) of p
    cdef Py_ssize_t k, n = cnp.PyArray_SIZE(p.like), nl = len(p.leaves)
    cdef Py_ssize_t ls[LAZY_LEAVES]
    cdef const void *ptr[LAZY_LEAVES]
    cdef float f32[LAZY_LEAVES]
    cdef double f64[LAZY_LEAVES]
    cdef bint single = cnp.PyArray_TYPE(p.like) == cnp.NPY_FLOAT32
    cdef int nt = FERRO_MAX_THREADS()
    for k in range(nl):
        x = p.leaves[k]
        if type(x) is cnp.ndarray:
            ptr[k], ls[k] = cnp.PyArray_DATA(<cnp.ndarray>x), 1
        else:
            f32[k], f64[k], ls[k] = <float><double>x, <double>x, 0
            ptr[k] = &f32[k] if single else <void*>&f64[k]
    if total:
        out = cnp.PyArray_EMPTY(0, NULL, cnp.PyArray_TYPE(p.like), 0)
        nb = (n + SUM_BLOCK - 1) // SUM_BLOCK
        parts = np.empty(nb, np.float64)
        scratch = np.empty(nt * SUM_BLOCK, (<object>p.like).dtype)
        if single:
            ferro_fused_sum_f32(p.code, p.ncode, <const float* const*>ptr, ls, n,
                                <float*>cnp.PyArray_DATA(scratch), nt,
                                <double*>cnp.PyArray_DATA(parts), <float*>cnp.PyArray_DATA(out))
        else:
            ferro_fused_sum_f64(p.code, p.ncode, <const double* const*>ptr, ls, n,
                                <double*>cnp.PyArray_DATA(scratch), nt,
                                <double*>cnp.PyArray_DATA(parts), <double*>cnp.PyArray_DATA(out))
        return out
    out = _empty_as(p.like)
    if single:
        ferro_fused_f32(p.code, p.ncode, <const float* const*>ptr, ls, n,
                        <float*>cnp.PyArray_DATA(out))
    else:
        ferro_fused_f64(p.code, p.ncode, <const double* const*>ptr, ls, n,
                        <double*>cnp.PyArray_DATA(out))
    return out


cpdef object realize(Pending p):
    """p's values as a fresh C-contiguous array, computed once (then p lets its leaves go).
    Runs holding the GIL, so that no other thread realizes p meanwhile (its loop is on both
    cores all the same)."""
    if p.result is None:
        if not _valid(p):
            raise ArgumentError("realize: an empty Pending (made by lazy() only)")
        p.result = _fused(p, False)
        p.leaves = None
    return p.result
