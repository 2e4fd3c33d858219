/* ep_pair — Megatron-core's overlap of the MoE expert-parallel all-to-alls
 * with compute (--overlap-moe-expert-parallel-comm, the "1F1B all-to-all
 * overlap" of its fine-grained schedule; DeepSeek-V3 section 3.2.1's
 * DualPipe F&B chunks): in the steady state a rank runs one micro-batch's
 * forward together with another micro-batch's backward, each layer split
 * into attention, dispatch, experts and combine, so that one pass's
 * all-to-alls run on the communication stream while the other pass
 * computes.
 *
 * Pairs of a rank's actions (ep_pair_mark): with DualPipe's marks (sched.h,
 * sched_action.overlap), each marked F with the next compute action when
 * that is a B or I; otherwise, in action order, two consecutive compute
 * actions (sends and receives between them skipped) that are an F and a B
 * or I, in either order, of different micro-batches, neither already paired
 * (1F1B's steady state F(i+w) B(i); interleaved's F of one chunk and B of
 * another; with p = 1, B(i) F(i+1), Megatron's combined step of forward
 * i+1 and backward i).
 *
 * Time of a pair (ep_pair_times, a closed form over the passes' totals):
 * with a_F, a_B the all-to-all time exposed in the forward and backward
 * alone (plan_step.ep_exposed_ns) and c_F, c_B their compute (the passes'
 * time less the time only their collectives run), the forward's
 * all-to-alls run beside the backward's compute and the other way round:
 *     exposed_F = phase(a_F, c_B) - c_B,  exposed_B = phase(a_B, c_F) - c_F
 * where phase(a, c) (overlap_shared_phase_ns) is the time of a transfer a
 * beside compute c that loses OVERLAP_EP_SMS of the GPU's SMs while the
 * transfer runs: max(a, c) without the SM share; every all-to-all hidden up
 * to its partner's compute, what it outlasts it exposed. Aggregating over
 * the layers is exact when the layers are alike and each all-to-all's
 * partner sub-module has the same share of its pass's compute; it is an
 * optimistic bound where one sub-module's transfer outlasts its partner
 * while another's is shorter (the per-sub-module split is not modelled).
 *
 * Rules (Megatron-LM's validate_args): a MoE model (--num-experts), expert
 * parallelism (--expert-model-parallel-size > 1), the alltoall or flex
 * dispatcher, with p > 1 virtual pipelining (the interleaved schedule; here
 * also DualPipeV, whose F&B pairs are the same overlap), no full
 * recomputation, at most one MTP depth. trainsim also refuses the flow
 * modes (each collective its own task: the pair's closed form is over
 * collapsed passes) and schedules other than 1f1b at p = 1, interleaved and
 * dualpipev.
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
 * flow modes); otherwise
 * TS_EINVAL naming the flag, what is wrong and what would be valid. TS_OK
 * at once when the flag is off. */
int ep_pair_check(const config *c, sched_kind k, int v, bool flows, ts_err *err);

/* Pair the compute actions of rank r of s (see above): partner[i] = the
 * index of action i's partner, -1 when unpaired (partner has n_actions[r]
 * entries, owned by the caller). */
void ep_pair_mark(const sched *s, int r, int32_t *partner);

/* The pair's times: a_f, c_f, a_b, c_b as above, sms the GPU's SMs (0
 * unknown: no SM share); *exp_f and *exp_b the exposed all-to-all time of
 * each pass in the pair (>= 0, <= what it had alone plus the slowdown its
 * transfers cause the partner's compute). */
void ep_pair_times(int64_t a_f, int64_t c_f, int64_t a_b, int64_t c_b, int sms, int64_t *exp_f, int64_t *exp_b);

/* Add to pl (collapsed passes: plan_opts.inline_tp) the variants of every
 * distinct pair of schedule s (plan_ep_pair; none for pairs whose passes
 * have no exposed all-to-all), sms the GPU's SMs (overlap_gpu_sms).
 * TS_ENOMEM. */
int ep_pair_build(plan *pl, const sched *s, int sms, ts_err *err);

/* The variants of the pair (sf, sb, kb) in pl, NULL when none. */
const plan_ep_pair *ep_pair_find(const plan *pl, int sf, int sb, int kb);

#endif
