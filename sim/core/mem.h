/* mem — memory of every simulated GPU over the simulated timeline.
 *
 * Allocations and frees are placed at simulated times (the lowering puts
 * weights, gradients and optimizer state at time 0, activations when the
 * pass that saves them starts and frees them when the backward that uses
 * them ends, pipeline buffers while a transfer runs). The tracker keeps, per
 * rank, the bytes live per category, the peak of their sum with the
 * breakdown at that moment, and (optionally) the samples of the total for a
 * trace's counter track. The tracker holds only the changes still in the
 * future (and the samples, if kept).
 *
 * Ownership: mem_create returns a tracker the caller frees with mem_free.
 */
#ifndef TRAINSIM_MEM_H
#define TRAINSIM_MEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sim/config/overheads.h"
#include "sim/util/err.h"

typedef enum {
    MEM_WEIGHTS = 0, /* model weights at the training precision */
    MEM_GRADS,       /* gradient buffer (fp32 with bf16, as Megatron-LM) */
    MEM_OPTIM,       /* fp32 master weights + Adam moments (sharded with the distributed optimizer) */
    MEM_ACTIV,       /* activations saved for the backward (and recomputed ones) */
    MEM_P2P,         /* pipeline send/receive buffers */
    MEM_BATCH,       /* the data loader's batch on the stages that load (sim/model/dataload.h dataload_mem) */
    /* Memory besides tensors (sim/config/overheads.h): */
    MEM_CUDA_CONTEXT, /* CUDA context and loaded kernel modules */
    MEM_NCCL,         /* NCCL communicator buffers */
    MEM_CUBLAS,       /* cuBLAS workspaces */
    MEM_FRAG,         /* caching-allocator fragmentation: follows MEM_ACTIV + MEM_P2P (mem_set_overheads) */
    MEM_CATS
} mem_cat;

typedef struct {
    int64_t t_ns;
    int64_t bytes; /* total live bytes on the rank from t_ns on */
} mem_sample;

typedef struct mem_tracker mem_tracker;

/* A tracker for n_ranks ranks; keep_samples records the total after every
 * change (for traces). TS_EINVAL, TS_ENOMEM. */
int mem_create(int n_ranks, bool keep_samples, mem_tracker **out, ts_err *err);
void mem_free(mem_tracker *m); /* NULL allowed */

/* Make MEM_FRAG follow the activations and pipeline buffers on every
 * rank: after each change it holds
 * overheads_fragmentation_bytes(o, live MEM_ACTIV + live MEM_P2P), so the
 * peak and the samples include it. Call before the first mem_add; MEM_FRAG
 * is never added directly (mem_add ignores it). */
void mem_set_overheads(mem_tracker *m, const memory_overheads *o);

/* Record delta_bytes (negative: free) of category cat on rank at t_ns, the
 * simulated time being now_ns <= t_ns (now_ns must not decrease between
 * calls): a pass adds its later changes when it starts. Changes are applied
 * in time order, those at the same time in the order they were added. No
 * effect after mem_check. */
void mem_add(mem_tracker *m, int rank, int cat, int64_t delta_bytes, int64_t t_ns, int64_t now_ns);

/* Apply the changes still pending (the end of the timeline); the queries
 * below need it; idempotent. TS_OK, TS_ESTATE naming rank, category and time
 * if a category went negative (freed more than allocated), TS_ENOMEM. */
int mem_check(mem_tracker *m, ts_err *err);

/* After mem_check: bytes live at the end of the timeline. */
int64_t mem_live_bytes(const mem_tracker *m, int rank, int cat);
int64_t mem_peak_bytes(const mem_tracker *m, int rank);
int64_t mem_peak_time_ns(const mem_tracker *m, int rank);
/* Bytes of category cat live at the moment of rank's peak. */
int64_t mem_peak_cat_bytes(const mem_tracker *m, int rank, int cat);
/* Highest live bytes of one category alone on rank (its own peak). */
int64_t mem_cat_peak_bytes(const mem_tracker *m, int rank, int cat);
/* Samples of rank (borrowed; empty unless keep_samples). */
const mem_sample *mem_samples(const mem_tracker *m, int rank, size_t *n);

/* "weights", "gradients", "optimizer", "activations", "p2p-buffers",
 * "data-batch", "cuda-context", "nccl-buffers", "cublas-workspace",
 * "allocator-fragmentation" */
const char *mem_cat_name(int cat);

#endif
