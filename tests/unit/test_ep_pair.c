/* --overlap-moe-expert-parallel-comm (sim/core/ep_pair.h): the phase of a
 * transfer beside compute that loses an SM share, the pairs of a rank's
 * actions, the rules as errors, the simulated iteration against the closed
 * form on a p = 1 case, and metamorphic properties (the overlap never
 * slower; a slower NIC never faster). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/config/topo.h"
#include "sim/core/ep_pair.h"
#include "sim/core/overlap.h"
#include "sim/core/simulate.h"
#include "sim/sched/sched_generate.h"
#include "tests/unit/flags_run.h"

static void fini(void)
{
    flags_run_free();
}

/* Four Mixtral-like layers on H100s (as test_moe_load.c's), 8 micro-batches
 * per replica at p = 1. */
#define MIXD(gpus)                                                                                                     \
    "--num-layers", "4", "--hidden-size", "4096", "--num-attention-heads", "32", "--group-query-attention",            \
        "--num-query-groups", "8", "--ffn-hidden-size", "14336", "--swiglu", "--disable-bias-linear", "--seq-length",  \
        "4096", "--micro-batch-size", "1", "--bf16", "--gpu", "H100-SXM5-80GB", "--num-experts", "16",                 \
        "--moe-router-force-load-balancing", "--gpus", gpus
#define MIX(gpus) MIXD(gpus), "--moe-token-dispatcher-type", "alltoall"

Test(ep_pair, shared_phase_closed_form)
{
    /* no SM share: max(comm, compute) */
    cr_expect_eq(overlap_shared_phase_ns(100, 50, 0, 20), 100);
    cr_expect_eq(overlap_shared_phase_ns(30, 50, 0, 20), 50);
    /* 20 of 132 SMs: compute 50 slowed to 58.9 while the transfer runs */
    cr_expect_eq(overlap_shared_phase_ns(100, 50, 132, 20), 100);
    cr_expect_eq(overlap_shared_phase_ns(30, 50, 132, 20), 55); /* 50 + 30 x 20 / 132 = 54.5 */
    cr_expect_eq(overlap_shared_phase_ns(0, 50, 132, 20), 50);
    cr_expect_eq(overlap_shared_phase_ns(-5, -5, 132, 20), 0);
    /* continuous where the transfer just covers the slowed compute */
    cr_expect_eq(overlap_shared_phase_ns(66, 56, 132, 20), 66);
    int64_t e_f, e_b;
    ep_pair_times(100, 400, 300, 80, 0, &e_f, &e_b); /* exposed = max(0, a - partner's compute) */
    cr_expect_eq(e_f, 20);
    cr_expect_eq(e_b, 0);
    /* never more than alone, never below the no-share case */
    for (int64_t a = 0; a <= 1000; a += 37)
        for (int64_t c = 0; c <= 1000; c += 41) {
            ep_pair_times(a, c, a, c, 132, &e_f, &e_b);
            cr_assert(e_f <= a && e_f >= (a > c ? a - c : 0), "a %lld c %lld: %lld", (long long)a, (long long)c,
                      (long long)e_f);
        }
}

static sched *gen(sched_kind k, int p, int m, int v)
{
    sched_opts o;
    sched_opts_default(&o, k);
    o.p = p;
    o.m = m;
    o.v = v;
    sched *s = NULL;
    ts_err err;
    cr_assert_eq(sched_generate(&o, &s, &err), TS_OK, "%s", err.msg);
    return s;
}

/* Every pair is an F and a B or I of different micro-batches with only
 * communication between them; returns the pairs of rank r. */
static int check_pairs(const sched *s, int r)
{
    int32_t partner[4096];
    cr_assert(s->n_actions[r] <= 4096);
    ep_pair_mark(s, r, partner);
    int n = 0;
    for (size_t i = 0; i < s->n_actions[r]; i++) {
        if (partner[i] < 0)
            continue;
        size_t j = (size_t)partner[i];
        cr_assert_eq(partner[j], (int32_t)i);
        const sched_action *a = &s->actions[r][i], *b = &s->actions[r][j];
        cr_assert((a->kind == ACT_F) != (b->kind == ACT_F));
        cr_assert(a->kind != ACT_W && b->kind != ACT_W);
        cr_assert_neq(a->mb, b->mb);
        for (size_t x = (i < j ? i : j) + 1; x < (i < j ? j : i); x++)
            cr_assert(s->actions[r][x].kind != ACT_F && s->actions[r][x].kind != ACT_B &&
                      s->actions[r][x].kind != ACT_I && s->actions[r][x].kind != ACT_W);
        n += i < j;
    }
    return n;
}

Test(ep_pair, pairs_of_the_schedules)
{
    sched *s = gen(SCHED_1F1B, 1, 8, 1); /* F0 B0 F1 B1 ...: B(i) with F(i+1) */
    cr_expect_eq(check_pairs(s, 0), 7);
    sched_free(s);
    s = gen(SCHED_1F1B, 4, 8, 1); /* steady state: m - w pairs F(i+w) B(i) after w = p - 1 - r warm-up
                                     forwards; the last rank (w = 0) pairs B(i) F(i+1) */
    for (int r = 0; r < 4; r++)
        cr_expect_eq(check_pairs(s, r), r < 3 ? 8 - (4 - 1 - r) : 7, "rank %d", r);
    sched_free(s);
    s = gen(SCHED_INTERLEAVED, 4, 8, 2);
    for (int r = 0; r < 4; r++)
        cr_expect_gt(check_pairs(s, r), 0, "rank %d", r);
    sched_free(s);
    s = gen(SCHED_DUALPIPEV, 4, 16, 2); /* DualPipeV: its marked F&B chunks */
    for (int r = 0; r < 4; r++) {
        int marked = 0;
        for (size_t i = 0; i < s->n_actions[r]; i++)
            marked += s->actions[r][i].overlap;
        cr_expect_eq(check_pairs(s, r), marked, "rank %d", r);
        cr_expect_gt(marked, 0);
    }
    sched_free(s);
}

static void refused(const char *want, const char *a, const char *b, const char *c, const char *d)
{
    int rc = flags_run(MIXD("8"), "--global-batch-size", "64", "--overlap-moe-expert-parallel-comm",
                       "--expert-model-parallel-size", strstr(want, "got 1") ? "1" : "4", a, b, c, d, NULL);
    simulate_result *r = NULL;
    if (rc == TS_OK)
        rc = simulate_run(&C, NULL, &r, &E);
    simulate_result_free(r);
    cr_assert_eq(rc, TS_EINVAL, "accepted (%s)", want);
    cr_assert(strstr(E.msg, "--overlap-moe-expert-parallel-comm: ") && strstr(E.msg, want), "'%s' lacks '%s'", E.msg,
              want);
}

Test(ep_pair, rules_name_what_is_valid, .fini = fini)
{
    refused("--expert-model-parallel-size > 1, got 1", "--moe-token-dispatcher-type", "alltoall", NULL, NULL);
    refused("alltoall or flex (got allgather", "--moe-token-dispatcher-type", "allgather", NULL, NULL);
    refused("not with --recompute-granularity full", "--moe-token-dispatcher-type", "alltoall",
            "--recompute-granularity", "full");
    refused("valid --schedule interleaved", "--moe-token-dispatcher-type", "alltoall", "--pipeline-model-parallel-size",
            "2");
    cr_assert_eq(flags_run("--num-layers", "2", "--hidden-size", "256", "--num-attention-heads", "4", "--seq-length",
                           "256", "--global-batch-size", "8", "--micro-batch-size", "1", "--gpus", "8",
                           "--overlap-moe-expert-parallel-comm", NULL),
                 TS_OK, "%s", E.msg);
    simulate_result *r = NULL;
    cr_assert_eq(simulate_run(&C, NULL, &r, &E), TS_EINVAL);
    cr_assert(strstr(E.msg, "needs a mixture-of-experts model (--num-experts > 0)"), "%s", E.msg);
}

static simulate_result *run(bool overlap)
{
    C.par.overlap_moe_ep_comm = overlap;
    simulate_result *r = NULL;
    cr_assert_eq(simulate_run(&C, NULL, &r, &E), TS_OK, "%s", E.msg);
    return r;
}

/* p = 1, m micro-batches: the schedule is F0 B0 F1 ... B(m-1), m - 1 pairs
 * B(i) F(i+1), each pass all its layers one after the other on one rank.
 * With a the exposed all-to-all of one pass (the forward's and the
 * backward's are the same volume), c_F, c_B the passes' compute: the
 * iteration and the exposed EP time are shorter by (m - 1) x (2a -
 * exposed_F - exposed_B), ep_pair_times's. nic_gbps > 0 sets the NIC (ep
 * 16 spans two nodes). Returns 2a - exposed_F - exposed_B over 2a. */
static double p1_closed_form(const char *gpus, const char *ep, int m, double nic_gbps)
{
    char gb[16];
    snprintf(gb, sizeof gb, "%ld", (long)m * strtol(gpus, NULL, 10));
    cr_assert_eq(flags_run(MIX(gpus), "--global-batch-size", gb, "--expert-model-parallel-size", ep, NULL), TS_OK, "%s",
                 E.msg);
    if (nic_gbps > 0)
        C.cluster.topology->params.nic_gbps = nic_gbps;
    simulate_result *off = run(false), *on = run(true);
    const simulate_rank *X = &off->ranks[0];
    int64_t a = X->exposed_ns[SIMULATE_COMM_EP] / (2 * m);
    /* the forward's compute: its layers' and the data loader's step (dataload.h) */
    int64_t c_f = (X->cat_ns[PLAN_CAT_FWD] + X->cat_ns[PLAN_CAT_DATA]) / m, c_b = X->cat_ns[PLAN_CAT_BWD] / m;
    cr_assert_gt(a, 0);
    cr_assert_eq(X->exposed_ns[SIMULATE_COMM_EP] % (2 * m), 0, "the passes' all-to-alls differ");
    int64_t e_f, e_b;
    ep_pair_times(a, c_f, a, c_b, 132, &e_f, &e_b);
    int64_t saved = (m - 1) * (2 * a - e_f - e_b);
    cr_assert_gt(saved, 0);
    /* the passes' compute sums segments, rounded per pass: a few ns */
    cr_expect_leq(llabs(off->iteration_ns - on->iteration_ns - saved), 64, "saved %lld, closed form %lld",
                  (long long)(off->iteration_ns - on->iteration_ns), (long long)saved);
    cr_expect_leq(llabs(X->exposed_ns[SIMULATE_COMM_EP] - on->ranks[0].exposed_ns[SIMULATE_COMM_EP] - saved), 64);
    simulate_result_free(off);
    simulate_result_free(on);
    return (double)(2 * a - e_f - e_b) / (double)(2 * a);
}

/* Inside a node the all-to-alls are short next to the compute: all hidden
 * but the SM share's slowdown. Over a 0.5 GB/s NIC they outlast it: the
 * partner's compute hidden, the rest exposed. */
Test(ep_pair, p1_closed_form, .fini = fini)
{
    cr_expect_gt(p1_closed_form("8", "8", 8, 0), 0.5);
    double part = p1_closed_form("16", "16", 4, 0.5);
    cr_expect_lt(part, 0.5, "hidden %.3f of the transfers: not transfer-bound", part);
    cr_expect_gt(part, 0);
}

/* Metamorphic: the overlap is never slower (each transfer's exposed time
 * is at most what it had alone, SM share included); with the overlap a
 * slower NIC is never faster. */
Test(ep_pair, never_slower_and_slower_nic_never_faster, .fini = fini)
{
    static const char *const EP[] = {"2", "4", "8"};
    for (int k = 0; k < 3; k++) {
        cr_assert_eq(flags_run(MIX("16"), "--global-batch-size", "64", "--expert-model-parallel-size", EP[k],
                               "--pipeline-model-parallel-size", "2", "--schedule", "interleaved",
                               "--num-layers-per-virtual-pipeline-stage", "1", NULL),
                     TS_OK, "%s", E.msg);
        simulate_result *off = run(false), *on = run(true);
        cr_expect_leq(on->iteration_ns, off->iteration_ns, "ep %s", EP[k]);
        cr_expect_leq(on->exposed_ns[SIMULATE_COMM_EP], off->exposed_ns[SIMULATE_COMM_EP], "ep %s", EP[k]);
        simulate_result_free(off);
        simulate_result_free(on);
    }
    cr_assert_eq(flags_run(MIX("16"), "--global-batch-size", "64", "--expert-model-parallel-size", "16", NULL), TS_OK,
                 "%s", E.msg);
    int64_t prev = 0, first = 0;
    static const double NIC[] = {100, 50, 25, 12.5, 6.25};
    for (int k = 0; k < 5; k++) {
        C.cluster.topology->params.nic_gbps = NIC[k];
        simulate_result *r = run(true);
        cr_expect_geq(r->iteration_ns, prev, "NIC %.2f GB/s: %lld ns, faster than %lld", NIC[k],
                      (long long)r->iteration_ns, (long long)prev);
        prev = r->iteration_ns;
        if (k == 0)
            first = prev;
        simulate_result_free(r);
    }
    cr_expect_gt(prev, first, "the NIC is on the all-to-all's path (ep 16 over two nodes)");
}
