// Softmax cross-entropy from logits (rows, classes) and int64 class indices, forward and
// backward in one kernel: per row, the loss and the gradient of that row's loss times `scale`.
// Rows whose target equals `ignore` get loss 0 and gradient 0. One block per row; shared memory
// as for softmax.cu (blockDim.x * sizeof(double) bytes).

// NVRTC has no math.h: negative infinity from its bit pattern.
#define FERRO_NEG_INF (-__longlong_as_double(0x7ff0000000000000LL))

__device__ double ferro_ce_reduce(double v, bool take_max) {
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

template <typename T>
__global__ void ferro_cross_entropy(const T* __restrict__ x, const long long* __restrict__ target,
                                    T* __restrict__ loss, T* __restrict__ grad, long long classes,
                                    long long ignore, double scale) {
    const T* xr = x + blockIdx.x * classes;
    T* gr = grad + blockIdx.x * classes;
    const long long t = target[blockIdx.x];
    if (t == ignore) {
        for (long long j = threadIdx.x; j < classes; j += blockDim.x) gr[j] = T(0);
        if (threadIdx.x == 0) loss[blockIdx.x] = T(0);
        return;
    }
    double m = FERRO_NEG_INF;
    for (long long j = threadIdx.x; j < classes; j += blockDim.x) m = fmax(m, (double)xr[j]);
    m = ferro_ce_reduce(m, true);
    double s = 0.0;
    for (long long j = threadIdx.x; j < classes; j += blockDim.x) s += exp((double)xr[j] - m);
    s = ferro_ce_reduce(s, false);
    const double lse = m + log(s);
    if (threadIdx.x == 0) loss[blockIdx.x] = (T)(lse - (double)xr[t]);
    for (long long j = threadIdx.x; j < classes; j += blockDim.x) {
        const double p = exp((double)xr[j] - lse);
        gr[j] = (T)((p - (j == t ? 1.0 : 0.0)) * scale);
    }
}
