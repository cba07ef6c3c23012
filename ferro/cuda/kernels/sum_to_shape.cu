// Undo broadcasting in one pass: out[j] = sum of src over every index that maps to j.
// src is C-contiguous with ndim dims `shape`; `out_strides[d]` is the stride (in elements) of
// dim d in the C-contiguous output, 0 for a dimension that is summed away. One thread per
// output element walks the reduced sub-space (`red_shape`/`red_strides` list only the summed
// dims, with their strides in src).
template <typename T>
__global__ void ferro_sum_to_shape(const T* __restrict__ src, T* __restrict__ out,
                                   long long n_out, int ndim, const long long* __restrict__ shape,
                                   const long long* __restrict__ keep_strides_src,
                                   const long long* __restrict__ out_strides, int n_red,
                                   const long long* __restrict__ red_shape,
                                   const long long* __restrict__ red_strides, long long n_red_total) {
    for (long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x; j < n_out;
         j += (long long)blockDim.x * gridDim.x) {
        // Source offset of output element j (over the kept dims).
        long long rem = j, base = 0;
        for (int d = 0; d < ndim; d++) {
            if (out_strides[d] == 0) continue;
            long long idx = rem / out_strides[d];
            rem -= idx * out_strides[d];
            base += idx * keep_strides_src[d];
        }
        double acc = 0.0;
        for (long long r = 0; r < n_red_total; r++) {
            long long rr = r, off = base;
            for (int k = n_red - 1; k >= 0; k--) {
                long long idx = rr % red_shape[k];
                rr /= red_shape[k];
                off += idx * red_strides[k];
            }
            acc += (double)src[off];
        }
        out[j] = (T)acc;
    }
}
