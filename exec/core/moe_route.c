/* moe_route — top-k, routing weights, capacity and token dropping. */
#include "exec/core/moe_route.h"

#include <math.h>
#include <stdlib.h>

int moe_route_check(const moe_route_cfg *cfg, int ep, ts_err *err)
{
    if (cfg->num_experts < 1)
        return err_set(err, TS_EINVAL, "--num-experts %d: must be >= 1", cfg->num_experts);
    if (cfg->topk < 1 || cfg->topk > cfg->num_experts)
        return err_set(err, TS_EINVAL, "--moe-router-topk %d: must be in [1, --num-experts = %d]", cfg->topk,
                       cfg->num_experts);
    if (ep < 1 || cfg->num_experts % ep)
        return err_set(err, TS_EINVAL,
                       "--expert-model-parallel-size %d: --num-experts %d must be divisible by it (valid: a "
                       "divisor of %d)",
                       ep, cfg->num_experts, cfg->num_experts);
    if (isnan(cfg->capacity_factor))
        return err_set(err, TS_EINVAL, "--moe-expert-capacity-factor: not a number (valid: > 0, or none)");
    return TS_OK;
}

size_t moe_route_capacity(const moe_route_cfg *cfg, size_t n_tokens)
{
    if (!(cfg->capacity_factor > 0.0))
        return 0;
    double c = ceil(cfg->capacity_factor * (double)n_tokens * (double)cfg->topk / (double)cfg->num_experts);
    return (size_t)c;
}

int moe_route_owner(int num_experts, int ep, int e)
{
    return e / (num_experts / ep);
}

/* Choose the k experts of one token (row of E logits). */
static void choose(const moe_route_cfg *cfg, const float *lg, size_t n, int *idx)
{
    int E = cfg->num_experts, k = cfg->topk;
    if (cfg->force_balance) {
        for (int j = 0; j < k; j++)
            idx[j] = (int)((n * (size_t)k + (size_t)j) % (size_t)E);
        return;
    }
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            bool taken = false;
            for (int q = 0; q < j; q++)
                taken = taken || idx[q] == e;
            if (!taken && (best < 0 || lg[e] > lg[best]))
                best = e;
        }
        idx[j] = best;
    }
}

/* Sort context for the capacity pass (qsort has no user pointer). */
static const int *g_idx;
static const float *g_wts;

static int by_expert_weight(const void *pa, const void *pb)
{
    size_t a = *(const size_t *)pa, b = *(const size_t *)pb;
    if (g_idx[a] != g_idx[b])
        return g_idx[a] < g_idx[b] ? -1 : 1;
    if (g_wts[a] != g_wts[b])
        return g_wts[a] > g_wts[b] ? -1 : 1;
    return a < b ? -1 : (a > b);
}

void moe_route(const moe_route_cfg *cfg, const float *logits, size_t N, int *idx, float *wts, int *keep, int *counts,
               size_t *dropped, size_t *order)
{
    int E = cfg->num_experts, k = cfg->topk;
    size_t nk = N * (size_t)k;
    for (size_t n = 0; n < N; n++) {
        const float *lg = logits + n * (size_t)E;
        int *id = idx + n * (size_t)k;
        choose(cfg, lg, n, id);
        float mx = lg[id[0]];
        for (int j = 1; j < k; j++)
            mx = fmaxf(mx, lg[id[j]]);
        float s = 0.0f;
        for (int j = 0; j < k; j++) {
            wts[n * (size_t)k + (size_t)j] = expf(lg[id[j]] - mx);
            s += wts[n * (size_t)k + (size_t)j];
        }
        for (int j = 0; j < k; j++)
            wts[n * (size_t)k + (size_t)j] /= s;
    }
    for (int e = 0; e < E; e++)
        counts[e] = 0;
    size_t cap = moe_route_capacity(cfg, N), drop = 0;
    for (size_t i = 0; i < nk; i++) {
        keep[i] = 1;
        order[i] = i;
    }
    if (cap > 0) {
        g_idx = idx;
        g_wts = wts;
        qsort(order, nk, sizeof *order, by_expert_weight);
        for (size_t i = 0; i < nk; i++) {
            size_t a = order[i];
            if ((size_t)counts[idx[a]] >= cap) {
                keep[a] = 0;
                wts[a] = 0.0f;
                drop++;
            } else {
                counts[idx[a]]++;
            }
        }
    } else {
        for (size_t i = 0; i < nk; i++)
            counts[idx[i]]++;
    }
    if (dropped)
        *dropped = drop;
}
