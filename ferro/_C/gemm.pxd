# Contract of ferro._C.gemm: Note [Two-core GEMM] (gemm.pyx).

cpdef object matmul(object a, object b, object out=*, bint parts=*)


cdef inline object mm(object a, object b, object xp_matmul):
    # a @ b: the two-core GEMM where it applies, else xp_matmul (NumPy's or CuPy's)
    y = matmul(a, b)
    return xp_matmul(a, b) if y is NotImplemented else y
