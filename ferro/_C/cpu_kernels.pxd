# Contract of ferro._C.cpu_kernels: nogil loops over float32/float64 NumPy arrays.

cpdef bint supports(object arr)
cpdef bint accepts(tuple arrays)
cpdef bint accepts_grad(object gy, tuple arrays)
cpdef int add_inplace(object dst, object src) except -1
cpdef object sum_to_shape(object src, tuple shape)
cpdef bint all_finite(object x)
