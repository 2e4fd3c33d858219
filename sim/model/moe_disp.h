/* moe_disp — the token dispatcher of a MoE block: the ops that carry the
 * tokens from the block's input to the local experts and back, their
 * volumes, and the transient buffers they hold.
 *
 * Megatron-core (megatron/core/transformer/moe/token_dispatcher.py, the
 * MoE parallel folding of core 0.10 and later: tp_group is the expert
 * tensor-parallel group, tp_ep_group the expert tensor-and-model-parallel
 * group). Each rank routes T tokens (b s, s per context-parallel rank,
 * divided by t with sequence parallelism: MoELayer's input is sequence
 * parallel); k experts per token; E experts, E/ep on each rank; etp ranks
 * share each expert (ETP: FC1 column-parallel, its N = gate/up f_e / etp;
 * FC2 row-parallel, its K = f_e / etp; Megatron's TEGroupedMLP /
 * SequentialMLP with the expert tensor-parallel group).
 *
 *   alltoall (MoEAlltoAllTokenDispatcher): permute the T k routed copies,
 *     all-to-all over the EP group (ep > 1), then with etp > 1 all-gather
 *     them over the ETP group (gather_from_sequence_parallel_region with
 *     tp_group: the etp ranks of a group hold the same experts and each
 *     runs the group's tokens on its 1/etp of the expert weights); the
 *     experts; with etp > 1 reduce-scatter their partial outputs over the
 *     ETP group (reduce_scatter_to_sequence_parallel_region), all-to-all
 *     back, unpermute. The busiest EP rank holds Ra = ceil(T k lf) tokens
 *     after the all-to-all (lf: the load factor over the mean routed), its
 *     experts run R = etp Ra rows. The probabilities travelling with the
 *     tokens (4 bytes a row against h dtype bytes) are left out.
 *   allgather (MoEAllGatherTokenDispatcher, Megatron-LM's default): the
 *     routing map (bool) and probabilities (fp32) of the T tokens, [T, E]
 *     each, and the hidden states are all-gathered over the tp_ep group of
 *     n = etp x ep ranks (n T tokens: every token of the group); each rank
 *     permutes the gathered tokens routed to its E/ep local experts
 *     (R = etp Ra rows on the busiest rank, as above), runs them,
 *     unpermutes into an [n T, h] buffer and reduce-scatters it over the
 *     same group back to its T tokens. Backward: the gradient of the
 *     output all-gathered (the reduce-scatter's backward), the hidden
 *     states' and the probabilities' gradients reduce-scattered (the
 *     all-gathers' backward; the routing map has none).
 *   flex with DeepEP: the all-to-all ops with DeepEP's time (plan_moe.h);
 *     etp 1 only.
 *
 * The all-to-alls are COMM ops with a2a set and coll COMM_P2P (time from
 * the plan's all-to-all model: moe_a2a_ns or moe_deepep_ns). The
 * all-gathers and reduce-scatters are COMM ops with a2a set (the EP
 * category in the report: the dispatcher's traffic) and coll
 * COMM_ALL_GATHER / COMM_REDUCE_SCATTER, group = span = the ETP or tp_ep
 * group's size, stride 1: Megatron-core's RankGenerator folds the expert
 * ranks etp-ep-edp-pp innermost first, so both groups are consecutive
 * ranks; bytes in commcost's convention (S = the gathered buffer, or the
 * reduce-scatter's input), timed by commcost_ns on that placement.
 *
 * Plain values: no heap memory.
 */
#ifndef TRAINSIM_MOE_DISP_H
#define TRAINSIM_MOE_DISP_H

#include <stdint.h>

#include "sim/config/config.h"
#include "sim/model/layer.h"

/* Most ops one side of the dispatcher appends (moe_disp_fwd_in and the
 * others below): 4. */
#define MOE_DISP_MAX_OPS 4

/* Shapes of the dispatcher of one MoE block on the busiest rank. */
typedef struct {
    int64_t T;      /* tokens this rank routes (moe_disp_tokens) */
    int64_t k;      /* experts per token (--moe-router-topk) */
    int64_t h;      /* hidden size */
    int64_t E;      /* experts */
    int64_t el;     /* local experts: E / ep */
    int64_t dt;     /* bytes of an activation element */
    int ep, etp;    /* expert-parallel and expert-tensor-parallel sizes (>= 1) */
    int n;          /* allgather's tp_ep group: etp x ep */
    int dispatcher; /* config_moe_dispatcher */
    int64_t Ra;     /* routed copies the busiest rank holds after the EP exchange: ceil(T k lf) */
    int64_t R;      /* rows its local experts run: etp x Ra */
    int64_t a2a;    /* bytes one rank sends in one 16-bit all-to-all: moe_a2a_send_bytes(T, k, h, dt, ep) */
    bool mx_fwd;    /* --moe-dispatch-fwd-dtype mxfp8: the dispatch's forward rows in MXFP8 */
    bool mx_bwd;    /* --moe-combine-bwd-dtype mxfp8: the combine's backward rows in MXFP8 */
    int64_t row_f;  /* bytes of one token row the dispatch sends: fp8_mxfp8_bytes(1, h) with mx_fwd, else h dt */
    int64_t row_b;  /* the same for the combine's backward (mx_bwd) */
    int64_t a2a_f;  /* bytes one rank sends in the dispatch all-to-all: moe_a2a_send_bytes(T, k, row_f, 1, ep) */
    int64_t a2a_b;  /* in the combine's backward all-to-all: the same with row_b */
} moe_disp_dims;

/* Bytes one rank sends in one all-to-all of the alltoall dispatcher:
 * tokens x topk x h x dtype_bytes x (ep - 1) / ep (its routed copies, the
 * share 1/ep of which stays on the rank, under balanced routing), rounded
 * down. 0 for ep <= 1. */
int64_t moe_a2a_send_bytes(int64_t tokens, int topk, int64_t h, int dtype_bytes, int ep);

/* Tokens one rank routes in one micro-batch of shape L: b s (s already per
 * context-parallel rank in L), divided by t with sequence parallelism. */
int64_t moe_disp_tokens(const layer_shape *L);

/* Fill D for shape L, e's experts and layout (e->ep, e->etp >= 1 or 0 for
 * 1) and load factor lf > 0 (the busiest rank's routed copies over the
 * mean; below 1 only under a capacity factor below 1). */
void moe_disp_dims_of(const layer_shape *L, const moe_config *e, double lf, moe_disp_dims *D);

/* The allgather dispatcher's hidden-state gather over n ranks (commcost's
 * S: the gathered buffer, each rank contributing tokens x h x dtype_bytes):
 * tokens x n x h x dtype_bytes; also the S of the reduce-scatter that
 * combines the outputs. A rank sends (n - 1)/n of it
 * (commcost_wire_bytes). */
int64_t moe_ag_hidden_bytes(int64_t tokens, int64_t h, int dtype_bytes, int n);

/* The allgather dispatcher's routing gather over n ranks: the routing map
 * (1 byte) and the probabilities (fp32) of each token for each of E
 * experts: tokens x n x E x 5. */
int64_t moe_ag_meta_bytes(int64_t tokens, int num_experts, int n);

/* The alltoall dispatcher's ETP gather (and the reduce-scatter of the
 * partial outputs) over etp ranks each holding ra routed copies:
 * etp x ra x h x dtype_bytes. */
int64_t moe_etp_bytes(int64_t ra, int64_t h, int dtype_bytes, int etp);

/* FP8 dispatch (Megatron-LM's --moe-dispatch-fwd-dtype and
 * --moe-combine-bwd-dtype mxfp8, Blackwell with --fp8-recipe mxfp8:
 * moe_flags.h). The dispatch's forward tokens (mx_fwd) and the combine's
 * backward output gradients (mx_bwd) are quantized to MXFP8 (fp8.h:
 * 1 byte an element and an e8m0 scale per 32 along h) right before the
 * first collective that sends them, and every collective of that side then
 * carries MXFP8 rows (row_f / row_b bytes): the all-to-all (alltoall,
 * flex with DeepEP), the ETP all-gather behind it, the allgather
 * dispatcher's hidden-state gather. The combine's forward and the
 * dispatch's backward stay 16-bit, as do the routing map and the
 * probabilities. The cast is a memory-bound op,
 * fp8_mxfp8_quantize_bytes of the rows sent (alltoall: the T k permuted
 * copies; allgather: the T tokens), named moe.dispatch.mxfp8.cast and
 * moe.combine.bwd.mxfp8.cast; none on a side without a collective (ep =
 * etp = 1: nothing is sent). The permutes and the expert GEMMs' own FP8
 * casts keep their 16-bit costs (the expert GEMM's weight gradient still
 * needs the column-wise copy its cast writes): an upper bound on the
 * memory-bound work. An all-to-all carrying MXFP8 rows is marked fp8
 * (layer_op.fp8): the plan times it on the MXFP8 volume. */

/* Append to o the dispatcher's ops of one side of the experts (dep[0] the
 * previous op, as layer_ops_push). The caller guarantees room for
 * MOE_DISP_MAX_OPS.
 *   fwd_in   the block's input to the experts' input: alltoall
 *            moe.permute, moe.a2a.dispatch, moe.etp.ag; allgather
 *            moe.ag.probs, moe.ag.dispatch, moe.permute
 *   fwd_out  the experts' output to the block's output: alltoall
 *            moe.etp.rs, moe.a2a.combine, moe.unpermute; allgather
 *            moe.unpermute, moe.rs.combine
 *   bwd_out  the backward of fwd_out, in reverse order
 *   bwd_in   the backward of fwd_in, in reverse order
 * Collectives of one rank (ep, etp or n = 1) are left out. Memory-bound
 * ops' bytes: alltoall permute T h + T k h, unpermute (T k + T) h +
 * T k 4 (the probabilities); allgather permute 2 R h (the rows routed to
 * the local experts read and written), unpermute (R + n T) h + R 4. */
void moe_disp_fwd_in(const moe_disp_dims *D, layer_ops *o);
void moe_disp_fwd_out(const moe_disp_dims *D, layer_ops *o);
void moe_disp_bwd_out(const moe_disp_dims *D, layer_ops *o);
void moe_disp_bwd_in(const moe_disp_dims *D, layer_ops *o);

/* Bytes the dispatcher holds only while one pass of the block runs (the
 * plan allocates them when the layer's pass starts and frees them when it
 * ends, as the context-parallel buffers; under a busy pipeline one layer's
 * worth is live at a time): allgather 2 n T h dt + n T E 5 (the gathered
 * hidden states, Megatron's global buffer, and the unpermuted [n T, h]
 * output before its reduce-scatter; the gathered routing map and
 * probabilities); alltoall with etp > 1 the experts' partial outputs
 * before the reduce-scatter, R h dt; else 0. Forward and backward alike
 * (the backward's gathered gradient and pre-reduce-scatter gradients have
 * the same sizes); with FP8 dispatch the allgather's gathered buffer is the
 * larger of the two passes' rows, n T max(row_f, row_b), beside the
 * 16-bit n T h dt. */
int64_t moe_disp_transient_bytes(const moe_disp_dims *D);

#endif
