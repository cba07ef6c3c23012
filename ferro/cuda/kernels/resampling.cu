// Deformable convolution's bilinear sampling (torchvision's deform_conv2d): the GPU kernels
// behind ferro.cuda.resampling.deform_im2col / deform_col2im, the same arithmetic as the CPU
// loops of ferro/_C/resampling_kernels.pyx. Layouts (C-contiguous): x (nb, cin, h, w), offset
// (nb, og, K, 2, L) with K = kh * kw taps and L = ho * wo output pixels, mask (nb, og, K, L),
// columns (nb, cin, K, L). Grid-stride loops over flat indices (long long: a column matrix may
// pass 2^31 elements).

#ifndef __CUDACC_RTC__
// The CPU emulation of the test suite (g++) has no floating-point atomicAdd: a CAS loop.
template <typename T> inline T ferro_emu_atomic_add(T* p, T v) {
    T old, next;
    __atomic_load(p, &old, __ATOMIC_RELAXED);
    do {
        next = old + v;
    } while (!__atomic_compare_exchange(p, &old, &next, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
    return old;
}
inline float atomicAdd(float* p, float v) { return ferro_emu_atomic_add(p, v); }
inline double atomicAdd(double* p, double v) { return ferro_emu_atomic_add(p, v); }
#endif

struct ferro_deform_geom {
    long long nb, cin, h, w, og, kh, kw, sh, sw, ph, pw, dh, dw, ho, wo;
};

// The geometry arrives as 15 int64 in device memory (a plain pointer argument, which every
// launcher passes alike), in the order of the struct.
__device__ __forceinline__ ferro_deform_geom ferro_deform_load(const long long* p) {
    ferro_deform_geom g;
    g.nb = p[0]; g.cin = p[1]; g.h = p[2]; g.w = p[3]; g.og = p[4]; g.kh = p[5]; g.kw = p[6];
    g.sh = p[7]; g.sw = p[8]; g.ph = p[9]; g.pw = p[10]; g.dh = p[11]; g.dw = p[12];
    g.ho = p[13]; g.wo = p[14];
    return g;
}

// The sampling row and column of tap t at output pixel q (offsets of offset group grp).
template <typename T>
__device__ __forceinline__ void ferro_deform_point(const ferro_deform_geom& g, const T* off,
                                                   long long b, long long grp, long long t,
                                                   long long q, T& y, T& x) {
    const long long K = g.kh * g.kw, L = g.ho * g.wo;
    const long long base = ((b * g.og + grp) * 2 * K + 2 * t) * L + q;
    const long long i = t / g.kw, j = t % g.kw, oy = q / g.wo, ox = q % g.wo;
    y = T(oy * g.sh - g.ph + i * g.dh) + off[base];
    x = T(ox * g.sw - g.pw + j * g.dw) + off[base + L];
}

// Bilinear read of an (h, w) image at (y, x), zero outside; the four corner values too.
template <typename T>
__device__ __forceinline__ T ferro_deform_read(const T* img, long long h, long long w, T y, T x,
                                               T* v) {
    const long long y0 = (long long)floor(y), x0 = (long long)floor(x);
    v[0] = (y0 >= 0 && x0 >= 0) ? img[y0 * w + x0] : T(0);
    v[1] = (y0 >= 0 && x0 + 1 < w) ? img[y0 * w + x0 + 1] : T(0);
    v[2] = (y0 + 1 < h && x0 >= 0) ? img[(y0 + 1) * w + x0] : T(0);
    v[3] = (y0 + 1 < h && x0 + 1 < w) ? img[(y0 + 1) * w + x0 + 1] : T(0);
    const T ly = y - T(y0), lx = x - T(x0), hy = T(1) - ly, hx = T(1) - lx;
    return hy * hx * v[0] + hy * lx * v[1] + ly * hx * v[2] + ly * lx * v[3];
}

template <typename T>
__device__ __forceinline__ bool ferro_deform_outside(const ferro_deform_geom& g, T y, T x) {
    return y <= T(-1) || y >= T(g.h) || x <= T(-1) || x >= T(g.w);
}

// cols[b, c, t, q] = x[b, c] read at tap t of pixel q, times the mask (when has_mask).
template <typename T>
__global__ void ferro_deform_im2col(const T* __restrict__ x, const T* __restrict__ off,
                                    const T* __restrict__ mask, T* __restrict__ cols,
                                    const long long* __restrict__ gp, int has_mask) {
    const ferro_deform_geom g = ferro_deform_load(gp);
    const long long K = g.kh * g.kw, L = g.ho * g.wo, cg = g.cin / g.og;
    const long long n = g.nb * g.cin * K * L;
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < n;
         idx += (long long)blockDim.x * gridDim.x) {
        const long long q = idx % L, t = (idx / L) % K, c = (idx / (L * K)) % g.cin;
        const long long b = idx / (L * K * g.cin), grp = c / cg;
        T y, xx, v[4];
        ferro_deform_point(g, off, b, grp, t, q, y, xx);
        T val = ferro_deform_outside(g, y, xx)
                    ? T(0)
                    : ferro_deform_read(x + (b * g.cin + c) * g.h * g.w, g.h, g.w, y, xx, v);
        if (has_mask) val *= mask[((b * g.og + grp) * K + t) * L + q];
        cols[idx] = val;
    }
}

// gx (zeroed by the caller) += gcols * mask scattered to the four corners (atomics: any
// column may read any pixel).
template <typename T>
__global__ void ferro_deform_col2im_input(const T* __restrict__ off, const T* __restrict__ mask,
                                          const T* __restrict__ gcols, T* __restrict__ gx,
                                          const long long* __restrict__ gp, int has_mask) {
    const ferro_deform_geom g = ferro_deform_load(gp);
    const long long K = g.kh * g.kw, L = g.ho * g.wo, cg = g.cin / g.og;
    const long long n = g.nb * g.cin * K * L;
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < n;
         idx += (long long)blockDim.x * gridDim.x) {
        const long long q = idx % L, t = (idx / L) % K, c = (idx / (L * K)) % g.cin;
        const long long b = idx / (L * K * g.cin), grp = c / cg;
        T y, xx;
        ferro_deform_point(g, off, b, grp, t, q, y, xx);
        if (ferro_deform_outside(g, y, xx)) continue;
        T gv = gcols[idx];
        if (has_mask) gv *= mask[((b * g.og + grp) * K + t) * L + q];
        const long long y0 = (long long)floor(y), x0 = (long long)floor(xx);
        const T ly = y - T(y0), lx = xx - T(x0), hy = T(1) - ly, hx = T(1) - lx;
        T* img = gx + (b * g.cin + c) * g.h * g.w;
        if (y0 >= 0 && x0 >= 0) atomicAdd(img + y0 * g.w + x0, gv * hy * hx);
        if (y0 >= 0 && x0 + 1 < g.w) atomicAdd(img + y0 * g.w + x0 + 1, gv * hy * lx);
        if (y0 + 1 < g.h && x0 >= 0) atomicAdd(img + (y0 + 1) * g.w + x0, gv * ly * hx);
        if (y0 + 1 < g.h && x0 + 1 < g.w) atomicAdd(img + (y0 + 1) * g.w + x0 + 1, gv * ly * lx);
    }
}

// goffset[b, grp, t, :, q] and gmask[b, grp, t, q]: one thread per (b, grp, t, q) sums over the
// group's channels (no atomics). want: bit 0 the offsets, bit 1 the mask.
template <typename T>
__global__ void ferro_deform_col2im_coord(const T* __restrict__ x, const T* __restrict__ off,
                                          const T* __restrict__ mask,
                                          const T* __restrict__ gcols, T* __restrict__ goff,
                                          T* __restrict__ gmask,
                                          const long long* __restrict__ gp, int has_mask,
                                          int want) {
    const ferro_deform_geom g = ferro_deform_load(gp);
    const long long K = g.kh * g.kw, L = g.ho * g.wo, cg = g.cin / g.og;
    const long long n = g.nb * g.og * K * L;
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < n;
         idx += (long long)blockDim.x * gridDim.x) {
        const long long q = idx % L, t = (idx / L) % K, grp = (idx / (L * K)) % g.og;
        const long long b = idx / (L * K * g.og);
        T y, xx, v[4];
        ferro_deform_point(g, off, b, grp, t, q, y, xx);
        T gy_sum = T(0), gx_sum = T(0), gm_sum = T(0);
        if (!ferro_deform_outside(g, y, xx)) {
            const long long y0 = (long long)floor(y), x0 = (long long)floor(xx);
            const T ly = y - T(y0), lx = xx - T(x0), hy = T(1) - ly, hx = T(1) - lx;
            const T m = has_mask ? mask[((b * g.og + grp) * K + t) * L + q] : T(1);
            for (long long c = grp * cg; c < (grp + 1) * cg; ++c) {
                const T val = ferro_deform_read(x + (b * g.cin + c) * g.h * g.w, g.h, g.w, y, xx, v);
                const T gc = gcols[((b * g.cin + c) * K + t) * L + q];
                gm_sum += gc * val;
                gy_sum += gc * m * (hx * (v[2] - v[0]) + lx * (v[3] - v[1]));
                gx_sum += gc * m * (hy * (v[1] - v[0]) + ly * (v[3] - v[2]));
            }
        }
        if (want & 1) {
            const long long base = ((b * g.og + grp) * 2 * K + 2 * t) * L + q;
            goff[base] = gy_sum;
            goff[base + L] = gx_sum;
        }
        if ((want & 2) && has_mask) gmask[((b * g.og + grp) * K + t) * L + q] = gm_sum;
    }
}

// ---------------------------------------------------------------------------------------------
// interpolate: one axis at a time (the op is separable). x is viewed as (outer, n_in, inner) and
// y as (outer, n_out, inner); output j of the axis is sum_k weight[k, j] * x[index[k, j]] over
// the taps (the op's host tables: PyTorch's index and weight formulas for every mode). Backward
// runs the same kernel with the transpose's taps, so it is a gather too (no atomics, a fixed
// order). An index outside [0, n_in) gives NaN rather than a read out of bounds.
template <typename T>
__global__ void ferro_resample_axis(const T* __restrict__ x, const long long* __restrict__ index,
                                    const T* __restrict__ weight, T* __restrict__ y,
                                    long long outer, long long n_in, long long n_out,
                                    long long inner, long long taps) {
    const long long n = outer * n_out * inner;
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < n;
         idx += (long long)blockDim.x * gridDim.x) {
        const long long i = idx % inner, j = (idx / inner) % n_out, o = idx / (inner * n_out);
        const T* src = x + o * n_in * inner + i;
        T acc = T(0);
        for (long long k = 0; k < taps; ++k) {
            const long long s = index[k * n_out + j];
            if (s < 0 || s >= n_in) {
                acc = T(FERRO_INF) - T(FERRO_INF);  // NaN
                break;
            }
            acc += weight[k * n_out + j] * src[s * inner];
        }
        y[idx] = acc;
    }
}

// ---------------------------------------------------------------------------------------------
// grid_sample (D = 2 or 3 spatial dims): x (nb, c, *sizes), grid (nb, P, D) with grid[..., 0]
// addressing the last spatial dim, y and gy (nb, c, P). One thread per (batch, sample point)
// loops over the channels, as PyTorch's kernels do. mode: 0 bilinear, 1 nearest; padding: 0
// zeros, 1 border, 2 reflection. The coordinate arithmetic is the generic op's
// (ferro/ops/resampling.py: _grid_coords, _reflect, _clip, _corners, _nearest_points): the
// slope d coord / d grid is carried along, 0 where a coordinate is clipped.

struct ferro_gs_geom {
    long long nb, c, p, size[3], plane;
    int mode, padding, align;
};

// PyTorch's reflect_coordinates_set_grad: c reflected into [twice_low / 2, twice_high / 2].
template <typename T>
__device__ __forceinline__ T ferro_gs_reflect(T c, T twice_low, T twice_high, T& slope) {
    if (twice_low == twice_high) {
        slope = T(0);
        return T(0);
    }
    const T low = twice_low / T(2), span = (twice_high - twice_low) / T(2);
    c -= low;
    const T sign = c < T(0) ? T(-1) : T(1);
    c = fabs(c);
    const T extra = fmod(c, span);
    const bool even = fmod(floor(c / span), T(2)) == T(0);
    slope *= even ? sign : -sign;
    return even ? extra + low : span - extra + low;
}

// The source coordinate (pixels) of normalized g along a dim of size n, and its slope.
template <typename T>
__device__ __forceinline__ T ferro_gs_coord(T g, long long n, const ferro_gs_geom& s, T& slope) {
    T c;
    if (s.align) {
        slope = T((n - 1) / 2.0);
        c = (g + T(1)) * slope;
    } else {
        slope = T(n / 2.0);
        c = ((g + T(1)) * T(n) - T(1)) / T(2);
    }
    if (s.padding == 2)
        c = s.align ? ferro_gs_reflect(c, T(0), T(2 * (n - 1)), slope)
                    : ferro_gs_reflect(c, T(-1), T(2 * n - 1), slope);
    if (s.padding >= 1) {  // border, and reflection's final clip
        const T hi = T(n - 1);
        if (!(c > T(0) && c < hi)) slope = T(0);
        c = c < T(0) ? T(0) : (c > hi ? hi : c);
    }
    return c;
}

// The coordinates (spatial order) and slopes of point q of batch b.
template <typename T, int D>
__device__ __forceinline__ void ferro_gs_point(const T* grid, const ferro_gs_geom& s, long long b,
                                               long long q, T* c, T* slope) {
    const T* g = grid + (b * s.p + q) * D;
    for (int k = 0; k < D; ++k) c[k] = ferro_gs_coord(g[D - 1 - k], s.size[k], s, slope[k]);
}

// Corner `bits` (bit D-1-k set: the upper neighbour along dim k) of the cell at lo: its flat
// index, weight and whether it lies inside (tested in floating point: no overflowing casts).
template <typename T, int D>
__device__ __forceinline__ bool ferro_gs_corner(const ferro_gs_geom& s, const T* lo, const T* f,
                                                int bits, long long& lin, T& w) {
    lin = 0;
    w = T(1);
    bool inside = true;
    for (int k = 0; k < D; ++k) {
        const int b = (bits >> (D - 1 - k)) & 1;
        const T i = lo[k] + T(b);
        inside = inside && i >= T(0) && i < T(s.size[k]);
        if (inside) lin = lin * s.size[k] + (long long)i;
        w = k ? w * (b ? f[k] : T(1) - f[k]) : (b ? f[k] : T(1) - f[k]);
    }
    return inside;
}

// The nearest grid point (round half to even, as rint) and whether it lies inside.
template <typename T, int D>
__device__ __forceinline__ bool ferro_gs_nearest(const ferro_gs_geom& s, const T* c,
                                                 long long& lin) {
    lin = 0;
    for (int k = 0; k < D; ++k) {
        const T i = rint(c[k]);
        if (!(i >= T(0) && i < T(s.size[k]))) return false;
        lin = lin * s.size[k] + (long long)i;
    }
    return true;
}

__device__ __forceinline__ ferro_gs_geom ferro_gs_make(long long nb, long long c, long long p,
                                                       long long d0, long long d1, long long d2,
                                                       int mode, int padding, int align) {
    ferro_gs_geom s;
    s.nb = nb; s.c = c; s.p = p; s.size[0] = d0; s.size[1] = d1; s.size[2] = d2;
    s.plane = d0 * d1 * d2; s.mode = mode; s.padding = padding; s.align = align;
    return s;
}

// y[b, ch, q] = x[b, ch] sampled at grid[b, q].
template <typename T, int D>
__global__ void ferro_grid_sample_fwd(const T* __restrict__ x, const T* __restrict__ grid,
                                      T* __restrict__ y, long long nb, long long c, long long p,
                                      long long d0, long long d1, long long d2, int mode,
                                      int padding, int align) {
    const ferro_gs_geom s = ferro_gs_make(nb, c, p, d0, d1, d2, mode, padding, align);
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < nb * p;
         idx += (long long)blockDim.x * gridDim.x) {
        const long long b = idx / p, q = idx % p;
        T crd[D], slope[D], lo[D], f[D];
        ferro_gs_point<T, D>(grid, s, b, q, crd, slope);
        const T* xb = x + b * c * s.plane;
        T* yb = y + b * c * p + q;
        if (mode == 1) {
            long long lin;
            const bool in = ferro_gs_nearest<T, D>(s, crd, lin);
            for (long long ch = 0; ch < c; ++ch) yb[ch * p] = in ? xb[ch * s.plane + lin] : T(0);
            continue;
        }
        for (int k = 0; k < D; ++k) {
            lo[k] = floor(crd[k]);
            f[k] = crd[k] - lo[k];
        }
        long long lin[1 << D];
        T w[1 << D];
        bool in[1 << D];
        for (int bits = 0; bits < (1 << D); ++bits)
            in[bits] = ferro_gs_corner<T, D>(s, lo, f, bits, lin[bits], w[bits]);
        for (long long ch = 0; ch < c; ++ch) {
            const T* xc = xb + ch * s.plane;
            T acc = T(0);
            for (int bits = 0; bits < (1 << D); ++bits)
                if (in[bits]) acc += xc[lin[bits]] * w[bits];
            yb[ch * p] = acc;
        }
    }
}

// gx (zeroed by the caller; atomics: any point may read any pixel) += gy times the corner
// weights; ggrid[b, q, j] = sum over corners and channels of x * gy times the corner weight's
// derivative along the coordinate of grid[..., j], times that coordinate's slope (0 for
// nearest). want: bit 0 gx, bit 1 ggrid.
template <typename T, int D>
__global__ void ferro_grid_sample_bwd(const T* __restrict__ gy, const T* __restrict__ x,
                                      const T* __restrict__ grid, T* __restrict__ gx,
                                      T* __restrict__ ggrid, long long nb, long long c,
                                      long long p, long long d0, long long d1, long long d2,
                                      int mode, int padding, int align, int want) {
    const ferro_gs_geom s = ferro_gs_make(nb, c, p, d0, d1, d2, mode, padding, align);
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < nb * p;
         idx += (long long)blockDim.x * gridDim.x) {
        const long long b = idx / p, q = idx % p;
        T crd[D], slope[D], lo[D], f[D];
        ferro_gs_point<T, D>(grid, s, b, q, crd, slope);
        const T* gyb = gy + b * c * p + q;
        if (mode == 1) {
            long long lin;
            if ((want & 1) && ferro_gs_nearest<T, D>(s, crd, lin))
                for (long long ch = 0; ch < c; ++ch)
                    atomicAdd(gx + (b * c + ch) * s.plane + lin, gyb[ch * p]);
            if (want & 2)
                for (int k = 0; k < D; ++k) ggrid[idx * D + k] = T(0);
            continue;
        }
        for (int k = 0; k < D; ++k) {
            lo[k] = floor(crd[k]);
            f[k] = crd[k] - lo[k];
        }
        long long lin[1 << D];
        T w[1 << D], v[1 << D];
        bool in[1 << D];
        for (int bits = 0; bits < (1 << D); ++bits) {
            in[bits] = ferro_gs_corner<T, D>(s, lo, f, bits, lin[bits], w[bits]);
            v[bits] = T(0);
        }
        for (long long ch = 0; ch < c; ++ch) {
            const T g = gyb[ch * p];
            const long long plane = (b * c + ch) * s.plane;
            for (int bits = 0; bits < (1 << D); ++bits) {
                if (!in[bits]) continue;
                if (want & 1) atomicAdd(gx + plane + lin[bits], g * w[bits]);
                if (want & 2) v[bits] += x[plane + lin[bits]] * g;
            }
        }
        if (!(want & 2)) continue;
        T dc[D];
        for (int k = 0; k < D; ++k) {
            dc[k] = T(0);
            for (int bits = 0; bits < (1 << D); ++bits) {
                if (!in[bits]) continue;
                T d = T(1);  // the weight's derivative along dim k: the other factors, signed
                for (int j = 0; j < D; ++j) {
                    if (j == k) continue;
                    const int bj = (bits >> (D - 1 - j)) & 1;
                    d *= bj ? f[j] : T(1) - f[j];
                }
                dc[k] += v[bits] * (((bits >> (D - 1 - k)) & 1) ? d : -d);
            }
        }
        for (int j = 0; j < D; ++j) ggrid[idx * D + j] = dc[D - 1 - j] * slope[D - 1 - j];
    }
}
