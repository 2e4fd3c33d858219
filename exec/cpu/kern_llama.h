/* kern_llama — the Llama-architecture kernels as plain C loops (fp32):
 * RMSNorm, the SwiGLU activation, rotary position embeddings (RoPE) and
 * grouped-query attention, with Megatron-LM's semantics.
 *
 * Same conventions as kern.h: row-major [N, C] activations (row n is batch
 * n / T, position n % T), backward kernels ACCUMULATE (+=) into their
 * gradient outputs unless stated otherwise, no kernel allocates, every
 * pointer is caller-owned. These are the CPU backend's kernels and the
 * reference a GPU version would be tested against.
 *
 * Grouped-query layout: a qkv row holds [q of NH heads | k of NKV heads |
 * v of NKV heads], each head hs wide; query head h attends with key/value
 * head h / (NH / NKV) (NKV divides NH; NKV = NH is multi-head attention,
 * exactly kern_attention_fwd's layout).
 */
#ifndef TRAINSIM_EXEC_KERN_LLAMA_H
#define TRAINSIM_EXEC_KERN_LLAMA_H

#include <stddef.h>

/* Megatron-LM's defaults: --norm-epsilon 1e-5, --rotary-base 10000. */
#define KERN_RMSNORM_EPS 1e-5f
#define KERN_ROPE_BASE   10000.0f

/* RMSNorm over the last dimension: out = x * rstd * w with
 * rstd = 1 / sqrt(mean(x^2) + eps) ([N], saved for the backward). */
void kern_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w, size_t N, int C);
/* dinp += d(out)/d(inp)^T dout. */
void kern_rmsnorm_bwd_input(float *dinp, const float *dout, const float *inp, const float *w, const float *rstd,
                            size_t N, int C);
/* dw += sum_n dout * x * rstd. */
void kern_rmsnorm_bwd_weight(float *dw, const float *dout, const float *inp, const float *rstd, size_t N, int C);

/* SwiGLU on the fused FC1 output: inp [N, 2F] holds [gate | up] per row
 * (Megatron's torch.chunk(x, 2, -1) order); out [N, F] = silu(gate) * up,
 * silu(a) = a * sigmoid(a). */
void kern_swiglu_fwd(float *out, const float *inp, size_t N, int F);
/* dinp [N, 2F] += gradient through the SwiGLU of dout [N, F]. */
void kern_swiglu_bwd(float *dinp, const float *inp, const float *dout, size_t N, int F);

/* Rotary position embedding, IN PLACE on the q and k heads of qkv ([N, (NH +
 * 2 NKV) hs], v untouched): Megatron's non-interleaved form (rotate_half,
 * --rotary-percent 1): for each head and i < hs/2, with position p = n % T
 * and angle p * base^(-2i/hs), (x_i, x_{i+hs/2}) is rotated by the angle.
 * hs must be even. */
void kern_rope_fwd(float *qkv, size_t N, int T, int NH, int NKV, int hs, float base);
/* The backward of kern_rope_fwd, IN PLACE on the gradient dqkv: the
 * inverse (transposed) rotation of the q and k parts (not an accumulation). */
void kern_rope_bwd(float *dqkv, size_t N, int T, int NH, int NKV, int hs, float base);
/* kern_rope_fwd / _bwd for N rows of one sequence at positions pos0, pos0 +
 * 1, ... (a run of a context-parallel rank's chunk, cp_split.h). */
void kern_rope_at_fwd(float *qkv, size_t N, int pos0, int NH, int NKV, int hs, float base);
void kern_rope_at_bwd(float *dqkv, size_t N, int pos0, int NH, int NKV, int hs, float base);

/* Causal grouped-query attention core (reference loops): qkv [B*T, (NH + 2
 * NKV) hs]; att [B, NH, T, T] = softmax(q k^T / sqrt(hs)) with the causal
 * mask (saved; masked entries 0); out [B*T, NH hs] = att v. */
void kern_attention_gqa_fwd(float *out, float *att, const float *qkv, int B, int T, int NH, int NKV, int hs);
/* dqkv += gradient through the core (k and v gradients summed over the
 * query heads of their group); datt [B, NH, T, T] is scratch (overwritten). */
void kern_attention_gqa_bwd(float *dqkv, float *datt, const float *dout, const float *qkv, const float *att, int B,
                            int T, int NH, int NKV, int hs);

/* QK norm (--qk-layernorm, Megatron-core's q_layernorm / k_layernorm): in
 * each row of qkv [N, (NH + 2 NKV) hs], the norm over hs of each of the NH
 * query heads (weight qw, bias qb) and of the NKV key heads (kw, kb), IN
 * PLACE (v untouched); LayerNorm as kern_layernorm_fwd, or RMSNorm as
 * kern_rmsnorm_fwd when mean is NULL (no bias: qb, kb unused). xin [N, (NH
 * + NKV) hs] gets q and k before the norm (the saved tensor); rstd and
 * mean (LayerNorm) [N, NH + NKV] are saved per head. */
void kern_qknorm_fwd(float *qkv, float *xin, float *mean, float *rstd, const float *qw, const float *qb,
                     const float *kw, const float *kb, size_t N, int NH, int NKV, int hs);
/* Weight gradients from the norm's output gradient (the q and k parts of
 * dqkv): dqw, dkw += sum over rows and heads of dout * xhat; dqb, dkb +=
 * sum of dout (LayerNorm; mean NULL: RMSNorm, no bias). Call before
 * kern_qknorm_bwd_input, which overwrites dqkv. */
void kern_qknorm_bwd_weight(float *dqw, float *dqb, float *dkw, float *dkb, const float *dqkv, const float *xin,
                            const float *mean, const float *rstd, size_t N, int NH, int NKV, int hs);
/* Input gradient, IN PLACE on the q and k parts of dqkv (not an
 * accumulation): the norm's output gradient becomes its input gradient. */
void kern_qknorm_bwd_input(float *dqkv, const float *xin, const float *mean, const float *rstd, const float *qw,
                           const float *kw, size_t N, int NH, int NKV, int hs);

#endif
