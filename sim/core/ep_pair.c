/* ep_pair — pairs of overlapped forward and backward passes (see ep_pair.h). */
#include "sim/core/ep_pair.h"

#include <stdlib.h>

#include "sim/core/overlap.h"
#include "sim/util/grow.h"

#define FLAG "--overlap-moe-expert-parallel-comm"

bool ep_pair_combined_sched(bool overlap, sched_kind k)
{
    return overlap && k == SCHED_INTERLEAVED;
}

int ep_pair_check(const config *c, sched_kind k, int v, bool flows, ts_err *err)
{
    const parallel_config *P = &c->par;
    const moe_config *M = &c->moe;
    if (P->delay_wgrad && !P->overlap_moe_ep_comm) /* Megatron-core's TransformerConfig */
        return err_set(err, TS_EINVAL,
                       "--delay-wgrad-compute needs " FLAG " (Megatron-core delays the weight gradients only in "
                       "the overlapped forward-backward pairs)");
    if (!P->overlap_moe_ep_comm)
        return TS_OK;
    if (M->num_experts <= 0)
        return err_set(err, TS_EINVAL, FLAG ": needs a mixture-of-experts model (--num-experts > 0)");
    if (M->ep <= 1)
        return err_set(err, TS_EINVAL, FLAG ": needs expert parallelism (--expert-model-parallel-size > 1, got %d)",
                       M->ep);
    if (M->dispatcher == MOE_DISPATCH_ALLGATHER)
        return err_set(err, TS_EINVAL,
                       FLAG ": needs --moe-token-dispatcher-type alltoall or flex (got allgather: no all-to-all)");
    if (P->recompute == RECOMPUTE_FULL)
        return err_set(err, TS_EINVAL,
                       FLAG ": not with --recompute-granularity full (valid: selective or no recomputation)");
    if (M->mtp_num_layers > 1)
        return err_set(err, TS_EINVAL, FLAG ": needs --mtp-num-layers 1 or none (got %d)", M->mtp_num_layers);
    (void)flows; /* the flow modes run a pair's TP and CP collectives as the default mode's spans count them */
    if (!ep_pair_layout_ok(M->ep, false, false, k, v, P->pp))
        return err_set(err, TS_EINVAL,
                       FLAG ": needs virtual pipelining with --pipeline-model-parallel-size %d > 1 (Megatron-LM): "
                            "valid --schedule interleaved (with --num-layers-per-virtual-pipeline-stage or "
                            "--num-virtual-stages-per-pipeline-rank) or dualpipev, or 1f1b at "
                            "--pipeline-model-parallel-size 1 (got %s with %d chunk(s) per rank)",
                       P->pp, sched_kind_name(k), v);
    return TS_OK;
}

bool ep_pair_layout_ok(int ep, bool allgather, bool full_recompute, sched_kind k, int v, int pp)
{
    if (ep <= 1 || allgather || full_recompute)
        return false;
    return (k == SCHED_INTERLEAVED && (v > 1 || pp == 1)) || k == SCHED_DUALPIPEV || (k == SCHED_1F1B && pp == 1);
}

static bool is_fwd(const sched_action *a)
{
    return a->kind == ACT_F;
}

static bool is_bwd(const sched_action *a)
{
    return a->kind == ACT_B || a->kind == ACT_I;
}

static bool is_compute(const sched_action *a)
{
    return a->kind == ACT_F || a->kind == ACT_B || a->kind == ACT_I || a->kind == ACT_W;
}

/* The next compute action after i (n when none). */
static size_t next_compute(const sched_action *acts, size_t n, size_t i)
{
    size_t j = i + 1;
    while (j < n && !is_compute(&acts[j]))
        j++;
    return j;
}

void ep_pair_mark(const sched *s, int r, int32_t *partner)
{
    const sched_action *acts = s->actions[r];
    size_t n = s->n_actions[r];
    bool marks = false; /* the schedule marks its pairs (on any rank: a rank may have none) */
    for (size_t i = 0; i < n; i++)
        partner[i] = -1;
    for (int q = 0; q < s->p && !marks; q++)
        for (size_t i = 0; i < s->n_actions[q] && !marks; i++)
            marks = s->actions[q][i].overlap != 0;
    for (size_t i = 0; i < n; i++) {
        if (!is_compute(&acts[i]) || partner[i] >= 0)
            continue;
        if (marks && !(is_fwd(&acts[i]) && acts[i].overlap))
            continue;
        size_t j = next_compute(acts, n, i);
        if (j >= n || partner[j] >= 0)
            continue;
        bool fb = (is_fwd(&acts[i]) && is_bwd(&acts[j])) || (is_bwd(&acts[i]) && is_fwd(&acts[j]));
        if (!fb || acts[i].mb == acts[j].mb)
            continue;
        partner[i] = (int32_t)j;
        partner[j] = (int32_t)i;
    }
}

/* One op of the pair's two streams: its owner (0 forward, 1 backward), its
 * time (work at the full GPU for compute) and the op of the other stream it
 * waits for (-1 none). */
typedef struct {
    int owner;
    int64_t ns;
    int32_t dep;
} pair_op;

/* Append op (owner, ns, dep) to list l of *n ops; returns its index. */
static int32_t push_op(pair_op *l, int32_t *n, int owner, int64_t ns, int32_t dep)
{
    l[*n] = (pair_op){owner, ns > 0 ? ns : 0, dep};
    return (*n)++;
}

/* Run the two in-order streams (see ep_pair.h) from t = 0; exp[o] gets
 * owner o's exposed time: its transfers' time while no compute runs plus
 * the compute time they cost through the SM share. */
static void run_streams(const pair_op *C, int32_t nc, const pair_op *M, int32_t nm, int sms, int64_t exp_ns[2],
                        double *elapsed_ns)
{
    double now = 0, c_start = 0; /* elapsed_ns (NULL: none): each compute op's time from its start to its end */
    double rate = 1.0;           /* compute speed while a transfer runs */
    if (sms > EP_PAIR_COMM_SMS)
        rate = (double)(sms - EP_PAIR_COMM_SMS) / (double)sms;
    double expo[2] = {0, 0}, crem = 0, mrem = 0;
    int32_t ci = 0, mi = 0, c_done = 0, m_done = 0; /* next op to start; ops ended */
    bool c_on = false, m_on = false;
    for (;;) {
        if (!c_on && ci < nc && (C[ci].dep < 0 || C[ci].dep < m_done)) {
            c_on = true;
            crem = (double)C[ci++].ns;
            c_start = now;
        }
        if (!m_on && mi < nm && (M[mi].dep < 0 || M[mi].dep < c_done)) {
            m_on = true;
            mrem = (double)M[mi++].ns;
        }
        if (!c_on && !m_on)
            break; /* both lists ended (the dependencies point backwards: no deadlock) */
        double r = m_on ? rate : 1.0;
        double dt = c_on ? crem / r : mrem;
        if (m_on && mrem < dt)
            dt = mrem;
        if (m_on)
            expo[M[mi - 1].owner] += c_on ? dt * (1.0 - r) : dt;
        now += dt;
        if (c_on && (crem -= dt * r) <= 1e-6) {
            c_on = false;
            if (elapsed_ns)
                elapsed_ns[c_done] = now - c_start;
            c_done++;
        }
        if (m_on && (mrem -= dt) <= 1e-6) {
            m_on = false;
            m_done++;
        }
    }
    exp_ns[0] = (int64_t)(expo[0] + 0.5);
    exp_ns[1] = (int64_t)(expo[1] + 0.5);
}

/* ep_pair_run and ep_pair_spans: el (NULL: not wanted) gets el[0..n] the
 * forward's spans, el[n+1..2n+1] the backward's input-gradient parts,
 * el[2n+2..3n+2] its weight-gradient parts (n = the larger pass's
 * transfers; spans a pass lacks get 0). */
static int pair_sim(const ep_pair_pass *f, const ep_pair_pass *b, int sms, bool delay_wgrad, int64_t *exp_f,
                    int64_t *exp_b, int64_t *el, ts_err *err)
{
    int n = f->n > b->n ? f->n : b->n;
    size_t cap = 3 * (size_t)(n + 1);
    pair_op *C = malloc(cap * sizeof *C), *M = malloc(cap * sizeof *M);
    int32_t *f_comp = malloc(((size_t)n + 1) * sizeof *f_comp), *b_ready = malloc(((size_t)n + 1) * sizeof *b_ready);
    int32_t *b_dg = malloc(((size_t)n + 1) * sizeof *b_dg);
    double *c_el = malloc(cap * sizeof *c_el);
    int rc = TS_OK;
    if (!C || !M || !f_comp || !b_ready || !b_dg || !c_el) {
        rc = err_set(err, TS_ENOMEM, "plan: out of memory for the overlapped pairs");
        goto out;
    }
    /* compute stream: B's compute j (dgrad, then wgrad), F's compute j, for
     * j = 0..n; communication stream: B's transfer j, F's transfer j, for
     * j = 1..n; B's transfer j waits for B's compute j-1 (its dgrad part with
     * delay_wgrad), F's for F's compute j-1; compute j waits for its pass's
     * transfer j */
    int32_t nc = 0, nm = 0;
    int32_t f_comm = -1, b_comm = -1; /* the transfer before the compute being placed */
    for (int j = 0; j <= n; j++) {
        if (j > 0 && j <= b->n)
            b_comm = push_op(M, &nm, 1, b->comm_ns[j - 1], b_ready[j - 1]);
        if (j > 0 && j <= f->n)
            f_comm = push_op(M, &nm, 0, f->comm_ns[j - 1], f_comp[j - 1]);
        if (j <= b->n) {
            int64_t w = b->wgrad_ns ? b->wgrad_ns[j] : 0;
            if (w < 0 || w > b->comp_ns[j])
                w = w < 0 ? 0 : b->comp_ns[j];
            int32_t dg = push_op(C, &nc, 1, b->comp_ns[j] - w, j > 0 ? b_comm : -1);
            int32_t wg = push_op(C, &nc, 1, w, -1);
            b_ready[j] = delay_wgrad ? dg : wg;
            b_dg[j] = dg;
        }
        if (j <= f->n)
            f_comp[j] = push_op(C, &nc, 0, f->comp_ns[j], j > 0 ? f_comm : -1);
    }
    int64_t e[2];
    run_streams(C, nc, M, nm, sms, e, c_el);
    *exp_f = e[0];
    *exp_b = e[1];
    for (int j = 0; el && j <= n; j++) {
        el[j] = j <= f->n ? (int64_t)(c_el[f_comp[j]] + 0.5) : 0;
        el[n + 1 + j] = j <= b->n ? (int64_t)(c_el[b_dg[j]] + 0.5) : 0;
        el[2 * n + 2 + j] = j <= b->n ? (int64_t)(c_el[b_dg[j] + 1] + 0.5) : 0;
    }
out:
    free(C);
    free(M);
    free(f_comp);
    free(b_ready);
    free(b_dg);
    free(c_el);
    return rc;
}

int ep_pair_run(const ep_pair_pass *f, const ep_pair_pass *b, int sms, bool delay_wgrad, int64_t *exp_f, int64_t *exp_b,
                ts_err *err)
{
    return pair_sim(f, b, sms, delay_wgrad, exp_f, exp_b, NULL, err);
}

int ep_pair_spans(const ep_pair_pass *f, const ep_pair_pass *b, int sms, bool delay_wgrad, int64_t *el_ns, ts_err *err)
{
    int64_t e_f, e_b;
    return pair_sim(f, b, sms, delay_wgrad, &e_f, &e_b, el_ns, err);
}

/* The exposed all-to-all time of range R (the steps' ep_exposed_ns). */
static int64_t range_ep_ns(const plan *pl, plan_range R)
{
    int64_t a = 0;
    for (uint32_t i = 0; i < R.n; i++)
        a += pl->steps[R.first + i].ep_exposed_ns;
    return a;
}

/* Split range R (its steps one after the other, each step's segments at
 * their offsets) at its all-to-alls (segments of cat PLAN_CAT_EP off the
 * compute stream; back-to-back ones are one transfer) into *P: comp_ns[j]
 * the time from the end of transfer j (the range's start for j = 0) to the
 * start of transfer j+1 (the range's end for j = n). The arrays are
 * malloc'ed (freed by pass_free). TS_ENOMEM. */
static int split_pass(const plan *pl, plan_range R, ep_pair_pass *P)
{
    size_t n_segs = 0;
    for (uint32_t i = 0; i < R.n; i++)
        n_segs += pl->steps[R.first + i].seg_n;
    int64_t *comp = malloc((n_segs + 1) * sizeof *comp), *comm = malloc((n_segs + 1) * sizeof *comm);
    *P = (ep_pair_pass){0, comp, comm, NULL};
    if (!comp || !comm)
        return TS_ENOMEM;
    int64_t base = 0, cursor = 0;
    int n = 0;
    for (uint32_t i = 0; i < R.n; i++) {
        const plan_step *x = &pl->steps[R.first + i];
        for (uint32_t k = 0; k < x->seg_n; k++) {
            const plan_seg *g = &pl->segs[x->seg_first + k];
            if (g->cat != PLAN_CAT_EP || g->stream == PLAN_STREAM_COMPUTE)
                continue;
            int64_t t0 = base + g->offset_ns, t1 = t0 + g->dur_ns;
            if (n > 0 && t0 <= cursor) { /* back to back with the previous transfer */
                comm[n - 1] += t1 > cursor ? t1 - cursor : 0;
            } else {
                comp[n] = t0 > cursor ? t0 - cursor : 0;
                comm[n++] = g->dur_ns;
            }
            cursor = t1 > cursor ? t1 : cursor;
        }
        base += x->dur_ns;
    }
    comp[n] = base > cursor ? base - cursor : 0;
    P->n = n;
    return TS_OK;
}

static void pass_free(ep_pair_pass *P)
{
    free((void *)P->comp_ns);
    free((void *)P->comm_ns);
    free((void *)P->wgrad_ns);
}

int ep_pair_exposed(const plan *pl, int sf, int sb, int kb, int sms, bool delay_wgrad, int64_t *a_f, int64_t *a_b,
                    int64_t *exp_f, int64_t *exp_b, ts_err *err)
{
    const plan_stage *F = &pl->stages[sf], *B = &pl->stages[sb];
    ep_pair_pass pf, pb, pi = {0, NULL, NULL, NULL};
    int rc = split_pass(pl, F->pass[PLAN_PASS_F], &pf);
    if (rc == TS_OK)
        rc = split_pass(pl, B->pass[kb], &pb);
    else
        pb = pi;
    /* the backward's weight-gradient part of each compute span: the whole
     * backward's less the input-gradient pass's (the same transfers) */
    if (rc == TS_OK && kb == PLAN_PASS_B && B->pass[PLAN_PASS_I].n)
        rc = split_pass(pl, B->pass[PLAN_PASS_I], &pi);
    if (rc == TS_OK && pi.n == pb.n && pi.comp_ns) {
        int64_t *w = malloc(((size_t)pb.n + 1) * sizeof *w);
        if (!w)
            rc = TS_ENOMEM;
        for (int j = 0; w && j <= pb.n; j++)
            w[j] = pb.comp_ns[j] > pi.comp_ns[j] ? pb.comp_ns[j] - pi.comp_ns[j] : 0;
        pb.wgrad_ns = w;
    }
    if (rc == TS_OK) {
        *a_f = range_ep_ns(pl, F->pass[PLAN_PASS_F]);
        *a_b = range_ep_ns(pl, B->pass[kb]);
        int64_t e_f = 0, e_b = 0;
        rc = ep_pair_run(&pf, &pb, sms, delay_wgrad, &e_f, &e_b, err);
        /* never more than the pass had alone */
        *exp_f = e_f < *a_f ? e_f : *a_f;
        *exp_b = e_b < *a_b ? e_b : *a_b;
    } else {
        rc = err_set(err, TS_ENOMEM, "plan: out of memory for the overlapped pairs");
    }
    pass_free(&pf);
    pass_free(&pb);
    pass_free(&pi);
    return rc;
}

/* Give step x (shortened from was_ns) its own copy of its memory events,
 * their offsets scaled by x->dur_ns / was_ns so that they stay inside it in
 * the same order. */
static int copy_mem_scaled(plan *pl, plan_step *x, int64_t was_ns)
{
    uint32_t first = pl->n_mem_evs;
    for (uint32_t k = 0; k < x->mem_n; k++) {
        if (pl->n_mem_evs == pl->cap_mem_evs &&
            grow_to((void **)&pl->mem_evs, &pl->cap_mem_evs, (size_t)pl->n_mem_evs + 1, 256, sizeof *pl->mem_evs))
            return TS_ENOMEM;
        plan_mem_ev ev = pl->mem_evs[x->mem_first + k];
        if (was_ns > 0)
            ev.offset_ns = (int64_t)((double)ev.offset_ns * (double)x->dur_ns / (double)was_ns);
        pl->mem_evs[pl->n_mem_evs++] = ev;
    }
    x->mem_first = first;
    return TS_OK;
}

/* Append a copy of range R with hidden_ns of its exposed all-to-all time
 * taken out, step by step; *out = the copy. */
static int copy_less(plan *pl, plan_range R, int64_t hidden_ns, plan_range *out)
{
    out->first = pl->n_steps;
    out->n = R.n;
    for (uint32_t i = 0; i < R.n; i++) {
        plan_step x = pl->steps[R.first + i]; /* a copy: pushing may move the steps */
        int64_t cut = hidden_ns < x.ep_exposed_ns ? hidden_ns : x.ep_exposed_ns;
        if (cut < 0)
            cut = 0;
        int64_t was_ns = x.dur_ns;
        x.dur_ns -= cut;
        x.tp_exposed_ns -= cut;
        x.ep_exposed_ns -= cut;
        hidden_ns -= cut;
        if (cut > 0 && x.mem_n && copy_mem_scaled(pl, &x, was_ns))
            return TS_ENOMEM;
        uint32_t id;
        if (plan_push_step(pl, &x, &id))
            return TS_ENOMEM;
    }
    return TS_OK;
}

static int add_pair(plan *pl, int sf, int sb, int kb, int sms, bool delay_wgrad, ts_err *err)
{
    const plan_stage *F = &pl->stages[sf], *B = &pl->stages[sb];
    if (ep_pair_find(pl, sf, sb, kb) ||
        (range_ep_ns(pl, F->pass[PLAN_PASS_F]) <= 0 && range_ep_ns(pl, B->pass[kb]) <= 0))
        return TS_OK;
    int64_t a_f, a_b, e_f, e_b;
    int rc = ep_pair_exposed(pl, sf, sb, kb, sms, delay_wgrad, &a_f, &a_b, &e_f, &e_b, err);
    if (rc)
        return rc;
    plan_ep_pair P = {.sf = sf, .sb = sb, .kb = kb};
    plan_range fin = B->pass_final[kb];
    rc = copy_less(pl, F->pass[PLAN_PASS_F], a_f - e_f, &P.f);
    if (rc == TS_OK)
        rc = copy_less(pl, B->pass[kb], a_b - e_b, &P.b);
    if (rc == TS_OK && fin.n)
        rc = copy_less(pl, fin, a_b - e_b, &P.b_final);
    plan_ep_pair *grown = rc == TS_OK ? realloc(pl->ep_pairs, (pl->n_ep_pairs + 1) * sizeof *grown) : NULL;
    if (!grown)
        return err_set(err, TS_ENOMEM, "plan: out of memory for the overlapped pairs");
    pl->ep_pairs = grown;
    pl->ep_pairs[pl->n_ep_pairs++] = P;
    return TS_OK;
}

int ep_pair_each(const sched *s, int n_stages, ep_pair_fn fn, void *ctx, ts_err *err)
{
    int rc = TS_OK;
    for (int r = 0; r < s->p && rc == TS_OK; r++) {
        size_t n = s->n_actions[r];
        int32_t *partner = malloc((n ? n : 1) * sizeof *partner);
        if (!partner)
            return err_set(err, TS_ENOMEM, "plan: out of memory for the overlapped pairs");
        ep_pair_mark(s, r, partner);
        for (size_t i = 0; i < n && rc == TS_OK; i++) {
            if (partner[i] < 0 || (size_t)partner[i] < i)
                continue;
            const sched_action *a = &s->actions[r][i], *b = &s->actions[r][partner[i]];
            const sched_action *f = is_fwd(a) ? a : b, *bw = is_fwd(a) ? b : a;
            int sf = sched_stage_of(s, r, f->chunk), sb = sched_stage_of(s, r, bw->chunk);
            if (sf < 0 || sb < 0 || sf >= n_stages || sb >= n_stages)
                continue; /* lowering names the action */
            rc = fn(ctx, sf, sb, bw->kind == ACT_B ? PLAN_PASS_B : PLAN_PASS_I, err);
        }
        free(partner);
    }
    return rc;
}

typedef struct {
    plan *pl;
    int sms;
    bool delay_wgrad;
} build_ctx;

static int build_one(void *ctx, int sf, int sb, int kb, ts_err *err)
{
    const build_ctx *C = ctx;
    return add_pair(C->pl, sf, sb, kb, C->sms, C->delay_wgrad, err);
}

int ep_pair_build(plan *pl, const sched *s, int sms, bool delay_wgrad, ts_err *err)
{
    build_ctx C = {pl, sms, delay_wgrad};
    return ep_pair_each(s, pl->n_stages, build_one, &C, err);
}

const plan_ep_pair *ep_pair_find(const plan *pl, int sf, int sb, int kb)
{
    for (uint32_t i = 0; i < pl->n_ep_pairs; i++)
        if (pl->ep_pairs[i].sf == sf && pl->ep_pairs[i].sb == sb && pl->ep_pairs[i].kb == kb)
            return &pl->ep_pairs[i];
    return NULL;
}
