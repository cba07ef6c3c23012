/* tanh that the compiler vectorizes, for the CPU kernels' fused loops (kernels.h: tanh-gelu;
 * recurrent_kernels.h: the LSTM and GRU gates).
 *
 * NumPy evaluates tanh with AVX2/AVX-512 code chosen at run time. A loop calling libm's tanhf or
 * tanh is not vectorized and runs 10-100x slower than NumPy (16,000 values: tanhf 677 us,
 * tanh 1,324 us, NumPy 6 and 144 us), which made every fused loop with a tanh in it lose to
 * NumPy's chain of passes. These are branch-free (both ranges computed, one selected) so the
 * loops vectorize; the includer compiles them without trapping math (see kernels.h).
 *
 * On x86-64 a loop is worth compiling twice, for the baseline (SSE2) and for AVX2 with FMA:
 * FERRO_CLONED defines both and a dispatcher that picks one at run time (16,000 values:
 * float32 49 us SSE2, 8 us AVX2; float64 762 us SSE2, 28 us AVX2, NumPy 27 us).
 */
#ifndef FERRO_VEC_MATH_H
#define FERRO_VEC_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* float32: Eigen's rational approximation on [-7.9, 7.9] (tanh rounds to +-1 beyond);
 * |error| <= 3e-7. NaN passes through the clamp. */
static inline float ferro_vtanh_f32(float x) {
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

/* float64, Cephes' method: x + x^3 P(x^2) / Q(x^2) for |x| < 0.625, else
 * sign(x) (1 - 2 / (exp(2|x|) + 1)) with exp(y) = 2^k exp(r), r = y - k ln 2 (ln 2 in two
 * parts), exp(r) by Cephes' Pade form and 2^k built in the exponent bits (k from the
 * round-to-nearest of adding 1.5 * 2^52). Within 1 ulp of NumPy's tanh on [-30, 30] and on
 * 1e-300..30; +-1 beyond 22; NaN stays NaN. */
static inline double ferro_vtanh_f64(double x) {
    const double ax = fabs(x);
    const double z = x * x;
    const double p = (-9.64399179425052238628e-1 * z - 9.92877231001918586564e1) * z
                     - 1.61468768441708447952e3;
    const double q = ((z + 1.12811678491632931402e2) * z + 2.23548839060100448583e3) * z
                     + 4.84406305325125486048e3;
    const double small = x + x * z * (p / q);
    const double y = 2.0 * (ax > 22.0 ? 22.0 : ax);
    const double t = y * 1.4426950408889634073599 + 6755399441055744.0;
    const double k = t - 6755399441055744.0;
    int64_t bits;
    double scale;
    memcpy(&bits, &t, sizeof bits);
    bits = (bits - 0x4338000000000000LL + 1023) << 52;
    memcpy(&scale, &bits, sizeof scale);
    const double r = (y - k * 6.93145751953125e-1) - k * 1.42860682030941723212e-6;
    const double rr = r * r;
    const double px =
        r * ((1.26177193074810590878e-4 * rr + 3.02994407707441961300e-2) * rr + 1.0);
    const double qx = ((3.00198505138664455042e-6 * rr + 2.52448340349684104192e-3) * rr
                       + 2.27265548208155028766e-1) * rr + 2.0;
    const double big = 1.0 - 2.0 / ((1.0 + 2.0 * px / (qx - px)) * scale + 1.0);
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
