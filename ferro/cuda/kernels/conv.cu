// Depthwise 2-d convolution (one input channel per group, channel multiplier m), NCHW,
// C-contiguous, the GPU twin of ferro/_C/conv_kernels.pyx with the same geometry:
//   y[b, co, oy, ox] = sum_{ki, kj} x[b, co / m, oy*sh - ph + ki*dh, ox*sw - pw + kj*dw]
//                                   * w[co, 0, ki, kj]   (out-of-range inputs are zero).
// forward and the input gradient are gathers (one thread per output / input element: no
// atomics, deterministic); the weight gradient is one block per (co, ki, kj) reducing over the
// batch and the output positions with ferro_block_sum. Everything accumulates in ferro_acc<T>.

// The geometry arrives as 15 int64 values in device memory (n, c, m, h, w, kh, kw, oh, ow, sh,
// sw, ph, pw, dh, dw): one small array instead of a struct argument.
struct ferro_dw_geom {
    long long n, c, m, h, w, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw;
};

__device__ __forceinline__ ferro_dw_geom ferro_dw_load(const long long* __restrict__ v) {
    ferro_dw_geom g;
    g.n = v[0]; g.c = v[1]; g.m = v[2]; g.h = v[3]; g.w = v[4]; g.kh = v[5]; g.kw = v[6];
    g.oh = v[7]; g.ow = v[8]; g.sh = v[9]; g.sw = v[10]; g.ph = v[11]; g.pw = v[12];
    g.dh = v[13]; g.dw = v[14];
    return g;
}

template <typename T>
__global__ void ferro_depthwise2d_fwd(const T* __restrict__ x, const T* __restrict__ wt,
                                      T* __restrict__ y, const long long* __restrict__ geom) {
    typedef typename ferro_acc<T>::type A;
    const ferro_dw_geom g = ferro_dw_load(geom);
    const long long total = g.n * g.c * g.m * g.oh * g.ow;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const long long ox = i % g.ow, oy = (i / g.ow) % g.oh;
        const long long co = (i / (g.ow * g.oh)) % (g.c * g.m);
        const long long b = i / (g.ow * g.oh * g.c * g.m);
        const T* xp = x + (b * g.c + co / g.m) * g.h * g.w;
        const T* wp = wt + co * g.kh * g.kw;
        A acc = A(0);
        for (long long ki = 0; ki < g.kh; ++ki) {
            const long long iy = oy * g.sh - g.ph + ki * g.dh;
            if (iy < 0 || iy >= g.h) continue;
            for (long long kj = 0; kj < g.kw; ++kj) {
                const long long ix = ox * g.sw - g.pw + kj * g.dw;
                if (ix < 0 || ix >= g.w) continue;
                acc += (A)xp[iy * g.w + ix] * (A)wp[ki * g.kw + kj];
            }
        }
        y[i] = (T)acc;
    }
}

template <typename T>
__global__ void ferro_depthwise2d_bwd_x(const T* __restrict__ gy, const T* __restrict__ wt,
                                        T* __restrict__ gx, const long long* __restrict__ geom) {
    typedef typename ferro_acc<T>::type A;
    const ferro_dw_geom g = ferro_dw_load(geom);
    const long long total = g.n * g.c * g.h * g.w;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const long long ix = i % g.w, iy = (i / g.w) % g.h, ci = (i / (g.w * g.h)) % g.c;
        const long long b = i / (g.w * g.h * g.c);
        A acc = A(0);
        for (long long j = 0; j < g.m; ++j) {
            const long long co = ci * g.m + j;
            const T* gp = gy + (b * g.c * g.m + co) * g.oh * g.ow;
            const T* wp = wt + co * g.kh * g.kw;
            for (long long ki = 0; ki < g.kh; ++ki) {
                const long long ty = iy + g.ph - ki * g.dh;  // = oy * sh
                if (ty < 0 || ty % g.sh) continue;
                const long long oy = ty / g.sh;
                if (oy >= g.oh) continue;
                for (long long kj = 0; kj < g.kw; ++kj) {
                    const long long tx = ix + g.pw - kj * g.dw;
                    if (tx < 0 || tx % g.sw) continue;
                    const long long ox = tx / g.sw;
                    if (ox >= g.ow) continue;
                    acc += (A)gp[oy * g.ow + ox] * (A)wp[ki * g.kw + kj];
                }
            }
        }
        gx[i] = (T)acc;
    }
}

// One block per weight element (co, ki, kj), any multiple of 32 threads.
template <typename T>
__global__ void ferro_depthwise2d_bwd_w(const T* __restrict__ gy, const T* __restrict__ x,
                                        T* __restrict__ gw, const long long* __restrict__ geom) {
    typedef typename ferro_acc<T>::type A;
    __shared__ A scratch[32];
    const ferro_dw_geom g = ferro_dw_load(geom);
    const long long k = blockIdx.x, kj = k % g.kw, ki = (k / g.kw) % g.kh, co = k / (g.kw * g.kh);
    const long long per = g.oh * g.ow, total = g.n * per;
    A acc = A(0);
    for (long long t = threadIdx.x; t < total; t += blockDim.x) {
        const long long b = t / per, oy = (t % per) / g.ow, ox = t % g.ow;
        const long long iy = oy * g.sh - g.ph + ki * g.dh, ix = ox * g.sw - g.pw + kj * g.dw;
        if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
        acc += (A)gy[(b * g.c * g.m + co) * per + oy * g.ow + ox]
               * (A)x[((b * g.c + co / g.m) * g.h + iy) * g.w + ix];
    }
    acc = ferro_block_sum(acc, scratch);
    if (threadIdx.x == 0) gw[k] = (T)acc;
}
