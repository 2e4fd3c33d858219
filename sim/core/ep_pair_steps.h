/* ep_pair_steps — --overlap-moe-expert-parallel-comm in the flow modes
 * (--network-flows, --full: passes not collapsed, each all-to-all a task of
 * the network model). lower.h runs a pair's two passes as their own steps
 * interleaved on the compute and communication streams in ep_pair_run's
 * order (compute d_0 c_0 d_1 c_1 ..., communication B_1 A_1 B_2 A_2 ...),
 * so the engine and the network model time the transfers. What the step
 * order cannot express is built here, as plan_ep_pair copies of the two
 * passes' steps (plan.h), for every distinct pair of schedule s:
 *  - the SM share (EP_PAIR_COMM_SMS of the GPU's sms while a transfer
 *    runs): each compute span of the pair takes the time ep_pair_spans
 *    gives it with the plan's transfer times (the default mode's), its
 *    steps scaled alike; the flow modes' transfers may then differ from
 *    those estimates (contention), the compute's slowdown does not follow
 *    them;
 *  - --delay-wgrad-compute (a whole backward, the stage's input-gradient
 *    pass with the same transfers): each backward span's steps scaled to
 *    its input-gradient part g_j, then one weight-gradient step w_j (the
 *    span's gradient buckets close and its activations are freed there),
 *    the next transfer waiting for g_j only.
 * Pairs that need neither (sms 0 and no delay, or no transfer in either
 * pass) get no copy: lowering interleaves the passes' original steps.
 * The passes are split at their all-to-alls (PLAN_CAT_EP steps); a span's
 * TP and CP collectives are part of it, as in the default mode's closed
 * form: lowering keeps them on the TP stream with the plan's dependencies
 * (the linear layers' asynchronous all-gather and reduce-scatter beside
 * the backward's GEMMs, the CP ring's P2P beside the attention, as in
 * Megatron-core's combined layer) and moves the all-to-alls to a stream of
 * their own (PLAN_STREAM_EP, the combined layer's communication stream),
 * the network model timing both, and the SM share slows only the span's
 * compute steps (by the span's slowdown in ns).
 *
 * Ownership: the copies are appended to pl (plan_push_step,
 * pl->ep_pairs); pl->max_pass_steps grows to the longest copy.
 */
#ifndef TRAINSIM_EP_PAIR_STEPS_H
#define TRAINSIM_EP_PAIR_STEPS_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/core/plan.h"
#include "sim/sched/sched.h"
#include "sim/util/err.h"

/* Split range R of pl at its all-to-alls (PLAN_CAT_EP steps, the
 * transfers; back-to-back ones are one) into b (2 (R.n + 1) entries, owned
 * by the caller): span j (0..n) is steps [b[2j], b[2j+1]) of R, transfer j
 * (1..n) steps [b[2j-1], b[2j]). Returns n. */
int ep_pair_steps_split(const plan *pl, plan_range R, uint32_t *b);

/* Add the copies above to pl for schedule s (sms: overlap_gpu_sms, 0
 * unknown; delay_wgrad: --delay-wgrad-compute). TS_ENOMEM. */
int ep_pair_steps_build(plan *pl, const sched *s, int sms, bool delay_wgrad, ts_err *err);

#endif
