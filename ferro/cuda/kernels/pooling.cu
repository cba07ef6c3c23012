// Max pooling over planes of up to three spatial dimensions (a 1-D or 2-D pool is a 3-D one
// whose leading sizes and kernel are 1), the GPU half of ferro/_C/pooling_kernels.pyx:
//   forward:  one thread per output: the window's first maximum (a NaN wins, the first NaN),
//             skipping padding, and its flat index within the plane;
//   backward: one thread per input element: the sum of gy over the windows whose index names
//             it (a gather over at most kd*kh*kw windows, so no atomics and a fixed order).
// Sizes: D H W (input), OD OH OW (output), kernel, stride, padding, dilation, 3 each.

template <typename T>
__global__ void ferro_max_pool_fwd(const T* __restrict__ x, T* __restrict__ y,
                                   long long* __restrict__ idx, long long n_out, long long D,
                                   long long H, long long W, long long OD, long long OH,
                                   long long OW, long long kd, long long kh, long long kw,
                                   long long sd, long long sh, long long sw, long long pd,
                                   long long ph, long long pw, long long dd, long long dh,
                                   long long dw) {
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x; o < n_out; o += step) {
        const long long ow = o % OW, oh = (o / OW) % OH, od = (o / (OW * OH)) % OD;
        const T* xp = x + (o / (OW * OH * OD)) * D * H * W;
        long long arg = -1;
        T best = T(0);
        for (long long i = 0; i < kd; ++i) {
            const long long d = od * sd - pd + i * dd;
            if (d < 0 || d >= D) continue;
            for (long long j = 0; j < kh; ++j) {
                const long long h = oh * sh - ph + j * dh;
                if (h < 0 || h >= H) continue;
                for (long long q = 0; q < kw; ++q) {
                    const long long w = ow * sw - pw + q * dw;
                    if (w < 0 || w >= W) continue;
                    const long long off = (d * H + h) * W + w;
                    const T v = xp[off];
                    if (arg < 0 || v > best || (v != v && best == best)) {
                        best = v;
                        arg = off;
                    }
                }
            }
        }
        y[o] = best;
        idx[o] = arg;
    }
}

// The output positions along one dimension whose window reaches input position `pos` at
// offset `k`: o * s - p + k * d == pos, 0 <= o < out; -1 where there is none.
__device__ __forceinline__ long long ferro_pool_window(long long pos, long long k, long long s,
                                                       long long p, long long d, long long out) {
    const long long num = pos + p - k * d;
    if (num < 0 || num % s) return -1;
    return num / s < out ? num / s : -1;
}

template <typename T>
__global__ void ferro_max_pool_bwd(const T* __restrict__ gy, const long long* __restrict__ idx,
                                   T* __restrict__ gx, long long n_in, long long D, long long H,
                                   long long W, long long OD, long long OH, long long OW,
                                   long long kd, long long kh, long long kw, long long sd,
                                   long long sh, long long sw, long long pd, long long ph,
                                   long long pw, long long dd, long long dh, long long dw) {
    typedef typename ferro_acc<T>::type A;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n_in; e += step) {
        const long long w = e % W, h = (e / W) % H, d = (e / (W * H)) % D;
        const long long b = e / (W * H * D);
        const long long pos = (d * H + h) * W + w;
        A acc = A(0);
        for (long long i = 0; i < kd; ++i) {
            const long long od = ferro_pool_window(d, i, sd, pd, dd, OD);
            if (od < 0) continue;
            for (long long j = 0; j < kh; ++j) {
                const long long oh = ferro_pool_window(h, j, sh, ph, dh, OH);
                if (oh < 0) continue;
                for (long long q = 0; q < kw; ++q) {
                    const long long ow = ferro_pool_window(w, q, sw, pw, dw, OW);
                    if (ow < 0) continue;
                    const long long o = ((b * OD + od) * OH + oh) * OW + ow;
                    if (idx[o] == pos) acc += (A)gy[o];
                }
            }
        }
        gx[e] = (T)acc;
    }
}
