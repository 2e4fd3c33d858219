/* dataload — the data loader's step of one micro-batch, in closed form:
 * what Megatron-LM's pretrain_gpt.py get_batch runs on the GPU's critical
 * path at the start of a forward, on the pipeline stages that need data.
 *
 * What runs (megatron/training/utils.py get_batch_on_this_tp_rank and
 * get_batch_on_this_cp_rank; pretrain_gpt.py get_batch returns nothing on
 * the middle stages):
 *   1. tensor-parallel rank 0 takes the next batch from the iterator. The
 *      DataLoader's worker processes (--num-workers, Megatron's default 2)
 *      read and collate it ahead of time into pinned memory (pin_memory
 *      True): ASSUMED fully overlapped with the GPU's work, so the host side
 *      costs nothing here;
 *   2. it copies every tensor of the batch to the GPU (.cuda(non_blocking)
 *      on the current stream): tokens and labels int64 [b, s], loss_mask
 *      float32 [b, s], position_ids int64 [b, s], and attention_mask bool
 *      [b, 1, s, s] (Megatron's default; not with
 *      --no-create-attention-mask-in-dataloader), each one copy at the host
 *      link's rate plus one launch;
 *   3. it broadcasts some of them over the tensor-parallel group (one
 *      torch.distributed.broadcast per tensor, which the compute stream
 *      waits for): with one pipeline stage all five; on the first stage
 *      tokens, attention_mask, position_ids; on the last stage labels,
 *      loss_mask, attention_mask, and tokens and position_ids with
 *      multi-token prediction;
 *   4. with context parallelism (cp > 1) every tensor it holds is cut to the
 *      rank's two sequence chunks: a 2-element index copied to the GPU and
 *      an index_select that reads and writes the rank's 1/cp of the tensor
 *      (memory-bound).
 * The sequence is the whole one (s, not s/cp): every cp rank loads the
 * micro-batch and keeps its part.
 *
 * Costs: a copy of x bytes is launch_ns + x / host_gbps (the copy is
 * issued like a kernel: the cost model's launch overhead); a broadcast of
 * x bytes over n ranks is costed as the all-gather with the same per-rank
 * traffic, commcost_ns(COMM_ALL_GATHER, x n / (n - 1)): a ring broadcast
 * moves x over every link once (NCCL's algorithm bandwidth of broadcast is
 * its bus bandwidth; an all-gather's is n/(n-1) times it,
 * ../shared/reference/nccl_tuning.md 3.2 step 5), and its latency (base +
 * (n-1) steps) lies between NCCL's two ring-broadcast latencies (base + one
 * step; base + n steps, 3.3); the slice is cost_mem_ns of 2 x bytes / cp.
 * The host link: dataload_host_link_gbps.
 */
#ifndef TRAINSIM_DATALOAD_H
#define TRAINSIM_DATALOAD_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/config/catalog.h"
#include "sim/model/commcost.h"
#include "sim/model/cost.h"
#include "sim/util/err.h"

/* The tensors of a batch, in get_batch_on_this_tp_rank's order. */
typedef enum {
    DATALOAD_TOKENS = 0,   /* int64 [b, s] */
    DATALOAD_LABELS,       /* int64 [b, s] */
    DATALOAD_LOSS_MASK,    /* float32 [b, s] */
    DATALOAD_ATTN_MASK,    /* bool [b, 1, s, s] */
    DATALOAD_POSITION_IDS, /* int64 [b, s] */
    DATALOAD_TENSORS
} dataload_tensor;

/* Which pipeline stage loads: the roles decide the broadcasts. */
typedef struct {
    bool first;       /* the first pipeline stage (embedding) */
    bool last;        /* the last pipeline stage (loss) */
    bool mtp;         /* multi-token prediction layers (on the last stage) */
    bool attn_mask;   /* the batch holds the attention mask (Megatron's default; off with
                        --no-create-attention-mask-in-dataloader) */
    int b, s;         /* micro-batch size, sequence length (whole: not divided by cp) */
    int tp;           /* tensor-parallel size (ranks of the broadcasts) */
    int cp;           /* context-parallel size (1: no slicing) */
    double host_gbps; /* host-to-GPU link, GB/s (1e9 B/s) per direction */
} dataload_in;

/* One micro-batch's step on a stage that loads data. */
typedef struct {
    int64_t h2d_bytes;           /* copied host -> GPU (every tensor of the batch) */
    int64_t bcast_bytes;         /* broadcast over the tensor-parallel group (summed over tensors; 0 with tp 1) */
    int64_t slice_bytes;         /* read + written by the cp slices (0 with cp 1) */
    int64_t mask_bytes;          /* of h2d_bytes, the attention mask's (0 without it) */
    int n_h2d, n_bcast, n_slice; /* copies (the cp indices included), broadcasts, slices */
    int64_t h2d_ns, bcast_ns, slice_ns;
    int64_t total_ns; /* h2d_ns + bcast_ns + slice_ns */
} dataload_cost;

/* Bytes of tensor k for b sequences of s tokens. */
int64_t dataload_tensor_bytes(dataload_tensor k, int b, int s);

/* Is tensor k broadcast over the tensor-parallel group on a stage of this role? */
bool dataload_broadcast(dataload_tensor k, bool first, bool last, bool mtp);

/* The step of in (in->first or in->last must be set; b, s, tp, cp >= 1,
 * host_gbps > 0) with cm's launch overhead and memory tables and cc's
 * collectives over tp_group (its ranks = in->tp). TS_EINVAL naming the
 * field when out of range. */
int dataload_cost_of(const dataload_in *in, const cost_model *cm, const commcost_params *cc,
                     const commcost_group *tp_group, dataload_cost *out, ts_err *err);

/* The host-to-GPU link of GPU kind g, GB/s per direction (datasheets, in
 * dataload.c): A100 PCIe Gen4 x16 32; H100 SXM5, H200, B200 PCIe Gen5 x16
 * 64; GB200 NVLink-C2C 450. A calibrated-only device (--gpu cpu), whose
 * "GPU" is host memory: a copy is a memcpy, which reads and writes each
 * byte, so half the calibrated memory rate, mem_gbps / 2 (mem_gbps: the
 * cost model's hbm_gbps). Another kind: TS_EINVAL naming it and
 * --data-loader-ns, which replaces the model. */
int dataload_host_link_gbps(const gpu_spec *g, double mem_gbps, double *out, ts_err *err);

#endif
