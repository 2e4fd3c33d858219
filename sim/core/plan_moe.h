/* plan_moe — what a mixture-of-experts layer adds to the plan (plan_build.h):
 * its op lists per pass, its saved-activation memory, its parameters on one
 * rank and the expert-parallel and expert-data-parallel groups.
 *
 * A MoE layer is the dense layer without its MLP (layer_shape.no_mlp: LN2,
 * its output and the residual add stay) plus the MoE block of moe.h
 * (router, top-k, the dispatcher's input side, the local experts' grouped
 * GEMMs, its output side, shared experts; moe_disp.h). Forward and
 * recompute: the layer's ops, then the block's; backward (B, I, W): the
 * block's, then the layer's. Costs are the ops' (cost.h); the all-to-alls
 * (layer_op.a2a with coll COMM_P2P) take moe_a2a_ns on the expert-parallel
 * group with the alltoall dispatcher, moe_deepep_ns with the flex one and
 * DeepEP; the dispatcher's all-gathers and reduce-scatters (allgather over
 * etp x ep ranks, alltoall's over the etp ranks) commcost_ns on their
 * consecutive ranks. The allgather dispatcher's gathered buffers are
 * transient: allocated when a MoE layer's pass starts, freed when it ends.
 *
 * Routing: with --moe-router-force-load-balancing every EP rank receives
 * the mean load (load factor 1); otherwise the per-expert loads follow
 * moe_expert_loads_zipf with exponent --moe-routing-skew and seed
 * PLAN_MOE_ROUTING_SEED, the busiest EP rank's share over the mean
 * (moe_rank_load_factor, the capacity factor capping each expert) sizes
 * the expert GEMMs and saved activations of every MoE layer (the same
 * routing in each layer: an assumption). With --moe-expert-load FILE
 * (c->moe.expert_load, unless balance is forced) the per-expert loads are
 * the file's shares of one micro-batch's routed copies
 * (plan_moe_scale_loads) in place of the Zipf draw, with a per-layer file
 * each MoE layer's own rows (so each layer its own busiest rank and load
 * factor: plan_moe_layers); the rest (the
 * placement of experts on EP ranks, the capacity cap, the drops) is the
 * same. A capacity factor caps each
 * expert at ceil(factor x its mean load) also under balance: below 1 every
 * expert drops tokens and the busiest rank runs less than the mean (load
 * factor below 1); the dropped share is reported. With
 * --moe-pad-expert-input-to-capacity every expert runs its capacity: the
 * load factor is the capacity factor.
 *
 * Layout (Megatron-core): the experts of a stage are folded ETP x EP x EDP,
 * innermost first, so an EP group is ep ranks at a stride of etp and an EDP
 * group edp ranks at a stride of etp x ep; the dense part keeps t x cp x d
 * (RankGenerator's tp-cp-dp-pp), its gradients reduced over d x cp.
 *
 * plan_moe: plain values, no heap memory; plan_moe_layers owns arrays.
 */
#ifndef TRAINSIM_PLAN_MOE_H
#define TRAINSIM_PLAN_MOE_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/config/config.h"
#include "sim/model/commcost.h"
#include "sim/model/layer.h"
#include "sim/util/err.h"

/* The routing model's seed (moe_expert_loads_zipf): fixed so that runs are
 * deterministic; which experts are popular is arbitrary, not measured. */
#define PLAN_MOE_ROUTING_SEED 1u

/* The per-expert loads of one micro-batch from measured counts: out[i] =
 * routed x tokens[i] / sum(tokens) (sum > 0; else routed / n each), so that
 * the capacity factor caps each expert at its share of routed copies as
 * moe_rank_load_factor expects. */
void plan_moe_scale_loads(const double *tokens, int n, double routed, double *out);

/* One layer's saved activations in the memory timeline: kept by F,
 * re-created by R, and of their sum what I frees and what only W needs;
 * stash: the output gradients W reads, allocated by I and freed by W
 * (layer_wgrad_stash_bytes). */
typedef struct {
    int64_t kept, by_rc, free_i, free_w, stash;
} plan_layer_mem;

/* Sum a saved-tensor list into m. */
void plan_layer_mem_of(const layer_saved_list *l, plan_layer_mem *m);

typedef struct {
    bool on;                 /* the model has MoE layers (c->moe.num_experts > 0) */
    double load_factor;      /* the busiest EP rank's kept tokens over the mean routed tokens of a rank (>= 1) */
    double dropped;          /* fraction of the routed tokens over capacity (dropped), 0 dropless */
    layer_ops f, r, b, i, w; /* one MoE layer's ops, recompute as configured */
    layer_ops nb, ni, nw;    /* the same backward without recomputation */
    plan_layer_mem m_rc, m_none;
    int64_t params_dense;     /* one MoE layer's non-expert parameters on a rank (attention / t, norms,
                                 router, shared experts / t) */
    int64_t params_expert;    /* its routed experts on a rank: E / ep experts, each / etp */
    commcost_group ep_group;  /* the all-to-all's ranks and those of them in one node */
    int64_t a2a_ns;           /* one dispatch or combine: moe_a2a_ns (alltoall) or moe_deepep_ns (flex
                                 with DeepEP); 0 with allgather (no all-to-all) */
    int64_t a2a_mx_ns;        /* the same carrying MXFP8 rows (moe_disp.h: --moe-dispatch-fwd-dtype or
                                 --moe-combine-bwd-dtype mxfp8; fp8_mxfp8_bytes(1, h) a row), 0 without */
    double remote_nodes;      /* DeepEP: remote nodes a token is sent to (moe_deepep_remote_nodes_grouped);
                                 0 otherwise */
    int64_t a2a_lat_ns;       /* of a2a_ns, the latency (moe_a2a_alpha_ns): the flow modes' */
    commcost_group edp_group; /* the expert gradients' reduction group */
    int edp;
    int64_t transient;    /* the dispatcher's buffers of one pass of a MoE layer, allocated when the pass starts
                          and freed when it ends (moe_block_transient_bytes) */
    int64_t rc_transient; /* the same in the recompute pass where it re-runs the dispatcher (full recomputation,
                             --recompute-modules moe), else 0 */
} plan_moe;

/* Fill mo for config c (resolved: moe_flags_finish accepted it) from the
 * layer shape rc (recompute as configured), gpn GPUs per node, the
 * collective costs cc. Group-limited routing changes DeepEP's remote nodes
 * (moe_deepep_remote_nodes_grouped; TS_EINVAL naming the flag where that
 * closed form does not apply), not the alltoall volume. Dense model:
 * mo->on false and nothing else set. TS_EINVAL when the block's ops do not
 * fit (LAYER_MAX_OPS) or moe.h refuses the shape, TS_ENOMEM for the routing
 * model's per-expert loads (freed before return). */
int plan_moe_build(const config *c, const layer_shape *rc, int gpn, const commcost_params *cc, plan_moe *mo,
                   ts_err *err);

/* The same for MoE layer `layer` of the model (0-based; the routing of
 * that layer: its own rows of a per-layer --moe-expert-load file, else the
 * model's one routing). plan_moe_build is this for the first MoE layer. */
int plan_moe_build_layer(const config *c, const layer_shape *rc, int layer, int gpn, const commcost_params *cc,
                         plan_moe *mo, ts_err *err);

/* The routing model alone for MoE layer `layer`: its load factor and
 * dropped share (as plan_moe's load_factor and dropped). TS_ENOMEM only. */
int plan_moe_layer_routing(const config *c, const layer_shape *rc, int layer, double *lf, double *dropped, ts_err *err);

/* Every MoE layer of the model: one plan_moe per distinct load factor
 * (layers with the same factor share one: the presets' layers build their
 * ops once), each layer's index into them. Owned: plan_moe_layers_free. */
typedef struct {
    plan_moe *kinds;   /* n_kinds variants, in the order of their first layer (kinds[0]: the first MoE layer's) */
    int n_kinds;       /* 0: a dense model */
    int *of_layer;     /* [num_layers]: the layer's index into kinds, -1 for a dense layer */
    double lf_max;     /* the largest load factor of a MoE layer (the busiest rank of the busiest layer) */
    double lf_min;     /* the smallest */
    int busiest_layer; /* the first layer with lf_max */
    double dropped;    /* the routed tokens dropped, over every MoE layer (each layer routes the same count) */
} plan_moe_layers;

/* Build s for config c (as plan_moe_build) for every layer of the model.
 * Dense model: n_kinds 0, nothing allocated. Errors as plan_moe_build,
 * TS_ENOMEM; s freed on error. */
int plan_moe_layers_build(const config *c, const layer_shape *rc, int gpn, const commcost_params *cc,
                          plan_moe_layers *s, ts_err *err);

/* Layer `layer`'s variant, NULL for a dense layer or a dense model. */
const plan_moe *plan_moe_layers_of(const plan_moe_layers *s, int layer);

/* Release s's arrays; s zeroed. Safe on a zeroed s. */
void plan_moe_layers_free(plan_moe_layers *s);

#endif
