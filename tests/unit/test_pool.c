/* Unit tests for sim/pool: every item runs once, done() is serialised, a
 * failing done() stops further dispatch, bad thread counts are refused. */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdint.h>

#include "sim/search/pool.h"
#include "sim/util/err.h"

typedef struct {
    atomic_int runs[64];
    int done_calls; /* only touched under the pool's lock */
    int in_done;    /* detects concurrent done() calls */
    int overlap;
    size_t fail_at; /* done() of this item fails; SIZE_MAX for never */
} counter;

static int work(void *ctx, size_t i)
{
    counter *c = ctx;
    atomic_fetch_add(&c->runs[i], 1);
    return TS_OK;
}

static int done(void *ctx, size_t i, int st)
{
    counter *c = ctx;
    if (c->in_done++)
        c->overlap = 1;
    c->done_calls++;
    c->in_done--;
    return i == c->fail_at ? TS_ENOMEM : st;
}

Test(pool, every_item_once_for_any_thread_count)
{
    for (int threads = 1; threads <= 4; threads++) {
        counter c = {.fail_at = SIZE_MAX};
        cr_assert_eq(pool_run(64, threads, work, done, &c), TS_OK);
        for (int i = 0; i < 64; i++)
            cr_assert_eq(atomic_load(&c.runs[i]), 1, "item %d with %d threads", i, threads);
        cr_assert_eq(c.done_calls, 64);
        cr_assert_eq(c.overlap, 0);
    }
}

Test(pool, failing_done_stops_dispatch_and_is_returned)
{
    counter c = {.fail_at = 3};
    cr_assert_eq(pool_run(64, 1, work, done, &c), TS_ENOMEM);
    cr_assert_eq(c.done_calls, 4, "one thread stops right after item 3");
    cr_assert_eq(atomic_load(&c.runs[4]), 0);
}

Test(pool, empty_and_bad_thread_count)
{
    counter c = {.fail_at = SIZE_MAX};
    cr_assert_eq(pool_run(0, 2, work, done, &c), TS_OK);
    cr_assert_eq(c.done_calls, 0);
    cr_assert_eq(pool_run(4, 0, work, done, &c), TS_EINVAL);
}
