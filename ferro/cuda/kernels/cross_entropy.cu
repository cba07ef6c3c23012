// Softmax cross-entropy from logits (rows, classes) and int64 class indices, as two kernels that
// together read the logits twice and write the gradient once:
//   forward:  per row, loss = logsumexp(x) - x[t] and lse = logsumexp(x) (kept for backward);
//   backward: grad = (softmax(x) - onehot(t)) * scale, recomputing softmax from x and lse.
// Rows whose target equals `ignore` get loss 0 and gradient 0; a target outside [0, classes)
// gives NaN rather than reading out of bounds (the Python front end rejects those first).
// scale = gy[row or 0] / denom[0]: gy is the upstream gradient (per row when `per_row`, else a
// scalar) and denom the mean's divisor, both device arrays, so no value crosses to the host.
// One block per row, any multiple of 32 threads up to 1024.

template <typename T>
__global__ void ferro_cross_entropy_fwd(const T* __restrict__ x,
                                        const long long* __restrict__ target,
                                        T* __restrict__ loss, T* __restrict__ lse_out,
                                        long long classes, long long ignore) {
    typedef typename ferro_acc<T>::type A;
    __shared__ A sm[32], ss[32];
    const T* xr = x + blockIdx.x * classes;
    const long long t = target[blockIdx.x];
    A m, s;
    ferro_row_state(xr, classes, m, s);
    ferro_block_merge(m, s, sm, ss);
    if (threadIdx.x == 0) {
        const A lse = m + ferro_log(s);
        lse_out[blockIdx.x] = (T)lse;
        if (t == ignore) {
            loss[blockIdx.x] = T(0);
        } else if (t < 0 || t >= classes) {
            loss[blockIdx.x] = (T)(A(FERRO_INF) - A(FERRO_INF));  // NaN
        } else {
            loss[blockIdx.x] = (T)(lse - (A)xr[t]);
        }
    }
}

template <typename T>
__global__ void ferro_cross_entropy_bwd(const T* __restrict__ x,
                                        const long long* __restrict__ target,
                                        const T* __restrict__ lse_in, const T* __restrict__ gy,
                                        const T* __restrict__ denom, T* __restrict__ grad,
                                        long long classes, long long ignore, int per_row) {
    typedef typename ferro_acc<T>::type A;
    const long long row = blockIdx.x;
    const T* xr = x + row * classes;
    T* gr = grad + row * classes;
    const long long t = target[row];
    if (t == ignore) {
        for (long long j = threadIdx.x; j < classes; j += blockDim.x) gr[j] = T(0);
        return;
    }
    const bool bad = t < 0 || t >= classes;
    const A scale = (A)gy[per_row ? row : 0] / (A)denom[0];
    const A lse = lse_in[row];
    for (long long j = threadIdx.x; j < classes; j += blockDim.x) {
        gr[j] = bad ? (T)(A(FERRO_INF) - A(FERRO_INF))
                    : (T)ferro_cross_entropy_grad((A)xr[j], lse, j == t, scale);
    }
}
