/* --overlap-moe-expert-parallel-comm in the flow modes (sim/core/lower.h,
 * sim/core/ep_pair_steps.h): on an uncontended fabric the interleaved
 * steps give the default mode's iteration within 1% (within 1e-6 on
 * B200, where neither mode has an SM share), with and without
 * --delay-wgrad-compute; metamorphic: the overlap never makes a flow-mode
 * run slower, nor does the delay without an SM share; the same agreement
 * with context parallelism (its collectives on the compute stream). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>

#include "sim/config/flags.h"
#include "sim/core/simulate.h"
#include "sim/net/net_simulate.h"
#include "sim/util/opt.h"

/* Four Mixtral-like layers, 16 experts over EP 16 (two DGX nodes of the
 * built-in topology of the GPU), t 1, p 1, 4 micro-batches per replica,
 * forced balance (the default mode's all-to-all carries no skew). */
static const char *BASE[] = {"--model",
                             "mixtral-8x7b",
                             "--num-layers",
                             "4",
                             "--global-batch-size",
                             "128",
                             "--gpus",
                             "32",
                             "--num-experts",
                             "16",
                             "--expert-model-parallel-size",
                             "16",
                             "--moe-router-force-load-balancing",
                             "--tensor-model-parallel-size",
                             "1",
                             "--pipeline-model-parallel-size",
                             "1",
                             "--moe-token-dispatcher-type",
                             "alltoall"};
#define NBASE (int)(sizeof BASE / sizeof BASE[0])

/* Simulate BASE plus the NULL-terminated extra flags; *iter_ns the
 * iteration. The status of the run (err says why). */
static int run(int64_t *iter_ns, ts_err *err, const char *first, ...)
{
    config c;
    flags_state fs;
    opt_table t;
    net_sim_opts no;
    const char *argv[64];
    int argc = 0, rc;
    argv[argc++] = "simulate";
    for (int i = 0; i < NBASE; i++)
        argv[argc++] = BASE[i];
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a && argc < 63; a = va_arg(ap, const char *))
        argv[argc++] = a;
    va_end(ap);
    opt_table_init(&t, "test", "");
    cr_assert_eq(flags_register(&fs, &t, &c, err), TS_OK, "%s", err->msg);
    cr_assert_eq(net_sim_opts_register(&no, &t, err), TS_OK, "%s", err->msg);
    rc = flags_parse(&fs, &t, argc, (char **)argv, err);
    if (rc == TS_OK)
        rc = flags_finish(&fs, &t, err);
    net_simulate *ns = NULL;
    if (rc == TS_OK && net_sim_opts_active(&no))
        rc = net_simulate_new(&c, &no, &ns, err);
    if (rc == TS_OK) {
        simulate_opts so = {.net = ns ? net_simulate_hooks(ns) : NULL};
        simulate_result *r = NULL;
        rc = simulate_run(&c, &so, &r, err);
        if (rc == TS_OK)
            *iter_ns = r->iteration_ns;
        simulate_result_free(r);
    }
    net_simulate_free(ns);
    config_free(&c);
    flags_release(&fs);
    opt_table_free(&t);
    return rc;
}

#define F "--overlap-moe-expert-parallel-comm"

static void agree(const char *gpu, const char *delay, bool exact)
{
    ts_err err;
    int64_t d = 0, s = 0, full = 0, off = 0;
    cr_assert_eq(run(&d, &err, "--gpu", gpu, F, delay, NULL), TS_OK, "%s", err.msg);
    cr_assert_eq(run(&s, &err, "--gpu", gpu, F, "--network-flows", delay, NULL), TS_OK, "%s", err.msg);
    cr_assert_eq(run(&full, &err, "--gpu", gpu, F, "--full", delay, NULL), TS_OK, "%s", err.msg);
    cr_assert_eq(run(&off, &err, "--gpu", gpu, "--network-flows", NULL), TS_OK, "%s", err.msg);
    double r = (double)s / (double)d;
    cr_expect(fabs(r - 1) <= 0.01, "%s %s: flows %lld ns, default %lld ns", gpu, delay ? delay : "", (long long)s,
              (long long)d);
    if (exact) /* the same times but for the flows' nanosecond rounding */
        cr_expect(fabs(r - 1) <= 1e-6, "%s: flows %lld ns, default %lld ns", gpu, (long long)s, (long long)d);
    cr_expect_eq(s, full, "symmetric %lld ns, full %lld ns", (long long)s, (long long)full);
    cr_expect_lt(s, off, "%s: the overlap in the flow mode: %lld ns, without %lld ns", gpu, (long long)s,
                 (long long)off);
}

Test(ep_pair_flows, agree_with_the_default_mode)
{
    agree("B200-SXM-180GB", NULL, true);
    agree("B200-SXM-180GB", "--delay-wgrad-compute", true);
    agree("H100-SXM5-80GB", NULL, false);
    agree("H100-SXM5-80GB", "--delay-wgrad-compute", false);
}

Test(ep_pair_flows, delay_never_slower_without_an_sm_share)
{
    ts_err err;
    int64_t a = 0, b = 0;
    cr_assert_eq(run(&a, &err, "--gpu", "B200-SXM-180GB", F, "--network-flows", NULL), TS_OK, "%s", err.msg);
    cr_assert_eq(run(&b, &err, "--gpu", "B200-SXM-180GB", F, "--network-flows", "--delay-wgrad-compute", NULL), TS_OK,
                 "%s", err.msg);
    cr_expect_leq(b, a, "with the delay %lld ns, without %lld ns", (long long)b, (long long)a);
}

/* Context parallelism: the pair's CP collectives run on the compute
 * stream in the flow modes (ep_pair_steps.h), as in the default mode's
 * spans; the iteration within 1% of it, the overlap still faster. */
Test(ep_pair_flows, context_parallel_agrees)
{
    ts_err err;
    int64_t d = 0, s = 0, full = 0, off = 0;
    const char *cp[] = {"--context-parallel-size", "2"};
    cr_assert_eq(run(&d, &err, "--gpu", "H100-SXM5-80GB", cp[0], cp[1], F, NULL), TS_OK, "%s", err.msg);
    cr_assert_eq(run(&s, &err, "--gpu", "H100-SXM5-80GB", cp[0], cp[1], F, "--network-flows", NULL), TS_OK, "%s",
                 err.msg);
    cr_assert_eq(run(&full, &err, "--gpu", "H100-SXM5-80GB", cp[0], cp[1], F, "--full", NULL), TS_OK, "%s", err.msg);
    cr_assert_eq(run(&off, &err, "--gpu", "H100-SXM5-80GB", cp[0], cp[1], "--network-flows", NULL), TS_OK, "%s",
                 err.msg);
    double r = (double)s / (double)d;
    cr_expect(fabs(r - 1) <= 0.01, "cp 2: flows %lld ns, default %lld ns", (long long)s, (long long)d);
    cr_expect_eq(s, full, "cp 2: symmetric %lld ns, full %lld ns", (long long)s, (long long)full);
    cr_expect_lt(s, off, "cp 2: the overlap in the flow mode: %lld ns, without %lld ns", (long long)s, (long long)off);
}
