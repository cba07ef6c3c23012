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

FERRO_GRU_FWD(ferro_gru_fwd_f32, float, ferro_tanh_f32)
FERRO_GRU_FWD(ferro_gru_fwd_f64, double, ferro_tanh_f64)
FERRO_GRU_BWD(ferro_gru_bwd_f32, float)
FERRO_GRU_BWD(ferro_gru_bwd_f64, double)

/* A layer's steps in one call (Note [Compiled step loop] in ferro/ops/recurrent.py): the step's
 * GEMMs through the CBLAS of the BLAS NumPy itself loaded (function pointers found at run time:
 * no link-time BLAS), called exactly as NumPy's matmul calls them for the same operands (gemv
 * for a one-row product, gemm otherwise), so that the results equal the Python loop's bit for
 * bit. `wide`: the BLAS takes 64-bit ints (scipy-openblas's ILP64 `scipy_cblas_sgemm64_`). */
#include <limits.h>
#include <stdint.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

typedef struct {
    void *gemm;
    void *gemv;
    int wide;
} ferro_blas;

/* LSTM step, on hidden units [u0, u0 + n) (all of them: u0 = 0, n = hidden; a chunk of a split
 * step: Note [Hidden-unit split] in ferro/ops/recurrent.py); the pointers start at unit u0. x
 * (the input projection with both biases) and acts are rows of 4 * hidden (gate blocks i, f, g,
 * o, `hidden` apart), hp (h @ W_hh^T) rows of 4 * n (blocks n apart); c, cp, tc and hn rows
 * of `hidden`. Writes the activated gates into acts, the previous cell state into cp, the new
 * one into c, tanh of it into tc and the new hidden state into hn. (No branch in the loop:
 * gcc then leaves it scalar, five libm-free tanh calls a unit, 2x slower.) */
#define FERRO_LSTM_FWD_PART(NAME, T, TANH)                                                  \
    static FERRO_CLONES void NAME(const T *FERRO_RESTRICT x, const T *FERRO_RESTRICT hp,   \
                                  T *FERRO_RESTRICT acts, T *FERRO_RESTRICT c,              \
                                  T *FERRO_RESTRICT cp, T *FERRO_RESTRICT tc,               \
                                  T *FERRO_RESTRICT hn, ptrdiff_t rows, ptrdiff_t n,        \
                                  ptrdiff_t hidden) {                                       \
        ptrdiff_t r, j;                                                                     \
        for (r = 0; r < rows; r++) {                                                        \
            const T *xr = x + r * 4 * hidden, *pr = hp + r * 4 * n;                         \
            T *ar = acts + r * 4 * hidden;                                                  \
            const ptrdiff_t o = r * hidden;                                                 \
            for (j = 0; j < n; j++) {                                                       \
                const T i_ = (T)0.5 * TANH((T)0.5 * (xr[j] + pr[j])) + (T)0.5;              \
                const T f_ = (T)0.5 * TANH((T)0.5 * (xr[hidden + j] + pr[n + j])) + (T)0.5; \
                const T g_ = TANH(xr[2 * hidden + j] + pr[2 * n + j]);                      \
                const T o_ = (T)0.5 * TANH((T)0.5 * (xr[3 * hidden + j] + pr[3 * n + j]))   \
                             + (T)0.5;                                                      \
                const T c0 = c[o + j], cy = f_ * c0 + i_ * g_, t = TANH(cy);                \
                ar[j] = i_;                                                                 \
                ar[hidden + j] = f_;                                                        \
                ar[2 * hidden + j] = g_;                                                    \
                ar[3 * hidden + j] = o_;                                                    \
                cp[o + j] = c0;                                                             \
                c[o + j] = cy;                                                              \
                tc[o + j] = t;                                                              \
                hn[o + j] = o_ * t;                                                         \
            }                                                                               \
        }                                                                                   \
    }

/* LSTM step back, on hidden units [u0, u0 + n) as the forward: gh the new hidden state's
 * gradient, gc the new cell state's (updated to the previous one's);
 * acts the activated gates and gi the gate pre-activation gradients (written), rows of
 * 4 * hidden; cp the previous cell state and tc tanh of the new one. */
#define FERRO_LSTM_BWD_PART(NAME, T)                                                        \
    static FERRO_CLONES void NAME(const T *FERRO_RESTRICT gh, T *FERRO_RESTRICT gc,        \
                                  const T *FERRO_RESTRICT acts,                             \
                                  const T *FERRO_RESTRICT cp, const T *FERRO_RESTRICT tc,   \
                                  T *FERRO_RESTRICT gi, ptrdiff_t rows, ptrdiff_t n,        \
                                  ptrdiff_t hidden) {                                       \
        ptrdiff_t r, j;                                                                     \
        for (r = 0; r < rows; r++) {                                                        \
            const T *ar = acts + r * 4 * hidden;                                            \
            T *gr = gi + r * 4 * hidden;                                                    \
            const ptrdiff_t o = r * hidden;                                                 \
            for (j = 0; j < n; j++) {                                                       \
                const T i_ = ar[j], f_ = ar[hidden + j], g_ = ar[2 * hidden + j];           \
                const T o_ = ar[3 * hidden + j], t = tc[o + j];                             \
                const T dh = gh[o + j];                                                     \
                const T dc = gc[o + j] + dh * o_ * (1 - t * t);                             \
                gr[j] = dc * g_ * i_ * (1 - i_);                                            \
                gr[hidden + j] = dc * cp[o + j] * f_ * (1 - f_);                            \
                gr[2 * hidden + j] = dc * i_ * (1 - g_ * g_);                               \
                gr[3 * hidden + j] = dh * t * o_ * (1 - o_);                                \
                gc[o + j] = dc * f_;                                                        \
            }                                                                               \
        }                                                                                   \
    }

FERRO_LSTM_FWD_PART(ferro_lstm_fwd_part_f32, float, ferro_tanh_f32)
FERRO_LSTM_FWD_PART(ferro_lstm_fwd_part_f64, double, ferro_tanh_f64)
FERRO_LSTM_BWD_PART(ferro_lstm_bwd_part_f32, float)
FERRO_LSTM_BWD_PART(ferro_lstm_bwd_part_f64, double)

/* A split step's barrier (Note [Hidden-unit split]): spin a few microseconds (the threads of a
 * balanced step arrive close together), then sleep on a futex, so that a thread whose partner
 * lost its core does not hold its own. */
typedef struct {
    int arrived, gen, sleepers;
} ferro_barrier;

/* How long a thread spins, in TSC ticks (about 80 us at 2.6 GHz): longer than waking a sleeping
 * thread takes. With 20 us every barrier slept: the woken thread came late to the next one,
 * whose partner then slept too (the word-LM forward loop, 35 steps: 4.1 ms on two threads
 * against 3.8 on one; with 80 us 2.0 against 3.7, SCHED_FIFO on the loaded machine). */
#define FERRO_SPIN_TICKS 200000

static void ferro_barrier_wait(ferro_barrier *bar, int n) {
    const int gen = __atomic_load_n(&bar->gen, __ATOMIC_ACQUIRE);
#if defined(__x86_64__) || defined(__i386__)
    const unsigned long long start = __rdtsc();
#define FERRO_SPINNING(i) (__rdtsc() - start < FERRO_SPIN_TICKS)
#else
#define FERRO_SPINNING(i) ((i) < 4000)
#endif
    int i;
    if (n < 2) return;
    if (__atomic_add_fetch(&bar->arrived, 1, __ATOMIC_ACQ_REL) == n) {
        __atomic_store_n(&bar->arrived, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&bar->gen, gen + 1, __ATOMIC_SEQ_CST);
#ifdef __linux__
        if (__atomic_load_n(&bar->sleepers, __ATOMIC_SEQ_CST))
            syscall(SYS_futex, &bar->gen, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#endif
        return;
    }
    for (i = 0; __atomic_load_n(&bar->gen, __ATOMIC_ACQUIRE) == gen; i++) {
        if (FERRO_SPINNING(i)) {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
            continue;
        }
#ifdef __linux__
        __atomic_add_fetch(&bar->sleepers, 1, __ATOMIC_SEQ_CST);
        syscall(SYS_futex, &bar->gen, FUTEX_WAIT_PRIVATE, gen, NULL, NULL, 0);
        __atomic_sub_fetch(&bar->sleepers, 1, __ATOMIC_SEQ_CST);
#endif
    }
}

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
    /* c (m, n) = a (m, k) @ b, b (k, n) row-major with leading dimension ldb, or with        \
     * trans_b the transpose of a row-major (n, k); c's rows ldc apart; m, n, k >= 1 and n,   \
     * k >= 2 (NumPy's matmul takes other paths for n or k of 1; the wrappers refuse those    \
     * sizes). */                                                                            \
    static void ferro_mm_##SUF(const ferro_blas *bl, const T *a, const T *b, ptrdiff_t ldb,  \
                               int trans_b, T *c, ptrdiff_t ldc, ptrdiff_t m, ptrdiff_t n,    \
                               ptrdiff_t k) {                                                \
        const int order = m == 1 && trans_b ? 102 : 101, tb = trans_b ? 112 : 111;           \
        if (m == 1 && bl->wide) /* vector @ matrix: NumPy's gemv call */                     \
            ((ferro_gemv64_##SUF)bl->gemv)(order, 112, k, n, 1, b, ldb, a, 1, 0, c, 1);      \
        else if (m == 1)                                                                     \
            ((ferro_gemv32_##SUF)bl->gemv)(order, 112, (int)k, (int)n, 1, b, (int)ldb, a, 1, \
                                           0, c, 1);                                         \
        else if (bl->wide)                                                                   \
            ((ferro_gemm64_##SUF)bl->gemm)(101, 111, tb, m, n, k, 1, a, k, b, ldb, 0, c,     \
                                           ldc);                                             \
        else                                                                                 \
            ((ferro_gemm32_##SUF)bl->gemm)(101, 111, tb, (int)m, (int)n, (int)k, 1, a,       \
                                           (int)k, b, (int)ldb, 0, c, (int)ldc);             \
    }

FERRO_CBLAS_TYPES(float, f32)
FERRO_CBLAS_TYPES(double, f64)

/* Hidden unit where chunk `ch` of `chunks` starts (ferro/ops/recurrent.py's _unit_bounds). */
static ptrdiff_t ferro_unit(ptrdiff_t ch, ptrdiff_t chunks, ptrdiff_t hidden) {
    return hidden * ch / chunks;
}

/* One layer's forward over `count` steps from `first`, `dir` +1 or -1 (a block of the
 * wavefront, or the whole sequence). Step t has rows offs[t] .. offs[t] + bs[t] of the (N, .)
 * arrays. LSTM: x holds the input projection with both biases; GRU: with bias_ih, and bias_hh
 * (or NULL) is added to each step's hidden projection (its n block sits inside r * (...)). h
 * (batch, H_out) and c (batch, H) are the running states. Writes out, h_prev, acts, and c_prev,
 * tc (LSTM), cell_h (LSTM with weight_hr, else NULL), hgn (GRU); hg is a (batch, G) scratch.
 * A LSTM's step runs in `chunks` chunks of hidden units (Note [Hidden-unit split]: w_t's columns
 * then in chunk order), chunk ch on thread ch % nt of the team (tid, nt, bar), one barrier a
 * step; h_prev's rows of the first step are written before. */
#define FERRO_LAYER_FWD(SUF, T)                                                              \
    static void ferro_layer_fwd_##SUF(const ferro_blas *bl, int gru, void *const *p,         \
                                      const ptrdiff_t *offs, const ptrdiff_t *bs,            \
                                      ptrdiff_t first, ptrdiff_t count, ptrdiff_t dir,       \
                                      ptrdiff_t hout, ptrdiff_t hidden, ptrdiff_t chunks,    \
                                      int tid, int nt, ferro_barrier *bar) {                 \
        const T *x = p[0], *w_t = p[3], *b_hh = p[4], *w_hr = p[5];                          \
        T *h = p[1], *c = p[2], *out = p[6], *h_prev = p[7], *acts = p[8], *c_prev = p[9];   \
        T *tc = p[10], *cell_h = p[11], *hgn = p[12], *hg = p[13];                           \
        const ptrdiff_t G = (gru ? 3 : 4) * hidden;                                          \
        ptrdiff_t k, r, j, ch, rows = 0; /* rows: the most a step has (hg's chunk stride) */ \
        for (k = 0; k < count; k++)                                                          \
            rows = bs[first + k * dir] > rows ? bs[first + k * dir] : rows;                  \
        for (k = 0; k < count; k++) {                                                        \
            const ptrdiff_t t = first + k * dir, s = offs[t], b = bs[t];                     \
            T *o = out + s * hout, *a = acts + s * G;                                        \
            if (gru) {                                                                       \
                memcpy(h_prev + s * hout, h, (size_t)(b * hout) * sizeof(T));                \
                ferro_mm_##SUF(bl, h, w_t, G, 0, hg, G, b, G, hout);                         \
                if (b_hh)                                                                    \
                    for (r = 0; r < b; r++)                                                  \
                        for (j = 0; j < G; j++) hg[r * G + j] += b_hh[j];                    \
                ferro_gru_fwd_##SUF(x + s * G, hg, h, a, hgn + s * hidden, o, b, hidden);    \
                memcpy(h, o, (size_t)(b * hout) * sizeof(T));                                \
                continue;                                                                    \
            }                                                                                \
            for (ch = tid; ch < chunks; ch += nt) {                                          \
                const ptrdiff_t u = ferro_unit(ch, chunks, hidden);                          \
                const ptrdiff_t n = ferro_unit(ch + 1, chunks, hidden) - u;                  \
                T *hp = hg + 4 * u * rows, *hn = w_hr ? cell_h + s * hidden : o;         \
                ferro_mm_##SUF(bl, h_prev + s * hout, w_t + 4 * u, G, 0, hp, 4 * n, b, 4 * n, \
                               hout);                                                        \
                const ptrdiff_t v = w_hr ? 0 : u, m = w_hr ? hout : n; /* its h columns */   \
                ferro_lstm_fwd_part_##SUF(x + s * G + u, hp, a + u, c + u,                   \
                                          c_prev + s * hidden + u, tc + s * hidden + u,      \
                                          hn + u, b, n, hidden);                             \
                if (w_hr) /* one chunk: the projection */                                    \
                    ferro_mm_##SUF(bl, hn, w_hr, hidden, 1, o, hout, b, hout, hidden);       \
                for (r = 0; r < b; r++) /* the state */                                      \
                    memcpy(h + r * hout + v, o + r * hout + v, (size_t)m * sizeof(T));       \
                if (k + 1 < count) { /* the next step's h_prev: this chunk's columns */      \
                    const ptrdiff_t t2 = t + dir;                                            \
                    for (r = 0; r < bs[t2]; r++)                                             \
                        memcpy(h_prev + (offs[t2] + r) * hout + v, h + r * hout + v,         \
                               (size_t)m * sizeof(T));                                       \
                }                                                                            \
            }                                                                                \
            ferro_barrier_wait(bar, nt);                                                     \
        }                                                                                    \
    }

/* One layer's backward over `count` steps from `first` (walking back: `dir` the opposite of
 * the forward's). gh (batch, H_out), gc (batch, H): the running state gradients; gout (N,
 * H_out) the output's. Writes g_in (N, G) (and g_hid, GRU; g_hr (N, H_out), LSTM with
 * weight_hr). s1 (batch, max(G, H_out)), s2 (batch, max(H, H_out)): scratch. A LSTM's step runs
 * in chunks as the forward's: the cell on the chunk's units, a barrier, then the columns of
 * gh = g_in @ w_hh of its units. */
#define FERRO_LAYER_BWD(SUF, T)                                                              \
    static void ferro_layer_bwd_##SUF(const ferro_blas *bl, int gru, void *const *p,         \
                                      const ptrdiff_t *offs, const ptrdiff_t *bs,            \
                                      ptrdiff_t first, ptrdiff_t count, ptrdiff_t dir,       \
                                      ptrdiff_t hout, ptrdiff_t hidden, ptrdiff_t chunks,    \
                                      int tid, int nt, ferro_barrier *bar) {                 \
        const T *gout = p[0], *w_hh = p[3], *w_hr = p[4], *h_prev = p[5], *acts = p[6];      \
        const T *c_prev = p[7], *tc = p[8], *hgn = p[9];                                     \
        T *gh = p[1], *gc = p[2], *g_in = p[10], *g_hid = p[11], *g_hr = p[12], *s1 = p[13]; \
        T *s2 = p[14];                                                                       \
        const ptrdiff_t G = (gru ? 3 : 4) * hidden;                                          \
        ptrdiff_t k, r, j, ch;                                                               \
        for (k = 0; k < count; k++) {                                                        \
            const ptrdiff_t t = first + k * dir, s = offs[t], b = bs[t];                     \
            T *gi = g_in + s * G;                                                            \
            if (gru) {                                                                       \
                for (j = 0; j < b * hout; j++) s1[j] = gh[j] + gout[s * hout + j];           \
                ferro_gru_bwd_##SUF(s1, acts + s * G, hgn + s * hidden, h_prev + s * hout,   \
                                    gi, g_hid + s * G, gh, b, hidden);                       \
                ferro_mm_##SUF(bl, g_hid + s * G, w_hh, hout, 0, s2, hout, b, hout, G);      \
                for (j = 0; j < b * hout; j++) gh[j] += s2[j];                               \
                continue;                                                                    \
            }                                                                                \
            for (ch = tid; ch < chunks; ch += nt) {                                          \
                const ptrdiff_t u = ferro_unit(ch, chunks, hidden);                          \
                const ptrdiff_t n = ferro_unit(ch + 1, chunks, hidden) - u;                  \
                if (w_hr) { /* one chunk */                                                  \
                    T *ghb = g_hr + s * hout;                                                \
                    for (j = 0; j < b * hout; j++) ghb[j] = gh[j] + gout[s * hout + j];      \
                    ferro_mm_##SUF(bl, ghb, w_hr, hidden, 0, s2, hidden, b, hidden, hout);   \
                } else /* hout == hidden: the chunk's columns of gh + gout into s2 */        \
                    for (r = 0; r < b; r++)                                                  \
                        for (j = u; j < u + n; j++)                                          \
                            s2[r * hidden + j] = gh[r * hout + j] + gout[(s + r) * hout + j]; \
                ferro_lstm_bwd_part_##SUF(s2 + u, gc + u, acts + s * G + u,                  \
                                          c_prev + s * hidden + u, tc + s * hidden + u,      \
                                          gi + u, b, n, hidden);                             \
            }                                                                                \
            ferro_barrier_wait(bar, nt);                                                     \
            for (ch = tid; ch < chunks; ch += nt) {                                          \
                const ptrdiff_t v = w_hr ? 0 : ferro_unit(ch, chunks, hidden);               \
                const ptrdiff_t m = w_hr ? hout : ferro_unit(ch + 1, chunks, hidden) - v;    \
                ferro_mm_##SUF(bl, gi, w_hh + v, hout, 0, gh + v, hout, b, m, G);            \
            }                                                                                \
        }                                                                                    \
    }

FERRO_LAYER_FWD(f32, float)
FERRO_LAYER_FWD(f64, double)
FERRO_LAYER_BWD(f32, float)
FERRO_LAYER_BWD(f64, double)

/* The arrays (p: pointers in the wrappers' order) of one float type, `f64` or not; a LSTM's
 * steps in `chunks` chunks of hidden units on `threads` threads of an OpenMP team. */
static void ferro_layer_steps(int backward, int f64, const ferro_blas *bl, int gru,
                              void *const *p, const ptrdiff_t *offs, const ptrdiff_t *bs,
                              ptrdiff_t first, ptrdiff_t count, ptrdiff_t dir, ptrdiff_t hout,
                              ptrdiff_t hidden, ptrdiff_t chunks, int threads) {
    ferro_barrier bar = {0, 0, 0};
    if (count && !gru && !backward) { /* the first step's h_prev */
        const ptrdiff_t hsize = (ptrdiff_t)(f64 ? sizeof(double) : sizeof(float)) * hout;
        memcpy((char *)p[7] + offs[first] * hsize, p[1], (size_t)(bs[first] * hsize));
    }
#ifdef _OPENMP
#pragma omp parallel num_threads(threads) if (threads > 1 && !gru)
#endif
    {
#ifdef _OPENMP
        const int tid = omp_get_thread_num(), nt = omp_get_num_threads();
#else
        const int tid = 0, nt = 1;
#endif
        if (backward && f64)
            ferro_layer_bwd_f64(bl, gru, p, offs, bs, first, count, dir, hout, hidden, chunks,
                                tid, nt, &bar);
        else if (backward)
            ferro_layer_bwd_f32(bl, gru, p, offs, bs, first, count, dir, hout, hidden, chunks,
                                tid, nt, &bar);
        else if (f64)
            ferro_layer_fwd_f64(bl, gru, p, offs, bs, first, count, dir, hout, hidden, chunks,
                                tid, nt, &bar);
        else
            ferro_layer_fwd_f32(bl, gru, p, offs, bs, first, count, dir, hout, hidden, chunks,
                                tid, nt, &bar);
    }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

#endif
