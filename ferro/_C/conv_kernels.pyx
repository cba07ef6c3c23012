# cython: language_level=3
"""nogil CPU loops of the convolution family: the depthwise 2-d convolution, forward and
backward, as direct loops over the kernel offsets; and the GEMM path's column builders,
``im2col``/``col2im`` for 1 to 3 spatial dims, which pad on the fly (no padded copy) and copy
or add whole output rows.

A depthwise convolution (one input channel per group) is a 1-row GEMM per channel on the
im2col path, and NumPy's sum over kernel offsets (the generic path, ``ferro.ops.conv``) makes
two passes over the output per offset; these loops make one pass per output row and keep
everything in cache. They are reached only through the paired overrides of the ``conv`` and
``conv_transpose`` ops (``ferro.ops.fused._conv``), which ask :func:`accepts` first;
each kernel still checks its arrays itself before touching memory (docs/design.md, "Kernel
accept checks"), and raises a typed error naming what it refused.
"""

cimport cython
cimport numpy as cnp
from cython.parallel cimport prange, threadid
from openmp cimport omp_get_max_threads

from ferro._C.typedefs cimport floating_t

import numpy as np

from ferro.errors import ArgumentError, ShapeError

cnp.import_array()

# The column and Winograd loops split over channels (times the batch) with OpenMP from this many
# elements on: below, waking the (passively waiting) team costs more than half the loop
# (cpu_kernels.pyx's PARALLEL_MIN is the memory-bound adds' threshold; these loops do a few
# operations per element). Each thread gets its own slice of the scratch rows (``_team``).
cdef Py_ssize_t PARALLEL_MIN = 1 << 18


cdef inline int _team(Py_ssize_t work) noexcept:
    return 1 if work < PARALLEL_MIN else omp_get_max_threads()

FUSED_KERNELS = frozenset(
    {
        "depthwise2d_fwd",
        "depthwise2d_bwd",
        "im2col",
        "col2im",
        "winograd_input",
        "winograd_output",
        "winograd_output_grad",
        "winograd_input_grad",
        "winograd1d_gather",
        "winograd1d_scatter",
        "winograd2d_gather",
        "winograd2d_scatter",
        "winograd3d_gather",
        "winograd3d_scatter",
        "space_to_depth2d",
        "depth_to_space2d",
        "swap_last2",
    }
)


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


# The depthwise loops, one plane at a time; the drivers below split planes over the OpenMP team
# so that no two threads write the same element and each element's sum keeps its serial order
# (the results are the same bits at any thread count).
@cython.boundscheck(False)
@cython.wraparound(False)
@cython.cdivision(True)
cdef inline void _fwd_plane(const floating_t* x, const floating_t* w, floating_t* y,
                            Py_ssize_t b, Py_ssize_t co, Py_ssize_t c, Py_ssize_t m,
                            Py_ssize_t h, Py_ssize_t wd, Py_ssize_t kh, Py_ssize_t kw,
                            Py_ssize_t oh, Py_ssize_t ow, Py_ssize_t sh, Py_ssize_t sw,
                            Py_ssize_t ph, Py_ssize_t pw, Py_ssize_t dh,
                            Py_ssize_t dw) noexcept nogil:
    cdef Py_ssize_t oy, ox, ki, kj, iy, off, o0, o1
    cdef const floating_t* xp = x + (b * c + co // m) * h * wd
    cdef const floating_t* xrow
    cdef floating_t* yrow
    cdef floating_t wv
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


cdef void _fwd(const floating_t* x, const floating_t* w, floating_t* y,
               Py_ssize_t n, Py_ssize_t c, Py_ssize_t m, Py_ssize_t h, Py_ssize_t wd,
               Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t oh, Py_ssize_t ow,
               Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t ph, Py_ssize_t pw,
               Py_ssize_t dh, Py_ssize_t dw, int nt) noexcept nogil:
    # Each (sample, output channel) plane of y by one thread.
    cdef Py_ssize_t p
    for p in prange(n * c * m, schedule="static", num_threads=nt):
        _fwd_plane(x, w, y, p // (c * m), p % (c * m), c, m, h, wd, kh, kw, oh, ow, sh, sw,
                   ph, pw, dh, dw)


@cython.boundscheck(False)
@cython.wraparound(False)
@cython.cdivision(True)
cdef inline void _bwd_x_plane(const floating_t* gy, const floating_t* w, floating_t* gx,
                              Py_ssize_t b, Py_ssize_t co, Py_ssize_t c, Py_ssize_t m,
                              Py_ssize_t h, Py_ssize_t wd, Py_ssize_t kh, Py_ssize_t kw,
                              Py_ssize_t oh, Py_ssize_t ow, Py_ssize_t sh, Py_ssize_t sw,
                              Py_ssize_t ph, Py_ssize_t pw, Py_ssize_t dh,
                              Py_ssize_t dw) noexcept nogil:
    # gx (zeroed) += the output plane's gradient times the weight, at the inputs it read.
    cdef Py_ssize_t oy, ox, ki, kj, iy, off, o0, o1
    cdef const floating_t* grow
    cdef floating_t* gxrow
    cdef floating_t wv
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


cdef void _bwd_x(const floating_t* gy, const floating_t* w, floating_t* gx,
                 Py_ssize_t n, Py_ssize_t c, Py_ssize_t m, Py_ssize_t h, Py_ssize_t wd,
                 Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t oh, Py_ssize_t ow,
                 Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t ph, Py_ssize_t pw,
                 Py_ssize_t dh, Py_ssize_t dw, int nt) noexcept nogil:
    # Each (sample, input channel) plane of gx by one thread, from its m output channels in
    # ascending order (as the serial loop adds them).
    cdef Py_ssize_t p, j
    for p in prange(n * c, schedule="static", num_threads=nt):
        for j in range(m):
            _bwd_x_plane(gy, w, gx, p // c, (p % c) * m + j, c, m, h, wd, kh, kw, oh, ow, sh,
                         sw, ph, pw, dh, dw)


@cython.boundscheck(False)
@cython.wraparound(False)
@cython.cdivision(True)
cdef inline void _bwd_w_channel(const floating_t* gy, const floating_t* x, floating_t* gw,
                                floating_t* acc, Py_ssize_t co, Py_ssize_t n, Py_ssize_t c,
                                Py_ssize_t m, Py_ssize_t h, Py_ssize_t wd, Py_ssize_t kh,
                                Py_ssize_t kw, Py_ssize_t oh, Py_ssize_t ow, Py_ssize_t sh,
                                Py_ssize_t sw, Py_ssize_t ph, Py_ssize_t pw, Py_ssize_t dh,
                                Py_ssize_t dw) noexcept nogil:
    # One output channel: a row of partial products per kernel offset (``acc``, kh*kw*ow)
    # summed elementwise over the batch and the output rows (a loop the compiler vectorizes),
    # then each row reduced once, in double.
    cdef Py_ssize_t b, oy, ox, ki, kj, iy, off, o0, o1, k
    cdef const floating_t* grow
    cdef const floating_t* xrow
    cdef floating_t* row
    cdef double total
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


cdef void _bwd_w(const floating_t* gy, const floating_t* x, floating_t* gw, floating_t* acc,
                 Py_ssize_t n, Py_ssize_t c, Py_ssize_t m, Py_ssize_t h, Py_ssize_t wd,
                 Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t oh, Py_ssize_t ow,
                 Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t ph, Py_ssize_t pw,
                 Py_ssize_t dh, Py_ssize_t dw, int nt) noexcept nogil:
    # Each output channel by one thread, on its own rows of ``acc`` (nt * kh*kw*ow).
    cdef Py_ssize_t co
    for co in prange(c * m, schedule="static", num_threads=nt):
        _bwd_w_channel(gy, x, gw, acc + threadid() * kh * kw * ow, co, n, c, m, h, wd, kh, kw,
                       oh, ow, sh, sw, ph, pw, dh, dw)


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
    cdef int nt = _team(n * c * m * oh * ow * kh * kw)
    if x.dtype == np.float32:
        with nogil:
            _fwd(<const float*>cnp.PyArray_DATA(x), <const float*>cnp.PyArray_DATA(w),
                 <float*>cnp.PyArray_DATA(y), n, c, m, h, wd, kh, kw, a6, a7, a0, a1, a2, a3,
                 a4, a5, nt)
    else:
        with nogil:
            _fwd(<const double*>cnp.PyArray_DATA(x), <const double*>cnp.PyArray_DATA(w),
                 <double*>cnp.PyArray_DATA(y), n, c, m, h, wd, kh, kw, a6, a7, a0, a1, a2, a3,
                 a4, a5, nt)
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
    cdef int nt = _team(n * c * m * oh * ow * kh * kw)
    cdef cnp.ndarray acc = np.empty(nt * kh * kw * ow if need_w else 1, dtype=x.dtype)
    if x.dtype == np.float32:
        with nogil:
            if need_x:
                _bwd_x(<const float*>cnp.PyArray_DATA(gy), <const float*>cnp.PyArray_DATA(w),
                       <float*>cnp.PyArray_DATA(gx), n, c, m, h, wd, kh, kw, a6, a7, a0, a1,
                       a2, a3, a4, a5, nt)
            if need_w:
                _bwd_w(<const float*>cnp.PyArray_DATA(gy), <const float*>cnp.PyArray_DATA(x),
                       <float*>cnp.PyArray_DATA(gw), <float*>cnp.PyArray_DATA(acc), n, c, m,
                       h, wd, kh, kw, a6, a7, a0, a1, a2, a3, a4, a5, nt)
    else:
        with nogil:
            if need_x:
                _bwd_x(<const double*>cnp.PyArray_DATA(gy), <const double*>cnp.PyArray_DATA(w),
                       <double*>cnp.PyArray_DATA(gx), n, c, m, h, wd, kh, kw, a6, a7, a0, a1,
                       a2, a3, a4, a5, nt)
            if need_w:
                _bwd_w(<const double*>cnp.PyArray_DATA(gy), <const double*>cnp.PyArray_DATA(x),
                       <double*>cnp.PyArray_DATA(gw), <double*>cnp.PyArray_DATA(acc), n, c, m,
                       h, wd, kh, kw, a6, a7, a0, a1, a2, a3, a4, a5, nt)
    return (gx if need_x else None), (gw if need_w else None)


# --- im2col / col2im of the GEMM path (1 to 3 spatial dims, as 3) ----------------------------


cdef extern from "conv_kernels.h" nogil:
    void ferro_im2col_f32(float*, float*, Py_ssize_t, Py_ssize_t, Py_ssize_t, const Py_ssize_t*,
                          int)
    void ferro_im2col_f64(double*, double*, Py_ssize_t, Py_ssize_t, Py_ssize_t,
                          const Py_ssize_t*, int)


cdef void _im2col(floating_t* img, floating_t* col, Py_ssize_t nb, Py_ssize_t c,
                  const Py_ssize_t* g, bint add, int nt) noexcept nogil:
    # The columns (C, k0, k1, k2, nb, o0, o1, o2) of img (nb, C, s0, s1, s2) zero-padded by lo
    # before each dim (add=False: col written, img only read), or their adjoint (add=True: img
    # set to the sums of col's entries); g as _columns_geometry fills it. Split over
    # the channels (each writes its own columns and its own image planes; the loops are C,
    # conv_kernels.h).
    cdef Py_ssize_t ci, per = g[3] * g[4] * g[5] * nb * g[6] * g[7] * g[8]
    for ci in prange(c, schedule="static", num_threads=nt):
        if floating_t is float:
            ferro_im2col_f32(img, col + ci * per, nb, c, ci, g, add)
        else:
            ferro_im2col_f64(img, col + ci * per, nb, c, ci, g, add)


cdef int _columns_geometry(str who, cnp.ndarray x, cnp.ndarray col, tuple stride, tuple pads,
                           tuple dilation, Py_ssize_t* g) except -1:
    # g: size[3], kernel[3], out[3], stride[3], lo[3], dilation[3], nb, c (20 entries); 1-3
    # spatial dims are right-aligned into 3.
    cdef int nd = x.ndim - 2, i, j
    if (nd < 1 or nd > 3 or col.ndim != 2 * nd + 2 or len(stride) != nd or len(pads) != nd
            or len(dilation) != nd):
        raise ShapeError(
            f"{who}: expected x (N, C, *size) with 1 to 3 spatial dims and columns "
            f"(C, *kernel, N, *out), got {_shape(x)} and {_shape(col)}"
        )
    if col.shape[0] != x.shape[1] or col.shape[nd + 1] != x.shape[0]:
        raise ShapeError(
            f"{who}: columns {_shape(col)} do not fit x {_shape(x)} (C and N must agree)"
        )
    for i in range(3):
        j = i - (3 - nd)
        if j < 0:
            g[i] = g[3 + i] = g[6 + i] = g[9 + i] = g[15 + i] = 1
            g[12 + i] = 0
            continue
        g[i] = x.shape[2 + j]
        g[3 + i] = col.shape[1 + j]
        g[6 + i] = col.shape[nd + 2 + j]
        g[9 + i], g[12 + i], g[15 + i] = stride[j], pads[j][0], dilation[j]
        if g[9 + i] < 1 or g[15 + i] < 1:
            raise ArgumentError(
                f"{who}: stride {stride} and dilation {dilation} must be positive"
            )
    g[18], g[19] = x.shape[0], x.shape[1]
    return 0


cdef tuple _shape(cnp.ndarray a):
    return tuple(a.shape[i] for i in range(a.ndim))


cdef int _check_io(str who, tuple names, object src, object dst) except -1:
    # src read, dst written: both as accepts() wants, dst writeable too.
    _check(who, names, (src, dst))
    if not dst.flags.writeable:
        raise ArgumentError(f"{who}: {names[1]} is read-only")
    return 0


cdef object _columns_call(str who, cnp.ndarray img, cnp.ndarray col, tuple stride, tuple pads,
                          tuple dilation, bint add):
    cdef Py_ssize_t g[20]
    _columns_geometry(who, img, col, stride, pads, dilation, g)
    cdef int nt = _team(col.size)
    if cnp.PyArray_TYPE(img) == cnp.NPY_FLOAT32:
        with nogil:
            _im2col(<float*>cnp.PyArray_DATA(img), <float*>cnp.PyArray_DATA(col), g[18], g[19],
                    g, add, nt)
    else:
        with nogil:
            _im2col(<double*>cnp.PyArray_DATA(img), <double*>cnp.PyArray_DATA(col), g[18],
                    g[19], g, add, nt)
    return img if add else col


def im2col(x_, tuple stride, tuple pads, tuple dilation, col_):
    """Write the columns of ``x`` ``(N, C, *size)`` (1 to 3 spatial dims), zero-padded by each
    ``pads[i][0]`` before dim ``i``, into ``col`` ``(C, *kernel, N, *out)``: ``col[c, k, n, o]``
    is ``x[n, c, o*stride - lo + k*dilation]`` (0 in the padding). Returns ``col``."""
    _check_io("im2col", ("x", "col"), x_, col_)
    return _columns_call("im2col", x_, col_, stride, pads, dilation, False)


def col2im(col_, tuple stride, tuple pads, tuple dilation, gx_):
    """The adjoint of :func:`im2col`: ``gx`` ``(N, C, *size)`` set to the sum of the columns'
    ``col`` ``(C, *kernel, N, *out)`` entries at the input positions they were read from.
    Returns ``gx``."""
    _check_io("col2im", ("col", "gx"), col_, gx_)
    return _columns_call("col2im", gx_, col_, stride, pads, dilation, True)


# --- Winograd F(2x2, 3x3) and F(2x2x2, 3x3x3) transforms (stride 1, undilated, 3x3(x3)) ---
# y = Aᵀ [(G w Gᵀ) ⊙ (Bᵀ d B)] A per 2x2 output tile, d the tile's 4x4 input window (G, on the
# weight, is applied in NumPy). The 16 products per tile are 16 GEMMs over the channels, 2.25x
# fewer multiplies than im2col's 36. In 3-d (64 products per 2x2x2 tile) the transforms are
# separable: per (channel, sample, depth tile) the depth's 1-d transform runs on whole planes,
# and the 2-d one on each of the 4 resulting planes. The 64 products are ordered (i, j, a): the
# 2-d transform's 16 (height, width), then the depth's 4; the tiles (tD, N, tH, tW), of depth
# tiles [t0, t0 + nd) only (a block: docs/conv.md). The loops are C (conv_kernels.h); these
# split them over channels x batch (x depth tiles), each thread with its own scratch.

cdef extern from "conv_kernels.h" nogil:
    void ferro_wino_in2_f32(const float*, float*, float*, Py_ssize_t, Py_ssize_t, Py_ssize_t,
                            Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t)
    void ferro_wino_in2_f64(const double*, double*, double*, Py_ssize_t, Py_ssize_t, Py_ssize_t,
                            Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t)
    void ferro_wino_out2_f32(const float*, float*, float*, Py_ssize_t, Py_ssize_t, Py_ssize_t,
                             Py_ssize_t, Py_ssize_t)
    void ferro_wino_out2_f64(const double*, double*, double*, Py_ssize_t, Py_ssize_t,
                             Py_ssize_t, Py_ssize_t, Py_ssize_t)
    void ferro_wino_out_grad2_f32(const float*, float*, float*, Py_ssize_t, Py_ssize_t,
                                  Py_ssize_t, Py_ssize_t, Py_ssize_t)
    void ferro_wino_out_grad2_f64(const double*, double*, double*, Py_ssize_t, Py_ssize_t,
                                  Py_ssize_t, Py_ssize_t, Py_ssize_t)
    void ferro_wino_in3_f32(const float*, Py_ssize_t, Py_ssize_t, float*, Py_ssize_t, float*,
                            Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t,
                            Py_ssize_t)
    void ferro_wino_in3_f64(const double*, Py_ssize_t, Py_ssize_t, double*, Py_ssize_t, double*,
                            Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t,
                            Py_ssize_t)
    void ferro_wino_out3_f32(const float*, Py_ssize_t, float*, int, float*, Py_ssize_t,
                             Py_ssize_t, Py_ssize_t, Py_ssize_t)
    void ferro_wino_out3_f64(const double*, Py_ssize_t, double*, int, double*, Py_ssize_t,
                             Py_ssize_t, Py_ssize_t, Py_ssize_t)
    void ferro_wino_out_grad3_f32(const float*, int, float*, Py_ssize_t, float*, Py_ssize_t,
                                  Py_ssize_t, Py_ssize_t, Py_ssize_t)
    void ferro_wino_out_grad3_f64(const double*, int, double*, Py_ssize_t, double*, Py_ssize_t,
                                  Py_ssize_t, Py_ssize_t, Py_ssize_t)
    void ferro_wino_in_grad3_f32(const float*, Py_ssize_t, Py_ssize_t, float*, Py_ssize_t,
                                 Py_ssize_t, Py_ssize_t, Py_ssize_t, float*, Py_ssize_t,
                                 Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t)
    void ferro_wino_in_grad3_f64(const double*, Py_ssize_t, Py_ssize_t, double*, Py_ssize_t,
                                 Py_ssize_t, Py_ssize_t, Py_ssize_t, double*, Py_ssize_t,
                                 Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t)


@cython.cdivision(True)
cdef void _wino2(int which, const floating_t* src, floating_t* dst, floating_t* rows,
                 Py_ssize_t nb, Py_ssize_t c, Py_ssize_t h, Py_ssize_t wd, Py_ssize_t ph,
                 Py_ssize_t pw, Py_ssize_t th, Py_ssize_t tw, Py_ssize_t scratch,
                 int nt) noexcept nogil:
    # The 2-d transforms over channels x batch: 0 input (src x (nb, c, h, wd), dst v), 1 output
    # (src m, dst y (nb, c, h, wd)), 2 output gradient (src gy (nb, c, h, wd), dst dm); the
    # tiles of (channel ci, sample b) at (ci * nb + b) * th * tw of each of the 16 planes.
    cdef Py_ssize_t cb, img, tile, plane = c * nb * th * tw
    cdef floating_t* t
    for cb in prange(c * nb, schedule="static", num_threads=nt):
        t = rows + threadid() * scratch
        img = ((cb % nb) * c + cb // nb) * h * wd
        tile = cb * th * tw
        if floating_t is float:
            if which == 0:
                ferro_wino_in2_f32(src + img, dst + tile, t, h, wd, ph, pw, th, tw, plane)
            elif which == 1:
                ferro_wino_out2_f32(src + tile, dst + img, t, h, wd, th, tw, plane)
            else:
                ferro_wino_out_grad2_f32(src + img, dst + tile, t, h, wd, th, tw, plane)
        else:
            if which == 0:
                ferro_wino_in2_f64(src + img, dst + tile, t, h, wd, ph, pw, th, tw, plane)
            elif which == 1:
                ferro_wino_out2_f64(src + tile, dst + img, t, h, wd, th, tw, plane)
            else:
                ferro_wino_out_grad2_f64(src + img, dst + tile, t, h, wd, th, tw, plane)


@cython.cdivision(True)
cdef void _wino3(int which, const floating_t* src, floating_t* dst, floating_t* rows,
                 Py_ssize_t nb, Py_ssize_t c, Py_ssize_t dd, Py_ssize_t h, Py_ssize_t wd,
                 Py_ssize_t pd, Py_ssize_t ph, Py_ssize_t pw, Py_ssize_t od, Py_ssize_t th,
                 Py_ssize_t tw, Py_ssize_t t0, Py_ssize_t nd, Py_ssize_t scratch,
                 int nt) noexcept nogil:
    # The 3-d transforms over channels x depth tiles x batch (which as for _wino2, 3 the input
    # transform's adjoint, src v, dst gx; the image (nb, c, dd, h, wd) has dd = od planes for the
    # output and its gradient). The adjoint's tiles overlap: one thread adds a volume's, in order.
    cdef Py_ssize_t it, ci, tz, b, img, tile, tiles = th * tw, plane = c * nd * nb * th * tw
    cdef Py_ssize_t span = 1 if which == 3 else nd
    cdef floating_t* t
    for it in prange(c * span * nb, schedule="static", num_threads=nt):
        ci = it // (span * nb)
        tz = (it // nb) % span
        b = it % nb
        t = rows + threadid() * scratch
        img = (b * c + ci) * dd * h * wd
        tile = (ci * nd * nb + tz * nb + b) * tiles
        if floating_t is float:
            if which == 3:
                ferro_wino_in_grad3_f32(src + tile, nb * tiles, plane, dst + img, dd, pd, t0,
                                        t0 + nd, t, h, wd, ph, pw, th, tw)
            elif which == 0:
                ferro_wino_in3_f32(src + img, dd, 2 * (t0 + tz) - pd, dst + tile, plane, t, h,
                                   wd, ph, pw, th, tw)
            elif which == 1:
                ferro_wino_out3_f32(src + tile, plane, dst + img + 2 * (t0 + tz) * h * wd,
                                    2 * (t0 + tz) + 1 < od, t, h, wd, th, tw)
            else:
                ferro_wino_out_grad3_f32(src + img + 2 * (t0 + tz) * h * wd,
                                         2 * (t0 + tz) + 1 < od, dst + tile, plane, t, h, wd,
                                         th, tw)
        else:
            if which == 3:
                ferro_wino_in_grad3_f64(src + tile, nb * tiles, plane, dst + img, dd, pd, t0,
                                        t0 + nd, t, h, wd, ph, pw, th, tw)
            elif which == 0:
                ferro_wino_in3_f64(src + img, dd, 2 * (t0 + tz) - pd, dst + tile, plane, t, h,
                                   wd, ph, pw, th, tw)
            elif which == 1:
                ferro_wino_out3_f64(src + tile, plane, dst + img + 2 * (t0 + tz) * h * wd,
                                    2 * (t0 + tz) + 1 < od, t, h, wd, th, tw)
            else:
                ferro_wino_out_grad3_f64(src + img + 2 * (t0 + tz) * h * wd,
                                         2 * (t0 + tz) + 1 < od, dst + tile, plane, t, h, wd,
                                         th, tw)


cdef tuple _depth_block(str who, object depth, Py_ssize_t td):
    # The depth tiles [t0, t1) of a 3-d transform (all td by default).
    t0, t1 = (0, td) if depth is None else depth
    if not 0 <= t0 < t1 <= td:
        raise ArgumentError(f"{who}: depth tiles {depth} not within [0, {td})")
    return t0, t1 - t0


def _winograd(str who, int which, src_, dst_, tuple pads, object depth):
    # A 2-d or 3-d transform (which: 0 input, 1 output, 2 output gradient, 3 the input's
    # adjoint, 3-d only) between an image (N, C, *size) and its tiles (4**nd, C, tiles);
    # _check_io has checked both arrays.
    cdef cnp.ndarray src = <cnp.ndarray>src_, dst = <cnp.ndarray>dst_
    img, buf = (dst_, src_) if which in (1, 3) else (src_, dst_)
    cdef int nd = img.ndim - 2
    if (nd not in (2, 3) or buf.ndim != 3 or buf.shape[:2] != (1 << 2 * nd, img.shape[1])
            or which == 3 and nd != 3):
        raise ShapeError(
            f"{who}: expected an image (N, C, H, W) or (N, C, D, H, W) and its tiles (16 or 64, "
            f"C, tiles), got {img.shape} and {buf.shape}"
        )
    size = img.shape[2:]
    if which in (0, 3) and (len(pads) != nd or min(p for pair in pads for p in pair) < 0):
        raise ShapeError(f"{who}: pads {pads} are not {nd} non-negative (lo, hi) pairs")
    out = tuple(s + lo + hi - 2 for s, (lo, hi) in zip(size, pads)) if which in (0, 3) else size
    tiles = [(s + 1) // 2 for s in out]
    t0, blk = _depth_block(who, depth, tiles[0]) if nd == 3 else (0, 1)
    if min(out) < 1 or buf.shape[2] != blk * img.shape[0] * tiles[nd - 2] * tiles[nd - 1]:
        raise ShapeError(
            f"{who}: {buf.shape} does not hold the tiles of {img.shape} (pads {pads}, depth "
            f"tiles {depth})"
        )
    cdef Py_ssize_t nb = img.shape[0], c = img.shape[1], dd = size[0] if nd == 3 else 1
    cdef Py_ssize_t h = size[nd - 2], wd = size[nd - 1], oh = out[nd - 2], ow = out[nd - 1]
    cdef Py_ssize_t od = out[0]
    cdef Py_ssize_t pd = pads[0][0] if which in (0, 3) and nd == 3 else 0
    cdef Py_ssize_t ph = pads[nd - 2][0] if which in (0, 3) else 0
    cdef Py_ssize_t pw = pads[nd - 1][0] if which in (0, 3) else 0
    cdef Py_ssize_t th = tiles[nd - 2], tw = tiles[nd - 1], a0 = t0, a1 = blk
    cdef Py_ssize_t per = 8 * (th + 1) * tw + 8 * (th + 1) * (tw + 1)
    if nd == 3:  # the depth's 8 planes
        per += 8 * max(h * wd, oh * ow)
    cdef int nt = _team(c * blk * nb * th * tw << 2 * nd)
    cdef cnp.ndarray rows = np.empty(nt * per, dtype=src_.dtype)
    if cnp.PyArray_TYPE(src) == cnp.NPY_FLOAT32:
        with nogil:
            if nd == 2:
                _wino2(which, <const float*>cnp.PyArray_DATA(src), <float*>cnp.PyArray_DATA(dst),
                       <float*>cnp.PyArray_DATA(rows), nb, c, h, wd, ph, pw, th, tw, per, nt)
            else:
                _wino3(which, <const float*>cnp.PyArray_DATA(src), <float*>cnp.PyArray_DATA(dst),
                       <float*>cnp.PyArray_DATA(rows), nb, c, dd, h, wd, pd, ph, pw, od, th, tw,
                       a0, a1, per, nt)
    else:
        with nogil:
            if nd == 2:
                _wino2(which, <const double*>cnp.PyArray_DATA(src),
                       <double*>cnp.PyArray_DATA(dst), <double*>cnp.PyArray_DATA(rows), nb, c, h,
                       wd, ph, pw, th, tw, per, nt)
            else:
                _wino3(which, <const double*>cnp.PyArray_DATA(src),
                       <double*>cnp.PyArray_DATA(dst), <double*>cnp.PyArray_DATA(rows), nb, c,
                       dd, h, wd, pd, ph, pw, od, th, tw, a0, a1, per, nt)
    return dst_


def winograd_input(x_, tuple pads, v_, depth=None):
    """Write ``Bᵀ d B`` of each 4x4 input window ``d`` of the 2x2 output tiles of ``x``
    ``(N, C, H, W)``, zero-padded by ``pads[i][0]`` before each dim, into ``v``
    ``(16, C, N * tH * tW)``; for ``x`` ``(N, C, D, H, W)``, the 4x4x4 windows' transforms into
    ``v`` ``(64, C, tD * N * tH * tW)``, or only those of the depth tiles ``depth = (t0, t1)``
    (``tD = t1 - t0``). Returns ``v``."""
    _check_io("winograd_input", ("x", "v"), x_, v_)
    return _winograd("winograd_input", 0, x_, v_, pads, depth)


def winograd_input_grad(v_, tuple pads, gx_, depth=None):
    """The adjoint of :func:`winograd_input` for ``x`` ``(N, C, D, H, W)``: add ``B g Bᵀ`` of
    each tile's 4x4x4 values ``g`` in ``v`` ``(64, C, tD * N * tH * tW)`` (the depth tiles
    ``depth``) into the windows of ``gx`` (the padding's share dropped). Returns ``gx``."""
    _check_io("winograd_input_grad", ("v", "gx"), v_, gx_)
    return _winograd("winograd_input_grad", 3, v_, gx_, pads, depth)


def winograd_output(m_, y_, depth=None):
    """Write ``Aᵀ m A`` of each tile of ``m`` ``(16, C_out, N * tH * tW)`` into ``y``
    ``(N, C_out, H_out, W_out)`` (``tH = ceil(H_out / 2)``, the last tiles cropped). Returns
    ``y``; ``y`` ``(N, C_out, D_out, H_out, W_out)`` from ``m`` ``(64, C_out, tiles)``, of the
    depth tiles ``depth`` as :func:`winograd_input` takes them."""
    _check_io("winograd_output", ("m", "y"), m_, y_)
    return _winograd("winograd_output", 1, m_, y_, (), depth)


def winograd_output_grad(gy_, dm_, depth=None):
    """The adjoint of :func:`winograd_output`: write ``A g Aᵀ`` of each 2x2 tile ``g`` of
    ``gy`` ``(N, C_out, H_out, W_out)`` (zero past the last row or column) into ``dm``
    ``(16, C_out, N * tH * tW)`` (for a 5-d ``gy``, ``(64, C_out, tiles)`` of the depth tiles
    ``depth``). Returns ``dm``."""
    _check_io("winograd_output_grad", ("gy", "dm"), gy_, dm_)
    return _winograd("winograd_output_grad", 2, gy_, dm_, (), depth)


# --- 1-d Winograd F(m, r) transforms: dense (small) matrices, given by the caller --------------

cdef extern from "conv_kernels.h" nogil:
    int FERRO_WINO1_MAX
    void ferro_wino1_gather_f32(const float*, Py_ssize_t, const double*, Py_ssize_t, Py_ssize_t,
                                Py_ssize_t, Py_ssize_t, Py_ssize_t, float*, Py_ssize_t, float*)
    void ferro_wino1_gather_f64(const double*, Py_ssize_t, const double*, Py_ssize_t, Py_ssize_t,
                                Py_ssize_t, Py_ssize_t, Py_ssize_t, double*, Py_ssize_t, double*)
    void ferro_wino1_scatter_f32(const float*, Py_ssize_t, const double*, Py_ssize_t, Py_ssize_t,
                                 Py_ssize_t, float*, Py_ssize_t, float*)
    void ferro_wino1_scatter_f64(const double*, Py_ssize_t, const double*, Py_ssize_t,
                                 Py_ssize_t, Py_ssize_t, double*, Py_ssize_t, double*)
    void ferro_wino2_gather_f32(const float*, Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t,
                                const double*, Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t,
                                Py_ssize_t, Py_ssize_t, Py_ssize_t, float*, Py_ssize_t, float*,
                                float*)
    void ferro_wino2_gather_f64(const double*, Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t,
                                const double*, Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t,
                                Py_ssize_t, Py_ssize_t, Py_ssize_t, double*, Py_ssize_t, double*,
                                double*)
    void ferro_wino2_scatter_f32(const float*, Py_ssize_t, const double*, Py_ssize_t, Py_ssize_t,
                                 Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t,
                                 Py_ssize_t, float*, Py_ssize_t, Py_ssize_t, Py_ssize_t, int,
                                 float*, float*)
    void ferro_wino2_scatter_f64(const double*, Py_ssize_t, const double*, Py_ssize_t,
                                 Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t,
                                 Py_ssize_t, Py_ssize_t, double*, Py_ssize_t, Py_ssize_t,
                                 Py_ssize_t, int, double*, double*)


@cython.cdivision(True)
cdef void _wino1_gather(const floating_t* x, const double* mat, floating_t* v, floating_t* rows,
                        Py_ssize_t nb, Py_ssize_t c, Py_ssize_t n, Py_ssize_t p, Py_ssize_t q,
                        Py_ssize_t m, Py_ssize_t lo, Py_ssize_t tiles, int nt) noexcept nogil:
    # v (p, c, nb*tiles) = mat (p x q) times each window x[m*t - lo + j], j < q, of the rows of
    # x (nb, c, n), zero outside, one (channel, sample) at a time (``rows``: m rows of
    # tiles + (q - 1) // m per thread).
    cdef Py_ssize_t cb, w = m * (tiles + (q - 1) // m), plane = c * nb * tiles
    for cb in prange(c * nb, schedule="static", num_threads=nt):
        if floating_t is float:
            ferro_wino1_gather_f32(x + ((cb % nb) * c + cb // nb) * n, n, mat, p, q, m, lo, tiles,
                                   v + cb * tiles, plane, rows + threadid() * w)
        else:
            ferro_wino1_gather_f64(x + ((cb % nb) * c + cb // nb) * n, n, mat, p, q, m, lo, tiles,
                                   v + cb * tiles, plane, rows + threadid() * w)


@cython.cdivision(True)
cdef void _wino1_scatter(const floating_t* mm, const double* mat, floating_t* y, floating_t* rows,
                         Py_ssize_t nb, Py_ssize_t o, Py_ssize_t n, Py_ssize_t p, Py_ssize_t m,
                         Py_ssize_t tiles, int nt) noexcept nogil:
    # y (nb, o, n) = mat (m x p) times each tile's p values of mm (p, o, nb*tiles): tile t's m
    # outputs at m*t + i, cropped at n (``rows``: m rows of ``tiles`` per thread).
    cdef Py_ssize_t cb, plane = o * nb * tiles
    for cb in prange(o * nb, schedule="static", num_threads=nt):
        if floating_t is float:
            ferro_wino1_scatter_f32(mm + cb * tiles, plane, mat, m, p, tiles,
                                    y + ((cb % nb) * o + cb // nb) * n, n,
                                    rows + threadid() * m * tiles)
        else:
            ferro_wino1_scatter_f64(mm + cb * tiles, plane, mat, m, p, tiles,
                                    y + ((cb % nb) * o + cb // nb) * n, n,
                                    rows + threadid() * m * tiles)


def winograd1d_gather(x_, mat_, Py_ssize_t m, Py_ssize_t lo, v_):
    """Write ``mat`` ``(P, Q)`` times each ``Q``-wide window ``x[..., m*t - lo : m*t - lo + Q]``
    of ``x`` ``(N, C, L)`` (zero outside) into ``v`` ``(P, C, N * T)``, ``T`` tiles a sample:
    a 1-d Winograd input transform (``Q = P``), or the output gradient's (``Q = m``, ``lo =
    0``). Returns ``v``."""
    _check_io("winograd1d_gather", ("x", "v"), x_, v_)
    cdef cnp.ndarray x = <cnp.ndarray>x_, v = <cnp.ndarray>v_
    cdef cnp.ndarray mat = np.ascontiguousarray(mat_, dtype=np.float64)
    if (x.ndim != 3 or v.ndim != 3 or mat.ndim != 2 or m < 1 or v.shape[0] != mat.shape[0]
            or v.shape[1] != x.shape[1] or x.shape[0] < 1 or v.shape[2] % x.shape[0]
            or mat.shape[1] > FERRO_WINO1_MAX):
        raise ShapeError(
            f"winograd1d_gather: expected x (N, C, L), mat (P, Q), v (P, C, N*T), m >= 1 and "
            f"Q <= {FERRO_WINO1_MAX}, got {_shape(x)}, {_shape(mat)}, {_shape(v)}, m={m}"
        )
    cdef Py_ssize_t nb = x.shape[0], c = x.shape[1], n = x.shape[2], p = mat.shape[0]
    cdef Py_ssize_t q = mat.shape[1], tiles = v.shape[2] // nb
    cdef int nt = _team(p * c * nb * tiles)
    cdef cnp.ndarray rows = np.empty(nt * m * (tiles + (q - 1) // m), dtype=x_.dtype)
    cdef const double* a = <const double*>cnp.PyArray_DATA(mat)
    if cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT32:
        with nogil:
            _wino1_gather(<const float*>cnp.PyArray_DATA(x), a, <float*>cnp.PyArray_DATA(v),
                          <float*>cnp.PyArray_DATA(rows), nb, c, n, p, q, m, lo, tiles, nt)
    else:
        with nogil:
            _wino1_gather(<const double*>cnp.PyArray_DATA(x), a, <double*>cnp.PyArray_DATA(v),
                          <double*>cnp.PyArray_DATA(rows), nb, c, n, p, q, m, lo, tiles, nt)
    return v


def winograd1d_scatter(m_, mat_, y_):
    """Write ``mat`` ``(m, P)`` times each tile's ``P`` values of ``m_`` ``(P, C, N * T)`` into
    ``y`` ``(N, C, L)``, tile ``t``'s ``m`` outputs at ``m*t + i`` (``T = ceil(L / m)``, the
    last tile cropped): a 1-d Winograd output transform. Returns ``y``."""
    _check_io("winograd1d_scatter", ("m", "y"), m_, y_)
    cdef cnp.ndarray mm = <cnp.ndarray>m_, y = <cnp.ndarray>y_
    cdef cnp.ndarray mat = np.ascontiguousarray(mat_, dtype=np.float64)
    if (y.ndim != 3 or mm.ndim != 3 or mat.ndim != 2 or mat.shape[0] < 1
            or mat.shape[1] > FERRO_WINO1_MAX
            or mm.shape[0] != mat.shape[1] or mm.shape[1] != y.shape[1]
            or mm.shape[2] != y.shape[0] * ((y.shape[2] + mat.shape[0] - 1) // mat.shape[0])):
        raise ShapeError(
            f"winograd1d_scatter: expected m (P, C, N*T), mat (m, P), y (N, C, L), T = "
            f"ceil(L / m), P <= {FERRO_WINO1_MAX}, got {_shape(mm)}, {_shape(mat)}, {_shape(y)}"
        )
    cdef Py_ssize_t nb = y.shape[0], o = y.shape[1], n = y.shape[2], p = mat.shape[1]
    cdef Py_ssize_t k = mat.shape[0], tiles = (n + k - 1) // k
    cdef int nt = _team(p * o * nb * tiles)
    cdef cnp.ndarray rows = np.empty(nt * k * tiles, dtype=y_.dtype)
    cdef const double* a = <const double*>cnp.PyArray_DATA(mat)
    if cnp.PyArray_TYPE(y) == cnp.NPY_FLOAT32:
        with nogil:
            _wino1_scatter(<const float*>cnp.PyArray_DATA(mm), a, <float*>cnp.PyArray_DATA(y),
                           <float*>cnp.PyArray_DATA(rows), nb, o, n, p, k, tiles, nt)
    else:
        with nogil:
            _wino1_scatter(<const double*>cnp.PyArray_DATA(mm), a, <double*>cnp.PyArray_DATA(y),
                           <double*>cnp.PyArray_DATA(rows), nb, o, n, p, k, tiles, nt)
    return y


# --- 2-d Winograd F(m x m, r x r): one matrix along both dims (conv_kernels.h) -----------------

cdef inline Py_ssize_t _blk(Py_ssize_t t) noexcept nogil:
    # the tiles of one block of the 2-d transforms (conv_kernels.h): at most 64
    return t if t < 64 else 64


@cython.cdivision(True)
cdef void _wino2_gather(const floating_t* x, const double* mat, floating_t* v, floating_t* rows,
                        Py_ssize_t nb, Py_ssize_t c, Py_ssize_t h, Py_ssize_t wd, Py_ssize_t p,
                        Py_ssize_t q, Py_ssize_t m, Py_ssize_t lo0, Py_ssize_t lo1, Py_ssize_t th,
                        Py_ssize_t tw, int nt) noexcept nogil:
    # v (p*p, c, nb*th*tw) from the planes of x (nb, c, h, wd), one channel of the nb samples
    # at a time; ``rows``: a block of tiles' windows then column terms, q*(q + p)*_blk(t) a thread.
    cdef Py_ssize_t ci, t = nb * th * tw, b = _blk(t), per = q * (q + p) * b
    for ci in prange(c, schedule="static", num_threads=nt):
        if floating_t is float:
            ferro_wino2_gather_f32(x + ci * h * wd, c * h * wd, nb, h, wd, mat, p, q, m, lo0,
                                   lo1, th, tw, v + ci * t, c * t, rows + threadid() * per,
                                   rows + threadid() * per + q * q * b)
        else:
            ferro_wino2_gather_f64(x + ci * h * wd, c * h * wd, nb, h, wd, mat, p, q, m, lo0,
                                   lo1, th, tw, v + ci * t, c * t, rows + threadid() * per,
                                   rows + threadid() * per + q * q * b)


@cython.cdivision(True)
cdef void _wino2_scatter(const floating_t* mm, const double* mat, floating_t* y, floating_t* rows,
                         Py_ssize_t nb, Py_ssize_t o, Py_ssize_t h, Py_ssize_t wd, Py_ssize_t p,
                         Py_ssize_t r, Py_ssize_t m, Py_ssize_t lo0, Py_ssize_t lo1, Py_ssize_t th,
                         Py_ssize_t tw, int add, int nt) noexcept nogil:
    cdef Py_ssize_t ci, t = nb * th * tw, b = _blk(t), per = r * (p + r) * b
    for ci in prange(o, schedule="static", num_threads=nt):
        if floating_t is float:
            ferro_wino2_scatter_f32(mm + ci * t, o * t, mat, r, p, m, lo0, lo1, nb, th, tw,
                                    y + ci * h * wd, o * h * wd, h, wd, add,
                                    rows + threadid() * per, rows + threadid() * per + r * p * b)
        else:
            ferro_wino2_scatter_f64(mm + ci * t, o * t, mat, r, p, m, lo0, lo1, nb, th, tw,
                                    y + ci * h * wd, o * h * wd, h, wd, add,
                                    rows + threadid() * per, rows + threadid() * per + r * p * b)


def winograd2d_gather(x_, mat_, Py_ssize_t m, tuple lo, tuple tiles, v_):
    """Write ``mat`` ``(P, Q)`` along both dims times each ``Q x Q`` window ``x[..., m*i - lo[0]
    + a, m*j - lo[1] + b]`` of ``x`` ``(N, C, H, W)`` (zero outside) into ``v`` ``(P*P, C, N *
    tH * tW)``, ``tiles = (tH, tW)``: a 2-d Winograd input transform (``Q = P``), or the output
    gradient's (``Q = m``, ``lo = (0, 0)``). Returns ``v``."""
    _check_io("winograd2d_gather", ("x", "v"), x_, v_)
    cdef cnp.ndarray x = <cnp.ndarray>x_, v = <cnp.ndarray>v_
    cdef cnp.ndarray mat = np.ascontiguousarray(mat_, dtype=np.float64)
    if (x.ndim != 4 or v.ndim != 3 or mat.ndim != 2 or m < 1 or len(lo) != 2
            or len(tiles) != 2 or min(tiles) < 1 or mat.shape[1] > FERRO_WINO1_MAX
            or v.shape[0] != mat.shape[0] ** 2 or v.shape[1] != x.shape[1]
            or v.shape[2] != x.shape[0] * tiles[0] * tiles[1]):
        raise ShapeError(
            f"winograd2d_gather: expected x (N, C, H, W), mat (P, Q), v (P*P, C, N*tH*tW), "
            f"m >= 1, lo and tiles pairs and Q <= {FERRO_WINO1_MAX}, got {_shape(x)}, "
            f"{_shape(mat)}, {_shape(v)}, m={m}, lo={lo}, tiles={tiles}"
        )
    cdef Py_ssize_t nb = x.shape[0], c = x.shape[1], h = x.shape[2], wd = x.shape[3]
    cdef Py_ssize_t p = mat.shape[0], q = mat.shape[1], th = tiles[0], tw = tiles[1]
    cdef Py_ssize_t lo0 = lo[0], lo1 = lo[1]
    cdef int nt = _team(p * p * c * nb * th * tw)
    cdef cnp.ndarray rows = np.empty(nt * q * (q + p) * _blk(nb * th * tw), dtype=x_.dtype)
    cdef const double* a = <const double*>cnp.PyArray_DATA(mat)
    if cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT32:
        with nogil:
            _wino2_gather(<const float*>cnp.PyArray_DATA(x), a, <float*>cnp.PyArray_DATA(v),
                          <float*>cnp.PyArray_DATA(rows), nb, c, h, wd, p, q, m, lo0, lo1, th,
                          tw, nt)
    else:
        with nogil:
            _wino2_gather(<const double*>cnp.PyArray_DATA(x), a, <double*>cnp.PyArray_DATA(v),
                          <double*>cnp.PyArray_DATA(rows), nb, c, h, wd, p, q, m, lo0, lo1, th,
                          tw, nt)
    return v


def winograd2d_scatter(m_, mat_, Py_ssize_t m, tuple lo, tuple tiles, y_, bint add=False):
    """Write ``mat`` ``(R, P)`` along both dims times each tile's ``P x P`` values of ``m_``
    ``(P*P, C, N * tH * tW)`` into ``y`` ``(N, C, H, W)``, tile ``(i, j)``'s ``R x R`` values at
    ``(m*i - lo[0] + a, m*j - lo[1] + b)`` (cropped), ``tiles = (tH, tW)``: a 2-d Winograd
    output transform (``R = m``, ``lo = (0, 0)``); with ``add``, added into ``y`` instead (the
    input transform's adjoint, ``R = Q``, the windows overlapping). Returns ``y``."""
    _check_io("winograd2d_scatter", ("m", "y"), m_, y_)
    cdef cnp.ndarray mm = <cnp.ndarray>m_, y = <cnp.ndarray>y_
    cdef cnp.ndarray mat = np.ascontiguousarray(mat_, dtype=np.float64)
    if (y.ndim != 4 or mm.ndim != 3 or mat.ndim != 2 or m < 1 or len(lo) != 2
            or len(tiles) != 2 or min(tiles) < 1 or mat.shape[1] > FERRO_WINO1_MAX
            or mm.shape[0] != mat.shape[1] ** 2 or mm.shape[1] != y.shape[1]
            or mm.shape[2] != y.shape[0] * tiles[0] * tiles[1]):
        raise ShapeError(
            f"winograd2d_scatter: expected m (P*P, C, N*tH*tW), mat (R, P), y (N, C, H, W), "
            f"m >= 1, lo and tiles pairs and P <= {FERRO_WINO1_MAX}, got {_shape(mm)}, "
            f"{_shape(mat)}, {_shape(y)}, m={m}, lo={lo}, tiles={tiles}"
        )
    cdef Py_ssize_t nb = y.shape[0], o = y.shape[1], h = y.shape[2], wd = y.shape[3]
    cdef Py_ssize_t p = mat.shape[1], r = mat.shape[0], th = tiles[0], tw = tiles[1]
    cdef Py_ssize_t lo0 = lo[0], lo1 = lo[1]
    cdef int nt = _team(p * p * o * nb * th * tw), a = add
    cdef cnp.ndarray rows = np.empty(nt * r * (p + r) * _blk(nb * th * tw), dtype=y_.dtype)
    cdef const double* ma = <const double*>cnp.PyArray_DATA(mat)
    if cnp.PyArray_TYPE(y) == cnp.NPY_FLOAT32:
        with nogil:
            _wino2_scatter(<const float*>cnp.PyArray_DATA(mm), ma, <float*>cnp.PyArray_DATA(y),
                           <float*>cnp.PyArray_DATA(rows), nb, o, h, wd, p, r, m, lo0, lo1, th,
                           tw, a, nt)
    else:
        with nogil:
            _wino2_scatter(<const double*>cnp.PyArray_DATA(mm), ma, <double*>cnp.PyArray_DATA(y),
                           <double*>cnp.PyArray_DATA(rows), nb, o, h, wd, p, r, m, lo0, lo1, th,
                           tw, a, nt)
    return y


# --- 3-d Winograd F(4x4x4, 3x3x3) on channels-last volumes: matrices given by the caller -----

cdef extern from "conv_kernels.h" nogil:
    int FERRO_WINO3_BLOCK
    void ferro_wino3_gather_f32(const float*, Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t,
                                const double*, Py_ssize_t, Py_ssize_t, const Py_ssize_t*,
                                const Py_ssize_t*, float*, Py_ssize_t, Py_ssize_t, float*)
    void ferro_wino3_gather_f64(const double*, Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t,
                                const double*, Py_ssize_t, Py_ssize_t, const Py_ssize_t*,
                                const Py_ssize_t*, double*, Py_ssize_t, Py_ssize_t, double*)
    void ferro_wino3_scatter_f32(const float*, Py_ssize_t, Py_ssize_t, const double*, Py_ssize_t,
                                 Py_ssize_t, const Py_ssize_t*, const Py_ssize_t*, float*,
                                 Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t, int, float*)
    void ferro_wino3_scatter_f64(const double*, Py_ssize_t, Py_ssize_t, const double*,
                                 Py_ssize_t, Py_ssize_t, const Py_ssize_t*, const Py_ssize_t*,
                                 double*, Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t, int,
                                 double*)


@cython.cdivision(True)
cdef void _wino3cl(bint gather, const floating_t* src, const double* mat, floating_t* dst,
                   floating_t* rows, Py_ssize_t nb, const Py_ssize_t* g, int add,
                   int nt) noexcept nogil:
    # One sample's volume a thread at a time (an adjoint's windows overlap). g: dd, h, wd, c,
    # q (or r), m, scratch a thread, lo[3], tiles[3].
    cdef Py_ssize_t s, vol = g[0] * g[1] * g[2] * g[3], t = g[10] * g[11] * g[12]
    cdef Py_ssize_t ps = nb * t * g[3]
    for s in prange(nb, schedule="static", num_threads=nt):
        if floating_t is float and gather:
            ferro_wino3_gather_f32(src + s * vol, g[0], g[1], g[2], g[3], mat, g[4], g[5], g + 7,
                                   g + 10, dst, ps, s * t, rows + threadid() * g[6])
        elif floating_t is float:
            ferro_wino3_scatter_f32(src, ps, s * t, mat, g[4], g[5], g + 7, g + 10, dst + s * vol,
                                    g[0], g[1], g[2], g[3], add, rows + threadid() * g[6])
        elif gather:
            ferro_wino3_gather_f64(src + s * vol, g[0], g[1], g[2], g[3], mat, g[4], g[5], g + 7,
                                   g + 10, dst, ps, s * t, rows + threadid() * g[6])
        else:
            ferro_wino3_scatter_f64(src, ps, s * t, mat, g[4], g[5], g + 7, g + 10, dst + s * vol,
                                    g[0], g[1], g[2], g[3], add, rows + threadid() * g[6])


def _winograd3d(str who, bint gather, src_, mat_, Py_ssize_t m, tuple lo, tuple tiles, dst_,
                bint add):
    # vol (N, D, H, W, C) channels-last and its tiles' 216 products (216, N*tD*tH*tW, C):
    # gather reads the volume, scatter writes it; _check_io has checked both arrays.
    vol, buf = (src_, dst_) if gather else (dst_, src_)
    mat = np.ascontiguousarray(mat_, dtype=np.float64)
    cdef Py_ssize_t g[13]
    if (vol.ndim != 5 or buf.ndim != 3 or mat.ndim != 2 or m < 1 or len(lo) != 3
            or len(tiles) != 3 or min(tiles) < 1 or max(mat.shape) != 6
            or mat.shape[0 if gather else 1] != 6 or min(mat.shape) < 1
            or buf.shape != (216, vol.shape[0] * tiles[0] * tiles[1] * tiles[2], vol.shape[4])):
        raise ShapeError(
            f"{who}: expected a volume (N, D, H, W, C), mat (6, Q) (a scatter's (R, 6)), Q and "
            f"R at most 6, products (216, N*tD*tH*tW, C), m >= 1, lo and tiles triples, got "
            f"{_shape(vol)}, {_shape(mat)}, {_shape(buf)}, m={m}, lo={lo}, tiles={tiles}"
        )
    per = 3 * 216 * FERRO_WINO3_BLOCK * vol.shape[4]
    for i, v in enumerate(vol.shape[1:] + (mat.shape[1 if gather else 0], m, per) + lo + tiles):
        g[i] = v
    cdef int nt = max(1, min(_team(buf.size * 6), vol.shape[0])), a = add  # (a team: >1 sample)
    cdef cnp.ndarray src = <cnp.ndarray>src_, dst = <cnp.ndarray>dst_, mt = <cnp.ndarray>mat
    cdef cnp.ndarray rows = np.zeros(nt * per, dtype=vol.dtype)  # (rows past a window: zero)
    cdef const double* ma = <const double*>cnp.PyArray_DATA(mt)
    cdef Py_ssize_t nb = vol.shape[0]
    if cnp.PyArray_TYPE(src) == cnp.NPY_FLOAT32:
        with nogil:
            _wino3cl(gather, <const float*>cnp.PyArray_DATA(src), ma,
                     <float*>cnp.PyArray_DATA(dst), <float*>cnp.PyArray_DATA(rows), nb, g, a, nt)
    else:
        with nogil:
            _wino3cl(gather, <const double*>cnp.PyArray_DATA(src), ma,
                     <double*>cnp.PyArray_DATA(dst), <double*>cnp.PyArray_DATA(rows), nb, g, a,
                     nt)
    return dst_


def winograd3d_gather(x_, mat_, Py_ssize_t m, tuple lo, tuple tiles, v_):
    """Write ``mat`` ``(6, Q)`` along the depth, height and width times each ``Q**3`` window at
    ``(m*tz - lo[0], m*ty - lo[1], m*tx - lo[2])`` of the channels-last ``x`` ``(N, D, H, W,
    C)`` (zero outside) into ``v`` ``(216, N * tD * tH * tW, C)``, the products ordered
    (height, width, depth), ``tiles = (tD, tH, tW)``: the input transform of F(4x4x4, 3x3x3)
    (``Q = 6``), or its output gradient's (``Q = m = 4``, ``lo = (0, 0, 0)``). Returns ``v``."""
    _check_io("winograd3d_gather", ("x", "v"), x_, v_)
    return _winograd3d("winograd3d_gather", True, x_, mat_, m, lo, tiles, v_, False)


def winograd3d_scatter(m_, mat_, Py_ssize_t m, tuple lo, tuple tiles, y_, bint add=False):
    """Write ``mat`` ``(R, 6)`` along the three dims times each tile's 216 products in
    ``m_`` ``(216, N * tD * tH * tW, C)`` into the channels-last ``y`` ``(N, D, H, W, C)``,
    the tile's ``R**3`` values at ``(m*tz - lo[0], ...)`` (cropped): an output transform
    (``R = m = 4``, ``lo = (0, 0, 0)``); with ``add``, added into ``y`` instead (the input
    transform's adjoint, ``R = 6``, the windows overlapping). Returns ``y``."""
    _check_io("winograd3d_scatter", ("m", "y"), m_, y_)
    return _winograd3d("winograd3d_scatter", False, m_, mat_, m, lo, tiles, y_, add)


# ---------------------------------------------------------------------------------------------
# Space-to-depth of a strided 2-d convolution's input (ferro.ops.conv._SpaceToDepth) and its
# inverse, the phase gather of the sub-pixel input gradient, one pass each (the loops are C,
# conv_kernels.h, compiled per ISA level, stride 2 its own loop). NumPy's strided copies of the
# phases (plus a zeroed buffer) took 0.29 and 0.27 ms of one core on conv_transpose2d's
# benchmark batch, about 9% of its step with the zeroing; these loops written in Cython 0.26
# and 0.35; in C 0.21 and 0.13 (a 2 MB copy: 0.045).
# ---------------------------------------------------------------------------------------------

cdef extern from "conv_kernels.h" nogil:
    void ferro_phases_f32(float*, float*, int, Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t,
                          Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t)
    void ferro_phases_f64(double*, double*, int, Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t,
                          Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t)


cdef tuple _phases_geometry(str who, cnp.ndarray x, cnp.ndarray z, tuple stride, tuple lo):
    # (planes, h, w, s0, s1, lo0, lo1, z0, z1) of x (N, C, H, W) and z (N, C, s0, s1, Z0, Z1).
    if len(stride) != 2 or len(lo) != 2 or min(stride) < 1 or min(lo) < 0:
        raise ArgumentError(
            f"{who}: stride and lo must be pairs, >= 1 and >= 0, got {stride} and {lo}"
        )
    if (x.ndim != 4 or z.ndim != 6 or _shape(x)[:2] != _shape(z)[:2]
            or _shape(z)[2:4] != tuple(stride)):
        raise ShapeError(
            f"{who}: expected x (N, C, H, W) and z (N, C, {stride[0]}, {stride[1]}, Z0, Z1), got "
            f"{_shape(x)} and {_shape(z)}"
        )
    return (x.shape[0] * x.shape[1], x.shape[2], x.shape[3], stride[0], stride[1], lo[0], lo[1],
            z.shape[4], z.shape[5])


cdef object _phases(str who, object x_, object z_, tuple stride, tuple lo, bint to_depth):
    # The one driver of both loops: x (N, C, H, W) read and z written, or the other way round.
    src, dst = (x_, z_) if to_depth else (z_, x_)
    _check_io(who, ("x", "z") if to_depth else ("z", "x"), src, dst)
    cdef Py_ssize_t g[9]
    for k, v in enumerate(_phases_geometry(who, x_, z_, stride, lo)):
        g[k] = v
    cdef char* xd = <char*>cnp.PyArray_DATA(<cnp.ndarray>x_)
    cdef char* zd = <char*>cnp.PyArray_DATA(<cnp.ndarray>z_)
    cdef bint f32 = cnp.PyArray_TYPE(<cnp.ndarray>x_) == cnp.NPY_FLOAT32
    with nogil:
        if f32:
            ferro_phases_f32(<float*>xd, <float*>zd, to_depth, g[0], g[1], g[2], g[3], g[4],
                             g[5], g[6], g[7], g[8])
        else:
            ferro_phases_f64(<double*>xd, <double*>zd, to_depth, g[0], g[1], g[2], g[3], g[4],
                             g[5], g[6], g[7], g[8])
    return dst


def space_to_depth2d(x_, tuple stride, tuple lo, z_):
    """Write ``z[n, c, r0, r1, u, v] = x[n, c, s0*u + r0 - lo[0], s1*v + r1 - lo[1]]`` (0 outside
    ``x``) for ``x`` ``(N, C, H, W)`` and ``z`` ``(N, C, s0, s1, Z0, Z1)``, ``stride = (s0,
    s1)``: every element of ``z``. Returns ``z``."""
    return _phases("space_to_depth2d", x_, z_, stride, lo, True)


def depth_to_space2d(z_, tuple stride, tuple lo, x_):
    """The inverse of :func:`space_to_depth2d` on ``x``'s positions: ``x[n, c, i, j] = z[n, c,
    (i + lo[0]) % s0, (j + lo[1]) % s1, (i + lo[0]) // s0, (j + lo[1]) // s1]`` (0 where that
    is past ``z``): every element of ``x``. Returns ``x``."""
    return _phases("depth_to_space2d", x_, z_, stride, lo, False)


# ---------------------------------------------------------------------------------------------
# The last two axes of an array swapped into a fresh C-contiguous one (conv.py's weight
# gradients, summed transposed; conv_kernels.h: blocks of 32 x 32).
# ---------------------------------------------------------------------------------------------

cdef extern from "conv_kernels.h" nogil:
    void ferro_swap_last2_f32(const float*, float*, Py_ssize_t, Py_ssize_t, Py_ssize_t,
                              Py_ssize_t)
    void ferro_swap_last2_f64(const double*, double*, Py_ssize_t, Py_ssize_t, Py_ssize_t,
                              Py_ssize_t)


cdef inline void _swap_block(char *src, char *dst, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k,
                             Py_ssize_t per, Py_ssize_t item, bint f32) noexcept nogil:
    # Rows 32 j .. 32 j + 31 (cut at m) of matrix k // per, j = k % per (per blocks a matrix).
    cdef Py_ssize_t mat = k // per, i0 = 32 * (k % per)
    cdef Py_ssize_t i1 = i0 + 32 if i0 + 32 < m else m
    cdef char *s = src + mat * m * n * item
    cdef char *d = dst + mat * m * n * item
    if f32:
        ferro_swap_last2_f32(<const float*>s, <float*>d, m, n, i0, i1)
    else:
        ferro_swap_last2_f64(<const double*>s, <double*>d, m, n, i0, i1)


def swap_last2(x_):
    """``x`` ``(..., M, N)`` with its last two axes swapped, as a fresh C-contiguous ``(..., N,
    M)`` array: ``np.ascontiguousarray(np.swapaxes(x, -1, -2))``, the same values."""
    _check("swap_last2", ("x",), (x_,))
    cdef cnp.ndarray x = <cnp.ndarray>x_
    if x.ndim < 2:
        raise ShapeError(f"swap_last2: expected x (..., M, N), got {_shape(x)}")
    cdef Py_ssize_t m = x.shape[x.ndim - 2], n = x.shape[x.ndim - 1], k
    cdef Py_ssize_t per = (m + 31) // 32, blocks = x.size // (m * n) * per if m * n else 0
    cdef cnp.ndarray out = np.empty(_shape(x)[: x.ndim - 2] + (n, m), dtype=x.dtype)
    cdef int nt = _team(x.size)
    cdef char *src = <char*>cnp.PyArray_DATA(x)
    cdef char *dst = <char*>cnp.PyArray_DATA(out)
    cdef Py_ssize_t item = x.itemsize
    cdef bint f32 = cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT32
    for k in prange(blocks, nogil=True, num_threads=nt, schedule="static"):
        _swap_block(src, dst, m, n, k, per, item, f32)
    return out
