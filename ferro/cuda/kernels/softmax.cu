// Softmax and log-softmax over the last axis of a C-contiguous (rows, cols) array: one block per
// row, block-wide reductions in shared memory (numerically stable: the row max is subtracted).
// Launch with a power-of-two block size and blockDim.x * sizeof(double) bytes of shared memory.

template <typename T>
__global__ void ferro_softmax_fwd(const T* __restrict__ x, T* __restrict__ y, long long cols,
                                  int log_out) {
    const T* xr = x + blockIdx.x * cols;
    T* yr = y + blockIdx.x * cols;
    double m = FERRO_NEG_INF;
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) m = fmax(m, (double)xr[j]);
    m = ferro_block_reduce(m, true);
    double s = 0.0;
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) s += exp((double)xr[j] - m);
    s = ferro_block_reduce(s, false);
    const double lse = m + log(s);
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) {
        const double z = (double)xr[j] - lse;
        yr[j] = (T)(log_out ? z : exp(z));
    }
}

template <typename T>
__global__ void ferro_softmax_bwd(const T* __restrict__ gy, const T* __restrict__ y,
                                  T* __restrict__ gx, long long cols, int log_out) {
    const long long off = blockIdx.x * cols;
    double d = 0.0;
    for (long long j = threadIdx.x; j < cols; j += blockDim.x)
        d += log_out ? (double)gy[off + j] : (double)gy[off + j] * (double)y[off + j];
    d = ferro_block_reduce(d, false);
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) {
        const double g = gy[off + j], v = y[off + j];
        gx[off + j] = (T)(log_out ? g - exp(v) * d : v * (g - d));
    }
}
