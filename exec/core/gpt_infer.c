/* gpt_infer — prefill and decode steps with a KV cache (contract in
 * gpt_infer.h). The layer is gpt_pass.c's layer_fwd on the step's new rows,
 * with attention over the cache instead of over the micro-batch. */
#include "exec/core/gpt_infer.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "exec/core/gpt_impl.h"
#include "sim/util/ckd.h"

struct gpt_kv {
    int max_new;      /* tokens per sequence a step may carry */
    int len;          /* positions cached */
    size_t per_layer; /* floats of K (and of V) per layer: B * NHl * T * hs */
    float *cache;     /* [layers][K | V][B, NHl, T, hs]; XMEM_ACTS */
    size_t cache_n;   /* floats */
    float *scratch;   /* the step's buffers below; XMEM_BUFFERS */
    size_t scratch_n;
    float *x, *ln, *mean, *rstd, *qkv, *atty, *part, *fch, *fchg, *att, *last, *lnf, *logits, *lnf_stats;
    int *tokens; /* [B * max_new], backend int memory */
};

size_t gpt_kv_bytes_per_token(const gpt_dims *d)
{
    return 2u * (size_t)d->layers * (size_t)d->hidden * sizeof(float); /* heads x head_dim = hidden */
}

void gpt_kv_free(gpt_stage *st, gpt_kv *kv)
{
    if (!kv)
        return;
    be_free(st->be, kv->cache, kv->cache_n, XMEM_ACTS);
    be_free(st->be, kv->scratch, kv->scratch_n, XMEM_BUFFERS);
    if (kv->tokens)
        st->be->free_int(st->be, kv->tokens);
    free(kv);
}

int gpt_kv_create(gpt_stage *st, int max_new, gpt_kv **out, ts_err *err)
{
    *out = NULL;
    if (!st->embed || !st->head || st->l0 != 0 || st->nl != st->d.layers)
        return err_set(err, TS_ENOTSUP,
                       "inference: the stage holds layers [%d, %d) of %d%s%s; pipeline-parallel inference is not "
                       "implemented (give --pipeline-model-parallel-size 1)",
                       st->l0, st->l0 + st->nl, st->d.layers, st->embed ? "" : ", no embedding",
                       st->head ? "" : ", no output layer");
    if (gpt_dims_llama(&st->d))
        return err_set(
            err, TS_ENOTSUP,
            "inference: the KV cache runs the GPT layers only (no RMSNorm, SwiGLU, --disable-bias-linear, q/k norms, "
            "grouped-query attention or rope); train such a model without --inference");
    if (st->d.num_experts > 0)
        return err_set(err, TS_ENOTSUP,
                       "inference: --num-experts %d: the KV cache runs dense layers only (train without --inference)",
                       st->d.num_experts);
    if (max_new < 1 || max_new > st->T)
        return err_set(err, TS_EINVAL, "inference: %d tokens per step: must be in [1, --seq-length %d]", max_new,
                       st->T);
    gpt_kv *kv = calloc(1, sizeof *kv);
    if (!kv)
        return err_set(err, TS_ENOMEM, "inference: out of memory");
    kv->max_new = max_new;
    int64_t per = 0, total = 0;
    if (ckd_mul_i64(&per, (int64_t)st->B * st->NHl, (int64_t)st->T * st->hs) ||
        ckd_mul_i64(&total, per, 2 * (int64_t)st->nl) || total > CKD_MAX_BYTES / 4) {
        free(kv);
        return err_set(err, TS_EINVAL,
                       "inference: a KV cache of %d sequences x %d positions x %d layers overflows the size type",
                       st->B, st->T, st->nl);
    }
    kv->per_layer = (size_t)per;
    kv->cache_n = (size_t)total;
    size_t N = (size_t)st->B * max_new, C = st->C, B = st->B;
    size_t natt = (size_t)st->B * st->NHl * max_new * st->T;
    kv->scratch_n =
        N * C * 3 + 2 * N + N * 3 * st->Cl + N * st->Cl + 2 * N * st->Fl + natt + 2 * B * C + 2 * B + B * (size_t)st->V;
    int rc = be_alloc(st->be, kv->cache_n, XMEM_ACTS, &kv->cache, err);
    if (!rc)
        rc = be_alloc(st->be, kv->scratch_n, XMEM_BUFFERS, &kv->scratch, err);
    if (!rc && !(kv->tokens = st->be->alloc_int(st->be, N)))
        rc = err_set(err, TS_ENOMEM, "inference: out of memory for %zu token ids", N);
    if (rc) {
        gpt_kv_free(st, kv);
        return rc;
    }
    /* GEMM operands first (their offsets are multiples of the feature
     * widths, as the GPU GEMMs' alignment wants), small vectors last */
    float *p = kv->scratch;
    kv->x = p, p += N * C;
    kv->ln = p, p += N * C;
    kv->part = p, p += N * C;
    kv->qkv = p, p += N * 3 * st->Cl;
    kv->atty = p, p += N * st->Cl;
    kv->fch = p, p += N * st->Fl;
    kv->fchg = p, p += N * st->Fl;
    kv->last = p, p += B * C;
    kv->lnf = p, p += B * C;
    kv->logits = p, p += B * (size_t)st->V;
    kv->att = p, p += natt;
    kv->mean = p, p += N;
    kv->rstd = p, p += N;
    kv->lnf_stats = p; /* the final LayerNorm's mean [B] and rstd [B] */
    *out = kv;
    return TS_OK;
}

void gpt_kv_reset(gpt_kv *kv)
{
    kv->len = 0;
}

int gpt_kv_len(const gpt_kv *kv)
{
    return kv->len;
}

size_t gpt_kv_bytes(const gpt_kv *kv)
{
    return kv->cache_n * sizeof(float);
}

/* Megatron "g" forward without sequence parallelism: sum the row-parallel
 * partial outputs over the tensor group. */
static int tp_sum(gpt_stage *st, float *part, size_t n, int layer, ts_err *err)
{
    int rc = TS_OK;
    if (st->t > 1)
        OP(st, "tp_allreduce", layer, rc = st->cm->all_reduce(st->cm, COMM_TP, part, n, err));
    return rc;
}

/* out[N,OC] = inp[N,K] W[OC,K]^T (+ b) */
static void linear(gpt_stage *st, float *out, const float *inp, const float *W, const float *b, size_t N, int OC, int K)
{
    backend *be = st->be;
    be->gemm(be, false, true, (int)N, OC, K, 1.0f, inp, K, W, K, 0.0f, out, OC);
    if (b)
        be->bias_fwd(be, out, b, N, OC);
}

/* One layer on the step's N = B*n rows of kv->x (updated in place). */
static int layer_step(gpt_stage *st, gpt_kv *kv, int li, int n, ts_err *err)
{
    backend *be = st->be;
    int l = st->l0 + li, C = st->C, Cl = st->Cl, Fl = st->Fl, pos0 = kv->len;
    size_t N = (size_t)st->B * n;
    float *kc = kv->cache + (size_t)li * 2 * kv->per_layer, *vc = kc + kv->per_layer;
    int rc;

    OP(st, "ln1", l,
       be->layernorm_fwd(be, kv->ln, kv->mean, kv->rstd, kv->x, LW(st, li, GP_LN1W), LW(st, li, GP_LN1B), N, C));
    OP(st, "qkv", l, linear(st, kv->qkv, kv->ln, LW(st, li, GP_QKVW), LW(st, li, GP_QKVB), N, 3 * Cl, C));
    OP(st, "kv_append", l, be->kv_append(be, kc, vc, kv->qkv, st->B, n, pos0, st->T, st->NHl, st->hs));
    OP(st, "attn", l,
       be->attention_kv_fwd(be, kv->atty, kv->att, kv->qkv, kc, vc, st->B, n, pos0, st->T, st->NHl, st->hs));
    OP(st, "proj", l, linear(st, kv->part, kv->atty, LW(st, li, GP_PROJW), NULL, N, C, Cl));
    if ((rc = tp_sum(st, kv->part, N * C, l, err)))
        return rc;
    OP(st, "residual1", l, be->bias_residual_fwd(be, kv->x, kv->x, kv->part, LW(st, li, GP_PROJB), N, C));
    OP(st, "ln2", l,
       be->layernorm_fwd(be, kv->ln, kv->mean, kv->rstd, kv->x, LW(st, li, GP_LN2W), LW(st, li, GP_LN2B), N, C));
    OP(st, "fc1", l, linear(st, kv->fch, kv->ln, LW(st, li, GP_FCW), LW(st, li, GP_FCB), N, Fl, C));
    OP(st, "gelu", l, be->gelu_fwd(be, kv->fchg, kv->fch, N * Fl));
    OP(st, "fc2", l, linear(st, kv->part, kv->fchg, LW(st, li, GP_FCPROJW), NULL, N, C, Fl));
    if ((rc = tp_sum(st, kv->part, N * C, l, err)))
        return rc;
    OP(st, "residual2", l, be->bias_residual_fwd(be, kv->x, kv->x, kv->part, LW(st, li, GP_FCPROJB), N, C));
    return TS_OK;
}

int gpt_infer_step(gpt_stage *st, gpt_kv *kv, const int *tokens, int n, float *logits, ts_err *err)
{
    backend *be = st->be;
    if (n < 1 || n > kv->max_new)
        return err_set(err, TS_EINVAL, "inference step: %d new tokens per sequence, the cache takes 1 to %d", n,
                       kv->max_new);
    if (kv->len + n > st->T)
        return err_set(err, TS_EINVAL,
                       "inference step: %d cached + %d new positions exceed --seq-length %d (the model's learned "
                       "positions)",
                       kv->len, n, st->T);
    size_t N = (size_t)st->B * n, C = st->C;
    for (size_t i = 0; i < N; i++)
        if (tokens[i] < 0 || tokens[i] >= st->V)
            return err_set(err, TS_EINVAL, "inference step: token %d (row %zu) outside the vocabulary [0, %d)",
                           tokens[i], i, st->V);
    be->int_to_device(be, kv->tokens, tokens, N);
    OP(st, "embed", -1, be->embed_pos_fwd(be, kv->x, kv->tokens, st->wte, st->wpe, st->B, n, kv->len, st->C));
    for (int li = 0; li < st->nl; li++) {
        int rc = layer_step(st, kv, li, n, err);
        if (rc)
            return rc;
    }
    /* the head on each sequence's last new row */
    for (int b = 0; b < st->B; b++)
        be->copy(be, kv->last + (size_t)b * C, kv->x + ((size_t)b * n + (size_t)n - 1) * C, C);
    float *lnfm = kv->lnf_stats, *lnfr = lnfm + st->B;
    OP(st, "lnf", -1, be->layernorm_fwd(be, kv->lnf, lnfm, lnfr, kv->last, st->lnfw, st->lnfb, st->B, st->C));
    OP(st, "logits", -1, linear(st, kv->logits, kv->lnf, st->wout, NULL, st->B, st->V, st->C));
    kv->len += n;
    if (logits)
        be->to_host(be, logits, kv->logits, (size_t)st->B * st->V);
    return TS_OK;
}

void gpt_argmax(const float *logits, int B, int V, int *next)
{
    for (int b = 0; b < B; b++) {
        const float *l = logits + (size_t)b * V;
        int best = 0;
        for (int v = 1; v < V; v++)
            if (l[v] > l[best])
                best = v;
        next[b] = best;
    }
}

int gpt_forward_probs(gpt_stage *st, gpt_acts *a, float *probs, ts_err *err)
{
    if (!st->head)
        return err_set(err, TS_ESTATE, "gpt_forward_probs: the stage has no output layer");
    st->be->to_host(st->be, probs, a->probs, st->N * (size_t)st->V);
    return TS_OK;
}

double gpt_infer_op_bytes(const gpt_stage *st, const char *name, int n, int kv_len)
{
    double N = (double)st->B * n, C = st->C, Cl = st->Cl, Fl = st->Fl, B = st->B, V = st->V, f = sizeof(float);
    double el;
    if (!strcmp(name, "embed"))
        el = 3 * N * C; /* token row + position row read, output written */
    else if (!strcmp(name, "ln1") || !strcmp(name, "ln2"))
        el = 2 * N * C + 2 * C + 2 * N;
    else if (!strcmp(name, "qkv"))
        el = 3 * Cl * C + 3 * Cl + N * C + N * 3 * Cl;
    else if (!strcmp(name, "kv_append"))
        el = 4 * N * Cl;
    else if (!strcmp(name, "attn")) /* q, the cached K and V, the output */
        el = N * Cl + 2 * B * Cl * kv_len + N * Cl;
    else if (!strcmp(name, "proj"))
        el = Cl * C + N * Cl + N * C;
    else if (!strcmp(name, "residual1") || !strcmp(name, "residual2"))
        el = 3 * N * C + C;
    else if (!strcmp(name, "fc1"))
        el = Fl * C + Fl + N * C + N * Fl;
    else if (!strcmp(name, "gelu"))
        el = 2 * N * Fl;
    else if (!strcmp(name, "fc2"))
        el = C * Fl + N * Fl + N * C;
    else if (!strcmp(name, "lnf"))
        el = 2 * B * C + 2 * C + 2 * B;
    else if (!strcmp(name, "logits"))
        el = V * C + B * C + B * V;
    else
        el = 0;
    return el * f;
}
