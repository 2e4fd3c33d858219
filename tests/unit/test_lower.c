/* Closed forms reproduced by the simulated timeline where their assumptions
 * hold (formulas.md: uniform op times, no contention, no communication
 * cost): bubble fractions of each schedule and the activations held at peak,
 * from plan_uniform + sched_generate + lower + engine + mem. */
#include <criterion/criterion.h>
#include <stdint.h>

#include "sim/core/engine.h"
#include "sim/core/lower.h"
#include "sim/core/mem.h"
#include "sim/core/plan.h"
#include "sim/sched/sched.h"
#include "sim/sched/sched_generate.h"

typedef struct {
    const plan *pl;
    mem_tracker *mem;
} ctx_t;

static void on_start(void *c, engine *e, engine_task_id id, const engine_task_info *ti, int64_t now)
{
    (void)e;
    (void)id;
    ctx_t *x = c;
    const plan_step *s = &x->pl->steps[ti->tag];
    mem_add(x->mem, ti->rank, MEM_ACTIV, s->alloc_bytes, now, now);
}

static void on_end(void *c, engine *e, engine_task_id id, const engine_task_info *ti, int64_t now)
{
    (void)e;
    (void)id;
    ctx_t *x = c;
    const plan_step *s = &x->pl->steps[ti->tag];
    mem_add(x->mem, ti->rank, MEM_ACTIV, -s->free_bytes, now, now);
}

typedef struct {
    int64_t makespan_ns;
    int64_t idle_ns[64];  /* per rank */
    int64_t peak_act[64]; /* per rank, bytes */
    int64_t span_ns[64];  /* per rank: first compute start to last compute end (Qi et al.) */
} outcome;

/* Simulate kind with p, m, v and uniform times; activation 1 byte per chunk. */
static void simulate_uniform(sched_kind kind, int p, int m, int v, int64_t f, int64_t i, int64_t w, int64_t p2p,
                             outcome *out)
{
    memset(out, 0, sizeof *out);
    sched_opts o;
    sched_opts_default(&o, kind);
    o.p = p;
    o.m = m;
    o.v = v;
    o.with_comm = true;
    o.with_reduce_optim = true;
    sched *s = NULL;
    ts_err err;
    cr_assert_eq(sched_generate(&o, &s, &err), TS_OK, "%s", err.msg);
    plan *pl = NULL;
    cr_assert_eq(plan_uniform(s, f, i, w, p2p, 1, &pl, &err), TS_OK, "%s", err.msg);
    mem_tracker *mem = NULL;
    cr_assert_eq(mem_create(p, false, &mem, &err), TS_OK);
    ctx_t c = {pl, mem};
    engine_hooks h = {.on_start = on_start, .on_end = on_end, .ctx = &c};
    engine *e = NULL;
    cr_assert_eq(engine_create(p, PLAN_STREAMS, &h, &e, &err), TS_OK, "%s", err.msg);
    cr_assert_eq(lower_sched(pl, s, e, &err), TS_OK, "%s", err.msg);
    cr_assert_eq(engine_run(e, &err), TS_OK, "%s", err.msg);
    cr_assert_eq(mem_check(mem, &err), TS_OK, "%s", err.msg);
    out->makespan_ns = engine_makespan_ns(e);
    int64_t first[64], last[64];
    for (int r = 0; r < p; r++)
        first[r] = INT64_MAX, last[r] = 0;
    for (uint32_t id = 0; id < engine_task_count(e); id++) {
        if (engine_task_stream(e, id) != PLAN_STREAM_COMPUTE)
            continue;
        int r = engine_task_rank(e, id);
        if (engine_task_start_ns(e, id) < first[r])
            first[r] = engine_task_start_ns(e, id);
        if (engine_task_end_ns(e, id) > last[r])
            last[r] = engine_task_end_ns(e, id);
    }
    for (int r = 0; r < p; r++)
        out->span_ns[r] = last[r] - first[r];
    for (int r = 0; r < p; r++) {
        out->idle_ns[r] = engine_busy_mask_ns(e, r, 0);
        out->peak_act[r] = mem_peak_bytes(mem, r);
        cr_expect_eq(mem_live_bytes(mem, r, MEM_ACTIV), 0, "rank %d frees all activations", r);
    }
    engine_free(e);
    mem_free(mem);
    plan_free(pl);
    sched_free(s);
}

Test(lower, gpipe_and_1f1b_bubble)
{
    const int p = 4, m = 8;
    const int64_t f = 1000, b = 2000;
    sched_kind kinds[2] = {SCHED_GPIPE, SCHED_1F1B};
    for (int k = 0; k < 2; k++) {
        outcome o;
        simulate_uniform(kinds[k], p, m, 1, f, b, 0, 0, &o);
        /* makespan (m + p - 1)(T_F + T_B); idle per rank (p - 1)(T_F + T_B) */
        cr_expect_eq(o.makespan_ns, (m + p - 1) * (f + b), "%s", sched_kind_name(kinds[k]));
        for (int r = 0; r < p; r++)
            cr_expect_eq(o.idle_ns[r], (p - 1) * (f + b), "%s rank %d", sched_kind_name(kinds[k]), r);
        /* bubble over ideal = (p - 1) / m */
        double frac = (double)o.idle_ns[0] / (double)(o.makespan_ns - o.idle_ns[0]);
        cr_expect_float_eq(frac, (double)(p - 1) / m, 1e-12);
        /* activations held at peak: GPipe m micro-batches; 1F1B p - r on rank r */
        for (int r = 0; r < p; r++)
            cr_expect_eq(o.peak_act[r], kinds[k] == SCHED_GPIPE ? m : p - r, "%s rank %d", sched_kind_name(kinds[k]),
                         r);
    }
}

Test(lower, interleaved_bubble_and_activations)
{
    const int p = 4, m = 8, v = 2;
    const int64_t f = 1000, b = 2000;
    outcome o;
    simulate_uniform(SCHED_INTERLEAVED, p, m, v, f, b, 0, 0, &o);
    /* per-rank work m*v*(f+b); idle (p-1)(T_F+T_B)/v with T_F = v*f, T_B = v*b */
    cr_expect_eq(o.makespan_ns, (int64_t)m * v * (f + b) + (p - 1) * (f + b));
    for (int r = 0; r < p; r++)
        cr_expect_eq(o.idle_ns[r], (p - 1) * (f + b), "rank %d", r);
    double frac = (double)o.idle_ns[0] / (double)(o.makespan_ns - o.idle_ns[0]);
    cr_expect_float_eq(frac, (double)(p - 1) / (v * m), 1e-12);
    /* first rank: l(1 + (p-1)/(p v)) layers' worth = v*p + p - 1 chunk activations */
    cr_expect_eq(o.peak_act[0], v * p + p - 1);
}

Test(lower, zero_bubble_h1)
{
    /* ZB-H1 idle (p-1)(T_F + T_B - T_W) with T_B the input-gradient part */
    const int p = 4, m = 12;
    const int64_t f = 1000, i = 1000, w = 1000;
    outcome o;
    simulate_uniform(SCHED_ZB_H1, p, m, 1, f, i, w, 0, &o);
    for (int r = 0; r < p; r++)
        cr_expect_eq(o.idle_ns[r], (p - 1) * (f + i - w), "rank %d", r);
    cr_expect_eq(o.makespan_ns, m * (f + i + w) + (p - 1) * (f + i - w));
}

Test(lower, transfers_delay_the_pipeline)
{
    /* With a transfer time c, 1F1B's makespan grows by 2(p-1)c on the
     * critical path through the warm-up and cool-down. */
    const int p = 4, m = 8;
    const int64_t f = 1000, b = 2000, c = 100;
    outcome o0, o1;
    simulate_uniform(SCHED_1F1B, p, m, 1, f, b, 0, 0, &o0);
    simulate_uniform(SCHED_1F1B, p, m, 1, f, b, 0, c, &o1);
    cr_expect_gt(o1.makespan_ns, o0.makespan_ns);
    cr_expect_geq(o1.makespan_ns, o0.makespan_ns + 2 * (p - 1) * c);
}

Test(lower, deterministic)
{
    outcome a, b;
    simulate_uniform(SCHED_INTERLEAVED, 4, 8, 2, 1234, 2345, 0, 77, &a);
    simulate_uniform(SCHED_INTERLEAVED, 4, 8, 2, 1234, 2345, 0, 77, &b);
    cr_expect_eq(memcmp(&a, &b, sizeof a), 0);
}

Test(lower, zero_bubble_h2)
{
    /* ZB-H2: bubble (p-1)(T_F + T_B - 2 T_W) in Qi et al.'s measure: the
     * longest per-rank span (first op start to last op end) minus the work
     * m(T_F + T_B + T_W); zero when T_F + T_B = 2 T_W */
    const int p = 4, m = 12;
    const int64_t W[2] = {1000, 800};
    for (int k = 0; k < 2; k++) {
        const int64_t f = 1000, i = 1000, w = W[k];
        outcome o;
        simulate_uniform(SCHED_ZB_H2, p, m, 1, f, i, w, 0, &o);
        int64_t cost = 0;
        for (int r = 0; r < p; r++)
            if (o.span_ns[r] > cost)
                cost = o.span_ns[r];
        cr_expect_eq(cost - m * (f + i + w), (p - 1) * (f + i - 2 * w), "T_W %lld: span %lld", (long long)w,
                     (long long)cost);
    }
}
