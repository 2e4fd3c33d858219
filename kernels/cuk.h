/* cuk — CUDA kernels of one GPT layer (the executor's CUDA backend), in the
 * shape of llm.c: flat C entry points, one job each, each tested against a CPU
 * twin (tests/gpu/).
 *
 * Storage and math: activations, weights and their gradients are bf16
 * (passed as uint16_t: the raw bf16 bits, since C has no bf16 type); all
 * reductions (means, variances, softmax sums, dot products) and all
 * optimizer state are fp32. Weight/bias gradients of norms and biases
 * accumulate (+=) into fp32 "main grads", as Megatron-LM's
 * gradient-accumulation fusion does, so micro-batches add up in fp32.
 *
 * Layouts are row-major. N = rows (tokens: micro-batch * sequence), C =
 * columns (hidden or FFN width). Attention tensors are [B, H, T, D]: batch,
 * heads, sequence, head dimension.
 *
 * Every entry point enqueues its work on `stream` and returns the launch
 * status (cudaSuccess, or the error cudaGetLastError() reported, which may
 * stem from earlier asynchronous work), or cudaErrorInvalidValue without
 * launching for arguments out of range (sizes <= 0, p outside [0, 1), a
 * head size the fused kernel cannot take); nothing is synchronised and
 * nothing prints. Pointers are device pointers owned by
 * the caller. Reductions are deterministic: fixed order, no float atomics,
 * so the same inputs give the same bits run after run.
 *
 * Randomness (dropout): a counter-based hash, cuk_rand_uniform(seed, i), the
 * same on host and device (see cuk_rand_bits below), so a CPU twin can
 * reproduce a GPU mask exactly.
 */
#ifndef TRAINSIM_CUK_H
#define TRAINSIM_CUK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __CUDACC__
#define CUK_HD __host__ __device__
#else
#define CUK_HD
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ conversions */

/* out[i] = bf16(in[i]) (round to nearest even), i < n. */
cudaError_t cuk_f32_to_bf16(uint16_t *out, const float *in, size_t n, cudaStream_t stream);
/* out[i] = float(in[i]), i < n. */
cudaError_t cuk_bf16_to_f32(float *out, const uint16_t *in, size_t n, cudaStream_t stream);
/* acc[i] += float(in[i]), i < n (a bf16 gradient added into an fp32 main grad). */
cudaError_t cuk_bf16_accum_f32(float *acc, const uint16_t *in, size_t n, cudaStream_t stream);
/* x[i] = 0 for fp32 x, i < n (cudaMemsetAsync; here for symmetry). */
cudaError_t cuk_zero_f32(float *x, size_t n, cudaStream_t stream);

/* 32 random bits for element i of stream `seed` (splitmix64 of seed and i).
 * Host and device compute the same value. */
static inline CUK_HD uint32_t cuk_rand_bits(uint64_t seed, uint64_t i)
{
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + i + 0x632BE59BD9B4E019ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (uint32_t)(z >> 32);
}

/* x[i] = bf16(scale * (2 u - 1)), u = cuk_rand_uniform(seed, i): weights and
 * inputs for benchmarks. */
cudaError_t cuk_fill_uniform_bf16(uint16_t *x, size_t n, uint64_t seed, float scale, cudaStream_t stream);
/* An empty kernel (one block of 32 threads): the launch overhead. */
cudaError_t cuk_noop(cudaStream_t stream);

/* ------------------------------------------------------------ layer norm */

/* Layer norm over the last dimension, fp32 statistics.
 * out[n,c] = (inp[n,c] - mean[n]) * rstd[n] * weight[c] + bias[c];
 * mean[n], rstd[n] (fp32, N each) are saved for the backward pass. */
cudaError_t cuk_layernorm_fwd(uint16_t *out, float *mean, float *rstd, const uint16_t *inp, const uint16_t *weight,
                              const uint16_t *bias, int N, int C, float eps, cudaStream_t stream);

/* Scratch bytes cuk_layernorm_bwd and cuk_bias_grad need for N x C. */
size_t cuk_colsum_scratch_bytes(int N, int C);

/* Layer-norm backward. dinp[n,c] = d(loss)/d(inp) written (overwritten, bf16);
 * dweight[c], dbias[c] += (fp32 main grads, accumulated; dbias may be NULL);
 * dinp may alias dout. `scratch` holds
 * cuk_colsum_scratch_bytes(N, C) bytes of device memory. */
cudaError_t cuk_layernorm_bwd(uint16_t *dinp, float *dweight, float *dbias, const uint16_t *dout, const uint16_t *inp,
                              const uint16_t *weight, const float *mean, const float *rstd, int N, int C, void *scratch,
                              cudaStream_t stream);

/* ------------------------------------------------------------ bias, residual, dropout, GELU */

/* dbias[c] += sum_n dout[n,c] (fp32, deterministic two-pass column sum). */
cudaError_t cuk_bias_grad(float *dbias, const uint16_t *dout, int N, int C, void *scratch, cudaStream_t stream);

/* Megatron's bias-dropout-add: out = residual + dropout(x + bias, p).
 * bias may be NULL (no bias), residual may be NULL (no residual), p in [0,1).
 * When p > 0, mask[n*C+c] (uint8, 1 = kept) is written from
 * cuk_rand_uniform(seed, n*C+c) >= p and kept values are scaled by 1/(1-p);
 * mask may be NULL when p == 0. */
cudaError_t cuk_bias_dropout_add_fwd(uint16_t *out, uint8_t *mask, const uint16_t *x, const uint16_t *bias,
                                     const uint16_t *residual, float p, uint64_t seed, int N, int C,
                                     cudaStream_t stream);

/* Dropout backward: dinp[i] = mask[i] ? dout[i] / (1-p) : 0, i < n
 * (dinp may alias dout). mask NULL means p == 0: a copy. */
cudaError_t cuk_dropout_bwd(uint16_t *dinp, const uint16_t *dout, const uint8_t *mask, float p, size_t n,
                            cudaStream_t stream);

/* GELU (tanh approximation, as GPT-2/Megatron): out = gelu(inp + bias);
 * bias [C] may be NULL. */
cudaError_t cuk_bias_gelu_fwd(uint16_t *out, const uint16_t *inp, const uint16_t *bias, int N, int C,
                              cudaStream_t stream);
/* GELU backward: dinp = dout * gelu'(inp + bias) (dinp may alias dout);
 * bias may be NULL. */
cudaError_t cuk_bias_gelu_bwd(uint16_t *dinp, const uint16_t *dout, const uint16_t *inp, const uint16_t *bias, int N,
                              int C, cudaStream_t stream);

/* ------------------------------------------------------------ softmax */

/* Megatron's scaled upper-triangular masked softmax over rows of T x T
 * score matrices: for each of `batch` matrices and row i,
 * out[i,j] = softmax_j(scale * inp[i,j]) over j <= i, 0 for j > i.
 * inp and out are [batch, T, T] (out may alias inp). */
cudaError_t cuk_causal_softmax_fwd(uint16_t *out, const uint16_t *inp, float scale, int batch, int T,
                                   cudaStream_t stream);
/* Backward: dinp[i,j] = scale * y[i,j] * (dout[i,j] - sum_k dout[i,k] y[i,k])
 * with y the forward output; 0 above the diagonal (dinp may alias dout). */
cudaError_t cuk_causal_softmax_bwd(uint16_t *dinp, const uint16_t *dout, const uint16_t *y, float scale, int batch,
                                   int T, cudaStream_t stream);

/* ------------------------------------------------------------ attention layout */

/* Split a fused QKV projection [B, T, 3, H, D] into q, k, v, each [B, H, T, D]. */
cudaError_t cuk_qkv_split(uint16_t *q, uint16_t *k, uint16_t *v, const uint16_t *qkv, int B, int T, int H, int D,
                          cudaStream_t stream);
/* Inverse (backward of the split): dqkv [B, T, 3, H, D] from dq, dk, dv. */
cudaError_t cuk_qkv_merge(uint16_t *dqkv, const uint16_t *dq, const uint16_t *dk, const uint16_t *dv, int B, int T,
                          int H, int D, cudaStream_t stream);
/* [B, H, T, D] -> [B, T, H, D] (heads back into the hidden dimension). */
cudaError_t cuk_bhtd_to_bthd(uint16_t *out, const uint16_t *inp, int B, int H, int T, int D, cudaStream_t stream);
/* [B, T, H, D] -> [B, H, T, D] (backward of the above). */
cudaError_t cuk_bthd_to_bhtd(uint16_t *out, const uint16_t *inp, int B, int H, int T, int D, cudaStream_t stream);

/* ------------------------------------------------------------ fused attention */

/* Causal attention in one kernel (flash-attention style: K/V tiles in
 * shared memory, online softmax, no T x T matrix in memory).
 * q, k, v, out: [B, H, T, D] bf16; lse [B, H, T] fp32 (log-sum-exp of the
 * scaled scores of each query row, saved for the backward pass).
 * out = softmax(scale * q k^T, causal) v. D must be a multiple of 32 and
 * <= 128. No attention dropout (Megatron's attention dropout is on the
 * unfused path only). */
cudaError_t cuk_flash_attn_fwd(uint16_t *out, float *lse, const uint16_t *q, const uint16_t *k, const uint16_t *v,
                               int B, int H, int T, int D, float scale, cudaStream_t stream);

/* Scratch bytes cuk_flash_attn_bwd needs (fp32 row terms, B*H*T floats). */
size_t cuk_flash_attn_scratch_bytes(int B, int H, int T);

/* Backward of cuk_flash_attn_fwd, recomputing the probabilities from lse:
 * dq, dk, dv [B, H, T, D] written (overwritten). */
cudaError_t cuk_flash_attn_bwd(uint16_t *dq, uint16_t *dk, uint16_t *dv, const uint16_t *dout, const uint16_t *out,
                               const float *lse, const uint16_t *q, const uint16_t *k, const uint16_t *v, int B, int H,
                               int T, int D, float scale, void *scratch, cudaStream_t stream);

/* ------------------------------------------------------------ embedding */

/* out[n,c] = wte[tok[n] - vocab_start, c] + wpe[n % T, c] for tokens of this
 * vocabulary shard (vocab_start <= tok < vocab_start + V), 0 + wpe otherwise
 * (a vocabulary-parallel embedding: the tensor-parallel all-reduce sums the
 * shards; wpe is added by shard 0 only, pass wpe = NULL on the others).
 * N = B*T tokens, tok int32 [N], wte [V, C], wpe [T, C]. */
cudaError_t cuk_embedding_fwd(uint16_t *out, const int32_t *tok, const uint16_t *wte, const uint16_t *wpe, int N, int T,
                              int C, int vocab_start, int V, cudaStream_t stream);
/* dwte[tok - vocab_start, c] += sum of dout rows with that token (fp32, in
 * token order: deterministic); dwpe[t, c] += sum over the batch (fp32).
 * dwpe may be NULL. */
cudaError_t cuk_embedding_bwd(float *dwte, float *dwpe, const uint16_t *dout, const int32_t *tok, int N, int T, int C,
                              int vocab_start, int V, cudaStream_t stream);

/* ------------------------------------------------------------ cross-entropy */

/* Softmax cross-entropy over a full vocabulary, fp32 math:
 * losses[n] = logsumexp(logits[n,:]) - logits[n, targets[n]],
 * lse[n] = logsumexp(logits[n,:]) saved for the backward pass.
 * logits [N, V] bf16, targets int32 [N] in [0, V). */
cudaError_t cuk_crossentropy_fwd(float *losses, float *lse, const uint16_t *logits, const int32_t *targets, int N,
                                 int V, cudaStream_t stream);
/* dlogits[n,v] = dloss * (softmax(logits[n,:])[v] - (v == targets[n])),
 * dloss the gradient of each row's loss (1/N for a mean loss). dlogits may
 * alias logits (in place, as llm.c does). */
cudaError_t cuk_crossentropy_bwd(uint16_t *dlogits, const uint16_t *logits, const float *lse, const int32_t *targets,
                                 float dloss, int N, int V, cudaStream_t stream);

/* ------------------------------------------------------------ optimizer */

/* AdamW with fp32 master weights (mixed precision): for i < n,
 *   g = grad[i] * grad_scale;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
 *   master -= lr * (m/(1-b1^step) / (sqrt(v/(1-b2^step)) + eps) + wd * master);
 *   param[i] = bf16(master)  (param may be NULL: no bf16 copy).
 * step counts from 1. */
cudaError_t cuk_adamw(uint16_t *param, float *master, const float *grad, float *m, float *v, size_t n, float lr,
                      float beta1, float beta2, float eps, float weight_decay, int step, float grad_scale,
                      cudaStream_t stream);

/* ------------------------------------------------------------ fp32 storage
 * The same kernels on fp32 storage with the exact arguments and semantics of
 * the CPU executor's exec/cpu/kern.h (their CPU twins): backward kernels
 * ACCUMULATE (+=) into their gradient outputs. The CUDA backend of the
 * executor (exec/cuda/backend_cuda.c) runs the model through these, with
 * bf16 tensor-core GEMMs on fp32 storage. `scratch` arguments take
 * cuk_colsum_scratch_bytes(N, C) bytes. */

#define CUK_F32_LN_EPS 1e-5f /* kern.h's LayerNorm epsilon */

cudaError_t cuk_f32_embed_fwd(float *out, const int *tokens, const float *wte, const float *wpe, size_t row0, size_t n,
                              int T, int C, cudaStream_t stream);
cudaError_t cuk_f32_embed_bwd(float *dwte, float *dwpe, const float *dout, const int *tokens, size_t row0, size_t n,
                              int T, int C, cudaStream_t stream);
cudaError_t cuk_f32_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                  const float *b, size_t N, int C, cudaStream_t stream);
cudaError_t cuk_f32_layernorm_bwd_input(float *dinp, const float *dout, const float *inp, const float *w,
                                        const float *mean, const float *rstd, size_t N, int C, cudaStream_t stream);
cudaError_t cuk_f32_layernorm_bwd_weight(float *dw, float *db, const float *dout, const float *inp, const float *mean,
                                         const float *rstd, size_t N, int C, void *scratch, cudaStream_t stream);
cudaError_t cuk_f32_gelu_fwd(float *out, const float *inp, size_t n, cudaStream_t stream);
cudaError_t cuk_f32_gelu_bwd(float *dinp, const float *inp, const float *dout, size_t n, cudaStream_t stream);
cudaError_t cuk_f32_bias_fwd(float *out, const float *bias, size_t N, int OC, cudaStream_t stream);
cudaError_t cuk_f32_bias_bwd(float *dbias, const float *dout, size_t N, int OC, void *scratch, cudaStream_t stream);
cudaError_t cuk_f32_bias_residual_fwd(float *out, const float *a, const float *b, const float *bias, size_t N, int OC,
                                      cudaStream_t stream);
cudaError_t cuk_f32_add(float *y, const float *x, size_t n, cudaStream_t stream);
/* kern_softmax_causal_fwd/bwd over `batch` [T, T] blocks (in place for fwd;
 * bwd overwrites dx from y and dy, dx may alias dy). */
cudaError_t cuk_f32_softmax_causal_fwd(float *x, int batch, int T, float scale, cudaStream_t stream);
cudaError_t cuk_f32_softmax_causal_bwd(float *dx, const float *y, const float *dy, int batch, int T, float scale,
                                       cudaStream_t stream);
/* qkv [B*T, 3*NH*hs] <-> q, k, v [B, NH, T, hs]; merge ACCUMULATES into dqkv. */
cudaError_t cuk_f32_qkv_split(float *q, float *k, float *v, const float *qkv, int B, int T, int NH, int hs,
                              cudaStream_t stream);
cudaError_t cuk_f32_qkv_merge_acc(float *dqkv, const float *dq, const float *dk, const float *dv, int B, int T, int NH,
                                  int hs, cudaStream_t stream);
/* [B, NH, T, hs] <-> [B, T, NH, hs] (overwrite). */
cudaError_t cuk_f32_bhtd_to_bthd(float *out, const float *inp, int B, int NH, int T, int hs, cudaStream_t stream);
cudaError_t cuk_f32_bthd_to_bhtd(float *out, const float *inp, int B, int NH, int T, int hs, cudaStream_t stream);
cudaError_t cuk_f32_crossentropy_fwd(float *losses, float *probs, const float *logits, const int *targets, size_t N,
                                     int V, cudaStream_t stream);
cudaError_t cuk_f32_crossentropy_bwd(float *dlogits, const float *probs, const int *targets, size_t N, int V,
                                     float scale, cudaStream_t stream);
/* Inference with a KV cache (kvcache.cu): kern_embed_pos_fwd, kern_kv_append
 * and kern_attention_kv_fwd; caches kc, vc [B, NH, Tmax, hs]; att scratch
 * [B, NH, n, Tmax]. */
cudaError_t cuk_f32_embed_pos_fwd(float *out, const int *tokens, const float *wte, const float *wpe, int B, int n,
                                  int pos0, int C, cudaStream_t stream);
cudaError_t cuk_f32_kv_append(float *kc, float *vc, const float *qkv, int B, int n, int pos0, int Tmax, int NH, int hs,
                              cudaStream_t stream);
cudaError_t cuk_f32_attention_kv_fwd(float *out, float *att, const float *qkv, const float *kc, const float *vc, int B,
                                     int n, int pos0, int Tmax, int NH, int hs, cudaStream_t stream);
/* kern_adam is cuk_adamw(NULL, p, g, m, v, n, lr, b1, b2, eps, wd, t, 1.0f, stream). */

/* ------------------------------------------------------------ fp32 Llama kernels (llama.cu)
 * The twins of exec/cpu/kern_llama.h, same arguments (backward kernels
 * ACCUMULATE unless stated, rope works in place). */

#define CUK_F32_RMSNORM_EPS 1e-5f /* kern_llama.h's KERN_RMSNORM_EPS (Megatron's --norm-epsilon) */

cudaError_t cuk_f32_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w, size_t N, int C,
                                cudaStream_t stream);
cudaError_t cuk_f32_rmsnorm_bwd_input(float *dinp, const float *dout, const float *inp, const float *w,
                                      const float *rstd, size_t N, int C, cudaStream_t stream);
cudaError_t cuk_f32_rmsnorm_bwd_weight(float *dw, const float *dout, const float *inp, const float *rstd, size_t N,
                                       int C, cudaStream_t stream);
/* QK norm (--qk-layernorm): kern_qknorm_fwd, _bwd_weight and _bwd_input,
 * same arguments and results (mean NULL: RMSNorm, biases unused; otherwise
 * LayerNorm, biases required). The forward normalizes the q and k heads of
 * qkv [N, (NH + 2 NKV) hs] in place, saving them to xin [N, (NH + NKV) hs]
 * and mean, rstd [N, NH + NKV]; bwd_weight ACCUMULATES into dqw, dkw (and
 * dqb, dkb), each element's terms added in the twin's order (rows, then
 * heads); bwd_input OVERWRITES the q and k parts of dqkv with the input
 * gradient (call it after bwd_weight). Each (row, head) sums over hs
 * sequentially, as the twin does; bwd_weight runs 2 hs (RMSNorm) or 4 hs
 * (LayerNorm) threads of N (NH or NKV) terms each: exact, not fast. NH or
 * NKV < 1, hs < 1, or LayerNorm without biases: cudaErrorInvalidValue,
 * nothing launched. */
cudaError_t cuk_f32_qknorm_fwd(float *qkv, float *xin, float *mean, float *rstd, const float *qw, const float *qb,
                               const float *kw, const float *kb, size_t N, int NH, int NKV, int hs,
                               cudaStream_t stream);
cudaError_t cuk_f32_qknorm_bwd_weight(float *dqw, float *dqb, float *dkw, float *dkb, const float *dqkv,
                                      const float *xin, const float *mean, const float *rstd, size_t N, int NH, int NKV,
                                      int hs, cudaStream_t stream);
cudaError_t cuk_f32_qknorm_bwd_input(float *dqkv, const float *xin, const float *mean, const float *rstd,
                                     const float *qw, const float *kw, size_t N, int NH, int NKV, int hs,
                                     cudaStream_t stream);
cudaError_t cuk_f32_swiglu_fwd(float *out, const float *inp, size_t N, int F, cudaStream_t stream);
cudaError_t cuk_f32_swiglu_bwd(float *dinp, const float *inp, const float *dout, size_t N, int F, cudaStream_t stream);
/* kern_rope_fwd (T > 0: position n % T; dir = 1), kern_rope_bwd (dir = -1)
 * and kern_rope_at_* (T = 0: position pos0 + n), in place on qkv's q and k
 * heads; hs even. */
cudaError_t cuk_f32_rope(float *qkv, size_t N, int T, int pos0, int NH, int NKV, int hs, float base, float dir,
                         cudaStream_t stream);
/* Grouped-query layout: qkv [B*T, (NH + 2 NKV) hs] -> q, k, v [B, NH, T,
 * hs], query head h's k, v being key/value head h / (NH/NKV)'s (copied per
 * query head); merge ACCUMULATES dq and, per key/value head, the sum of its
 * query heads' dk, dv into dqkv. */
cudaError_t cuk_f32_qkv_split_gqa(float *q, float *k, float *v, const float *qkv, int B, int T, int NH, int NKV, int hs,
                                  cudaStream_t stream);
cudaError_t cuk_f32_qkv_merge_gqa_acc(float *dqkv, const float *dq, const float *dk, const float *dv, int B, int T,
                                      int NH, int NKV, int hs, cudaStream_t stream);

/* ------------------------------------------------------------ MoE routing and dispatch (moe.cu)
 * The device twins of exec/core/moe_route.c and of exec/core/moe.c's host
 * loops, fp32. Assignment (token t, slot j) is a = t k + j; idx, wts, keep
 * are [N k], logits [N, E]. Each kernel computes its float outputs in the
 * twin's order (one thread per token, assignment, row or element); the
 * integer ones (capacity, counts, send order) are the twin's exactly.
 * Capacity and send order sort the nk = N k assignments in scratch (a merge
 * sort, O(nk log nk) work in ceil(log2(nk / 16)) + 2 launches); counts are
 * a histogram of integer atomics (O(nk + E)). */

/* moe_route's choice and weights: the k largest logits (ties: lower
 * expert), or with force_balance expert (t k + j) mod E; wts = softmax over
 * the k chosen logits. k in [1, E]. */
cudaError_t cuk_f32_moe_topk(int *idx, float *wts, const float *logits, size_t N, int E, int k, bool force_balance,
                             cudaStream_t stream);
/* Device scratch of cuk_f32_moe_capacity and cuk_moe_send_order for nk
 * assignments: 2 nk ints. */
size_t cuk_moe_scratch_bytes(size_t nk);
/* Capacity: keep[a] = 1 when a ranks below cap among its expert's
 * assignments by (wts descending, a ascending), else 0; wkept[a] = keep[a]
 * ? wts[a] : 0 (moe_route's dropped weights). cap 0: dropless (all kept).
 * wkept may alias wts. scratch: cuk_moe_scratch_bytes(nk), apart from the
 * other arrays (may be NULL when cap is 0 or >= nk: nothing to sort);
 * NULL otherwise: cudaErrorInvalidValue. wts not NaN (the twin's sort). */
cudaError_t cuk_f32_moe_capacity(int *keep, float *wkept, const int *idx, const float *wts, size_t nk, size_t cap,
                                 void *scratch, cudaStream_t stream);
/* counts[e] = kept assignments of expert e, e < E (every idx < E). */
cudaError_t cuk_moe_counts(int *counts, const int *idx, const int *keep, size_t nk, int E, cudaStream_t stream);
/* The send order (moe.c's plan): kept assignments by expert, then by a;
 * pos[a] = a's place in it (-1 dropped), send_slot[pos[a]] = a (as many
 * entries as kept assignments). scratch: cuk_moe_scratch_bytes(nk), apart
 * from the other arrays (NULL: cudaErrorInvalidValue). */
cudaError_t cuk_moe_send_order(int *send_slot, int *pos, const int *idx, const int *keep, size_t nk, void *scratch,
                               cudaStream_t stream);
/* Row permutes of width C: gather dst[r] = src[rows[r] / div] (div k turns
 * send slots into tokens), scatter dst[rows[r]] = src[r] (rows distinct). */
cudaError_t cuk_f32_moe_gather(float *dst, const float *src, const int *rows, size_t nrows, int div, int C,
                               cudaStream_t stream);
cudaError_t cuk_f32_moe_scatter(float *dst, const float *src, const int *rows, size_t nrows, int C,
                                cudaStream_t stream);
/* Combine: out[t] = sum of wts[a] y[pos[a]] over t's kept assignments in
 * ascending expert order (moe.c's order); wts NULL: weight 1 (the backward's
 * dx from the returned row gradients). out [N, C] overwritten; the experts
 * of one token distinct. */
cudaError_t cuk_f32_moe_combine(float *out, const float *y, const float *wts, const int *idx, const int *pos, size_t N,
                                int k, int C, cudaStream_t stream);
/* Combine backward per sent row p (a = send_slot[p], t = a / k): g[a] =
 * dout[t] . y[p], dy[p] = wts[a] dout[t]. g of dropped a not written. */
cudaError_t cuk_f32_moe_combine_bwd(float *dy, float *g, const float *dout, const float *y, const float *wts,
                                    const int *send_slot, size_t nsend, int k, int C, cudaStream_t stream);
/* Router backward of w_j = keep_j softmax_j(chosen logits), in double:
 * dlog [N, E] overwritten (0 off the chosen experts); the auxiliary loss's
 * gradient is not included. */
cudaError_t cuk_f32_moe_router_bwd(float *dlog, const float *logits, const int *idx, const int *keep, const float *g,
                                   size_t N, int E, int k, cudaStream_t stream);

/* ------------------------------------------------------------ fp32 flash attention (flash.cu)
 * exec/core/cp_attn.c's recurrence, one ring step per call: the caller
 * (the CUDA backend) runs the ring. Tensors in cp_attn.h's layout: qkv
 * [B*Tl, (NH + 2 NKV) hs], Tl = T/cp local rows; the key block kb holds
 * rows of stride ks (floats) with k of the NKV heads at 0 and v at NKV hs:
 * qkv + NH hs with ks = (NH + 2 NKV) hs on one rank, else the ring's
 * buffer (ks = 2 or 4 NKV hs). `scratch` is device memory of the
 * *_scratch_bytes size, kept between the calls of one pass. */
typedef struct {
    int B, T;     /* batch, full sequence length (divisible by 2 cp when cp > 1) */
    int cp, rank; /* ring size, this rank */
    int src;      /* the rank whose keys/values kb holds (cp_ring_src) */
    int NH, NKV, hs;
} cuk_flash_dims;

size_t cuk_f32_flash_fwd_scratch_bytes(const cuk_flash_dims *d);
size_t cuk_f32_flash_bwd_scratch_bytes(const cuk_flash_dims *d);
/* Forward: init (running max -inf, sums 0), one step per block, finish
 * (out [B*Tl, NH hs] = acc / sum, lse [B, NH, Tl] = max + log sum). */
cudaError_t cuk_f32_flash_fwd_init(void *scratch, const cuk_flash_dims *d, cudaStream_t stream);
cudaError_t cuk_f32_flash_fwd_step(void *scratch, const float *qkv, const float *kb, size_t ks, const cuk_flash_dims *d,
                                   cudaStream_t stream);
cudaError_t cuk_f32_flash_fwd_finish(float *out, float *lse, const void *scratch, const cuk_flash_dims *d,
                                     cudaStream_t stream);
/* Ring buffer rows from qkv's k | v ([rows, 2 KV]; bwd: [rows, 4 KV] with
 * dk | dv zeroed), and the homecoming dk | dv added into dqkv. */
cudaError_t cuk_f32_flash_pack(float *buf, const float *qkv, size_t rows, int NH, int NKV, int hs, bool bwd,
                               cudaStream_t stream);
cudaError_t cuk_f32_flash_unpack_grad(float *dqkv, const float *buf, size_t rows, int NH, int NKV, int hs,
                                      cudaStream_t stream);
/* Backward: D = dO . O per query row and head (into scratch), then per
 * block: dq (in dqkv) += and dk, dv (in db: rows of stride ks, dk at the k
 * offsets, dv at + NKV hs) += the block's contributions. */
cudaError_t cuk_f32_flash_bwd_D(void *scratch, const float *dout, const float *out, const cuk_flash_dims *d,
                                cudaStream_t stream);
cudaError_t cuk_f32_flash_bwd_step(float *dqkv, float *db, const void *scratch, const float *dout, const float *lse,
                                   const float *qkv, const float *kb, size_t ks, const cuk_flash_dims *d,
                                   cudaStream_t stream);

/* Uniform in [0, 1) from cuk_rand_bits (24 bits of mantissa). */
static inline CUK_HD float cuk_rand_uniform(uint64_t seed, uint64_t i)
{
    return (float)(cuk_rand_bits(seed, i) >> 8) * (1.0f / 16777216.0f);
}

#ifdef __cplusplus
}
#endif

#endif
