/* sched_time: the timing model on its own (latency, units, errors). */
#include <criterion/criterion.h>
#include <string.h>

#include "sim/sched/sched.h"
#include "sim/sched/sched_generate.h"
#include "sim/sched/sched_time.h"
#include "tests/unit/sched_fixture.h"

static sched *gen(sched_kind k, int p, int m, int v, bool comm)
{
    return sched_fixture(k, p, m, v, comm, false);
}

/* GPipe with latency c: each of the p-1 hops costs c on the way down and on
 * the way up: span = (m+p-1)(T_F+T_B+T_W) + 2(p-1)c. */
Test(sched_time, gpipe_latency_closed_form)
{
    for (int p = 1; p <= 6; p++)
        for (int m = 1; m <= 7; m++) {
            sched *s = gen(SCHED_GPIPE, p, m, 1, true);
            sched_op_times t = {10, 7, 3, 5};
            sched_timing tm;
            ts_err e;
            cr_assert_eq(sched_time(s, &t, &tm, &e), TS_OK, "%s", e.msg);
            cr_expect_eq(tm.cost, (int64_t)(m + p - 1) * 20 + 2 * (p - 1) * 5, "p=%d m=%d", p, m);
            cr_expect_eq(tm.makespan, tm.cost);
            cr_expect_eq(tm.tick_den, 1);
            for (int r = 0; r < p; r++) {
                cr_expect_eq(tm.busy[r], (int64_t)m * 20);
                cr_expect_eq(tm.idle[r], tm.makespan - tm.busy[r]);
            }
            sched_timing_free(&tm);
            sched_free(s);
        }
}

/* Explicit SEND/RECV time exactly like the implicit dependencies: each SEND
 * sits right after its producer, and a RECV never delays its rank. */
Test(sched_time, explicit_comm_times_like_compute_only)
{
    for (int k = 0; k < SCHED_CUSTOM; k++)
        for (int p = 1; p <= 5; p++) {
            if (k == SCHED_DUALPIPE) /* p, m even: test_sched_dual.c */
                continue;
            int v = k == SCHED_INTERLEAVED ? 3 : sched_kind_is_v((sched_kind)k) ? 2 : 1;
            sched *a = gen((sched_kind)k, p, 2 * p, v, true), *b = gen((sched_kind)k, p, 2 * p, v, false);
            sched_op_times t = {30, 24, 12, 7};
            sched_timing ta, tb;
            ts_err e;
            cr_assert_eq(sched_time(a, &t, &ta, &e), TS_OK, "%s", e.msg);
            cr_assert_eq(sched_time(b, &t, &tb, &e), TS_OK, "%s", e.msg);
            cr_expect_eq(ta.cost, tb.cost, "%s p=%d", sched_kind_name((sched_kind)k), p);
            cr_expect_eq(ta.makespan, tb.makespan);
            for (int r = 0; r < p; r++)
                cr_expect_eq(ta.last[r], tb.last[r]);
            sched_timing_free(&ta);
            sched_timing_free(&tb);
            sched_free(a);
            sched_free(b);
        }
}

/* A chunk takes 1/v of each time; ticks are 1/v ns so that stays exact. */
Test(sched_time, interleaved_chunks_in_ticks)
{
    sched *s = gen(SCHED_INTERLEAVED, 1, 2, 3, true);
    sched_op_times t = {10, 10, 10, 0};
    sched_timing tm;
    ts_err e;
    cr_assert_eq(sched_time(s, &t, &tm, &e), TS_OK, "%s", e.msg);
    cr_expect_eq(tm.tick_den, 3);
    /* One rank, no bubble: 2 micro-batches * 30 ns = 60 ns = 180 ticks. */
    cr_expect_eq(tm.cost, 180);
    cr_expect_eq(tm.ideal, 180);
    cr_expect_float_eq(sched_ticks_ms(&tm, tm.cost), 60e-6, 1e-15);
    cr_expect_eq(tm.bubble_rate, 0.0);
    sched_timing_free(&tm);
    sched_free(s);
}

Test(sched_time, negative_time_rejected)
{
    sched *s = gen(SCHED_1F1B, 2, 2, 1, true);
    sched_op_times t = {1, -1, 0, 0};
    sched_timing tm;
    ts_err e;
    cr_assert_eq(sched_time(s, &t, &tm, &e), TS_EINVAL);
    cr_expect(strstr(e.msg, "B -1") != NULL, "%s", e.msg);
    cr_expect_null(tm.busy);
    sched_free(s);
}
