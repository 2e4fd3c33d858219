/* layernorm.cu — layer norm forward/backward (one warp per row, fp32
 * statistics) and the deterministic column sums behind dweight, dbias and
 * kern_bias_grad (partial sums over row chunks, then a fixed-order final sum).
 * Contracts in kernels.h. */
#include "common.cuh"

#define LN_THREADS 256
#define LN_ROWS_PER_BLOCK (LN_THREADS / KERN_WARP)
#define COLSUM_THREADS 256
#define COLSUM_CHUNKS 32 /* row chunks of the two-pass column sum */

/* ------------------------------------------------------------ forward */

__global__ void layernorm_fwd_kernel(uint16_t *out, float *mean, float *rstd,
                                     const uint16_t *inp, const uint16_t *weight,
                                     const uint16_t *bias, int N, int C, float eps)
{
    int lane = threadIdx.x % KERN_WARP;
    int row = blockIdx.x * LN_ROWS_PER_BLOCK + threadIdx.x / KERN_WARP;
    if (row >= N)
        return;
    const uint16_t *x = inp + (size_t)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += KERN_WARP)
        s += bf2f(x[c]);
    float mu = warp_sum(s) / (float)C;
    float ss = 0.0f;
    for (int c = lane; c < C; c += KERN_WARP) {
        float d = bf2f(x[c]) - mu;
        ss += d * d;
    }
    float rs = rsqrtf(warp_sum(ss) / (float)C + eps);
    uint16_t *o = out + (size_t)row * C;
    for (int c = lane; c < C; c += KERN_WARP) {
        float y = (bf2f(x[c]) - mu) * rs * bf2f(weight[c]);
        if (bias)
            y += bf2f(bias[c]);
        o[c] = f2bf(y);
    }
    if (lane == 0) {
        mean[row] = mu;
        rstd[row] = rs;
    }
}

extern "C" cudaError_t kern_layernorm_fwd(uint16_t *out, float *mean, float *rstd,
                                          const uint16_t *inp, const uint16_t *weight,
                                          const uint16_t *bias, int N, int C, float eps,
                                          cudaStream_t stream)
{
    if (N <= 0 || C <= 0)
        return cudaErrorInvalidValue;
    unsigned blocks = (unsigned)((N + LN_ROWS_PER_BLOCK - 1) / LN_ROWS_PER_BLOCK);
    layernorm_fwd_kernel<<<blocks, LN_THREADS, 0, stream>>>(out, mean, rstd, inp, weight,
                                                            bias, N, C, eps);
    return kern_status();
}

/* ------------------------------------------------------------ column sums */

size_t kern_colsum_scratch_bytes(int N, int C)
{
    (void)N;
    return (size_t)COLSUM_CHUNKS * 2u * (size_t)(C > 0 ? C : 0) * sizeof(float);
}

/* Partial column sums over the rows of chunk blockIdx.y:
 * part[y][0][c] = sum dout[n,c] * xhat[n,c] (when inp != NULL),
 * part[y][1][c] = sum dout[n,c]. */
__global__ void colsum_partial_kernel(float *part, const uint16_t *dout, const uint16_t *inp,
                                      const float *mean, const float *rstd, int N, int C)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    int chunk = blockIdx.y, rows = (N + COLSUM_CHUNKS - 1) / COLSUM_CHUNKS;
    int n0 = chunk * rows, n1 = min(N, n0 + rows);
    float a = 0.0f, b = 0.0f;
    for (int n = n0; n < n1; n++) {
        size_t i = (size_t)n * C + c;
        float g = bf2f(dout[i]);
        if (inp)
            a += g * (bf2f(inp[i]) - mean[n]) * rstd[n];
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

static cudaError_t colsum(float *sum_a, float *sum_b, const uint16_t *dout,
                          const uint16_t *inp, const float *mean, const float *rstd, int N,
                          int C, void *scratch, cudaStream_t stream)
{
    dim3 grid((unsigned)((C + COLSUM_THREADS - 1) / COLSUM_THREADS), COLSUM_CHUNKS);
    colsum_partial_kernel<<<grid, COLSUM_THREADS, 0, stream>>>((float *)scratch, dout, inp,
                                                               mean, rstd, N, C);
    cudaError_t st = kern_status();
    if (st != cudaSuccess)
        return st;
    colsum_final_kernel<<<grid.x, COLSUM_THREADS, 0, stream>>>(sum_a, sum_b,
                                                               (const float *)scratch, C);
    return kern_status();
}

extern "C" cudaError_t kern_bias_grad(float *dbias, const uint16_t *dout, int N, int C,
                                      void *scratch, cudaStream_t stream)
{
    if (N <= 0 || C <= 0 || !scratch)
        return cudaErrorInvalidValue;
    return colsum(NULL, dbias, dout, NULL, NULL, NULL, N, C, scratch, stream);
}

/* ------------------------------------------------------------ backward */

__global__ void layernorm_bwd_dinp_kernel(uint16_t *dinp, const uint16_t *dout,
                                          const uint16_t *inp, const uint16_t *weight,
                                          const float *mean, const float *rstd, int N, int C)
{
    int lane = threadIdx.x % KERN_WARP;
    int row = blockIdx.x * LN_ROWS_PER_BLOCK + threadIdx.x / KERN_WARP;
    if (row >= N)
        return;
    const uint16_t *x = inp + (size_t)row * C, *g = dout + (size_t)row * C;
    float mu = mean[row], rs = rstd[row];
    float sum_dn = 0.0f, sum_dn_xhat = 0.0f;
    for (int c = lane; c < C; c += KERN_WARP) {
        float dn = bf2f(g[c]) * bf2f(weight[c]);
        sum_dn += dn;
        sum_dn_xhat += dn * (bf2f(x[c]) - mu) * rs;
    }
    float m_dn = warp_sum(sum_dn) / (float)C;
    float m_dn_xhat = warp_sum(sum_dn_xhat) / (float)C;
    uint16_t *d = dinp + (size_t)row * C;
    for (int c = lane; c < C; c += KERN_WARP) {
        float dn = bf2f(g[c]) * bf2f(weight[c]);
        float xhat = (bf2f(x[c]) - mu) * rs;
        d[c] = f2bf(rs * (dn - m_dn - xhat * m_dn_xhat));
    }
}

extern "C" cudaError_t kern_layernorm_bwd(uint16_t *dinp, float *dweight, float *dbias,
                                          const uint16_t *dout, const uint16_t *inp,
                                          const uint16_t *weight, const float *mean,
                                          const float *rstd, int N, int C, void *scratch,
                                          cudaStream_t stream)
{
    if (N <= 0 || C <= 0 || !scratch)
        return cudaErrorInvalidValue;
    /* Weight/bias grads first, then dinp: each warp reads its whole row of
     * dout before writing it, so dinp may alias dout. */
    cudaError_t st = colsum(dweight, dbias, dout, inp, mean, rstd, N, C, scratch, stream);
    if (st != cudaSuccess)
        return st;
    unsigned blocks = (unsigned)((N + LN_ROWS_PER_BLOCK - 1) / LN_ROWS_PER_BLOCK);
    layernorm_bwd_dinp_kernel<<<blocks, LN_THREADS, 0, stream>>>(dinp, dout, inp, weight, mean,
                                                                 rstd, N, C);
    return kern_status();
}
