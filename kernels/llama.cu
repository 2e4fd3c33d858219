/* llama.cu — the Llama-architecture kernels on fp32 storage, twins of
 * exec/cpu/kern_llama.c (RMSNorm, the q/k norm, SwiGLU, RoPE, the
 * grouped-query layout of attention). Simple on purpose (one thread per element or row, grid-
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

/* ------------------------------------------------------------ QK norm */

/* One thread per (row n, head h of the NH + NKV query and key heads): it
 * alone reads and writes that head's hs values, with the twin's loops in the
 * twin's order (sequential sums over hs, not a warp reduction, so the
 * results are kern_qknorm_fwd's). xin and mean/rstd are indexed by the
 * same (n, h): element e = n (NH + NKV) + h. */
__global__ void qknorm_fwd_kernel(float *qkv, float *xin, float *mean, float *rstd, const float *qw, const float *qb,
                                  const float *kw, const float *kb, size_t N, int NH, int NKV, int hs)
{
    size_t heads = (size_t)NH + (size_t)NKV, W = (heads + (size_t)NKV) * (size_t)hs;
    LL_GRID_STRIDE(e, N * heads)
    {
        size_t n = e / heads, h = e % heads;
        bool is_q = h < (size_t)NH;
        float *o = qkv + n * W + h * hs, *x = xin + e * hs;
        const float *w = is_q ? qw : kw, *b = is_q ? qb : kb;
        for (int c = 0; c < hs; c++)
            x[c] = o[c];
        float s;
        if (mean) { /* kern_layernorm_fwd */
            float m = 0.0f, var = 0.0f;
            for (int c = 0; c < hs; c++)
                m += x[c];
            m /= (float)hs;
            for (int c = 0; c < hs; c++) {
                float d = x[c] - m;
                var += d * d;
            }
            var /= (float)hs;
            s = 1.0f / sqrtf(var + CUK_F32_LN_EPS);
            for (int c = 0; c < hs; c++)
                o[c] = (x[c] - m) * s * w[c] + b[c];
            mean[e] = m;
        } else { /* kern_rmsnorm_fwd */
            float ms = 0.0f;
            for (int c = 0; c < hs; c++)
                ms += x[c] * x[c];
            ms /= (float)hs;
            s = 1.0f / sqrtf(ms + CUK_F32_RMSNORM_EPS);
            for (int c = 0; c < hs; c++)
                o[c] = x[c] * s * w[c];
        }
        rstd[e] = s;
    }
}

/* One thread per gradient element (column c of dqw, dkw and, LayerNorm,
 * dqb, dkb): it starts from the element's value and adds the terms of every
 * row and of that block's heads (rows outer, heads inner) one by one, then
 * writes it once: the same sum in the same order as the twin's += loops.
 * Deterministic, no atomics; 2 or 4 hs threads, each N (NH or NKV) terms. */
__global__ void qknorm_bwd_weight_kernel(float *dqw, float *dqb, float *dkw, float *dkb, const float *dqkv,
                                         const float *xin, const float *mean, const float *rstd, size_t N, int NH,
                                         int NKV, int hs)
{
    size_t heads = (size_t)NH + (size_t)NKV, W = (heads + (size_t)NKV) * (size_t)hs;
    LL_GRID_STRIDE(e, (size_t)(mean ? 4 : 2) * hs)
    {
        size_t part = e / (size_t)hs, c = e % (size_t)hs; /* part: 0 dqw, 1 dkw, 2 dqb, 3 dkb */
        bool is_k = part % 2 == 1, is_b = part >= 2;
        float *dst = part == 0 ? dqw : part == 1 ? dkw : part == 2 ? dqb : dkb;
        size_t h0 = is_k ? (size_t)NH : 0, h1 = is_k ? heads : (size_t)NH;
        float a = dst[c];
        for (size_t n = 0; n < N; n++)
            for (size_t h = h0; h < h1; h++) {
                size_t r = n * heads + h;
                float dy = dqkv[n * W + h * hs + c];
                if (is_b)
                    a += dy;
                else if (mean)
                    a += dy * (xin[r * hs + c] - mean[r]) * rstd[r];
                else
                    a += dy * xin[r * hs + c] * rstd[r];
            }
        dst[c] = a;
    }
}

/* One thread per (row, head) as the forward: the twin's two passes over the
 * head, in place on dqkv (overwritten, not accumulated). */
__global__ void qknorm_bwd_input_kernel(float *dqkv, const float *xin, const float *mean, const float *rstd,
                                        const float *qw, const float *kw, size_t N, int NH, int NKV, int hs)
{
    size_t heads = (size_t)NH + (size_t)NKV, W = (heads + (size_t)NKV) * (size_t)hs;
    LL_GRID_STRIDE(e, N * heads)
    {
        size_t n = e / heads, h = e % heads;
        float *d = dqkv + n * W + h * hs;
        const float *x = xin + e * hs, *w = h < (size_t)NH ? qw : kw;
        float m = mean ? mean[e] : 0.0f, s = rstd[e], dm = 0.0f, dmx = 0.0f;
        for (int c = 0; c < hs; c++) {
            float xhat = (x[c] - m) * s, dxhat = w[c] * d[c];
            dm += dxhat;
            dmx += dxhat * xhat;
        }
        dm = mean ? dm / (float)hs : 0.0f;
        dmx /= (float)hs;
        for (int c = 0; c < hs; c++) {
            float xhat = (x[c] - m) * s, dxhat = w[c] * d[c];
            d[c] = s * (dxhat - dm - xhat * dmx);
        }
    }
}

static bool qknorm_ok(int NH, int NKV, int hs)
{
    return NH >= 1 && NKV >= 1 && hs >= 1;
}

extern "C" cudaError_t cuk_f32_qknorm_fwd(float *qkv, float *xin, float *mean, float *rstd, const float *qw,
                                          const float *qb, const float *kw, const float *kb, size_t N, int NH, int NKV,
                                          int hs, cudaStream_t stream)
{
    if (N == 0)
        return cudaSuccess;
    if (!qknorm_ok(NH, NKV, hs) || (mean && !(qb && kb)))
        return cudaErrorInvalidValue;
    size_t n = N * (size_t)(NH + NKV);
    CUK_LAUNCH(qknorm_fwd_kernel, ll_blocks(n), LL_THREADS, stream, qkv, xin, mean, rstd, qw, qb, kw, kb, N, NH, NKV,
               hs);
    return cuk_status();
}

extern "C" cudaError_t cuk_f32_qknorm_bwd_weight(float *dqw, float *dqb, float *dkw, float *dkb, const float *dqkv,
                                                 const float *xin, const float *mean, const float *rstd, size_t N,
                                                 int NH, int NKV, int hs, cudaStream_t stream)
{
    if (N == 0)
        return cudaSuccess;
    if (!qknorm_ok(NH, NKV, hs) || (mean && !(dqb && dkb)))
        return cudaErrorInvalidValue;
    size_t n = (size_t)(mean ? 4 : 2) * (size_t)hs;
    CUK_LAUNCH(qknorm_bwd_weight_kernel, ll_blocks(n), LL_THREADS, stream, dqw, dqb, dkw, dkb, dqkv, xin, mean, rstd, N,
               NH, NKV, hs);
    return cuk_status();
}

extern "C" cudaError_t cuk_f32_qknorm_bwd_input(float *dqkv, const float *xin, const float *mean, const float *rstd,
                                                const float *qw, const float *kw, size_t N, int NH, int NKV, int hs,
                                                cudaStream_t stream)
{
    if (N == 0)
        return cudaSuccess;
    if (!qknorm_ok(NH, NKV, hs))
        return cudaErrorInvalidValue;
    size_t n = N * (size_t)(NH + NKV);
    CUK_LAUNCH(qknorm_bwd_input_kernel, ll_blocks(n), LL_THREADS, stream, dqkv, xin, mean, rstd, qw, kw, N, NH, NKV,
               hs);
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
