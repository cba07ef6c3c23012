// Shared by every ferro kernel source: the loader prepends this file (NVRTC has no include
// path for package files), so the compile test covers it with each kernel.

// NVRTC has no math.h: negative infinity from its bit pattern.
#define FERRO_NEG_INF (-__longlong_as_double(0x7ff0000000000000LL))

// Block-wide max or sum of one double per thread (power-of-two block size; needs
// blockDim.x * sizeof(double) bytes of dynamic shared memory). Every thread gets the result.
__device__ double ferro_block_reduce(double v, bool take_max) {
    extern __shared__ double buf[];
    buf[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            buf[threadIdx.x] = take_max ? fmax(buf[threadIdx.x], buf[threadIdx.x + s])
                                        : buf[threadIdx.x] + buf[threadIdx.x + s];
        }
        __syncthreads();
    }
    double r = buf[0];
    __syncthreads();
    return r;
}
