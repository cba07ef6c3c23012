# cython: language_level=3
"""nogil CPU loops for the engine's hot spots: in-place accumulation and sum-to-shape.

Every function here has a generic NumPy twin (the reference) in ``ferro._C.engine`` and a
parity test in ``tests/engine/test_cpu_kernels.py``. The loops work on raw pointers read through
NumPy's C API: a typed memoryview costs about a microsecond to acquire, which is more than the
whole add on a 1-element gradient.
"""

cimport numpy as cnp
from cython.parallel cimport prange

from ferro._C.typedefs cimport floating_t

import numpy as np

cnp.import_array()

# Below this many elements a parallel region costs more than it saves: waking a sleeping OpenMP
# team takes tens of microseconds. Memory-bound loops (accumulation) need about a million
# elements; loops doing exp per element (softmax rows, cross-entropy) gain earlier.
cdef Py_ssize_t PARALLEL_MIN = 1 << 20
cdef Py_ssize_t PARALLEL_MIN_COMPUTE = 1 << 15
cdef int MAX_DIMS = 64


cpdef bint supports(object arr):
    """True if ``arr`` is a float32/float64 NumPy array these loops can take."""
    if type(arr) is not cnp.ndarray:
        return False
    cdef int t = cnp.PyArray_TYPE(<cnp.ndarray>arr)
    return t == cnp.NPY_FLOAT32 or t == cnp.NPY_FLOAT64


cdef void _add_contig(floating_t* dst, const floating_t* src, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    if n >= PARALLEL_MIN:
        for i in prange(n, schedule="static"):
            dst[i] += src[i]
    else:
        for i in range(n):
            dst[i] += src[i]


cpdef int add_inplace(cnp.ndarray dst, cnp.ndarray src) except -1:
    """``dst += src`` for same-shape, same-dtype float arrays; ``dst`` must be C-contiguous.

    The caller (the engine) has already checked ownership of ``dst`` (Note [Grad ownership]).
    A non-contiguous ``src`` goes through NumPy's strided add.
    """
    cdef Py_ssize_t n = cnp.PyArray_SIZE(dst)
    cdef int t = cnp.PyArray_TYPE(dst)
    if cnp.PyArray_TYPE(src) != t or cnp.PyArray_SIZE(src) != n:
        raise ValueError(
            f"add_inplace: dst {dst.dtype}{(<object>dst).shape} and src {src.dtype}{(<object>src).shape} differ"
        )
    if not cnp.PyArray_IS_C_CONTIGUOUS(dst) or not cnp.PyArray_ISWRITEABLE(dst):
        raise ValueError("add_inplace: dst must be C-contiguous and writeable")
    if not cnp.PyArray_IS_C_CONTIGUOUS(src):
        np.add(dst, src, out=dst)
        return 0
    if t == cnp.NPY_FLOAT32:
        with nogil:
            _add_contig(<float*>cnp.PyArray_DATA(dst), <const float*>cnp.PyArray_DATA(src), n)
    elif t == cnp.NPY_FLOAT64:
        with nogil:
            _add_contig(<double*>cnp.PyArray_DATA(dst), <const double*>cnp.PyArray_DATA(src), n)
    else:
        np.add(dst, src, out=dst)
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


cpdef object sum_to_shape(cnp.ndarray src, tuple shape):
    """Sum a broadcast float array back to ``shape`` (which must broadcast to ``src.shape``).

    Returns a new C-contiguous array of ``shape``; ``src`` is only read.
    """
    cdef int ndim = cnp.PyArray_NDIM(src)
    cdef int tnd = len(shape)
    cdef int lead = ndim - tnd
    cdef int d, t = cnp.PyArray_TYPE(src)
    cdef Py_ssize_t itemsize = cnp.PyArray_ITEMSIZE(src)
    cdef Py_ssize_t sshape[64]
    cdef Py_ssize_t sstride[64]
    cdef Py_ssize_t dstride[64]
    cdef Py_ssize_t dsize, acc_stride
    cdef cnp.ndarray dst
    if lead < 0 or ndim > MAX_DIMS:
        raise ValueError(f"sum_to_shape: cannot reduce shape {(<object>src).shape} to {shape}")
    dst = np.zeros(shape, dtype=src.dtype)
    if cnp.PyArray_SIZE(src) == 0 or cnp.PyArray_SIZE(dst) == 0:
        return dst
    if ndim == 0:
        dst[...] = src
        return dst
    acc_stride = 1
    for d in range(ndim - 1, -1, -1):
        sshape[d] = cnp.PyArray_DIMS(src)[d]
        if cnp.PyArray_STRIDES(src)[d] % itemsize != 0:
            raise ValueError("sum_to_shape: unaligned strides")
        sstride[d] = cnp.PyArray_STRIDES(src)[d] // itemsize
        if d < lead:
            dstride[d] = 0
        else:
            dsize = shape[d - lead]
            if dsize == sshape[d]:
                dstride[d] = acc_stride
            elif dsize == 1:
                dstride[d] = 0
            else:
                raise ValueError(f"sum_to_shape: cannot reduce shape {(<object>src).shape} to {shape}")
            acc_stride *= dsize
    if t == cnp.NPY_FLOAT32:
        with nogil:
            _sum_to(<const float*>cnp.PyArray_DATA(src), <float*>cnp.PyArray_DATA(dst),
                    ndim, sshape, sstride, dstride)
    elif t == cnp.NPY_FLOAT64:
        with nogil:
            _sum_to(<const double*>cnp.PyArray_DATA(src), <double*>cnp.PyArray_DATA(dst),
                    ndim, sshape, sstride, dstride)
    else:
        raise TypeError(f"sum_to_shape: unsupported dtype {src.dtype}")
    return dst


# ---------------------------------------------------------------------------------------------
# Fused activation kernels, generated in kernels.h (one loop per op and dtype, computed in the
# array's own precision). Callers (ferro/ops/fused.py) pass C-contiguous arrays of one float
# dtype, checked by ``same_layout``.
# ---------------------------------------------------------------------------------------------

from libc.math cimport exp, expf, log, logf

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


cpdef bint same_layout(tuple arrays):
    """True if every array is a C-contiguous float32/float64 ndarray of one dtype and size."""
    cdef cnp.ndarray a0, a
    if not arrays or not supports(arrays[0]):
        return False
    a0 = <cnp.ndarray>arrays[0]
    if not cnp.PyArray_IS_C_CONTIGUOUS(a0):
        return False
    for o in arrays[1:]:
        if type(o) is not cnp.ndarray:
            return False
        a = <cnp.ndarray>o
        if (cnp.PyArray_TYPE(a) != cnp.PyArray_TYPE(a0) or not cnp.PyArray_IS_C_CONTIGUOUS(a)
                or cnp.PyArray_SIZE(a) != cnp.PyArray_SIZE(a0)):
            return False
    return True


cdef int _check_same(str who, tuple arrays) except -1:
    # The loops index every array by the first one's size: refuse anything that would make them
    # read or write out of bounds (these functions are importable, not only engine-internal).
    if not same_layout(arrays):
        raise ValueError(
            f"{who}: needs C-contiguous float32/float64 arrays of one dtype and size, got "
            + ", ".join(f"{a.dtype}{tuple(a.shape)}" for a in arrays)
        )
    return 0


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
        raise ValueError(f"activation_backward: no kernel for {name!r}")
    _check_same("activation_backward", (gy_, saved_))
    cdef cnp.ndarray gy = <cnp.ndarray>gy_, saved = <cnp.ndarray>saved_
    cdef cnp.ndarray out = np.empty_like(gy)
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
    _check_same("silu_backward", (gy_, x_, s_))
    cdef cnp.ndarray gy = <cnp.ndarray>gy_, x = <cnp.ndarray>x_, s = <cnp.ndarray>s_
    cdef cnp.ndarray out = np.empty_like(gy)
    cdef Py_ssize_t n = cnp.PyArray_SIZE(gy)
    if cnp.PyArray_TYPE(gy) == cnp.NPY_FLOAT32:
        with nogil:
            ferro_silu_bwd_f32(<const float*>cnp.PyArray_DATA(gy), <const float*>cnp.PyArray_DATA(x),
                               <const float*>cnp.PyArray_DATA(s), <float*>cnp.PyArray_DATA(out), n)
    else:
        with nogil:
            ferro_silu_bwd_f64(<const double*>cnp.PyArray_DATA(gy),
                               <const double*>cnp.PyArray_DATA(x),
                               <const double*>cnp.PyArray_DATA(s), <double*>cnp.PyArray_DATA(out),
                               n)
    return out


cpdef bint all_finite(cnp.ndarray x):
    """True if the C-contiguous float array holds no NaN or Inf (one pass, no temporary)."""
    _check_same("all_finite", (x,))
    cdef Py_ssize_t n = cnp.PyArray_SIZE(x)
    cdef int ok
    if cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT32:
        with nogil:
            ok = ferro_all_finite_f32(<const float*>cnp.PyArray_DATA(x), n)
    else:
        with nogil:
            ok = ferro_all_finite_f64(<const double*>cnp.PyArray_DATA(x), n)
    return ok != 0


def gelu_forward(cnp.ndarray x):
    """Exact gelu ``x * Phi(x)`` (NumPy has no erf; this is the fast path for it)."""
    _check_same("gelu_forward", (x,))
    cdef cnp.ndarray out = np.empty_like(x)
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
    _check_same("softmax_backward", (gy_, y_))
    cdef cnp.ndarray gy = <cnp.ndarray>gy_, y = <cnp.ndarray>y_
    cdef cnp.ndarray out = np.empty_like(gy)
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
    cdef double m, s = 0.0, l, smooth = 0.0, wj
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
    l = m + log(s)
    lse[i] = l
    wy[i] = w[y] if has_w else 1.0
    loss[i] = -(1.0 - eps) * wy[i] * (x[i * c + y] - l)
    if eps != 0.0:
        for j in range(c):
            wj = w[j] if has_w else 1.0
            smooth += wj * (x[i * c + j] - l)
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


cdef int _check_ce(cnp.ndarray x, object target, object weight, long long ignore) except -1:
    if x.ndim != 2:
        raise ValueError(f"cross_entropy kernels: logits must be 2-D, got shape {(<object>x).shape}")
    _check_same("cross_entropy kernels", (x,))
    t = np.asarray(target)
    if t.shape != (x.shape[0],) or t.dtype.kind not in "iu":
        raise ValueError(f"cross_entropy kernels: target must be {x.shape[0]} integers, got "
                         f"{t.dtype}{t.shape}")
    valid = t[t != ignore]
    if valid.size and (valid.min() < 0 or valid.max() >= x.shape[1]):
        raise ValueError(f"cross_entropy kernels: target classes must lie in [0, {x.shape[1]})")
    if weight is not None and np.asarray(weight).shape != (x.shape[1],):
        raise ValueError(f"cross_entropy kernels: weight must have {x.shape[1]} entries")
    return 0


def cross_entropy_forward(cnp.ndarray x, cnp.ndarray target, object weight, long long ignore,
                          double eps):
    """Per-row softmax cross-entropy of C-contiguous logits (rows, classes) and int64 targets.

    Returns ``(loss, lse, wy)`` as float64 arrays of length rows (wy: the target's weight, 0 for
    ignored rows).
    """
    _check_ce(x, target, weight, ignore)
    cdef Py_ssize_t r = x.shape[0], c = x.shape[1]
    cdef cnp.ndarray loss = np.empty(r), lse = np.empty(r), wy = np.empty(r)
    cdef cnp.ndarray t = np.ascontiguousarray(target, dtype=np.int64)
    cdef cnp.ndarray w = np.ascontiguousarray(weight if weight is not None else np.empty(1),
                                              dtype=x.dtype)
    cdef bint has_w = weight is not None
    if r == 0:
        return loss, lse, wy
    if cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT32:
        with nogil:
            _ce_fwd(<const float*>cnp.PyArray_DATA(x), <const long long*>cnp.PyArray_DATA(t),
                    <const float*>cnp.PyArray_DATA(w), has_w, ignore, eps, r, c,
                    <double*>cnp.PyArray_DATA(loss), <double*>cnp.PyArray_DATA(lse),
                    <double*>cnp.PyArray_DATA(wy))
    else:
        with nogil:
            _ce_fwd(<const double*>cnp.PyArray_DATA(x), <const long long*>cnp.PyArray_DATA(t),
                    <const double*>cnp.PyArray_DATA(w), has_w, ignore, eps, r, c,
                    <double*>cnp.PyArray_DATA(loss), <double*>cnp.PyArray_DATA(lse),
                    <double*>cnp.PyArray_DATA(wy))
    return loss, lse, wy


def cross_entropy_backward(cnp.ndarray x, cnp.ndarray target, object weight, long long ignore,
                           double eps, cnp.ndarray lse, cnp.ndarray wy, cnp.ndarray scale):
    """Gradient of the rows' losses w.r.t. the logits, each row times ``scale`` (length 1, or
    one per row)."""
    _check_ce(x, target, weight, ignore)
    if lse.shape[0] != x.shape[0] or wy.shape[0] != x.shape[0] or scale.size not in (1, x.shape[0]):
        raise ValueError("cross_entropy_backward: lse, wy and scale must have one entry per row")
    if lse.dtype != np.float64 or wy.dtype != np.float64:
        raise ValueError("cross_entropy_backward: lse and wy must be float64")
    cdef Py_ssize_t r = x.shape[0], c = x.shape[1]
    cdef cnp.ndarray out = np.empty_like(x)
    cdef cnp.ndarray t = np.ascontiguousarray(target, dtype=np.int64)
    cdef cnp.ndarray w = np.ascontiguousarray(weight if weight is not None else np.empty(1),
                                              dtype=x.dtype)
    cdef cnp.ndarray sc = np.ascontiguousarray(scale, dtype=np.float64).reshape(-1)
    cdef bint has_w = weight is not None, per_row = sc.shape[0] == r and r != 1
    if r == 0:
        return out
    if cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT32:
        with nogil:
            _ce_bwd(<const float*>cnp.PyArray_DATA(x), <const long long*>cnp.PyArray_DATA(t),
                    <const float*>cnp.PyArray_DATA(w), has_w, ignore, eps, r, c,
                    <const double*>cnp.PyArray_DATA(lse), <const double*>cnp.PyArray_DATA(wy),
                    <const double*>cnp.PyArray_DATA(sc), per_row, <float*>cnp.PyArray_DATA(out))
    else:
        with nogil:
            _ce_bwd(<const double*>cnp.PyArray_DATA(x), <const long long*>cnp.PyArray_DATA(t),
                    <const double*>cnp.PyArray_DATA(w), has_w, ignore, eps, r, c,
                    <const double*>cnp.PyArray_DATA(lse), <const double*>cnp.PyArray_DATA(wy),
                    <const double*>cnp.PyArray_DATA(sc), per_row, <double*>cnp.PyArray_DATA(out))
    return out


# ---------------------------------------------------------------------------------------------
# Fused optimizer updates (loops in kernels.h). Every array is C-contiguous, of one float dtype
# and size (checked by the caller with same_layout); state arrays are updated in place. An
# unused state array (no momentum, not centered) may be passed as ``p`` itself: it is not read.
# ---------------------------------------------------------------------------------------------

def sgd_update(cnp.ndarray p, cnp.ndarray g, cnp.ndarray buf, double lr, double momentum,
               double dampening, double weight_decay, bint nesterov, bint first):
    """In-place SGD step (PyTorch's formula) on ``p`` and its momentum buffer."""
    _check_same("sgd_update", (p, g, buf))
    cdef Py_ssize_t n = cnp.PyArray_SIZE(p)
    cdef void *pp = cnp.PyArray_DATA(p)
    cdef void *gp = cnp.PyArray_DATA(g)
    cdef void *bp = cnp.PyArray_DATA(buf)
    if cnp.PyArray_TYPE(p) == cnp.NPY_FLOAT32:
        with nogil:
            ferro_sgd_f32(<float*>pp, <const float*>gp, <float*>bp, n, lr, momentum, dampening,
                          weight_decay, nesterov, first)
    else:
        with nogil:
            ferro_sgd_f64(<double*>pp, <const double*>gp, <double*>bp, n, lr, momentum,
                          dampening, weight_decay, nesterov, first)


def adam_update(cnp.ndarray p, cnp.ndarray g, cnp.ndarray m, cnp.ndarray v, double lr,
                double beta1, double beta2, double eps, double weight_decay, bint decoupled,
                double bias_correction1, double bias_correction2):
    """In-place Adam (or AdamW with ``decoupled``) step on ``p`` and its two moments."""
    _check_same("adam_update", (p, g, m, v))
    cdef Py_ssize_t n = cnp.PyArray_SIZE(p)
    cdef void *pp = cnp.PyArray_DATA(p)
    cdef void *gp = cnp.PyArray_DATA(g)
    cdef void *mp = cnp.PyArray_DATA(m)
    cdef void *vp = cnp.PyArray_DATA(v)
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


def rmsprop_update(cnp.ndarray p, cnp.ndarray g, cnp.ndarray sq, cnp.ndarray buf,
                   cnp.ndarray gavg, double lr, double alpha, double eps, double weight_decay,
                   double momentum, bint centered):
    """In-place RMSprop step on ``p`` and its state."""
    _check_same("rmsprop_update", (p, g, sq, buf, gavg))
    cdef Py_ssize_t n = cnp.PyArray_SIZE(p)
    cdef void *pp = cnp.PyArray_DATA(p)
    cdef void *gp = cnp.PyArray_DATA(g)
    cdef void *sp = cnp.PyArray_DATA(sq)
    cdef void *bp = cnp.PyArray_DATA(buf)
    cdef void *ap = cnp.PyArray_DATA(gavg)
    if cnp.PyArray_TYPE(p) == cnp.NPY_FLOAT32:
        with nogil:
            ferro_rmsprop_f32(<float*>pp, <const float*>gp, <float*>sp, <float*>bp, <float*>ap,
                              n, lr, alpha, eps, weight_decay, momentum, centered)
    else:
        with nogil:
            ferro_rmsprop_f64(<double*>pp, <const double*>gp, <double*>sp, <double*>bp,
                              <double*>ap, n, lr, alpha, eps, weight_decay, momentum, centered)


def adagrad_update(cnp.ndarray p, cnp.ndarray g, cnp.ndarray acc, double clr, double eps,
                   double weight_decay):
    """In-place Adagrad step on ``p`` and its sum of squares (``clr``: the decayed rate)."""
    _check_same("adagrad_update", (p, g, acc))
    cdef Py_ssize_t n = cnp.PyArray_SIZE(p)
    cdef void *pp = cnp.PyArray_DATA(p)
    cdef void *gp = cnp.PyArray_DATA(g)
    cdef void *ap = cnp.PyArray_DATA(acc)
    if cnp.PyArray_TYPE(p) == cnp.NPY_FLOAT32:
        with nogil:
            ferro_adagrad_f32(<float*>pp, <const float*>gp, <float*>ap, n, clr, eps,
                              weight_decay)
    else:
        with nogil:
            ferro_adagrad_f64(<double*>pp, <const double*>gp, <double*>ap, n, clr, eps,
                              weight_decay)
