// Gradient accumulation into an engine-owned buffer: dst += src (same shape, C-contiguous).
// The engine calls it only for buffers it owns (Note [Grad ownership]). 16-byte vector loads
// when both pointers allow them, scalars for the tail.
template <typename T>
__global__ void ferro_accumulate(T* dst, const T* __restrict__ src, long long n) {
    typedef typename ferro_vec<T>::type V;
    const int W = ferro_vec<T>::n;
    const long long tid = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    const long long stride = (long long)blockDim.x * gridDim.x;
    long long head = 0;
    if (ferro_aligned16(dst) && ferro_aligned16(src)) {
        const long long nv = n / W;
        for (long long i = tid; i < nv; i += stride) {
            V vd = reinterpret_cast<V*>(dst)[i];
            const V vs = reinterpret_cast<const V*>(src)[i];
            T* pd = reinterpret_cast<T*>(&vd);
            const T* ps = reinterpret_cast<const T*>(&vs);
#pragma unroll
            for (int k = 0; k < W; k++) pd[k] += ps[k];
            reinterpret_cast<V*>(dst)[i] = vd;
        }
        head = nv * W;
    }
    for (long long i = head + tid; i < n; i += stride) dst[i] += src[i];
}
