/* flops — FLOPs per iteration and parameter counts.
 *
 * Two kinds of functions:
 *  - general counts for any shape (GQA, SwiGLU), from the same GEMM shapes
 *    the layer module lists (layer.h), so the sum of the simulated ops' flops
 *    equals them by construction (tested);
 *  - the published closed forms of formulas.md for GPT shapes (a = g,
 *    ffn = 4h, no SwiGLU), which the general counts reduce to (tested).
 *
 * FLOP conventions (formulas.md): matrix multiplications only, 2 flops per
 * multiply-add. "Model" FLOPs count forward + backward (backward = 2 x forward)
 * plus the logit layer; "hardware" FLOPs add what recomputation re-runs.
 * Two conventions for the attention scores (QK^T and attention.V):
 *  - Megatron's (formulas.md, Narayanan et al. 2021): the full s x s
 *    product, 4*s^2*a*d forward flops per sequence and layer, whatever the
 *    kernel; flops_model_per_iter;
 *  - causal (NeMo's performance tables, FlashAttention's papers): the lower
 *    half a causal kernel computes, 4*s*ceil(s/2)*a*d (2*s^2*a*d for even
 *    s); flops_model_per_iter_causal.
 * Hardware FLOPs are what the kernels execute: unfused attention runs the
 * full products (backward 2x forward); flash/fused (m->attention_backend)
 * runs the causal half forward and 2.5x that in the backward
 * (FlashAttention-2: five GEMMs of the forward's two, QK^T recomputed).
 */
#ifndef TRAINSIM_FLOPS_H
#define TRAINSIM_FLOPS_H

#include <stdint.h>

#include "sim/config/config.h"

/* ---- general counts (any model_config shape) ---------------------------- */

/* Forward GEMM flops of one transformer layer for one sequence of
 * m->seq_length tokens (whole layer, all TP ranks together). */
double flops_layer_fwd_per_seq(const model_config *m);

/* Forward GEMM flops of the attention core (QK^T and attention.V) per
 * sequence: what selective recomputation re-runs. */
double flops_attn_core_fwd_per_seq(const model_config *m);

/* The causal half of it: 4*s*ceil(s/2)*a*d (what flash attention runs). */
double flops_attn_core_fwd_causal_per_seq(const model_config *m);

/* Logit GEMM forward flops per sequence: 2*s*h*V. */
double flops_logit_fwd_per_seq(const model_config *m);

/* Model flops per iteration for global_batch sequences:
 * 3 * (l * layer_fwd + logit_fwd) * B. */
double flops_model_per_iter(const model_config *m, int64_t global_batch);

/* Model flops in the causal convention: the attention core counted by its
 * causal half (flops_model_per_iter less 3 * l * (full - causal) per
 * sequence). */
double flops_model_per_iter_causal(const model_config *m, int64_t global_batch);

/* Hardware flops per iteration with the attention kernels of
 * m->attention_backend and the selective modules (CONFIG_RC_* bits; 0 =
 * core_attn): per sequence and layer, unfused 3 x (GEMMs) plus the
 * recomputed forward; flash the non-attention GEMMs x 3 plus 3.5 x the causal
 * attention forward (1 forward + 2.5 backward), plus the recomputed forward
 * (its attention core at the causal half). Selective: core_attn adds the
 * attention core, mlp FC1 and FC2, layernorm no GEMM. */
double flops_hardware_per_iter_modules(const model_config *m, int64_t global_batch, config_recompute r,
                                       unsigned modules, int recompute_layers);

/* Hardware flops per iteration: model flops plus l * recomputed forward per
 * sequence (none: 0; selective: the attention core; full: the whole layer
 * forward; the logit layer is never recomputed). recompute_layers = how many
 * of the l layers are recomputed (full with --recompute-num-layers; pass
 * m->num_layers for all). */
double flops_hardware_per_iter(const model_config *m, int64_t global_batch, config_recompute r, int recompute_layers);
/* (With flash attention it is flops_hardware_per_iter_modules with the
 * default module: the same call.) */

/* ---- published closed forms (formulas.md), GPT shapes ------------------- */

/* 72*B*s*l*h^2*(1 + s/(6h) + V/(12*l*h)) */
double flops_closed_model(int64_t B, int64_t s, int64_t l, int64_t h, int64_t V);
/* 96*B*s*l*h^2*(1 + s/(6h) + V/(16*l*h)): what Megatron's Table 1 reports */
double flops_closed_full_recompute(int64_t B, int64_t s, int64_t l, int64_t h, int64_t V);
/* The selective-recompute hardware FLOPs as formulas.md prints them:
 * 72*B*s*l*h^2*(1 + s/(3h) + V/(12*l*h)). NOTE: re-running the attention
 * core (4*b*s^2*h per layer, the ops Korthikanti et al. recompute) gives
 * 72*B*s*l*h^2*(1 + 2s/(9h) + V/(12*l*h)) instead (flops_closed_selective_ops);
 * the simulator counts what it runs, i.e. the latter. */
double flops_closed_selective_published(int64_t B, int64_t s, int64_t l, int64_t h, int64_t V);
double flops_closed_selective_ops(int64_t B, int64_t s, int64_t l, int64_t h, int64_t V);
/* Parameters 12*l*h^2*(1 + 13/(12h) + (V + s)/(12*l*h)), i.e. layers, word and
 * position embeddings (no final LayerNorm, output tied to the embedding). */
double flops_closed_params(int64_t l, int64_t h, int64_t V, int64_t s);

/* ---- parameter counts --------------------------------------------------- */

typedef struct {
    int64_t per_layer;          /* one transformer layer (weights, biases unless disabled, 2 norms, the
                                   q/k norms with --qk-layernorm) */
    int64_t embedding;          /* word (V*h) + learned position (max_position_embeddings*h) embeddings */
    int64_t final_norm;         /* final norm: 2h (LayerNorm) or h (RMSNorm) */
    int64_t output;             /* untied output weight V*h; 0 when tied to the word embedding */
    int64_t total;              /* l*per_layer + embedding + final_norm + output */
    int64_t total_no_embedding; /* total - embedding - output */
} flops_params;

/* Whole-model parameter counts (all TP ranks together). For GPT shapes
 * (tied, biases, LayerNorm, learned positions of s rows, d = h/a)
 * total = flops_closed_params + 2h (the final LayerNorm). The attention
 * width is a*d (--kv-channels), which is h unless d is set otherwise. */
void flops_param_count(const model_config *m, flops_params *out);

/* Parameters of a layer's q and k norms (--qk-layernorm; 0 without): two
 * norms over the head size d, replicated on every tensor-parallel rank:
 * 2d (RMSNorm) or 4d (LayerNorm: weight and bias). In flops_param_count's
 * per_layer and flops_params_stage's layers. */
int64_t flops_qk_norm_params(const model_config *m);

/* Parameters held by one tensor-parallel rank of a pipeline stage with
 * num_layers layers; with_embedding adds the word (V*h/t) and learned
 * position (rows*h) embeddings (first stage; the last stage holds its tied
 * copy of the word embedding as well when p > 1: pass with_output),
 * with_output adds the final norm and the output weight V*h/t: the untied
 * one always, the tied copy only when !with_embedding.
 * Column-parallel weights and biases and row-parallel weights are split
 * over t; LayerNorms (the q/k norms too) and row-parallel biases are replicated. */
int64_t flops_params_stage(const model_config *m, int t, int num_layers, int with_embedding, int with_output);

#endif
