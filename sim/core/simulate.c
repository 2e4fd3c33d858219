/* simulate — one iteration, simulated (see simulate.h). */
#include "sim/core/simulate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/config/overheads.h"
#include "sim/core/ep_pair.h"
#include "sim/core/lower.h"
#include "sim/core/plan_build.h"
#include "sim/model/calib.h"
#include "sim/model/commcost.h"
#include "sim/model/cost.h"
#include "sim/model/flops.h"
#include "sim/model/mla.h"
#include "sim/model/moe.h"
#include "sim/model/mtp.h"
#include "sim/sched/sched_generate.h"

/* Engine hooks (called only for tasks that allocate or free memory): the
 * memory timeline. */
typedef struct {
    const plan *pl;
    mem_tracker *mem;
} hook_ctx;

static int mem_cat_of(const plan_step *x)
{
    return x->cat == PLAN_CAT_PP ? MEM_P2P : MEM_ACTIV;
}

static void on_start(void *ctx, engine *e, engine_task_id id, const engine_task_info *ti, int64_t now_ns)
{
    (void)e;
    (void)id;
    hook_ctx *h = ctx;
    const plan_step *x = &h->pl->steps[ti->tag];
    int r = ti->rank;
    if (x->mem_n) { /* a collapsed pass: its changes at their offsets */
        const plan_mem_ev *ev = h->pl->mem_evs + x->mem_first;
        for (uint32_t k = 0; k < x->mem_n; k++)
            mem_add(h->mem, r, ev[k].batch ? MEM_BATCH : MEM_ACTIV, ev[k].delta_bytes, now_ns + ev[k].offset_ns,
                    now_ns);
    } else {
        if (x->alloc_bytes)
            mem_add(h->mem, r, mem_cat_of(x), x->alloc_bytes, now_ns, now_ns);
        if (x->batch_alloc_bytes)
            mem_add(h->mem, r, MEM_BATCH, x->batch_alloc_bytes, now_ns, now_ns);
    }
}

static void on_end(void *ctx, engine *e, engine_task_id id, const engine_task_info *ti, int64_t now_ns)
{
    (void)e;
    (void)id;
    hook_ctx *h = ctx;
    const plan_step *x = &h->pl->steps[ti->tag];
    if (x->free_bytes && !x->mem_n)
        mem_add(h->mem, ti->rank, mem_cat_of(x), -x->free_bytes, now_ns, now_ns);
    if (x->batch_free_bytes && !x->mem_n)
        mem_add(h->mem, ti->rank, MEM_BATCH, -x->batch_free_bytes, now_ns, now_ns);
}

const char *simulate_comm_name(simulate_comm k)
{
    static const char *const names[SIMULATE_COMM_KINDS] = {
        [SIMULATE_COMM_TP] = "TP", [SIMULATE_COMM_PP] = "PP", [SIMULATE_COMM_DP] = "DP", [SIMULATE_COMM_EP] = "EP"};
    return (int)k >= 0 && k < SIMULATE_COMM_KINDS ? names[k] : "?";
}

void simulate_result_free(simulate_result *r)
{
    if (!r)
        return;
    free(r->ranks);
    engine_free(r->eng);
    plan_free(r->pl);
    mem_free(r->mem);
    free(r);
}

static int cost_setup(const config *c, const simulate_opts *o, cost_model **cm, commcost_params *cc, ts_err *err)
{
    cost_params cp;
    int rc;
    if (c->cluster.gpu.calibrated_only) {
        /* every cost from the file (calib.h: calib_device_params) */
        if (!o->calibration_path)
            return err_set(err, TS_EINVAL,
                           "device '%s' has no datasheet or default cost tables: give --calibration FILE "
                           "(written by trainsim calibrate from trainexec --microbench) with its gemm, memory, "
                           "launch, p2p and allreduce rows",
                           c->cluster.gpu.name);
        calib_set set = {0};
        if ((rc = calib_read(o->calibration_path, &set, err)))
            return err_prefix(err, "--calibration: ");
        rc = calib_device_params(&set, &c->cluster.gpu, c->model.precision, &cp, cc, err);
        calib_free(&set);
        if (rc)
            return err_prefix(err, "--calibration %s: ", o->calibration_path);
        return cost_model_new(&cp, cm, err);
    }
    if ((rc = cost_params_default(&c->cluster.gpu, c->model.precision, &cp, err)))
        return rc;
    if (o->calibration_path) {
        calib_set set = {0};
        cost_params fitted;
        if ((rc = calib_read(o->calibration_path, &set, err)))
            return err_prefix(err, "--calibration: ");
        rc = calib_fit(&set, &cp, c->model.precision, &fitted, err);
        calib_free(&set);
        if (rc)
            return err_prefix(err, "--calibration %s: ", o->calibration_path);
        cp = fitted;
    }
    if ((rc = cost_model_new(&cp, cm, err)))
        return rc;
    if (c->cluster.topology) /* the collectives see the topology given (or the kind's default cluster) */
        return commcost_params_topo(&c->cluster.gpu, c->cluster.topology, c->cluster.gpus, cc, err);
    return commcost_params_default(&c->cluster.gpu, cc, err);
}

static double peak_tflops_of(const config *c)
{
    switch (c->model.precision) {
    case PREC_FP16:
        return c->cluster.gpu.fp16_tflops;
    case PREC_FP32:
        return c->cluster.gpu.fp32_tflops;
    case PREC_BF16:
    default:
        return c->cluster.gpu.bf16_tflops;
    }
}

/* Runs of one collapsed step on one rank (summarize's scratch). */
typedef struct {
    uint32_t n;
    int32_t rank;
} step_runs;

/* Fill the result from the finished engine and memory tracker. runs:
 * scratch of pl->n_steps entries, zeroed, or NULL. */
static void summarize(const config *c, const simulate_opts *o, const engine *e, const plan *pl, const mem_tracker *mem,
                      step_runs *runs, simulate_result *R)
{
    int p = R->p;
    uint32_t n = engine_task_count(e), copies = engine_copies(e);
    for (uint32_t id = 0; id < n; id += copies) { /* time per category and flops, per rank (copy 0 of each task) */
        int rk = engine_task_rank(e, id);
        if (rk >= p) /* another replica's rank (a network model's --full mode) */
            continue;
        uint32_t tag = engine_task_tag(e, id);
        const plan_step *x = &pl->steps[tag];
        simulate_rank *X = &R->ranks[rk];
        X->flops += x->flops;
        if (!x->seg_n) {
            X->cat_ns[x->cat] += engine_task_end_ns(e, id) - engine_task_start_ns(e, id);
            continue;
        }
        /* a collapsed step's segments are the same on each of its runs (one
         * per micro-batch): counted here and summed once below (integer sums,
         * the same totals) */
        step_runs *u = runs ? &runs[tag] : NULL;
        if (u && u->n == 0)
            u->rank = rk;
        if (u && u->rank == rk) {
            u->n++;
        } else {
            for (uint32_t k = 0; k < x->seg_n; k++) {
                const plan_seg *g = &pl->segs[x->seg_first + k];
                X->cat_ns[g->cat] += g->dur_ns;
            }
        }
        /* in a collapsed pass the compute stream "runs" while only its
         * tensor-parallel collectives do: that time is exposed TP */
        X->busy_ns -= x->tp_exposed_ns;
        X->exposed_ns[SIMULATE_COMM_TP] += x->tp_exposed_ns - x->ep_exposed_ns;
        X->exposed_ns[SIMULATE_COMM_EP] += x->ep_exposed_ns;
    }
    for (uint32_t tag = 0; runs && tag < pl->n_steps; tag++) {
        if (!runs[tag].n)
            continue;
        const plan_step *x = &pl->steps[tag];
        simulate_rank *X = &R->ranks[runs[tag].rank];
        for (uint32_t k = 0; k < x->seg_n; k++) {
            const plan_seg *g = &pl->segs[x->seg_first + k];
            X->cat_ns[g->cat] += (int64_t)runs[tag].n * g->dur_ns;
        }
    }
    R->iteration_ns = engine_makespan_ns(e);
    R->events = engine_events(e);
    R->tasks = engine_task_count(e);
    /* a pair's all-to-alls on their own stream count as TP here, then as EP (ep_exposed) */
    const unsigned C = 1u << PLAN_STREAM_COMPUTE, T = (1u << PLAN_STREAM_TP) | (1u << PLAN_STREAM_EP),
                   D = 1u << PLAN_STREAM_DP;
    const unsigned PP = (1u << PLAN_STREAM_PP_SEND) | (1u << PLAN_STREAM_PP_RECV_F) | (1u << PLAN_STREAM_PP_RECV_B);
    double flops = 0;
    R->hbm_bytes = (int64_t)(c->cluster.gpu.hbm_gib * 1073741824.0);
    R->fits = true;
    for (int r = 0; r < p; r++) {
        simulate_rank *X = &R->ranks[r];
        for (unsigned mask = 0; mask < (1u << PLAN_STREAMS); mask++) {
            int64_t ns = engine_busy_mask_ns(e, r, mask);
            if (mask & C)
                X->busy_ns += ns;
            else if (mask == 0)
                X->idle_ns += ns;
            else if (mask & T)
                X->exposed_ns[SIMULATE_COMM_TP] += ns;
            else if (mask & PP)
                X->exposed_ns[SIMULATE_COMM_PP] += ns;
            else if (mask & D)
                X->exposed_ns[SIMULATE_COMM_DP] += ns;
        }
        X->peak_bytes = mem_peak_bytes(mem, r);
        X->peak_t_ns = mem_peak_time_ns(mem, r);
        for (int k = 0; k < MEM_CATS; k++)
            X->peak_cat_bytes[k] = mem_peak_cat_bytes(mem, r, k);
        X->fits = X->peak_bytes <= R->hbm_bytes;
        R->fits = R->fits && X->fits;
        if (r == 0 || X->peak_bytes > R->peak_bytes) {
            R->peak_bytes = X->peak_bytes;
            R->peak_rank = r;
        }
        R->bubble_ns += (double)X->idle_ns / p;
        if (r == 0) {
            memcpy(R->fixed_ns, pl->fixed_ns, sizeof R->fixed_ns);
            memcpy(R->data, pl->data, sizeof R->data);
            R->data_measured = pl->data_measured;
            memcpy(R->data_mem, pl->data_mem, sizeof R->data_mem);
        }
        if (X->cat_ns[PLAN_CAT_DATA] > R->data_rank_ns)
            R->data_rank_ns = X->cat_ns[PLAN_CAT_DATA];
        for (int k = 0; k < SIMULATE_COMM_KINDS; k++)
            R->exposed_ns[k] += (double)X->exposed_ns[k] / p;
        for (int k = 0; k < PLAN_CAT_COUNT; k++)
            R->cat_ns[k] += (double)X->cat_ns[k] / p;
        flops += X->flops;
    }
    double it_s = (double)R->iteration_ns * 1e-9;
    R->bubble_fraction = R->iteration_ns > 0 ? R->bubble_ns / (double)R->iteration_ns : 0;
    R->bubble_over_ideal =
        (double)R->iteration_ns > R->bubble_ns ? R->bubble_ns / ((double)R->iteration_ns - R->bubble_ns) : 0;
    const model_config *M = &c->model;
    R->hw_flops = flops * R->t * R->d * config_cp(c); /* every context-parallel rank does its 1/cp */
    R->model_flops = flops_model_per_iter(M, R->B);
    R->model_flops_causal = flops_model_per_iter_causal(M, R->B);
    if (c->moe.num_experts > 0) { /* the MoE blocks' FLOPs instead of the dense MLPs' (moe.h) */
        double moe = moe_model_flops_per_iter(M, &c->moe, R->B);
        R->model_flops_causal += moe - R->model_flops;
        R->model_flops = moe;
    }
    R->model_flops += mla_model_flops_delta(M, &c->moe, R->B, false); /* MLA's attention (mla.h) */
    R->model_flops_causal += mla_model_flops_delta(M, &c->moe, R->B, true);
    /* multi-token prediction's depths (mtp.h), as Megatron-LM counts them */
    R->model_flops += mtp_model_flops_per_iter(M, &c->moe, c->moe.mtp_num_layers, R->B, false);
    R->model_flops_causal += mtp_model_flops_per_iter(M, &c->moe, c->moe.mtp_num_layers, R->B, true);
    R->megatron_flops =
        flops_closed_full_recompute(R->B, M->seq_length, M->num_layers, M->hidden_size, M->padded_vocab_size);
    R->peak_tflops = peak_tflops_of(c);
    if (it_s > 0) {
        double per_gpu = 1.0 / (it_s * R->gpus * 1e12);
        R->tokens_per_s = (double)R->B * R->seq / it_s;
        R->model_tflops_per_gpu = R->model_flops * per_gpu;
        R->hw_tflops_per_gpu = R->hw_flops * per_gpu;
        R->megatron_tflops_per_gpu = R->megatron_flops * per_gpu;
        /* a calibrated-only device has no datasheet peak: MFU/HFU 0 */
        R->mfu = R->peak_tflops > 0 ? R->model_tflops_per_gpu / R->peak_tflops : 0;
        R->hfu = R->peak_tflops > 0 ? R->hw_tflops_per_gpu / R->peak_tflops : 0;
        R->mfu_causal = R->peak_tflops > 0 ? R->model_flops_causal * per_gpu / R->peak_tflops : 0;
    }
    if (o->train_tokens > 0 && R->tokens_per_s > 0) {
        R->train_tokens = o->train_tokens;
        R->train_s = o->train_tokens / R->tokens_per_s;
        R->train_gpu_hours = R->train_s * R->gpus / 3600.0;
    }
}

/* An interval of a task on a rank (ep_exposed). */
typedef struct {
    int rank;
    int64_t t0, t1;
} span_t;

static int span_cmp(const void *a, const void *b)
{
    const span_t *x = a, *y = b;
    return x->rank != y->rank ? (x->rank > y->rank) - (x->rank < y->rank) : (x->t0 > y->t0) - (x->t0 < y->t0);
}

/* The MoE all-to-alls that ran as tasks of their own (a network model:
 * plan steps not collapsed) are on the TP stream (an overlapped pair's on
 * PLAN_STREAM_EP), which summarize counts as exposed TP: move the part of
 * each that no compute of its rank overlapped to exposed EP. A pair's
 * TP and CP collectives beside its all-to-alls count as its compute spans'
 * (the default mode's closed form, ep_pair.h): that time stays exposed TP.
 * Tasks of one stream do not overlap each other; the compute and TP
 * streams' tasks are merged into one union of intervals per rank. */
static int ep_exposed(const engine *e, const plan *pl, simulate_result *R, ts_err *err)
{
    uint32_t n = engine_task_count(e), C = engine_copies(e), nc = 0, na = 0;
    span_t *comp = malloc(sizeof *comp * (n / C + 1)), *a2a = malloc(sizeof *a2a * (n / C + 1));
    if (!comp || !a2a) {
        free(comp);
        free(a2a);
        return err_set(err, TS_ENOMEM, "simulate: out of memory");
    }
    for (uint32_t id = 0; id < n; id += C) {
        int rk = engine_task_rank(e, id);
        const plan_step *x = &pl->steps[engine_task_tag(e, id)];
        span_t sp = {rk, engine_task_start_ns(e, id), engine_task_end_ns(e, id)};
        int st = engine_task_stream(e, id);
        if (rk < R->p && (st == PLAN_STREAM_COMPUTE || (st == PLAN_STREAM_TP && x->cat != PLAN_CAT_EP)))
            comp[nc++] = sp;
        else if (rk < R->p && x->cat == PLAN_CAT_EP && !x->seg_n)
            a2a[na++] = sp;
    }
    qsort(comp, nc, sizeof *comp, span_cmp);
    uint32_t nu = 0; /* the union of the compute and TP intervals, in place */
    for (uint32_t i = 0; i < nc; i++) {
        if (nu > 0 && comp[nu - 1].rank == comp[i].rank && comp[i].t0 <= comp[nu - 1].t1) {
            if (comp[i].t1 > comp[nu - 1].t1)
                comp[nu - 1].t1 = comp[i].t1;
        } else {
            comp[nu++] = comp[i];
        }
    }
    nc = nu;
    qsort(a2a, na, sizeof *a2a, span_cmp);
    for (uint32_t i = 0, j = 0; i < na; i++) {
        const span_t *x = &a2a[i];
        while (j < nc && (comp[j].rank < x->rank || (comp[j].rank == x->rank && comp[j].t1 <= x->t0)))
            j++;
        int64_t covered = 0;
        for (uint32_t k = j; k < nc && comp[k].rank == x->rank && comp[k].t0 < x->t1; k++) {
            int64_t lo = comp[k].t0 > x->t0 ? comp[k].t0 : x->t0, hi = comp[k].t1 < x->t1 ? comp[k].t1 : x->t1;
            covered += hi > lo ? hi - lo : 0;
        }
        int64_t exposed = x->t1 - x->t0 - covered;
        R->ranks[x->rank].exposed_ns[SIMULATE_COMM_TP] -= exposed;
        R->ranks[x->rank].exposed_ns[SIMULATE_COMM_EP] += exposed;
        R->exposed_ns[SIMULATE_COMM_TP] -= (double)exposed / R->p;
        R->exposed_ns[SIMULATE_COMM_EP] += (double)exposed / R->p;
    }
    free(comp);
    free(a2a);
    return TS_OK;
}

/* The MoE fields of R (dense: nothing). Unless balance is forced (or the
 * skew is 0 without measured loads), the same configuration is simulated again under
 * --moe-router-force-load-balancing: the difference of the two iterations
 * is the routing imbalance's cost. */
static int moe_summary(const config *c, const simulate_opts *o, const plan *pl, simulate_result *R, ts_err *err)
{
    const moe_config *e = &c->moe;
    if (e->num_experts <= 0)
        return TS_OK;
    R->moe_experts = e->num_experts;
    R->num_layers = c->model.num_layers;
    R->moe_topk = e->topk;
    R->moe_ep = e->ep;
    R->moe_edp = pl->edp;
    R->moe_etp = e->etp > 0 ? e->etp : 1;
    for (int l = 0; l < c->model.num_layers; l++)
        R->moe_layers += moe_layer_is_moe(e, l);
    R->moe_forced_balance = e->force_load_balancing;
    R->moe_dispatcher = e->dispatcher == MOE_DISPATCH_FLEX        ? "flex with DeepEP"
                        : e->dispatcher == MOE_DISPATCH_ALLGATHER ? "allgather"
                                                                  : "alltoall";
    R->moe_mxfp8 = e->dispatch_fwd_mxfp8 && e->combine_bwd_mxfp8 ? "the dispatch and the combine's backward"
                   : e->dispatch_fwd_mxfp8                       ? "the dispatch"
                   : e->combine_bwd_mxfp8                        ? "the combine's backward"
                                                                 : NULL;
    R->moe_skew = e->routing_skew;
    R->moe_load_factor = pl->moe_load_factor;
    R->moe_load_per_layer = e->expert_load && e->expert_load_per_layer && !e->force_load_balancing;
    R->moe_load_factor_min = pl->moe_load_factor_min;
    R->moe_busiest_layer = pl->moe_busiest_layer;
    R->moe_dropped = pl->moe_dropped;
    R->moe_balanced_ns = R->iteration_ns;
    R->moe_groups = e->router_num_groups;
    R->moe_group_topk = e->router_group_topk;
    R->moe_router_fp32 = e->router_fp32;
    R->moe_sigmoid = e->router_score == 1;
    R->moe_expert_bias = e->expert_bias;
    R->moe_pre_softmax = e->pre_softmax;
    R->moe_lb_type = e->lb_type;
    R->moe_aux_coeff = e->lb_type == MOE_LB_NONE ? 0 : e->aux_loss_coeff;
    R->moe_z_coeff = e->z_loss_coeff;
    R->moe_topk_scale = e->topk_scaling;
    if (e->dispatcher == MOE_DISPATCH_FLEX && e->enable_deepep) { /* plan_moe.h's placement of the EP group */
        int nodes = moe_ep_group_nodes(e->etp, e->ep, c->cluster.gpus_per_node);
        R->moe_remote_nodes =
            moe_deepep_remote_nodes_grouped(e->num_experts, e->topk, nodes, e->router_num_groups, e->router_group_topk);
        R->moe_remote_nodes_free = moe_deepep_remote_nodes(e->num_experts, e->topk, nodes);
    }
    R->moe_load_path = e->force_load_balancing ? NULL : e->load_path;
    if (e->force_load_balancing || (e->routing_skew <= 0 && !e->expert_load) || e->pad_to_capacity)
        return TS_OK;
    if (o->no_balanced_rerun) { /* not measured (simulate_opts) */
        R->moe_balanced_ns = 0;
        return TS_OK;
    }
    config *cb = malloc(sizeof *cb);
    if (!cb)
        return err_set(err, TS_ENOMEM, "simulate: out of memory");
    *cb = *c;
    cb->moe.force_load_balancing = true;
    simulate_opts ob = {.calibration_path = o->calibration_path, .net = o->net};
    simulate_result *B = NULL;
    int rc = simulate_run(cb, &ob, &B, err);
    free(cb);
    if (rc == TS_OK) {
        R->moe_balanced_ns = B->iteration_ns;
        R->moe_imbalance_ns = R->iteration_ns - B->iteration_ns;
    }
    simulate_result_free(B);
    return rc;
}

int simulate_run(const config *c, const simulate_opts *opts, simulate_result **out, ts_err *err)
{
    *out = NULL;
    simulate_opts o = opts ? *opts : (simulate_opts){0};
    const parallel_config *P = &c->par;
    sched *s = NULL;
    cost_model *cm = NULL;
    plan *pl = NULL;
    engine *e = NULL;
    mem_tracker *mem = NULL;
    commcost_params cc;
    int rc;
    simulate_result *R = calloc(1, sizeof *R);
    if (!R || !(R->ranks = calloc((size_t)(P->pp > 0 ? P->pp : 1), sizeof *R->ranks))) {
        free(R);
        return err_set(err, TS_ENOMEM, "simulate: out of memory");
    }
    snprintf(R->model, sizeof R->model, "%s", c->model.name);
    snprintf(R->gpu, sizeof R->gpu, "%s", c->cluster.gpu.name);
    R->schedule = P->schedule;
    R->gpus = c->cluster.gpus;
    R->t = P->tp;
    R->p = P->pp;
    R->d = P->dp > 0 ? P->dp : 1;
    R->cp = config_cp(c);
    R->v = P->vp > 0 ? P->vp : 1;
    R->m = config_num_microbatches(c);
    R->b = P->micro_batch_size;
    R->B = P->global_batch_size;
    R->seq = c->model.seq_length;
    R->recompute = P->recompute;
    R->recompute_modules = P->recompute_modules;
    R->sequence_parallel = P->sequence_parallel;
    R->distributed_optimizer = P->distributed_optimizer;
    R->overlap_grad_reduce = P->overlap_grad_reduce;

    /* symmetric ranks with costed TP collectives: collapse passes (a network
     * model drives each collective as its own task instead) */
    plan_opts popts = {.inline_tp = o.net == NULL};
    sched_opts so;
    sched_opts_default(&so, P->schedule);
    so.p = R->p;
    so.m = R->m;
    so.v = R->v;
    so.num_layers = c->model.num_layers;
    so.first_stage_layers = P->first_stage_layers;
    so.last_stage_layers = P->last_stage_layers;
    /* the config's layers per virtual stage (first/last and account-for
     * splits, layout strings); the even split gives the same stages */
    so.stage_layers = P->layout.n_stages == so.p * so.v ? P->layout.layers : NULL;
    so.with_comm = true;
    so.with_reduce_optim = true;
    so.combined_1f1b = ep_pair_combined_sched(P->overlap_moe_ep_comm, P->schedule);
    if ((rc = sched_generate(&so, &s, err)) || (rc = cost_setup(c, &o, &cm, &cc, err)) ||
        (rc = plan_build_opts(c, s, cm, &cc, &popts, &pl, err)) || (rc = mem_create(R->p, o.keep_trace, &mem, err)))
        goto done;
    hook_ctx h = {pl, mem};
    engine_hooks hooks = {.on_start = on_start, .on_end = on_end, .ctx = &h, .only_marked = true};
    const simulate_net *net = o.net; /* network model, optional */
    engine_hooks eh = net ? net->hooks(net->ctx, &hooks) : hooks;
    if ((rc = engine_create(net ? net->n_ranks : R->p, PLAN_STREAMS, &eh, &e, err)) ||
        (rc = net ? net->lower(net->ctx, pl, s, e, err) : lower_sched(pl, s, e, err)) ||
        (net && (rc = net->attach(net->ctx, e, pl, s, err))))
        goto done;
    R->overheads = c->cluster.overheads;
    mem_set_overheads(mem, &R->overheads);
    overheads_layout ol = config_overheads_layout(c);
    for (int r = 0; r < R->p; r++) {
        mem_add(mem, r, MEM_WEIGHTS, pl->weights_bytes[r], 0, 0);
        mem_add(mem, r, MEM_GRADS, pl->grads_bytes[r], 0, 0);
        mem_add(mem, r, MEM_OPTIM, pl->optim_bytes[r], 0, 0);
        /* what PyTorch, cuBLAS and NCCL hold from the start (overheads.h) */
        R->ranks[r].nccl_comms = overheads_comms(&ol, r);
        mem_add(mem, r, MEM_CUDA_CONTEXT, overheads_cuda_context_bytes(&R->overheads), 0, 0);
        mem_add(mem, r, MEM_NCCL, overheads_nccl_bytes(&R->overheads, R->ranks[r].nccl_comms), 0, 0);
        mem_add(mem, r, MEM_CUBLAS, overheads_cublas_bytes(&R->overheads), 0, 0);
    }
    rc = engine_run(e, err);
    if (net)
        rc = net->finish(net->ctx, rc, err);
    if (rc || (rc = mem_check(mem, err)))
        goto done;
    step_runs *runs = calloc(pl->n_steps ? pl->n_steps : 1, sizeof *runs); /* NULL: counted task by task */
    summarize(c, &o, e, pl, mem, runs, R);
    free(runs);
    R->mla = c->moe.mla;
    R->mla_q_lora = c->moe.mla_q_lora_rank;
    R->mla_kv_lora = c->moe.mla_kv_lora_rank;
    R->mtp_depths = c->moe.mtp_num_layers;
    if (net && c->moe.num_experts > 0 && (rc = ep_exposed(e, pl, R, err)))
        goto done;
    if ((rc = moe_summary(c, &o, pl, R, err)))
        goto done;
    if (o.keep_trace) {
        R->eng = e;
        R->pl = pl;
        R->mem = mem;
        e = NULL;
        pl = NULL;
        mem = NULL;
    }
done:
    sched_free(s);
    cost_model_free(cm);
    plan_free(pl);
    engine_free(e);
    mem_free(mem);
    if (rc) {
        simulate_result_free(R);
        return rc;
    }
    *out = R;
    return TS_OK;
}
