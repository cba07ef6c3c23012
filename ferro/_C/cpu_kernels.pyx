# cython: language_level=3
"""nogil CPU loops for the engine's hot spots: in-place accumulation and sum-to-shape.

Every function here has a generic NumPy twin (the reference) in ``ferro._C.engine`` and a
parity test in ``tests/engine/test_cpu_kernels.py``. The loops work on raw pointers read through
NumPy's C API: a typed memoryview costs about a microsecond to acquire, which is more than the
whole add on a 1-element gradient.
"""

cimport numpy as cnp
from cython.parallel cimport prange

from ferro._C.typedefs cimport floating_t

import numpy as np

cnp.import_array()

# Below this many elements a parallel region costs more than it saves.
cdef Py_ssize_t PARALLEL_MIN = 1 << 17
cdef int MAX_DIMS = 64


cpdef bint supports(object arr):
    """True if ``arr`` is a float32/float64 NumPy array these loops can take."""
    if type(arr) is not cnp.ndarray:
        return False
    cdef int t = cnp.PyArray_TYPE(<cnp.ndarray>arr)
    return t == cnp.NPY_FLOAT32 or t == cnp.NPY_FLOAT64


cdef void _add_contig(floating_t* dst, const floating_t* src, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    if n >= PARALLEL_MIN:
        for i in prange(n, schedule="static"):
            dst[i] += src[i]
    else:
        for i in range(n):
            dst[i] += src[i]


cpdef int add_inplace(cnp.ndarray dst, cnp.ndarray src) except -1:
    """``dst += src`` for same-shape, same-dtype float arrays; ``dst`` must be C-contiguous.

    The caller (the engine) has already checked ownership of ``dst`` (Note [Grad ownership]).
    A non-contiguous ``src`` goes through NumPy's strided add.
    """
    cdef Py_ssize_t n = cnp.PyArray_SIZE(dst)
    cdef int t = cnp.PyArray_TYPE(dst)
    if cnp.PyArray_TYPE(src) != t or cnp.PyArray_SIZE(src) != n:
        raise ValueError(
            f"add_inplace: dst {dst.dtype}{(<object>dst).shape} and src {src.dtype}{(<object>src).shape} differ"
        )
    if not cnp.PyArray_IS_C_CONTIGUOUS(dst) or not cnp.PyArray_ISWRITEABLE(dst):
        raise ValueError("add_inplace: dst must be C-contiguous and writeable")
    if not cnp.PyArray_IS_C_CONTIGUOUS(src):
        np.add(dst, src, out=dst)
        return 0
    if t == cnp.NPY_FLOAT32:
        with nogil:
            _add_contig(<float*>cnp.PyArray_DATA(dst), <const float*>cnp.PyArray_DATA(src), n)
    elif t == cnp.NPY_FLOAT64:
        with nogil:
            _add_contig(<double*>cnp.PyArray_DATA(dst), <const double*>cnp.PyArray_DATA(src), n)
    else:
        np.add(dst, src, out=dst)
    return 0


cdef void _sum_to(const floating_t* src, floating_t* dst, int ndim, const Py_ssize_t* shape,
                  const Py_ssize_t* sstride, const Py_ssize_t* dstride) noexcept nogil:
    # Odometer over every dimension but the last; the last is a tight inner loop that either
    # reduces (dst stride 0: accumulate in double) or adds elementwise.
    cdef Py_ssize_t idx[64]
    cdef Py_ssize_t so = 0, do = 0, i, inner = shape[ndim - 1]
    cdef Py_ssize_t ss = sstride[ndim - 1], ds = dstride[ndim - 1]
    cdef int d
    cdef double acc
    for d in range(ndim):
        idx[d] = 0
    while True:
        if ds == 0:
            acc = 0.0
            for i in range(inner):
                acc += src[so + i * ss]
            dst[do] += <floating_t>acc
        else:
            for i in range(inner):
                dst[do + i * ds] += src[so + i * ss]
        d = ndim - 2
        while d >= 0:
            idx[d] += 1
            so += sstride[d]
            do += dstride[d]
            if idx[d] < shape[d]:
                break
            so -= sstride[d] * shape[d]
            do -= dstride[d] * shape[d]
            idx[d] = 0
            d -= 1
        if d < 0:
            return


cpdef object sum_to_shape(cnp.ndarray src, tuple shape):
    """Sum a broadcast float array back to ``shape`` (which must broadcast to ``src.shape``).

    Returns a new C-contiguous array of ``shape``; ``src`` is only read.
    """
    cdef int ndim = cnp.PyArray_NDIM(src)
    cdef int tnd = len(shape)
    cdef int lead = ndim - tnd
    cdef int d, t = cnp.PyArray_TYPE(src)
    cdef Py_ssize_t itemsize = cnp.PyArray_ITEMSIZE(src)
    cdef Py_ssize_t sshape[64]
    cdef Py_ssize_t sstride[64]
    cdef Py_ssize_t dstride[64]
    cdef Py_ssize_t dsize, acc_stride
    cdef cnp.ndarray dst
    if lead < 0 or ndim > MAX_DIMS:
        raise ValueError(f"sum_to_shape: cannot reduce shape {(<object>src).shape} to {shape}")
    dst = np.zeros(shape, dtype=src.dtype)
    if cnp.PyArray_SIZE(src) == 0 or cnp.PyArray_SIZE(dst) == 0:
        return dst
    if ndim == 0:
        dst[...] = src
        return dst
    acc_stride = 1
    for d in range(ndim - 1, -1, -1):
        sshape[d] = cnp.PyArray_DIMS(src)[d]
        if cnp.PyArray_STRIDES(src)[d] % itemsize != 0:
            raise ValueError("sum_to_shape: unaligned strides")
        sstride[d] = cnp.PyArray_STRIDES(src)[d] // itemsize
        if d < lead:
            dstride[d] = 0
        else:
            dsize = shape[d - lead]
            if dsize == sshape[d]:
                dstride[d] = acc_stride
            elif dsize == 1:
                dstride[d] = 0
            else:
                raise ValueError(f"sum_to_shape: cannot reduce shape {(<object>src).shape} to {shape}")
            acc_stride *= dsize
    if t == cnp.NPY_FLOAT32:
        with nogil:
            _sum_to(<const float*>cnp.PyArray_DATA(src), <float*>cnp.PyArray_DATA(dst),
                    ndim, sshape, sstride, dstride)
    elif t == cnp.NPY_FLOAT64:
        with nogil:
            _sum_to(<const double*>cnp.PyArray_DATA(src), <double*>cnp.PyArray_DATA(dst),
                    ndim, sshape, sstride, dstride)
    else:
        raise TypeError(f"sum_to_shape: unsupported dtype {src.dtype}")
    return dst
