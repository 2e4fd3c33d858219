/* gpt_pass — forward, input-gradient and weight-gradient passes of a stage,
 * with Megatron's tensor-parallel collectives at the column/row splits. */
#include <stdlib.h>
#include <string.h>

#include "exec/core/cp_split.h"
#include "exec/core/gpt_impl.h"

#define CK(expr)                                                                                                       \
    do {                                                                                                               \
        int rc_ = (expr);                                                                                              \
        if (rc_)                                                                                                       \
            return rc_;                                                                                                \
    } while (0)

/* out[N,OC] = inp[N,K] W[OC,K]^T (+ b) */
static void linear_fwd(gpt_stage *st, float *out, const float *inp, const float *W, const float *b, size_t N, int OC,
                       int K)
{
    backend *be = st->be;
    be->gemm(be, false, true, (int)N, OC, K, 1.0f, inp, K, W, K, 0.0f, out, OC);
    if (b)
        be->bias_fwd(be, out, b, N, OC);
}
/* dinp[N,K] = dout[N,OC] W[OC,K] (overwrites) */
static void linear_bwd_input(gpt_stage *st, float *dinp, const float *dout, const float *W, size_t N, int OC, int K)
{
    st->be->gemm(st->be, false, false, (int)N, K, OC, 1.0f, dout, OC, W, K, 0.0f, dinp, K);
}
/* dW[OC,K] += dout^T inp; db[OC] += sum dout */
static void linear_bwd_weight(gpt_stage *st, float *dW, float *db, const float *dout, const float *inp, size_t N,
                              int OC, int K)
{
    backend *be = st->be;
    be->gemm(be, true, false, OC, K, (int)N, 1.0f, dout, OC, inp, K, 1.0f, dW, K);
    if (db)
        be->bias_bwd(be, db, dout, N, OC);
}

/* Megatron "f" forward with sp: all-gather a [Ns, C] shard into [N, C]. */
static int tp_gather(gpt_stage *st, float *full, const float *shard, int layer, ts_err *err)
{
    int rc;
    OP(st, "tp_allgather", layer, rc = st->cm->all_gather(st->cm, COMM_TP, full, shard, st->Ns * (size_t)st->C, err));
    return rc;
}
/* Megatron "g" forward: sum the [N, C] partial outputs of a row-parallel
 * GEMM over the tensor group; *red points at the [Ns, C] result. */
static int tp_reduce(gpt_stage *st, float *partial, float **red, int layer, ts_err *err)
{
    int rc = TS_OK;
    size_t nC = st->Ns * (size_t)st->C;
    *red = partial;
    if (st->t == 1)
        return TS_OK;
    if (st->sp) {
        OP(st, "tp_reducescatter", layer, rc = st->cm->reduce_scatter(st->cm, COMM_TP, st->s_red, partial, nC, err));
        *red = st->s_red;
    } else {
        OP(st, "tp_allreduce", layer, rc = st->cm->all_reduce(st->cm, COMM_TP, partial, st->N * (size_t)st->C, err));
    }
    return rc;
}
/* Megatron "f" backward: dout[N, Fin] W[Fin, C] summed over the group into
 * dln ([Ns, C] with sp, else [N, C]). */
static int tp_bwd_reduce(gpt_stage *st, float *dln, const float *dout, const float *W, int Fin, const char *name,
                         int layer, ts_err *err)
{
    int rc = TS_OK;
    if (st->sp) {
        OP(st, name, layer, linear_bwd_input(st, st->s_part, dout, W, st->N, Fin, st->C));
        OP(st, "tp_reducescatter", layer,
           rc = st->cm->reduce_scatter(st->cm, COMM_TP, dln, st->s_part, st->Ns * (size_t)st->C, err));
    } else {
        OP(st, name, layer, linear_bwd_input(st, dln, dout, W, st->N, Fin, st->C));
        if (st->t > 1)
            OP(st, "tp_allreduce", layer, rc = st->cm->all_reduce(st->cm, COMM_TP, dln, st->N * (size_t)st->C, err));
    }
    return rc;
}
/* Megatron "g" backward: the [N, C] gradient of a row-parallel output from
 * the residual-stream gradient ([Ns, C]). */
static int tp_bwd_gather(gpt_stage *st, float *full, const float *dres, int layer, ts_err *err)
{
    if (st->sp)
        return tp_gather(st, full, dres, layer, err);
    st->be->copy(st->be, full, dres, st->N * (size_t)st->C);
    return TS_OK;
}

/* The layer's norm (LayerNorm, or RMSNorm: no mean, no bias): out, and
 * mean (LayerNorm only) and rstd saved. */
static void norm_fwd(gpt_stage *st, float *out, float *mean, float *rstd, const float *inp, const float *w,
                     const float *b, size_t N)
{
    backend *be = st->be;
    if (st->d.rmsnorm)
        be->rmsnorm_fwd(be, out, rstd, inp, w, N, st->C);
    else
        be->layernorm_fwd(be, out, mean, rstd, inp, w, b, N, st->C);
}
static void norm_bwd_input(gpt_stage *st, float *dinp, const float *dout, const float *inp, const float *w,
                           const float *mean, const float *rstd, size_t N)
{
    backend *be = st->be;
    if (st->d.rmsnorm)
        be->rmsnorm_bwd_input(be, dinp, dout, inp, w, rstd, N, st->C);
    else
        be->layernorm_bwd_input(be, dinp, dout, inp, w, mean, rstd, N, st->C);
}
static void norm_bwd_weight(gpt_stage *st, float *dw, float *db, const float *dout, const float *inp, const float *mean,
                            const float *rstd, size_t N)
{
    backend *be = st->be;
    if (st->d.rmsnorm)
        be->rmsnorm_bwd_weight(be, dw, dout, inp, rstd, N, st->C);
    else
        be->layernorm_bwd_weight(be, dw, db, dout, inp, mean, rstd, N, st->C);
}
/* The MLP activation: GELU on [N, Fl], or SwiGLU from [N, 2 Fl]. */
static void act_fwd(gpt_stage *st, float *out, const float *inp)
{
    backend *be = st->be;
    if (st->d.swiglu)
        be->swiglu_fwd(be, out, inp, st->N, st->Fl);
    else
        be->gelu_fwd(be, out, inp, st->N * st->Fl);
}
static void act_bwd(gpt_stage *st, float *dinp, const float *inp, const float *dout)
{
    backend *be = st->be;
    if (st->d.swiglu)
        be->swiglu_bwd(be, dinp, inp, dout, st->N, st->Fl);
    else
        be->gelu_bwd(be, dinp, inp, dout, st->N * st->Fl);
}
/* Attention core: multi-head, or grouped-query with NKVl key/value heads.
 * Unfused: att holds the scores. Flash: att holds the log-sum-exp, over the
 * context-parallel ring (one rank without context parallelism). */
static int attn_fwd(gpt_stage *st, float *out, float *att, const float *qkv, ts_err *err)
{
    backend *be = st->be;
    if (st->d.flash) { /* the ring's buffers live during the call (activations, as the simulator's) */
        size_t n = cp_attn_ring_floats(st->B, st->T, st->cp, st->NKVl, st->hs, false);
        float *ws = NULL;
        int rc = be_alloc(be, n, XMEM_ACTS, &ws, err);
        if (!rc)
            rc =
                be->attention_flash_fwd(be, &st->ring, out, att, qkv, st->B, st->T, st->NHl, st->NKVl, st->hs, ws, err);
        be_free(be, ws, n, XMEM_ACTS);
        return rc;
    }
    if (st->NKVl == st->NHl)
        be->attention_fwd(be, out, att, qkv, st->B, st->T, st->NHl, st->hs);
    else
        be->attention_gqa_fwd(be, out, att, qkv, st->B, st->T, st->NHl, st->NKVl, st->hs);
    return TS_OK;
}
/* out: the forward's output (flash's backward reads it). */
static int attn_bwd(gpt_stage *st, float *dqkv, const float *dout, const float *out, const float *qkv, const float *att,
                    ts_err *err)
{
    backend *be = st->be;
    if (st->d.flash) {
        size_t n = cp_attn_ring_floats(st->B, st->T, st->cp, st->NKVl, st->hs, true);
        float *ws = NULL;
        int rc = be_alloc(be, n, XMEM_ACTS, &ws, err);
        if (!rc)
            rc = be->attention_flash_bwd(be, &st->ring, dqkv, dout, out, att, qkv, st->B, st->T, st->NHl, st->NKVl,
                                         st->hs, ws, err);
        be_free(be, ws, n, XMEM_ACTS);
        return rc;
    }
    if (st->NKVl == st->NHl)
        be->attention_bwd(be, dqkv, st->s_datt, dout, qkv, att, st->B, st->T, st->NHl, st->hs);
    else
        be->attention_gqa_bwd(be, dqkv, st->s_datt, dout, qkv, att, st->B, st->T, st->NHl, st->NKVl, st->hs);
    return TS_OK;
}

/* The global row b*T + position of local row j: with context parallelism
 * the rank's rows are its two chunks of every sequence (cp_split.h). */
static size_t global_row(const gpt_stage *st, size_t j)
{
    if (st->cp == 1)
        return j;
    size_t b = j / (size_t)st->Tl;
    return b * (size_t)st->T + (size_t)cp_global_pos(st->T, st->cp, st->cr, (int)(j % (size_t)st->Tl));
}

/* Rows of the run of local rows starting at j (< n) from lo: consecutive
 * global rows within one sequence (all n without context parallelism). */
static size_t run_len(const gpt_stage *st, size_t lo, size_t j, size_t n, size_t g0)
{
    size_t k = 1;
    while (j + k < n && global_row(st, lo + j + k) == g0 + k && (g0 + k) % (size_t)st->T)
        k++;
    return k;
}

/* Rope, forward (on qkv) or backward (on its gradient), of the N local rows:
 * one call over whole sequences without context parallelism, else one per
 * run of consecutive positions. */
static void rope_rows(gpt_stage *st, float *x, bool bwd)
{
    backend *be = st->be;
    if (st->cp == 1) {
        if (bwd)
            be->rope_bwd(be, x, st->N, st->T, st->NHl, st->NKVl, st->hs, GPT_ROPE_BASE);
        else
            be->rope_fwd(be, x, st->N, st->T, st->NHl, st->NKVl, st->hs, GPT_ROPE_BASE);
        return;
    }
    for (size_t j = 0, k; j < st->N; j += k) {
        size_t g0 = global_row(st, j);
        k = run_len(st, 0, j, st->N, g0);
        int pos0 = (int)(g0 % (size_t)st->T);
        float *r = x + j * (size_t)st->Wl;
        if (bwd)
            be->rope_at_bwd(be, r, k, pos0, st->NHl, st->NKVl, st->hs, GPT_ROPE_BASE);
        else
            be->rope_at_fwd(be, r, k, pos0, st->NHl, st->NKVl, st->hs, GPT_ROPE_BASE);
    }
}

/* Embedding forward of local rows [lo, lo + n) into x (bwd false), or its
 * weight gradient from x (bwd true), in runs of consecutive global rows
 * (one run without context parallelism). tokens: the whole sequences. */
static void embed_rows(gpt_stage *st, float *x, const int *tokens, size_t lo, size_t n, bool bwd)
{
    backend *be = st->be;
    for (size_t j = 0, k; j < n; j += k) {
        size_t g0 = global_row(st, lo + j);
        k = st->cp == 1 ? n - j : run_len(st, lo, j, n, g0);
        if (bwd)
            be->embed_bwd(be, st->gwte, st->gwpe, x + j * (size_t)st->C, tokens, g0, k, st->T, st->C);
        else
            be->embed_fwd(be, x + j * (size_t)st->C, tokens, st->wte, st->wpe, g0, k, st->T, st->C);
    }
}

/* The exchange of the stage's MoE layers: the comm's, or one rank's. */
static moe_xchg moe_xc_of(const gpt_stage *st)
{
    return st->cm->moe_xc ? *st->cm->moe_xc : moe_xchg_local(st->be);
}

/* A MoE layer's MLP: out = res2 + moe(ln2) on this rank's Ns rows (the
 * tokens stay sequence-parallel; the experts are not tensor-split). */
static int moe_mlp_fwd(gpt_stage *st, gpt_acts *a, int li, float *out, ts_err *err)
{
    gpt_lacts *A = &a->L[li];
    int l = st->l0 + li;
    moe_xchg xc = moe_xc_of(st);
    moe_saved_free(A->moe); /* (a forward rerun after a failure) */
    A->moe = NULL;
    int rc;
    OP(st, "moe", l, rc = moe_forward(st->moe[li].L, &xc, A->ln2, st->Ns, st->s_part, &A->moe, err));
    if (rc)
        return rc;
    if (st->d.recompute_moe) { /* checkpointed: the backward reruns it from ln2 */
        moe_saved_free(A->moe);
        A->moe = NULL;
    }
    OP(st, "residual2", l, st->be->bias_residual_fwd(st->be, out, A->res2, st->s_part, NULL, st->Ns, st->C));
    return TS_OK;
}

static int layer_fwd(gpt_stage *st, gpt_acts *a, int li, const float *x, float *out, ts_err *err)
{
    backend *be = st->be;
    gpt_lacts *A = &a->L[li];
    int l = st->l0 + li, C = st->C, Cl = st->Cl, Fl = st->Fl;
    size_t N = st->N, Ns = st->Ns;
    float *red;

    OP(st, "ln1", l, norm_fwd(st, A->ln1, A->ln1m, A->ln1r, x, LW(st, li, GP_LN1W), LW(st, li, GP_LN1B), Ns));
    const float *ln1g = A->ln1;
    if (st->sp) {
        CK(tp_gather(st, A->ln1g, A->ln1, l, err));
        ln1g = A->ln1g;
    }
    OP(st, "qkv", l, linear_fwd(st, A->qkv, ln1g, LW(st, li, GP_QKVW), LW(st, li, GP_QKVB), N, st->Wl, C));
    if (st->d.qk_norm)
        OP(st, "qk_norm", l,
           be->qknorm_fwd(be, A->qkv, A->qkn, st->d.rmsnorm ? NULL : A->qknm, A->qknr, LW(st, li, GP_QLNW),
                          LW(st, li, GP_QLNB), LW(st, li, GP_KLNW), LW(st, li, GP_KLNB), N, st->NHl, st->NKVl, st->hs));
    if (st->d.rope)
        OP(st, "rope", l, rope_rows(st, A->qkv, false));
    int rc;
    OP(st, "attn", l, rc = attn_fwd(st, A->atty, A->att, A->qkv, err));
    CK(rc);
    OP(st, "proj", l, linear_fwd(st, st->s_part, A->atty, LW(st, li, GP_PROJW), NULL, N, C, Cl));
    CK(tp_reduce(st, st->s_part, &red, l, err));
    OP(st, "residual1", l, be->bias_residual_fwd(be, A->res2, x, red, LW(st, li, GP_PROJB), Ns, C));

    OP(st, "ln2", l, norm_fwd(st, A->ln2, A->ln2m, A->ln2r, A->res2, LW(st, li, GP_LN2W), LW(st, li, GP_LN2B), Ns));
    if (st->moe[li].L)
        return moe_mlp_fwd(st, a, li, out, err);
    const float *ln2g = A->ln2;
    if (st->sp) {
        CK(tp_gather(st, A->ln2g, A->ln2, l, err));
        ln2g = A->ln2g;
    }
    OP(st, "fc1", l, linear_fwd(st, A->fch, ln2g, LW(st, li, GP_FCW), LW(st, li, GP_FCB), N, st->Fu, C));
    OP(st, st->d.swiglu ? "swiglu" : "gelu", l, act_fwd(st, A->fchg, A->fch));
    OP(st, "fc2", l, linear_fwd(st, st->s_part, A->fchg, LW(st, li, GP_FCPROJW), NULL, N, C, Fl));
    CK(tp_reduce(st, st->s_part, &red, l, err));
    OP(st, "residual2", l, be->bias_residual_fwd(be, out, A->res2, red, LW(st, li, GP_FCPROJB), Ns, C));
    return TS_OK;
}

static const float *layer_input(const gpt_acts *a, int li)
{
    return li == 0 ? a->in0 : a->L[li - 1].res3;
}

int gpt_forward(gpt_stage *st, gpt_acts *a, const int *tokens, const int *targets, const float *x_in, float *y,
                double *loss_sum, ts_err *err)
{
    backend *be = st->be;
    size_t N = st->N, Ns = st->Ns, C = st->C;
    if (st->embed) {
        if (!tokens)
            return err_set(err, TS_ESTATE, "gpt_forward: first stage needs tokens");
        OP(st, GPT_OP_DATA, -1, be->int_to_device(be, a->tokens, tokens, (size_t)st->B * st->T));
        size_t row0 = st->sp ? (size_t)st->tr * Ns : 0;
        OP(st, "embed", -1, embed_rows(st, a->in0, a->tokens, row0, Ns, false));
    } else {
        if (!x_in)
            return err_set(err, TS_ESTATE, "gpt_forward: stage %d needs an input tensor", st->l0);
        be->copy(be, a->in0, x_in, Ns * C);
    }
    if (st->head) {
        if (!targets)
            return err_set(err, TS_ESTATE, "gpt_forward: last stage needs targets");
        if (st->cp == 1) {
            OP(st, GPT_OP_DATA, -1, be->int_to_device(be, a->targets, targets, N));
        } else { /* this rank's rows */
            int *mine = malloc(N * sizeof *mine);
            if (!mine)
                return err_set(err, TS_ENOMEM, "gpt_forward: out of memory");
            PROF(st, GPT_OP_DATA, -1, false);
            for (size_t j = 0; j < N; j++)
                mine[j] = targets[global_row(st, j)];
            be->int_to_device(be, a->targets, mine, N);
            PROF(st, GPT_OP_DATA, -1, true);
            free(mine);
        }
    }
    for (int li = 0; li < st->nl; li++) {
        if (st->rc_lo[li] == li) { /* a recompute group runs in the stage's workspace */
            CK(gpt_rc_ws_get(st, err));
            gpt_rc_bind(st, a, li, st->rc_ws);
        }
        CK(gpt_layer_acts_alloc(st, a, li, err)); /* a kept layer's own */
        /* the last layer writes y, except on the last stage (lnf's input is saved) */
        float *out = a->L[li].res3 ? a->L[li].res3 : y;
        if (!out)
            return err_set(err, TS_ESTATE, "gpt_forward: stage %d needs an output buffer", st->l0);
        CK(layer_fwd(st, a, li, layer_input(a, li), out, err));
        if (st->rc_lo[li] >= 0 && li == st->rc_hi[li] - 1) /* the group's output is kept; the rest is dropped */
            gpt_rc_ws_put(st);
    }
    if (!st->head) {
        if (st->nl == 0)
            be->copy(be, y, a->in0, Ns * C);
        return TS_OK;
    }
    CK(gpt_head_acts_alloc(st, a, err)); /* when the head runs (the layers' transients are gone) */
    const float *x = layer_input(a, st->nl);
    OP(st, "lnf", -1, norm_fwd(st, a->lnf, a->lnfm, a->lnfr, x, st->lnfw, st->lnfb, Ns));
    const float *lnfg = a->lnf;
    if (st->sp) {
        CK(tp_gather(st, a->lnfg, a->lnf, -1, err));
        lnfg = a->lnfg;
    }
    OP(st, "logits", -1, linear_fwd(st, a->probs, lnfg, st->wout, NULL, N, st->V, st->C));
    OP(st, "xent", -1, be->crossentropy_fwd(be, a->losses, a->probs, a->probs, a->targets, N, st->V));
    if (loss_sum) {
        float *h = malloc(N * sizeof(float));
        if (!h)
            return err_set(err, TS_ENOMEM, "gpt_forward: out of memory");
        be->to_host(be, h, a->losses, N);
        double s = 0.0;
        for (size_t i = 0; i < N; i++)
            s += h[i];
        free(h);
        *loss_sum = s;
    }
    return TS_OK;
}

/* Input gradient of layer li: st->s_dres holds d(output) on entry and
 * d(input) on return; K receives what the weight gradients need. norms:
 * the norms' weight gradients too (a split backward: W then has only the
 * linear layers', from their inputs and K's output gradients). */
static int layer_bwd_input(gpt_stage *st, gpt_acts *a, int li, gpt_lcache *K, bool norms, ts_err *err)
{
    backend *be = st->be;
    gpt_lacts *A = &a->L[li];
    int l = st->l0 + li, C = st->C, Cl = st->Cl, Fl = st->Fl;
    size_t N = st->N, Ns = st->Ns;
    float *dres = st->s_dres;

    if (st->moe[li].L) { /* the MoE layer's input and weight gradients at once (W then has only ln2, attention) */
        moe_layer *M = st->moe[li].L;
        moe_xchg xc = moe_xc_of(st);
        int rc;
        if (st->d.recompute_moe && !A->moe) { /* the forward again (its collectives too); its output unused */
            M->rerun = true;
            OP(st, "moe_recompute", l, rc = moe_forward(M, &xc, A->ln2, st->Ns, st->s_part, &A->moe, err));
            M->rerun = false;
            CK(rc);
        }
        if (!A->moe)
            return err_set(err, TS_ESTATE, "gpt backward: layer %d's MoE state is missing (forward not run)", l);
        M->aux_grad_scale = (double)st->loss_scale * (double)st->N; /* 1 / micro-batches of the global batch */
        OP(st, "moe_bwd", l, rc = moe_backward(M, &xc, A->moe, dres, K->dln2, err));
        moe_saved_free(A->moe);
        A->moe = NULL;
        if (rc)
            return rc;
    } else {
        CK(tp_bwd_gather(st, K->dfcprojo, dres, l, err));
        OP(st, "fc2_bwd_input", l, linear_bwd_input(st, st->s_dfchg, K->dfcprojo, LW(st, li, GP_FCPROJW), N, C, Fl));
        be->zero(be, K->dfch, N * (size_t)st->Fu);
        OP(st, st->d.swiglu ? "swiglu_bwd" : "gelu_bwd", l, act_bwd(st, K->dfch, A->fch, st->s_dfchg));
        CK(tp_bwd_reduce(st, K->dln2, K->dfch, LW(st, li, GP_FCW), st->Fu, "fc1_bwd_input", l, err));
    }
    OP(st, "ln2_bwd_input", l, norm_bwd_input(st, dres, K->dln2, A->res2, LW(st, li, GP_LN2W), A->ln2m, A->ln2r, Ns));
    if (norms)
        OP(st, "ln2_bwd_weight", l,
           norm_bwd_weight(st, LG(st, li, GP_LN2W), LG(st, li, GP_LN2B), K->dln2, A->res2, A->ln2m, A->ln2r, Ns));

    CK(tp_bwd_gather(st, K->dprojo, dres, l, err));
    int rc = TS_OK;
    /* selective: the scores (flash: the log-sum-exp) again from the saved q, k, v; the output is discarded */
    if (st->d.recompute_attn)
        OP(st, "attn_recompute", l, rc = attn_fwd(st, st->s_datty, A->att, A->qkv, err));
    CK(rc);
    OP(st, "proj_bwd_input", l, linear_bwd_input(st, st->s_datty, K->dprojo, LW(st, li, GP_PROJW), N, C, Cl));
    be->zero(be, K->dqkv, N * (size_t)st->Wl);
    OP(st, "attn_bwd", l, rc = attn_bwd(st, K->dqkv, st->s_datty, A->atty, A->qkv, A->att, err));
    CK(rc);
    if (st->d.rope) /* back to the gradient of the unrotated QKV output */
        OP(st, "rope_bwd", l, rope_rows(st, K->dqkv, true));
    if (st->d.qk_norm) { /* its weight gradient with the input gradient, which overwrites dqkv */
        const float *qm = st->d.rmsnorm ? NULL : A->qknm;
        OP(st, "qk_norm_bwd", l,
           be->qknorm_bwd_weight(be, LG(st, li, GP_QLNW), LG(st, li, GP_QLNB), LG(st, li, GP_KLNW), LG(st, li, GP_KLNB),
                                 K->dqkv, A->qkn, qm, A->qknr, N, st->NHl, st->NKVl, st->hs);
           be->qknorm_bwd_input(be, K->dqkv, A->qkn, qm, A->qknr, LW(st, li, GP_QLNW), LW(st, li, GP_KLNW), N, st->NHl,
                                st->NKVl, st->hs));
    }
    CK(tp_bwd_reduce(st, K->dln1, K->dqkv, LW(st, li, GP_QKVW), st->Wl, "qkv_bwd_input", l, err));
    OP(st, "ln1_bwd_input", l,
       norm_bwd_input(st, dres, K->dln1, layer_input(a, li), LW(st, li, GP_LN1W), A->ln1m, A->ln1r, Ns));
    if (norms)
        OP(st, "ln1_bwd_weight", l,
           norm_bwd_weight(st, LG(st, li, GP_LN1W), LG(st, li, GP_LN1B), K->dln1, layer_input(a, li), A->ln1m, A->ln1r,
                           Ns));
    return TS_OK;
}

/* Weight gradients of layer li from K; norms: the norms' too (fused). */
static void layer_bwd_weight(gpt_stage *st, gpt_acts *a, int li, const gpt_lcache *K, bool norms)
{
    gpt_lacts *A = &a->L[li];
    int l = st->l0 + li, C = st->C, Cl = st->Cl, Fl = st->Fl;
    size_t N = st->N, Ns = st->Ns;
    const float *ln1g = st->sp ? A->ln1g : A->ln1, *ln2g = st->sp ? A->ln2g : A->ln2;

    if (!st->moe[li].L) {
        OP(st, "fc2_bwd_weight", l,
           linear_bwd_weight(st, LG(st, li, GP_FCPROJW), LG(st, li, GP_FCPROJB), K->dfcprojo, A->fchg, N, C, Fl));
        OP(st, "fc1_bwd_weight", l,
           linear_bwd_weight(st, LG(st, li, GP_FCW), LG(st, li, GP_FCB), K->dfch, ln2g, N, st->Fu, C));
    }
    if (norms)
        OP(st, "ln2_bwd_weight", l,
           norm_bwd_weight(st, LG(st, li, GP_LN2W), LG(st, li, GP_LN2B), K->dln2, A->res2, A->ln2m, A->ln2r, Ns));
    OP(st, "proj_bwd_weight", l,
       linear_bwd_weight(st, LG(st, li, GP_PROJW), LG(st, li, GP_PROJB), K->dprojo, A->atty, N, C, Cl));
    OP(st, "qkv_bwd_weight", l,
       linear_bwd_weight(st, LG(st, li, GP_QKVW), LG(st, li, GP_QKVB), K->dqkv, ln1g, N, st->Wl, C));
    if (norms)
        OP(st, "ln1_bwd_weight", l,
           norm_bwd_weight(st, LG(st, li, GP_LN1W), LG(st, li, GP_LN1B), K->dln1, layer_input(a, li), A->ln1m, A->ln1r,
                           Ns));
}

/* Input gradient through the final LayerNorm, output layer and loss:
 * st->s_dres = d(head input); norms: the final norm's weight gradient too
 * (split: W then has only the output layer's). */
static void head_bwd_input(gpt_stage *st, gpt_acts *a, gpt_cache *c, float loss_scale, bool norms)
{
    backend *be = st->be;
    size_t N = st->N, Ns = st->Ns, C = st->C;
    be->zero(be, c->dlogits, N * st->V);
    OP(st, "xent_bwd", -1, be->crossentropy_bwd(be, c->dlogits, a->probs, a->targets, N, st->V, loss_scale));
    OP(st, "logits_bwd_input", -1, linear_bwd_input(st, st->s_part, c->dlogits, st->wout, N, st->V, st->C));
    size_t row0 = st->sp ? (size_t)st->tr * Ns : 0;
    be->copy(be, c->dlnf, st->s_part + row0 * C, Ns * C);
    be->zero(be, st->s_dres, Ns * C);
    OP(st, "lnf_bwd_input", -1,
       norm_bwd_input(st, st->s_dres, c->dlnf, layer_input(a, st->nl), st->lnfw, a->lnfm, a->lnfr, Ns));
    if (norms)
        OP(st, "lnf_bwd_weight", -1,
           norm_bwd_weight(st, st->glnfw, st->glnfb, c->dlnf, layer_input(a, st->nl), a->lnfm, a->lnfr, Ns));
}

static void head_bwd_weight(gpt_stage *st, gpt_acts *a, const gpt_cache *c, bool norms)
{
    const float *lnfg = st->sp ? a->lnfg : a->lnf;
    /* tied on one stage with sp: wte's gradient is a partial sum over the tensor ranks (its
     * embedding rows), the output layer's full on each: only tensor rank 0 adds it */
    bool skip = st->d.tie_embed && st->embed && st->sp && st->tr != 0;
    if (!skip)
        OP(st, "logits_bwd_weight", -1, linear_bwd_weight(st, st->gwout, NULL, c->dlogits, lnfg, st->N, st->V, st->C));
    if (norms)
        OP(st, "lnf_bwd_weight", -1,
           norm_bwd_weight(st, st->glnfw, st->glnfb, c->dlnf, layer_input(a, st->nl), a->lnfm, a->lnfr, st->Ns));
}

static void embed_bwd_weight(gpt_stage *st, gpt_acts *a, const gpt_cache *c)
{
    size_t row0 = st->sp ? (size_t)st->tr * st->Ns : 0;
    OP(st, "embed_bwd_weight", -1, embed_rows(st, c->dx0, a->tokens, row0, st->Ns, true));
}

/* Full recomputation: rerun the forward of the group ending at local layer
 * li (from its saved input) with its activations in base. The group's
 * last output is rewritten where it is kept (the same values) or into its
 * slot when the stage's output buffer held it. */
static int recompute_group(gpt_stage *st, gpt_acts *a, int li, float *base, ts_err *err)
{
    int lo = st->rc_lo[li];
    gpt_rc_bind(st, a, lo, base);
    for (int l = lo; l <= li; l++) {
        float *out = a->L[l].res3;
        if (!out) /* slot l's output place: its last Ns x C floats */
            out = base + (size_t)(l - lo + 1) * st->rc_slot - st->Ns * (size_t)st->C;
        CK(layer_fwd(st, a, l, layer_input(a, l), out, err));
    }
    return TS_OK;
}

/* A split backward: layer li's linear output gradients, kept to its W (its
 * own allocation; the norms' gradients in the stage's buffers). */
static int lcache_alloc(gpt_stage *st, int li, gpt_lcache *K, ts_err *err)
{
    size_t N = st->N, C = st->C;
    bool moe = st->moe[li].L != NULL; /* the MoE block takes its weight gradients in its backward */
    K->nfloats = N * ((size_t)st->Wl + C + (moe ? 0 : (size_t)st->Fu + C));
    int rc = be_alloc(st->be, K->nfloats, XMEM_ACTS, &K->mem, err);
    if (rc)
        return rc;
    K->dqkv = K->mem;
    K->dprojo = K->dqkv + N * st->Wl;
    K->dfch = moe ? st->fused.L[0].dfch : K->dprojo + N * C;
    K->dfcprojo = moe ? st->fused.L[0].dfcprojo : K->dfch + N * st->Fu;
    K->dln1 = st->fused.L[0].dln1;
    K->dln2 = st->fused.L[0].dln2;
    return TS_OK;
}

/* Shared driver of the split and fused backward. Split, what W needs stays
 * (as a zero-bubble backward keeps it): each linear layer's input (the
 * layer's weight part) and output gradient (K), allocated as the layer's
 * input gradient runs; the rest of its activations is freed then, the
 * norms' weight gradients are taken then, and the stage input is freed at
 * the end. */
static int backward_input(gpt_stage *st, gpt_acts *a, const float *dy, float loss_scale, float *dx, gpt_cache *c,
                          bool fused, ts_err *err)
{
    backend *be = st->be;
    size_t nC = st->Ns * (size_t)st->C;
    st->loss_scale = loss_scale;
    if (st->head) {
        if (!fused) {
            c->dlnf = st->fused.dlnf;
            CK(be_alloc(be, st->N * (size_t)st->V, XMEM_ACTS, &c->dlogits, err));
        }
        head_bwd_input(st, a, c, loss_scale, !fused);
        gpt_head_acts_free(st, a, false); /* the logits' probabilities are done with */
        if (fused) {
            head_bwd_weight(st, a, c, true);
            gpt_head_acts_free(st, a, true);
        }
        if (st->nl > 0) /* the final norm's input: read by its gradients, now taken */
            gpt_layer_acts_free_output(st, a, st->nl - 1);
    } else {
        if (!dy)
            return err_set(err, TS_ESTATE, "gpt backward: stage %d needs an output gradient", st->l0);
        be->copy(be, st->s_dres, dy, nC);
    }
    for (int li = st->nl - 1; li >= 0; li--) {
        gpt_lcache *K = fused ? &c->L[0] : &c->L[li];
        if (st->rc_lo[li] >= 0 && li == st->rc_hi[li] - 1) { /* split: kept in a->rc_mem until W */
            if (fused)
                CK(gpt_rc_ws_get(st, err));
            CK(recompute_group(st, a, li, fused ? st->rc_ws : a->rc_mem + (size_t)st->rc_lo[li] * st->rc_slot, err));
        }
        if (!fused)
            CK(lcache_alloc(st, li, K, err));
        CK(layer_bwd_input(st, a, li, K, !fused, err));
        if (fused) {
            layer_bwd_weight(st, a, li, K, true);
            gpt_layer_acts_free(st, a, li); /* done with (the layer below reads its own input) */
        } else {
            gpt_layer_acts_free_input(st, a, li); /* W reads the weight part only */
        }
        if (fused && st->rc_lo[li] == li) /* the group is done */
            gpt_rc_ws_put(st);
    }
    if (st->embed) {
        if (!fused)
            CK(be_alloc(be, nC, XMEM_ACTS, &c->dx0, err));
        be->copy(be, c->dx0, st->s_dres, nC);
        if (fused)
            embed_bwd_weight(st, a, c);
    } else {
        if (!dx)
            return err_set(err, TS_ESTATE,
                           "gpt backward: stage %d needs an input-gradient "
                           "buffer",
                           st->l0);
        be->copy(be, dx, st->s_dres, nC);
    }
    if (!fused) { /* the stage input (and the recompute groups' inputs): read by the input gradients only */
        be_free(be, a->mem, a->nfloats, XMEM_ACTS);
        a->mem = a->in0 = NULL;
    }
    return TS_OK;
}

int gpt_backward_input(gpt_stage *st, gpt_acts *a, const float *dy, float loss_scale, float *dx, ts_err *err)
{
    if (a->have_cache)
        return err_set(err, TS_ESTATE, "gpt_backward_input: called twice on one micro-batch");
    gpt_cache *c = &a->cache;
    memset(c, 0, sizeof *c);
    c->L = calloc((size_t)st->nl + 1, sizeof *c->L);
    if (!c->L)
        return err_set(err, TS_ENOMEM, "gpt_backward_input: out of memory");
    a->rc_n = (size_t)st->n_rc * st->rc_slot;
    int rc = be_alloc(st->be, a->rc_n, XMEM_ACTS, &a->rc_mem, err);
    if (rc) {
        free(c->L);
        c->L = NULL;
        return rc;
    }
    a->have_cache = true; /* gpt_acts_free releases what the backward allocated, should it fail */
    return backward_input(st, a, dy, loss_scale, dx, c, false, err);
}

int gpt_backward_weight(gpt_stage *st, gpt_acts *a, ts_err *err)
{
    if (!a->have_cache)
        return err_set(err, TS_ESTATE, "gpt_backward_weight: no saved gradients (run gpt_backward_input first)");
    gpt_cache *c = &a->cache;
    if (st->head) {
        head_bwd_weight(st, a, c, false);
        gpt_head_acts_free(st, a, true);
        be_free(st->be, c->dlogits, st->N * (size_t)st->V, XMEM_ACTS);
        c->dlogits = NULL;
    }
    for (int li = st->nl - 1; li >= 0; li--) {
        layer_bwd_weight(st, a, li, &c->L[li], false);
        gpt_layer_acts_free(st, a, li);
        be_free(st->be, c->L[li].mem, c->L[li].nfloats, XMEM_ACTS);
        c->L[li].mem = NULL;
    }
    if (st->embed) {
        embed_bwd_weight(st, a, c);
        be_free(st->be, c->dx0, st->Ns * (size_t)st->C, XMEM_ACTS);
        c->dx0 = NULL;
    }
    be_free(st->be, a->rc_mem, a->rc_n, XMEM_ACTS);
    a->rc_mem = NULL;
    free(c->L);
    c->L = NULL;
    a->have_cache = false;
    return TS_OK;
}

int gpt_backward(gpt_stage *st, gpt_acts *a, const float *dy, float loss_scale, float *dx, ts_err *err)
{
    return backward_input(st, a, dy, loss_scale, dx, &st->fused, true, err);
}
