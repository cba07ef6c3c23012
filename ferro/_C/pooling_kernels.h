/* Max pooling's forward over a run of planes, float32 and float64 (included by
 * pooling_kernels.pyx, which checks every array first and splits the planes over threads).
 *
 * Each window's first maximum (a NaN wins, the first NaN, as in PyTorch) and its flat offset in
 * the plane. The windows of an output row advance together: for each offset (i, j, q) of the
 * window, in row-major order, every window of the row that holds it takes it, so each window
 * sees its elements in the order it would alone, while the selects of different windows are
 * independent and vectorize (per ISA level: FERRO_CLONES, simd.h). One window at a time was a
 * chain of dependent compares that gcc compiled to a mispredicted branch per element: a ResNet
 * stem's 3x3/s2/p1 pooling of (32, 64, 32, 32) took 18 ms of one core, this 7. The common 2x2
 * window with stride 2 has loops of its own (below).
 */
#ifndef FERRO_POOLING_KERNELS_H
#define FERRO_POOLING_KERNELS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "simd.h"

/* g: input sizes D H W, output sizes, kernel, stride, padding, dilation (3 each); r: per
 * dimension the offsets [lo, hi) of each output's window inside the input (lo table, then hi),
 * then per kernel column q the outputs [qlo, qhi) of a row whose windows hold it. The bit
 * selects are there because gcc branched on `take ? v : b`. A window with no element inside the
 * input (dilation can skip it): -inf, and the offset of its first position at or past 0 in
 * each dimension (PyTorch's index, the generic path's). */
#define FERRO_MAX_POOL(T, U, I, S)                                                              \
FERRO_INLINE void ferro_max_pool_rows_##S(const T *restrict x, T *restrict y,                   \
                                          int64_t *restrict idx, const ptrdiff_t *g,            \
                                          const ptrdiff_t *r, ptrdiff_t sw) {                   \
    const ptrdiff_t H = g[1], W = g[2], OD = g[3], OH = g[4], OW = g[5], kw = g[8];             \
    const ptrdiff_t *dlo = r, *dhi = r + OD, *hlo = r + 2 * OD, *hhi = hlo + OH;                \
    const ptrdiff_t *wlo = hhi + OH, *whi = wlo + OW, *qlo = whi + OW, *qhi = qlo + kw;         \
    for (ptrdiff_t od = 0; od < OD; od++)                                                       \
        for (ptrdiff_t oh = 0; oh < OH; oh++) {                                                 \
            const ptrdiff_t d0 = od * g[9] - g[12], h0 = oh * g[10] - g[13];                    \
            T *yr = y + (od * OH + oh) * OW;                                                    \
            int64_t *ir = idx + (od * OH + oh) * OW;                                            \
            ptrdiff_t row = ((d0 + dlo[od] * g[15]) * H + h0 + hlo[oh] * g[16]) * W - g[14];    \
            for (ptrdiff_t o = 0; o < OW; o++) {                                                \
                int any = dlo[od] < dhi[od] && hlo[oh] < hhi[oh] && wlo[o] < whi[o];            \
                ir[o] = row + o * sw + wlo[o] * g[17];                                          \
                yr[o] = any ? x[ir[o]] : (T)-INFINITY;                                          \
            }                                                                                   \
            for (ptrdiff_t i = dlo[od]; i < dhi[od]; i++)                                       \
                for (ptrdiff_t j = hlo[oh]; j < hhi[oh]; j++)                                   \
                    for (ptrdiff_t q = 0; q < kw; q++) {                                        \
                        row = ((d0 + i * g[15]) * H + h0 + j * g[16]) * W - g[14] + q * g[17];  \
                        for (ptrdiff_t o = qlo[q]; o < qhi[q]; o++) {                           \
                            union { T f; U u; } v = {x[row + o * sw]}, b = {yr[o]};             \
                            int64_t m = -(int64_t)((v.f > b.f) | ((v.f != v.f) & (b.f == b.f)));\
                            b.u = (v.u & (U)m) | (b.u & ~(U)m);                                 \
                            yr[o] = b.f;                                                        \
                            ir[o] = ((row + o * sw) & m) | (ir[o] & ~m);                        \
                        }                                                                       \
                    }                                                                           \
        }                                                                                       \
}                                                                                               \
/* The common window, 2x2 with stride 2 and no padding or dilation, over 2-d planes, in two      \
 * forms, both with each window's four elements in registers and picked as a tournament (the     \
 * first row's pair, the second's, then the two winners, the first on ties: the same first       \
 * maximum and first NaN as the row loop above, which keeps its running maximum in memory and    \
 * took 230 us of one core on the digits CNN's (64, 16, 8, 8) pooling). Rows of 8 outputs or     \
 * more: a loop along the row, which gcc vectorizes. Shorter rows (that CNN's 4 and 2): 32 bytes \
 * of outputs at a time across rows and planes, their elements loaded one by one into GCC vector \
 * types (gcc lowers them to the clone's ISA): 36 us there, the row loop 117. */                \
FERRO_INLINE U ferro_wins_##S(T v, T b) { return -(U)((v > b) | ((v != v) & (b == b))); }      \
FERRO_INLINE T ferro_pick_##S(U m, T v, T b) {                                                  \
    union { T f; U u; } x = {v}, z = {b};                                                       \
    z.u = (x.u & m) | (z.u & ~m);                                                               \
    return z.f;                                                                                 \
}                                                                                               \
FERRO_INLINE void ferro_max_pool_2x2_rows_##S(const T *restrict x, T *restrict y,               \
                                              int64_t *restrict idx, ptrdiff_t planes,          \
                                              ptrdiff_t H, ptrdiff_t W) {                       \
    const ptrdiff_t OH = H / 2, OW = W / 2;                                                     \
    for (ptrdiff_t b = 0; b < planes; b++)                                                      \
        for (ptrdiff_t oh = 0; oh < OH; oh++) {                                                 \
            const T *r0 = x + b * H * W + 2 * oh * W, *r1 = r0 + W;                             \
            T *yr = y + (b * OH + oh) * OW;                                                     \
            int64_t *ir = idx + (b * OH + oh) * OW;                                             \
            for (ptrdiff_t o = 0; o < OW; o++) {                                                \
                T a = r0[2 * o], e = r0[2 * o + 1], c = r1[2 * o], d = r1[2 * o + 1];          \
                U t1 = ferro_wins_##S(e, a), t2 = ferro_wins_##S(d, c);                         \
                T m1 = ferro_pick_##S(t1, e, a), m2 = ferro_pick_##S(t2, d, c);                 \
                int64_t t3 = -(int64_t)(ferro_wins_##S(m2, m1) & 1);                            \
                yr[o] = ferro_pick_##S((U)t3, m2, m1);                                          \
                ir[o] = 2 * (oh * W + o) + (((W + (int64_t)(t2 & 1)) & t3)                      \
                                            | ((int64_t)(t1 & 1) & ~t3));                       \
            }                                                                                   \
        }                                                                                       \
}                                                                                               \
typedef T ferro_vf_##S __attribute__((vector_size(32)));                                        \
typedef I ferro_vi_##S __attribute__((vector_size(32)));                                        \
FERRO_INLINE void ferro_max_pool_2x2_short_##S(const T *restrict x, T *restrict y,              \
                                               int64_t *restrict idx, ptrdiff_t planes,         \
                                               ptrdiff_t H, ptrdiff_t W) {                      \
    enum { L = 32 / sizeof(T) };                                                                \
    const ptrdiff_t OH = H / 2, OW = W / 2, total = planes * OH * OW;                           \
    const T *r = x; /* the window row pair's first row; at (oh, o) of plane p */                \
    ptrdiff_t t = 0, p = 0, oh = 0, o = 0;                                                      \
    for (; t < total; t += L) {                                                                 \
        ferro_vf_##S a, e, c, d;                                                                \
        ferro_vi_##S base;                                                                      \
        const int n = total - t < L ? (int)(total - t) : L;                                     \
        for (int l = 0; l < L; l++) {                                                           \
            const T *w = r + 2 * o;                                                             \
            a[l] = w[0], e[l] = w[1], c[l] = w[W], d[l] = w[W + 1];                             \
            base[l] = (I)(2 * (oh * W + o));                                                    \
            if (t + l + 1 < total && ++o == OW) { /* past the end: the last window again */     \
                o = 0, r += 2 * W;                                                              \
                if (++oh == OH)                                                                 \
                    oh = 0, r = x + ++p * H * W;                                                \
            }                                                                                   \
        }                                                                                       \
        ferro_vi_##S t1 = (e > a) | ((e != e) & (a == a)), t2 = (d > c) | ((d != d) & (c == c)); \
        ferro_vf_##S m1 = (ferro_vf_##S)(((ferro_vi_##S)e & t1) | ((ferro_vi_##S)a & ~t1));     \
        ferro_vf_##S m2 = (ferro_vf_##S)(((ferro_vi_##S)d & t2) | ((ferro_vi_##S)c & ~t2));     \
        ferro_vi_##S t3 = (m2 > m1) | ((m2 != m2) & (m1 == m1));                                \
        ferro_vf_##S m = (ferro_vf_##S)(((ferro_vi_##S)m2 & t3) | ((ferro_vi_##S)m1 & ~t3));    \
        ferro_vi_##S k = base + ((((I)W - t2) & t3) | (-t1 & ~t3));                             \
        for (int l = 0; l < n; l++)                                                             \
            y[t + l] = m[l], idx[t + l] = k[l];                                                 \
    }                                                                                           \
}                                                                                               \
/* `planes` planes of the input x (g: sizes, as above) to y and idx, planes after each other. */ \
static FERRO_CLONES void ferro_max_pool_planes_##S(const T *x, T *y, int64_t *idx,              \
                                                   ptrdiff_t planes, const ptrdiff_t *g,        \
                                                   const ptrdiff_t *r) {                        \
    const ptrdiff_t plane = g[0] * g[1] * g[2], per_plane = g[3] * g[4] * g[5];                 \
    if (g[0] == 1 && g[3] == 1 && g[6] == 1 && g[4] == g[1] / 2 && g[5] == g[2] / 2             \
        && g[7] == 2 && g[8] == 2 && g[10] == 2 && g[11] == 2 && g[13] == 0 && g[14] == 0       \
        && g[16] == 1 && g[17] == 1 && (g[5] >= 8 || plane < ((ptrdiff_t)1 << 30))) {          \
        if (g[5] >= 8)                                                                          \
            ferro_max_pool_2x2_rows_##S(x, y, idx, planes, g[1], g[2]);                         \
        else                                                                                    \
            ferro_max_pool_2x2_short_##S(x, y, idx, planes, g[1], g[2]);                        \
        return;                                                                                 \
    }                                                                                           \
    for (ptrdiff_t b = 0; b < planes; b++) {                                                    \
        const T *xb = x + b * plane;                                                            \
        T *yb = y + b * per_plane;                                                              \
        int64_t *ib = idx + b * per_plane;                                                      \
        if (g[11] == 1) /* constant strides vectorize better */                                 \
            ferro_max_pool_rows_##S(xb, yb, ib, g, r, 1);                                       \
        else if (g[11] == 2)                                                                    \
            ferro_max_pool_rows_##S(xb, yb, ib, g, r, 2);                                       \
        else                                                                                    \
            ferro_max_pool_rows_##S(xb, yb, ib, g, r, g[11]);                                   \
    }                                                                                           \
}

FERRO_MAX_POOL(float, uint32_t, int32_t, f32)
FERRO_MAX_POOL(double, uint64_t, int64_t, f64)

#endif
