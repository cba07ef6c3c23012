# cython: language_level=3
"""nogil CPU loops of the resampling family: deformable convolution's bilinear sampling, and
``grid_sample``'s (bilinear or nearest, 4-D and 5-D, every padding mode).

``deform_im2col`` builds the column matrix of ``deform_conv2d`` (each input channel read
bilinearly at every offset kernel tap of every output pixel, times the mask), and
``deform_col2im`` runs its transpose in one pass: the input's gradient (scattered to the four
corners), the offsets' (the samples' slopes) and the mask's (the samples). The generic NumPy
path gathers and scatter-adds each corner through index arrays the size of the column matrix;
these loops read the corners in place (``benchmarks/bench_resample.py``).

They are the CPU half of the paired ``deform_conv2d`` override (``ferro.ops.fused``): the
adapter asks :func:`accepts` / :func:`accepts_grad` first (array flags only, nothing raised),
and each kernel checks its arguments again before it touches memory (docs/design.md, "Kernel
accept checks"). The arithmetic is torchvision's ``deform_conv2d`` CPU kernel's.
"""

cimport numpy as cnp
from libc.math cimport fabs, floor, fmod, rint

from ferro._C.typedefs cimport floating_t

import numpy as np

from ferro.errors import ArgumentError, ArgumentTypeError, DtypeError, ShapeError

cnp.import_array()

#: The kernels this module implements (``ferro.ops.fused`` binds entries by these names).
FUSED_KERNELS = frozenset(
    {"deform_col2im", "deform_im2col", "grid_sample_bwd", "grid_sample_fwd"}
)


cdef inline bint _plain(object o, int typenum) noexcept:
    # An exact ndarray of dtype ``typenum``, C-contiguous, aligned, in native byte order.
    if type(o) is not cnp.ndarray:
        return False
    cdef cnp.ndarray a = <cnp.ndarray>o
    return (cnp.PyArray_TYPE(a) == typenum and cnp.PyArray_ISCARRAY_RO(a)
            and cnp.PyArray_ISNOTSWAPPED(a))


cpdef bint accepts(tuple arrays):
    """True if every array is an exact float32/float64 ndarray, all of one dtype, C-contiguous,
    aligned and in native byte order (shapes may differ: the kernels check them)."""
    if not arrays or type(arrays[0]) is not cnp.ndarray:
        return False
    cdef int t = cnp.PyArray_TYPE(<cnp.ndarray>arrays[0])
    if t != cnp.NPY_FLOAT32 and t != cnp.NPY_FLOAT64:
        return False
    for a in arrays:
        if not _plain(a, t):
            return False
    return True


cpdef bint accepts_grad(object gy, tuple arrays):
    """True if a backward kernel takes the upstream gradient ``gy`` with ``arrays``: all of
    them, ``gy`` included, pass :func:`accepts`."""
    return accepts((gy,) + arrays)


cdef int _check(str who, tuple names, tuple arrays, tuple shapes) except -1:
    # Refuse (raising the error that says why) unless ``accepts(arrays)`` and every array has
    # the shape it must have.
    if not accepts(arrays):
        for name, a in zip(names, arrays):
            if type(a) is not np.ndarray:
                raise ArgumentTypeError(
                    f"{who}: {name} must be a numpy.ndarray, got {type(a).__name__}"
                )
        for name, a in zip(names, arrays):
            if not a.dtype.isnative:
                raise DtypeError(f"{who}: {name} is not in native byte order")
            if a.dtype != arrays[0].dtype or a.dtype.type not in (np.float32, np.float64):
                raise DtypeError(
                    f"{who}: every array must be float32 or float64 of one dtype, "
                    f"{name} is {a.dtype} (first: {arrays[0].dtype})"
                )
        raise ShapeError(f"{who}: every array must be C-contiguous and aligned")
    for name, a, shape in zip(names, arrays, shapes):
        if a.shape != shape:
            raise ShapeError(f"{who}: {name} must have shape {shape}, got {a.shape}")
    return 0


cdef struct Geometry:
    # The shapes of one deform_conv2d call.
    Py_ssize_t nb, cin, h, w, og, kh, kw, sh, sw, ph, pw, dh, dw, ho, wo


cdef Geometry _geometry(tuple xshape, tuple oshape, tuple kernel, tuple stride, tuple padding,
                        tuple dilation) except *:
    # The geometry read from the arrays' shapes and the integer parameters (validated).
    cdef Geometry g
    if len(xshape) != 4 or len(oshape) != 4:
        raise ShapeError(
            f"deform kernels: input and offset must be 4-D, got {xshape} and {oshape}"
        )
    g.nb, g.cin, g.h, g.w = xshape
    g.kh, g.kw = kernel
    g.sh, g.sw = stride
    g.ph, g.pw = padding
    g.dh, g.dw = dilation
    g.ho, g.wo = oshape[2], oshape[3]
    if g.kh < 1 or g.kw < 1 or oshape[1] % (2 * g.kh * g.kw) or oshape[0] != g.nb:
        raise ShapeError(
            f"deform kernels: offset of shape {oshape} does not fit input {xshape} and "
            f"kernel {kernel}"
        )
    g.og = oshape[1] // (2 * g.kh * g.kw)
    if g.og == 0 or g.cin % g.og:
        raise ShapeError(
            f"deform kernels: {g.cin} input channels are not divisible by {g.og} offset groups"
        )
    return g


cdef tuple _shapes(Geometry g):
    # x, offset, mask and the column matrix, as the kernels need them.
    k = g.kh * g.kw
    return (
        (g.nb, g.cin, g.h, g.w),
        (g.nb, 2 * g.og * k, g.ho, g.wo),
        (g.nb, g.og * k, g.ho, g.wo),
        (g.nb, g.cin * k, g.ho * g.wo),
    )


cdef inline floating_t _sample(const floating_t* img, Py_ssize_t h, Py_ssize_t w, floating_t y,
                               floating_t x) noexcept nogil:
    # Bilinear read of an (h, w) image at (y, x), zero outside (torchvision's rule).
    if y <= -1 or y >= h or x <= -1 or x >= w:
        return 0
    cdef Py_ssize_t y0 = <Py_ssize_t>floor(y), x0 = <Py_ssize_t>floor(x)
    cdef floating_t ly = y - y0, lx = x - x0
    cdef floating_t hy = 1 - ly, hx = 1 - lx, v = 0
    if y0 >= 0:
        if x0 >= 0:
            v += hy * hx * img[y0 * w + x0]
        if x0 + 1 < w:
            v += hy * lx * img[y0 * w + x0 + 1]
    if y0 + 1 < h:
        if x0 >= 0:
            v += ly * hx * img[(y0 + 1) * w + x0]
        if x0 + 1 < w:
            v += ly * lx * img[(y0 + 1) * w + x0 + 1]
    return v


cdef void _im2col(const floating_t* x, const floating_t* off, const floating_t* mask,
                  floating_t* cols, Geometry g) noexcept nogil:
    cdef Py_ssize_t k = g.kh * g.kw, L = g.ho * g.wo, cg = g.cin // g.og
    cdef Py_ssize_t b, c, t, i, j, oy, ox, q, grp
    cdef const floating_t* img
    cdef const floating_t* offy
    cdef const floating_t* offx
    cdef const floating_t* m
    cdef floating_t* out
    cdef floating_t v
    for b in range(g.nb):
        for c in range(g.cin):
            img = x + (b * g.cin + c) * g.h * g.w
            grp = c // cg
            for t in range(k):
                i = t // g.kw
                j = t % g.kw
                offy = off + ((b * g.og + grp) * 2 * k + 2 * t) * L
                offx = offy + L
                m = mask + ((b * g.og + grp) * k + t) * L if mask != NULL else NULL
                out = cols + ((b * g.cin + c) * k + t) * L
                for oy in range(g.ho):
                    for ox in range(g.wo):
                        q = oy * g.wo + ox
                        v = _sample(img, g.h, g.w,
                                    <floating_t>(oy * g.sh - g.ph + i * g.dh) + offy[q],
                                    <floating_t>(ox * g.sw - g.pw + j * g.dw) + offx[q])
                        out[q] = v * m[q] if m != NULL else v


cdef void _col2im(const floating_t* x, const floating_t* off, const floating_t* mask,
                  const floating_t* gcols, floating_t* gx, floating_t* goff, floating_t* gmask,
                  Geometry g) noexcept nogil:
    cdef Py_ssize_t k = g.kh * g.kw, L = g.ho * g.wo, cg = g.cin // g.og
    cdef Py_ssize_t b, c, t, i, j, oy, ox, q, grp, y0, x0, base
    cdef const floating_t* img
    cdef floating_t* gimg
    cdef const floating_t* offy
    cdef const floating_t* offx
    cdef const floating_t* gc
    cdef floating_t y, xx, ly, lx, hy, hx, v00, v01, v10, v11, gv, mv
    cdef bint in00, in01, in10, in11
    for b in range(g.nb):
        for c in range(g.cin):
            img = x + (b * g.cin + c) * g.h * g.w
            gimg = gx + (b * g.cin + c) * g.h * g.w if gx != NULL else NULL
            grp = c // cg
            for t in range(k):
                i = t // g.kw
                j = t % g.kw
                base = ((b * g.og + grp) * 2 * k + 2 * t) * L
                offy = off + base
                offx = offy + L
                gc = gcols + ((b * g.cin + c) * k + t) * L
                for oy in range(g.ho):
                    for ox in range(g.wo):
                        q = oy * g.wo + ox
                        y = <floating_t>(oy * g.sh - g.ph + i * g.dh) + offy[q]
                        xx = <floating_t>(ox * g.sw - g.pw + j * g.dw) + offx[q]
                        if y <= -1 or y >= g.h or xx <= -1 or xx >= g.w:
                            continue
                        y0 = <Py_ssize_t>floor(y)
                        x0 = <Py_ssize_t>floor(xx)
                        ly = y - y0
                        lx = xx - x0
                        hy = 1 - ly
                        hx = 1 - lx
                        in00 = y0 >= 0 and x0 >= 0
                        in01 = y0 >= 0 and x0 + 1 < g.w
                        in10 = y0 + 1 < g.h and x0 >= 0
                        in11 = y0 + 1 < g.h and x0 + 1 < g.w
                        v00 = img[y0 * g.w + x0] if in00 else 0
                        v01 = img[y0 * g.w + x0 + 1] if in01 else 0
                        v10 = img[(y0 + 1) * g.w + x0] if in10 else 0
                        v11 = img[(y0 + 1) * g.w + x0 + 1] if in11 else 0
                        mv = 1
                        if mask != NULL:
                            mv = mask[((b * g.og + grp) * k + t) * L + q]
                            if gmask != NULL:
                                gmask[((b * g.og + grp) * k + t) * L + q] += gc[q] * (
                                    hy * hx * v00 + hy * lx * v01 + ly * hx * v10
                                    + ly * lx * v11)
                        gv = gc[q] * mv
                        if gimg != NULL:
                            if in00:
                                gimg[y0 * g.w + x0] += gv * hy * hx
                            if in01:
                                gimg[y0 * g.w + x0 + 1] += gv * hy * lx
                            if in10:
                                gimg[(y0 + 1) * g.w + x0] += gv * ly * hx
                            if in11:
                                gimg[(y0 + 1) * g.w + x0 + 1] += gv * ly * lx
                        if goff != NULL:
                            goff[base + q] += gv * (hx * (v10 - v00) + lx * (v11 - v01))
                            goff[base + L + q] += gv * (hy * (v01 - v00) + ly * (v11 - v10))


def deform_im2col(x, offset, mask, tuple kernel, tuple stride, tuple padding, tuple dilation):
    """The column matrix (nb, cin*kh*kw, ho*wo) of ``deform_conv2d`` for input ``x``
    (nb, cin, h, w), ``offset`` (nb, 2*og*kh*kw, ho, wo) and ``mask`` (nb, og*kh*kw, ho, wo) or
    None: row ``c*kh*kw + t`` holds channel c read at kernel tap t of every output pixel."""
    cdef Geometry g = _geometry(np.shape(x), np.shape(offset), kernel, stride, padding,
                                dilation)
    arrays = (x, offset) if mask is None else (x, offset, mask)
    names = ("x", "offset", "mask")
    shapes = _shapes(g)
    _check("deform_im2col", names, arrays, shapes[:len(arrays)])
    cols = np.empty(shapes[3], dtype=x.dtype)
    if x.dtype == np.float32:
        _run_im2col[float](x, offset, mask, cols, g)
    else:
        _run_im2col[double](x, offset, mask, cols, g)
    return cols


cdef void _run_im2col(cnp.ndarray x, cnp.ndarray offset, object mask, cnp.ndarray cols,
                      Geometry g, floating_t kind=0):
    cdef const floating_t* xp = <const floating_t*>cnp.PyArray_DATA(x)
    cdef const floating_t* op = <const floating_t*>cnp.PyArray_DATA(offset)
    cdef const floating_t* mp = NULL
    cdef floating_t* cp = <floating_t*>cnp.PyArray_DATA(cols)
    if mask is not None:
        mp = <const floating_t*>cnp.PyArray_DATA(<cnp.ndarray>mask)
    with nogil:
        _im2col(xp, op, mp, cp, g)


def deform_col2im(x, offset, mask, gcols, tuple kernel, tuple stride, tuple padding,
                  tuple dilation, bint need_x=True, bint need_offset=True, bint need_mask=True):
    """The transpose of :func:`deform_im2col` for the upstream ``gcols``: ``(gx, goffset,
    gmask)``, each None where not needed (``gmask`` always None without a mask)."""
    cdef Geometry g = _geometry(np.shape(x), np.shape(offset), kernel, stride, padding,
                                dilation)
    shapes = _shapes(g)
    if mask is None:
        _check("deform_col2im", ("x", "offset", "gcols"), (x, offset, gcols),
               (shapes[0], shapes[1], shapes[3]))
    else:
        _check("deform_col2im", ("x", "offset", "mask", "gcols"), (x, offset, mask, gcols),
               shapes)
    gx = np.zeros(shapes[0], dtype=x.dtype) if need_x else None
    goff = np.zeros(shapes[1], dtype=x.dtype) if need_offset else None
    gmask = np.zeros(shapes[2], dtype=x.dtype) if need_mask and mask is not None else None
    if x.dtype == np.float32:
        _run_col2im[float](x, offset, mask, gcols, gx, goff, gmask, g)
    else:
        _run_col2im[double](x, offset, mask, gcols, gx, goff, gmask, g)
    return gx, goff, gmask


cdef void _run_col2im(cnp.ndarray x, cnp.ndarray offset, object mask, cnp.ndarray gcols,
                      object gx, object goff, object gmask, Geometry g, floating_t kind=0):
    cdef const floating_t* mp = NULL
    cdef floating_t* gxp = NULL
    cdef floating_t* gop = NULL
    cdef floating_t* gmp = NULL
    if mask is not None:
        mp = <const floating_t*>cnp.PyArray_DATA(<cnp.ndarray>mask)
    if gx is not None:
        gxp = <floating_t*>cnp.PyArray_DATA(<cnp.ndarray>gx)
    if goff is not None:
        gop = <floating_t*>cnp.PyArray_DATA(<cnp.ndarray>goff)
    if gmask is not None:
        gmp = <floating_t*>cnp.PyArray_DATA(<cnp.ndarray>gmask)
    cdef const floating_t* xp = <const floating_t*>cnp.PyArray_DATA(x)
    cdef const floating_t* op = <const floating_t*>cnp.PyArray_DATA(offset)
    cdef const floating_t* gp = <const floating_t*>cnp.PyArray_DATA(gcols)
    with nogil:
        _col2im(xp, op, mp, gp, gxp, gop, gmp, g)


# --- grid_sample ------------------------------------------------------------------------------
# x (nb, c, *sizes) with 2 or 3 spatial dims, grid (nb, P, d) with grid[..., 0] addressing the
# last spatial dim, y and gy (nb, c, P); mode 0 bilinear, 1 nearest; padding 0 zeros, 1 border,
# 2 reflection. The arithmetic is the generic op's and the GPU kernel's
# (ferro/ops/resampling.py: _grid_coords, _reflect, _clip, _corners, _nearest_points;
# ferro/cuda/kernels/resampling.cu), the loops PyTorch's CPU order: per batch element, each
# point's corners (flat index, -1 outside, and weight) once, then channel by channel along the
# points, so that y and gy are read and written in order.

_GRID_MODES = {"bilinear": 0, "nearest": 1}
_PADDING_MODES = {"zeros": 0, "border": 1, "reflection": 2}


cdef struct GridGeom:
    Py_ssize_t nb, c, p, d, k, plane
    Py_ssize_t size[3]
    int mode, padding, align


cdef inline floating_t _gs_reflect(floating_t c, floating_t twice_low, floating_t twice_high,
                                   floating_t* slope) noexcept nogil:
    # PyTorch's reflect_coordinates_set_grad: c reflected into [twice_low / 2, twice_high / 2].
    if twice_low == twice_high:
        slope[0] = 0
        return 0
    cdef floating_t low = twice_low / 2, span = (twice_high - twice_low) / 2
    c -= low
    cdef floating_t sign = -1 if c < 0 else 1
    c = fabs(c)
    cdef floating_t extra = fmod(c, span)
    cdef bint even = fmod(floor(c / span), 2) == 0
    slope[0] *= sign if even else -sign
    return extra + low if even else span - extra + low


cdef inline floating_t _gs_coord(floating_t g, Py_ssize_t n, GridGeom* s,
                                 floating_t* slope) noexcept nogil:
    # The source coordinate (pixels) of normalized g along a dim of size n, and its slope.
    cdef floating_t c, hi = n - 1
    if s.align:
        slope[0] = <floating_t>((n - 1) / 2.0)
        c = (g + 1) * slope[0]
    else:
        slope[0] = <floating_t>(n / 2.0)
        c = ((g + 1) * <floating_t>n - 1) / 2
    if s.padding == 2:
        if s.align:
            c = _gs_reflect(c, <floating_t>0, <floating_t>(2 * (n - 1)), slope)
        else:
            c = _gs_reflect(c, <floating_t>-1, <floating_t>(2 * n - 1), slope)
    if s.padding >= 1:  # border, and reflection's final clip
        if not (c > 0 and c < hi):
            slope[0] = 0
        c = 0 if c < 0 else (hi if c > hi else c)
    return c


cdef void _gs_points(const floating_t* grid, GridGeom* s, Py_ssize_t b, Py_ssize_t* lin,
                     floating_t* w, floating_t* f, floating_t* slope) noexcept nogil:
    # Each point q of batch element b: its s.k corners' flat indices lin[q*k + bits] (-1
    # outside) and weights w (bit d-1-j of bits set: the upper neighbour along dim j), and per
    # dim j (spatial order) the fraction f[3q + j] and the slope d coord / d grid slope[3q + j].
    cdef Py_ssize_t q, j, bits, li, bj
    cdef floating_t c[3]
    cdef floating_t lo[3]
    cdef floating_t i, wt
    cdef bint inside
    cdef const floating_t* g
    for q in range(s.p):
        g = grid + (b * s.p + q) * s.d
        for j in range(s.d):
            c[j] = _gs_coord(g[s.d - 1 - j], s.size[j], s, slope + 3 * q + j)
            lo[j] = floor(c[j])
            f[3 * q + j] = c[j] - lo[j]
        if s.mode == 1:  # nearest: round half to even, as rint
            li = 0
            for j in range(s.d):
                i = rint(c[j])
                if not (i >= 0 and i < s.size[j]):
                    li = -1
                    break
                li = li * s.size[j] + <Py_ssize_t>i
            lin[q] = li
            w[q] = 1
            continue
        for bits in range(s.k):
            li, wt, inside = 0, 1, True
            for j in range(s.d):
                bj = (bits >> (s.d - 1 - j)) & 1
                i = lo[j] + bj
                inside = inside and i >= 0 and i < s.size[j]
                if inside:
                    li = li * s.size[j] + <Py_ssize_t>i
                wt *= f[3 * q + j] if bj else 1 - f[3 * q + j]
            lin[q * s.k + bits] = li if inside else -1
            w[q * s.k + bits] = wt


cdef void _gs_fwd(const floating_t* x, const floating_t* grid, floating_t* y, GridGeom s,
                  Py_ssize_t* lin, floating_t* w, floating_t* f,
                  floating_t* slope) noexcept nogil:
    cdef Py_ssize_t b, ch, q, bits, li
    cdef const floating_t* xc
    cdef floating_t* yc
    cdef floating_t acc
    for b in range(s.nb):
        _gs_points(grid, &s, b, lin, w, f, slope)
        for ch in range(s.c):
            xc = x + (b * s.c + ch) * s.plane
            yc = y + (b * s.c + ch) * s.p
            if s.k == 1:  # nearest: one gather a point
                for q in range(s.p):
                    li = lin[q]
                    yc[q] = xc[li] if li >= 0 else 0
                continue
            for q in range(s.p):
                acc = 0
                for bits in range(s.k):
                    li = lin[q * s.k + bits]
                    if li >= 0:
                        acc = acc + xc[li] * w[q * s.k + bits]
                yc[q] = acc


cdef void _gs_bwd(const floating_t* gy, const floating_t* x, const floating_t* grid,
                  floating_t* gx, floating_t* ggrid, GridGeom s, Py_ssize_t* lin, floating_t* w,
                  floating_t* f, floating_t* slope, floating_t* v) noexcept nogil:
    # gx (zeroed, NULL if not wanted) += gy times the corner weights; ggrid (NULL if not
    # wanted) = per point, the sum over corners and channels of x * gy (v) times the corner
    # weight's derivative along each coordinate, times that coordinate's slope (0 for nearest).
    cdef Py_ssize_t b, ch, q, bits, li, j, jj, m
    cdef const floating_t* gc
    cdef const floating_t* xc
    cdef floating_t* gxc
    cdef floating_t g, dk, dw
    cdef floating_t dc[3]
    cdef bint sums = ggrid != NULL and s.mode == 0  # nearest: the grid's gradient is 0
    for b in range(s.nb):
        _gs_points(grid, &s, b, lin, w, f, slope)
        for m in range(s.p * s.k):
            v[m] = 0
        for ch in range(s.c):
            gc = gy + (b * s.c + ch) * s.p
            xc = x + (b * s.c + ch) * s.plane
            gxc = gx + (b * s.c + ch) * s.plane if gx != NULL else NULL
            if s.k == 1 and gxc != NULL:  # nearest: one scatter a point, no grid sums
                for q in range(s.p):
                    li = lin[q]
                    if li >= 0:
                        gxc[li] += gc[q]
                continue
            for q in range(s.p):
                g = gc[q]
                for bits in range(s.k):
                    li = lin[q * s.k + bits]
                    if li < 0:
                        continue
                    if gxc != NULL:
                        gxc[li] += g * w[q * s.k + bits]
                    if sums:
                        v[q * s.k + bits] += xc[li] * g
        if ggrid == NULL:
            continue
        for q in range(s.p):
            for j in range(s.d):
                dc[j] = 0
                if s.mode == 1:
                    continue
                for bits in range(s.k):
                    if lin[q * s.k + bits] < 0:
                        continue
                    dk = 1  # the weight's derivative along dim j: the other factors, signed
                    for jj in range(s.d):
                        if jj != j:
                            dw = f[3 * q + jj]
                            dk *= dw if (bits >> (s.d - 1 - jj)) & 1 else 1 - dw
                    dc[j] += v[q * s.k + bits] * (dk if (bits >> (s.d - 1 - j)) & 1 else -dk)
            for j in range(s.d):
                ggrid[(b * s.p + q) * s.d + j] = dc[s.d - 1 - j] * slope[3 * q + s.d - 1 - j]


cdef GridGeom _grid_geom(str who, x, grid, str mode, str padding_mode,
                         bint align_corners) except *:
    cdef GridGeom s
    cdef Py_ssize_t j
    d = x.ndim - 2
    if (d not in (2, 3) or grid.ndim != x.ndim or grid.shape[d + 1] != d
            or grid.shape[0] != x.shape[0]):
        raise ShapeError(
            f"{who}: x must be 4-D or 5-D and grid (N, *out, {d}) with N = {x.shape[0]}, got "
            f"{x.shape} and {grid.shape}"
        )
    if mode not in _GRID_MODES or padding_mode not in _PADDING_MODES:
        raise ArgumentError(
            f"{who}: mode must be one of {tuple(_GRID_MODES)} and padding_mode one of "
            f"{tuple(_PADDING_MODES)}, got {mode!r} and {padding_mode!r}"
        )
    s.nb, s.c, s.d = x.shape[0], x.shape[1], d
    s.p = int(np.prod(grid.shape[1 : d + 1]))
    s.plane = 1
    for j in range(3):
        s.size[j] = x.shape[2 + j] if j < d else 1
        s.plane *= s.size[j]
    s.mode, s.padding, s.align = _GRID_MODES[mode], _PADDING_MODES[padding_mode], align_corners
    s.k = 1 if s.mode == 1 else 1 << d
    return s


def _grid_buffers(GridGeom s, dtype):
    # Per batch element: corner indices and weights, fractions and slopes, the grid's sums.
    return (np.empty(s.p * s.k, dtype=np.intp), np.empty(s.p * s.k, dtype=dtype),
            np.empty(3 * s.p, dtype=dtype), np.empty(3 * s.p, dtype=dtype),
            np.empty(s.p * s.k, dtype=dtype))


def grid_sample_fwd(x, grid, str mode, str padding_mode, bint align_corners):
    """``x`` ``(N, C, *sizes)`` sampled at ``grid`` ``(N, *out, d)``, as ``F.grid_sample``:
    ``(N, C, *out)``."""
    _check("grid_sample_fwd", ("x", "grid"), (x, grid), (x.shape, grid.shape))
    cdef GridGeom s = _grid_geom("grid_sample_fwd", x, grid, mode, padding_mode, align_corners)
    y = np.empty(x.shape[:2] + grid.shape[1 : s.d + 1], dtype=x.dtype)
    bufs = _grid_buffers(s, x.dtype)
    if x.dtype == np.float32:
        _run_gs[float](x, grid, None, y, None, s, bufs)
    else:
        _run_gs[double](x, grid, None, y, None, s, bufs)
    return y


def grid_sample_bwd(gy, x, grid, str mode, str padding_mode, bint align_corners,
                    bint need_x=True, bint need_grid=True):
    """``(gx, ggrid)`` of :func:`grid_sample_fwd` for the upstream ``gy`` ``(N, C, *out)``, each
    None where not needed (``ggrid`` is zeros for ``nearest``)."""
    _check("grid_sample_bwd", ("gy", "x", "grid"), (gy, x, grid),
           (x.shape[:2] + grid.shape[1 : grid.ndim - 1], x.shape, grid.shape))
    cdef GridGeom s = _grid_geom("grid_sample_bwd", x, grid, mode, padding_mode, align_corners)
    gx = np.zeros(x.shape, dtype=x.dtype) if need_x else None
    ggrid = np.empty(grid.shape, dtype=x.dtype) if need_grid else None
    if need_x or need_grid:
        bufs = _grid_buffers(s, x.dtype)
        if x.dtype == np.float32:
            _run_gs[float](x, grid, gy, gx, ggrid, s, bufs)
        else:
            _run_gs[double](x, grid, gy, gx, ggrid, s, bufs)
    return gx, ggrid


cdef void _run_gs(cnp.ndarray x, cnp.ndarray grid, object gy, object out, object ggrid,
                  GridGeom s, tuple bufs, floating_t kind=0):
    # gy None: the forward into out (y); else the backward into out (gx) and ggrid (each None
    # where not wanted). The arrays were made or checked by the callers.
    cdef const floating_t* xp = <const floating_t*>cnp.PyArray_DATA(x)
    cdef const floating_t* gp = <const floating_t*>cnp.PyArray_DATA(grid)
    cdef Py_ssize_t* lin = <Py_ssize_t*>cnp.PyArray_DATA(<cnp.ndarray>bufs[0])
    cdef floating_t* w = <floating_t*>cnp.PyArray_DATA(<cnp.ndarray>bufs[1])
    cdef floating_t* f = <floating_t*>cnp.PyArray_DATA(<cnp.ndarray>bufs[2])
    cdef floating_t* sl = <floating_t*>cnp.PyArray_DATA(<cnp.ndarray>bufs[3])
    cdef floating_t* v = <floating_t*>cnp.PyArray_DATA(<cnp.ndarray>bufs[4])
    cdef floating_t* op = NULL
    cdef floating_t* ggp = NULL
    cdef const floating_t* gyp = NULL
    if out is not None:
        op = <floating_t*>cnp.PyArray_DATA(<cnp.ndarray>out)
    if ggrid is not None:
        ggp = <floating_t*>cnp.PyArray_DATA(<cnp.ndarray>ggrid)
    if gy is None:
        with nogil:
            _gs_fwd(xp, gp, op, s, lin, w, f, sl)
        return
    gyp = <const floating_t*>cnp.PyArray_DATA(<cnp.ndarray>gy)
    with nogil:
        _gs_bwd(gyp, xp, gp, op, ggp, s, lin, w, f, sl, v)
