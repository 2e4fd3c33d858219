/* net_engine — drives the communication tasks of a discrete-event engine
 * (engine.h) with flows on the topology graph (net_coll.h), and scales the
 * compute tasks of slow ranks.
 *
 * The caller describes each task tag (a plan step, for lowering) with a
 * net_step_desc: a collective of a tensor- or data-parallel group, a send
 * to another pipeline rank, a compute step, or something the engine keeps
 * as lowered. net_engine_attach() then marks the driven tasks EXTERNAL and
 * the hooks (net_engine_hooks(), given to engine_create) run them:
 *  - a collective starts when the members of its group have all started
 *    their task for it (matched by group, tag and micro-batch), as one
 *    net_coll request over the group's GPUs; every member's task ends when
 *    it ends (after the expert-data-parallel part, bytes_edp); groups are
 *    tensor-parallel, data-parallel, or (MoE
 *    all-to-alls) expert-parallel, or (the dispatchers' gathers) expert-
 *    tensor-parallel or tp_ep (net_place_set_experts, called before
 *    net_engine_new), or context parallelism's all-to-all or ring level
 *    (net_place_set_cp, likewise);
 *  - a send is a p2p flow from the rank's GPU to the GPU of the same tensor
 *    and data-parallel coordinates on the receiving pipeline rank (the
 *    engine ends the joined receive with it);
 *  - a compute step of a rank with a compute factor f ends after
 *    dur_ns x f; with comm_compute_slowdown s > 0, a compute step that
 *    starts while the rank has communication in flight takes dur_ns x f x
 *    (1 + s): the SMs NCCL's kernels occupy (off by default: s = 0).
 *
 * Modes. Full (opts.full): every rank and every flow simulated; engine
 * rank pp + p (tp + t dp) runs global rank (tp, dp, pp) (net_engine_rank),
 * so engine ranks 0..p-1 are the pipeline of replica (0, 0); stragglers, mixed GPU kinds (compute
 * factors) and degraded links (net_graph_scale_link) are what-ifs here.
 * Symmetric (default): the engine holds the p pipeline ranks of one
 * replica (tensor rank 0, data-parallel rank 0); a collective starts as soon
 * as that rank starts it and runs over its whole group's GPUs, assuming the
 * interchangeable peers start at the same moment. On a uniform cluster where
 * groups do not share links the two modes give the same times exactly.
 *
 * ECMP flow keys depend only on the communicator (the group; for a send,
 * the pair), as NCCL reuses a communicator's connections on every call: a
 * group's traffic always takes the same paths, and both modes route it the
 * same way. net_sim caches the plan of each distinct request.
 *
 * Hooks cannot return errors: the first one is kept and net_engine_error()
 * reports it after engine_run (check it first: an error usually leaves
 * tasks unfinished, which engine_run reports as a deadlock).
 *
 * Ownership: net_engine borrows the graph and the placement (they must
 * outlive it) and the engine given to attach; it owns its net_sim.
 */
#ifndef TRAINSIM_NET_ENGINE_H
#define TRAINSIM_NET_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/core/engine.h"
#include "sim/net/net_coll.h"
#include "sim/net/net_graph.h"
#include "sim/net/net_place.h"
#include "sim/util/err.h"

typedef enum {
    NET_STEP_ENGINE = 0, /* leave the task as lowered */
    NET_STEP_COMPUTE,    /* compute: scaled by the rank's factor / slowdown */
    NET_STEP_COLL,       /* collective of the rank's group along dim */
    NET_STEP_SEND        /* p2p to pipeline rank peer_pp */
} net_step_role;

typedef struct {
    uint8_t role;      /* net_step_role */
    uint8_t coll;      /* COLL: net_coll_kind (ALLREDUCE, ALLGATHER, REDUCE_SCATTER, or
                            P2P_SCATTER: the tensor group sends S/t per rank to the group of
                            pipeline rank peer_pp, which all-gathers) */
    uint8_t dim;       /* COLL: net_dim (NET_DIM_TP, NET_DIM_DP; NET_DIM_EP: the rank's expert-parallel
                       group, net_place_ep_ranks, for ALLTOALL and DEEPEP; NET_DIM_ETP, NET_DIM_TPEP:
                       its expert-tensor-parallel or tp_ep group, for ALLGATHER and REDUCE_SCATTER;
                       NET_DIM_CPA: its context-parallel all-to-all group, for ALLTOALL; NET_DIM_CPR:
                       its context-parallel ring, for RING_STEP, ALLGATHER and REDUCE_SCATTER;
                       NET_DIM_TCP, NET_DIM_STAGE: its t x cp or t x cp x d consecutive ranks) */
    int peer_pp;       /* SEND, P2P_SCATTER: receiving pipeline rank */
    double bytes;      /* COLL, SEND: size, commcost/NCCL convention */
    int64_t dur_ns;    /* COMPUTE: duration on the nominal GPU */
    int64_t lat_ns;    /* COLL: NCCL's latency of the collective, which replaces the links' (0: the
                       links' alone; net_sim_start_plan) */
    double hot;        /* ALLTOALL, DEEPEP: net_coll_req's (the busiest rank is position 0 of the group) */
    double rdma_bytes; /* DEEPEP: net_coll_req's */
    uint8_t hot_sends; /* ALLTOALL, DEEPEP: net_coll_req's */
    /* COLL along NET_DIM_DP (MoE): bytes the rank's expert-data-parallel
     * group (net_place_edp_ranks) moves after the data-parallel group's
     * collective ends, the same kind, and NCCL's latency of it (0: none;
     * in full mode every expert-data-parallel group of the data-parallel
     * group's members, which must hold it whole) */
    double bytes_edp;
    int64_t lat_edp_ns;
} net_step_desc;

/* Describe tag; return TS_OK or a TS_E* code (with err set). */
typedef int (*net_step_fn)(void *ctx, uint32_t tag, net_step_desc *out, ts_err *err);

typedef struct {
    bool full;                    /* simulate every rank (see above) */
    double comm_compute_slowdown; /* s >= 0; 0 = off */
    net_coll_algo algo;           /* algorithm for all-reduces (AUTO = NCCL-like choice) */
} net_engine_opts;

typedef struct {
    uint64_t collectives; /* collectives run */
    uint64_t p2p;         /* sends run */
    net_flow_stats flows;
} net_engine_stats;

typedef struct net_engine net_engine;

int net_engine_new(const net_graph *g, const net_place *pl, const net_engine_opts *opts, net_step_fn fn, void *fn_ctx,
                   net_engine **out, ts_err *err);
void net_engine_free(net_engine *ne);

/* Hooks to pass to engine_create (ctx = ne). */
engine_hooks net_engine_hooks(net_engine *ne);

/* The hooks' bodies, for a caller that chains them with its own hooks. */
void net_engine_task_started(net_engine *ne, engine *e, engine_task_id id, const engine_task_info *ti, int64_t now_ns);
void net_engine_task_ended(net_engine *ne, engine *e, engine_task_id id, const engine_task_info *ti, int64_t now_ns);

/* Ranks the engine must have: t*d*p in full mode, p otherwise. */
int net_engine_n_ranks(const net_engine *ne);

/* Engine rank of global coordinates (tp, dp, pp); -1 if the mode does not
 * simulate that rank. */
int net_engine_rank(const net_engine *ne, int tp, int dp, int pp);

/* Compute factor of an engine rank (> 0; 2 = twice as slow). Full mode only
 * for factors != 1 (a symmetric run has no individual ranks). */
int net_engine_set_compute_factor(net_engine *ne, int engine_rank, double factor, ts_err *err);

/* After lowering, before engine_run: mark driven tasks external. */
int net_engine_attach(net_engine *ne, engine *e, ts_err *err);

/* First error raised inside a hook (TS_OK if none); copies its message. */
int net_engine_error(const net_engine *ne, ts_err *err);

net_engine_stats net_engine_get_stats(const net_engine *ne);

/* Keep per-link usage (net_flow.h) from the first flow on: call before
 * engine_run. TS_ENOMEM. */
int net_engine_track_links(net_engine *ne, ts_err *err);

/* Usage of link l (zeros unless tracked). */
net_link_usage net_engine_link_usage(const net_engine *ne, int l);

#endif
