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
