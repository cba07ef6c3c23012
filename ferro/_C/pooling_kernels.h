/* Max pooling's forward over one plane, float32 and float64 (included by pooling_kernels.pyx,
 * which checks every array first and splits the planes over threads).
 *
 * Each window's first maximum (a NaN wins, the first NaN, as in PyTorch) and its flat offset in
 * the plane. The windows of an output row advance together: for each offset (i, j, q) of the
 * window, in row-major order, every window of the row that holds it takes it, so each window
 * sees its elements in the order it would alone, while the selects of different windows are
 * independent and vectorize (per ISA level: FERRO_CLONES, simd.h). One window at a time was a
 * chain of dependent compares that gcc compiled to a mispredicted branch per element: a ResNet
 * stem's 3x3/s2/p1 pooling of (32, 64, 32, 32) took 18 ms of one core, this 7, and the digits
 * CNN's 2x2 pooling of (64, 16, 8, 8) 51 us either way.
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
#define FERRO_MAX_POOL(T, U, S)                                                                 \
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
static FERRO_CLONES void ferro_max_pool_plane_##S(const T *x, T *y, int64_t *idx,               \
                                                  const ptrdiff_t *g, const ptrdiff_t *r) {     \
    if (g[11] == 1) /* constant strides vectorize better */                                     \
        ferro_max_pool_rows_##S(x, y, idx, g, r, 1);                                            \
    else if (g[11] == 2)                                                                        \
        ferro_max_pool_rows_##S(x, y, idx, g, r, 2);                                            \
    else                                                                                        \
        ferro_max_pool_rows_##S(x, y, idx, g, r, g[11]);                                        \
}

FERRO_MAX_POOL(float, uint32_t, f32)
FERRO_MAX_POOL(double, uint64_t, f64)

#endif
