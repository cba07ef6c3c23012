/* Fused gate forward and backward of the LSTM and GRU cells (included by recurrent_kernels.pyx).
 *
 * One pass per step over the gate pre-activations: the sigmoids and tanhs of every gate, the
 * new cell and hidden states, and the arrays the backward kernels read, in place of about ten
 * NumPy passes and their temporaries. sigmoid(x) is computed as tanh(x / 2) / 2 + 1/2, as the
 * generic cells (ferro/ops/recurrent.py) compute it. The cost is the tanhs (five per hidden
 * unit and step): formulas.cuh's vectorized ones, in loops compiled per ISA level (simd.h).
 */
#ifndef FERRO_RECURRENT_KERNELS_H
#define FERRO_RECURRENT_KERNELS_H

#include <stddef.h>

/* The clamps and selects must become vector min/max and blends (see kernels.h). The loops read
 * and write through restrict pointers: the wrappers refuse overlapping arrays. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math")
#endif

#include "../cuda/kernels/formulas.cuh"
#include "simd.h"

#if defined(_MSC_VER)
#define FERRO_RESTRICT __restrict
#else
#define FERRO_RESTRICT restrict
#endif

/* LSTM step. On entry acts (rows, 4H) holds h @ W_hh^T and x (rows, 4H) the input projection
 * with both biases, blocks i, f, g, o; c (rows, H) is the previous cell state. Writes the
 * activated gates into acts, the new cell state into cn, tanh of it into tc and the new hidden
 * state into h. */
#define FERRO_LSTM_FWD(NAME, T, TANH)                                                       \
    static FERRO_CLONES void NAME(const T *FERRO_RESTRICT x, T *FERRO_RESTRICT acts,       \
                                  const T *FERRO_RESTRICT c, T *FERRO_RESTRICT tc,          \
                                  T *FERRO_RESTRICT cn, T *FERRO_RESTRICT h, ptrdiff_t rows, \
                                  ptrdiff_t hidden) {                                       \
        ptrdiff_t r, j;                                                                     \
        for (r = 0; r < rows; r++) {                                                        \
            const T *xr = x + r * 4 * hidden;                                               \
            T *ar = acts + r * 4 * hidden;                                                  \
            const ptrdiff_t o = r * hidden;                                                 \
            for (j = 0; j < hidden; j++) {                                                  \
                const T i_ = (T)0.5 * TANH((T)0.5 * (xr[j] + ar[j])) + (T)0.5;              \
                const T f_ = (T)0.5 * TANH((T)0.5 * (xr[hidden + j] + ar[hidden + j]))      \
                             + (T)0.5;                                                      \
                const T g_ = TANH(xr[2 * hidden + j] + ar[2 * hidden + j]);                 \
                const T o_ = (T)0.5 * TANH((T)0.5 * (xr[3 * hidden + j] + ar[3 * hidden + j])) \
                             + (T)0.5;                                                      \
                const T cy = f_ * c[o + j] + i_ * g_;                                       \
                const T t = TANH(cy);                                                       \
                ar[j] = i_;                                                                 \
                ar[hidden + j] = f_;                                                        \
                ar[2 * hidden + j] = g_;                                                    \
                ar[3 * hidden + j] = o_;                                                    \
                cn[o + j] = cy;                                                             \
                tc[o + j] = t;                                                              \
                h[o + j] = o_ * t;                                                          \
            }                                                                               \
        }                                                                                   \
    }

/* GRU step. x (rows, 3H): the input projection with bias_ih; hg (rows, 3H): h @ W_hh^T +
 * bias_hh; blocks r, z, n; h (rows, H) the previous state. Writes r, z, n into acts, the
 * hidden projection's n block into hgn (the backward reads it) and the new state into hn:
 * n = tanh(x_n + r hg_n), hn = (1 - z) n + z h. */
#define FERRO_GRU_FWD(NAME, T, TANH)                                                        \
    static FERRO_CLONES void NAME(const T *FERRO_RESTRICT x, const T *FERRO_RESTRICT hg,   \
                                  const T *FERRO_RESTRICT h, T *FERRO_RESTRICT acts,        \
                                  T *FERRO_RESTRICT hgn, T *FERRO_RESTRICT hn,              \
                                  ptrdiff_t rows, ptrdiff_t hidden) {                       \
        ptrdiff_t r, j;                                                                     \
        for (r = 0; r < rows; r++) {                                                        \
            const T *xr = x + r * 3 * hidden, *gr = hg + r * 3 * hidden;                    \
            T *ar = acts + r * 3 * hidden;                                                  \
            const ptrdiff_t o = r * hidden;                                                 \
            for (j = 0; j < hidden; j++) {                                                  \
                const T r_ = (T)0.5 * TANH((T)0.5 * (xr[j] + gr[j])) + (T)0.5;              \
                const T z_ = (T)0.5 * TANH((T)0.5 * (xr[hidden + j] + gr[hidden + j]))      \
                             + (T)0.5;                                                      \
                const T hn_ = gr[2 * hidden + j];                                           \
                const T n_ = TANH(xr[2 * hidden + j] + r_ * hn_);                           \
                ar[j] = r_;                                                                 \
                ar[hidden + j] = z_;                                                        \
                ar[2 * hidden + j] = n_;                                                    \
                hgn[o + j] = hn_;                                                           \
                hn[o + j] = (h[o + j] - n_) * z_ + n_;                                      \
            }                                                                               \
        }                                                                                   \
    }

/* LSTM step back. gh, gc (rows, H): the gradients of the new hidden and cell states; acts
 * (rows, 4H) the activated gates i, f, g, o; cp (rows, H) the previous cell state; tc (rows, H)
 * tanh of the new one. Writes the gate pre-activation gradients into gg (rows, 4H) and the
 * previous cell state's gradient into gcp (rows, H). */
#define FERRO_LSTM_BWD(NAME, T)                                                             \
    static FERRO_CLONES void NAME(const T *FERRO_RESTRICT gh, const T *FERRO_RESTRICT gc,  \
                                  const T *FERRO_RESTRICT acts, const T *FERRO_RESTRICT cp, \
                                  const T *FERRO_RESTRICT tc, T *FERRO_RESTRICT gg,         \
                                  T *FERRO_RESTRICT gcp, ptrdiff_t rows, ptrdiff_t hidden) { \
        ptrdiff_t r, j;                                                                     \
        for (r = 0; r < rows; r++) {                                                        \
            const T *ar = acts + r * 4 * hidden;                                            \
            T *gr = gg + r * 4 * hidden;                                                    \
            const ptrdiff_t o = r * hidden;                                                 \
            for (j = 0; j < hidden; j++) {                                                  \
                const T i_ = ar[j], f_ = ar[hidden + j], g_ = ar[2 * hidden + j];           \
                const T o_ = ar[3 * hidden + j], t = tc[o + j], dh = gh[o + j];             \
                const T dc = gc[o + j] + dh * o_ * (1 - t * t);                             \
                gr[j] = dc * g_ * i_ * (1 - i_);                                            \
                gr[hidden + j] = dc * cp[o + j] * f_ * (1 - f_);                            \
                gr[2 * hidden + j] = dc * i_ * (1 - g_ * g_);                               \
                gr[3 * hidden + j] = dh * t * o_ * (1 - o_);                                \
                gcp[o + j] = dc * f_;                                                       \
            }                                                                               \
        }                                                                                   \
    }

/* GRU step back. gh (rows, H): the new state's gradient; acts (rows, 3H) r, z, n; hgn (rows,
 * H) the hidden projection's n block; hp (rows, H) the previous state. Writes the input and
 * hidden projections' gradients into gi and gg (rows, 3H) and gh z into ghz (rows, H). */
#define FERRO_GRU_BWD(NAME, T)                                                              \
    static FERRO_CLONES void NAME(const T *FERRO_RESTRICT gh, const T *FERRO_RESTRICT acts, \
                                  const T *FERRO_RESTRICT hgn, const T *FERRO_RESTRICT hp,  \
                                  T *FERRO_RESTRICT gi, T *FERRO_RESTRICT gg,               \
                                  T *FERRO_RESTRICT ghz, ptrdiff_t rows, ptrdiff_t hidden) { \
        ptrdiff_t r, j;                                                                     \
        for (r = 0; r < rows; r++) {                                                        \
            const T *ar = acts + r * 3 * hidden;                                            \
            T *ir = gi + r * 3 * hidden, *hr = gg + r * 3 * hidden;                         \
            const ptrdiff_t o = r * hidden;                                                 \
            for (j = 0; j < hidden; j++) {                                                  \
                const T r_ = ar[j], z = ar[hidden + j], n = ar[2 * hidden + j];             \
                const T d = gh[o + j];                                                      \
                const T gn = d * (1 - z) * (1 - n * n);                                     \
                const T gr_ = gn * hgn[o + j] * r_ * (1 - r_);                              \
                const T gz = d * (hp[o + j] - n) * z * (1 - z);                             \
                ir[j] = gr_;                                                                \
                ir[hidden + j] = gz;                                                        \
                ir[2 * hidden + j] = gn;                                                    \
                hr[j] = gr_;                                                                \
                hr[hidden + j] = gz;                                                        \
                hr[2 * hidden + j] = gn * r_;                                               \
                ghz[o + j] = d * z;                                                         \
            }                                                                               \
        }                                                                                   \
    }

FERRO_LSTM_FWD(ferro_lstm_fwd_f32, float, ferro_tanh_f32)
FERRO_LSTM_FWD(ferro_lstm_fwd_f64, double, ferro_tanh_f64)
FERRO_GRU_FWD(ferro_gru_fwd_f32, float, ferro_tanh_f32)
FERRO_GRU_FWD(ferro_gru_fwd_f64, double, ferro_tanh_f64)
FERRO_LSTM_BWD(ferro_lstm_bwd_f32, float)
FERRO_LSTM_BWD(ferro_lstm_bwd_f64, double)
FERRO_GRU_BWD(ferro_gru_bwd_f32, float)
FERRO_GRU_BWD(ferro_gru_bwd_f64, double)

/* A layer's steps in one call (Note [Compiled step loop] in ferro/ops/recurrent.py): the step's
 * GEMMs through the CBLAS of the BLAS NumPy itself loaded (function pointers found at run time:
 * no link-time BLAS), called exactly as NumPy's matmul calls them for the same operands (gemv
 * for a one-row product, gemm otherwise), so that the results equal the Python loop's bit for
 * bit. `wide`: the BLAS takes 64-bit ints (scipy-openblas's ILP64 `scipy_cblas_sgemm64_`). */
#include <stdint.h>
#include <string.h>

typedef struct {
    void *gemm;
    void *gemv;
    int wide;
} ferro_blas;

#define FERRO_CBLAS_TYPES(T, SUF)                                                            \
    typedef void (*ferro_gemm32_##SUF)(int, int, int, int, int, int, T, const T *, int,       \
                                       const T *, int, T, T *, int);                         \
    typedef void (*ferro_gemm64_##SUF)(int, int, int, int64_t, int64_t, int64_t, T,          \
                                       const T *, int64_t, const T *, int64_t, T, T *,       \
                                       int64_t);                                             \
    typedef void (*ferro_gemv32_##SUF)(int, int, int, int, T, const T *, int, const T *, int, \
                                       T, T *, int);                                         \
    typedef void (*ferro_gemv64_##SUF)(int, int, int64_t, int64_t, T, const T *, int64_t,     \
                                       const T *, int64_t, T, T *, int64_t);                 \
    /* c (m, n) = a (m, k) @ b, b (k, n) C-contiguous, or with trans_b the transpose of a     \
     * C-contiguous (n, k); m, n, k >= 1 and n, k >= 2 (NumPy's matmul takes other paths for \
     * n or k of 1; the wrappers refuse those sizes). */                                     \
    static void ferro_mm_##SUF(const ferro_blas *bl, const T *a, const T *b, int trans_b,     \
                               T *c, ptrdiff_t m, ptrdiff_t n, ptrdiff_t k) {                \
        const int order = m == 1 && trans_b ? 102 : 101, tb = trans_b ? 112 : 111;           \
        const ptrdiff_t ldb = trans_b ? k : n;                                               \
        if (m == 1 && bl->wide) /* vector @ matrix: NumPy's gemv call */                     \
            ((ferro_gemv64_##SUF)bl->gemv)(order, 112, k, n, 1, b, ldb, a, 1, 0, c, 1);      \
        else if (m == 1)                                                                     \
            ((ferro_gemv32_##SUF)bl->gemv)(order, 112, (int)k, (int)n, 1, b, (int)ldb, a, 1, \
                                           0, c, 1);                                         \
        else if (bl->wide)                                                                   \
            ((ferro_gemm64_##SUF)bl->gemm)(101, 111, tb, m, n, k, 1, a, k, b, ldb, 0, c, n);  \
        else                                                                                 \
            ((ferro_gemm32_##SUF)bl->gemm)(101, 111, tb, (int)m, (int)n, (int)k, 1, a,       \
                                           (int)k, b, (int)ldb, 0, c, (int)n);               \
    }

FERRO_CBLAS_TYPES(float, f32)
FERRO_CBLAS_TYPES(double, f64)

/* One layer's forward over `count` steps from `first`, `dir` +1 or -1 (a block of the
 * wavefront, or the whole sequence). Step t has rows offs[t] .. offs[t] + bs[t] of the (N, .)
 * arrays. LSTM: x holds the input projection with both biases; GRU: with bias_ih, and bias_hh
 * (or NULL) is added to each step's hidden projection (its n block sits inside r * (...)). h
 * (batch, H_out) and c (batch, H) are the running states. Writes out, h_prev, acts, and c_prev,
 * tc (LSTM), cell_h (LSTM with weight_hr, else NULL), hgn (GRU); hg is a (batch, 3H) scratch. */
#define FERRO_LAYER_FWD(SUF, T)                                                              \
    static void ferro_layer_fwd_##SUF(const ferro_blas *bl, int gru, void *const *p,         \
                                      const ptrdiff_t *offs, const ptrdiff_t *bs,            \
                                      ptrdiff_t first, ptrdiff_t count, ptrdiff_t dir,       \
                                      ptrdiff_t hout, ptrdiff_t hidden) {                    \
        const T *x = p[0], *w_t = p[3], *b_hh = p[4], *w_hr = p[5];                          \
        T *h = p[1], *c = p[2], *out = p[6], *h_prev = p[7], *acts = p[8], *c_prev = p[9];   \
        T *tc = p[10], *cell_h = p[11], *hgn = p[12], *hg = p[13];                           \
        const ptrdiff_t G = (gru ? 3 : 4) * hidden;                                          \
        ptrdiff_t k, r, j;                                                                   \
        for (k = 0; k < count; k++) {                                                        \
            const ptrdiff_t t = first + k * dir, s = offs[t], b = bs[t];                     \
            T *o = out + s * hout, *a = acts + s * G;                                        \
            memcpy(h_prev + s * hout, h, (size_t)(b * hout) * sizeof(T));                    \
            if (gru) {                                                                       \
                ferro_mm_##SUF(bl, h, w_t, 0, hg, b, G, hout);                               \
                if (b_hh)                                                                    \
                    for (r = 0; r < b; r++)                                                  \
                        for (j = 0; j < G; j++) hg[r * G + j] += b_hh[j];                    \
                ferro_gru_fwd_##SUF(x + s * G, hg, h, a, hgn + s * hidden, o, b, hidden);    \
            } else {                                                                         \
                T *hn = w_hr ? cell_h + s * hidden : o;                                      \
                ferro_mm_##SUF(bl, h, w_t, 0, a, b, G, hout);                                \
                memcpy(c_prev + s * hidden, c, (size_t)(b * hidden) * sizeof(T));            \
                ferro_lstm_fwd_##SUF(x + s * G, a, c_prev + s * hidden, tc + s * hidden, c,  \
                                     hn, b, hidden);                                         \
                if (w_hr) ferro_mm_##SUF(bl, hn, w_hr, 1, o, b, hout, hidden);               \
            }                                                                                \
            memcpy(h, o, (size_t)(b * hout) * sizeof(T));                                    \
        }                                                                                    \
    }

/* One layer's backward over `count` steps from `first` (walking back: `dir` the opposite of
 * the forward's). gh (batch, H_out), gc (batch, H): the running state gradients; gout (N,
 * H_out) the output's. Writes g_in (N, G) (and g_hid, GRU; g_hr (N, H_out), LSTM with
 * weight_hr). s1 (batch, max(G, H_out)), s2 (batch, max(H, H_out)): scratch. */
#define FERRO_LAYER_BWD(SUF, T)                                                              \
    static void ferro_layer_bwd_##SUF(const ferro_blas *bl, int gru, void *const *p,         \
                                      const ptrdiff_t *offs, const ptrdiff_t *bs,            \
                                      ptrdiff_t first, ptrdiff_t count, ptrdiff_t dir,       \
                                      ptrdiff_t hout, ptrdiff_t hidden) {                    \
        const T *gout = p[0], *w_hh = p[3], *w_hr = p[4], *h_prev = p[5], *acts = p[6];      \
        const T *c_prev = p[7], *tc = p[8], *hgn = p[9];                                     \
        T *gh = p[1], *gc = p[2], *g_in = p[10], *g_hid = p[11], *g_hr = p[12], *s1 = p[13]; \
        T *s2 = p[14];                                                                       \
        const ptrdiff_t G = (gru ? 3 : 4) * hidden;                                          \
        ptrdiff_t k, j;                                                                      \
        for (k = 0; k < count; k++) {                                                        \
            const ptrdiff_t t = first + k * dir, s = offs[t], b = bs[t];                     \
            T *ghb = w_hr ? g_hr + s * hout : s1, *gi = g_in + s * G;                        \
            for (j = 0; j < b * hout; j++) ghb[j] = gh[j] + gout[s * hout + j];              \
            if (gru) {                                                                       \
                ferro_gru_bwd_##SUF(ghb, acts + s * G, hgn + s * hidden, h_prev + s * hout,  \
                                    gi, g_hid + s * G, gh, b, hidden);                       \
                ferro_mm_##SUF(bl, g_hid + s * G, w_hh, 0, s2, b, hout, G);                  \
                for (j = 0; j < b * hout; j++) gh[j] += s2[j];                               \
            } else {                                                                         \
                if (w_hr) {                                                                  \
                    ferro_mm_##SUF(bl, ghb, w_hr, 0, s2, b, hidden, hout);                   \
                    ghb = s2;                                                                \
                }                                                                            \
                ferro_lstm_bwd_##SUF(ghb, gc, acts + s * G, c_prev + s * hidden,             \
                                     tc + s * hidden, gi, s1 + (w_hr ? 0 : b * hout), b,     \
                                     hidden);                                                \
                memcpy(gc, s1 + (w_hr ? 0 : b * hout), (size_t)(b * hidden) * sizeof(T));   \
                ferro_mm_##SUF(bl, gi, w_hh, 0, gh, b, hout, G);                             \
            }                                                                                \
        }                                                                                    \
    }

FERRO_LAYER_FWD(f32, float)
FERRO_LAYER_FWD(f64, double)
FERRO_LAYER_BWD(f32, float)
FERRO_LAYER_BWD(f64, double)

/* The arrays (p: pointers in the wrappers' order) of one float type, `f64` or not. */
static void ferro_layer_steps(int backward, int f64, const ferro_blas *bl, int gru,
                              void *const *p, const ptrdiff_t *offs, const ptrdiff_t *bs,
                              ptrdiff_t first, ptrdiff_t count, ptrdiff_t dir, ptrdiff_t hout,
                              ptrdiff_t hidden) {
    if (backward && f64)
        ferro_layer_bwd_f64(bl, gru, p, offs, bs, first, count, dir, hout, hidden);
    else if (backward)
        ferro_layer_bwd_f32(bl, gru, p, offs, bs, first, count, dir, hout, hidden);
    else if (f64)
        ferro_layer_fwd_f64(bl, gru, p, offs, bs, first, count, dir, hout, hidden);
    else
        ferro_layer_fwd_f32(bl, gru, p, offs, bs, first, count, dir, hout, hidden);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

#endif
