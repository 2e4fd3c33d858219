/* Unit tests for the memory timeline (sim/core/mem.h): changes scheduled
 * in the future, in any order, are applied in time order (ties in the order
 * they were added); the peak, its time and the samples match a replay of
 * the same changes sorted by hand. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>

#include "sim/core/mem.h"

/* A change: bytes at t_ns, added to the tracker at now_ns (<= t_ns). */
typedef struct {
    int64_t t_ns, now_ns, delta;
} change;

/* Peak and its time of the changes applied in (t_ns, index) order. */
static void replay(const change *c, int n, int64_t *peak, int64_t *peak_t)
{
    int *order = malloc(sizeof *order * (size_t)n);
    cr_assert_not_null(order);
    for (int i = 0; i < n; i++)
        order[i] = i;
    for (int i = 1; i < n; i++) /* insertion sort: stable on t_ns */
        for (int j = i; j > 0 && c[order[j - 1]].t_ns > c[order[j]].t_ns; j--) {
            int x = order[j];
            order[j] = order[j - 1];
            order[j - 1] = x;
        }
    int64_t live = 0;
    *peak = 0;
    *peak_t = 0;
    for (int i = 0; i < n; i++) {
        live += c[order[i]].delta;
        if (live > *peak) {
            *peak = live;
            *peak_t = c[order[i]].t_ns;
        }
    }
    free(order);
}

/* Changes added ahead of time and out of order (a later one scheduled
 * before earlier pending ones, equal times): the same peak, time and
 * samples as the sorted replay. */
Test(mem, future_changes_apply_in_time_order)
{
    /* alloc 100 at 10..15, a free of 60 at 12 added last; 40 at 12 (a tie:
     * after the free, as added later); 500 at 30 then -500 at 31, added
     * before 20 and 25 (inserted ahead of them) */
    const change c[] = {{10, 0, 100},  {15, 0, 50}, {12, 0, -60}, {12, 0, 40}, {30, 0, 500},
                        {31, 0, -500}, {20, 0, 70}, {25, 0, -70}, {40, 35, 5}, {36, 35, 7}};
    const int n = (int)(sizeof c / sizeof c[0]);
    mem_tracker *m = NULL;
    ts_err e;
    err_clear(&e);
    cr_assert_eq(mem_create(1, true, &m, &e), TS_OK);
    for (int i = 0; i < n; i++)
        mem_add(m, 0, MEM_ACTIV, c[i].delta, c[i].t_ns, c[i].now_ns);
    cr_assert_eq(mem_check(m, &e), TS_OK, "%s", e.msg);
    int64_t peak, peak_t;
    replay(c, n, &peak, &peak_t);
    cr_assert_eq(mem_peak_bytes(m, 0), peak);
    cr_assert_eq(mem_peak_time_ns(m, 0), peak_t);
    cr_assert_eq(peak, 630);
    cr_assert_eq(peak_t, 30);
    size_t ns;
    const mem_sample *s = mem_samples(m, 0, &ns);
    for (size_t i = 1; i < ns; i++)
        cr_assert_lt(s[i - 1].t_ns, s[i].t_ns, "samples in time order");
    cr_assert_eq(s[ns - 1].bytes, 142);
    mem_free(m);
}

/* Many changes, each scheduled ahead in a scrambled order and flushed by
 * later ones: the peak matches the replay. */
Test(mem, scrambled_changes_match_the_replay)
{
    enum { N = 400 };
    change c[N];
    uint32_t x = 12345;
    for (int i = 0; i < N; i++) {
        x = x * 1103515245u + 12345u;
        int64_t now = i * 10;
        c[i] = (change){now + (int64_t)(x >> 16) % 200, now, (i % 3 == 2) ? -5 : 7};
    }
    c[0] = (change){0, 0, 10000}; /* room for the frees that come first */
    mem_tracker *m = NULL;
    ts_err e;
    err_clear(&e);
    cr_assert_eq(mem_create(1, false, &m, &e), TS_OK);
    for (int i = 0; i < N; i++)
        mem_add(m, 0, MEM_ACTIV, c[i].delta, c[i].t_ns, c[i].now_ns);
    cr_assert_eq(mem_check(m, &e), TS_OK, "%s", e.msg);
    int64_t peak, peak_t;
    replay(c, N, &peak, &peak_t);
    cr_assert_eq(mem_peak_bytes(m, 0), peak);
    cr_assert_eq(mem_peak_time_ns(m, 0), peak_t);
    mem_free(m);
}
