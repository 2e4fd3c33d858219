/* cp — closed forms of context parallelism (Megatron-core's
 * --context-parallel-size with Transformer Engine's attention), the
 * figures layer.c's ops and the plan's memory follow and the tests check.
 *
 * Layout. The world is t x cp x d x p; ranks are ordered tensor-parallel
 * fastest, then context-parallel, then data-parallel, then pipeline
 * (Megatron-core's default order tp-cp-ep-dp-pp), so the cp ranks of one
 * group are t apart. Each rank holds two chunks of s/(2cp) tokens, chunk i
 * and chunk 2cp-1-i of the sequence, so that its causal attention work is
 * 1/cp of the total: every GEMM and element-wise op of the layer runs on
 * s/cp tokens, the activations are those of s/cp tokens, and dense
 * gradients are reduced (and the distributed optimizer sharded) over the
 * d x cp ranks that hold the same weights.
 *
 * Key/value exchange (per layer, per micro-batch, per tensor-parallel
 * rank; g query groups: K and V are 2 x (s/cp) x b x (g/t) x d elements):
 *   p2p        a ring of cp-1 steps, each passing one K,V block (backward:
 *              K,V and dK,dV); the first step exposed, the others under
 *              the attention blocks (layer.h's ops)
 *   all_gather K,V all-gathered before attention, exposed; the backward
 *              gathers again and reduce-scatters dK,dV
 *   a2a        Ulysses: all-to-alls of q,k,v before and of the output
 *              after, the heads split over cp (heads / t divisible by cp)
 *   a2a+p2p    a2a over the first hierarchical level, a ring over the
 *              second
 *
 * Everything here is plain arithmetic on a layer_shape (no heap memory).
 */
#ifndef TRAINSIM_CP_H
#define TRAINSIM_CP_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/model/layer.h"

/* Bytes of one K,V block a ring step passes (forward): 2 x T x g/t x d x
 * dtype, T = s b the rank's tokens (GQA-aware: g query groups). */
int64_t cp_kv_block_bytes(const layer_shape *L);

/* FLOPs of the flash kernel on one rank for one micro-batch and layer:
 * forward (bwd false) 2 x s_r x S x d x b x a/t, S = s_r x cp the full
 * sequence; backward 2.5 times that. Equals the non-CP causal flash FLOPs
 * of the full sequence divided by cp (S even). */
double cp_attn_flops(const layer_shape *L, bool bwd);

/* Bytes of the transient buffers the exchange needs while one layer's
 * pass runs (not saved for the backward): p2p two receive buffers of a
 * block (backward: of a block and its gradient); all_gather the gathered
 * K,V (backward also the full dK,dV before the reduce-scatter); a2a the
 * q,k,v and output in the head-split layout. 0 without CP. */
int64_t cp_transient_bytes(const layer_shape *L, bool bwd);

#endif
