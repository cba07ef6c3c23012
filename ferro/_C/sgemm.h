/* ferro's float32 GEMM for AVX-512 machines (Note [Own SGEMM] in docs/design.md).
 *
 * C (m x n, row-major, leading dimension ldc) = alpha op(A) op(B) + beta C, with CBLAS's
 * row-major signature so that ferro/_C/gemm.pyx runs it where it runs the BLAS's sgemm: op(A)
 * is a row-major (m, k) with leading dimension lda, or with ta its transpose given as a (k, m);
 * likewise B. The loops are the usual blocked ones (Goto, BLIS): k in equal blocks of at most
 * FERRO_SG_KC (multiples of 8; they depend on k alone); for each, A's rows packed in panels of FERRO_SG_MR rows (k-major), B's columns in panels of
 * FERRO_SG_NR columns, each packed when first used while the next one's source is prefetched;
 * the micro-kernel keeps an 8 x 48 block of C in 24 zmm registers, three loads of B and eight
 * broadcasts of A per k (embedded broadcasts), and stores it with masks at the edges.
 *
 * Each element of C is the same sum in the same order whatever part of C a call computes (k in
 * order within a block, the blocks added in order): the two-part split of gemm.pyx gives the
 * bits of one call, on one thread or two, and so does any row or column block of the product.
 *
 * ferro_sgemm_usable() says whether the CPU runs it (AVX-512 F/VL/BW/DQ); elsewhere, and on
 * compilers without GCC's target attribute, gemm.pyx keeps the BLAS's sgemm. Packing buffers
 * are per thread (a pthread key, freed when the thread ends); where one cannot be had, a plain
 * loop computes the product (slow, never wrong).
 */
#ifndef FERRO_SGEMM_H
#define FERRO_SGEMM_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define FERRO_SG 1
#include <immintrin.h>
#include <pthread.h>
#define FERRO_SG_TARGET __attribute__((target("avx2,fma,avx512f,avx512vl,avx512bw,avx512dq")))
#define FERRO_SG_INLINE static inline __attribute__((always_inline)) FERRO_SG_TARGET
#else
#define FERRO_SG 0
#endif

#define FERRO_SG_MR 8
#define FERRO_SG_NR 48
#define FERRO_SG_KC 256
#define FERRO_SG_MC 256
#define FERRO_SG_NC 1024
#define FERRO_SG_FLOATS (FERRO_SG_MC * FERRO_SG_KC + (FERRO_SG_NC + FERRO_SG_NR) * FERRO_SG_KC)

static int ferro_sgemm_usable(void) {
#if FERRO_SG
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")
           && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq")
           && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

/* The plain loop: where no packing buffer can be had (and the reference the tests compare). */
static void ferro_sgemm_plain(int ta, int tb, ptrdiff_t m, ptrdiff_t n, ptrdiff_t k,
                              float alpha, const float *a, ptrdiff_t lda, const float *b,
                              ptrdiff_t ldb, float beta, float *c, ptrdiff_t ldc) {
    ptrdiff_t i, j, p;
    for (i = 0; i < m; i++)
        for (j = 0; j < n; j++) {
            float s = 0.0f;
            for (p = 0; p < k; p++)
                s += (ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
            c[i * ldc + j] = alpha * s + (beta == 0.0f ? 0.0f : beta * c[i * ldc + j]);
        }
}

#if FERRO_SG
static pthread_key_t ferro_sg_key;
static pthread_once_t ferro_sg_once = PTHREAD_ONCE_INIT;
static int ferro_sg_keyed = 0;
static void ferro_sg_make_key(void) { ferro_sg_keyed = pthread_key_create(&ferro_sg_key, free) == 0; }

/* This thread's packing buffer (FERRO_SG_FLOATS floats, 64-byte aligned), or NULL. */
static float *ferro_sg_buffer(void) {
    float *buf;
    pthread_once(&ferro_sg_once, ferro_sg_make_key);
    if (!ferro_sg_keyed)
        return NULL;
    buf = (float *)pthread_getspecific(ferro_sg_key);
    if (buf == NULL) {
        buf = (float *)aligned_alloc(64, sizeof(float) * FERRO_SG_FLOATS);
        if (buf != NULL && pthread_setspecific(ferro_sg_key, buf) != 0) {
            free(buf);
            buf = NULL;
        }
    }
    return buf;
}

FERRO_SG_INLINE __mmask16 ferro_sg_mask(ptrdiff_t n) {
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

/* An 8 x 8 block at src (rows ld apart) transposed to dst (rows dld apart). */
FERRO_SG_INLINE void ferro_sg_t8(const float *src, ptrdiff_t ld, float *dst, ptrdiff_t dld) {
    __m256 r0 = _mm256_loadu_ps(src), r1 = _mm256_loadu_ps(src + ld);
    __m256 r2 = _mm256_loadu_ps(src + 2 * ld), r3 = _mm256_loadu_ps(src + 3 * ld);
    __m256 r4 = _mm256_loadu_ps(src + 4 * ld), r5 = _mm256_loadu_ps(src + 5 * ld);
    __m256 r6 = _mm256_loadu_ps(src + 6 * ld), r7 = _mm256_loadu_ps(src + 7 * ld);
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
    __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    _mm256_storeu_ps(dst, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps(dst + dld, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps(dst + 2 * dld, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps(dst + 3 * dld, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps(dst + 4 * dld, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps(dst + 5 * dld, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps(dst + 6 * dld, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps(dst + 7 * dld, _mm256_permute2f128_ps(u3, u7, 0x31));
}

/* Packs X(r, q), r < rows, q < kc, into panels of w (MR or NR) r's: out[r / w][q][r % w], zeros
 * past rows. X(r, q) = x[q * ld + r] when r_contig, else x[r * ld + q]. */
static FERRO_SG_TARGET void ferro_sg_pack(int r_contig, const float *x, ptrdiff_t ld,
                                          ptrdiff_t rows, ptrdiff_t kc, int w, float *out) {
    ptrdiff_t p, q, j, jj;
    for (p = 0; p < rows; p += w) {
        const ptrdiff_t width = rows - p < w ? rows - p : w;
        float *o = out + p * kc;
        if (r_contig) {
            for (q = 0; q < kc; q++) {
                const float *s = x + q * ld + p;
                float *d = o + q * w;
                for (j = 0; j < w; j += 16) /* the panel's w lanes: X's, then zeros */
                    _mm512_mask_storeu_ps(d + j, ferro_sg_mask(w - j),
                                          _mm512_maskz_loadu_ps(ferro_sg_mask(width - j), s + j));
            }
        } else {
            for (j = 0; j + 8 <= width; j += 8) {
                const float *s = x + (p + j) * ld;
                for (q = 0; q + 8 <= kc; q += 8)
                    ferro_sg_t8(s + q, ld, o + q * w + j, w);
                for (; q < kc; q++)
                    for (jj = 0; jj < 8; jj++)
                        o[q * w + j + jj] = s[jj * ld + q];
            }
            for (q = 0; q < kc; q++)
                for (jj = j; jj < w; jj++)
                    o[q * w + jj] = jj < width ? x[(p + jj) * ld + q] : 0.0f;
        }
    }
}

#define FERRO_SG_ROW(r)                                                                       \
    __m512 c##r##0 = _mm512_setzero_ps(), c##r##1 = _mm512_setzero_ps(),                      \
           c##r##2 = _mm512_setzero_ps();
#define FERRO_SG_FMA(r)                                                                       \
    {                                                                                         \
        const __m512 a_ = _mm512_set1_ps(ap[r]);                                              \
        c##r##0 = _mm512_fmadd_ps(a_, b0, c##r##0);                                           \
        c##r##1 = _mm512_fmadd_ps(a_, b1, c##r##1);                                           \
        c##r##2 = _mm512_fmadd_ps(a_, b2, c##r##2);                                           \
    }
/* Row r of the block into C: alpha acc (+ beta C when the first k block and beta != 0, + C
 * after it: `add`). */
#define FERRO_SG_PUT(r, v, off, msk)                                                          \
    {                                                                                         \
        float *q_ = cr + (off);                                                               \
        __m512 x_ = _mm512_mul_ps(va, v);                                                     \
        if (add)                                                                              \
            x_ = _mm512_add_ps(x_, _mm512_maskz_loadu_ps(msk, q_));                           \
        else if (scale)                                                                       \
            x_ = _mm512_add_ps(x_, _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(msk, q_)));        \
        _mm512_mask_storeu_ps(q_, msk, x_);                                                   \
    }
#define FERRO_SG_STORE(r)                                                                     \
    if (r < mr) {                                                                             \
        float *cr = c + r * ldc;                                                              \
        FERRO_SG_PUT(r, c##r##0, 0, m0)                                                       \
        FERRO_SG_PUT(r, c##r##1, 16, m1)                                                      \
        FERRO_SG_PUT(r, c##r##2, 32, m2)                                                      \
    }

/* The 8 x 48 block of C at c (mr rows, nr columns of it stored) from kc steps of packed panels
 * ap (kc x 8) and bp (kc x 48). add: C += alpha acc; else C = alpha acc (+ beta C if scale). */
static FERRO_SG_TARGET void ferro_sg_kernel(ptrdiff_t kc, const float *ap, const float *bp,
                                            float *c, ptrdiff_t ldc, int mr, int nr, int add,
                                            int scale, float alpha, float beta) {
    ptrdiff_t q;
    FERRO_SG_ROW(0) FERRO_SG_ROW(1) FERRO_SG_ROW(2) FERRO_SG_ROW(3)
    FERRO_SG_ROW(4) FERRO_SG_ROW(5) FERRO_SG_ROW(6) FERRO_SG_ROW(7)
    for (q = 0; q < kc; q++) {
        const __m512 b0 = _mm512_loadu_ps(bp), b1 = _mm512_loadu_ps(bp + 16);
        const __m512 b2 = _mm512_loadu_ps(bp + 32);
        FERRO_SG_FMA(0) FERRO_SG_FMA(1) FERRO_SG_FMA(2) FERRO_SG_FMA(3)
        FERRO_SG_FMA(4) FERRO_SG_FMA(5) FERRO_SG_FMA(6) FERRO_SG_FMA(7)
        ap += FERRO_SG_MR;
        bp += FERRO_SG_NR;
    }
    {
        const __mmask16 m0 = ferro_sg_mask(nr), m1 = ferro_sg_mask(nr - 16);
        const __mmask16 m2 = ferro_sg_mask(nr - 32);
        const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
        FERRO_SG_STORE(0) FERRO_SG_STORE(1) FERRO_SG_STORE(2) FERRO_SG_STORE(3)
        FERRO_SG_STORE(4) FERRO_SG_STORE(5) FERRO_SG_STORE(6) FERRO_SG_STORE(7)
    }
}

static FERRO_SG_TARGET void ferro_sg_prefetch(int tb, const float *src, ptrdiff_t ldb,
                                              ptrdiff_t cols, ptrdiff_t kc) {
    /* the source of B's next panel (cols columns from src) towards L2 */
    ptrdiff_t j, q;
    if (tb) {
        for (j = 0; j < cols; j++)
            for (q = 0; q < kc; q += 16)
                _mm_prefetch((const char *)(src + j * ldb + q), _MM_HINT_T1);
    } else {
        for (q = 0; q < kc; q++)
            for (j = 0; j < cols; j += 16)
                _mm_prefetch((const char *)(src + q * ldb + j), _MM_HINT_T1);
    }
}

static FERRO_SG_TARGET void ferro_sg_blocked(int ta, int tb, ptrdiff_t m, ptrdiff_t n,
                                             ptrdiff_t k, float alpha, const float *a,
                                             ptrdiff_t lda, const float *b, ptrdiff_t ldb,
                                             float beta, float *c, ptrdiff_t ldc, float *buf) {
    float *abuf = buf, *bbuf = buf + FERRO_SG_MC * FERRO_SG_KC;
    /* k in equal blocks (multiples of 8) of at most KC: no short last block to pay C's passes */
    const ptrdiff_t blocks = (k + FERRO_SG_KC - 1) / FERRO_SG_KC;
    const ptrdiff_t kstep = ((k + blocks - 1) / blocks + 7) & ~(ptrdiff_t)7;
    ptrdiff_t jc, pc, ic, jr, ir;
    for (jc = 0; jc < n; jc += FERRO_SG_NC) {
        const ptrdiff_t nc = n - jc < FERRO_SG_NC ? n - jc : FERRO_SG_NC;
        for (pc = 0; pc < k; pc += kstep) {
            const ptrdiff_t kc = k - pc < kstep ? k - pc : kstep;
            const float *bsrc = tb ? b + jc * ldb + pc : b + pc * ldb + jc;
            for (ic = 0; ic < m; ic += FERRO_SG_MC) {
                const ptrdiff_t mc = m - ic < FERRO_SG_MC ? m - ic : FERRO_SG_MC;
                ferro_sg_pack(ta, ta ? a + pc * lda + ic : a + ic * lda + pc, lda, mc, kc,
                              FERRO_SG_MR, abuf);
                for (jr = 0; jr < nc; jr += FERRO_SG_NR) {
                    const ptrdiff_t nr = nc - jr < FERRO_SG_NR ? nc - jr : FERRO_SG_NR;
                    if (ic == 0) { /* B's panel packed once, when first used */
                        ferro_sg_pack(!tb, tb ? bsrc + jr * ldb : bsrc + jr, ldb, nr, kc,
                                      FERRO_SG_NR, bbuf + jr * kc);
                        if (jr + FERRO_SG_NR < nc)
                            ferro_sg_prefetch(tb, tb ? bsrc + (jr + FERRO_SG_NR) * ldb
                                                     : bsrc + jr + FERRO_SG_NR,
                                              ldb, nc - jr - FERRO_SG_NR < FERRO_SG_NR
                                                       ? nc - jr - FERRO_SG_NR : FERRO_SG_NR,
                                              kc);
                    }
                    for (ir = 0; ir < mc; ir += FERRO_SG_MR)
                        ferro_sg_kernel(kc, abuf + ir * kc, bbuf + jr * kc,
                                        c + (ic + ir) * ldc + jc + jr, ldc,
                                        (int)(mc - ir < FERRO_SG_MR ? mc - ir : FERRO_SG_MR),
                                        (int)nr, pc > 0, pc == 0 && beta != 0.0f, alpha, beta);
                }
            }
        }
    }
}
#endif

/* CBLAS's row-major sgemm with 64-bit ints (order 101; trans 111 no, 112 yes): what gemm.pyx
 * calls through its `wide` function pointer. Only where ferro_sgemm_usable(). */
static void ferro_sgemm(int order, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                        float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                        float beta, float *c, int64_t ldc) {
    const int ta = trans_a == 112, tb = trans_b == 112;
    (void)order;
    if (m <= 0 || n <= 0)
        return;
#if FERRO_SG
    if (k > 0) {
        float *buf = ferro_sg_buffer();
        if (buf != NULL) {
            ferro_sg_blocked(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, buf);
            return;
        }
    }
#endif
    ferro_sgemm_plain(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

#endif
