/* attention.cu — fused causal attention (flash-attention style), forward and
 * backward, fp32 math on bf16 tiles in shared memory.
 *
 * Tiles: 32 query rows x 32 key rows per step; a block has 8 warps and each
 * warp owns 4 rows of the block's tile. In the score loops a lane owns one
 * column of the other tile (lane j = key j or query j), so a dot product is
 * one lane's loop over D with the other operand broadcast from shared
 * memory; rows of the lane-indexed tile are padded to an odd word stride so
 * the 32 lanes hit 32 banks. The forward pass keeps an online softmax
 * (running max m, running sum l) and saves lse = m + log l per query row;
 * the backward pass recomputes p = exp(s - lse) and runs two kernels, one
 * for dq (over key tiles) and one for dk, dv (over query tiles), so every
 * output has one writer: deterministic, no atomics.
 * Contracts in kernels.h. */
#include "kernels/common.cuh"

#define FA_TILE    32 /* query rows and key rows per tile */
#define FA_WARPS   8
#define FA_THREADS (FA_WARPS * CUK_WARP)
#define FA_ROWS    (FA_TILE / FA_WARPS) /* rows per warp */
#define FA_MAXD    128
#define FA_PAD     (FA_MAXD + 2)        /* 65 words per row: odd, conflict-free */
#define FA_NX      (FA_MAXD / CUK_WARP) /* head-dimension elements per lane */

/* Load rows [r0, r0+FA_TILE) of a [T, D] matrix into tile (row stride
 * `stride` halves); rows past T are zero. */
__device__ __forceinline__ void fa_load(uint16_t *tile, int stride, const uint16_t *src, int r0, int T, int D)
{
    for (int e = threadIdx.x; e < FA_TILE * D; e += FA_THREADS) {
        int r = e / D, d = e % D;
        tile[r * stride + d] = (r0 + r < T) ? src[(size_t)(r0 + r) * D + d] : (uint16_t)0;
    }
}

/* dot(a[0..D), b[0..D)) of two bf16 rows in shared memory, fp32. */
__device__ __forceinline__ float fa_dot(const uint16_t *a, const uint16_t *b, int D)
{
    float s = 0.0f;
    for (int d = 0; d < D; d++)
        s += bf2f(a[d]) * bf2f(b[d]);
    return s;
}

/* ------------------------------------------------------------ forward */

__global__ void __launch_bounds__(FA_THREADS)
    flash_attn_fwd_kernel(uint16_t *out, float *lse, const uint16_t *q, const uint16_t *k, const uint16_t *v, int T,
                          int D, float scale)
{
    __shared__ uint16_t Qs[FA_TILE * FA_MAXD];
    __shared__ uint16_t Ks[FA_TILE * FA_PAD];
    __shared__ uint16_t Vs[FA_TILE * FA_MAXD];
    int lane = threadIdx.x % CUK_WARP, warp = threadIdx.x / CUK_WARP;
    int q0 = blockIdx.x * FA_TILE, nx = D / CUK_WARP;
    size_t bh = blockIdx.y;
    const uint16_t *qb = q + bh * T * D, *kb = k + bh * T * D, *vb = v + bh * T * D;

    fa_load(Qs, FA_MAXD, qb, q0, T, D);
    float m[FA_ROWS], l[FA_ROWS], acc[FA_ROWS][FA_NX];
#pragma unroll
    for (int r = 0; r < FA_ROWS; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int x = 0; x < FA_NX; x++)
            acc[r][x] = 0.0f;
    }
    int last = min(T - 1, q0 + FA_TILE - 1); /* last key any row of the tile sees */
    for (int k0 = 0; k0 <= last; k0 += FA_TILE) {
        __syncthreads();
        fa_load(Ks, FA_PAD, kb, k0, T, D);
        fa_load(Vs, FA_MAXD, vb, k0, T, D);
        __syncthreads();
#pragma unroll
        for (int r = 0; r < FA_ROWS; r++) {
            int row = warp * FA_ROWS + r, qi = q0 + row, j = k0 + lane;
            if (qi >= T || k0 > qi)
                continue; /* warp-uniform */
            float s = (j <= qi) ? scale * fa_dot(&Qs[row * FA_MAXD], &Ks[lane * FA_PAD], D) : -INFINITY;
            float m_new = fmaxf(m[r], warp_max(s));
            float p = (j <= qi) ? __expf(s - m_new) : 0.0f;
            float corr = __expf(m[r] - m_new); /* m = -inf on the first tile: 0 */
            l[r] = l[r] * corr + warp_sum(p);
#pragma unroll
            for (int x = 0; x < FA_NX; x++)
                acc[r][x] *= corr;
            int jmax = min(FA_TILE, qi - k0 + 1);
            for (int jj = 0; jj < jmax; jj++) {
                float pj = __shfl_sync(0xffffffffu, p, jj);
#pragma unroll
                for (int x = 0; x < FA_NX; x++)
                    if (x < nx)
                        acc[r][x] += pj * bf2f(Vs[jj * FA_MAXD + lane + CUK_WARP * x]);
            }
            m[r] = m_new;
        }
    }
#pragma unroll
    for (int r = 0; r < FA_ROWS; r++) {
        int qi = q0 + warp * FA_ROWS + r;
        if (qi >= T)
            continue;
        float inv = 1.0f / l[r];
        uint16_t *o = out + (bh * T + qi) * D;
#pragma unroll
        for (int x = 0; x < FA_NX; x++)
            if (x < nx)
                o[lane + CUK_WARP * x] = f2bf(acc[r][x] * inv);
        if (lane == 0)
            lse[bh * T + qi] = m[r] + logf(l[r]);
    }
}

static int fa_shape_ok(int B, int H, int T, int D)
{
    return B > 0 && H > 0 && T > 0 && D > 0 && D % CUK_WARP == 0 && D <= FA_MAXD && (long long)B * H <= 65535;
}

extern "C" cudaError_t cuk_flash_attn_fwd(uint16_t *out, float *lse, const uint16_t *q, const uint16_t *k,
                                          const uint16_t *v, int B, int H, int T, int D, float scale,
                                          cudaStream_t stream)
{
    if (!fa_shape_ok(B, H, T, D))
        return cudaErrorInvalidValue;
    dim3 grid((unsigned)((T + FA_TILE - 1) / FA_TILE), (unsigned)(B * H));
    flash_attn_fwd_kernel<<<grid, FA_THREADS, 0, stream>>>(out, lse, q, k, v, T, D, scale);
    return cuk_status();
}

/* ------------------------------------------------------------ backward */

extern "C" size_t cuk_flash_attn_scratch_bytes(int B, int H, int T)
{
    return (size_t)(B > 0 ? B : 0) * (size_t)(H > 0 ? H : 0) * (size_t)(T > 0 ? T : 0) * sizeof(float);
}

/* delta[i] = sum_d dout[i,d] * out[i,d] (one warp per row). */
__global__ void flash_attn_delta_kernel(float *delta, const uint16_t *dout, const uint16_t *out, size_t rows, int D)
{
    size_t row = (size_t)blockIdx.x * FA_WARPS + threadIdx.x / CUK_WARP;
    int lane = threadIdx.x % CUK_WARP;
    if (row >= rows)
        return;
    float s = 0.0f;
    for (int d = lane; d < D; d += CUK_WARP)
        s += bf2f(dout[row * D + d]) * bf2f(out[row * D + d]);
    s = warp_sum(s);
    if (lane == 0)
        delta[row] = s;
}

/* dq for a tile of query rows, looping over key tiles. */
__global__ void __launch_bounds__(FA_THREADS)
    flash_attn_bwd_dq_kernel(uint16_t *dq, const uint16_t *dout, const float *lse, const float *delta,
                             const uint16_t *q, const uint16_t *k, const uint16_t *v, int T, int D, float scale)
{
    __shared__ uint16_t Qs[FA_TILE * FA_MAXD];
    __shared__ uint16_t dOs[FA_TILE * FA_MAXD];
    __shared__ uint16_t Ks[FA_TILE * FA_PAD];
    __shared__ uint16_t Vs[FA_TILE * FA_PAD];
    int lane = threadIdx.x % CUK_WARP, warp = threadIdx.x / CUK_WARP;
    int q0 = blockIdx.x * FA_TILE, nx = D / CUK_WARP;
    size_t bh = blockIdx.y;
    const uint16_t *qb = q + bh * T * D, *kb = k + bh * T * D, *vb = v + bh * T * D;

    fa_load(Qs, FA_MAXD, qb, q0, T, D);
    fa_load(dOs, FA_MAXD, dout + bh * T * D, q0, T, D);
    float acc[FA_ROWS][FA_NX];
#pragma unroll
    for (int r = 0; r < FA_ROWS; r++)
#pragma unroll
        for (int x = 0; x < FA_NX; x++)
            acc[r][x] = 0.0f;
    int last = min(T - 1, q0 + FA_TILE - 1);
    for (int k0 = 0; k0 <= last; k0 += FA_TILE) {
        __syncthreads();
        fa_load(Ks, FA_PAD, kb, k0, T, D);
        fa_load(Vs, FA_PAD, vb, k0, T, D);
        __syncthreads();
#pragma unroll
        for (int r = 0; r < FA_ROWS; r++) {
            int row = warp * FA_ROWS + r, qi = q0 + row, j = k0 + lane;
            if (qi >= T || k0 > qi)
                continue;
            float ds = 0.0f;
            if (j <= qi) {
                float s = scale * fa_dot(&Qs[row * FA_MAXD], &Ks[lane * FA_PAD], D);
                float p = __expf(s - lse[bh * T + qi]);
                float dp = fa_dot(&dOs[row * FA_MAXD], &Vs[lane * FA_PAD], D);
                ds = p * (dp - delta[bh * T + qi]);
            }
            int jmax = min(FA_TILE, qi - k0 + 1);
            for (int jj = 0; jj < jmax; jj++) {
                float dsj = __shfl_sync(0xffffffffu, ds, jj);
#pragma unroll
                for (int x = 0; x < FA_NX; x++)
                    if (x < nx)
                        acc[r][x] += dsj * bf2f(Ks[jj * FA_PAD + lane + CUK_WARP * x]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < FA_ROWS; r++) {
        int qi = q0 + warp * FA_ROWS + r;
        if (qi >= T)
            continue;
        uint16_t *o = dq + (bh * T + qi) * D;
#pragma unroll
        for (int x = 0; x < FA_NX; x++)
            if (x < nx)
                o[lane + CUK_WARP * x] = f2bf(scale * acc[r][x]);
    }
}

/* dk, dv for a tile of key rows, looping over the query tiles that see them. */
__global__ void __launch_bounds__(FA_THREADS)
    flash_attn_bwd_dkv_kernel(uint16_t *dk, uint16_t *dv, const uint16_t *dout, const float *lse, const float *delta,
                              const uint16_t *q, const uint16_t *k, const uint16_t *v, int T, int D, float scale)
{
    __shared__ uint16_t Ks[FA_TILE * FA_MAXD];
    __shared__ uint16_t Vs[FA_TILE * FA_MAXD];
    __shared__ uint16_t Qs[FA_TILE * FA_PAD];
    __shared__ uint16_t dOs[FA_TILE * FA_PAD];
    __shared__ float lse_s[FA_TILE], delta_s[FA_TILE];
    int lane = threadIdx.x % CUK_WARP, warp = threadIdx.x / CUK_WARP;
    int k0 = blockIdx.x * FA_TILE, nx = D / CUK_WARP;
    size_t bh = blockIdx.y;
    const uint16_t *qb = q + bh * T * D, *ob = dout + bh * T * D;

    fa_load(Ks, FA_MAXD, k + bh * T * D, k0, T, D);
    fa_load(Vs, FA_MAXD, v + bh * T * D, k0, T, D);
    float dk_acc[FA_ROWS][FA_NX], dv_acc[FA_ROWS][FA_NX];
#pragma unroll
    for (int r = 0; r < FA_ROWS; r++)
#pragma unroll
        for (int x = 0; x < FA_NX; x++)
            dk_acc[r][x] = dv_acc[r][x] = 0.0f;
    for (int q0 = k0; q0 < T; q0 += FA_TILE) { /* query tiles at or below the diagonal */
        __syncthreads();
        fa_load(Qs, FA_PAD, qb, q0, T, D);
        fa_load(dOs, FA_PAD, ob, q0, T, D);
        if (threadIdx.x < FA_TILE) {
            int i = q0 + threadIdx.x;
            lse_s[threadIdx.x] = i < T ? lse[bh * T + i] : 0.0f;
            delta_s[threadIdx.x] = i < T ? delta[bh * T + i] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int r = 0; r < FA_ROWS; r++) {
            int row = warp * FA_ROWS + r, kj = k0 + row, i = q0 + lane;
            if (kj >= T)
                continue;
            float p = 0.0f, ds = 0.0f;
            if (i < T && i >= kj) {
                float s = scale * fa_dot(&Ks[row * FA_MAXD], &Qs[lane * FA_PAD], D);
                p = __expf(s - lse_s[lane]);
                float dp = fa_dot(&dOs[lane * FA_PAD], &Vs[row * FA_MAXD], D);
                ds = p * (dp - delta_s[lane]);
            }
            for (int ii = 0; ii < FA_TILE; ii++) {
                float pi = __shfl_sync(0xffffffffu, p, ii);
                float dsi = __shfl_sync(0xffffffffu, ds, ii);
                if (pi == 0.0f && dsi == 0.0f)
                    continue; /* warp-uniform: masked or past T */
#pragma unroll
                for (int x = 0; x < FA_NX; x++)
                    if (x < nx) {
                        int d = lane + CUK_WARP * x;
                        dv_acc[r][x] += pi * bf2f(dOs[ii * FA_PAD + d]);
                        dk_acc[r][x] += dsi * bf2f(Qs[ii * FA_PAD + d]);
                    }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < FA_ROWS; r++) {
        int kj = k0 + warp * FA_ROWS + r;
        if (kj >= T)
            continue;
        size_t base = (bh * T + kj) * D;
#pragma unroll
        for (int x = 0; x < FA_NX; x++)
            if (x < nx) {
                dk[base + lane + CUK_WARP * x] = f2bf(scale * dk_acc[r][x]);
                dv[base + lane + CUK_WARP * x] = f2bf(dv_acc[r][x]);
            }
    }
}

extern "C" cudaError_t cuk_flash_attn_bwd(uint16_t *dq, uint16_t *dk, uint16_t *dv, const uint16_t *dout,
                                          const uint16_t *out, const float *lse, const uint16_t *q, const uint16_t *k,
                                          const uint16_t *v, int B, int H, int T, int D, float scale, void *scratch,
                                          cudaStream_t stream)
{
    if (!fa_shape_ok(B, H, T, D) || !scratch)
        return cudaErrorInvalidValue;
    float *delta = (float *)scratch;
    size_t rows = (size_t)B * H * T;
    flash_attn_delta_kernel<<<cuk_blocks(rows, FA_WARPS), FA_THREADS, 0, stream>>>(delta, dout, out, rows, D);
    cudaError_t st = cuk_status();
    if (st != cudaSuccess)
        return st;
    dim3 grid((unsigned)((T + FA_TILE - 1) / FA_TILE), (unsigned)(B * H));
    flash_attn_bwd_dq_kernel<<<grid, FA_THREADS, 0, stream>>>(dq, dout, lse, delta, q, k, v, T, D, scale);
    st = cuk_status();
    if (st != cudaSuccess)
        return st;
    flash_attn_bwd_dkv_kernel<<<grid, FA_THREADS, 0, stream>>>(dk, dv, dout, lse, delta, q, k, v, T, D, scale);
    return cuk_status();
}
