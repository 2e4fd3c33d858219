/* elementwise.cu — conversions, bias + dropout + residual, GELU and AdamW:
 * one element per thread (grid-stride), fp32 math, bf16 storage.
 * Contracts in kernels.h. */
#include "common.cuh"

#define EW_THREADS 256u
#define EW_MAX_BLOCKS 65535u

static unsigned ew_blocks(size_t n)
{
    unsigned b = kern_blocks(n, EW_THREADS);
    return b > EW_MAX_BLOCKS ? EW_MAX_BLOCKS : b;
}

#define GRID_STRIDE(i, n) \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (size_t)gridDim.x * blockDim.x)

/* ------------------------------------------------------------ conversions */

__global__ void f32_to_bf16_kernel(uint16_t *out, const float *in, size_t n)
{
    GRID_STRIDE(i, n) out[i] = f2bf(in[i]);
}

__global__ void bf16_to_f32_kernel(float *out, const uint16_t *in, size_t n)
{
    GRID_STRIDE(i, n) out[i] = bf2f(in[i]);
}

__global__ void bf16_accum_f32_kernel(float *acc, const uint16_t *in, size_t n)
{
    GRID_STRIDE(i, n) acc[i] += bf2f(in[i]);
}

extern "C" cudaError_t kern_f32_to_bf16(uint16_t *out, const float *in, size_t n,
                                        cudaStream_t stream)
{
    f32_to_bf16_kernel<<<ew_blocks(n), EW_THREADS, 0, stream>>>(out, in, n);
    return kern_status();
}

extern "C" cudaError_t kern_bf16_to_f32(float *out, const uint16_t *in, size_t n,
                                        cudaStream_t stream)
{
    bf16_to_f32_kernel<<<ew_blocks(n), EW_THREADS, 0, stream>>>(out, in, n);
    return kern_status();
}

extern "C" cudaError_t kern_bf16_accum_f32(float *acc, const uint16_t *in, size_t n,
                                           cudaStream_t stream)
{
    bf16_accum_f32_kernel<<<ew_blocks(n), EW_THREADS, 0, stream>>>(acc, in, n);
    return kern_status();
}

extern "C" cudaError_t kern_zero_f32(float *x, size_t n, cudaStream_t stream)
{
    return cudaMemsetAsync(x, 0, n * sizeof(float), stream);
}

/* ------------------------------------------------------------ bias + dropout + residual */

__global__ void bias_dropout_add_kernel(uint16_t *out, uint8_t *mask, const uint16_t *x,
                                        const uint16_t *bias, const uint16_t *residual,
                                        float p, uint64_t seed, size_t n, int C)
{
    float keep_scale = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
    GRID_STRIDE(i, n) {
        float v = bf2f(x[i]);
        if (bias)
            v += bf2f(bias[i % (size_t)C]);
        if (p > 0.0f) {
            uint8_t keep = kern_rand_uniform(seed, i) >= p;
            mask[i] = keep;
            v = keep ? v * keep_scale : 0.0f;
        }
        if (residual)
            v += bf2f(residual[i]);
        out[i] = f2bf(v);
    }
}

extern "C" cudaError_t kern_bias_dropout_add_fwd(uint16_t *out, uint8_t *mask,
                                                 const uint16_t *x, const uint16_t *bias,
                                                 const uint16_t *residual, float p,
                                                 uint64_t seed, int N, int C,
                                                 cudaStream_t stream)
{
    if (p < 0.0f || p >= 1.0f || (p > 0.0f && !mask) || C <= 0 || N < 0)
        return cudaErrorInvalidValue;
    size_t n = (size_t)N * (size_t)C;
    bias_dropout_add_kernel<<<ew_blocks(n), EW_THREADS, 0, stream>>>(out, mask, x, bias,
                                                                     residual, p, seed, n, C);
    return kern_status();
}

__global__ void dropout_bwd_kernel(uint16_t *dinp, const uint16_t *dout, const uint8_t *mask,
                                   float keep_scale, size_t n)
{
    GRID_STRIDE(i, n) {
        float g = bf2f(dout[i]);
        dinp[i] = f2bf(mask ? (mask[i] ? g * keep_scale : 0.0f) : g);
    }
}

extern "C" cudaError_t kern_dropout_bwd(uint16_t *dinp, const uint16_t *dout,
                                        const uint8_t *mask, float p, size_t n,
                                        cudaStream_t stream)
{
    if (p < 0.0f || p >= 1.0f)
        return cudaErrorInvalidValue;
    float keep_scale = 1.0f / (1.0f - p);
    dropout_bwd_kernel<<<ew_blocks(n), EW_THREADS, 0, stream>>>(dinp, dout, mask, keep_scale, n);
    return kern_status();
}

/* ------------------------------------------------------------ GELU (tanh) */

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

__device__ __forceinline__ float gelu_f(float x)
{
    float u = GELU_K * (x + GELU_A * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}

__device__ __forceinline__ float gelu_grad_f(float x)
{
    float u = GELU_K * (x + GELU_A * x * x * x);
    float t = tanhf(u);
    float du = GELU_K * (1.0f + 3.0f * GELU_A * x * x);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

__global__ void bias_gelu_fwd_kernel(uint16_t *out, const uint16_t *inp,
                                     const uint16_t *bias, size_t n, int C)
{
    GRID_STRIDE(i, n) {
        float x = bf2f(inp[i]);
        if (bias)
            x += bf2f(bias[i % (size_t)C]);
        out[i] = f2bf(gelu_f(x));
    }
}

__global__ void bias_gelu_bwd_kernel(uint16_t *dinp, const uint16_t *dout,
                                     const uint16_t *inp, const uint16_t *bias, size_t n,
                                     int C)
{
    GRID_STRIDE(i, n) {
        float x = bf2f(inp[i]);
        if (bias)
            x += bf2f(bias[i % (size_t)C]);
        dinp[i] = f2bf(bf2f(dout[i]) * gelu_grad_f(x));
    }
}

extern "C" cudaError_t kern_bias_gelu_fwd(uint16_t *out, const uint16_t *inp,
                                          const uint16_t *bias, int N, int C,
                                          cudaStream_t stream)
{
    if (C <= 0 || N < 0)
        return cudaErrorInvalidValue;
    size_t n = (size_t)N * (size_t)C;
    bias_gelu_fwd_kernel<<<ew_blocks(n), EW_THREADS, 0, stream>>>(out, inp, bias, n, C);
    return kern_status();
}

extern "C" cudaError_t kern_bias_gelu_bwd(uint16_t *dinp, const uint16_t *dout,
                                          const uint16_t *inp, const uint16_t *bias, int N,
                                          int C, cudaStream_t stream)
{
    if (C <= 0 || N < 0)
        return cudaErrorInvalidValue;
    size_t n = (size_t)N * (size_t)C;
    bias_gelu_bwd_kernel<<<ew_blocks(n), EW_THREADS, 0, stream>>>(dinp, dout, inp, bias, n, C);
    return kern_status();
}

/* ------------------------------------------------------------ AdamW */

__global__ void adamw_kernel(uint16_t *param, float *master, const float *grad, float *m,
                             float *v, size_t n, float lr, float beta1, float beta2,
                             float eps, float weight_decay, float bc1, float bc2,
                             float grad_scale)
{
    GRID_STRIDE(i, n) {
        float g = grad[i] * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float w = master[i];
        float mhat = mi / bc1, vhat = vi / bc2;
        w -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * w);
        master[i] = w;
        if (param)
            param[i] = f2bf(w);
    }
}

extern "C" cudaError_t kern_adamw(uint16_t *param, float *master, const float *grad,
                                  float *m, float *v, size_t n, float lr, float beta1,
                                  float beta2, float eps, float weight_decay, int step,
                                  float grad_scale, cudaStream_t stream)
{
    if (step < 1)
        return cudaErrorInvalidValue;
    float bc1 = 1.0f - powf(beta1, (float)step);
    float bc2 = 1.0f - powf(beta2, (float)step);
    adamw_kernel<<<ew_blocks(n), EW_THREADS, 0, stream>>>(param, master, grad, m, v, n, lr,
                                                          beta1, beta2, eps, weight_decay,
                                                          bc1, bc2, grad_scale);
    return kern_status();
}
