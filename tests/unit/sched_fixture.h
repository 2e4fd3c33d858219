/* sched_fixture — schedules generated for the schedule tests: the options a
 * test names, the rest at their defaults, failing the test (with the
 * generator's message) if generation fails. The caller frees the schedule
 * with sched_free. Header-only: each Criterion test is its own program. */
#ifndef TRAINSIM_TESTS_SCHED_FIXTURE_H
#define TRAINSIM_TESTS_SCHED_FIXTURE_H

#include <criterion/criterion.h>
#include <stdbool.h>

#include "sim/sched/sched.h"
#include "sim/sched/sched_generate.h"

/* The schedule of options o; fails the test naming kind, p, m, v. */
static inline sched *sched_fixture_opts(const sched_opts *o)
{
    ts_err e;
    sched *s = NULL;
    int rc = sched_generate(o, &s, &e);
    cr_assert_eq(rc, TS_OK, "%s p=%d m=%d v=%d: %s", sched_kind_name(o->kind), o->p, o->m, o->v, e.msg);
    return s;
}

/* Schedule kind k for p ranks, m micro-batches, v chunks per rank, with
 * SEND/RECV actions if comm and gradient reductions and optimizer steps if
 * reduce. */
static inline sched *sched_fixture(sched_kind k, int p, int m, int v, bool comm, bool reduce)
{
    sched_opts o;
    sched_opts_default(&o, k);
    o.p = p, o.m = m, o.v = v, o.with_comm = comm, o.with_reduce_optim = reduce;
    return sched_fixture_opts(&o);
}

#endif
