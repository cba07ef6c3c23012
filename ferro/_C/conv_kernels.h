/* Winograd F(2x2, 3x3) and F(2x2x2, 3x3x3) transforms, float32 and float64 (included by
 * conv_kernels.pyx, which checks every array first and splits the work over channels x batch
 * (x depth tiles) with OpenMP; each function here transforms one plane or one depth tile).
 *
 * Bᵀ = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], Aᵀ = [[1, 1, 1, 0],
 * [0, 1, -1, -1]]. A plane's tiles hold their 16 values ps apart (value 4i + j at
 * (4i + j) * ps + ty * tw + tx). Rows are split into their even and odd columns as they are
 * read, so that every loop over a row of tiles runs over contiguous values; the loops are
 * compiled per ISA level (FERRO_CLONES, simd.h): in SSE2 alone, the transforms took 57% of the
 * conv3d benchmark's time.
 */
#ifndef FERRO_CONV_KERNELS_H
#define FERRO_CONV_KERNELS_H

#include <stddef.h>
#include <string.h>

#include "simd.h"

/* ka, kb: the pairs k whose columns 2k - pw and 2k + 1 - pw both lie in [0, wd) are [ka, kb). */
FERRO_INLINE void ferro_wino_pairs(ptrdiff_t wd, ptrdiff_t pw, ptrdiff_t n, ptrdiff_t *ka,
                                   ptrdiff_t *kb) {
    ptrdiff_t a = (pw + 1) / 2, b = wd + pw - 2 < 0 ? 0 : (wd + pw - 2) / 2 + 1;
    *ka = a < n ? a : n;
    b = b < n ? b : n;
    *kb = b > *ka ? b : *ka;
}

#define FERRO_WINO(T, S)                                                                        \
/* Bᵀ over 4 rows of n: d0 - d2, d1 + d2, d2 - d1, d1 - d3 (the depth's too, rows = planes). */ \
FERRO_INLINE void ferro_wino_rows_in_##S(const T *restrict d, T *restrict r, ptrdiff_t n) {      \
    ptrdiff_t k;                                                                                \
    _Pragma("omp simd")                                                                         \
    for (k = 0; k < n; k++) {                                                                   \
        T a = d[k], b = d[n + k], c = d[2 * n + k], f = d[3 * n + k];                           \
        r[k] = a - c;                                                                           \
        r[n + k] = b + c;                                                                       \
        r[2 * n + k] = c - b;                                                                   \
        r[3 * n + k] = b - f;                                                                   \
    }                                                                                           \
}                                                                                               \
/* A over 2 rows of n (the second zero unless two): g0, g0 + g1, g0 - g1, -g1. */               \
FERRO_INLINE void ferro_wino_rows_grad_##S(const T *restrict g, int two, T *restrict r,         \
                                           ptrdiff_t n) {                                       \
    ptrdiff_t k;                                                                                \
    if (two) {                                                                                  \
        _Pragma("omp simd")                                                                     \
        for (k = 0; k < n; k++) {                                                               \
            T a = g[k], b = g[n + k];                                                           \
            r[k] = a;                                                                           \
            r[n + k] = a + b;                                                                   \
            r[2 * n + k] = a - b;                                                               \
            r[3 * n + k] = -b;                                                                  \
        }                                                                                       \
    } else {                                                                                    \
        _Pragma("omp simd")                                                                     \
        for (k = 0; k < n; k++) r[k] = r[n + k] = r[2 * n + k] = g[k], r[3 * n + k] = 0;        \
    }                                                                                           \
}                                                                                               \
/* Aᵀ over 4 rows of n into y0 (and y1 where two): d0 + d1 + d2, d1 - d2 - d3. */               \
FERRO_INLINE void ferro_wino_rows_out_##S(const T *restrict d, T *restrict y0, T *restrict y1,  \
                                          int two, ptrdiff_t n) {                               \
    ptrdiff_t k;                                                                                \
    _Pragma("omp simd")                                                                         \
    for (k = 0; k < n; k++) y0[k] = d[k] + d[n + k] + d[2 * n + k];                             \
    if (two) {                                                                                  \
        _Pragma("omp simd")                                                                     \
        for (k = 0; k < n; k++) y1[k] = d[n + k] - d[2 * n + k] - d[3 * n + k];                 \
    }                                                                                           \
}                                                                                               \
/* Bᵀ d B of the tiles of the plane src (h, wd) zero-padded by ph, pw; d: 16 (tw + 1). */       \
FERRO_INLINE void ferro_wino_in_plane_##S(const T *restrict src, T *restrict out,               \
                                          T *restrict d, ptrdiff_t h, ptrdiff_t wd,             \
                                          ptrdiff_t ph, ptrdiff_t pw, ptrdiff_t th,             \
                                          ptrdiff_t tw, ptrdiff_t ps) {                         \
    ptrdiff_t n = tw + 1, ty, tx, i, k, ka, kb;                                                 \
    T *e = d, *o = d + 4 * n, *re = d + 8 * n, *ro = d + 12 * n;                                \
    ferro_wino_pairs(wd, pw, n, &ka, &kb);                                                      \
    for (ty = 0; ty < th; ty++) {                                                               \
        for (i = 0; i < 4; i++) { /* the 4 input rows' even and odd columns, zero-padded */     \
            ptrdiff_t iy = 2 * ty - ph + i;                                                     \
            T *er = e + i * n, *orw = o + i * n;                                                \
            const T *row = src + iy * wd;                                                       \
            if (iy < 0 || iy >= h) {                                                            \
                for (k = 0; k < n; k++) er[k] = orw[k] = 0;                                     \
                continue;                                                                       \
            }                                                                                   \
            for (k = 0; k < ka; k++) {                                                          \
                er[k] = 2 * k - pw >= 0 && 2 * k - pw < wd ? row[2 * k - pw] : 0;               \
                orw[k] = 2 * k + 1 - pw >= 0 && 2 * k + 1 - pw < wd ? row[2 * k + 1 - pw] : 0;  \
            }                                                                                   \
            _Pragma("omp simd")                                                                 \
            for (k = ka; k < kb; k++) {                                                         \
                er[k] = row[2 * k - pw];                                                        \
                orw[k] = row[2 * k + 1 - pw];                                                   \
            }                                                                                   \
            for (k = kb; k < n; k++) {                                                          \
                er[k] = 2 * k - pw >= 0 && 2 * k - pw < wd ? row[2 * k - pw] : 0;               \
                orw[k] = 2 * k + 1 - pw >= 0 && 2 * k + 1 - pw < wd ? row[2 * k + 1 - pw] : 0;  \
            }                                                                                   \
        }                                                                                       \
        ferro_wino_rows_in_##S(e, re, n); /* Bᵀ over the rows, even and odd columns alike */ \
        ferro_wino_rows_in_##S(o, ro, n);                                                       \
        for (i = 0; i < 4; i++) { /* B along each row: E[t] - E[t+1], O[t] + E[t+1], ... */    \
            const T *E = re + i * n, *O = ro + i * n;                                           \
            T *o0 = out + 4 * i * ps + ty * tw, *o1 = o0 + ps, *o2 = o1 + ps, *o3 = o2 + ps;    \
            _Pragma("omp simd")                                                                 \
            for (tx = 0; tx < tw; tx++) {                                                       \
                o0[tx] = E[tx] - E[tx + 1];                                                     \
                o1[tx] = O[tx] + E[tx + 1];                                                     \
                o2[tx] = E[tx + 1] - O[tx];                                                     \
                o3[tx] = O[tx] - O[tx + 1];                                                     \
            }                                                                                   \
        }                                                                                       \
    }                                                                                           \
}                                                                                               \
                                                                                                \
/* The plane y (oh, ow) = Aᵀ m A of the tiles of m, cropped; t: 8 tw. */                        \
FERRO_INLINE void ferro_wino_out_plane_##S(const T *restrict m, T *restrict y, T *restrict t,   \
                                           ptrdiff_t oh, ptrdiff_t ow, ptrdiff_t th,            \
                                           ptrdiff_t tw, ptrdiff_t ps) {                        \
    ptrdiff_t ty, tx, i, k, full = ow / 2;                                                      \
    for (ty = 0; ty < th; ty++) {                                                               \
        const T *mp = m + ty * tw;                                                              \
        for (k = 0; k < 4; k++) { /* Aᵀ over the tile's rows */                                 \
            const T *a = mp + k * ps, *b = mp + (4 + k) * ps, *c = mp + (8 + k) * ps;           \
            const T *f = mp + (12 + k) * ps;                                                    \
            T *s0 = t + k * tw, *s1 = t + (4 + k) * tw;                                         \
            _Pragma("omp simd")                                                                 \
            for (tx = 0; tx < tw; tx++) {                                                       \
                s0[tx] = a[tx] + b[tx] + c[tx];                                                 \
                s1[tx] = b[tx] - c[tx] - f[tx];                                                 \
            }                                                                                   \
        }                                                                                       \
        for (i = 0; i < 2 && 2 * ty + i < oh; i++) { /* then A along each output row */         \
            const T *s = t + 4 * i * tw;                                                        \
            T *yrow = y + (2 * ty + i) * ow;                                                    \
            _Pragma("omp simd")                                                                 \
            for (tx = 0; tx < full; tx++) {                                                     \
                yrow[2 * tx] = s[tx] + s[tw + tx] + s[2 * tw + tx];                             \
                yrow[2 * tx + 1] = s[tw + tx] - s[2 * tw + tx] - s[3 * tw + tx];                \
            }                                                                                   \
            if (full < tw) yrow[2 * full] = s[full] + s[tw + full] + s[2 * tw + full];          \
        }                                                                                       \
    }                                                                                           \
}                                                                                               \
                                                                                                \
/* A g Aᵀ of the 2x2 tiles of the plane src (oh, ow), zero past the crop: the adjoint of       \
 * out_plane (A = [[1, 0], [1, 1], [1, -1], [0, -1]]); t: 12 tw. */                            \
FERRO_INLINE void ferro_wino_out_grad_plane_##S(const T *restrict src, T *restrict out,         \
                                                T *restrict t, ptrdiff_t oh, ptrdiff_t ow,      \
                                                ptrdiff_t th, ptrdiff_t tw, ptrdiff_t ps) {     \
    ptrdiff_t ty, tx, i, k, full = ow / 2;                                                      \
    T *g = t, *r = t + 4 * tw; /* the rows' even and odd columns; A over the rows */            \
    for (ty = 0; ty < th; ty++) {                                                               \
        for (i = 0; i < 2; i++) {                                                               \
            T *ge = g + 2 * i * tw, *go = ge + tw;                                              \
            const T *row = src + (2 * ty + i) * ow;                                             \
            if (2 * ty + i >= oh) {                                                             \
                for (k = 0; k < tw; k++) ge[k] = go[k] = 0;                                     \
                continue;                                                                       \
            }                                                                                   \
            _Pragma("omp simd")                                                                 \
            for (k = 0; k < full; k++) {                                                        \
                ge[k] = row[2 * k];                                                             \
                go[k] = row[2 * k + 1];                                                         \
            }                                                                                   \
            for (k = full; k < tw; k++) {                                                       \
                ge[k] = 2 * k < ow ? row[2 * k] : 0;                                            \
                go[k] = 0;                                                                      \
            }                                                                                   \
        }                                                                                       \
        ferro_wino_rows_grad_##S(g, 1, r, 2 * tw); /* rows g0, g0 + g1, g0 - g1, -g1 */        \
        for (i = 0; i < 4; i++) {                                                               \
            const T *E = r + 2 * i * tw, *O = E + tw;                                           \
            T *o0 = out + 4 * i * ps + ty * tw, *o1 = o0 + ps, *o2 = o1 + ps, *o3 = o2 + ps;    \
            _Pragma("omp simd")                                                                 \
            for (tx = 0; tx < tw; tx++) {                                                       \
                o0[tx] = E[tx];                                                                 \
                o1[tx] = E[tx] + O[tx];                                                         \
                o2[tx] = E[tx] - O[tx];                                                         \
                o3[tx] = -O[tx];                                                                \
            }                                                                                   \
        }                                                                                       \
    }                                                                                           \
}                                                                                               \
                                                                                                \
/* 2-d: one plane each (scratch 16 (tw + 1)). */                                                \
static FERRO_CLONES void ferro_wino_in2_##S(const T *src, T *out, T *d, ptrdiff_t h,            \
                                            ptrdiff_t wd, ptrdiff_t ph, ptrdiff_t pw,           \
                                            ptrdiff_t th, ptrdiff_t tw, ptrdiff_t ps) {         \
    ferro_wino_in_plane_##S(src, out, d, h, wd, ph, pw, th, tw, ps);                            \
}                                                                                               \
static FERRO_CLONES void ferro_wino_out2_##S(const T *m, T *y, T *t, ptrdiff_t oh,              \
                                             ptrdiff_t ow, ptrdiff_t th, ptrdiff_t tw,          \
                                             ptrdiff_t ps) {                                    \
    ferro_wino_out_plane_##S(m, y, t, oh, ow, th, tw, ps);                                      \
}                                                                                               \
static FERRO_CLONES void ferro_wino_out_grad2_##S(const T *src, T *out, T *t, ptrdiff_t oh,     \
                                                  ptrdiff_t ow, ptrdiff_t th, ptrdiff_t tw,     \
                                                  ptrdiff_t ps) {                               \
    ferro_wino_out_grad_plane_##S(src, out, t, oh, ow, th, tw, ps);                             \
}                                                                                               \
                                                                                                \
/* 3-d, one depth tile of one channel: the depth's transform on whole planes (z: 8 planes of   \
 * h wd, then the plane scratch), then the plane functions on its 4 planes, whose values are   \
 * plane apart (the 2-d ones 4 plane apart). x: the channel's (dd, h, wd) volume, z0 the first \
 * of the tile's 4 input planes (2 tz - pd; outside [0, dd): zeros). */                        \
static FERRO_CLONES void ferro_wino_in3_##S(const T *x, ptrdiff_t dd, ptrdiff_t z0, T *out,     \
                                            ptrdiff_t plane, T *z, ptrdiff_t h, ptrdiff_t wd,   \
                                            ptrdiff_t ph, ptrdiff_t pw, ptrdiff_t th,           \
                                            ptrdiff_t tw) {                                     \
    ptrdiff_t hw = h * wd, k;                                                                   \
    const T *d = x + z0 * hw; /* the 4 planes, consecutive, or a zero-padded copy of them */    \
    if (z0 < 0 || z0 + 4 > dd) {                                                                \
        for (k = 0; k < 4; k++) {                                                               \
            if (z0 + k < 0 || z0 + k >= dd) memset(z + (4 + k) * hw, 0, hw * sizeof(T));        \
            else memcpy(z + (4 + k) * hw, x + (z0 + k) * hw, hw * sizeof(T));                   \
        }                                                                                       \
        d = z + 4 * hw;                                                                         \
    }                                                                                           \
    ferro_wino_rows_in_##S(d, z, hw);                                                           \
    for (k = 0; k < 4; k++)                                                                     \
        ferro_wino_in_plane_##S(z + k * hw, out + k * plane, z + 8 * hw, h, wd, ph, pw, th, tw, \
                                4 * plane);                                                     \
}                                                                                               \
/* y0: the output's plane 2 tz of the channel (and the next one where two). */                 \
static FERRO_CLONES void ferro_wino_out3_##S(const T *m, ptrdiff_t plane, T *y0, int two, T *z, \
                                             ptrdiff_t oh, ptrdiff_t ow, ptrdiff_t th,          \
                                             ptrdiff_t tw) {                                    \
    ptrdiff_t hw = oh * ow, k;                                                                  \
    for (k = 0; k < 4; k++)                                                                     \
        ferro_wino_out_plane_##S(m + k * plane, z + k * hw, z + 8 * hw, oh, ow, th, tw,         \
                                 4 * plane);                                                    \
    ferro_wino_rows_out_##S(z, y0, y0 + hw, two, hw); /* Aᵀ along the depth */                  \
}                                                                                               \
/* g: gy's plane 2 tz of the channel (and the next one where two, else zeros). */              \
static FERRO_CLONES void ferro_wino_out_grad3_##S(const T *g, int two, T *out, ptrdiff_t plane, \
                                                  T *z, ptrdiff_t oh, ptrdiff_t ow,             \
                                                  ptrdiff_t th, ptrdiff_t tw) {                 \
    ptrdiff_t hw = oh * ow, k;                                                                  \
    ferro_wino_rows_grad_##S(g, two, z, hw); /* A along the depth */                            \
    for (k = 0; k < 4; k++)                                                                     \
        ferro_wino_out_grad_plane_##S(z + k * hw, out + k * plane, z + 8 * hw, oh, ow, th, tw,  \
                                      4 * plane);                                               \
}

FERRO_WINO(float, f32)
FERRO_WINO(double, f64)

#endif
