/* search_bound — a fast lower bound on the peak memory of a layout, used by
 * the search to reject layouts that cannot fit before simulating them.
 *
 * The bound is the largest, over the pipeline ranks, of
 *   weights + gradients + optimizer state of the rank's parameters (its
 *   layers, plus the embedding on the first rank and the output layer on the
 *   last; flops_params_stage), at the bytes mixed-precision training
 *   holds: 2 (weights) + 4 (fp32 gradients, as Megatron-LM keeps them with
 *   bf16; 2 with fp16) + 12 (fp32 master, Adam moments; 12/d with a
 *   distributed optimizer) per parameter, 4 + 4 + 8 in fp32,
 * plus
 *   the activation floor: the micro-batch chunks the schedule holds at once
 *   on that rank (forwards whose input-gradient backward has not run yet,
 *   counted on the generated schedule; the closed forms otherwise) times
 *   the bytes a chunk's layers keep per micro-batch (layer_saved_build under
 *   the recomputation mode: Korthikanti et al. 2022 Table 2; with block
 *   recomputation k layers keep only their input), plus the embedding's or
 *   output layer's saved tensors on the first / last rank,
 * plus
 *   the memory besides tensors the simulator adds (sim/config/overheads.h):
 *   CUDA context, the NCCL buffers of the rank's communicators, cuBLAS
 *   workspace, and the allocator's fragmentation on the activation floor
 *   (the simulator applies it to the activations and pipeline buffers
 *   live, which at the peak hold at least that floor).
 * Transient buffers (recomputed activations, gradients in flight,
 * pipeline buffers) are left out: they only add to the real peak.
 *
 * Every term is a quantity the real run must hold, so the bound never
 * exceeds the simulated peak (tests/unit/test_search.c checks that on
 * simulated layouts): a rejected layout could not have fit.
 */
#ifndef TRAINSIM_SEARCH_BOUND_H
#define TRAINSIM_SEARCH_BOUND_H

#include "sim/config/config.h"
#include "sim/sched/sched.h"
#include "sim/util/err.h"

/* Breakdown of the bound for the rank that sets it. Bytes. */
typedef struct {
    double weights_bytes;
    double grads_bytes;
    double optimizer_bytes;
    double activations_bytes;
    double overheads_bytes; /* CUDA context, NCCL buffers, cuBLAS workspace, fragmentation */
    double total_bytes;     /* sum of the above */
    int rank;               /* pipeline rank that sets the bound */
} search_bound;

/* Micro-batch chunks the schedule holds at once at its peak on pipeline
 * rank r, from the closed forms (a lower bound: warm-up forwards before the
 * first backward; p - r for the zero-bubble schedules). */
int search_bound_inflight(const parallel_config *p, int num_microbatches, int rank);

/* The same counted on a generated schedule: for each rank, the most
 * forwards (F) whose input-gradient backward (B or I) has not run yet while
 * its actions run in order. out: s->p entries. */
void search_bound_inflight_sched(const sched *s, int *out);

/* The bound for a validated configuration (c->model, c->par). inflight:
 * c->par.pp entries from search_bound_inflight_sched, or NULL for the
 * closed forms. TS_EINVAL if the layer shapes do not hold
 * (layer_shape_from_config's message). */
int search_bound_compute(const config *c, const int *inflight, search_bound *out, ts_err *err);

#endif
