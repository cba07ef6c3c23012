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
        "winograd1d_gather",
        "winograd1d_scatter",
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


# --- im2col / col2im of the GEMM path (1 to 3 spatial dims, as 3) ----------------------------


@cython.boundscheck(False)
@cython.wraparound(False)
@cython.cdivision(True)
cdef void _im2col(floating_t* img, floating_t* col, Py_ssize_t nb, Py_ssize_t c,
                  const Py_ssize_t* size, const Py_ssize_t* k, const Py_ssize_t* out,
                  const Py_ssize_t* st, const Py_ssize_t* lo, const Py_ssize_t* dl,
                  bint add, int nt) noexcept nogil:
    # The columns (C, k0, k1, k2, nb, o0, o1, o2) of img (nb, C, s0, s1, s2) zero-padded by lo
    # before each dim (add=False: col written, img only read), or their adjoint (add=True: col
    # added into img, which the caller zeroed). Every input index is checked against the
    # bounds: rows of the padding are zeros (or skipped), never read. Split over the channels
    # (each writes its own columns and its own image planes). The valid output ranges [a, e) of
    # each dim are found once per kernel offset, not per row (the digits CNN's 4x4 maps: rows of
    # 4 elements, where the per-row index checks cost as much as the copies).
    cdef Py_ssize_t ci, k0, k1, k2, b, o0, o1, off, a, e, ox, a0, e0, a1, e1, off0, off1
    cdef floating_t* dst
    cdef floating_t* row
    cdef floating_t* plane
    cdef Py_ssize_t s2 = st[2], n2 = out[2], rows = out[1] * out[2], sz = size[1] * size[2]
    cdef Py_ssize_t per = k[0] * k[1] * k[2] * nb * out[0] * out[1] * n2
    for ci in prange(c, schedule="static", num_threads=nt):
        dst = col + ci * per
        for k0 in range(k[0]):
            off0 = lo[0] - k0 * dl[0]
            a0 = min(_first(off0, st[0]), out[0])
            e0 = max(_stop(off0, size[0], st[0], out[0]), a0)
            for k1 in range(k[1]):
                off1 = lo[1] - k1 * dl[1]
                a1 = min(_first(off1, st[1]), out[1])
                e1 = max(_stop(off1, size[1], st[1], out[1]), a1)
                for k2 in range(k[2]):
                    off = lo[2] - k2 * dl[2]
                    a = min(_first(off, s2), n2)
                    e = max(_stop(off, size[2], s2, n2), a)
                    for b in range(nb):
                        plane = img + (b * c + ci) * size[0] * sz
                        for o0 in range(out[0]):
                            if o0 < a0 or o0 >= e0:
                                if not add:
                                    for ox in range(rows):
                                        dst[ox] = 0
                                dst = dst + rows
                                continue
                            for o1 in range(out[1]):
                                if o1 < a1 or o1 >= e1:
                                    if not add:
                                        for ox in range(n2):
                                            dst[ox] = 0
                                    dst = dst + n2
                                    continue
                                row = plane + (o0 * st[0] - off0) * sz + (
                                    o1 * st[1] - off1) * size[2]
                                if add:
                                    if s2 == 1:
                                        for ox in range(a, e):
                                            row[ox - off] += dst[ox]
                                    else:
                                        for ox in range(a, e):
                                            row[ox * s2 - off] += dst[ox]
                                else:
                                    for ox in range(a):
                                        dst[ox] = 0
                                    if s2 == 1:
                                        for ox in range(a, e):
                                            dst[ox] = row[ox - off]
                                    else:
                                        for ox in range(a, e):
                                            dst[ox] = row[ox * s2 - off]
                                    for ox in range(e, n2):
                                        dst[ox] = 0
                                dst = dst + n2


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


cdef object _columns_call(str who, object x_, object col_, tuple stride, tuple pads,
                          tuple dilation, bint add):
    # im2col (add=False: x read, col written, returned) or col2im (x zeroed, then the columns
    # added into it; x returned), on arrays _check_io accepted.
    cdef cnp.ndarray x = <cnp.ndarray>x_, col = <cnp.ndarray>col_
    cdef Py_ssize_t g[20]
    _columns_geometry(who, x, col, stride, pads, dilation, g)
    cdef int nt = _team(col.size)
    if add:
        x_.fill(0)
    if cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT32:
        with nogil:
            _im2col(<float*>cnp.PyArray_DATA(x), <float*>cnp.PyArray_DATA(col), g[18], g[19], g,
                    g + 3, g + 6, g + 9, g + 12, g + 15, add, nt)
    else:
        with nogil:
            _im2col(<double*>cnp.PyArray_DATA(x), <double*>cnp.PyArray_DATA(col), g[18], g[19],
                    g, g + 3, g + 6, g + 9, g + 12, g + 15, add, nt)
    return x_ if add else col_


# --- Winograd F(2x2, 3x3) transforms (stride-1, undilated 3x3 convolutions) -------------------
# y = Aᵀ [(G w Gᵀ) ⊙ (Bᵀ d B)] A per 2x2 output tile, d the tile's 4x4 input window:
# Bᵀ = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], Aᵀ = [[1, 1, 1, 0],
# [0, 1, -1, -1]] (G, on the weight, is applied in NumPy). The 16 products per tile are 16
# GEMMs over the channels, 2.25x fewer multiplies than im2col's 36.


@cython.boundscheck(False)
@cython.wraparound(False)
@cython.cdivision(True)
cdef void _wino_in(const floating_t* x, floating_t* v, floating_t* rows, Py_ssize_t nb,
                   Py_ssize_t c, Py_ssize_t h, Py_ssize_t wd, Py_ssize_t ph, Py_ssize_t pw,
                   Py_ssize_t th, Py_ssize_t tw, int nt) noexcept nogil:
    # v (16, c, nb*th*tw) = Bᵀ d B of each tile of x (nb, c, h, wd) padded by ph, pw. One row
    # of tiles at a time: its 4 input rows, zero-padded, into ``rows`` (8 rows of 2*tw + 2),
    # the row transform Bᵀ over whole rows, then the column transform tile by tile; every loop
    # runs along a row (the compiler vectorizes them).
    cdef Py_ssize_t cb, ci, b, ty, tx, i, j, iy, n = 2 * tw + 2, plane = c * nb * th * tw
    cdef Py_ssize_t j0 = min(pw, n), j1 = max(j0, min(n, wd + pw))
    cdef floating_t* d
    cdef floating_t* r
    cdef floating_t* ri
    cdef floating_t* out
    cdef const floating_t* src
    for cb in prange(c * nb, schedule="static", num_threads=nt):
        ci = cb // nb
        b = cb % nb
        d = rows + threadid() * 8 * n
        r = d + 4 * n
        src = x + (b * c + ci) * h * wd
        for ty in range(th):
            for i in range(4):
                iy = 2 * ty - ph + i
                if iy < 0 or iy >= h:
                    for j in range(n):
                        d[i * n + j] = 0
                    continue
                for j in range(j0):
                    d[i * n + j] = 0
                for j in range(j0, j1):
                    d[i * n + j] = src[iy * wd + j - pw]
                for j in range(j1, n):
                    d[i * n + j] = 0
            for j in range(n):
                r[j] = d[j] - d[2 * n + j]
                r[n + j] = d[n + j] + d[2 * n + j]
                r[2 * n + j] = d[2 * n + j] - d[n + j]
                r[3 * n + j] = d[n + j] - d[3 * n + j]
            out = v + (ci * nb + b) * th * tw + ty * tw
            for i in range(4):
                ri = r + i * n
                for tx in range(tw):
                    out[4 * i * plane + tx] = ri[2 * tx] - ri[2 * tx + 2]
                for tx in range(tw):
                    out[(4 * i + 1) * plane + tx] = ri[2 * tx + 1] + ri[2 * tx + 2]
                for tx in range(tw):
                    out[(4 * i + 2) * plane + tx] = ri[2 * tx + 2] - ri[2 * tx + 1]
                for tx in range(tw):
                    out[(4 * i + 3) * plane + tx] = ri[2 * tx + 1] - ri[2 * tx + 3]


@cython.boundscheck(False)
@cython.wraparound(False)
@cython.cdivision(True)
cdef void _wino_out(const floating_t* m, floating_t* y, floating_t* rows, Py_ssize_t nb,
                    Py_ssize_t o, Py_ssize_t oh, Py_ssize_t ow, Py_ssize_t th,
                    Py_ssize_t tw, int nt) noexcept nogil:
    # y (nb, o, oh, ow) = Aᵀ m A of each tile of m (16, o, nb*th*tw), cropped to oh x ow; one
    # row of tiles at a time (``rows``: 8 rows of tw per thread, Aᵀ applied over the 16 planes'
    # rows).
    cdef Py_ssize_t cb, co, b, ty, tx, i, k, yy, plane = o * nb * th * tw
    cdef const floating_t* mp
    cdef floating_t* yrow
    cdef floating_t* s
    cdef floating_t* t
    cdef Py_ssize_t full = ow // 2
    for cb in prange(o * nb, schedule="static", num_threads=nt):
        co = cb // nb
        b = cb % nb
        t = rows + threadid() * 8 * tw
        for ty in range(th):
            mp = m + (co * nb + b) * th * tw + ty * tw
            for k in range(4):
                s = t + k * tw
                for tx in range(tw):
                    s[tx] = mp[k * plane + tx] + mp[(4 + k) * plane + tx] + mp[
                        (8 + k) * plane + tx]
                s = t + (4 + k) * tw
                for tx in range(tw):
                    s[tx] = mp[(4 + k) * plane + tx] - mp[(8 + k) * plane + tx] - mp[
                        (12 + k) * plane + tx]
            for i in range(2):
                yy = 2 * ty + i
                if yy >= oh:
                    break
                s = t + 4 * i * tw
                yrow = y + ((b * o + co) * oh + yy) * ow
                for tx in range(full):
                    yrow[2 * tx] = s[tx] + s[tw + tx] + s[2 * tw + tx]
                    yrow[2 * tx + 1] = s[tw + tx] - s[2 * tw + tx] - s[3 * tw + tx]
                if full < tw:
                    yrow[2 * full] = s[full] + s[tw + full] + s[2 * tw + full]


@cython.boundscheck(False)
@cython.wraparound(False)
@cython.cdivision(True)
cdef void _wino_out_grad(const floating_t* gy, floating_t* dm, floating_t* rows, Py_ssize_t nb,
                         Py_ssize_t o, Py_ssize_t oh, Py_ssize_t ow, Py_ssize_t th,
                         Py_ssize_t tw, int nt) noexcept nogil:
    # dm (16, o, nb*th*tw) = A g Aᵀ of each 2x2 tile g of gy (nb, o, oh, ow) (zero past the
    # crop): the adjoint of _wino_out. A = [[1, 0], [1, 1], [1, -1], [0, -1]]; ``rows`` (4
    # rows of 2*tw per thread) holds the tile row's two gy rows, zero-padded, then their row
    # transform.
    cdef Py_ssize_t cb, co, b, ty, tx, i, j, n = 2 * tw, plane = o * nb * th * tw
    cdef floating_t* t
    cdef floating_t* g0
    cdef floating_t* g1
    cdef floating_t* ri
    cdef floating_t* out
    cdef const floating_t* src
    for cb in prange(o * nb, schedule="static", num_threads=nt):
        co = cb // nb
        b = cb % nb
        t = rows + threadid() * 4 * n
        g0 = t
        g1 = t + n
        src = gy + (b * o + co) * oh * ow
        for ty in range(th):
            for i in range(2):
                if 2 * ty + i >= oh:
                    for j in range(n):
                        t[i * n + j] = 0
                    continue
                for j in range(ow):
                    t[i * n + j] = src[(2 * ty + i) * ow + j]
                for j in range(ow, n):
                    t[i * n + j] = 0
            # The row transform A g: rows g0, g0 + g1, g0 - g1, -g1 (the last two in place).
            for j in range(n):
                t[2 * n + j] = g0[j] + g1[j]
                t[3 * n + j] = g0[j] - g1[j]
                g1[j] = -g1[j]
            out = dm + (co * nb + b) * th * tw + ty * tw
            for i in range(4):
                ri = t + (i + 1 if 0 < i < 3 else i // 3) * n  # g0, +, -, -g1
                for tx in range(tw):
                    out[4 * i * plane + tx] = ri[2 * tx]
                for tx in range(tw):
                    out[(4 * i + 1) * plane + tx] = ri[2 * tx] + ri[2 * tx + 1]
                for tx in range(tw):
                    out[(4 * i + 2) * plane + tx] = ri[2 * tx] - ri[2 * tx + 1]
                for tx in range(tw):
                    out[(4 * i + 3) * plane + tx] = -ri[2 * tx + 1]


# F(2x2x2, 3x3x3) (3-d, 64 products per 2x2x2 output tile): the transforms are separable, so
# the depth's 1-d transform runs first on the input (and on gy) and last on the output, as NumPy
# adds of whole planes of pixels (16x smaller than the products), and the 2-d transforms take
# the depth's 4 transformed planes of each tile as channels. The 64 products are ordered
# (i, j, a): the 2-d transform's 16 (height, width), then the depth's 4; the tiles (tD, N, tH,
# tW). Bᵀ's rows along the depth as (j, k, sign): row a = d_j + sign * d_k.
_BT = ((0, 2, -1), (1, 2, 1), (2, 1, -1), (1, 3, -1))


def _depth_tiles(str who, tuple shape, object buf, Py_ssize_t c):
    # tD and N * (the 2-d tiles) of an output (N, C, D, H, W) of ``shape``, after checking that
    # ``buf`` is (64, c, N * tD * tiles).
    td = (shape[2] + 1) // 2
    t2 = ((shape[3] + 1) // 2) * ((shape[4] + 1) // 2)
    if (buf.ndim != 3 or buf.shape[0] != 64 or buf.shape[1] != c
            or buf.shape[2] != shape[0] * td * t2):
        raise ShapeError(f"{who}: {buf.shape} is not (64, {c}, N * tiles) for {shape}")
    return td, shape[0] * t2


def _winograd_input3(x, tuple pads, v):
    n, c, d, h, wd = x.shape
    (lo, hi), pads2 = pads[0], pads[1:]
    out = (n, c, d + lo + hi - 2) + tuple(s + p[0] + p[1] - 2 for s, p in zip((h, wd), pads2))
    td, ell = _depth_tiles("winograd_input", out, v, c)
    xpad = np.zeros((n, c, 2 * td + 2, h, wd), dtype=x.dtype)  # >= d + lo + hi planes
    xpad[:, :, lo : lo + d] = x
    xz = np.empty((n, 4, c, td, h, wd), dtype=x.dtype)  # Bᵀ along the depth
    for a, (j, k, sign) in enumerate(_BT):
        op = np.add if sign > 0 else np.subtract
        op(xpad[:, :, j : j + 2 * td : 2], xpad[:, :, k : k + 2 * td : 2], out=xz[:, a])
    winograd_input(xz.reshape(n, 4 * c * td, h, wd), pads2, v.reshape(16, 4 * c * td, ell))
    return v


def _winograd_output3(m, y):
    n, o, d, h, wd = y.shape
    td, ell = _depth_tiles("winograd_output", y.shape, m, o)
    yz = np.empty((n, 4, o, td, h, wd), dtype=y.dtype)
    winograd_output(m.reshape(16, 4 * o * td, ell), yz.reshape(n, 4 * o * td, h, wd))
    ev, od = y[:, :, 0::2], y[:, :, 1::2]  # Aᵀ along the depth, the last tile cropped
    np.add(np.add(yz[:, 0], yz[:, 1], out=ev), yz[:, 2], out=ev)
    e = d // 2
    np.subtract(np.subtract(yz[:, 1, :, :e], yz[:, 2, :, :e], out=od), yz[:, 3, :, :e], out=od)
    return y


def _winograd_output_grad3(gy, dm):
    n, o, d, h, wd = gy.shape
    td, ell = _depth_tiles("winograd_output_grad", gy.shape, dm, o)
    if d != 2 * td:
        gy = np.concatenate((gy, np.zeros((n, o, 1, h, wd), dtype=gy.dtype)), axis=2)
    g0, g1 = gy[:, :, 0::2], gy[:, :, 1::2]
    gz = np.empty((n, 4, o, td, h, wd), dtype=gy.dtype)  # A = [[1, 0], [1, 1], [1, -1], [0, -1]]
    gz[:, 0] = g0
    np.add(g0, g1, out=gz[:, 1])
    np.subtract(g0, g1, out=gz[:, 2])
    np.negative(g1, out=gz[:, 3])
    winograd_output_grad(gz.reshape(n, 4 * o * td, h, wd), dm.reshape(16, 4 * o * td, ell))
    return dm


def winograd_input(x_, tuple pads, v_):
    """Write ``Bᵀ d B`` of each 4x4 input window ``d`` of the 2x2 output tiles of ``x``
    ``(N, C, H, W)``, zero-padded by ``pads[i][0]`` before each dim, into ``v``
    ``(16, C, N * tH * tW)``; for ``x`` ``(N, C, D, H, W)``, the 4x4x4 windows' transforms into
    ``v`` ``(64, C, tD * N * tH * tW)``. Returns ``v``."""
    _check_io("winograd_input", ("x", "v"), x_, v_)
    if x_.ndim == 5 and len(pads) == 3:
        return _winograd_input3(x_, pads, v_)
    cdef cnp.ndarray x = <cnp.ndarray>x_, v = <cnp.ndarray>v_
    if x.ndim != 4 or v.ndim != 3 or v.shape[0] != 16 or v.shape[1] != x.shape[1]:
        raise ShapeError(
            f"winograd_input: expected x (N, C, H, W) and v (16, C, N*tiles), got "
            f"{_shape(x)} and {_shape(v)}"
        )
    cdef Py_ssize_t nb = x.shape[0], c = x.shape[1], h = x.shape[2], wd = x.shape[3]
    cdef Py_ssize_t ph = pads[0][0], pw = pads[1][0]
    cdef Py_ssize_t th = (h + ph + pads[0][1] - 1) // 2, tw = (wd + pw + pads[1][1] - 1) // 2
    if min(ph, pw, pads[0][1], pads[1][1]) < 0 or th < 0 or tw < 0 or v.shape[2] != nb * th * tw:
        raise ShapeError(
            f"winograd_input: v {_shape(v)} does not hold the tiles of x {_shape(x)} padded "
            f"by {pads}"
        )
    cdef int nt = _team(c * nb * th * tw * 16)
    cdef cnp.ndarray rows = np.empty(nt * 8 * (2 * tw + 2), dtype=x_.dtype)
    if cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT32:
        with nogil:
            _wino_in(<const float*>cnp.PyArray_DATA(x), <float*>cnp.PyArray_DATA(v),
                     <float*>cnp.PyArray_DATA(rows), nb, c, h, wd, ph, pw, th, tw, nt)
    else:
        with nogil:
            _wino_in(<const double*>cnp.PyArray_DATA(x), <double*>cnp.PyArray_DATA(v),
                     <double*>cnp.PyArray_DATA(rows), nb, c, h, wd, ph, pw, th, tw, nt)
    return v


def winograd_output(m_, y_):
    """Write ``Aᵀ m A`` of each tile of ``m`` ``(16, C_out, N * tH * tW)`` into ``y``
    ``(N, C_out, H_out, W_out)`` (``tH = ceil(H_out / 2)``, the last tiles cropped). Returns
    ``y``; ``y`` ``(N, C_out, D_out, H_out, W_out)`` from ``m`` ``(64, C_out, tiles)``."""
    _check_io("winograd_output", ("m", "y"), m_, y_)
    if y_.ndim == 5:
        return _winograd_output3(m_, y_)
    cdef cnp.ndarray m = <cnp.ndarray>m_, y = <cnp.ndarray>y_
    if y.ndim != 4 or m.ndim != 3 or m.shape[0] != 16 or m.shape[1] != y.shape[1]:
        raise ShapeError(
            f"winograd_output: expected m (16, C, N*tiles) and y (N, C, H, W), got "
            f"{_shape(m)} and {_shape(y)}"
        )
    cdef Py_ssize_t nb = y.shape[0], o = y.shape[1], oh = y.shape[2], ow = y.shape[3]
    cdef Py_ssize_t th = (oh + 1) // 2, tw = (ow + 1) // 2
    if m.shape[2] != nb * th * tw:
        raise ShapeError(f"winograd_output: m {_shape(m)} does not hold the tiles of y {_shape(y)}")
    cdef int nt = _team(o * nb * th * tw * 16)
    cdef cnp.ndarray rows = np.empty(nt * 8 * tw, dtype=y_.dtype)
    if cnp.PyArray_TYPE(y) == cnp.NPY_FLOAT32:
        with nogil:
            _wino_out(<const float*>cnp.PyArray_DATA(m), <float*>cnp.PyArray_DATA(y),
                      <float*>cnp.PyArray_DATA(rows), nb, o, oh, ow, th, tw, nt)
    else:
        with nogil:
            _wino_out(<const double*>cnp.PyArray_DATA(m), <double*>cnp.PyArray_DATA(y),
                      <double*>cnp.PyArray_DATA(rows), nb, o, oh, ow, th, tw, nt)
    return y


def winograd_output_grad(gy_, dm_):
    """The adjoint of :func:`winograd_output`: write ``A g Aᵀ`` of each 2x2 tile ``g`` of
    ``gy`` ``(N, C_out, H_out, W_out)`` (zero past the last row or column) into ``dm``
    ``(16, C_out, N * tH * tW)`` (for a 5-d ``gy``, ``(64, C_out, tiles)``). Returns ``dm``."""
    _check_io("winograd_output_grad", ("gy", "dm"), gy_, dm_)
    if gy_.ndim == 5:
        return _winograd_output_grad3(gy_, dm_)
    cdef cnp.ndarray gy = <cnp.ndarray>gy_, dm = <cnp.ndarray>dm_
    if gy.ndim != 4 or dm.ndim != 3 or dm.shape[0] != 16 or dm.shape[1] != gy.shape[1]:
        raise ShapeError(
            f"winograd_output_grad: expected gy (N, C, H, W) and dm (16, C, N*tiles), got "
            f"{_shape(gy)} and {_shape(dm)}"
        )
    cdef Py_ssize_t nb = gy.shape[0], o = gy.shape[1], oh = gy.shape[2], ow = gy.shape[3]
    cdef Py_ssize_t th = (oh + 1) // 2, tw = (ow + 1) // 2
    if dm.shape[2] != nb * th * tw:
        raise ShapeError(
            f"winograd_output_grad: dm {_shape(dm)} does not hold the tiles of gy {_shape(gy)}"
        )
    cdef int nt = _team(o * nb * th * tw * 16)
    cdef cnp.ndarray rows = np.empty(nt * 8 * tw, dtype=gy_.dtype)
    if cnp.PyArray_TYPE(gy) == cnp.NPY_FLOAT32:
        with nogil:
            _wino_out_grad(<const float*>cnp.PyArray_DATA(gy), <float*>cnp.PyArray_DATA(dm),
                           <float*>cnp.PyArray_DATA(rows), nb, o, oh, ow, th, tw, nt)
    else:
        with nogil:
            _wino_out_grad(<const double*>cnp.PyArray_DATA(gy), <double*>cnp.PyArray_DATA(dm),
                           <double*>cnp.PyArray_DATA(rows), nb, o, oh, ow, th, tw, nt)
    return dm


# --- 1-d Winograd F(m, r) transforms: dense (small) matrices, given by the caller --------------


@cython.boundscheck(False)
@cython.wraparound(False)
@cython.cdivision(True)
cdef void _wino1_gather(const floating_t* x, const double* mat, floating_t* v, floating_t* rows,
                        Py_ssize_t nb, Py_ssize_t c, Py_ssize_t n, Py_ssize_t p, Py_ssize_t q,
                        Py_ssize_t m, Py_ssize_t lo, Py_ssize_t tiles, int nt) noexcept nogil:
    # v (p, c, nb*tiles) = mat (p x q) times each window x[m*t - lo + j], j < q, of the rows of
    # x (nb, c, n), zero outside. Each row is first split into its m phases (``rows``: m rows
    # of ``w`` per thread), so that window element j over the tiles is one contiguous run,
    # phase j % m from j // m on, and mat's entries are axpys along the tiles.
    cdef Py_ssize_t cb, ci, b, i, j, k, t, w = tiles + (q - 1) // m, plane = c * nb * tiles
    cdef floating_t* d
    cdef floating_t* out
    cdef const floating_t* src
    cdef const floating_t* run
    cdef floating_t a
    for cb in prange(c * nb, schedule="static", num_threads=nt):
        ci = cb // nb
        b = cb % nb
        d = rows + threadid() * m * w
        src = x + (b * c + ci) * n
        for k in range(w):
            for i in range(m):
                j = m * k + i - lo
                d[i * w + k] = src[j] if 0 <= j < n else 0
        out = v + (ci * nb + b) * tiles
        for i in range(p):
            for t in range(tiles):
                out[i * plane + t] = 0
            for j in range(q):
                a = <floating_t>mat[i * q + j]
                if a != 0:
                    run = d + (j % m) * w + j // m
                    for t in range(tiles):
                        out[i * plane + t] += a * run[t]


@cython.boundscheck(False)
@cython.wraparound(False)
@cython.cdivision(True)
cdef void _wino1_scatter(const floating_t* mm, const double* mat, floating_t* y, floating_t* rows,
                         Py_ssize_t nb, Py_ssize_t o, Py_ssize_t n, Py_ssize_t p, Py_ssize_t m,
                         Py_ssize_t tiles, int nt) noexcept nogil:
    # y (nb, o, n) = mat (m x p) times each tile's p values of mm (p, o, nb*tiles): tile t's m
    # outputs at m*t + i, cropped at n (``rows``: m rows of ``tiles`` per thread).
    cdef Py_ssize_t cb, co, b, i, k, t, plane = o * nb * tiles
    cdef floating_t* s
    cdef floating_t* yrow
    cdef const floating_t* src
    cdef floating_t a
    for cb in prange(o * nb, schedule="static", num_threads=nt):
        co = cb // nb
        b = cb % nb
        s = rows + threadid() * m * tiles
        src = mm + (co * nb + b) * tiles
        for i in range(m):
            for t in range(tiles):
                s[i * tiles + t] = 0
            for k in range(p):
                a = <floating_t>mat[i * p + k]
                if a != 0:
                    for t in range(tiles):
                        s[i * tiles + t] += a * src[k * plane + t]
        yrow = y + (b * o + co) * n
        for t in range(tiles):
            for i in range(min(m, n - m * t)):
                yrow[m * t + i] = s[i * tiles + t]


def winograd1d_gather(x_, mat_, Py_ssize_t m, Py_ssize_t lo, v_):
    """Write ``mat`` ``(P, Q)`` times each ``Q``-wide window ``x[..., m*t - lo : m*t - lo + Q]``
    of ``x`` ``(N, C, L)`` (zero outside) into ``v`` ``(P, C, N * T)``, ``T`` tiles a sample:
    a 1-d Winograd input transform (``Q = P``), or the output gradient's (``Q = m``, ``lo =
    0``). Returns ``v``."""
    _check_io("winograd1d_gather", ("x", "v"), x_, v_)
    cdef cnp.ndarray x = <cnp.ndarray>x_, v = <cnp.ndarray>v_
    cdef cnp.ndarray mat = np.ascontiguousarray(mat_, dtype=np.float64)
    if (x.ndim != 3 or v.ndim != 3 or mat.ndim != 2 or m < 1 or v.shape[0] != mat.shape[0]
            or v.shape[1] != x.shape[1] or x.shape[0] < 1 or v.shape[2] % x.shape[0]):
        raise ShapeError(
            f"winograd1d_gather: expected x (N, C, L), mat (P, Q), v (P, C, N*T) and m >= 1, "
            f"got {_shape(x)}, {_shape(mat)}, {_shape(v)}, m={m}"
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
            or mm.shape[0] != mat.shape[1] or mm.shape[1] != y.shape[1]
            or mm.shape[2] != y.shape[0] * ((y.shape[2] + mat.shape[0] - 1) // mat.shape[0])):
        raise ShapeError(
            f"winograd1d_scatter: expected m (P, C, N*T), mat (m, P), y (N, C, L), T = "
            f"ceil(L / m), got {_shape(mm)}, {_shape(mat)}, {_shape(y)}"
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
