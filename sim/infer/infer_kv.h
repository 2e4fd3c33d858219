/* infer_kv — inference memory per GPU: weights, KV cache, workspace and the
 * memory besides tensors (overheads.h), and the largest batch that fits.
 *
 * KV cache per token on a rank of stage s:
 *   2 (K and V) x layers_s x kv_heads_rank x d x kv_bits / 8 bytes,
 * kv_heads_rank = g / t (or 1 when t > g: the heads are replicated), i.e.
 * 2 x l x g x d x bytes / t / p for an even split.
 * Weights of stage s on a rank: the transformer layers' parameters
 * (flops_params_stage) at the weight dtype; the embedding, final norm and
 * output weight stay 16-bit (weight-only quantisation leaves them).
 * Workspace: the activations of the widest step a rank runs, a prefill
 * micro-batch of T tokens: T x (h + (a+2g)d/t + ffn(x2)/t + h) x act bytes,
 * plus 4-byte logits (rows x V/t) on the last stage; the allocator's
 * fragmentation on it (overheads.h).
 */
#ifndef TRAINSIM_INFER_KV_H
#define TRAINSIM_INFER_KV_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/infer/infer_cost.h"

/* KV-cache bytes per token on a rank of stage (rounded up). */
int64_t infer_kv_bytes_per_token(const infer_model *m, int stage);

/* Weight bytes a rank of stage holds. */
int64_t infer_weight_bytes(const infer_model *m, int stage);

typedef struct {
    int64_t weights_bytes;   /* of the stage with the highest peak */
    int64_t kv_bytes;        /* KV cache at its peak */
    int64_t workspace_bytes; /* activations of the widest step + fragmentation */
    int64_t overhead_bytes;  /* CUDA context, cuBLAS workspace, NCCL buffers */
    int64_t peak_bytes;      /* the sum */
    int64_t hbm_bytes;       /* the GPU's memory */
    int stage;               /* the stage of that peak */
    bool fits;               /* peak <= hbm */
} infer_mem;

/* Memory of the rank with the highest peak holding kv_tokens tokens of KV
 * cache per replica (e.g. batch x (input + output)) while its widest step
 * runs step_tokens tokens in micro-batches of step_tokens / min(p, seqs)
 * with logit_rows rows of logits. */
infer_mem infer_memory(const infer_model *m, int64_t kv_tokens, int64_t step_tokens, int64_t seqs, int64_t logit_rows);

/* The largest batch b (<= cap) whose static run (b x (in + out) tokens of
 * cache, a prefill of b x in tokens) fits; 0 if none does. */
int64_t infer_max_batch(const infer_model *m, int64_t in, int64_t out, int64_t cap);

#endif
