# cython: language_level=3
"""nogil CPU loops of the convolution family: the depthwise 2-d convolution, forward and
backward, as direct loops over the kernel offsets.

A depthwise convolution (one input channel per group) is a 1-row GEMM per channel on the
im2col path, and NumPy's sum over kernel offsets (the generic path, ``ferro.ops.conv``) makes
two passes over the output per offset; these loops make one pass per output row and keep
everything in cache. They are reached only through the paired override of the ``conv`` op
(``ferro.ops.fused._depthwise_conv``), which asks :func:`accepts`/:func:`accepts_grad` first;
each kernel still checks its arrays itself before touching memory (docs/design.md, "Kernel
accept checks"), and raises a typed error naming what it refused.
"""

cimport cython
cimport numpy as cnp

from ferro._C.typedefs cimport floating_t

import numpy as np

from ferro.errors import ArgumentError, ShapeError

cnp.import_array()

FUSED_KERNELS = frozenset({"depthwise2d_fwd", "depthwise2d_bwd"})


cdef inline bint _ok(object o, int typenum) noexcept:
    # An exact ndarray of ``typenum`` (float32/float64), C-contiguous, aligned, native order.
    if type(o) is not cnp.ndarray:
        return False
    cdef cnp.ndarray a = <cnp.ndarray>o
    cdef int t = cnp.PyArray_TYPE(a)
    return (t == typenum and (t == cnp.NPY_FLOAT32 or t == cnp.NPY_FLOAT64)
            and cnp.PyArray_ISCARRAY_RO(a) and cnp.PyArray_ISNOTSWAPPED(a))


cpdef bint accepts(tuple arrays):
    """True if every array is an exact ndarray, C-contiguous, aligned, in native byte order,
    float32/float64, all of one dtype (shapes may differ): what the loops read."""
    if not arrays or type(arrays[0]) is not cnp.ndarray:
        return False
    cdef int t = cnp.PyArray_TYPE(<cnp.ndarray>arrays[0])
    for a in arrays:
        if not _ok(a, t):
            return False
    return True


cpdef bint accepts_grad(object gy, tuple arrays):
    """True if the backward loops take the upstream gradient ``gy`` with the saved ``arrays``:
    all of them as :func:`accepts` wants."""
    return accepts((gy,) + arrays)


cdef int _check(str who, tuple names, tuple arrays) except -1:
    if accepts(arrays):
        return 0
    for name, a in zip(names, arrays):
        if type(a) is not np.ndarray:
            raise ArgumentError(f"{who}: {name} must be a numpy.ndarray, got {type(a)}")
        if a.dtype != arrays[0].dtype or a.dtype.type not in (np.float32, np.float64):
            raise ArgumentError(
                f"{who}: {name} has dtype {a.dtype}; expected {arrays[0].dtype} "
                "(float32 or float64, one dtype)"
            )
    raise ArgumentError(
        f"{who}: every array must be C-contiguous, aligned and in native byte order; got "
        + ", ".join(f"{n} strides {a.strides}" for n, a in zip(names, arrays))
    )


cdef inline Py_ssize_t _first(Py_ssize_t a, Py_ssize_t s) noexcept nogil:
    # The smallest o >= 0 with o * s >= a.
    return 0 if a <= 0 else (a + s - 1) // s


cdef inline Py_ssize_t _stop(Py_ssize_t a, Py_ssize_t size, Py_ssize_t s,
                             Py_ssize_t n) noexcept nogil:
    # One past the largest o < n with o * s - a <= size - 1 (0 if none).
    cdef Py_ssize_t last = size - 1 + a
    if last < 0:
        return 0
    return min(n, last // s + 1)


@cython.boundscheck(False)
@cython.wraparound(False)
@cython.cdivision(True)
cdef void _fwd(const floating_t* x, const floating_t* w, floating_t* y,
               Py_ssize_t n, Py_ssize_t c, Py_ssize_t m, Py_ssize_t h, Py_ssize_t wd,
               Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t oh, Py_ssize_t ow,
               Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t ph, Py_ssize_t pw,
               Py_ssize_t dh, Py_ssize_t dw) noexcept nogil:
    cdef Py_ssize_t b, co, oy, ox, ki, kj, iy, off, o0, o1
    cdef const floating_t* xp
    cdef const floating_t* xrow
    cdef floating_t* yrow
    cdef floating_t wv
    for b in range(n):
        for co in range(c * m):
            xp = x + (b * c + co // m) * h * wd
            for oy in range(oh):
                yrow = y + ((b * c * m + co) * oh + oy) * ow
                for ox in range(ow):
                    yrow[ox] = 0
                for ki in range(kh):
                    iy = oy * sh - ph + ki * dh
                    if iy < 0 or iy >= h:
                        continue
                    xrow = xp + iy * wd
                    for kj in range(kw):
                        wv = w[(co * kh + ki) * kw + kj]
                        off = pw - kj * dw
                        o0 = _first(off, sw)
                        o1 = _stop(off, wd, sw, ow)
                        if sw == 1:
                            for ox in range(o0, o1):
                                yrow[ox] += wv * xrow[ox - off]
                        else:
                            for ox in range(o0, o1):
                                yrow[ox] += wv * xrow[ox * sw - off]


@cython.boundscheck(False)
@cython.wraparound(False)
@cython.cdivision(True)
cdef void _bwd_x(const floating_t* gy, const floating_t* w, floating_t* gx,
                 Py_ssize_t n, Py_ssize_t c, Py_ssize_t m, Py_ssize_t h, Py_ssize_t wd,
                 Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t oh, Py_ssize_t ow,
                 Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t ph, Py_ssize_t pw,
                 Py_ssize_t dh, Py_ssize_t dw) noexcept nogil:
    # gx (zeroed) += each output's gradient times the weight, at the inputs it read.
    cdef Py_ssize_t b, co, oy, ox, ki, kj, iy, off, o0, o1
    cdef const floating_t* grow
    cdef floating_t* gxrow
    cdef floating_t wv
    for b in range(n):
        for co in range(c * m):
            for oy in range(oh):
                grow = gy + ((b * c * m + co) * oh + oy) * ow
                for ki in range(kh):
                    iy = oy * sh - ph + ki * dh
                    if iy < 0 or iy >= h:
                        continue
                    gxrow = gx + ((b * c + co // m) * h + iy) * wd
                    for kj in range(kw):
                        wv = w[(co * kh + ki) * kw + kj]
                        off = pw - kj * dw
                        o0 = _first(off, sw)
                        o1 = _stop(off, wd, sw, ow)
                        if sw == 1:
                            for ox in range(o0, o1):
                                gxrow[ox - off] += wv * grow[ox]
                        else:
                            for ox in range(o0, o1):
                                gxrow[ox * sw - off] += wv * grow[ox]


@cython.boundscheck(False)
@cython.wraparound(False)
@cython.cdivision(True)
cdef void _bwd_w(const floating_t* gy, const floating_t* x, floating_t* gw, floating_t* acc,
                 Py_ssize_t n, Py_ssize_t c, Py_ssize_t m, Py_ssize_t h, Py_ssize_t wd,
                 Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t oh, Py_ssize_t ow,
                 Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t ph, Py_ssize_t pw,
                 Py_ssize_t dh, Py_ssize_t dw) noexcept nogil:
    # Per output channel, one row of partial products per kernel offset (``acc``, kh*kw*ow)
    # summed elementwise over the batch and the output rows (a loop the compiler vectorizes),
    # then each row reduced once, in double.
    cdef Py_ssize_t b, co, oy, ox, ki, kj, iy, off, o0, o1, k
    cdef const floating_t* grow
    cdef const floating_t* xrow
    cdef floating_t* row
    cdef double total
    for co in range(c * m):
        for k in range(kh * kw * ow):
            acc[k] = 0
        for b in range(n):
            for oy in range(oh):
                grow = gy + ((b * c * m + co) * oh + oy) * ow
                for ki in range(kh):
                    iy = oy * sh - ph + ki * dh
                    if iy < 0 or iy >= h:
                        continue
                    xrow = x + ((b * c + co // m) * h + iy) * wd
                    for kj in range(kw):
                        row = acc + (ki * kw + kj) * ow
                        off = pw - kj * dw
                        o0 = _first(off, sw)
                        o1 = _stop(off, wd, sw, ow)
                        if sw == 1:
                            for ox in range(o0, o1):
                                row[ox] += grow[ox] * xrow[ox - off]
                        else:
                            for ox in range(o0, o1):
                                row[ox] += grow[ox] * xrow[ox * sw - off]
        for k in range(kh * kw):
            total = 0
            for ox in range(ow):
                total += acc[k * ow + ox]
            gw[co * kh * kw + k] = <floating_t>total


def _geometry(str who, object x, object w, tuple stride, tuple pads, tuple dilation,
              tuple out):
    if x.ndim != 4 or w.ndim != 4 or w.shape[1] != 1 or w.shape[0] % x.shape[1]:
        raise ShapeError(
            f"{who}: expected x (N, C, H, W) and a depthwise weight (C * m, 1, kH, kW), got "
            f"{x.shape} and {w.shape}"
        )
    sh, sw = stride
    (ph, ph2), (pw, pw2) = pads
    dh, dw = dilation
    oh, ow = out
    if (min(sh, sw, dh, dw) < 1 or min(ph, pw) < 0 or ph != ph2 or pw != pw2
            or oh != (x.shape[2] + 2 * ph - dh * (w.shape[2] - 1) - 1) // sh + 1
            or ow != (x.shape[3] + 2 * pw - dw * (w.shape[3] - 1) - 1) // sw + 1
            or min(oh, ow) < 1):
        raise ArgumentError(
            f"{who}: inconsistent geometry stride={stride} pads={pads} dilation={dilation} "
            f"out={out} for x {x.shape} and weight {w.shape}"
        )
    return sh, sw, ph, pw, dh, dw, oh, ow


def depthwise2d_fwd(object x_, object w_, tuple stride, tuple pads, tuple dilation, tuple out):
    """Depthwise 2-d convolution ``y`` ``(N, C*m, oH, oW)`` of ``x`` ``(N, C, H, W)`` by ``w``
    ``(C*m, 1, kH, kW)``; ``pads`` ``((ph, ph), (pw, pw))``, ``out`` ``(oH, oW)``."""
    _check("depthwise2d_fwd", ("x", "weight"), (x_, w_))
    cdef cnp.ndarray x = <cnp.ndarray>x_, w = <cnp.ndarray>w_
    sh, sw, ph, pw, dh, dw, oh, ow = _geometry("depthwise2d_fwd", x, w, stride, pads, dilation,
                                               out)
    cdef Py_ssize_t n = x.shape[0], c = x.shape[1], m = w.shape[0] // x.shape[1]
    cdef Py_ssize_t h = x.shape[2], wd = x.shape[3], kh = w.shape[2], kw = w.shape[3]
    cdef Py_ssize_t a0 = sh, a1 = sw, a2 = ph, a3 = pw, a4 = dh, a5 = dw, a6 = oh, a7 = ow
    cdef cnp.ndarray y = np.empty((n, c * m, oh, ow), dtype=x.dtype)
    if x.dtype == np.float32:
        with nogil:
            _fwd(<const float*>cnp.PyArray_DATA(x), <const float*>cnp.PyArray_DATA(w),
                 <float*>cnp.PyArray_DATA(y), n, c, m, h, wd, kh, kw, a6, a7, a0, a1, a2, a3,
                 a4, a5)
    else:
        with nogil:
            _fwd(<const double*>cnp.PyArray_DATA(x), <const double*>cnp.PyArray_DATA(w),
                 <double*>cnp.PyArray_DATA(y), n, c, m, h, wd, kh, kw, a6, a7, a0, a1, a2, a3,
                 a4, a5)
    return y


def depthwise2d_bwd(object gy_, object x_, object w_, tuple stride, tuple pads, tuple dilation,
                    bint need_x, bint need_w):
    """``(gx, gw)`` of :func:`depthwise2d_fwd` from ``gy`` (None where not needed)."""
    _check("depthwise2d_bwd", ("gy", "x", "weight"), (gy_, x_, w_))
    cdef cnp.ndarray gy = <cnp.ndarray>gy_, x = <cnp.ndarray>x_, w = <cnp.ndarray>w_
    out = tuple(gy_.shape[2:])
    sh, sw, ph, pw, dh, dw, oh, ow = _geometry("depthwise2d_bwd", x, w, stride, pads, dilation,
                                               out)
    if gy.shape[0] != x.shape[0] or gy.shape[1] != w.shape[0]:
        raise ShapeError(
            f"depthwise2d_bwd: gy {gy_.shape} does not fit x {x_.shape}, w {w_.shape}"
        )
    cdef Py_ssize_t n = x.shape[0], c = x.shape[1], m = w.shape[0] // x.shape[1]
    cdef Py_ssize_t h = x.shape[2], wd = x.shape[3], kh = w.shape[2], kw = w.shape[3]
    cdef Py_ssize_t a0 = sh, a1 = sw, a2 = ph, a3 = pw, a4 = dh, a5 = dw, a6 = oh, a7 = ow
    # Outputs C-contiguous as x and w are (gx zeroed: it is scattered into); one element where
    # not wanted.
    cdef cnp.ndarray gx = np.zeros_like(x) if need_x else np.zeros(1, dtype=x.dtype)
    cdef cnp.ndarray gw = np.empty_like(w) if need_w else np.zeros(1, dtype=x.dtype)
    cdef cnp.ndarray acc = np.empty(kh * kw * ow if need_w else 1, dtype=x.dtype)
    if x.dtype == np.float32:
        with nogil:
            if need_x:
                _bwd_x(<const float*>cnp.PyArray_DATA(gy), <const float*>cnp.PyArray_DATA(w),
                       <float*>cnp.PyArray_DATA(gx), n, c, m, h, wd, kh, kw, a6, a7, a0, a1,
                       a2, a3, a4, a5)
            if need_w:
                _bwd_w(<const float*>cnp.PyArray_DATA(gy), <const float*>cnp.PyArray_DATA(x),
                       <float*>cnp.PyArray_DATA(gw), <float*>cnp.PyArray_DATA(acc), n, c, m,
                       h, wd, kh, kw, a6, a7, a0, a1, a2, a3, a4, a5)
    else:
        with nogil:
            if need_x:
                _bwd_x(<const double*>cnp.PyArray_DATA(gy), <const double*>cnp.PyArray_DATA(w),
                       <double*>cnp.PyArray_DATA(gx), n, c, m, h, wd, kh, kw, a6, a7, a0, a1,
                       a2, a3, a4, a5)
            if need_w:
                _bwd_w(<const double*>cnp.PyArray_DATA(gy), <const double*>cnp.PyArray_DATA(x),
                       <double*>cnp.PyArray_DATA(gw), <double*>cnp.PyArray_DATA(acc), n, c, m,
                       h, wd, kh, kw, a6, a7, a0, a1, a2, a3, a4, a5)
    return (gx if need_x else None), (gw if need_w else None)
