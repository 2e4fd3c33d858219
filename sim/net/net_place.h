/* net_place — rank placement: global ranks -> GPUs of a net_graph, and
 * the tensor / data / pipeline groups of each rank.
 *
 * A global rank has coordinates (tp, dp, pp). The order string lists the
 * dimensions innermost first; Megatron-LM's default ("tp-cp-ep-dp-pp"
 * without context/expert parallelism) is "tp-dp-pp":
 *   rank = tp + t * (dp + d * pp).
 * Rank r runs on GPU r (servers filled in order), so with t <= GPUs per
 * server the t ranks of a tensor group share one NVLink domain. A tensor
 * group that spans servers is allowed (its all-reduces then cross NICs) but
 * reported: net_place.tp_spans_servers and net_place.note.
 *
 * Ownership: net_place_init allocates gpu_of_rank; net_place_free releases
 * it (the struct itself is the caller's).
 */
#ifndef TRAINSIM_NET_PLACE_H
#define TRAINSIM_NET_PLACE_H

#include <stdbool.h>

#include "sim/net/net_graph.h"
#include "sim/util/err.h"

/* NET_DIM_EP, NET_DIM_ETP and NET_DIM_TPEP are not placement dimensions:
 * the expert-parallel, expert-tensor-parallel and expert tensor-and-model-
 * parallel groups, folds of the tensor and data-parallel ranks of one stage
 * (net_place_set_experts). */
typedef enum {
    NET_DIM_TP = 0,
    NET_DIM_DP,
    NET_DIM_PP,
    NET_DIMS,
    NET_DIM_EP = NET_DIMS,
    NET_DIM_ETP = 4,
    NET_DIM_TPEP = 5,
    NET_DIM_CPA = 6,  /* context parallelism's all-to-all level (net_place_set_cp) */
    NET_DIM_CPR = 7,  /* context parallelism's ring level */
    NET_DIM_TCP = 8,  /* the t x cp consecutive ranks of a tensor and context-parallel group */
    NET_DIM_STAGE = 9 /* the t x cp x d ranks of a pipeline stage */
} net_dim;

typedef struct {
    int size[NET_DIMS];    /* t, d, p */
    int order[NET_DIMS];   /* dimensions, innermost first */
    int stride[NET_DIMS];  /* rank stride of each dimension */
    int n_ranks;           /* t * d * p */
    int *gpu_of_rank;      /* n_ranks: GPU index (net_graph numbering) */
    int ep, etp;           /* expert-parallel and expert-tensor-parallel sizes (1, 1 unless set) */
    int cp, cp_a2a;        /* context-parallel size and its all-to-all level (1, 1 unless set) */
    bool experts;          /* net_place_set_experts was called (a MoE model) */
    bool tp_spans_servers; /* some tensor group is not inside one server */
    char note[256];        /* human-readable report of the above, "" if none */
} net_place;

/* Place t*d*p ranks on g with the given order ("tp-dp-pp", "tp-pp-dp", ...;
 * NULL = "tp-dp-pp"). TS_EINVAL if sizes are < 1, the order is not a
 * permutation of tp, dp, pp, or there are more ranks than GPUs. */
int net_place_init(net_place *pl, const net_graph *g, int t, int d, int p, const char *order, ts_err *err);
void net_place_free(net_place *pl);

/* Global rank of coordinates (tp, dp, pp), and back. */
int net_place_rank(const net_place *pl, int tp, int dp, int pp);
void net_place_coords(const net_place *pl, int rank, int *tp, int *dp, int *pp);

/* The group of `rank` along dim: writes the GPU indices of its members, in
 * group-rank order, into gpus (room for size[dim]) and returns the count. */
int net_place_group_gpus(const net_place *pl, net_dim dim, int rank, int *gpus);

/* Expert groups (MoE): Megatron-core folds the t x d ranks of one pipeline
 * stage (tensor and data-parallel coordinates, s = tp + t dp) as etp-ep-edp,
 * innermost first: the expert-parallel group of s is the ep ranks
 * s mod etp + etp j + etp ep floor(s / (etp ep)), j = 0..ep-1, in that order
 * (with the default order tp-dp-pp: ep ranks a stride of etp apart within
 * etp x ep consecutive ranks; moe_ep_group_nodes counts their nodes). It
 * is defined on coordinates, so another --rank-order moves it with the
 * ranks. TS_EINVAL unless ep, etp >= 1 and etp x ep divides t x d. */
int net_place_set_experts(net_place *pl, int ep, int etp, ts_err *err);

/* The expert-data-parallel group of `rank` (the routed experts' gradients
 * are reduced over it): the t d / (etp ep) ranks s mod (etp ep) + etp ep j
 * of its stage, j = 0, 1, ...; writes their global ranks into ranks and
 * returns their count. */
int net_place_edp_ranks(const net_place *pl, int rank, int *ranks);

/* Context parallelism (Megatron-core's order tp-cp-ep-dp-pp, cp inside
 * dp): the data-parallel dimension of the placement holds cp x d ranks,
 * the cp ranks of a context-parallel group innermost (index c = dp mod
 * cp), so the data-parallel group is the d x cp ranks dense gradients
 * are reduced over and the experts fold over t x cp x d ranks of a stage.
 * A context-parallel group of cp = ca x cr ranks (ca = cp_a2a, the
 * all-to-all level of --cp-comm-type a2a+p2p; cp for a2a, 1 for p2p and
 * all_gather) has two levels: its all-to-all groups (NET_PLACE_CPA) of the
 * ca ranks c = ca floor(c / ca) + j, and its rings (NET_PLACE_CPR) of the
 * cr ranks c mod ca + ca j. TS_EINVAL unless cp >= 1 divides the
 * data-parallel size and ca divides cp. */
int net_place_set_cp(net_place *pl, int cp, int cp_a2a, ts_err *err);

/* The expert-tensor-parallel group of `rank` (NET_PLACE_ETP: the etp
 * ranks floor(s / etp) etp + j of its stage, which share the same experts)
 * and its expert tensor-and-model-parallel group (NET_PLACE_TPEP: the
 * etp x ep ranks floor(s / (etp ep)) etp ep + j, over which the allgather
 * dispatcher gathers and reduce-scatters; Megatron-core's tp_ep group):
 * both consecutive in the fold, as moe_disp.h places them. */

/* The tensor and context-parallel group of `rank` (NET_PLACE_TCP: the
 * t x cp ranks floor(s / (t cp)) t cp + j of its stage, s = tp + t dp,
 * over which the MoE aux loss's token counts are all-reduced with cp > 1)
 * and its stage's ranks (NET_PLACE_STAGE: the t x cp x d ranks s = 0, 1,
 * ...: global_aux_loss's all-reduce, FP8 delayed scaling's amax one):
 * consecutive in Megatron's order tp-cp-dp, so another --rank-order moves
 * them with the coordinates. */

/* A group of `rank` by kind (net_place_group_gpus' along TP or DP, or
 * the expert groups above for NET_PLACE_EP, NET_PLACE_EDP, NET_PLACE_ETP,
 * NET_PLACE_TPEP, the context-parallel ones, NET_PLACE_CPA, NET_PLACE_CPR,
 * or NET_PLACE_TCP, NET_PLACE_STAGE): net_place_group_ranks writes its members' global ranks
 * in group-rank order and returns their count; net_place_group_size is
 * that count; net_place_group_leader returns the first of them without
 * listing them. */
enum {
    NET_PLACE_TP = NET_DIM_TP,
    NET_PLACE_DP = NET_DIM_DP,
    NET_PLACE_EP = 2,
    NET_PLACE_EDP = 3,
    NET_PLACE_ETP = NET_DIM_ETP,
    NET_PLACE_TPEP = NET_DIM_TPEP,
    NET_PLACE_CPA = NET_DIM_CPA,
    NET_PLACE_CPR = NET_DIM_CPR,
    NET_PLACE_TCP = NET_DIM_TCP,
    NET_PLACE_STAGE = NET_DIM_STAGE,
    NET_PLACE_KINDS
};
int net_place_group_size(const net_place *pl, int kind);
int net_place_group_ranks(const net_place *pl, int kind, int rank, int *ranks);
int net_place_group_leader(const net_place *pl, int kind, int rank);

/* The expert-parallel group of `rank`: writes its members' global ranks,
 * in group-rank order, into ranks (room for pl->ep) and returns pl->ep. */
int net_place_ep_ranks(const net_place *pl, int rank, int *ranks);

#endif
