// Fused backward of elementwise activations: gx = f(gy, saved) in one pass (ferro_map2: 16-byte
// vectors where aligned). `saved` is the forward output y (relu, sigmoid, tanh) or the input x
// (leaky_relu, gelu, silu); `a` is leaky_relu's slope. Math runs in the data's own precision.
#define FERRO_ACTIVATION(NAME, EXPR)                                                         \
    template <typename T> struct NAME##_op {                                                 \
        T a;                                                                                 \
        __device__ __forceinline__ T operator()(T g, T s) const { return (EXPR); }           \
    };                                                                                       \
    template <typename T>                                                                    \
    __global__ void NAME(const T* __restrict__ gy, const T* __restrict__ v,                  \
                         T* __restrict__ gx, long long n, T a) {                             \
        NAME##_op<T> op;                                                                     \
        op.a = a;                                                                            \
        ferro_map2(gy, v, gx, n, op);                                                        \
    }

FERRO_ACTIVATION(ferro_relu_bwd, s > T(0) ? g : T(0))
FERRO_ACTIVATION(ferro_leaky_relu_bwd, s > T(0) ? g : g * a)
FERRO_ACTIVATION(ferro_sigmoid_bwd, g * s * (T(1) - s))
FERRO_ACTIVATION(ferro_tanh_bwd, g * (T(1) - s * s))
// d/dx [x Phi(x)] = Phi(x) + x phi(x)
FERRO_ACTIVATION(ferro_gelu_bwd,
                 g * (T(0.5) * (T(1) + ferro_erf(s * T(0.70710678118654752)))
                      + s * T(0.39894228040143268) * ferro_exp(T(-0.5) * s * s)))
// d/dx [x sigma(x)] = sigma(x) (1 + x (1 - sigma(x)))
FERRO_ACTIVATION(ferro_silu_bwd,
                 g * (T(1) / (T(1) + ferro_exp(-s))) * (T(1) + s * (T(1) - T(1) / (T(1) + ferro_exp(-s)))))
