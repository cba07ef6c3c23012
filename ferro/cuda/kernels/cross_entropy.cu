// Softmax cross-entropy from logits (rows, classes) and int64 class indices, forward and
// backward in one kernel: per row, the loss and the gradient of that row's loss times `scale`.
// Rows whose target equals `ignore` get loss 0 and gradient 0. One block per row; shared memory
// as for softmax.cu (blockDim.x * sizeof(double) bytes).

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
    m = ferro_block_reduce(m, true);
    double s = 0.0;
    for (long long j = threadIdx.x; j < classes; j += blockDim.x) s += exp((double)xr[j] - m);
    s = ferro_block_reduce(s, false);
    const double lse = m + log(s);
    if (threadIdx.x == 0) loss[blockIdx.x] = (T)(lse - (double)xr[t]);
    for (long long j = threadIdx.x; j < classes; j += blockDim.x) {
        const double p = exp((double)xr[j] - lse);
        gr[j] = (T)((p - (j == t ? 1.0 : 0.0)) * scale);
    }
}
