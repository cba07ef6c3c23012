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

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

#endif
