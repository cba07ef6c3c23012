/* Fused loops for ferro's CPU kernels (included by cpu_kernels.pyx).
 *
 * The per-element math comes from formulas.cuh, which the CUDA kernels compile too, so each
 * formula is written once for both backends. Here each kernel is a loop over flat indices,
 * one per dtype, computed in the array's own precision (float32 uses expf/erff, and the
 * arithmetic loops vectorize). Small arrays run serially: a 1-element gradient must not pay for
 * entering a parallel region.
 */
#ifndef FERRO_KERNELS_H
#define FERRO_KERNELS_H

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "simd.h"

/* gcc may not turn a select with arithmetic in one arm (leaky_relu's x > 0 ? g : g a) into
 * branch-free vector code while floating-point exceptions might trap (-ftrapping-math, its
 * default): the loop then runs 3x slower than relu's. Nothing in ferro enables FP traps, so the
 * kernels are compiled without that assumption (formulas included: they must inline). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math")
#endif

#include "../cuda/kernels/formulas.cuh"

/* Thresholds for going parallel. Waking an OpenMP team costs tens of microseconds when its
 * threads sleep (OMP_WAIT_POLICY=passive), so a memory-bound loop needs about a million
 * elements to gain from a second core; a loop doing erf/exp per element gains much earlier. */
#define FERRO_PARALLEL_MIN (1 << 20)
#define FERRO_PARALLEL_MIN_COMPUTE (1 << 15)

/* FERRO_FOR_CHUNKS' chunk: a cloned function (simd.h) runs once per chunk */
#define FERRO_CHUNK 16384

/* for c in chunks of [0, n): CALL(SPAN, c, its length), on every core from MIN elements. */
#define FERRO_FOR_CHUNKS(MIN, CALL, SPAN)                                            \
    if (n < (MIN)) {                                                                 \
        CALL(SPAN, 0, n);                                                            \
    } else {                                                                         \
        _Pragma("omp parallel for schedule(static)")                                 \
        for (i = 0; i < n; i += FERRO_CHUNK) {                                       \
            CALL(SPAN, i, n - i < FERRO_CHUNK ? n - i : FERRO_CHUNK);                \
        }                                                                            \
    }

/* for (i = 0; i < n; i++) BODY, on every core from MIN elements. */
#define FERRO_FOR(MIN, ...)                                                          \
    if (n < (MIN)) {                                                                 \
        for (i = 0; i < n; i++) { __VA_ARGS__ }                                      \
    } else {                                                                         \
        _Pragma("omp parallel for schedule(static)")                                 \
        for (i = 0; i < n; i++) { __VA_ARGS__ }                                      \
    }

/* Elementwise backward: out[i] = EXPR, where EXPR reads g (the upstream gradient), vp[i] and
 * wp[i] (the saved arrays; wp is NULL for kernels that read one) and a (a scalar parameter).
 * g is gp[i] when gs is 1, and gp[0] for every i when gs is 0: after .sum() or .mean() the
 * upstream gradient is one value broadcast with stride 0, which the kernel takes as it is. */
#define FERRO_GRAD_LOOP(NAME, T, MIN, EXPR)                                          \
    static void NAME(const T *gp, ptrdiff_t gs, const T *vp, const T *wp, T *out,    \
                     ptrdiff_t n, double a_) {                                       \
        const T a = (T)a_;                                                           \
        ptrdiff_t i;                                                                 \
        (void)wp;                                                                    \
        (void)a;                                                                     \
        if (gs == 0) {                                                               \
            const T g = gp[0];                                                       \
            FERRO_FOR(MIN, out[i] = (EXPR);)                                         \
        } else {                                                                     \
            FERRO_FOR(MIN, const T g = gp[i]; out[i] = (EXPR);)                      \
        }                                                                            \
    }

#define FERRO_GRAD_LOOPS(NAME, MIN, EXPR32, EXPR64)                                  \
    FERRO_GRAD_LOOP(NAME##_f32, float, MIN, EXPR32)                                  \
    FERRO_GRAD_LOOP(NAME##_f64, double, MIN, EXPR64)

FERRO_GRAD_LOOPS(ferro_tanh_bwd, FERRO_PARALLEL_MIN,
                 ferro_tanh_grad_f32(g, vp[i]), ferro_tanh_grad_f64(g, vp[i]))
FERRO_GRAD_LOOPS(ferro_sigmoid_bwd, FERRO_PARALLEL_MIN,
                 ferro_sigmoid_grad_f32(g, vp[i]), ferro_sigmoid_grad_f64(g, vp[i]))
FERRO_GRAD_LOOPS(ferro_relu_bwd, FERRO_PARALLEL_MIN,
                 ferro_relu_grad_f32(g, vp[i]), ferro_relu_grad_f64(g, vp[i]))
FERRO_GRAD_LOOPS(ferro_leaky_relu_bwd, FERRO_PARALLEL_MIN,
                 ferro_leaky_relu_grad_f32(g, vp[i], a), ferro_leaky_relu_grad_f64(g, vp[i], a))
FERRO_GRAD_LOOP(ferro_gelu_bwd_f64, double, FERRO_PARALLEL_MIN_COMPUTE,
                ferro_gelu_grad_f64(g, vp[i]))
FERRO_GRAD_LOOPS(ferro_silu_bwd, FERRO_PARALLEL_MIN,
                 ferro_silu_grad_f32(g, vp[i], wp[i]), ferro_silu_grad_f64(g, vp[i], wp[i]))

/* The loops with exp or erf per element, compiled per ISA level (simd.h): a cloned function
 * over a span, run on chunks (an OpenMP region's body is not cloned). Forward
 * out[i] = NAME_S(x[i]); backward out[i] = NAME_grad_S(g, x[i]), g as in FERRO_GRAD_LOOP. */
#define FERRO_MAP_CHUNK(SPAN, c, m) SPAN(x + (c), out + (c), (m))
#define FERRO_MAP_GRAD_CHUNK(SPAN, c, m) SPAN(gp + (c) * gs, gs, vp + (c), out + (c), (m))
#define FERRO_CLONED_MAPS(NAME, T, S)                                                \
    static FERRO_CLONES void NAME##_fwd_span_##S(const T *x, T *out, ptrdiff_t n) {  \
        ptrdiff_t i;                                                                 \
        for (i = 0; i < n; i++) out[i] = NAME##_##S(x[i]);                           \
    }                                                                                \
    static FERRO_CLONES void NAME##_bwd_span_##S(const T *gp, ptrdiff_t gs,          \
                                                 const T *x, T *out, ptrdiff_t n) {  \
        ptrdiff_t i;                                                                 \
        if (gs == 0) {                                                               \
            const T g = gp[0];                                                       \
            for (i = 0; i < n; i++) out[i] = NAME##_grad_##S(g, x[i]);               \
        } else {                                                                     \
            for (i = 0; i < n; i++) out[i] = NAME##_grad_##S(gp[i], x[i]);           \
        }                                                                            \
    }                                                                                \
    static void NAME##_fwd_##S(const T *x, T *out, ptrdiff_t n) {                    \
        ptrdiff_t i;                                                                 \
        FERRO_FOR_CHUNKS(FERRO_PARALLEL_MIN_COMPUTE, FERRO_MAP_CHUNK, NAME##_fwd_span_##S) \
    }                                                                                \
    static void NAME##_bwd_##S(const T *gp, ptrdiff_t gs, const T *vp, const T *wp, T *out, \
                               ptrdiff_t n, double a) {                              \
        ptrdiff_t i;                                                                 \
        (void)wp;                                                                    \
        (void)a;                                                                     \
        FERRO_FOR_CHUNKS(FERRO_PARALLEL_MIN_COMPUTE, FERRO_MAP_GRAD_CHUNK,          \
                         NAME##_bwd_span_##S)                                        \
    }

/* exact gelu, float32 (NumPy has no vectorized erf; float64's is libm's, so not cloned) */
FERRO_CLONED_MAPS(ferro_gelu, float, f32)
static void ferro_gelu_fwd_f64(const double *x, double *out, ptrdiff_t n) {
    ptrdiff_t i;
    FERRO_FOR(FERRO_PARALLEL_MIN_COMPUTE, out[i] = ferro_gelu_f64(x[i]);)
}
/* tanh gelu, forward and backward from x */
FERRO_CLONED_MAPS(ferro_gelu_tanh, float, f32)
FERRO_CLONED_MAPS(ferro_gelu_tanh, double, f64)

/* softmax backward over rows of c elements: d = sum(g y) per row, then
 * out = ferro_softmax_grad(g, y, d). g is C-contiguous (gs 1) or one broadcast value (gs 0:
 * then d = g sum(y)). The row sum runs in double with four accumulators, so it is not one long
 * chain of dependent adds; the second loop vectorizes. */
#define FERRO_SOFTMAX_BWD(T, S)                                                      \
    static void ferro_softmax_bwd_row_##S(const T *g, ptrdiff_t gs, const T *y, T *out, \
                                          ptrdiff_t c) {                             \
        ptrdiff_t j;                                                                 \
        double d0 = 0.0, d1 = 0.0, d2 = 0.0, d3 = 0.0;                               \
        if (gs == 0) {                                                               \
            const T g0 = g[0];                                                       \
            for (j = 0; j + 4 <= c; j += 4) {                                        \
                d0 += y[j]; d1 += y[j + 1]; d2 += y[j + 2]; d3 += y[j + 3];          \
            }                                                                        \
            for (; j < c; j++) d0 += y[j];                                           \
            const T d = (T)((double)g0 * ((d0 + d1) + (d2 + d3)));                   \
            for (j = 0; j < c; j++) out[j] = ferro_softmax_grad_##S(g0, y[j], d);    \
        } else {                                                                     \
            for (j = 0; j + 4 <= c; j += 4) {                                        \
                d0 += (double)g[j] * y[j];                                           \
                d1 += (double)g[j + 1] * y[j + 1];                                   \
                d2 += (double)g[j + 2] * y[j + 2];                                   \
                d3 += (double)g[j + 3] * y[j + 3];                                   \
            }                                                                        \
            for (; j < c; j++) d0 += (double)g[j] * y[j];                            \
            const T d = (T)((d0 + d1) + (d2 + d3));                                  \
            for (j = 0; j < c; j++) out[j] = ferro_softmax_grad_##S(g[j], y[j], d);  \
        }                                                                            \
    }                                                                                \
    static void ferro_softmax_bwd_##S(const T *gp, ptrdiff_t gs, const T *y, T *out, \
                                      ptrdiff_t r, ptrdiff_t c) {                    \
        ptrdiff_t i, n = r * c;                                                      \
        if (n < FERRO_PARALLEL_MIN || r < 2) {                                       \
            for (i = 0; i < r; i++)                                                  \
                ferro_softmax_bwd_row_##S(gp + i * c * gs, gs, y + i * c, out + i * c, c); \
        } else {                                                                     \
            _Pragma("omp parallel for schedule(static)")                             \
            for (i = 0; i < r; i++)                                                  \
                ferro_softmax_bwd_row_##S(gp + i * c * gs, gs, y + i * c, out + i * c, c); \
        }                                                                            \
    }

FERRO_SOFTMAX_BWD(float, f32)
FERRO_SOFTMAX_BWD(double, f64)

/* 1 if every element is finite. Integer test of the exponent bits (all ones means Inf or
 * NaN): no floating-point compare, so the loop vectorizes, and large arrays use both cores. */
#define FERRO_ALL_FINITE(NAME, T, U, MASK)                                           \
    static int NAME(const T *a, ptrdiff_t n) {                                       \
        const U *b = (const U *)a;                                                   \
        U bad = 0;                                                                   \
        ptrdiff_t i;                                                                 \
        if (n < FERRO_PARALLEL_MIN) {                                                \
            for (i = 0; i < n; i++) bad |= (U)((b[i] & (MASK)) == (MASK));           \
        } else {                                                                     \
            _Pragma("omp parallel for reduction(|:bad) schedule(static)")            \
            for (i = 0; i < n; i++) bad |= (U)((b[i] & (MASK)) == (MASK));           \
        }                                                                            \
        return bad == 0;                                                             \
    }

/* FERRO_FOR_CHUNKS' CALL for Adam: its span on chunk [c, c + len) */
#define FERRO_ADAM_CHUNK(SPAN, c, len)                                                   \
    SPAN(p + (c), g + (c), m + (c), v + (c), (len), b1, b2, eps, wd, decoupled, step_size, \
         inv_sqrt_bc2, shrink)

/* FERRO_FOR_CHUNKS' CALL for SGD */
#define FERRO_SGD_CHUNK(SPAN, c, len)                                                    \
    SPAN(p + (c), g + (c), buf + (c), (len), lr, momentum, damp, wd, nesterov, first)

/* Optimizer updates: one pass over param, grad and state, following PyTorch's formulas, in the
 * parameters' own precision (as PyTorch computes them), so float32 loops vectorize. */
#define FERRO_OPTIM(T, SFX, SQRT)                                                        \
/* SGD's loop over [0, n), per ISA level (simd.h); weight decay only where it is not 0, as      \
 * PyTorch adds it (an infinite parameter stays infinite), and with neither momentum nor decay  \
 * the one pass p -= lr g that the hand-written update loop runs too (Note [Fused update]) */   \
static FERRO_CLONES void ferro_sgd_span_##SFX(T *p, const T *g, T *buf, ptrdiff_t n, T lr,      \
                                              T momentum, T damp, T wd, int nesterov,          \
                                              int first) {                                     \
    ptrdiff_t i;                                                                     \
    if (momentum == 0 && wd == 0) {                                                  \
        for (i = 0; i < n; i++)                                                      \
            p[i] -= lr * g[i];                                                       \
        return;                                                                      \
    }                                                                                \
    for (i = 0; i < n; i++) {                                                        \
        T d = wd != 0 ? g[i] + wd * p[i] : g[i];                                     \
        if (momentum != 0) {                                                         \
            T b = first ? d : momentum * buf[i] + damp * d;                          \
            buf[i] = b;                                                              \
            d = nesterov ? d + momentum * b : b;                                     \
        }                                                                            \
        p[i] -= lr * d;                                                              \
    }                                                                                \
}                                                                                    \
static void ferro_sgd_##SFX(T *p, const T *g, T *buf, ptrdiff_t n, double lr_,       \
                            double momentum_, double dampening_, double wd_, int nesterov, \
                            int first) {                                             \
    ptrdiff_t i;                                                                     \
    const T lr = (T)lr_, momentum = (T)momentum_, damp = (T)(1.0 - dampening_), wd = (T)wd_; \
    FERRO_FOR_CHUNKS(FERRO_PARALLEL_MIN, FERRO_SGD_CHUNK, ferro_sgd_span_##SFX)      \
}                                                                                    \
/* Adam's loop over [0, n) of its arrays, per ISA level (simd.h): the sqrt and divide per \
 * element are most of its time, 4-16 lanes at once in AVX2/AVX-512 */               \
static FERRO_CLONES void ferro_adam_span_##SFX(T *p, const T *g, T *m, T *v, ptrdiff_t n, \
                                               T b1, T b2, T eps, T wd, int decoupled, \
                                               T step_size, T inv_sqrt_bc2, T shrink) { \
    ptrdiff_t i;                                                                     \
    for (i = 0; i < n; i++) {                                                        \
        T gi = g[i], pi = p[i];                                                      \
        if (decoupled) pi *= shrink; else gi += wd * pi;                             \
        const T mi = b1 * m[i] + (1 - b1) * gi;                                      \
        const T vi = b2 * v[i] + (1 - b2) * gi * gi;                                 \
        m[i] = mi; v[i] = vi;                                                        \
        p[i] = pi - step_size * mi / (SQRT(vi) * inv_sqrt_bc2 + eps);                \
    }                                                                                \
}                                                                                    \
static void ferro_adam_##SFX(T *p, const T *g, T *m, T *v, ptrdiff_t n, double lr_,  \
                             double b1_, double b2_, double eps_, double wd_, int decoupled, \
                             double bc1, double bc2) {                               \
    ptrdiff_t i;                                                                     \
    const T b1 = (T)b1_, b2 = (T)b2_, eps = (T)eps_, wd = (T)wd_;                    \
    const T step_size = (T)(lr_ / bc1), inv_sqrt_bc2 = (T)(1.0 / sqrt(bc2));         \
    const T shrink = (T)(1.0 - lr_ * wd_);                                           \
    FERRO_FOR_CHUNKS(FERRO_PARALLEL_MIN, FERRO_ADAM_CHUNK, ferro_adam_span_##SFX)    \
}                                                                                    \
static void ferro_rmsprop_##SFX(T *p, const T *g, T *sq, T *buf, T *gavg, ptrdiff_t n, \
                                double lr_, double alpha_, double eps_, double wd_,  \
                                double momentum_, int centered) {                    \
    ptrdiff_t i;                                                                     \
    const T lr = (T)lr_, alpha = (T)alpha_, eps = (T)eps_, wd = (T)wd_;              \
    const T momentum = (T)momentum_;                                                 \
    FERRO_FOR(FERRO_PARALLEL_MIN,                                                    \
        const T gi = g[i] + wd * p[i];                                               \
        const T s = alpha * sq[i] + (1 - alpha) * gi * gi;                           \
        sq[i] = s;                                                                   \
        T avg;                                                                       \
        if (centered) {                                                              \
            const T ga = alpha * gavg[i] + (1 - alpha) * gi;                         \
            gavg[i] = ga;                                                            \
            avg = SQRT(s - ga * ga) + eps;                                           \
        } else {                                                                     \
            avg = SQRT(s) + eps;                                                     \
        }                                                                            \
        if (momentum > 0) {                                                          \
            const T b = momentum * buf[i] + gi / avg;                                \
            buf[i] = b;                                                              \
            p[i] -= lr * b;                                                          \
        } else {                                                                     \
            p[i] -= lr * gi / avg;                                                   \
        }                                                                            \
    )                                                                                \
}                                                                                    \
static void ferro_adagrad_##SFX(T *p, const T *g, T *sum, ptrdiff_t n, double clr_,  \
                                double eps_, double wd_) {                           \
    ptrdiff_t i;                                                                     \
    const T clr = (T)clr_, eps = (T)eps_, wd = (T)wd_;                               \
    FERRO_FOR(FERRO_PARALLEL_MIN,                                                    \
        const T gi = g[i] + wd * p[i];                                               \
        const T s = sum[i] + gi * gi;                                                \
        sum[i] = s;                                                                  \
        p[i] -= clr * gi / (SQRT(s) + eps);                                          \
    )                                                                                \
}

FERRO_OPTIM(float, f32, sqrtf)
FERRO_OPTIM(double, f64, sqrt)

/* Binary arithmetic for large arrays, the two-core path of ferro's add/sub/mul/div
 * (cpu_kernels.pyx: binary): out[i] = x OP y, x = a[i], y = b[i] (bs 1) or b[0] (bs 0: a
 * number or one broadcast value). Ops 0-3: + - * /; 4 and 5: x + s y and x - s y (PyTorch's
 * alpha=, s y rounded to T first, as NumPy's two ufuncs give). Plain IEEE ops in T with no FMA
 * contraction (the pragma), so every result is NumPy's bit for bit. out may be a (in place):
 * gcc's runtime alias check lets the same address through to the vector loop. The span is
 * cloned per ISA level (simd.h), as NumPy's own loops are: in SSE2 one thread took 56 us for
 * 401,408 float32 products (lr * g) against NumPy's 36 us in AVX2. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#endif
#define FERRO_BIN(T, EXPR)                                                           \
    if (bs) { for (i = 0; i < n; i++) { const T x = a[i], y = b[i]; out[i] = (EXPR); } } \
    else { const T y = b[0]; for (i = 0; i < n; i++) { const T x = a[i]; out[i] = (EXPR); } } \
    break;
/* Note [Streaming stores] (docs/design.md): out[0..bytes) = buf (a piece in L1) by SSE2's
 * non-temporal stores (x86-64's baseline) where out is 16-byte aligned, so a leaf gradient's
 * lines are not read from memory before they are written, and do not take the cache. */
#if defined(__SSE2__)
#include <emmintrin.h>
#define FERRO_SFENCE() _mm_sfence()
static inline void ferro_stream(void *out, const void *buf, size_t bytes) {
    char *o = (char *)out;
    const char *b = (const char *)buf;
    size_t head = (16 - ((size_t)o & 15)) & 15, k;
    if (head > bytes) head = bytes;
    memcpy(o, b, head);
    for (k = head; k + 16 <= bytes; k += 16)
        _mm_stream_si128((__m128i *)(o + k), _mm_loadu_si128((const __m128i *)(b + k)));
    memcpy(o + k, b + k, bytes - k);
}
#else
#define FERRO_SFENCE() ((void)0)
static inline void ferro_stream(void *out, const void *buf, size_t bytes) {
    memcpy(out, buf, bytes);
}
#endif
#define FERRO_STREAM_PIECE 1024
/* CALL(SPAN, buf, j, m) computes elements [j, j + m) of OUT into buf: run it over [c, c + len)
 * piece by piece and stream each piece to OUT + j. */
#define FERRO_STREAMED(OUT, c, len, CALL, SPAN)                                       \
    do {                                                                             \
        __typeof__(*(OUT)) buf_[FERRO_STREAM_PIECE] __attribute__((aligned(64)));    \
        ptrdiff_t j_, m_;                                                            \
        for (j_ = (c); j_ < (c) + (len); j_ += FERRO_STREAM_PIECE) {                 \
            m_ = (c) + (len) - j_ < FERRO_STREAM_PIECE ? (c) + (len) - j_ : FERRO_STREAM_PIECE; \
            CALL(SPAN, buf_, j_, m_);                                                 \
            ferro_stream((OUT) + j_, buf_, (size_t)m_ * sizeof(buf_[0]));            \
        }                                                                            \
        FERRO_SFENCE();                                                              \
    } while (0)
#define FERRO_BINARY_PIECE(SPAN, buf, j, m) SPAN(op, a + (j), b + (j) * bs, bs, buf, (m), s)
#define FERRO_BINARY(T, S)                                                           \
    static FERRO_CLONES void ferro_binary_span_##S(int op, const T *a, const T *b,  \
                                                   ptrdiff_t bs, T *out, ptrdiff_t n, T s) { \
        ptrdiff_t i;                                                                 \
        switch (op) {                                                                \
        case 0: FERRO_BIN(T, x + y)                                                  \
        case 1: FERRO_BIN(T, x - y)                                                  \
        case 2: FERRO_BIN(T, x * y)                                                  \
        case 3: FERRO_BIN(T, x / y)                                                  \
        case 4: FERRO_BIN(T, x + s * y)                                              \
        default: FERRO_BIN(T, x - s * y)                                             \
        }                                                                            \
    }                                                                                \
    static void ferro_binary_##S(int op, const T *a, const T *b, ptrdiff_t bs, T *out, \
                                 ptrdiff_t n, double s, int stream, int one) {       \
        ptrdiff_t i;                                                                 \
        _Pragma("omp parallel for schedule(static) if(!one)")                        \
        for (i = 0; i < n; i += FERRO_CHUNK) {                                       \
            const ptrdiff_t len = n - i < FERRO_CHUNK ? n - i : FERRO_CHUNK;         \
            if (stream) {                                                            \
                FERRO_STREAMED(out, i, len, FERRO_BINARY_PIECE, ferro_binary_span_##S); \
            } else {                                                                 \
                ferro_binary_span_##S(op, a + i, b + i * bs, bs, out + i, len, (T)s); \
            }                                                                        \
        }                                                                            \
    }
FERRO_BINARY(float, f32)
FERRO_BINARY(double, f64)

/* The sum of n elements (n > 0) for large arrays: a fixed partition into FERRO_SUM_BLOCK-element
 * blocks (independent of the number of threads), each summed pairwise into part[k], then the
 * block sums pairwise, so the result does not depend on how many threads ran. Pairwise as
 * NumPy's add.reduce is (8 accumulators up to 128 elements, halves above) but in double for
 * float32 too (NumPy accumulates float32 in float32), so it is at least as accurate. */
#define FERRO_SUM_BLOCK 65536
#define FERRO_SUM(T, S)                                                              \
    static FERRO_CLONES double ferro_pairwise_##S(const T *a, ptrdiff_t n) {         \
        ptrdiff_t i, j, h = n / 2 - (n / 2) % 8;                                     \
        if (n > 128) return ferro_pairwise_##S(a, h) + ferro_pairwise_##S(a + h, n - h); \
        double r[8] = {0, 0, 0, 0, 0, 0, 0, 0}, res;                                 \
        for (i = 0; i + 8 <= n; i += 8)                                              \
            for (j = 0; j < 8; j++) r[j] += a[i + j];                                \
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));     \
        for (; i < n; i++) res += a[i];                                              \
        return res;                                                                  \
    }                                                                                \
    static void ferro_sum_all_##S(const T *a, ptrdiff_t n, double *part, T *res) {   \
        const ptrdiff_t nb = (n + FERRO_SUM_BLOCK - 1) / FERRO_SUM_BLOCK;            \
        ptrdiff_t k;                                                                 \
        _Pragma("omp parallel for schedule(static) if(n >= FERRO_PARALLEL_MIN)")     \
        for (k = 0; k < nb; k++)                                                     \
            part[k] = ferro_pairwise_##S(a + k * FERRO_SUM_BLOCK,                    \
                                         k + 1 < nb ? FERRO_SUM_BLOCK : n - k * FERRO_SUM_BLOCK); \
        *res = (T)ferro_pairwise_f64(part, nb);                                      \
    }
FERRO_SUM(double, f64)
FERRO_SUM(float, f32)
/* The r sums of a C-contiguous (r, c), each pairwise in double as ferro_sum_all's blocks, times
 * scale, into out (a mean with scale 1/c); rows over the team, so the bits do not depend on
 * the thread count. */
#define FERRO_ROW_SUMS(T, S)                                                         \
    static void ferro_row_sums_##S(const T *a, ptrdiff_t r, ptrdiff_t c, double scale, T *out) { \
        ptrdiff_t i;                                                                 \
        _Pragma("omp parallel for schedule(static)")                                 \
        for (i = 0; i < r; i++)                                                      \
            out[i] = (T)(ferro_pairwise_##S(a + i * c, c) * scale);                  \
    }
FERRO_ROW_SUMS(double, f64)
FERRO_ROW_SUMS(float, f32)

/* Note [Lazy elementwise chains] (cpu_kernels.pyx): a chain of +, - and * over arrays of one
 * shape, as a postfix program. code[k] >= 0 pushes leaf code[k], read with element stride
 * ls[code[k]] (1: an array, 0: one value); code[k] < 0 pops y, then x, and pushes x op y, op
 * -1 - code[k] (0-2: + - *). x is always read with stride 1 (the program is built so), each op
 * is one IEEE operation in T without contraction, as ferro_binary computes it: the same bits
 * as the ops run one at a time. Evaluates elements [start, start + len) into out, a sub-chunk
 * of FERRO_EVAL_CHUNK at a time through registers that stay in L1. */
#define FERRO_EVAL_CHUNK 512
#define FERRO_EVAL_DEPTH 8
#define FERRO_EVAL_OP(T, EXPR)                                                       \
    if (sy) { for (i = 0; i < m; i++) { const T a_ = x[i], b_ = y[i]; r[i] = (EXPR); } } \
    else { const T b_ = y[0]; for (i = 0; i < m; i++) { const T a_ = x[i]; r[i] = (EXPR); } } \
    break;
#define FERRO_EVAL_CALL(SPAN, c, m) SPAN(code, ncode, leaf, ls, (c), (m), out + (c))
#ifdef _OPENMP
#include <omp.h>
#define FERRO_THREAD() omp_get_thread_num()
#define FERRO_MAX_THREADS() omp_get_max_threads()
#else
#define FERRO_THREAD() 0
#define FERRO_MAX_THREADS() 1
#endif
#define FERRO_FUSED(T, S)                                                            \
    static FERRO_CLONES void ferro_eval_##S(const signed char *code, int ncode,      \
                                            const T *const *leaf, const ptrdiff_t *ls, \
                                            ptrdiff_t start, ptrdiff_t len, T *out) { \
        T reg[FERRO_EVAL_DEPTH][FERRO_EVAL_CHUNK] __attribute__((aligned(64)));      \
        const T *src[FERRO_EVAL_DEPTH + 1];                                          \
        ptrdiff_t st[FERRO_EVAL_DEPTH + 1], c, i, m;                                 \
        int k, sp;                                                                   \
        for (c = 0; c < len; c += FERRO_EVAL_CHUNK) {                                \
            m = len - c < FERRO_EVAL_CHUNK ? len - c : FERRO_EVAL_CHUNK;             \
            for (k = 0, sp = 0; k < ncode; k++) {                                    \
                const int o = code[k];                                               \
                if (o >= 0) {                                                        \
                    src[sp] = leaf[o] + (start + c) * ls[o];                         \
                    st[sp++] = ls[o];                                                \
                    continue;                                                        \
                }                                                                    \
                sp--;                                                                \
                const T *x = src[sp - 1], *y = src[sp];                              \
                const ptrdiff_t sy = st[sp];                                         \
                T *r = k == ncode - 1 ? out + c : reg[sp - 1];                       \
                switch (-1 - o) {                                                    \
                case 0: FERRO_EVAL_OP(T, a_ + b_)                                    \
                case 1: FERRO_EVAL_OP(T, a_ - b_)                                    \
                default: FERRO_EVAL_OP(T, a_ * b_)                                   \
                }                                                                    \
                src[sp - 1] = r;                                                     \
                st[sp - 1] = 1;                                                      \
            }                                                                        \
        }                                                                            \
    }                                                                                \
    static void ferro_fused_##S(const signed char *code, int ncode, const T *const *leaf, \
                                const ptrdiff_t *ls, ptrdiff_t n, T *out) {          \
        ptrdiff_t i;                                                                 \
        FERRO_FOR_CHUNKS(FERRO_PARALLEL_MIN, FERRO_EVAL_CALL, ferro_eval_##S)        \
    }                                                                                \
    /* ferro_sum_all of the program's values without storing them: each block evaluated into \
     * scratch[thread], then summed as ferro_sum_all sums it (the same bits). */      \
    static void ferro_fused_sum_##S(const signed char *code, int ncode, const T *const *leaf, \
                                    const ptrdiff_t *ls, ptrdiff_t n, T *scratch,    \
                                    int nscratch, double *part, T *res) {            \
        const ptrdiff_t nb = (n + FERRO_SUM_BLOCK - 1) / FERRO_SUM_BLOCK;            \
        ptrdiff_t k;                                                                 \
        _Pragma("omp parallel for schedule(static) num_threads(nscratch)")           \
        for (k = 0; k < nb; k++) {                                                   \
            T *buf = scratch + (ptrdiff_t)FERRO_THREAD() * FERRO_SUM_BLOCK;          \
            const ptrdiff_t len = k + 1 < nb ? FERRO_SUM_BLOCK : n - k * FERRO_SUM_BLOCK; \
            ferro_eval_##S(code, ncode, leaf, ls, k * FERRO_SUM_BLOCK, len, buf);    \
            part[k] = ferro_pairwise_##S(buf, len);                                  \
        }                                                                            \
        *res = (T)ferro_pairwise_f64(part, nb);                                      \
    }
FERRO_FUSED(float, f32)
FERRO_FUSED(double, f64)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

#include <stdint.h>
/* Softmax cross-entropy over r rows of c logits with int64 class targets: the CPU side of
 * ferro/cuda/kernels/cross_entropy.cu, with its meaning. Forward: lse = m + log(sum exp(x - m)),
 * m the row's max, loss = lse - x[t] (0 where t is `ignore`, NaN for a target out of range).
 * Backward: (softmax(x) - onehot(t)) scale, scale = gy[row or 0] / denom, from x and lse. Per
 * ISA level (simd.h): exp is arithmetic, and the row sum runs 8 lanes at a time. */
#define FERRO_CE(T, S, EXP, LOG)                                                     \
    static FERRO_CLONES void ferro_ce_fwd_##S(const T *x, const int64_t *t, T *loss, T *lse, \
                                              ptrdiff_t r, ptrdiff_t c, int64_t ignore) { \
        ptrdiff_t i, j, k;                                                           \
        for (i = 0; i < r; i++, x += c) {                                            \
            T m = -INFINITY, acc[8] = {0, 0, 0, 0, 0, 0, 0, 0}, s;                   \
            for (j = 0; j < c; j++) m = x[j] > m ? x[j] : m;                         \
            for (j = 0; j + 8 <= c; j += 8)                                          \
                for (k = 0; k < 8; k++) acc[k] += EXP(x[j + k] - m);                 \
            s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])); \
            for (; j < c; j++) s += EXP(x[j] - m);                                   \
            lse[i] = m + LOG(s);                                                     \
            loss[i] = t[i] == ignore ? 0 : (t[i] < 0 || t[i] >= c) ? (T)NAN : lse[i] - x[t[i]]; \
        }                                                                            \
    }                                                                                \
    static FERRO_CLONES void ferro_ce_bwd_##S(const T *x, const int64_t *t, const T *lse, \
                                              const T *gy, ptrdiff_t gs, T den, T *g, \
                                              ptrdiff_t r, ptrdiff_t c, int64_t ignore) { \
        ptrdiff_t i, j;                                                              \
        for (i = 0; i < r; i++, x += c, g += c) {                                    \
            const T scale = gy[i * gs] / den;                                        \
            const int skip = t[i] == ignore, bad = t[i] < 0 || t[i] >= c;            \
            for (j = 0; j < c; j++)                                                  \
                g[j] = skip ? (T)0 : bad ? (T)NAN                                    \
                     : ferro_cross_entropy_grad_##S(x[j], lse[i], j == t[i], scale); \
        }                                                                            \
    }
FERRO_CE(float, f32, ferro_exp_f32, logf)
FERRO_CE(double, f64, exp, log)
FERRO_ALL_FINITE(ferro_all_finite_f32, float, uint32_t, 0x7F800000u)
FERRO_ALL_FINITE(ferro_all_finite_f64, double, uint64_t, 0x7FF0000000000000ull)

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

#endif

/* buf[0..m) = elements [j, j + m) of the row at P, read with stride s (0: one value) */
#define FERRO_GATHER_PIECE(P, buf, j, m)                                             \
    if (s == 0) {                                                                    \
        const __typeof__(*(P)) v_ = *(P);                                            \
        for (ptrdiff_t k_ = 0; k_ < (m); k_++) (buf)[k_] = v_;                       \
    } else if (s == 1) {                                                             \
        memcpy(buf, (P) + (j), (size_t)(m) * sizeof(*(P)));                          \
    } else {                                                                         \
        for (ptrdiff_t k_ = 0; k_ < (m); k_++) (buf)[k_] = (P)[((j) + k_) * s];      \
    }
/* dst, C-contiguous of shape[0..nd), = src read with element strides st (any sign; 0 along a
 * broadcast dim): a copy of any view on the team, in tasks of up to FERRO_CHUNK elements of one
 * row of the last dim, each task's source offset found from its index. */
#define FERRO_EXPAND(T, S)                                                           \
    static void ferro_expand_##S(const T *src, T *dst, int nd, const ptrdiff_t *shape, \
                                 const ptrdiff_t *st, int stream) {                  \
        ptrdiff_t rows = 1, len = shape[nd - 1], s = st[nd - 1], t, parts;           \
        int d;                                                                       \
        for (d = 0; d < nd - 1; d++) rows *= shape[d];                               \
        parts = (len + FERRO_CHUNK - 1) / FERRO_CHUNK;                               \
        _Pragma("omp parallel for schedule(static)")                                 \
        for (t = 0; t < rows * parts; t++) {                                         \
            ptrdiff_t i = t / parts, j0 = (t % parts) * FERRO_CHUNK, rem = i, off = 0;   \
            ptrdiff_t j1 = len - j0 < FERRO_CHUNK ? len : j0 + FERRO_CHUNK;          \
            int e;                                                                   \
            for (e = nd - 2; e >= 0; e--) {                                          \
                off += (rem % shape[e]) * st[e];                                     \
                rem /= shape[e];                                                     \
            }                                                                        \
            const T *p = src + off;                                                  \
            T *q = dst + i * len;                                                    \
            if (stream) {                                                            \
                FERRO_STREAMED(q, j0, j1 - j0, FERRO_GATHER_PIECE, p);               \
            } else {                                                                 \
                FERRO_GATHER_PIECE(p, q + j0, j0, j1 - j0)                           \
            }                                                                        \
        }                                                                            \
    }
FERRO_EXPAND(float, f32)
FERRO_EXPAND(double, f64)
