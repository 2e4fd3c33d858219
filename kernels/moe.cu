/* moe.cu — the MoE layer's routing, dispatch-order, permute and combine
 * kernels on fp32 storage: the device twins of exec/core/moe_route.c
 * (top-k, routing weights, capacity dropping, counts) and of the host loops
 * of exec/core/moe.c (send order, row gathers and scatters, the weighted
 * combine, its backward, the router softmax backward). One thread per token,
 * assignment, row or element; every sum runs in the CPU twin's order, so
 * the results are the twin's bits up to the device's expf/exp rounding.
 * Contracts in cuk.h. */
#include <limits.h>

#include "kernels/common.cuh"

#define MOE_THREADS    256u
#define MOE_MAX_BLOCKS 65535u

static unsigned moe_blocks(size_t n)
{
    unsigned b = cuk_blocks(n, MOE_THREADS);
    return b > MOE_MAX_BLOCKS ? MOE_MAX_BLOCKS : b;
}

#define MOE_GRID_STRIDE(i, n)                                                                                          \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

/* ------------------------------------------------------------ routing */

/* One thread per token: moe_route.c's choose (largest logit first, ties to
 * the lower expert; force_balance: expert (t k + j) mod E) and the softmax
 * over the k chosen logits. */
__global__ void moe_topk_kernel(int *idx, float *wts, const float *logits, size_t N, int E, int k, bool force_balance)
{
    MOE_GRID_STRIDE(t, N)
    {
        const float *lg = logits + t * (size_t)E;
        int *id = idx + t * (size_t)k;
        float *w = wts + t * (size_t)k;
        for (int j = 0; j < k; j++) {
            if (force_balance) {
                id[j] = (int)((t * (size_t)k + (size_t)j) % (size_t)E);
                continue;
            }
            int best = -1;
            for (int e = 0; e < E; e++) {
                bool taken = false;
                for (int q = 0; q < j; q++)
                    taken = taken || id[q] == e;
                if (!taken && (best < 0 || lg[e] > lg[best]))
                    best = e;
            }
            id[j] = best;
        }
        float mx = lg[id[0]];
        for (int j = 1; j < k; j++)
            mx = fmaxf(mx, lg[id[j]]);
        float s = 0.0f;
        for (int j = 0; j < k; j++) {
            w[j] = expf(lg[id[j]] - mx);
            s += w[j];
        }
        for (int j = 0; j < k; j++)
            w[j] /= s;
    }
}

/* One thread per assignment a: its rank among its expert's assignments by
 * (weight descending, index ascending), moe_route.c's sort order; kept
 * when the rank is below cap (cap 0: dropless, all kept). */
__global__ void moe_capacity_kernel(int *keep, float *wkept, const int *idx, const float *wts, size_t nk, size_t cap)
{
    MOE_GRID_STRIDE(a, nk)
    {
        bool kept = true;
        if (cap > 0) {
            size_t rank = 0;
            for (size_t b = 0; b < nk; b++)
                rank += idx[b] == idx[a] && (wts[b] > wts[a] || (wts[b] == wts[a] && b < a));
            kept = rank < cap;
        }
        keep[a] = kept ? 1 : 0;
        wkept[a] = kept ? wts[a] : 0.0f;
    }
}

/* One thread per expert: its kept assignments. */
__global__ void moe_counts_kernel(int *counts, const int *idx, const int *keep, size_t nk, int E)
{
    MOE_GRID_STRIDE(e, (size_t)E)
    {
        int c = 0;
        for (size_t a = 0; a < nk; a++)
            c += keep[a] && idx[a] == (int)e;
        counts[e] = c;
    }
}

/* One thread per assignment a: its position in the send order (kept
 * assignments by expert, then index: moe.c's plan), -1 when dropped. */
__global__ void moe_send_order_kernel(int *send_slot, int *pos, const int *idx, const int *keep, size_t nk)
{
    MOE_GRID_STRIDE(a, nk)
    {
        if (!keep[a]) {
            pos[a] = -1;
            continue;
        }
        int p = 0;
        for (size_t b = 0; b < nk; b++)
            p += keep[b] && (idx[b] < idx[a] || (idx[b] == idx[a] && b < a));
        pos[a] = p;
        send_slot[p] = (int)a;
    }
}

/* ------------------------------------------------------------ permute */

/* dst[r, c] = src[rows[r] / div, c]. */
__global__ void moe_gather_kernel(float *dst, const float *src, const int *rows, size_t nrows, int div, int C)
{
    MOE_GRID_STRIDE(i, nrows * (size_t)C)
    {
        size_t r = i / (size_t)C, c = i % (size_t)C;
        dst[i] = src[(size_t)(rows[r] / div) * (size_t)C + c];
    }
}

/* dst[rows[r], c] = src[r, c]. */
__global__ void moe_scatter_kernel(float *dst, const float *src, const int *rows, size_t nrows, int C)
{
    MOE_GRID_STRIDE(i, nrows * (size_t)C)
    {
        size_t r = i / (size_t)C, c = i % (size_t)C;
        dst[(size_t)rows[r] * (size_t)C + c] = src[i];
    }
}

/* ------------------------------------------------------------ combine */

/* One thread per (token, column): out = sum over the token's kept slots in
 * ascending expert order (the send order moe.c sums in) of w * y[pos]. */
__global__ void moe_combine_kernel(float *out, const float *y, const float *wts, const int *idx, const int *pos,
                                   size_t N, int k, int C)
{
    MOE_GRID_STRIDE(i, N * (size_t)C)
    {
        size_t t = i / (size_t)C, c = i % (size_t)C;
        const int *id = idx + t * (size_t)k;
        float acc = 0.0f;
        int last = INT_MIN;
        for (int step = 0; step < k; step++) {
            int j = -1;
            for (int q = 0; q < k; q++)
                if (id[q] > last && (j < 0 || id[q] < id[j]))
                    j = q;
            if (j < 0)
                break;
            last = id[j];
            size_t sl = t * (size_t)k + (size_t)j;
            if (pos[sl] < 0)
                continue;
            float w = wts ? wts[sl] : 1.0f;
            acc += w * y[(size_t)pos[sl] * (size_t)C + c];
        }
        out[i] = acc;
    }
}

/* One thread per sent row p: g[slot] = dout[token] . y[p] (columns in
 * order), dy[p] = w dout[token]. */
__global__ void moe_combine_bwd_kernel(float *dy, float *g, const float *dout, const float *y, const float *wts,
                                       const int *send_slot, size_t nsend, int k, int C)
{
    MOE_GRID_STRIDE(p, nsend)
    {
        size_t sl = (size_t)send_slot[p];
        const float *d = dout + (sl / (size_t)k) * (size_t)C, *yr = y + p * (size_t)C;
        float *o = dy + p * (size_t)C, acc = 0.0f;
        for (int c = 0; c < C; c++) {
            acc += d[c] * yr[c];
            o[c] = wts[sl] * d[c];
        }
        g[sl] = acc;
    }
}

/* One thread per token: the gradient of w_j = keep_j softmax_j(selected
 * logits) in double (moe.c's router backward); the row's other logits 0. */
__global__ void moe_router_bwd_kernel(float *dlog, const float *logits, const int *idx, const int *keep, const float *g,
                                      size_t N, int E, int k)
{
    MOE_GRID_STRIDE(t, N)
    {
        const float *lg = logits + t * (size_t)E;
        const int *id = idx + t * (size_t)k;
        float *dl = dlog + t * (size_t)E;
        double mx = lg[id[0]], z = 0.0, G = 0.0;
        for (int j = 1; j < k; j++)
            mx = fmax(mx, (double)lg[id[j]]);
        for (int j = 0; j < k; j++)
            z += exp((double)lg[id[j]] - mx);
        for (int j = 0; j < k; j++) {
            size_t sl = t * (size_t)k + (size_t)j;
            G += keep[sl] ? (double)g[sl] * (exp((double)lg[id[j]] - mx) / z) : 0.0;
        }
        for (int e = 0; e < E; e++)
            dl[e] = 0.0f;
        for (int j = 0; j < k; j++) {
            size_t sl = t * (size_t)k + (size_t)j;
            double gj = keep[sl] ? (double)g[sl] : 0.0;
            dl[id[j]] = (float)((exp((double)lg[id[j]] - mx) / z) * (gj - G));
        }
    }
}

/* ------------------------------------------------------------ entry points */

extern "C" cudaError_t cuk_f32_moe_topk(int *idx, float *wts, const float *logits, size_t N, int E, int k,
                                        bool force_balance, cudaStream_t stream)
{
    if (E <= 0 || k <= 0 || k > E)
        return cudaErrorInvalidValue;
    if (N == 0)
        return cudaSuccess;
    CUK_LAUNCH(moe_topk_kernel, moe_blocks(N), MOE_THREADS, stream, idx, wts, logits, N, E, k, force_balance);
    return cuk_status();
}

extern "C" cudaError_t cuk_f32_moe_capacity(int *keep, float *wkept, const int *idx, const float *wts, size_t nk,
                                            size_t cap, cudaStream_t stream)
{
    if (nk == 0)
        return cudaSuccess;
    CUK_LAUNCH(moe_capacity_kernel, moe_blocks(nk), MOE_THREADS, stream, keep, wkept, idx, wts, nk, cap);
    return cuk_status();
}

extern "C" cudaError_t cuk_moe_counts(int *counts, const int *idx, const int *keep, size_t nk, int E,
                                      cudaStream_t stream)
{
    if (E <= 0)
        return cudaErrorInvalidValue;
    CUK_LAUNCH(moe_counts_kernel, moe_blocks((size_t)E), MOE_THREADS, stream, counts, idx, keep, nk, E);
    return cuk_status();
}

extern "C" cudaError_t cuk_moe_send_order(int *send_slot, int *pos, const int *idx, const int *keep, size_t nk,
                                          cudaStream_t stream)
{
    if (nk == 0)
        return cudaSuccess;
    CUK_LAUNCH(moe_send_order_kernel, moe_blocks(nk), MOE_THREADS, stream, send_slot, pos, idx, keep, nk);
    return cuk_status();
}

extern "C" cudaError_t cuk_f32_moe_gather(float *dst, const float *src, const int *rows, size_t nrows, int div, int C,
                                          cudaStream_t stream)
{
    if (div <= 0 || C <= 0)
        return cudaErrorInvalidValue;
    if (nrows == 0)
        return cudaSuccess;
    CUK_LAUNCH(moe_gather_kernel, moe_blocks(nrows * (size_t)C), MOE_THREADS, stream, dst, src, rows, nrows, div, C);
    return cuk_status();
}

extern "C" cudaError_t cuk_f32_moe_scatter(float *dst, const float *src, const int *rows, size_t nrows, int C,
                                           cudaStream_t stream)
{
    if (C <= 0)
        return cudaErrorInvalidValue;
    if (nrows == 0)
        return cudaSuccess;
    CUK_LAUNCH(moe_scatter_kernel, moe_blocks(nrows * (size_t)C), MOE_THREADS, stream, dst, src, rows, nrows, C);
    return cuk_status();
}

extern "C" cudaError_t cuk_f32_moe_combine(float *out, const float *y, const float *wts, const int *idx, const int *pos,
                                           size_t N, int k, int C, cudaStream_t stream)
{
    if (k <= 0 || C <= 0)
        return cudaErrorInvalidValue;
    if (N == 0)
        return cudaSuccess;
    CUK_LAUNCH(moe_combine_kernel, moe_blocks(N * (size_t)C), MOE_THREADS, stream, out, y, wts, idx, pos, N, k, C);
    return cuk_status();
}

extern "C" cudaError_t cuk_f32_moe_combine_bwd(float *dy, float *g, const float *dout, const float *y, const float *wts,
                                               const int *send_slot, size_t nsend, int k, int C, cudaStream_t stream)
{
    if (k <= 0 || C <= 0)
        return cudaErrorInvalidValue;
    if (nsend == 0)
        return cudaSuccess;
    CUK_LAUNCH(moe_combine_bwd_kernel, moe_blocks(nsend), MOE_THREADS, stream, dy, g, dout, y, wts, send_slot, nsend, k,
               C);
    return cuk_status();
}

extern "C" cudaError_t cuk_f32_moe_router_bwd(float *dlog, const float *logits, const int *idx, const int *keep,
                                              const float *g, size_t N, int E, int k, cudaStream_t stream)
{
    if (E <= 0 || k <= 0 || k > E)
        return cudaErrorInvalidValue;
    if (N == 0)
        return cudaSuccess;
    CUK_LAUNCH(moe_router_bwd_kernel, moe_blocks(N), MOE_THREADS, stream, dlog, logits, idx, keep, g, N, E, k);
    return cuk_status();
}
