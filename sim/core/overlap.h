/* overlap — closed forms of Megatron-core's communication overlap that the
 * engine's task graph cannot express op by op, applied when the plan is
 * built (plan_build.c).
 *
 * Tensor-parallel overlap (--tp-comm-overlap, Transformer Engine's
 * userbuffers). A sequence-parallel all-gather feeding a GEMM, or a
 * reduce-scatter of a GEMM's output, is split into n chunks; chunk i's
 * transfer runs while the GEMM works on another chunk. With transfer c and
 * GEMM g (the GEMM already slowed by the SMs the communication takes), each
 * chunk moves c/n and computes g/n, and the pair takes
 *     g + c/n + (n-1) max(0, c/n - g/n)
 * so the communication left exposed is the first chunk plus whatever each
 * later chunk's transfer outlasts its GEMM:
 *     exposed = (c + (n-1) max(0, c - g)) / n.
 * Transformer Engine's default userbuffers configuration
 * (transformer_engine/pytorch/module/base.py, get_default_config /
 * initialize_ub) gives the layers' methods:
 *   ring_exchange: the all-gathers before qkv and fc1 (forward) and before
 *     proj and fc2's input-gradient GEMMs (backward): n = t chunks, moved by
 *     the copy engines (use_ce, num_sm 1, set_sm_margin off): the GEMM keeps
 *     every SM;
 *   pipeline: the reduce-scatters after proj and fc2 (forward): n = 4
 *     chunks (num_splits 4), num_sm 16 with set_sm_margin on: the GEMM runs
 *     on the GPU's SMs less 16, so it takes sms / (sms - 16) times as long;
 *   bulk: the backward all-gather of the saved input and the reduce-scatter
 *     of the input gradient, each run whole beside an input- or
 *     weight-gradient GEMM: already modelled as overlapped collectives
 *     (layer.h, cost_overlap_ns).
 *
 * Everything here is plain arithmetic: no heap memory.
 */
#ifndef TRAINSIM_OVERLAP_H
#define TRAINSIM_OVERLAP_H

#include <stdint.h>

/* Transformer Engine userbuffers defaults (see above). */
#define OVERLAP_PIPELINE_SPLITS 4
#define OVERLAP_PIPELINE_SMS    16

/* Exposed communication of a collective of comm_ns split into n >= 1 chunks
 * pipelined with a GEMM of gemm_ns: (c + (n-1) max(0, c - g)) / n, rounded
 * up. n < 1 is taken as 1 (no pipelining: all of comm_ns). */
int64_t overlap_chunked_exposed_ns(int64_t comm_ns, int64_t gemm_ns, int n);

/* A GEMM of gemm_ns run on sms - comm_sms of the GPU's sms SMs:
 * gemm_ns * sms / (sms - comm_sms), rounded to nearest. gemm_ns unchanged
 * when sms is 0 (unknown) or comm_sms <= 0 or comm_sms >= sms. */
int64_t overlap_sm_slowed_ns(int64_t gemm_ns, int sms, int comm_sms);

/* A transfer of comm_ns beside compute of comp_ns that runs on sms -
 * comm_sms SMs while the transfer runs and on all sms after it (the
 * slowdown of overlap_sm_slowed_ns applied to the overlapped part only):
 * comm_ns when it outlasts the slowed compute (comm_ns >= comp_ns x sms /
 * (sms - comm_sms)), else comp_ns + comm_ns x comm_sms / sms (the compute
 * the transfer's share of SMs delays), rounded to nearest; max(comm_ns,
 * comp_ns) when overlap_sm_slowed_ns would not slow (sms 0, comm_sms <= 0
 * or >= sms). Negative times are taken as 0. */
int64_t overlap_shared_phase_ns(int64_t comm_ns, int64_t comp_ns, int sms, int comm_sms);

/* One compute op of comp_ns in a chain of ops run beside a transfer (the
 * shared experts beside the MoE all-to-all, --moe-shared-expert-overlap):
 * *comm_left_ns is what remains of the transfer when the op starts. While
 * the transfer runs the op works on sms - comm_sms SMs; returns the op's
 * time: overlap_sm_slowed_ns when the transfer outlasts it, else
 * overlap_shared_phase_ns(*comm_left_ns, comp_ns, ...) (slowed up to the
 * transfer's end, full speed after); *comm_left_ns is decreased by it (not
 * below 0). */
int64_t overlap_beside_chain_ns(int64_t comp_ns, int64_t *comm_left_ns, int sms, int comm_sms);

/* Streaming multiprocessors of a GPU kind of topologies/gpus.csv, from
 * NVIDIA's architecture whitepapers: A100 (SXM4) 108 (NVIDIA A100 Tensor
 * Core GPU Architecture, 2020), H100 SXM5 and H200 SXM 132 (NVIDIA H100
 * Tensor Core GPU Architecture, 2022; the H200 is the same GH100 part).
 * Matched by name prefix "A100", "H100-SXM", "H200"; 0 for any other kind
 * (no SM-share slowdown is then applied). */
int overlap_gpu_sms(const char *gpu_name);

#endif
