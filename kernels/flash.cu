/* flash.cu — flash-style attention on fp32 storage, the twin of
 * exec/core/cp_attn.c's recurrence, one ring step per launch: online
 * softmax with running max, sum and output in double, only the
 * log-sum-exp saved; the backward recomputes the scores. The context-
 * parallel masks are cp_split.c's, recomputed on the device.
 *
 * Simple on purpose (no tiling, no shared memory): one thread per query
 * row for the forward and dq, one thread per key row and key/value head
 * for dk and dv (it alone writes them: no atomics, deterministic). The
 * sums are cp_attn.c's, in the same order per thread. Contracts in cuk.h. */
#include <limits.h>

#include "kernels/common.cuh"

#define FL_THREADS    128u
#define FL_MAX_BLOCKS 65535u

static unsigned fl_blocks(size_t n)
{
    unsigned b = cuk_blocks(n, FL_THREADS);
    return b > FL_MAX_BLOCKS ? FL_MAX_BLOCKS : b;
}

#define FL_GRID_STRIDE(i, n)                                                                                           \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

/* cp_split.c's cp_chunk: global chunk of rank r's local chunk h. */
__device__ __forceinline__ int fl_chunk(int cp, int r, int h)
{
    return h == 0 ? r : 2 * cp - 1 - r;
}

/* cp_attn.c's admitted(): query row qi of this rank against key row ki of
 * rank src (local rows). One rank: causal. Otherwise cp_block() of the two
 * chunks: key chunk after: skipped; before: full; the same chunk: causal on
 * the global positions (cp_global_pos: chunk * cs + i % cs). */
__device__ __forceinline__ bool fl_admitted(const cuk_flash_dims &d, int qi, int ki)
{
    if (d.cp == 1)
        return ki <= qi;
    int cs = d.T / (2 * d.cp);
    int qc = fl_chunk(d.cp, d.rank, qi / cs), kc = fl_chunk(d.cp, d.src, ki / cs);
    if (kc > qc)
        return false;
    if (kc < qc)
        return true;
    return ki % cs <= qi % cs;
}

static bool fl_dims_ok(const cuk_flash_dims &d)
{
    if (d.B < 1 || d.T < 1 || d.cp < 1 || d.NH < 1 || d.NKV < 1 || d.hs < 1 || d.NH % d.NKV)
        return false;
    if (d.rank < 0 || d.rank >= d.cp || d.src < 0 || d.src >= d.cp)
        return false;
    if (d.cp > 1 && d.T % (2 * d.cp))
        return false;
    return (size_t)d.B * (size_t)d.T * (size_t)(d.NH + 2 * d.NKV) * (size_t)d.hs <= (size_t)LLONG_MAX / 8;
}

/* Scratch layout of the forward (doubles): mx [B*NH*Tl] | sum [B*NH*Tl] |
 * acc [B*Tl*C]. */
static size_t fl_states(const cuk_flash_dims &d)
{
    return (size_t)d.B * d.NH * (d.T / d.cp);
}

extern "C" size_t cuk_f32_flash_fwd_scratch_bytes(const cuk_flash_dims *d)
{
    size_t st = fl_states(*d);
    return (2 * st + st * (size_t)d->hs) * sizeof(double); /* B*Tl*C = B*NH*Tl*hs */
}

extern "C" size_t cuk_f32_flash_bwd_scratch_bytes(const cuk_flash_dims *d)
{
    return fl_states(*d) * sizeof(double); /* D [B*Tl, NH] */
}

/* ------------------------------------------------------------ forward */

__global__ void flash_init_kernel(double *mx, double *sum, double *acc, size_t nst, size_t nacc)
{
    FL_GRID_STRIDE(i, nacc)
    {
        acc[i] = 0.0;
        if (i < nst) {
            mx[i] = -INFINITY;
            sum[i] = 0.0;
        }
    }
}

/* Thread st = (b*NH + h)*Tl + qi: its query row against the block's keys
 * kb (rows of stride ks: k of the NKV heads, then v at + KV). */
__global__ void flash_fwd_step_kernel(double *mx, double *sum, double *acc, const float *qkv, const float *kb,
                                      size_t ks, cuk_flash_dims d)
{
    int Tl = d.T / d.cp, per = d.NH / d.NKV;
    size_t C = (size_t)d.NH * d.hs, KV = (size_t)d.NKV * d.hs, W = C + 2 * KV;
    double scale = 1.0 / sqrt((double)d.hs);
    FL_GRID_STRIDE(st, (size_t)d.B * d.NH * Tl)
    {
        int qi = (int)(st % (size_t)Tl), h = (int)(st / (size_t)Tl % (size_t)d.NH);
        size_t b = st / ((size_t)Tl * d.NH);
        const float *q = qkv + (b * Tl + qi) * W + (size_t)h * d.hs;
        double *o = acc + (b * Tl + qi) * C + (size_t)h * d.hs;
        double m = mx[st], sm = sum[st];
        for (int ki = 0; ki < Tl; ki++) {
            if (!fl_admitted(d, qi, ki))
                continue;
            const float *k = kb + (b * Tl + ki) * ks + (size_t)(h / per) * d.hs, *v = k + KV;
            double s = 0.0;
            for (int i = 0; i < d.hs; i++)
                s += (double)q[i] * k[i];
            s *= scale;
            if (s > m) { /* online softmax: rescale what was summed */
                double f = exp(m - s);
                sm *= f;
                for (int i = 0; i < d.hs; i++)
                    o[i] *= f;
                m = s;
            }
            double p = exp(s - m);
            sm += p;
            for (int i = 0; i < d.hs; i++)
                o[i] += p * v[i];
        }
        mx[st] = m;
        sum[st] = sm;
    }
}

__global__ void flash_fwd_finish_kernel(float *out, float *lse, const double *mx, const double *sum, const double *acc,
                                        cuk_flash_dims d)
{
    int Tl = d.T / d.cp;
    size_t C = (size_t)d.NH * d.hs;
    FL_GRID_STRIDE(st, (size_t)d.B * d.NH * Tl)
    {
        int qi = (int)(st % (size_t)Tl), h = (int)(st / (size_t)Tl % (size_t)d.NH);
        size_t b = st / ((size_t)Tl * d.NH), o = (b * Tl + qi) * C + (size_t)h * d.hs;
        for (int i = 0; i < d.hs; i++)
            out[o + i] = (float)(acc[o + i] / sum[st]);
        lse[st] = (float)(mx[st] + log(sum[st]));
    }
}

static void fl_split(void *scratch, const cuk_flash_dims &d, double **mx, double **sum, double **acc)
{
    size_t st = fl_states(d);
    *mx = (double *)scratch;
    *sum = *mx + st;
    *acc = *sum + st;
}

extern "C" cudaError_t cuk_f32_flash_fwd_init(void *scratch, const cuk_flash_dims *d, cudaStream_t stream)
{
    if (!scratch || !fl_dims_ok(*d))
        return cudaErrorInvalidValue;
    double *mx, *sum, *acc;
    fl_split(scratch, *d, &mx, &sum, &acc);
    size_t nst = fl_states(*d), nacc = nst * (size_t)d->hs;
    CUK_LAUNCH(flash_init_kernel, fl_blocks(nacc), FL_THREADS, stream, mx, sum, acc, nst, nacc);
    return cuk_status();
}

extern "C" cudaError_t cuk_f32_flash_fwd_step(void *scratch, const float *qkv, const float *kb, size_t ks,
                                              const cuk_flash_dims *d, cudaStream_t stream)
{
    if (!scratch || !fl_dims_ok(*d))
        return cudaErrorInvalidValue;
    double *mx, *sum, *acc;
    fl_split(scratch, *d, &mx, &sum, &acc);
    CUK_LAUNCH(flash_fwd_step_kernel, fl_blocks(fl_states(*d)), FL_THREADS, stream, mx, sum, acc, qkv, kb, ks, *d);
    return cuk_status();
}

extern "C" cudaError_t cuk_f32_flash_fwd_finish(float *out, float *lse, const void *scratch, const cuk_flash_dims *d,
                                                cudaStream_t stream)
{
    if (!scratch || !fl_dims_ok(*d))
        return cudaErrorInvalidValue;
    double *mx, *sum, *acc;
    fl_split((void *)scratch, *d, &mx, &sum, &acc);
    CUK_LAUNCH(flash_fwd_finish_kernel, fl_blocks(fl_states(*d)), FL_THREADS, stream, out, lse, mx, sum, acc, *d);
    return cuk_status();
}

/* ------------------------------------------------------------ ring buffers */

/* Rows of the travelling buffer from qkv: k | v (stride 2 KV), or k | v |
 * dk = 0 | dv = 0 (stride 4 KV, bwd). One thread per buffer element. */
__global__ void flash_pack_kernel(float *buf, const float *qkv, size_t rows, int NH, int NKV, int hs, bool bwd)
{
    size_t C = (size_t)NH * hs, KV = (size_t)NKV * hs, W = C + 2 * KV, bs = (bwd ? 4 : 2) * KV;
    FL_GRID_STRIDE(e, rows * bs)
    {
        size_t row = e / bs, c = e % bs;
        buf[e] = c < 2 * KV ? qkv[row * W + C + c] : 0.0f;
    }
}

/* dqkv's k | v columns += the dk | dv the buffer brought home. */
__global__ void flash_unpack_grad_kernel(float *dqkv, const float *buf, size_t rows, int NH, int NKV, int hs)
{
    size_t C = (size_t)NH * hs, KV = (size_t)NKV * hs, W = C + 2 * KV;
    FL_GRID_STRIDE(e, rows * 2 * KV)
    {
        size_t row = e / (2 * KV), c = e % (2 * KV);
        dqkv[row * W + C + c] += buf[row * 4 * KV + 2 * KV + c];
    }
}

extern "C" cudaError_t cuk_f32_flash_pack(float *buf, const float *qkv, size_t rows, int NH, int NKV, int hs, bool bwd,
                                          cudaStream_t stream)
{
    if (rows == 0)
        return cudaSuccess;
    if (NH < 1 || NKV < 1 || hs < 1)
        return cudaErrorInvalidValue;
    size_t n = rows * (bwd ? 4 : 2) * (size_t)NKV * hs;
    CUK_LAUNCH(flash_pack_kernel, fl_blocks(n), FL_THREADS, stream, buf, qkv, rows, NH, NKV, hs, bwd);
    return cuk_status();
}

extern "C" cudaError_t cuk_f32_flash_unpack_grad(float *dqkv, const float *buf, size_t rows, int NH, int NKV, int hs,
                                                 cudaStream_t stream)
{
    if (rows == 0)
        return cudaSuccess;
    if (NH < 1 || NKV < 1 || hs < 1)
        return cudaErrorInvalidValue;
    size_t n = rows * 2 * (size_t)NKV * hs;
    CUK_LAUNCH(flash_unpack_grad_kernel, fl_blocks(n), FL_THREADS, stream, dqkv, buf, rows, NH, NKV, hs);
    return cuk_status();
}

/* ------------------------------------------------------------ backward */

/* D[row*NH + h] = dO . O of that query row and head (double). */
__global__ void flash_bwd_D_kernel(double *D, const float *dout, const float *out, size_t rows, int NH, int hs)
{
    FL_GRID_STRIDE(e, rows * NH)
    {
        const float *dy = dout + e * hs, *o = out + e * hs; /* row*C + h*hs = e*hs */
        double s = 0.0;
        for (int i = 0; i < hs; i++)
            s += (double)dy[i] * o[i];
        D[e] = s;
    }
}

/* dq of query row st = (b*NH + h)*Tl + qi against the block's keys. */
__global__ void flash_bwd_dq_kernel(float *dqkv, const double *D, const float *dout, const float *lse, const float *qkv,
                                    const float *kb, size_t ks, cuk_flash_dims d)
{
    int Tl = d.T / d.cp, per = d.NH / d.NKV;
    size_t C = (size_t)d.NH * d.hs, KV = (size_t)d.NKV * d.hs, W = C + 2 * KV;
    double scale = 1.0 / sqrt((double)d.hs);
    FL_GRID_STRIDE(st, (size_t)d.B * d.NH * Tl)
    {
        int qi = (int)(st % (size_t)Tl), h = (int)(st / (size_t)Tl % (size_t)d.NH);
        size_t b = st / ((size_t)Tl * d.NH), qrow = b * Tl + qi;
        const float *q = qkv + qrow * W + (size_t)h * d.hs, *dO = dout + qrow * C + (size_t)h * d.hs;
        float *dq = dqkv + qrow * W + (size_t)h * d.hs;
        double L = lse[st], Di = D[qrow * d.NH + h];
        for (int ki = 0; ki < Tl; ki++) {
            if (!fl_admitted(d, qi, ki))
                continue;
            const float *k = kb + (b * Tl + ki) * ks + (size_t)(h / per) * d.hs, *v = k + KV;
            double s = 0.0, dp = 0.0;
            for (int i = 0; i < d.hs; i++) {
                s += (double)q[i] * k[i];
                dp += (double)dO[i] * v[i];
            }
            double p = exp(s * scale - L), ds = p * (dp - Di) * scale;
            for (int i = 0; i < d.hs; i++)
                dq[i] += (float)(ds * k[i]);
        }
    }
}

/* dk, dv of key row e = (b*NKV + g)*Tl + ki, key/value head g, summed over
 * the query heads of g's group and the admitted query rows. db: rows of
 * stride ks holding dk at the k offsets (dv at + KV). */
__global__ void flash_bwd_dkv_kernel(float *db, const double *D, const float *dout, const float *lse, const float *qkv,
                                     const float *kb, size_t ks, cuk_flash_dims d)
{
    int Tl = d.T / d.cp, per = d.NH / d.NKV;
    size_t C = (size_t)d.NH * d.hs, KV = (size_t)d.NKV * d.hs, W = C + 2 * KV;
    double scale = 1.0 / sqrt((double)d.hs);
    FL_GRID_STRIDE(e, (size_t)d.B * d.NKV * Tl)
    {
        int ki = (int)(e % (size_t)Tl), g = (int)(e / (size_t)Tl % (size_t)d.NKV);
        size_t b = e / ((size_t)Tl * d.NKV), ko = (b * Tl + ki) * ks + (size_t)g * d.hs;
        const float *k = kb + ko, *v = k + KV;
        float *dk = db + ko, *dv = dk + KV;
        for (int h = g * per; h < (g + 1) * per; h++)
            for (int qi = 0; qi < Tl; qi++) {
                if (!fl_admitted(d, qi, ki))
                    continue;
                size_t qrow = b * Tl + qi;
                const float *q = qkv + qrow * W + (size_t)h * d.hs, *dO = dout + qrow * C + (size_t)h * d.hs;
                double L = lse[(b * d.NH + h) * Tl + qi], Di = D[qrow * d.NH + h];
                double s = 0.0, dp = 0.0;
                for (int i = 0; i < d.hs; i++) {
                    s += (double)q[i] * k[i];
                    dp += (double)dO[i] * v[i];
                }
                double p = exp(s * scale - L), ds = p * (dp - Di) * scale;
                for (int i = 0; i < d.hs; i++) {
                    dv[i] += (float)(p * dO[i]);
                    dk[i] += (float)(ds * q[i]);
                }
            }
    }
}

extern "C" cudaError_t cuk_f32_flash_bwd_D(void *scratch, const float *dout, const float *out, const cuk_flash_dims *d,
                                           cudaStream_t stream)
{
    if (!scratch || !fl_dims_ok(*d))
        return cudaErrorInvalidValue;
    size_t rows = (size_t)d->B * (d->T / d->cp);
    CUK_LAUNCH(flash_bwd_D_kernel, fl_blocks(rows * d->NH), FL_THREADS, stream, (double *)scratch, dout, out, rows,
               d->NH, d->hs);
    return cuk_status();
}

extern "C" cudaError_t cuk_f32_flash_bwd_step(float *dqkv, float *db, const void *scratch, const float *dout,
                                              const float *lse, const float *qkv, const float *kb, size_t ks,
                                              const cuk_flash_dims *d, cudaStream_t stream)
{
    if (!scratch || !fl_dims_ok(*d))
        return cudaErrorInvalidValue;
    const double *D = (const double *)scratch;
    size_t Tl = (size_t)(d->T / d->cp);
    CUK_LAUNCH(flash_bwd_dq_kernel, fl_blocks((size_t)d->B * d->NH * Tl), FL_THREADS, stream, dqkv, D, dout, lse, qkv,
               kb, ks, *d);
    cudaError_t st = cuk_status();
    if (st != cudaSuccess)
        return st;
    CUK_LAUNCH(flash_bwd_dkv_kernel, fl_blocks((size_t)d->B * d->NKV * Tl), FL_THREADS, stream, db, D, dout, lse, qkv,
               kb, ks, *d);
    return cuk_status();
}
