/* Topology graph builders, routing with ECMP, rank placement, topo.h
 * conversion. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "sim/config/topo.h"
#include "sim/net/net_coll.h"
#include "sim/net/net_graph.h"
#include "sim/net/net_place.h"
#include "sim/net/net_route.h"
#include "sim/net/net_topo.h"

static int count_kind(const net_graph *g, net_node_kind k, int level)
{
    int n = 0;
    for (int v = 0; v < g->n_nodes; v++)
        if (g->nodes[v].kind == k && (level < 0 || g->nodes[v].level == level))
            n++;
    return n;
}

Test(net_graph, dgx_fabric_shape)
{
    net_fabric_params p;
    ts_err e;
    net_graph *g = NULL;
    cr_assert_eq(net_fabric_defaults(&p, "H100", 64, &e), TS_OK);
    cr_assert_eq(net_graph_build_fabric(&p, &g, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(g->n_gpus, 512);
    cr_assert_eq(count_kind(g, NET_NODE_NIC, -1), 512);
    cr_assert_eq(count_kind(g, NET_NODE_NVSWITCH, -1), 64);
    /* Rail-optimized, 32-port leaves: 2 rail groups x 8 rails. */
    cr_assert_eq(count_kind(g, NET_NODE_SWITCH, 1), 16);
    /* Full bisection: each leaf has 32 x 50 GB/s of uplinks (auto: 32 spines). */
    cr_assert_eq(count_kind(g, NET_NODE_SWITCH, 2), 32);
    /* Rail k of servers 0 and 31 share a leaf; of servers 0 and 32 do not. */
    char b[32];
    cr_assert_str_eq(net_graph_node_name(g, net_graph_gpu_nic(g, 3), b, sizeof b), "nic0.3");
    int nic0 = net_graph_gpu_nic(g, 3), nic31 = net_graph_gpu_nic(g, 31 * 8 + 3),
        nic32 = net_graph_gpu_nic(g, 32 * 8 + 3);
    int leaf = g->links[g->out_link[g->out_off[nic0 + 1] - 1]].dst; /* highest id neighbor: the leaf */
    cr_assert_eq(g->nodes[leaf].kind, NET_NODE_SWITCH);
    cr_assert(net_graph_find_link(g, nic31, leaf) >= 0);
    cr_assert(net_graph_find_link(g, nic32, leaf) < 0);
    cr_assert(g->nvls);
    net_graph_free(g);
}

/* Llama 3 (Dubey et al. 2024): 3072-GPU pods with full bisection, 1:7
 * between pods. Aggregate bandwidth out of a pod's spines is 1/7 of what
 * enters them from the leaves; a lone flow across pods still runs at about
 * the NIC rate (a spine's 96/7 = 13.7 uplink ports become 14 links of 49
 * GB/s: 2% below the port rate). */
Test(net_graph, multipod_llama3)
{
    net_fabric_params p;
    ts_err e;
    net_graph *g = NULL;
    cr_assert_eq(net_fabric_defaults(&p, "H100", 0, &e), TS_OK);
    cr_assert_eq(net_graph_build_multipod(&p, 2, 384, 7.0, &g, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(g->n_gpus, 6144);
    double down = 0, up = 0;
    for (int i = 0; i < g->n_links; i++) {
        const net_link *l = &g->links[i];
        const net_node *a = &g->nodes[l->src], *b = &g->nodes[l->dst];
        if (a->kind == NET_NODE_SWITCH && b->kind == NET_NODE_SWITCH && a->level == 1 && b->level == 2)
            down += l->line_gbps;
        if (a->kind == NET_NODE_SWITCH && b->kind == NET_NODE_SWITCH && a->level == 2 && b->level == 3)
            up += l->line_gbps;
    }
    cr_assert_float_eq(down / up, 7.0, 0.05 * 7.0, "spine down %g up %g", down, up);
    int pair[2] = {0, 3072};
    net_coll_req q = {.kind = NET_COLL_P2P, .algo = NET_ALGO_AUTO, .gpus = pair, .n = 2, .bytes = 1e9};
    int64_t t;
    cr_assert_eq(net_coll_time_ns(g, &q, &t, &e), TS_OK, "%s", e.msg);
    cr_assert(1e9 / (double)t > 0.97 * 50 * topo_nic_eff(50), "%g GB/s", 1e9 / (double)t);
    net_graph_free(g);
}

Test(net_graph, link_list_and_errors)
{
    net_link_spec s[] = {
        {"gpu0.0", "nvs0", 300, 0, 0.5},  {"gpu0.1", "nvs0", 300, 0, 0.5},  {"gpu0.0", "nic0.0", 32, 0, 0.5},
        {"gpu0.1", "nic0.0", 32, 0, 0.5}, {"gpu1.0", "nvs1", 300, 0, 0.5},  {"gpu1.1", "nvs1", 300, 0, 0.5},
        {"gpu1.0", "nic1.0", 32, 0, 0.5}, {"gpu1.1", "nic1.0", 32, 0, 0.5}, {"nic0.0", "sw1.0", 25, 0, 1},
        {"nic1.0", "sw1.0", 25, 0, 1},
    };
    net_graph *g = NULL;
    ts_err e;
    cr_assert_eq(net_graph_from_links(s, 10, 2, &g, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(g->n_gpus, 4);
    int l = net_graph_find_link(g, g->gpu_node[0], net_graph_node_by_name(g, "nvs0"));
    cr_assert(l >= 0);
    cr_assert_eq(g->links[l].kind, NET_LINK_NVLINK);
    cr_assert_float_eq(g->links[l].bw_gbps, 300 * NET_NVLINK_EFF, 1e-9);
    /* Degrade the NIC link of server 1 to half. */
    cr_assert_eq(
        net_graph_scale_link(g, net_graph_node_by_name(g, "nic1.0"), net_graph_node_by_name(g, "sw1.0"), 0.5, &e),
        TS_OK);
    int x = net_graph_find_link(g, net_graph_node_by_name(g, "sw1.0"), net_graph_node_by_name(g, "nic1.0"));
    cr_assert_float_eq(g->links[x].bw_gbps, 25 * topo_nic_eff(25) * 0.5, 1e-9);
    net_graph_free(g);
    g = NULL;
    net_link_spec bad[] = {{"gpu0.0", "router7", 10, 0, 0}};
    cr_assert_eq(net_graph_from_links(bad, 1, 1, &g, &e), TS_EINVAL);
    cr_assert(strstr(e.msg, "entry 0") && strstr(e.msg, "router7"), "%s", e.msg);
    net_link_spec big[] = {{"gpu0.0", "nvs4294967296", 10, 0, 0}}; /* not an int: refused, not wrapped */
    cr_assert_eq(net_graph_from_links(big, 1, 1, &g, &e), TS_EINVAL);
    cr_assert(strstr(e.msg, "nvs4294967296"), "%s", e.msg);
    net_link_spec gap[] = {{"gpu0.0", "nvs0", 10, 0, 0}, {"gpu0.2", "nvs0", 10, 0, 0}};
    cr_assert_eq(net_graph_from_links(gap, 2, 3, &g, &e), TS_EINVAL);
    cr_assert(strstr(e.msg, "gpu0.1"), "%s", e.msg);
    net_link_spec split[] = {{"gpu0.0", "nvs0", 10, 0, 0}, {"gpu1.0", "nvs1", 10, 0, 0}};
    cr_assert_eq(net_graph_from_links(split, 2, 1, &g, &e), TS_EINVAL);
    cr_assert(strstr(e.msg, "disconnected"), "%s", e.msg);
}

Test(net_route, deterministic_ecmp_spreads_destinations)
{
    net_fabric_params p;
    ts_err e;
    net_graph *g = NULL;
    cr_assert_eq(net_fabric_defaults(&p, "A100", 64, &e), TS_OK);
    cr_assert_eq(net_graph_build_fabric(&p, &g, &e), TS_OK, "%s", e.msg);
    net_router *r = NULL;
    cr_assert_eq(net_router_new(g, &r, &e), TS_OK);
    int a = g->gpu_node[0]; /* to GPU 0 of servers 32..63 (the other rail group): through a spine */
    int used[64] = {0}, distinct = 0;
    for (int d = 32; d < 64; d++) {
        int l1[NET_MAX_PATH], l2[NET_MAX_PATH], b = g->gpu_node[d * 8];
        int n1 = net_route(r, a, b, (uint64_t)d, l1, &e), n2 = net_route(r, a, b, (uint64_t)d, l2, &e);
        cr_assert_eq(n1, 6, "gpu-nic-leaf-spine-leaf-nic-gpu: %d links", n1);
        cr_assert_eq(n2, n1);
        cr_assert_arr_eq(l1, l2, sizeof(int) * (size_t)n1, "same flow, same path");
        int spine = g->links[l1[2]].dst;
        cr_assert_eq(g->nodes[spine].level, 2);
        int s = g->nodes[spine].local % 64;
        if (!used[s]++)
            distinct++;
    }
    /* Destination-mod-k: the 32 ports of the destination leaf take the 32 spines. */
    cr_assert_eq(distinct, 32, "32 destinations over %d spines used %d", count_kind(g, NET_NODE_SWITCH, 2), distinct);
    cr_assert_eq(net_route_hash(1, 2, 3, 4), net_route_hash(1, 2, 3, 4));
    /* Same server: through the NVSwitch. */
    int l[NET_MAX_PATH];
    cr_assert_eq(net_route(r, g->gpu_node[0], g->gpu_node[5], 0, l, &e), 2);
    cr_assert_eq(g->nodes[g->links[l[0]].dst].kind, NET_NODE_NVSWITCH);
    net_router_free(r);
    net_graph_free(g);
}

/* Hops of the shortest directed path from a to b over the whole graph. */
static int hops(const net_graph *g, int a, int b)
{
    int *d = malloc(sizeof *d * (size_t)g->n_nodes), *q = malloc(sizeof *q * (size_t)g->n_nodes), head = 0, tail = 0;
    for (int v = 0; v < g->n_nodes; v++)
        d[v] = -1;
    d[a] = 0;
    q[tail++] = a;
    while (head < tail && d[b] < 0) {
        int v = q[head++];
        for (int k = g->out_off[v]; k < g->out_off[v + 1]; k++) {
            int w = g->links[g->out_link[k]].dst;
            if (d[w] < 0) {
                d[w] = d[v] + 1;
                q[tail++] = w;
            }
        }
    }
    int h = d[b];
    free(d);
    free(q);
    return h;
}

/* Every route joins its links end to end from a to b, as short as the
 * shortest path, whatever the flow id. */
static void check_shortest_routes(const net_graph *g, int pairs)
{
    net_router *r = NULL;
    ts_err e;
    cr_assert_eq(net_router_new(g, &r, &e), TS_OK);
    unsigned seed = 7;
    for (int i = 0; i < pairs; i++) {
        seed = seed * 1103515245u + 12345u;
        int a = g->gpu_node[(seed >> 8) % (unsigned)g->n_gpus];
        seed = seed * 1103515245u + 12345u;
        int b = g->gpu_node[(seed >> 8) % (unsigned)g->n_gpus];
        if (a == b)
            continue;
        int l[NET_MAX_PATH], n = net_route(r, a, b, (uint64_t)i, l, &e);
        cr_assert(n > 0, "%s", e.msg);
        cr_assert_eq(g->links[l[0]].src, a);
        cr_assert_eq(g->links[l[n - 1]].dst, b);
        for (int h = 1; h < n; h++)
            cr_assert_eq(g->links[l[h]].src, g->links[l[h - 1]].dst, "pair %d hop %d", i, h);
        cr_assert_eq(n, hops(g, a, b), "pair %d: %d links, shortest %d", i, n, hops(g, a, b));
    }
    net_router_free(r);
}

Test(net_route, routes_are_shortest_paths)
{
    net_fabric_params p;
    ts_err e;
    net_graph *g = NULL;
    cr_assert_eq(net_fabric_defaults(&p, "A100", 64, &e), TS_OK); /* rail-optimized, leaf and spine */
    cr_assert_eq(net_graph_build_fabric(&p, &g, &e), TS_OK, "%s", e.msg);
    check_shortest_routes(g, 300);
    net_graph_free(g);
    cr_assert_eq(net_fabric_defaults(&p, "H100", 0, &e), TS_OK); /* pods joined by a core level, 1:7 */
    cr_assert_eq(net_graph_build_multipod(&p, 2, 32, 7.0, &g, &e), TS_OK, "%s", e.msg);
    check_shortest_routes(g, 300);
    net_graph_free(g);
}

Test(net_place, megatron_order_and_report)
{
    net_fabric_params p;
    ts_err e;
    net_graph *g = NULL;
    cr_assert_eq(net_fabric_defaults(&p, "A100", 8, &e), TS_OK);
    cr_assert_eq(net_graph_build_fabric(&p, &g, &e), TS_OK);
    net_place pl;
    cr_assert_eq(net_place_init(&pl, g, 8, 2, 4, NULL, &e), TS_OK);
    cr_assert_eq(net_place_rank(&pl, 3, 1, 2), 3 + 8 * (1 + 2 * 2));
    int tp, dp, pp;
    net_place_coords(&pl, 43, &tp, &dp, &pp);
    cr_assert(tp == 3 && dp == 1 && pp == 2);
    int gs[8];
    cr_assert_eq(net_place_group_gpus(&pl, NET_DIM_DP, 43, gs), 2);
    cr_assert(gs[0] == 35 && gs[1] == 43);
    cr_assert(!pl.tp_spans_servers);
    net_place_free(&pl);
    /* t = 16 on 8-GPU servers: allowed, reported. */
    cr_assert_eq(net_place_init(&pl, g, 16, 2, 2, "tp-dp-pp", &e), TS_OK);
    cr_assert(pl.tp_spans_servers);
    cr_assert(strstr(pl.note, "spans servers"), "%s", pl.note);
    net_place_free(&pl);
    /* Pipeline innermost puts stages of one replica on one server. */
    cr_assert_eq(net_place_init(&pl, g, 2, 2, 4, "pp-tp-dp", &e), TS_OK);
    cr_assert_eq(net_place_rank(&pl, 1, 0, 3), 3 + 4 * 1);
    net_place_free(&pl);
    cr_assert_eq(net_place_init(&pl, g, 8, 2, 8, NULL, &e), TS_EINVAL); /* 128 ranks > 64 GPUs */
    cr_assert_eq(net_place_init(&pl, g, 8, 2, 2, "tp-tp-pp", &e), TS_EINVAL);
    cr_assert(strstr(e.msg, "permutation"), "%s", e.msg);
    net_graph_free(g);
}

Test(net_topo, parametric_and_link_list)
{
    struct topo t;
    memset(&t, 0, sizeof t);
    t.form = TOPO_PARAMETRIC;
    strcpy(t.source, "test");
    t.params = (topo_params){.nodes = 16,
                             .gpus_per_node = 8,
                             .gpu = "H100-SXM5-80GB",
                             .intra_node_gbps = 450,
                             .intra_node_latency_us = 1.0,
                             .nics_per_node = 8,
                             .nic_gbps = 50,
                             .nic_latency_us = 1.0,
                             .fabric = TOPO_RAIL_OPTIMIZED,
                             .levels = 2,
                             .oversubscription = 2,
                             .switch_latency_us = 0.13,
                             .switch_ports = 64};
    net_graph *g = NULL;
    ts_err e;
    cr_assert_eq(net_graph_from_topo(&t, 64, NULL, &g, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(g->n_gpus, 64, "8 servers for 64 GPUs");
    cr_assert(g->nvls);
    net_graph_free(g);
    /* Pods: 16 servers in 2 pods at 1:4. */
    t.params.oversubscription = 1;
    t.params.pods = 2;
    t.params.pod_oversubscription = 4;
    net_fabric_params p;
    int pods;
    cr_assert_eq(net_topo_fabric_params(&t, 0, &p, &pods, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(pods, 2);
    cr_assert_eq(p.levels, 3);
    cr_assert_float_eq(p.up[3].oversub, 4.0, 1e-12);
    cr_assert_eq(net_graph_from_topo(&t, 0, NULL, &g, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(g->n_gpus, 128);
    net_graph_free(g);
    /* Pods of 4 levels: level 3 joins all of its pod (it used to divide by zero). */
    t.params.levels = 4;
    cr_assert_eq(net_topo_fabric_params(&t, 0, &p, &pods, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(p.levels, 5);
    cr_assert_eq(p.up[3].group, 1, "one level-2 unit per pod");
    cr_assert_float_eq(p.up[5].oversub, 4.0, 1e-12);
    cr_assert_eq(net_graph_from_topo(&t, 0, NULL, &g, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(g->n_gpus, 128);
    net_graph_free(g);
    /* Link list. */
    topo_link links[] = {
        {{TOPO_EP_GPU, 0, 0, 0}, {TOPO_EP_NVSWITCH, 0, 0, 0}, TOPO_LINK_NVLINK, 450, 0.5, 2},
        {{TOPO_EP_GPU, 0, 1, 0}, {TOPO_EP_NVSWITCH, 0, 0, 0}, TOPO_LINK_NVLINK, 450, 0.5, 3},
    };
    struct topo tl;
    memset(&tl, 0, sizeof tl);
    tl.form = TOPO_LINK_LIST;
    strcpy(tl.source, "links.csv");
    tl.params.gpus_per_node = 2;
    tl.params.nodes = 1;
    tl.n_links = 2;
    tl.links = links;
    cr_assert_eq(net_graph_from_topo(&tl, 0, "H200", &g, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(g->n_gpus, 2);
    cr_assert(g->nvls);
    net_graph_free(g);
}
