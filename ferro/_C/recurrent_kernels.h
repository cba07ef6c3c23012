/* Fused gate forward of the LSTM and GRU cells (included by recurrent_kernels.pyx).
 *
 * One pass per step over the gate pre-activations: the sigmoids and tanhs of every gate, the
 * new cell and hidden states, and the arrays the backward kernels read, in place of about ten
 * NumPy passes and their temporaries. sigmoid(x) is computed as tanh(x / 2) / 2 + 1/2, as the
 * generic cells (ferro/ops/recurrent.py) compute it.
 *
 * The cost is the tanhs (five per hidden unit and step). NumPy evaluates tanh with AVX2/AVX-512
 * code chosen at run time; a loop of libm tanhf calls is 100x slower (677 us against 6 us for
 * 16,000 floats), so float32 uses a rational approximation (Eigen's, |error| <= 3e-7) that the
 * compiler vectorizes, and on x86-64 the loops are compiled twice, for the baseline (SSE2) and
 * for AVX2 with FMA, the second chosen at run time when the CPU has both (SSE2 only: 49 us for
 * those 16,000; AVX2: 8 us). float64 calls libm's tanh, exact to the last bit or so, which is
 * slower than NumPy's SIMD float64 tanh: see ferro/ops/fused.py for where it runs.
 */
#ifndef FERRO_RECURRENT_KERNELS_H
#define FERRO_RECURRENT_KERNELS_H

#include <math.h>
#include <stddef.h>

/* The clamps must become vector min/max, not branches (see kernels.h on trapping math). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math")
#endif

/* tanh in float32: Eigen's rational approximation on [-7.9, 7.9] (tanh is 1 to float32 beyond). */
static inline float ferro_rnn_tanh_f32(float x) {
    const float c = 7.90531110763549805f;
    x = x > c ? c : (x < -c ? -c : x);
    const float x2 = x * x;
    float p = -2.76076847742355e-16f;
    p = p * x2 + 2.00018790482477e-13f;
    p = p * x2 - 8.60467152213735e-11f;
    p = p * x2 + 5.12229709037114e-08f;
    p = p * x2 + 1.48572235717979e-05f;
    p = p * x2 + 6.37261928875436e-04f;
    p = p * x2 + 4.89352455891786e-03f;
    float q = 1.19825839466702e-06f;
    q = q * x2 + 1.18534705686654e-04f;
    q = q * x2 + 2.26843463243900e-03f;
    q = q * x2 + 4.89352518554385e-03f;
    return x * p / q;
}

static inline double ferro_rnn_tanh_f64(double x) { return tanh(x); }

/* LSTM step. On entry acts (rows, 4H) holds h @ W_hh^T and x (rows, 4H) the input projection
 * with both biases, blocks i, f, g, o; c (rows, H) is the previous cell state. Writes the
 * activated gates into acts, the new cell state into cn, tanh of it into tc and the new hidden
 * state into h. */
#define FERRO_LSTM_FWD(NAME, T, TANH, ATTR)                                                 \
    ATTR static void NAME(const T *restrict x, T *restrict acts, const T *restrict c,       \
                          T *restrict tc, T *restrict cn, T *restrict h, ptrdiff_t rows,    \
                          ptrdiff_t hidden) {                                               \
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
#define FERRO_GRU_FWD(NAME, T, TANH, ATTR)                                                  \
    ATTR static void NAME(const T *restrict x, const T *restrict hg, const T *restrict h,   \
                          T *restrict acts, T *restrict hgn, T *restrict hn, ptrdiff_t rows, \
                          ptrdiff_t hidden) {                                               \
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

FERRO_LSTM_FWD(ferro_lstm_fwd_f64, double, ferro_rnn_tanh_f64, )
FERRO_GRU_FWD(ferro_gru_fwd_f64, double, ferro_rnn_tanh_f64, )

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FERRO_AVX2 __attribute__((target("avx2,fma")))
FERRO_LSTM_FWD(ferro_lstm_fwd_f32_base, float, ferro_rnn_tanh_f32, )
FERRO_LSTM_FWD(ferro_lstm_fwd_f32_avx2, float, ferro_rnn_tanh_f32, FERRO_AVX2)
FERRO_GRU_FWD(ferro_gru_fwd_f32_base, float, ferro_rnn_tanh_f32, )
FERRO_GRU_FWD(ferro_gru_fwd_f32_avx2, float, ferro_rnn_tanh_f32, FERRO_AVX2)

static int ferro_rnn_has_avx2(void) {
    static int has = -1;
    if (has < 0) {
        __builtin_cpu_init();
        has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }
    return has;
}

static void ferro_lstm_fwd_f32(const float *x, float *acts, const float *c, float *tc, float *cn,
                               float *h, ptrdiff_t rows, ptrdiff_t hidden) {
    (ferro_rnn_has_avx2() ? ferro_lstm_fwd_f32_avx2 : ferro_lstm_fwd_f32_base)(
        x, acts, c, tc, cn, h, rows, hidden);
}

static void ferro_gru_fwd_f32(const float *x, const float *hg, const float *h, float *acts,
                              float *hgn, float *hn, ptrdiff_t rows, ptrdiff_t hidden) {
    (ferro_rnn_has_avx2() ? ferro_gru_fwd_f32_avx2 : ferro_gru_fwd_f32_base)(
        x, hg, h, acts, hgn, hn, rows, hidden);
}
#else
FERRO_LSTM_FWD(ferro_lstm_fwd_f32, float, ferro_rnn_tanh_f32, )
FERRO_GRU_FWD(ferro_gru_fwd_f32, float, ferro_rnn_tanh_f32, )
#endif

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

#endif
