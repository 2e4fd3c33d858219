/* layernorm.cu — layer norm forward/backward (one warp per row, fp32
 * statistics) and the deterministic column sums behind dweight, dbias and
 * cuk_bias_grad (partial sums over row chunks, then a fixed-order final sum).
 * Contracts in kernels.h. */
#include <limits.h>

#include "kernels/common.cuh"

#define LN_THREADS        256
#define LN_ROWS_PER_BLOCK (LN_THREADS / CUK_WARP)
#define COLSUM_THREADS    256
#define COLSUM_CHUNKS     32 /* row chunks of the two-pass column sum */

/* ------------------------------------------------------------ forward */

template <typename S>
__global__ void layernorm_fwd_kernel(S *out, float *mean, float *rstd, const S *inp, const S *weight, const S *bias,
                                     int N, int C, float eps)
{
    int lane = threadIdx.x % CUK_WARP;
    int row = blockIdx.x * LN_ROWS_PER_BLOCK + threadIdx.x / CUK_WARP;
    if (row >= N)
        return;
    const S *x = inp + (size_t)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += CUK_WARP)
        s += ld(x[c]);
    float mu = warp_sum(s) / (float)C;
    float ss = 0.0f;
    for (int c = lane; c < C; c += CUK_WARP) {
        float d = ld(x[c]) - mu;
        ss += d * d;
    }
    float rs = rsqrtf(warp_sum(ss) / (float)C + eps);
    S *o = out + (size_t)row * C;
    for (int c = lane; c < C; c += CUK_WARP) {
        float y = (ld(x[c]) - mu) * rs * ld(weight[c]);
        if (bias)
            y += ld(bias[c]);
        o[c] = st<S>(y);
    }
    if (lane == 0) {
        mean[row] = mu;
        rstd[row] = rs;
    }
}

template <typename S>
static cudaError_t layernorm_fwd(S *out, float *mean, float *rstd, const S *inp, const S *weight, const S *bias, int N,
                                 int C, float eps, cudaStream_t stream)
{
    if (N <= 0 || C <= 0)
        return cudaErrorInvalidValue;
    unsigned blocks = (unsigned)((N + LN_ROWS_PER_BLOCK - 1) / LN_ROWS_PER_BLOCK);
    layernorm_fwd_kernel<S><<<blocks, LN_THREADS, 0, stream>>>(out, mean, rstd, inp, weight, bias, N, C, eps);
    return cuk_status();
}

extern "C" cudaError_t cuk_layernorm_fwd(uint16_t *out, float *mean, float *rstd, const uint16_t *inp,
                                         const uint16_t *weight, const uint16_t *bias, int N, int C, float eps,
                                         cudaStream_t stream)
{
    return layernorm_fwd<uint16_t>(out, mean, rstd, inp, weight, bias, N, C, eps, stream);
}

extern "C" cudaError_t cuk_f32_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                             const float *b, size_t N, int C, cudaStream_t stream)
{
    if (N > INT_MAX)
        return cudaErrorInvalidValue;
    return layernorm_fwd<float>(out, mean, rstd, inp, w, b, (int)N, C, CUK_F32_LN_EPS, stream);
}

/* ------------------------------------------------------------ column sums */

size_t cuk_colsum_scratch_bytes(int N, int C)
{
    (void)N;
    return (size_t)COLSUM_CHUNKS * 2u * (size_t)(C > 0 ? C : 0) * sizeof(float);
}

/* Partial column sums over the rows of chunk blockIdx.y:
 * part[y][0][c] = sum dout[n,c] * xhat[n,c] (when inp != NULL),
 * part[y][1][c] = sum dout[n,c]. */
template <typename S>
__global__ void colsum_partial_kernel(float *part, const S *dout, const S *inp, const float *mean, const float *rstd,
                                      int N, int C)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    int chunk = blockIdx.y, rows = (N + COLSUM_CHUNKS - 1) / COLSUM_CHUNKS;
    int n0 = chunk * rows, n1 = min(N, n0 + rows);
    float a = 0.0f, b = 0.0f;
    for (int n = n0; n < n1; n++) {
        size_t i = (size_t)n * C + c;
        float g = ld(dout[i]);
        if (inp)
            a += g * (ld(inp[i]) - mean[n]) * rstd[n];
        b += g;
    }
    float *p = part + (size_t)chunk * 2 * C;
    p[c] = a;
    p[C + c] = b;
}

__global__ void colsum_final_kernel(float *sum_a, float *sum_b, const float *part, int C)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    float a = 0.0f, b = 0.0f;
    for (int k = 0; k < COLSUM_CHUNKS; k++) {
        a += part[(size_t)k * 2 * C + c];
        b += part[(size_t)k * 2 * C + C + c];
    }
    if (sum_a)
        sum_a[c] += a;
    if (sum_b)
        sum_b[c] += b;
}

template <typename S>
static cudaError_t colsum(float *sum_a, float *sum_b, const S *dout, const S *inp, const float *mean, const float *rstd,
                          int N, int C, void *scratch, cudaStream_t stream)
{
    dim3 grid((unsigned)((C + COLSUM_THREADS - 1) / COLSUM_THREADS), COLSUM_CHUNKS);
    colsum_partial_kernel<S><<<grid, COLSUM_THREADS, 0, stream>>>((float *)scratch, dout, inp, mean, rstd, N, C);
    cudaError_t st = cuk_status();
    if (st != cudaSuccess)
        return st;
    colsum_final_kernel<<<grid.x, COLSUM_THREADS, 0, stream>>>(sum_a, sum_b, (const float *)scratch, C);
    return cuk_status();
}

extern "C" cudaError_t cuk_bias_grad(float *dbias, const uint16_t *dout, int N, int C, void *scratch,
                                     cudaStream_t stream)
{
    if (N <= 0 || C <= 0 || !scratch)
        return cudaErrorInvalidValue;
    return colsum<uint16_t>(NULL, dbias, dout, NULL, NULL, NULL, N, C, scratch, stream);
}

extern "C" cudaError_t cuk_f32_bias_bwd(float *dbias, const float *dout, size_t N, int OC, void *scratch,
                                        cudaStream_t stream)
{
    if (N == 0)
        return cudaSuccess;
    if (N > INT_MAX || OC <= 0 || !scratch)
        return cudaErrorInvalidValue;
    return colsum<float>(NULL, dbias, dout, (const float *)NULL, NULL, NULL, (int)N, OC, scratch, stream);
}

extern "C" cudaError_t cuk_f32_layernorm_bwd_weight(float *dw, float *db, const float *dout, const float *inp,
                                                    const float *mean, const float *rstd, size_t N, int C,
                                                    void *scratch, cudaStream_t stream)
{
    if (N == 0 || N > INT_MAX || C <= 0 || !scratch || !inp)
        return cudaErrorInvalidValue;
    return colsum<float>(dw, db, dout, inp, mean, rstd, (int)N, C, scratch, stream);
}

/* ------------------------------------------------------------ backward */

template <typename S>
__global__ void layernorm_bwd_dinp_kernel(S *dinp, const S *dout, const S *inp, const S *weight, const float *mean,
                                          const float *rstd, int N, int C, bool acc)
{
    int lane = threadIdx.x % CUK_WARP;
    int row = blockIdx.x * LN_ROWS_PER_BLOCK + threadIdx.x / CUK_WARP;
    if (row >= N)
        return;
    const S *x = inp + (size_t)row * C, *g = dout + (size_t)row * C;
    float mu = mean[row], rs = rstd[row];
    float sum_dn = 0.0f, sum_dn_xhat = 0.0f;
    for (int c = lane; c < C; c += CUK_WARP) {
        float dn = ld(g[c]) * ld(weight[c]);
        sum_dn += dn;
        sum_dn_xhat += dn * (ld(x[c]) - mu) * rs;
    }
    float m_dn = warp_sum(sum_dn) / (float)C;
    float m_dn_xhat = warp_sum(sum_dn_xhat) / (float)C;
    S *d = dinp + (size_t)row * C;
    for (int c = lane; c < C; c += CUK_WARP) {
        float dn = ld(g[c]) * ld(weight[c]);
        float xhat = (ld(x[c]) - mu) * rs;
        put(&d[c], rs * (dn - m_dn - xhat * m_dn_xhat), acc);
    }
}

extern "C" cudaError_t cuk_layernorm_bwd(uint16_t *dinp, float *dweight, float *dbias, const uint16_t *dout,
                                         const uint16_t *inp, const uint16_t *weight, const float *mean,
                                         const float *rstd, int N, int C, void *scratch, cudaStream_t stream)
{
    if (N <= 0 || C <= 0 || !scratch)
        return cudaErrorInvalidValue;
    /* Weight/bias grads first, then dinp: each warp reads its whole row of
     * dout before writing it, so dinp may alias dout. */
    cudaError_t st = colsum<uint16_t>(dweight, dbias, dout, inp, mean, rstd, N, C, scratch, stream);
    if (st != cudaSuccess)
        return st;
    unsigned blocks = (unsigned)((N + LN_ROWS_PER_BLOCK - 1) / LN_ROWS_PER_BLOCK);
    layernorm_bwd_dinp_kernel<uint16_t>
        <<<blocks, LN_THREADS, 0, stream>>>(dinp, dout, inp, weight, mean, rstd, N, C, false);
    return cuk_status();
}

extern "C" cudaError_t cuk_f32_layernorm_bwd_input(float *dinp, const float *dout, const float *inp, const float *w,
                                                   const float *mean, const float *rstd, size_t N, int C,
                                                   cudaStream_t stream)
{
    if (N == 0)
        return cudaSuccess;
    if (N > INT_MAX || C <= 0)
        return cudaErrorInvalidValue;
    unsigned blocks = (unsigned)((N + LN_ROWS_PER_BLOCK - 1) / LN_ROWS_PER_BLOCK);
    layernorm_bwd_dinp_kernel<float>
        <<<blocks, LN_THREADS, 0, stream>>>(dinp, dout, inp, w, mean, rstd, (int)N, C, true);
    return cuk_status();
}
