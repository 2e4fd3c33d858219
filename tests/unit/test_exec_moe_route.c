/* Unit tests for the executor's MoE router logic (exec/core/moe_route) and
 * the context-parallel chunk split (exec/core/cp_split): pure logic, exact
 * integers or closed-form weights (softmax of two logits a, b gives
 * 1 / (1 + e^(b-a)); compared within 1e-6, fp32 rounding of expf being
 * ~1e-7 relative). */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "exec/core/cp_split.h"
#include "exec/core/moe_route.h"

#define NMAX 64

typedef struct {
    int idx[NMAX], keep[NMAX], counts[16];
    float wts[NMAX];
    int order[NMAX];
    size_t dropped;
} routed;

static void route(const moe_route_cfg *c, const float *lg, size_t N, routed *r)
{
    memset(r, 0, sizeof *r);
    moe_route(c, lg, N, r->idx, r->wts, r->keep, r->counts, &r->dropped, r->order);
}

Test(moe_route, topk_picks_largest_and_softmaxes_over_k)
{
    moe_route_cfg c = {.num_experts = 4, .topk = 2, .capacity_factor = 0.0};
    const float lg[8] = {0.1f, 2.0f, -1.0f, 1.0f,  /* token 0: experts 1 then 3 */
                         5.0f, 5.0f, 0.0f,  4.0f}; /* token 1: tie 0/1 -> 0 first */
    routed r;
    route(&c, lg, 2, &r);
    cr_assert_eq(r.idx[0], 1);
    cr_assert_eq(r.idx[1], 3);
    cr_assert_eq(r.idx[2], 0);
    cr_assert_eq(r.idx[3], 1);
    double w = 1.0 / (1.0 + exp(1.0 - 2.0));
    cr_assert(fabs(r.wts[0] - w) < 1e-6, "w0 %g want %g", r.wts[0], w);
    cr_assert(fabs(r.wts[1] - (1.0 - w)) < 1e-6);
    cr_assert(fabs(r.wts[2] - 0.5) < 1e-6 && fabs(r.wts[3] - 0.5) < 1e-6);
    cr_assert_eq(r.counts[0], 1);
    cr_assert_eq(r.counts[1], 2);
    cr_assert_eq(r.counts[2], 0);
    cr_assert_eq(r.counts[3], 1);
    cr_assert_eq(r.dropped, 0);
}

Test(moe_route, capacity_drops_lowest_weights)
{
    /* 4 tokens, k = 2 of E = 4, all choosing experts 0 and 1 with margins
     * l0 - l1 = 3, 1, 5, 2: capacity ceil(1 * 4 * 2 / 4) = 2. Expert 0 keeps
     * the two largest softmax weights (tokens 2 and 0), expert 1 the two
     * largest of its own (tokens 1 and 3). */
    moe_route_cfg c = {.num_experts = 4, .topk = 2, .capacity_factor = 1.0};
    const float lg[16] = {3, 0, -9, -9, 1, 0, -9, -9, 5, 0, -9, -9, 2, 0, -9, -9};
    routed r;
    cr_assert_eq(moe_route_capacity(&c, 4), 2);
    route(&c, lg, 4, &r);
    cr_assert_eq(r.dropped, 4);
    cr_assert_eq(r.counts[0], 2);
    cr_assert_eq(r.counts[1], 2);
    cr_assert_eq(r.counts[2] + r.counts[3], 0);
    int want[8] = {1, 0, 0, 1, 1, 0, 0, 1}; /* slot 0 = expert 0, slot 1 = expert 1 */
    for (int i = 0; i < 8; i++) {
        cr_assert_eq(r.keep[i], want[i], "slot %d", i);
        cr_assert_eq(r.wts[i] == 0.0f, !want[i], "slot %d", i);
    }
    cr_assert(fabs(r.wts[0] - 1.0 / (1.0 + exp(-3.0))) < 1e-6);
    /* k = 1: every weight is 1, ties keep the lower token index */
    moe_route_cfg c1 = {.num_experts = 2, .topk = 1, .capacity_factor = 1.0};
    const float lg1[8] = {3, 0, 1, 0, 5, 0, 2, 0};
    route(&c1, lg1, 4, &r);
    cr_assert_eq(r.dropped, 2);
    cr_assert(r.keep[0] && r.keep[1] && !r.keep[2] && !r.keep[3]);
    /* cf 2 keeps everything (capacity 4) */
    c1.capacity_factor = 2.0;
    route(&c1, lg1, 4, &r);
    cr_assert_eq(r.dropped, 0);
    cr_assert_eq(r.counts[0], 4);
}

Test(moe_route, force_balance_is_exactly_even)
{
    moe_route_cfg c = {.num_experts = 4, .topk = 2, .capacity_factor = 0.0, .force_balance = true};
    float lg[16 * 4];
    for (int i = 0; i < 64; i++)
        lg[i] = (i % 4 == 0) ? 10.0f : 0.0f; /* every token prefers expert 0 */
    routed r;
    route(&c, lg, 16, &r);
    for (int e = 0; e < 4; e++)
        cr_assert_eq(r.counts[e], 16 * 2 / 4, "expert %d", e);
    for (int n = 0; n < 16; n++) {
        cr_assert_neq(r.idx[2 * n], r.idx[2 * n + 1]);
        cr_assert(fabs(r.wts[2 * n] + r.wts[2 * n + 1] - 1.0) < 1e-6);
    }
    c.force_balance = false;
    route(&c, lg, 16, &r);
    cr_assert_eq(r.counts[0], 16); /* the skew, unforced */
}

Test(moe_route, check_rules)
{
    moe_route_cfg c = {.num_experts = 6, .topk = 2, .capacity_factor = 0.0};
    ts_err e;
    cr_assert_eq(moe_route_check(&c, 3, &e), TS_OK);
    cr_assert_eq(moe_route_check(&c, 4, &e), TS_EINVAL);
    cr_assert(strstr(e.msg, "divisible") != NULL);
    c.topk = 7;
    cr_assert_eq(moe_route_check(&c, 1, &e), TS_EINVAL);
    cr_assert_eq(moe_route_owner(8, 4, 5), 2);
    cr_assert_eq(moe_route_owner(8, 1, 7), 0);
}

Test(cp_split, chunks_cover_sequence_once)
{
    for (int cp = 1; cp <= 4; cp++) {
        int T = 16 * cp, seen[64] = {0};
        for (int r = 0; r < cp; r++)
            for (int i = 0; i < T / cp; i++)
                seen[cp_global_pos(T, cp, r, i)]++;
        for (int p = 0; p < T; p++)
            cr_assert_eq(seen[p], 1, "cp %d position %d", cp, p);
    }
    /* cp 2, T 8: rank 0 holds chunks 0 and 3 (positions 0,1,6,7) */
    cr_assert_eq(cp_global_pos(8, 2, 0, 2), 6);
    cr_assert_eq(cp_global_pos(8, 2, 1, 0), 2);
    cr_assert_eq(cp_global_pos(8, 2, 1, 3), 5);
}

Test(cp_split, ring_covers_causal_triangle_and_balances)
{
    for (int cp = 1; cp <= 4; cp++) {
        int T = 2 * cp * 2; /* chunk size 2 */
        static int cov[32][32];
        memset(cov, 0, sizeof cov);
        for (int r = 0; r < cp; r++)
            for (int i = 0; i < cp; i++) {
                cr_assert_float_eq(cp_step_work(cp, r, i), 2.0, 1e-12, "cp %d rank %d step %d", cp, r, i);
                int src = cp_ring_src(cp, r, i);
                for (int qi = 0; qi < T / cp; qi++)
                    for (int ki = 0; ki < T / cp; ki++) {
                        int q = cp_global_pos(T, cp, r, qi), k = cp_global_pos(T, cp, src, ki);
                        cp_mask m = cp_block(cp_chunk(cp, r, qi / 2), cp_chunk(cp, src, ki / 2));
                        if (m == CP_FULL || (m == CP_CAUSAL && k <= q))
                            cov[q][k]++;
                    }
            }
        for (int q = 0; q < T; q++)
            for (int k = 0; k < T; k++)
                cr_assert_eq(cov[q][k], k <= q ? 1 : 0, "cp %d q %d k %d", cp, q, k);
    }
    ts_err e;
    cr_assert_eq(cp_split_check(12, 4, &e), TS_EINVAL);
    cr_assert_eq(cp_split_check(16, 4, &e), TS_OK);
}
