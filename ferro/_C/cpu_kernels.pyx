# cython: language_level=3
"""nogil CPU loops for the engine's hot spots: in-place accumulation and sum-to-shape.

Every function here has a generic NumPy twin (the reference) in ``ferro._C.engine`` and a
parity test in ``tests/engine/test_cpu_kernels.py``. The loops work on raw pointers read through
NumPy's C API: a typed memoryview costs about a microsecond to acquire, which is more than the
whole add on a 1-element gradient.

Every function is importable, so each one checks its arguments itself before it touches memory
(docs/design.md, "Kernel accept checks"): the check reads array flags only; an error message is
built only when it refuses.
"""

cimport numpy as cnp
from cython.parallel cimport prange

from ferro._C.typedefs cimport floating_t

import numpy as np

from ferro.errors import (
    ArgumentError,
    ArgumentTypeError,
    DtypeError,
    IndexOutOfRangeError,
    ReadOnlyError,
    ShapeError,
)

cnp.import_array()

# Below this many elements a parallel region costs more than it saves: waking a sleeping OpenMP
# team takes tens of microseconds. Memory-bound loops (accumulation) need about a million
# elements; loops doing exp per element (softmax rows, cross-entropy) gain earlier.
cdef Py_ssize_t PARALLEL_MIN = 1 << 20
cdef Py_ssize_t PARALLEL_MIN_COMPUTE = 1 << 15
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


cpdef bint same_layout(tuple arrays):
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


cdef int _accept(str who, tuple names, tuple arrays, unsigned int writes) except -1:
    # The check every flat-index kernel runs first: ``same_layout`` of ``arrays``, and each array
    # whose bit is set in ``writes`` writeable. Refusing raises the error that says why.
    cdef Py_ssize_t i
    if not same_layout(arrays):
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


cdef void _add_contig(floating_t* dst, const floating_t* src, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    if n >= PARALLEL_MIN:
        for i in prange(n, schedule="static"):
            dst[i] += src[i]
    else:
        for i in range(n):
            dst[i] += src[i]


cpdef int add_inplace(object dst, object src) except -1:
    """``dst += src`` in place, for two ndarrays of one float dtype and shape; ``dst`` must be
    writeable (the caller, the engine, has also checked that it owns it: Note [Grad ownership]).

    The nogil loop runs when both pass ``same_layout`` and do not overlap other than exactly;
    anything else (strided, misaligned, non-native byte order, overlapping) goes through NumPy's
    add into ``dst``, which handles all of these.
    """
    if (type(dst) is not cnp.ndarray or type(src) is not cnp.ndarray
            or not cnp.PyArray_ISWRITEABLE(<cnp.ndarray>dst)
            or not _is_float(<cnp.ndarray>dst)
            or cnp.PyArray_TYPE(<cnp.ndarray>src) != cnp.PyArray_TYPE(<cnp.ndarray>dst)
            or not cnp.PyArray_SAMESHAPE(<cnp.ndarray>src, <cnp.ndarray>dst)):
        raise _add_refusal(dst, src)
    cdef cnp.ndarray d = <cnp.ndarray>dst, s = <cnp.ndarray>src
    cdef Py_ssize_t n = cnp.PyArray_SIZE(d)
    cdef Py_ssize_t nbytes = n * cnp.PyArray_ITEMSIZE(d)
    cdef char *dp = <char*>cnp.PyArray_DATA(d)
    cdef char *sp = <char*>cnp.PyArray_DATA(s)
    if (not cnp.PyArray_ISCARRAY(d) or not cnp.PyArray_ISCARRAY_RO(s)
            or (sp != dp and sp < dp + nbytes and dp < sp + nbytes)):
        np.add(d, s, out=d)
    elif cnp.PyArray_TYPE(d) == cnp.NPY_FLOAT32:
        with nogil:
            _add_contig(<float*>dp, <const float*>sp, n)
    else:
        with nogil:
            _add_contig(<double*>dp, <const double*>sp, n)
    return 0


cdef object _add_refusal(object dst, object src):
    for name, a in (("dst", dst), ("src", src)):
        if type(a) is not np.ndarray:
            return ArgumentTypeError(
                f"add_inplace: {name} must be a numpy.ndarray, got {type(a).__module__}."
                f"{type(a).__qualname__}"
            )
    if not dst.flags.writeable:
        return ReadOnlyError(
            f"add_inplace: dst ({dst.dtype}, shape {dst.shape}) is read-only, and it is added to "
            "in place"
        )
    if dst.dtype.type is not np.float32 and dst.dtype.type is not np.float64:
        return DtypeError(f"add_inplace: dst must be float32 or float64, got {dst.dtype}")
    if src.dtype.type is not dst.dtype.type:
        return DtypeError(f"add_inplace: src has dtype {src.dtype} but dst has {dst.dtype}")
    return ShapeError(f"add_inplace: src has shape {src.shape} but dst has {dst.shape}")


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
# Fused activation kernels, generated in kernels.h (one loop per op and dtype, computed in the
# array's own precision). Each checks its arrays with ``_accept`` and writes only the fresh
# output it allocates; callers (ferro/ops/fused.py) test ``same_layout`` first and take the
# generic path when it is false.
# ---------------------------------------------------------------------------------------------

from libc.math cimport exp, expf, log

cdef extern from "kernels.h" nogil:
    void ferro_tanh_bwd_f32(const float*, const float*, float*, Py_ssize_t)
    void ferro_tanh_bwd_f64(const double*, const double*, double*, Py_ssize_t)
    void ferro_sigmoid_bwd_f32(const float*, const float*, float*, Py_ssize_t)
    void ferro_sigmoid_bwd_f64(const double*, const double*, double*, Py_ssize_t)
    void ferro_relu_bwd_f32(const float*, const float*, float*, Py_ssize_t)
    void ferro_relu_bwd_f64(const double*, const double*, double*, Py_ssize_t)
    void ferro_gelu_bwd_f32(const float*, const float*, float*, Py_ssize_t)
    void ferro_gelu_bwd_f64(const double*, const double*, double*, Py_ssize_t)
    void ferro_silu_bwd_f32(const float*, const float*, const float*, float*, Py_ssize_t)
    void ferro_silu_bwd_f64(const double*, const double*, const double*, double*, Py_ssize_t)
    void ferro_gelu_fwd_f32(const float*, float*, Py_ssize_t)
    void ferro_gelu_fwd_f64(const double*, double*, Py_ssize_t)
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
    int ferro_all_finite_f32(const float*, Py_ssize_t)
    int ferro_all_finite_f64(const double*, Py_ssize_t)

ctypedef void (*map2_f32)(const float*, const float*, float*, Py_ssize_t) noexcept nogil
ctypedef void (*map2_f64)(const double*, const double*, double*, Py_ssize_t) noexcept nogil


def activation_backward(str name, object gy_, object saved_):
    """Fused ``gx = f(gy, saved)`` for tanh, sigmoid, relu (saved y) and gelu (saved x)."""
    cdef map2_f32 f32
    cdef map2_f64 f64
    if name == "tanh":
        f32, f64 = ferro_tanh_bwd_f32, ferro_tanh_bwd_f64
    elif name == "sigmoid":
        f32, f64 = ferro_sigmoid_bwd_f32, ferro_sigmoid_bwd_f64
    elif name == "relu":
        f32, f64 = ferro_relu_bwd_f32, ferro_relu_bwd_f64
    elif name == "gelu":
        f32, f64 = ferro_gelu_bwd_f32, ferro_gelu_bwd_f64
    else:
        raise ArgumentError(
            f"activation_backward: no kernel for {name!r}; expected tanh, sigmoid, relu or gelu"
        )
    _accept("activation_backward", ("gy", "saved"), (gy_, saved_), 0)
    cdef cnp.ndarray gy = <cnp.ndarray>gy_, saved = <cnp.ndarray>saved_
    cdef cnp.ndarray out = _empty_as(gy)
    cdef Py_ssize_t n = cnp.PyArray_SIZE(gy)
    if cnp.PyArray_TYPE(gy) == cnp.NPY_FLOAT32:
        with nogil:
            f32(<const float*>cnp.PyArray_DATA(gy), <const float*>cnp.PyArray_DATA(saved),
                <float*>cnp.PyArray_DATA(out), n)
    else:
        with nogil:
            f64(<const double*>cnp.PyArray_DATA(gy), <const double*>cnp.PyArray_DATA(saved),
                <double*>cnp.PyArray_DATA(out), n)
    return out


def silu_backward(object gy_, object x_, object s_):
    """Fused silu backward ``gy * s * (1 + x * (1 - s))`` from x and s = sigmoid(x)."""
    _accept("silu_backward", ("gy", "x", "s"), (gy_, x_, s_), 0)
    cdef cnp.ndarray gy = <cnp.ndarray>gy_, x = <cnp.ndarray>x_, s = <cnp.ndarray>s_
    cdef cnp.ndarray out = _empty_as(gy)
    cdef Py_ssize_t n = cnp.PyArray_SIZE(gy)
    if cnp.PyArray_TYPE(gy) == cnp.NPY_FLOAT32:
        with nogil:
            ferro_silu_bwd_f32(<const float*>cnp.PyArray_DATA(gy),
                               <const float*>cnp.PyArray_DATA(x),
                               <const float*>cnp.PyArray_DATA(s), <float*>cnp.PyArray_DATA(out), n)
    else:
        with nogil:
            ferro_silu_bwd_f64(<const double*>cnp.PyArray_DATA(gy),
                               <const double*>cnp.PyArray_DATA(x),
                               <const double*>cnp.PyArray_DATA(s), <double*>cnp.PyArray_DATA(out),
                               n)
    return out


cpdef bint all_finite(object x):
    """True if the float array (``same_layout``) holds no NaN or Inf (one pass, no temporary).

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


def gelu_forward(object x_):
    """Exact gelu ``x * Phi(x)`` (NumPy has no erf; this is the fast path for it)."""
    _accept("gelu_forward", ("x",), (x_,), 0)
    cdef cnp.ndarray x = <cnp.ndarray>x_
    cdef cnp.ndarray out = _empty_as(x)
    cdef Py_ssize_t n = cnp.PyArray_SIZE(x)
    if cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT32:
        with nogil:
            ferro_gelu_fwd_f32(<const float*>cnp.PyArray_DATA(x), <float*>cnp.PyArray_DATA(out), n)
    else:
        with nogil:
            ferro_gelu_fwd_f64(<const double*>cnp.PyArray_DATA(x), <double*>cnp.PyArray_DATA(out),
                               n)
    return out


cdef inline floating_t _exp(floating_t x) noexcept nogil:
    if floating_t is float:
        return expf(x)
    else:
        return exp(x)


# ---------------------------------------------------------------------------------------------
# Row kernels over the last axis of a C-contiguous (rows, cols) array: softmax backward and
# softmax cross-entropy. One row per iteration; rows run in parallel when there are many.
# ---------------------------------------------------------------------------------------------

cdef inline void _softmax_bwd_row(const floating_t* g, const floating_t* y, floating_t* out,
                                  Py_ssize_t c) noexcept nogil:
    cdef Py_ssize_t j
    cdef double d = 0.0
    for j in range(c):
        d += g[j] * y[j]
    for j in range(c):
        out[j] = <floating_t>(y[j] * (g[j] - d))


cdef void _rows_bwd(const floating_t* g, const floating_t* y, floating_t* out, Py_ssize_t r,
                    Py_ssize_t c) noexcept nogil:
    cdef Py_ssize_t i
    if r * c >= PARALLEL_MIN and r > 1:
        for i in prange(r, schedule="static"):
            _softmax_bwd_row(g + i * c, y + i * c, out + i * c, c)
    else:
        for i in range(r):
            _softmax_bwd_row(g + i * c, y + i * c, out + i * c, c)


def softmax_backward(object gy_, object y_):
    """Softmax backward over the last axis, ``y * (gy - sum(gy * y))``, from the output ``y``."""
    _accept("softmax_backward", ("gy", "y"), (gy_, y_), 0)
    cdef cnp.ndarray gy = <cnp.ndarray>gy_, y = <cnp.ndarray>y_
    cdef cnp.ndarray out = _empty_as(gy)
    cdef Py_ssize_t c = gy.shape[gy.ndim - 1] if gy.ndim else 1
    cdef Py_ssize_t r = cnp.PyArray_SIZE(gy) // c if c else 0
    if c == 0 or r == 0:
        return out
    if cnp.PyArray_TYPE(gy) == cnp.NPY_FLOAT32:
        with nogil:
            _rows_bwd(<const float*>cnp.PyArray_DATA(gy), <const float*>cnp.PyArray_DATA(y),
                      <float*>cnp.PyArray_DATA(out), r, c)
    else:
        with nogil:
            _rows_bwd(<const double*>cnp.PyArray_DATA(gy), <const double*>cnp.PyArray_DATA(y),
                      <double*>cnp.PyArray_DATA(out), r, c)
    return out


cdef void _ce_fwd(const floating_t* x, const long long* t, const floating_t* w, bint has_w,
                  long long ignore, double eps, Py_ssize_t r, Py_ssize_t c,
                  double* loss, double* lse, double* wy) noexcept nogil:
    cdef Py_ssize_t i
    if r * c >= PARALLEL_MIN_COMPUTE and r > 1:
        for i in prange(r, schedule="static"):
            _ce_fwd_row(x, t, w, has_w, ignore, eps, i, c, loss, lse, wy)
    else:
        for i in range(r):
            _ce_fwd_row(x, t, w, has_w, ignore, eps, i, c, loss, lse, wy)


cdef inline void _ce_fwd_row(const floating_t* x, const long long* t, const floating_t* w,
                             bint has_w, long long ignore, double eps, Py_ssize_t i, Py_ssize_t c,
                             double* loss, double* lse, double* wy) noexcept nogil:
    cdef Py_ssize_t j
    cdef double m, s = 0.0, lse_i, smooth = 0.0, wj
    cdef long long y = t[i]
    if y == ignore:
        loss[i] = 0.0
        wy[i] = 0.0
        lse[i] = 0.0
        return
    m = x[i * c]
    for j in range(1, c):
        if x[i * c + j] > m:
            m = x[i * c + j]
    for j in range(c):
        s += _exp(<floating_t>(x[i * c + j] - m))
    lse_i = m + log(s)
    lse[i] = lse_i
    wy[i] = w[y] if has_w else 1.0
    loss[i] = -(1.0 - eps) * wy[i] * (x[i * c + y] - lse_i)
    if eps != 0.0:
        for j in range(c):
            wj = w[j] if has_w else 1.0
            smooth += wj * (x[i * c + j] - lse_i)
        loss[i] -= eps / c * smooth


cdef void _ce_bwd(const floating_t* x, const long long* t, const floating_t* w, bint has_w,
                  long long ignore, double eps, Py_ssize_t r, Py_ssize_t c, const double* lse,
                  const double* wy, const double* scale, bint per_row,
                  floating_t* out) noexcept nogil:
    cdef Py_ssize_t i, j
    cdef double wsum = 0.0
    if eps != 0.0:
        if has_w:
            for j in range(c):
                wsum += w[j]
        else:
            wsum = c
    if r * c >= PARALLEL_MIN_COMPUTE and r > 1:
        for i in prange(r, schedule="static"):
            _ce_bwd_row(x, t, w, has_w, ignore, eps, i, c, lse, wy,
                        scale[i] if per_row else scale[0], wsum, out)
    else:
        for i in range(r):
            _ce_bwd_row(x, t, w, has_w, ignore, eps, i, c, lse, wy,
                        scale[i] if per_row else scale[0], wsum, out)


cdef inline void _ce_bwd_row(const floating_t* x, const long long* t, const floating_t* w,
                             bint has_w, long long ignore, double eps, Py_ssize_t i, Py_ssize_t c,
                             const double* lse, const double* wy, double sc, double wsum,
                             floating_t* out) noexcept nogil:
    cdef Py_ssize_t j
    cdef double p, g, wj
    if t[i] == ignore:
        for j in range(c):
            out[i * c + j] = 0
        return
    for j in range(c):
        p = _exp(<floating_t>(x[i * c + j] - lse[i]))
        g = (1.0 - eps) * wy[i] * p
        if j == t[i]:
            g = g - (1.0 - eps) * wy[i]
        if eps != 0.0:
            wj = w[j] if has_w else 1.0
            g = g + eps / c * (wsum * p - wj)
        out[i * c + j] = <floating_t>(g * sc)


cdef tuple _ce_inputs(str who, object x, object target, object weight, long long ignore):
    # Checks the logits and returns the target (int64) and weights (x's dtype; a dummy 1-element
    # array when there are none) as C-contiguous, aligned, native arrays the loops may index:
    # every target that is not ``ignore`` must be a class in [0, classes).
    _accept(who, ("x",), (x,), 0)
    if cnp.PyArray_NDIM(<cnp.ndarray>x) != 2:
        raise ShapeError(f"{who}: logits must be 2-D (rows, classes), got shape {x.shape}")
    cdef Py_ssize_t r = x.shape[0], c = x.shape[1]
    if type(target) is not np.ndarray:
        raise ArgumentTypeError(
            f"{who}: target must be a numpy.ndarray, got {type(target).__module__}."
            f"{type(target).__qualname__}"
        )
    if target.dtype.kind not in "iu":
        raise DtypeError(f"{who}: target must hold integers, got {target.dtype}")
    if target.shape != (r,):
        raise ShapeError(f"{who}: target must have shape ({r},), got {target.shape}")
    valid = target[target != ignore]
    if valid.size and (valid.min() < 0 or valid.max() >= c):
        raise IndexOutOfRangeError(
            f"{who}: target classes must lie in [0, {c}) or equal ignore_index {ignore}, got "
            f"values from {valid.min()} to {valid.max()}"
        )
    if weight is None:
        w = np.empty(1, dtype=x.dtype)
    else:
        if type(weight) is not np.ndarray:
            raise ArgumentTypeError(
                f"{who}: weight must be a numpy.ndarray or None, got "
                f"{type(weight).__module__}.{type(weight).__qualname__}"
            )
        if weight.dtype.kind not in "iuf":
            raise DtypeError(f"{who}: weight must hold real numbers, got {weight.dtype}")
        if weight.shape != (c,):
            raise ShapeError(f"{who}: weight must have shape ({c},), got {weight.shape}")
        w = np.require(weight, x.dtype, "CA")
    return np.require(target, np.int64, "CA"), w


def cross_entropy_forward(object x_, object target, object weight, long long ignore,
                          double eps):
    """Per-row softmax cross-entropy of logits (rows, classes) and integer targets.

    Returns ``(loss, lse, wy)`` as float64 arrays of length rows (wy: the target's weight, 0 for
    ignored rows).
    """
    t, w = _ce_inputs("cross_entropy_forward", x_, target, weight, ignore)
    cdef cnp.ndarray x = <cnp.ndarray>x_
    cdef Py_ssize_t r = x.shape[0], c = x.shape[1]
    cdef cnp.ndarray loss = np.empty(r), lse = np.empty(r), wy = np.empty(r)
    cdef bint has_w = weight is not None
    cdef const long long *tp = <const long long*>cnp.PyArray_DATA(<cnp.ndarray>t)
    cdef void *wp = cnp.PyArray_DATA(<cnp.ndarray>w)
    if r == 0:
        return loss, lse, wy
    if cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT32:
        with nogil:
            _ce_fwd(<const float*>cnp.PyArray_DATA(x), tp, <const float*>wp, has_w, ignore, eps,
                    r, c, <double*>cnp.PyArray_DATA(loss), <double*>cnp.PyArray_DATA(lse),
                    <double*>cnp.PyArray_DATA(wy))
    else:
        with nogil:
            _ce_fwd(<const double*>cnp.PyArray_DATA(x), tp, <const double*>wp, has_w, ignore,
                    eps, r, c, <double*>cnp.PyArray_DATA(loss), <double*>cnp.PyArray_DATA(lse),
                    <double*>cnp.PyArray_DATA(wy))
    return loss, lse, wy


def cross_entropy_backward(object x_, object target, object weight, long long ignore,
                           double eps, object lse_, object wy_, object scale):
    """Gradient of the rows' losses w.r.t. the logits, each row times ``scale`` (length 1, or
    one per row). ``lse`` and ``wy`` are the float64 arrays ``cross_entropy_forward`` returned."""
    who = "cross_entropy_backward"
    t, w = _ce_inputs(who, x_, target, weight, ignore)
    cdef cnp.ndarray x = <cnp.ndarray>x_
    cdef Py_ssize_t r = x.shape[0], c = x.shape[1]
    _accept(who, ("lse", "wy"), (lse_, wy_), 0)
    if cnp.PyArray_TYPE(<cnp.ndarray>lse_) != cnp.NPY_FLOAT64:
        raise DtypeError(f"{who}: lse and wy must be float64, got {lse_.dtype}")
    if lse_.shape != (r,):
        raise ShapeError(f"{who}: lse and wy must have shape ({r},), got {lse_.shape}")
    if type(scale) is not np.ndarray or scale.dtype.kind not in "iuf":
        raise DtypeError(f"{who}: scale must be a numpy.ndarray of real numbers")
    if scale.size != 1 and scale.size != r:
        raise ShapeError(f"{who}: scale must have 1 or {r} entries, got shape {scale.shape}")
    cdef cnp.ndarray lse = <cnp.ndarray>lse_, wy = <cnp.ndarray>wy_
    cdef cnp.ndarray out = _empty_as(x)
    cdef cnp.ndarray sc = np.require(scale, np.float64, "CA").reshape(-1)
    cdef bint has_w = weight is not None, per_row = sc.shape[0] == r and r != 1
    cdef const long long *tp = <const long long*>cnp.PyArray_DATA(<cnp.ndarray>t)
    cdef void *wp = cnp.PyArray_DATA(<cnp.ndarray>w)
    if r == 0:
        return out
    if cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT32:
        with nogil:
            _ce_bwd(<const float*>cnp.PyArray_DATA(x), tp, <const float*>wp, has_w, ignore, eps,
                    r, c, <const double*>cnp.PyArray_DATA(lse),
                    <const double*>cnp.PyArray_DATA(wy), <const double*>cnp.PyArray_DATA(sc),
                    per_row, <float*>cnp.PyArray_DATA(out))
    else:
        with nogil:
            _ce_bwd(<const double*>cnp.PyArray_DATA(x), tp, <const double*>wp, has_w, ignore,
                    eps, r, c, <const double*>cnp.PyArray_DATA(lse),
                    <const double*>cnp.PyArray_DATA(wy), <const double*>cnp.PyArray_DATA(sc),
                    per_row, <double*>cnp.PyArray_DATA(out))
    return out


# ---------------------------------------------------------------------------------------------
# Fused optimizer updates (loops in kernels.h), in place on the parameter and its state. Every
# array must pass ``same_layout`` (the optimizer tests it first and otherwise takes the generic
# update) and each one a loop writes must be writeable: the optimizer checks that for all its
# parameters before it updates any, so the check here only guards direct calls. An unused
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
