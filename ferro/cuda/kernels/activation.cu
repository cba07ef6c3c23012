// Fused backward of elementwise activations: gx = f(gy, saved) in one pass.
// `saved` is the forward output y (relu, leaky_relu, sigmoid, tanh) or the input x (gelu, silu).
#define FERRO_ELEMENTWISE(NAME, EXPR)                                                        \
    template <typename T>                                                                  \
    __global__ void NAME(const T* __restrict__ gy, const T* __restrict__ v,                \
                         T* __restrict__ gx, long long n, T a) {                           \
        for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;          \
             i += (long long)blockDim.x * gridDim.x) {                                     \
            const T g = gy[i], s = v[i];                                                   \
            gx[i] = (EXPR);                                                                \
        }                                                                                  \
    }

FERRO_ELEMENTWISE(ferro_relu_bwd, s > T(0) ? g : T(0))
FERRO_ELEMENTWISE(ferro_leaky_relu_bwd, s > T(0) ? g : g * a)
FERRO_ELEMENTWISE(ferro_sigmoid_bwd, g * s * (T(1) - s))
FERRO_ELEMENTWISE(ferro_tanh_bwd, g * (T(1) - s * s))
FERRO_ELEMENTWISE(ferro_gelu_bwd, g * (T(0.5) * (T(1) + erf(s * T(0.70710678118654752)))
                                      + s * T(0.39894228040143268) * exp(T(-0.5) * s * s)))
FERRO_ELEMENTWISE(ferro_silu_bwd, g / (T(1) + exp(-s)) * (T(1) + s * (T(1) - T(1) / (T(1) + exp(-s)))))
