// Fused gate forward and gradients of the recurrent cells, one step at a time (the GPU half of
// ferro/_C/recurrent_kernels.pyx, same names, arguments and math). Every array is C-contiguous
// (rows, hidden) or (rows, G * hidden) with the gate blocks of a row side by side, in
// PyTorch's order: i, f, g, o for LSTM, r, z, n for GRU. One thread per (row, unit), in a
// grid-stride loop; each thread writes its unit's entry of every gate block.

__device__ __forceinline__ float ferro_rnn_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double ferro_rnn_tanh(double x) { return tanh(x); }
// sigmoid(x) = tanh(x / 2) / 2 + 1/2, as the generic cells compute it.
template <typename T>
__device__ __forceinline__ T ferro_rnn_sigmoid(T x) {
    return T(0.5) * ferro_rnn_tanh(T(0.5) * x) + T(0.5);
}

// LSTM forward: acts holds h @ W_hh^T on entry and x the input projection with both biases
// (blocks i, f, g, o); c the previous cell state. Writes the activated gates into acts, the
// new cell state into cn, tanh of it into tc and the new hidden state into h.
template <typename T>
__global__ void ferro_lstm_fwd(const T* __restrict__ x, T* __restrict__ acts,
                               const T* __restrict__ c, T* __restrict__ tc, T* __restrict__ cn,
                               T* __restrict__ h, long long rows, long long hidden) {
    const long long n = rows * hidden;
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < n; k += stride) {
        const long long r = k / hidden, j = k - r * hidden;
        const T* xr = x + r * 4 * hidden;
        T* a = acts + r * 4 * hidden;
        const T i = ferro_rnn_sigmoid(xr[j] + a[j]);
        const T f = ferro_rnn_sigmoid(xr[hidden + j] + a[hidden + j]);
        const T g = ferro_rnn_tanh(xr[2 * hidden + j] + a[2 * hidden + j]);
        const T o = ferro_rnn_sigmoid(xr[3 * hidden + j] + a[3 * hidden + j]);
        const T cy = f * c[k] + i * g;
        const T t = ferro_rnn_tanh(cy);
        a[j] = i;
        a[hidden + j] = f;
        a[2 * hidden + j] = g;
        a[3 * hidden + j] = o;
        cn[k] = cy;
        tc[k] = t;
        h[k] = o * t;
    }
}

// GRU forward: x the input projection with bias_ih, hg h @ W_hh^T + bias_hh (blocks r, z, n),
// h the previous state. Writes r, z, n into acts, hg's n block into hgn and the new state
// (1 - z) n + z h into hn, where n = tanh(x_n + r hg_n).
template <typename T>
__global__ void ferro_gru_fwd(const T* __restrict__ x, const T* __restrict__ hg,
                              const T* __restrict__ h, T* __restrict__ acts, T* __restrict__ hgn,
                              T* __restrict__ hn, long long rows, long long hidden) {
    const long long n = rows * hidden;
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < n; k += stride) {
        const long long r = k / hidden, j = k - r * hidden;
        const T* xr = x + r * 3 * hidden;
        const T* gr = hg + r * 3 * hidden;
        T* a = acts + r * 3 * hidden;
        const T rr = ferro_rnn_sigmoid(xr[j] + gr[j]);
        const T z = ferro_rnn_sigmoid(xr[hidden + j] + gr[hidden + j]);
        const T hn_ = gr[2 * hidden + j];
        const T nn = ferro_rnn_tanh(xr[2 * hidden + j] + rr * hn_);
        a[j] = rr;
        a[hidden + j] = z;
        a[2 * hidden + j] = nn;
        hgn[k] = hn_;
        hn[k] = (h[k] - nn) * z + nn;
    }
}

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
