/* ep_pair_steps — the flow modes' copies of overlapped passes (see ep_pair_steps.h). */
#include "sim/core/ep_pair_steps.h"

#include <stdint.h>
#include <stdlib.h>

#include "sim/core/ep_pair.h"

int ep_pair_steps_split(const plan *pl, plan_range R, uint32_t *b)
{
    int n = 0;
    uint32_t i = 0;
    b[0] = 0;
    for (;;) {
        while (i < R.n && pl->steps[R.first + i].cat != PLAN_CAT_EP)
            i++;
        b[2 * n + 1] = i;
        if (i == R.n)
            return n;
        while (i < R.n && pl->steps[R.first + i].cat == PLAN_CAT_EP)
            i++;
        b[2 * ++n] = i;
    }
}

/* One pass of range R split at b (n transfers): comp[0..n] each span's
 * steps' time, comm[0..n-1] each transfer's. */
static void times(const plan *pl, plan_range R, const uint32_t *b, int n, int64_t *comp, int64_t *comm)
{
    for (int j = 0; j <= n; j++) {
        comp[j] = 0;
        for (uint32_t i = b[2 * j]; i < b[2 * j + 1]; i++)
            comp[j] += pl->steps[R.first + i].dur_ns;
        if (j == n)
            break;
        comm[j] = 0;
        for (uint32_t i = b[2 * j + 1]; i < b[2 * j + 2]; i++)
            comm[j] += pl->steps[R.first + i].dur_ns;
    }
}

/* Append a copy of step R.first + i, its dependencies renumbered by map;
 * map[i] = its index in the copy (*n, then incremented). */
static int push_copy(plan *pl, plan_step x, uint32_t i, uint32_t *map, uint32_t *n)
{
    for (int k = 0; k < 2; k++)
        if (x.dep[k] >= 0)
            x.dep[k] = (int32_t)map[x.dep[k]];
    uint32_t id;
    if (plan_push_step(pl, &x, &id))
        return TS_ENOMEM;
    map[i] = (*n)++;
    return TS_OK;
}

/* Append a copy of range R (split at b, n transfers, comp its spans'
 * times): span j's steps scaled to el[j] in all, then, where wg[j] > 0 (wg
 * NULL: none), a weight-gradient step of wg[j] that takes the span's
 * gradient buckets and activation frees. *out = the copy. TS_ENOMEM. */
static int copy_scaled(plan *pl, plan_range R, const uint32_t *b, int n, const int64_t *comp, const int64_t *el,
                       const int64_t *wg, int stage, plan_range *out)
{
    uint32_t *map = malloc((R.n ? R.n : 1) * sizeof *map);
    if (!map)
        return TS_ENOMEM;
    int rc = TS_OK;
    out->first = pl->n_steps;
    out->n = 0;
    for (int j = 0; j <= n && rc == TS_OK; j++) {
        bool w = wg && wg[j] > 0;
        int64_t old = 0, placed = 0, free_bytes = 0, cc = 0;
        int16_t bucket = -1;
        int32_t last = -1;
        /* the span's compute steps take its slowdown; its TP and CP
         * collectives (timed by the network model) keep their times */
        for (uint32_t i = b[2 * j]; i < b[2 * j + 1]; i++)
            if (pl->steps[R.first + i].stream == PLAN_STREAM_COMPUTE)
                cc += pl->steps[R.first + i].dur_ns;
        int64_t cc_to = cc + el[j] - comp[j];
        for (uint32_t i = b[2 * j]; i < b[2 * j + 1] && rc == TS_OK; i++) {
            plan_step x = pl->steps[R.first + i]; /* a copy: pushing may move the steps */
            if (x.stream == PLAN_STREAM_COMPUTE) {
                old += x.dur_ns;
                int64_t to = cc > 0 && cc_to > 0 ? (int64_t)((double)cc_to * (double)old / (double)cc + 0.5) : old;
                x.dur_ns = to - placed;
                placed = to;
            }
            if (w) {
                free_bytes += x.free_bytes;
                x.free_bytes = 0;
                bucket = x.dp_bucket > bucket ? x.dp_bucket : bucket;
                x.dp_bucket = -1;
            }
            rc = push_copy(pl, x, i, map, &out->n);
            last = (int32_t)out->n - 1;
        }
        if (rc == TS_OK && w) {
            plan_step x = plan_step_init("moe.wgrad.delayed", PLAN_STREAM_COMPUTE, PLAN_CAT_BWD, stage, wg[j]);
            x.dep[0] = last;
            x.free_bytes = free_bytes;
            x.dp_bucket = bucket;
            uint32_t id;
            rc = plan_push_step(pl, &x, &id) ? TS_ENOMEM : TS_OK;
            out->n++;
        }
        for (uint32_t i = j < n ? b[2 * j + 1] : R.n; j < n && i < b[2 * j + 2] && rc == TS_OK; i++)
            rc = push_copy(pl, pl->steps[R.first + i], i, map, &out->n);
    }
    free(map);
    if (rc == TS_OK && out->n > pl->max_pass_steps)
        pl->max_pass_steps = out->n;
    return rc;
}

/* The copies of the pair (sf, sb, kb), when it needs any. */
static int add_pair(plan *pl, int sf, int sb, int kb, int sms, bool delay_wgrad, ts_err *err)
{
    const plan_stage *F = &pl->stages[sf], *B = &pl->stages[sb];
    plan_range rf = F->pass[PLAN_PASS_F], rb = B->pass[kb], rfin = B->pass_final[kb], ri = B->pass[PLAN_PASS_I];
    size_t cap = 2 * ((size_t)pl->max_pass_steps + 1);
    uint32_t *bf = malloc(4 * cap * sizeof *bf), *bb = bf ? bf + cap : NULL, *bi = bf ? bf + 2 * cap : NULL,
             *bfin = bf ? bf + 3 * cap : NULL;
    int64_t *t = malloc(12 * cap * sizeof *t); /* comp and comm of F, B, I; el; wg */
    int rc = bf && t ? TS_OK : TS_ENOMEM;
    if (rc == TS_OK) {
        int nf = ep_pair_steps_split(pl, rf, bf), nb = ep_pair_steps_split(pl, rb, bb), n = nf > nb ? nf : nb;
        int ni = ri.n ? ep_pair_steps_split(pl, ri, bi) : -1;
        int64_t *fc = t, *fm = t + cap, *bc = t + 2 * cap, *bm = t + 3 * cap, *ic = t + 4 * cap, *im = t + 5 * cap,
                *el = t + 6 * cap, *wg = t + 9 * cap;
        times(pl, rf, bf, nf, fc, fm);
        times(pl, rb, bb, nb, bc, bm);
        bool split_w = delay_wgrad && kb == PLAN_PASS_B && ni == nb;
        if (split_w)
            times(pl, ri, bi, ni, ic, im);
        for (int j = 0; j <= nb; j++)
            wg[j] = split_w ? (bc[j] > ic[j] ? bc[j] - ic[j] : 0) : 0;
        ep_pair_pass pf = {nf, fc, fm, NULL}, pb = {nb, bc, bm, split_w ? wg : NULL};
        if ((nf == 0 && nb == 0) || (sms <= 0 && !split_w))
            goto out; /* lowering interleaves the original steps */
        rc = ep_pair_spans(&pf, &pb, sms, delay_wgrad, el, err);
        if (rc)
            goto out;
        /* the backward's spans: the input-gradient parts, then the weight
         * gradients (own steps with the delay, else in the span's) */
        int64_t *bel = el + n + 1, *wel = el + 2 * (size_t)n + 2;
        for (int j = 0; j <= nb && !split_w; j++)
            bel[j] += wel[j];
        plan_ep_pair P = {.sf = sf, .sb = sb, .kb = kb};
        rc = copy_scaled(pl, rf, bf, nf, fc, el, NULL, sf, &P.f);
        if (rc == TS_OK)
            rc = copy_scaled(pl, rb, bb, nb, bc, bel, split_w ? wel : NULL, sb, &P.b);
        if (rc == TS_OK && rfin.n) {
            int nfin = ep_pair_steps_split(pl, rfin, bfin);
            int64_t *cc = t + 4 * cap, *cm = t + 5 * cap; /* the I pass's times are no longer needed */
            times(pl, rfin, bfin, nfin, cc, cm);
            rc = nfin == nb ? copy_scaled(pl, rfin, bfin, nfin, cc, bel, split_w ? wel : NULL, sb, &P.b_final) : TS_OK;
        }
        plan_ep_pair *grown = rc == TS_OK ? realloc(pl->ep_pairs, (pl->n_ep_pairs + 1) * sizeof *grown) : NULL;
        if (rc == TS_OK && !grown)
            rc = TS_ENOMEM;
        if (grown) {
            pl->ep_pairs = grown;
            pl->ep_pairs[pl->n_ep_pairs++] = P;
        }
    }
out:
    free(bf);
    free(t);
    return rc == TS_ENOMEM ? err_set(err, TS_ENOMEM, "plan: out of memory for the overlapped pairs' steps") : rc;
}

typedef struct {
    plan *pl;
    int sms;
    bool delay_wgrad;
} build_ctx;

static int build_one(void *ctx, int sf, int sb, int kb, ts_err *err)
{
    const build_ctx *C = ctx;
    if (ep_pair_find(C->pl, sf, sb, kb))
        return TS_OK;
    return add_pair(C->pl, sf, sb, kb, C->sms, C->delay_wgrad, err);
}

int ep_pair_steps_build(plan *pl, const sched *s, int sms, bool delay_wgrad, ts_err *err)
{
    build_ctx C = {pl, sms, delay_wgrad};
    return ep_pair_each(s, pl->n_stages, build_one, &C, err);
}
