/* gpt_recomp — full recomputation's bookkeeping for gpt_stage: which layers
 * are recomputed and in which groups (Megatron-LM's --recompute-method:
 * uniform groups from the stage's first layer, or the first layers of the
 * stage each alone), one layer's activation layout, and where a group's
 * activations live (the stage's group workspace in the forward and the
 * fused backward; the micro-batch's own memory from I to W). The passes
 * that use them are in gpt_pass.c. */
#include <stdlib.h>

#include "exec/core/gpt_impl.h"
#include "sim/util/ckd.h"

size_t gpt_lacts_carve(const gpt_stage *st, gpt_lacts *A, float *wbase, float *ibase, bool res3, bool moe)
{
    size_t cur = 0, N = st->N, Ns = st->Ns, C = st->C;
    size_t natt = gpt_att_floats(st), nmean = st->d.rmsnorm ? 0 : Ns;
    float *base = wbase;
#define TAKE(ptr, cnt)                                                                                                 \
    do {                                                                                                               \
        if (base)                                                                                                      \
            (ptr) = base + cur;                                                                                        \
        cur += (cnt);                                                                                                  \
    } while (0)
    /* the weight part: the linear layers' inputs */
    TAKE(A->ln1, Ns * C);
    if (st->sp)
        TAKE(A->ln1g, N * C);
    TAKE(A->atty, N * st->Cl);
    TAKE(A->ln2, Ns * C);
    if (st->sp)
        TAKE(A->ln2g, N * C);
    if (!moe)
        TAKE(A->fchg, N * st->Fl);
    size_t nw = cur;
    if (wbase) { /* the input part: in ibase, or after the weight part */
        base = ibase ? ibase : wbase + nw;
        cur = 0;
    }
    TAKE(A->ln1m, nmean);
    TAKE(A->ln1r, Ns);
    TAKE(A->qkv, N * st->Wl);
    if (st->d.qk_norm) {
        size_t nqk = N * (size_t)(st->NHl + st->NKVl);
        TAKE(A->qkn, nqk * st->hs);
        TAKE(A->qknm, st->d.rmsnorm ? 0 : nqk);
        TAKE(A->qknr, nqk);
    }
    if (!st->d.recompute_attn)
        TAKE(A->att, natt);
    else if (base)
        A->att = st->s_att; /* scores (or log-sum-exp) recomputed in the backward: one stage-wide buffer */
    TAKE(A->res2, Ns * C);
    TAKE(A->ln2m, nmean);
    TAKE(A->ln2r, Ns);
    if (!moe)
        TAKE(A->fch, N * st->Fu);
    if (res3)
        TAKE(A->res3, Ns * C);
#undef TAKE
    return wbase ? nw + cur : cur;
}

size_t gpt_lacts_w_floats(const gpt_stage *st, bool moe)
{
    size_t N = st->N, Ns = st->Ns, C = st->C;
    return 2 * Ns * C + (st->sp ? 2 * N * C : 0) + N * (size_t)st->Cl + (moe ? 0 : N * (size_t)st->Fl);
}

int gpt_rc_setup(gpt_stage *st, ts_err *err)
{
    int n = st->nl, k = st->d.recompute_layers, group = 1;
    st->rc_lo = malloc(((size_t)n + 1) * sizeof *st->rc_lo);
    st->rc_hi = malloc(((size_t)n + 1) * sizeof *st->rc_hi);
    if (!st->rc_lo || !st->rc_hi)
        return err_set(err, TS_ENOMEM, "gpt stage: out of memory");
    st->n_rc = 0;
    if (st->d.recompute == GPT_RC_UNIFORM) {
        st->n_rc = n;
        group = k <= 0 ? 1 : k > n ? n : k;
    } else if (st->d.recompute == GPT_RC_BLOCK) {
        st->n_rc = k <= 0 || k > n ? n : k;
    }
    for (int li = 0; li < n; li++) {
        bool rc = li < st->n_rc;
        int lo = rc ? li / group * group : -1, hi = rc ? lo + group : -1;
        st->rc_lo[li] = lo;
        st->rc_hi[li] = hi > st->n_rc ? st->n_rc : hi;
    }
    gpt_lacts dummy;
    st->rc_slot = gpt_lacts_carve(st, &dummy, NULL, NULL, true, false); /* (MoE layers are never recomputed) */
    int64_t bytes; /* what the split backward keeps per micro-batch: every recomputed layer */
    if (ckd_mul_i64(&bytes, (int64_t)st->n_rc, (int64_t)st->rc_slot) ||
        ckd_mul_i64(&bytes, bytes, (int64_t)sizeof(float)) || bytes > CKD_MAX_BYTES)
        return err_set(err, TS_EINVAL, "recomputation: %d layers of %zu floats of activations overflow the byte count",
                       st->n_rc, st->rc_slot);
    st->rc_ws_n = st->n_rc ? (size_t)(group < st->n_rc ? group : st->n_rc) * st->rc_slot : 0;
    return TS_OK;
}

int gpt_rc_ws_get(gpt_stage *st, ts_err *err)
{
    if (st->rc_ws || !st->rc_ws_n)
        return TS_OK;
    return be_alloc(st->be, st->rc_ws_n, XMEM_ACTS, &st->rc_ws, err);
}

void gpt_rc_ws_put(gpt_stage *st)
{
    be_free(st->be, st->rc_ws, st->rc_ws_n, XMEM_ACTS);
    st->rc_ws = NULL;
}

void gpt_rc_free(gpt_stage *st)
{
    gpt_rc_ws_put(st);
    free(st->rc_lo);
    free(st->rc_hi);
}

void gpt_rc_bind(const gpt_stage *st, gpt_acts *a, int lo, float *base)
{
    int hi = st->rc_hi[lo];
    for (int li = lo; li < hi; li++) {
        gpt_lacts *A = &a->L[li];
        float *keep = A->res3;
        gpt_lacts_carve(st, A, base + (size_t)(li - lo) * st->rc_slot, NULL, true, false);
        if (li == hi - 1)
            A->res3 = keep;
    }
}
