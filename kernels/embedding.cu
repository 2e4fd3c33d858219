/* embedding.cu — token + position embedding (vocabulary-parallel shard) and
 * softmax cross-entropy, forward and backward. Backward sums run in a fixed
 * order (no float atomics). Contracts in kernels.h. */
#include "common.cuh"

#define EMB_THREADS 256u
#define EMB_VOCAB_CHUNKS 16 /* parallelism of dwte beyond C: vocabulary slices */
#define CE_THREADS 512

/* ------------------------------------------------------------ embedding */

__global__ void embedding_fwd_kernel(uint16_t *out, const int32_t *tok, const uint16_t *wte,
                                     const uint16_t *wpe, int N, int T, int C,
                                     int vocab_start, int V)
{
    size_t n_el = (size_t)N * C;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_el;
         i += (size_t)gridDim.x * blockDim.x) {
        int n = (int)(i / C), c = (int)(i % C);
        int r = tok[n] - vocab_start;
        float x = (r >= 0 && r < V) ? bf2f(wte[(size_t)r * C + c]) : 0.0f;
        if (wpe)
            x += bf2f(wpe[(size_t)(n % T) * C + c]);
        out[i] = f2bf(x);
    }
}

extern "C" cudaError_t kern_embedding_fwd(uint16_t *out, const int32_t *tok,
                                          const uint16_t *wte, const uint16_t *wpe, int N,
                                          int T, int C, int vocab_start, int V,
                                          cudaStream_t stream)
{
    if (N <= 0 || T <= 0 || C <= 0 || V <= 0)
        return cudaErrorInvalidValue;
    size_t n = (size_t)N * C;
    unsigned blocks = kern_blocks(n, EMB_THREADS);
    embedding_fwd_kernel<<<blocks > 65535u ? 65535u : blocks, EMB_THREADS, 0, stream>>>(
        out, tok, wte, wpe, N, T, C, vocab_start, V);
    return kern_status();
}

/* Thread (c, slice) owns column c of the vocabulary rows in its slice and
 * walks the tokens in order: each dwte element has one writer, and its
 * additions happen in token order. */
__global__ void embedding_bwd_wte_kernel(float *dwte, const uint16_t *dout, const int32_t *tok,
                                         int N, int C, int vocab_start, int V)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    int per = (V + EMB_VOCAB_CHUNKS - 1) / EMB_VOCAB_CHUNKS;
    int lo = blockIdx.y * per, hi = min(V, lo + per);
    for (int n = 0; n < N; n++) {
        int r = tok[n] - vocab_start;
        if (r >= lo && r < hi)
            dwte[(size_t)r * C + c] += bf2f(dout[(size_t)n * C + c]);
    }
}

__global__ void embedding_bwd_wpe_kernel(float *dwpe, const uint16_t *dout, int N, int T, int C)
{
    size_t n_el = (size_t)T * C;
    int B = N / T;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_el;
         i += (size_t)gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int b = 0; b < B; b++)
            s += bf2f(dout[(size_t)b * n_el + i]);
        dwpe[i] += s;
    }
}

extern "C" cudaError_t kern_embedding_bwd(float *dwte, float *dwpe, const uint16_t *dout,
                                          const int32_t *tok, int N, int T, int C,
                                          int vocab_start, int V, cudaStream_t stream)
{
    if (N <= 0 || T <= 0 || C <= 0 || V <= 0 || N % T != 0)
        return cudaErrorInvalidValue;
    dim3 grid((unsigned)((C + EMB_THREADS - 1) / EMB_THREADS), EMB_VOCAB_CHUNKS);
    embedding_bwd_wte_kernel<<<grid, EMB_THREADS, 0, stream>>>(dwte, dout, tok, N, C,
                                                               vocab_start, V);
    cudaError_t st = kern_status();
    if (st != cudaSuccess || !dwpe)
        return st;
    unsigned blocks = kern_blocks((size_t)T * C, EMB_THREADS);
    embedding_bwd_wpe_kernel<<<blocks > 65535u ? 65535u : blocks, EMB_THREADS, 0, stream>>>(
        dwpe, dout, N, T, C);
    return kern_status();
}

/* ------------------------------------------------------------ cross-entropy */

__global__ void crossentropy_fwd_kernel(float *losses, float *lse, const uint16_t *logits,
                                        const int32_t *targets, int V)
{
    __shared__ float red[KERN_WARP];
    int n = blockIdx.x;
    const uint16_t *x = logits + (size_t)n * V;
    float mx = -INFINITY;
    for (int v = threadIdx.x; v < V; v += blockDim.x)
        mx = fmaxf(mx, bf2f(x[v]));
    mx = block_max(mx, red);
    float s = 0.0f;
    for (int v = threadIdx.x; v < V; v += blockDim.x)
        s += __expf(bf2f(x[v]) - mx);
    s = block_sum(s, red);
    if (threadIdx.x == 0) {
        float l = mx + logf(s);
        int t = targets[n];
        lse[n] = l;
        losses[n] = (t >= 0 && t < V) ? l - bf2f(x[t]) : NAN;
    }
}

extern "C" cudaError_t kern_crossentropy_fwd(float *losses, float *lse, const uint16_t *logits,
                                             const int32_t *targets, int N, int V,
                                             cudaStream_t stream)
{
    if (N <= 0 || V <= 0)
        return cudaErrorInvalidValue;
    crossentropy_fwd_kernel<<<(unsigned)N, CE_THREADS, 0, stream>>>(losses, lse, logits,
                                                                   targets, V);
    return kern_status();
}

__global__ void crossentropy_bwd_kernel(uint16_t *dlogits, const uint16_t *logits,
                                        const float *lse, const int32_t *targets, float dloss,
                                        int V)
{
    int n = blockIdx.x;
    const uint16_t *x = logits + (size_t)n * V;
    uint16_t *d = dlogits + (size_t)n * V;
    float l = lse[n];
    int t = targets[n];
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        float p = __expf(bf2f(x[v]) - l);
        d[v] = f2bf(dloss * (p - (v == t ? 1.0f : 0.0f)));
    }
}

extern "C" cudaError_t kern_crossentropy_bwd(uint16_t *dlogits, const uint16_t *logits,
                                             const float *lse, const int32_t *targets,
                                             float dloss, int N, int V, cudaStream_t stream)
{
    if (N <= 0 || V <= 0)
        return cudaErrorInvalidValue;
    crossentropy_bwd_kernel<<<(unsigned)N, CE_THREADS, 0, stream>>>(dlogits, logits, lse,
                                                                   targets, dloss, V);
    return kern_status();
}
