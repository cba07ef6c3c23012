# Contract of ferro._C.cpu_kernels: nogil loops over float32/float64 NumPy arrays.

cimport numpy as cnp

# Note [Two-core elementwise ops] (cpu_kernels.pyx): the size from which binary() and sum_all()
# run on both cores
cdef enum:
    BIG_MIN = 1 << 20
    # Note [Fused update] (graph.pyx): from this many elements ``number * array``, nothing
    # recorded, is a Pending below lazy_min() too
    SCALE_MIN = 1 << 15

cpdef bint supports(object arr)
cpdef bint accepts(tuple arrays)
cpdef bint accepts_grad(object gy, tuple arrays)
cpdef int add_inplace(object dst, object src) except -1
cpdef object sum_to_shape(object src, tuple shape)
cpdef bint all_finite(object x)
cpdef object binary(int op, object a, object b, object out, double alpha,
                    Py_ssize_t least=*, bint stream=*, bint one=*)
cpdef object sum_all(object x)


# Note [Lazy elementwise chains] (cpu_kernels.pyx)
cdef class Pending:
    cdef cnp.ndarray like      # an array leaf: the result's shape and dtype
    cdef list leaves           # ndarrays and Python floats; None once realized
    cdef signed char code[16]  # the postfix program (LAZY_CODE)
    cdef int ncode, depth      # (ncode - 1) / 2 ops
    cdef object result         # the realized array, or None

cdef Py_ssize_t lazy_least() noexcept
cdef bint scale_lazy(object a, object b) noexcept
cpdef object scaled(Pending p)
cpdef object lazy(int op, object a, object b, bint own_a, bint own_b)
cpdef object realize(Pending p)


cdef inline bint _large(object x) noexcept:
    if type(x) is not cnp.ndarray:
        return False
    cdef Py_ssize_t n = 1, d
    for d in range(cnp.PyArray_NDIM(<cnp.ndarray>x)):  # not PyArray_SIZE: no call
        n *= cnp.PyArray_DIMS(<cnp.ndarray>x)[d]
    return n >= BIG_MIN


cdef inline bint big(object a, object b) noexcept:
    # The callers' first test, inline: binary() can only apply when an operand is that large
    return _large(a) or _large(b)
cpdef object row_sums(object x, double scale)
cpdef object materialize(object x, bint stream=*)
