# Contract of ferro._C.cpu_kernels: nogil loops over float32/float64 NumPy arrays.
cimport numpy as cnp

cpdef bint supports(object arr)
cpdef int add_inplace(cnp.ndarray dst, cnp.ndarray src) except -1
cpdef object sum_to_shape(cnp.ndarray src, tuple shape)
cpdef bint same_layout(tuple arrays)
cpdef bint all_finite(cnp.ndarray x)
