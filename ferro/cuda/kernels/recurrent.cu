// Fused gradients of the recurrent cells, one step at a time (the GPU half of
// ferro/_C/recurrent_kernels.pyx, same names, arguments and math). Every array is C-contiguous
// (rows, hidden) or (rows, G * hidden) with the gate blocks of a row side by side, in
// PyTorch's order: i, f, g, o for LSTM, r, z, n for GRU. One thread per (row, unit), in a
// grid-stride loop; each thread writes its unit's entry of every gate block.

// LSTM: from the activated gates (acts), the previous cell state, tanh of the new one (tc),
// and the gradients of the new hidden and cell states (gh, gc): the gate gradients (gg) and
// the gradient of the previous cell state (gcp).
template <typename T>
__global__ void ferro_lstm_bwd(const T* __restrict__ gh, const T* __restrict__ gc,
                               const T* __restrict__ acts, const T* __restrict__ cp,
                               const T* __restrict__ tc, T* __restrict__ gg,
                               T* __restrict__ gcp, long long rows, long long hidden) {
    const long long n = rows * hidden;
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < n; k += stride) {
        const long long r = k / hidden, j = k - r * hidden;
        const T* a = acts + r * 4 * hidden;
        T* g4 = gg + r * 4 * hidden;
        const T i = a[j], f = a[hidden + j], g = a[2 * hidden + j], o = a[3 * hidden + j];
        const T t = tc[k], dh = gh[k];
        const T dc = gc[k] + dh * o * (T(1) - t * t);
        g4[j] = dc * g * i * (T(1) - i);
        g4[hidden + j] = dc * cp[k] * f * (T(1) - f);
        g4[2 * hidden + j] = dc * i * (T(1) - g * g);
        g4[3 * hidden + j] = dh * t * o * (T(1) - o);
        gcp[k] = dc * f;
    }
}

// GRU: from r, z, n (acts), the hidden projection's n block (hgn), the previous state (hp) and
// the new state's gradient (gh): the gradients of the input (gi) and hidden (gg) projections,
// and gh * z, the direct part of the previous state's gradient (ghz).
template <typename T>
__global__ void ferro_gru_bwd(const T* __restrict__ gh, const T* __restrict__ acts,
                              const T* __restrict__ hgn, const T* __restrict__ hp,
                              T* __restrict__ gi, T* __restrict__ gg, T* __restrict__ ghz,
                              long long rows, long long hidden) {
    const long long n = rows * hidden;
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < n; k += stride) {
        const long long r = k / hidden, j = k - r * hidden;
        const T* a = acts + r * 3 * hidden;
        T* i3 = gi + r * 3 * hidden;
        T* h3 = gg + r * 3 * hidden;
        const T rr = a[j], z = a[hidden + j], nn = a[2 * hidden + j], d = gh[k];
        const T gn = d * (T(1) - z) * (T(1) - nn * nn);
        const T gr = gn * hgn[k] * rr * (T(1) - rr);
        const T gz = d * (hp[k] - nn) * z * (T(1) - z);
        i3[j] = gr;
        i3[hidden + j] = gz;
        i3[2 * hidden + j] = gn;
        h3[j] = gr;
        h3[hidden + j] = gz;
        h3[2 * hidden + j] = gn * rr;
        ghz[k] = d * z;
    }
}
