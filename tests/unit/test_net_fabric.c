/* Fabric design properties, checked with max-min fair flows on the built
 * graphs against closed forms: a shifted permutation across servers on a
 * non-blocking fabric runs at the NIC's payload rate whatever the node
 * count (no cliff when the last unit is partly filled); cross-leaf traffic
 * on an oversubscribed leaf slows by the leaf's down:up port ratio; a
 * failed link is routed around, and a cut that disconnects is refused. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/config/topo.h"
#include "sim/net/net_flow.h"
#include "sim/net/net_graph.h"
#include "sim/net/net_route.h"
#include "sim/net/net_topo.h"

/* A parametric topology like topologies/selene-dgx-a100.csv (nodes servers
 * of 8 A100s, 8 x 25 GB/s NICs, `ports`-port switches). */
static void selene(struct topo *t, int nodes, topo_fabric fabric, int levels, double oversub, int ports)
{
    memset(t, 0, sizeof *t);
    t->form = TOPO_PARAMETRIC;
    strcpy(t->source, "test");
    t->params = (topo_params){.nodes = nodes,
                              .gpus_per_node = 8,
                              .gpu = "A100-SXM4-80GB",
                              .intra_node_gbps = 300,
                              .intra_node_latency_us = 0.6,
                              .nics_per_node = 8,
                              .nic_gbps = 25,
                              .nic_latency_us = 0.6,
                              .fabric = fabric,
                              .levels = levels,
                              .oversubscription = oversub,
                              .switch_latency_us = 0.13,
                              .switch_ports = ports,
                              .pod_oversubscription = 1};
}

static void count_done(void *ctx, int flow, uint64_t tag, int64_t t_ns)
{
    (void)flow;
    (void)tag;
    (void)t_ns;
    (*(int *)ctx)++;
}

/* Start one flow of `bytes` per pair (GPU indices) at time 0 and return the
 * time the last one ends, ns. */
static int64_t pairs_time_ns(const net_graph *g, const int *src, const int *dst, int n, double bytes)
{
    net_router *r = NULL;
    net_flows *f = NULL;
    ts_err e;
    cr_assert_eq(net_router_new(g, &r, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(net_flows_new(g, &f, &e), TS_OK, "%s", e.msg);
    for (int i = 0; i < n; i++) {
        int l[NET_MAX_PATH];
        int nl = net_route(r, g->gpu_node[src[i]], g->gpu_node[dst[i]], (uint64_t)i, l, &e);
        cr_assert(nl > 0, "%s", e.msg);
        cr_assert(net_flow_start(f, 0, l, nl, bytes, (uint64_t)i, &e) >= 0, "%s", e.msg);
    }
    int done = 0;
    int64_t t = 0, nx;
    while (net_flows_active(f) > 0) {
        nx = net_flows_next_ns(f);
        cr_assert_eq(net_flows_advance(f, nx, count_done, &done, &e), TS_OK, "%s", e.msg);
        t = nx;
    }
    cr_assert_eq(done, n);
    net_flows_free(f);
    net_router_free(r);
    return t;
}

/* GPU k of every server sends to GPU k of the next server (a DP ring of
 * every rail at once, the inter-server step of a ring all-reduce); returns
 * the time for `bytes` per flow. */
static int64_t rail_ring_ns(const struct topo *t, int gpus, double bytes)
{
    net_graph *g = NULL;
    ts_err e;
    cr_assert_eq(net_graph_from_topo(t, gpus, NULL, &g, &e), TS_OK, "%s", e.msg);
    int n = g->n_gpus, S = n / 8;
    int *src = malloc(sizeof *src * (size_t)n), *dst = malloc(sizeof *dst * (size_t)n);
    for (int i = 0; i < n; i++) {
        src[i] = i;
        dst[i] = ((i / 8 + 1) % S) * 8 + i % 8;
    }
    int64_t ns = pairs_time_ns(g, src, dst, n, bytes);
    free(src);
    free(dst);
    net_graph_free(g);
    return ns;
}

/* Every server's GPU 7 sends to the next server's GPU 0 (the cross-server
 * hop of one ring over all GPUs in rank order: rail 7 to rail 0, through
 * the spines). */
static int64_t cross_rail_ring_ns(const struct topo *t, int gpus, double bytes)
{
    net_graph *g = NULL;
    ts_err e;
    cr_assert_eq(net_graph_from_topo(t, gpus, NULL, &g, &e), TS_OK, "%s", e.msg);
    int S = g->n_gpus / 8;
    int *src = malloc(sizeof *src * (size_t)S), *dst = malloc(sizeof *dst * (size_t)S);
    for (int s = 0; s < S; s++) {
        src[s] = s * 8 + 7;
        dst[s] = ((s + 1) % S) * 8;
    }
    int64_t ns = pairs_time_ns(g, src, dst, S, bytes);
    free(src);
    free(dst);
    net_graph_free(g);
    return ns;
}

/* 1 GB per flow at the NIC's payload rate 25 x topo_nic_eff(25) GB/s (= bytes/ns). */
#define BYTES 1e9
static double nic_ns(void)
{
    return BYTES / (25 * topo_nic_eff(25));
}

Test(net_fabric, dp_ring_at_nic_rate_without_cliffs)
{
    struct topo t;
    /* Selene: 40-port switches, 20-node units; 320 GPUs fill 2 units, 328
     * start a third with one node. */
    int counts[] = {64, 160, 320, 328, 336, 480, 488};
    for (size_t i = 0; i < sizeof counts / sizeof *counts; i++) {
        selene(&t, 560, TOPO_RAIL_OPTIMIZED, 3, 1, 40);
        double a = (double)rail_ring_ns(&t, counts[i], BYTES) / nic_ns();
        double b = (double)cross_rail_ring_ns(&t, counts[i], BYTES) / nic_ns();
        cr_assert(a >= 0.999 && a < 1.01, "%d GPUs rail rings: %.4f x the NIC closed form", counts[i], a);
        cr_assert(b >= 0.999 && b < 1.01, "%d GPUs cross-rail ring: %.4f x the NIC closed form", counts[i], b);
        if (counts[i] % 160) /* see below */
            continue;
        selene(&t, 560, TOPO_FAT_TREE, 3, 1, 40);
        a = (double)rail_ring_ns(&t, counts[i], BYTES) / nic_ns();
        cr_assert(a >= 0.999 && a < 1.01, "%d GPUs, fat tree: %.4f x the NIC closed form", counts[i], a);
    }
    /* Not asserted: on a (non-rail) fat tree whose last leaf is partly
     * filled, the ring's wrap-around sends one leaf's flows to the same
     * ports of two leaves, which destination-mod-k routing puts on one
     * uplink (2 x the closed form for that flow). */
    /* H100 cluster (64-port switches, 32-node units): 256 and 264 GPUs. */
    selene(&t, 1024, TOPO_RAIL_OPTIMIZED, 3, 1, 64);
    t.params.nic_gbps = 50;
    for (int gpus = 256; gpus <= 264; gpus += 8) {
        double a = (double)cross_rail_ring_ns(&t, gpus, BYTES) / (BYTES / (50 * topo_nic_eff(50)));
        cr_assert(a >= 0.999 && a < 1.01, "H100 %d GPUs: %.4f x the NIC closed form", gpus, a);
    }
}

/* All NICs of each leaf send to the same port of the next leaf (a 2-level
 * fat tree of 40-port switches, 8 full leaves): the leaf's uplinks carry
 * down/up flows each, so the time is (down/up) x the NIC closed form, with
 * down = round(40 o / (1 + o)) NIC ports and up = 40 - down. */
Test(net_fabric, oversubscription_slows_cross_leaf_traffic_by_the_port_ratio)
{
    struct {
        double o;
        int down;
    } cases[] = {{1, 20}, {3, 30}, {4, 32}};
    double prev = 0;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        struct topo t;
        int D = cases[c].down, leaves = 8;
        selene(&t, D * leaves / 8, TOPO_FAT_TREE, 2, cases[c].o, 40);
        net_graph *g = NULL;
        ts_err e;
        cr_assert_eq(net_graph_from_topo(&t, 0, NULL, &g, &e), TS_OK, "%s", e.msg);
        int n = D * leaves;
        int *src = malloc(sizeof *src * (size_t)n), *dst = malloc(sizeof *dst * (size_t)n);
        for (int i = 0; i < n; i++) { /* NIC i is on leaf i / D; GPU i uses NIC i */
            src[i] = i;
            dst[i] = (i + D) % n;
        }
        double ratio = (double)pairs_time_ns(g, src, dst, n, BYTES) / nic_ns();
        double want = (double)D / (40 - D);
        cr_assert(fabs(ratio / want - 1) < 0.01, "%g:1: %.4f x the NIC closed form, want %.4f", cases[c].o, ratio,
                  want);
        cr_assert(ratio > prev, "more oversubscription is slower");
        prev = ratio;
        free(src);
        free(dst);
        net_graph_free(g);
    }
}

Test(net_fabric, failed_link_reroutes_and_a_cut_is_refused)
{
    struct topo t;
    selene(&t, 560, TOPO_RAIL_OPTIMIZED, 2, 1, 40);
    net_graph *g = NULL;
    ts_err e;
    cr_assert_eq(net_graph_from_topo(&t, 320, NULL, &g, &e), TS_OK, "%s", e.msg);
    double before = (double)cross_rail_ring_ns(&t, 320, BYTES);
    /* One uplink of leaf sw1.7 (rail 7 of unit 0) fails: its 20 spines become 19. */
    int leaf = net_graph_node_by_name(g, "sw1.7"), spine = net_graph_node_by_name(g, "sw2.0");
    cr_assert_eq(net_graph_fail_link(g, leaf, spine, &e), TS_OK, "%s", e.msg);
    net_router *r = NULL;
    cr_assert_eq(net_router_new(g, &r, &e), TS_OK);
    for (int s = 0; s < 20; s++) {
        int l[NET_MAX_PATH], n = net_route(r, g->gpu_node[s * 8 + 7], g->gpu_node[((s + 21) % 40) * 8 + 7], 0, l, &e);
        cr_assert(n > 0, "%s", e.msg);
        for (int h = 0; h < n; h++)
            cr_assert(!g->links[l[h]].down, "route over a failed link");
    }
    net_router_free(r);
    cr_assert_eq(net_route_check_gpus(g, &e), TS_OK, "%s", e.msg);
    /* Cut nic0.3's only cable: gpu0.3 can no longer reach the other servers. */
    int nic = net_graph_node_by_name(g, "nic0.3"), l0 = net_graph_node_by_name(g, "sw1.3");
    cr_assert_eq(net_graph_fail_link(g, nic, l0, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(net_route_check_gpus(g, &e), TS_EINVAL);
    cr_assert(strstr(e.msg, "gpu0.3") && strstr(e.msg, "gpu1.3"), "%s", e.msg);
    net_graph_free(g);
    cr_assert(before > 0);
}

/* Count the nodes of a kind (switches: of one level). */
static int count_nodes(const net_graph *g, net_node_kind k, int level)
{
    int n = 0;
    for (int v = 0; v < g->n_nodes; v++)
        n += g->nodes[v].kind == k && (k != NET_NODE_SWITCH || g->nodes[v].level == level);
    return n;
}

/* The shipped Blackwell and Llama 3 files load and build as documented in
 * their comment rows (run from the repository root). */
Test(net_fabric, shipped_blackwell_and_llama3_topologies)
{
    topo *t = NULL;
    net_graph *g = NULL;
    ts_err e;
    cr_assert_eq(topo_load("topologies/gb200-nvl72.csv", &t, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(t->params.gpus_per_node, 72, "one NVLink domain per rack");
    cr_assert_eq(net_graph_from_topo(t, 144, NULL, &g, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(g->n_gpus, 144);
    cr_assert_eq(count_nodes(g, NET_NODE_NVSWITCH, 0), 2, "2 racks, one NVLink domain each");
    cr_assert(net_graph_gpu_nvswitch(g, 0) == net_graph_gpu_nvswitch(g, 71), "GPUs 0 and 71 share a domain");
    cr_assert(net_graph_gpu_nvswitch(g, 0) != net_graph_gpu_nvswitch(g, 72));
    cr_assert(g->nvls);
    net_graph_free(g);
    topo_free(t);
    cr_assert_eq(topo_load("topologies/dgx-b200-superpod.csv", &t, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(topo_gpu_capacity(t), 1024);
    cr_assert_eq(net_graph_from_topo(t, 0, NULL, &g, &e), TS_OK, "%s", e.msg);
    /* 4 units of 32 nodes x 8 rails = 32 leaves, each with 32 uplinks: 32 spines. */
    cr_assert_eq(count_nodes(g, NET_NODE_SWITCH, 1), 32);
    cr_assert_eq(count_nodes(g, NET_NODE_SWITCH, 2), 32);
    net_graph_free(g);
    topo_free(t);
    cr_assert_eq(topo_load("topologies/llama3-24k-h100.csv", &t, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(topo_gpu_capacity(t), 24576);
    net_fabric_params p;
    int pods = 0;
    /* 8192 GPUs (Llama 3 405B's run) fill 2 pods of 3072 and part of a third. */
    cr_assert_eq(net_topo_fabric_params(t, 8192, &p, &pods, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(pods, 3);
    cr_assert_eq(p.pod_servers, 384);
    cr_assert_float_eq(p.up[p.levels].oversub, 7.0, 1e-12);
    topo_free(t);
}
