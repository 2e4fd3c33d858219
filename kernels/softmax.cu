/* softmax.cu — scaled causal (upper-triangular masked) softmax, forward and
 * backward, one warp per row with fp32 max/sum; and the attention layout
 * permutations around the strided-batched GEMMs. Contracts in kernels.h. */
#include "common.cuh"

#define SM_THREADS 256
#define SM_ROWS_PER_BLOCK (SM_THREADS / KERN_WARP)

__global__ void causal_softmax_fwd_kernel(uint16_t *out, const uint16_t *inp, float scale,
                                          size_t rows, int T)
{
    int lane = threadIdx.x % KERN_WARP;
    size_t row = (size_t)blockIdx.x * SM_ROWS_PER_BLOCK + threadIdx.x / KERN_WARP;
    if (row >= rows)
        return;
    int i = (int)(row % (size_t)T); /* query position: keys 0..i are visible */
    const uint16_t *x = inp + row * (size_t)T;
    uint16_t *y = out + row * (size_t)T;
    float mx = -INFINITY;
    for (int j = lane; j <= i; j += KERN_WARP)
        mx = fmaxf(mx, scale * bf2f(x[j]));
    mx = warp_max(mx);
    float s = 0.0f;
    for (int j = lane; j <= i; j += KERN_WARP)
        s += __expf(scale * bf2f(x[j]) - mx);
    float inv = 1.0f / warp_sum(s);
    for (int j = lane; j < T; j += KERN_WARP)
        y[j] = f2bf(j <= i ? __expf(scale * bf2f(x[j]) - mx) * inv : 0.0f);
}

extern "C" cudaError_t kern_causal_softmax_fwd(uint16_t *out, const uint16_t *inp,
                                               float scale, int batch, int T,
                                               cudaStream_t stream)
{
    if (batch <= 0 || T <= 0)
        return cudaErrorInvalidValue;
    size_t rows = (size_t)batch * (size_t)T;
    unsigned blocks = kern_blocks(rows, SM_ROWS_PER_BLOCK);
    causal_softmax_fwd_kernel<<<blocks, SM_THREADS, 0, stream>>>(out, inp, scale, rows, T);
    return kern_status();
}

__global__ void causal_softmax_bwd_kernel(uint16_t *dinp, const uint16_t *dout,
                                          const uint16_t *y, float scale, size_t rows, int T)
{
    int lane = threadIdx.x % KERN_WARP;
    size_t row = (size_t)blockIdx.x * SM_ROWS_PER_BLOCK + threadIdx.x / KERN_WARP;
    if (row >= rows)
        return;
    int i = (int)(row % (size_t)T);
    const uint16_t *g = dout + row * (size_t)T, *p = y + row * (size_t)T;
    uint16_t *d = dinp + row * (size_t)T;
    float s = 0.0f;
    for (int j = lane; j <= i; j += KERN_WARP)
        s += bf2f(g[j]) * bf2f(p[j]);
    s = warp_sum(s);
    for (int j = lane; j < T; j += KERN_WARP)
        d[j] = f2bf(j <= i ? scale * bf2f(p[j]) * (bf2f(g[j]) - s) : 0.0f);
}

extern "C" cudaError_t kern_causal_softmax_bwd(uint16_t *dinp, const uint16_t *dout,
                                               const uint16_t *y, float scale, int batch,
                                               int T, cudaStream_t stream)
{
    if (batch <= 0 || T <= 0)
        return cudaErrorInvalidValue;
    size_t rows = (size_t)batch * (size_t)T;
    unsigned blocks = kern_blocks(rows, SM_ROWS_PER_BLOCK);
    causal_softmax_bwd_kernel<<<blocks, SM_THREADS, 0, stream>>>(dinp, dout, y, scale, rows, T);
    return kern_status();
}

/* ------------------------------------------------------------ layouts */

#define PERM_THREADS 256u

/* One thread per element of q/k/v ([B, H, T, D] index i). dir = 0 splits
 * qkv -> q, k, v; dir = 1 merges dq, dk, dv -> dqkv. */
__global__ void qkv_permute_kernel(uint16_t *q, uint16_t *k, uint16_t *v, uint16_t *qkv,
                                   int B, int T, int H, int D, int dir)
{
    size_t n = (size_t)B * H * T * D;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t d = i % D, t = (i / D) % T, h = (i / ((size_t)D * T)) % H;
        size_t b = i / ((size_t)D * T * H);
        size_t base = ((b * T + t) * 3 * H + h) * D + d; /* [b, t, 0, h, d] */
        size_t hd = (size_t)H * D;
        if (dir == 0) {
            q[i] = qkv[base];
            k[i] = qkv[base + hd];
            v[i] = qkv[base + 2 * hd];
        } else {
            qkv[base] = q[i];
            qkv[base + hd] = k[i];
            qkv[base + 2 * hd] = v[i];
        }
    }
}

static unsigned perm_blocks(size_t n)
{
    unsigned b = kern_blocks(n, PERM_THREADS);
    return b > 65535u ? 65535u : b;
}

extern "C" cudaError_t kern_qkv_split(uint16_t *q, uint16_t *k, uint16_t *v,
                                      const uint16_t *qkv, int B, int T, int H, int D,
                                      cudaStream_t stream)
{
    size_t n = (size_t)B * H * T * D;
    qkv_permute_kernel<<<perm_blocks(n), PERM_THREADS, 0, stream>>>(q, k, v, (uint16_t *)qkv,
                                                                    B, T, H, D, 0);
    return kern_status();
}

extern "C" cudaError_t kern_qkv_merge(uint16_t *dqkv, const uint16_t *dq, const uint16_t *dk,
                                      const uint16_t *dv, int B, int T, int H, int D,
                                      cudaStream_t stream)
{
    size_t n = (size_t)B * H * T * D;
    qkv_permute_kernel<<<perm_blocks(n), PERM_THREADS, 0, stream>>>(
        (uint16_t *)dq, (uint16_t *)dk, (uint16_t *)dv, dqkv, B, T, H, D, 1);
    return kern_status();
}

/* i indexes [B, H, T, D]; to_bthd copies inp[bhtd] -> out[bthd], else back. */
__global__ void heads_permute_kernel(uint16_t *out, const uint16_t *inp, int B, int H, int T,
                                     int D, int to_bthd)
{
    size_t n = (size_t)B * H * T * D;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t d = i % D, t = (i / D) % T, h = (i / ((size_t)D * T)) % H;
        size_t b = i / ((size_t)D * T * H);
        size_t j = ((b * T + t) * H + h) * D + d;
        if (to_bthd)
            out[j] = inp[i];
        else
            out[i] = inp[j];
    }
}

extern "C" cudaError_t kern_bhtd_to_bthd(uint16_t *out, const uint16_t *inp, int B, int H,
                                         int T, int D, cudaStream_t stream)
{
    size_t n = (size_t)B * H * T * D;
    heads_permute_kernel<<<perm_blocks(n), PERM_THREADS, 0, stream>>>(out, inp, B, H, T, D, 1);
    return kern_status();
}

extern "C" cudaError_t kern_bthd_to_bhtd(uint16_t *out, const uint16_t *inp, int B, int H,
                                         int T, int D, cudaStream_t stream)
{
    size_t n = (size_t)B * H * T * D;
    heads_permute_kernel<<<perm_blocks(n), PERM_THREADS, 0, stream>>>(out, inp, B, H, T, D, 0);
    return kern_status();
}
