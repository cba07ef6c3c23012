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

// im2col and its adjoint col2im for up to three spatial dimensions (a 1-d or 2-d convolution is
// a 3-d one whose leading sizes and kernel are 1), the GEMM path of ferro/ops/conv.py on CuPy:
//   cols[c, kd, kh, kw, b, od, oh, ow] = x[b, c, od*sd - pd + kd*dd, oh*sh - ph + kh*dh, ...]
// (zero where the position falls in the padding). Columns are channel-major, as the GEMM path
// multiplies them (C*K rows, n*L columns), or batch-major (n, C*K, L), as unfold/fold hold them.
// im2col: one thread per column element; col2im: one thread per input element, gathering the
// column entries that read it (at most kd*kh*kw), so no atomics and a fixed summation order.
// Sizes: n, C, D H W (input), OD OH OW (output), kernel, stride, padding, dilation (3 each),
// then the layout (0: channel-major, 1: batch-major).

struct ferro_cols_geom {
    long long n, c, D, H, W, OD, OH, OW, kd, kh, kw, sd, sh, sw, pd, ph, pw, dd, dh, dw;
    int batch_major;
};

// The kernels take the geometry as scalar arguments, in the struct's order.
#define FERRO_COLS_ARGS                                                                        \
    long long n, long long c, long long D, long long H, long long W, long long OD, long long OH, \
        long long OW, long long kd, long long kh, long long kw, long long sd, long long sh,      \
        long long sw, long long pd, long long ph, long long pw, long long dd, long long dh,     \
        long long dw, int batch_major
#define FERRO_COLS_GEOM \
    {n, c, D, H, W, OD, OH, OW, kd, kh, kw, sd, sh, sw, pd, ph, pw, dd, dh, dw, batch_major}

// The index of column entry (b, c, k, l) in the columns (K offsets, L output positions).
__device__ __forceinline__ long long ferro_col_index(const ferro_cols_geom& g, long long b,
                                                     long long c, long long k, long long l) {
    const long long K = g.kd * g.kh * g.kw, L = g.OD * g.OH * g.OW;
    return g.batch_major ? ((b * g.c + c) * K + k) * L + l : ((c * K + k) * g.n + b) * L + l;
}

template <typename T>
__global__ void ferro_im2col(const T* __restrict__ x, T* __restrict__ cols, FERRO_COLS_ARGS) {
    const ferro_cols_geom g = FERRO_COLS_GEOM;
    const long long K = g.kd * g.kh * g.kw, L = g.OD * g.OH * g.OW;
    const long long total = g.n * g.c * K * L;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const long long l = i % L;
        long long b, c, k;
        if (g.batch_major) {
            k = (i / L) % K; c = (i / (L * K)) % g.c; b = i / (L * K * g.c);
        } else {
            b = (i / L) % g.n; k = (i / (L * g.n)) % K; c = i / (L * g.n * K);
        }
        const long long qw = k % g.kw, qh = (k / g.kw) % g.kh, qd = k / (g.kw * g.kh);
        const long long ow = l % g.OW, oh = (l / g.OW) % g.OH, od = l / (g.OW * g.OH);
        const long long d = od * g.sd - g.pd + qd * g.dd, h = oh * g.sh - g.ph + qh * g.dh;
        const long long w = ow * g.sw - g.pw + qw * g.dw;
        const bool inside = d >= 0 && d < g.D && h >= 0 && h < g.H && w >= 0 && w < g.W;
        cols[i] = inside ? x[(((b * g.c + c) * g.D + d) * g.H + h) * g.W + w] : T(0);
    }
}

template <typename T>
__global__ void ferro_col2im(const T* __restrict__ cols, T* __restrict__ x, FERRO_COLS_ARGS) {
    const ferro_cols_geom g = FERRO_COLS_GEOM;
    typedef typename ferro_acc<T>::type A;
    const long long total = g.n * g.c * g.D * g.H * g.W;
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < total;
         e += (long long)gridDim.x * blockDim.x) {
        const long long w = e % g.W, h = (e / g.W) % g.H, d = (e / (g.W * g.H)) % g.D;
        const long long c = (e / (g.W * g.H * g.D)) % g.c, b = e / (g.W * g.H * g.D * g.c);
        A acc = A(0);
        for (long long qd = 0; qd < g.kd; ++qd) {
            const long long od = ferro_pool_window(d, qd, g.sd, g.pd, g.dd, g.OD);
            if (od < 0) continue;
            for (long long qh = 0; qh < g.kh; ++qh) {
                const long long oh = ferro_pool_window(h, qh, g.sh, g.ph, g.dh, g.OH);
                if (oh < 0) continue;
                for (long long qw = 0; qw < g.kw; ++qw) {
                    const long long ow = ferro_pool_window(w, qw, g.sw, g.pw, g.dw, g.OW);
                    if (ow < 0) continue;
                    const long long k = (qd * g.kh + qh) * g.kw + qw;
                    acc += (A)cols[ferro_col_index(g, b, c, k, (od * g.OH + oh) * g.OW + ow)];
                }
            }
        }
        x[e] = (T)acc;
    }
}
