/* backend_cuda — the executor's backend on one GPU. Contract in backend_cuda.h. */
#include "exec/cuda/backend_cuda.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec/core/cp_split.h"
#include "exec/cuda/backend_cuda_impl.h"
#include "exec/cuda/cugemm.h"
#include "kernels/cuk.h"

typedef struct {
    const char *op;
    int layer;
    cudaEvent_t begin, end;
} prof_slot;

typedef struct {
    int device;
    cudaStream_t stream;
    cugemm *gemm;
    void *scratch; /* column sums, flash attention, MoE sorts (the ops' cuk_*_scratch_bytes) */
    size_t scratch_bytes;
    float *attn; /* q, k, v, o/dO, dq, dk, dv: 7 x [B, NH, T, hs] */
    size_t attn_floats;
    int status; /* first failure (sticky) */
    ts_err err;
    prof_slot *prof;
    size_t nprof, prof_dropped;
    size_t open[BACKEND_CUDA_PROF_DEPTH]; /* slots begun, not yet ended (nesting) */
    int nopen, lost_depth;                /* begins dropped while this deep */
    cudaEvent_t epoch;
    bool epoch_set;
    int64_t epoch_mono_ns; /* CLOCK_MONOTONIC when the epoch event was recorded */
} cuda_ctx;

static cuda_ctx *CTX(backend *be)
{
    return (cuda_ctx *)be->ctx;
}

/* Keep the first failure. */
static void note(backend *be, cudaError_t st, const char *what)
{
    cuda_ctx *x = CTX(be);
    if (st != cudaSuccess && x->status == TS_OK)
        x->status = err_set(&x->err, TS_ESTATE, "cuda backend: %s: %s", what, cudaGetErrorString(st));
}

void backend_cuda_note(backend *be, cudaError_t st, const char *what)
{
    note(be, st, what);
}

static void note_rc(backend *be, int rc, const ts_err *e)
{
    cuda_ctx *x = CTX(be);
    if (rc != TS_OK && x->status == TS_OK) {
        x->status = rc;
        x->err = *e;
    }
}

/* ------------------------------------------------------------ memory */

static float *cu_alloc(backend *be, size_t n)
{
    void *p = NULL;
    cudaError_t st = cudaMalloc(&p, (n ? n : 1) * sizeof(float));
    if (st != cudaSuccess)
        return NULL; /* be_alloc reports the size and category */
    st = cudaMemsetAsync(p, 0, n * sizeof(float), CTX(be)->stream);
    note(be, st, "zero-fill of a new tensor");
    return p;
}

static void cu_free(backend *be, float *p)
{
    note(be, cudaFree(p), "cudaFree");
}

static void cu_to_device(backend *be, float *dst, const float *src, size_t n)
{
    cudaStream_t s = CTX(be)->stream;
    note(be, cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyHostToDevice, s), "copy to device");
    note(be, cudaStreamSynchronize(s), "copy to device (sync)");
}

static void cu_to_host(backend *be, float *dst, const float *src, size_t n)
{
    cudaStream_t s = CTX(be)->stream;
    note(be, cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToHost, s), "copy to host");
    note(be, cudaStreamSynchronize(s), "copy to host (sync)");
}

static int *cu_alloc_int(backend *be, size_t n)
{
    /* cppcheck-suppress invalidPointerCast ; device memory, never read through the float type */
    return (int *)cu_alloc(be, n); /* sizeof(int) == sizeof(float) */
}

static void cu_free_int(backend *be, int *p)
{
    note(be, cudaFree(p), "cudaFree");
}

static void cu_int_to_device(backend *be, int *dst, const int *src, size_t n)
{
    cudaStream_t s = CTX(be)->stream;
    note(be, cudaMemcpyAsync(dst, src, n * sizeof(int), cudaMemcpyHostToDevice, s), "token copy to device");
    note(be, cudaStreamSynchronize(s), "token copy to device (sync)");
}

/* Issued on the compute stream, so it follows the kernels that write src. */
static void cu_int_to_host(backend *be, int *dst, const int *src, size_t n)
{
    cudaStream_t s = CTX(be)->stream;
    note(be, cudaMemcpyAsync(dst, src, n * sizeof(int), cudaMemcpyDeviceToHost, s), "int copy to host");
    note(be, cudaStreamSynchronize(s), "int copy to host (sync)");
}

static void cu_zero(backend *be, float *p, size_t n)
{
    note(be, cudaMemsetAsync(p, 0, n * sizeof(float), CTX(be)->stream), "zero");
}

static void cu_copy(backend *be, float *dst, const float *src, size_t n)
{
    note(be, cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, CTX(be)->stream), "device copy");
}

static void cu_sync(backend *be)
{
    note(be, cudaStreamSynchronize(CTX(be)->stream), "sync");
}

/* Grow-only scratch; the old buffer is freed after the stream drains. */
static void *scratch(backend *be, size_t bytes)
{
    cuda_ctx *x = CTX(be);
    if (bytes <= x->scratch_bytes)
        return x->scratch;
    note(be, cudaStreamSynchronize(x->stream), "scratch (sync)");
    cudaFree(x->scratch);
    x->scratch = NULL;
    x->scratch_bytes = 0;
    cudaError_t st = cudaMalloc(&x->scratch, bytes);
    note(be, st, "scratch allocation");
    if (st == cudaSuccess)
        x->scratch_bytes = bytes;
    return x->scratch;
}

void *backend_cuda_scratch(backend *be, size_t bytes)
{
    return scratch(be, bytes);
}

static float *attn_scratch(backend *be, size_t floats)
{
    cuda_ctx *x = CTX(be);
    if (floats <= x->attn_floats)
        return x->attn;
    note(be, cudaStreamSynchronize(x->stream), "attention scratch (sync)");
    cudaFree(x->attn);
    x->attn = NULL;
    x->attn_floats = 0;
    cudaError_t st = cudaMalloc((void **)&x->attn, floats * sizeof(float));
    note(be, st, "attention scratch allocation");
    if (st == cudaSuccess)
        x->attn_floats = floats;
    return x->attn;
}

/* ------------------------------------------------------------ GEMM */

static void gemm_run(backend *be, const cugemm_args *a)
{
    ts_err e;
    err_clear(&e);
    note_rc(be, cugemm_run(CTX(be)->gemm, a, CTX(be)->stream, &e), &e);
}

static void cu_gemm(backend *be, bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                    const float *B, int ldb, float beta, float *C, int ldc)
{
    cugemm_args a = {.kind = CUGEMM_F32,
                     .trans_a = ta,
                     .trans_b = tb,
                     .M = M,
                     .N = N,
                     .K = K,
                     .alpha = alpha,
                     .beta = beta,
                     .A = A,
                     .lda = lda,
                     .B = B,
                     .ldb = ldb,
                     .C = C,
                     .ldc = ldc,
                     .batch = 1};
    gemm_run(be, &a);
}

/* Strided-batched row-major GEMM over the B*NH heads. */
static void bgemm(backend *be, bool ta, bool tb, int M, int N, int K, const float *A, int lda, long long sa,
                  const float *B, int ldb, long long sb, float *C, int ldc, long long sc, int batch)
{
    cugemm_args a = {.kind = CUGEMM_F32,
                     .trans_a = ta,
                     .trans_b = tb,
                     .M = M,
                     .N = N,
                     .K = K,
                     .alpha = 1.0f,
                     .beta = 0.0f,
                     .A = A,
                     .lda = lda,
                     .stride_a = sa,
                     .B = B,
                     .ldb = ldb,
                     .stride_b = sb,
                     .C = C,
                     .ldc = ldc,
                     .stride_c = sc,
                     .batch = batch};
    gemm_run(be, &a);
}

/* ------------------------------------------------------------ kernels */

static void cu_embed_fwd(backend *be, float *out, const int *tok, const float *wte, const float *wpe, size_t row0,
                         size_t n, int T, int C)
{
    note(be, cuk_f32_embed_fwd(out, tok, wte, wpe, row0, n, T, C, CTX(be)->stream), "embed_fwd");
}

static void cu_embed_pos_fwd(backend *be, float *out, const int *tok, const float *wte, const float *wpe, int B, int n,
                             int pos0, int C)
{
    note(be, cuk_f32_embed_pos_fwd(out, tok, wte, wpe, B, n, pos0, C, CTX(be)->stream), "embed_pos_fwd");
}

static void cu_kv_append(backend *be, float *kc, float *vc, const float *qkv, int B, int n, int pos0, int Tmax, int NH,
                         int hs)
{
    note(be, cuk_f32_kv_append(kc, vc, qkv, B, n, pos0, Tmax, NH, hs, CTX(be)->stream), "kv_append");
}

static void cu_att_kv_fwd(backend *be, float *out, float *att, const float *qkv, const float *kc, const float *vc,
                          int B, int n, int pos0, int Tmax, int NH, int hs)
{
    note(be, cuk_f32_attention_kv_fwd(out, att, qkv, kc, vc, B, n, pos0, Tmax, NH, hs, CTX(be)->stream),
         "attention_kv_fwd");
}

static void cu_embed_bwd(backend *be, float *dwte, float *dwpe, const float *dout, const int *tok, size_t row0,
                         size_t n, int T, int C)
{
    note(be, cuk_f32_embed_bwd(dwte, dwpe, dout, tok, row0, n, T, C, CTX(be)->stream), "embed_bwd");
}

static void cu_ln_fwd(backend *be, float *out, float *mean, float *rstd, const float *inp, const float *w,
                      const float *b, size_t N, int C)
{
    note(be, cuk_f32_layernorm_fwd(out, mean, rstd, inp, w, b, N, C, CTX(be)->stream), "layernorm_fwd");
}

static void cu_ln_bwd_input(backend *be, float *dinp, const float *dout, const float *inp, const float *w,
                            const float *mean, const float *rstd, size_t N, int C)
{
    note(be, cuk_f32_layernorm_bwd_input(dinp, dout, inp, w, mean, rstd, N, C, CTX(be)->stream), "layernorm_bwd_input");
}

static void cu_ln_bwd_weight(backend *be, float *dw, float *db, const float *dout, const float *inp, const float *mean,
                             const float *rstd, size_t N, int C)
{
    void *s = scratch(be, cuk_colsum_scratch_bytes((int)N, C));
    if (!s)
        return;
    note(be, cuk_f32_layernorm_bwd_weight(dw, db, dout, inp, mean, rstd, N, C, s, CTX(be)->stream),
         "layernorm_bwd_weight");
}

/* Attention through GEMMs: q, k, v split into [B, NH, T, hs] (grouped-query:
 * each query head's key/value head h / (NH/NKV) copied, cuk_f32_qkv_split_gqa;
 * multi-head, NKV = NH: cuk_f32_qkv_split), then two strided-batched GEMMs
 * around the scaled causal softmax; the backward merges the key/value
 * gradients back, summed over each group. */
static void att_split(backend *be, float *q, float *k, float *v, const float *qkv, int B, int T, int NH, int NKV,
                      int hs)
{
    cudaStream_t s = CTX(be)->stream;
    if (NKV == NH)
        note(be, cuk_f32_qkv_split(q, k, v, qkv, B, T, NH, hs, s), "attention qkv split");
    else
        note(be, cuk_f32_qkv_split_gqa(q, k, v, qkv, B, T, NH, NKV, hs, s), "gqa attention qkv split");
}

static void cu_att_gqa_fwd(backend *be, float *out, float *att, const float *qkv, int B, int T, int NH, int NKV, int hs)
{
    cudaStream_t s = CTX(be)->stream;
    size_t per = (size_t)B * NH * T * hs;
    float *q = attn_scratch(be, 7 * per);
    if (!q)
        return;
    float *k = q + per, *v = k + per, *o = v + per;
    int bh = B * NH;
    long long sq = (long long)T * hs, sa = (long long)T * T;
    att_split(be, q, k, v, qkv, B, T, NH, NKV, hs);
    bgemm(be, false, true, T, T, hs, q, hs, sq, k, hs, sq, att, T, sa, bh); /* q k^T */
    note(be, cuk_f32_softmax_causal_fwd(att, bh, T, 1.0f / sqrtf((float)hs), s), "attention softmax");
    bgemm(be, false, false, T, hs, T, att, T, sa, v, hs, sq, o, hs, sq, bh); /* att v */
    note(be, cuk_f32_bhtd_to_bthd(out, o, B, NH, T, hs, s), "attention output permute");
}

static void cu_att_gqa_bwd(backend *be, float *dqkv, float *datt, const float *dout, const float *qkv, const float *att,
                           int B, int T, int NH, int NKV, int hs)
{
    cudaStream_t s = CTX(be)->stream;
    size_t per = (size_t)B * NH * T * hs;
    float *q = attn_scratch(be, 7 * per);
    if (!q)
        return;
    float *k = q + per, *v = k + per, *dO = v + per, *dq = dO + per, *dk = dq + per, *dv = dk + per;
    int bh = B * NH;
    long long sq = (long long)T * hs, sa = (long long)T * T;
    att_split(be, q, k, v, qkv, B, T, NH, NKV, hs);
    note(be, cuk_f32_bthd_to_bhtd(dO, dout, B, NH, T, hs, s), "attention dout permute");
    bgemm(be, false, true, T, T, hs, dO, hs, sq, v, hs, sq, datt, T, sa, bh); /* dO v^T */
    bgemm(be, true, false, T, hs, T, att, T, sa, dO, hs, sq, dv, hs, sq, bh); /* att^T dO */
    note(be, cuk_f32_softmax_causal_bwd(datt, att, datt, bh, T, 1.0f / sqrtf((float)hs), s),
         "attention softmax backward");
    bgemm(be, false, false, T, hs, T, datt, T, sa, k, hs, sq, dq, hs, sq, bh); /* dS k */
    bgemm(be, true, false, T, hs, T, datt, T, sa, q, hs, sq, dk, hs, sq, bh);  /* dS^T q */
    if (NKV == NH)
        note(be, cuk_f32_qkv_merge_acc(dqkv, dq, dk, dv, B, T, NH, hs, s), "attention dqkv merge");
    else
        note(be, cuk_f32_qkv_merge_gqa_acc(dqkv, dq, dk, dv, B, T, NH, NKV, hs, s), "gqa attention dqkv merge");
}

/* Multi-head attention: one key/value head per query head. */
static void cu_att_fwd(backend *be, float *out, float *att, const float *qkv, int B, int T, int NH, int hs)
{
    cu_att_gqa_fwd(be, out, att, qkv, B, T, NH, NH, hs);
}

static void cu_att_bwd(backend *be, float *dqkv, float *datt, const float *dout, const float *qkv, const float *att,
                       int B, int T, int NH, int hs)
{
    cu_att_gqa_bwd(be, dqkv, datt, dout, qkv, att, B, T, NH, NH, hs);
}

/* ------------------------------------------------------------ flash attention */

/* A failed launch or copy of the flash path: kept as the sticky status and
 * returned (the flash ops return a status). */
static int flash_fail(backend *be, cudaError_t st, const char *what, ts_err *err)
{
    note(be, st, what);
    return err_set(err, TS_ESTATE, "cuda flash attention: %s: %s", what, cudaGetErrorString(st));
}

/* cp_attn's argument checks (the same messages' content). */
static int flash_check(const cp_ring *ring, int B, int T, int NH, int NKV, int hs, ts_err *err)
{
    if (NH < 1 || NKV < 1 || hs < 1 || NH % NKV)
        return err_set(err, TS_EINVAL,
                       "cuda flash attention: %d query heads, %d key/value heads of %d: the key/value heads must "
                       "divide the query heads (all >= 1)",
                       NH, NKV, hs);
    if (B < 1 || T < 1)
        return err_set(err, TS_EINVAL, "cuda flash attention: batch %d, sequence %d: both must be >= 1", B, T);
    if (ring->size > 1 && !ring->sendrecv)
        return err_set(err, TS_EINVAL, "cuda flash attention: a ring of %d ranks without an exchange", ring->size);
    return ring->size > 1 ? cp_split_check(T, ring->size, err) : TS_OK;
}

/* One hop of the ring, staged through host memory (the cp_ring exchange is
 * host-side: cp_mpi's MPI_Sendrecv): dev's n floats leave for the next
 * rank and the previous rank's arrive in dev. host: 2n floats. */
static int flash_hop(backend *be, const cp_ring *ring, float *dev, float *host, size_t n, ts_err *err)
{
    cudaStream_t s = CTX(be)->stream;
    cudaError_t st = cudaMemcpyAsync(host, dev, n * sizeof(float), cudaMemcpyDeviceToHost, s);
    if (st == cudaSuccess)
        st = cudaStreamSynchronize(s);
    if (st != cudaSuccess)
        return flash_fail(be, st, "ring block to host", err);
    int rc = ring->sendrecv(ring->ud, host, host + n, n, err);
    if (rc != TS_OK)
        return rc;
    st = cudaMemcpyAsync(dev, host + n, n * sizeof(float), cudaMemcpyHostToDevice, s);
    if (st == cudaSuccess)
        st = cudaStreamSynchronize(s); /* host + n is written by the next hop */
    return st == cudaSuccess ? TS_OK : flash_fail(be, st, "ring block to device", err);
}

/* The ring's device buffer (the caller's ring_ws, or one allocated here
 * into *own) and the host staging of nkv floats each way. */
static int flash_buffers(backend *be, size_t nkv, float *ring_ws, float **dev, float **own, float **host, ts_err *err)
{
    *dev = ring_ws;
    *own = NULL;
    *host = NULL;
    if (nkv == 0)
        return TS_OK;
    if (!ring_ws) {
        cudaError_t st = cudaMalloc((void **)own, nkv * sizeof(float));
        if (st != cudaSuccess)
            return flash_fail(be, st, "ring buffer allocation", err);
        *dev = *own;
    }
    *host = malloc(2 * nkv * sizeof(float));
    if (!*host)
        return err_set(err, TS_ENOMEM, "cuda flash attention: %zu floats of host staging: out of memory", 2 * nkv);
    return TS_OK;
}

static int cu_att_flash_fwd(backend *be, const cp_ring *ring, float *out, float *lse, const float *qkv, int B, int T,
                            int NH, int NKV, int hs, float *ring_ws, ts_err *err)
{
    int cp = ring->size, rc = flash_check(ring, B, T, NH, NKV, hs, err);
    if (rc != TS_OK)
        return rc;
    cudaStream_t s = CTX(be)->stream;
    cuk_flash_dims d = {
        .B = B, .T = T, .cp = cp, .rank = ring->rank, .src = ring->rank, .NH = NH, .NKV = NKV, .hs = hs};
    size_t rows = (size_t)B * (size_t)(T / cp), KV = (size_t)NKV * hs, W = (size_t)(NH + 2 * NKV) * hs;
    size_t nkv = cp > 1 ? rows * 2 * KV : 0;
    float *dev = NULL, *own = NULL, *host = NULL;
    void *ws = scratch(be, cuk_f32_flash_fwd_scratch_bytes(&d));
    rc =
        ws ? flash_buffers(be, nkv, ring_ws, &dev, &own, &host, err)
           : err_set(err, TS_ENOMEM, "cuda flash attention: scratch of %zu bytes", cuk_f32_flash_fwd_scratch_bytes(&d));
    cudaError_t st = cudaSuccess;
    if (rc == TS_OK)
        st = cuk_f32_flash_fwd_init(ws, &d, s);
    if (rc == TS_OK && st == cudaSuccess && cp > 1)
        st = cuk_f32_flash_pack(dev, qkv, rows, NH, NKV, hs, false, s);
    for (int step = 0; rc == TS_OK && st == cudaSuccess && step < cp; step++) {
        d.src = cp_ring_src(cp, ring->rank, step);
        st = cuk_f32_flash_fwd_step(ws, qkv, cp > 1 ? dev : qkv + (size_t)NH * hs, cp > 1 ? 2 * KV : W, &d, s);
        if (st == cudaSuccess && step + 1 < cp)
            rc = flash_hop(be, ring, dev, host, nkv, err);
    }
    if (rc == TS_OK && st == cudaSuccess)
        st = cuk_f32_flash_fwd_finish(out, lse, ws, &d, s);
    if (rc == TS_OK && st != cudaSuccess)
        rc = flash_fail(be, st, "forward launch", err);
    if (own || host)
        cudaStreamSynchronize(s); /* nothing in flight reads them */
    cudaFree(own);
    free(host);
    return rc;
}

static int cu_att_flash_bwd(backend *be, const cp_ring *ring, float *dqkv, const float *dout, const float *out,
                            const float *lse, const float *qkv, int B, int T, int NH, int NKV, int hs, float *ring_ws,
                            ts_err *err)
{
    int cp = ring->size, rc = flash_check(ring, B, T, NH, NKV, hs, err);
    if (rc != TS_OK)
        return rc;
    cudaStream_t s = CTX(be)->stream;
    cuk_flash_dims d = {
        .B = B, .T = T, .cp = cp, .rank = ring->rank, .src = ring->rank, .NH = NH, .NKV = NKV, .hs = hs};
    size_t rows = (size_t)B * (size_t)(T / cp), C = (size_t)NH * hs, KV = (size_t)NKV * hs, W = C + 2 * KV;
    size_t nkv = cp > 1 ? rows * 4 * KV : 0; /* k | v | dk | dv */
    float *dev = NULL, *own = NULL, *host = NULL;
    void *ws = scratch(be, cuk_f32_flash_bwd_scratch_bytes(&d));
    rc =
        ws ? flash_buffers(be, nkv, ring_ws, &dev, &own, &host, err)
           : err_set(err, TS_ENOMEM, "cuda flash attention: scratch of %zu bytes", cuk_f32_flash_bwd_scratch_bytes(&d));
    cudaError_t st = cudaSuccess;
    if (rc == TS_OK)
        st = cuk_f32_flash_bwd_D(ws, dout, out, &d, s);
    if (rc == TS_OK && st == cudaSuccess && cp > 1)
        st = cuk_f32_flash_pack(dev, qkv, rows, NH, NKV, hs, true, s);
    for (int step = 0; rc == TS_OK && st == cudaSuccess && step < cp; step++) {
        d.src = cp_ring_src(cp, ring->rank, step);
        /* the travelling rows of k | v | dk | dv, or qkv and dqkv in place */
        const float *kb = cp > 1 ? dev : qkv + C;
        float *db = cp > 1 ? dev + 2 * KV : dqkv + C;
        st = cuk_f32_flash_bwd_step(dqkv, db, ws, dout, lse, qkv, kb, cp > 1 ? 4 * KV : W, &d, s);
        if (st == cudaSuccess && cp > 1) /* cp hops in all: the last one brings dk, dv home */
            rc = flash_hop(be, ring, dev, host, nkv, err);
    }
    if (rc == TS_OK && st == cudaSuccess && cp > 1)
        st = cuk_f32_flash_unpack_grad(dqkv, dev, rows, NH, NKV, hs, s);
    if (rc == TS_OK && st != cudaSuccess)
        rc = flash_fail(be, st, "backward launch", err);
    if (own || host)
        cudaStreamSynchronize(s);
    cudaFree(own);
    free(host);
    return rc;
}

/* ------------------------------------------------------------ Llama kernels */

static void cu_rms_fwd(backend *be, float *out, float *rstd, const float *inp, const float *w, size_t N, int C)
{
    note(be, cuk_f32_rmsnorm_fwd(out, rstd, inp, w, N, C, CTX(be)->stream), "rmsnorm_fwd");
}

static void cu_rms_bwd_input(backend *be, float *dinp, const float *dout, const float *inp, const float *w,
                             const float *rstd, size_t N, int C)
{
    note(be, cuk_f32_rmsnorm_bwd_input(dinp, dout, inp, w, rstd, N, C, CTX(be)->stream), "rmsnorm_bwd_input");
}

static void cu_rms_bwd_weight(backend *be, float *dw, const float *dout, const float *inp, const float *rstd, size_t N,
                              int C)
{
    note(be, cuk_f32_rmsnorm_bwd_weight(dw, dout, inp, rstd, N, C, CTX(be)->stream), "rmsnorm_bwd_weight");
}

static void cu_qkn_fwd(backend *be, float *qkv, float *xin, float *mean, float *rstd, const float *qw, const float *qb,
                       const float *kw, const float *kb, size_t N, int NH, int NKV, int hs)
{
    note(be, cuk_f32_qknorm_fwd(qkv, xin, mean, rstd, qw, qb, kw, kb, N, NH, NKV, hs, CTX(be)->stream), "qknorm_fwd");
}

static void cu_qkn_bwd_w(backend *be, float *dqw, float *dqb, float *dkw, float *dkb, const float *dqkv,
                         const float *xin, const float *mean, const float *rstd, size_t N, int NH, int NKV, int hs)
{
    note(be, cuk_f32_qknorm_bwd_weight(dqw, dqb, dkw, dkb, dqkv, xin, mean, rstd, N, NH, NKV, hs, CTX(be)->stream),
         "qknorm_bwd_weight");
}

static void cu_qkn_bwd_i(backend *be, float *dqkv, const float *xin, const float *mean, const float *rstd,
                         const float *qw, const float *kw, size_t N, int NH, int NKV, int hs)
{
    note(be, cuk_f32_qknorm_bwd_input(dqkv, xin, mean, rstd, qw, kw, N, NH, NKV, hs, CTX(be)->stream),
         "qknorm_bwd_input");
}

static void cu_swiglu_fwd(backend *be, float *out, const float *inp, size_t N, int F)
{
    note(be, cuk_f32_swiglu_fwd(out, inp, N, F, CTX(be)->stream), "swiglu_fwd");
}

static void cu_swiglu_bwd(backend *be, float *dinp, const float *inp, const float *dout, size_t N, int F)
{
    note(be, cuk_f32_swiglu_bwd(dinp, inp, dout, N, F, CTX(be)->stream), "swiglu_bwd");
}

static void cu_rope_fwd(backend *be, float *qkv, size_t N, int T, int NH, int NKV, int hs, float base)
{
    note(be, cuk_f32_rope(qkv, N, T, 0, NH, NKV, hs, base, 1.0f, CTX(be)->stream), "rope_fwd");
}

static void cu_rope_bwd(backend *be, float *dqkv, size_t N, int T, int NH, int NKV, int hs, float base)
{
    note(be, cuk_f32_rope(dqkv, N, T, 0, NH, NKV, hs, base, -1.0f, CTX(be)->stream), "rope_bwd");
}

static void cu_rope_at_fwd(backend *be, float *qkv, size_t N, int pos0, int NH, int NKV, int hs, float base)
{
    note(be, cuk_f32_rope(qkv, N, 0, pos0, NH, NKV, hs, base, 1.0f, CTX(be)->stream), "rope_at_fwd");
}

static void cu_rope_at_bwd(backend *be, float *dqkv, size_t N, int pos0, int NH, int NKV, int hs, float base)
{
    note(be, cuk_f32_rope(dqkv, N, 0, pos0, NH, NKV, hs, base, -1.0f, CTX(be)->stream), "rope_at_bwd");
}

static void cu_gelu_fwd(backend *be, float *out, const float *inp, size_t n)
{
    note(be, cuk_f32_gelu_fwd(out, inp, n, CTX(be)->stream), "gelu_fwd");
}

static void cu_gelu_bwd(backend *be, float *dinp, const float *inp, const float *dout, size_t n)
{
    note(be, cuk_f32_gelu_bwd(dinp, inp, dout, n, CTX(be)->stream), "gelu_bwd");
}

static void cu_bias_fwd(backend *be, float *out, const float *bias, size_t N, int OC)
{
    note(be, cuk_f32_bias_fwd(out, bias, N, OC, CTX(be)->stream), "bias_fwd");
}

static void cu_bias_bwd(backend *be, float *dbias, const float *dout, size_t N, int OC)
{
    void *s = scratch(be, cuk_colsum_scratch_bytes((int)N, OC));
    if (!s)
        return;
    note(be, cuk_f32_bias_bwd(dbias, dout, N, OC, s, CTX(be)->stream), "bias_bwd");
}

static void cu_bias_residual_fwd(backend *be, float *out, const float *a, const float *b, const float *bias, size_t N,
                                 int OC)
{
    note(be, cuk_f32_bias_residual_fwd(out, a, b, bias, N, OC, CTX(be)->stream), "bias_residual_fwd");
}

static void cu_add(backend *be, float *y, const float *x, size_t n)
{
    note(be, cuk_f32_add(y, x, n, CTX(be)->stream), "add");
}

static void cu_ce_fwd(backend *be, float *losses, float *probs, const float *logits, const int *targets, size_t N,
                      int V)
{
    note(be, cuk_f32_crossentropy_fwd(losses, probs, logits, targets, N, V, CTX(be)->stream), "crossentropy_fwd");
}

static void cu_ce_bwd(backend *be, float *dlogits, const float *probs, const int *targets, size_t N, int V, float scale)
{
    note(be, cuk_f32_crossentropy_bwd(dlogits, probs, targets, N, V, scale, CTX(be)->stream), "crossentropy_bwd");
}

static void cu_adam(backend *be, float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2,
                    float eps, float wd, int t)
{
    note(be, cuk_adamw(NULL, p, g, m, v, n, lr, b1, b2, eps, wd, t, 1.0f, CTX(be)->stream), "adam");
}

/* ------------------------------------------------------------ profiling */

void backend_cuda_prof(void *ud, const char *op, int layer, bool end)
{
    backend *be = ud;
    cuda_ctx *x = CTX(be);
    if (end) {
        if (x->lost_depth > 0) { /* the matching begin was dropped */
            x->lost_depth--;
            return;
        }
        if (x->nopen > 0) {
            size_t i = x->open[--x->nopen];
            note(be, cudaEventRecord(x->prof[i].end, x->stream), "profiling end");
        }
        return;
    }
    if (x->nprof >= BACKEND_CUDA_MAX_PROF || x->nopen >= BACKEND_CUDA_PROF_DEPTH || x->lost_depth > 0) {
        x->prof_dropped++;
        x->lost_depth++;
        return;
    }
    prof_slot *p = &x->prof[x->nprof];
    if (!p->begin) {
        note(be, cudaEventCreate(&p->begin), "profiling event");
        note(be, cudaEventCreate(&p->end), "profiling event");
    }
    if (!x->epoch_set) {
        note(be, cudaStreamSynchronize(x->stream), "profiling epoch (sync)");
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        x->epoch_mono_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
        note(be, cudaEventRecord(x->epoch, x->stream), "profiling epoch");
        x->epoch_set = true;
    }
    p->op = op;
    p->layer = layer;
    note(be, cudaEventRecord(p->begin, x->stream), "profiling begin");
    x->open[x->nopen++] = x->nprof++;
}

int backend_cuda_prof_collect(backend *be, void (*fn)(void *ud, const backend_cuda_op *op), void *ud, size_t *dropped,
                              ts_err *err)
{
    cuda_ctx *x = CTX(be);
    if (x->nopen > 0)
        return err_set(err, TS_ESTATE,
                       "cuda backend: profiling collect with %d op(s) begun "
                       "and not ended (innermost '%s')",
                       x->nopen, x->prof[x->open[x->nopen - 1]].op);
    cudaError_t st = cudaStreamSynchronize(x->stream);
    if (st != cudaSuccess)
        return err_set(err, TS_ESTATE, "cuda backend: profiling sync: %s", cudaGetErrorString(st));
    for (size_t i = 0; i < x->nprof; i++) {
        float t0 = 0.0f, dt = 0.0f;
        st = cudaEventElapsedTime(&t0, x->epoch, x->prof[i].begin);
        if (st == cudaSuccess)
            st = cudaEventElapsedTime(&dt, x->prof[i].begin, x->prof[i].end);
        if (st != cudaSuccess)
            return err_set(err, TS_ESTATE, "cuda backend: op %zu (%s): event time: %s", i, x->prof[i].op,
                           cudaGetErrorString(st));
        backend_cuda_op r = {.op = x->prof[i].op,
                             .layer = x->prof[i].layer,
                             .start_ns = (int64_t)llround((double)t0 * 1e6),
                             .dur_ns = (int64_t)llround((double)dt * 1e6)};
        r.start_mono_ns = x->epoch_mono_ns + r.start_ns;
        fn(ud, &r);
    }
    if (dropped)
        *dropped = x->prof_dropped;
    x->nprof = 0;
    x->prof_dropped = 0;
    x->nopen = 0;
    x->lost_depth = 0;
    return TS_OK;
}

/* ------------------------------------------------------------ lifetime */

static void cu_destroy(backend *be)
{
    if (!be)
        return;
    cuda_ctx *x = CTX(be);
    if (x) {
        cudaStreamSynchronize(x->stream);
        be_pool_drain(be);
        for (size_t i = 0; x->prof && i < BACKEND_CUDA_MAX_PROF; i++)
            if (x->prof[i].begin) {
                cudaEventDestroy(x->prof[i].begin);
                cudaEventDestroy(x->prof[i].end);
            }
        free(x->prof);
        if (x->epoch)
            cudaEventDestroy(x->epoch);
        cudaFree(x->scratch);
        cudaFree(x->attn);
        cugemm_destroy(x->gemm);
        if (x->stream)
            cudaStreamDestroy(x->stream);
        free(x);
    }
    free(be);
}

int backend_cuda_status(backend *be, ts_err *err)
{
    cuda_ctx *x = CTX(be);
    if (x->status != TS_OK && err)
        *err = x->err;
    return x->status;
}

cudaStream_t backend_cuda_stream(backend *be)
{
    return CTX(be)->stream;
}

static void fill_table(backend *be)
{
    be->name = "cuda";
    be->alloc = cu_alloc;
    be->free = cu_free;
    be->to_device = cu_to_device;
    be->to_host = cu_to_host;
    be->alloc_int = cu_alloc_int;
    be->free_int = cu_free_int;
    be->int_to_device = cu_int_to_device;
    be->int_to_host = cu_int_to_host;
    be->zero = cu_zero;
    be->copy = cu_copy;
    be->sync = cu_sync;
    be->gemm = cu_gemm;
    be->embed_fwd = cu_embed_fwd;
    be->embed_bwd = cu_embed_bwd;
    be->layernorm_fwd = cu_ln_fwd;
    be->layernorm_bwd_input = cu_ln_bwd_input;
    be->layernorm_bwd_weight = cu_ln_bwd_weight;
    be->attention_fwd = cu_att_fwd;
    be->embed_pos_fwd = cu_embed_pos_fwd;
    be->kv_append = cu_kv_append;
    be->attention_kv_fwd = cu_att_kv_fwd;
    be->attention_bwd = cu_att_bwd;
    be->gelu_fwd = cu_gelu_fwd;
    be->gelu_bwd = cu_gelu_bwd;
    be->bias_fwd = cu_bias_fwd;
    be->bias_bwd = cu_bias_bwd;
    be->bias_residual_fwd = cu_bias_residual_fwd;
    be->add = cu_add;
    be->crossentropy_fwd = cu_ce_fwd;
    be->crossentropy_bwd = cu_ce_bwd;
    be->adam = cu_adam;
    be->rmsnorm_fwd = cu_rms_fwd;
    be->rmsnorm_bwd_input = cu_rms_bwd_input;
    be->rmsnorm_bwd_weight = cu_rms_bwd_weight;
    be->qknorm_fwd = cu_qkn_fwd;
    be->qknorm_bwd_weight = cu_qkn_bwd_w;
    be->qknorm_bwd_input = cu_qkn_bwd_i;
    be->swiglu_fwd = cu_swiglu_fwd;
    be->swiglu_bwd = cu_swiglu_bwd;
    be->rope_fwd = cu_rope_fwd;
    be->rope_bwd = cu_rope_bwd;
    be->rope_at_fwd = cu_rope_at_fwd;
    be->rope_at_bwd = cu_rope_at_bwd;
    be->attention_gqa_fwd = cu_att_gqa_fwd;
    be->attention_gqa_bwd = cu_att_gqa_bwd;
    be->attention_flash_fwd = cu_att_flash_fwd;
    be->attention_flash_bwd = cu_att_flash_bwd;
    backend_cuda_moe_fill(be);
    be->destroy = cu_destroy;
}

int backend_cuda_create(int device, bool autotune, backend **out, ts_err *err)
{
    *out = NULL;
    int n = 0;
    cudaError_t st = cudaGetDeviceCount(&n);
    if (st != cudaSuccess || n == 0)
        return err_set(err, TS_ENOTSUP, "--backend cuda: no CUDA device available (%s)",
                       st != cudaSuccess ? cudaGetErrorString(st) : "0 devices");
    if (device < 0 || device >= n)
        return err_set(err, TS_EINVAL, "cuda device %d: valid are 0..%d", device, n - 1);
    st = cudaSetDevice(device);
    if (st != cudaSuccess)
        return err_set(err, TS_ENOTSUP, "cudaSetDevice(%d): %s", device, cudaGetErrorString(st));
    backend *be = calloc(1, sizeof *be);
    cuda_ctx *x = calloc(1, sizeof *x);
    prof_slot *prof = calloc(BACKEND_CUDA_MAX_PROF, sizeof *prof);
    if (!be || !x || !prof) {
        free(be);
        free(x);
        free(prof);
        return err_set(err, TS_ENOMEM, "cuda backend: out of host memory");
    }
    be->ctx = x;
    x->device = device;
    x->prof = prof;
    fill_table(be);
    int rc = TS_OK;
    st = cudaStreamCreateWithFlags(&x->stream, cudaStreamNonBlocking);
    if (st == cudaSuccess)
        st = cudaEventCreate(&x->epoch);
    if (st != cudaSuccess)
        rc = err_set(err, TS_ENOTSUP, "cuda backend: stream/event creation: %s", cudaGetErrorString(st));
    if (rc == TS_OK)
        rc = cugemm_create(autotune, &x->gemm, err);
    if (rc != TS_OK) {
        cu_destroy(be);
        return rc;
    }
    *out = be;
    return TS_OK;
}
