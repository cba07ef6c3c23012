// Undo broadcasting in one kernel: out[j] = sum of src over every index that maps to j.
//
// The host coalesces src (C-contiguous) into at most 8 dims, each kept or summed (bit d of
// `red_mask` set), lengths d0..d7 (outermost first, 1 for unused). Output element j walks the
// kept dims and reduced index r the summed dims, both in C order. Block (bx, by): threadIdx.x
// picks an output of the block's tile of bx outputs, threadIdx.y strides the reduced space, and
// blockIdx.y splits it further when the outputs alone cannot fill the GPU. With one split
// (gridDim.y == 1) the block writes its tile directly. With several, each block leaves its
// partial sums in `ws` (gridDim.y rows of n_out), and the last block to finish a tile (a counter
// per tile, reset for reuse) adds the rows in a fixed order: the result does not depend on
// which block ran first. Sums run in double.

struct ferro_dims {
    long long len[8];
};

// Offset in src of the element whose kept index is `j` (want_red = false) or whose reduced index
// is `j` (want_red = true), over dims of one kind, walked innermost first.
__device__ __forceinline__ long long ferro_offset(long long j, const ferro_dims& d, int nd,
                                                  int red_mask, bool want_red) {
    long long off = 0, stride = 1;
#pragma unroll
    for (int k = 7; k >= 0; k--) {  // unrolled, so d.len stays in registers
        if (k >= nd) continue;
        const bool is_red = (red_mask >> k) & 1;
        if (is_red == want_red) {
            const long long q = j / d.len[k];
            off += (j - q * d.len[k]) * stride;
            j = q;
        }
        stride *= d.len[k];
    }
    return off;
}

template <typename T>
__global__ void ferro_sum_to_shape(const T* __restrict__ src, T* __restrict__ out,
                                   double* __restrict__ ws, unsigned int* __restrict__ counter,
                                   long long n_out, long long n_red, int nd, int red_mask,
                                   long long d0, long long d1, long long d2, long long d3,
                                   long long d4, long long d5, long long d6, long long d7) {
    __shared__ double part[1024];
    __shared__ bool last;
    ferro_dims d = {{d0, d1, d2, d3, d4, d5, d6, d7}};
    const int tx = threadIdx.x, ty = threadIdx.y, bx = blockDim.x, by = blockDim.y;
    const long long j = blockIdx.x * (long long)bx + tx;
    double acc = 0.0;
    if (j < n_out) {
        const long long base = ferro_offset(j, d, nd, red_mask, false);
        const long long step = (long long)by * gridDim.y;
        long long r = blockIdx.y * (long long)by + ty;
        // One summed dim (the common case: a bias over the batch) needs no division.
        long long red_stride = 1;
#pragma unroll
        for (int k = 7; k >= 0; k--) {  // product of the dims inside the lowest summed one
            const bool inside = (red_mask & ((1 << k) - 1)) != 0;  // a summed dim is outside k
            if (k < nd && !((red_mask >> k) & 1) && inside) red_stride *= d.len[k];
        }
        if (__popc(red_mask) == 1) {
            for (; r < n_red; r += step) acc += (double)src[base + r * red_stride];
        } else {
            for (; r < n_red; r += step)
                acc += (double)src[base + ferro_offset(r, d, nd, red_mask, true)];
        }
    }
    // Tree over threadIdx.y (fixed order).
    part[ty * bx + tx] = acc;
    __syncthreads();
    for (int s = by / 2; s > 0; s >>= 1) {
        if (ty < s) part[ty * bx + tx] += part[(ty + s) * bx + tx];
        __syncthreads();
    }
    if (gridDim.y == 1) {
        if (ty == 0 && j < n_out) out[j] = (T)part[tx];
        return;
    }
    if (ty == 0 && j < n_out) ws[blockIdx.y * n_out + j] = part[tx];
    __threadfence();
    __syncthreads();
    if (tx == 0 && ty == 0) {
        last = atomicAdd(&counter[blockIdx.x], 1u) == gridDim.y - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    if (ty == 0 && j < n_out) {
        const volatile double* w = ws;
        double total = 0.0;
        for (unsigned int k = 0; k < gridDim.y; k++) total += w[k * n_out + j];
        out[j] = (T)total;
    }
    if (tx == 0 && ty == 0) counter[blockIdx.x] = 0u;
}
