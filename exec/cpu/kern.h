/* kern — the GPT kernels as plain C loops (fp32), in the style of llm.c.
 *
 * These are the CPU backend's kernels and the reference ("CPU twin") every
 * CUDA kernel of kernels/ is tested against: same arguments, same layouts,
 * same results to fp32 rounding. GEMMs are not here: they go through CBLAS
 * (backend_cpu.c) or cuBLAS.
 *
 * Layouts (row-major): activations are [N, C] with N = B*T rows (row n is
 * batch n / T, position n % T); weights are [OC, C] and a linear layer is
 * out = inp @ W^T + b (llm.c's convention). qkv rows hold, for each token,
 * [q of every local head | k of every local head | v of every local head],
 * each head hs = C_local / NH values.
 *
 * Backward kernels ACCUMULATE (+=) into their gradient outputs, so that
 * residual branches and micro-batches sum; callers zero what must start at 0.
 * Memory: no kernel allocates; every pointer is caller-owned.
 */
#ifndef TRAINSIM_EXEC_KERN_H
#define TRAINSIM_EXEC_KERN_H

#include <stddef.h>

/* Token + learned position embedding for rows [row0, row0 + n) of the
 * [B*T] token array: out[i] = wte[tok[row0+i]] + wpe[(row0+i) % T].
 * tokens must be in [0, V); out is [n, C]. wpe NULL: no position table
 * (rotary embeddings), out[i] = wte[tok[row0+i]]. */
void kern_embed_fwd(float *out, const int *tokens, const float *wte, const float *wpe, size_t row0, size_t n, int T,
                    int C);
/* dwte[tok] += dout[i], dwpe[pos] += dout[i] for the same rows (dwpe may
 * be NULL when wpe was). */
void kern_embed_bwd(float *dwte, float *dwpe, const float *dout, const int *tokens, size_t row0, size_t n, int T,
                    int C);

/* LayerNorm over the last dimension (eps 1e-5): out = (x - mean) * rstd * w + b.
 * mean, rstd ([N]) are saved for the backward. */
void kern_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                        size_t N, int C);
/* Input-gradient part: dinp += d(out)/d(inp)^T dout. */
void kern_layernorm_bwd_input(float *dinp, const float *dout, const float *inp, const float *w, const float *mean,
                              const float *rstd, size_t N, int C);
/* Weight-gradient part: dw += sum_n dout * xhat, db += sum_n dout. */
void kern_layernorm_bwd_weight(float *dw, float *db, const float *dout, const float *inp, const float *mean,
                               const float *rstd, size_t N, int C);

/* Causal multi-head attention core (no projections): from qkv [B*T, 3*NH*hs]
 * computes att = softmax(q k^T / sqrt(hs)) with the causal mask ([B, NH, T, T],
 * saved; masked entries are 0) and out = att v ([B*T, NH*hs]). */
void kern_attention_fwd(float *out, float *att, const float *qkv, int B, int T, int NH, int hs);
/* dqkv += gradient through the attention core; datt is scratch [B, NH, T, T]
 * (overwritten). */
void kern_attention_bwd(float *dqkv, float *datt, const float *dout, const float *qkv, const float *att, int B, int T,
                        int NH, int hs);

/* Scaled causal softmax of one [T, T] score block, in place, row by row:
 * row t keeps columns 0..t (others set to 0). Used by kern_attention_fwd;
 * exposed for its own test. */
void kern_softmax_causal_fwd(float *x, int T, float scale);
/* dx = scale * y * (dy - sum(y * dy)) for the causal rows (overwrites dx;
 * dx may alias dy). */
void kern_softmax_causal_bwd(float *dx, const float *y, const float *dy, int T, float scale);

/* GELU, tanh approximation (GPT-2's). */
void kern_gelu_fwd(float *out, const float *inp, size_t n);
/* dinp += gelu'(inp) * dout. */
void kern_gelu_bwd(float *dinp, const float *inp, const float *dout, size_t n);

/* out[n, oc] += bias[oc]. */
void kern_bias_fwd(float *out, const float *bias, size_t N, int OC);
/* dbias[oc] += sum_n dout[n, oc]. */
void kern_bias_bwd(float *dbias, const float *dout, size_t N, int OC);
/* Bias + residual: out = a + b + bias (broadcast over N rows of OC). bias may
 * be NULL. out may alias a or b. */
void kern_bias_residual_fwd(float *out, const float *a, const float *b, const float *bias, size_t N, int OC);
/* y += x. */
void kern_add(float *y, const float *x, size_t n);

/* Softmax cross-entropy over V classes: probs = softmax(logits) ([N, V]),
 * losses[n] = -log probs[n, target[n]]. */
void kern_crossentropy_fwd(float *losses, float *probs, const float *logits, const int *targets, size_t N, int V);
/* dlogits += scale * (probs - onehot(target)); scale is d(loss)/d(losses[n])
 * (1 / tokens averaged over). */
void kern_crossentropy_bwd(float *dlogits, const float *probs, const int *targets, size_t N, int V, float scale);

/* AdamW step t (1-based) on n parameters, with bias correction:
 * m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 * p -= lr * (m_hat / (sqrt(v_hat) + eps) + wd * p). */
void kern_adam(float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2, float eps,
               float wd, int t);

/* ---- inference with a KV cache. A layer's cache holds K and V of the B
 * sequences in flight: kc, vc [B, NH, Tmax, hs] (per sequence and head, one
 * row per position), so one step appends n rows per (sequence, head). New
 * tokens are [B*n] (row b*n + i: sequence b, position pos0 + i). */

/* Embedding of n new tokens per sequence at positions pos0 .. pos0 + n - 1:
 * out[b*n + i] = wte[tokens[b*n + i]] + wpe[pos0 + i] ([B*n, C]). */
void kern_embed_pos_fwd(float *out, const int *tokens, const float *wte, const float *wpe, int B, int n, int pos0,
                        int C);
/* Copy k and v of the n new rows of qkv ([B*n, 3*NH*hs], kern_attention_fwd's
 * layout) into the cache at positions pos0 .. pos0 + n - 1 (pos0 + n <= Tmax). */
void kern_kv_append(float *kc, float *vc, const float *qkv, int B, int n, int pos0, int Tmax, int NH, int hs);
/* Causal attention of the n new queries of qkv over the cache (after their
 * append): query i of sequence b sees cache positions 0 .. pos0 + i;
 * out [B*n, NH*hs] = softmax(q k^T / sqrt(hs)) v, with the operations of
 * kern_attention_fwd in the same order (so a query's output matches the
 * full forward's to fp32 rounding). att: scratch [B, NH, n, Tmax]
 * (overwritten). */
void kern_attention_kv_fwd(float *out, float *att, const float *qkv, const float *kc, const float *vc, int B, int n,
                           int pos0, int Tmax, int NH, int hs);

#endif
