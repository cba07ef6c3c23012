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
most), and hands one back for a request it fits (not more than 1/4 larger than asked). Smaller
blocks go to the handler that was current before (NumPy's default, with its small-block cache);
large blocks above the limit are freed. Fresh large blocks are rounded up to 1/8 of their power
of two (so slightly different sizes share blocks) and advised as huge pages, as NumPy's own
handler does. It serves every NumPy array allocated in that context (and the contexts copied
from it), not only ferro's: cached blocks stay resident, so a program that needs the memory back
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
            ferro_cache.bytes -= ferro_cache.cap[best];
            ferro_cache.n--;
            ferro_cache.ptr[best] = ferro_cache.ptr[ferro_cache.n];
            ferro_cache.cap[best] = ferro_cache.cap[ferro_cache.n];
            ferro_cache.hits++;
        } else {
            ferro_cache.misses++;
        }
        pthread_mutex_unlock(&ferro_cache.lock);
        return p;
    }

    static void *ferro_fresh(size_t size) {
        void *p = malloc(ferro_round(size));
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
        if (size < FERRO_CACHE_THRESHOLD) return ferro_small.malloc(ferro_small.ctx, size);
        p = ferro_take(size);
        return p != NULL ? p : ferro_fresh(size);
    }

    static void *ferro_calloc(void *ctx, size_t nelem, size_t elsize) {
        size_t size = nelem * elsize;
        void *p;
        if (elsize != 0 && size / elsize != nelem) return NULL;
        if (size < FERRO_CACHE_THRESHOLD)
            return ferro_small.calloc(ferro_small.ctx, nelem, elsize);
        p = ferro_take(size);
        if (p != NULL) {
            memset(p, 0, size);
            return p;
        }
        return calloc(1, ferro_round(size));
    }

    static void *ferro_realloc(void *ctx, void *ptr, size_t new_size) {
        /* Every block here is a malloc'ed block (NumPy's default allocator's are too): realloc
           works on it, and the new one is freed later with its own size (checked against
           malloc_usable_size before caching). */
        return ferro_small.realloc(ferro_small.ctx, ptr, new_size);
    }

    static void ferro_free(void *ctx, void *ptr, size_t size) {
        size_t cap;
        if (ptr == NULL) return;
        if (size < FERRO_CACHE_THRESHOLD) {
            ferro_small.free(ferro_small.ctx, ptr, size);
            return;
        }
        {
            cap = malloc_usable_size(ptr);
            pthread_mutex_lock(&ferro_cache.lock);
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

    /* Blocks below the threshold come from glibc's heap, which by default gives its top back
       to the system whenever more than the trim threshold is free there: a training step that
       frees and reallocates a few 0.1-1 MB buffers in a different order each time then
       page-faults them in again (the digits CNN's step: 240-320 faults, 0.5 ms of 2.5).
       Keeping 16 MiB of padding at the heap's top, and the heap for everything the cache does
       not take, stops that churn. glibc only (elsewhere a no-op). */
    static int ferro_tune_heap(void) {
    #if defined(M_TOP_PAD) && defined(M_MMAP_THRESHOLD)
        mallopt(M_MMAP_THRESHOLD, (int)FERRO_CACHE_THRESHOLD);
        mallopt(M_TOP_PAD, 16 << 20);
    #endif
        return 0;
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
    int ferro_tune_heap()
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
    ferro_tune_heap()
    return PyDataMem_SetHandler(PyCapsule_New(&ferro_handler, "mem_handler", NULL))


cdef str _name_of(object capsule):
    cdef PyDataMem_Handler* h = <PyDataMem_Handler*>PyCapsule_GetPointer(capsule, "mem_handler")
    return (<bytes>h.name).decode()


def empty_cache():
    """Free every cached block; returns how many bytes that released."""
    return ferro_empty_cache()


def set_cache_limit(size_t limit):
    """Cache at most ``limit`` bytes of freed blocks (0: cache nothing); returns the previous
    limit. Blocks cached above a lowered limit stay until :func:`empty_cache`."""
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
