/* lower — schedule actions to engine tasks (see lower.h). */
#include "sim/core/lower.h"

#include <stdlib.h>
#include <string.h>

#include "sim/core/ep_pair.h"
#include "sim/core/ep_pair_steps.h"
#include "sim/sched/sched_dep.h"

enum { DIR_F = 0, DIR_B = 1 };

typedef struct {
    const plan *pl;
    const sched *s;
    engine *e;
    ts_err *err;
    int m, n_stages;
    uint32_t *send_tab; /* [dir][receiving stage][mb] -> send task */
    uint32_t *recv_tab; /* [dir][receiving stage][mb] -> receive task */
    uint32_t *fwd_last; /* [stage][mb] -> last task of F */
    uint32_t *bwd_last; /* [stage][mb] -> last task of B or I */
    uint32_t *scratch;  /* task ids of the pass being instantiated */
    int *rank_of;       /* [stage] rank that runs it */
    /* per rank (ranks are lowered one action at a time, round robin, so
     * that tasks running at the same simulated time sit close in memory) */
    size_t *final_bwd;    /* [rank*v + chunk] action index of the chunk's last B/W (SIZE_MAX: none) */
    uint32_t *grads_done; /* [rank*v + chunk] last task of that backward */
    bool *buckets_sent;   /* [rank*v + chunk] its buckets were issued during the backward */
    bool *reduced;        /* [rank*v + chunk] REDUCE_GRAD seen */
    uint32_t *last_dp;    /* [rank] last task on the rank's DP stream */
    uint32_t *last_comp;  /* [rank] last task on the rank's compute stream (FSDP gathers wait for it) */
    uint32_t emb_task[2]; /* embedding-gradient all-reduce on the first / last stage's rank */
    uint32_t emb_pred[2]; /* what each waits for locally (gradients ready) */
    bool *optim_seen;     /* [rank] */
    const int *rank_map;  /* pipeline rank -> engine rank (lower_sched_ranks); NULL = identity */
    int32_t *partner;     /* with overlapped pairs (plan.n_ep_pairs): ep_pair_mark of every rank, rank r's
                             at partner_at[r]; NULL without */
    size_t *partner_at;
    /* the flow modes (plan.ep_pair_steps): */
    bool *done;               /* [partner_at[r] + i] action i of rank r already lowered with its pair */
    uint32_t *scratch2;       /* task ids of the second pass of a pair */
    uint32_t *bounds;         /* 2 x 2 (max_pass_steps + 1): each pass's spans and transfers (ep_pair_steps_split) */
    bool pair_a2a_own_stream; /* lowering a pair's own steps: its all-to-alls go on PLAN_STREAM_EP */
} lowering;

static size_t tab_idx(const lowering *L, int dir, int stage, int mb)
{
    return ((size_t)dir * (size_t)L->n_stages + (size_t)stage) * (size_t)L->m + (size_t)mb;
}

/* The engine stream of plan step x: its own, but a pair's all-to-alls in the
 * flow modes run on the combined layer's communication stream
 * (PLAN_STREAM_EP; ep_pair_steps.h), its TP and CP collectives staying on
 * the TP stream; the network model still times them by the step. */
static int task_stream(const lowering *L, const plan_step *x)
{
    return L->pair_a2a_own_stream && x->stream == PLAN_STREAM_TP && x->cat == PLAN_CAT_EP ? PLAN_STREAM_EP : x->stream;
}

static int add_task(lowering *L, int rank, uint32_t step, int32_t mb, uint32_t *out)
{
    const plan_step *x = &L->pl->steps[step];
    int stream = task_stream(L, x);
    int rc = engine_task_add(L->e, L->rank_map ? L->rank_map[rank] : rank, stream, x->dur_ns, step, mb, out, L->err);
    bool mem = x->alloc_bytes || x->free_bytes || x->batch_alloc_bytes || x->batch_free_bytes;
    if (rc == TS_OK && mem) /* the memory timeline needs its hooks */
        rc = engine_task_mark(L->e, *out, L->err);
    if (rc == TS_OK && stream == PLAN_STREAM_COMPUTE)
        L->last_comp[rank] = *out;
    return rc;
}

/* A pass being instantiated (pass_open, then pass_emit for its steps in
 * order): the steps R of stage st's pass k for micro-batch mb on rank,
 * ids[i] the task of step R.first + i. */
typedef struct {
    int rank, st;
    int32_t mb;
    plan_range R;
    uint32_t input, gather; /* what the roots wait for (ENGINE_NO_TASK: none) */
    uint32_t input2;        /* an overlapped pair's combined step: the partner's input (ENGINE_NO_TASK: none) */
    bool buckets;           /* issue gradient buckets as they complete */
    int next_bucket;
    uint32_t *ids;
    uint32_t last;      /* the last task emitted (ENGINE_NO_TASK: none yet) */
    uint32_t last_comm; /* the last task emitted off the compute stream (ENGINE_NO_TASK: none yet) */
    int last_comm_stream;
} pass_run;

/* Start one pass of stage st for micro-batch mb on rank (see run_pass). */
static int pass_open(lowering *L, int rank, int st, int k, int32_t mb, uint32_t input, bool final,
                     const plan_ep_pair *pair, uint32_t *ids, pass_run *P)
{
    const plan *pl = L->pl;
    const plan_stage *S = &pl->stages[st];
    plan_range R = final && S->pass_final[k].n ? S->pass_final[k] : S->pass[k];
    if (pair) /* overlapped with its partner: the variant of the same steps */
        R = k == PLAN_PASS_F ? pair->f : final && pair->b_final.n ? pair->b_final : pair->b;
    *P = (pass_run){.rank = rank,
                    .st = st,
                    .mb = mb,
                    .R = R,
                    .input = input,
                    .gather = ENGINE_NO_TASK,
                    .input2 = ENGINE_NO_TASK,
                    .buckets = final && pl->overlap_grad_reduce && pl->d > 1 && S->n_buckets > 0 &&
                               (k == PLAN_PASS_B || k == PLAN_PASS_W),
                    .ids = ids,
                    .last = ENGINE_NO_TASK,
                    .last_comm = ENGINE_NO_TASK};
    if (S->fsdp_gather[k] != PLAN_NO_STEP && R.n > 0) {
        /* FSDP: the exposed part of the pass's parameter gathers, after the
         * rank's previous compute, before the pass's first ops */
        uint32_t prev = L->last_comp[rank], ag;
        int rc;
        if ((rc = add_task(L, rank, S->fsdp_gather[k], mb, &ag)) ||
            (prev != ENGINE_NO_TASK && (rc = engine_dep_add(L->e, prev, ag, L->err))))
            return rc;
        if (P->input == ENGINE_NO_TASK)
            P->input = ag;
        else
            P->gather = ag;
    }
    return TS_OK;
}

/* Emit step R.first + i of pass P (its dependencies emitted before it). */
static int pass_emit(lowering *L, pass_run *P, uint32_t i)
{
    const plan *pl = L->pl;
    uint32_t step = P->R.first + i;
    const plan_step *x = &pl->steps[step];
    uint32_t id;
    int rc;
    if ((rc = add_task(L, P->rank, step, P->mb, &id)))
        return rc;
    P->ids[i] = id;
    for (int j = 0; j < 2; j++)
        if (x->dep[j] >= 0 && (rc = engine_dep_add(L->e, P->ids[x->dep[j]], id, L->err)))
            return rc;
    if (x->root && P->input != ENGINE_NO_TASK && (rc = engine_dep_add(L->e, P->input, id, L->err)))
        return rc;
    if (x->root && P->gather != ENGINE_NO_TASK && (rc = engine_dep_add(L->e, P->gather, id, L->err)))
        return rc;
    if (x->root && P->input2 != ENGINE_NO_TASK && P->input2 != P->input &&
        (rc = engine_dep_add(L->e, P->input2, id, L->err)))
        return rc;
    /* the plan orders a pass's collectives by their one stream: where a
     * pair's all-to-alls leave it, the order becomes a dependency */
    int stream = task_stream(L, x);
    if (L->pair_a2a_own_stream && stream != PLAN_STREAM_COMPUTE) {
        if (P->last_comm != ENGINE_NO_TASK && P->last_comm_stream != stream &&
            (rc = engine_dep_add(L->e, P->last_comm, id, L->err)))
            return rc;
        P->last_comm = id;
        P->last_comm_stream = stream;
    }
    const plan_stage *S = &pl->stages[P->st];
    for (; P->buckets && P->next_bucket <= x->dp_bucket; P->next_bucket++) {
        uint32_t dp;
        if ((rc = add_task(L, P->rank, S->dp_bucket0 + (uint32_t)P->next_bucket, -1, &dp)) ||
            (rc = engine_dep_add(L->e, id, dp, L->err)))
            return rc;
        L->last_dp[P->rank] = dp;
    }
    P->last = id;
    return TS_OK;
}

/* Instantiate one pass of stage st for micro-batch mb on rank. Roots wait
 * for input (ENGINE_NO_TASK: none). final: this is the chunk's last backward,
 * so gradient buckets are issued as they complete (overlap). *last gets the
 * pass's last task (ENGINE_NO_TASK for an empty pass). */
static int run_pass(lowering *L, int rank, int st, int k, int32_t mb, uint32_t input, bool final,
                    const plan_ep_pair *pair, uint32_t *last)
{
    pass_run P;
    int rc = pass_open(L, rank, st, k, mb, input, final, pair, L->scratch, &P);
    for (uint32_t i = 0; rc == TS_OK && i < P.R.n; i++)
        rc = pass_emit(L, &P, i);
    *last = P.last;
    return rc;
}

static int act_err(lowering *L, int rank, size_t i, const sched_action *a, const char *what)
{
    return err_set(L->err, TS_EINVAL, "schedule: rank %d action %zu (%s micro-batch %d chunk %d): %s", rank, i,
                   sched_act_name((sched_act_kind)a->kind), a->mb, a->chunk, what);
}

static int reduce_chunk(lowering *L, int rank, int chunk)
{
    const plan *pl = L->pl;
    int st = sched_stage_of(L->s, rank, chunk);
    int rc;
    size_t rc_i = (size_t)rank * (size_t)L->s->v + (size_t)chunk;
    L->reduced[rc_i] = true;
    if (pl->d <= 1 || L->buckets_sent[rc_i])
        return TS_OK;
    uint32_t dp;
    if ((rc = add_task(L, rank, pl->stages[st].dp_whole, -1, &dp)))
        return rc;
    if (L->grads_done[rc_i] != ENGINE_NO_TASK && (rc = engine_dep_add(L->e, L->grads_done[rc_i], dp, L->err)))
        return rc;
    L->last_dp[rank] = dp;
    return TS_OK;
}

static int optim(lowering *L, int rank)
{
    const plan *pl = L->pl;
    int rc;
    if (pl->optim[rank] == PLAN_NO_STEP)
        return TS_OK;
    uint32_t id;
    /* NOLINTNEXTLINE(clang-analyzer-core.UndefinedBinaryOperatorResult): lower_into sets all n_stages */
    int side = rank == L->rank_of[0] ? 0 : rank == L->rank_of[L->n_stages - 1] ? 1 : -1;
    if (pl->emb_allreduce != PLAN_NO_STEP && side >= 0) {
        /* gradients ready: the last reduction, or the embedding chunk's last backward */
        int chunk, r_;
        sched_rank_chunk_of(L->s, side == 0 ? 0 : L->n_stages - 1, &r_, &chunk);
        uint32_t pred = L->last_dp[rank] != ENGINE_NO_TASK
                            ? L->last_dp[rank]
                            : L->grads_done[(size_t)rank * (size_t)L->s->v + (size_t)chunk];
        uint32_t ar;
        if ((rc = add_task(L, rank, pl->emb_allreduce, -1, &ar)))
            return rc;
        if (pred != ENGINE_NO_TASK && (rc = engine_dep_add(L->e, pred, ar, L->err)))
            return rc;
        L->emb_task[side] = ar;
        L->emb_pred[side] = pred;
        L->last_dp[rank] = ar; /* the other side's readiness is added after lowering */
    }
    if ((rc = add_task(L, rank, pl->optim[rank], -1, &id)))
        return rc;
    if (L->last_dp[rank] != ENGINE_NO_TASK && (rc = engine_dep_add(L->e, L->last_dp[rank], id, L->err)))
        return rc;
    if (pl->param_gather[rank] != PLAN_NO_STEP) {
        uint32_t ag;
        if ((rc = add_task(L, rank, pl->param_gather[rank], -1, &ag)) || (rc = engine_dep_add(L->e, id, ag, L->err)))
            return rc;
        L->last_dp[rank] = ag;
    }
    return TS_OK;
}

/* The task compute action i of rank r waits for (*in, ENGINE_NO_TASK for
 * none): the last task of the producing pass when it ran on the rank, else
 * the RECV that brings its input; TS_EINVAL if neither came before it. */
static int input_task(lowering *L, int r, size_t i, const sched_action *a, uint32_t *in)
{
    sched_dep d;
    *in = ENGINE_NO_TASK;
    if (sched_dep_input(L->s, r, a, &d) == SCHED_DEP_NONE)
        return TS_OK;
    if (d.via == SCHED_DEP_LOCAL) /* V placement: same rank */
        *in = (d.grad ? L->bwd_last : L->fwd_last)[(size_t)d.peer_stage * L->m + a->mb];
    else
        *in = L->recv_tab[tab_idx(L, d.grad ? DIR_B : DIR_F, d.stage, a->mb)];
    if (*in != ENGINE_NO_TASK)
        return TS_OK;
    return act_err(L, r, i, a,
                   d.grad ? "no RECV_B (or local backward) of its output gradient before it"
                          : "no RECV_F (or local forward) of its input before it");
}

/* Before the first action of rank r: find each chunk's last backward. */
static void rank_prepare(lowering *L, int r)
{
    const sched_action *acts = L->s->actions[r];
    size_t n = L->s->n_actions[r], base = (size_t)r * (size_t)L->s->v;
    int v = L->s->v;
    L->last_dp[r] = ENGINE_NO_TASK;
    L->last_comp[r] = ENGINE_NO_TASK;
    L->optim_seen[r] = false;
    for (int c = 0; c < v; c++) {
        L->final_bwd[base + c] = SIZE_MAX;
        L->grads_done[base + c] = ENGINE_NO_TASK;
        L->buckets_sent[base + c] = L->reduced[base + c] = false;
    }
    for (size_t i = 0; i < n; i++) {
        const sched_action *a = &acts[i];
        if ((a->kind == ACT_B || a->kind == ACT_W || a->kind == ACT_I) && a->chunk >= 0 && a->chunk < v) {
            size_t prev = L->final_bwd[base + a->chunk];
            if (a->kind != ACT_I || prev == SIZE_MAX || acts[prev].kind == ACT_I)
                L->final_bwd[base + a->chunk] = i;
        }
    }
}

/* The overlapped pair's variants for compute action i of rank r (NULL:
 * not paired, or the pair hides nothing). */
static const plan_ep_pair *pair_of(const lowering *L, int r, size_t i)
{
    if (!L->partner)
        return NULL;
    int32_t j = L->partner[L->partner_at[r] + i];
    if (j < 0)
        return NULL;
    const sched_action *a = &L->s->actions[r][i], *b = &L->s->actions[r][j];
    const sched_action *f = a->kind == ACT_F ? a : b, *bw = a->kind == ACT_F ? b : a;
    return ep_pair_find(L->pl, sched_stage_of(L->s, r, f->chunk), sched_stage_of(L->s, r, bw->chunk),
                        bw->kind == ACT_B ? PLAN_PASS_B : PLAN_PASS_I);
}

static int rank_action(lowering *L, int r, size_t i);

/* The pass index of compute action a (PLAN_PASS_F, _B, _I or _W). */
static int pass_of(const sched_action *a)
{
    return a->kind == ACT_F   ? PLAN_PASS_F
           : a->kind == ACT_B ? PLAN_PASS_B
           : a->kind == ACT_I ? PLAN_PASS_I
                              : PLAN_PASS_W;
}

/* After the pass of compute action i (a, stage st) of rank r, ended by
 * task last: what later actions look up. */
static void pass_done(lowering *L, int r, size_t i, const sched_action *a, int st, uint32_t last)
{
    size_t base = (size_t)r * (size_t)L->s->v;
    if (a->kind == ACT_F) {
        L->fwd_last[(size_t)st * L->m + a->mb] = last;
        return;
    }
    if (a->kind != ACT_W)
        L->bwd_last[(size_t)st * L->m + a->mb] = last;
    if (L->final_bwd[base + a->chunk] == i) {
        L->grads_done[base + a->chunk] = last;
        L->buckets_sent[base + a->chunk] =
            L->pl->overlap_grad_reduce && L->pl->d > 1 && L->pl->stages[st].n_buckets > 0 && a->kind != ACT_I;
    }
}

/* Emit steps [from, to) of pass P. */
static int emit_range(lowering *L, pass_run *P, uint32_t from, uint32_t to)
{
    int rc = TS_OK;
    for (uint32_t i = from; rc == TS_OK && i < to; i++)
        rc = pass_emit(L, P, i);
    return rc;
}

/* An overlapped pair (plan.ep_pair_combined) as Megatron-core's combined
 * step: lower compute action i of rank r together with its partner j > i
 * (ep_pair_mark): the receives between them first (the partner's input),
 * then the two passes, whose first steps wait for both inputs; both
 * outputs leave at the pair's end (its last task). The default mode runs
 * the two passes' variants (plan.ep_pairs) in action order; the flow modes
 * (plan.ep_pair_steps) the passes' own steps in the order of ep_pair_run's
 * streams: compute d_0 c_0 d_1 c_1 ..., the communication stream B_1 A_1
 * B_2 A_2 ... (the backward's span, then the forward's; its transfer, then
 * the forward's), each step waiting for its own pass's steps, so the engine
 * and the network model time the overlap. A pair with no transfer runs in
 * action order. */
static int lower_pair(lowering *L, int r, size_t i, size_t j)
{
    const sched_action *acts = L->s->actions[r];
    int rc = TS_OK;
    for (size_t k = i + 1; k < j && rc == TS_OK; k++)
        if (acts[k].kind == ACT_RECV_F || acts[k].kind == ACT_RECV_B) {
            rc = rank_action(L, r, k);
            L->done[L->partner_at[r] + k] = true;
        }
    size_t idx[2] = {i, j};
    pass_run P[2];
    int st[2];
    uint32_t *ids[2] = {L->scratch, L->scratch2};
    size_t base = (size_t)r * (size_t)L->s->v;
    uint32_t in[2] = {ENGINE_NO_TASK, ENGINE_NO_TASK};
    for (int q = 0; q < 2 && rc == TS_OK; q++) {
        const sched_action *a = &acts[idx[q]];
        st[q] = sched_stage_of(L->s, r, a->chunk);
        if ((rc = input_task(L, r, idx[q], a, &in[q])) == TS_OK)
            rc = pass_open(L, r, st[q], pass_of(a), a->mb, in[q], L->final_bwd[base + a->chunk] == idx[q],
                           pair_of(L, r, idx[q]), ids[q], &P[q]);
    }
    if (rc)
        return rc;
    /* the combined step starts once both inputs are there */
    P[0].input2 = in[1];
    P[1].input2 = in[0];
    L->done[L->partner_at[r] + j] = true;
    int fq = acts[i].kind == ACT_F ? 0 : 1, bq = 1 - fq;
    uint32_t *bf = L->bounds, *bb = L->bounds + 2 * ((size_t)L->pl->max_pass_steps + 1);
    int nf = 0, nb = 0;
    if (L->pl->ep_pair_steps) {
        nf = ep_pair_steps_split(L->pl, P[fq].R, bf);
        nb = ep_pair_steps_split(L->pl, P[bq].R, bb);
    }
    if (nf == 0 && nb == 0) { /* the default mode (variants with the hidden time taken out), or nothing to
                                 overlap: in action order */
        rc = emit_range(L, &P[0], 0, P[0].R.n);
        if (rc == TS_OK)
            rc = emit_range(L, &P[1], 0, P[1].R.n);
    }
    L->pair_a2a_own_stream = nf || nb;
    for (int k = 0, n = nf > nb ? nf : nb; (nf || nb) && k <= n && rc == TS_OK; k++) {
        if (k > 0 && k <= nb)
            rc = emit_range(L, &P[bq], bb[2 * k - 1], bb[2 * k]);
        if (rc == TS_OK && k > 0 && k <= nf)
            rc = emit_range(L, &P[fq], bf[2 * k - 1], bf[2 * k]);
        if (rc == TS_OK && k <= nb)
            rc = emit_range(L, &P[bq], bb[2 * k], bb[2 * k + 1]);
        if (rc == TS_OK && k <= nf)
            rc = emit_range(L, &P[fq], bf[2 * k], bf[2 * k + 1]);
    }
    L->pair_a2a_own_stream = false;
    /* both outputs leave at the pair's end: its last task (ids grow) */
    uint32_t end = P[0].last == ENGINE_NO_TASK                            ? P[1].last
                   : P[1].last == ENGINE_NO_TASK || P[0].last > P[1].last ? P[0].last
                                                                          : P[1].last;
    for (int q = 0; q < 2 && rc == TS_OK; q++)
        pass_done(L, r, idx[q], &acts[idx[q]], st[q], end);
    return rc;
}

/* Lower action i of rank r. */
static int rank_action(lowering *L, int r, size_t i)
{
    const sched *s = L->s;
    const plan *pl = L->pl;
    const sched_action *a = &s->actions[r][i];
    int v = s->v, last_stage = L->n_stages - 1;
    size_t base = (size_t)r * (size_t)v;
    int rc = TS_OK;
    bool needs_mb = a->kind != ACT_REDUCE_GRAD && a->kind != ACT_OPTIM;
    if (a->kind != ACT_OPTIM && (a->chunk < 0 || a->chunk >= v))
        return act_err(L, r, i, a, "chunk out of range");
    if (needs_mb && (a->mb < 0 || a->mb >= L->m))
        return act_err(L, r, i, a, "micro-batch out of range");
    int st = a->kind == ACT_OPTIM ? -1 : sched_stage_of(s, r, a->chunk);
    /* S is set for every kind but ACT_OPTIM: the chunk was checked above and
     * sched_stage_of maps a rank and a chunk in range to a stage >= 0. */
    const plan_stage *S = st >= 0 ? &pl->stages[st] : NULL;
    uint32_t id, last;
    switch ((sched_act_kind)a->kind) {
    case ACT_F: {
        uint32_t in;
        if (L->done && L->partner[L->partner_at[r] + i] > (int32_t)i)
            return lower_pair(L, r, i, (size_t)L->partner[L->partner_at[r] + i]);
        if ((rc = input_task(L, r, i, a, &in)))
            return rc;
        if ((rc = run_pass(L, r, st, PLAN_PASS_F, a->mb, in, false, pair_of(L, r, i), &last)))
            return rc;
        pass_done(L, r, i, a, st, last);
        break;
    }
    case ACT_B:
    case ACT_I:
    case ACT_W: {
        uint32_t in;
        if (L->done && a->kind != ACT_W && L->partner[L->partner_at[r] + i] > (int32_t)i)
            return lower_pair(L, r, i, (size_t)L->partner[L->partner_at[r] + i]);
        if ((rc = input_task(L, r, i, a, &in))) /* none for W */
            return rc;
        bool final = L->final_bwd[base + a->chunk] == i;
        if ((rc = run_pass(L, r, st, pass_of(a), a->mb, in, final, a->kind == ACT_W ? NULL : pair_of(L, r, i), &last)))
            return rc;
        pass_done(L, r, i, a, st, last);
        break;
    }
    case ACT_SEND_F:
    case ACT_SEND_B: {
        bool fwd = a->kind == ACT_SEND_F;
        int to = fwd ? st + 1 : st - 1;
        if (to < 0 || to > last_stage)
            return act_err(L, r, i, a, "sends beyond the first or last stage");
        if (a->peer != L->rank_of[to])
            return act_err(L, r, i, a, "peer is not the rank of the neighbour stage");
        uint32_t src = (fwd ? L->fwd_last : L->bwd_last)[(size_t)st * L->m + a->mb];
        if (src == ENGINE_NO_TASK)
            return act_err(L, r, i, a, fwd ? "comes before its F" : "comes before its B or I");
        size_t k = tab_idx(L, fwd ? DIR_F : DIR_B, to, a->mb);
        if (L->send_tab[k] != ENGINE_NO_TASK)
            return act_err(L, r, i, a, "sent twice");
        /* NOLINTNEXTLINE(clang-analyzer-core.NullDereference): see S */
        if ((rc = add_task(L, r, fwd ? S->send_f : S->send_b, a->mb, &id)) ||
            (rc = engine_dep_add(L->e, src, id, L->err)))
            return rc;
        L->send_tab[k] = id;
        if (L->recv_tab[k] != ENGINE_NO_TASK) /* match now, while both are in cache */
            rc = engine_task_join(L->e, L->recv_tab[k], id, L->err);
        break;
    }
    case ACT_RECV_F:
    case ACT_RECV_B: {
        bool fwd = a->kind == ACT_RECV_F;
        int from = fwd ? st - 1 : st + 1;
        if (from < 0 || from > last_stage)
            return act_err(L, r, i, a, "receives from beyond the first or last stage");
        if (a->peer != L->rank_of[from])
            return act_err(L, r, i, a, "peer is not the rank of the neighbour stage");
        size_t k = tab_idx(L, fwd ? DIR_F : DIR_B, st, a->mb);
        if (L->recv_tab[k] != ENGINE_NO_TASK)
            return act_err(L, r, i, a, "received twice");
        /* NOLINTNEXTLINE(clang-analyzer-core.NullDereference): see S */
        if ((rc = add_task(L, r, fwd ? S->recv_f : S->recv_b, a->mb, &id)))
            return rc;
        L->recv_tab[k] = id;
        if (L->send_tab[k] != ENGINE_NO_TASK)
            rc = engine_task_join(L->e, id, L->send_tab[k], L->err);
        break;
    }
    case ACT_REDUCE_GRAD:
        if (L->reduced[base + a->chunk])
            return act_err(L, r, i, a, "the chunk's gradients are reduced twice");
        rc = reduce_chunk(L, r, a->chunk);
        break;
    case ACT_OPTIM:
        if (L->optim_seen[r])
            return act_err(L, r, i, a, "a second optimizer step");
        for (int c = 0; c < v && rc == TS_OK; c++)
            if (!L->reduced[base + c])
                rc = reduce_chunk(L, r, c);
        if (rc == TS_OK)
            rc = optim(L, r);
        L->optim_seen[r] = true;
        break;
    default:
        return act_err(L, r, i, a, "unknown action kind");
    }
    return rc;
}

/* After the last action of rank r: reductions and optimizer step the
 * schedule did not list. */
static int rank_finish(lowering *L, int r)
{
    int rc = TS_OK;
    size_t base = (size_t)r * (size_t)L->s->v;
    if (L->optim_seen[r])
        return TS_OK;
    for (int c = 0; c < L->s->v && rc == TS_OK; c++)
        if (!L->reduced[base + c])
            rc = reduce_chunk(L, r, c);
    return rc == TS_OK ? optim(L, r) : rc;
}

/* Tasks and edges the schedule will need (to size the engine once). */
static void count_tasks(const plan *pl, const sched *s, uint64_t *tasks)
{
    uint64_t n = 0;
    for (int r = 0; r < s->p; r++) {
        for (size_t i = 0; i < s->n_actions[r]; i++) {
            const sched_action *a = &s->actions[r][i];
            if (a->chunk < 0 || a->chunk >= s->v)
                continue;
            int st = sched_stage_of(s, r, a->chunk);
            switch (a->kind) {
            case ACT_F:
                n += pl->stages[st].pass[PLAN_PASS_F].n;
                break;
            case ACT_B:
                n += pl->stages[st].pass[PLAN_PASS_B].n;
                break;
            case ACT_I:
                n += pl->stages[st].pass[PLAN_PASS_I].n;
                break;
            case ACT_W:
                n += pl->stages[st].pass[PLAN_PASS_W].n;
                break;
            default:
                n += 1;
                break;
            }
        }
        n += 2 + (uint64_t)s->v * 8 + s->n_actions[r]; /* + FSDP gathers, one per pass at most */
    }
    *tasks = n;
}

static int lower_into(const plan *pl, const sched *s, engine *e, const int *rank_map, ts_err *err);

int lower_sched(const plan *pl, const sched *s, engine *e, ts_err *err)
{
    if (engine_n_ranks(e) != s->p || engine_streams_per_rank(e) != PLAN_STREAMS || engine_task_count(e) != 0)
        return err_set(err, TS_EINVAL, "lower: engine must be empty with %d ranks of %d streams", s->p, PLAN_STREAMS);
    return lower_into(pl, s, e, NULL, err);
}

int lower_sched_ranks(const plan *pl, const sched *s, engine *e, const int *engine_rank, ts_err *err)
{
    if (engine_streams_per_rank(e) != PLAN_STREAMS)
        return err_set(err, TS_EINVAL, "lower: engine must have %d streams per rank", PLAN_STREAMS);
    for (int r = 0; r < s->p; r++)
        if (engine_rank[r] < 0 || engine_rank[r] >= engine_n_ranks(e))
            return err_set(err, TS_EINVAL, "lower: pipeline rank %d mapped to engine rank %d, not in 0..%d", r,
                           engine_rank[r], engine_n_ranks(e) - 1);
    return lower_into(pl, s, e, engine_rank, err);
}

static int lower_into(const plan *pl, const sched *s, engine *e, const int *rank_map, ts_err *err)
{
    if (pl->p != s->p || pl->v != s->v)
        return err_set(err, TS_EINVAL, "lower: plan for p=%d v=%d, schedule p=%d v=%d", pl->p, pl->v, s->p, s->v);
    if (s->m < 1)
        return err_set(err, TS_EINVAL, "lower: schedule has %d micro-batches", s->m);
    lowering L = {.pl = pl,
                  .s = s,
                  .e = e,
                  .err = err,
                  .m = s->m,
                  .n_stages = s->p * s->v,
                  .rank_map = rank_map,
                  .emb_task = {ENGINE_NO_TASK, ENGINE_NO_TASK},
                  .emb_pred = {ENGINE_NO_TASK, ENGINE_NO_TASK}};
    size_t tab = 2 * (size_t)L.n_stages * (size_t)L.m, half = tab / 2;
    L.send_tab = malloc(tab * sizeof *L.send_tab);
    L.recv_tab = malloc(tab * sizeof *L.recv_tab);
    L.fwd_last = malloc(half * sizeof *L.fwd_last);
    L.bwd_last = malloc(half * sizeof *L.bwd_last);
    L.scratch = malloc(((size_t)pl->max_pass_steps + 1) * sizeof *L.scratch);
    L.rank_of = malloc((size_t)L.n_stages * sizeof *L.rank_of);
    size_t pv = (size_t)s->p * (size_t)s->v;
    L.final_bwd = malloc(pv * sizeof *L.final_bwd);
    L.grads_done = malloc(pv * sizeof *L.grads_done);
    L.buckets_sent = malloc(pv * sizeof *L.buckets_sent);
    L.reduced = malloc(pv * sizeof *L.reduced);
    L.last_dp = malloc((size_t)s->p * sizeof *L.last_dp);
    L.last_comp = malloc((size_t)s->p * sizeof *L.last_comp);
    L.optim_seen = malloc((size_t)s->p * sizeof *L.optim_seen);
    int rc = TS_OK;
    bool pairs_ok = true;
    if (pl->n_ep_pairs || pl->ep_pair_steps || pl->ep_pair_combined) {
        size_t total = 0;
        L.partner_at = malloc((size_t)s->p * sizeof *L.partner_at);
        for (int r = 0; L.partner_at && r < s->p; r++) {
            L.partner_at[r] = total;
            total += s->n_actions[r];
        }
        L.partner = L.partner_at ? malloc((total ? total : 1) * sizeof *L.partner) : NULL;
        pairs_ok = L.partner != NULL;
        for (int r = 0; pairs_ok && r < s->p; r++)
            ep_pair_mark(s, r, L.partner + L.partner_at[r]);
        if (pairs_ok && (pl->ep_pair_steps || pl->ep_pair_combined)) {
            L.done = calloc(total ? total : 1, sizeof *L.done);
            L.scratch2 = malloc(((size_t)pl->max_pass_steps + 1) * sizeof *L.scratch2);
            L.bounds = malloc(4 * ((size_t)pl->max_pass_steps + 1) * sizeof *L.bounds);
            pairs_ok = L.done && L.scratch2 && L.bounds;
        }
    }
    if (!pairs_ok || !L.send_tab || !L.recv_tab || !L.fwd_last || !L.bwd_last || !L.scratch || !L.rank_of ||
        !L.final_bwd || !L.grads_done || !L.buckets_sent || !L.reduced || !L.last_dp || !L.last_comp || !L.optim_seen) {
        rc = err_set(err, TS_ENOMEM, "lower: out of memory for %d stages x %d micro-batches", L.n_stages, L.m);
        goto done;
    }
    for (int st = 0; st < L.n_stages; st++) {
        int chunk;
        sched_rank_chunk_of(s, st, &L.rank_of[st], &chunk);
    }
    memset(L.send_tab, 0xff, tab * sizeof *L.send_tab);
    memset(L.recv_tab, 0xff, tab * sizeof *L.recv_tab);
    memset(L.fwd_last, 0xff, half * sizeof *L.fwd_last);
    memset(L.bwd_last, 0xff, half * sizeof *L.bwd_last);
    uint64_t n_tasks;
    count_tasks(pl, s, &n_tasks);
    n_tasks += engine_task_count(e); /* lower_sched_ranks: earlier replicas */
    if (n_tasks > 0x7fffffffULL) {
        rc = err_set(err, TS_EINVAL, "lower: %llu tasks exceed the engine's limit", (unsigned long long)n_tasks);
        goto done;
    }
    if ((rc = engine_reserve(e, (uint32_t)n_tasks, (uint32_t)(n_tasks + n_tasks / 2), err)))
        goto done;
    for (int r = 0; r < s->p; r++)
        rank_prepare(&L, r);
    /* round robin over ranks, one action each */
    for (size_t i = 0, more = 1; more && rc == TS_OK; i++) {
        more = 0;
        for (int r = 0; r < s->p && rc == TS_OK; r++)
            if (i < s->n_actions[r]) {
                if (!L.done || !L.done[L.partner_at[r] + i]) /* else lowered with its pair */
                    rc = rank_action(&L, r, i);
                more = 1;
            }
    }
    for (int r = 0; r < s->p && rc == TS_OK; r++)
        rc = rank_finish(&L, r);
    /* the embedding all-reduce ends together: each side also waits for the
     * other's gradients */
    if (rc == TS_OK && L.emb_task[0] != ENGINE_NO_TASK && L.emb_task[1] != ENGINE_NO_TASK) {
        if (L.emb_pred[1] != ENGINE_NO_TASK)
            rc = engine_dep_add(e, L.emb_pred[1], L.emb_task[0], err);
        if (rc == TS_OK && L.emb_pred[0] != ENGINE_NO_TASK)
            rc = engine_dep_add(e, L.emb_pred[0], L.emb_task[1], err);
    }
    for (int dir = 0; dir < 2 && rc == TS_OK; dir++)
        for (int st = 0; st < L.n_stages && rc == TS_OK; st++)
            for (int mb = 0; mb < L.m && rc == TS_OK; mb++) {
                size_t k = tab_idx(&L, dir, st, mb);
                uint32_t snd = L.send_tab[k], rcv = L.recv_tab[k];
                if (snd == ENGINE_NO_TASK && rcv == ENGINE_NO_TASK)
                    continue;
                if (snd == ENGINE_NO_TASK || rcv == ENGINE_NO_TASK) {
                    rc = err_set(err, TS_EINVAL, "schedule: %s of micro-batch %d into stage %d has no matching %s",
                                 snd == ENGINE_NO_TASK ? (dir == DIR_F ? "RECV_F" : "RECV_B")
                                                       : (dir == DIR_F ? "SEND_F" : "SEND_B"),
                                 mb, st,
                                 snd == ENGINE_NO_TASK ? (dir == DIR_F ? "SEND_F" : "SEND_B")
                                                       : (dir == DIR_F ? "RECV_F" : "RECV_B"));
                    break;
                }
            }
done:
    free(L.send_tab);
    free(L.recv_tab);
    free(L.fwd_last);
    free(L.bwd_last);
    free(L.scratch);
    free(L.rank_of);
    free(L.final_bwd);
    free(L.grads_done);
    free(L.buckets_sent);
    free(L.reduced);
    free(L.last_dp);
    free(L.last_comp);
    free(L.optim_seen);
    free(L.partner);
    free(L.partner_at);
    free(L.done);
    free(L.scratch2);
    free(L.bounds);
    return rc;
}
