/* moe.cu — the MoE layer's routing, dispatch-order, permute and combine
 * kernels on fp32 storage: the device twins of exec/core/moe_route.c
 * (top-k, routing weights, capacity dropping, counts) and of the host loops
 * of exec/core/moe.c (send order, row gathers and scatters, the weighted
 * combine, its backward, the router softmax backward). One thread per token,
 * assignment, row or element; every float sum runs in the CPU twin's order,
 * so the results are the twin's bits up to the device's expf/exp rounding.
 * Capacity and send order sort the nk = N k assignments (a merge sort:
 * O(nk log nk) work, O(log nk) launches) and read each one's rank off the
 * sorted order; counts are a histogram of integer atomics, O(nk + E).
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

/* The capacity and send-order kernels sort the assignments (their indices,
 * a permutation of 0..nk-1) by moe_before and read ranks off the sorted
 * order: a merge sort in global memory, one launch per pass. The first
 * launch sorts runs of MOE_TILE assignments (one thread each, insertion
 * sort); each later launch merges pairs of sorted runs of width w into runs
 * of 2w, one thread per MOE_TILE outputs: the thread finds where its tile
 * starts in the two runs by a binary search along the merge path, then
 * merges MOE_TILE elements. Work O(nk log nk), ceil(log2(nk / MOE_TILE)) + 1
 * launches; every thread independent of the others (no shared memory,
 * barriers or atomics), the result one permutation: deterministic.
 * MOE_TILE 16 is a choice, not measured on a GPU: any power of two sorts
 * alike, trading the runs' insertion sorts (O(nk MOE_TILE)) against merge
 * launches and search threads. */
#define MOE_TILE 16u

/* moe_route.c's comparator: a before b by expert ascending, then (wts
 * given) weight descending, then index ascending; with keep given, kept
 * assignments before dropped ones first (the send order). Weights compare
 * as floats, as the twin's do (not NaN). */
__device__ static bool moe_before(int a, int b, const int *idx, const float *wts, const int *keep)
{
    if (keep && !keep[a] != !keep[b])
        return keep[a] != 0;
    if (idx[a] != idx[b])
        return idx[a] < idx[b];
    if (wts && wts[a] != wts[b])
        return wts[a] > wts[b];
    return a < b;
}

__device__ static size_t moe_min(size_t a, size_t b)
{
    return a < b ? a : b;
}

/* One thread per run r of MOE_TILE assignments: run[r MOE_TILE ..] = those
 * assignments sorted (insertion sort). */
__global__ void moe_sort_runs_kernel(int *run, size_t nk, const int *idx, const float *wts, const int *keep)
{
    MOE_GRID_STRIDE(r, (nk + MOE_TILE - 1) / MOE_TILE)
    {
        size_t lo = r * MOE_TILE, hi = moe_min(lo + MOE_TILE, nk);
        for (size_t i = lo; i < hi; i++) {
            size_t j = i;
            for (; j > lo && moe_before((int)i, run[j - 1], idx, wts, keep); j--)
                run[j] = run[j - 1];
            run[j] = (int)i;
        }
    }
}

/* One thread per tile of MOE_TILE outputs: dst = src's sorted runs of width
 * w (a multiple of MOE_TILE) merged pairwise. Run A = src[lo, mid), B =
 * src[mid, hi); the tile's first output is the d-th of the pair's merge,
 * which follows i of A's and d - i of B's: i is the least with B[d - i - 1]
 * before A[i] (the merge path; no two assignments compare equal). */
__global__ void moe_merge_kernel(int *dst, const int *src, size_t nk, size_t w, const int *idx, const float *wts,
                                 const int *keep)
{
    MOE_GRID_STRIDE(t, (nk + MOE_TILE - 1) / MOE_TILE)
    {
        size_t o = t * MOE_TILE, lo = o / (2 * w) * (2 * w);
        size_t mid = moe_min(lo + w, nk), hi = moe_min(lo + 2 * w, nk);
        const int *A = src + lo, *B = src + mid;
        size_t la = mid - lo, lb = hi - mid, d = o - lo;
        size_t i0 = d > lb ? d - lb : 0, i1 = moe_min(d, la);
        while (i0 < i1) {
            size_t i = i0 + (i1 - i0) / 2;
            if (moe_before(B[d - i - 1], A[i], idx, wts, keep))
                i1 = i;
            else
                i0 = i + 1;
        }
        size_t i = i0, j = d - i0;
        for (size_t q = o; q < moe_min(o + MOE_TILE, hi); q++) {
            bool take_a = j >= lb || (i < la && moe_before(A[i], B[j], idx, wts, keep));
            dst[q] = take_a ? A[i++] : B[j++];
        }
    }
}

/* Sort 0..nk-1 by moe_before in scratch (two halves of nk ints, used in
 * turn); returns the half holding the result. */
static int *moe_sort(int *scratch, size_t nk, const int *idx, const float *wts, const int *keep, cudaStream_t stream)
{
    int *src = scratch, *dst = scratch + nk;
    size_t tiles = (nk + MOE_TILE - 1) / MOE_TILE;
    CUK_LAUNCH(moe_sort_runs_kernel, moe_blocks(tiles), MOE_THREADS, stream, src, nk, idx, wts, keep);
    for (size_t w = MOE_TILE; w < nk; w *= 2) {
        CUK_LAUNCH(moe_merge_kernel, moe_blocks(tiles), MOE_THREADS, stream, dst, src, nk, w, idx, wts, keep);
        int *t = src;
        src = dst;
        dst = t;
    }
    return src;
}

/* One thread per assignment: kept (cap 0 or cap >= nk: none can drop). */
__global__ void moe_keep_all_kernel(int *keep, float *wkept, const float *wts, size_t nk)
{
    MOE_GRID_STRIDE(a, nk)
    {
        keep[a] = 1;
        wkept[a] = wts[a];
    }
}

/* One thread per place i of the sorted order (by expert, weight descending,
 * index): a = order[i] ranks i - s among its expert's, s the first place
 * of its expert (a binary search); kept when the rank is below cap. Each
 * thread reads and writes its own a only, so wkept may alias wts. */
__global__ void moe_capacity_kernel(int *keep, float *wkept, const int *order, const int *idx, const float *wts,
                                    size_t nk, size_t cap)
{
    MOE_GRID_STRIDE(i, nk)
    {
        int a = order[i], e = idx[a];
        size_t s = 0, hi = i;
        while (s < hi) {
            size_t m = s + (hi - s) / 2;
            if (idx[order[m]] < e)
                s = m + 1;
            else
                hi = m;
        }
        bool kept = i - s < cap;
        keep[a] = kept ? 1 : 0;
        wkept[a] = kept ? wts[a] : 0.0f;
    }
}

/* One thread per expert: counts[e] = 0. */
__global__ void moe_zero_kernel(int *counts, int E)
{
    MOE_GRID_STRIDE(e, (size_t)E)
    {
        counts[e] = 0;
    }
}

/* One thread per assignment: counts[idx[a]] += keep[a] (integer atomics:
 * the sums do not depend on their order). */
__global__ void moe_counts_kernel(int *counts, const int *idx, const int *keep, size_t nk)
{
    MOE_GRID_STRIDE(a, nk)
    {
        if (keep[a])
            atomicAdd(&counts[idx[a]], 1);
    }
}

/* One thread per place i of the sorted order (kept first, by expert, then
 * index: moe.c's plan): the kept a = order[i] is sent i-th. */
__global__ void moe_send_order_kernel(int *send_slot, int *pos, const int *order, const int *keep, size_t nk)
{
    MOE_GRID_STRIDE(i, nk)
    {
        int a = order[i];
        if (keep[a]) {
            pos[a] = (int)i;
            send_slot[i] = a;
        } else {
            pos[a] = -1;
        }
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

extern "C" size_t cuk_moe_scratch_bytes(size_t nk)
{
    return 2 * nk * sizeof(int);
}

extern "C" cudaError_t cuk_f32_moe_capacity(int *keep, float *wkept, const int *idx, const float *wts, size_t nk,
                                            size_t cap, void *scratch, cudaStream_t stream)
{
    if (nk == 0)
        return cudaSuccess;
    if (cap == 0 || cap >= nk) {
        CUK_LAUNCH(moe_keep_all_kernel, moe_blocks(nk), MOE_THREADS, stream, keep, wkept, wts, nk);
        return cuk_status();
    }
    if (!scratch)
        return cudaErrorInvalidValue;
    int *order = moe_sort((int *)scratch, nk, idx, wts, NULL, stream);
    CUK_LAUNCH(moe_capacity_kernel, moe_blocks(nk), MOE_THREADS, stream, keep, wkept, order, idx, wts, nk, cap);
    return cuk_status();
}

extern "C" cudaError_t cuk_moe_counts(int *counts, const int *idx, const int *keep, size_t nk, int E,
                                      cudaStream_t stream)
{
    if (E <= 0)
        return cudaErrorInvalidValue;
    CUK_LAUNCH(moe_zero_kernel, moe_blocks((size_t)E), MOE_THREADS, stream, counts, E);
    if (nk > 0)
        CUK_LAUNCH(moe_counts_kernel, moe_blocks(nk), MOE_THREADS, stream, counts, idx, keep, nk);
    return cuk_status();
}

extern "C" cudaError_t cuk_moe_send_order(int *send_slot, int *pos, const int *idx, const int *keep, size_t nk,
                                          void *scratch, cudaStream_t stream)
{
    if (nk == 0)
        return cudaSuccess;
    if (!scratch)
        return cudaErrorInvalidValue;
    int *order = moe_sort((int *)scratch, nk, idx, NULL, keep, stream);
    CUK_LAUNCH(moe_send_order_kernel, moe_blocks(nk), MOE_THREADS, stream, send_slot, pos, order, keep, nk);
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
