/* llama.cu — the Llama-architecture kernels on fp32 storage, twins of
 * exec/cpu/kern_llama.c (RMSNorm, SwiGLU, RoPE, the grouped-query layout
 * of attention). Simple on purpose (one thread per element or row, grid-
 * stride loops, no shared-memory tiling): the reference semantics first.
 * Contracts in cuk.h. */
#include <limits.h>

#include "kernels/common.cuh"

#define LL_THREADS    256u
#define LL_MAX_BLOCKS 65535u

static unsigned ll_blocks(size_t n)
{
    unsigned b = cuk_blocks(n, LL_THREADS);
    return b > LL_MAX_BLOCKS ? LL_MAX_BLOCKS : b;
}

#define LL_GRID_STRIDE(i, n)                                                                                           \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

/* ------------------------------------------------------------ RMSNorm */

/* One warp per row (rows >= N idle): rstd = 1/sqrt(mean(x^2) + eps),
 * out = x * rstd * w. */
__global__ void rmsnorm_fwd_kernel(float *out, float *rstd, const float *inp, const float *w, size_t N, int C)
{
    size_t row = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / CUK_WARP;
    int lane = threadIdx.x % CUK_WARP;
    if (row >= N)
        return;
    const float *x = inp + row * C;
    float ms = 0.0f;
    for (int c = lane; c < C; c += CUK_WARP)
        ms += x[c] * x[c];
    ms = warp_sum(ms) / (float)C;
    float s = 1.0f / sqrtf(ms + CUK_F32_RMSNORM_EPS);
    float *o = out + row * C;
    for (int c = lane; c < C; c += CUK_WARP)
        o[c] = x[c] * s * w[c];
    if (lane == 0)
        rstd[row] = s;
}

/* dx += s * (w dy - x s mean(w dy x s)), one warp per row. */
__global__ void rmsnorm_bwd_input_kernel(float *dinp, const float *dout, const float *inp, const float *w,
                                         const float *rstd, size_t N, int C)
{
    size_t row = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / CUK_WARP;
    int lane = threadIdx.x % CUK_WARP;
    if (row >= N)
        return;
    const float *x = inp + row * C, *dy = dout + row * C;
    float *dx = dinp + row * C;
    float s = rstd[row], gx = 0.0f;
    for (int c = lane; c < C; c += CUK_WARP)
        gx += w[c] * dy[c] * x[c] * s;
    gx = warp_sum(gx) / (float)C;
    for (int c = lane; c < C; c += CUK_WARP)
        dx[c] += s * (w[c] * dy[c] - x[c] * s * gx);
}

/* dw[c] += sum_n dy x s: one thread per column, rows in order
 * (deterministic; no atomics). */
__global__ void rmsnorm_bwd_weight_kernel(float *dw, const float *dout, const float *inp, const float *rstd, size_t N,
                                          int C)
{
    LL_GRID_STRIDE(c, (size_t)C)
    {
        float a = 0.0f;
        for (size_t n = 0; n < N; n++)
            a += dout[n * C + c] * inp[n * C + c] * rstd[n];
        dw[c] += a;
    }
}

static unsigned warp_row_blocks(size_t N)
{
    return cuk_blocks(N * CUK_WARP, LL_THREADS); /* LL_THREADS / 32 rows per block */
}

extern "C" cudaError_t cuk_f32_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w, size_t N, int C,
                                           cudaStream_t stream)
{
    if (N == 0)
        return cudaSuccess;
    if (C <= 0 || N > (size_t)INT_MAX)
        return cudaErrorInvalidValue;
    CUK_LAUNCH_WARPS(rmsnorm_fwd_kernel, warp_row_blocks(N), LL_THREADS, stream, out, rstd, inp, w, N, C);
    return cuk_status();
}

extern "C" cudaError_t cuk_f32_rmsnorm_bwd_input(float *dinp, const float *dout, const float *inp, const float *w,
                                                 const float *rstd, size_t N, int C, cudaStream_t stream)
{
    if (N == 0)
        return cudaSuccess;
    if (C <= 0 || N > (size_t)INT_MAX)
        return cudaErrorInvalidValue;
    CUK_LAUNCH_WARPS(rmsnorm_bwd_input_kernel, warp_row_blocks(N), LL_THREADS, stream, dinp, dout, inp, w, rstd, N, C);
    return cuk_status();
}

extern "C" cudaError_t cuk_f32_rmsnorm_bwd_weight(float *dw, const float *dout, const float *inp, const float *rstd,
                                                  size_t N, int C, cudaStream_t stream)
{
    if (N == 0)
        return cudaSuccess;
    if (C <= 0)
        return cudaErrorInvalidValue;
    CUK_LAUNCH(rmsnorm_bwd_weight_kernel, ll_blocks((size_t)C), LL_THREADS, stream, dw, dout, inp, rstd, N, C);
    return cuk_status();
}

/* ------------------------------------------------------------ SwiGLU */

__device__ __forceinline__ float ll_sigmoid(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

/* Element i of out [N, F]: row n = i / F, column j = i % F. */
__global__ void swiglu_fwd_kernel(float *out, const float *inp, size_t N, int F)
{
    LL_GRID_STRIDE(i, N * (size_t)F)
    {
        size_t n = i / (size_t)F, j = i % (size_t)F;
        float g = inp[n * 2 * F + j], u = inp[n * 2 * F + F + j];
        out[i] = g * ll_sigmoid(g) * u;
    }
}

__global__ void swiglu_bwd_kernel(float *dinp, const float *inp, const float *dout, size_t N, int F)
{
    LL_GRID_STRIDE(i, N * (size_t)F)
    {
        size_t n = i / (size_t)F, j = i % (size_t)F, gi = n * 2 * F + j, ui = gi + F;
        float g = inp[gi], u = inp[ui], dy = dout[i];
        float sg = ll_sigmoid(g), silu = g * sg;
        dinp[gi] += dy * u * sg * (1.0f + g * (1.0f - sg));
        dinp[ui] += dy * silu;
    }
}

extern "C" cudaError_t cuk_f32_swiglu_fwd(float *out, const float *inp, size_t N, int F, cudaStream_t stream)
{
    if (N == 0)
        return cudaSuccess;
    if (F <= 0)
        return cudaErrorInvalidValue;
    CUK_LAUNCH(swiglu_fwd_kernel, ll_blocks(N * (size_t)F), LL_THREADS, stream, out, inp, N, F);
    return cuk_status();
}

extern "C" cudaError_t cuk_f32_swiglu_bwd(float *dinp, const float *inp, const float *dout, size_t N, int F,
                                          cudaStream_t stream)
{
    if (N == 0)
        return cudaSuccess;
    if (F <= 0)
        return cudaErrorInvalidValue;
    CUK_LAUNCH(swiglu_bwd_kernel, ll_blocks(N * (size_t)F), LL_THREADS, stream, dinp, inp, dout, N, F);
    return cuk_status();
}

/* ------------------------------------------------------------ RoPE */

/* One thread per (row n, head h of the NH + NKV q and k heads, pair i <
 * hs/2): it alone reads and writes x[i] and x[i + hs/2] of that head. The
 * angle in double as rope_apply does, then rounded: the same cos and sin. */
__global__ void rope_kernel(float *qkv, size_t N, int T, int pos0, int NH, int NKV, int hs, double base, float dir)
{
    int half = hs / 2, heads = NH + NKV;
    size_t width = (size_t)(NH + 2 * NKV) * hs, per_row = (size_t)heads * half;
    LL_GRID_STRIDE(e, N * per_row)
    {
        size_t n = e / per_row, r = e % per_row;
        int h = (int)(r / (size_t)half), i = (int)(r % (size_t)half);
        double pos = T > 0 ? (double)(n % (size_t)T) : (double)pos0 + (double)n;
        double ang = pos * pow(base, -2.0 * i / hs);
        float c = (float)cos(ang), s = dir * (float)sin(ang);
        float *x = qkv + n * width + (size_t)h * hs;
        float x1 = x[i], x2 = x[i + half];
        x[i] = x1 * c - x2 * s;
        x[i + half] = x2 * c + x1 * s;
    }
}

extern "C" cudaError_t cuk_f32_rope(float *qkv, size_t N, int T, int pos0, int NH, int NKV, int hs, float base,
                                    float dir, cudaStream_t stream)
{
    if (N == 0)
        return cudaSuccess;
    if (NH < 1 || NKV < 1 || hs < 2 || hs % 2 || T < 0 || (T == 0 && pos0 < 0))
        return cudaErrorInvalidValue;
    size_t n = N * (size_t)(NH + NKV) * (size_t)(hs / 2);
    CUK_LAUNCH(rope_kernel, ll_blocks(n), LL_THREADS, stream, qkv, N, T, pos0, NH, NKV, hs, (double)base, dir);
    return cuk_status();
}

/* ------------------------------------------------------------ grouped-query layout */

/* q, k, v [B, NH, T, hs] from qkv [B*T, (NH + 2 NKV) hs]: query head h's k
 * and v are those of key/value head h / (NH / NKV) (copied per query
 * head, so the multi-head GEMMs apply unchanged). */
__global__ void qkv_split_gqa_kernel(float *q, float *k, float *v, const float *qkv, int B, int T, int NH, int NKV,
                                     int hs)
{
    size_t W = (size_t)(NH + 2 * NKV) * hs, C = (size_t)NH * hs, KV = (size_t)NKV * hs;
    int per = NH / NKV;
    LL_GRID_STRIDE(e, (size_t)B * NH * T * hs)
    {
        size_t d = e % (size_t)hs, t = e / (size_t)hs % (size_t)T, h = e / ((size_t)hs * T) % (size_t)NH;
        size_t b = e / ((size_t)hs * T * NH);
        const float *row = qkv + (b * T + t) * W;
        size_t ko = C + h / (size_t)per * hs + d;
        q[e] = row[h * hs + d];
        k[e] = row[ko];
        v[e] = row[ko + KV];
    }
}

/* dqkv [B*T, W] += dq, and the sums over each group's query heads of dk
 * and dv ([B, NH, T, hs]): one thread per element of dqkv, which it alone
 * writes. */
__global__ void qkv_merge_gqa_acc_kernel(float *dqkv, const float *dq, const float *dk, const float *dv, int B, int T,
                                         int NH, int NKV, int hs)
{
    size_t W = (size_t)(NH + 2 * NKV) * hs, C = (size_t)NH * hs, KV = (size_t)NKV * hs;
    int per = NH / NKV;
    LL_GRID_STRIDE(e, (size_t)B * T * W)
    {
        size_t row = e / W, c = e % W, b = row / (size_t)T, t = row % (size_t)T;
        if (c < C) {
            size_t h = c / (size_t)hs, d = c % (size_t)hs;
            dqkv[e] += dq[((b * NH + h) * T + t) * hs + d];
            continue;
        }
        bool is_v = c >= C + KV;
        size_t kc = c - C - (is_v ? KV : 0), g = kc / (size_t)hs, d = kc % (size_t)hs;
        const float *src = is_v ? dv : dk;
        float a = 0.0f;
        for (int j = 0; j < per; j++) {
            size_t h = g * per + j;
            a += src[((b * NH + h) * T + t) * hs + d];
        }
        dqkv[e] += a;
    }
}

static bool gqa_ok(int B, int T, int NH, int NKV, int hs)
{
    return B >= 1 && T >= 1 && NH >= 1 && NKV >= 1 && hs >= 1 && NH % NKV == 0;
}

extern "C" cudaError_t cuk_f32_qkv_split_gqa(float *q, float *k, float *v, const float *qkv, int B, int T, int NH,
                                             int NKV, int hs, cudaStream_t stream)
{
    if (!gqa_ok(B, T, NH, NKV, hs))
        return cudaErrorInvalidValue;
    size_t n = (size_t)B * NH * T * hs;
    CUK_LAUNCH(qkv_split_gqa_kernel, ll_blocks(n), LL_THREADS, stream, q, k, v, qkv, B, T, NH, NKV, hs);
    return cuk_status();
}

extern "C" cudaError_t cuk_f32_qkv_merge_gqa_acc(float *dqkv, const float *dq, const float *dk, const float *dv, int B,
                                                 int T, int NH, int NKV, int hs, cudaStream_t stream)
{
    if (!gqa_ok(B, T, NH, NKV, hs))
        return cudaErrorInvalidValue;
    size_t n = (size_t)B * T * (NH + 2 * NKV) * hs;
    CUK_LAUNCH(qkv_merge_gqa_acc_kernel, ll_blocks(n), LL_THREADS, stream, dqkv, dq, dk, dv, B, T, NH, NKV, hs);
    return cuk_status();
}
