/* softmax.cu — scaled causal (upper-triangular masked) softmax, forward and
 * backward, one warp per row with fp32 max/sum; and the attention layout
 * permutations around the strided-batched GEMMs. Contracts in kernels.h. */
#include "kernels/common.cuh"

#define SM_THREADS        256
#define SM_ROWS_PER_BLOCK (SM_THREADS / CUK_WARP)

template <typename S> __global__ void causal_softmax_fwd_kernel(S *out, const S *inp, float scale, size_t rows, int T)
{
    int lane = threadIdx.x % CUK_WARP;
    size_t row = (size_t)blockIdx.x * SM_ROWS_PER_BLOCK + threadIdx.x / CUK_WARP;
    if (row >= rows)
        return;
    int i = (int)(row % (size_t)T); /* query position: keys 0..i are visible */
    const S *x = inp + row * (size_t)T;
    S *y = out + row * (size_t)T;
    float mx = -INFINITY;
    for (int j = lane; j <= i; j += CUK_WARP)
        mx = fmaxf(mx, scale * ld(x[j]));
    mx = warp_max(mx);
    float s = 0.0f;
    for (int j = lane; j <= i; j += CUK_WARP)
        s += __expf(scale * ld(x[j]) - mx);
    float inv = 1.0f / warp_sum(s);
    for (int j = lane; j < T; j += CUK_WARP)
        y[j] = st<S>(j <= i ? __expf(scale * ld(x[j]) - mx) * inv : 0.0f);
}

extern "C" cudaError_t cuk_causal_softmax_fwd(uint16_t *out, const uint16_t *inp, float scale, int batch, int T,
                                              cudaStream_t stream)
{
    if (batch <= 0 || T <= 0)
        return cudaErrorInvalidValue;
    size_t rows = (size_t)batch * (size_t)T;
    unsigned blocks = cuk_blocks(rows, SM_ROWS_PER_BLOCK);
    causal_softmax_fwd_kernel<uint16_t><<<blocks, SM_THREADS, 0, stream>>>(out, inp, scale, rows, T);
    return cuk_status();
}

extern "C" cudaError_t cuk_f32_softmax_causal_fwd(float *x, int batch, int T, float scale, cudaStream_t stream)
{
    if (batch <= 0 || T <= 0)
        return cudaErrorInvalidValue;
    size_t rows = (size_t)batch * (size_t)T;
    unsigned blocks = cuk_blocks(rows, SM_ROWS_PER_BLOCK);
    causal_softmax_fwd_kernel<float><<<blocks, SM_THREADS, 0, stream>>>(x, x, scale, rows, T);
    return cuk_status();
}

template <typename S>
__global__ void causal_softmax_bwd_kernel(S *dinp, const S *dout, const S *y, float scale, size_t rows, int T)
{
    int lane = threadIdx.x % CUK_WARP;
    size_t row = (size_t)blockIdx.x * SM_ROWS_PER_BLOCK + threadIdx.x / CUK_WARP;
    if (row >= rows)
        return;
    int i = (int)(row % (size_t)T);
    const S *g = dout + row * (size_t)T, *p = y + row * (size_t)T;
    S *d = dinp + row * (size_t)T;
    float s = 0.0f;
    for (int j = lane; j <= i; j += CUK_WARP)
        s += ld(g[j]) * ld(p[j]);
    s = warp_sum(s);
    for (int j = lane; j < T; j += CUK_WARP)
        d[j] = st<S>(j <= i ? scale * ld(p[j]) * (ld(g[j]) - s) : 0.0f);
}

extern "C" cudaError_t cuk_causal_softmax_bwd(uint16_t *dinp, const uint16_t *dout, const uint16_t *y, float scale,
                                              int batch, int T, cudaStream_t stream)
{
    if (batch <= 0 || T <= 0)
        return cudaErrorInvalidValue;
    size_t rows = (size_t)batch * (size_t)T;
    unsigned blocks = cuk_blocks(rows, SM_ROWS_PER_BLOCK);
    causal_softmax_bwd_kernel<uint16_t><<<blocks, SM_THREADS, 0, stream>>>(dinp, dout, y, scale, rows, T);
    return cuk_status();
}

extern "C" cudaError_t cuk_f32_softmax_causal_bwd(float *dx, const float *y, const float *dy, int batch, int T,
                                                  float scale, cudaStream_t stream)
{
    if (batch <= 0 || T <= 0)
        return cudaErrorInvalidValue;
    size_t rows = (size_t)batch * (size_t)T;
    unsigned blocks = cuk_blocks(rows, SM_ROWS_PER_BLOCK);
    causal_softmax_bwd_kernel<float><<<blocks, SM_THREADS, 0, stream>>>(dx, dy, y, scale, rows, T);
    return cuk_status();
}

/* ------------------------------------------------------------ layouts */

#define PERM_THREADS 256u

/* One thread per element of q/k/v ([B, H, T, D] index i). merge = false
 * splits qkv -> q, k, v; merge = true writes (acc: adds) dq, dk, dv -> dqkv. */
template <typename S>
__global__ void qkv_permute_kernel(S *q, S *k, S *v, S *qkv, int B, int T, int H, int D, bool merge, bool acc)
{
    size_t n = (size_t)B * H * T * D;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t d = i % D, t = (i / D) % T, h = (i / ((size_t)D * T)) % H;
        size_t b = i / ((size_t)D * T * H);
        size_t base = ((b * T + t) * 3 * H + h) * D + d; /* [b, t, 0, h, d] */
        size_t hd = (size_t)H * D;
        if (!merge) {
            q[i] = qkv[base];
            k[i] = qkv[base + hd];
            v[i] = qkv[base + 2 * hd];
        } else {
            put(&qkv[base], ld(q[i]), acc);
            put(&qkv[base + hd], ld(k[i]), acc);
            put(&qkv[base + 2 * hd], ld(v[i]), acc);
        }
    }
}

static unsigned perm_blocks(size_t n)
{
    unsigned b = cuk_blocks(n, PERM_THREADS);
    return b > 65535u ? 65535u : b;
}

template <typename S>
static cudaError_t qkv_permute(S *q, S *k, S *v, S *qkv, int B, int T, int H, int D, bool merge, bool acc,
                               cudaStream_t stream)
{
    if (B <= 0 || T <= 0 || H <= 0 || D <= 0)
        return cudaErrorInvalidValue;
    size_t n = (size_t)B * H * T * D;
    qkv_permute_kernel<S><<<perm_blocks(n), PERM_THREADS, 0, stream>>>(q, k, v, qkv, B, T, H, D, merge, acc);
    return cuk_status();
}

extern "C" cudaError_t cuk_qkv_split(uint16_t *q, uint16_t *k, uint16_t *v, const uint16_t *qkv, int B, int T, int H,
                                     int D, cudaStream_t stream)
{
    return qkv_permute<uint16_t>(q, k, v, (uint16_t *)qkv, B, T, H, D, false, false, stream);
}

extern "C" cudaError_t cuk_qkv_merge(uint16_t *dqkv, const uint16_t *dq, const uint16_t *dk, const uint16_t *dv, int B,
                                     int T, int H, int D, cudaStream_t stream)
{
    return qkv_permute<uint16_t>((uint16_t *)dq, (uint16_t *)dk, (uint16_t *)dv, dqkv, B, T, H, D, true, false, stream);
}

extern "C" cudaError_t cuk_f32_qkv_split(float *q, float *k, float *v, const float *qkv, int B, int T, int NH, int hs,
                                         cudaStream_t stream)
{
    return qkv_permute<float>(q, k, v, (float *)qkv, B, T, NH, hs, false, false, stream);
}

extern "C" cudaError_t cuk_f32_qkv_merge_acc(float *dqkv, const float *dq, const float *dk, const float *dv, int B,
                                             int T, int NH, int hs, cudaStream_t stream)
{
    return qkv_permute<float>((float *)dq, (float *)dk, (float *)dv, dqkv, B, T, NH, hs, true, true, stream);
}

/* i indexes [B, H, T, D]; to_bthd copies inp[bhtd] -> out[bthd], else back. */
template <typename S>
__global__ void heads_permute_kernel(S *out, const S *inp, int B, int H, int T, int D, bool to_bthd)
{
    size_t n = (size_t)B * H * T * D;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t d = i % D, t = (i / D) % T, h = (i / ((size_t)D * T)) % H;
        size_t b = i / ((size_t)D * T * H);
        size_t j = ((b * T + t) * H + h) * D + d;
        if (to_bthd)
            out[j] = inp[i];
        else
            out[i] = inp[j];
    }
}

template <typename S>
static cudaError_t heads_permute(S *out, const S *inp, int B, int H, int T, int D, bool to_bthd, cudaStream_t stream)
{
    if (B <= 0 || T <= 0 || H <= 0 || D <= 0)
        return cudaErrorInvalidValue;
    size_t n = (size_t)B * H * T * D;
    heads_permute_kernel<S><<<perm_blocks(n), PERM_THREADS, 0, stream>>>(out, inp, B, H, T, D, to_bthd);
    return cuk_status();
}

extern "C" cudaError_t cuk_bhtd_to_bthd(uint16_t *out, const uint16_t *inp, int B, int H, int T, int D,
                                        cudaStream_t stream)
{
    return heads_permute<uint16_t>(out, inp, B, H, T, D, true, stream);
}

extern "C" cudaError_t cuk_bthd_to_bhtd(uint16_t *out, const uint16_t *inp, int B, int H, int T, int D,
                                        cudaStream_t stream)
{
    return heads_permute<uint16_t>(out, inp, B, H, T, D, false, stream);
}

extern "C" cudaError_t cuk_f32_bhtd_to_bthd(float *out, const float *inp, int B, int NH, int T, int hs,
                                            cudaStream_t stream)
{
    return heads_permute<float>(out, inp, B, NH, T, hs, true, stream);
}

extern "C" cudaError_t cuk_f32_bthd_to_bhtd(float *out, const float *inp, int B, int NH, int T, int hs,
                                            cudaStream_t stream)
{
    return heads_permute<float>(out, inp, B, NH, T, hs, false, stream);
}
