/* exp and tanh that the compiler vectorizes, for the CPU kernels' fused loops (kernels.h:
 * tanh-gelu; recurrent_kernels.h: the LSTM and GRU gates).
 *
 * NumPy evaluates tanh with AVX2/AVX-512 code chosen at run time. A loop calling libm's tanhf or
 * tanh (or exp) is not vectorized and runs 10-100x slower than NumPy (16,000 values: tanhf 677 us,
 * tanh 1,324 us, NumPy 6 and 144 us), which made every fused loop with a tanh in it lose to
 * NumPy's chain of passes. These are branch-free (both ranges computed, one selected) so the
 * loops vectorize; the includer compiles them without trapping math (see kernels.h).
 *
 * On x86-64 a loop is worth compiling twice, for the baseline (SSE2) and for AVX2 with FMA:
 * FERRO_CLONED defines both and a dispatcher that picks one at run time (16,000 values:
 * float32 188 us SSE2, 22 us AVX2, NumPy 7 us; float64 762 us SSE2, 28 us AVX2, NumPy 27 us).
 */
#ifndef FERRO_VEC_MATH_H
#define FERRO_VEC_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* exp for the loops: 2^k exp(r), r = y - k ln 2 (ln 2 in two parts), exp(r) by Cephes'
 * polynomial (float32) or Pade form (float64), 2^k built in the exponent bits with k from the
 * round-to-nearest of adding 1.5 * 2^23 (2^52). y is clamped to [-80, 80] ([-700, 700]) so
 * that every result and intermediate is a normal number (one subnormal in a loop made it 5x
 * slower); NaN stays NaN. Within 1-2 ulp of libm inside that range. */
static inline float ferro_vexp_f32(float y) {
    y = y > 80.0f ? 80.0f : (y < -80.0f ? -80.0f : y);
    const float t = y * 1.44269504088896341f + 12582912.0f;
    const float k = t - 12582912.0f;
    int32_t bits;
    float scale;
    memcpy(&bits, &t, sizeof bits);
    bits = (bits - 0x4B400000 + 127) << 23; /* k + 127 is in [47, 207] */
    memcpy(&scale, &bits, sizeof scale);
    const float r = (y - k * 0.693359375f) + k * 2.12194440e-4f;
    const float e = (((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r
                       + 4.1665795894e-2f) * r + 1.6666665459e-1f) * r + 5.0000001201e-1f)
                    * (r * r) + r + 1.0f;
    return e * scale;
}

static inline double ferro_vexp_f64(double y) {
    y = y > 700.0 ? 700.0 : (y < -700.0 ? -700.0 : y);
    const double t = y * 1.4426950408889634073599 + 6755399441055744.0;
    const double k = t - 6755399441055744.0;
    int64_t bits;
    double scale;
    memcpy(&bits, &t, sizeof bits);
    bits = (bits - 0x4338000000000000LL + 1023) << 52; /* k + 1023 is in [13, 2033] */
    memcpy(&scale, &bits, sizeof scale);
    const double r = (y - k * 6.93145751953125e-1) - k * 1.42860682030941723212e-6;
    const double rr = r * r;
    const double px =
        r * ((1.26177193074810590878e-4 * rr + 3.02994407707441961300e-2) * rr + 1.0);
    const double qx = ((3.00198505138664455042e-6 * rr + 2.52448340349684104192e-3) * rr
                       + 2.27265548208155028766e-1) * rr + 2.0;
    return (1.0 + 2.0 * px / (qx - px)) * scale;
}

/* tanh, Cephes' method: x + x^3 P(x^2) (float32) or x + x^3 P(x^2) / Q(x^2) (float64) for
 * |x| < 0.625, else sign(x) (1 - 2 / (exp(2|x|) + 1)). Within 2 ulp of tanh (float32 max
 * relative error 1.3e-7, NumPy's 1.1e-7; float64 within 1 ulp of NumPy's on [-30, 30] and on
 * 1e-300..30); +-1 from 10 (22); NaN stays NaN. A rational approximation (Eigen's) was 2.7x
 * faster in float32 but 4.6 ulp off near +-1. */
static inline float ferro_vtanh_f32(float x) {
    const float ax = fabsf(x);
    const float z = x * x;
    const float small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z
                           - 5.37397155531e-2f) * z + 1.33314422036e-1f) * z
                         - 3.33332819422e-1f) * z * x + x;
    const float big = 1.0f - 2.0f / (ferro_vexp_f32(2.0f * (ax > 10.0f ? 10.0f : ax)) + 1.0f);
    return ax < 0.625f ? small : (x < 0 ? -big : big);
}

static inline double ferro_vtanh_f64(double x) {
    const double ax = fabs(x);
    const double z = x * x;
    const double p = (-9.64399179425052238628e-1 * z - 9.92877231001918586564e1) * z
                     - 1.61468768441708447952e3;
    const double q = ((z + 1.12811678491632931402e2) * z + 2.23548839060100448583e3) * z
                     + 4.84406305325125486048e3;
    const double small = x + x * z * (p / q);
    const double big = 1.0 - 2.0 / (ferro_vexp_f64(2.0 * (ax > 22.0 ? 22.0 : ax)) + 1.0);
    return ax < 0.625 ? small : (x < 0 ? -big : big);
}

/* FERRO_CLONED(NAME, DEF, PARAMS, ARGS): DEF(name, attributes) defines a static function; this
 * defines NAME with parameter list PARAMS (calling with ARGS), on x86-64 as a dispatcher between
 * a baseline and an AVX2+FMA compilation of the same body. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
static int ferro_has_avx2(void) {
    static int has = -1; /* a benign race: every thread stores the same answer */
    if (has < 0) {
        __builtin_cpu_init();
        has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }
    return has;
}
#define FERRO_CLONED(NAME, DEF, PARAMS, ARGS)                                        \
    DEF(NAME##_base, )                                                               \
    DEF(NAME##_avx2, __attribute__((target("avx2,fma"))))                            \
    static void NAME PARAMS { (ferro_has_avx2() ? NAME##_avx2 : NAME##_base) ARGS; }
#else
#define FERRO_CLONED(NAME, DEF, PARAMS, ARGS) DEF(NAME, )
#endif

#endif
