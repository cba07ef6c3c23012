"""Fused CPU kernels of the normalization family: forward and backward of layer, RMS, group
(and instance) and batch norm, each a few passes over data that stays in cache (a row, a group,
a channel) instead of a chain of NumPy temporaries over the whole array.

The loops are C, in ``norm_kernels.h``: vectorized, per ISA level, rows or channels split across
cores. Statistics are taken in two passes, mean then squared deviations, summed in the data's
precision within blocks of 256 values and in float64 across blocks, so a float32 input far
from zero keeps its digits. Every kernel leaves the state the op's generic forward
leaves (Note [Norm state] in ``ferro/ops/norm.py``): the output, and each statistic's ``mean``
and ``rstd`` in the input's dtype, shaped as the generic path shapes them.

The same names mean the same kernels, with the same arguments, as in ``ferro.cuda.norm``; the
op adapters are in ``ferro/ops/norm.py`` and the table entries in ``ferro/ops/fused.py``.
``accepts`` and ``accepts_grad`` read array flags only and raise nothing; every kernel checks
its arguments itself before it touches memory (docs/design.md, "Kernel accept checks").
"""

cimport numpy as cnp

import numpy as np

from ferro.errors import ArgumentError, ArgumentTypeError, DtypeError, ShapeError

cnp.import_array()

cdef extern from "norm_kernels.h" nogil:
    void ferro_norm_fwd_f32(const float*, const float*, const float*, float*, float*, float*,
                            float*, Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t, double)
    void ferro_norm_fwd_f64(const double*, const double*, const double*, double*, double*,
                            double*, double*, Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t,
                            double)
    int ferro_norm_bwd_f32(const float*, const float*, const float*, const float*, const float*,
                           float*, double*, double*, Py_ssize_t, Py_ssize_t, Py_ssize_t,
                           Py_ssize_t)
    int ferro_norm_bwd_f64(const double*, const double*, const double*, const double*,
                           const double*, double*, double*, double*, Py_ssize_t, Py_ssize_t,
                           Py_ssize_t, Py_ssize_t)
    void ferro_bn_fwd_f32(const float*, const float*, const float*, float*, float*, float*,
                          float*, Py_ssize_t, Py_ssize_t, Py_ssize_t, double)
    void ferro_bn_fwd_f64(const double*, const double*, const double*, double*, double*,
                          double*, double*, Py_ssize_t, Py_ssize_t, Py_ssize_t, double)
    void ferro_bn_bwd_f32(const float*, const float*, const float*, const float*, const float*,
                          float*, double*, double*, Py_ssize_t, Py_ssize_t, Py_ssize_t)
    void ferro_bn_bwd_f64(const double*, const double*, const double*, const double*,
                          const double*, double*, double*, double*, Py_ssize_t, Py_ssize_t,
                          Py_ssize_t)

FUSED_KERNELS = frozenset({
    "layer_norm_fwd", "layer_norm_bwd", "rms_norm_fwd", "rms_norm_bwd",
    "group_norm_fwd", "group_norm_bwd", "batch_norm_fwd", "batch_norm_bwd",
})


# ---------------------------------------------------------------------------------------------
# Accept checks: exact ndarrays (None skipped) of one float dtype, native byte order, aligned,
# C-contiguous. Shapes differ between the input and its parameters; each kernel checks those.
# ---------------------------------------------------------------------------------------------

cdef inline bint _ok(object o, int typenum) noexcept:
    if type(o) is not cnp.ndarray:
        return False
    cdef cnp.ndarray a = <cnp.ndarray>o
    return (cnp.PyArray_TYPE(a) == typenum and cnp.PyArray_ISCARRAY_RO(a)
            and cnp.PyArray_ISNOTSWAPPED(a))


cpdef bint accepts(tuple arrays):
    """True if every array that is not None is an exact ndarray, C-contiguous, aligned, in
    native byte order, float32/float64, all of one dtype (their shapes may differ)."""
    cdef int t = -1
    for o in arrays:
        if o is None:
            continue
        if type(o) is not cnp.ndarray:
            return False
        if t < 0:
            t = cnp.PyArray_TYPE(<cnp.ndarray>o)
            if t != cnp.NPY_FLOAT32 and t != cnp.NPY_FLOAT64:
                return False
        if not _ok(o, t):
            return False
    return t >= 0


cpdef bint accepts_grad(object gy, tuple arrays):
    """True if ``accepts(arrays)`` and ``gy`` is C-contiguous of the first array's dtype and
    shape (the adapters make a broadcast upstream gradient contiguous first)."""
    if not accepts(arrays) or type(gy) is not cnp.ndarray:
        return False
    cdef cnp.ndarray a0 = <cnp.ndarray>arrays[0]
    return _ok(gy, cnp.PyArray_TYPE(a0)) and cnp.PyArray_SAMESHAPE(<cnp.ndarray>gy, a0)


cdef int _check(str who, tuple names, tuple arrays, tuple shapes) except -1:
    # ``accepts`` and the exact shape of each array (None entries: absent, skipped); refusing
    # raises the error that says why.
    if accepts(arrays) and all(
        a is None or a.shape == s for a, s in zip(arrays, shapes)
    ):
        return 0
    dtype = None
    for name, a, s in zip(names, arrays, shapes):
        if a is None:
            continue
        if type(a) is not np.ndarray:
            raise ArgumentTypeError(
                f"{who}: {name} must be a numpy.ndarray, got {type(a).__module__}."
                f"{type(a).__qualname__}"
            )
        if a.dtype.type is not np.float32 and a.dtype.type is not np.float64:
            raise DtypeError(f"{who}: {name} must be float32 or float64, got {a.dtype}")
        if not a.dtype.isnative:
            raise DtypeError(f"{who}: {name} has non-native byte order (dtype {a.dtype.str})")
        dtype = dtype or a.dtype
        if a.dtype != dtype:
            raise DtypeError(f"{who}: {name} has dtype {a.dtype}, expected {dtype}")
        if a.shape != s:
            raise ShapeError(f"{who}: {name} has shape {a.shape}, expected {s}")
        if not a.flags.aligned or not a.flags.c_contiguous:
            raise ArgumentError(
                f"{who}: {name} must be aligned and C-contiguous, got strides {a.strides}"
            )
    raise ArgumentError(f"{who}: expected at least one array")


cdef inline cnp.ndarray _empty(tuple shape, int typenum):
    return <cnp.ndarray>np.empty(shape, dtype=np.float32 if typenum == cnp.NPY_FLOAT32
                                 else np.float64)


cdef inline const void* _ptr(object a):
    # The data of an optional array: NULL for None.
    return NULL if a is None else cnp.PyArray_DATA(<cnp.ndarray>a)


# ---------------------------------------------------------------------------------------------
# Rows: R rows of K values; row r, value j has weight index (r % G) * (K // S) + j // S. Layer
# and RMS norm: G = S = 1 (one weight per value); group norm: S spatial values per channel, G
# groups; instance norm: one channel per group. The loops are in norm_kernels.h.
# ---------------------------------------------------------------------------------------------


cdef tuple _rows_forward(object x_, object w_, object b_, double eps, Py_ssize_t S,
                         Py_ssize_t G, bint centered, tuple stat_shape):
    cdef cnp.ndarray x = <cnp.ndarray>x_
    cdef Py_ssize_t R = x_.shape[0], K = x_.shape[1]
    if K == 0 and R:
        raise ShapeError(f"norm kernels: rows of no values in x of shape {x_.shape}")
    cdef int t = cnp.PyArray_TYPE(x)
    cdef cnp.ndarray y = _empty(x_.shape, t)
    cdef cnp.ndarray rstd = _empty(stat_shape, t)
    cdef cnp.ndarray mean = _empty(stat_shape, t) if centered else None
    cdef cnp.ndarray var = _empty(stat_shape, t) if centered else None
    cdef const void* wp = _ptr(w_)
    cdef const void* bp = _ptr(b_)
    cdef void* mp = NULL if mean is None else cnp.PyArray_DATA(mean)
    cdef void* vp = NULL if var is None else cnp.PyArray_DATA(var)
    if t == cnp.NPY_FLOAT32:
        with nogil:
            ferro_norm_fwd_f32(<const float*>cnp.PyArray_DATA(x), <const float*>wp,
                               <const float*>bp, <float*>cnp.PyArray_DATA(y), <float*>mp,
                               <float*>cnp.PyArray_DATA(rstd), <float*>vp, R, K, S, G, eps)
    else:
        with nogil:
            ferro_norm_fwd_f64(<const double*>cnp.PyArray_DATA(x), <const double*>wp,
                               <const double*>bp, <double*>cnp.PyArray_DATA(y), <double*>mp,
                               <double*>cnp.PyArray_DATA(rstd), <double*>vp, R, K, S, G, eps)
    return (y, mean, rstd, var) if centered else (y, rstd)


cdef tuple _rows_backward(object gy_, object x_, object w_, object mean_, object rstd_,
                          bint params, Py_ssize_t S, Py_ssize_t G, Py_ssize_t nw):
    cdef cnp.ndarray x = <cnp.ndarray>x_
    cdef Py_ssize_t R = x_.shape[0], K = x_.shape[1]
    if K == 0 and R:
        raise ShapeError(f"norm kernels: rows of no values in x of shape {x_.shape}")
    cdef int t = cnp.PyArray_TYPE(x)
    cdef cnp.ndarray gx = _empty(x_.shape, t)
    cdef cnp.ndarray gw = np.zeros(nw) if params else None
    cdef cnp.ndarray gb = np.zeros(nw) if params else None
    cdef double* gwp = NULL if gw is None else <double*>cnp.PyArray_DATA(gw)
    cdef double* gbp = NULL if gb is None else <double*>cnp.PyArray_DATA(gb)
    cdef const void* wp = _ptr(w_)
    cdef const void* mp = _ptr(mean_)
    cdef int rc
    if t == cnp.NPY_FLOAT32:
        with nogil:
            rc = ferro_norm_bwd_f32(<const float*>cnp.PyArray_DATA(<cnp.ndarray>gy_),
                                    <const float*>cnp.PyArray_DATA(x), <const float*>wp,
                                    <const float*>mp,
                                    <const float*>cnp.PyArray_DATA(<cnp.ndarray>rstd_),
                                    <float*>cnp.PyArray_DATA(gx), gwp, gbp, R, K, S, G)
    else:
        with nogil:
            rc = ferro_norm_bwd_f64(<const double*>cnp.PyArray_DATA(<cnp.ndarray>gy_),
                                    <const double*>cnp.PyArray_DATA(x), <const double*>wp,
                                    <const double*>mp,
                                    <const double*>cnp.PyArray_DATA(<cnp.ndarray>rstd_),
                                    <double*>cnp.PyArray_DATA(gx), gwp, gbp, R, K, S, G)
    if rc:
        raise MemoryError("norm kernels: no memory for the weight gradient's partial sums")
    if params:
        return gx, gw.astype(x_.dtype), gb.astype(x_.dtype)
    return gx, None, None


def layer_norm_fwd(object x, object weight, object bias, double eps):
    """Layer norm of each row of ``x`` (R, K), with optional ``weight`` and ``bias`` (K,):
    ``(y, mean, rstd, var)``, the statistics of shape (R, 1)."""
    _check_2d("layer_norm_fwd", x)
    k = x.shape[1]
    _check("layer_norm_fwd", ("x", "weight", "bias"), (x, weight, bias), (x.shape, (k,), (k,)))
    return _rows_forward(x, weight, bias, eps, 1, 1, True, (x.shape[0], 1))


def layer_norm_bwd(object gy, object x, object weight, object mean, object rstd, bint params):
    """Layer norm backward: ``(gx, gweight, gbias)`` (the last two None unless ``params``)."""
    _check_2d("layer_norm_bwd", x)
    r, k = x.shape
    _check("layer_norm_bwd", ("gy", "x", "weight", "mean", "rstd"), (gy, x, weight, mean, rstd),
           (x.shape, x.shape, (k,), (r, 1), (r, 1)))
    return _rows_backward(gy, x, weight, mean, rstd, params, 1, 1, k)


def rms_norm_fwd(object x, object weight, double eps):
    """RMS norm of each row of ``x`` (R, K), optional ``weight`` (K,): ``(y, rstd)``, rstd
    (R, 1)."""
    _check_2d("rms_norm_fwd", x)
    k = x.shape[1]
    _check("rms_norm_fwd", ("x", "weight"), (x, weight), (x.shape, (k,)))
    return _rows_forward(x, weight, None, eps, 1, 1, False, (x.shape[0], 1))


def rms_norm_bwd(object gy, object x, object weight, object rstd, bint params):
    """RMS norm backward: ``(gx, gweight)`` (gweight None unless ``params``)."""
    _check_2d("rms_norm_bwd", x)
    r, k = x.shape
    _check("rms_norm_bwd", ("gy", "x", "weight", "rstd"), (gy, x, weight, rstd),
           (x.shape, x.shape, (k,), (r, 1)))
    gx, gw, _ = _rows_backward(gy, x, weight, None, rstd, params, 1, 1, k)
    return gx, gw


def group_norm_fwd(object x, object weight, object bias, Py_ssize_t groups, double eps):
    """Group norm of ``x`` (N, C, S) in ``groups`` groups, per-channel ``weight``, ``bias``
    (C,) or None: ``(y, mean, rstd, var)``, the statistics of shape (N, groups, 1)."""
    n, c, s = _check_groups("group_norm_fwd", x, groups)
    _check("group_norm_fwd", ("x", "weight", "bias"), (x, weight, bias), (x.shape, (c,), (c,)))
    y, mean, rstd, var = _rows_forward(x.reshape(n * groups, (c // groups) * s), weight, bias,
                                       eps, s, groups, True, (n, groups, 1))
    return y.reshape(x.shape), mean, rstd, var


def group_norm_bwd(object gy, object x, object weight, object mean, object rstd,
                   Py_ssize_t groups, bint params):
    """Group norm backward: ``(gx, gweight, gbias)`` (the last two None unless ``params``)."""
    n, c, s = _check_groups("group_norm_bwd", x, groups)
    _check("group_norm_bwd", ("gy", "x", "weight", "mean", "rstd"), (gy, x, weight, mean, rstd),
           (x.shape, x.shape, (c,), (n, groups, 1), (n, groups, 1)))
    k = (c // groups) * s
    gx, gw, gb = _rows_backward(gy.reshape(n * groups, k), x.reshape(n * groups, k), weight,
                                mean.reshape(-1), rstd.reshape(-1), params, s, groups, c)
    return gx.reshape(x.shape), gw, gb


cdef int _check_2d(str who, object x) except -1:
    if type(x) is not np.ndarray or x.ndim != 2:
        raise ShapeError(f"{who}: x must be a 2-D numpy.ndarray (rows, values), got "
                         f"{getattr(x, 'shape', type(x).__name__)}")
    return 0


cdef tuple _check_groups(str who, object x, Py_ssize_t groups):
    if type(x) is not np.ndarray or x.ndim != 3:
        raise ShapeError(f"{who}: x must be a 3-D numpy.ndarray (N, C, S), got "
                         f"{getattr(x, 'shape', type(x).__name__)}")
    n, c, s = x.shape
    if groups <= 0 or c % groups:
        raise ShapeError(f"{who}: {c} channels do not split into {groups} groups")
    return n, c, s


# ---------------------------------------------------------------------------------------------
# Batch norm over (N, C, S): per channel, N runs of S contiguous values.
# ---------------------------------------------------------------------------------------------

def batch_norm_fwd(object x_, object weight, object bias, double eps):
    """Batch norm of ``x`` (N, C, S) with the batch's statistics: ``(y, mean, rstd, var)``,
    the statistics of shape (1, C, 1) (var biased, for the running statistics)."""
    if type(x_) is not np.ndarray or x_.ndim != 3:
        raise ShapeError(f"batch_norm_fwd: x must be a 3-D numpy.ndarray (N, C, S), got "
                         f"{getattr(x_, 'shape', type(x_).__name__)}")
    n, c, s = x_.shape
    _check("batch_norm_fwd", ("x", "weight", "bias"), (x_, weight, bias), (x_.shape, (c,), (c,)))
    cdef cnp.ndarray x = <cnp.ndarray>x_
    cdef int t = cnp.PyArray_TYPE(x)
    cdef cnp.ndarray y = _empty(x_.shape, t)
    cdef cnp.ndarray mean = _empty((1, c, 1), t)
    cdef cnp.ndarray rstd = _empty((1, c, 1), t)
    cdef cnp.ndarray var = _empty((1, c, 1), t)
    cdef const void* wp = _ptr(weight)
    cdef const void* bp = _ptr(bias)
    cdef Py_ssize_t N = n, C = c, S = s
    if N * S == 0 and C:
        raise ShapeError(f"batch_norm_fwd: no values per channel in x of shape {x_.shape}")
    if t == cnp.NPY_FLOAT32:
        with nogil:
            ferro_bn_fwd_f32(<const float*>cnp.PyArray_DATA(x), <const float*>wp,
                             <const float*>bp, <float*>cnp.PyArray_DATA(y),
                             <float*>cnp.PyArray_DATA(mean), <float*>cnp.PyArray_DATA(rstd),
                             <float*>cnp.PyArray_DATA(var), N, C, S, eps)
    else:
        with nogil:
            ferro_bn_fwd_f64(<const double*>cnp.PyArray_DATA(x), <const double*>wp,
                             <const double*>bp, <double*>cnp.PyArray_DATA(y),
                             <double*>cnp.PyArray_DATA(mean), <double*>cnp.PyArray_DATA(rstd),
                             <double*>cnp.PyArray_DATA(var), N, C, S, eps)
    return y, mean, rstd, var


def batch_norm_bwd(object gy, object x_, object weight, object mean, object rstd):
    """Batch norm backward (training statistics): ``(gx, gweight, gbias)``."""
    if type(x_) is not np.ndarray or x_.ndim != 3:
        raise ShapeError(f"batch_norm_bwd: x must be a 3-D numpy.ndarray (N, C, S), got "
                         f"{getattr(x_, 'shape', type(x_).__name__)}")
    n, c, s = x_.shape
    _check("batch_norm_bwd", ("gy", "x", "weight", "mean", "rstd"), (gy, x_, weight, mean, rstd),
           (x_.shape, x_.shape, (c,), (1, c, 1), (1, c, 1)))
    cdef cnp.ndarray x = <cnp.ndarray>x_
    cdef int t = cnp.PyArray_TYPE(x)
    cdef cnp.ndarray gx = _empty(x_.shape, t)
    cdef cnp.ndarray gw = np.zeros(c)
    cdef cnp.ndarray gb = np.zeros(c)
    cdef const void* wp = _ptr(weight)
    cdef Py_ssize_t N = n, C = c, S = s
    if N * S == 0 and C:
        raise ShapeError(f"batch_norm_bwd: no values per channel in x of shape {x_.shape}")
    if t == cnp.NPY_FLOAT32:
        with nogil:
            ferro_bn_bwd_f32(<const float*>cnp.PyArray_DATA(<cnp.ndarray>gy),
                             <const float*>cnp.PyArray_DATA(x), <const float*>wp,
                             <const float*>cnp.PyArray_DATA(<cnp.ndarray>mean),
                             <const float*>cnp.PyArray_DATA(<cnp.ndarray>rstd),
                             <float*>cnp.PyArray_DATA(gx), <double*>cnp.PyArray_DATA(gw),
                             <double*>cnp.PyArray_DATA(gb), N, C, S)
    else:
        with nogil:
            ferro_bn_bwd_f64(<const double*>cnp.PyArray_DATA(<cnp.ndarray>gy),
                             <const double*>cnp.PyArray_DATA(x), <const double*>wp,
                             <const double*>cnp.PyArray_DATA(<cnp.ndarray>mean),
                             <const double*>cnp.PyArray_DATA(<cnp.ndarray>rstd),
                             <double*>cnp.PyArray_DATA(gx), <double*>cnp.PyArray_DATA(gw),
                             <double*>cnp.PyArray_DATA(gb), N, C, S)
    return gx, gw.astype(x_.dtype), gb.astype(x_.dtype)
