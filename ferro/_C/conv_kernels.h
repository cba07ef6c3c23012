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
 *
 * Note [Scratch read after write]: a vector load of scratch that a few cycles earlier was
 * written by other stores (a row's even columns, stored from k = 1 and read from k + 1) cannot
 * take its value from the store buffer and waits for the stores to reach L1 (perf annotate put
 * 43% of the 3-d input transform's samples on such a load, once per row). So each pass over the
 * rows writes every row's scratch before the next pass reads any: the 2-d input transform of a
 * 16x16 plane went from 0.42 to 0.38 us (one thread, builds alternating).
 */
#ifndef FERRO_CONV_KERNELS_H
#define FERRO_CONV_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "simd.h"

#define FERRO_WINO(T, S)                                                                        \
/* Bᵀ over 4 rows of n: d0 - d2, d1 + d2, d2 - d1, d1 - d3 (the depth's too, rows = planes). */ \
FERRO_INLINE void ferro_wino_rows_in_##S(const T *restrict d, T *restrict r, ptrdiff_t n) {     \
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
/* Bᵀ d B of the tiles of the plane src (h, wd) zero-padded by ph, pw. B along each padded      \
 * row first (its tw windows of 4 columns, 2 apart, from the row's even and odd columns), into  \
 * the 4 column terms' planes of even rows E_j and of odd rows O_j (th + 1 rows of tw each);    \
 * then Bᵀ across the rows over whole planes of tiles: tile row ty's 4 rows are E[ty], O[ty],   \
 * E[ty + 1], O[ty + 1], a row (tw) apart, so each loop runs over all th tw tiles. Every row is \
 * copied zero-padded (2 (tw + 1) columns), then split into its even and odd columns in one     \
 * run over all rows, before B reads any (Note [Scratch read after write]).                     \
 * d: 8 (th + 1) tw + 8 (th + 1) (tw + 1). */                                                   \
FERRO_INLINE void ferro_wino_in_plane_##S(const T *restrict src, T *restrict out,               \
                                          T *restrict d, ptrdiff_t h, ptrdiff_t wd,             \
                                          ptrdiff_t ph, ptrdiff_t pw, ptrdiff_t th,             \
                                          ptrdiff_t tw, ptrdiff_t ps) {                         \
    ptrdiff_t n = tw + 1, sz = (th + 1) * tw, nt = th * tw, rows = 2 * th + 2, y, k, t, j;      \
    ptrdiff_t cols = wd < 2 * n - pw ? wd : 2 * n - pw; /* the columns windows read */          \
    T *evens = d + 8 * sz, *odds = evens + rows * n, *pad = odds + rows * n;                    \
    for (y = 0; y < rows; y++) { /* the padded rows, 2n columns each */                         \
        ptrdiff_t iy = y - ph;                                                                  \
        T *pr = pad + y * 2 * n;                                                                \
        if (iy < 0 || iy >= h || cols <= 0) {                                                   \
            memset(pr, 0, 2 * n * sizeof(T));                                                   \
            continue;                                                                           \
        }                                                                                       \
        _Pragma("omp simd") /* a select, not calls to memcpy and memset for a row of 2n */     \
        for (k = 0; k < 2 * n; k++) pr[k] = k >= pw && k < pw + cols ? src[iy * wd + k - pw] : 0; \
    }                                                                                           \
    _Pragma("omp simd")                                                                         \
    for (k = 0; k < rows * n; k++) /* even and odd columns, all rows in one run */             \
        evens[k] = pad[2 * k], odds[k] = pad[2 * k + 1];                                        \
    for (y = 0; y < rows; y++) {                                                                \
        T *c = d + (y & 1) * 4 * sz + (y >> 1) * tw;                                            \
        const T *le = evens + y * n, *lo = odds + y * n;                                        \
        _Pragma("omp simd")                                                                     \
        for (k = 0; k < tw; k++) { /* B: c0 - c2, c1 + c2, c2 - c1, c1 - c3 */                  \
            c[k] = le[k] - le[k + 1];                                                           \
            c[sz + k] = lo[k] + le[k + 1];                                                      \
            c[2 * sz + k] = le[k + 1] - lo[k];                                                  \
            c[3 * sz + k] = lo[k] - lo[k + 1];                                                  \
        }                                                                                       \
    }                                                                                           \
    for (j = 0; j < 4; j++) { /* Bᵀ: value 4i + j */                                            \
        const T *E = d + j * sz, *O = d + (4 + j) * sz;                                         \
        T *o0 = out + j * ps, *o1 = o0 + 4 * ps, *o2 = o1 + 4 * ps, *o3 = o2 + 4 * ps;          \
        _Pragma("omp simd")                                                                     \
        for (t = 0; t < nt; t++) {                                                              \
            o0[t] = E[t] - E[t + tw];                                                           \
            o1[t] = O[t] + E[t + tw];                                                           \
            o2[t] = E[t + tw] - O[t];                                                           \
            o3[t] = O[t] - O[t + tw];                                                           \
        }                                                                                       \
    }                                                                                           \
}                                                                                               \
                                                                                                \
/* The plane y (oh, ow) = Aᵀ m A of the tiles of m, cropped: Aᵀ across the rows over whole      \
 * planes of tiles first (tile row i = 0, 1 of column term j at t + (4i + j) th tw), then A     \
 * along each output row. t: 8 th tw. */                                                        \
FERRO_INLINE void ferro_wino_out_plane_##S(const T *restrict m, T *restrict y, T *restrict t,   \
                                           ptrdiff_t oh, ptrdiff_t ow, ptrdiff_t th,            \
                                           ptrdiff_t tw, ptrdiff_t ps) {                        \
    ptrdiff_t nt = th * tw, full = ow / 2, j, k, yy;                                            \
    for (j = 0; j < 4; j++) {                                                                   \
        const T *a = m + j * ps, *b = a + 4 * ps, *c = b + 4 * ps, *f = c + 4 * ps;             \
        T *s0 = t + j * nt, *s1 = t + (4 + j) * nt;                                             \
        _Pragma("omp simd")                                                                     \
        for (k = 0; k < nt; k++) {                                                              \
            s0[k] = a[k] + b[k] + c[k];                                                         \
            s1[k] = b[k] - c[k] - f[k];                                                         \
        }                                                                                       \
    }                                                                                           \
    for (yy = 0; yy < oh; yy++) {                                                               \
        const T *s = t + (yy & 1) * 4 * nt + (yy >> 1) * tw;                                    \
        T *yrow = y + yy * ow;                                                                  \
        _Pragma("omp simd")                                                                     \
        for (k = 0; k < full; k++) {                                                            \
            yrow[2 * k] = s[k] + s[nt + k] + s[2 * nt + k];                                     \
            yrow[2 * k + 1] = s[nt + k] - s[2 * nt + k] - s[3 * nt + k];                        \
        }                                                                                       \
        if (full < tw) yrow[2 * full] = s[full] + s[nt + full] + s[2 * nt + full];              \
    }                                                                                           \
}                                                                                               \
                                                                                                \
/* A g Aᵀ of the 2x2 tiles of the plane src (oh, ow), zero past the crop: the adjoint of        \
 * out_plane (A = [[1, 0], [1, 1], [1, -1], [0, -1]]). Along each row first (its even and odd   \
 * columns E, O give E, E + O, E - O, -O), into the even rows' and odd rows' planes, then A     \
 * across the rows over whole planes of tiles. t: 8 th tw. */                                   \
FERRO_INLINE void ferro_wino_out_grad_plane_##S(const T *restrict src, T *restrict out,         \
                                                T *restrict t, ptrdiff_t oh, ptrdiff_t ow,      \
                                                ptrdiff_t th, ptrdiff_t tw, ptrdiff_t ps) {     \
    ptrdiff_t nt = th * tw, full = ow / 2, j, k, yy;                                            \
    for (yy = 0; yy < 2 * th; yy++) {                                                           \
        T *c = t + (yy & 1) * 4 * nt + (yy >> 1) * tw;                                          \
        const T *row = src + yy * ow;                                                           \
        if (yy >= oh) {                                                                         \
            for (j = 0; j < 4; j++)                                                             \
                for (k = 0; k < tw; k++) c[j * nt + k] = 0;                                     \
            continue;                                                                           \
        }                                                                                       \
        _Pragma("omp simd")                                                                     \
        for (k = 0; k < full; k++) {                                                            \
            T e = row[2 * k], o = row[2 * k + 1];                                               \
            c[k] = e;                                                                           \
            c[nt + k] = e + o;                                                                  \
            c[2 * nt + k] = e - o;                                                              \
            c[3 * nt + k] = -o;                                                                 \
        }                                                                                       \
        if (full < tw) c[full] = c[nt + full] = c[2 * nt + full] = row[2 * full];               \
        if (full < tw) c[3 * nt + full] = 0;                                                    \
    }                                                                                           \
    for (j = 0; j < 4; j++) { /* A: value 4i + j from g0 (even rows) and g1 (odd rows) */       \
        const T *g0 = t + j * nt, *g1 = t + (4 + j) * nt;                                       \
        T *o0 = out + j * ps, *o1 = o0 + 4 * ps, *o2 = o1 + 4 * ps, *o3 = o2 + 4 * ps;          \
        _Pragma("omp simd")                                                                     \
        for (k = 0; k < nt; k++) {                                                              \
            o0[k] = g0[k];                                                                      \
            o1[k] = g0[k] + g1[k];                                                              \
            o2[k] = g0[k] - g1[k];                                                              \
            o3[k] = -g1[k];                                                                     \
        }                                                                                       \
    }                                                                                           \
}                                                                                               \
                                                                                                \
/* The adjoint of in_plane: the plane g (h, wd) from the 16 values of each tile of src (value  \
 * 4i + j at src + (4i + j) ps), every element written (zero where no window reads it). Bᵀ's   \
 * adjoint across the rows first, into the even and odd rows' planes E_j, O_j, then B's along  \
 * each row into its even and odd columns, then those interleaved into padded rows in one run   \
 * over all rows, whose columns read by windows are copied to g (Note [Scratch read after      \
 * write]). d: as in_plane's. */                                                                \
FERRO_INLINE void ferro_wino_in_grad_plane_##S(const T *restrict src, T *restrict g,            \
                                               T *restrict d, ptrdiff_t h, ptrdiff_t wd,        \
                                               ptrdiff_t ph, ptrdiff_t pw, ptrdiff_t th,        \
                                               ptrdiff_t tw, ptrdiff_t ps) {                    \
    ptrdiff_t n = tw + 1, sz = (th + 1) * tw, nt = th * tw, rows = 2 * th + 2, iy, y, k, t, j;  \
    ptrdiff_t cols = wd < 2 * n - pw ? wd : 2 * n - pw; /* the columns windows read */          \
    T *evens = d + 8 * sz, *odds = evens + rows * n, *pad = odds + rows * n;                    \
    for (j = 0; j < 4; j++) { /* E[t] = g0[t] + (g1 + g2 - g0)[t - tw], O likewise */          \
        const T *g0 = src + j * ps, *g1 = g0 + 4 * ps, *g2 = g1 + 4 * ps, *g3 = g2 + 4 * ps;    \
        T *E = d + j * sz, *O = d + (4 + j) * sz;                                               \
        _Pragma("omp simd")                                                                     \
        for (t = 0; t < nt; t++) E[t] = g0[t], O[t] = g1[t] - g2[t] + g3[t];                    \
        for (t = nt; t < sz; t++) E[t] = O[t] = 0;                                              \
        _Pragma("omp simd")                                                                     \
        for (t = 0; t < nt; t++) E[t + tw] += g1[t] + g2[t] - g0[t], O[t + tw] -= g3[t];        \
    }                                                                                           \
    for (y = 0; y < rows; y++) { /* B's adjoint: column k from tiles k, k - 1 */               \
        const T *c = d + (y & 1) * 4 * sz + (y >> 1) * tw;                                      \
        T *le = evens + y * n, *lo = odds + y * n;                                              \
        le[0] = c[0], lo[0] = c[sz] - c[2 * sz] + c[3 * sz];                                    \
        _Pragma("omp simd")                                                                     \
        for (k = 1; k < tw; k++) {                                                              \
            le[k] = c[k] + (c[sz + k - 1] + c[2 * sz + k - 1] - c[k - 1]);                      \
            lo[k] = c[sz + k] - c[2 * sz + k] + c[3 * sz + k] - c[3 * sz + k - 1];              \
        }                                                                                       \
        le[tw] = (T)0 + (c[sz + tw - 1] + c[2 * sz + tw - 1] - c[tw - 1]);                      \
        lo[tw] = (T)0 - c[3 * sz + tw - 1];                                                     \
    }                                                                                           \
    _Pragma("omp simd")                                                                         \
    for (k = 0; k < rows * n; k++) /* the padded rows from their even and odd columns */       \
        pad[2 * k] = evens[k], pad[2 * k + 1] = odds[k];                                        \
    for (iy = 0; iy < h; iy++) {                                                                \
        T *row = g + iy * wd;                                                                   \
        if (iy + ph >= rows || cols <= 0) { /* a row no window reads */                         \
            memset(row, 0, wd * sizeof(T));                                                     \
            continue;                                                                           \
        }                                                                                       \
        memcpy(row, pad + (iy + ph) * 2 * n + pw, cols * sizeof(T));                            \
        if (cols < wd) memset(row + cols, 0, (wd - cols) * sizeof(T)); /* no window reads */    \
    }                                                                                           \
}                                                                                               \
                                                                                                \
/* 2-d: one plane each (scratch: 8 (th + 1) tw + 8 (th + 1) (tw + 1)). */                       \
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
/* 3-d, one depth tile of one channel: the depth's transform on whole planes (z: 8 planes of    \
 * h wd, then the plane scratch), then the plane functions on its 4 planes, whose values are    \
 * plane apart (the 2-d ones 4 plane apart). x: the channel's (dd, h, wd) volume, z0 the first  \
 * of the tile's 4 input planes (2 tz - pd; outside [0, dd): zeros). */                         \
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
/* The adjoint of in3 for the depth tiles [t0, t1) of one channel, added into its volume gx    \
 * (dd, h, wd) in order (tiles 2 planes apart overlap): per tile, the plane adjoints of its 4   \
 * depth terms (tile tz's values at src + (tz - t0) step), then Bᵀ's adjoint along the depth.  \
 * z: as in3's. */                                                                              \
static FERRO_CLONES void ferro_wino_in_grad3_##S(const T *src, ptrdiff_t step, ptrdiff_t plane, \
                                                 T *gx, ptrdiff_t dd, ptrdiff_t pd,             \
                                                 ptrdiff_t t0, ptrdiff_t t1, T *z, ptrdiff_t h, \
                                                 ptrdiff_t wd, ptrdiff_t ph, ptrdiff_t pw,      \
                                                 ptrdiff_t th, ptrdiff_t tw) {                  \
    ptrdiff_t hw = h * wd, tz, k, i;                                                            \
    for (tz = t0; tz < t1; tz++) {                                                              \
        const T *r0 = z, *r1 = z + hw, *r2 = z + 2 * hw, *r3 = z + 3 * hw;                      \
        ptrdiff_t z0 = 2 * tz - pd;                                                             \
        for (k = 0; k < 4; k++)                                                                 \
            ferro_wino_in_grad_plane_##S(src + (tz - t0) * step + k * plane, z + k * hw,        \
                                         z + 8 * hw, h, wd, ph, pw, th, tw, 4 * plane);         \
        for (k = 0; k < 4; k++) { /* d0 = r0, d1 = r1 - r2 + r3, d2 = r1 + r2 - r0, d3 = -r3 */ \
            T *o = gx + (z0 + k) * hw, a = k == 2 ? -1 : k == 0, b = k == 1 || k == 2;          \
            T c = k == 1 ? -1 : k == 2, e = k == 1 ? 1 : -(k == 3);                             \
            if (z0 + k < 0 || z0 + k >= dd) continue;                                           \
            _Pragma("omp simd")                                                                 \
            for (i = 0; i < hw; i++) o[i] += a * r0[i] + b * r1[i] + c * r2[i] + e * r3[i];     \
        }                                                                                       \
    }                                                                                           \
}                                                                                               \
/* y0: the output's plane 2 tz of the channel (and the next one where two). */                  \
static FERRO_CLONES void ferro_wino_out3_##S(const T *m, ptrdiff_t plane, T *y0, int two, T *z, \
                                             ptrdiff_t oh, ptrdiff_t ow, ptrdiff_t th,          \
                                             ptrdiff_t tw) {                                    \
    ptrdiff_t hw = oh * ow, k;                                                                  \
    for (k = 0; k < 4; k++)                                                                     \
        ferro_wino_out_plane_##S(m + k * plane, z + k * hw, z + 8 * hw, oh, ow, th, tw,         \
                                 4 * plane);                                                    \
    ferro_wino_rows_out_##S(z, y0, y0 + hw, two, hw); /* Aᵀ along the depth */                  \
}                                                                                               \
/* g: gy's plane 2 tz of the channel (and the next one where two, else zeros). */               \
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

/* 1-d Winograd F(m, r): a dense (small) matrix, given in float64, times strided windows. */
#define FERRO_WINO1_MAX 16 /* the most rows and columns such a matrix may have */
#define FERRO_WINO3_BLOCK 4 /* the tiles a 3-d channels-last pass takes at a time */
/* Where tile t of a volume's tiles tl (tD, tH, tW) starts: (m tz - lo0, m ty - lo1, m tx - lo2). */
static inline void ferro_wino3_origin(ptrdiff_t t, ptrdiff_t m, const ptrdiff_t *lo,
                                      const ptrdiff_t *tl, ptrdiff_t *z0, ptrdiff_t *y0,
                                      ptrdiff_t *x0) {
    *z0 = m * (t / (tl[1] * tl[2])) - lo[0];
    *y0 = m * (t / tl[2] % tl[1]) - lo[1];
    *x0 = m * (t % tl[2]) - lo[2];
}

/* Tiles z0 .. z0 + kn - 1 (kn <= 64) of planes (nb, th, tw) whose tile (u, t) starts at
 * (m u - lo0, m t - lo1): their first row ry, first column ct and flat offset off (planes ss
 * apart, rows wd long), and the range [r0, r1] x [c0, c1] of those starts (the gather and
 * scatter below test a kernel offset against it once, not each tile). */
static inline void ferro_wino2_tiles(ptrdiff_t z0, ptrdiff_t kn, ptrdiff_t m, ptrdiff_t lo0,
                                     ptrdiff_t lo1, ptrdiff_t th, ptrdiff_t tw, ptrdiff_t ss,
                                     ptrdiff_t wd, ptrdiff_t *ry, ptrdiff_t *ct, ptrdiff_t *off,
                                     ptrdiff_t *r0, ptrdiff_t *r1, ptrdiff_t *c0, ptrdiff_t *c1) {
    /* tile z0's (sample, row, column) by division once, the rest by counting (an integer
     * division per tile was a sixth of the scatter's time) */
    ptrdiff_t t = z0 % tw, u = z0 / tw % th, s = z0 / (tw * th);
    *r0 = *c0 = PTRDIFF_MAX, *r1 = *c1 = PTRDIFF_MIN;
    for (ptrdiff_t k = 0; k < kn; k++) {
        ry[k] = m * u - lo0, ct[k] = m * t - lo1;
        off[k] = s * ss + ry[k] * wd + ct[k];
        *r0 = ry[k] < *r0 ? ry[k] : *r0, *r1 = ry[k] > *r1 ? ry[k] : *r1;
        *c0 = ct[k] < *c0 ? ct[k] : *c0, *c1 = ct[k] > *c1 ? ct[k] : *c1;
        if (++t == tw) {
            t = 0;
            if (++u == th) u = 0, s++;
        }
    }
}

#define FERRO_WINO1(T, S)                                                                       \
/* The nonzero entries of a matrix row (n values, in double) as coefficients c and offsets at   \
 * (entry x at x stride), for the axpys below; returns how many. */                             \
FERRO_INLINE ptrdiff_t ferro_nonzeros_##S(const double *row, ptrdiff_t n, ptrdiff_t stride,     \
                                         ptrdiff_t *at, T *c) {                                 \
    ptrdiff_t x, nz = 0;                                                                        \
    for (x = 0; x < n; x++)                                                                     \
        if (row[x] != 0) at[nz] = x * stride, c[nz++] = (T)row[x];                              \
    return nz;                                                                                  \
}                                                                                               \
/* o[t] = sum_e a[e] src[at[e] + t], t < n, the terms added in order to 0: blocks of 64 tiles   \
 * summed in a local array (one vectorized pass per term; o and src may not alias it). */       \
FERRO_INLINE void ferro_wino1_axpys_##S(T *o, const T *src, const ptrdiff_t *at, const T *a,    \
                                        ptrdiff_t nz, ptrdiff_t n) {                            \
    T acc[64];                                                                                  \
    ptrdiff_t e, t, t0, nb;                                                                     \
    for (t0 = 0; t0 < n; t0 += 64) {                                                            \
        nb = n - t0 < 64 ? n - t0 : 64;                                                         \
        for (t = 0; t < 64; t++) acc[t] = 0;                                                    \
        for (e = 0; e < nz; e++) {                                                              \
            const T *r = src + at[e] + t0;                                                      \
            T ae = a[e];                                                                        \
            if (nb == 64) { /* a whole block: a constant trip count, acc held in registers */   \
                _Pragma("omp simd")                                                             \
                for (t = 0; t < 64; t++) acc[t] += ae * r[t];                                   \
            } else {                                                                            \
                _Pragma("omp simd")                                                             \
                for (t = 0; t < nb; t++) acc[t] += ae * r[t];                                   \
            }                                                                                   \
        }                                                                                       \
        _Pragma("omp simd")                                                                     \
        for (t = 0; t < nb; t++) o[t0 + t] = acc[t];                                            \
    }                                                                                           \
}                                                                                               \
/* The rows i < p of one (channel, sample) of v: out[i ps + t] = sum_j mat[i q + j]             \
 * x[m t - lo + j] (zero outside [0, n)), t < tiles. The row is first split into its m phases   \
 * (d: m rows of w = tiles + (q - 1) / m), so that window element j over the tiles is one       \
 * contiguous run (phase j % m from j / m on), and each output row is one pass over the tiles   \
 * per nonzero entry of mat. */                                                                 \
static FERRO_CLONES void ferro_wino1_gather_##S(const T *src, ptrdiff_t n, const double *mat,   \
                                                ptrdiff_t p, ptrdiff_t q, ptrdiff_t m,          \
                                                ptrdiff_t lo, ptrdiff_t tiles, T *out,          \
                                                ptrdiff_t ps, T *d) {                           \
    ptrdiff_t w = tiles + (q - 1) / m, i, j, k, nz, at[FERRO_WINO1_MAX];                        \
    T a[FERRO_WINO1_MAX];                                                                       \
    /* [ka, kb): the k whose m phases all lie in [0, n), split in one contiguous pass */        \
    ptrdiff_t ka = lo <= 0 ? 0 : (lo + m - 1) / m, kb = n + lo - m < 0 ? 0 : (n + lo - m) / m + 1; \
    ka = ka < w ? ka : w;                                                                       \
    kb = m != 4 ? ka : kb < w ? (kb > ka ? kb : ka) : w; /* (only F(4, k) takes it) */          \
    for (k = ka ? 0 : kb; k < w; k = k + 1 == ka ? kb : k + 1) /* the rest, zero-padded */      \
        for (i = 0; i < m; i++)                                                                 \
            d[i * w + k] = m * k + i - lo >= 0 && m * k + i - lo < n ? src[m * k + i - lo] : 0; \
    if (m == 4 && kb > ka) { /* F(4, k): 4 contiguous values at a time (vector loads) */        \
        T *restrict d0 = d + ka, *restrict d1 = d0 + w, *restrict d2 = d0 + 2 * w;              \
        T *restrict d3 = d0 + 3 * w;                                                            \
        const T *restrict s4 = src + 4 * ka - lo;                                               \
        for (k = 0; k < kb - ka; k++) {                                                         \
            d0[k] = s4[4 * k], d1[k] = s4[4 * k + 1], d2[k] = s4[4 * k + 2];                    \
            d3[k] = s4[4 * k + 3];                                                              \
        }                                                                                       \
    }                                                                                           \
    for (i = 0; i < p; i++) {                                                                   \
        T *o = out + i * ps;                                                                    \
        for (j = nz = 0; j < q; j++)                                                            \
            if (mat[i * q + j] != 0) at[nz] = (j % m) * w + j / m, a[nz++] = (T)mat[i * q + j]; \
        ferro_wino1_axpys_##S(o, d, at, a, nz, tiles);                                          \
    }                                                                                           \
}                                                                                               \
/* One (channel, sample) row y (n) = mat (m x p) times each tile's p values src[k ps + t]:      \
 * tile t's m outputs at m t + i, cropped at n (s: m rows of tiles). */                         \
static FERRO_CLONES void ferro_wino1_scatter_##S(const T *src, ptrdiff_t ps, const double *mat, \
                                                 ptrdiff_t m, ptrdiff_t p, ptrdiff_t tiles,     \
                                                 T *y, ptrdiff_t n, T *s) {                     \
    ptrdiff_t i, t, nz, at[FERRO_WINO1_MAX];                                                    \
    T a[FERRO_WINO1_MAX];                                                                       \
    for (i = 0; i < m; i++) {                                                                   \
        T *si = s + i * tiles;                                                                  \
        nz = ferro_nonzeros_##S(mat + i * p, p, ps, at, a);                                     \
        ferro_wino1_axpys_##S(si, src, at, a, nz, tiles);                                       \
    }                                                                                           \
    for (t = 0; t < tiles && m * t + m <= n; t++)                                               \
        for (i = 0; i < m; i++) y[m * t + i] = s[i * tiles + t];                                \
    for (i = 0; t < tiles && m * t + i < n; i++) y[m * t + i] = s[i * tiles + t];               \
}                                                                                               \
/* o[k] = sum_e a[e] src[at[e] + k], k < n, straight into o (the passes' runs are short: a     \
 * local block and its copy back cost more than the terms). */                                 \
FERRO_INLINE void ferro_wino2_axpys_##S(T *restrict o, const T *src, const ptrdiff_t *at,       \
                                        const T *a, ptrdiff_t nz, ptrdiff_t n) {                \
    ptrdiff_t e, k;                                                                             \
    const T *r = src + (nz ? at[0] : 0);                                                        \
    T a0 = nz ? a[0] : 0;                                                                       \
    _Pragma("omp simd")                                                                         \
    for (k = 0; k < n; k++) o[k] = a0 * r[k];                                                   \
    for (e = 1; e < nz; e++) {                                                                  \
        const T *restrict re = src + at[e];                                                     \
        T ae = a[e];                                                                            \
        _Pragma("omp simd")                                                                     \
        for (k = 0; k < n; k++) o[k] += ae * re[k];                                             \
    }                                                                                           \
}                                                                                               \
/* 2-d F(m x m, r x r): the same matrix along both dims, one channel of nb samples at a time,   \
 * so that the loops run over the tiles of all nb planes (nt = nb th tw of them; a plane alone  \
 * has few: 16 on a 16x16 output), 64 tiles at a time: a block's windows and row and column     \
 * terms stay in L1 (as passes over all nt tiles they went through L2: the benchmark's          \
 * conv_transpose2d gathers took 276 and 134 us, now 198 and 77, its scatters 363 and 123 ->    \
 * 256 and 97; the same bits, each element's terms added in the same order).                    \
 *                                                                                              \
 * Gather: out[(i p + j) ps + z] = sum_{a,b} mat[i q + a] mat[j q + b] x_s[m y - lo0 + a,       \
 * m t - lo1 + b] for tile z = (s th + y) tw + t (zero outside each plane h x wd; sample s's    \
 * plane at src + s ss). d: a block's windows, q q bs values (bs = min(nt, 64)); e: its column  \
 * terms, q p bs. */                                                                            \
static FERRO_CLONES void ferro_wino2_gather_##S(const T *src, ptrdiff_t ss, ptrdiff_t nb,       \
                                                ptrdiff_t h, ptrdiff_t wd, const double *mat,   \
                                                ptrdiff_t p, ptrdiff_t q, ptrdiff_t m,          \
                                                ptrdiff_t lo0, ptrdiff_t lo1, ptrdiff_t th,     \
                                                ptrdiff_t tw, T *out, ptrdiff_t ps, T *d,       \
                                                T *e) {                                         \
    ptrdiff_t nt = nb * th * tw, z0, k, a, b, i, j, nz, at[FERRO_WINO1_MAX], off[64];         \
    ptrdiff_t ry[64], ct[64], bs = nt < 64 ? nt : 64; /* a block's stride in d, e, f */       \
    T c[FERRO_WINO1_MAX];                                                                       \
    for (z0 = 0; z0 < nt; z0 += 64) { /* 64 tiles at a time: windows, rows, columns */      \
        ptrdiff_t kn = nt - z0 < 64 ? nt - z0 : 64, r0, r1, c0, c1;                             \
        ferro_wino2_tiles(z0, kn, m, lo0, lo1, th, tw, ss, wd, ry, ct, off, &r0, &r1, &c0, &c1); \
        for (a = 0; a < q; a++)                                                                 \
            for (b = 0; b < q; b++) {                                                           \
                T *dr = d + (a * q + b) * bs;                                                   \
                const T *sa = src + a * wd + b;                                                 \
                if (r0 + a >= 0 && r1 + a < h && c0 + b >= 0 && c1 + b < wd) {                  \
                    _Pragma("omp simd")                                                         \
                    for (k = 0; k < kn; k++) dr[k] = sa[off[k]];                                \
                } else {                                                                        \
                    for (k = 0; k < kn; k++)                                                    \
                        dr[k] = ry[k] + a >= 0 && ry[k] + a < h && ct[k] + b >= 0               \
                                && ct[k] + b < wd ? sa[off[k]] : 0;                             \
                }                                                                               \
            }                                                                                   \
        for (j = 0; j < p; j++) {                                                               \
            nz = ferro_nonzeros_##S(mat + j * q, q, bs, at, c);                                 \
            for (a = 0; a < q; a++)                                                             \
                ferro_wino2_axpys_##S(e + (a * p + j) * bs, d + a * q * bs, at, c, nz, kn);     \
        }                                                                                       \
        for (i = 0; i < p; i++) {                                                               \
            nz = ferro_nonzeros_##S(mat + i * q, q, p * bs, at, c);                             \
            for (j = 0; j < p; j++)                                                             \
                ferro_wino2_axpys_##S(out + (i * p + j) * ps + z0, e + j * bs, at, c, nz, kn);  \
        }                                                                                       \
    }                                                                                           \
}                                                                                               \
/* Scatter: each sample's plane y_s (h x wd, at y + s ys) = mat (r x p) along both dims times   \
 * each tile's p x p values src[(a p + b) ps + z]: tile z = (s th + u) tw + t's r x r values at \
 * (m u - lo0 + i, m t - lo1 + j), cropped to the plane, written (add = 0: an output transform, \
 * r = m) or added (add = 1: the input transform's adjoint, r = q, windows overlapping), 64     \
 * tiles at a time as the gather. e: r p bs values, f: r r bs. */                               \
static FERRO_CLONES void ferro_wino2_scatter_##S(const T *src, ptrdiff_t ps, const double *mat, \
                                                 ptrdiff_t r, ptrdiff_t p, ptrdiff_t m,         \
                                                 ptrdiff_t lo0, ptrdiff_t lo1, ptrdiff_t nb,    \
                                                 ptrdiff_t th, ptrdiff_t tw, T *y, ptrdiff_t ys, \
                                                 ptrdiff_t h, ptrdiff_t wd, int add, T *e,      \
                                                 T *f) {                                        \
    ptrdiff_t nt = nb * th * tw, z0, k, b, i, j, nz, at[FERRO_WINO1_MAX], off[64];              \
    ptrdiff_t ry[64], ct[64], bs = nt < 64 ? nt : 64; /* a block's stride in d, e, f */       \
    T c[FERRO_WINO1_MAX];                                                                       \
    for (z0 = 0; z0 < nt; z0 += 64) { /* 64 tiles at a time: rows, columns, placed */         \
        ptrdiff_t kn = nt - z0 < 64 ? nt - z0 : 64, r0, r1, c0, c1;                             \
        for (i = 0; i < r; i++) {                                                               \
            nz = ferro_nonzeros_##S(mat + i * p, p, p * ps, at, c);                             \
            for (b = 0; b < p; b++)                                                             \
                ferro_wino2_axpys_##S(e + (i * p + b) * bs, src + b * ps + z0, at, c, nz, kn);  \
        }                                                                                       \
        for (j = 0; j < r; j++) {                                                               \
            nz = ferro_nonzeros_##S(mat + j * p, p, bs, at, c);                                 \
            for (i = 0; i < r; i++)                                                             \
                ferro_wino2_axpys_##S(f + (i * r + j) * bs, e + i * p * bs, at, c, nz, kn);     \
        }                                                                                       \
        ferro_wino2_tiles(z0, kn, m, lo0, lo1, th, tw, ys, wd, ry, ct, off, &r0, &r1, &c0, &c1); \
        for (i = 0; i < r; i++)                                                                 \
            for (j = 0; j < r; j++) {                                                           \
                const T *fr = f + (i * r + j) * bs;                                             \
                T *yi = y + i * wd + j;                                                         \
                if (r0 + i >= 0 && r1 + i < h && c0 + j >= 0 && c1 + j < wd) {                  \
                    if (add)                                                                    \
                        for (k = 0; k < kn; k++) yi[off[k]] += fr[k];                           \
                    else                                                                        \
                        for (k = 0; k < kn; k++) yi[off[k]] = fr[k];                            \
                } else {                                                                        \
                    for (k = 0; k < kn; k++)                                                    \
                        if (ry[k] + i >= 0 && ry[k] + i < h && ct[k] + j >= 0 && ct[k] + j < wd) \
                            yi[off[k]] = add ? yi[off[k]] + fr[k] : fr[k];                      \
                }                                                                               \
            }                                                                                   \
    }                                                                                           \
}                                                                                               \
/* out[i os + j] = sum_e m[6 i + e] in[e is + j], i, e < 6, j < n: the six rows of a 6 x 6      \
 * matrix (zero-padded) at once, each input run read once and six independent sums per value    \
 * (a sum of a row's nonzero terms at a time, as wino2_axpys, ran 3x slower: short runs, one    \
 * chain of dependent FMAs each). */                                                            \
FERRO_INLINE void ferro_wino3_mat6_##S(T *restrict out, ptrdiff_t os, const T *restrict in,     \
                                       ptrdiff_t is, const T *restrict m, ptrdiff_t n) {        \
    ptrdiff_t j;                                                                                \
    _Pragma("omp simd")                                                                         \
    for (j = 0; j < n; j++) {                                                                   \
        T v0 = in[j], v1 = in[is + j], v2 = in[2 * is + j], v3 = in[3 * is + j];                \
        T v4 = in[4 * is + j], v5 = in[5 * is + j];                                             \
        out[j] = m[0] * v0 + m[1] * v1 + m[2] * v2 + m[3] * v3 + m[4] * v4 + m[5] * v5;         \
        out[os + j] = m[6] * v0 + m[7] * v1 + m[8] * v2 + m[9] * v3 + m[10] * v4 + m[11] * v5;  \
        out[2 * os + j] = m[12] * v0 + m[13] * v1 + m[14] * v2 + m[15] * v3 + m[16] * v4        \
                          + m[17] * v5;                                                         \
        out[3 * os + j] = m[18] * v0 + m[19] * v1 + m[20] * v2 + m[21] * v3 + m[22] * v4        \
                          + m[23] * v5;                                                         \
        out[4 * os + j] = m[24] * v0 + m[25] * v1 + m[26] * v2 + m[27] * v3 + m[28] * v4        \
                          + m[29] * v5;                                                         \
        out[5 * os + j] = m[30] * v0 + m[31] * v1 + m[32] * v2 + m[33] * v3 + m[34] * v4        \
                          + m[35] * v5;                                                         \
    }                                                                                           \
}                                                                                               \
/* The 6 x 6 zero-padded copy m6 of mat (rows x cols, in float64). */                           \
FERRO_INLINE void ferro_wino3_pad6_##S(const double *mat, ptrdiff_t rows, ptrdiff_t cols,       \
                                       T *m6) {                                                 \
    ptrdiff_t i;                                                                                \
    for (i = 0; i < 36; i++)                                                                    \
        m6[i] = i / 6 < rows && i % 6 < cols ? (T)mat[i / 6 * cols + i % 6] : 0;                \
}                                                                                               \
/* 3-d F(4^3, r^3) (6 products a dim) on channels-last volumes (dd, h, wd, c) (conv.py's        \
 * channels-last scheme), a block of up to FERRO_WINO3_BLOCK consecutive tiles at a time: their \
 * windows side by side (scratch [a][b][e][tile][c], 6 a dim, zeroed by the caller: rows past a \
 * window of q < 6 stay zero), so each separable pass is 6 x 6 sums over runs of (tiles x c),   \
 * vectorized over the channels and the block whatever the volume's size. The 216 products are  \
 * rows ps apart, ordered (height, width, depth) as _winograd_weight_matrix's; tile t = t0 +    \
 * (tz th + ty) tw + tx holds a row's c values at t c. Gather: out[((i 6 + j) 6 + k) ps + t c + \
 * ch] = sum_{a,b,e} mat[k q + a] mat[i q + b] mat[j q + e] x[m tz - lo0 + a, m ty - lo1 + b,   \
 * m tx - lo2 + e, ch] (zero outside), mat (6 x q). s: 3 * 216 B c values. */                   \
static FERRO_CLONES void ferro_wino3_gather_##S(const T *x, ptrdiff_t dd, ptrdiff_t h,          \
                                                ptrdiff_t wd, ptrdiff_t c, const double *mat,   \
                                                ptrdiff_t q, ptrdiff_t m, const ptrdiff_t *lo,  \
                                                const ptrdiff_t *tl, T *out, ptrdiff_t ps,      \
                                                ptrdiff_t t0, T *s) {                           \
    ptrdiff_t nt = tl[0] * tl[1] * tl[2], bc = FERRO_WINO3_BLOCK * c, u, a, k, j, kn;           \
    T m6[36], *win = s, *s1 = win + 216 * bc, *s2 = s1 + 216 * bc;                              \
    const T *x1;                                                                                \
    ferro_wino3_pad6_##S(mat, 6, q, m6);                                                        \
    for (u = 0; u < nt; u += FERRO_WINO3_BLOCK) {                                               \
        kn = nt - u < FERRO_WINO3_BLOCK ? nt - u : FERRO_WINO3_BLOCK;                           \
        for (k = 0; k < kn; k++) { /* the windows, zero outside the volume */                   \
            ptrdiff_t z0, y0, x0;                                                               \
            ferro_wino3_origin(u + k, m, lo, tl, &z0, &y0, &x0);                                \
            for (a = 0; a < q * q; a++) { /* row (z, y) of the window: q positions of c */      \
                ptrdiff_t z = z0 + a / q, y = y0 + a % q, e;                                    \
                T *o = win + (a / q * 6 + a % q) * 6 * bc + k * c;                              \
                for (e = 0; e < q; e++, o += bc) {                                              \
                    if (z < 0 || z >= dd || y < 0 || y >= h || x0 + e < 0 || x0 + e >= wd) {    \
                        for (j = 0; j < c; j++) o[j] = 0;                                       \
                        continue;                                                               \
                    }                                                                           \
                    x1 = x + ((z * h + y) * wd + x0 + e) * c;                                   \
                    for (j = 0; j < c; j++) o[j] = x1[j];                                       \
                }                                                                               \
            }                                                                                   \
        }                                                                                       \
        for (a = 0; a < 36; a++) /* along the width: s1 (a, b, i) */                            \
            if (a / 6 < q && a % 6 < q)                                                         \
                ferro_wino3_mat6_##S(s1 + a * 6 * bc, bc, win + a * 6 * bc, bc, m6, kn * c);    \
        for (a = 0; a < q; a++) /* along the height: s2 (a, i, j) */                            \
            ferro_wino3_mat6_##S(s2 + a * 36 * bc, 6 * bc, s1 + a * 36 * bc, 6 * bc, m6, 6 * bc); \
        for (a = 0; a < 36; a++) /* along the depth, into products (a, 0..5) */                 \
            ferro_wino3_mat6_##S(out + a * 6 * ps + (t0 + u) * c, ps, s2 + a * bc, 36 * bc, m6, \
                                 kn * c);                                                       \
    }                                                                                           \
}                                                                                               \
/* Scatter: mat (r x 6, r <= 6) along the depth, the height and the width of each tile's 216    \
 * products (rows ps apart, as the gather's), its r^3 values placed at (m tz - lo0 + a,         \
 * m ty - lo1 + b, m tx - lo2 + e) of y (dd, h, wd, c), cropped: written (add = 0: an output    \
 * transform, r = m) or added (add = 1: the input transform's adjoint, r = 6, the windows       \
 * overlapping: a volume's tiles in order, on one thread). s: 3 * 216 B c values. */            \
static FERRO_CLONES void ferro_wino3_scatter_##S(const T *src, ptrdiff_t ps, ptrdiff_t t0,      \
                                                 const double *mat, ptrdiff_t r, ptrdiff_t m,   \
                                                 const ptrdiff_t *lo, const ptrdiff_t *tl, T *y, \
                                                 ptrdiff_t dd, ptrdiff_t h, ptrdiff_t wd,       \
                                                 ptrdiff_t c, int add, T *s) {                  \
    ptrdiff_t nt = tl[0] * tl[1] * tl[2], bc = FERRO_WINO3_BLOCK * c, u, a, k, j, kn;           \
    T m6[36], *o, *s2 = s, *s1 = s2 + 216 * bc, *f = s1 + 216 * bc;                             \
    ferro_wino3_pad6_##S(mat, r, 6, m6);                                                        \
    for (u = 0; u < nt; u += FERRO_WINO3_BLOCK) {                                               \
        kn = nt - u < FERRO_WINO3_BLOCK ? nt - u : FERRO_WINO3_BLOCK;                           \
        for (a = 0; a < 36; a++) /* along the depth: s2 (i, a) */                               \
            ferro_wino3_mat6_##S(s2 + a * bc, 36 * bc, src + a * 6 * ps + (t0 + u) * c, ps, m6, \
                                 kn * c);                                                       \
        for (a = 0; a < r; a++) /* along the height: s1 (a, i, j) */                            \
            ferro_wino3_mat6_##S(s1 + a * 36 * bc, 6 * bc, s2 + a * 36 * bc, 6 * bc, m6, 6 * bc); \
        for (a = 0; a < 36; a++) /* along the width: f (a, b, i) */                             \
            if (a / 6 < r && a % 6 < r)                                                         \
                ferro_wino3_mat6_##S(f + a * 6 * bc, bc, s1 + a * 6 * bc, bc, m6, kn * c);      \
        for (k = 0; k < kn; k++) { /* placed, cropped to the volume */                          \
            ptrdiff_t z0, y0, x0;                                                               \
            ferro_wino3_origin(u + k, m, lo, tl, &z0, &y0, &x0);                                \
            for (a = 0; a < r * r; a++) { /* row (z, y): r positions of c */                    \
                ptrdiff_t z = z0 + a / r, yy = y0 + a % r, e;                                   \
                const T *v = f + (a / r * 6 + a % r) * 6 * bc + k * c;                          \
                if (z < 0 || z >= dd || yy < 0 || yy >= h)                                      \
                    continue;                                                                   \
                for (e = 0; e < r; e++, v += bc) {                                              \
                    if (x0 + e < 0 || x0 + e >= wd)                                             \
                        continue;                                                               \
                    o = y + ((z * h + yy) * wd + x0 + e) * c;                                   \
                    if (add)                                                                    \
                        for (j = 0; j < c; j++) o[j] += v[j];                                   \
                    else                                                                        \
                        for (j = 0; j < c; j++) o[j] = v[j];                                    \
                }                                                                               \
            }                                                                                   \
        }                                                                                       \
    }                                                                                           \
}

FERRO_WINO1(float, f32)
FERRO_WINO1(double, f64)

/* im2col / col2im of the GEMM path, one channel: the columns (k0, k1, k2, nb, o0, o1, o2) of
 * channel ci of img (nb, c, s0, s1, s2) zero-padded by lo before each dim (add = 0: written
 * into col, img only read), or their adjoint (add = 1: img's planes of channel ci set to the
 * sums of the columns' entries read from them). Every input index is checked against the
 * bounds: rows of the padding are zeros (or skipped), never read. g: size[3], k[3], out[3],
 * stride[3], lo[3], dilation[3].
 *
 * Flat loops (stride 1 along dims 1 and 2, rows as long as the output's: a "same" convolution):
 * one kernel offset (k1, k2) maps a whole output plane (o1, o2) onto the input plane shifted by
 * the constant sh = (lo1 - k1 dl1) s2 + lo2 - k2 dl2, so each (offset, o0) is one loop over the
 * plane per sample, the padding's rows and columns a select on each element's index and column
 * (q) instead of a memcpy/zeroing per row: on the digits CNN's 4x4 maps the rows were 4 values,
 * and im2col and col2im of its 16 -> 32 layer took 215 and 150 us of one core, 24 and 31 flat
 * (a 32x32 map 136 -> 96 us; at 64x64 the rows were faster, so planes of at most
 * FERRO_COLS_FLAT values). Whole-plane reads run past the plane into its neighbours (the
 * selected-out elements): taken only where every sample's range lies inside the array, else an
 * element-wise checked loop reads only inside the plane. col2im adds each offset's plane into
 * the channel's zeroed input planes in (k0, k1, k2) order, the row loops' order: the same bits.
 * Other shapes take the row loops. */
#define FERRO_COLS_FLAT 1024

#define FERRO_COLS(T, S)                                                                        \
/* Over the nb planes b: dst[b ds + u] = src[b ss + u] (add = 0) or += (add = 1) where u lies   \
 * in the rows' range [ja, ja + nj) and its column q[u] in [a2, a2 + n2), else 0 or unchanged.  \
 * One plane after another: the tests are the same for every plane. */                         \
FERRO_INLINE void ferro_cols_sel_##S(T *restrict dst, ptrdiff_t ds, const T *restrict src,      \
                                     ptrdiff_t ss, ptrdiff_t nb, const int *q, int ja,          \
                                     unsigned nj, unsigned a2, unsigned n2, int n, int add) {   \
    ptrdiff_t b;                                                                                \
    int u;                                                                                      \
    for (b = 0; b < nb; b++, dst += ds, src += ss) {                                            \
        _Pragma("omp simd")                                                                     \
        for (u = 0; u < n; u++) {                                                               \
            T v = src[u], d = add ? dst[u] : 0;                                                 \
            int in = ((unsigned)(u - ja) < nj) & ((unsigned)q[u] - a2 < n2);                    \
            dst[u] = in ? (add ? d + v : v) : d;                                                \
        }                                                                                       \
    }                                                                                           \
}                                                                                               \
FERRO_INLINE void ferro_cols_flat_##S(T *img, T *col, ptrdiff_t nb, ptrdiff_t c, ptrdiff_t ci,  \
                                      const ptrdiff_t *g, int add) {                            \
    const ptrdiff_t *size = g, *k = g + 3, *out = g + 6, *st = g + 9, *lo = g + 12;             \
    const ptrdiff_t *dl = g + 15, w = size[2], pin = size[1] * w, pout = out[1] * w;            \
    const ptrdiff_t nk = k[1] * k[2], per = k[0] * nk * nb * out[0] * pout;                     \
    const ptrdiff_t pl = size[0] * pin, cs = c * pl, ds = out[0] * pout; /* samples' strides */ \
    /* the plane written (n values, samples dd apart) and the one read (from src + t, ss apart, \
     * the whole array lim values from src): the output's and the input's, or the reverse */    \
    const ptrdiff_t n = add ? pin : pout, dd = add ? cs : ds, ss = add ? ds : cs;               \
    const ptrdiff_t n1 = add ? size[1] : out[1], m1 = add ? out[1] : size[1];                   \
    const ptrdiff_t lim = add ? c * per : nb * cs, sgn = add ? -1 : 1;                          \
    const T *src = add ? col - ci * per : img;                                                  \
    ptrdiff_t j, t, u, i0, o0, k0, kj;                                                          \
    int q[FERRO_COLS_FLAT]; /* the column of each element of a plane */                         \
    for (j = t = 0; j < n; t = t + 1 == w ? 0 : t + 1) q[j++] = (int)t;                         \
    for (j = 0; j < nb && add; j++) memset(img + j * cs + ci * pl, 0, pl * sizeof(T));          \
    for (k0 = 0; k0 < k[0]; k0++)                                                               \
        for (kj = 0; kj < nk; kj++) {                                                           \
            /* output element u reads input element u - sh: row r of the plane written is row   \
             * r - f1 of the one read; its rows [ra, rb) and columns [ca, cb) lie inside it */  \
            ptrdiff_t f1 = lo[1] - kj / k[2] * dl[1], f2 = lo[2] - kj % k[2] * dl[2];           \
            const ptrdiff_t sh = f1 * w + f2;                                                   \
            f1 *= sgn, f2 *= sgn;                                                               \
            ptrdiff_t ra = f1 < 0 ? 0 : f1 < n1 ? f1 : n1, ca = f2 < 0 ? 0 : f2 < w ? f2 : w;   \
            ptrdiff_t rb = m1 + f1 < ra ? ra : m1 + f1 < n1 ? m1 + f1 : n1;                     \
            ptrdiff_t cb = w + f2 < ca ? ca : w + f2 < w ? w + f2 : w;                          \
            const int ja = (int)(ra * w);                                                       \
            const unsigned nj = (unsigned)((rb - ra) * w), a2 = (unsigned)ca;                   \
            const unsigned n2 = (unsigned)(cb - ca);                                            \
            for (o0 = 0; o0 < out[0]; o0++) {                                                   \
                T *cp = col + ((k0 * nk + kj) * nb * out[0] + o0) * pout; /* sample 0's plane */\
                i0 = o0 * st[0] - lo[0] + k0 * dl[0];                                           \
                if (i0 < 0 || i0 >= size[0]) {                                                  \
                    for (j = 0; j < nb && !add; j++) memset(cp + j * ds, 0, pout * sizeof(T));  \
                    continue;                                                                   \
                }                                                                               \
                T *ip = img + ci * pl + i0 * pin, *dst = add ? ip : cp;                         \
                t = add ? cp - src + sh : ip - img - sh; /* dst[u] takes src[t + u] */          \
                if (t >= 0 && t + (nb - 1) * ss + n <= lim) { /* every sample inside the array */\
                    ferro_cols_sel_##S(dst, dd, src + t, ss, nb, q, ja, nj, a2, n2, (int)n, add); \
                    continue;                                                                   \
                }                                                                               \
                for (j = 0; j < nb; j++, dst += dd, t += ss) /* only inside the plane */        \
                    for (u = 0; u < n; u++)                                                     \
                        if (((unsigned)(u - ja) < nj) & ((unsigned)q[u] - a2 < n2))             \
                            dst[u] = add ? dst[u] + src[t + u] : src[t + u];                    \
                        else if (!add)                                                          \
                            dst[u] = 0;                                                         \
            }                                                                                   \
        }                                                                                       \
}                                                                                               \
static FERRO_CLONES void ferro_im2col_##S(T *img, T *col, ptrdiff_t nb, ptrdiff_t c,            \
                                          ptrdiff_t ci, const ptrdiff_t *g, int add) {          \
    const ptrdiff_t *size = g, *k = g + 3, *out = g + 6, *st = g + 9, *lo = g + 12;             \
    const ptrdiff_t *dl = g + 15, s2 = st[2], n2 = out[2], f = FERRO_COLS_FLAT;                 \
    const ptrdiff_t plane = size[0] * size[1] * size[2];                                        \
    ptrdiff_t k0, k1, k2, b, o0, o1, i0, i1, off, a, e, ox;                                     \
    T *dst = col;                                                                               \
    if (st[1] == 1 && s2 == 1 && size[2] == n2 && size[1] * n2 <= f && out[1] * n2 <= f &&      \
        lo[1] >= 0 && lo[1] <= f && lo[2] >= 0 && lo[2] <= f && dl[1] <= f && dl[2] <= f &&     \
        k[1] <= f && k[2] <= f) {                                                               \
        ferro_cols_flat_##S(img, col, nb, c, ci, g, add);                                       \
        return;                                                                                 \
    }                                                                                           \
    for (b = 0; b < nb && add; b++) memset(img + (b * c + ci) * plane, 0, plane * sizeof(T));   \
    for (k0 = 0; k0 < k[0]; k0++)                                                               \
        for (k1 = 0; k1 < k[1]; k1++)                                                           \
            for (k2 = 0; k2 < k[2]; k2++) {                                                     \
                /* the outputs ox in [a, e) read inside the row: 0 <= ox s2 - off < size */     \
                off = lo[2] - k2 * dl[2];                                                       \
                a = off <= 0 ? 0 : (off + s2 - 1) / s2;                                         \
                e = size[2] - 1 + off < 0 ? 0 : (size[2] - 1 + off) / s2 + 1;                   \
                a = a < n2 ? a : n2;                                                            \
                e = e < n2 ? (e > a ? e : a) : n2;                                              \
                for (b = 0; b < nb; b++)                                                        \
                    for (o0 = 0; o0 < out[0]; o0++) {                                           \
                        i0 = o0 * st[0] - lo[0] + k0 * dl[0];                                   \
                        for (o1 = 0; o1 < out[1]; o1++, dst += n2) {                            \
                            T *row;                                                             \
                            i1 = o1 * st[1] - lo[1] + k1 * dl[1];                               \
                            if (i0 < 0 || i0 >= size[0] || i1 < 0 || i1 >= size[1]) {           \
                                if (!add) memset(dst, 0, n2 * sizeof(T));                       \
                                continue;                                                       \
                            }                                                                   \
                            row = img + (((b * c + ci) * size[0] + i0) * size[1] + i1) * size[2];\
                            if (add && s2 == 1) {                                               \
                                _Pragma("omp simd")                                             \
                                for (ox = a; ox < e; ox++) row[ox - off] += dst[ox];            \
                            } else if (add) {                                                   \
                                for (ox = a; ox < e; ox++) row[ox * s2 - off] += dst[ox];       \
                            } else {                                                            \
                                for (ox = 0; ox < a; ox++) dst[ox] = 0;                         \
                                if (s2 == 1) {                                                  \
                                    memcpy(dst + a, row + a - off, (e - a) * sizeof(T));        \
                                } else {                                                        \
                                    _Pragma("omp simd")                                         \
                                    for (ox = a; ox < e; ox++) dst[ox] = row[ox * s2 - off];    \
                                }                                                               \
                                for (ox = e; ox < n2; ox++) dst[ox] = 0;                        \
                            }                                                                   \
                        }                                                                       \
                    }                                                                           \
            }                                                                                   \
}

FERRO_COLS(float, f32)
FERRO_COLS(double, f64)

/* Space-to-depth of a strided 2-d convolution's input and its inverse (conv_kernels.pyx:
 * space_to_depth2d, depth_to_space2d), over `planes` planes (N C) of x (h, w) and z (s0, s1,
 * z0, z1): z[r0, r1, u, v] = x[s0 u + r0 - lo0, s1 v + r1 - lo1] (0 outside x), and back.
 * Stride 2 along the rows, the common case, is its own loop (a constant stride: gcc
 * vectorizes its loads, and the inverse's stores, with lane permutes); other strides take a
 * loop over the phases of each row. Compiled per ISA level. */
#define FERRO_PHASES(T, S)                                                                      \
static FERRO_CLONES void ferro_space_to_depth_##S(const T *x, T *z, ptrdiff_t planes,          \
        ptrdiff_t h, ptrdiff_t w, ptrdiff_t s0, ptrdiff_t s1, ptrdiff_t lo0, ptrdiff_t lo1,   \
        ptrdiff_t z0, ptrdiff_t z1) {                                                         \
    ptrdiff_t p, r0, r1, u, v;                                                                \
    for (p = 0; p < planes; p++)                                                              \
        for (r0 = 0; r0 < s0; r0++)                                                           \
            for (r1 = 0; r1 < s1; r1++) {                                                     \
                /* the columns v in [a, b) of phase r1 are inside x */                        \
                const ptrdiff_t c = r1 - lo1;                                                 \
                ptrdiff_t a = c >= 0 ? 0 : (s1 - 1 - c) / s1;                                 \
                ptrdiff_t b = w - c <= 0 ? 0 : (w - c + s1 - 1) / s1;                         \
                a = a < z1 ? a : z1;                                                          \
                b = b < z1 ? b : z1;                                                          \
                b = b < a ? a : b;                                                            \
                T *d = z + ((p * s0 + r0) * s1 + r1) * z0 * z1;                               \
                for (u = 0; u < z0; u++, d += z1) {                                           \
                    const ptrdiff_t i = s0 * u + r0 - lo0;                                    \
                    const ptrdiff_t va = a, vb = i < 0 || i >= h ? a : b; /* padding rows */  \
                    for (v = 0; v < va; v++) d[v] = 0;                                        \
                    if (vb > va) {                                                            \
                        const T *row = x + (p * h + i) * w + c;                               \
                        if (s1 == 2)                                                          \
                            for (v = va; v < vb; v++) d[v] = row[2 * v];                      \
                        else                                                                  \
                            for (v = va; v < vb; v++) d[v] = row[s1 * v];                     \
                    }                                                                         \
                    for (v = vb; v < z1; v++) d[v] = 0;                                       \
                }                                                                             \
            }                                                                                 \
}                                                                                             \
static FERRO_CLONES void ferro_depth_to_space_##S(const T *z, T *x, ptrdiff_t planes,          \
        ptrdiff_t h, ptrdiff_t w, ptrdiff_t s0, ptrdiff_t s1, ptrdiff_t lo0, ptrdiff_t lo1,   \
        ptrdiff_t z0, ptrdiff_t z1) {                                                         \
    ptrdiff_t p, i, j, k, m;                                                                  \
    const ptrdiff_t ph = z0 * z1; /* one phase's plane */                                     \
    for (p = 0; p < planes; p++)                                                              \
        for (i = 0; i < h; i++) {                                                             \
            T *d = x + (p * h + i) * w;                                                       \
            const ptrdiff_t u = (i + lo0) / s0, r0 = (i + lo0) % s0;                          \
            if (u >= z0) {                                                                    \
                for (j = 0; j < w; j++) d[j] = 0;                                             \
                continue;                                                                     \
            }                                                                                 \
            const T *zr = z + ((p * s0 + r0) * s1 * z0 + u) * z1; /* phase r1: + r1 ph */     \
            j = 0;                                                                            \
            if (s1 == 2) { /* d[2k] = ze[k], d[2k + 1] = zo[k] while both are inside z */     \
                const ptrdiff_t ve = lo1 / 2, vo = (lo1 + 1) / 2;                             \
                const T *ze = zr + (lo1 % 2) * ph + ve, *zo = zr + ((lo1 + 1) % 2) * ph + vo; \
                m = w / 2;                                                                    \
                if (m > z1 - ve) m = z1 - ve;                                                 \
                if (m > z1 - vo) m = z1 - vo;                                                 \
                for (k = 0; k < m; k++) {                                                     \
                    d[2 * k] = ze[k];                                                         \
                    d[2 * k + 1] = zo[k];                                                     \
                }                                                                             \
                j = m > 0 ? 2 * m : 0;                                                        \
            }                                                                                 \
            for (; j < w; j++) { /* the rest, each element's phase and column */              \
                const ptrdiff_t q = j + lo1, v = q / s1;                                      \
                d[j] = v < z1 ? zr[(q % s1) * ph + v] : 0;                                    \
            }                                                                                 \
        }                                                                                     \
}

FERRO_PHASES(float, f32)
FERRO_PHASES(double, f64)

/* One entry per dtype: x (planes, h, w) to z (to_depth = 1), or z back to x. */
#define FERRO_PHASES_CALL(T, S)                                                                 \
static void ferro_phases_##S(T *x, T *z, int to_depth, ptrdiff_t planes, ptrdiff_t h,          \
                             ptrdiff_t w, ptrdiff_t s0, ptrdiff_t s1, ptrdiff_t lo0,            \
                             ptrdiff_t lo1, ptrdiff_t z0, ptrdiff_t z1) {                       \
    if (to_depth)                                                                               \
        ferro_space_to_depth_##S(x, z, planes, h, w, s0, s1, lo0, lo1, z0, z1);                 \
    else                                                                                        \
        ferro_depth_to_space_##S(z, x, planes, h, w, s0, s1, lo0, lo1, z0, z1);                 \
}
FERRO_PHASES_CALL(float, f32)
FERRO_PHASES_CALL(double, f64)

/* out (b, n, m) = src (b, m, n) with its last two axes swapped: 32 x 32 blocks, each read
 * along src's rows and written along out's, so that both stay in L1 (NumPy's copy of a
 * transposed view walks one of them a column at a time: a (4608, 512) float32 weight
 * gradient took 10.2 ms, against 0.34 for a plain copy). Blocks of rows of src split over
 * the threads of the caller's region. */
#define FERRO_SWAP(T, S)                                                                        \
static FERRO_CLONES void ferro_swap_last2_##S(const T *src, T *out, ptrdiff_t m, ptrdiff_t n,  \
                                              ptrdiff_t i0, ptrdiff_t i1) {                    \
    ptrdiff_t ib, jb, i, j;                                                                     \
    for (ib = i0; ib < i1; ib += 32)                                                            \
        for (jb = 0; jb < n; jb += 32) {                                                        \
            const ptrdiff_t ie = ib + 32 < i1 ? ib + 32 : i1, je = jb + 32 < n ? jb + 32 : n;  \
            for (j = jb; j < je; j++)                                                           \
                for (i = ib; i < ie; i++) out[j * m + i] = src[i * n + j];                      \
        }                                                                                       \
}

FERRO_SWAP(float, f32)
FERRO_SWAP(double, f64)

#endif
