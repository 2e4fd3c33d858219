/* --overlap-moe-expert-parallel-comm at p > 1 (sim/core/ep_pair.h, lower.h):
 * each pair runs as Megatron-core's combined step (both inputs first, both
 * outputs at its end) and the interleaved schedule has one more warm-up
 * forward per rank (Megatron-core's get_pp_rank_microbatches), so that each
 * steady-state F(k + w) pairs with B(k) of another micro-batch. The lowered
 * timeline (plan_uniform + lower + engine) against a recurrence of the
 * combined rule written here, and a 2-stage case by hand. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "sim/core/engine.h"
#include "sim/core/ep_pair.h"
#include "sim/core/lower.h"
#include "sim/core/plan.h"
#include "sim/sched/sched.h"
#include "sim/sched/sched_generate.h"

#define MAXA 512 /* actions per rank and stages x micro-batches the tests use */

static sched *gen(int p, int m, int v, bool combined)
{
    sched_opts o;
    sched_opts_default(&o, SCHED_INTERLEAVED);
    o.p = p;
    o.m = m;
    o.v = v;
    o.with_comm = true;
    o.with_reduce_optim = false;
    o.combined_1f1b = combined;
    sched *s = NULL;
    ts_err err;
    cr_assert_eq(sched_generate(&o, &s, &err), TS_OK, "%s", err.msg);
    return s;
}

/* The lowered makespan: every F f_ns, every B b_ns, transfers x_ns,
 * ep_pair_combined as given (no pair hides anything: plan_uniform has no
 * all-to-all). */
static int64_t lowered_comb_ns(const sched *s, int64_t f_ns, int64_t b_ns, int64_t x_ns, bool combined)
{
    plan *pl = NULL;
    ts_err err;
    cr_assert_eq(plan_uniform(s, f_ns, b_ns, 0, x_ns, 1, &pl, &err), TS_OK, "%s", err.msg);
    pl->ep_pair_combined = combined;
    engine *e = NULL;
    engine_hooks h = {0};
    cr_assert_eq(engine_create(s->p, PLAN_STREAMS, &h, &e, &err), TS_OK, "%s", err.msg);
    cr_assert_eq(lower_sched(pl, s, e, &err), TS_OK, "%s", err.msg);
    cr_assert_eq(engine_run(e, &err), TS_OK, "%s", err.msg);
    int64_t t = engine_makespan_ns(e);
    engine_free(e);
    plan_free(pl);
    return t;
}

static int64_t lowered_ns(const sched *s, int64_t f_ns, int64_t b_ns, int64_t x_ns)
{
    return lowered_comb_ns(s, f_ns, b_ns, x_ns, true);
}

/* The combined rule as a recurrence over each rank's units (an unpaired
 * compute action, or a pair of ep_pair_mark): a unit starts when the rank
 * is free and every member's input is there (a neighbour stage's output
 * plus x_ns when on another rank; the last stage's B the F's output), and
 * lasts the sum of its members; every member's output leaves at the unit's
 * end. Returns the last end; -1 on a cycle. */
static int64_t recurrence_ns(const sched *s, int64_t f_ns, int64_t b_ns, int64_t x_ns)
{
    int n_st = s->p * s->v, m = s->m;
    static int64_t end_f[MAXA], end_b[MAXA]; /* [stage * m + mb], -1 unknown */
    cr_assert(n_st * m <= MAXA);
    for (int k = 0; k < n_st * m; k++)
        end_f[k] = end_b[k] = -1;
    size_t next[64] = {0};
    int64_t free_at[64] = {0}, last = 0;
    int32_t partner[64][MAXA];
    cr_assert(s->p <= 64);
    for (int r = 0; r < s->p; r++) {
        cr_assert(s->n_actions[r] <= MAXA);
        ep_pair_mark(s, r, partner[r]);
    }
    for (bool moved = true; moved;) {
        moved = false;
        for (int r = 0; r < s->p; r++) {
            for (;;) {
                size_t i = next[r];
                while (i < s->n_actions[r] && ((s->actions[r][i].kind != ACT_F && s->actions[r][i].kind != ACT_B) ||
                                               (partner[r][i] >= 0 && (size_t)partner[r][i] < i)))
                    i++; /* communication, or the second of a pair (run with the first) */
                next[r] = i;
                if (i >= s->n_actions[r])
                    break;
                size_t mem[2] = {i, partner[r][i] >= 0 ? (size_t)partner[r][i] : i};
                int64_t start = free_at[r], dur = 0;
                bool ready = true;
                for (int q = 0; q < (mem[1] != i ? 2 : 1); q++) {
                    const sched_action *a = &s->actions[r][mem[q]];
                    int st = sched_stage_of(s, r, a->chunk), from = a->kind == ACT_F ? st - 1 : st + 1;
                    int64_t in = 0;
                    if (a->kind == ACT_B && st == n_st - 1)
                        in = end_f[st * m + a->mb];
                    else if (from >= 0 && from < n_st) {
                        int pr, pc;
                        sched_rank_chunk_of(s, from, &pr, &pc);
                        in = (a->kind == ACT_F ? end_f : end_b)[from * m + a->mb];
                        in = in < 0 ? -1 : in + (pr != r ? x_ns : 0);
                    }
                    ready = ready && in >= 0;
                    start = in > start ? in : start;
                    dur += a->kind == ACT_F ? f_ns : b_ns;
                }
                if (!ready)
                    break;
                free_at[r] = start + dur;
                last = free_at[r] > last ? free_at[r] : last;
                for (int q = 0; q < (mem[1] != i ? 2 : 1); q++) {
                    const sched_action *a = &s->actions[r][mem[q]];
                    int st = sched_stage_of(s, r, a->chunk);
                    (a->kind == ACT_F ? end_f : end_b)[st * m + a->mb] = free_at[r];
                }
                next[r] = i + 1;
                moved = true;
            }
        }
    }
    for (int r = 0; r < s->p; r++)
        if (next[r] < s->n_actions[r])
            return -1;
    return last;
}

/* p = 2, v = 2, m = 4 (groups of 2), F = 1, B = 2 time units, no transfer
 * time; stages 0, 2 on rank 0 and 1, 3 on rank 1; Fs(i) the forward of
 * micro-batch i on stage s, "&" a pair, [start, end]. With the extra
 * warm-up forward rank 0 runs 5 forwards and rank 1 3, then the pairs
 * F(k + w) & B(k):
 *   rank 0: F0(0) [0,1] F0(1) [1,2] F2(0) [2,3] F2(1) [3,4] F0(2) [4,5]
 *           F0(3)&B2(0) [7,10] (B3(0) ends at 7) F2(2)&B2(1) [10,13]
 *           F2(3)&B0(0) [13,16] B0(1) [16,18] B2(2) [19,21] B2(3) [21,23]
 *           B0(2) [23,25] B0(3) [25,27]
 *   rank 1: F1(0) [1,2] F1(1) [2,3] F3(0) [3,4] F3(1)&B3(0) [4,7]
 *           F1(2)&B3(1) [7,10] F1(3)&B1(0) [10,13] F3(2)&B1(1) [13,16]
 *           F3(3)&B3(2) [16,19] B3(3) [19,21] B1(2) [21,23] B1(3) [23,25]
 * each pair's outputs leaving at its end (F0(3) at 10, not 8): 27 units. */
Test(ep_pair_combined, two_stage_closed_form)
{
    sched *s = gen(2, 4, 2, true);
    /* the pairs: every steady-state F with the following B, of another
     * micro-batch: total - warm of them per rank (warm 2(p-r-1) + (v-1)g + 1) */
    int32_t partner[MAXA];
    for (int r = 0; r < 2; r++) {
        ep_pair_mark(s, r, partner);
        int n = 0;
        for (size_t i = 0; i < s->n_actions[r]; i++)
            n += partner[i] > (int32_t)i;
        cr_expect_eq(n, 8 - (2 * (1 - r) + 2 + 1), "rank %d: %d pairs", r, n);
    }
    sched_free(s);
    /* m = p = 2: rank 0 runs its 4 forwards, then its 4 backwards, no pair
     * (its last forward with its first backward would wait on itself
     * through rank 1's pair) */
    s = gen(2, 2, 2, true);
    ep_pair_mark(s, 0, partner);
    for (size_t i = 0; i < s->n_actions[0]; i++)
        cr_expect_lt(partner[i], 0, "rank 0 action %zu paired", i);
    sched_free(s);
    s = gen(2, 4, 2, true);
    cr_expect_eq(recurrence_ns(s, 1000, 2000, 0), 27000);
    cr_expect_eq(lowered_ns(s, 1000, 2000, 0), 27000);
    /* F = B = 1, transfers 1: the pairs wait for a neighbour's pair
     *   rank 0: F0(0) [0,1] F0(1) [1,2] F2(0) [4,5] F2(1) [5,6] F0(2) [6,7]
     *           F0(3)&B2(0) [10,12] F2(2)&B2(1) [12,14] F2(3)&B0(0) [16,18]
     *           B0(1) [18,19] B2(2) [22,23] B2(3) [23,24] B0(2) [26,27]
     *           B0(3) [27,28]
     *   rank 1: F1(0) [2,3] F1(1) [3,4] F3(0) [6,7] F3(1)&B3(0) [7,9]
     *           F1(2)&B3(1) [9,11] F1(3)&B1(0) [13,15] F3(2)&B1(1) [15,17]
     *           F3(3)&B3(2) [19,21] B3(3) [21,22] B1(2) [24,25] B1(3) [25,26]
     * 28 units; the lowering's in-order send and receive streams (Megatron's
     * batched send_forward_backward_recv_forward_backward) add to it; each
     * pass on its own (no combined step) is shorter */
    int64_t rule = recurrence_ns(s, 1000, 1000, 1000), low = lowered_ns(s, 1000, 1000, 1000);
    int64_t plain = lowered_comb_ns(s, 1000, 1000, 1000, false);
    cr_expect_eq(rule, 28000);
    cr_expect_geq(low, rule);
    cr_expect_lt(plain, rule, "each pass on its own: %lld ns", (long long)plain);
    sched_free(s);
}

/* The lowering follows the combined rule for other times and sizes
 * (transfers on their own in-order streams can only delay it: equal when
 * they take no time, at least the recurrence otherwise). */
Test(ep_pair_combined, lowering_follows_the_rule)
{
    /* m = p: rank 0's warm-up takes every micro-batch (no pair there) */
    static const int P[][3] = {{2, 4, 2}, {2, 8, 2}, {4, 8, 2}, {2, 6, 3}, {4, 16, 4}, {2, 2, 2}, {4, 4, 2}};
    static const int64_t FB[][2] = {{1000, 2000}, {3000, 1000}, {1000, 1000}};
    for (size_t k = 0; k < sizeof P / sizeof P[0]; k++)
        for (size_t t = 0; t < sizeof FB / sizeof FB[0]; t++) {
            sched *s = gen(P[k][0], P[k][1], P[k][2], true);
            int64_t ref = recurrence_ns(s, FB[t][0], FB[t][1], 0), low = lowered_ns(s, FB[t][0], FB[t][1], 0);
            cr_expect_gt(ref, 0, "p %d m %d v %d: a cycle", P[k][0], P[k][1], P[k][2]);
            cr_expect_eq(low, ref, "p %d m %d v %d f %lld b %lld: lowered %lld, rule %lld", P[k][0], P[k][1], P[k][2],
                         (long long)FB[t][0], (long long)FB[t][1], (long long)low, (long long)ref);
            int64_t ref_x = recurrence_ns(s, FB[t][0], FB[t][1], 300), low_x = lowered_ns(s, FB[t][0], FB[t][1], 300);
            cr_expect_geq(low_x, ref_x, "p %d m %d v %d with transfers", P[k][0], P[k][1], P[k][2]);
            sched_free(s);
        }
}
