/* search_bound — a fast lower bound on the peak memory of a layout, used by
 * the search to reject layouts that cannot fit before simulating them.
 *
 * The bound is the largest, over the pipeline ranks, of
 *   weights + gradients + optimizer state of the rank's parameters (its
 *   layers, plus the embedding on the first rank and the output layer on the
 *   last; flops_params_stage), at the bytes mixed-precision training
 *   holds: 2 (weights) + 4 (fp32 gradients, as Megatron-LM keeps them with
 *   bf16; 2 with fp16) + 12 (fp32 master, Adam moments; 12/d with a
 *   distributed optimizer) per parameter, 4 + 4 + 8 in fp32; a MoE
 *   layer counts its rank's share (moe_layer_rank_params: E/ep experts /
 *   etp, attention and shared experts / t, the router) and the distributed
 *   optimizer shards the routed experts' state over edp, the rest over
 *   d x cp; multi-latent attention's parameters replace q/k/v's on the dense
 *   layers (mla_layer_params_delta); the last stage adds each multi-token
 *   prediction depth (a layer of the decoder's last layer's kind,
 *   mtp_depth_rank_params, the word embedding's copy with untied embeddings
 *   on more than one stage: mtp.h),
 * plus
 *   the activation floor: the micro-batch chunks the schedule holds at once
 *   on that rank (forwards whose input-gradient backward has not run yet,
 *   counted on the generated schedule; the closed forms otherwise) times
 *   the bytes a chunk's layers keep per micro-batch (layer_saved_build under
 *   the recomputation mode: Korthikanti et al. 2022 Table 2; with block
 *   recomputation k layers keep only their input; a MoE layer keeps the
 *   layer without its MLP plus moe_block_mem_of at the busiest
 *   expert-parallel rank's load factor of the simulator's routing model,
 *   plan_moe.h: the rank's lightest chunk counting), plus the embedding's
 *   or output layer's
 *   saved tensors on the first / last rank (per in-flight micro-batch
 *   without chunks, once with them); under the zero-bubble schedules, when
 *   more, the chunks between their input-gradient backward (I) and their
 *   weight gradients (W) times what W alone needs of a chunk (the tensors
 *   layer_saved_build marks LAYER_FREE_AFTER_W, and moe_block_mem_of's
 *   free_w, plus the output gradients I stashes for W,
 *   layer_wgrad_stash_bytes of the layer's I and W lists: the lesser of a
 *   recomputed and a kept layer's), or the chunks held either way at one
 *   moment times the lesser of the two per-chunk figures; on a stage that
 *   loads data the batch's tensors each micro-batch keeps
 *   (dataload_mem_of: from F to B or I the loss's labels and loss_mask and
 *   the lookups' indices, from I to W the indices), per in-flight
 *   micro-batch without chunks, once with them; under full recomputation
 *   (uniform, or block over every layer), when more, the f chunks plus what
 *   the recomputation of the last layer of the chunk whose backward follows
 *   the peak re-creates (the tensors layer_saved_build does not keep after
 *   F; its lightest chunk's), less the last rank's output layer and MTP
 *   depths of that micro-batch, which its backward frees first; on the last rank each MTP depth's own
 *   saved tensors (mtp_saved_bytes), its layer's without recomputation and
 *   the output layer's, as many times as the output layer's; with MoE layers
 *   at least the dispatcher's transient buffers of one pass
 *   (moe_block_transient_bytes, held while the pass runs; not counted under
 *   a capacity factor below 1, where the plan may size a layer below the
 *   mean load),
 * plus
 *   the memory besides tensors the simulator adds (sim/config/overheads.h):
 *   CUDA context, the NCCL buffers of the rank's communicators, cuBLAS
 *   workspace, and the allocator's fragmentation on the activation floor
 *   without the batch tensors (the simulator applies it to the activations
 *   and pipeline buffers live, which at the peak hold at least that floor;
 *   each moment above is taken with its own fragmentation, the largest
 *   total kept).
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

/* What one pipeline rank holds at once over its actions run in order, at
 * the most: f micro-batch chunks whose forward (F) ran and whose
 * input-gradient backward (B or I) has not (at least 1); w chunks whose I
 * ran and whose weight gradients (W) have not (zero-bubble schedules; 0
 * otherwise); fw chunks of either kind at one moment (>= f). */
typedef struct {
    int f, w, fw;
} search_bound_live;

/* The same counted on a generated schedule (the caller generates it as
 * the simulator does: search.c with the combined 1F1B of the overlapped EP
 * pairs on the interleaved schedule). out: s->p entries. */
void search_bound_inflight_sched(const sched *s, search_bound_live *out);

/* The bound for a validated configuration (c->model, c->par). live:
 * c->par.pp entries from search_bound_inflight_sched, or NULL for the
 * closed forms (f = fw, w = 0). TS_EINVAL if the layer shapes do not hold
 * (layer_shape_from_config's message). */
int search_bound_compute(const config *c, const search_bound_live *live, search_bound *out, ts_err *err);

#endif
