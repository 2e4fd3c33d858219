/* The CPU backend: host memory, CBLAS (OpenBLAS) GEMMs, the kern.h loops. */
#include "exec/cpu/backend_cpu.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/core/backend.h"
#include "exec/core/moe_route.h"
#include "exec/cpu/kern.h"
#include "exec/cpu/kern_llama.h"
#include "exec/cpu/kern_moe.h"

static float *cpu_alloc(backend *be, size_t n)
{
    (void)be;
    return calloc(n, sizeof(float));
}
static void cpu_free(backend *be, float *p)
{
    (void)be;
    free(p);
}
static void cpu_copy(backend *be, float *dst, const float *src, size_t n)
{
    (void)be;
    if (n)
        memmove(dst, src, n * sizeof(float));
}
static int *cpu_alloc_int(backend *be, size_t n)
{
    (void)be;
    return calloc(n ? n : 1, sizeof(int));
}
static void cpu_free_int(backend *be, int *p)
{
    (void)be;
    free(p);
}
static void cpu_int_to_device(backend *be, int *dst, const int *src, size_t n)
{
    (void)be;
    if (n)
        memcpy(dst, src, n * sizeof(int));
}
static void cpu_int_to_host(backend *be, int *dst, const int *src, size_t n)
{
    (void)be;
    if (n)
        memcpy(dst, src, n * sizeof(int));
}
static void cpu_zero(backend *be, float *p, size_t n)
{
    (void)be;
    if (n)
        memset(p, 0, n * sizeof(float));
}
static void cpu_sync(backend *be)
{
    (void)be;
}
/* ---- MoE routing and dispatch: moe_route.h's steps, kern_moe.h's rows */
static void cpu_moe_topk(backend *be, int *idx, float *wts, const float *logits, size_t N, int E, int k,
                         bool force_balance)
{
    (void)be;
    moe_route_topk(logits, N, E, k, force_balance, idx, wts);
}
static void cpu_moe_keep(backend *be, int *keep, float *wkept, const int *idx, const float *wts, size_t nk, size_t cap,
                         int *order)
{
    (void)be;
    moe_route_keep(idx, wts, nk, cap, keep, wkept, order);
}
static void cpu_moe_counts(backend *be, int *counts, const int *idx, const int *keep, size_t nk, int E)
{
    (void)be;
    moe_route_counts(idx, keep, nk, E, counts);
}
static void cpu_moe_send_order(backend *be, int *send_slot, int *pos, const int *idx, const int *keep, size_t nk, int E)
{
    (void)be;
    moe_route_send_order(idx, keep, nk, E, send_slot, pos);
}
static void cpu_moe_gather(backend *be, float *dst, const float *src, const int *rows, size_t nrows, int div, int C)
{
    (void)be;
    kern_moe_gather(dst, src, rows, nrows, div, C);
}
static void cpu_moe_scatter(backend *be, float *dst, const float *src, const int *rows, size_t nrows, int C)
{
    (void)be;
    kern_moe_scatter(dst, src, rows, nrows, C);
}
static void cpu_moe_combine(backend *be, float *out, const float *y, const float *wts, const int *idx, const int *pos,
                            size_t N, int k, int C)
{
    (void)be;
    kern_moe_combine(out, y, wts, idx, pos, N, k, C);
}
static void cpu_moe_combine_bwd(backend *be, float *dy, float *g, const float *dout, const float *y, const float *wts,
                                const int *send_slot, size_t nsend, int k, int C)
{
    (void)be;
    kern_moe_combine_bwd(dy, g, dout, y, wts, send_slot, nsend, k, C);
}
static void cpu_moe_router_bwd(backend *be, float *dlog, const float *logits, const int *idx, const int *keep,
                               const float *g, size_t N, int E, int k)
{
    (void)be;
    kern_moe_router_bwd(dlog, logits, idx, keep, g, N, E, k);
}

static void cpu_destroy(backend *be)
{
    be_pool_drain(be);
    free(be);
}

static void cpu_gemm(backend *be, bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc)
{
    (void)be;
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda,
                B, ldb, beta, C, ldc);
}

/* One-line wrappers: the kern_* function with the backend argument dropped. */
static void cpu_embed_fwd(backend *be, float *out, const int *tok, const float *wte, const float *wpe, size_t row0,
                          size_t n, int T, int C)
{
    (void)be;
    kern_embed_fwd(out, tok, wte, wpe, row0, n, T, C);
}
static void cpu_embed_bwd(backend *be, float *dwte, float *dwpe, const float *dout, const int *tok, size_t row0,
                          size_t n, int T, int C)
{
    (void)be;
    kern_embed_bwd(dwte, dwpe, dout, tok, row0, n, T, C);
}
static void cpu_ln_fwd(backend *be, float *out, float *mean, float *rstd, const float *inp, const float *w,
                       const float *b, size_t N, int C)
{
    (void)be;
    kern_layernorm_fwd(out, mean, rstd, inp, w, b, N, C);
}
static void cpu_ln_bwd_i(backend *be, float *dinp, const float *dout, const float *inp, const float *w,
                         const float *mean, const float *rstd, size_t N, int C)
{
    (void)be;
    kern_layernorm_bwd_input(dinp, dout, inp, w, mean, rstd, N, C);
}
static void cpu_ln_bwd_w(backend *be, float *dw, float *db, const float *dout, const float *inp, const float *mean,
                         const float *rstd, size_t N, int C)
{
    (void)be;
    kern_layernorm_bwd_weight(dw, db, dout, inp, mean, rstd, N, C);
}
/* Attention core through GEMMs, per (batch, head): scores = q k^T, the
 * scaled causal softmax (kern.h), out = att v; the backward likewise. Same
 * results as kern_attention_* and kern_attention_gqa_* (the reference
 * loops; query head h uses key/value head h / (NH / NKV)) to fp32 rounding, at
 * BLAS speed, and the same op split the simulator costs (two batched GEMMs
 * around a softmax). */
static void cpu_att_gqa_fwd(backend *be, float *out, float *att, const float *qkv, int B, int T, int NH, int NKV,
                            int hs)
{
    (void)be;
    int C = NH * hs, W = (NH + 2 * NKV) * hs, per = NH / NKV;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *row = qkv + (size_t)b * T * W, *q = row + (size_t)h * hs;
            const float *k = row + C + (size_t)(h / per) * hs, *v = k + (size_t)NKV * hs;
            float *a = att + ((size_t)b * NH + h) * T * T;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, q, W, k, W, 0.0f, a, T);
            kern_softmax_causal_fwd(a, T, scale);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, a, T, v, W, 0.0f,
                        out + (size_t)b * T * C + (size_t)h * hs, C);
        }
}
static void cpu_att_gqa_bwd(backend *be, float *dqkv, float *datt, const float *dout, const float *qkv,
                            const float *att, int B, int T, int NH, int NKV, int hs)
{
    (void)be;
    int C = NH * hs, W = (NH + 2 * NKV) * hs, per = NH / NKV;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            size_t qo = (size_t)b * T * W + (size_t)h * hs;
            size_t ko = (size_t)b * T * W + C + (size_t)(h / per) * hs, vo = ko + (size_t)NKV * hs;
            const float *q = qkv + qo, *k = qkv + ko, *v = qkv + vo, *a = att + ((size_t)b * NH + h) * T * T;
            const float *dy = dout + (size_t)b * T * C + (size_t)h * hs;
            float *da = datt + ((size_t)b * NH + h) * T * T;
            /* datt = dy v^T; dv += att^T dy */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, dy, C, v, W, 0.0f, da, T);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, a, T, dy, C, 1.0f, dqkv + vo, W);
            kern_softmax_causal_bwd(da, a, da, T, scale); /* in place, row by row */
            /* dq += ds k; dk += ds^T q */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, da, T, k, W, 1.0f, dqkv + qo, W);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, da, T, q, W, 1.0f, dqkv + ko, W);
        }
}
/* Multi-head attention is grouped-query attention with one head per group:
 * same layout, same GEMMs. */
static void cpu_att_fwd(backend *be, float *out, float *att, const float *qkv, int B, int T, int NH, int hs)
{
    cpu_att_gqa_fwd(be, out, att, qkv, B, T, NH, NH, hs);
}
static void cpu_att_bwd(backend *be, float *dqkv, float *datt, const float *dout, const float *qkv, const float *att,
                        int B, int T, int NH, int hs)
{
    cpu_att_gqa_bwd(be, dqkv, datt, dout, qkv, att, B, T, NH, NH, hs);
}
/* Flash-style attention: cp_attn's tiled recurrence (its loops, in double
 * per query; no GEMMs), over the context-parallel ring. */
static int cpu_att_flash_fwd(backend *be, const cp_ring *ring, float *out, float *lse, const float *qkv, int B, int T,
                             int NH, int NKV, int hs, float *ring_ws, ts_err *err)
{
    (void)be;
    return cp_attn_fwd(ring, out, lse, qkv, B, T, NH, NKV, hs, ring_ws, err);
}
static int cpu_att_flash_bwd(backend *be, const cp_ring *ring, float *dqkv, const float *dout, const float *out,
                             const float *lse, const float *qkv, int B, int T, int NH, int NKV, int hs, float *ring_ws,
                             ts_err *err)
{
    (void)be;
    return cp_attn_bwd(ring, dqkv, dout, out, lse, qkv, B, T, NH, NKV, hs, ring_ws, err);
}
static void cpu_rms_fwd(backend *be, float *out, float *rstd, const float *inp, const float *w, size_t N, int C)
{
    (void)be;
    kern_rmsnorm_fwd(out, rstd, inp, w, N, C);
}
static void cpu_rms_bwd_i(backend *be, float *dinp, const float *dout, const float *inp, const float *w,
                          const float *rstd, size_t N, int C)
{
    (void)be;
    kern_rmsnorm_bwd_input(dinp, dout, inp, w, rstd, N, C);
}
static void cpu_rms_bwd_w(backend *be, float *dw, const float *dout, const float *inp, const float *rstd, size_t N,
                          int C)
{
    (void)be;
    kern_rmsnorm_bwd_weight(dw, dout, inp, rstd, N, C);
}
static void cpu_qkn_fwd(backend *be, float *qkv, float *xin, float *mean, float *rstd, const float *qw, const float *qb,
                        const float *kw, const float *kb, size_t N, int NH, int NKV, int hs)
{
    (void)be;
    kern_qknorm_fwd(qkv, xin, mean, rstd, qw, qb, kw, kb, N, NH, NKV, hs);
}
static void cpu_qkn_bwd_w(backend *be, float *dqw, float *dqb, float *dkw, float *dkb, const float *dqkv,
                          const float *xin, const float *mean, const float *rstd, size_t N, int NH, int NKV, int hs)
{
    (void)be;
    kern_qknorm_bwd_weight(dqw, dqb, dkw, dkb, dqkv, xin, mean, rstd, N, NH, NKV, hs);
}
static void cpu_qkn_bwd_i(backend *be, float *dqkv, const float *xin, const float *mean, const float *rstd,
                          const float *qw, const float *kw, size_t N, int NH, int NKV, int hs)
{
    (void)be;
    kern_qknorm_bwd_input(dqkv, xin, mean, rstd, qw, kw, N, NH, NKV, hs);
}
static void cpu_swiglu_fwd(backend *be, float *out, const float *inp, size_t N, int F)
{
    (void)be;
    kern_swiglu_fwd(out, inp, N, F);
}
static void cpu_swiglu_bwd(backend *be, float *dinp, const float *inp, const float *dout, size_t N, int F)
{
    (void)be;
    kern_swiglu_bwd(dinp, inp, dout, N, F);
}
static void cpu_rope_fwd(backend *be, float *qkv, size_t N, int T, int NH, int NKV, int hs, float base)
{
    (void)be;
    kern_rope_fwd(qkv, N, T, NH, NKV, hs, base);
}
static void cpu_rope_at_fwd(backend *be, float *qkv, size_t N, int pos0, int NH, int NKV, int hs, float base)
{
    (void)be;
    kern_rope_at_fwd(qkv, N, pos0, NH, NKV, hs, base);
}
static void cpu_rope_at_bwd(backend *be, float *dqkv, size_t N, int pos0, int NH, int NKV, int hs, float base)
{
    (void)be;
    kern_rope_at_bwd(dqkv, N, pos0, NH, NKV, hs, base);
}
static void cpu_rope_bwd(backend *be, float *dqkv, size_t N, int T, int NH, int NKV, int hs, float base)
{
    (void)be;
    kern_rope_bwd(dqkv, N, T, NH, NKV, hs, base);
}
static void cpu_gelu_fwd(backend *be, float *out, const float *inp, size_t n)
{
    (void)be;
    kern_gelu_fwd(out, inp, n);
}
static void cpu_gelu_bwd(backend *be, float *dinp, const float *inp, const float *dout, size_t n)
{
    (void)be;
    kern_gelu_bwd(dinp, inp, dout, n);
}
static void cpu_bias_fwd(backend *be, float *out, const float *bias, size_t N, int OC)
{
    (void)be;
    kern_bias_fwd(out, bias, N, OC);
}
static void cpu_bias_bwd(backend *be, float *db, const float *dout, size_t N, int OC)
{
    (void)be;
    kern_bias_bwd(db, dout, N, OC);
}
static void cpu_bias_res(backend *be, float *out, const float *a, const float *b, const float *bias, size_t N, int OC)
{
    (void)be;
    kern_bias_residual_fwd(out, a, b, bias, N, OC);
}
static void cpu_add(backend *be, float *y, const float *x, size_t n)
{
    (void)be;
    kern_add(y, x, n);
}
static void cpu_ce_fwd(backend *be, float *losses, float *probs, const float *logits, const int *targets, size_t N,
                       int V)
{
    (void)be;
    kern_crossentropy_fwd(losses, probs, logits, targets, N, V);
}
static void cpu_ce_bwd(backend *be, float *dlogits, const float *probs, const int *targets, size_t N, int V,
                       float scale)
{
    (void)be;
    kern_crossentropy_bwd(dlogits, probs, targets, N, V, scale);
}
static void cpu_embed_pos_fwd(backend *be, float *out, const int *tok, const float *wte, const float *wpe, int B, int n,
                              int pos0, int C)
{
    (void)be;
    kern_embed_pos_fwd(out, tok, wte, wpe, B, n, pos0, C);
}
static void cpu_kv_append(backend *be, float *kc, float *vc, const float *qkv, int B, int n, int pos0, int Tmax, int NH,
                          int hs)
{
    (void)be;
    kern_kv_append(kc, vc, qkv, B, n, pos0, Tmax, NH, hs);
}
static void cpu_att_kv_fwd(backend *be, float *out, float *att, const float *qkv, const float *kc, const float *vc,
                           int B, int n, int pos0, int Tmax, int NH, int hs)
{
    (void)be;
    kern_attention_kv_fwd(out, att, qkv, kc, vc, B, n, pos0, Tmax, NH, hs);
}
static void cpu_adam(backend *be, float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2,
                     float eps, float wd, int t)
{
    (void)be;
    kern_adam(p, g, m, v, n, lr, b1, b2, eps, wd, t);
}

int backend_cpu_create(int threads, backend **out, ts_err *err)
{
    *out = NULL;
    backend *be = calloc(1, sizeof *be);
    if (!be)
        return err_set(err, TS_ENOMEM, "cpu backend: out of memory");
    if (threads > 0)
        openblas_set_num_threads(threads);
    be->name = "cpu";
    be->alloc = cpu_alloc;
    be->free = cpu_free;
    be->to_device = cpu_copy;
    be->to_host = cpu_copy;
    be->alloc_int = cpu_alloc_int;
    be->free_int = cpu_free_int;
    be->int_to_device = cpu_int_to_device;
    be->int_to_host = cpu_int_to_host;
    be->zero = cpu_zero;
    be->copy = cpu_copy;
    be->sync = cpu_sync;
    be->gemm = cpu_gemm;
    be->embed_fwd = cpu_embed_fwd;
    be->embed_bwd = cpu_embed_bwd;
    be->layernorm_fwd = cpu_ln_fwd;
    be->layernorm_bwd_input = cpu_ln_bwd_i;
    be->layernorm_bwd_weight = cpu_ln_bwd_w;
    be->attention_fwd = cpu_att_fwd;
    be->attention_bwd = cpu_att_bwd;
    be->gelu_fwd = cpu_gelu_fwd;
    be->gelu_bwd = cpu_gelu_bwd;
    be->bias_fwd = cpu_bias_fwd;
    be->bias_bwd = cpu_bias_bwd;
    be->bias_residual_fwd = cpu_bias_res;
    be->add = cpu_add;
    be->crossentropy_fwd = cpu_ce_fwd;
    be->crossentropy_bwd = cpu_ce_bwd;
    be->adam = cpu_adam;
    be->embed_pos_fwd = cpu_embed_pos_fwd;
    be->kv_append = cpu_kv_append;
    be->attention_kv_fwd = cpu_att_kv_fwd;
    be->rmsnorm_fwd = cpu_rms_fwd;
    be->rmsnorm_bwd_input = cpu_rms_bwd_i;
    be->rmsnorm_bwd_weight = cpu_rms_bwd_w;
    be->qknorm_fwd = cpu_qkn_fwd;
    be->qknorm_bwd_weight = cpu_qkn_bwd_w;
    be->qknorm_bwd_input = cpu_qkn_bwd_i;
    be->swiglu_fwd = cpu_swiglu_fwd;
    be->swiglu_bwd = cpu_swiglu_bwd;
    be->rope_fwd = cpu_rope_fwd;
    be->rope_bwd = cpu_rope_bwd;
    be->rope_at_fwd = cpu_rope_at_fwd;
    be->rope_at_bwd = cpu_rope_at_bwd;
    be->attention_gqa_fwd = cpu_att_gqa_fwd;
    be->attention_gqa_bwd = cpu_att_gqa_bwd;
    be->attention_flash_fwd = cpu_att_flash_fwd;
    be->attention_flash_bwd = cpu_att_flash_bwd;
    be->moe_topk = cpu_moe_topk;
    be->moe_keep = cpu_moe_keep;
    be->moe_counts = cpu_moe_counts;
    be->moe_send_order = cpu_moe_send_order;
    be->moe_gather = cpu_moe_gather;
    be->moe_scatter = cpu_moe_scatter;
    be->moe_combine = cpu_moe_combine;
    be->moe_combine_bwd = cpu_moe_combine_bwd;
    be->moe_router_bwd = cpu_moe_router_bwd;
    be->destroy = cpu_destroy;
    *out = be;
    return TS_OK;
}
