/* net_simulate — see net_simulate.h. */
#include "sim/net/net_simulate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/config/catalog.h"
#include "sim/config/topo.h"
#include "sim/core/lower.h"
#include "sim/model/moe.h"
#include "sim/net/net_names.h"
#include "sim/net/net_topo.h"
#include "sim/net/net_whatif.h"
#include "sim/util/afile.h"
#include "sim/util/csvio.h"

struct net_simulate {
    const config *c;
    net_sim_opts o;
    net_graph *g;
    net_place pl;
    net_engine *ne;  /* the first run's: the statistics and the link report are its */
    net_engine *cur; /* the running one: ne, or a fresh one for each later run */
    int runs;        /* runs lowered so far */
    simulate_net hooks;
    engine_hooks sim_hooks; /* the simulator's own (memory), for ranks < p */
    engine_hooks net_hooks; /* net_engine's */
    const plan *plan;
    const sched *s;
    int p;
    int ep_k, ep_m; /* the expert-parallel group's GPUs per server, servers (MoE) */
};

int net_sim_opts_register(net_sim_opts *o, opt_table *t, ts_err *err)
{
    int rc;
    memset(o, 0, sizeof *o);
    if ((rc = opt_section(t, "Network (flows on the topology graph)", err)) ||
        (rc = opt_add(t,
                      &(opt_spec){.name = "--network-flows",
                                  .type = OPT_BOOL,
                                  .target = &o->flows,
                                  .defval = "off (closed-form collectives)",
                                  .help = "time communication as max-min fair flows on the topology graph, "
                                          "simulating interchangeable ranks once"},
                      err)) ||
        (rc = opt_add(t,
                      &(opt_spec){.name = "--full",
                                  .type = OPT_BOOL,
                                  .target = &o->full,
                                  .defval = "off",
                                  .help = "simulate every rank and every flow (implies --network-flows); "
                                          "needed by the what-ifs below"},
                      err)) ||
        (rc = opt_add(t,
                      &(opt_spec){.name = "--straggler",
                                  .type = OPT_STRING,
                                  .target = &o->straggler,
                                  .metavar = "RANK:FACTOR",
                                  .defval = "none",
                                  .help = "global rank RANK computes FACTOR times slower (--full)"},
                      err)) ||
        (rc = opt_add(t,
                      &(opt_spec){.name = "--degrade-link",
                                  .type = OPT_STRING,
                                  .target = &o->degrade,
                                  .metavar = "A-B:FACTOR",
                                  .defval = "none",
                                  .help = "scale the bandwidth of the link between nodes A and B (e.g. "
                                          "nic0.0-sw1.0:0.5) by FACTOR (--full)"},
                      err)) ||
        (rc = opt_add(t,
                      &(opt_spec){.name = "--fail-link",
                                  .type = OPT_STRING,
                                  .target = &o->fail_link,
                                  .metavar = "A:B[,C:D...]",
                                  .defval = "none",
                                  .help = "the links between nodes A and B (e.g. sw1.0:sw2.3) are down: routes "
                                          "use the remaining equal-cost paths; a cut that disconnects GPUs is "
                                          "an error (with flows)"},
                      err)) ||
        (rc = opt_add(t,
                      &(opt_spec){.name = "--fail-node",
                                  .type = OPT_STRING,
                                  .target = &o->fail_node,
                                  .metavar = "NODE[,NODE...]",
                                  .defval = "none",
                                  .help = "the node (e.g. sw2.3) is down with all its links; losing a GPU, NIC or "
                                          "NVSwitch is an error that says how to shrink the job (with flows)"},
                      err)) ||
        (rc = opt_add(t,
                      &(opt_spec){.name = "--mixed-gpus",
                                  .type = OPT_STRING,
                                  .target = &o->mixed_gpus,
                                  .metavar = "KIND:FIRST-LAST",
                                  .defval = "none",
                                  .help = "GPUs FIRST..LAST are of kind KIND: compute scaled by the ratio "
                                          "of bf16 peaks (--full)"},
                      err)) ||
        (rc = opt_add(t,
                      &(opt_spec){.name = "--comm-compute-slowdown",
                                  .type = OPT_DOUBLE,
                                  .target = &o->comm_compute_slowdown,
                                  .min = 0,
                                  .max = 10,
                                  .unit = "fraction",
                                  .defval = "0 (off)",
                                  .help = "compute that starts while its GPU communicates takes (1 + this) "
                                          "longer: the SMs NCCL's kernels occupy (with flows)"},
                      err)) ||
        (rc = opt_add(t,
                      &(opt_spec){.name = "--rank-order",
                                  .type = OPT_STRING,
                                  .target = &o->rank_order,
                                  .metavar = "ORDER",
                                  .defval = "tp-dp-pp",
                                  .help = "rank placement, innermost dimension first (Megatron-LM: "
                                          "tp-dp-pp; dp holds the cp x d ranks, cp innermost; with flows)"},
                      err)) ||
        (rc = opt_add(t,
                      &(opt_spec){.name = "--link-report",
                                  .type = OPT_STRING,
                                  .target = &o->link_report,
                                  .metavar = "FILE.csv",
                                  .defval = "none",
                                  .help = "write per-link bytes, busy time (ns) and peak utilisation as CSV "
                                          "and print the ten hottest links (with --network-flows or --full)"},
                      err)))
        return rc;
    return TS_OK;
}

bool net_sim_opts_active(const net_sim_opts *o)
{
    return o->flows || o->full || o->straggler || o->degrade || o->fail_link || o->fail_node || o->mixed_gpus ||
           o->comm_compute_slowdown > 0 || o->rank_order || o->link_report;
}

/* ------------------------------------------------------------ steps */

/* The flow model's kind of a plan step's collective (commcost_coll). */
static net_coll_kind coll_of_step(const plan_step *x)
{
    switch (x->comm_coll) {
    case COMM_ALL_GATHER:
        return NET_COLL_ALLGATHER;
    case COMM_REDUCE_SCATTER:
        return NET_COLL_REDUCE_SCATTER;
    default:
        return NET_COLL_ALLREDUCE;
    }
}

/* An all-to-all of the MoE dispatcher (plan step x, cat EP) as a
 * collective of the expert-parallel group. The busiest rank (position 0,
 * the group's first) receives the load factor times its share of the
 * tokens: the dispatch and the combine's gradient carry more into it, the
 * combine and the dispatch's gradient more out of it (net_coll.h). */
static int describe_a2a(const net_simulate *ns, uint32_t tag, const plan_step *x, net_step_desc *d, ts_err *err)
{
    static const struct {
        const char *name;
        bool sends;
    } dirs[] = {{"moe.a2a.dispatch", false},
                {"moe.a2a.combine.bwd", false},
                {"moe.a2a.combine", true},
                {"moe.a2a.dispatch.bwd", true}};
    const moe_config *e = &ns->c->moe;
    if (x->comm_coll == COMM_ALL_GATHER || x->comm_coll == COMM_REDUCE_SCATTER) {
        /* moe_disp.h: the allgather dispatcher's gathers and reduce-scatters over
         * the tp_ep group, the alltoall dispatcher's ETP ones over the ETP group,
         * with NCCL's terms as the dense collectives */
        d->role = NET_STEP_COLL;
        d->coll = (uint8_t)coll_of_step(x);
        d->dim = e->dispatcher == MOE_DISPATCH_ALLGATHER ? NET_DIM_TPEP : NET_DIM_ETP;
        d->bytes = (double)x->comm_bytes * x->comm_bw_factor;
        d->lat_ns = x->comm_lat_ns;
        return TS_OK;
    }
    int dir = -1;
    for (int i = 0; i < 4 && dir < 0; i++)
        if (strcmp(x->name, dirs[i].name) == 0)
            dir = dirs[i].sends;
    if (dir < 0 || x->comm_coll != COMM_P2P)
        return err_set(err, TS_EINVAL,
                       "network model: expert-parallel step %u '%s' is not a collective it models (moe.a2a.dispatch, "
                       ".combine and their .bwd; the dispatchers' all-gathers and reduce-scatters); simulate without "
                       "--network-flows and --full",
                       tag, x->name);
    const plan *pl = ns->plan;
    if (pl->moe_load_factor_min > 0 && pl->moe_load_factor_min != pl->moe_load_factor)
        return err_set(err, TS_EINVAL,
                       "network model: per-layer --moe-expert-load with load factors %.3f to %.3f: not modelled (the "
                       "flow model takes one busiest-rank factor for every MoE layer; give a whole-model file, or "
                       "simulate without --network-flows and --full)",
                       pl->moe_load_factor_min, pl->moe_load_factor);
    int ep = e->ep;
    d->role = NET_STEP_COLL;
    d->dim = NET_DIM_EP;
    d->lat_ns = x->comm_lat_ns;
    d->hot = ns->plan->moe_load_factor > 1 ? ns->plan->moe_load_factor : 1;
    d->hot_sends = (uint8_t)dir;
    d->coll = NET_COLL_ALLTOALL;
    d->bytes = (double)x->comm_bytes;
    if (e->dispatcher == MOE_DISPATCH_FLEX && e->enable_deepep && ns->ep_m > 1) {
        /* moe_deepep_ns's volumes: T k h b = comm_bytes ep / (ep - 1) over NVLink
         * (k_n - 1) / k_n of it, one RDMA copy per remote node holding an expert */
        double tkhb = (double)x->comm_bytes * ep / (ep - 1);
        d->coll = NET_COLL_DEEPEP;
        d->bytes = tkhb * (ns->ep_k - 1) / ns->ep_k;
        d->rdma_bytes = tkhb / e->topk * moe_deepep_remote_nodes(e->num_experts, e->topk, ns->ep_m);
    }
    return TS_OK;
}

/* A collective of the context-parallel group (plan step x, comm_cp;
 * layer.c's cp ops, cp.h): its all-to-alls over the all-to-all level
 * (commcost's S of COMM_ALL_TO_ALL is n pieces of which a rank sends n - 1;
 * the flows' S is what it sends), its ring steps (COMM_P2P: every rank
 * passes the bytes to the next) and gathers over the ring level, these
 * with NCCL's terms as the dense collectives. */
static void describe_cp(const net_simulate *ns, const plan_step *x, net_step_desc *d)
{
    d->role = NET_STEP_COLL;
    d->lat_ns = x->comm_lat_ns;
    if (x->comm_coll == COMM_ALL_TO_ALL) {
        int n = ns->pl.cp_a2a;
        d->coll = NET_COLL_ALLTOALL;
        d->dim = NET_DIM_CPA;
        d->bytes = (double)x->comm_bytes * (n - 1) / n;
    } else if (x->comm_coll == COMM_P2P) {
        d->coll = NET_COLL_RING_STEP;
        d->dim = NET_DIM_CPR;
        d->bytes = (double)x->comm_bytes;
    } else {
        d->coll = (uint8_t)coll_of_step(x);
        d->dim = NET_DIM_CPR;
        d->bytes = (double)x->comm_bytes * x->comm_bw_factor;
    }
}

/* An all-reduce over comm_ranks consecutive ranks beyond the tensor group
 * (plan step x: the MoE aux loss's over t x cp or t x cp x d, FP8 amax's
 * over t x cp x d): over the rank's tensor and context-parallel group or
 * its stage's ranks (net_place.h), with NCCL's terms as the dense
 * collectives. */
static int describe_consec(const net_simulate *ns, uint32_t tag, const plan_step *x, net_step_desc *d, ts_err *err)
{
    int n = x->comm_ranks, tcp = net_place_group_size(&ns->pl, NET_PLACE_TCP),
        stage = net_place_group_size(&ns->pl, NET_PLACE_STAGE);
    if (n != tcp && n != stage)
        return err_set(err, TS_EINVAL,
                       "net_simulate: step %u (%s): an all-reduce over %d consecutive ranks; the flow modes place "
                       "t x cp = %d (the tensor and context-parallel group) and t x cp x d = %d (a stage's ranks)",
                       tag, x->name, n, tcp, stage);
    d->role = NET_STEP_COLL;
    d->coll = NET_COLL_ALLREDUCE;
    d->dim = n == tcp ? NET_DIM_TCP : NET_DIM_STAGE;
    d->bytes = (double)x->comm_bytes * x->comm_bw_factor;
    d->lat_ns = x->comm_lat_ns;
    return TS_OK;
}

static int describe(void *ctx, uint32_t tag, net_step_desc *d, ts_err *err)
{
    net_simulate *ns = ctx;
    const plan *pl = ns->plan;
    if (!pl || tag >= pl->n_steps)
        return err_set(err, TS_ESTATE, "net_simulate: task tag %u is not a plan step", tag);
    const plan_step *x = &pl->steps[tag];
    memset(d, 0, sizeof *d);
    switch (x->stream) {
    case PLAN_STREAM_COMPUTE:
        d->role = NET_STEP_COMPUTE;
        d->dur_ns = x->dur_ns;
        break;
    case PLAN_STREAM_TP:
    case PLAN_STREAM_DP:
        if (x->cat == PLAN_CAT_EP)
            return describe_a2a(ns, tag, x, d, err);
        if (x->comm_cp) {
            describe_cp(ns, x, d);
            break;
        }
        if (x->comm_ranks > 0)
            return describe_consec(ns, tag, x, d, err);
        d->role = NET_STEP_COLL;
        d->coll = (uint8_t)coll_of_step(x);
        d->dim = x->stream == PLAN_STREAM_TP ? NET_DIM_TP : NET_DIM_DP;
        /* the links run at large-message rates: NCCL's protocol for this size by its bytes */
        d->bytes = (double)(x->comm_bytes - x->comm_bytes_edp) * x->comm_bw_factor;
        d->lat_ns = x->comm_lat_ns;
        d->bytes_edp = (double)x->comm_bytes_edp * x->edp_bw_factor; /* MoE: the experts' part */
        d->lat_edp_ns = x->edp_lat_ns;
        break;
    case PLAN_STREAM_PP_SEND: {
        int st = x->stage, to = pl->stages[st].send_f == tag ? st + 1 : st - 1, rank, chunk;
        if (to < 0 || to >= pl->n_stages)
            return err_set(err, TS_ESTATE, "net_simulate: send step %u of stage %d has no neighbour stage", tag, st);
        sched_rank_chunk_of(ns->s, to, &rank, &chunk);
        int t = ns->c->par.tp;
        d->peer_pp = rank;
        if (t > 1 && !ns->c->par.sequence_parallel) { /* Megatron's scatter/gather */
            d->role = NET_STEP_COLL;
            d->coll = NET_COLL_P2P_SCATTER;
            d->dim = NET_DIM_TP;
            d->bytes = (double)x->comm_bytes * t;
        } else {
            d->role = NET_STEP_SEND;
            d->bytes = (double)x->comm_bytes;
        }
        break;
    }
    default:
        d->role = NET_STEP_ENGINE;
        break;
    }
    return TS_OK;
}

/* ------------------------------------------------------------ simulate_net */

static void on_start(void *ctx, engine *e, engine_task_id id, const engine_task_info *ti, int64_t now)
{
    net_simulate *ns = ctx;
    if (ns->sim_hooks.on_start && ti->rank < ns->p)
        ns->sim_hooks.on_start(ns->sim_hooks.ctx, e, id, ti, now);
    net_engine_task_started(ns->cur, e, id, ti, now);
}

static void on_end(void *ctx, engine *e, engine_task_id id, const engine_task_info *ti, int64_t now)
{
    net_simulate *ns = ctx;
    if (ns->sim_hooks.on_end && ti->rank < ns->p)
        ns->sim_hooks.on_end(ns->sim_hooks.ctx, e, id, ti, now);
    net_engine_task_ended(ns->cur, e, id, ti, now);
}

static engine_hooks sn_hooks(void *ctx, const engine_hooks *sim_hooks)
{
    net_simulate *ns = ctx;
    ns->sim_hooks = *sim_hooks;
    /* in --full the simulator's own hooks serve the ranks of replica (0, 0),
     * copy 0, and net_engine's serve external tasks only: the other copies'
     * other tasks need no start hook, and no end hook at all without a
     * slowdown */
    return (engine_hooks){.on_start = on_start,
                          .on_end = on_end,
                          .ctx = ns,
                          .only_marked = sim_hooks->only_marked && ns->net_hooks.only_marked,
                          .on_end_copies = ns->o.full && ns->o.comm_compute_slowdown == 0 ? 1 : 0,
                          .on_start_copies = ns->o.full ? 1 : 0};
}

static int engine_build(net_simulate *ns, net_engine **out, ts_err *err);

static int sn_lower(void *ctx, const plan *pl, const sched *s, engine *e, ts_err *err)
{
    net_simulate *ns = ctx;
    if (ns->runs++ > 0) { /* another run (MoE: the balanced one): a fresh network, the first one's kept */
        if (ns->cur != ns->ne)
            net_engine_free(ns->cur);
        ns->cur = ns->ne;
        int rc = engine_build(ns, &ns->cur, err);
        if (rc) {
            ns->cur = ns->ne;
            return rc;
        }
    }
    ns->plan = pl;
    ns->s = s;
    if (!ns->o.full)
        return lower_sched(pl, s, e, err);
    /* every replica runs the same tasks: lower the pipeline of replica
     * (0, 0) on engine ranks 0..p-1, then copy it to the other replicas
     * (engine rank pp + p (tp + t dp), see net_engine_rank) */
    int t = ns->pl.size[NET_DIM_TP], d = ns->pl.size[NET_DIM_DP], p = ns->p, rc;
    int *map = malloc(sizeof *map * (size_t)p);
    if (!map)
        return err_set(err, TS_ENOMEM, "net_simulate: out of memory");
    for (int pp = 0; pp < p; pp++)
        map[pp] = net_engine_rank(ns->cur, 0, 0, pp);
    rc = lower_sched_ranks(pl, s, e, map, err);
    free(map);
    if (!rc)
        rc = engine_replicate(e, (uint32_t)(t * d), p, err);
    /* the report and the trace show the ranks of replica (0, 0), copy 0:
     * account and time only them */
    if (!rc)
        rc = engine_account_ranks(e, p, err);
    return rc ? rc : engine_keep_times(e, 1, err);
}

static int sn_attach(void *ctx, engine *e, const plan *pl, const sched *s, ts_err *err)
{
    net_simulate *ns = ctx;
    ns->plan = pl;
    ns->s = s;
    return net_engine_attach(ns->cur, e, err);
}

static int sn_finish(void *ctx, int run_rc, ts_err *err)
{
    net_simulate *ns = ctx;
    int rc = net_engine_error(ns->cur, err);
    return rc ? rc : run_rc;
}

/* ------------------------------------------------------------ setup */

static int apply_mixed(net_simulate *ns, net_engine *ne, ts_err *err)
{
    char kind[CONFIG_NAME_BYTES];
    int rc;
    const char *colon = strrchr(ns->o.mixed_gpus, ':');
    char *dash = NULL, *end = NULL;
    long first = colon ? strtol(colon + 1, &dash, 10) : -1, last = -1; /* out of range: LONG_MIN/MAX */
    if (colon && dash != colon + 1 && *dash == '-')
        last = strtol(dash + 1, &end, 10);
    if (!colon || colon - ns->o.mixed_gpus >= CONFIG_NAME_BYTES || !end || end == dash + 1 || *end || first < 0 ||
        last < first || last >= ns->g->n_gpus)
        return err_set(err, TS_EINVAL, "--mixed-gpus '%s': expected KIND:FIRST-LAST with 0 <= FIRST <= LAST <= %d",
                       ns->o.mixed_gpus, ns->g->n_gpus - 1);
    memcpy(kind, ns->o.mixed_gpus, (size_t)(colon - ns->o.mixed_gpus));
    kind[colon - ns->o.mixed_gpus] = 0;
    gpu_spec other;
    if ((rc = catalog_gpu(kind, &other, err)))
        return err_prefix(err, "--mixed-gpus");
    if (!(other.bf16_tflops > 0) || !(ns->c->cluster.gpu.bf16_tflops > 0))
        return err_set(err, TS_EINVAL, "--mixed-gpus: no bf16 peak for %s or %s", kind, ns->c->cluster.gpu.name);
    double f = ns->c->cluster.gpu.bf16_tflops / other.bf16_tflops;
    for (int r = 0; r < ns->pl.n_ranks; r++) {
        int gpu = ns->pl.gpu_of_rank[r], tp, dp, pp;
        if (gpu < first || gpu > last)
            continue;
        net_place_coords(&ns->pl, r, &tp, &dp, &pp);
        if ((rc = net_engine_set_compute_factor(ne, net_engine_rank(ne, tp, dp, pp), f, err)))
            return rc;
    }
    return TS_OK;
}

/* The expert-parallel groups (net_place_set_experts) and the shape of
 * rank 0's: GPUs per server and servers. */
static int place_experts(net_simulate *ns, ts_err *err)
{
    const moe_config *e = &ns->c->moe;
    int ep = e->ep > 0 ? e->ep : 1, rc = net_place_set_experts(&ns->pl, ep, e->etp > 0 ? e->etp : 1, err);
    if (rc)
        return err_prefix(err, "--expert-model-parallel-size");
    int *ranks = malloc(sizeof *ranks * (size_t)ep), *srv = malloc(sizeof *srv * (size_t)ep);
    if (!ranks || !srv) {
        free(ranks);
        free(srv);
        return err_set(err, TS_ENOMEM, "net_simulate: out of memory");
    }
    net_place_ep_ranks(&ns->pl, 0, ranks);
    ns->ep_m = 0;
    for (int j = 0; j < ep; j++) {
        int s = ns->g->nodes[ns->g->gpu_node[ns->pl.gpu_of_rank[ranks[j]]]].server, i = 0;
        while (i < ns->ep_m && srv[i] != s)
            i++;
        if (i == ns->ep_m)
            srv[ns->ep_m++] = s;
    }
    ns->ep_k = ns->ep_m > 0 ? ep / ns->ep_m : ep;
    int t = ns->pl.size[NET_DIM_TP], span = ep * ns->pl.etp, edp = t * ns->pl.size[NET_DIM_DP] / span;
    if (edp > 1 && span % t)
        rc = err_set(err, TS_EINVAL,
                     "--expert-model-parallel-size %d: with the network model (--network-flows, --full) the "
                     "expert-data-parallel groups must lie inside the data-parallel ones: etp x ep = %d must be a "
                     "multiple of t = %d (or fill the stage: edp 1)",
                     ep, span, t);
    free(ranks);
    free(srv);
    return rc;
}

/* A net_engine for one run: the options, stragglers and mixed GPU kinds
 * of ns->o (*out NULL on error). */
static int engine_build(net_simulate *ns, net_engine **out, ts_err *err)
{
    const net_sim_opts *o = &ns->o;
    net_engine_opts eo = {o->full, o->comm_compute_slowdown, NET_ALGO_AUTO};
    int rc = net_engine_new(ns->g, &ns->pl, &eo, describe, ns, out, err);
    if (!rc && o->straggler) {
        int r, tp, dp, pp;
        double f;
        if (!(rc = net_parse_straggler(o->straggler, ns->pl.n_ranks, &r, &f, err))) {
            net_place_coords(&ns->pl, r, &tp, &dp, &pp);
            rc = net_engine_set_compute_factor(*out, net_engine_rank(*out, tp, dp, pp), f, err);
        }
    }
    if (!rc && o->mixed_gpus)
        rc = apply_mixed(ns, *out, err);
    if (rc) {
        net_engine_free(*out);
        *out = NULL;
    }
    return rc;
}

int net_simulate_new(const config *c, const net_sim_opts *o, net_simulate **out, ts_err *err)
{
    int rc;
    *out = NULL;
    if (!o->full && (o->straggler || o->degrade || o->mixed_gpus))
        return err_set(err, TS_EINVAL, "--%s needs --full: the default mode simulates interchangeable ranks once",
                       o->straggler ? "straggler"
                       : o->degrade ? "degrade-link"
                                    : "mixed-gpus");
    if (o->link_report && !o->flows && !o->full)
        return err_set(err, TS_EINVAL,
                       "--link-report needs --network-flows or --full: the closed-form model has no links");
    if (!c->cluster.topology)
        return err_set(err, TS_EINVAL, "network model: the config has no topology");
    /* context parallelism: cp x d ranks in the placement's data-parallel dimension, its
     * all-to-all level as layer.c's (--cp-comm-type) */
    int cp = config_cp(c), cp_a2a = c->par.cp_comm == CP_COMM_A2A       ? cp
                                    : c->par.cp_comm == CP_COMM_A2A_P2P ? c->par.cp_a2a
                                                                        : 1;
    if (cp_a2a < 1)
        cp_a2a = 1;
    net_simulate *ns = calloc(1, sizeof *ns);
    if (!ns)
        return err_set(err, TS_ENOMEM, "net_simulate: out of memory");
    ns->c = c;
    ns->o = *o;
    ns->p = c->par.pp;
    if ((rc = net_graph_from_topo(c->cluster.topology, c->cluster.gpus, c->cluster.gpu.name, &ns->g, err)) ||
        (rc = net_route_apply_failures(ns->g, o->fail_link, o->fail_node, c->par.tp, c->par.pp, err)) ||
        (rc = net_place_init(&ns->pl, ns->g, c->par.tp, (c->par.dp > 0 ? c->par.dp : 1) * cp, c->par.pp, o->rank_order,
                             err)) ||
        (rc = net_place_set_cp(&ns->pl, cp, cp_a2a, err)))
        goto fail;
    if (c->moe.num_experts > 0 && (rc = place_experts(ns, err)))
        goto fail;
    if ((rc = engine_build(ns, &ns->ne, err)))
        goto fail;
    ns->cur = ns->ne;
    ns->net_hooks = net_engine_hooks(ns->ne);
    if (o->link_report && (rc = net_engine_track_links(ns->ne, err)))
        goto fail;
    if (o->degrade) {
        int a, b;
        double f;
        if ((rc = net_parse_degrade(ns->g, o->degrade, &a, &b, &f, err)) ||
            (rc = net_graph_scale_link(ns->g, a, b, f, err)))
            goto fail;
    }
    ns->hooks = (simulate_net){ns, net_engine_n_ranks(ns->ne), sn_hooks, sn_lower, sn_attach, sn_finish};
    *out = ns;
    return TS_OK;
fail:
    net_simulate_free(ns);
    return rc;
}

void net_simulate_free(net_simulate *ns)
{
    if (!ns)
        return;
    if (ns->cur != ns->ne)
        net_engine_free(ns->cur);
    net_engine_free(ns->ne);
    net_place_free(&ns->pl);
    net_graph_free(ns->g);
    free(ns);
}

const simulate_net *net_simulate_hooks(net_simulate *ns)
{
    return &ns->hooks;
}
net_engine_stats net_simulate_stats(const net_simulate *ns)
{
    return net_engine_get_stats(ns->ne);
}
const net_graph *net_simulate_graph(const net_simulate *ns)
{
    return ns->g;
}
const char *net_simulate_note(const net_simulate *ns)
{
    return ns->pl.note;
}

/* ------------------------------------------------------------ link report */

#define LINK_REPORT_TOP 10

/* Is link a hotter than link b (see net_simulate_link_report)? */
static bool hotter(const net_link_usage *ua, int a, const net_link_usage *ub, int b)
{
    if (ua->peak_util != ub->peak_util)
        return ua->peak_util > ub->peak_util;
    if (ua->busy_ns != ub->busy_ns)
        return ua->busy_ns > ub->busy_ns;
    if (ua->bytes != ub->bytes)
        return ua->bytes > ub->bytes;
    return a < b;
}

int net_simulate_link_report(const net_simulate *ns, const char *path, FILE *top, ts_err *err)
{
    const net_graph *g = ns->g;
    afile af = {0};
    int rc = afile_open(&af, path, err);
    if (rc)
        return err_prefix(err, "--link-report");
    static const char *const head[] = {"link", "bw_gbps", "bytes", "busy_ns", "peak_utilisation"};
    int best[LINK_REPORT_TOP], n_best = 0, used = 0;
    net_link_usage best_u[LINK_REPORT_TOP];
    rc = csvio_write_row(af.f, 5, head, err);
    for (int l = 0; l < g->n_links && !rc; l++) {
        net_link_usage u = net_engine_link_usage(ns->ne, l);
        char name[80], a[32], b[32], bw[CSVIO_NUM_BYTES], by[CSVIO_NUM_BYTES], busy[24], pk[CSVIO_NUM_BYTES];
        (void)snprintf(name, sizeof name, "%s-%s", net_graph_node_name(g, g->links[l].src, a, sizeof a),
                       net_graph_node_name(g, g->links[l].dst, b, sizeof b));
        (void)snprintf(busy, sizeof busy, "%lld", (long long)u.busy_ns);
        const char *cells[] = {name, csvio_fmt_double(bw, sizeof bw, g->links[l].bw_gbps),
                               csvio_fmt_double(by, sizeof by, u.bytes), busy,
                               csvio_fmt_double(pk, sizeof pk, u.peak_util)};
        rc = csvio_write_row(af.f, 5, cells, err);
        if (!(u.bytes > 0))
            continue;
        used++;
        /* keep the hottest, in order: insert into best[] */
        int i = n_best < LINK_REPORT_TOP ? n_best++ : LINK_REPORT_TOP;
        if (i == LINK_REPORT_TOP && !hotter(&u, l, &best_u[i - 1], best[i - 1]))
            continue;
        if (i == LINK_REPORT_TOP)
            i--;
        while (i > 0 && hotter(&u, l, &best_u[i - 1], best[i - 1])) {
            best[i] = best[i - 1];
            best_u[i] = best_u[i - 1];
            i--;
        }
        best[i] = l;
        best_u[i] = u;
    }
    if (rc) {
        afile_abort(&af);
        return err_prefix(err, "--link-report %s", path);
    }
    if ((rc = afile_commit(&af, err)))
        return rc;
    if (!top)
        return TS_OK;
    fprintf(top, "hottest links (%d of %d links carried traffic; link report in %s):\n", used, g->n_links, path);
    fprintf(top, "  %-26s %10s %12s %16s %14s\n", "link", "peak util", "busy ms", "GB carried", "bw GB/s");
    for (int k = 0; k < n_best; k++) {
        char a[32], b[32], name[80];
        const net_link *L = &g->links[best[k]];
        (void)snprintf(name, sizeof name, "%s-%s", net_graph_node_name(g, L->src, a, sizeof a),
                       net_graph_node_name(g, L->dst, b, sizeof b));
        fprintf(top, "  %-26s %10.4f %12.3f %16.3f %14.2f\n", name, best_u[k].peak_util,
                (double)best_u[k].busy_ns * 1e-6, best_u[k].bytes * 1e-9, L->bw_gbps);
    }
    return TS_OK;
}
