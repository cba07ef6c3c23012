// Gradient accumulation into an engine-owned buffer: dst += src (same shape, C-contiguous).
// The engine calls it only for buffers it owns (Note [Grad ownership]).
template <typename T>
__global__ void ferro_accumulate(T* __restrict__ dst, const T* __restrict__ src, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)blockDim.x * gridDim.x) {
        dst[i] += src[i];
    }
}
