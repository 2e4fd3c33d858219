/* cp_attn — context-parallel causal attention (ring attention), fp32, with
 * the load-balanced split of cp_split.h.
 *
 * Each of cp ranks holds T/cp positions of every sequence (its front and back
 * chunks, cp_split.h) as rows of qkv [B*Tl, (NH + 2 NKV) hs] in kern.h's
 * layout (q of the NH query heads | k | v of the NKV key/value heads; NKV =
 * NH is multi-head attention, fewer is grouped-query attention, query head
 * h using key/value head h / (NH/NKV)), C = NH*hs, Tl = T/cp, row b*Tl + i
 * for local row i. With cp = 1 it is single-rank flash attention: the
 * executor's --attention-backend flash (exec/core/gpt_pass.c).
 * Forward: the rank's keys/values travel around the ring (cp - 1 hops to
 * the next rank); at each step the rank attends its queries to the block it
 * holds, skipping the chunk pairs cp_block() skips and masking the diagonal
 * ones, and merges the partial result with an online softmax (running max
 * and sum per query; out rescaled). It saves the log-sum-exp per query.
 * Backward (flash-attention's recurrence): D = dO . O per query; the keys/
 * values travel the ring again with their gradient accumulators dK, dV;
 * each rank adds its queries' contributions (P = exp(s - lse), dV += P dO,
 * dS = P (dO.v - D), dQ += dS k, dK += dS q, scaled); a last hop returns
 * every dK, dV to its owner. Same results as kern_attention_fwd/bwd on the
 * whole sequence, to fp32 rounding (the sums are re-associated).
 *
 * The exchange is a callback (sendrecv to the next rank, from the previous:
 * exec/cp_mpi.h over MPI); with cp = 1 it is never called.
 *
 * Memory: cp_attn_fwd/bwd allocate their accumulators (running max, sum
 * and output in double; D = dO . O), freed before returning, and the ring's
 * buffers unless the caller gives them; every argument array is
 * caller-owned.
 */
#ifndef TRAINSIM_EXEC_CP_ATTN_H
#define TRAINSIM_EXEC_CP_ATTN_H

#include <stdbool.h>
#include <stddef.h>

#include "sim/util/err.h"

typedef struct {
    int size, rank; /* cp, this rank */
    void *ud;
    /* send n floats to rank + 1, receive n floats from rank - 1 (mod cp) */
    int (*sendrecv)(void *ud, const float *send, float *recv, size_t n, ts_err *err);
} cp_ring;

/* Floats of the ring's travelling buffers (two of them: the block held and
 * the one arriving): B*Tl rows of k | v (forward, 4 NKV hs floats in all)
 * or k | v | dk | dv (backward, 8); 0 when cp = 1 (one rank reads q, k, v
 * in place and accumulates dk, dv into dqkv directly). */
size_t cp_attn_ring_floats(int B, int T, int cp, int NKV, int hs, bool bwd);

/* out [B*Tl, C]; lse [B, NH, Tl] saved for the backward. T is the full
 * sequence length (divisible by 2*cp when cp > 1); NKV divides NH.
 * ring_ws: cp_attn_ring_floats(.., false) floats of caller memory for the
 * ring's buffers (so the caller can count them), or NULL to allocate them
 * here. */
int cp_attn_fwd(const cp_ring *ring, float *out, float *lse, const float *qkv, int B, int T, int NH, int NKV, int hs,
                float *ring_ws, ts_err *err);
/* dqkv [B*Tl, (NH + 2 NKV) hs] += the gradient for dout [B*Tl, C]; needs
 * the forward's out and lse. Collective over the ring. ring_ws as above
 * with bwd = true. */
int cp_attn_bwd(const cp_ring *ring, float *dqkv, const float *dout, const float *out, const float *lse,
                const float *qkv, int B, int T, int NH, int NKV, int hs, float *ring_ws, ts_err *err);

#endif
