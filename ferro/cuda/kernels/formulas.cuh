/* The per-element math of ferro's fused kernels, written once for both backends.
 *
 * Compiled three ways: as C by the CPU kernels (ferro/_C/kernels.h includes this file), under
 * NVRTC by the CUDA kernels (ferro/cuda/loader.py puts it in front of every source), and as C++
 * by the CPU emulation of the CUDA kernels in tests/cuda. Each function is one formula of a
 * fused forward or backward; the op's generic Python code (ferro/ops/) is its reference, and
 * tests/ops/test_fused.py compares the two.
 *
 * C has no overloading, so the C names carry _f32/_f64; in C++ both precisions are overloads of
 * one name, which the templated CUDA kernels call for either type (ferro_tanh_grad(g, y)).
 * Math runs in the data's own precision (libm's or CUDA's exp and erf; on the CPU the
 * arithmetic-only exp and float32 erf below, so its loops vectorize).
 */
#ifndef FERRO_FORMULAS_CUH
#define FERRO_FORMULAS_CUH

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define FERRO_FN static __device__ __forceinline__
#else
#include <math.h>
#include <stdint.h>
#define FERRO_FN static inline
#endif

#define FERRO_INV_SQRT_2 0.70710678118654752440
#define FERRO_INV_SQRT_2PI 0.39894228040143267794
#define FERRO_SQRT_2_OVER_PI 0.79788456080286535588
#define FERRO_GELU_K 0.044715

/* T: the type; S: the name suffix (empty in C++); EXP, ERF: its exp and erf; EXPN: exp of an
 * argument the formula keeps within [-80, 80] (on the CPU without exp's range handling: a
 * second clamp and select in a loop cost gelu's tanh form 1.7x). */
#define FERRO_FORMULAS(T, S, EXP, ERF, EXPN)                                                  \
    /* tanh: gx = g (1 - y^2), from the output y */                                           \
    FERRO_FN T ferro_tanh_grad##S(T g, T y) { return g * ((T)1 - y * y); }                     \
    /* sigmoid: gx = g y (1 - y), from the output y */                                        \
    FERRO_FN T ferro_sigmoid_grad##S(T g, T y) { return g * y * ((T)1 - y); }                  \
    /* relu: gx = g where y > 0, from the output y */                                         \
    FERRO_FN T ferro_relu_grad##S(T g, T y) { return y > (T)0 ? g : (T)0; }                    \
    /* leaky_relu: gx = g where x > 0, else g a (a: the slope) */                             \
    FERRO_FN T ferro_leaky_relu_grad##S(T g, T x, T a) { return x > (T)0 ? g : g * a; }        \
    /* exact gelu: y = x Phi(x) */                                                            \
    FERRO_FN T ferro_gelu##S(T x) {                                                           \
        return (T)0.5 * x * ((T)1 + ERF(x * (T)FERRO_INV_SQRT_2));                            \
    }                                                                                         \
    /* d/dx [x Phi(x)] = Phi(x) + x phi(x) */                                                 \
    FERRO_FN T ferro_gelu_grad##S(T g, T x) {                                                 \
        return g * ((T)0.5 * ((T)1 + ERF(x * (T)FERRO_INV_SQRT_2))                            \
                    + x * (T)FERRO_INV_SQRT_2PI * EXP((T)-0.5 * x * x));                      \
    }                                                                                         \
    /* tanh gelu: x (1 + tanh(u)) / 2 = x s, s = 1 / (1 + e), e = exp(-2u), u = c (x + k x^3), */ \
    /* c = sqrt(2 / pi), k = 0.044715: no cancellation where tanh(u) is near -1 (x < -3). */   \
    /* -2u is clamped to [-80, 80]: e is finite and normal (never inf * 0 in e s = 1 - s, */   \
    /* and no subnormal arithmetic, 100x slower on the CPU), and s is then 1 or e^-80. */     \
    FERRO_FN T ferro_gelu_tanh_e##S(T x) {                                                    \
        const T m = (T)(-2 * FERRO_SQRT_2_OVER_PI) * x * ((T)1 + (T)FERRO_GELU_K * x * x);    \
        return EXPN(m > (T)80 ? (T)80 : (m < (T)-80 ? (T)-80 : m));                           \
    }                                                                                         \
    FERRO_FN T ferro_gelu_tanh##S(T x) { return x / ((T)1 + ferro_gelu_tanh_e##S(x)); }      \
    /* its derivative: s + x s (1 - s) 2c (1 + 3 k x^2), 1 - s = e s */                        \
    FERRO_FN T ferro_gelu_tanh_grad##S(T g, T x) {                                            \
        const T e = ferro_gelu_tanh_e##S(x);                                                  \
        const T s = (T)1 / ((T)1 + e);                                                        \
        return g * s * ((T)1 + x * e * s * (T)(2 * FERRO_SQRT_2_OVER_PI)                       \
                                   * ((T)1 + (T)(3 * FERRO_GELU_K) * x * x));                 \
    }                                                                                         \
    /* silu: d/dx [x s(x)] = s (1 + x (1 - s)), from x and s = sigmoid(x) */                  \
    FERRO_FN T ferro_silu_grad##S(T g, T x, T s) { return g * s * ((T)1 + x * ((T)1 - s)); }   \
    /* softmax over a row: gx = y (g - d), d = sum over the row of g y */                     \
    FERRO_FN T ferro_softmax_grad##S(T g, T y, T d) { return y * (g - d); }                   \
    /* log-softmax over a row (y = log p): gx = g - exp(y) d, d = sum over the row of g */    \
    FERRO_FN T ferro_log_softmax_grad##S(T g, T y, T d) { return g - EXP(y) * d; }            \
    /* softmax cross-entropy: d loss / dx = (softmax(x) - onehot(target)) scale */            \
    FERRO_FN T ferro_cross_entropy_grad##S(T x, T lse, int is_target, T scale) {              \
        return (EXP(x - lse) - (is_target ? (T)1 : (T)0)) * scale;                            \
    }

#ifndef __cplusplus
/* The CPU's exp and tanh, and float32's erf, in arithmetic only: libm's are calls, one element
 * at a time, that no loop vectorizes (16,000 values: tanhf 677 us, NumPy's AVX tanh 6 us; gelu's
 * erf and exp were 6x PyTorch's gelu in a GPT step). Loops over these vectorize, and the kernels
 * that run them compile per ISA level (ferro/_C/simd.h). Branch-free (both sides of a range
 * computed, one selected); the includer compiles them without trapping math (ferro/_C/kernels.h).
 * NaN stays NaN. Max error over every 7th float32 bit pattern against float64: exp 1.02 ulp
 * (0 where the result is below FLT_MIN), tanh 1.32 ulp, erf 2.4 ulp (1.3e-7 absolute); float64
 * over 3e7 points of the domain against long double: exp 1.71 ulp, tanh 1.36 ulp. */

/* e^(hi + lo), lo a small tail, for hi + lo within [ln FLT_MIN, 88] (unchecked): 2^k e^r with
 * k = round((hi + lo) / ln 2) and r = hi - k ln 2 + lo (Cody-Waite: hi - k ln2_hi is exact),
 * e^r by Cephes' expf polynomial, 2^k by exponent bits (one factor: two, for k = 128 near
 * ln FLT_MAX, cost the AVX2 loops 10-18%). */
FERRO_FN float ferro_expn2_f32(float hi, float lo) {
    const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    union { float f; int32_t i; } k, s;
    float r, p;
    int32_t n;
    k.f = (hi + lo) * 1.44269504088896341f + magic;
    n = k.i - 0x4B400000;
    k.f -= magic;
    r = (hi - k.f * 0.693359375f) - k.f * -2.12194440e-4f + lo;
    p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    s.i = (n + 127) << 23;
    return p * s.f;
}

/* e^(hi + lo) for every float. Results below FLT_MIN are 0: a subnormal costs a microcode
 * assist per element, 5-100x a loop's time. (-0.0f is no tail: x + -0.0f is x, also for -0.) */
FERRO_FN float ferro_exp2_f32(float hi, float lo) {
    const float x = hi + lo, x0 = -87.33654f, x1 = 88.72283f; /* ln FLT_MIN, ln FLT_MAX */
    const float c = hi < x0 ? x0 : (hi > x1 ? x1 : hi);
    const int top = c > 88.0f; /* k = 128: e^(c - ln 2) 2, ln 2 = 0.693359375 - 2.12194440e-4 */
    const float p = ferro_expn2_f32(top ? c - 0.693359375f : c, top ? lo + 2.12194440e-4f : lo);
    return x < x0 ? 0.0f : (x > x1 ? HUGE_VALF : (top ? p + p : p));
}

FERRO_FN float ferro_exp_f32(float x) { return ferro_exp2_f32(x, -0.0f); }
FERRO_FN float ferro_expn_f32(float x) { return ferro_expn2_f32(x, -0.0f); }

/* float64's, as float32's for x within [ln DBL_MIN, 709] (unchecked), 2^k in one factor, e^r by
 * Cephes' Pade form 1 + 2 r P / (Q - r P), P and Q of r^2. Only EXPN and tanh call it: the other
 * float64 formulas use libm's exp, in loops that call libm's erf anyway. */
FERRO_FN double ferro_expn_f64(double x) {
    const double magic = 6755399441055744.0; /* 1.5 * 2^52 */
    union { double f; int64_t i; } k, s;
    double r, rr, px, qx;
    k.f = x * 1.4426950408889634073599 + magic;
    s.i = (k.i - 0x4338000000000000LL + 1023) << 52;
    k.f -= magic;
    r = (x - k.f * 6.93145751953125e-1) - k.f * 1.42860682030941723212e-6;
    rr = r * r;
    px = r * ((1.26177193074810590878e-4 * rr + 3.02994407707441961300e-2) * rr + 1.0);
    qx = ((3.00198505138664455042e-6 * rr + 2.52448340349684104192e-3) * rr
          + 2.27265548208155028766e-1) * rr + 2.0;
    return (1.0 + 2.0 * px / (qx - px)) * s.f;
}

/* tanh, Cephes' method: x + x^3 P(x^2) (float32) or x + x^3 P(x^2) / Q(x^2) (float64) for
 * |x| < 0.625, else sign(x) (1 - 2 / (e^2|x| + 1)); +-1 from 10 (22). A rational approximation
 * (Eigen's) was 2.7x faster in float32 but 4.6 ulp off near +-1. */
FERRO_FN float ferro_tanh_f32(float x) {
    const float ax = x < 0.0f ? -x : x, z = x * x;
    const float small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z
                           - 5.37397155531e-2f) * z + 1.33314422036e-1f) * z
                         - 3.33332819422e-1f) * z * x + x;
    const float big = 1.0f - 2.0f / (ferro_expn_f32(2.0f * (ax > 10.0f ? 10.0f : ax)) + 1.0f);
    return ax < 0.625f ? small : (x < 0.0f ? -big : big);
}

FERRO_FN double ferro_tanh_f64(double x) {
    const double ax = x < 0.0 ? -x : x, z = x * x;
    const double p = (-9.64399179425052238628e-1 * z - 9.92877231001918586564e1) * z
                     - 1.61468768441708447952e3;
    const double q = ((z + 1.12811678491632931402e2) * z + 2.23548839060100448583e3) * z
                     + 4.84406305325125486048e3;
    const double small = x + x * z * (p / q);
    const double big = 1.0 - 2.0 / (ferro_expn_f64(2.0 * (ax > 22.0 ? 22.0 : ax)) + 1.0);
    return ax < 0.625 ? small : (x < 0.0 ? -big : big);
}

/* |x| < 0.75: erf's Taylor series. Else 1 - erfc(|x|), erfc(z) = t e^(-z^2 + P(t)) with
 * t = 1 / (1 + z / 2) (Numerical Recipes' erfcc), -z^2 split into an exact head h^2 (h: z's
 * leading 12 bits) and a tail, so that e^ keeps its digits. */
FERRO_FN float ferro_erf_f32(float x) {
    const float z = x < 0.0f ? -x : x, x2 = x * x, zc = z > 10.0f ? 10.0f : z;
    const float t = 1.0f / (1.0f + 0.5f * zc);
    union { float f; int32_t i; } h;
    float q = -1.0f / 685440.0f, p = 0.17087277f, l, e;
    q = q * x2 + 1.0f / 75600.0f;
    q = q * x2 - 1.0f / 9360.0f;
    q = q * x2 + 1.0f / 1320.0f;
    q = q * x2 - 1.0f / 216.0f;
    q = q * x2 + 1.0f / 42.0f;
    q = q * x2 - 1.0f / 10.0f;
    q = q * x2 + 1.0f / 3.0f;
    q = (1.0f - q * x2) * x * 1.12837916709551257f;
    p = p * t - 0.82215223f;
    p = p * t + 1.48851587f;
    p = p * t - 1.13520398f;
    p = p * t + 0.27886807f;
    p = p * t - 0.18628806f;
    p = p * t + 0.09678418f;
    p = p * t + 0.37409196f;
    p = p * t + 1.00002368f;
    p = p * t - 1.26551223f;
    h.f = zc;
    h.i &= (int32_t)0xFFFFF000;
    l = zc - h.f;
    e = 1.0f - t * ferro_exp2_f32(-h.f * h.f, p - (h.f + h.f + l) * l);
    return z < 0.75f ? q : (x < 0.0f ? -e : (x > 0.0f ? e : x)); /* x: NaN stays NaN */
}
#endif

#ifdef __cplusplus
FERRO_FORMULAS(float, , expf, erff, expf)
FERRO_FORMULAS(double, , exp, erf, exp)
#else
FERRO_FORMULAS(float, _f32, ferro_exp_f32, ferro_erf_f32, ferro_expn_f32)
FERRO_FORMULAS(double, _f64, exp, erf, ferro_expn_f64)
#endif

#endif
