/* gpt_infer — autoregressive inference of a gpt stage with a KV cache:
 * prefill (the prompt's tokens in one forward) and decode steps (one new
 * token per sequence), each appending its keys and values to the cache.
 *
 * The cache (gpt_kv) holds, for each of the stage's layers, K and V of the
 * B sequences in flight ([B, NH/t, T, hs] each, T = the model's --seq-length,
 * its learned positions): 2 x layers x heads x head_dim x 4 bytes (fp32) per
 * token, divided over the t tensor ranks (each holds its heads). A step
 * runs the training forward's layer (gpt_pass.c) on the new rows only:
 * LayerNorm, QKV, the keys and values appended to the cache, causal
 * attention of the new queries over the cache, output projection, the MLP;
 * then the final LayerNorm and the output layer on each sequence's last new
 * token. With t > 1 the row-parallel outputs are all-reduced over COMM_TP
 * (Megatron's "g"); a stage created with sequence parallelism runs the same
 * way (inference keeps every row on every rank; the weights are the same).
 *
 * The whole model must be one stage (embedding and head): pipeline-parallel
 * inference is not implemented (TS_ENOTSUP).
 *
 * Op names given to the stage's profiling hook: "embed", then per layer
 * "ln1", "qkv", "kv_append", "attn", "proj", ["tp_allreduce"], "residual1",
 * "ln2", "fc1", "gelu", "fc2", ["tp_allreduce"], "residual2"; then "lnf",
 * "logits". gpt_infer_op_bytes() gives the bytes each moves.
 *
 * Ownership: gpt_kv_create allocates the cache (counted as activations) and
 * the step's scratch (buffers) from the stage's backend; gpt_kv_free
 * releases them and must be called before the stage is freed.
 */
#ifndef TRAINSIM_EXEC_GPT_INFER_H
#define TRAINSIM_EXEC_GPT_INFER_H

#include <stddef.h>

#include "exec/core/gpt.h"
#include "sim/util/err.h"

typedef struct gpt_kv gpt_kv;

/* A cache for st's B sequences and a step of up to max_new tokens per
 * sequence (the prefill length; 1 for decode only). TS_ENOTSUP when st is
 * not the whole model; TS_EINVAL when max_new is not in [1, T]. */
int gpt_kv_create(gpt_stage *st, int max_new, gpt_kv **out, ts_err *err);
void gpt_kv_free(gpt_stage *st, gpt_kv *kv);
/* Forget the cached positions (a new batch of sequences). */
void gpt_kv_reset(gpt_kv *kv);
/* Positions cached so far (tokens per sequence). */
int gpt_kv_len(const gpt_kv *kv);
/* Bytes of the cache on this rank (its capacity: T positions). */
size_t gpt_kv_bytes(const gpt_kv *kv);
/* KV-cache bytes per token of the full model (all ranks):
 * 2 x layers x heads x head_dim x 4. */
size_t gpt_kv_bytes_per_token(const gpt_dims *d);

/* Forward n new tokens per sequence (1 <= n <= max_new, cached + n <= T):
 * tokens, a host array [B*n] (row b*n + i: sequence b, its position
 * cached + i), ids in [0, V). Appends their keys and values to the cache.
 * logits (host, [B, V]; may be NULL) receives the output layer's logits of
 * each sequence's last new token. Collective over COMM_TP. */
int gpt_infer_step(gpt_stage *st, gpt_kv *kv, const int *tokens, int n, float *logits, ts_err *err);

/* next[b] = the first index of the largest of logits[b*V .. b*V + V). */
void gpt_argmax(const float *logits, int B, int V, int *next);

/* The training forward's output probabilities (softmax of the logits,
 * [B*T, V], row b*T + t) of the micro-batch gpt_forward last ran on a, into
 * host memory probs; st must hold the head. For tests that compare a step's
 * logits with the full forward. */
int gpt_forward_probs(gpt_stage *st, gpt_acts *a, float *probs, ts_err *err);

/* Bytes op `name` reads and writes (fp32) on this rank in a step of n new
 * tokens per sequence after which kv_len positions are cached (weights,
 * activations, cache); 0 for a name the step does not run (collectives
 * included). What the decode calibration fits time against. */
double gpt_infer_op_bytes(const gpt_stage *st, const char *name, int n, int kv_len);

#endif
