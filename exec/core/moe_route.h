/* moe_route — the router of a mixture-of-experts layer as pure logic:
 * top-k selection, the routing weights, expert capacity with token dropping,
 * and the dispatch plan of expert parallelism.
 *
 * Conventions follow Megatron-core's defaults (moe_utils.topk_softmax_with_
 * capacity with --moe-router-pre-softmax off, --moe-token-drop-policy probs):
 *   - each token picks the k experts with the largest router logits (ties:
 *     the lower expert index);
 *   - its routing weights are the softmax over those k logits (so they sum
 *     to 1 per token);
 *   - with a capacity factor cf > 0 every expert accepts at most
 *     capacity = ceil(cf * N * k / E) (token, slot) assignments of the N
 *     tokens routed together; the assignments with the largest weights are
 *     kept (ties: lower token index, then lower slot), the others dropped
 *     (their weight counts as 0; the token keeps its other experts). cf <= 0
 *     is dropless ("none").
 *   - force_balance replaces the choice (not the weights' source) by the
 *     round-robin assignment expert (n*k + j) mod E for token n's slot j, so
 *     that every expert receives N*k/E assignments: the perfectly balanced
 *     routing --moe-router-force-load-balancing stands for. The weights are
 *     still the softmax of the token's logits at the chosen experts.
 * Expert parallelism splits E experts over ep ranks in contiguous blocks:
 * rank r owns experts [r*E/ep, (r+1)*E/ep).
 *
 * Memory: no function allocates; every array is caller-owned.
 */
#ifndef TRAINSIM_EXEC_MOE_ROUTE_H
#define TRAINSIM_EXEC_MOE_ROUTE_H

#include <stdbool.h>
#include <stddef.h>

#include "sim/util/err.h"

typedef struct {
    int num_experts;        /* E, --num-experts */
    int topk;               /* k, --moe-router-topk */
    double capacity_factor; /* --moe-expert-capacity-factor; <= 0: dropless */
    bool force_balance;     /* --moe-router-force-load-balancing */
} moe_route_cfg;

/* Check cfg for ep expert-parallel ranks: E >= 1, 1 <= k <= E, E divisible
 * by ep (Megatron's rule), ep >= 1. TS_EINVAL with what would be valid. */
int moe_route_check(const moe_route_cfg *cfg, int ep, ts_err *err);

/* Capacity per expert for n_tokens routed together; 0 when dropless. */
size_t moe_route_capacity(const moe_route_cfg *cfg, size_t n_tokens);

/* Route N tokens. logits: [N, E]. Outputs, all [N*k] (slot j of token n at
 * n*k + j): idx (expert), wts (routing weight, 0 for a dropped slot), keep
 * (1 kept, 0 dropped). counts: [E] kept assignments per expert. *dropped
 * (may be NULL): dropped assignments. order: scratch of N*k ints. The
 * composition of the four steps below, which a layer runs one by one
 * (the CPU backend's MoE ops are these functions; kernels/moe.cu has their
 * device twins). */
void moe_route(const moe_route_cfg *cfg, const float *logits, size_t N, int *idx, float *wts, int *keep, int *counts,
               size_t *dropped, int *order);

/* The choice and the weights: for each of N tokens (logits [N, E]) its k
 * experts into idx [N k] (largest logit first, ties to the lower expert;
 * force_balance: expert (n k + j) mod E) and the softmax over their k
 * logits into wts [N k]. k in [1, E]. */
void moe_route_topk(const float *logits, size_t N, int E, int k, bool force_balance, int *idx, float *wts);
/* Capacity over nk assignments: keep[a] = 1 when a ranks below cap among
 * its expert's assignments by (weight descending, a ascending), else 0;
 * wkept[a] = keep[a] ? wts[a] : 0 (wkept may alias wts). cap 0: dropless,
 * all kept. order: scratch of nk ints. */
void moe_route_keep(const int *idx, const float *wts, size_t nk, size_t cap, int *keep, float *wkept, int *order);
/* counts[e] = kept assignments of expert e, e < E. */
void moe_route_counts(const int *idx, const int *keep, size_t nk, int E, int *counts);
/* The dispatch order: the kept assignments by expert (experts < E), then
 * by a; pos[a] = a's place in it (-1 when dropped), send_slot[pos[a]] = a
 * (as many entries as kept assignments). */
void moe_route_send_order(const int *idx, const int *keep, size_t nk, int E, int *send_slot, int *pos);

/* Expert-parallel rank owning expert e (E divisible by ep). */
int moe_route_owner(int num_experts, int ep, int e);

#endif
