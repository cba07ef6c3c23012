# cython: language_level=3
"""A caching allocator for large NumPy buffers (issue 16 item 3).

Note [Caching allocator]. A 40 MB float32 output that NumPy allocates fresh costs a page fault
per 4 KiB page on first touch: glibc serves blocks above its mmap threshold (at most 32 MiB)
with a new mmap and unmaps them on free, so every large temporary of every op and of backward
pays that again. Measured on the 2-core machine, a fresh 40 MB copy took 12.8 ms against 3.3 ms
into an existing buffer, and about half of ``(a*b + c).sum()`` fwd+bwd on 10M floats was page
faults. This handler (NumPy's ``PyDataMem_SetHandler``, installed by ``ferro/__init__.py`` in the
importing context unless ``FERRO_CACHING_ALLOCATOR=0``) keeps freed blocks of at least
``THRESHOLD`` bytes (1 MiB), up to a total of ``limit`` bytes (1/8 of the memory, 2 GiB at
most), and hands one back for a request it fits (not more than 1/4 larger than asked); a full
cache (64 blocks, or the limit) drops the blocks it has held longest for the one freed, so that
sizes a program no longer asks for do not fill it for good (session 16: they did). Smaller
blocks go to the handler that was current before (NumPy's default, with its small-block cache);
a block larger than the limit is freed. Fresh large blocks are rounded up to 1/8 of their power
of two (so slightly different sizes share blocks) and advised as huge pages, as NumPy's own
handler does.

Every block of 1 KiB or more starts at a multiple of 64 bytes (a cache line, an AVX-512 vector;
PyTorch aligns its CPU tensors the same way), ``calloc``'s too (a memset then zeroes it where
glibc's calloc could skip fresh pages). NumPy's default allocator gives 16:
``np.multiply(a, 1.0, out=a)`` on 100K float32 took 4.4-4.5 us where ``a`` was 32- or 64-byte
aligned and 5.8-6.1 us where it was 16 or 48 past a multiple of 64, so which ferro tensor got
which alignment decided bench_inplace's ``mul_`` ratio (1.29 in two runs).

The handler serves every NumPy array allocated in that context (and the contexts copied from
it), not only ferro's: cached blocks stay resident, so a program that needs the memory back
calls :func:`empty_cache` or lowers :func:`set_cache_limit`.

The handler is C, under one mutex (NumPy may allocate without the GIL). A block is cached with
``malloc_usable_size`` as its capacity, so a block ever reallocated or freed with a size
NumPy did not allocate is never handed out for more than it holds. :func:`empty_cache` frees
every cached block; :func:`cache_info` reports the counters.
"""

from libc.stddef cimport size_t

cimport numpy as cnp

cnp.import_array()

cdef extern from *:
    """
    #include <stdlib.h>
    #include <string.h>
    #include <malloc.h>
    #include <pthread.h>
    #include <sys/mman.h>

    #define FERRO_CACHE_SLOTS 64
    #define FERRO_CACHE_THRESHOLD ((size_t)1 << 20)
    #define FERRO_ALIGN 64
    #define FERRO_ALIGN_MIN ((size_t)1024) /* NumPy's own small-block cache serves below */

    typedef struct {
        void *ptr[FERRO_CACHE_SLOTS];
        size_t cap[FERRO_CACHE_SLOTS];
        int n;
        size_t bytes, limit;
        size_t hits, misses;
        pthread_mutex_t lock;
    } ferro_cache_t;

    static ferro_cache_t ferro_cache = {{0}, {0}, 0, 0, (size_t)1 << 31, 0, 0,
                                        PTHREAD_MUTEX_INITIALIZER};

    /* NumPy's default allocator, which keeps serving blocks below the threshold (its own
       small-block cache included); set by install() before the handler is installed. */
    static PyDataMemAllocator ferro_small;

    static int ferro_set_small(PyObject *capsule) {
        PyDataMem_Handler *h = (PyDataMem_Handler *)PyCapsule_GetPointer(capsule, "mem_handler");
        if (h == NULL) return -1;
        ferro_small = h->allocator;
        return 0;
    }

    static size_t ferro_round(size_t size) {
        size_t step = 1;
        while ((step << 4) <= size) step <<= 1;  /* step = 2^(floor(log2 size) - 3) */
        return (size + step - 1) / step * step;
    }

    static void ferro_drop(int i) {  /* slot i out (lock held), the rest in order: oldest first */
        ferro_cache.bytes -= ferro_cache.cap[i];
        ferro_cache.n--;
        memmove(ferro_cache.ptr + i, ferro_cache.ptr + i + 1, (ferro_cache.n - i) * sizeof(void *));
        memmove(ferro_cache.cap + i, ferro_cache.cap + i + 1, (ferro_cache.n - i) * sizeof(size_t));
    }
    static void *ferro_take(size_t size) {
        /* The smallest cached block that holds size and is at most 1/4 larger. */
        int i, best = -1;
        void *p = NULL;
        pthread_mutex_lock(&ferro_cache.lock);
        for (i = 0; i < ferro_cache.n; i++) {
            size_t c = ferro_cache.cap[i];
            if (c >= size && c - size <= size / 4 && (best < 0 || c < ferro_cache.cap[best]))
                best = i;
        }
        if (best >= 0) {
            p = ferro_cache.ptr[best];
            ferro_drop(best);
            ferro_cache.hits++;
        } else {
            ferro_cache.misses++;
        }
        pthread_mutex_unlock(&ferro_cache.lock);
        return p;
    }

    /* A malloc'ed block (free and realloc take it) whose address is a multiple of 64. */
    static void *ferro_aligned(size_t size) {
        void *p = NULL;
        return posix_memalign(&p, FERRO_ALIGN, size ? size : 1) == 0 ? p : NULL;
    }

    static void *ferro_fresh(size_t size) {
        void *p = ferro_aligned(ferro_round(size));
    #ifdef MADV_HUGEPAGE
        if (p != NULL) {
            size_t page = 4096, a = ((size_t)p + page - 1) & ~(page - 1);
            size_t end = ((size_t)p + size) & ~(page - 1);
            if (end > a) madvise((void *)a, end - a, MADV_HUGEPAGE);
        }
    #endif
        return p;
    }

    static void *ferro_malloc(void *ctx, size_t size) {
        void *p;
        if (size < FERRO_ALIGN_MIN) return ferro_small.malloc(ferro_small.ctx, size);
        if (size < FERRO_CACHE_THRESHOLD) return ferro_aligned(size);
        p = ferro_take(size);
        return p != NULL ? p : ferro_fresh(size);
    }

    static void *ferro_calloc(void *ctx, size_t nelem, size_t elsize) {
        size_t size = nelem * elsize;
        void *p;
        if (elsize != 0 && size / elsize != nelem) return NULL;
        if (size < FERRO_ALIGN_MIN) return ferro_small.calloc(ferro_small.ctx, nelem, elsize);
        p = size < FERRO_CACHE_THRESHOLD ? ferro_aligned(size) : ferro_take(size);
        if (p == NULL && size >= FERRO_CACHE_THRESHOLD) p = ferro_fresh(size);
        if (p != NULL) memset(p, 0, size);
        return p;
    }

    static void *ferro_realloc(void *ctx, void *ptr, size_t new_size) {
        /* Every block here is a malloc'ed block (posix_memalign's and NumPy's default
           allocator's are too): realloc works on it (the new block may lose the 64-byte
           alignment), and the new one is freed later with its own size (checked against
           malloc_usable_size before caching). */
        return ferro_small.realloc(ferro_small.ctx, ptr, new_size);
    }

    static void ferro_free(void *ctx, void *ptr, size_t size) {
        size_t cap;
        if (ptr == NULL) return;
        if (size < FERRO_ALIGN_MIN) {
            ferro_small.free(ferro_small.ctx, ptr, size);
            return;
        }
        if (size < FERRO_CACHE_THRESHOLD) {
            free(ptr);
            return;
        }
        {
            cap = malloc_usable_size(ptr);
            pthread_mutex_lock(&ferro_cache.lock);
            while (cap >= size && cap <= ferro_cache.limit && ferro_cache.n > 0 && (ferro_cache.n
                   == FERRO_CACHE_SLOTS || ferro_cache.bytes + cap > ferro_cache.limit)) {
                free(ferro_cache.ptr[0]);  /* full: the block cached longest makes room */
                ferro_drop(0);
            }
            if (cap >= size && ferro_cache.n < FERRO_CACHE_SLOTS
                    && ferro_cache.bytes + cap <= ferro_cache.limit) {
                ferro_cache.ptr[ferro_cache.n] = ptr;
                ferro_cache.cap[ferro_cache.n] = cap;
                ferro_cache.n++;
                ferro_cache.bytes += cap;
                ptr = NULL;
            }
            pthread_mutex_unlock(&ferro_cache.lock);
        }
        free(ptr);
    }

    static size_t ferro_empty_cache(void) {
        int i;
        size_t freed;
        pthread_mutex_lock(&ferro_cache.lock);
        for (i = 0; i < ferro_cache.n; i++) free(ferro_cache.ptr[i]);
        freed = ferro_cache.bytes;
        ferro_cache.n = 0;
        ferro_cache.bytes = 0;
        pthread_mutex_unlock(&ferro_cache.lock);
        return freed;
    }

    static size_t ferro_set_limit(size_t limit) {
        size_t prev;
        pthread_mutex_lock(&ferro_cache.lock);
        prev = ferro_cache.limit;
        ferro_cache.limit = limit;
        pthread_mutex_unlock(&ferro_cache.lock);
        return prev;
    }

    /* A fork while another thread held the lock would leave the child's copy locked forever;
       the child starts with a fresh one (the blocks it inherited stay valid in its copy). */
    static void ferro_after_fork_child(void) {
        pthread_mutex_init(&ferro_cache.lock, NULL);
    }

    static int ferro_atfork_registered = 0;

    static int ferro_register_atfork(void) {
        if (!ferro_atfork_registered && pthread_atfork(NULL, NULL, ferro_after_fork_child) == 0)
            ferro_atfork_registered = 1;
        return 0;
    }

    /* glibc's malloc thresholds, fixed at the top of its own dynamic range (Note [Caching
       allocator]): mmap above 32 MiB, give the heap's top back above 64 MiB free. */
    static int ferro_tune_heap(void) {
    #if defined(__GLIBC__) && defined(M_MMAP_THRESHOLD) && defined(M_TRIM_THRESHOLD)
        return mallopt(M_MMAP_THRESHOLD, 32 << 20) && mallopt(M_TRIM_THRESHOLD, 64 << 20);
    #else
        return 0;
    #endif
    }

    static PyDataMem_Handler ferro_handler = {
        "ferro_caching_allocator", 1,
        {NULL, ferro_malloc, ferro_calloc, ferro_realloc, ferro_free}
    };
    """
    ctypedef struct ferro_cache_t:
        int n
        size_t bytes
        size_t limit
        size_t hits
        size_t misses
    ferro_cache_t ferro_cache
    size_t FERRO_CACHE_THRESHOLD
    size_t ferro_empty_cache() nogil
    size_t ferro_set_limit(size_t limit) nogil
    int ferro_set_small(object capsule) except -1
    int ferro_register_atfork()
    int ferro_tune_heap() nogil
    ctypedef struct PyDataMem_Handler:
        char* name
    PyDataMem_Handler ferro_handler

cdef extern from "numpy/arrayobject.h":
    object PyDataMem_SetHandler(object handler)
    object PyDataMem_GetHandler()

from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_New

THRESHOLD = FERRO_CACHE_THRESHOLD


def install():
    """Make the caching allocator NumPy's data allocator in the current context (and in the
    contexts that later copy it), caching at most 1/8 of the physical memory and at most 2 GiB,
    where NumPy's default allocator is the current one; returns the previous handler (a
    capsule)."""
    import os

    try:
        phys = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        phys = 1 << 33
    ferro_set_limit(min(1 << 31, phys // 8))
    current = PyDataMem_GetHandler()
    if _name_of(current) != "default_allocator":
        return current  # installed already, or the program installed its own: keep it
    ferro_set_small(current)
    ferro_register_atfork()
    tune_heap()
    return PyDataMem_SetHandler(PyCapsule_New(&ferro_handler, "mem_handler", NULL))


def tune_heap():
    """Fix glibc's mmap and trim thresholds at 32 and 64 MiB (the top of glibc's own dynamic
    range) unless the user set them (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``,
    ``GLIBC_TUNABLES``) or ``FERRO_MALLOC_TUNING=0``; a no-op outside glibc. Returns whether it
    set them. Called by :func:`install` and when parallel backward's workers first start.

    By default glibc gives the top of a heap back to the OS as soon as more than its trim
    threshold (128 KiB, growing with freed mmap blocks) lies free there, so a step that frees and
    reallocates sub-MiB buffers in a new order faults them in again: 240-320 minor faults a
    digits CNN step (about 0.5 ms of 2.5), 550 once the forward's columns are kept for backward,
    and each fresh GEMM result of a backward worker, whose thread gets a malloc arena of its own
    (~2,500 faults per backward of the towers benchmark). With the thresholds fixed: 0."""
    import os

    env = os.environ
    if env.get("FERRO_MALLOC_TUNING", "1") == "0" or any(
            k in env for k in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_",
                               "GLIBC_TUNABLES")):
        return False
    return bool(ferro_tune_heap())


cdef str _name_of(object capsule):
    cdef PyDataMem_Handler* h = <PyDataMem_Handler*>PyCapsule_GetPointer(capsule, "mem_handler")
    return (<bytes>h.name).decode()


def empty_cache():
    """Free every cached block; returns how many bytes that released."""
    return ferro_empty_cache()


def set_cache_limit(size_t limit):
    """Cache at most ``limit`` bytes of freed blocks (0: cache nothing); returns the previous
    limit. Blocks cached above a lowered limit stay until frees or :func:`empty_cache` drop them."""
    return ferro_set_limit(limit)


def cache_info():
    """The cache's counters: blocks and bytes held, the limit, hits and misses."""
    return {
        "blocks": ferro_cache.n,
        "bytes": ferro_cache.bytes,
        "limit": ferro_cache.limit,
        "hits": ferro_cache.hits,
        "misses": ferro_cache.misses,
    }
