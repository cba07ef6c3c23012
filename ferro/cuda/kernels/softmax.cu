// Softmax and log-softmax over the last axis of a C-contiguous (rows, cols) array: one block per
// row (any multiple of 32 threads up to 1024). Numerically stable: an online pass keeps each
// thread's running max and sum of exp(x - max), merged across the block; a second pass writes.
// Reads x twice and writes y once (the generic CuPy expression makes about eight passes).

template <typename T>
__global__ void ferro_softmax_fwd(const T* __restrict__ x, T* __restrict__ y, long long cols,
                                  int log_out) {
    typedef typename ferro_acc<T>::type A;
    __shared__ A sm[32], ss[32];
    const T* xr = x + blockIdx.x * cols;
    T* yr = y + blockIdx.x * cols;
    A m, s;
    ferro_row_state(xr, cols, m, s);
    ferro_block_merge(m, s, sm, ss);
    const A lse = m + ferro_log(s);
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) {
        const A z = (A)xr[j] - lse;
        yr[j] = (T)(log_out ? z : ferro_exp(z));
    }
}

// gx = y (gy - sum(gy y)) for softmax; gx = gy - exp(y) sum(gy) for log-softmax (y = log p):
// the formulas of formulas.cuh, computed in A. The upstream gradient is gy[k * gs]: gs == 0 reads
// one value broadcast with stride 0 (the gradient of .sum() or .mean()).
template <typename T>
__global__ void ferro_softmax_bwd(const T* __restrict__ gy, long long gs, const T* __restrict__ y,
                                  T* __restrict__ gx, long long cols, int log_out) {
    typedef typename ferro_acc<T>::type A;
    __shared__ A scratch[32];
    const long long off = blockIdx.x * cols;
    A d = A(0);
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) {
        const A g = gy[(off + j) * gs];
        d += log_out ? g : g * (A)y[off + j];
    }
    d = ferro_block_sum(d, scratch);
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) {
        const A g = gy[(off + j) * gs], v = y[off + j];
        gx[off + j] = (T)(log_out ? ferro_log_softmax_grad(g, v, d) : ferro_softmax_grad(g, v, d));
    }
}
