/* ep_pair — Megatron-core's overlap of the MoE expert-parallel all-to-alls
 * with compute (--overlap-moe-expert-parallel-comm, the "1F1B all-to-all
 * overlap" of its fine-grained schedule; DeepSeek-V3 section 3.2.1's
 * DualPipe F&B chunks): in the steady state a rank runs one micro-batch's
 * forward together with another micro-batch's backward, each layer split
 * into attention, dispatch, experts and combine, so that one pass's
 * all-to-alls run on the communication stream while the other pass
 * computes.
 *
 * Pairs of a rank's actions (ep_pair_mark): where the schedule marks its
 * pairs on any rank (sched_action.overlap: DualPipe's F&B chunks,
 * Megatron-core's combined steps, below), each marked F with the next
 * compute action when that is a B or I; otherwise, in action order, two
 * consecutive compute actions (sends and receives between them skipped)
 * that are an F and a B or I, in either order, of different micro-batches,
 * neither already paired (1F1B's steady state F(i+w) B(i); with p = 1,
 * B(i) F(i+1), Megatron's combined step of forward i+1 and backward i).
 * With the overlap the interleaved schedule at p > 1 runs one more warm-up
 * forward on every rank (sched_opts.combined_1f1b: Megatron-core's
 * get_pp_rank_microbatches adds 1 with overlap_moe_expert_parallel_comm)
 * and marks each steady-state F(k + w) to pair with B(k), as its
 * combined_1f1b_schedule_for_interleaved_pipelining does. Without the
 * extra forward the last rank's first steady-state F and B are one
 * micro-batch's and its pairs shift to B(k) F(k + w + 1); without the
 * marks a rank whose warm-up takes every micro-batch would pair its last
 * forward with its first backward, which Megatron-core does not (and
 * which, with the combined step, waits on itself through the next rank).

 * Each pair is Megatron-core's combined step (combined_forward_backward_
 * step, then send_forward_backward_recv_forward_backward) in every mode
 * (plan.ep_pair_combined, lower.h): it starts once both passes' inputs are
 * there and both outputs leave at its end.
 *
 * Time of a pair (ep_pair_run, per sub-module): each pass is split at its
 * all-to-alls (the dispatch and the combine of each MoE layer; transfers
 * back to back are one) into compute spans and transfers: the forward
 * c_0 A_1 c_1 ... A_n c_n (c_0 the attention, A_1 the dispatch, c_1 the
 * experts, A_2 the combine, c_2 the next layer's attention, ...), the
 * backward d_0 B_1 d_1 ... B_m d_m (B_1 the combine's backward, d_1 the
 * experts', B_2 the dispatch's, d_2 the attention's, ...; a span is the
 * pass's time between two transfers, its tensor- and context-parallel
 * collectives included, as they overlap the pass's compute alone: in
 * Megatron-core's combined layer they belong to the sub-module (the
 * synchronous ones on the compute stream, the asynchronous ones of the
 * linear layers' backward and the CP ring's P2P on their own
 * communicators' streams), the all-to-alls on the layer's communication
 * stream). A pass with no transfer (dense layers only)
 * is one span that runs before (backward) or after (forward) the other's
 * first span: Megatron's layer-by-layer interleave of a dense layer with a
 * MoE layer is not modelled (pessimistic for such pairs). The pair runs
 * Megatron-core's combined layer (TransformerLayerSchedulePlan.run): two
 * in-order streams, compute d_0 c_0 d_1 c_1 ... and communication B_1 A_1
 * B_2 A_2 ..., each op starting when its stream is free and its input is
 * there (A_j after c_{j-1}, c_j after A_j, B_j after d_{j-1}, d_j after
 * B_j). Without an SM share and with n = m every layer falls into phases:
 *     T = sum_j max(B_j, c_{j-1}) + max(A_j, d_j)
 * (the backward's combine beside the forward's attention, the forward's
 * dispatch beside the backward's experts, the backward's dispatch beside
 * the forward's experts, the forward's combine beside the backward's
 * attention), each transfer exposed by max(0, transfer - partner span);
 * with the SM share each phase is phase(transfer, span)
 * (overlap_shared_phase_ns: the compute loses EP_PAIR_COMM_SMS of the
 * GPU's SMs while a transfer runs). A pass's exposed time is its transfers'
 * time while no compute runs plus the compute time they cost through the
 * SM share, so T = the two passes' compute + exposed_F + exposed_B; the
 * exposed time of each pass is at most its all-to-all time alone.
 *
 * --delay-wgrad-compute (Megatron-core's delay_wgrad_compute: the layer's
 * backward_dw after the dispatch's backward is launched): each backward
 * span d_j is its input-gradient part g_j (the span of the I pass, the
 * same transfers) then its weight-gradient part w_j = d_j - g_j on the
 * compute stream, and B_{j+1} waits for g_j only. Compute time is
 * unchanged (the same ops in the same order); a dependency is only
 * relaxed, so without an SM share the pair is never longer. One layer
 * (n = m = 2, d_0 = c_2 = 0, no SM share), t_1 = max(B_1, c_0):
 *     without: T = t_1 + max(A_1, g_1 + w_1) + max(B_2, c_1) + max(A_2, d_2)
 *     with:    T = t_1 + max(max(A_1, g_1 + w_1) + c_1, max(A_1, g_1) + B_2)
 *                  + max(A_2, d_2)
 * the experts' weight gradients and the forward's experts hiding the
 * backward's dispatch. With an I backward (zero-bubble schedules) the
 * spans have no weight-gradient part and the flag changes nothing.
 *
 * Rules (Megatron-LM's validate_args): --delay-wgrad-compute needs the
 * overlap (Megatron-core's TransformerConfig); the overlap needs a MoE model (--num-experts), expert
 * parallelism (--expert-model-parallel-size > 1), the alltoall or flex
 * dispatcher, with p > 1 virtual pipelining (the interleaved schedule; here
 * also DualPipeV, whose F&B pairs are the same overlap), no full
 * recomputation, at most one MTP depth. trainsim also refuses schedules
 * other than 1f1b at p = 1, interleaved and dualpipev. The flow modes
 * (each collective its own task; lower.h runs a pair's own steps
 * interleaved in the streams' order above, ep_pair_steps.h) run a pair's
 * all-to-alls on a stream of their own and its tensor- and
 * context-parallel collectives on the TP stream, with the plan's
 * dependencies (as the spans above count them), so t > 1 and context
 * parallelism are valid there too.
 *
 * Memory: the two micro-batches' saved activations are those the schedule
 * keeps in flight (the paired copies' memory events at offsets scaled to
 * their shorter steps); the one per-pass dispatcher buffer the model has
 * with alltoall (moe_disp_transient_bytes: the experts' partial outputs at
 * etp > 1; 0 at etp 1 and with flex) is not doubled for the pair.
 */
#ifndef TRAINSIM_EP_PAIR_H
#define TRAINSIM_EP_PAIR_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/config/config.h"
#include "sim/core/plan.h"
#include "sim/sched/sched.h"
#include "sim/util/err.h"

/* The SMs the all-to-all kernels take while they run: DeepEP's default
 * (Megatron-core TransformerConfig.moe_deepep_num_sms = 20; DeepSeek-V3
 * section 3.2.2: 20 of the H800's 132 SMs for communication), taken also
 * for NCCL's all-to-all (an assumption: of the order of NCCL's channels). */
#define EP_PAIR_COMM_SMS 20

/* TS_OK when config c may run --overlap-moe-expert-parallel-comm with
 * schedule kind k of v chunks per rank (see the rules above; flows: the
 * flow modes, which no rule depends on now); otherwise
 * TS_EINVAL naming the flag, what is wrong and what would be valid. TS_OK
 * at once when the flag is off. */
int ep_pair_check(const config *c, sched_kind k, int v, bool flows, ts_err *err);

/* The layout rules of that check as a predicate (the search's enumeration
 * asks it before building a configuration): expert parallelism ep > 1, an
 * all-to-all dispatcher (not allgather), no full recomputation, and a
 * schedule that pairs passes: interleaved with v > 1 chunks (or any at
 * p 1), DualPipeV, or 1F1B at p 1. The model's rule (MTP depth) is the
 * check's alone. */
bool ep_pair_layout_ok(int ep, bool allgather, bool full_recompute, sched_kind k, int v, int pp);

/* Whether a schedule of kind k is generated as Megatron-core's combined
 * 1F1B (sched_opts.combined_1f1b: one more warm-up forward per rank, each
 * steady-state F(k+w) marked to pair with B(k)) when overlap is
 * --overlap-moe-expert-parallel-comm: the interleaved schedule's. */
bool ep_pair_combined_sched(bool overlap, sched_kind k);

/* Pair the compute actions of rank r of s (see above): partner[i] = the
 * index of action i's partner, -1 when unpaired (partner has n_actions[r]
 * entries, owned by the caller). */
void ep_pair_mark(const sched *s, int r, int32_t *partner);

/* Called by ep_pair_each for one marked pair: stage sf's forward with stage
 * sb's backward pass kb (PLAN_PASS_B or PLAN_PASS_I); ctx the caller's.
 * A status other than TS_OK stops the walk and is returned. */
typedef int (*ep_pair_fn)(void *ctx, int sf, int sb, int kb, ts_err *err);

/* Walk every rank's pairs of s (ep_pair_mark) in rank then action order
 * and call fn once per pair (at the earlier action of the two), with its
 * forward's and backward's stages; pairs whose stage is outside
 * [0, n_stages) are skipped (lowering names the bad action). The same
 * stages may come more than once (other micro-batches, other ranks'
 * copies): deduplicating is fn's. TS_OK, TS_ENOMEM (err set), or fn's
 * status. */
int ep_pair_each(const sched *s, int n_stages, ep_pair_fn fn, void *ctx, ts_err *err);

/* One pass split at its all-to-alls (see above): n transfers comm_ns[0..n-1]
 * (A_1..A_n or B_1..B_n), n + 1 compute spans comp_ns[0..n] (c_j or d_j),
 * wgrad_ns[0..n] of each span its weight-gradient part (w_j, clamped to
 * [0, comp_ns[j]]; NULL: none). Arrays owned by the caller. */
typedef struct {
    int n;
    const int64_t *comp_ns;
    const int64_t *comm_ns;
    const int64_t *wgrad_ns;
} ep_pair_pass;

/* The pair of forward f and backward b on the two streams (see above),
 * sms the GPU's SMs (0 unknown: no SM share), delay_wgrad
 * --delay-wgrad-compute: *exp_f, *exp_b each pass's exposed time (>= 0).
 * TS_ENOMEM. */
int ep_pair_run(const ep_pair_pass *f, const ep_pair_pass *b, int sms, bool delay_wgrad, int64_t *exp_f, int64_t *exp_b,
                ts_err *err);

/* ep_pair_run's streams, each compute op's time from its start to its end
 * (slowed by the SM share while a transfer runs): el_ns[0..n] the forward's
 * spans c_j, el_ns[n+1..2n+1] the backward's input-gradient parts g_j (the
 * whole d_j without wgrad_ns), el_ns[2n+2..3n+2] its weight-gradient parts
 * w_j, n = max(f->n, b->n), spans a pass lacks 0 (el_ns: 3 (n + 1) entries,
 * owned by the caller). The flow modes run the pair's own steps and take
 * these as the compute's share of SMs (ep_pair_steps.h). TS_ENOMEM. */
int ep_pair_spans(const ep_pair_pass *f, const ep_pair_pass *b, int sms, bool delay_wgrad, int64_t *el_ns, ts_err *err);

/* The pair of stage sf's forward and stage sb's backward (pass kb,
 * PLAN_PASS_B or PLAN_PASS_I) of pl (collapsed passes): *a_f, *a_b each
 * pass's exposed all-to-all time alone (ep_exposed_ns), *exp_f, *exp_b in
 * the pair (ep_pair_run on the passes' segments; the backward's
 * weight-gradient parts from the stage's I pass; at most a_f, a_b).
 * TS_ENOMEM. */
int ep_pair_exposed(const plan *pl, int sf, int sb, int kb, int sms, bool delay_wgrad, int64_t *a_f, int64_t *a_b,
                    int64_t *exp_f, int64_t *exp_b, ts_err *err);

/* Add to pl (collapsed passes: plan_opts.inline_tp) the variants of every
 * distinct pair of schedule s (plan_ep_pair; none for pairs whose passes
 * have no exposed all-to-all), sms the GPU's SMs (overlap_gpu_sms),
 * delay_wgrad --delay-wgrad-compute. TS_ENOMEM. */
int ep_pair_build(plan *pl, const sched *s, int sms, bool delay_wgrad, ts_err *err);

/* The variants of the pair (sf, sb, kb) in pl, NULL when none. */
const plan_ep_pair *ep_pair_find(const plan *pl, int sf, int sb, int kb);

#endif
