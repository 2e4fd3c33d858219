/* search — enumeration, pruning, ranking (see search.h). Evaluation
 * (simulation over threads) lives in search_eval.c. */
#include "sim/search/search.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/config/moe_flags.h"
#include "sim/core/ep_pair.h"
#include "sim/sched/sched_generate.h"
#include "sim/search/search_bound.h"
#include "sim/util/grow.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

static const char *const STATUS_NAMES[SEARCH_STATUS_COUNT] = {
    "pending",      "simulated", "heads",        "query-groups", "hidden",           "layers",    "batch",
    "microbatches", "experts",   "memory-bound", "config",       "memory-simulated", "sim-error",
};

const char *const SEARCH_DISPATCHER_NAMES[] = {"alltoall", "flex-deepep", "allgather", NULL};

const char *search_status_name(search_status st)
{
    return (unsigned)st < SEARCH_STATUS_COUNT ? STATUS_NAMES[st] : "?";
}

const char *search_recompute_name(const search_cand *c)
{
    switch (c->recompute) {
    case RECOMPUTE_NONE:
        return "none";
    case RECOMPUTE_SELECTIVE:
        if (c->recompute_modules == (CONFIG_RC_MLP | CONFIG_RC_LAYERNORM))
            return "selective-mlp+layernorm";
        return c->recompute_modules && c->recompute_modules != CONFIG_RC_CORE_ATTN ? "selective-modules" : "selective";
    default:
        return c->recompute_method == RECOMPUTE_METHOD_BLOCK ? "full-block" : "full-uniform";
    }
}

void search_space_default(search_space *s, const model_config *model, const cluster_config *cluster,
                          int global_batch_size)
{
    memset(s, 0, sizeof *s);
    s->model = *model;
    s->cluster = *cluster;
    s->global_batch_size = global_batch_size;
    s->max_tp = 8;
    s->max_pp = cluster->gpus; /* no limit: p > layers is rejected with its reason */
    s->max_vp = 8;
    s->max_cp = 1;
    static const int mbs[] = {1, 2, 4, 8};
    for (int i = 0; i < 4; i++)
        s->micro_batch_sizes[i] = mbs[i];
    s->n_micro_batch_sizes = 4;
    s->schedules = (1u << SCHED_GPIPE) | (1u << SCHED_1F1B) | (1u << SCHED_INTERLEAVED) | (1u << SCHED_ZB_H1) |
                   (1u << SCHED_ZB_H2) | (1u << SCHED_ZB_V);
    s->try_sequence_parallel = true;
    s->try_distributed_optimizer = true;
    s->try_recompute_block = true;
    s->overlap_grad_reduce = true;
    s->memory_margin_bytes = SEARCH_MEMORY_MARGIN_GIB * GIB;
    moe_config_defaults(&s->moe); /* dense: no experts */
    s->max_ep = 0;                /* 0: the expert count */
    s->try_etp = true;
    s->dispatchers = (1u << SEARCH_DISPATCH_COUNT) - 1;
}

/* ---------------------------------------------------------------- growth */

typedef struct {
    search_cand *v;
    size_t n, cap;
} cand_vec;

static int push(cand_vec *cv, const search_cand *c)
{
    if (cv->n == cv->cap && grow_to((void **)&cv->v, &cv->cap, cv->n + 1, 1024, sizeof *cv->v))
        return TS_ENOMEM;
    cv->v[cv->n++] = *c;
    return TS_OK;
}

/* ---------------------------------------------------------------- splits */

/* Split of num_layers over pp stages of vp chunks each. Even when pp*vp
 * divides the layers. Otherwise, with chunks (vp > 1), Megatron-core's
 * account-for split: the embedding and the loss (or the embedding alone)
 * count as a layer, so L + 2 (L + 1) must divide over pp*vp chunks of at
 * least 2 layers, and *account gets the SEARCH_ACCOUNT_* bits (Llama 3
 * 405B: 126 + 2 over 16 x 2 chunks). With vp == 1, Megatron's uneven
 * split: first/last stage layers with the middle stages even; chooses the
 * middle count k minimising the largest stage, ties to the larger k.
 * Returns false if no split exists. *chunk_layers = layers of a middle
 * chunk. */
static bool split_layers(int L, int pp, int vp, int *first, int *last, int *chunk_layers, int *account)
{
    *first = *last = *account = 0;
    if (L % (pp * vp) == 0) {
        *chunk_layers = L / (pp * vp);
        return true;
    }
    if (vp > 1) {
        for (int extra = 2; extra >= 1; extra--)
            if ((L + extra) % (pp * vp) == 0 && (L + extra) / (pp * vp) >= 2) {
                *account = extra == 2 ? SEARCH_ACCOUNT_EMBEDDING | SEARCH_ACCOUNT_LOSS : SEARCH_ACCOUNT_EMBEDDING;
                *chunk_layers = (L + extra) / (pp * vp);
                return true;
            }
        return false;
    }
    if (pp > L)
        return false;
    if (pp == 2) { /* first stage takes the odd layer; the output layer is on the last */
        *first = (L + 1) / 2;
        *chunk_layers = L - *first;
        return true;
    }
    int best_k = 0, best_max = 0;
    for (int k = 1; k * (pp - 2) <= L - 2; k++) {
        int rem = L - k * (pp - 2);
        int big = (rem + 1) / 2;
        int mx = big > k ? big : k;
        if (best_k == 0 || mx <= best_max) {
            best_k = k;
            best_max = mx;
        }
    }
    if (best_k == 0)
        return false;
    int rem = L - best_k * (pp - 2);
    *first = (rem + 1) / 2;
    *last = rem - *first;
    *chunk_layers = best_k;
    return true;
}

/* --------------------------------------------------------------- configs */

static void fill_config(const search_space *s, const search_cand *c, config *out)
{
    memset(out, 0, sizeof *out);
    out->model = s->model;
    /* a vocabulary given before padding (--vocab-size) is padded for the
     * candidate's t, as flags_finish pads it: to a multiple of
     * --make-vocab-size-divisible-by x t (Megatron-LM's rule) */
    int padded;
    ts_err pe;
    if (s->model.vocab_size > 0 && s->model.make_vocab_size_divisible_by > 0)
        out->model.padded_vocab_size =
            config_pad_vocab(s->model.vocab_size, s->model.make_vocab_size_divisible_by, c->tp, &padded, &pe) == TS_OK
                ? padded
                : 0; /* past INT_MAX: config_resolve refuses the size, naming it */
    out->cluster = s->cluster;
    parallel_config *p = &out->par;
    *p = s->par; /* the fixed settings; every layout field below is the candidate's */
    p->layout_given = false;
    memset(&p->layout, 0, sizeof p->layout);
    p->cp_a2a = p->cp_p2p = 0;
    p->overlap_param_gather = p->tp_comm_overlap = p->overlap_moe_ep_comm = p->delay_wgrad = false;
    p->torch_fsdp2 = p->megatron_fsdp = false;
    p->dp_sharding = 0;
    p->micro_batch_size = c->mbs;
    p->global_batch_size = s->global_batch_size;
    p->tp = c->tp;
    p->pp = c->pp;
    p->dp = c->dp;
    p->vp = c->vp;
    p->layers_per_virtual_stage =
        c->vp > 1 && c->schedule == SCHED_INTERLEAVED && !c->account_split ? s->model.num_layers / (c->pp * c->vp) : 0;
    /* the account-for split gives the chunks per rank by count (as Megatron-core) */
    p->virtual_stages_per_rank = c->account_split && c->schedule == SCHED_INTERLEAVED ? c->vp : 0;
    p->account_for_embedding = (c->account_split & SEARCH_ACCOUNT_EMBEDDING) != 0;
    p->account_for_loss = (c->account_split & SEARCH_ACCOUNT_LOSS) != 0;
    p->first_stage_layers = c->first_stage_layers;
    p->last_stage_layers = c->last_stage_layers;
    p->sequence_parallel = c->sequence_parallel;
    p->recompute = (config_recompute)c->recompute;
    p->recompute_method = (config_recompute_method)c->recompute_method;
    p->recompute_num_layers = c->recompute_num_layers;
    p->recompute_modules = c->recompute_modules;
    p->distributed_optimizer = c->distributed_optimizer;
    p->overlap_grad_reduce = s->overlap_grad_reduce;
    p->schedule = (sched_kind)c->schedule;
    p->cp = c->cp > 1 ? c->cp : 1;
    p->cp_comm = CP_COMM_P2P;
    out->moe = s->moe;
    if (s->moe.num_experts > 0) {
        out->moe.ep = c->ep;
        out->moe.etp = c->etp;
        out->moe.edp = 0;
        out->moe.dispatcher = c->dispatcher == SEARCH_DISPATCH_ALLGATHER     ? MOE_DISPATCH_ALLGATHER
                              : c->dispatcher == SEARCH_DISPATCH_FLEX_DEEPEP ? MOE_DISPATCH_FLEX
                                                                             : MOE_DISPATCH_ALLTOALL;
        out->moe.enable_deepep = c->dispatcher == SEARCH_DISPATCH_FLEX_DEEPEP;
        p->overlap_moe_ep_comm = c->ep_overlap != 0;
        p->delay_wgrad = c->ep_overlap && s->delay_wgrad;
    }
}

int search_cand_config(const search_set *set, size_t i, config *out, ts_err *err)
{
    if (i >= set->n)
        return err_set(err, TS_ESTATE, "search: candidate %zu out of range (%zu candidates)", i, set->n);
    fill_config(&set->space, &set->cands[i], out);
    int rc = config_resolve(out, err);
    if (!rc) /* the expert layout: Megatron-core's rules, what is modelled */
        rc = moe_flags_check_layout(out, err);
    if (!rc) /* the overlap's rules, simulate's messages (the default costed mode: no flows) */
        rc = ep_pair_check(out, (sched_kind)set->cands[i].schedule, set->cands[i].vp, false, err);
    return rc;
}

/* ----------------------------------------------------------- enumeration */

static int check_space(const search_space *s, ts_err *err)
{
    const model_config *m = &s->model;
    if (s->cluster.gpus < 1)
        return err_set(err, TS_EINVAL, "search: --gpus must be >= 1 (got %d)", s->cluster.gpus);
    if (s->global_batch_size < 1)
        return err_set(err, TS_EINVAL, "search: --global-batch-size must be >= 1 (got %d)", s->global_batch_size);
    if (m->num_layers < 1 || m->num_attention_heads < 1 || m->hidden_size < 1)
        return err_set(err, TS_EINVAL,
                       "search: the model needs layers, heads and hidden size >= 1 "
                       "(got %d, %d, %d)",
                       m->num_layers, m->num_attention_heads, m->hidden_size);
    if (s->n_micro_batch_sizes < 1 || s->n_micro_batch_sizes > SEARCH_MAX_MBS)
        return err_set(err, TS_EINVAL, "search: between 1 and %d micro-batch sizes (got %d)", SEARCH_MAX_MBS,
                       s->n_micro_batch_sizes);
    for (int i = 0; i < s->n_micro_batch_sizes; i++)
        if (s->micro_batch_sizes[i] < 1)
            return err_set(err, TS_EINVAL, "search: micro-batch sizes must be >= 1 (got %d)", s->micro_batch_sizes[i]);
    if (!(s->schedules & ((1u << SCHED_CUSTOM) - 1)))
        return err_set(err, TS_EINVAL,
                       "search: no schedule to try (valid: gpipe, 1f1b, "
                       "interleaved, zb-h1, zb-h2, zb-v)");
    if (s->max_tp < 1 || s->max_pp < 1 || s->max_vp < 2)
        return err_set(err, TS_EINVAL,
                       "search: need max tp >= 1, max pp >= 1, max vp >= 2 "
                       "(got %d, %d, %d)",
                       s->max_tp, s->max_pp, s->max_vp);
    if (m->num_layers > 0 && s->moe.num_experts > 0 &&
        (s->max_ep < 0 || !(s->dispatchers & ((1u << SEARCH_DISPATCH_COUNT) - 1)) || s->moe.topk < 1 ||
         s->moe.topk > s->moe.num_experts))
        return err_set(err, TS_EINVAL,
                       "search: the experts need max ep >= 1 (got %d), a dispatcher to try (valid: alltoall, "
                       "flex-deepep, allgather) and 1 <= top-k <= %d experts (got %d)",
                       s->max_ep, s->moe.num_experts, s->moe.topk);
    if (!(s->memory_margin_bytes >= 0 && s->memory_margin_bytes < s->cluster.gpu.hbm_gib * GIB))
        return err_set(err, TS_EINVAL,
                       "search: --memory-margin %g GiB out of range (valid: 0 to below the GPU's %g GiB, %s)",
                       s->memory_margin_bytes / GIB, s->cluster.gpu.hbm_gib, s->cluster.gpu.name);
    return TS_OK;
}

/* Recomputation variants for chunks of Ls layers: none, selective,
 * full/uniform (every layer's input kept), full/block with k in
 * {Ls/4, Ls/2, 3Ls/4} (distinct, 1 <= k < Ls). Returns the count.
 * Selective is Megatron-core's default core_attn with unfused attention
 * (it drops the s x s scores); with flash/fused attention, which keeps no
 * scores (core_attn would drop only the log-sum-exp, a 4as/h-th of sbh),
 * it is mlp and layernorm: FC1's and the activation's outputs and the
 * norms' outputs, the largest tensors left. */
typedef struct {
    uint8_t recompute, method, modules;
    int32_t layers;
} rc_variant;

static int recompute_variants(const search_space *s, int Ls, rc_variant out[6])
{
    int n = 0;
    uint8_t sel = config_attn_is_flash(s->model.attention_backend) ? CONFIG_RC_MLP | CONFIG_RC_LAYERNORM : 0;
    out[n++] = (rc_variant){RECOMPUTE_NONE, RECOMPUTE_METHOD_UNIFORM, 0, 0};
    out[n++] = (rc_variant){RECOMPUTE_SELECTIVE, RECOMPUTE_METHOD_UNIFORM, sel, 0};
    out[n++] = (rc_variant){RECOMPUTE_FULL, RECOMPUTE_METHOD_UNIFORM, 0, 1};
    if (!s->try_recompute_block)
        return n;
    int prev = 0;
    for (int q = 1; q <= 3; q++) {
        int k = Ls * q / 4;
        if (k < 1 || k >= Ls || k == prev)
            continue;
        out[n++] = (rc_variant){RECOMPUTE_FULL, RECOMPUTE_METHOD_BLOCK, 0, k};
        prev = k;
    }
    return n;
}

static const sched_kind SCHED_ORDER[] = {SCHED_GPIPE, SCHED_1F1B,  SCHED_INTERLEAVED,
                                         SCHED_ZB_H1, SCHED_ZB_H2, SCHED_ZB_V};

/* Structural rejection of (tp) against the model shape, or PENDING. */
static search_status tp_status(const model_config *m, int tp)
{
    if (m->num_attention_heads % tp)
        return SEARCH_REJ_HEADS;
    int groups = m->num_query_groups > 0 ? m->num_query_groups : m->num_attention_heads;
    if (groups % tp)
        return SEARCH_REJ_GROUPS;
    int ffn = m->ffn_hidden_size > 0 ? m->ffn_hidden_size : 4 * m->hidden_size;
    if (m->hidden_size % tp || ffn % tp)
        return SEARCH_REJ_HIDDEN;
    return SEARCH_PENDING;
}

/* The schedule tried when p = 1: 1F1B, else the first of GPipe, ZB-H1,
 * ZB-H2 asked for; -1 if only interleaved / ZB-V were (they need p > 1). */
static int no_pipeline_kind(unsigned mask)
{
    static const sched_kind pref[] = {SCHED_1F1B, SCHED_GPIPE, SCHED_ZB_H1, SCHED_ZB_H2};
    for (size_t i = 0; i < sizeof pref / sizeof pref[0]; i++)
        if (mask & (1u << pref[i]))
            return pref[i];
    return -1;
}

/* Whether dispatcher k is tried for an expert-parallel group of ep ranks
 * at a stride of etp: when the group is in one node (or is one rank)
 * flex-deepep is alltoall's run (moe.h: DeepEP inside a node is costed as
 * the alltoall dispatcher), tried only when alltoall is not asked for. */
static bool dispatcher_tried(unsigned mask, int k, int etp, int ep, int gpus_per_node)
{
    if (!(mask & (1u << k)))
        return false;
    /* the simulator's placement (plan_moe.h): etp x ep consecutive ranks dividing a node lie in one */
    bool one_node = ep == 1 || (gpus_per_node > 0 && gpus_per_node % (etp * ep) == 0);
    return !(one_node && k == SEARCH_DISPATCH_FLEX_DEEPEP && (mask & (1u << SEARCH_DISPATCH_ALLTOALL)));
}

/* Whether candidate c is also tried with the EP overlap: on request, for a
 * mixture of experts, where the overlap's layout rules allow it
 * (ep_pair_layout_ok; the model's rules are the configuration check's,
 * ep_pair_check, at simulation). */
static bool ep_overlap_tried(const search_space *s, const search_cand *c, int ep, int k, int recompute)
{
    return s->try_ep_overlap && s->moe.num_experts > 0 &&
           ep_pair_layout_ok(ep, k == SEARCH_DISPATCH_ALLGATHER, recompute == RECOMPUTE_FULL, (sched_kind)c->schedule,
                             c->vp, c->pp);
}

/* The candidates of one (t, p, schedule, v, b) in *c (its m set): for a
 * mixture of experts each etp in {1, t} and ep dividing the experts (a fold
 * not dividing the GPUs is one rejected row), then sequence parallelism,
 * recomputation, distributed optimizer and, innermost, the dispatcher. */
static int enumerate_inner(const search_space *s, cand_vec *cv, search_cand *c, int Ls)
{
    rc_variant rv[6];
    int nrv = recompute_variants(s, Ls, rv);
    int nsp = c->tp > 1 && s->try_sequence_parallel ? 2 : 1;
    int ndo = c->dp > 1 && s->try_distributed_optimizer ? 2 : 1;
    int E = s->moe.num_experts;
    int max_ep = E > 0 ? (s->max_ep > 0 && s->max_ep < E ? s->max_ep : E) : 1;
    int n_etp = E > 0 && c->tp > 1 && s->try_etp ? 2 : 1;
    for (int ie = 0; ie < n_etp; ie++)
        for (int ep = 1; ep <= max_ep; ep++) {
            if (E > 0 && E % ep)
                continue;
            c->etp = E > 0 ? (ie ? c->tp : 1) : 0;
            c->ep = E > 0 ? ep : 0;
            c->dispatcher = 0;
            c->ep_overlap = 0;
            c->sequence_parallel = 0;
            c->recompute = c->recompute_method = c->recompute_modules = 0;
            c->recompute_num_layers = 0;
            c->distributed_optimizer = 0;
            if (E > 0 && s->cluster.gpus % ((long)c->etp * ep * c->pp)) { /* one row per fold */
                c->status = SEARCH_REJ_EXPERTS;
                if (push(cv, c))
                    return TS_ENOMEM;
                continue;
            }
            for (int sp = 0; sp < nsp; sp++)
                for (int r = 0; r < nrv; r++)
                    for (int dopt = 0; dopt < ndo; dopt++)
                        for (int k = 0; k < (E > 0 ? SEARCH_DISPATCH_COUNT : 1); k++)
                            for (int ov = 0; ov < 2; ov++) {
                                if (E > 0 && !dispatcher_tried(s->dispatchers, k, c->etp, ep, s->cluster.gpus_per_node))
                                    continue;
                                if (ov && !ep_overlap_tried(s, c, ep, k, rv[r].recompute))
                                    continue;
                                c->sequence_parallel = (uint8_t)sp;
                                c->recompute = rv[r].recompute;
                                c->recompute_method = rv[r].method;
                                c->recompute_num_layers = rv[r].layers;
                                c->recompute_modules = rv[r].modules;
                                c->distributed_optimizer = (uint8_t)dopt;
                                c->dispatcher = (uint8_t)k;
                                c->ep_overlap = (uint8_t)ov;
                                c->status = SEARCH_PENDING;
                                if (push(cv, c))
                                    return TS_ENOMEM;
                            }
        }
    return TS_OK;
}

/* The candidates of one context-parallel size: t, p, d over gpus / cp. */
static int enumerate_cp(const search_space *s, cand_vec *cv, int cp)
{
    const model_config *m = &s->model;
    int G = s->cluster.gpus / cp, L = m->num_layers;
    int gpn = s->cluster.gpus_per_node > 0 ? s->cluster.gpus_per_node : G;
    int max_tp = s->max_tp < gpn ? s->max_tp : gpn;
    for (int tp = 1; tp <= max_tp && tp <= G; tp *= 2) {
        if (G % tp)
            continue;
        search_cand c;
        memset(&c, 0, sizeof c);
        c.tp = tp;
        c.cp = cp;
        search_status ts = tp_status(m, tp);
        if (ts != SEARCH_PENDING) { /* one row per rejected t */
            c.status = (uint8_t)ts;
            if (push(cv, &c))
                return TS_ENOMEM;
            continue;
        }
        for (int pp = 1; pp <= G / tp && pp <= s->max_pp; pp++) {
            if ((G / tp) % pp)
                continue;
            int dp = G / (tp * pp);
            for (size_t si = 0; si < sizeof SCHED_ORDER / sizeof SCHED_ORDER[0]; si++) {
                sched_kind sk = SCHED_ORDER[si];
                if (!(s->schedules & (1u << sk)))
                    continue;
                /* Without a pipeline every schedule is the same run: one of them. */
                if (pp == 1 && (int)sk != no_pipeline_kind(s->schedules))
                    continue;
                int vlo = 1, vhi = 1;
                if (sk == SCHED_INTERLEAVED) {
                    vlo = 2;
                    vhi = s->max_vp;
                } else if (sk == SCHED_ZB_V) {
                    vlo = vhi = 2;
                }
                for (int vp = vlo; vp <= vhi; vp++) {
                    memset(&c, 0, sizeof c);
                    c.tp = tp;
                    c.cp = cp;
                    c.pp = pp;
                    c.dp = dp;
                    c.vp = vp;
                    c.schedule = (uint8_t)sk;
                    int first, last, Ls, account;
                    if (!split_layers(L, pp, vp, &first, &last, &Ls, &account)) {
                        c.status = SEARCH_REJ_LAYERS;
                        if (push(cv, &c))
                            return TS_ENOMEM;
                        continue;
                    }
                    c.first_stage_layers = first;
                    c.last_stage_layers = last;
                    c.account_split = (uint8_t)account;
                    for (int bi = 0; bi < s->n_micro_batch_sizes; bi++) {
                        int b = s->micro_batch_sizes[bi];
                        c.mbs = b;
                        c.num_microbatches = 0;
                        c.sequence_parallel = 0;
                        c.recompute = 0;
                        c.recompute_method = 0;
                        c.recompute_num_layers = 0;
                        c.recompute_modules = 0;
                        c.distributed_optimizer = 0;
                        c.ep = c.etp = 0;
                        c.dispatcher = 0;
                        if (s->global_batch_size % ((long)b * dp)) {
                            c.status = SEARCH_REJ_BATCH;
                            if (push(cv, &c))
                                return TS_ENOMEM;
                            continue;
                        }
                        int mb = (int)(s->global_batch_size / ((long)b * dp));
                        c.num_microbatches = mb;
                        if (sk == SCHED_INTERLEAVED && mb % pp) {
                            c.status = SEARCH_REJ_MICROBATCHES;
                            if (push(cv, &c))
                                return TS_ENOMEM;
                            continue;
                        }
                        if (enumerate_inner(s, cv, &c, Ls))
                            return TS_ENOMEM;
                    }
                }
            }
        }
    }
    return TS_OK;
}

/* cp = 1, 2, 4, ... up to max_cp, dividing the GPUs; the rules CP needs
 * (flash attention, seq % 2cp, ...) are config_resolve's, so a refused cp
 * shows as a refused configuration with its reason. */
static int enumerate(const search_space *s, cand_vec *cv)
{
    int rc = TS_OK, max_cp = s->max_cp > 1 ? s->max_cp : 1; /* 0: a space built by hand, no CP */
    for (int cp = 1; cp <= max_cp && rc == TS_OK; cp *= 2)
        if (s->cluster.gpus % cp == 0)
            rc = enumerate_cp(s, cv, cp);
    return rc;
}

/* In-flight micro-batch chunks per rank of one schedule shape, counted on
 * the generated schedule (with the overlapped EP pairs on the interleaved
 * schedule, Megatron-core's combined 1F1B as simulate generates it: one more
 * warm-up forward per rank at p > 1). Candidates come grouped by (schedule,
 * p, m, v), the overlapped ones beside the others, so a one-entry cache
 * for each (prune's pair) spares almost every generation. */
typedef struct {
    int kind, p, m, v;
    bool combined;               /* sched_opts.combined_1f1b */
    search_bound_live *inflight; /* p entries (owned); NULL before the first use */
    int rc;                      /* the generator's status for this shape */
    char msg[ERR_MSG_BYTES];
} inflight_cache;

static int cache_get(inflight_cache *k, const search_cand *c, ts_err *err)
{
    bool combined = ep_pair_combined_sched(c->ep_overlap, (sched_kind)c->schedule); /* as simulate.c */
    if (k->inflight && k->kind == c->schedule && k->p == c->pp && k->m == c->num_microbatches && k->v == c->vp &&
        k->combined == combined)
        return k->rc;
    free(k->inflight);
    k->inflight = calloc((size_t)c->pp, sizeof *k->inflight);
    if (!k->inflight)
        return err_set(err, TS_ENOMEM, "search: out of memory");
    k->kind = c->schedule;
    k->p = c->pp;
    k->m = c->num_microbatches;
    k->v = c->vp;
    k->combined = combined;
    sched_opts o;
    sched_opts_default(&o, (sched_kind)c->schedule);
    o.p = c->pp;
    o.m = c->num_microbatches;
    o.v = c->vp;
    o.with_comm = false;
    o.with_reduce_optim = false;
    o.combined_1f1b = combined;
    sched *sc = NULL;
    ts_err e;
    err_clear(&e);
    k->rc = sched_generate(&o, &sc, &e);
    snprintf(k->msg, sizeof k->msg, "%s", e.msg);
    if (k->rc == TS_OK)
        search_bound_inflight_sched(sc, k->inflight);
    sched_free(sc);
    return k->rc;
}

/* Validate each pending candidate's configuration, generate its schedule
 * shape and apply the memory bound. Messages of refused configurations are
 * kept. */
static int prune(search_set *set, ts_err *err)
{
    inflight_cache caches[2]; /* without and with the combined 1F1B */
    memset(caches, 0, sizeof caches);
    inflight_cache *cache = &caches[0];
    int rc = TS_OK;
    for (size_t i = 0; i < set->n && rc == TS_OK; i++) {
        search_cand *c = &set->cands[i];
        if (c->status != SEARCH_PENDING)
            continue;
        config cfg;
        ts_err e;
        err_clear(&e);
        search_bound b;
        int st = search_cand_config(set, i, &cfg, &e);
        if (st == TS_OK) {
            cache = &caches[c->ep_overlap && c->schedule == SCHED_INTERLEAVED];
            st = cache_get(cache, c, &e);
            if (st == TS_ENOMEM)
                return st;
            if (st != TS_OK)
                err_set(&e, st, "schedule: %s", cache->msg);
        }
        if (st == TS_OK)
            st = search_bound_compute(&cfg, cache->inflight, &b, &e);
        if (st != TS_OK) {
            c->status = SEARCH_REJ_CONFIG;
            set->msgs[i] = strndup(e.msg, SEARCH_MSG_BYTES - 1);
            if (!set->msgs[i])
                rc = err_set(err, TS_ENOMEM, "search: out of memory");
            continue;
        }
        c->mem_bound_bytes = b.total_bytes;
        if (b.total_bytes > set->usable_bytes)
            c->status = SEARCH_REJ_MEMORY_BOUND;
    }
    free(caches[0].inflight);
    free(caches[1].inflight);
    return rc;
}

void search_recount(search_set *set)
{
    memset(set->counts, 0, sizeof set->counts);
    for (size_t i = 0; i < set->n; i++)
        if (set->cands[i].status < SEARCH_STATUS_COUNT)
            set->counts[set->cands[i].status]++;
}

int search_enumerate(const search_space *s, search_set **out, ts_err *err)
{
    *out = NULL;
    int rc = check_space(s, err);
    if (rc)
        return rc;
    search_set *set = calloc(1, sizeof *set);
    if (!set)
        return err_set(err, TS_ENOMEM, "search: out of memory");
    set->space = *s;
    set->capacity_bytes = s->cluster.gpu.hbm_gib * GIB;
    set->usable_bytes = set->capacity_bytes - s->memory_margin_bytes;
    cand_vec cv = {0};
    if ((rc = enumerate(s, &cv))) {
        free(cv.v);
        free(set);
        return err_set(err, rc, "search: out of memory enumerating the space");
    }
    set->cands = cv.v;
    set->n = cv.n;
    set->msgs = calloc(set->n ? set->n : 1, sizeof *set->msgs);
    if (!set->msgs) {
        search_set_free(set);
        return err_set(err, TS_ENOMEM, "search: out of memory");
    }
    if ((rc = prune(set, err))) {
        search_set_free(set);
        return rc;
    }
    search_recount(set);
    *out = set;
    return TS_OK;
}

/* ---------------------------------------------------------------- ranking */

typedef struct {
    double t;
    size_t i;
} rank_key;

static int cmp_rank(const void *a, const void *b)
{
    const rank_key *x = a, *y = b;
    if (x->t < y->t)
        return -1;
    if (x->t > y->t)
        return 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

int search_rank(const search_set *set, size_t **order, size_t *n_order, ts_err *err)
{
    size_t n = 0;
    for (size_t i = 0; i < set->n; i++)
        n += set->cands[i].status == SEARCH_SIMULATED;
    size_t *o = malloc((n ? n : 1) * sizeof *o);
    rank_key *k = malloc((n ? n : 1) * sizeof *k);
    if (!o || !k) {
        free(o);
        free(k);
        return err_set(err, TS_ENOMEM, "search: out of memory ranking %zu candidates", n);
    }
    n = 0;
    for (size_t i = 0; i < set->n; i++)
        if (set->cands[i].status == SEARCH_SIMULATED)
            k[n++] = (rank_key){set->cands[i].r.iteration_s, i};
    qsort(k, n, sizeof *k, cmp_rank); /* keys are distinct (index), so the order is total */
    for (size_t j = 0; j < n; j++)
        o[j] = k[j].i;
    free(k);
    *order = o;
    *n_order = n;
    return TS_OK;
}

/* ---------------------------------------------------------------- reasons */

void search_reason(const search_set *set, size_t i, char *buf, size_t cap)
{
    const search_cand *c = &set->cands[i];
    const model_config *m = &set->space.model;
    int groups = m->num_query_groups > 0 ? m->num_query_groups : m->num_attention_heads;
    int ffn = m->ffn_hidden_size > 0 ? m->ffn_hidden_size : 4 * m->hidden_size;
    switch ((search_status)c->status) {
    case SEARCH_REJ_HEADS:
        snprintf(buf, cap, "attention heads %d not divisible by tensor-parallel size %d", m->num_attention_heads,
                 c->tp);
        break;
    case SEARCH_REJ_GROUPS:
        snprintf(buf, cap, "query groups %d not divisible by tensor-parallel size %d", groups, c->tp);
        break;
    case SEARCH_REJ_HIDDEN:
        snprintf(buf, cap, "hidden size %d or FFN size %d not divisible by tensor-parallel size %d", m->hidden_size,
                 ffn, c->tp);
        break;
    case SEARCH_REJ_LAYERS:
        if (c->vp > 1)
            snprintf(buf, cap,
                     "%d layers not divisible by %d stages x %d chunks (nor with the embedding and loss counted as "
                     "layers)",
                     m->num_layers, c->pp, c->vp);
        else
            snprintf(buf, cap, "%d layers cannot be split over %d pipeline stages", m->num_layers, c->pp);
        break;
    case SEARCH_REJ_BATCH:
        snprintf(buf, cap, "global batch %d not divisible by micro-batch %d x data-parallel %d",
                 set->space.global_batch_size, c->mbs, c->dp);
        break;
    case SEARCH_REJ_MICROBATCHES:
        snprintf(buf, cap,
                 "interleaved schedule needs micro-batches in groups of p (m = %d "
                 "not a multiple of p = %d), as Megatron-core runs it",
                 c->num_microbatches, c->pp);
        break;
    case SEARCH_REJ_EXPERTS:
        snprintf(buf, cap,
                 "%d GPUs not a multiple of p x etp x ep = %d x %d x %d (Megatron-core folds the %d experts of "
                 "each pipeline stage over etp x ep x edp ranks)",
                 set->space.cluster.gpus, c->pp, c->etp, c->ep, set->space.moe.num_experts);
        break;
    case SEARCH_REJ_MEMORY_BOUND:
        snprintf(buf, cap, "memory lower bound %.1f GiB + margin %.1f GiB > %.1f GiB per GPU", c->mem_bound_bytes / GIB,
                 set->space.memory_margin_bytes / GIB, set->capacity_bytes / GIB);
        break;
    case SEARCH_REJ_MEMORY_SIM:
        snprintf(buf, cap, "simulated peak memory %.1f GiB + margin %.1f GiB > %.1f GiB per GPU",
                 c->r.peak_mem_bytes / GIB, set->space.memory_margin_bytes / GIB, set->capacity_bytes / GIB);
        break;
    case SEARCH_REJ_CONFIG:
    case SEARCH_REJ_SIM_ERROR:
        snprintf(buf, cap, "%s", set->msgs[i] ? set->msgs[i] : "");
        break;
    default:
        if (cap)
            buf[0] = '\0';
    }
}

void search_set_free(search_set *set)
{
    if (!set)
        return;
    if (set->msgs)
        for (size_t i = 0; i < set->n; i++)
            free(set->msgs[i]);
    free(set->msgs);
    free(set->cands);
    free(set);
}
