// Fused elementwise kernels of the activations. The per-element math is formulas.cuh, shared
// with the CPU kernels; here it is mapped over n elements with 16-byte vector loads where every
// pointer allows them (scalars for the tail and for misaligned views).
//
// Backward kernels: gx[i] = formula(g, v[i], w[i], a), where v and w are the saved arrays (the
// output y for relu, sigmoid and tanh; the input x for leaky_relu and both gelus; x and sigmoid(x) for
// silu), a is leaky_relu's slope, and g is gy[i], or gy[0] for every i when gs == 0: after
// .sum() or .mean() the upstream gradient is one value broadcast with stride 0.

// Grid-stride map for the backward kernels. Op::two says whether the formula reads w.
template <typename T, typename Op>
__device__ __forceinline__ void ferro_grad_map(const T* __restrict__ gy, long long gs,
                                               const T* __restrict__ v, const T* __restrict__ w,
                                               T* __restrict__ gx, long long n, Op op) {
    typedef typename ferro_vec<T>::type V;
    const int W = ferro_vec<T>::n;
    const long long tid = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    const long long stride = (long long)blockDim.x * gridDim.x;
    long long head = 0;
    if ((gs == 0 || ferro_aligned16(gy)) && ferro_aligned16(v) && ferro_aligned16(gx)
        && (!Op::two || ferro_aligned16(w))) {
        const long long nv = n / W;
        for (long long i = tid; i < nv; i += stride) {
            V vv = reinterpret_cast<const V*>(v)[i], vw = vv, vg = vv, vo;
            if (Op::two) vw = reinterpret_cast<const V*>(w)[i];
            if (gs) vg = reinterpret_cast<const V*>(gy)[i];
            const T* pv = reinterpret_cast<const T*>(&vv);
            const T* pw = reinterpret_cast<const T*>(&vw);
            const T* pg = reinterpret_cast<const T*>(&vg);
            T* po = reinterpret_cast<T*>(&vo);
#pragma unroll
            for (int k = 0; k < W; k++) po[k] = op(gs ? pg[k] : gy[0], pv[k], pw[k]);
            reinterpret_cast<V*>(gx)[i] = vo;
        }
        head = nv * W;
    }
    for (long long i = head + tid; i < n; i += stride)
        gx[i] = op(gy[i * gs], v[i], Op::two ? w[i] : v[i]);
}

#define FERRO_GRAD_KERNEL(NAME, TWO, EXPR)                                                   \
    template <typename T> struct NAME##_op {                                                 \
        enum { two = TWO };                                                                  \
        T a;                                                                                 \
        __device__ __forceinline__ T operator()(T g, T v, T w) const { return (EXPR); }      \
    };                                                                                       \
    template <typename T>                                                                    \
    __global__ void NAME(const T* __restrict__ gy, long long gs, const T* __restrict__ v,     \
                         const T* __restrict__ w, T* __restrict__ gx, long long n, T a) {    \
        NAME##_op<T> op;                                                                     \
        op.a = a;                                                                            \
        ferro_grad_map(gy, gs, v, w, gx, n, op);                                             \
    }

FERRO_GRAD_KERNEL(ferro_relu_bwd, 0, ferro_relu_grad(g, v))
FERRO_GRAD_KERNEL(ferro_leaky_relu_bwd, 0, ferro_leaky_relu_grad(g, v, a))
FERRO_GRAD_KERNEL(ferro_sigmoid_bwd, 0, ferro_sigmoid_grad(g, v))
FERRO_GRAD_KERNEL(ferro_tanh_bwd, 0, ferro_tanh_grad(g, v))
FERRO_GRAD_KERNEL(ferro_gelu_bwd, 0, ferro_gelu_grad(g, v))
FERRO_GRAD_KERNEL(ferro_gelu_tanh_bwd, 0, ferro_gelu_tanh_grad(g, v))
FERRO_GRAD_KERNEL(ferro_silu_bwd, 1, ferro_silu_grad(g, v, w))

// gelu forward, one pass (the generic CuPy expression makes five or more): y = op(x), op the
// exact (x Phi(x)) or the tanh form.
template <typename T, typename Op>
__device__ __forceinline__ void ferro_unary_map(const T* __restrict__ x, T* __restrict__ y,
                                                long long n, Op op) {
    typedef typename ferro_vec<T>::type V;
    const int W = ferro_vec<T>::n;
    const long long tid = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    const long long stride = (long long)blockDim.x * gridDim.x;
    long long head = 0;
    if (ferro_aligned16(x) && ferro_aligned16(y)) {
        const long long nv = n / W;
        for (long long i = tid; i < nv; i += stride) {
            V vx = reinterpret_cast<const V*>(x)[i], vy;
            const T* px = reinterpret_cast<const T*>(&vx);
            T* py = reinterpret_cast<T*>(&vy);
#pragma unroll
            for (int k = 0; k < W; k++) py[k] = op(px[k]);
            reinterpret_cast<V*>(y)[i] = vy;
        }
        head = nv * W;
    }
    for (long long i = head + tid; i < n; i += stride) y[i] = op(x[i]);
}

#define FERRO_UNARY_KERNEL(NAME, EXPR)                                                       \
    template <typename T> struct NAME##_op {                                                 \
        __device__ __forceinline__ T operator()(T v) const { return (EXPR); }                \
    };                                                                                       \
    template <typename T>                                                                    \
    __global__ void NAME(const T* __restrict__ x, T* __restrict__ y, long long n) {          \
        ferro_unary_map(x, y, n, NAME##_op<T>());                                            \
    }

FERRO_UNARY_KERNEL(ferro_gelu_fwd, ferro_gelu(v))
FERRO_UNARY_KERNEL(ferro_gelu_tanh_fwd, ferro_gelu_tanh(v))
