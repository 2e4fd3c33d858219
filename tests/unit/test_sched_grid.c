/* sched over the grid p 1..32, m 1..256, v 1..4: every generated schedule
 * validates, and with uniform op times the closed forms of
 * ../shared/reference/formulas.md hold exactly (integer time, no
 * tolerance): idle (p-1)(T_F+T_B+T_W) for GPipe and 1F1B, /v interleaved,
 * (p-1)(T_F+T_B-T_W) ZB-H1, (p-1)(T_F+T_B-2T_W) ZB-H2 (zero when the three
 * are equal), zero for ZB-V at equal times; activations in flight m for
 * GPipe, p-r for 1F1B, Megatron's warm-up + 1 for interleaved, <= p ZB-H1,
 * <= 2p-1 ZB-H2, <= 2p chunks (p stages' worth, as 1F1B) ZB-V.
 *
 * The grid is sampled: every p in 1..8 and the edges 15, 16, 17, 31, 32;
 * for each, m at the edges around p, 2p-1, 2p, multiples of p, and 1, 255,
 * 256; every v in 1..4 for interleaved. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sched/sched.h"
#include "sim/sched/sched_generate.h"
#include "sim/sched/sched_time.h"
#include "sim/sched/sched_validate.h"

static const int PS[] = {1, 2, 3, 4, 5, 6, 7, 8, 15, 16, 17, 31, 32};
#define NP (sizeof PS / sizeof PS[0])

/* Micro-batch counts for p: edges around p and 2p, multiples, 1, 255, 256. */
static int ms_for(int p, int *ms)
{
    int cand[] = {1, 2, 3, p - 1, p, p + 1, 2 * p - 1, 2 * p, 2 * p + 1, 3 * p, 4 * p, 8 * p, 255, 256};
    int n = 0;
    for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++) {
        int m = cand[i];
        bool dup = m < 1 || m > 256;
        for (int j = 0; j < n && !dup; j++)
            /* cppcheck-suppress uninitvar ; ms[0..n-1] were written below on earlier rounds */
            dup = ms[j] == m;
        if (!dup)
            ms[n++] = m;
    }
    return n;
}

static int gen(sched_kind k, int p, int m, int v, sched **s, ts_err *e)
{
    sched_opts o;
    sched_opts_default(&o, k);
    o.p = p, o.m = m, o.v = v;
    return sched_generate(&o, s, e);
}

/* Idle of the busiest rank span, in ticks (1/v ns), with times in ns. */
static long long idle_ticks(const sched *s, int64_t f, int64_t b, int64_t w, sched_timing *tm)
{
    ts_err e;
    sched_op_times t = {f, b, w, 0};
    cr_assert_eq(sched_time(s, &t, tm, &e), TS_OK, "%s", e.msg);
    return (long long)(tm->cost - tm->ideal);
}

/* Op times (ns) with T_W <= T_F, T_B, where the zero-bubble closed forms apply. */
static const int64_t TIMES[][3] = {{12, 12, 12}, {36, 24, 12}, {24, 36, 12}, {24, 24, 12}, {60, 36, 24}};
#define NT (sizeof TIMES / sizeof TIMES[0])

Test(sched_grid, all_generated_schedules_validate)
{
    int n = 0;
    for (size_t a = 0; a < NP; a++) {
        int p = PS[a], ms[16], nm = ms_for(p, ms);
        for (int j = 0; j < nm; j++)
            for (int k = 0; k < SCHED_CUSTOM; k++)
                for (int v = 1; v <= 4; v++) {
                    if (k == SCHED_DUALPIPE) /* p, m even: test_sched_dual.c */
                        continue;
                    if ((k != SCHED_INTERLEAVED && v > 1 && !sched_kind_is_v((sched_kind)k)) ||
                        (sched_kind_is_v((sched_kind)k) && v != 2))
                        continue;
                    int m = ms[j];
                    sched *s = NULL;
                    ts_err e;
                    int rc = gen((sched_kind)k, p, m, v, &s, &e);
                    if (k == SCHED_DUALPIPEV && m < 2 * p) {
                        cr_expect_eq(rc, TS_EINVAL, "dualpipev p=%d m=%d: DualPipeV needs m >= 2p", p, m);
                        continue;
                    }
                    if (k == SCHED_INTERLEAVED && v > 1 && m < p) {
                        cr_expect_eq(rc, TS_EINVAL, "interleaved p=%d m=%d: Megatron rejects m < p", p, m);
                        continue;
                    }
                    if (rc != TS_OK && k == SCHED_INTERLEAVED && m % p != 0) {
                        /* Megatron-core's order for a partial last group can wait on itself. */
                        cr_expect(strstr(e.msg, "cannot run") != NULL, "%s", e.msg);
                        continue;
                    }
                    cr_assert_eq(rc, TS_OK, "%s p=%d m=%d v=%d: %s", sched_kind_name((sched_kind)k), p, m, v, e.msg);
                    sched_vinfo vi = {0};
                    cr_expect_eq(sched_validate(s, &vi, &e), TS_OK, "%s p=%d m=%d v=%d: %s",
                                 sched_kind_name((sched_kind)k), p, m, v, e.msg);
                    n++;
                    sched_free(s);
                }
    }
    cr_expect_gt(n, 800);
}

Test(sched_grid, gpipe_and_1f1b_idle_and_activations)
{
    for (size_t a = 0; a < NP; a++) {
        int p = PS[a], ms[16], nm = ms_for(p, ms);
        for (int j = 0; j < nm; j++)
            for (size_t ti = 0; ti < NT; ti++) {
                int m = ms[j];
                int64_t f = TIMES[ti][0], b = TIMES[ti][1], w = TIMES[ti][2];
                for (int k = SCHED_GPIPE; k <= SCHED_1F1B; k++) {
                    sched *s;
                    ts_err e;
                    cr_assert_eq(gen((sched_kind)k, p, m, 1, &s, &e), TS_OK, "%s", e.msg);
                    sched_timing tm;
                    long long idle = idle_ticks(s, f, b, w, &tm);
                    cr_expect_eq(idle, (long long)(p - 1) * (f + b + w), "%s p=%d m=%d", sched_kind_name(s->kind), p,
                                 m);
                    /* Fraction of ideal time: (p-1)/m. */
                    cr_expect_eq((tm.cost - tm.ideal) * m, (int64_t)(p - 1) * tm.ideal);
                    for (int r = 0; r < p; r++) {
                        int want = k == SCHED_GPIPE ? m : (p - r < m ? p - r : m);
                        cr_expect_eq(tm.peak_inflight[r], want, "%s p=%d m=%d r=%d", sched_kind_name(s->kind), p, m, r);
                    }
                    sched_timing_free(&tm);
                    sched_free(s);
                }
            }
    }
}

Test(sched_grid, interleaved_idle_and_activations)
{
    for (size_t a = 0; a < NP; a++) {
        int p = PS[a];
        for (int v = 1; v <= 4; v++)
            for (int mult = 1; mult <= 4; mult *= 2)
                for (size_t ti = 0; ti < NT; ti += 2) {
                    int m = mult * p;
                    int64_t f = TIMES[ti][0], b = TIMES[ti][1], w = TIMES[ti][2];
                    sched *s;
                    ts_err e;
                    cr_assert_eq(gen(SCHED_INTERLEAVED, p, m, v, &s, &e), TS_OK, "%s", e.msg);
                    sched_timing tm;
                    long long idle = idle_ticks(s, f, b, w, &tm);
                    /* (p-1)(T_F+T_B+T_W)/v ns = (p-1)(T_F+T_B+T_W) ticks of 1/v ns. */
                    cr_expect_eq(idle, (long long)(p - 1) * (f + b + w), "p=%d m=%d v=%d", p, m, v);
                    /* Bubble fraction of ideal time: (p-1)/(v m). */
                    cr_expect_eq((tm.cost - tm.ideal) * v * m, (int64_t)(p - 1) * tm.ideal);
                    for (int r = 0; r < p; r++) {
                        int warm = v > 1 ? 2 * (p - r - 1) + (v - 1) * p : p - r - 1;
                        int want = warm < m * v ? warm + 1 : m * v;
                        cr_expect_eq(tm.peak_inflight[r], want, "p=%d m=%d v=%d r=%d", p, m, v, r);
                    }
                    /* Rank 0 holds p(1 + (p-1)/(pv)) stages' worth = (vp + p - 1) chunks. */
                    if (v > 1 && p > 1 && v * p + p - 1 <= m * v)
                        cr_expect_eq(tm.peak_inflight[0], v * p + p - 1);
                    sched_timing_free(&tm);
                    sched_free(s);
                }
    }
}

Test(sched_grid, zero_bubble_idle_and_activations)
{
    for (size_t a = 0; a < NP; a++) {
        int p = PS[a], ms[16], nm = ms_for(p, ms);
        for (int j = 0; j < nm; j++)
            for (size_t ti = 0; ti < NT; ti++) {
                int m = ms[j];
                int64_t f = TIMES[ti][0], b = TIMES[ti][1], w = TIMES[ti][2];
                sched *s;
                ts_err e;
                sched_timing tm;
                cr_assert_eq(gen(SCHED_ZB_H1, p, m, 1, &s, &e), TS_OK, "%s", e.msg);
                long long idle = idle_ticks(s, f, b, w, &tm);
                if (m >= p)
                    cr_expect_eq(idle, (long long)(p - 1) * (f + b - w), "zb-h1 p=%d m=%d T=%zu", p, m, ti);
                for (int r = 0; r < p; r++)
                    cr_expect_leq(tm.peak_inflight[r], p, "zb-h1 p=%d m=%d r=%d", p, m, r);
                sched_timing_free(&tm);
                sched_free(s);

                cr_assert_eq(gen(SCHED_ZB_H2, p, m, 1, &s, &e), TS_OK, "%s", e.msg);
                idle = idle_ticks(s, f, b, w, &tm);
                if (m >= 2 * p - 1)
                    cr_expect_eq(idle, (long long)(p - 1) * (f + b - 2 * w), "zb-h2 p=%d m=%d T=%zu", p, m, ti);
                if (ti == 0 && m >= 2 * p - 1)
                    cr_expect_eq(tm.bubble_rate, 0.0);
                for (int r = 0; r < p; r++)
                    cr_expect_leq(tm.peak_inflight[r], 2 * p - 1, "zb-h2 p=%d m=%d r=%d", p, m, r);
                if (m >= 2 * p - 1)
                    cr_expect_eq(tm.peak_inflight[0], 2 * p - 1);
                sched_timing_free(&tm);
                sched_free(s);

                if (ti != 0)
                    continue;
                cr_assert_eq(gen(SCHED_ZB_V, p, m, 2, &s, &e), TS_OK, "%s", e.msg);
                idle = idle_ticks(s, f, b, w, &tm);
                if (m >= 2 * p - 1)
                    cr_expect_eq(idle, 0, "zb-v p=%d m=%d", p, m);
                for (int r = 0; r < p; r++)
                    cr_expect_leq(tm.peak_inflight[r], 2 * p, "zb-v p=%d m=%d r=%d", p, m, r);
                sched_timing_free(&tm);
                sched_free(s);
            }
    }
}

/* ZB-H1's bubble is a third of 1F1B's when T_F = T_B = T_W. */
Test(sched_grid, zb_h1_third_of_1f1b)
{
    for (int p = 2; p <= 8; p++) {
        sched *a, *b;
        ts_err e;
        cr_assert_eq(gen(SCHED_1F1B, p, 3 * p, 1, &a, &e), TS_OK);
        cr_assert_eq(gen(SCHED_ZB_H1, p, 3 * p, 1, &b, &e), TS_OK);
        sched_timing ta, tb;
        long long ia = idle_ticks(a, 10, 10, 10, &ta), ib = idle_ticks(b, 10, 10, 10, &tb);
        cr_expect_eq(ia, 3 * ib, "p=%d: 1f1b idle %lld, zb-h1 idle %lld", p, ia, ib);
        sched_timing_free(&ta);
        sched_timing_free(&tb);
        sched_free(a);
        sched_free(b);
    }
}

/* DualPipeV over the grid (m >= 2p): bubble (p-1)(F&B + B - 3W) in chunk
 * ticks, F&B = T_F + T_B + T_W, B = T_B + T_W, at the times with
 * T_F = T_B >= T_W; 2p + 1 chunk activations on every rank. */
Test(sched_grid, dualpipev_bubble_and_activations)
{
    int n = 0;
    for (size_t a = 0; a < NP; a++) {
        int p = PS[a], ms[16], nm = ms_for(p, ms);
        for (int j = 0; j < nm; j++) {
            int m = ms[j];
            if (m < 2 * p)
                continue;
            for (size_t ti = 0; ti < NT; ti++) {
                int64_t f = TIMES[ti][0], b = TIMES[ti][1], w = TIMES[ti][2];
                if (f != b || w > f)
                    continue;
                sched *s;
                ts_err e;
                cr_assert_eq(gen(SCHED_DUALPIPEV, p, m, 2, &s, &e), TS_OK, "%s", e.msg);
                sched_timing tm;
                (void)idle_ticks(s, f, b, w, &tm);
                cr_expect_eq(tm.cost - tm.ideal, (int64_t)(p - 1) * ((f + b + w) + (b + w) - 3 * w), "p=%d m=%d T=%zu",
                             p, m, ti);
                for (int r = 0; r < p; r++)
                    cr_expect_eq(tm.peak_inflight[r], 2 * p + 1, "p=%d m=%d r=%d", p, m, r);
                sched_timing_free(&tm);
                sched_free(s);
                n++;
            }
        }
    }
    cr_expect_eq(n, 89 * 2); /* 89 (p, m) with m >= 2p, 2 time sets */
}
