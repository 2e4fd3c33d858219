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
}

/* One MoE layer a pass: the forward c0 A1 c1 A2 (attention, dispatch,
 * experts, combine), the backward B1 d1 B2 d2 (combine, experts, dispatch,
 * attention); w1, w2 the weight-gradient parts of d1, d2. */
static void layer_pair(const int64_t f[4], const int64_t b[4], const int64_t w[2], int sms, bool delay, int64_t *e_f,
                       int64_t *e_b)
{
    int64_t fc[3] = {f[0], f[2], 0}, fa[2] = {f[1], f[3]};
    int64_t bc[3] = {0, b[1], b[3]}, ba[2] = {b[0], b[2]}, bw[3] = {0, w ? w[0] : 0, w ? w[1] : 0};
    ep_pair_pass F = {2, fc, fa, NULL}, B = {2, bc, ba, bw};
    ts_err err;
    cr_assert_eq(ep_pair_run(&F, &B, sms, delay, e_f, e_b, &err), TS_OK);
}

/* Per sub-module: each transfer exposed by max(0, transfer - the partner's
 * span), summed; with the SM share each phase is overlap_shared_phase_ns. */
Test(ep_pair, per_submodule_closed_form)
{
    const int64_t f[4] = {100, 200, 300, 120}; /* c0 A1 c1 A2 */
    const int64_t b[4] = {150, 250, 200, 80};  /* B1 d1 B2 d2 */
    int64_t e_f, e_b;
    layer_pair(f, b, NULL, 0, false, &e_f, &e_b);
    cr_expect_eq(e_f, 0 + 40, "A1 200 beside d1 250, A2 120 beside d2 80: %lld", (long long)e_f);
    cr_expect_eq(e_b, 50 + 0, "B1 150 beside c0 100, B2 200 beside c1 300: %lld", (long long)e_b);
    /* the pass totals would hide all of both (320 < 330, 350 < 400) */
    cr_expect_gt(e_f + e_b, 0);
    layer_pair(f, b, NULL, 132, false, &e_f, &e_b);
    int64_t want_f = overlap_shared_phase_ns(f[1], b[1], 132, EP_PAIR_COMM_SMS) - b[1] +
                     overlap_shared_phase_ns(f[3], b[3], 132, EP_PAIR_COMM_SMS) - b[3];
    int64_t want_b = overlap_shared_phase_ns(b[0], f[0], 132, EP_PAIR_COMM_SMS) - f[0] +
                     overlap_shared_phase_ns(b[2], f[2], 132, EP_PAIR_COMM_SMS) - f[2];
    cr_expect_leq(llabs(e_f - want_f), 2, "%lld vs %lld", (long long)e_f, (long long)want_f);
    cr_expect_leq(llabs(e_b - want_b), 2, "%lld vs %lld", (long long)e_b, (long long)want_b);
    /* a pass with no transfer beside one with: the other's compute first */
    int64_t c1[1] = {500}, bc[3] = {0, 100, 100}, ba[2] = {300, 300};
    ep_pair_pass F = {0, c1, NULL, NULL}, B = {2, bc, ba, NULL};
    ts_err err;
    cr_assert_eq(ep_pair_run(&F, &B, 0, false, &e_f, &e_b, &err), TS_OK);
    cr_expect_eq(e_f, 0);
    cr_expect_eq(e_b, 300, "B1 hidden behind the forward's 500, B2 alone: %lld", (long long)e_b);
}

/* --delay-wgrad-compute on one layer (ep_pair.h's closed form, no SM
 * share): t1 = max(B1, c0); without T = t1 + max(A1, g1 + w1) + max(B2, c1)
 * + max(A2, d2), with T = t1 + max(max(A1, g1 + w1) + c1, max(A1, g1) + B2)
 * + max(A2, d2); T = the compute + exposed_F + exposed_B. */
Test(ep_pair, delay_wgrad_closed_form)
{
    const int64_t f[4] = {100, 60, 100, 10};   /* c0 A1 c1 A2 */
    const int64_t b[4] = {100, 200, 300, 100}; /* B1 d1 (g1 50 + w1 150) B2 d2 (g2 50 + w2 50) */
    const int64_t w[2] = {150, 50};
    int64_t compute = 100 + 100 + 200 + 100, e_f, e_b;
    layer_pair(f, b, w, 0, false, &e_f, &e_b);
    cr_expect_eq(compute + e_f + e_b, 100 + 200 + 300 + 100, "without: %lld", (long long)(compute + e_f + e_b));
    layer_pair(f, b, w, 0, true, &e_f, &e_b);
    cr_expect_eq(compute + e_f + e_b, 100 + 360 + 100, "with: %lld", (long long)(compute + e_f + e_b));
    cr_expect_eq(e_f, 0);
    cr_expect_eq(e_b, 60, "B2 160..460 beside w1 and c1 (100..400)");
    /* no weight-gradient part: the flag changes nothing */
    int64_t g_f, g_b;
    layer_pair(f, b, NULL, 132, false, &e_f, &e_b);
    layer_pair(f, b, NULL, 132, true, &g_f, &g_b);
    cr_expect(e_f == g_f && e_b == g_b);
}

/* Metamorphic, random passes: each pass's exposed time at most its
 * transfers' (SM share included); the delay never makes the pair longer
 * (with the SM share to 2 ns of rounding). */
Test(ep_pair, delay_wgrad_never_slower)
{
    uint64_t x = 12345;
#define RND(m) ((int64_t)((x = x * 6364136223846793005ULL + 1442695040888963407ULL) >> 33) % (m))
    for (int it = 0; it < 2000; it++) {
        int64_t fc[8], fa[8], bc[8], ba[8], bw[8], a_f = 0, a_b = 0;
        int nf = (int)RND(5), nb = (int)RND(5);
        for (int j = 0; j <= 6; j++) {
            fc[j] = RND(400), bc[j] = RND(600), bw[j] = RND(bc[j] + 1);
            fa[j] = RND(500), ba[j] = RND(500);
        }
        for (int j = 0; j < nf; j++)
            a_f += fa[j];
        for (int j = 0; j < nb; j++)
            a_b += ba[j];
        ep_pair_pass F = {nf, fc, fa, NULL}, B = {nb, bc, ba, bw};
        int sms = it % 2 ? 132 : 0;
        int64_t e_f, e_b, d_f, d_b;
        ts_err err;
        cr_assert_eq(ep_pair_run(&F, &B, sms, false, &e_f, &e_b, &err), TS_OK);
        cr_assert_eq(ep_pair_run(&F, &B, sms, true, &d_f, &d_b, &err), TS_OK);
        cr_assert(e_f >= 0 && e_f <= a_f + 1 && e_b >= 0 && e_b <= a_b + 1 && d_f <= a_f + 1 && d_b <= a_b + 1,
                  "case %d: %lld/%lld %lld/%lld", it, (long long)e_f, (long long)a_f, (long long)e_b, (long long)a_b);
        cr_assert_leq(d_f + d_b, e_f + e_b + (sms ? 2 : 0), "case %d: the delay made the pair %lld ns longer", it,
                      (long long)(d_f + d_b - e_f - e_b));
    }
#undef RND
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
 * iteration and the exposed EP time are shorter by the same amount, at
 * most (m - 1) x (2a - exposed_F - exposed_B) with the pass totals' closed
 * form (each pass's transfers beside the other's whole compute: the
 * per-sub-module pairing hides no more). nic_gbps > 0 sets the NIC (ep 16
 * spans two nodes). Returns the hidden share of the pairs' transfers. */
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
    int64_t e_f = overlap_shared_phase_ns(a, c_b, 132, EP_PAIR_COMM_SMS) - c_b;
    int64_t e_b = overlap_shared_phase_ns(a, c_f, 132, EP_PAIR_COMM_SMS) - c_f;
    int64_t bound = (m - 1) * (2 * a - e_f - e_b);
    int64_t saved = off->iteration_ns - on->iteration_ns;
    cr_expect_gt(saved, 0);
    /* the passes' compute sums segments, rounded per pass: a few ns */
    cr_expect_leq(saved, bound + 64, "saved %lld, pass totals' bound %lld", (long long)saved, (long long)bound);
    cr_expect_leq(llabs(X->exposed_ns[SIMULATE_COMM_EP] - on->ranks[0].exposed_ns[SIMULATE_COMM_EP] - saved), 64);
    cr_expect_eq(on->ranks[0].cat_ns[PLAN_CAT_FWD] + on->ranks[0].cat_ns[PLAN_CAT_BWD],
                 X->cat_ns[PLAN_CAT_FWD] + X->cat_ns[PLAN_CAT_BWD], "the compute changed");
    simulate_result_free(off);
    simulate_result_free(on);
    return (double)saved / (double)((m - 1) * 2 * a);
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

/* Metamorphic: the overlap never exposes more all-to-all time (each
 * transfer's exposed time is at most what it had alone, SM share
 * included) and costs at most the pipeline transfers its combined step
 * exposes; with the overlap a slower NIC is never faster. */
Test(ep_pair, never_slower_and_slower_nic_never_faster, .fini = fini)
{
    static const char *const EP[] = {"2", "4", "8"};
    for (int k = 0; k < 3; k++) {
        cr_assert_eq(flags_run(MIX("16"), "--global-batch-size", "64", "--expert-model-parallel-size", EP[k],
                               "--pipeline-model-parallel-size", "2", "--schedule", "interleaved",
                               "--num-layers-per-virtual-pipeline-stage", "1", NULL),
                     TS_OK, "%s", E.msg);
        simulate_result *off = run(false), *on = run(true);
        /* the combined step sends both outputs at the pair's end and waits
         * for both inputs: the pipeline transfers it exposes are what the
         * overlap may cost (here, all-to-alls inside a node and the pipeline
         * across two, more than it hides: Megatron-core's combined 1F1B
         * also sends after the pair) */
        int64_t pp = on->exposed_ns[SIMULATE_COMM_PP] - off->exposed_ns[SIMULATE_COMM_PP];
        cr_expect_leq(on->iteration_ns, off->iteration_ns + (pp > 0 ? pp : 0), "ep %s", EP[k]);
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

/* --delay-wgrad-compute on whole runs: never slower than the overlap
 * without it, the compute per category unchanged (the weight-gradient
 * GEMMs only move), faster where the backward's transfers outlast their
 * partners (ep 16 over a 0.5 GB/s NIC); refused without the overlap. */
Test(ep_pair, delay_wgrad_runs, .fini = fini)
{
    static const char *const EP[] = {"2", "8", "16"};
    int64_t gained = 0;
    for (int k = 0; k < 3; k++) {
        if (k < 2)
            cr_assert_eq(flags_run(MIX("16"), "--global-batch-size", "64", "--expert-model-parallel-size", EP[k],
                                   "--pipeline-model-parallel-size", "2", "--schedule", "interleaved",
                                   "--num-layers-per-virtual-pipeline-stage", "1", NULL),
                         TS_OK, "%s", E.msg);
        else
            cr_assert_eq(flags_run(MIX("16"), "--global-batch-size", "64", "--expert-model-parallel-size", EP[k], NULL),
                         TS_OK, "%s", E.msg);
        if (k == 2)
            C.cluster.topology->params.nic_gbps = 0.5;
        simulate_result *on = run(true);
        C.par.delay_wgrad = true;
        simulate_result *d = run(true);
        C.par.delay_wgrad = false;
        cr_expect_leq(d->iteration_ns, on->iteration_ns, "ep %s", EP[k]);
        for (int c = PLAN_CAT_FWD; c <= PLAN_CAT_RECOMP; c++)
            cr_expect_eq(d->ranks[0].cat_ns[c], on->ranks[0].cat_ns[c], "ep %s: category %d", EP[k], c);
        gained += on->iteration_ns - d->iteration_ns;
        simulate_result_free(on);
        simulate_result_free(d);
    }
    cr_expect_gt(gained, 0, "the delay never hid anything");
    cr_assert_eq(flags_run(MIX("16"), "--global-batch-size", "64", "--expert-model-parallel-size", "8",
                           "--delay-wgrad-compute", NULL),
                 TS_OK, "%s", E.msg);
    simulate_result *r = NULL;
    cr_assert_eq(simulate_run(&C, NULL, &r, &E), TS_EINVAL);
    cr_expect(strstr(E.msg, "--delay-wgrad-compute needs --overlap-moe-expert-parallel-comm"), "%s", E.msg);
}

/* ep_pair_spans (the flow modes' compute spans, sim/core/ep_pair_steps.h):
 * each compute op's time, its nominal time with no SM share, slowed by
 * the phase's closed form while a transfer runs beside it. One transfer a
 * pass: F c0 100 A1 50 c1 100, B d0 0 B1 60 d1 100 (weight gradients 40). */
Test(ep_pair, spans_closed_form)
{
    int64_t fc[2] = {100, 100}, fa[1] = {50}, bc[2] = {0, 100}, ba[1] = {60}, bw[2] = {0, 40};
    ep_pair_pass F = {1, fc, fa, NULL}, B = {1, bc, ba, bw};
    int64_t el[6];
    ts_err err;
    /* no SM share: the nominal times (el: c0 c1, g0 g1, w0 w1) */
    cr_assert_eq(ep_pair_spans(&F, &B, 0, false, el, &err), TS_OK);
    const int64_t nominal[6] = {100, 100, 0, 60, 0, 40};
    for (int k = 0; k < 6; k++)
        cr_expect_eq(el[k], nominal[k], "el[%d] = %lld, want %lld", k, (long long)el[k], (long long)nominal[k]);
    /* 20 of 132 SMs: c0 beside B1 (phase(60, 100)); g1 (60) beside A1 (50),
     * which starts when c0 ends: phase(50, 60) = 60 + 50 x 20 / 132; w1 and
     * c1 alone */
    cr_assert_eq(ep_pair_spans(&F, &B, 132, false, el, &err), TS_OK);
    int64_t c0 = overlap_shared_phase_ns(60, 100, 132, EP_PAIR_COMM_SMS);
    int64_t g1 = overlap_shared_phase_ns(50, 60, 132, EP_PAIR_COMM_SMS);
    cr_expect_leq(llabs(el[0] - c0), 1, "c0 %lld, want %lld", (long long)el[0], (long long)c0);
    cr_expect_leq(llabs(el[3] - g1), 1, "g1 %lld, want %lld", (long long)el[3], (long long)g1);
    cr_expect_eq(el[1], 100);
    cr_expect_eq(el[5], 40);
    /* metamorphic: the SM share never makes a compute op shorter */
    for (int k = 0; k < 6; k++)
        cr_expect_geq(el[k], nominal[k], "el[%d] = %lld < %lld", k, (long long)el[k], (long long)nominal[k]);
    /* the delay changes no compute op's work (here every op's time alike:
     * B2 does not exist) */
    int64_t el_d[6];
    cr_assert_eq(ep_pair_spans(&F, &B, 132, true, el_d, &err), TS_OK);
    for (int k = 0; k < 6; k++)
        cr_expect_eq(el_d[k], el[k], "el[%d] %lld with the delay, %lld without", k, (long long)el_d[k],
                     (long long)el[k]);
}
