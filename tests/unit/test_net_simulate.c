/* The network model inside simulate_run: symmetric and full modes agree
 * exactly on a uniform cluster; a straggler slows the pipeline by its extra
 * compute on the critical path; what-ifs need --full. */
#include <criterion/criterion.h>
#include <string.h>

#include "sim/config/flags.h"
#include "sim/core/simulate.h"
#include "sim/net/net_simulate.h"
#include "sim/util/opt.h"

/* A small GPT on 4 DGX H100 servers: t 8, p 2, d 2, 8 micro-batches, 1F1B.
 * The built-in H100 topology's rail leaves hold all 4 servers, so no two
 * groups share a link. */
static const char *BASE[] = {"--model",
                             "gpt3-175b",
                             "--num-layers",
                             "4",
                             "--hidden-size",
                             "1024",
                             "--num-attention-heads",
                             "16",
                             "--seq-length",
                             "1024",
                             "--micro-batch-size",
                             "1",
                             "--global-batch-size",
                             "16",
                             "--tensor-model-parallel-size",
                             "8",
                             "--pipeline-model-parallel-size",
                             "2",
                             "--gpus",
                             "32",
                             "--gpu",
                             "H100-SXM5-80GB",
                             "--schedule",
                             "1f1b",
                             "--recompute-granularity",
                             "none"};
#define NBASE (int)(sizeof BASE / sizeof BASE[0])

typedef struct {
    simulate_result *r;
    net_engine_stats st;
} run_t;

static int run(const char **extra, int n_extra, run_t *out, ts_err *err)
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
    for (int i = 0; i < n_extra; i++)
        argv[argc++] = extra[i];
    opt_table_init(&t, "test", "");
    cr_assert_eq(flags_register(&fs, &t, &c, err), TS_OK, "%s", err->msg);
    cr_assert_eq(net_sim_opts_register(&no, &t, err), TS_OK, "%s", err->msg);
    cr_assert_eq(flags_parse(&fs, &t, argc, (char **)argv, err), TS_OK, "%s", err->msg);
    cr_assert_eq(flags_finish(&fs, &t, err), TS_OK, "%s", err->msg);
    net_simulate *ns = NULL;
    memset(out, 0, sizeof *out);
    rc = net_simulate_new(&c, &no, &ns, err);
    if (rc == TS_OK) {
        simulate_opts so = {.net = net_simulate_hooks(ns)};
        rc = simulate_run(&c, &so, &out->r, err);
        out->st = net_simulate_stats(ns);
    }
    net_simulate_free(ns);
    config_free(&c);
    flags_release(&fs);
    opt_table_free(&t);
    return rc;
}

Test(net_simulate, symmetric_and_full_agree_exactly)
{
    ts_err err;
    run_t a, b;
    const char *sym[] = {"--network-flows"}, *full[] = {"--full"};
    cr_assert_eq(run(sym, 1, &a, &err), TS_OK, "%s", err.msg);
    cr_assert_eq(run(full, 1, &b, &err), TS_OK, "%s", err.msg);
    cr_assert_eq(a.r->iteration_ns, b.r->iteration_ns, "symmetric %lld ns, full %lld ns", (long long)a.r->iteration_ns,
                 (long long)b.r->iteration_ns);
    for (int i = 0; i < SIMULATE_COMM_KINDS; i++)
        cr_assert_float_eq(a.r->exposed_ns[i], b.r->exposed_ns[i], 1e-6);
    cr_assert(b.st.collectives > a.st.collectives && b.st.flows.flows_started > a.st.flows.flows_started);
    cr_assert(b.r->tasks > a.r->tasks);
    simulate_result_free(a.r);
    simulate_result_free(b.r);
}

/* Rank 8 (tp 0, dp 1, pp 0) computes 1.5x slower. Its tensor group waits
 * for it at every all-reduce, its replica's pipeline for its stage, the
 * data-parallel reduction for its replica: the iteration grows. By how much
 * the critical path implies: it gains at most the straggler's extra work,
 * 0.5 x its compute time C (only tasks of that rank got longer, and the
 * critical path holds each at most once), and at least 1.5 C - M0 (the
 * straggler alone now computes for 1.5 C). The exact amount for a pipeline
 * whose critical path is known in closed form is checked in test_net_engine
 * (m x T). */
Test(net_simulate, straggler_slows_the_pipeline_within_its_critical_path_bounds)
{
    ts_err err;
    run_t a, b;
    const char *full[] = {"--full"}, *slow[] = {"--full", "--straggler", "8:1.5"};
    cr_assert_eq(run(full, 1, &a, &err), TS_OK, "%s", err.msg);
    cr_assert_eq(run(slow, 3, &b, &err), TS_OK, "%s", err.msg);
    double C = (double)a.r->ranks[0].busy_ns; /* rank (0, 0, 0) is the straggler's twin */
    double M0 = (double)a.r->iteration_ns, got = (double)(b.r->iteration_ns - a.r->iteration_ns);
    double lo = 1.5 * C - M0 > 0 ? 1.5 * C - M0 : 0, hi = 0.5 * C;
    printf("straggler 8:1.5: iteration %.0f -> %.0f ns (+%.0f; bounds %.0f .. %.0f)\n", M0, M0 + got, got, lo, hi);
    cr_assert(got > 0 && got >= lo && got <= hi, "straggler added %.0f ns, outside [%.0f, %.0f]", got, lo, hi);
    simulate_result_free(a.r);
    simulate_result_free(b.r);
}

Test(net_simulate, whatifs_need_full)
{
    ts_err err;
    run_t a;
    const char *x[] = {"--straggler", "3:2"};
    cr_assert_eq(run(x, 2, &a, &err), TS_EINVAL);
    cr_assert(strstr(err.msg, "--full"), "%s", err.msg);
    const char *y[] = {"--full", "--degrade-link", "nic0.0-sw7.7:0.5"};
    cr_assert_eq(run(y, 3, &a, &err), TS_EINVAL);
    cr_assert(strstr(err.msg, "sw7.7"), "%s", err.msg);
}

/* Halving the NIC link of one server's rail 0 slows that rail's
 * data-parallel ring and pipeline transfers: the iteration is slower. */
Test(net_simulate, degraded_link_slows)
{
    ts_err err;
    run_t a, b;
    const char *full[] = {"--full"}, *deg[] = {"--full", "--degrade-link", "nic1.0-sw1.0:0.25"};
    cr_assert_eq(run(full, 1, &a, &err), TS_OK, "%s", err.msg);
    int rc = run(deg, 3, &b, &err);
    cr_assert_eq(rc, TS_OK, "%s", err.msg);
    cr_assert(b.r->iteration_ns > a.r->iteration_ns, "%lld vs %lld", (long long)b.r->iteration_ns,
              (long long)a.r->iteration_ns);
    simulate_result_free(a.r);
    simulate_result_free(b.r);
}
