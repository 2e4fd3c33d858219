/* Max-min fair flows: halving, the textbook example, incremental = global,
 * determinism. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "sim/net/net_flow.h"
#include "sim/net/net_graph.h"
#include "sim/net/net_route.h"

/* gpu0 <-> gpu1 at 100 GB/s, gpu1 <-> gpu2 at 200 GB/s, efficiency 1, no latency. */
static net_graph *line3(void)
{
    net_link_spec s[] = {{"gpu0.0", "gpu1.0", 100, 1, 0}, {"gpu1.0", "gpu2.0", 200, 1, 0}};
    net_graph *g = NULL;
    ts_err e;
    cr_assert_eq(net_graph_from_links(s, 2, 1, &g, &e), TS_OK, "%s", e.msg);
    return g;
}

/* Flows on g (freed by the test). */
static net_flows *flows_on(const net_graph *g)
{
    net_flows *f = NULL;
    ts_err e;
    cr_assert_eq(net_flows_new(g, &f, &e), TS_OK, "%s", e.msg);
    return f;
}

/* The link from GPU a to GPU b. */
static int gpu_link(const net_graph *g, int a, int b)
{
    int l = net_graph_find_link(g, g->gpu_node[a], g->gpu_node[b]);
    cr_assert(l >= 0, "no link gpu%d -> gpu%d", a, b);
    return l;
}

typedef struct {
    int64_t t[16];
    int n;
} ends;
static void rec(void *ctx, int flow, uint64_t tag, int64_t t)
{
    (void)flow;
    ends *e = ctx;
    e->t[tag] = t;
    e->n++;
}

Test(net_flow, two_flows_on_one_link_each_get_half)
{
    net_graph *g = line3();
    net_flows *f = flows_on(g);
    ts_err e;
    int l01 = gpu_link(g, 0, 1);
    int a = net_flow_start(f, 0, &l01, 1, 1e6, 0, &e);
    int b = net_flow_start(f, 0, &l01, 1, 1e6, 1, &e);
    cr_assert(a >= 0 && b >= 0);
    cr_assert_float_eq(net_flow_rate_gbps(f, a), 50.0, 1e-12);
    cr_assert_float_eq(net_flow_rate_gbps(f, b), 50.0, 1e-12);
    ends en = {0};
    cr_assert_eq(net_flows_advance(f, NET_TIME_NEVER, rec, &en, &e), TS_OK);
    cr_assert_eq(en.n, 2);
    /* 1e6 bytes at 50 GB/s (= 50 bytes/ns) = 20000 ns. */
    cr_assert_eq(en.t[0], 20000);
    cr_assert_eq(en.t[1], 20000);
    net_flows_free(f);
    net_graph_free(g);
}

Test(net_flow, rates_follow_starts_and_ends)
{
    net_graph *g = line3();
    net_flows *f = flows_on(g);
    ts_err e;
    int l01 = gpu_link(g, 0, 1);
    /* A alone for 10 us (1e6 bytes at 100), then B joins: both at 50. A has
     * 1e6 left at t = 10000: ends at 30000; B then alone at 100: 0.5e6 left
     * of its 1.5e6 at 30000 -> ends at 35000. */
    net_flow_start(f, 0, &l01, 1, 2e6, 0, &e);
    ends en = {0};
    cr_assert_eq(net_flows_advance(f, 10000, rec, &en, &e), TS_OK);
    cr_assert_eq(en.n, 0);
    net_flow_start(f, 10000, &l01, 1, 1.5e6, 1, &e);
    cr_assert_eq(net_flows_advance(f, NET_TIME_NEVER, rec, &en, &e), TS_OK);
    cr_assert_eq(en.t[0], 30000);
    cr_assert_eq(en.t[1], 35000);
    net_flows_free(f);
    net_graph_free(g);
}

Test(net_flow, textbook_max_min)
{
    /* f1 on gpu0->gpu1 (100); f2 on gpu0->gpu1->gpu2; f3 on gpu1->gpu2 (200).
     * Bottleneck gpu0->gpu1: f1 = f2 = 50; f3 takes the rest of 200: 150. */
    net_graph *g = line3();
    net_flows *f = flows_on(g);
    ts_err e;
    int l01 = gpu_link(g, 0, 1);
    int l12 = gpu_link(g, 1, 2);
    int p2[2] = {l01, l12};
    int f1 = net_flow_start(f, 0, &l01, 1, 1e6, 0, &e);
    int f2 = net_flow_start(f, 0, p2, 2, 1e6, 1, &e);
    int f3 = net_flow_start(f, 0, &l12, 1, 1e6, 2, &e);
    cr_assert_float_eq(net_flow_rate_gbps(f, f1), 50.0, 1e-9);
    cr_assert_float_eq(net_flow_rate_gbps(f, f2), 50.0, 1e-9);
    cr_assert_float_eq(net_flow_rate_gbps(f, f3), 150.0, 1e-9);
    net_flow_stats st = net_flows_stats(f);
    cr_assert_eq(st.recomputes, 1, "three starts at one instant coalesce into one recomputation");
    net_flows_free(f);
    net_graph_free(g);
}

Test(net_flow, a_link_only_one_flow_uses_can_be_its_bottleneck)
{
    /* fa on gpu0->gpu1 (50, fa's alone) and gpu1->gpu2 (200, shared with
     * fb). The shared link's fair share (100) is not fa's limit: its own
     * link is, so fa = 50 and fb takes the rest, 150. */
    net_link_spec sp[] = {{"gpu0.0", "gpu1.0", 50, 1, 0}, {"gpu1.0", "gpu2.0", 200, 1, 0}};
    net_graph *g = NULL;
    ts_err e;
    cr_assert_eq(net_graph_from_links(sp, 2, 1, &g, &e), TS_OK, "%s", e.msg);
    net_flows *f = flows_on(g);
    int l01 = gpu_link(g, 0, 1);
    int l12 = gpu_link(g, 1, 2);
    int pa[3] = {l12, l01, l01}; /* l01 twice: its share is 50 / 2 */
    int fa = net_flow_start(f, 0, pa, 3, 1e6, 0, &e);
    int fb = net_flow_start(f, 0, &l12, 1, 1e6, 1, &e);
    cr_assert_float_eq(net_flow_rate_gbps(f, fa), 25.0, 1e-9);
    cr_assert_float_eq(net_flow_rate_gbps(f, fb), 175.0, 1e-9);
    net_flows_free(f);
    net_graph_free(g);
}

/* Global max-min by the definition (naive progressive filling over all
 * links), to check the incremental component recomputation against. */
static void global_maxmin(const net_graph *g, int nf, int paths[][NET_MAX_PATH], const int *plen, const char *alive,
                          double *rate)
{
    double *rem = malloc(sizeof *rem * (size_t)g->n_links);
    int *cnt = calloc((size_t)g->n_links, sizeof *cnt);
    char *fz = calloc((size_t)nf, 1);
    for (int l = 0; l < g->n_links; l++)
        rem[l] = g->links[l].bw_gbps;
    for (int i = 0; i < nf; i++)
        if (alive[i])
            for (int h = 0; h < plen[i]; h++)
                cnt[paths[i][h]]++;
    for (;;) {
        int best = -1;
        double bs = 0;
        for (int l = 0; l < g->n_links; l++)
            if (cnt[l] > 0 && (best < 0 || rem[l] / cnt[l] < bs)) {
                best = l;
                bs = rem[l] / cnt[l];
            }
        if (best < 0)
            break;
        for (int i = 0; i < nf; i++) {
            if (!alive[i] || fz[i])
                continue;
            int on = 0;
            for (int h = 0; h < plen[i]; h++)
                on |= paths[i][h] == best;
            if (!on)
                continue;
            fz[i] = 1;
            rate[i] = bs;
            for (int h = 0; h < plen[i]; h++) {
                rem[paths[i][h]] -= bs;
                cnt[paths[i][h]]--;
            }
        }
    }
    free(rem);
    free(cnt);
    free(fz);
}

static void mark_dead(void *ctx, int flow, uint64_t tag, int64_t t)
{
    (void)flow;
    (void)t;
    ((char *)ctx)[tag] = 0;
}

Test(net_flow, incremental_equals_global)
{
    net_fabric_params p;
    ts_err e;
    cr_assert_eq(net_fabric_defaults(&p, "H100", 8, &e), TS_OK);
    p.leaf_ports = 4; /* 4 NIC ports down, 2:1 -> 2 ports up, one to each spine */
    p.rail_optimized = false;
    p.up[2] = (net_fabric_level){0, 2, 2.0};
    net_graph *g = NULL;
    cr_assert_eq(net_graph_build_fabric(&p, &g, &e), TS_OK, "%s", e.msg);
    net_router *r = NULL;
    cr_assert_eq(net_router_new(g, &r, &e), TS_OK);
    net_flows *f = flows_on(g);
    enum { NF = 60 };
    static int paths[NF][NET_MAX_PATH];
    int plen[NF], ids[NF];
    char alive[NF] = {0};
    double want[NF] = {0}; /* global_maxmin sets every alive flow's */
    unsigned seed = 12345;
    for (int i = 0; i < NF; i++) {
        seed = seed * 1103515245u + 12345u;
        int a = (int)(seed >> 8) % g->n_gpus;
        seed = seed * 1103515245u + 12345u;
        int b = (int)(seed >> 8) % g->n_gpus;
        if (a == b)
            b = (b + 9) % g->n_gpus;
        plen[i] = net_route(r, g->gpu_node[a], g->gpu_node[b], (uint64_t)i, paths[i], &e);
        cr_assert(plen[i] > 0, "%s", e.msg);
        ids[i] = net_flow_start(f, (int64_t)i * 100, paths[i], plen[i], 1e5 * (1 + i % 7), (uint64_t)i, &e);
        cr_assert(ids[i] >= 0, "%s", e.msg);
        alive[i] = 1;
        /* Finish whatever ends before the next start, then compare. */
        int64_t nx;
        while ((nx = net_flows_next_ns(f)) <= (int64_t)i * 100 + 99)
            cr_assert_eq(net_flows_advance(f, nx, mark_dead, alive, &e), TS_OK);
        global_maxmin(g, i + 1, paths, plen, alive, want);
        for (int k = 0; k <= i; k++)
            if (alive[k])
                cr_assert_float_eq(net_flow_rate_gbps(f, ids[k]), want[k], 1e-9 * want[k] + 1e-12,
                                   "flow %d after start %d: %g vs global %g", k, i, net_flow_rate_gbps(f, ids[k]),
                                   want[k]);
    }
    net_flow_stats st = net_flows_stats(f);
    cr_assert(st.rate_updates > 0 && st.recomputes > 0);
    net_flows_free(f);
    net_router_free(r);
    net_graph_free(g);
}

Test(net_flow, lone_bundle_gets_its_tightest_links_share)
{
    /* Alone on its links, a bundle crossing gpu0-gpu1 (100 GB/s) twice and
     * gpu1-gpu2 (200 GB/s) three times gets min(100/2, 200/3) = 50 GB/s; a
     * second bundle on gpu1-gpu2 only then shares that link with it. */
    net_graph *g = line3();
    net_flows *f = flows_on(g);
    ts_err e;
    int l01 = gpu_link(g, 0, 1);
    int l12 = gpu_link(g, 1, 2);
    int route[5] = {l01, l12, l01, l12, l12};
    int a = net_flow_start(f, 0, route, 5, 1e6, 0, &e);
    cr_assert(a >= 0, "%s", e.msg);
    cr_assert_float_eq(net_flow_rate_gbps(f, a), 50.0, 1e-12);
    int b = net_flow_start(f, 0, &l12, 1, 1e6, 1, &e);
    cr_assert(b >= 0, "%s", e.msg);
    /* l12: 200 over 3 + 1 occurrences = 50 each; a stays at 50, b gets 200 - 3 x 50 = 50 */
    cr_assert_float_eq(net_flow_rate_gbps(f, a), 50.0, 1e-12);
    cr_assert_float_eq(net_flow_rate_gbps(f, b), 50.0, 1e-12);
    net_flows_free(f);
    net_graph_free(g);
}

Test(net_flow, hint_reused_until_a_bandwidth_changes)
{
    /* A lone flow fills the hint; a lone start over the same links later,
     * in the same busy period or after an idle spell, takes it as is (a rate
     * planted in it shows); once a bandwidth changed (net_graph_scale_link,
     * while idle) it is computed again. */
    net_graph *g = line3();
    net_flows *f = flows_on(g);
    ts_err e;
    int l01 = gpu_link(g, 0, 1);
    int l10 = gpu_link(g, 1, 0);
    int l12 = gpu_link(g, 1, 2);
    int route[3] = {l01, l12, l12};
    net_flow_hint h = {0, 0};
    int a = net_flow_start_hint(f, 0, route, NULL, 3, 1e6, 0, &h, &e);
    cr_assert(a >= 0, "%s", e.msg);
    cr_assert_float_eq(net_flow_rate_gbps(f, a), 100.0, 1e-12, "min(100 / 1, 200 / 2)");
    cr_assert_float_eq(h.rate_gbps, 100.0, 1e-12);
    cr_assert(net_flow_start(f, 0, &l10, 1, 1e12, 1, &e) >= 0, "a long flow elsewhere keeps the fabric busy");
    cr_assert_eq(net_flows_next_ns(f), 10000);
    cr_assert_eq(net_flows_advance(f, 10000, NULL, NULL, &e), TS_OK);
    cr_assert_eq(net_flows_active(f), 1);
    h.rate_gbps = 7.0;
    int b = net_flow_start_hint(f, 10000, route, NULL, 3, 1e6, 2, &h, &e);
    cr_assert(b >= 0, "%s", e.msg);
    cr_assert_float_eq(net_flow_rate_gbps(f, b), 7.0, 1e-12, "the same busy period trusts the hint");
    cr_assert_eq(net_flows_advance(f, NET_TIME_NEVER, NULL, NULL, &e), TS_OK);
    cr_assert_eq(net_flows_active(f), 0);
    int b2 = net_flow_start_hint(f, net_flows_now_ns(f), route, NULL, 3, 1e6, 2, &h, &e);
    cr_assert(b2 >= 0, "%s", e.msg);
    cr_assert_float_eq(net_flow_rate_gbps(f, b2), 7.0, 1e-12, "an idle spell that changed no bandwidth keeps it");
    cr_assert_eq(net_flows_advance(f, NET_TIME_NEVER, NULL, NULL, &e), TS_OK);
    cr_assert_eq(net_graph_scale_link(g, g->gpu_node[1], g->gpu_node[2], 0.5, &e), TS_OK, "%s", e.msg);
    int c = net_flow_start_hint(f, net_flows_now_ns(f), route, NULL, 3, 1e6, 3, &h, &e);
    cr_assert(c >= 0, "%s", e.msg);
    cr_assert_float_eq(net_flow_rate_gbps(f, c), 50.0, 1e-12, "recomputed after the idle spell: 200 x 0.5 / 2");
    cr_assert_float_eq(h.rate_gbps, 50.0, 1e-12);
    net_flows_free(f);
    net_graph_free(g);
}

Test(net_flow, link_usage_bytes_busy_and_peak)
{
    net_graph *g = line3();
    net_flows *f = flows_on(g);
    ts_err e;
    cr_assert_eq(net_flows_track_links(f, &e), TS_OK, "%s", e.msg);
    int l01 = gpu_link(g, 0, 1), l12 = gpu_link(g, 1, 2), l10 = gpu_link(g, 1, 0);
    int path[2] = {l01, l12};
    /* A (2e6 bytes on 0->1) alone at 100 GB/s for 10 us, then B (1e6 bytes
     * on 0->1->2) joins: both at 50 (0->1 saturated, 1->2 at 50 of 200).
     * Each has 1e6 bytes left at 10000 ns: both end at 30000 ns. */
    cr_assert(net_flow_start(f, 0, &l01, 1, 2e6, 0, &e) >= 0);
    cr_assert_eq(net_flows_advance(f, 10000, NULL, NULL, &e), TS_OK);
    cr_assert(net_flow_start(f, 10000, path, 2, 1e6, 1, &e) >= 0);
    /* mid-run: the busy time runs up to the current time */
    cr_assert_eq(net_flows_advance(f, 20000, NULL, NULL, &e), TS_OK);
    cr_assert_eq(net_flows_link_usage(f, l12).busy_ns, 10000);
    ends en = {0};
    cr_assert_eq(net_flows_advance(f, NET_TIME_NEVER, rec, &en, &e), TS_OK);
    cr_assert_eq(en.t[0], 30000);
    cr_assert_eq(en.t[1], 30000);
    net_link_usage u01 = net_flows_link_usage(f, l01), u12 = net_flows_link_usage(f, l12),
                   u10 = net_flows_link_usage(f, l10);
    cr_assert_float_eq(u01.bytes, 3e6, 1e-6);
    cr_assert_float_eq(u12.bytes, 1e6, 1e-6);
    cr_assert_eq(u01.busy_ns, 30000);
    cr_assert_eq(u12.busy_ns, 20000);
    cr_assert_float_eq(u01.peak_util, 1.0, 1e-12);
    cr_assert_float_eq(u12.peak_util, 0.25, 1e-12);
    cr_assert(u10.bytes == 0 && u10.busy_ns == 0 && u10.peak_util == 0);
    /* idle gaps are not busy: a third flow after a 5 us pause */
    cr_assert(net_flow_start(f, 35000, &l01, 1, 1e6, 2, &e) >= 0);
    cr_assert_eq(net_flows_advance(f, NET_TIME_NEVER, rec, &en, &e), TS_OK);
    cr_assert_eq(net_flows_link_usage(f, l01).busy_ns, 30000 + 10000);
    cr_assert_eq(net_flows_track_links(f, &e), TS_OK); /* already on: no-op */
    net_flows_free(f);
    net_graph_free(g);
}

Test(net_flow, link_usage_refused_after_start_and_zero_untracked)
{
    net_graph *g = line3();
    net_flows *f = flows_on(g);
    ts_err e;
    int l01 = gpu_link(g, 0, 1);
    cr_assert(net_flow_start(f, 0, &l01, 1, 1e6, 0, &e) >= 0);
    cr_assert_eq(net_flows_track_links(f, &e), TS_ESTATE);
    cr_assert(net_flows_link_usage(f, l01).bytes == 0);
    net_flows_free(f);
    net_graph_free(g);
}

/* Three links X (gpu0 -> gpu1, 100 GB/s), Y (gpu1 -> gpu2, 70) and C
 * (gpu2 -> gpu3, c_gbps); flows list them freely. A runs over X and C, B over Y and C, E
 * over X alone and ends first (50e3 bytes at 50 GB/s: at 1000 ns). Before
 * that: X is the bottleneck of A and E (50 each), Y of B (70); C carries
 * 120 and is nobody's bottleneck. */
static void cut_case(double c_gbps, double *a_rate, double *b_rate, net_flow_stats *before, net_flow_stats *after)
{
    net_link_spec s[] = {
        {"gpu0.0", "gpu1.0", 100, 1, 0}, {"gpu1.0", "gpu2.0", 70, 1, 0}, {"gpu2.0", "gpu3.0", c_gbps, 1, 0}};
    net_graph *g = NULL;
    ts_err e;
    cr_assert_eq(net_graph_from_links(s, 3, 1, &g, &e), TS_OK, "%s", e.msg);
    net_flows *f = flows_on(g);
    int X = gpu_link(g, 0, 1), Y = gpu_link(g, 1, 2), C = gpu_link(g, 2, 3);
    int la[] = {X, C}, lb[] = {Y, C};
    int a = net_flow_start(f, 0, la, 2, 1e9, 0, &e);
    int b = net_flow_start(f, 0, lb, 2, 1e9, 1, &e);
    int x = net_flow_start(f, 0, &X, 1, 50e3, 2, &e);
    cr_assert(a >= 0 && b >= 0 && x >= 0);
    cr_assert_float_eq(net_flow_rate_gbps(f, a), 50.0, 1e-12);
    cr_assert_float_eq(net_flow_rate_gbps(f, b), 70.0, 1e-12);
    cr_assert_float_eq(net_flow_rate_gbps(f, x), 50.0, 1e-12);
    *before = net_flows_stats(f);
    cr_assert_eq(net_flows_advance(f, 1000, NULL, NULL, &e), TS_OK);
    cr_assert_eq(net_flows_active(f), 2, "E has ended at 1000 ns");
    *a_rate = net_flow_rate_gbps(f, a);
    *b_rate = net_flow_rate_gbps(f, b);
    *after = net_flows_stats(f);
    net_flows_free(f);
    net_graph_free(g);
}

Test(net_flow, an_unsaturated_link_cuts_the_recomputation)
{
    /* C at 200: when E ends, A takes all of X (100) and C still has room
     * (170 < 200), so B keeps 70 and is not recomputed: one rate update. */
    double ra, rb;
    net_flow_stats s0, s1;
    cut_case(200, &ra, &rb, &s0, &s1);
    cr_assert_float_eq(ra, 100.0, 1e-12);
    cr_assert_float_eq(rb, 70.0, 1e-12);
    cr_assert_eq(s1.rate_updates - s0.rate_updates, 1, "only A recomputed, got %llu",
                 (unsigned long long)(s1.rate_updates - s0.rate_updates));
    cr_assert_eq(s1.recompute_retries, 0);
}

Test(net_flow, a_boundary_link_that_saturates_pulls_its_flows_in)
{
    /* C at 130: when E ends, A would take 100 but C cannot carry 100 + 70:
     * C becomes the bottleneck of both, 65 each (B drops from 70), which
     * needs B recomputed although only X changed. */
    double ra, rb;
    net_flow_stats s0, s1;
    cut_case(130, &ra, &rb, &s0, &s1);
    cr_assert_float_eq(ra, 65.0, 1e-12);
    cr_assert_float_eq(rb, 65.0, 1e-12);
    cr_assert_eq(s1.rate_updates - s0.rate_updates, 2);
    cr_assert_geq(s1.recompute_retries, 1, "the pass cut at C must have been run again");
}

Test(net_flow, weighted_links_equal_repeated_links)
{
    /* Bundles of 2 to 4 routes into one GPU (its links repeat, as an
     * all-to-all's receiver's do) started twice: once listing every
     * occurrence, once each distinct link with its count. The rates agree
     * to rounding (a link's capacity loses k x a share at once instead of
     * k times one share), the completion times to the ns, the per-link
     * usage too. */
    net_fabric_params p;
    ts_err e;
    cr_assert_eq(net_fabric_defaults(&p, "H100", 8, &e), TS_OK);
    p.leaf_ports = 4;
    p.rail_optimized = false;
    p.up[2] = (net_fabric_level){0, 2, 2.0};
    net_graph *g = NULL;
    cr_assert_eq(net_graph_build_fabric(&p, &g, &e), TS_OK, "%s", e.msg);
    net_router *r = NULL;
    cr_assert_eq(net_router_new(g, &r, &e), TS_OK);
    net_flows *rep = flows_on(g), *wt = flows_on(g);
    cr_assert_eq(net_flows_track_links(rep, &e), TS_OK);
    cr_assert_eq(net_flows_track_links(wt, &e), TS_OK);
    enum { NF = 40 };
    int ids_r[NF], ids_w[NF], repeats = 0;
    unsigned seed = 777;
    for (int i = 0; i < NF; i++) {
        int links[4 * NET_MAX_PATH], n = 0, dl[4 * NET_MAX_PATH], dw[4 * NET_MAX_PATH], m = 0;
        seed = seed * 1103515245u + 12345u;
        int dst = (int)(seed >> 8) % g->n_gpus, routes = 2 + (int)(seed >> 20) % 3;
        for (int k = 0; k < routes; k++) {
            seed = seed * 1103515245u + 12345u;
            int src = (int)(seed >> 8) % g->n_gpus;
            if (src == dst)
                src = (src + 9) % g->n_gpus;
            int len = net_route(r, g->gpu_node[src], g->gpu_node[dst], (uint64_t)i * 4 + (uint64_t)k, links + n, &e);
            cr_assert(len > 0, "%s", e.msg);
            n += len;
        }
        for (int h = 0; h < n; h++) {
            int j = 0;
            while (j < m && dl[j] != links[h])
                j++;
            if (j == m) {
                dl[m] = links[h];
                dw[m++] = 0;
            }
            dw[j]++;
        }
        repeats += n - m;
        double bytes = 1e5 * (1 + i % 5);
        ids_r[i] = net_flow_start(rep, (int64_t)i * 50, links, n, bytes, (uint64_t)i, &e);
        ids_w[i] = net_flow_start_hint(wt, (int64_t)i * 50, dl, dw, m, bytes, (uint64_t)i, NULL, &e);
        cr_assert(ids_r[i] >= 0 && ids_w[i] >= 0, "%s", e.msg);
        for (int k = 0; k <= i; k++) {
            double a = net_flow_rate_gbps(rep, ids_r[k]), b = net_flow_rate_gbps(wt, ids_w[k]);
            cr_assert(fabs(a - b) <= 1e-12 * a, "flow %d after start %d: %.17g listed, %.17g weighted", k, i, a, b);
        }
        int64_t ta = net_flows_next_ns(rep), tb = net_flows_next_ns(wt);
        cr_assert(llabs(ta - tb) <= 1, "start %d: next end %lld vs %lld", i, (long long)ta, (long long)tb);
        cr_assert_eq(net_flows_advance(rep, (int64_t)i * 50 + 49, NULL, NULL, &e), TS_OK);
        cr_assert_eq(net_flows_advance(wt, (int64_t)i * 50 + 49, NULL, NULL, &e), TS_OK);
        cr_assert_eq(net_flows_active(rep), net_flows_active(wt), "start %d", i);
    }
    cr_assert(repeats > NF, "the bundles repeat links (%d repeats)", repeats);
    cr_assert_eq(net_flows_advance(rep, NET_TIME_NEVER, NULL, NULL, &e), TS_OK);
    cr_assert_eq(net_flows_advance(wt, NET_TIME_NEVER, NULL, NULL, &e), TS_OK);
    cr_assert(llabs(net_flows_now_ns(rep) - net_flows_now_ns(wt)) <= 1);
    for (int l = 0; l < g->n_links; l++) {
        net_link_usage a = net_flows_link_usage(rep, l), b = net_flows_link_usage(wt, l);
        cr_assert(llabs(a.busy_ns - b.busy_ns) <= 1, "link %d busy %lld vs %lld", l, (long long)a.busy_ns,
                  (long long)b.busy_ns);
        cr_assert_float_eq(a.bytes, b.bytes, 1e-9 * a.bytes, "link %d", l);
        cr_assert_float_eq(a.peak_util, b.peak_util, 1e-12, "link %d", l);
    }
    cr_assert_eq(net_flow_start_hint(wt, net_flows_now_ns(wt), (int[]){0}, (int[]){0}, 1, 1, 0, NULL, &e), TS_EINVAL,
                 "a weight below 1 is refused");
    net_flows_free(rep);
    net_flows_free(wt);
    net_router_free(r);
    net_graph_free(g);
}
