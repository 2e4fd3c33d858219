/* ep_pair — pairs of overlapped forward and backward passes (see ep_pair.h). */
#include "sim/core/ep_pair.h"

#include <stdlib.h>

#include "sim/core/overlap.h"
#include "sim/util/grow.h"

#define FLAG "--overlap-moe-expert-parallel-comm"

int ep_pair_check(const config *c, sched_kind k, int v, bool flows, ts_err *err)
{
    const parallel_config *P = &c->par;
    const moe_config *M = &c->moe;
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
    if (flows)
        return err_set(err, TS_EINVAL,
                       FLAG ": not modelled in the flow modes (each collective a task of the network model); "
                            "valid in the default costed mode");
    bool ok =
        (k == SCHED_INTERLEAVED && (v > 1 || P->pp == 1)) || k == SCHED_DUALPIPEV || (k == SCHED_1F1B && P->pp == 1);
    if (!ok)
        return err_set(err, TS_EINVAL,
                       FLAG ": needs virtual pipelining with --pipeline-model-parallel-size %d > 1 (Megatron-LM): "
                            "valid --schedule interleaved (with --num-layers-per-virtual-pipeline-stage or "
                            "--num-virtual-stages-per-pipeline-rank) or dualpipev, or 1f1b at "
                            "--pipeline-model-parallel-size 1 (got %s with %d chunk(s) per rank)",
                       P->pp, sched_kind_name(k), v);
    return TS_OK;
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
    bool marks = false;
    for (size_t i = 0; i < n; i++) {
        partner[i] = -1;
        marks = marks || acts[i].overlap;
    }
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

void ep_pair_times(int64_t a_f, int64_t c_f, int64_t a_b, int64_t c_b, int sms, int64_t *exp_f, int64_t *exp_b)
{
    if (c_f < 0)
        c_f = 0;
    if (c_b < 0)
        c_b = 0;
    *exp_f = overlap_shared_phase_ns(a_f, c_b, sms, EP_PAIR_COMM_SMS) - c_b;
    *exp_b = overlap_shared_phase_ns(a_b, c_f, sms, EP_PAIR_COMM_SMS) - c_f;
}

/* The all-to-all time exposed in range R and its compute time. */
static void range_times(const plan *pl, plan_range R, int64_t *a, int64_t *c)
{
    *a = *c = 0;
    for (uint32_t i = 0; i < R.n; i++) {
        const plan_step *x = &pl->steps[R.first + i];
        *a += x->ep_exposed_ns;
        *c += x->dur_ns - x->tp_exposed_ns;
    }
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

static int add_pair(plan *pl, int sf, int sb, int kb, int sms, ts_err *err)
{
    if (ep_pair_find(pl, sf, sb, kb))
        return TS_OK;
    const plan_stage *F = &pl->stages[sf], *B = &pl->stages[sb];
    int64_t a_f, c_f, a_b, c_b, e_f, e_b;
    range_times(pl, F->pass[PLAN_PASS_F], &a_f, &c_f);
    range_times(pl, B->pass[kb], &a_b, &c_b);
    if (a_f <= 0 && a_b <= 0)
        return TS_OK;
    ep_pair_times(a_f, c_f, a_b, c_b, sms, &e_f, &e_b);
    plan_ep_pair P = {.sf = sf, .sb = sb, .kb = kb};
    plan_range fin = B->pass_final[kb];
    int rc = copy_less(pl, F->pass[PLAN_PASS_F], a_f - e_f, &P.f);
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

int ep_pair_build(plan *pl, const sched *s, int sms, ts_err *err)
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
            if (sf < 0 || sb < 0 || sf >= pl->n_stages || sb >= pl->n_stages)
                continue; /* lowering names the action */
            rc = add_pair(pl, sf, sb, bw->kind == ACT_B ? PLAN_PASS_B : PLAN_PASS_I, sms, err);
        }
        free(partner);
    }
    return rc;
}

const plan_ep_pair *ep_pair_find(const plan *pl, int sf, int sb, int kb)
{
    for (uint32_t i = 0; i < pl->n_ep_pairs; i++)
        if (pl->ep_pairs[i].sf == sf && pl->ep_pairs[i].sb == sb && pl->ep_pairs[i].kb == kb)
            return &pl->ep_pairs[i];
    return NULL;
}
