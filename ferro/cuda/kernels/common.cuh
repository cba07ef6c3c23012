// Shared by every ferro kernel source: the loader puts formulas.cuh and this file in front of
// each source (NVRTC has no include path for package files), so the compile test covers them
// with each kernel. No header is included: NVRTC's built-in device math is all the kernels use.

// NVRTC has no math.h: infinity from its bit pattern.
#define FERRO_INF __longlong_as_double(0x7ff0000000000000LL)

// The type a kernel computes in: float for float data, double for double data.
template <typename T> struct ferro_acc { typedef float type; };
template <> struct ferro_acc<double> { typedef double type; };

__device__ __forceinline__ float ferro_exp(float x) { return expf(x); }
__device__ __forceinline__ double ferro_exp(double x) { return exp(x); }
__device__ __forceinline__ float ferro_log(float x) { return logf(x); }
__device__ __forceinline__ double ferro_log(double x) { return log(x); }

// 16-byte vectors for the elementwise kernels: 4 floats or 2 doubles per load.
template <typename T> struct ferro_vec { typedef float4 type; enum { n = 4 }; };
template <> struct ferro_vec<double> { typedef double2 type; enum { n = 2 }; };

__device__ __forceinline__ bool ferro_aligned16(const void* p) {
    return (reinterpret_cast<unsigned long long>(p) & 15ULL) == 0;
}

// Warp- and block-wide reductions. Every block size ferro launches is a multiple of 32 (at
// most 1024); every thread of the block gets the result. `scratch` holds 32 values.
template <typename A> __device__ __forceinline__ A ferro_warp_sum(A v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <typename A> __device__ A ferro_block_sum(A v, A* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = ferro_warp_sum(v);
    __syncthreads();  // scratch may still be read from a previous call
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < nw ? scratch[lane] : A(0);
    return ferro_warp_sum(v);
}

// Online softmax state (running max m, sum of exp(x - m)): merging two states.
template <typename A> __device__ __forceinline__ void ferro_merge(A& m, A& s, A m2, A s2) {
    const A mm = m > m2 ? m : m2;
    if (mm == A(-FERRO_INF)) {  // no finite value on either side: s is 0 or NaN; keep a NaN
        s = s + s2;             // (and never compute exp(-inf - -inf))
    } else {
        s = s * ferro_exp(m - mm) + s2 * ferro_exp(m2 - mm);
    }
    m = mm;
}

template <typename A> __device__ void ferro_block_merge(A& m, A& s, A* scratch_m, A* scratch_s) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1) {
        const A m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        ferro_merge(m, s, m2, s2);
    }
    __syncthreads();
    if (lane == 0) { scratch_m[warp] = m; scratch_s[warp] = s; }
    __syncthreads();
    m = lane < nw ? scratch_m[lane] : A(-FERRO_INF);
    s = lane < nw ? scratch_s[lane] : A(0);
    for (int o = 16; o > 0; o >>= 1) {
        const A m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        ferro_merge(m, s, m2, s2);
    }
}

// Per-thread online softmax state over x[0, n) with stride blockDim.x.
template <typename T, typename A>
__device__ __forceinline__ void ferro_row_state(const T* __restrict__ x, long long n, A& m, A& s) {
    m = A(-FERRO_INF);
    s = A(0);
    for (long long j = threadIdx.x; j < n; j += blockDim.x) {
        const A v = (A)x[j];
        if (v > m) {
            s = s * ferro_exp(m - v) + A(1);  // exp(-inf) = 0 on the first element
            m = v;
        } else if (v != A(-FERRO_INF)) {  // -inf adds 0 (and -inf - -inf would be NaN)
            s += ferro_exp(v - m);            // NaN stays NaN
        }
    }
}

// Sliding windows (pooling, im2col/col2im): the output position along one dimension whose
// window reaches input position `pos` at offset `k`: o * s - p + k * d == pos, 0 <= o < out;
// -1 where there is none.
__device__ __forceinline__ long long ferro_pool_window(long long pos, long long k, long long s,
                                                       long long p, long long d, long long out) {
    const long long num = pos + p - k * d;
    if (num < 0 || num % s) return -1;
    return num / s < out ? num / s : -1;
}
