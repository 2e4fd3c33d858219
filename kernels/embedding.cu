/* embedding.cu — token + position embedding (vocabulary-parallel shard) and
 * softmax cross-entropy, forward and backward. Backward sums run in a fixed
 * order (no float atomics). Contracts in kernels.h. */
#include <limits.h>

#include "kernels/common.cuh"

#define EMB_THREADS      256u
#define EMB_VOCAB_CHUNKS 16 /* parallelism of dwte beyond C: vocabulary slices */
#define CE_THREADS       512

/* ------------------------------------------------------------ embedding */

/* Rows [row0, row0 + n) of the token array; output row i = token row0 + i. */
template <typename S>
__global__ void embedding_fwd_kernel(S *out, const int32_t *tok, const S *wte, const S *wpe, size_t row0, size_t n,
                                     int T, int C, int vocab_start, int V)
{
    size_t n_el = n * C;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_el; i += (size_t)gridDim.x * blockDim.x) {
        size_t row = row0 + i / C;
        int c = (int)(i % C);
        int r = tok[row] - vocab_start;
        float x = (r >= 0 && r < V) ? ld(wte[(size_t)r * C + c]) : 0.0f;
        if (wpe)
            x += ld(wpe[(size_t)(row % T) * C + c]);
        out[i] = st<S>(x);
    }
}

template <typename S>
static cudaError_t embedding_fwd(S *out, const int32_t *tok, const S *wte, const S *wpe, size_t row0, size_t n, int T,
                                 int C, int vocab_start, int V, cudaStream_t stream)
{
    if (T <= 0 || C <= 0 || V <= 0)
        return cudaErrorInvalidValue;
    if (n == 0)
        return cudaSuccess;
    unsigned blocks = cuk_blocks(n * C, EMB_THREADS);
    unsigned grid = blocks > 65535u ? 65535u : blocks; /* grid-stride loop past it */
    embedding_fwd_kernel<S><<<grid, EMB_THREADS, 0, stream>>>(out, tok, wte, wpe, row0, n, T, C, vocab_start, V);
    return cuk_status();
}

extern "C" cudaError_t cuk_embedding_fwd(uint16_t *out, const int32_t *tok, const uint16_t *wte, const uint16_t *wpe,
                                         int N, int T, int C, int vocab_start, int V, cudaStream_t stream)
{
    if (N <= 0)
        return cudaErrorInvalidValue;
    return embedding_fwd<uint16_t>(out, tok, wte, wpe, 0, (size_t)N, T, C, vocab_start, V, stream);
}

extern "C" cudaError_t cuk_f32_embed_fwd(float *out, const int *tokens, const float *wte, const float *wpe, size_t row0,
                                         size_t n, int T, int C, cudaStream_t stream)
{
    return embedding_fwd<float>(out, tokens, wte, wpe, row0, n, T, C, 0, INT_MAX, stream);
}

/* Thread (c, slice) owns column c of the vocabulary rows in its slice
 * [lo, lo + per) and walks the tokens in order: each dwte element has one
 * writer, and its additions happen in token order. */
template <typename S>
__global__ void embedding_bwd_wte_kernel(float *dwte, const S *dout, const int32_t *tok, size_t row0, size_t n, int C,
                                         int vocab_start, int V, int per)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    long long lo = (long long)blockIdx.y * per, hi = min((long long)V, lo + per);
    for (size_t i = 0; i < n; i++) {
        long long r = (long long)tok[row0 + i] - vocab_start;
        if (r >= lo && r < hi)
            dwte[(size_t)r * C + c] += ld(dout[i * C + c]);
    }
}

/* dwpe[t, c] += sum of the dout rows at position t, in row order. */
template <typename S>
__global__ void embedding_bwd_wpe_kernel(float *dwpe, const S *dout, size_t row0, size_t n, int T, int C)
{
    size_t n_el = (size_t)T * C;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n_el; e += (size_t)gridDim.x * blockDim.x) {
        size_t t = e / C, c = e % C;
        /* first row i >= 0 with (row0 + i) % T == t */
        size_t first = (t + T - row0 % T) % T;
        float s = 0.0f;
        for (size_t i = first; i < n; i += T)
            s += ld(dout[i * C + c]);
        if (first < n)
            dwpe[e] += s;
    }
}

template <typename S>
static cudaError_t embedding_bwd(float *dwte, float *dwpe, const S *dout, const int32_t *tok, size_t row0, size_t n,
                                 int T, int C, int vocab_start, int V, int slices, cudaStream_t stream)
{
    if (T <= 0 || C <= 0 || V <= 0 || slices <= 0)
        return cudaErrorInvalidValue;
    if (n == 0)
        return cudaSuccess;
    int per = (int)(((long long)V + slices - 1) / slices);
    dim3 grid((unsigned)((C + EMB_THREADS - 1) / EMB_THREADS), (unsigned)slices);
    embedding_bwd_wte_kernel<S><<<grid, EMB_THREADS, 0, stream>>>(dwte, dout, tok, row0, n, C, vocab_start, V, per);
    cudaError_t st = cuk_status();
    if (st != cudaSuccess || !dwpe)
        return st;
    unsigned blocks = cuk_blocks((size_t)T * C, EMB_THREADS);
    unsigned wpe_grid = blocks > 65535u ? 65535u : blocks; /* grid-stride loop past it */
    embedding_bwd_wpe_kernel<S><<<wpe_grid, EMB_THREADS, 0, stream>>>(dwpe, dout, row0, n, T, C);
    return cuk_status();
}

extern "C" cudaError_t cuk_embedding_bwd(float *dwte, float *dwpe, const uint16_t *dout, const int32_t *tok, int N,
                                         int T, int C, int vocab_start, int V, cudaStream_t stream)
{
    if (N <= 0)
        return cudaErrorInvalidValue;
    return embedding_bwd<uint16_t>(dwte, dwpe, dout, tok, 0, (size_t)N, T, C, vocab_start, V, EMB_VOCAB_CHUNKS, stream);
}

/* The vocabulary size is not an argument of kern_embed_bwd: one slice. */
extern "C" cudaError_t cuk_f32_embed_bwd(float *dwte, float *dwpe, const float *dout, const int *tokens, size_t row0,
                                         size_t n, int T, int C, cudaStream_t stream)
{
    return embedding_bwd<float>(dwte, dwpe, dout, tokens, row0, n, T, C, 0, INT_MAX, 1, stream);
}

/* ------------------------------------------------------------ cross-entropy */

/* One block per row: lse[n] (and, when probs != NULL, the fp32 softmax). */
template <typename S>
__global__ void crossentropy_fwd_kernel(float *losses, float *lse, float *probs, const S *logits,
                                        const int32_t *targets, int V)
{
    __shared__ float red[CUK_WARP];
    size_t n = blockIdx.x;
    const S *x = logits + n * V;
    float mx = -INFINITY;
    for (int v = threadIdx.x; v < V; v += blockDim.x)
        mx = fmaxf(mx, ld(x[v]));
    mx = block_max(mx, red);
    /* the target's logit is read before block_sum's barrier: probs may be logits (in place,
     * as gpt_forward calls it) and are written after it */
    int t = targets[n];
    float xt = (threadIdx.x == 0 && t >= 0 && t < V) ? ld(x[t]) : 0.0f;
    float s = 0.0f;
    for (int v = threadIdx.x; v < V; v += blockDim.x)
        s += __expf(ld(x[v]) - mx);
    s = block_sum(s, red);
    float l = mx + logf(s);
    if (probs)
        for (int v = threadIdx.x; v < V; v += blockDim.x)
            probs[n * V + v] = __expf(ld(x[v]) - l);
    if (threadIdx.x == 0) {
        if (lse)
            lse[n] = l;
        losses[n] = (t >= 0 && t < V) ? l - xt : NAN;
    }
}

extern "C" cudaError_t cuk_crossentropy_fwd(float *losses, float *lse, const uint16_t *logits, const int32_t *targets,
                                            int N, int V, cudaStream_t stream)
{
    if (N <= 0 || V <= 0)
        return cudaErrorInvalidValue;
    crossentropy_fwd_kernel<uint16_t><<<(unsigned)N, CE_THREADS, 0, stream>>>(losses, lse, NULL, logits, targets, V);
    return cuk_status();
}

extern "C" cudaError_t cuk_f32_crossentropy_fwd(float *losses, float *probs, const float *logits, const int *targets,
                                                size_t N, int V, cudaStream_t stream)
{
    if (N == 0)
        return cudaSuccess;
    if (N > 0x7fffffffu || V <= 0)
        return cudaErrorInvalidValue;
    crossentropy_fwd_kernel<float><<<(unsigned)N, CE_THREADS, 0, stream>>>(losses, NULL, probs, logits, targets, V);
    return cuk_status();
}

__global__ void crossentropy_bwd_kernel(uint16_t *dlogits, const uint16_t *logits, const float *lse,
                                        const int32_t *targets, float dloss, int V)
{
    size_t n = blockIdx.x;
    const uint16_t *x = logits + n * V;
    uint16_t *d = dlogits + n * V;
    float l = lse[n];
    int t = targets[n];
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        float p = __expf(bf2f(x[v]) - l);
        d[v] = f2bf(dloss * (p - (v == t ? 1.0f : 0.0f)));
    }
}

extern "C" cudaError_t cuk_crossentropy_bwd(uint16_t *dlogits, const uint16_t *logits, const float *lse,
                                            const int32_t *targets, float dloss, int N, int V, cudaStream_t stream)
{
    if (N <= 0 || V <= 0)
        return cudaErrorInvalidValue;
    crossentropy_bwd_kernel<<<(unsigned)N, CE_THREADS, 0, stream>>>(dlogits, logits, lse, targets, dloss, V);
    return cuk_status();
}

/* dlogits += scale * (probs - onehot(target)) (kern_crossentropy_bwd). */
__global__ void crossentropy_bwd_probs_kernel(float *dlogits, const float *probs, const int32_t *targets, float scale,
                                              int V)
{
    size_t n = blockIdx.x;
    int t = targets[n];
    for (int v = threadIdx.x; v < V; v += blockDim.x)
        dlogits[n * V + v] += scale * (probs[n * V + v] - (v == t ? 1.0f : 0.0f));
}

extern "C" cudaError_t cuk_f32_crossentropy_bwd(float *dlogits, const float *probs, const int *targets, size_t N, int V,
                                                float scale, cudaStream_t stream)
{
    if (N == 0)
        return cudaSuccess;
    if (N > 0x7fffffffu || V <= 0)
        return cudaErrorInvalidValue;
    crossentropy_bwd_probs_kernel<<<(unsigned)N, CE_THREADS, 0, stream>>>(dlogits, probs, targets, scale, V);
    return cuk_status();
}
