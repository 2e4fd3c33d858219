/* commcost — latency + bandwidth (alpha-beta) time of one collective.
 *
 * The narrow interface the engine uses for communication ops when no
 * network model runs (the network model, sim/net, drives them with
 * contention-aware flows instead): a function from (collective, bytes, group
 * description) to nanoseconds.
 *
 * Size convention (S = bytes, as NCCL's tests count it):
 *   all-reduce      S = the buffer reduced (each rank holds S bytes in and out)
 *   all-gather      S = the gathered output (each rank contributes S/n)
 *   reduce-scatter  S = the input reduced (each rank keeps S/n)
 *   p2p             S = the message
 * Closed forms (formulas.md) for a group inside one node, per-rank bus
 * bandwidth beta and per-step latency alpha:
 *   all-reduce      2(n-1)*alpha + 2(n-1)/n * S/beta
 *   all-gather, reduce-scatter   (n-1)*alpha + (n-1)/n * S/beta
 *   p2p             alpha + S/beta
 * A group that spans nodes (k ranks in each of N nodes, n = k*N) runs
 * hierarchically: intra-node reduce-scatter over NVLink, an inter-node
 * collective of S/k per rank through the rank's share of the node's NICs,
 * intra-node all-gather (for all-reduce; all-gather and reduce-scatter keep
 * only their half). The inter-node part is bounded by the per-GPU NIC share
 * (nics_per_node * achievable_per_nic / gpus_per_node), since the other
 * groups of the node (e.g. the t data-parallel groups of a tensor-parallel
 * node) use the node's other NICs at the same time. These alpha-beta forms
 * are the model of a calibration file's rows (model COMMCOST_ALPHA_BETA).
 *
 * The default (model COMMCOST_NCCL, commcost_params_default / _topo) is
 * NCCL's own tuning model (../shared/reference/nccl_tuning.md): for each
 * call the time of every algorithm NCCL could run (tree and ring
 * all-reduce; ring all-gather / reduce-scatter; NVLS inside one NVLink SHARP
 * node; PAT with one GPU per node) with each protocol (LL, LL128, Simple),
 * latency + bytes / algorithm bandwidth, the fastest kept in NCCL's scan
 * order. Bus bandwidth: inside a node the measured ring or NVLS figure;
 * across nodes, NCCL's ring being pipelined through NVLink and the NICs,
 * min(NVLink ring, k x NIC share x fabric factor), then NCCL's protocol
 * factors and caps. The fabric factor (commcost_net_factor) is the
 * tightest min(1, B / o) over the blocks of B nodes the group spans beyond
 * (leaf, level-2 group, pod; o their cumulative uplink oversubscription):
 * a ring visits consecutive nodes, so a block sends one channel's traffic
 * out while its NICs inject B times that. Latencies: NCCL's base and
 * per-step tables, with the topology's NIC-to-NIC path latency as NCCL's
 * latencyInter. A group's nodes are taken as consecutive; contention
 * between groups is not modelled (the network model's flows do that).
 *
 * Every default constant cites its source in commcost.c.
 */
#ifndef TRAINSIM_COMMCOST_H
#define TRAINSIM_COMMCOST_H

#include <stdint.h>

#include "sim/config/config.h"
#include "sim/config/topo.h"
#include "sim/util/err.h"

/* COMM_ALL_TO_ALL: S = the bytes each rank sends in total (S/n to each
 * peer, its own share included); time = (n-1) p2p sends of S/n one after
 * the other (NCCL's all-to-all is n-1 grouped sends and receives: the
 * rank's link carries them in turn), each over NVLink when the whole group
 * is inside one node, else through the rank's NIC share. */
typedef enum {
    COMM_ALL_REDUCE = 0,
    COMM_ALL_GATHER,
    COMM_REDUCE_SCATTER,
    COMM_P2P,
    COMM_ALL_TO_ALL,
    COMM_COLL_COUNT
} commcost_coll;

/* Where the ranks of one group sit. */
typedef struct {
    int ranks;          /* n >= 1: ranks in the group (2 for p2p) */
    int ranks_per_node; /* k in [1, n], n % k == 0: ranks of the group in each node
                           (k == n: the group is inside one node) */
} commcost_group;

/* Greatest common divisor of a, b >= 0 (gcd(a, 0) = a). */
int commcost_gcd(int a, int b);

/* The group of n ranks spaced stride apart in rank order (Megatron's
 * folds: tensor fastest, then the next dimension, ...) on nodes of gpn
 * GPUs: gcd(n, gpn / stride) of them share a node when stride < gpn divides
 * gpn, one otherwise (and for n <= 1). stride >= 1, gpn >= 1. */
commcost_group commcost_group_strided(int n, int stride, int gpn);

/* How commcost_ns costs a collective (see the top of this file). */
typedef enum {
    COMMCOST_ALPHA_BETA = 0, /* the closed forms above, from the link classes alone (calibration files) */
    COMMCOST_NCCL            /* NCCL's tuning model over the topology (below) */
} commcost_model;

#define COMMCOST_MAX_TIERS 4

/* Link classes of one node kind. Bandwidths in GB/s (1e9 B/s), per GPU.
 * The first six fields are the alpha-beta model's; the rest describe the
 * node and fabric for the NCCL model (all zero = alpha-beta). */
typedef struct {
    double nvlink_allreduce_busbw_gbps; /* intra-node all-reduce bus bandwidth (NCCL busbw) */
    double nvlink_busbw_gbps;           /* intra-node all-gather / reduce-scatter bus bandwidth */
    double nvlink_p2p_gbps;             /* one GPU pair over NVLink */
    double nvlink_alpha_ns;             /* latency per ring step inside a node */
    double nic_gbps_per_gpu;            /* achievable inter-node bandwidth per GPU (NIC share) */
    double nic_alpha_ns;                /* latency per step across nodes */
    /* ---- NCCL model ---- */
    commcost_model model;
    int cc;                                  /* NCCL's compute-capability row: 1 Ampere, 2 Hopper */
    int amd_cpu;                             /* the host CPU is AMD (picks NCCL's LL row and network overhead) */
    int nvls;                                /* NVLink SHARP in the node (the all-reduce busbw above is NVLS's) */
    int gpus_per_node;                       /* GPUs of one NVLink domain */
    int nics_per_node;                       /* compute NICs per node */
    double nic_gbps;                         /* per NIC line rate, GB/s per direction */
    double nvlink_link_gbps;                 /* per NVLink link as NCCL's search counts it (channels) */
    double lat_leaf_us;                      /* NIC-to-NIC path latency inside one leaf block, us */
    int tiers;                               /* fabric boundaries a group can cross (0 = non-blocking single block) */
    double tier_nodes[COMMCOST_MAX_TIERS];   /* nodes under one block of this tier */
    double tier_oversub[COMMCOST_MAX_TIERS]; /* cumulative oversubscription of its uplinks */
    double tier_lat_us[COMMCOST_MAX_TIERS];  /* NIC-to-NIC path latency crossing it, us */
} commcost_params;

/* An NCCL algorithm and protocol (nccl_tuning.md section 1 numbering is not
 * kept: these are the ones modelled). */
typedef enum {
    COMMCOST_ALGO_TREE = 0,
    COMMCOST_ALGO_RING,
    COMMCOST_ALGO_NVLS,
    COMMCOST_ALGO_PAT,
    COMMCOST_ALGO_COUNT
} commcost_algo;
typedef enum {
    COMMCOST_PROTO_LL = 0,
    COMMCOST_PROTO_LL128,
    COMMCOST_PROTO_SIMPLE,
    COMMCOST_PROTO_COUNT
} commcost_proto;

/* What the NCCL model chose for one call. */
typedef struct {
    commcost_algo algo;
    commcost_proto proto;
    double time_ns;    /* NCCL's time: latency + bytes / algorithm bandwidth */
    double lat_ns;     /* its latency part */
    double busbw_gbps; /* the bus bandwidth of the choice (nccl-tests convention) */
    double net_factor; /* the fabric's factor on the NIC share for this group (1 = none) */
} commcost_choice;

/* Defaults for the node kind of gpu (DGX A100 for "A100*", DGX H100 for
 * "H100*" and "H200*"), with the NCCL model over the kind's default cluster
 * (topo_default_for). TS_EINVAL naming the known kinds otherwise. */
int commcost_params_default(const gpu_spec *gpu, commcost_params *out, ts_err *err);

/* The NCCL model over topology t for a run of gpus GPUs (the first
 * ceil(gpus / gpus_per_node) nodes; pods split those): the node kind's
 * measured figures (commcost_params_default) scaled by t's NVLink rate, t's
 * NICs (count, rate), leaf and level-2 blocks with their oversubscription,
 * pods and the pod oversubscription, and the link latencies. A link-list
 * topology gives NVLink and NIC rates from its links and counts as one
 * non-blocking block. TS_EINVAL for an unknown GPU kind. */
int commcost_params_topo(const gpu_spec *gpu, const struct topo *t, int gpus, commcost_params *out, ts_err *err);

/* Check a group: n >= 1, 1 <= k <= n, n % k == 0 (p2p: n == 2). TS_EINVAL
 * with what was wrong. */
int commcost_group_check(commcost_coll coll, const commcost_group *g, ts_err *err);

/* Time of one collective of `bytes` (convention above) in ns, rounded to
 * the nearest integer; 0 for n == 1 or bytes == 0. The group must pass
 * commcost_group_check (not re-checked: behaviour is unspecified otherwise).
 * COMMCOST_NCCL: the time of commcost_nccl_choose's choice (p2p: the
 * alpha-beta form with the fabric's latency and NIC share). */
int64_t commcost_ns(const commcost_params *p, commcost_coll coll, int64_t bytes, const commcost_group *g);

/* NCCL's choice for a collective (not p2p) under p (any model: alpha-beta
 * params give their ring as the only candidate). TS_EINVAL for p2p. */
int commcost_nccl_choose(const commcost_params *p, commcost_coll coll, int64_t bytes, const commcost_group *g,
                         commcost_choice *out, ts_err *err);

/* NCCL's time for one algorithm and protocol, ns; < 0 when NCCL would not
 * run it (unsupported for the collective or the fabric). */
double commcost_nccl_time_ns(const commcost_params *p, commcost_coll coll, int64_t bytes, const commcost_group *g,
                             commcost_algo algo, commcost_proto proto);

/* NCCL's terms of one collective for the flow modes, whose links run at
 * Simple's rates and whose steps cost only the links' latency.
 * *lat_ns: the latency of commcost_nccl_choose's choice (NCCL's base and
 * per-step latencies). *bw_factor: the choice's time per byte over that of
 * the algorithm the flows run (net_coll.h: NVLS for an all-reduce inside
 * one NVLink SHARP node, a ring otherwise) with the Simple protocol, both
 * at this size and latency left out: above 1 where NCCL picks LL or LL128
 * (fewer payload bytes per second than Simple) or a slower algorithm,
 * below 1 where its tree beats the ring. A flow mode that scales the bytes
 * by *bw_factor and waits *lat_ns instead of its links' latencies takes the
 * default mode's time on an uncontended fabric, up to the difference of
 * the two models' Simple rates. *bw_factor 1 and *lat_ns 0 for p2p,
 * all-to-all, a group of one rank, the alpha-beta model, or where no
 * choice is made. */
void commcost_flow_terms(const commcost_params *p, commcost_coll coll, int64_t bytes, const commcost_group *g,
                         double *bw_factor, int64_t *lat_ns);

/* The fabric's factor (0, 1] on the per-GPU NIC share for a group spanning
 * `nodes` consecutive nodes (1 for the alpha-beta model). */
double commcost_net_factor(const commcost_params *p, int nodes);

/* "tree", "ring", "nvls", "pat"; "LL", "LL128", "Simple". */
const char *commcost_algo_name(commcost_algo a);
const char *commcost_proto_name(commcost_proto p);

/* Bytes a rank sends over the wire for the collective (ring algorithm,
 * flat): all-reduce 2(n-1)/n*S, all-gather and reduce-scatter (n-1)/n*S,
 * p2p S. For Megatron's communication-volume checks. */
double commcost_wire_bytes(commcost_coll coll, int64_t bytes, int ranks);

/* "all-reduce", "all-gather", "reduce-scatter", "p2p". */
const char *commcost_coll_name(commcost_coll coll);

#endif
