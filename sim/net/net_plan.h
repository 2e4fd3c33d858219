/* net_plan — a collective's plan as net_coll builds and runs it: phases
 * of transfers (flows) grouped in bundles that move in lockstep, and the
 * steps that build one (net_coll.h describes the collectives; net_a2a.h the
 * MoE all-to-alls). The requests and the plan types live here so that the
 * plan builders of several files share them without including each other.
 *
 * Ownership: a net_plan owns its arrays (net_plan_free), unless packed.
 */
#ifndef TRAINSIM_NET_PLAN_H
#define TRAINSIM_NET_PLAN_H

#include <stdint.h>

#include "sim/net/net_flow.h"
#include "sim/net/net_graph.h"
#include "sim/net/net_route.h"
#include "sim/util/err.h"

/* Software cost of one NCCL step beside link latency, microseconds. An
 * order-of-magnitude assumption (no published row); 0 keeps the closed-form
 * test exact on link latency alone. */
#define NET_STEP_OVERHEAD_US 0.0

typedef enum {
    NET_COLL_ALLREDUCE = 0,
    NET_COLL_ALLGATHER,
    NET_COLL_REDUCE_SCATTER,
    NET_COLL_BROADCAST,
    NET_COLL_P2P,         /* gpus[0] -> gpus[1] */
    NET_COLL_P2P_SCATTER, /* gpus[0..t-1] (one server) -> gpus[t..2t-1] (another) */
    NET_COLL_ALLTOALL,    /* the MoE alltoall dispatcher's all-to-all */
    NET_COLL_DEEPEP,      /* DeepEP's dispatch or combine */
    NET_COLL_RING_STEP,   /* every gpus[i] sends S to gpus[i+1 mod n]: context parallelism's K,V exchange */
    NET_COLL_KIND_COUNT
} net_coll_kind;

typedef enum {
    NET_ALGO_AUTO = 0,
    NET_ALGO_RING,
    NET_ALGO_TREE,
    NET_ALGO_HIER,
    NET_ALGO_NVLS,
    NET_ALGO_PIPE
} net_coll_algo;

typedef struct {
    net_coll_kind kind;
    net_coll_algo algo;
    const int *gpus;   /* GPU indices (net_graph numbering), in the group's rank order; borrowed */
    int n;             /* group size (P2P: 2; P2P_SCATTER: 2t) */
    double bytes;      /* S, see above */
    int root;          /* BROADCAST: position of the root in gpus; ALLTOALL, DEEPEP: the busiest rank's */
    uint64_t flow_key; /* mixed into the ECMP hash of every flow */
    double hot;        /* ALLTOALL, DEEPEP: factor >= 1 on the bytes position root receives (0 = 1) */
    int hot_sends;     /* ALLTOALL, DEEPEP: hot scales what root sends instead */
    double rdma_bytes; /* DEEPEP: what one rank sends over RDMA in all */
    int merge_peers;   /* ALLTOALL, DEEPEP: the positions other than root move as one (net_coll.h) */
} net_coll_req;

typedef struct {
    int src, dst; /* node ids */
    double bytes;
    int bundle; /* transfers of one bundle (contiguous) move in lockstep: one flow */
    int nlinks;
    int links[NET_MAX_PATH];
} net_xfer;

typedef struct {
    int first, count; /* transfers x[first .. first+count) */
    int nbundles;     /* flows the phase starts: bundles b[first_bundle .. +nbundles) */
    int first_bundle;
    int64_t lat_ns;
} net_phase;

/* A bundle as its flow is started: the distinct links of its transfers'
 * routes, in order of first appearance, each with the number of times the
 * routes cross it (a link crossed k times carries k x the flow's rate),
 * and the largest transfer's bytes. */
typedef struct {
    int first_link, nlinks; /* links bl[first_link .. first_link+nlinks), counts blw[...] */
    double bytes;
    net_flow_hint hint; /* the runner's: its rate on idle links */
} net_bundle;

typedef struct {
    net_xfer *x;
    int nx, capx;
    net_phase *ph;
    int nph, capph;
    net_bundle *b;
    int nb, capb; /* every phase's bundles, in order */
    int *bl, *blw;
    int nbl, capbl;     /* their links and counts (capbl each) */
    net_coll_algo algo; /* the algorithm used (AUTO resolved) */
    int64_t lat_ns;     /* the phases' latencies together: its time beyond the bytes' on an idle fabric */
    int cur_bundle;     /* while building */
    int packed;         /* net_sim's copy for running: ph, b and bl share the header's block
                           (no transfers); freed with free() alone */
} net_plan;

/* Free a built plan's arrays (not plan itself); nothing for a packed one. */
void net_plan_free(net_plan *plan);

/* Building a plan: append a transfer src -> dst (node ids) of bytes,
 * routed (ECMP key mixed with the transfer's index), to the open phase's
 * current bundle (p->cur_bundle; ++ it to start the next one); open a
 * phase; close it with its latency, steps x (largest route latency + step
 * overhead), added to the plan's. TS_ENOMEM, or the router's error. */
int net_plan_xfer(net_router *r, net_plan *p, int src, int dst, double bytes, uint64_t key, ts_err *err);
/* net_plan_xfer routed as the transfer of index `index` would be (a plan
 * that orders its transfers otherwise than the one it stands for keeps its
 * routes). */
int net_plan_xfer_at(net_router *r, net_plan *p, int src, int dst, double bytes, uint64_t key, int index, ts_err *err);
int net_plan_phase_begin(net_plan *p, ts_err *err);
void net_plan_phase_end(const net_graph *g, net_plan *p, int steps);

/* Fill p->b, p->bl and p->blw from the phases' transfers (after the
 * phases are built; net_coll_plan calls it). TS_ENOMEM, or TS_ESTATE when
 * a phase's bundles are not numbered 0, 1, ... in order. */
int net_plan_bundles(net_plan *p, ts_err *err);

/* A copy of built plan p for running, in one block (free() frees it all):
 * the header, then its phases, bundles and bundle links and counts; the
 * transfers are not kept. NULL when out of memory. */
net_plan *net_plan_pack(const net_plan *p);

#endif
