/* search — find the fastest parallel layout that fits in memory for a model,
 * a GPU count and a global batch (what NVIDIA's hyperparameter tool does for
 * NeMo Megatron, without launching a job).
 *
 * Three phases, each deterministic:
 *   1. search_enumerate(): the whole space, in a fixed order — tensor size t,
 *      pipeline size p (with the stage split), schedule, interleaving depth v,
 *      micro-batch size b, sequence parallelism, recomputation
 *      (granularity/method/layers), distributed optimizer, and for a mixture
 *      of experts the expert-tensor-parallel size etp, the expert-parallel
 *      size ep and the token dispatcher. Impossible layouts
 *      are marked rejected with their reason (heads or hidden not divisible by
 *      t, layers not splittable over p*v stages, B not divisible by b*d, the
 *      GPUs not a multiple of p*etp*ep, ...),
 *      then layouts whose memory lower bound (search_bound.h) exceeds the GPU
 *      memory are rejected too. Cheap: no simulation.
 *   2. search_evaluate(): every candidate still pending is simulated on the
 *      timeline (simulate_run), spread over threads; a slice of the candidates
 *      (index % nshards == shard) can be evaluated by one MPI rank
 *      (search_mpi.h) and the slices merged back. Results land in each
 *      candidate's slot, so the thread and rank counts never change them.
 *   3. search_rank(): simulated candidates that fit, ordered by predicted
 *      iteration time, ties broken by enumeration index.
 *
 * Files: search.c (enumeration, pruning, ranking, reasons), search_bound.c
 * (memory lower bound), search_eval.c (threads, shards), search_sim.c (the
 * simulate_run evaluator), search_out.c (CSV, --explain), search_mpi.h (MPI).
 *
 * Ownership: a search_set owns its candidate array and every message string;
 * free it with search_set_free(). The space borrows the topology pointer of
 * its cluster (never freed here).
 */
#ifndef TRAINSIM_SEARCH_H
#define TRAINSIM_SEARCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sim/config/config.h"
#include "sim/core/simulate.h"
#include "sim/util/err.h"

#define SEARCH_MAX_MBS 16

/* What is searched over. Fixed: model, cluster, global batch. */
typedef struct {
    model_config model;
    cluster_config cluster;                /* gpus, gpus_per_node, gpu; topology borrowed */
    int global_batch_size;                 /* B, sequences */
    int max_tp;                            /* t in powers of 2 up to min(max_tp, gpus_per_node); default 8 */
    int max_pp;                            /* p: divisors of gpus/t up to max_pp (default: gpus) */
    int max_vp;                            /* interleaving depths v = 2..max_vp (default 8) */
    int micro_batch_sizes[SEARCH_MAX_MBS]; /* b values tried; default 1, 2, 4, 8 */
    int n_micro_batch_sizes;
    unsigned schedules;             /* bit (1u << sched_kind) per schedule tried; default all six */
    bool try_sequence_parallel;     /* also try --sequence-parallel when t > 1 (default true) */
    bool try_distributed_optimizer; /* also try it when d > 1 (default true) */
    bool try_recompute_block;       /* full/block with 1/4, 1/2, 3/4 of a chunk's layers (default true) */
    bool overlap_grad_reduce;       /* set on every candidate (default true) */
    double memory_margin_bytes;     /* kept free on top of the modelled peak: a candidate fits when
                                       peak + margin <= GPU memory (default SEARCH_MEMORY_MARGIN_GIB) */
    int max_cp; /* context-parallel sizes cp in 1, 2, 4, ... up to max_cp dividing the GPUs (p2p ring;
                   default 1: none); the world is t x cp x d x p */
    /* Mixture of experts (moe.num_experts = 0: a dense model, the rest unused).
     * moe holds the model's experts, routing and MoE layer pattern; its ep,
     * etp, dispatcher and enable_deepep are the candidate's. The experts of a
     * stage fold over etp x ep x edp ranks (Megatron-core): ep runs over the
     * divisors of the experts up to max_ep, etp over 1 and t, the dispatcher
     * over the dispatchers bits; a fold that does not divide the GPUs is
     * rejected with its reason. */
    moe_config moe;
    int max_ep;           /* largest expert-parallel size tried (default: the expert count) */
    bool try_etp;         /* also etp = t when t > 1 (default true) */
    unsigned dispatchers; /* bit (1u << search_dispatcher) per token dispatcher tried; default all */
    bool try_ep_overlap;  /* also try --overlap-moe-expert-parallel-comm (ep_pair.h) where its rules allow it:
                             ep > 1, alltoall or flex, no full recomputation, interleaved with v > 1 (or 1f1b
                             at p = 1); default false */
    bool delay_wgrad;     /* --delay-wgrad-compute on the candidates that overlap their EP pairs (it needs the
                             overlap, ep_pair.h); the others run without it; default false */
    /* The run's settings that are not a layout (--clip-grad, --loss-scale,
     * --ddp-bucket-size, ...: trainsim search's pass-through flags), set on
     * every candidate; its layout fields, and the settings that depend on a
     * layout (the overlaps, FSDP), are the candidate's (default: zero,
     * Megatron-LM's defaults). */
    parallel_config par;
} search_space;

/* Token dispatchers the search tries (Megatron-core's
 * --moe-token-dispatcher-type, flex with --moe-enable-deepep). With ep = 1 no
 * token leaves its rank, and inside one node DeepEP is costed as the
 * alltoall dispatcher (moe.h, moe_deepep_ns): there alltoall and
 * flex-deepep are the same run, and flex-deepep is tried only when alltoall
 * is not asked for (as one schedule is with p = 1). */
typedef enum {
    SEARCH_DISPATCH_ALLTOALL = 0,
    SEARCH_DISPATCH_FLEX_DEEPEP, /* flex with DeepEP */
    SEARCH_DISPATCH_ALLGATHER,
    SEARCH_DISPATCH_COUNT
} search_dispatcher;

/* "alltoall", "flex-deepep", "allgather" (search_dispatcher order), NULL-terminated. */
extern const char *const SEARCH_DISPATCHER_NAMES[];

/* Memory the search keeps free on every GPU beyond the modelled peak
 * (which already holds the CUDA context, NCCL buffers, cuBLAS workspace and
 * fragmentation: overheads.h), GiB. It covers what the model leaves out:
 * an op's temporaries (the output layer's fp32 logits and softmax in the
 * loss, GEMM outputs before the inputs are freed), a layer's recompute or
 * gradient buffers that overlap a transfer, fragmentation above the
 * estimate, another process on the GPU. 2 GiB is 2.5% of an 80 GB GPU, 5% of
 * a 40 GB one: a layout that needs the last few percent of HBM is one that a
 * real run may lose to an OOM. --memory-margin overrides it. */
#define SEARCH_MEMORY_MARGIN_GIB 2.0

/* Candidate status: pending/simulated, or why it was rejected. */
typedef enum {
    SEARCH_PENDING = 0,      /* passed every check; awaits simulation */
    SEARCH_SIMULATED,        /* simulated and fits in memory */
    SEARCH_REJ_HEADS,        /* attention heads not divisible by t */
    SEARCH_REJ_GROUPS,       /* query groups not divisible by t */
    SEARCH_REJ_HIDDEN,       /* hidden or FFN size not divisible by t */
    SEARCH_REJ_LAYERS,       /* layers cannot be split over p*v stages */
    SEARCH_REJ_BATCH,        /* B not divisible by b*d */
    SEARCH_REJ_MICROBATCHES, /* interleaved: micro-batches not a multiple of p */
    SEARCH_REJ_EXPERTS,      /* MoE: the GPUs not a multiple of p x etp x ep */
    SEARCH_REJ_MEMORY_BOUND, /* memory lower bound + margin above the GPU's memory */
    SEARCH_REJ_CONFIG,       /* config_resolve refused it (message kept) */
    SEARCH_REJ_MEMORY_SIM,   /* simulated peak + margin above the GPU's memory */
    SEARCH_REJ_SIM_ERROR,    /* the simulation failed (message kept) */
    SEARCH_STATUS_COUNT
} search_status;

/* What the simulation predicted for one candidate. */
typedef struct {
    double iteration_s;                    /* one training iteration, seconds */
    double tflops_per_gpu;                 /* model FLOPs / time / GPUs, TFLOP/s */
    double mfu;                            /* model FLOPs utilisation, 0..1 */
    double peak_mem_bytes;                 /* largest peak over the ranks, bytes */
    double bubble_fraction;                /* pipeline bubble / iteration time, 0..1 */
    double exposed_comm_s;                 /* communication not hidden behind compute, seconds */
    double exposed_s[SIMULATE_COMM_KINDS]; /* of which each kind (simulate_comm) */
    double tokens_per_s;                   /* training throughput */
} search_metrics;

/* One point of the space. Plain data (no pointers), so it can be copied and
 * sent between MPI ranks as bytes. */
typedef struct {
    int32_t tp, pp, dp, vp, mbs;
    int32_t num_microbatches;     /* m = B / (b*d); 0 when B % (b*d) != 0 */
    int32_t first_stage_layers;   /* 0 = even split */
    int32_t last_stage_layers;    /* 0 = even split */
    int32_t recompute_num_layers; /* full: 1 for uniform, k for block; 0 otherwise */
    uint8_t schedule;             /* sched_kind */
    uint8_t sequence_parallel;
    uint8_t recompute;        /* config_recompute */
    uint8_t recompute_method; /* config_recompute_method */
    uint8_t distributed_optimizer;
    uint8_t status;            /* search_status */
    uint8_t account_split;     /* interleaved/zb-v layers not dividing p*v: SEARCH_ACCOUNT_* bits, the
                              embedding / loss counted as a layer of the split (Megatron-core's
                              --account-for-embedding/loss-in-pipeline-split); 0 = none */
    uint8_t recompute_modules; /* selective: CONFIG_RC_* bits (0 = Megatron-core's default, core_attn) */
    double mem_bound_bytes;    /* lower bound on the peak (0 if not computed) */
    search_metrics r;          /* valid when status is SIMULATED or REJ_MEMORY_SIM */
    int32_t cp;                /* context-parallel size (0 or 1: none) */
    int32_t ep, etp;           /* MoE: expert-parallel and expert-tensor-parallel sizes (0: dense model) */
    uint8_t dispatcher;        /* MoE: search_dispatcher */
    uint8_t ep_overlap;        /* MoE: --overlap-moe-expert-parallel-comm (search_space.try_ep_overlap) */
} search_cand;

#define SEARCH_ACCOUNT_EMBEDDING 1u /* search_cand.account_split: the first stage holds one layer fewer */
#define SEARCH_ACCOUNT_LOSS      2u /* the last stage holds one layer fewer */

typedef struct {
    search_space space;
    search_cand *cands; /* n entries, enumeration order; owned */
    size_t n;
    char **msgs;           /* n entries; msgs[i] (owned) set for REJ_CONFIG / REJ_SIM_ERROR */
    double capacity_bytes; /* GPU memory, bytes */
    double usable_bytes;   /* capacity_bytes - space.memory_margin_bytes: what a candidate may use */
    size_t counts[SEARCH_STATUS_COUNT];
} search_set;

/* Messages kept for failed simulations are cut to this many bytes (less the
 * NUL), so results do not depend on how they travelled (search_mpi.h). */
#define SEARCH_MSG_BYTES 256

/* Progress callback: done of total simulations finished. Called from worker
 * threads, one call at a time (under a lock). */
typedef void (*search_progress_fn)(void *user, size_t done, size_t total);

/* Fill s with the default space for a model, cluster (borrowed) and batch. */
void search_space_default(search_space *s, const model_config *model, const cluster_config *cluster,
                          int global_batch_size);

/* Enumerate and prune (phase 1). On success *out is a new set (free with
 * search_set_free). TS_EINVAL if the space itself is malformed (no GPUs, no
 * micro-batch sizes, ...). */
int search_enumerate(const search_space *s, search_set **out, ts_err *err);

/* Build the full configuration of candidate i (validated). The cluster's
 * topology pointer is borrowed from the space: never config_free() it.
 * TS_EINVAL with config_resolve's message if refused. */
int search_cand_config(const search_set *set, size_t i, config *out, ts_err *err);

/* Recount set->counts from the candidates' statuses. */
void search_recount(search_set *set);

/* Ranking (phase 3): indices of SIMULATED candidates by iteration time, ties
 * by index. *order (owned by the caller, free()) gets *n_order entries. */
int search_rank(const search_set *set, size_t **order, size_t *n_order, ts_err *err);

/* Human-readable reason of candidate i's status ("" for pending/simulated),
 * written to buf (at most cap bytes, NUL-terminated). */
void search_reason(const search_set *set, size_t i, char *buf, size_t cap);

/* Short name of a status ("simulated", "heads", "memory-bound", ...). */
const char *search_status_name(search_status st);

/* Name of a candidate's recomputation ("none", "selective", "full-uniform",
 * "full-block"; "selective-mlp+layernorm" for the mlp and layernorm
 * modules, "selective-modules" for another set). */
const char *search_recompute_name(const search_cand *c);

void search_set_free(search_set *set);

#endif
