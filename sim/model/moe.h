/* moe — closed forms of a mixture-of-experts model: parameter counts
 * (total and activated per token), forward FLOPs per token of the MoE
 * block, the token dispatcher's all-to-all volume, where an expert-parallel
 * group sits, and the load of the busiest expert-parallel rank. The
 * dispatcher's ops and volumes are moe_disp.h's.
 *
 * Shapes are Megatron-core's (megatron/core/transformer/moe): a MoE layer
 * replaces the MLP by a router (a bias-free h x E linear layer, softmax and
 * top-k in fp32), E routed experts of FFN size f_e (each an MLP of the
 * model's activation: SwiGLU has 3 h x f_e matrices, GeLU 2) and optional
 * shared experts of FFN size f_s that every token goes through. The norms,
 * the attention and the embeddings are those of the dense layer (flops.h).
 * Multi-latent attention (DeepSeek-V2 section 2.1, Megatron-core's
 * MLASelfAttention) replaces q, k, v and the projection by:
 *   q: h x q_lora, an RMSNorm of q_lora, q_lora x a(d_qk + d_rope)
 *      (without query compression, q_lora = 0: h x a(d_qk + d_rope));
 *   kv: h x (kv_lora + d_rope), an RMSNorm of kv_lora,
 *       kv_lora x a(d_qk + d_v);
 *   output: a d_v x h.
 * Layer i (from 0) is a MoE layer when i >= first_dense_layers and
 * (i - first_dense_layers) % layer_freq == 0 (Megatron's --moe-layer-freq N
 * makes layers 0, N, 2N, ... MoE; the pattern "([0]*K+[1]*M)" makes the
 * first K dense).
 *
 * Everything here is plain values: no heap memory.
 */
#ifndef TRAINSIM_MOE_H
#define TRAINSIM_MOE_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/config/config.h"
#include "sim/model/commcost.h"
#include "sim/model/cost.h"
#include "sim/model/layer.h"
#include "sim/model/moe_disp.h"
#include "sim/util/err.h"

typedef struct {
    int64_t attention;    /* one layer's attention (MLA or q/k/v/projection) with biases */
    int64_t dense_mlp;    /* one dense layer's MLP with biases */
    int64_t expert;       /* one routed expert with biases */
    int64_t shared;       /* the shared experts of one MoE layer (0 without) */
    int64_t router;       /* one MoE layer's router: h x E */
    int moe_layers;       /* layers that are MoE */
    int64_t total;        /* every parameter, embeddings and output included */
    int64_t active;       /* what one token uses: top-k experts of each MoE layer, not all E */
    int64_t expert_total; /* every routed expert of every MoE layer: what EP x EDP shards */
} moe_params;

/* Whether layer i (0-based) is a MoE layer (see above). Dense model
 * (e->num_experts == 0): never. */
bool moe_layer_is_moe(const moe_config *e, int layer);

/* Parameter counts of m with e's experts (e->num_experts may be 0: then
 * total equals flops_param_count's). Sizes multiply in int64 (a model within
 * CONFIG_MAX_PARAMS stays far from overflow). */
void moe_param_count(const model_config *m, const moe_config *e, moe_params *out);

/* Forward GEMM flops per token of one MoE block: the router 2hE, top-k
 * routed experts 2k x (params of an expert's weights), the shared experts
 * 2 x their weights. Element-wise work (softmax, top-k, permutation) is
 * costed by bytes and not counted (the FLOP convention of formulas.md). */
double moe_block_fwd_flops_per_token(const model_config *m, const moe_config *e);

/* Model FLOPs of one iteration of global_batch sequences (forward + 2x
 * backward, no recomputation, formulas.md's convention): flops_model_per_iter
 * with each MoE layer's dense MLP replaced by its MoE block
 * (moe_block_fwd_flops_per_token per token: router, top-k experts, shared
 * experts), as Megatron-LM's num_floating_point_operations counts a MoE
 * model. Dense model: flops_model_per_iter. */
double moe_model_flops_per_iter(const model_config *m, const moe_config *e, int64_t global_batch);

/* moe_a2a_send_bytes (the alltoall dispatcher's volume) is moe_disp.h's. */

/* Time of one all-to-all of the alltoall dispatcher, ns (rounded to the
 * nearest integer): NCCL runs it as n - 1 point-to-point sends per rank in
 * one group call, all in flight at once. Each rank sends send_bytes
 * (moe_a2a_send_bytes), spread evenly over its n - 1 peers: (k - 1) / (n -
 * 1) of them to the k - 1 peers in its node over NVLink, (n - k) / (n - 1)
 * to the peers in the other nodes through its share of the node's NICs
 * times the fabric factor of the N = n / k consecutive nodes
 * (commcost_net_factor). The two parts run concurrently:
 *   time = alpha + max(S (k-1)/(n-1) / B_nvlink, S (n-k)/(n-1) / (B_nic f))
 * with alpha one step's latency (NVLink inside a node, the NIC's across
 * nodes: the sends overlap, so their latencies do too) and B_nvlink the
 * node's all-gather bus bandwidth (nvlink_busbw_gbps: a rank's NVLink
 * ports carry the same per-rank bytes as in a ring all-gather; an
 * approximation: no measured all-to-all figure is in ../shared/reference).
 * 0 for n <= 1 or send_bytes <= 0. g must pass commcost_group_check for an
 * all-gather (n % k == 0). */
int64_t moe_a2a_ns(const commcost_params *p, int64_t send_bytes, const commcost_group *g);

/* The latency of one all-to-all over group g (moe_a2a_ns's and
 * moe_deepep_ns's alpha): the NIC's across nodes, NVLink's inside one (the
 * sends overlap, so their latencies do too). The flow modes wait it in place
 * of the links' latencies (sim/net). */
int64_t moe_a2a_alpha_ns(const commcost_params *p, const commcost_group *g);

/* DeepEP (the flex dispatcher with --moe-enable-deepep; DeepEP's README,
 * github.com/deepseek-ai/DeepEP: internode kernels send a token once over
 * RDMA to each remote node holding one of its experts, to the GPU of the
 * same index there, which forwards it over NVLink to the GPUs of its
 * experts). moe_deepep_remote_nodes: the remote nodes a token goes to on
 * average, its top-k experts drawn uniformly without replacement from E
 * experts spread evenly over nodes nodes: (nodes - 1) (1 - C(E - E/nodes,
 * k) / C(E, k)); 0 for one node or E not a multiple of nodes.
 * moe_deepep_ns: one dispatch (or combine) of tokens routed tokens of one
 * rank over the EP group g (ranks, ranks_per_node as moe_a2a_ns), ns:
 *   one node: moe_a2a_ns of moe_a2a_send_bytes (the intranode kernels);
 *   else alpha_NIC + max(T k h b (k_n - 1)/k_n / B_nvlink,
 *                         T h b remote_nodes / (B_NIC-share x fabric factor))
 * with k_n the ranks per node: the NVLink forwarding and the RDMA sends
 * overlap (DeepEP pipelines them). Balanced routing; the kernels' SM use
 * and any overlap with compute are not modelled. */
double moe_deepep_remote_nodes(int num_experts, int topk, int nodes);
int64_t moe_deepep_ns(const commcost_params *p, int64_t tokens, int topk, int64_t h, int dtype_bytes, int num_experts,
                      const commcost_group *g);
/* moe_deepep_ns with the remote nodes a token goes to given (what
 * moe_deepep_ns computes with moe_deepep_remote_nodes). */
int64_t moe_deepep_remote_ns(const commcost_params *p, int64_t tokens, int topk, int64_t h, int dtype_bytes,
                             double remote_nodes, const commcost_group *g);

/* Group-limited (node-limited) routing, --moe-router-num-groups G
 * --moe-router-group-topk M (DeepSeek-V3 section 2.1.2; Megatron-core's
 * group-limited top-k: the E experts split into G contiguous groups of E/G,
 * each token keeps its M best groups and takes its top-k experts among their
 * M E / G experts). The remote nodes a token goes to on average, the M
 * groups drawn uniformly from the G and the k experts uniformly without
 * replacement from the P = M E / G experts of those groups (balanced in
 * expectation: every expert equally likely), the experts spread evenly over
 * nodes nodes in Megatron's order (contiguous ranges):
 *   (nodes - 1) sum_x P(X = x) (1 - C(P - x u, k) / C(P, k))
 * where X, the chosen groups holding experts of one given node, is
 * hypergeometric (M draws from G, c of them the node's): G a multiple of
 * nodes: c = G / nodes whole groups per node, u = E / G experts each; nodes a
 * multiple of G: c = 1 group (spanning nodes / G nodes), u = E / nodes of its
 * experts on the node. M = G gives moe_deepep_remote_nodes. groups <= 0:
 * moe_deepep_remote_nodes. 0 for one node; -1 (not modelled) when neither
 * of G and nodes divides the other, or E is not a multiple of both, or M is
 * outside 1..G. The alltoall dispatcher's volume is not changed by group
 * limits: each of a token's k copies still goes to a uniformly random expert
 * (by symmetry), so the same share of copies leaves the node
 * (moe_a2a_send_bytes). */
double moe_deepep_remote_nodes_grouped(int num_experts, int topk, int nodes, int groups, int group_topk);

/* Nodes one expert-parallel group spans. Megatron-core folds expert ranks
 * tp-ep-dp-pp innermost first (etp, then ep): a group is ep ranks at a
 * stride of etp, so it covers etp x ep consecutive ranks: ceil(etp x ep /
 * gpus_per_node) nodes when that many ranks fill whole nodes, 1 when they fit
 * in one. gpus_per_node < 1 counts as 1. */
int moe_ep_group_nodes(int etp, int ep, int gpus_per_node);

/* The default routing-skew model: per-expert token counts of one MoE layer
 * when routing is not forced to balance. Expert popularity follows Zipf's
 * law with exponent skew (the j-th most popular expert gets a share
 * proportional to (j+1)^-skew), and which expert is the j-th most popular
 * is a uniformly random permutation drawn from seed (splitmix64 and
 * Fisher-Yates), so heavy experts land on arbitrary expert-parallel ranks.
 * skew 0 is forced balance exactly: every expert gets routed_tokens / n.
 * The distribution is an assumption stated here, not fitted to published
 * routing statistics; the exponent's default (MOE_ROUTING_SKEW_DEFAULT) is
 * fitted to the step of h100_training_calibration.csv row (c). Deterministic: the same (n, skew, seed) gives the same
 * loads, byte for byte. out[0..n-1] sums to routed_tokens (up to rounding). */
void moe_expert_loads_zipf(int n, double routed_tokens, double skew, uint64_t seed, double *out);

/* The busiest expert-parallel rank's routed tokens against the mean, from
 * the tokens each of the E experts receives (load[i] >= 0, E = n, n a
 * multiple of ep; rank r holds experts r*n/ep .. (r+1)*n/ep - 1, as
 * Megatron-core places them). capacity_factor > 0 caps each expert at
 * ceil(capacity_factor x mean tokens per expert), the tokens being the
 * loads' sum rounded to a whole number (Megatron-core's get_capacity:
 * ceil(tokens x topk / experts x factor); counting the dropped tokens into
 * *dropped when not NULL); 0 = dropless. Returns max/mean of
 * the ranks' kept tokens (1 when every rank gets the same; 0 when no token
 * is routed). */
double moe_rank_load_factor(const double *load, int n, int ep, double capacity_factor, double *dropped);

/* Appends to out the ops of one MoE block (what replaces the MLP of a MoE
 * layer: after LN2) for pass, on one rank, for one micro-batch of shape L,
 * with e's dispatcher and layout (moe_disp.h: tokens T, the busiest rank's
 * routed copies Ra = ceil(T k load_factor) after the EP exchange, R = etp
 * Ra rows for its experts). load_factor: the busiest EP rank's routed
 * copies over the mean T k (moe_rank_load_factor; 1 = balance; below 1
 * only under a capacity factor below 1, where every expert is capped). The
 * rank runs its E/ep local experts as a batch of E/ep GEMMs of
 * m = ceil(R / (E/ep)) rows (thin GEMMs for many experts), each expert's
 * FFN split over the etp ranks of its ETP group (FC1 column-parallel: N =
 * gate/up f_e / etp; FC2 row-parallel: K = f_e / etp; Megatron-core's
 * TEGroupedMLP with the expert tensor-parallel group). Forward:
 *   moe.router (T x E x h), moe.topk (fp32 softmax read + write of T x E,
 *   top-k probs and indices T k (4 + 8) bytes), the dispatcher's input
 *   side (moe_disp_fwd_in: alltoall moe.permute, moe.a2a.dispatch,
 *   moe.etp.ag; allgather moe.ag.probs, moe.ag.dispatch, moe.permute),
 *   moe.fc1 (m x gate/up f_e/etp x h, batch E/ep), moe.act, moe.fc2
 *   (m x h x f_e/etp), the output side (moe_disp_fwd_out), then the shared
 *   experts moe.shared.fc1 / .act / .fc2 on T tokens (f_s unsplit: the
 *   shared experts' TP split is not modelled) when f_s > 0.
 * Backward: each GEMM's input gradient (same flops) and weight gradient
 * (same flops: 2x the forward in all), the element-wise backward of each
 * memory-bound op (same bytes), the dispatcher's collectives again in
 * reverse order (moe_disp_bwd_out, _bwd_in). Pass I has the input
 * gradients only, W the weight gradients only, R the forward when
 * recompute is full or selective with moe (moe_block_recomputed), the
 * routed experts' activation (moe.act) when it is selective with moe_act
 * in L->rc_modules, else nothing.
 * --moe-shared-expert-overlap (e->shared_overlap; Megatron-core's
 * SharedExpertMLP on a side stream), where the pass has the dispatcher's
 * all-to-all: in F (and a full R) the shared experts' ops are listed right
 * after the input side, the first waiting for what moe.a2a.dispatch waits
 * for, each with layer_op.overlap = the all-to-all, and moe.fc1 waits for
 * them and the input side (dep[1]); in B and I the output side's backward
 * comes first and the shared experts' backward runs beside
 * moe.a2a.combine.bwd the same way, moe.fc2.dgrad waiting for both. The
 * plan times such ops with overlap_beside_chain_ns (overlap.h): slowed by
 * the all-to-all's EP_PAIR_COMM_SMS while it runs. W, and any pass without
 * an all-to-all (ep 1), are listed as without the flag. (Megatron runs the
 * shared FC1 beside the dispatch and FC2 beside the combine; the split is
 * not modelled: the whole shared MLP beside one all-to-all per pass.) With load_factor
 * 1, t = 1, etp = 1, E/ep dividing T k: the forward's flops are
 * moe_block_fwd_flops_per_token x T; with etp > 1 the expert GEMMs' flops
 * are those of R rows divided by etp. TS_EINVAL for num_experts < 1, ep not
 * dividing the experts, etp not dividing f_e, etp > 1 with the flex
 * dispatcher (not modelled), a load factor below 1 without a capacity
 * factor below 1 (or not above 0), or more ops than LAYER_MAX_OPS. */
int moe_block_ops(const layer_shape *L, const moe_config *e, double load_factor, layer_pass pass, layer_ops *out,
                  ts_err *err);

/* Whether the recompute pass re-runs the whole block (its forward, the
 * dispatcher's collectives included, as moe_block_ops' F): full
 * recomputation, or selective with moe in L->rc_modules (CONFIG_RC_MOE:
 * --recompute-modules moe or --moe-layer-recompute, Megatron-core's
 * MoELayer forward under tensor_parallel.checkpoint: only its input, LN2's
 * output, kept; the dense layer counts it). */
bool moe_block_recomputed(const layer_shape *L);

/* The router options' ops (Megatron-core's TopKRouter, router.py, and
 * moe_utils.py), added by moe_block_ops around moe.router and moe.topk,
 * T tokens, E experts, k top-k, all fp32 (4 B) element-wise:
 *   --moe-router-dtype fp32 (16-bit run): moe.router.cast, the input and
 *     weight cast to fp32, (dt + 4)(T h + h E) bytes; the router GEMMs
 *     (moe.router, .dgrad, .wgrad) marked fp32 (cost_gemm_fp32_ns); in the
 *     backward moe.router.cast.bwd, the input gradient cast back,
 *     (dt + 4) T h. The logits and scores are fp32 already (moe.topk).
 *   --moe-router-score-function sigmoid: no op of its own: sigmoid, like
 *     softmax, reads the T x E logits and writes the scores (moe.topk's
 *     bytes); --moe-router-pre-softmax: the same kernels in another order.
 *   --moe-z-loss-coeff > 0: moe.zloss, logsumexp over the logits,
 *     4 T E + 4 T; backward moe.zloss.bwd 8 T E + 4 T.
 *   --moe-router-enable-expert-bias: moe.bias, scores + bias into a new
 *     T x E tensor for the top-k, 8 T E + 4 E; no backward (no gradient).
 *     Its per-iteration update (an all-reduce of the stage's fp32 counts,
 *     E per MoE layer, in finalize_model_grads) is an optimizer-step part
 *     (plan.h's PLAN_FIXED_BIAS_AR), not an op here.
 *   --moe-router-topk-scaling-factor: moe.topk.scale, probs x factor,
 *     8 T k; backward the same (a kernel of its own in Megatron-core's
 *     unfused router, not folded into the combine).
 *   --moe-aux-loss-coeff > 0 with aux_loss, seq_aux_loss or
 *     global_aux_loss: moe.aux, the scores for the loss recomputed from the
 *     logits (read + write 8 T E), summed over the tokens (4 T E) and the
 *     bool routing map counted (T E): 13 T E; moe.aux.ar, an all-reduce of
 *     the int64 counts, 8 E bytes (seq_aux_loss: 8 b E, per sequence) over
 *     t x cp ranks (global_aux_loss: t x cp x d = etp x ep x edp; the
 *     tensor-parallel group when that is t);
 *     backward moe.aux.bwd 16 T E (the loss's gradient broadcast, 4 T E,
 *     and the score function's backward, read 8 T E, write 4 T E). Saved
 *     for the backward: the scores, 4 T E (moe_block_mem_of's free_i).
 * moe_router_dims_of fills r for shape L and e. */
typedef struct {
    bool fp32, zloss, bias, scale, aux;
    int64_t cast_bytes;   /* dt + 4 with fp32, else 0 */
    int64_t aux_ar_bytes; /* moe.aux.ar's bytes */
    int64_t aux_group;    /* its ranks (the tensor-parallel group when it is t: stride 0, else
                             aux_group consecutive ranks, stride 1) */
    int64_t tp;           /* t */
} moe_router_dims;
void moe_router_dims_of(const layer_shape *L, const moe_config *e, moe_router_dims *r);

/* One MoE layer's parameters held by one rank, and the groups their
 * gradients are reduced over (Megatron-core's layout: the routed experts
 * sharded over ep x etp, their gradients reduced and their optimizer state
 * sharded over edp, so etp x ep x edp ranks hold one copy; the rest of the
 * layer over the tensor-parallel ranks, reduced over d x cp). */
typedef struct {
    int64_t expert; /* routed experts on this rank: E / ep experts, each / etp */
    int64_t dense;  /* attention / t (MLA: mla_attn_rank_params), norms, router (replicated), shared experts / t */
    int expert_dp;  /* ranks the expert gradients are reduced over: edp = gpus / (pp x etp x ep) */
    int dense_dp;   /* ranks the dense gradients are reduced over: gpus / (pp x tp) = d x cp */
} moe_rank_params;

/* Parameters of one MoE layer on one rank for tp-way tensor parallelism,
 * pp pipeline stages and gpus ranks (e->ep, e->etp >= 1; the experts a
 * multiple of ep). The norms and the router are replicated; the attention
 * and shared experts split over tp (rounded down when tp does not divide);
 * the experts over ep (whole experts) and etp (their FFN columns). */
void moe_layer_rank_params(const model_config *m, const moe_config *e, int tp, int pp, int gpus, moe_rank_params *out);

/* Bytes the MoE block of one layer saves for its backward, one micro-batch
 * on the busiest EP rank (no recomputation; the block's input, LN2's
 * output, is counted by the dense layer): router logits and probabilities
 * (fp32, 2 x 4 T E), the top-k probabilities and indices (T k (4 + 8)),
 * with the allgather dispatcher and n = etp x ep > 1 the gathered routing
 * map and probabilities of the local experts (n T (E/ep) (1 + 4)), the
 * permuted tokens (R h), the permuted probabilities (R x 4, fp32), the
 * expert FC1 output and activation output (R (fc1 + f_e) / etp), the shared
 * experts' FC1 and activation outputs (T (fc1_s + f_s)); dtype bytes per
 * element. T, Ra, R as in moe_block_ops. The expert outputs are not saved:
 * Megatron-core's experts (TEGroupedMLP, SequentialMLP) take the permuted
 * probabilities from the dispatcher's permute and scale the activation's
 * output by them (weighted_bias_swiglu_impl for SwiGLU), so the unpermute
 * is called without probabilities and its backward, a gather, needs only
 * the row map (moe_utils.unpermute); the combine's all-to-all and the
 * allgather dispatcher's reduce-scatter save nothing. (Megatron-core
 * releases that scaled in the unpermute saved the expert outputs, R h more
 * a layer: not modelled.) Under FP8 the GEMM
 * inputs among them (the permuted tokens R h, the activation outputs
 * R f_e / etp and T f_s) are their FP8 copies (layer_fp8_saved_bytes), and
 * with shared experts the shared FC1's FP8 copy of the block's input (T h)
 * is added (the 16-bit input stays saved for the router:
 * layer_saved_build's fc1.in). */
int64_t moe_block_saved_bytes(const layer_shape *L, const moe_config *e, double load_factor);

/* moe_block_saved_bytes split for the memory timeline of one MoE layer:
 * kept (stored by the forward), by_rc (re-created by the recompute pass),
 * and of their sum what the input-gradient backward frees (free_i: router
 * logits and probabilities, top-k, the gathered routing, the permuted
 * probabilities, FC1 outputs, shared FC1 outputs) and what only the weight gradients need
 * (free_w: the permuted tokens, FC1's input; the activation outputs, FC2's
 * input; the shared activation output; under FP8 the shared FC1's copy of
 * the block input). No recomputation: all kept; full or selective with moe
 * (moe_block_recomputed): all by_rc; selective with moe_act (CONFIG_RC_MOE_ACT in L->rc_modules):
 * the routed experts' activation output (R f_e / etp) by_rc, the rest kept.
 * kept + by_rc = free_i + free_w = moe_block_saved_bytes. */
typedef struct {
    int64_t kept, by_rc, free_i, free_w;
} moe_block_mem;
void moe_block_mem_of(const layer_shape *L, const moe_config *e, double load_factor, moe_block_mem *out);

/* The dispatcher's transient bytes of one pass of the block
 * (moe_disp_transient_bytes: the allgather dispatcher's gathered buffers,
 * the alltoall dispatcher's pre-reduce-scatter partial outputs with ETP). */
int64_t moe_block_transient_bytes(const layer_shape *L, const moe_config *e, double load_factor);

/* What routing skew costs one MoE block, for one micro-batch, forward plus
 * backward on the busiest EP rank: the compute ops of moe_block_ops (F and
 * B) costed by cm (cost_op_ns, so thin expert GEMMs are slow) at the load
 * factor of moe_expert_loads_zipf(E, T k, skew, seed) and
 * moe_rank_load_factor (e->capacity_factor applied), minus the same at
 * forced balance (load factor 1). The all-to-alls are left out: their
 * volume is the balanced one in moe_block_ops, the same in both runs.
 * *load_factor (may be NULL) gets the busiest rank's tokens over the mean.
 * skew 0 or e->force_load_balancing: 0 ns and factor 1. TS_EINVAL as
 * moe_block_ops, or for skew < 0; TS_ENOMEM if the per-expert loads cannot
 * be allocated (freed before return). */
int moe_block_imbalance_ns(const cost_model *cm, const layer_shape *L, const moe_config *e, double skew, uint64_t seed,
                           double *load_factor, int64_t *extra_ns, ts_err *err);

#endif
