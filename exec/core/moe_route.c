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
static void choose(const float *lg, size_t n, int E, int k, bool force_balance, int *idx)
{
    if (force_balance) {
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

void moe_route_topk(const float *logits, size_t N, int E, int k, bool force_balance, int *idx, float *wts)
{
    for (size_t n = 0; n < N; n++) {
        const float *lg = logits + n * (size_t)E;
        int *id = idx + n * (size_t)k;
        float *w = wts + n * (size_t)k;
        choose(lg, n, E, k, force_balance, id);
        float mx = lg[id[0]];
        for (int j = 1; j < k; j++)
            mx = fmaxf(mx, lg[id[j]]);
        float s = 0.0f;
        for (int j = 0; j < k; j++) {
            w[j] = expf(lg[id[j]] - mx);
            s += w[j];
        }
        for (int j = 0; j < k; j++)
            w[j] /= s;
    }
}

/* Sort context for the capacity pass (qsort has no user pointer). */
static const int *g_idx;
static const float *g_wts;

static int by_expert_weight(const void *pa, const void *pb)
{
    int a = *(const int *)pa, b = *(const int *)pb;
    if (g_idx[a] != g_idx[b])
        return g_idx[a] < g_idx[b] ? -1 : 1;
    if (g_wts[a] != g_wts[b])
        return g_wts[a] > g_wts[b] ? -1 : 1;
    return a < b ? -1 : (a > b);
}

void moe_route_keep(const int *idx, const float *wts, size_t nk, size_t cap, int *keep, float *wkept, int *order)
{
    for (size_t a = 0; a < nk; a++) {
        keep[a] = 1;
        wkept[a] = wts[a];
    }
    if (cap == 0 || nk == 0)
        return;
    for (size_t a = 0; a < nk; a++)
        order[a] = (int)a;
    g_idx = idx;
    g_wts = wts;
    qsort(order, nk, sizeof *order, by_expert_weight);
    size_t run = 0; /* place of order[i] among its expert's assignments */
    for (size_t i = 0; i < nk; i++) {
        int a = order[i];
        run = i > 0 && idx[order[i - 1]] == idx[a] ? run + 1 : 0;
        if (run >= cap) {
            keep[a] = 0;
            wkept[a] = 0.0f;
        }
    }
}

void moe_route_counts(const int *idx, const int *keep, size_t nk, int E, int *counts)
{
    for (int e = 0; e < E; e++)
        counts[e] = 0;
    for (size_t a = 0; a < nk; a++)
        if (keep[a])
            counts[idx[a]]++;
}

void moe_route_send_order(const int *idx, const int *keep, size_t nk, int E, int *send_slot, int *pos)
{
    int p = 0;
    for (size_t a = 0; a < nk; a++)
        pos[a] = -1;
    for (int e = 0; e < E; e++)
        for (size_t a = 0; a < nk; a++)
            if (keep[a] && idx[a] == e) {
                pos[a] = p;
                send_slot[p++] = (int)a;
            }
}

void moe_route(const moe_route_cfg *cfg, const float *logits, size_t N, int *idx, float *wts, int *keep, int *counts,
               size_t *dropped, int *order)
{
    int E = cfg->num_experts, k = cfg->topk;
    size_t nk = N * (size_t)k, kept = 0;
    moe_route_topk(logits, N, E, k, cfg->force_balance, idx, wts);
    moe_route_keep(idx, wts, nk, moe_route_capacity(cfg, N), keep, wts, order);
    moe_route_counts(idx, keep, nk, E, counts);
    for (int e = 0; e < E; e++)
        kept += (size_t)counts[e];
    if (dropped)
        *dropped = nk - kept;
}
