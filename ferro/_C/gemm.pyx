"""ferro's two-core GEMM: ``C = A @ B`` of float32/float64 matrices as a fixed number of
independent parts (column or row blocks of C), the second of two on this module's helper thread
(``matmul``) or runs of a stack on ferro's OpenMP threads (``batched``), each part one call of
the CBLAS gemm of the OpenBLAS NumPy loaded, with OpenBLAS held at one thread meanwhile, or,
for ``matmul``'s float32 products on AVX-512 machines, of ferro's own kernel (sgemm.h, Note
[Own SGEMM] in docs/design.md: on by default, where the BLAS path is off by default).

Note [Two-core GEMM]: after each GEMM it splits over its own threads, OpenBLAS's worker spins
for about 80 ms on the other core, so a step made of GEMMs and elementwise ops keeps the second
core busy spinning while ferro's own two-thread loops and intra-op splits want it. Run as two
parts here, OpenBLAS's worker never runs; the helper spins only briefly between products and
gives way to any thread that wants its core (Note [GEMM helper thread] below).
How many parts a product is cut into depends only on its shape, never on the thread count, so
results are the same bits on one thread and two (each part runs the same call either way).
``matmul`` answers NotImplemented where NumPy must run: no CBLAS found (``set_blas``), too little
work, any operand that is not an exact aligned native-order 2-D float32/float64 ndarray with
one axis contiguous, mixed dtypes, an ``out`` that is not a fresh-looking C-contiguous
writeable array of the result's shape and dtype or that overlaps an operand. ``batched`` runs
a stack of such products (a 1x1 convolution's per-sample GEMMs) the same way, runs of
consecutive samples on the team, and is on whatever the sizes (Note [Pointwise products] in
ferro/ops/conv.py).
"""

cimport numpy as cnp
from libc.stdint cimport int64_t

import os
import threading

from ferro.errors import ArgumentError


class _Walk(threading.local):
    """Note [Nodes that run alone] (ferro/_intraop.py): ``on`` in a thread that runs nodes of a
    parallel backward walk beside other threads (ferro._C.engine sets it)."""
    on = False


walk = _Walk()

cnp.import_array()

cdef extern from *:
    """
    #include <stdint.h>
    #include <stddef.h>
    #include <pthread.h>
    #include <sched.h>
    #include <signal.h>
    #include <stdatomic.h>
    #include <time.h>
    #ifdef _OPENMP
    #include <omp.h>
    #define FERRO_GEMM_THREADS() omp_get_max_threads()
    #else
    #define FERRO_GEMM_THREADS() 1
    #endif
    typedef void (*ferro_gemm64_f32)(int, int, int, int64_t, int64_t, int64_t, float,
                                     const float *, int64_t, const float *, int64_t, float,
                                     float *, int64_t);
    typedef void (*ferro_gemm64_f64)(int, int, int, int64_t, int64_t, int64_t, double,
                                     const double *, int64_t, const double *, int64_t, double,
                                     double *, int64_t);
    typedef void (*ferro_gemm32_f32)(int, int, int, int, int, int, float, const float *, int,
                                     const float *, int, float, float *, int);
    typedef void (*ferro_gemm32_f64)(int, int, int, int, int, int, double, const double *, int,
                                     const double *, int, double, double *, int);
    /* c (m, n) with leading dimension ldc = op(a) @ op(b) + beta c, one CBLAS call: op(a) is a
     * row-major (m, k) with leading dimension lda, or with ta the transpose of one (k, m);
     * likewise b. */
    static inline void ferro_gemm_call(void *fn, int wide, int f64, int ta, int tb, ptrdiff_t m,
                                       ptrdiff_t n, ptrdiff_t k, const char *a, ptrdiff_t lda,
                                       const char *b, ptrdiff_t ldb, int beta, char *c,
                                       ptrdiff_t ldc) {
        const int oa = ta ? 112 : 111, ob = tb ? 112 : 111;
        if (wide && f64)
            ((ferro_gemm64_f64)fn)(101, oa, ob, m, n, k, 1.0, (const double *)a, lda,
                                   (const double *)b, ldb, beta, (double *)c, ldc);
        else if (wide)
            ((ferro_gemm64_f32)fn)(101, oa, ob, m, n, k, 1.0f, (const float *)a, lda,
                                   (const float *)b, ldb, (float)beta, (float *)c, ldc);
        else if (f64)
            ((ferro_gemm32_f64)fn)(101, oa, ob, (int)m, (int)n, (int)k, 1.0, (const double *)a,
                                   (int)lda, (const double *)b, (int)ldb, beta, (double *)c,
                                   (int)ldc);
        else
            ((ferro_gemm32_f32)fn)(101, oa, ob, (int)m, (int)n, (int)k, 1.0f, (const float *)a,
                                   (int)lda, (const float *)b, (int)ldb, (float)beta,
                                   (float *)c, (int)ldc);
    }
    /* One product cut into blocks of C: of columns (rows_split 0) or rows, block edges on
     * multiples of 16 elements. */
    typedef struct {
        void *fn;
        int wide, f64, ta, tb, rows_split, parts;
        ptrdiff_t m, n, k, lda, ldb;
        const char *a, *b;
        char *c;
    } ferro_gemm_job;
    static void ferro_gemm_part(const ferro_gemm_job *g, int p) {
        const ptrdiff_t size = g->f64 ? 8 : 4, extent = g->rows_split ? g->m : g->n;
        ptrdiff_t lo = (extent * p / g->parts) & ~(ptrdiff_t)15;
        ptrdiff_t hi = p == g->parts - 1 ? extent
                                         : (extent * (p + 1) / g->parts) & ~(ptrdiff_t)15;
        ptrdiff_t mm = g->rows_split ? hi - lo : g->m, nn = g->rows_split ? g->n : hi - lo;
        const char *ap = g->a, *bp = g->b;
        char *cp = g->c + (g->rows_split ? lo * g->n : lo) * size;
        if (g->rows_split)
            ap += (g->ta ? lo : lo * g->lda) * size;
        else
            bp += (g->tb ? lo * g->ldb : lo) * size;
        if (mm > 0 && nn > 0)
            ferro_gemm_call(g->fn, g->wide, g->f64, g->ta, g->tb, mm, nn, g->k, ap, g->lda, bp,
                            g->ldb, 0, cp, g->n);
    }
    /* Note [GEMM helper thread]: the second of two parts runs on one helper thread of this
     * module's own, which after each part waits FERRO_HELPER_SPIN_NS for the next, yielding its
     * core to any thread that wants it (sched_yield), before it sleeps on a condition
     * variable: a step's products come tens of microseconds apart, and waking a sleeping
     * thread (ferro's OpenMP team waits passively) cost about 30 us a product. 1 ms, not the
     * 200 us of session 15: an MLP step's update (about 210 us) came between one step's last
     * product and the next one's first, whose helper then woke 60-100 us late. The
     * caller runs the first part, then the second too if the helper has not claimed it by
     * then (asleep, or its core taken by another process), so a product never waits for the
     * helper to be scheduled; a caller finding the helper taken (another thread's product)
     * runs both parts itself. */
    #define FERRO_HELPER_SPIN_NS 1000000L
    static struct {
        pthread_mutex_t lock;
        pthread_cond_t wake;
        atomic_long posted, claimed, done, by_helper, by_caller;
        atomic_int sleeping, busy, started;
        ferro_gemm_job job;
    } ferro_helper = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};
    static inline void ferro_pause(void) {
    #if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
    #endif
    }
    static long ferro_now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec * 1000000000L + ts.tv_nsec;
    }
    /* Whether this thread runs job `want`'s second part (the helper and the caller race). */
    static inline int ferro_claim(long want) {
        long expected = want - 1;
        return atomic_compare_exchange_strong(&ferro_helper.claimed, &expected, want);
    }
    static void *ferro_helper_main(void *unused) {
        sigset_t all;
        long want;
        (void)unused;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, NULL); /* signals go to the interpreter's threads */
        for (want = atomic_load(&ferro_helper.done) + 1;; want++) {
            if (atomic_load(&ferro_helper.posted) < want) {
                long until = ferro_now_ns() + FERRO_HELPER_SPIN_NS, i;
                for (i = 1; atomic_load(&ferro_helper.posted) < want; i++) {
                    if ((i & 15) == 0 && ferro_now_ns() > until)
                        break;
                    sched_yield(); /* the core to any thread that wants it */
                }
                pthread_mutex_lock(&ferro_helper.lock);
                atomic_store(&ferro_helper.sleeping, 1);
                while (atomic_load(&ferro_helper.posted) < want)
                    pthread_cond_wait(&ferro_helper.wake, &ferro_helper.lock);
                atomic_store(&ferro_helper.sleeping, 0);
                pthread_mutex_unlock(&ferro_helper.lock);
            }
            if (ferro_claim(want)) { /* else the caller ran it */
                ferro_gemm_part(&ferro_helper.job, 1);
                atomic_fetch_add(&ferro_helper.by_helper, 1);
                atomic_store(&ferro_helper.done, want);
            }
        }
        return NULL;
    }
    static void ferro_helper_after_fork(void) { /* the child has no helper thread */
        pthread_mutex_init(&ferro_helper.lock, NULL);
        pthread_cond_init(&ferro_helper.wake, NULL);
        atomic_store(&ferro_helper.posted, 0);
        atomic_store(&ferro_helper.claimed, 0);
        atomic_store(&ferro_helper.done, 0);
        atomic_store(&ferro_helper.sleeping, 0);
        atomic_store(&ferro_helper.busy, 0);
        atomic_store(&ferro_helper.started, 0);
        atomic_store(&ferro_helper.by_helper, 0);
        atomic_store(&ferro_helper.by_caller, 0);
    }
    /* Whether the helper runs (started here on first use, by the caller that owns it). */
    static int ferro_helper_ready(void) {
        static int forks_handled = 0;
        pthread_t t;
        pthread_attr_t attr;
        int ok;
        if (atomic_load(&ferro_helper.started))
            return 1;
        if (!forks_handled && pthread_atfork(NULL, NULL, ferro_helper_after_fork) != 0)
            return 0;
        forks_handled = 1;
        if (pthread_attr_init(&attr) != 0)
            return 0;
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        ok = pthread_create(&t, &attr, ferro_helper_main, NULL) == 0;
        pthread_attr_destroy(&attr);
        if (ok)
            atomic_store(&ferro_helper.started, 1);
        return ok;
    }
    /* c (m, n), row-major with leading dimension n, = op(a) @ op(b) in `parts` blocks (1 or
     * 2): the second on the helper thread where `threads` > 1 and the helper is free, else
     * after the first on the caller's. */
    static void ferro_gemm(void *fn, int wide, int f64, int ta, int tb, ptrdiff_t m,
                           ptrdiff_t n, ptrdiff_t k, const char *a, ptrdiff_t lda,
                           const char *b, ptrdiff_t ldb, char *c, int rows_split, int parts,
                           int threads) {
        ferro_gemm_job g = {fn, wide, f64, ta, tb, rows_split, parts, m, n, k, lda, ldb, a, b, c};
        int p, free_ = 0;
        long want;
        if (parts == 2 && threads > 1
                && atomic_compare_exchange_strong(&ferro_helper.busy, &free_, 1)) {
            if (ferro_helper_ready()) {
                ferro_helper.job = g;
                want = atomic_load(&ferro_helper.posted) + 1;
                atomic_store(&ferro_helper.posted, want);
                if (atomic_load(&ferro_helper.sleeping)) {
                    pthread_mutex_lock(&ferro_helper.lock);
                    pthread_cond_signal(&ferro_helper.wake);
                    pthread_mutex_unlock(&ferro_helper.lock);
                }
                ferro_gemm_part(&g, 0);
                if (ferro_claim(want)) { /* the helper has not started it: run it here */
                    ferro_gemm_part(&g, 1);
                    atomic_fetch_add(&ferro_helper.by_caller, 1);
                    atomic_store(&ferro_helper.done, want);
                }
                for (p = 1; atomic_load(&ferro_helper.done) < want; p++)
                    if (p % 4096 == 0) sched_yield(); else ferro_pause();
                atomic_store(&ferro_helper.busy, 0);
                return;
            }
            atomic_store(&ferro_helper.busy, 0);
        }
        for (p = 0; p < parts; p++)
            ferro_gemm_part(&g, p);
    }
    /* The stacked products op(a_i) @ op(b_i), i < n, with x_i = x + i * sx (bytes; 0 for a
     * matrix every product shares), as `parts` runs of consecutive samples on up to `threads`
     * OpenMP threads, one CBLAS call a sample. c_i (m, n2), row-major: at c + i m n2 when not
     * `reduce`, else run p sums its samples' products, in order, into c + p m n2. */
    static void ferro_gemm_batch(void *fn, int wide, int f64, int ta, int tb, ptrdiff_t n,
                                 ptrdiff_t m, ptrdiff_t n2, ptrdiff_t k, const char *a,
                                 ptrdiff_t lda, ptrdiff_t sa, const char *b, ptrdiff_t ldb,
                                 ptrdiff_t sb, char *c, int reduce, int parts, int threads) {
        const ptrdiff_t csize = m * n2 * (f64 ? 8 : 4);
        ptrdiff_t p;
        #pragma omp parallel for num_threads(threads) schedule(static, 1) if (threads > 1)
        for (p = 0; p < parts; p++) {
            ptrdiff_t lo = n * p / parts, hi = n * (p + 1) / parts, i;
            for (i = lo; i < hi; i++)
                ferro_gemm_call(fn, wide, f64, ta, tb, m, n2, k, a + i * sa, lda, b + i * sb,
                                ldb, reduce && i > lo, c + (reduce ? p : i) * csize, n2);
        }
    }
    """
    int FERRO_GEMM_THREADS() nogil
    int ferro_helper_started "atomic_load(&ferro_helper.started)"
    long ferro_helper_posted "atomic_load(&ferro_helper.posted)"
    long ferro_helper_by_helper "atomic_load(&ferro_helper.by_helper)"
    long ferro_helper_by_caller "atomic_load(&ferro_helper.by_caller)"
    void ferro_gemm(void*, int, int, int, int, Py_ssize_t, Py_ssize_t, Py_ssize_t, const char*,
                    Py_ssize_t, const char*, Py_ssize_t, char*, int, int, int) nogil
    void ferro_gemm_batch(void*, int, int, int, int, Py_ssize_t, Py_ssize_t, Py_ssize_t,
                          Py_ssize_t, const char*, Py_ssize_t, Py_ssize_t, const char*,
                          Py_ssize_t, Py_ssize_t, char*, int, int, int) nogil


cdef extern from "sgemm.h":
    int ferro_sgemm_usable()
    void ferro_sgemm(int, int, int, int64_t, int64_t, int64_t, float, const float*, int64_t,
                     const float*, int64_t, float, float*, int64_t) nogil


ctypedef int (*get_threads_t)() noexcept nogil
ctypedef void (*set_threads_t)(int) noexcept nogil

cdef void *_gemm[2]  # sgemm, dgemm: set_blas
cdef bint _wide = False
cdef get_threads_t _get_threads = NULL
cdef set_threads_t _set_threads = NULL
cdef int _active = 0, _saved = 1  # products running; OpenBLAS's count before the first
# The least m * n * k run here, OpenBLAS's own threshold for a split (SMP_THRESHOLD_MIN *
# GEMM_MULTITHREAD_THRESHOLD): below it NumPy's matmul runs one BLAS thread, which wakes no
# worker. From _least to _split the product runs in one part on the caller's thread, OpenBLAS
# held at one thread (its worker stays asleep); from _split in PARTS parts. Tests lower both.
# Off by default (both 2^62: NumPy's matmul runs every product; set_least(1 << 18, 1 << 21)
# turns it on): on, a backward walk's products hold OpenBLAS at one thread, which changes the
# bits of the NumPy GEMMs other walk threads run (Note [Two-core GEMM], session 15).
cdef Py_ssize_t _least = 1 << 62, _split = 1 << 62
# Note [Own SGEMM]: float32 products run ferro's own kernel (sgemm.h) where the CPU has AVX-512
# (FERRO_SGEMM=0 in the environment, or set_own(False), keeps the BLAS's), from _own_least
# multiply-adds (below it NumPy's matmul, whose BLAS runs them on one thread, small-matrix
# kernels), in two parts from _own_split.
cdef bint _own = ferro_sgemm_usable() and os.environ.get("FERRO_SGEMM", "1") != "0"
cdef Py_ssize_t _own_least = 1 << 19, _own_split = 1 << 19
#: OpenBLAS threads a product from this m * n * k (SMP_THRESHOLD_MIN * GEMM_MULTITHREAD_THRESHOLD)
#: on: below it NumPy's matmul runs one BLAS thread (the same bits whatever holds the count).
BLAS_THREADED = 1 << 18
cdef int PARTS = 2


def set_blas(size_t sgemm, size_t dgemm, bint wide, size_t get_threads, size_t set_threads):
    """The CBLAS ``sgemm``/``dgemm`` of the BLAS NumPy uses (``wide``: 64-bit ints) and its
    ``get/set_num_threads``, found by ``ferro.ops.linalg.find_blas`` when it is imported;
    zeros unset them (``matmul`` then answers NotImplemented)."""
    global _wide, _get_threads, _set_threads
    if _active:
        raise ArgumentError("gemm.set_blas: a product is running")
    if not (get_threads and set_threads):
        sgemm = dgemm = get_threads = set_threads = 0
    if not (sgemm and dgemm):  # the thread count alone: hold() still works
        sgemm = dgemm = 0
    _gemm[0], _gemm[1], _wide = <void*>sgemm, <void*>dgemm, wide
    _get_threads, _set_threads = <get_threads_t>get_threads, <set_threads_t>set_threads


def have_blas():
    """Whether :func:`set_blas` gave this module its BLAS's GEMMs."""
    return _gemm[0] != NULL


def hold():
    """OpenBLAS at one thread until the matching :func:`release`: the one count that products,
    ferro._intraop's splits and the parallel backward walk share (each under the GIL), so that
    the count given back at the last release is the one before the first hold."""
    _hold()


def release():
    _release()


def give_back(int n):
    """OpenBLAS's count to ``n``: now when nothing holds it, else at the last release."""
    global _saved
    if _active:
        _saved = n
    elif _set_threads != NULL:
        _set_threads(n)


def helper_stats():
    """Note [GEMM helper thread]: ``(started, products, second parts the helper ran, second
    parts their callers ran)`` since the process (or its fork) began: a two-part product whose
    caller finds the helper free counts once, by whichever thread ran its second part."""
    return (bool(ferro_helper_started), ferro_helper_posted, ferro_helper_by_helper,
            ferro_helper_by_caller)


def set_own(bint on, Py_ssize_t least=-1, Py_ssize_t split=-1):
    """Whether float32 products run ferro's own kernel (Note [Own SGEMM]; only where the CPU
    can: :func:`own_usable`), and from which ``m * n * k`` (``least``) and in parts
    (``split``), -1 keeping each; returns the previous ``(on, least, split)`` (tests and
    benchmarks)."""
    global _own, _own_least, _own_split
    previous = (_own, _own_least, _own_split)
    _own = on and ferro_sgemm_usable()
    _own_least = _own_least if least < 0 else least
    _own_split = _own_split if split < 0 else split
    return previous


def own_usable():
    """Whether this CPU runs ferro's own float32 kernel (AVX-512 F/VL/BW/DQ and FMA)."""
    return bool(ferro_sgemm_usable())


def set_least(Py_ssize_t least, Py_ssize_t split):
    """The least ``m * n * k`` ``matmul`` runs, and runs in parts; returns the previous pair
    (tests and benchmarks change them)."""
    global _least, _split
    previous, _least, _split = (_least, _split), least, split
    return previous


cdef inline int _layout(cnp.ndarray x, int dtype, Py_ssize_t *ld) noexcept:
    # Of x's last two axes (x 2-D or 3-D), 0: row-major with leading dimension ld, 1: the
    # transpose of one, -1: neither (or not an aligned native-order array of dtype).
    cdef int nd = cnp.PyArray_NDIM(x)
    if (cnp.PyArray_TYPE(x) != dtype or not cnp.PyArray_ISNOTSWAPPED(x)
            or not cnp.PyArray_ISALIGNED(x) or nd < 2 or nd > 3):
        return -1
    cdef Py_ssize_t s0 = cnp.PyArray_STRIDES(x)[nd - 2], s1 = cnp.PyArray_STRIDES(x)[nd - 1]
    cdef Py_ssize_t r = cnp.PyArray_DIMS(x)[nd - 2], c = cnp.PyArray_DIMS(x)[nd - 1]
    cdef Py_ssize_t size = cnp.PyArray_ITEMSIZE(x)
    if s1 == size and s0 > 0 and s0 % size == 0 and s0 // size >= c:
        ld[0] = s0 // size
        return 0
    if s0 == size and s1 > 0 and s1 % size == 0 and s1 // size >= r:
        ld[0] = s1 // size
        return 1
    return -1


cdef inline bint _overlap(cnp.ndarray x, char *lo, char *hi) noexcept:
    # whether the bytes x spans meet [lo, hi) (x of any strides, not empty)
    cdef char *p = <char*>cnp.PyArray_DATA(x)
    cdef char *first = p
    cdef char *last = p + cnp.PyArray_ITEMSIZE(x)
    cdef Py_ssize_t d, reach
    for d in range(cnp.PyArray_NDIM(x)):
        reach = (cnp.PyArray_DIMS(x)[d] - 1) * cnp.PyArray_STRIDES(x)[d]
        if reach < 0:
            first += reach
        else:
            last += reach
    return first < hi and lo < last


cdef object _result(object out, int dtype, int nd, cnp.npy_intp *dims, cnp.ndarray x,
                    cnp.ndarray y):
    # The array a product writes: a fresh C-contiguous one of dims (out None), else out where
    # it is a writeable C-contiguous native array of dtype and dims that meets neither operand;
    # None where it is not.
    if out is None:
        return cnp.PyArray_EMPTY(nd, dims, dtype, 0)
    if type(out) is not cnp.ndarray:
        return None
    cdef cnp.ndarray c = <cnp.ndarray>out
    cdef int d
    if (cnp.PyArray_TYPE(c) != dtype or not cnp.PyArray_ISCARRAY(c)
            or not cnp.PyArray_ISNOTSWAPPED(c) or cnp.PyArray_NDIM(c) != nd):
        return None
    for d in range(nd):
        if cnp.PyArray_DIMS(c)[d] != dims[d]:
            return None
    cdef char *lo = <char*>cnp.PyArray_DATA(c)
    cdef char *hi = lo + cnp.PyArray_NBYTES(c)
    return None if _overlap(x, lo, hi) or _overlap(y, lo, hi) else c


cpdef object matmul(object a, object b, object out=None, bint parts=False):
    """``a @ b`` of two matrices as Note [Two-core GEMM] says, into ``out`` or a fresh
    C-contiguous array; NotImplemented where NumPy's matmul must run. With ``parts``, whatever
    the thresholds (:func:`set_least`): in parts wherever the product is wide enough."""
    if type(a) is not cnp.ndarray or type(b) is not cnp.ndarray:
        return NotImplemented
    cdef cnp.ndarray x = <cnp.ndarray>a, y = <cnp.ndarray>b, c
    if cnp.PyArray_NDIM(x) != 2 or cnp.PyArray_NDIM(y) != 2:
        return NotImplemented
    cdef Py_ssize_t m = cnp.PyArray_DIMS(x)[0], k = cnp.PyArray_DIMS(x)[1]
    cdef Py_ssize_t n = cnp.PyArray_DIMS(y)[1], lda = 0, ldb = 0
    cdef int dtype = cnp.PyArray_TYPE(x)
    cdef bint own = _own and dtype == cnp.NPY_FLOAT32  # Note [Own SGEMM]
    cdef bint small = m * n * k < (_own_least if own else _least) and not parts
    if (cnp.PyArray_DIMS(y)[0] != k or m < 2 or n < 2 or k < 2 or small
            or (dtype != cnp.NPY_FLOAT32 and dtype != cnp.NPY_FLOAT64)
            or (_gemm[0] == NULL and not own)):
        return NotImplemented
    cdef int ta = _layout(x, dtype, &lda), tb = _layout(y, dtype, &ldb)
    if ta < 0 or tb < 0 or (not _wide and not own and max(m, n, k, lda, ldb) >= 1 << 31):
        return NotImplemented
    cdef cnp.npy_intp dims[2]
    dims[0], dims[1] = m, n
    r = _result(out, dtype, 2, dims, x, y)
    if r is None:
        return NotImplemented
    c = <cnp.ndarray>r
    cdef int f64 = dtype == cnp.NPY_FLOAT64, threads = FERRO_GEMM_THREADS()
    # rows when op(a) is the larger operand: each part then reads half of it
    cdef int rows = m > n
    cdef bint broad = (m if rows else n) >= 32 * PARTS
    cdef int cut = PARTS if broad and (parts or m * n * k >= (_own_split if own else _split)) else 1
    threads = 1 if threads < 1 or cut == 1 else min(threads, cut)
    if walk.on:  # a parallel walk's threads are the parallelism: both parts on this one
        threads = 1
    cdef void *fn = <void*>ferro_sgemm if own else _gemm[f64]
    if not own:
        _hold()
    with nogil:
        ferro_gemm(fn, own or _wide, f64, ta, tb, m, n, k, <const char*>cnp.PyArray_DATA(x),
                   lda, <const char*>cnp.PyArray_DATA(y), ldb, <char*>cnp.PyArray_DATA(c),
                   rows, cut, threads)
    if not own:
        _release()
    return c


cpdef object batched(object a, object b, object out=None, bint reduce=False):
    """The stacked products ``a[i] @ b[i]`` (``a`` or ``b`` 3-D, the other 3-D with the same
    length or a 2-D matrix every product shares; of each 3-D operand, the last two axes laid out
    as :func:`matmul` takes a matrix) on ferro's team, runs of consecutive samples in parts, one
    one-thread CBLAS call a sample (Note [Two-core GEMM]): into ``out`` (a C-contiguous ``(n, m,
    p)`` array that meets no operand) or a fresh one; with ``reduce``, their sum ``(m, p)``,
    each of ``min(n, 2)`` fixed runs summed in order and then the runs (the same bits on any
    number of threads). NotImplemented where NumPy must run (as :func:`matmul`, and for an
    empty stack or product)."""
    if type(a) is not cnp.ndarray or type(b) is not cnp.ndarray or _gemm[0] == NULL:
        return NotImplemented
    cdef cnp.ndarray x = <cnp.ndarray>a, y = <cnp.ndarray>b, c
    cdef int ndx = cnp.PyArray_NDIM(x), ndy = cnp.PyArray_NDIM(y), dtype = cnp.PyArray_TYPE(x)
    if ndx < 2 or ndy < 2 or ndx > 3 or ndy > 3 or ndx + ndy < 5:
        return NotImplemented
    cdef Py_ssize_t n = cnp.PyArray_DIMS(x if ndx == 3 else y)[0]
    cdef Py_ssize_t m = cnp.PyArray_DIMS(x)[ndx - 2], k = cnp.PyArray_DIMS(x)[ndx - 1]
    cdef Py_ssize_t p = cnp.PyArray_DIMS(y)[ndy - 1], lda = 0, ldb = 0
    cdef Py_ssize_t sa = cnp.PyArray_STRIDES(x)[0] if ndx == 3 else 0
    cdef Py_ssize_t sb = cnp.PyArray_STRIDES(y)[0] if ndy == 3 else 0
    cdef bint lengths = ndx == 2 or ndy == 2 or cnp.PyArray_DIMS(y)[0] == n
    if (cnp.PyArray_DIMS(y)[ndy - 2] != k or not lengths or n < 1 or m < 1 or p < 1 or k < 1
            or sa < 0 or sb < 0 or (dtype != cnp.NPY_FLOAT32 and dtype != cnp.NPY_FLOAT64)):
        return NotImplemented
    cdef int ta = _layout(x, dtype, &lda), tb = _layout(y, dtype, &ldb)
    if ta < 0 or tb < 0 or (not _wide and max(m, p, k, lda, ldb) >= 1 << 31):
        return NotImplemented
    cdef int parts = <int>min(n, PARTS if reduce else FERRO_GEMM_THREADS())
    cdef cnp.npy_intp dims[3]
    dims[0], dims[1], dims[2] = (parts if reduce else n), m, p
    r = _result(None if reduce else out, dtype, 3, dims, x, y)
    if r is None:
        return NotImplemented
    c = <cnp.ndarray>r
    cdef int f64 = dtype == cnp.NPY_FLOAT64, threads = FERRO_GEMM_THREADS()
    threads = 1 if threads < 1 else min(threads, parts)
    _hold()
    with nogil:
        ferro_gemm_batch(_gemm[f64], _wide, f64, ta, tb, n, m, p, k,
                         <const char*>cnp.PyArray_DATA(x), lda, sa,
                         <const char*>cnp.PyArray_DATA(y), ldb, sb, <char*>cnp.PyArray_DATA(c),
                         reduce, parts, threads)
    _release()
    if not reduce:
        return c
    for i in range(1, parts):
        c[0] += c[i]
    return c[0]


cdef inline void _hold() noexcept:
    # OpenBLAS at one thread while any product runs (with the GIL: the count is process-wide)
    global _active, _saved
    if _active == 0 and _get_threads != NULL:
        _saved = _get_threads()
        if _saved != 1:
            _set_threads(1)
    _active += 1


cdef inline void _release() noexcept:
    global _active
    _active -= 1
    if _active == 0 and _saved != 1 and _set_threads != NULL:
        _set_threads(_saved)
