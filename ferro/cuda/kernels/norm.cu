// Normalization kernels (layer, RMS, group/instance and batch norm), the GPU half of
// ferro/_C/norm_kernels.pyx (same names and state; ferro/cuda/norm.py launches them).
//
// Rows: one block per row of K values (R rows, C-contiguous). Value j of row r has the weight
// index (r % G) * (K / S) + j / S: layer and RMS norm have G = S = 1, group norm S spatial
// values per channel and G groups. Batch norm: one block per channel c of x (N, C, S), the
// block striding over its N * S values. Statistics in two passes (the mean, then the squared
// deviations from it: no cancellation), each a block-wide sum in A (float for float data).
// has_w / has_b say whether the weight and bias pointers are real (the wrapper passes x
// otherwise, never read).

template <typename T>
__device__ __forceinline__ T ferro_norm_weight(const T* w, int has_w, long long i) {
    return has_w ? w[i] : T(1);
}

template <typename T>
__global__ void ferro_norm_rows_fwd(const T* __restrict__ x, const T* __restrict__ w,
                                    const T* __restrict__ b, T* __restrict__ y,
                                    T* __restrict__ mean, T* __restrict__ rstd,
                                    T* __restrict__ var, long long K, long long S, long long G,
                                    int centered, double eps, int has_w, int has_b) {
    typedef typename ferro_acc<T>::type A;
    __shared__ A scratch[32];
    const long long r = blockIdx.x, nch = K / S, wofs = (r % G) * nch;
    const T* xr = x + r * K;
    T* yr = y + r * K;
    A m = A(0);
    if (centered) {
        A s = A(0);
        for (long long j = threadIdx.x; j < K; j += blockDim.x) s += (A)xr[j];
        m = ferro_block_sum(s, scratch) / (A)K;
    }
    A v = A(0);
    for (long long j = threadIdx.x; j < K; j += blockDim.x) {
        const A d = (A)xr[j] - m;
        v += d * d;
    }
    v = ferro_block_sum(v, scratch) / (A)K;
    const A rs = A(1) / sqrt(v + (A)eps);
    if (threadIdx.x == 0) {
        rstd[r] = (T)rs;
        if (centered) {
            mean[r] = (T)m;
            var[r] = (T)v;
        }
    }
    for (long long j = threadIdx.x; j < K; j += blockDim.x) {
        const long long wi = wofs + j / S;
        const A scale = rs * (A)ferro_norm_weight(w, has_w, wi);
        yr[j] = (T)(((A)xr[j] - m) * scale + (has_b ? (A)b[wi] : A(0)));
    }
}

// gx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = gy * w, xhat = (x - mean) * rstd
// (no mean(g) term for RMS norm). The parameter gradients are column sums: ferro_norm_cols_bwd.
template <typename T>
__global__ void ferro_norm_rows_bwd(const T* __restrict__ gy, const T* __restrict__ x,
                                    const T* __restrict__ w, const T* __restrict__ mean,
                                    const T* __restrict__ rstd, T* __restrict__ gx, long long K,
                                    long long S, long long G, int centered, int has_w) {
    typedef typename ferro_acc<T>::type A;
    __shared__ A scratch[32];
    const long long r = blockIdx.x, nch = K / S, wofs = (r % G) * nch;
    const long long off = r * K;
    const A m = centered ? (A)mean[r] : A(0), rs = (A)rstd[r];
    A sg = A(0), sgd = A(0);
    for (long long j = threadIdx.x; j < K; j += blockDim.x) {
        const A g = (A)gy[off + j] * (A)ferro_norm_weight(w, has_w, wofs + j / S);
        sg += g;
        sgd += g * ((A)x[off + j] - m);
    }
    sg = ferro_block_sum(sg, scratch);
    sgd = ferro_block_sum(sgd, scratch);
    const A c1 = centered ? sg / (A)K : A(0), c2 = sgd * rs * rs / (A)K;
    for (long long j = threadIdx.x; j < K; j += blockDim.x) {
        const A g = (A)gy[off + j] * (A)ferro_norm_weight(w, has_w, wofs + j / S);
        gx[off + j] = (T)(rs * (g - c1 - ((A)x[off + j] - m) * c2));
    }
}

// Layer/RMS norm parameter gradients, gw[j] = sum(gy * xhat), gb[j] = sum(gy) over the rows of
// (R, K), in two steps. Here block (bx, by), of 32 x 8 threads, sums rows [by * rows_per, ...) of
// columns [32 * bx, 32 * bx + 32): threadIdx.x picks the column (a warp reads 32 neighbouring
// values), threadIdx.y strides over the rows; part_w[by * K + j] and part_b[...] get the block's
// sums in double. The wrapper then adds the gridDim.y partial rows in a fixed order, so results
// are deterministic. (One thread per column summing all R rows left the GPU nearly idle: 3 ms for
// (8192, 768) on an H200, where the whole backward moves 75 MB.)
template <typename T>
__global__ void ferro_norm_cols_bwd(const T* __restrict__ gy, const T* __restrict__ x,
                                    const T* __restrict__ mean, const T* __restrict__ rstd,
                                    double* __restrict__ part_w, double* __restrict__ part_b,
                                    long long R, long long K, long long rows_per, int centered) {
    __shared__ double sw[8][32], sb[8][32];
    const long long j = blockIdx.x * 32LL + threadIdx.x;
    const long long r0 = blockIdx.y * rows_per;
    const long long r1 = r0 + rows_per < R ? r0 + rows_per : R;
    double aw = 0.0, ab = 0.0;
    if (j < K) {
        for (long long r = r0 + threadIdx.y; r < r1; r += blockDim.y) {
            const double g = (double)gy[r * K + j];
            const double m = centered ? (double)mean[r] : 0.0;
            aw += g * ((double)x[r * K + j] - m) * (double)rstd[r];
            ab += g;
        }
    }
    sw[threadIdx.y][threadIdx.x] = aw;
    sb[threadIdx.y][threadIdx.x] = ab;
    __syncthreads();
    if (threadIdx.y == 0 && j < K) {
        for (unsigned t = 1; t < blockDim.y; t++) {
            aw += sw[t][threadIdx.x];
            ab += sb[t][threadIdx.x];
        }
        part_w[blockIdx.y * K + j] = aw;
        part_b[blockIdx.y * K + j] = ab;
    }
}

template <typename T>
__global__ void ferro_batch_norm_fwd(const T* __restrict__ x, const T* __restrict__ w,
                                     const T* __restrict__ b, T* __restrict__ y,
                                     T* __restrict__ mean, T* __restrict__ rstd,
                                     T* __restrict__ var, long long N, long long C, long long S,
                                     double eps, int has_w, int has_b) {
    typedef typename ferro_acc<T>::type A;
    __shared__ A scratch[32];
    const long long c = blockIdx.x, M = N * S;
    A s = A(0);
    for (long long i = threadIdx.x; i < M; i += blockDim.x) s += (A)x[((i / S) * C + c) * S + i % S];
    const A m = ferro_block_sum(s, scratch) / (A)M;
    A v = A(0);
    for (long long i = threadIdx.x; i < M; i += blockDim.x) {
        const A d = (A)x[((i / S) * C + c) * S + i % S] - m;
        v += d * d;
    }
    v = ferro_block_sum(v, scratch) / (A)M;
    const A rs = A(1) / sqrt(v + (A)eps);
    if (threadIdx.x == 0) {
        mean[c] = (T)m;
        rstd[c] = (T)rs;
        var[c] = (T)v;
    }
    const A scale = rs * (A)ferro_norm_weight(w, has_w, c), shift = has_b ? (A)b[c] : A(0);
    for (long long i = threadIdx.x; i < M; i += blockDim.x) {
        const long long k = ((i / S) * C + c) * S + i % S;
        y[k] = (T)(((A)x[k] - m) * scale + shift);
    }
}

template <typename T>
__global__ void ferro_batch_norm_bwd(const T* __restrict__ gy, const T* __restrict__ x,
                                     const T* __restrict__ w, const T* __restrict__ mean,
                                     const T* __restrict__ rstd, T* __restrict__ gx,
                                     T* __restrict__ gw, T* __restrict__ gb, long long N,
                                     long long C, long long S, int has_w) {
    typedef typename ferro_acc<T>::type A;
    __shared__ A scratch[32];
    const long long c = blockIdx.x, M = N * S;
    const A m = (A)mean[c], rs = (A)rstd[c];
    A sg = A(0), sgd = A(0);
    for (long long i = threadIdx.x; i < M; i += blockDim.x) {
        const long long k = ((i / S) * C + c) * S + i % S;
        const A g = (A)gy[k];
        sg += g;
        sgd += g * ((A)x[k] - m);
    }
    sg = ferro_block_sum(sg, scratch);
    sgd = ferro_block_sum(sgd, scratch);
    if (threadIdx.x == 0) {
        gw[c] = (T)(sgd * rs);
        gb[c] = (T)sg;
    }
    const A wv = (A)ferro_norm_weight(w, has_w, c), c1 = sg / (A)M, c2 = sgd * rs * rs / (A)M;
    for (long long i = threadIdx.x; i < M; i += blockDim.x) {
        const long long k = ((i / S) * C + c) * S + i % S;
        gx[k] = (T)(rs * wv * ((A)gy[k] - c1 - ((A)x[k] - m) * c2));
    }
}
