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

// Average pooling, same geometry (padding counts as zeros): the forward divides each window's
// sum by its divisor, `div[cell]` of the output plane's cell when `has_div`, else `div0`
// (PyTorch's count_include_pad / divisor_override rules, computed once on the host); the
// backward is its adjoint, one thread per input element gathering gy / divisor over the windows
// that hold it.
template <typename T>
__global__ void ferro_avg_pool_fwd(const T* __restrict__ x, T* __restrict__ y,
                                   const double* __restrict__ div, int has_div, double div0,
                                   long long n_out, long long D, long long H, long long W,
                                   long long OD, long long OH, long long OW, long long kd,
                                   long long kh, long long kw, long long sd, long long sh,
                                   long long sw, long long pd, long long ph, long long pw,
                                   long long dd, long long dh, long long dw) {
    typedef typename ferro_acc<T>::type A;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x; o < n_out; o += step) {
        const long long cell = o % (OW * OH * OD);
        const long long ow = cell % OW, oh = (cell / OW) % OH, od = cell / (OW * OH);
        const T* xp = x + (o / (OW * OH * OD)) * D * H * W;
        A acc = A(0);
        for (long long i = 0; i < kd; ++i) {
            const long long d = od * sd - pd + i * dd;
            if (d < 0 || d >= D) continue;
            for (long long j = 0; j < kh; ++j) {
                const long long h = oh * sh - ph + j * dh;
                if (h < 0 || h >= H) continue;
                for (long long q = 0; q < kw; ++q) {
                    const long long w = ow * sw - pw + q * dw;
                    if (w >= 0 && w < W) acc += (A)xp[(d * H + h) * W + w];
                }
            }
        }
        y[o] = (T)(acc / (A)(has_div ? div[cell] : div0));
    }
}

template <typename T>
__global__ void ferro_avg_pool_bwd(const T* __restrict__ gy, T* __restrict__ gx,
                                   const double* __restrict__ div, int has_div, double div0,
                                   long long n_in, long long D, long long H, long long W,
                                   long long OD, long long OH, long long OW, long long kd,
                                   long long kh, long long kw, long long sd, long long sh,
                                   long long sw, long long pd, long long ph, long long pw,
                                   long long dd, long long dh, long long dw) {
    typedef typename ferro_acc<T>::type A;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n_in; e += step) {
        const long long w = e % W, h = (e / W) % H, d = (e / (W * H)) % D;
        const T* gp = gy + (e / (W * H * D)) * OD * OH * OW;
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
                    const long long cell = (od * OH + oh) * OW + ow;
                    acc += (A)gp[cell] / (A)(has_div ? div[cell] : div0);
                }
            }
        }
        gx[e] = (T)acc;
    }
}

// Adaptive pooling: output cell o of a dimension of n inputs and `out` outputs covers
// [floor(o n / out), ceil((o + 1) n / out)); input i lies in the cells
// [floor(i out / n), ceil((i + 1) out / n)). Sizes: D H W (input), OD OH OW (output).
__device__ __forceinline__ long long ferro_adaptive_start(long long o, long long n, long long out) {
    return o * n / out;
}
__device__ __forceinline__ long long ferro_adaptive_end(long long o, long long n, long long out) {
    return ((o + 1) * n + out - 1) / out;
}

// Average (mode 0) or max (mode 1, the first maximum, a NaN wins, and its flat index within the
// plane) of each adaptive window: one thread per output.
template <typename T>
__global__ void ferro_adaptive_pool_fwd(const T* __restrict__ x, T* __restrict__ y,
                                        long long* __restrict__ idx, int mode, long long n_out,
                                        long long D, long long H, long long W, long long OD,
                                        long long OH, long long OW) {
    typedef typename ferro_acc<T>::type A;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x; o < n_out; o += step) {
        const long long ow = o % OW, oh = (o / OW) % OH, od = (o / (OW * OH)) % OD;
        const T* xp = x + (o / (OW * OH * OD)) * D * H * W;
        const long long d0 = ferro_adaptive_start(od, D, OD), d1 = ferro_adaptive_end(od, D, OD);
        const long long h0 = ferro_adaptive_start(oh, H, OH), h1 = ferro_adaptive_end(oh, H, OH);
        const long long w0 = ferro_adaptive_start(ow, W, OW), w1 = ferro_adaptive_end(ow, W, OW);
        A acc = A(0);
        T best = T(0);
        long long arg = -1;
        for (long long d = d0; d < d1; ++d)
            for (long long h = h0; h < h1; ++h)
                for (long long w = w0; w < w1; ++w) {
                    const long long off = (d * H + h) * W + w;
                    const T v = xp[off];
                    if (mode == 0) {
                        acc += (A)v;
                    } else if (arg < 0 || v > best || (v != v && best == best)) {
                        best = v;
                        arg = off;
                    }
                }
        if (mode == 0) {
            y[o] = (T)(acc / (A)((d1 - d0) * (h1 - h0) * (w1 - w0)));
        } else {
            y[o] = best;
            idx[o] = arg;
        }
    }
}

// The adjoint: one thread per input element, gathering over the cells whose windows hold it
// gy / (window size) (mode 0) or gy where the cell's saved index names it (mode 1).
template <typename T>
__global__ void ferro_adaptive_pool_bwd(const T* __restrict__ gy,
                                        const long long* __restrict__ idx, T* __restrict__ gx,
                                        int mode, long long n_in, long long D, long long H,
                                        long long W, long long OD, long long OH, long long OW) {
    typedef typename ferro_acc<T>::type A;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n_in; e += step) {
        const long long w = e % W, h = (e / W) % H, d = (e / (W * H)) % D;
        const long long plane = (e / (W * H * D)) * OD * OH * OW, pos = (d * H + h) * W + w;
        A acc = A(0);
        for (long long od = d * OD / D; od < OD && ferro_adaptive_start(od, D, OD) <= d; ++od) {
            const long long nd = ferro_adaptive_end(od, D, OD) - ferro_adaptive_start(od, D, OD);
            if (ferro_adaptive_end(od, D, OD) <= d) continue;
            for (long long oh = h * OH / H; oh < OH && ferro_adaptive_start(oh, H, OH) <= h; ++oh) {
                const long long nh =
                    ferro_adaptive_end(oh, H, OH) - ferro_adaptive_start(oh, H, OH);
                if (ferro_adaptive_end(oh, H, OH) <= h) continue;
                for (long long ow = w * OW / W; ow < OW && ferro_adaptive_start(ow, W, OW) <= w;
                     ++ow) {
                    const long long nw =
                        ferro_adaptive_end(ow, W, OW) - ferro_adaptive_start(ow, W, OW);
                    if (ferro_adaptive_end(ow, W, OW) <= w) continue;
                    const long long o = plane + (od * OH + oh) * OW + ow;
                    if (mode == 0) {
                        acc += (A)gy[o] / (A)(nd * nh * nw);
                    } else if (idx[o] == pos) {
                        acc += (A)gy[o];
                    }
                }
            }
        }
        gx[e] = (T)acc;
    }
}
