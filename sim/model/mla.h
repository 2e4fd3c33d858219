/* mla — multi-latent attention (DeepSeek-V2 section 2.1; Megatron-core's
 * MLASelfAttention, megatron/core/transformer/multi_latent_attention.py):
 * its parameters, FLOPs and the ops that replace the dense layer's QKV GEMM.
 *
 * Shapes (h hidden, a heads, q_l = --q-lora-rank, kv_l = --kv-lora-rank,
 * d_qk = --qk-head-dim, d_r = --qk-pos-emb-head-dim, d_v = --v-head-dim):
 *   q:   down h x q_l, RMSNorm(q_l), up q_l x a(d_qk + d_r);
 *        without query compression (q_l = 0) one h x a(d_qk + d_r) GEMM;
 *   kv:  down h x (kv_l + d_r) (the compressed latent and the shared rotary
 *        key), RMSNorm(kv_l), up kv_l x a(d_qk + d_v) (keys' non-rotary part
 *        and values);
 *   rope on the d_r parts of q and k (k's is shared by the heads and
 *        broadcast), q and k concatenated to heads of d_qk + d_r;
 *   attention core: scores with head size d_qk + d_r, values d_v (the
 *        layer's attention kernels: flash by default, layer.h);
 *   output: a d_v x h (the dense layer's projection, row-parallel).
 *
 * Tensor parallelism as Megatron-core's default layer spec
 * (gpt_layer_specs.py, MLA: linear_q_down_proj and linear_kv_down_proj are
 * the backend's plain linear layer, TELinear with parallel_mode
 * "duplicated"; linear_q_proj, linear_q_up_proj and linear_kv_up_proj
 * column-parallel; linear_proj row-parallel): the down-projections and the
 * q/kv norms are whole on every tensor-parallel rank and run on the rank's
 * tokens (T/t with sequence parallelism, all T without: redundant work,
 * as Megatron runs it); the up-projections split the heads over t; with
 * sequence parallelism their inputs (the normed latents q_l, kv_l and the
 * rotary key d_r) are all-gathered over the t ranks first (T x width
 * bytes), and their input gradients reduce-scattered back; without it the
 * input gradients of the up-projections are all-reduced (column-parallel).
 * Not modelled: the tensor-parallel all-reduce of the duplicated
 * down-projections' weight gradients under sequence parallelism (once per
 * iteration, outside the layer's ops, as the norms' gradients).
 *
 * Everything here is plain values: no heap memory.
 */
#ifndef TRAINSIM_MLA_H
#define TRAINSIM_MLA_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/config/config.h"

/* Parameters of one MLA attention block (all tensor-parallel ranks
 * together): the q path (q_l > 0: h q_l + q_l (norm) + q_l a (d_qk + d_r);
 * q_l = 0: h a (d_qk + d_r)), the kv path h (kv_l + d_r) + kv_l (norm) +
 * kv_l a (d_qk + d_v), the output a d_v h; biases on each linear layer
 * with m->add_bias_linear, norms of 2 parameters per element for
 * LayerNorm. */
int64_t mla_attn_params(const model_config *m, const moe_config *e);

/* The same held by one of t tensor-parallel ranks: the down-projections
 * and their norms whole (duplicated), the up-projections (weights and
 * biases) and the output weight / t (rounded down), the output bias whole. */
int64_t mla_attn_rank_params(const model_config *m, const moe_config *e, int t);

/* What MLA changes in one layer's parameters on one of t ranks:
 * mla_attn_rank_params less the dense attention flops_params_stage counts
 * for m (QKV and projection, their biases, the q/k norms of
 * --qk-layernorm: MLA has its own). 0 when !e->mla. */
int64_t mla_layer_params_delta(const model_config *m, const moe_config *e, int t);

/* Forward GEMM flops per token of MLA's linear layers (down, up and
 * output projections): 2 x (their weights' elements). */
double mla_proj_fwd_flops_per_token(const model_config *m, const moe_config *e);

/* Forward flops of the attention core per sequence of s = m->seq_length
 * tokens: QK^T over heads of d_qk + d_r and attention.V over d_v,
 * 2 s a (d_qk + d_r + d_v) x s (full, Megatron's convention of flops.h)
 * or x ceil(s/2) (causal). The flash kernel's backward (layer.h) runs
 * QK^T again, dQ and dK over heads of d_qk + d_r and dP, dV over d_v:
 * (3 (d_qk + d_r) + 2 d_v) / (d_qk + d_r + d_v) times the forward (2.6 for
 * DeepSeek-V3's 192 and 128, where equal head sizes give 2.5). */
double mla_core_fwd_flops_per_seq(const model_config *m, const moe_config *e, bool causal);

/* Model flops (flops.h's conventions: 3 x forward GEMMs) MLA adds to a
 * model whose count has the dense attention of m: 3 B l (MLA forward per
 * sequence - dense attention forward per sequence), the attention cores in
 * the full (causal = false) or causal convention. 0 when !e->mla. */
double mla_model_flops_delta(const model_config *m, const moe_config *e, int64_t global_batch, bool causal);

#endif
