/* overheads — the memory a training process holds on each GPU besides its
 * tensors, in closed form: what the simulator's memory timeline
 * (sim/core/simulate.c) and the search's lower bound
 * (sim/search/search_bound.c) add, so both count the same bytes.
 *
 *   CUDA context     cuda_context_gib per GPU: the context and the kernel
 *                    modules loaded in it (cuBLAS, NCCL, the framework's);
 *   NCCL buffers     communicators x nccl_channels x OVERHEADS_NCCL_PEERS
 *                    x nccl_buffer_mib: each communicator the rank uses
 *                    for collectives (tensor, pipeline, data parallel,
 *                    the tied embedding's first/last stage pair, expert
 *                    data parallel, context parallel by all-gather) holds,
 *                    per channel and per ring neighbour, the buffers of
 *                    NCCL's three protocols; the peer-to-peer connections
 *                    of the expert all-to-all and the context-parallel
 *                    ring are not modelled (named as not counted);
 *   cuBLAS workspace cublas_workspace_mib per stream that runs GEMMs
 *                    (OVERHEADS_GEMM_STREAMS);
 *   fragmentation    allocator_fragmentation x the activations and
 *                    pipeline buffers live: what PyTorch's caching
 *                    allocator reserves beyond the tensors it hands out.
 *
 * Defaults: the GPU catalogue (topologies/gpus.csv: cuda_context_gib,
 * cublas_workspace_mib, nccl_channels, each with its source in the file's
 * comments) and the GPU-independent constants below. Every figure can be
 * overridden with a flag (--cuda-context-gib, --nccl-buffer-mib,
 * --nccl-channels, --cublas-workspace-mib, --allocator-fragmentation).
 */
#ifndef TRAINSIM_OVERHEADS_H
#define TRAINSIM_OVERHEADS_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/config/catalog.h"
#include "sim/sched/sched.h"
#include "sim/util/err.h"

/* A field of memory_overheads below 0: the default for the GPU kind, which
 * overheads_resolve (called by config_resolve) fills in. flags_register
 * sets every field to it; a config built by hand with zeros holds no
 * overheads. */
#define OVERHEADS_DEFAULT (-1.0)

/* Memory a training process holds on each GPU besides its tensors: what
 * PyTorch, cuBLAS and NCCL take (cluster_config.overheads, config.h). */
typedef struct {
    double cuda_context_gib;     /* --cuda-context-gib: CUDA context + loaded kernel modules, GiB per GPU */
    double nccl_buffer_mib;      /* --nccl-buffer-mib: NCCL buffers per channel per peer (Simple + LL128 + LL), MiB */
    int nccl_channels;           /* --nccl-channels: channels per communicator */
    double cublas_workspace_mib; /* --cublas-workspace-mib: cuBLAS workspace per GEMM stream, MiB */
    double allocator_fragmentation; /* --allocator-fragmentation: caching-allocator overhead, fraction of the
                                       activations + pipeline buffers live */
} memory_overheads;

/* NCCL's buffers per channel per peer connection, bytes, from NCCL's
 * defaults (src/include/device.h, src/init.cc; docs: NCCL_BUFFSIZE):
 *   Simple  NCCL_BUFFSIZE default 4 MiB                          4194304
 *   LL128   NCCL_LL128_ELEMS_PER_THREAD 120 x NCCL_LL128_MAX_NTHREADS 640
 *           x NCCL_STEPS 8 x 8 B                                 4915200
 *   LL      NCCL_LL_LINES_PER_THREAD 8 x NCCL_LL_MAX_NTHREADS 512
 *           x NCCL_STEPS 8 x 16 B                                 524288
 * total 9633792 B = 9.1875 MiB. */
#define OVERHEADS_NCCL_SIMPLE_BYTES 4194304.0
#define OVERHEADS_NCCL_LL128_BYTES  4915200.0
#define OVERHEADS_NCCL_LL_BYTES     524288.0
#define OVERHEADS_NCCL_BUFFER_MIB                                                                                      \
    ((OVERHEADS_NCCL_SIMPLE_BYTES + OVERHEADS_NCCL_LL128_BYTES + OVERHEADS_NCCL_LL_BYTES) / 1048576.0)

/* Peers per channel: a ring channel connects each rank to the previous
 * rank (receive) and the next (send), one buffer set per connection. */
#define OVERHEADS_NCCL_PEERS 2

/* Streams that run GEMMs, each with its own cuBLAS handle and workspace in
 * PyTorch: the compute stream (every GEMM of the simulated plan runs there). */
#define OVERHEADS_GEMM_STREAMS 1

/* PyTorch caching allocator fragmentation, a fraction of the activations
 * and pipeline buffers live: a stated estimate (blocks are rounded to
 * 512 B, large ones carved from 2 MiB / 20 MiB segments whose remainders
 * other sizes cannot always reuse). The executor can measure it as
 * torch.cuda.memory_reserved() / memory_allocated() - 1 at the peak; 0.10 is
 * a deliberate middle of what such a measurement shows (a few % to 30%). */
#define OVERHEADS_ALLOCATOR_FRAGMENTATION 0.10

/* The communicators a pipeline rank uses: those before OVERHEADS_COMMS run
 * collectives (NCCL's ring and tree connections, counted); the others run
 * only peer-to-peer sends and receives, whose per-peer buffers are not
 * modelled (listed in the report as not counted). */
typedef enum {
    OVERHEADS_COMM_TP = 0, /* tensor parallel, t > 1 */
    OVERHEADS_COMM_PP,     /* pipeline, p > 1 (sends and receives between stages) */
    OVERHEADS_COMM_DP,     /* data parallel with context parallel, d x cp > 1 (gradient reduction, parameter
                              gather: Megatron-core's data-parallel group with context parallelism) */
    OVERHEADS_COMM_EMB,    /* tied embedding: the first and last stage, when on different ranks */
    OVERHEADS_COMM_EDP,    /* expert data parallel, edp > 1 (the expert gradients' reduction) */
    OVERHEADS_COMM_CP,     /* context parallel by all-gather (--cp-comm-type all_gather), cp > 1 */
    OVERHEADS_COMMS,       /* the communicators counted */
    OVERHEADS_P2P_EP = OVERHEADS_COMMS, /* the expert-parallel all-to-all, ep > 1: peer-to-peer, not counted */
    OVERHEADS_P2P_CP,                   /* the context-parallel ring (p2p, a2a, a2a+p2p), cp > 1: not counted */
    OVERHEADS_COMM_KINDS
} overheads_comm;

/* "TP", "PP", "DP", "embedding", "EDP", "CP", "EP all-to-all", "CP ring". */
const char *overheads_comm_name(overheads_comm k);

/* What decides a pipeline rank's communicators. */
typedef struct {
    int tp, pp, dp, cp;  /* tensor, pipeline, data and context parallel sizes */
    int ep, edp;         /* expert parallel and expert data parallel sizes (0 without experts) */
    bool cp_all_gather;  /* --cp-comm-type all_gather (collectives) rather than a ring or all-to-all */
    sched_kind schedule; /* the pipeline schedule */
    bool tied;           /* the word embedding and the output layer share their weight (no
                            --untie-embeddings-and-output-weights) */
} overheads_layout;

/* The defaults for GPU kind g: its catalogue columns and the constants
 * above; for a calibrated-only device (--gpu cpu: no CUDA, no NCCL, no
 * caching allocator) every figure is 0. */
void overheads_default(const gpu_spec *g, memory_overheads *out);

/* Replace every field of o below 0 (OVERHEADS_DEFAULT) by g's
 * default; then TS_EINVAL naming the flag if a field is out of range
 * (valid: >= 0; fragmentation 0..10; channels 0..64, NCCL's maximum). */
int overheads_resolve(memory_overheads *o, const gpu_spec *g, ts_err *err);

/* Bitmask of the communicators (1u << overheads_comm) that pipeline rank
 * `rank` of layout l uses. */
unsigned overheads_comms(const overheads_layout *l, int rank);

/* Bytes of each overhead for pipeline rank r (fragmentation excluded: it
 * depends on the live bytes, see overheads_fragmentation_bytes). */
int64_t overheads_cuda_context_bytes(const memory_overheads *o);
int64_t overheads_nccl_bytes(const memory_overheads *o, unsigned comms);
int64_t overheads_cublas_bytes(const memory_overheads *o);

/* The fragmentation bytes over live_bytes of activations + pipeline
 * buffers: floor(allocator_fragmentation x live_bytes). */
int64_t overheads_fragmentation_bytes(const memory_overheads *o, int64_t live_bytes);

#endif
