/* kvcache.cu — inference with a KV cache on fp32 storage: the embedding of
 * new tokens at their positions, the append of their keys and values to the
 * cache, and causal attention of the new queries over the cache. CPU twins:
 * kern_embed_pos_fwd, kern_kv_append, kern_attention_kv_fwd (exec/cpu/kern.h),
 * same arguments and layouts. Contracts in cuk.h. */
#include "kernels/common.cuh"

#define KV_THREADS   256u
#define KV_ATT_BLOCK 128 /* threads per (sequence, head, query) row */

__global__ void embed_pos_fwd_kernel(float *out, const int *tok, const float *wte, const float *wpe, int n, int pos0,
                                     int C, size_t n_el)
{
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n_el; e += (size_t)gridDim.x * blockDim.x) {
        size_t row = e / C;
        int c = (int)(e % C), i = (int)(row % (size_t)n);
        out[e] = wte[(size_t)tok[row] * C + c] + wpe[(size_t)(pos0 + i) * C + c];
    }
}

extern "C" cudaError_t cuk_f32_embed_pos_fwd(float *out, const int *tokens, const float *wte, const float *wpe, int B,
                                             int n, int pos0, int C, cudaStream_t stream)
{
    if (B <= 0 || n <= 0 || pos0 < 0 || C <= 0)
        return cudaErrorInvalidValue;
    size_t n_el = (size_t)B * n * C;
    unsigned blocks = cuk_blocks(n_el, KV_THREADS);
    unsigned grid = blocks > 65535u ? 65535u : blocks; /* grid-stride loop past it */
    embed_pos_fwd_kernel<<<grid, KV_THREADS, 0, stream>>>(out, tokens, wte, wpe, n, pos0, C, n_el);
    return cuk_status();
}

/* Element e of the new keys/values: (b, i, h, x) with x fastest. */
__global__ void kv_append_kernel(float *kc, float *vc, const float *qkv, int n, int pos0, int Tmax, int NH, int hs,
                                 size_t n_el)
{
    size_t C = (size_t)NH * hs, C3 = 3 * C;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n_el; e += (size_t)gridDim.x * blockDim.x) {
        size_t row = e / C, hx = e % C;
        int h = (int)(hx / hs), x = (int)(hx % hs);
        size_t b = row / n, i = row % n;
        size_t dst = ((b * NH + h) * Tmax + (size_t)pos0 + i) * hs + x;
        kc[dst] = qkv[row * C3 + C + hx];
        vc[dst] = qkv[row * C3 + 2 * C + hx];
    }
}

extern "C" cudaError_t cuk_f32_kv_append(float *kc, float *vc, const float *qkv, int B, int n, int pos0, int Tmax,
                                         int NH, int hs, cudaStream_t stream)
{
    if (B <= 0 || n <= 0 || pos0 < 0 || pos0 + n > Tmax || NH <= 0 || hs <= 0)
        return cudaErrorInvalidValue;
    size_t n_el = (size_t)B * n * NH * hs;
    unsigned blocks = cuk_blocks(n_el, KV_THREADS);
    unsigned grid = blocks > 65535u ? 65535u : blocks; /* grid-stride loop past it */
    kv_append_kernel<<<grid, KV_THREADS, 0, stream>>>(kc, vc, qkv, n, pos0, Tmax, NH, hs, n_el);
    return cuk_status();
}

/* One block per query row (b, h, i): scores over the len = pos0 + i + 1
 * visible positions into att's row, the scaled softmax (block max and sum),
 * then out[x] = sum_j att[j] v[j][x] in position order (as the CPU twin). */
__global__ void __launch_bounds__(KV_ATT_BLOCK)
    attention_kv_fwd_kernel(float *out, float *att, const float *qkv, const float *kc, const float *vc, int n, int pos0,
                            int Tmax, int NH, int hs, float scale)
{
    __shared__ float red[CUK_WARP];
    int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z, len = pos0 + i + 1;
    size_t C = (size_t)NH * hs, C3 = 3 * C;
    const float *q = qkv + ((size_t)b * n + i) * C3 + (size_t)h * hs;
    const float *K = kc + ((size_t)b * NH + h) * Tmax * hs, *V = vc + ((size_t)b * NH + h) * Tmax * hs;
    float *a = att + (((size_t)b * NH + h) * n + i) * Tmax;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < len; j += blockDim.x) {
        const float *k = K + (size_t)j * hs;
        float dot = 0.0f;
        for (int x = 0; x < hs; x++)
            dot += q[x] * k[x];
        a[j] = dot;
        mx = fmaxf(mx, dot * scale);
    }
    mx = block_max(mx, red);
    float s = 0.0f;
    for (int j = threadIdx.x; j < len; j += blockDim.x) {
        float e = expf(a[j] * scale - mx);
        a[j] = e;
        s += e;
    }
    s = block_sum(s, red);
    float inv = 1.0f / s;
    for (int j = threadIdx.x; j < len; j += blockDim.x)
        a[j] *= inv;
    __syncthreads(); /* every probability written before any thread reads the row */
    float *o = out + ((size_t)b * n + i) * C + (size_t)h * hs;
    for (int x = threadIdx.x; x < hs; x += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < len; j++)
            acc += a[j] * V[(size_t)j * hs + x];
        o[x] = acc;
    }
}

extern "C" cudaError_t cuk_f32_attention_kv_fwd(float *out, float *att, const float *qkv, const float *kc,
                                                const float *vc, int B, int n, int pos0, int Tmax, int NH, int hs,
                                                cudaStream_t stream)
{
    if (B <= 0 || n <= 0 || pos0 < 0 || pos0 + n > Tmax || NH <= 0 || hs <= 0 || B > 65535 || NH > 65535)
        return cudaErrorInvalidValue;
    dim3 grid((unsigned)n, (unsigned)NH, (unsigned)B);
    attention_kv_fwd_kernel<<<grid, KV_ATT_BLOCK, 0, stream>>>(out, att, qkv, kc, vc, n, pos0, Tmax, NH, hs,
                                                               1.0f / sqrtf((float)hs));
    return cuk_status();
}
