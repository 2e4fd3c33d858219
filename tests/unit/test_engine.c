/* Unit tests of the discrete-event engine: ordering, tie-breaking, overlap of
 * two streams, cross-rank dependencies, joins, external tasks, deadlocks. */
#include <criterion/criterion.h>

#include <stdint.h>
#include <string.h>

#include "sim/core/engine.h"

static engine *mk(int ranks, int spr, const engine_hooks *h)
{
    engine *e = NULL;
    ts_err err;
    cr_assert_eq(engine_create(ranks, spr, h, &e, &err), TS_OK, "%s", err.msg);
    return e;
}

static engine_task_id add(engine *e, int rank, int s, int64_t dur, uint32_t tag)
{
    engine_task_id id;
    ts_err err;
    cr_assert_eq(engine_task_add(e, rank, s, dur, tag, 0, &id, &err), TS_OK, "%s", err.msg);
    return id;
}

static void dep(engine *e, engine_task_id a, engine_task_id b)
{
    ts_err err;
    cr_assert_eq(engine_dep_add(e, a, b, &err), TS_OK, "%s", err.msg);
}

static void run_ok(engine *e)
{
    ts_err err;
    cr_assert_eq(engine_run(e, &err), TS_OK, "%s", err.msg);
}

Test(engine, stream_runs_in_order)
{
    engine *e = mk(1, 1, NULL);
    engine_task_id a = add(e, 0, 0, 10, 1), b = add(e, 0, 0, 5, 2), c = add(e, 0, 0, 0, 3);
    run_ok(e);
    cr_expect_eq(engine_task_start_ns(e, a), 0);
    cr_expect_eq(engine_task_start_ns(e, b), 10);
    cr_expect_eq(engine_task_end_ns(e, b), 15);
    cr_expect_eq(engine_task_start_ns(e, c), 15);
    cr_expect_eq(engine_task_end_ns(e, c), 15);
    cr_expect_eq(engine_makespan_ns(e), 15);
    cr_expect_eq(engine_busy_mask_ns(e, 0, 1), 15);
    cr_expect_eq(engine_busy_mask_ns(e, 0, 0), 0);
    engine_free(e);
}

/* Records the order of on_end calls. */
typedef struct {
    uint32_t tags[16];
    int n;
} order_log;

static void log_end(void *ctx, engine *e, engine_task_id id, const engine_task_info *ti, int64_t now_ns)
{
    (void)now_ns;
    order_log *l = ctx;
    cr_assert_eq(ti->tag, engine_task_tag(e, id));
    l->tags[l->n++] = ti->tag;
}

Test(engine, equal_times_break_ties_by_push_order)
{
    order_log l = {0};
    engine_hooks h = {.on_end = log_end, .ctx = &l};
    engine *e = mk(3, 1, &h);
    /* Three streams all ending at t=7: started in stream order 0,1,2, so
     * their end events were pushed in that order and are processed so. */
    add(e, 0, 0, 7, 10);
    add(e, 1, 0, 7, 11);
    add(e, 2, 0, 7, 12);
    run_ok(e);
    cr_assert_eq(l.n, 3);
    cr_expect_eq(l.tags[0], 10);
    cr_expect_eq(l.tags[1], 11);
    cr_expect_eq(l.tags[2], 12);
    engine_free(e);
}

Test(engine, two_streams_overlap)
{
    engine *e = mk(1, 2, NULL);
    engine_task_id c1 = add(e, 0, 0, 100, 1);
    engine_task_id m = add(e, 0, 1, 60, 2);  /* comm, depends on c1 */
    engine_task_id c2 = add(e, 0, 0, 50, 3); /* compute, overlaps m */
    engine_task_id c3 = add(e, 0, 0, 10, 4); /* waits for m */
    dep(e, c1, m);
    dep(e, m, c3);
    run_ok(e);
    cr_expect_eq(engine_task_start_ns(e, m), 100);
    cr_expect_eq(engine_task_start_ns(e, c2), 100);
    cr_expect_eq(engine_task_start_ns(e, c3), 160);
    cr_expect_eq(engine_makespan_ns(e), 170);
    /* compute only: 0-100 and 160-170; both: 100-150; comm only: 150-160 */
    cr_expect_eq(engine_busy_mask_ns(e, 0, 1), 110);
    cr_expect_eq(engine_busy_mask_ns(e, 0, 3), 50);
    cr_expect_eq(engine_busy_mask_ns(e, 0, 2), 10);
    cr_expect_eq(engine_busy_mask_ns(e, 0, 0), 0);
    engine_free(e);
}

Test(engine, cross_rank_dependency)
{
    engine *e = mk(2, 1, NULL);
    engine_task_id a = add(e, 0, 0, 30, 1);
    engine_task_id b = add(e, 1, 0, 20, 2);
    engine_task_id c = add(e, 1, 0, 5, 3);
    dep(e, a, b);
    run_ok(e);
    cr_expect_eq(engine_task_start_ns(e, b), 30);
    cr_expect_eq(engine_task_start_ns(e, c), 50);
    cr_expect_eq(engine_busy_mask_ns(e, 1, 0), 30); /* rank 1 idle waiting */
    cr_expect_eq(engine_busy_mask_ns(e, 0, 0), 25); /* rank 0 idle after its task */
    engine_free(e);
}

Test(engine, stream_head_blocks_later_ready_tasks)
{
    /* In-order streams: a ready task waits behind a blocked head. */
    engine *e = mk(2, 1, NULL);
    engine_task_id a = add(e, 0, 0, 40, 1);
    engine_task_id h = add(e, 1, 0, 1, 2);
    engine_task_id x = add(e, 1, 0, 1, 3);
    dep(e, a, h);
    run_ok(e);
    cr_expect_eq(engine_task_start_ns(e, x), 41);
    engine_free(e);
}

Test(engine, join_ends_with_partner)
{
    engine *e = mk(2, 2, NULL);
    engine_task_id c0 = add(e, 0, 0, 10, 1);
    engine_task_id send = add(e, 0, 1, 25, 2);
    engine_task_id recv = add(e, 1, 1, 0, 3);
    engine_task_id f1 = add(e, 1, 0, 5, 4);
    engine_task_id late = add(e, 1, 1, 0, 5); /* behind recv on the receive stream */
    ts_err err;
    dep(e, c0, send);
    cr_assert_eq(engine_task_join(e, recv, send, &err), TS_OK, "%s", err.msg);
    dep(e, recv, f1);
    run_ok(e);
    cr_expect_eq(engine_task_start_ns(e, recv), 10);
    cr_expect_eq(engine_task_end_ns(e, recv), 35);
    cr_expect_eq(engine_task_start_ns(e, f1), 35);
    cr_expect_eq(engine_task_start_ns(e, late), 35);
    engine_free(e);
}

Test(engine, join_after_partner_ended_is_instant)
{
    engine *e = mk(2, 2, NULL);
    engine_task_id send = add(e, 0, 1, 5, 1);
    engine_task_id busy = add(e, 1, 1, 50, 2);
    engine_task_id recv = add(e, 1, 1, 0, 3);
    ts_err err;
    cr_assert_eq(engine_task_join(e, recv, send, &err), TS_OK, "%s", err.msg);
    run_ok(e);
    (void)busy;
    cr_expect_eq(engine_task_start_ns(e, recv), 50);
    cr_expect_eq(engine_task_end_ns(e, recv), 50);
    engine_free(e);
}

/* An external task finished by a timer 42 ns after it starts. */
typedef struct {
    engine_task_id ext;
    engine *e;
} ext_ctx;

static void finish_ext(void *ctx, engine *e, int64_t now_ns)
{
    ext_ctx *c = ctx;
    cr_assert_eq(engine_task_finish(e, c->ext, now_ns, NULL), TS_OK);
}

static void on_start_ext(void *ctx, engine *e, engine_task_id id, const engine_task_info *ti, int64_t now_ns)
{
    (void)ti;
    ext_ctx *c = ctx;
    if (id == c->ext)
        cr_assert_eq(engine_timer_at(e, now_ns + 42, finish_ext, c, NULL), TS_OK);
}

Test(engine, external_task_finished_by_timer)
{
    ext_ctx c = {0};
    engine_hooks h = {.on_start = on_start_ext, .ctx = &c};
    engine *e = mk(1, 1, &h);
    add(e, 0, 0, 8, 1);
    c.ext = add(e, 0, 0, 999, 2);
    engine_task_id after = add(e, 0, 0, 1, 3);
    ts_err err;
    cr_assert_eq(engine_task_set_external(e, c.ext, &err), TS_OK);
    run_ok(e);
    cr_expect_eq(engine_task_end_ns(e, c.ext), 50);
    cr_expect_eq(engine_task_start_ns(e, after), 50);
    cr_expect_eq(engine_events(e), 4); /* 3 task ends + 1 timer */
    engine_free(e);
}

Test(engine, cycle_is_reported)
{
    engine *e = mk(2, 1, NULL);
    engine_task_id a = add(e, 0, 0, 1, 7);
    engine_task_id b = add(e, 1, 0, 1, 8);
    dep(e, a, b);
    dep(e, b, a);
    ts_err err;
    cr_expect_eq(engine_run(e, &err), TS_ESTATE);
    cr_expect(strstr(err.msg, "never started") != NULL, "%s", err.msg);
    engine_free(e);
}

Test(engine, bad_arguments)
{
    engine *e = NULL;
    ts_err err;
    cr_expect_eq(engine_create(0, 2, NULL, &e, &err), TS_EINVAL);
    cr_expect_eq(engine_create(1, 9, NULL, &e, &err), TS_EINVAL);
    e = mk(1, 2, NULL);
    engine_task_id id;
    cr_expect_eq(engine_task_add(e, 1, 0, 1, 0, 0, &id, &err), TS_EINVAL);
    cr_expect_eq(engine_task_add(e, 0, 2, 1, 0, 0, &id, &err), TS_EINVAL);
    cr_expect_eq(engine_task_add(e, 0, 0, -1, 0, 0, &id, &err), TS_EINVAL);
    id = add(e, 0, 0, 1, 0);
    cr_expect_eq(engine_dep_add(e, id, id, &err), TS_EINVAL);
    cr_expect_eq(engine_dep_add(e, id, 5, &err), TS_EINVAL);
    engine_free(e);
}

Test(engine, many_tasks_deterministic)
{
    /* A chain of 10000 tasks ping-ponging between two ranks. */
    int64_t first = -1;
    for (int rep = 0; rep < 2; rep++) {
        engine *e = mk(2, 2, NULL);
        engine_task_id prev = ENGINE_NO_TASK;
        for (int i = 0; i < 10000; i++) {
            engine_task_id t = add(e, i % 2, (i / 2) % 2, 1 + i % 7, (uint32_t)i);
            if (prev != ENGINE_NO_TASK)
                dep(e, prev, t);
            prev = t;
        }
        run_ok(e);
        int64_t ms = engine_makespan_ns(e);
        cr_expect_eq(ms, 1428 * 28 + 10); /* sum of 1+i%7: 1428 cycles of 28, then 1+2+3+4 */
        if (first < 0)
            first = ms;
        cr_expect_eq(ms, first);
        engine_free(e);
    }
}

/* ------------------------------------------------ event queue order */

/* Timers record (time, index); some re-arm at the same instant. */
typedef struct {
    int64_t t[6000];
    int idx[6000];
    int n;
    int next_idx;
} tlog;

static tlog *g_tlog;

static void rec_timer(void *ctx, engine *e, int64_t now_ns)
{
    int idx = (int)(intptr_t)ctx;
    tlog *l = g_tlog;
    l->t[l->n] = now_ns;
    l->idx[l->n++] = idx;
    ts_err err;
    if (idx % 5 == 0 && l->next_idx < 6000) { /* a follower at this very instant: after all queued ones */
        int k = l->next_idx++;
        cr_assert_eq(engine_timer_at(e, now_ns, rec_timer, (void *)(intptr_t)k, &err), TS_OK, "%s", err.msg);
    }
    if (idx % 7 == 0 && l->next_idx < 6000) { /* a later time that earlier pushes already hold: after them */
        int k = l->next_idx++;
        int64_t later = now_ns + (int64_t)(1 + idx % 13) * 1000003;
        cr_assert_eq(engine_timer_at(e, later, rec_timer, (void *)(intptr_t)k, &err), TS_OK, "%s", err.msg);
    }
}

Test(engine, events_run_in_time_then_push_order)
{
    /* 4000 timers over 700 distinct times, pushed in a scrambled order;
     * followers pushed at the current instant, and timers pushed during the
     * run at later times that timers pushed before the run also hold (the
     * queue then sorts events pushed under different current times).
     * Expected: times never decrease, and at one time the push indices
     * increase. */
    static tlog l;
    memset(&l, 0, sizeof l);
    g_tlog = &l;
    engine *e = mk(1, 1, NULL);
    ts_err err;
    uint64_t x = 12345;
    for (int i = 0; i < 4000; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        int64_t t = (int64_t)((x >> 33) % 700) * 1000003;
        cr_assert_eq(engine_timer_at(e, t, rec_timer, (void *)(intptr_t)i, &err), TS_OK, "%s", err.msg);
    }
    l.next_idx = 4000;
    run_ok(e);
    cr_assert_eq(l.n, l.next_idx);
    for (int k = 1; k < l.n; k++) {
        cr_assert(l.t[k] >= l.t[k - 1], "event %d at %lld after one at %lld", k, (long long)l.t[k],
                  (long long)l.t[k - 1]);
        if (l.t[k] == l.t[k - 1])
            cr_assert(l.idx[k] > l.idx[k - 1], "at %lld: push %d ran after push %d", (long long)l.t[k], l.idx[k],
                      l.idx[k - 1]);
    }
    engine_free(e);
}

/* ------------------------------------------------ replicate */

/* Two ranks, three streams: a chain across ranks, a join, a fan-out edge. */
static void build_pair(engine *e)
{
    ts_err err;
    engine_task_id a = add(e, 0, 0, 10, 1), b = add(e, 0, 1, 4, 2), c = add(e, 1, 0, 7, 3), d = add(e, 1, 2, 0, 4),
                   f = add(e, 1, 0, 3, 5), g = add(e, 0, 0, 2, 6);
    dep(e, a, b);
    dep(e, a, c);
    dep(e, a, g);
    dep(e, c, f);
    cr_assert_eq(engine_task_join(e, d, b, &err), TS_OK, "%s", err.msg);
    dep(e, d, f);
}

Test(engine, replicate_copies_every_task)
{
    engine *ref = mk(2, 3, NULL), *e = mk(7, 3, NULL); /* rank 6 stays empty */
    ts_err err;
    build_pair(ref);
    build_pair(e);
    run_ok(ref);
    cr_assert_eq(engine_replicate(e, 3, 2, &err), TS_OK, "%s", err.msg);
    cr_assert_eq(engine_task_count(e), 3 * engine_task_count(ref));
    run_ok(e);
    for (uint32_t i = 0; i < engine_task_count(ref); i++)
        for (uint32_t c = 0; c < 3; c++) {
            engine_task_id k = i * 3 + c;
            cr_expect_eq(engine_task_rank(e, k), engine_task_rank(ref, i) + 2 * (int)c);
            cr_expect_eq(engine_task_stream(e, k), engine_task_stream(ref, i));
            cr_expect_eq(engine_task_tag(e, k), engine_task_tag(ref, i));
            cr_expect_eq(engine_task_start_ns(e, k), engine_task_start_ns(ref, i), "task %u copy %u", i, c);
            cr_expect_eq(engine_task_end_ns(e, k), engine_task_end_ns(ref, i), "task %u copy %u", i, c);
        }
    for (int r = 0; r < 6; r++)
        for (unsigned m = 0; m < 8; m++)
            cr_expect_eq(engine_busy_mask_ns(e, r, m), engine_busy_mask_ns(ref, r % 2, m), "rank %d mask %u", r, m);
    cr_expect_eq(engine_busy_mask_ns(e, 6, 0), engine_makespan_ns(e));
    engine_free(ref);
    engine_free(e);
}

Test(engine, replicate_rejects_bad_shapes)
{
    engine *e = mk(4, 1, NULL);
    ts_err err;
    add(e, 2, 0, 1, 1);
    cr_expect_eq(engine_replicate(e, 2, 2, &err), TS_EINVAL); /* a task on rank 2, outside ranks 0..1 */
    cr_expect(strstr(err.msg, "outside") != NULL, "%s", err.msg);
    cr_expect_eq(engine_replicate(e, 2, 3, &err), TS_EINVAL); /* 6 ranks needed, 4 there */
    cr_expect_eq(engine_replicate(e, 0, 3, &err), TS_EINVAL);
    engine_free(e);
}

/* External copies: hooks end an external copy 100 ns after it starts. */
typedef struct {
    int starts;
} copy_ctx;

static void finish_later(void *ctx, engine *e, engine_task_id id, const engine_task_info *ti, int64_t now_ns)
{
    copy_ctx *c = ctx;
    c->starts++;
    /* what the hook is told is what the queries answer */
    cr_assert_eq(ti->tag, engine_task_tag(e, id));
    cr_assert_eq(ti->mb, engine_task_mb(e, id));
    cr_assert_eq(ti->rank, engine_task_rank(e, id));
    cr_assert_eq(ti->copy, id % engine_copies(e));
    cr_assert(ti->external, "only external copies are marked here");
    cr_assert_eq(engine_task_finish(e, id, now_ns + 100, NULL), TS_OK);
}

Test(engine, replicate_external_per_copy_and_for_all)
{
    copy_ctx c = {0};
    engine_hooks h = {.on_start = finish_later, .ctx = &c, .only_marked = true};
    engine *e = mk(3, 1, &h);
    ts_err err;
    engine_task_id a = add(e, 0, 0, 10, 1), b = add(e, 0, 0, 20, 2);
    cr_assert_eq(engine_replicate(e, 3, 1, &err), TS_OK, "%s", err.msg);
    cr_expect_eq(engine_copies(e), 3);
    /* task a's copies are ids 0, 1, 2; b's are 3, 4, 5 */
    cr_assert_eq(engine_task_set_external(e, a * 3 + 1, &err), TS_OK, "%s", err.msg);    /* a, copy 1 only */
    cr_assert_eq(engine_task_set_external_copies(e, b * 3, &err), TS_OK, "%s", err.msg); /* b, every copy */
    run_ok(e);
    cr_expect_eq(c.starts, 4);
    cr_expect_eq(engine_task_end_ns(e, 0), 10);  /* a copy 0: its own 10 ns */
    cr_expect_eq(engine_task_end_ns(e, 1), 100); /* a copy 1: external */
    cr_expect_eq(engine_task_end_ns(e, 2), 10);
    cr_expect_eq(engine_task_end_ns(e, 3), 110); /* b: external on every copy */
    cr_expect_eq(engine_task_end_ns(e, 4), 200);
    cr_expect_eq(engine_task_end_ns(e, 5), 110);
    cr_expect_eq(engine_task_rank(e, 4), 1);
    engine_free(e);
}

Test(engine, replicate_closes_the_graph)
{
    engine *e = mk(4, 2, NULL);
    ts_err err;
    engine_task_id a = add(e, 0, 0, 1, 1), b = add(e, 0, 1, 1, 2), id;
    cr_assert_eq(engine_replicate(e, 2, 1, &err), TS_OK, "%s", err.msg);
    cr_expect_eq(engine_task_add(e, 0, 0, 1, 3, 0, &id, &err), TS_ESTATE);
    cr_expect(strstr(err.msg, "replicate") != NULL, "%s", err.msg);
    cr_expect_eq(engine_dep_add(e, a * 2, b * 2, &err), TS_ESTATE);
    cr_expect_eq(engine_task_join(e, a * 2, b * 2, &err), TS_EINVAL);
    cr_expect_eq(engine_replicate(e, 2, 1, &err), TS_ESTATE);
    cr_expect_eq(engine_task_start_ns(e, 0), -1); /* not run yet */
    run_ok(e);
    cr_expect_eq(engine_task_end_ns(e, b * 2 + 1), 1);
    engine_free(e);
}

Test(engine, keep_times_of_the_first_copies_only)
{
    engine *ref = mk(2, 3, NULL), *e = mk(6, 3, NULL);
    ts_err err;
    build_pair(ref);
    build_pair(e);
    run_ok(ref);
    cr_assert_eq(engine_keep_times(e, 2, &err), TS_EINVAL); /* one copy before replicate */
    cr_assert_eq(engine_replicate(e, 3, 2, &err), TS_OK, "%s", err.msg);
    cr_assert_eq(engine_keep_times(e, 0, &err), TS_EINVAL);
    cr_assert_eq(engine_keep_times(e, 4, &err), TS_EINVAL);
    cr_assert_eq(engine_keep_times(e, 2, &err), TS_OK, "%s", err.msg);
    run_ok(e);
    cr_expect_eq(engine_keep_times(e, 1, &err), TS_ESTATE);
    uint32_t n = engine_task_count(ref);
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t c = 0; c < 3; c++) {
            int64_t want_s = c < 2 ? engine_task_start_ns(ref, i) : -1,
                    want_e = c < 2 ? engine_task_end_ns(ref, i) : -1;
            cr_expect_eq(engine_task_start_ns(e, i * 3 + c), want_s, "task %u copy %u", i, c);
            cr_expect_eq(engine_task_end_ns(e, i * 3 + c), want_e, "task %u copy %u", i, c);
        }
    /* copy 2 ran all the same: its busy masks equal the original's */
    for (unsigned m = 0; m < 8; m++)
        cr_expect_eq(engine_busy_mask_ns(e, 5, m), engine_busy_mask_ns(ref, 1, m), "mask %u", m);
    engine_free(ref);
    engine_free(e);
}

/* Counts on_end calls per copy (of 3). */
static void count_end(void *ctx, engine *e, engine_task_id id, const engine_task_info *ti, int64_t now_ns)
{
    (void)e;
    (void)id;
    (void)now_ns;
    cr_assert(!ti->external);
    ((int *)ctx)[ti->copy]++;
}

Test(engine, on_end_copies_limits_the_end_hook)
{
    int n_end[3] = {0}, all[3] = {0};
    engine_hooks h = {.on_end = count_end, .ctx = n_end, .on_end_copies = 1};
    engine_hooks ha = {.on_end = count_end, .ctx = all};
    engine *e = mk(6, 3, &h), *ea = mk(6, 3, &ha);
    ts_err err;
    build_pair(e);
    build_pair(ea);
    cr_assert_eq(engine_replicate(e, 3, 2, &err), TS_OK, "%s", err.msg);
    cr_assert_eq(engine_replicate(ea, 3, 2, &err), TS_OK, "%s", err.msg);
    run_ok(e);
    run_ok(ea);
    cr_expect_eq(n_end[0], 6); /* build_pair's six tasks, copy 0 only */
    cr_expect_eq(n_end[1] + n_end[2], 0);
    for (int c = 0; c < 3; c++)
        cr_expect_eq(all[c], 6, "copy %d", c);
    cr_expect_eq(engine_makespan_ns(e), engine_makespan_ns(ea)); /* the hook changes nothing else */
    engine_free(e);
    engine_free(ea);
}

/* Logs ends as tag x 10 + copy and a timer as 99; copy 1 of tag 1 is
 * external: its start finishes it 10 ns later, then sets a timer then. */
typedef struct {
    int log[32], n;
} run_log;

static void log_timer(void *ctx, engine *e, int64_t now_ns)
{
    (void)e;
    (void)now_ns;
    run_log *l = ctx;
    l->log[l->n++] = 99;
}

static void run_start(void *ctx, engine *e, engine_task_id id, const engine_task_info *ti, int64_t now_ns)
{
    if (ti->tag != 1 || ti->copy != 1)
        return;
    cr_assert_eq(engine_task_finish(e, id, now_ns + 10, NULL), TS_OK);
    cr_assert_eq(engine_timer_at(e, now_ns + 10, log_timer, ctx, NULL), TS_OK);
}

static void run_end(void *ctx, engine *e, engine_task_id id, const engine_task_info *ti, int64_t now_ns)
{
    (void)e;
    (void)id;
    (void)now_ns;
    run_log *l = ctx;
    l->log[l->n++] = (int)(ti->tag * 10 + ti->copy);
}

Test(engine, copies_in_lockstep_end_in_push_order)
{
    /* Four copies of A (10 ns) then B (0 ns). The ends of A at 10 ns are
     * pushed in copy order, with the timer between copies 1 and 2; each B
     * is pushed while its A ends, after all of those. The queue may hold
     * copies in lockstep as one event, but the order stays the push order. */
    run_log l = {{0}, 0};
    engine_hooks h = {.on_start = run_start, .on_end = run_end, .ctx = &l};
    engine *e = mk(4, 1, &h);
    ts_err err;
    engine_task_id a = add(e, 0, 0, 10, 1);
    add(e, 0, 0, 0, 2);
    cr_assert_eq(engine_replicate(e, 4, 1, &err), TS_OK, "%s", err.msg);
    cr_assert_eq(engine_task_set_external(e, a * 4 + 1, &err), TS_OK, "%s", err.msg);
    run_ok(e);
    int want[] = {10, 11, 99, 12, 13, 20, 21, 22, 23};
    cr_assert_eq(l.n, 9);
    for (int k = 0; k < 9; k++)
        cr_expect_eq(l.log[k], want[k], "position %d: %d, want %d", k, l.log[k], want[k]);
    cr_expect_eq(engine_events(e), 9);
    engine_free(e);
}

/* Counts on_start calls per copy (of 3) and finishes external copies 5 ns
 * after they start. */
typedef struct {
    int starts[3];
} start_count;

static void count_start(void *ctx, engine *e, engine_task_id id, const engine_task_info *ti, int64_t now_ns)
{
    ((start_count *)ctx)->starts[ti->copy]++;
    if (ti->external)
        cr_assert_eq(engine_task_finish(e, id, now_ns + 5, NULL), TS_OK);
}

Test(engine, on_start_copies_keeps_external_starts_on_every_copy)
{
    start_count n = {{0}};
    engine_hooks h = {.on_start = count_start, .ctx = &n, .on_start_copies = 1};
    engine *e = mk(6, 3, &h);
    ts_err err;
    build_pair(e);
    cr_assert_eq(engine_replicate(e, 3, 2, &err), TS_OK, "%s", err.msg);
    cr_assert_eq(engine_task_set_external_copies(e, 0, &err), TS_OK, "%s", err.msg); /* build_pair's first task */
    run_ok(e);
    cr_expect_eq(n.starts[0], 6); /* every task of copy 0 */
    cr_expect_eq(n.starts[1], 1); /* the external one only */
    cr_expect_eq(n.starts[2], 1);
    for (uint32_t c = 0; c < 3; c++)
        cr_expect_eq(engine_task_end_ns(e, c), 5, "copy %u: finished by its hook", c);
    engine_free(e);
}

Test(engine, predecessors_are_limited)
{
    engine *e = mk(1, 2, NULL);
    ts_err err;
    engine_task_id last = add(e, 0, 1, 1, 0);
    for (int k = 0; k < ENGINE_MAX_PRED; k++)
        dep(e, add(e, 0, 0, 1, 1), last);
    engine_task_id one_more = add(e, 0, 0, 1, 1);
    cr_assert_eq(engine_dep_add(e, one_more, last, &err), TS_EINVAL);
    cr_expect(strstr(err.msg, "2047") != NULL, "%s", err.msg);
    cr_assert_eq(engine_task_join(e, last, one_more, &err), TS_EINVAL);
    run_ok(e);                                                    /* the limit itself runs */
    cr_expect_eq(engine_task_start_ns(e, last), ENGINE_MAX_PRED); /* after the 2047 one-ns tasks before it */
    engine_free(e);
}

Test(engine, account_ranks_limits_the_busy_masks)
{
    engine *ref = mk(2, 3, NULL), *e = mk(6, 3, NULL);
    ts_err err;
    build_pair(ref);
    build_pair(e);
    run_ok(ref);
    cr_assert_eq(engine_replicate(e, 3, 2, &err), TS_OK, "%s", err.msg);
    cr_assert_eq(engine_account_ranks(e, 7, &err), TS_EINVAL);
    cr_assert_eq(engine_account_ranks(e, 2, &err), TS_OK, "%s", err.msg);
    run_ok(e);
    cr_expect_eq(engine_account_ranks(e, 2, &err), TS_ESTATE);
    for (unsigned m = 0; m < 8; m++) {
        cr_expect_eq(engine_busy_mask_ns(e, 1, m), engine_busy_mask_ns(ref, 1, m), "mask %u", m);
        cr_expect_eq(engine_busy_mask_ns(e, 2, m), -1, "mask %u", m);
    }
    /* the copies still ran: same times as the original */
    cr_expect_eq(engine_task_end_ns(e, 3 * 5 + 2), engine_task_end_ns(ref, 5));
    engine_free(ref);
    engine_free(e);
}

Test(engine, end_time_overflow_is_an_error)
{
    engine *e = mk(1, 1, NULL);
    add(e, 0, 0, 5, 1);
    add(e, 0, 0, ((int64_t)1 << 62) - 2, 2); /* starts at 5: ends past the 2^62 ns horizon */
    ts_err err;
    cr_expect_eq(engine_run(e, &err), TS_EINVAL);
    cr_expect(strstr(err.msg, "past 2^62 ns") != NULL, "%s", err.msg);
    engine_free(e);
}

Test(engine, durations_past_the_horizon_are_refused)
{
    /* a duration past 2^62 ns is an error naming the task, never a wrapped time */
    engine *e = mk(1, 1, NULL);
    engine_task_id id;
    ts_err err;
    cr_expect_eq(engine_task_add(e, 0, 0, ((int64_t)1 << 62) + 1, 7, 3, &id, &err), TS_EINVAL);
    cr_expect(strstr(err.msg, "tag 7, micro-batch 3") && strstr(err.msg, "2^62"), "%s", err.msg);
    cr_expect_eq(engine_task_add(e, 0, 0, INT64_MAX, 7, 3, &id, &err), TS_EINVAL);
    engine_free(e);
}

Test(engine, copy_ids_map_back_to_their_task)
{
    /* ids i x copies + c: the engine finds i by a multiply and a shift */
    static const uint32_t copies[] = {1, 3, 7, 48, 512, 1000};
    for (size_t k = 0; k < sizeof copies / sizeof copies[0]; k++) {
        uint32_t C = copies[k];
        engine *e = mk((int)C, 1, NULL);
        for (uint32_t i = 0; i < 300; i++)
            add(e, 0, 0, 1, 1000 + i);
        ts_err err;
        cr_assert_eq(engine_replicate(e, C, 1, &err), TS_OK, "%s", err.msg);
        for (uint32_t id = 0; id < 300 * C; id++) {
            cr_assert_eq(engine_task_tag(e, id), 1000 + id / C, "copies %u id %u", C, id);
            cr_assert_eq(engine_task_rank(e, id), (int)(id % C), "copies %u id %u", C, id);
        }
        engine_free(e);
    }
}

Test(engine, replicate_one_copy_is_the_identity)
{
    /* one copy of ranks 0..0: the engine stays as it was, tasks may still be
     * added on any rank */
    engine *e = mk(3, 2, NULL);
    ts_err err;
    engine_task_id a = add(e, 0, 1, 4, 1);
    cr_assert_eq(engine_replicate(e, 1, 1, &err), TS_OK, "%s", err.msg);
    engine_task_id b = add(e, 2, 1, 6, 2);
    dep(e, a, b);
    run_ok(e);
    cr_expect_eq(engine_task_end_ns(e, b), 10);
    cr_expect_eq(engine_task_rank(e, b), 2);
    cr_expect_eq(engine_busy_mask_ns(e, 2, 2), 6);
    engine_free(e);
}
