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
 * node) use the node's other NICs at the same time.
 *
 * Every default constant cites its source in commcost.c.
 */
#ifndef TRAINSIM_COMMCOST_H
#define TRAINSIM_COMMCOST_H

#include <stdint.h>

#include "sim/config/config.h"
#include "sim/util/err.h"

typedef enum { COMM_ALL_REDUCE = 0, COMM_ALL_GATHER, COMM_REDUCE_SCATTER, COMM_P2P, COMM_COLL_COUNT } commcost_coll;

/* Where the ranks of one group sit. */
typedef struct {
    int ranks;          /* n >= 1: ranks in the group (2 for p2p) */
    int ranks_per_node; /* k in [1, n], n % k == 0: ranks of the group in each node
                           (k == n: the group is inside one node) */
} commcost_group;

/* Link classes of one node kind. Bandwidths in GB/s (1e9 B/s), per GPU. */
typedef struct {
    double nvlink_allreduce_busbw_gbps; /* intra-node all-reduce bus bandwidth (NCCL busbw) */
    double nvlink_busbw_gbps;           /* intra-node all-gather / reduce-scatter bus bandwidth */
    double nvlink_p2p_gbps;             /* one GPU pair over NVLink */
    double nvlink_alpha_ns;             /* latency per ring step inside a node */
    double nic_gbps_per_gpu;            /* achievable inter-node bandwidth per GPU (NIC share) */
    double nic_alpha_ns;                /* latency per step across nodes */
} commcost_params;

/* Defaults for the node kind of gpu (DGX A100 for "A100*", DGX H100 for
 * "H100*" and "H200*"). TS_EINVAL naming the known kinds otherwise. */
int commcost_params_default(const gpu_spec *gpu, commcost_params *out, ts_err *err);

/* Check a group: n >= 1, 1 <= k <= n, n % k == 0 (p2p: n == 2). TS_EINVAL
 * with what was wrong. */
int commcost_group_check(commcost_coll coll, const commcost_group *g, ts_err *err);

/* Time of one collective of `bytes` (convention above) in ns, rounded to
 * the nearest integer; 0 for n == 1 or bytes == 0. The group must pass
 * commcost_group_check (not re-checked: behaviour is unspecified otherwise). */
int64_t commcost_ns(const commcost_params *p, commcost_coll coll, int64_t bytes, const commcost_group *g);

/* Bytes a rank sends over the wire for the collective (ring algorithm,
 * flat): all-reduce 2(n-1)/n*S, all-gather and reduce-scatter (n-1)/n*S,
 * p2p S. For Megatron's communication-volume checks. */
double commcost_wire_bytes(commcost_coll coll, int64_t bytes, int ranks);

/* "all-reduce", "all-gather", "reduce-scatter", "p2p". */
const char *commcost_coll_name(commcost_coll coll);

#endif
