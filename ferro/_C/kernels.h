/* Fused elementwise kernels for ferro's CPU overrides (included by cpu_kernels.pyx).
 *
 * One macro per kernel shape generates a float32 and a float64 loop. Each loop body is one
 * branch-free expression computed in the array's own precision (so float32 uses expf/erff/
 * tanhf and the arithmetic loops vectorize). Small arrays run serially: a 1-element gradient
 * must not pay for entering a parallel region.
 */
#ifndef FERRO_KERNELS_H
#define FERRO_KERNELS_H

#include <math.h>
#include <stddef.h>

/* Thresholds for going parallel. Waking an OpenMP team costs tens of microseconds when its
 * threads sleep (OMP_WAIT_POLICY=passive), so a memory-bound loop needs about a million
 * elements to gain from a second core; a loop doing erf/exp per element gains much earlier. */
#define FERRO_PARALLEL_MIN (1 << 20)
#define FERRO_PARALLEL_MIN_COMPUTE (1 << 15)

#define FERRO_SQRT_2_OVER_PI 0.7978845608028654
#define FERRO_INV_SQRT_2 0.7071067811865476
#define FERRO_INV_SQRT_2PI 0.3989422804014327

/* out[i] = EXPR(a[i]) */
#define FERRO_MAP1(NAME, T, EXPR)                                                    \
    static void NAME(const T *a, T *out, ptrdiff_t n) {                              \
        ptrdiff_t i;                                                                 \
        if (n < FERRO_PARALLEL_MIN_COMPUTE) {                                        \
            for (i = 0; i < n; i++) { const T x = a[i]; out[i] = (EXPR); }           \
        } else {                                                                     \
            _Pragma("omp parallel for schedule(static)")                             \
            for (i = 0; i < n; i++) { const T x = a[i]; out[i] = (EXPR); }           \
        }                                                                            \
    }

/* out[i] = EXPR(g[i], v[i]), parallel from MIN elements */
#define FERRO_MAP2_MIN(NAME, T, EXPR, MIN)                                           \
    static void NAME(const T *gp, const T *vp, T *out, ptrdiff_t n) {                \
        ptrdiff_t i;                                                                 \
        if (n < (MIN)) {                                                             \
            for (i = 0; i < n; i++) { const T g = gp[i], v = vp[i]; out[i] = (EXPR); } \
        } else {                                                                     \
            _Pragma("omp parallel for schedule(static)")                             \
            for (i = 0; i < n; i++) { const T g = gp[i], v = vp[i]; out[i] = (EXPR); } \
        }                                                                            \
    }

#define FERRO_MAP2(NAME, T, EXPR) FERRO_MAP2_MIN(NAME, T, EXPR, FERRO_PARALLEL_MIN)

/* out[i] = EXPR(g[i], v[i], w[i]) */
#define FERRO_MAP3(NAME, T, EXPR)                                                    \
    static void NAME(const T *gp, const T *vp, const T *wp, T *out, ptrdiff_t n) {   \
        ptrdiff_t i;                                                                 \
        if (n < FERRO_PARALLEL_MIN) {                                                \
            for (i = 0; i < n; i++) {                                                \
                const T g = gp[i], v = vp[i], w = wp[i]; out[i] = (EXPR);            \
            }                                                                        \
        } else {                                                                     \
            _Pragma("omp parallel for schedule(static)")                             \
            for (i = 0; i < n; i++) {                                                \
                const T g = gp[i], v = vp[i], w = wp[i]; out[i] = (EXPR);            \
            }                                                                        \
        }                                                                            \
    }

/* tanh: gx = g (1 - y^2), from the saved output y */
FERRO_MAP2(ferro_tanh_bwd_f32, float, g * (1.0f - v * v))
FERRO_MAP2(ferro_tanh_bwd_f64, double, g * (1.0 - v * v))
/* sigmoid: gx = g y (1 - y) */
FERRO_MAP2(ferro_sigmoid_bwd_f32, float, g * v * (1.0f - v))
FERRO_MAP2(ferro_sigmoid_bwd_f64, double, g * v * (1.0 - v))
/* relu: gx = g where y > 0 */
FERRO_MAP2(ferro_relu_bwd_f32, float, v > 0.0f ? g : 0.0f)
FERRO_MAP2(ferro_relu_bwd_f64, double, v > 0.0 ? g : 0.0)
/* silu: gx = g s (1 + x (1 - s)), from the saved x (v) and s = sigmoid(x) (w) */
FERRO_MAP3(ferro_silu_bwd_f32, float, g * w * (1.0f + v * (1.0f - w)))
FERRO_MAP3(ferro_silu_bwd_f64, double, g * w * (1.0 + v * (1.0 - w)))
/* gelu (exact): y = x Phi(x); gx = g (Phi(x) + x phi(x)) */
FERRO_MAP1(ferro_gelu_fwd_f32, float, 0.5f * x * (1.0f + erff(x * (float)FERRO_INV_SQRT_2)))
FERRO_MAP1(ferro_gelu_fwd_f64, double, 0.5 * x * (1.0 + erf(x * FERRO_INV_SQRT_2)))
FERRO_MAP2_MIN(ferro_gelu_bwd_f32, float,
           g * (0.5f * (1.0f + erff(v * (float)FERRO_INV_SQRT_2))
                + v * (float)FERRO_INV_SQRT_2PI * expf(-0.5f * v * v)),
           FERRO_PARALLEL_MIN_COMPUTE)
FERRO_MAP2_MIN(ferro_gelu_bwd_f64, double,
           g * (0.5 * (1.0 + erf(v * FERRO_INV_SQRT_2))
                + v * FERRO_INV_SQRT_2PI * exp(-0.5 * v * v)),
           FERRO_PARALLEL_MIN_COMPUTE)

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

/* Optimizer updates: one pass over param, grad and state, following PyTorch's formulas, in the
 * parameters' own precision (as PyTorch computes them), so float32 loops vectorize. */
#define FERRO_PARALLEL_FOR(...)                                                      \
    if (n < FERRO_PARALLEL_MIN) {                                                    \
        for (i = 0; i < n; i++) { __VA_ARGS__ }                                      \
    } else {                                                                         \
        _Pragma("omp parallel for schedule(static)")                                 \
        for (i = 0; i < n; i++) { __VA_ARGS__ }                                      \
    }

#define FERRO_OPTIM(T, SFX, SQRT)                                                        \
static void ferro_sgd_##SFX(T *p, const T *g, T *buf, ptrdiff_t n, double lr_,       \
                            double momentum_, double dampening_, double wd_, int nesterov, \
                            int first) {                                             \
    ptrdiff_t i;                                                                     \
    const T lr = (T)lr_, momentum = (T)momentum_, damp = (T)(1.0 - dampening_), wd = (T)wd_; \
    FERRO_PARALLEL_FOR(                                                              \
        T d = g[i] + wd * p[i];                                                      \
        if (momentum != 0) {                                                         \
            T b = first ? d : momentum * buf[i] + damp * d;                          \
            buf[i] = b;                                                              \
            d = nesterov ? d + momentum * b : b;                                     \
        }                                                                            \
        p[i] -= lr * d;                                                              \
    )                                                                                \
}                                                                                    \
static void ferro_adam_##SFX(T *p, const T *g, T *m, T *v, ptrdiff_t n, double lr_,  \
                             double b1_, double b2_, double eps_, double wd_, int decoupled, \
                             double bc1, double bc2) {                               \
    ptrdiff_t i;                                                                     \
    const T b1 = (T)b1_, b2 = (T)b2_, eps = (T)eps_, wd = (T)wd_;                    \
    const T step_size = (T)(lr_ / bc1), inv_sqrt_bc2 = (T)(1.0 / sqrt(bc2));         \
    const T shrink = (T)(1.0 - lr_ * wd_);                                           \
    FERRO_PARALLEL_FOR(                                                              \
        T gi = g[i], pi = p[i];                                                      \
        if (decoupled) pi *= shrink; else gi += wd * pi;                             \
        const T mi = b1 * m[i] + (1 - b1) * gi;                                      \
        const T vi = b2 * v[i] + (1 - b2) * gi * gi;                                 \
        m[i] = mi; v[i] = vi;                                                        \
        p[i] = pi - step_size * mi / (SQRT(vi) * inv_sqrt_bc2 + eps);                \
    )                                                                                \
}                                                                                    \
static void ferro_rmsprop_##SFX(T *p, const T *g, T *sq, T *buf, T *gavg, ptrdiff_t n, \
                                double lr_, double alpha_, double eps_, double wd_,  \
                                double momentum_, int centered) {                    \
    ptrdiff_t i;                                                                     \
    const T lr = (T)lr_, alpha = (T)alpha_, eps = (T)eps_, wd = (T)wd_;              \
    const T momentum = (T)momentum_;                                                 \
    FERRO_PARALLEL_FOR(                                                              \
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
    FERRO_PARALLEL_FOR(                                                              \
        const T gi = g[i] + wd * p[i];                                               \
        const T s = sum[i] + gi * gi;                                                \
        sum[i] = s;                                                                  \
        p[i] -= clr * gi / (SQRT(s) + eps);                                          \
    )                                                                                \
}

FERRO_OPTIM(float, f32, sqrtf)
FERRO_OPTIM(double, f64, sqrt)

#include <stdint.h>
FERRO_ALL_FINITE(ferro_all_finite_f32, float, uint32_t, 0x7F800000u)
FERRO_ALL_FINITE(ferro_all_finite_f64, double, uint64_t, 0x7FF0000000000000ull)

#endif
