/* mtp — multi-token prediction (DeepSeek-V3 section 2.2; Megatron-core's
 * MultiTokenPredictionBlock, megatron/core/transformer/
 * multi_token_prediction.py, --mtp-num-layers D): D sequential depths on the
 * last pipeline stage, after the decoder. Depth k takes the hidden state of
 * depth k-1 (the decoder's output for k = 1) and the embedding of the tokens
 * shifted by k:
 *   embedding lookup (the shared word embedding: layer_embedding_ops),
 *   enorm (RMSNorm of the embedding), hnorm (RMSNorm of the hidden state),
 *   the concatenation [e; h] (2h wide), eh_proj: a 2h x h linear layer
 *   (column-parallel: h/t output columns per rank, the outputs all-gathered
 *   over the t ranks), one transformer layer of the model's layer type (the
 *   decoder's last layer's: MoE for DeepSeek-V3), the shared output layer
 *   and its cross-entropy loss (layer_output_ops; its final norm is the
 *   depth's final_layernorm).
 *
 * FLOPs (Megatron-LM's num_floating_point_operations, training.py: with
 * --mtp-num-layers D it counts D more layers of the last layer's type, D
 * more logit layers, and per depth 3 x 2 x (3h + 2h^2) per token for the
 * norms and eh_proj): here per depth and token 3 x (2 x 2h x h) for eh_proj,
 * the layer's and the logit's flops; the norms' 3h are element-wise work and
 * not counted (formulas.md's convention: GEMMs only).
 *
 * Parameters per depth: eh_proj 2h x h (split over t), enorm, hnorm and the
 * final norm (replicated), the layer's; with untied embeddings on more than
 * one pipeline stage the last stage holds a copy of the word embedding (V h /
 * t) for the lookup, once for all depths (Megatron-core builds the embedding
 * on the MTP stage).
 *
 * Not modelled: the MTP loss's scaling (no cost), the embedding copy's
 * gradient synchronisation with the first stage (once per iteration), MTP
 * inside interleaved or uneven split layouts other than "on the last stage".
 *
 * Everything here is plain values: no heap memory.
 */
#ifndef TRAINSIM_MTP_H
#define TRAINSIM_MTP_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/config/config.h"
#include "sim/model/layer.h"
#include "sim/util/err.h"

/* Ops of one MTP depth besides its transformer layer and output layer, one
 * micro-batch on one rank (T = b s tokens, E = T h / t elements with
 * sequence parallelism, else T h; dt bytes):
 *   F: the embedding's forward (layer_embedding_ops), mtp.enorm and
 *      mtp.hnorm (2 E dt each), mtp.concat (4 E dt), [SP: mtp.eh.ag,
 *      2 T h dt], mtp.eh_proj (T x h/t x 2h), [t > 1: mtp.eh.out.ag,
 *      T h dt];
 *   B: mtp.eh_proj.dgrad (T x 2h x h/t), [t > 1: its input gradient's
 *      all-reduce, SP reduce-scatter, 2 T h dt, overlapped with]
 *      mtp.eh_proj.wgrad (h/t x 2h x T), mtp.hnorm.bwd and mtp.enorm.bwd
 *      (4 E dt each), the embedding's backward; I: without the weight
 *      gradients; W: the weight gradients only (SP: the input re-gathered
 *      first) and the embedding's;
 *   R: none (the depth is not recomputed).
 * TS_EINVAL for a shape layer_shape_check refuses. */
int mtp_ops(const layer_shape *L, layer_pass pass, layer_ops *out, ts_err *err);

/* Bytes one MTP depth saves besides its layer and output layer: the
 * embedding's (layer_embedding_saved), the norms' inputs (E dt each, freed
 * by the input-gradient backward) and eh_proj's input (2 E dt, needed by its
 * weight gradient only). */
int64_t mtp_saved_bytes(const layer_shape *L, int64_t *free_i, int64_t *free_w);

/* Parameters of one MTP depth on one of t ranks besides its transformer
 * layer: eh_proj 2h h / t, three norms (h each with RMSNorm, 2h LayerNorm). */
int64_t mtp_depth_rank_params(const model_config *m, int t);

/* Model FLOPs of D MTP depths, one iteration of global_batch sequences
 * (3 x forward): per depth and sequence of s tokens 2 s (2h) h (eh_proj),
 * the forward of one layer of the type of layer num_layers - 1 (dense, or
 * MoE: the dense layer less its MLP plus s moe_block_fwd_flops_per_token;
 * MLA's attention with e->mla) and the logit layer 2 s h V; the attention
 * core in the full (causal = false) or causal convention of flops.h. */
double mtp_model_flops_per_iter(const model_config *m, const moe_config *e, int depths, int64_t global_batch,
                                bool causal);

#endif
