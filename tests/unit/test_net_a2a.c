/* The MoE all-to-alls on the flow model (net_a2a.h): the plan's transfers
 * and bundles, the closed form on an idle fabric (moe_a2a_ns's), the
 * metamorphic properties, and the expert groups of the placement. */
#include <criterion/criterion.h>
#include <math.h>

#include "sim/net/net_coll.h"
#include "sim/net/net_graph.h"
#include "sim/net/net_place.h"

static net_graph *dgx(const char *kind, int servers)
{
    net_fabric_params p;
    ts_err e;
    net_graph *g = NULL;
    cr_assert_eq(net_fabric_defaults(&p, kind, servers, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(net_graph_build_fabric(&p, &g, &e), TS_OK, "%s", e.msg);
    return g;
}

static net_coll_req a2a(net_coll_kind kind, const int *gpus, int n, double bytes)
{
    return (net_coll_req){.kind = kind, .algo = NET_ALGO_AUTO, .gpus = gpus, .n = n, .bytes = bytes, .flow_key = 7};
}

static void plan_of(const net_graph *g, const net_coll_req *q, net_plan *p)
{
    net_router *r = NULL;
    ts_err e;
    cr_assert_eq(net_router_new(g, &r, &e), TS_OK, "%s", e.msg);
    memset(p, 0, sizeof *p);
    cr_assert_eq(net_coll_plan(g, r, q, p, &e), TS_OK, "%s", e.msg);
    net_router_free(r);
}

static int64_t time_of(const net_graph *g, const net_coll_req *q)
{
    int64_t t = -1;
    ts_err e;
    cr_assert_eq(net_coll_time_ns(g, q, &t, &e), TS_OK, "%s", e.msg);
    return t;
}

/* Effective bandwidth of the link a -> b (node ids). */
static double bw(const net_graph *g, int a, int b)
{
    int l = net_graph_find_link(g, a, b);
    cr_assert_geq(l, 0);
    return g->links[l].bw_gbps;
}

static int server_of_gpu(const net_graph *g, int gpu)
{
    return g->nodes[g->gpu_node[gpu]].server;
}

Test(net_a2a, alltoall_has_a_transfer_per_pair_and_the_closed_form_bytes)
{
    net_graph *g = dgx("A100", 2);
    int gpus[16];
    for (int i = 0; i < 16; i++)
        gpus[i] = i;
    const double S = 15e6; /* what each rank sends */
    for (int sends = 0; sends < 2; sends++) {
        net_coll_req q = a2a(NET_COLL_ALLTOALL, gpus, 16, S);
        q.hot = 1.5;
        q.root = 3;
        q.hot_sends = sends;
        net_plan p;
        plan_of(g, &q, &p);
        cr_assert_eq(p.nph, 1);
        cr_assert_eq(p.nx, 16 * 15, "one transfer per ordered pair: %d", p.nx);
        cr_assert_eq(p.nb, 32, "two bundles per receiver (sender): its server's peers, the others");
        double sum = 0, hot = 0;
        for (int i = 0; i < p.nx; i++) {
            const net_xfer *x = &p.x[i], *x0 = x;
            while (x0 > p.x && x0[-1].bundle == x->bundle)
                x0--; /* the bundle's first transfer */
            sum += x->bytes;
            int own = sends ? x->src : x->dst; /* the bundle's rank */
            cr_assert_eq(own, sends ? x0->src : x0->dst, "a bundle is one rank's");
            cr_assert_eq(x->bytes, x0->bytes, "a bundle's transfers are of one size");
            cr_assert_eq(g->nodes[x->src].server == g->nodes[x->dst].server,
                         g->nodes[x0->src].server == g->nodes[x0->dst].server, "a bundle is local or remote");
            if (own == g->gpu_node[3])
                hot += x->bytes;
        }
        /* every rank sends S; the busiest one receives (sends) 1.5 S */
        cr_assert(fabs(sum - (16 * S + 0.5 * S)) < 1e-6 * S, "sum %g", sum);
        cr_assert(fabs(hot - 1.5 * S) < 1e-6 * S, "hot %g", hot);
        net_plan_free(&p);
    }
    net_graph_free(g);
}

Test(net_a2a, alltoall_on_an_idle_fabric_is_the_closed_form)
{
    for (int servers = 1; servers <= 4; servers *= 2) {
        net_graph *g = dgx("H100", servers);
        int n = 8 * servers, k = 8, gpus[32];
        for (int i = 0; i < n; i++)
            gpus[i] = i;
        const double S = 64e6;
        net_coll_req q = a2a(NET_COLL_ALLTOALL, gpus, n, S);
        net_plan p;
        plan_of(g, &q, &p);
        int v0 = g->gpu_node[0], nvs = net_graph_gpu_nvswitch(g, 0), nic = net_graph_gpu_nic(g, 0);
        double b_nv = bw(g, v0, nvs), b_nic = bw(g, v0, nic);
        for (int i = g->out_off[nic]; i < g->out_off[nic + 1]; i++) /* PCIe and the NIC's cable */
            b_nic = fmin(b_nic, g->links[g->out_link[i]].bw_gbps);
        double t_nv = S * (k - 1) / (n - 1) / b_nv, t_net = servers > 1 ? S * (n - k) / (n - 1) / b_nic : 0;
        double want = (double)p.lat_ns + fmax(t_nv, t_net);
        int64_t got = time_of(g, &q);
        cr_assert(fabs((double)got - want) <= 2.0, "%d servers: %lld ns, closed form %.1f", servers, (long long)got,
                  want);
        net_plan_free(&p);
        net_graph_free(g);
    }
}

Test(net_a2a, deepep_sends_one_rdma_copy_per_remote_node_to_the_same_local_gpu)
{
    net_graph *g = dgx("H100", 4);
    int gpus[32];
    for (int i = 0; i < 32; i++)
        gpus[i] = i;
    net_coll_req q = a2a(NET_COLL_DEEPEP, gpus, 32, 7e6);
    q.rdma_bytes = 3e6;
    net_plan p;
    plan_of(g, &q, &p);
    cr_assert_eq(p.nx, 32 * 7 + 32 * 3, "7 NVLink peers and 3 remote nodes per rank: %d", p.nx);
    double nvl = 0, rdma = 0;
    for (int i = 0; i < p.nx; i++) {
        const net_node *a = &g->nodes[p.x[i].src], *b = &g->nodes[p.x[i].dst];
        if (a->server == b->server) {
            nvl += p.x[i].bytes;
        } else {
            cr_assert_eq(a->local, b->local, "an RDMA copy goes to the GPU of the same local index");
            rdma += p.x[i].bytes;
        }
    }
    cr_assert(fabs(nvl - 32 * 7e6) < 1 && fabs(rdma - 32 * 3e6) < 1, "NVLink %g, RDMA %g", nvl, rdma);
    /* idle fabric: moe_deepep_ns's closed form, max(NVLink bytes / B_nvlink, RDMA bytes / B_nic) */
    int v0 = g->gpu_node[0], nic = net_graph_gpu_nic(g, 0);
    double b_nic = bw(g, v0, nic);
    for (int i = g->out_off[nic]; i < g->out_off[nic + 1]; i++)
        b_nic = fmin(b_nic, g->links[g->out_link[i]].bw_gbps);
    for (int k = 0; k < 2; k++) { /* NIC-bound, then NVLink-bound */
        net_coll_req t = q;
        t.bytes = k ? 40e6 : 7e6;
        double want = (double)p.lat_ns + fmax(t.bytes / bw(g, v0, net_graph_gpu_nvswitch(g, 0)), 3e6 / b_nic);
        int64_t got = time_of(g, &t);
        cr_assert(fabs((double)got - want) <= 2.0, "DeepEP: %lld ns, closed form %.1f", (long long)got, want);
    }
    net_plan_free(&p);
    /* a group with unequal shares of its servers is refused */
    int uneven[12];
    for (int i = 0; i < 12; i++)
        uneven[i] = i;
    net_router *r = NULL;
    ts_err e;
    cr_assert_eq(net_router_new(g, &r, &e), TS_OK);
    net_coll_req u = a2a(NET_COLL_DEEPEP, uneven, 12, 7e6);
    u.rdma_bytes = 1e6;
    memset(&p, 0, sizeof p);
    cr_assert_eq(net_coll_plan(g, r, &u, &p, &e), TS_EINVAL);
    cr_assert(strstr(e.msg, "unequal") != NULL, "%s", e.msg);
    net_plan_free(&p);
    net_router_free(r);
    net_graph_free(g);
}

Test(net_a2a, metamorphic_nic_and_skew)
{
    net_graph *g = dgx("A100", 2);
    int gpus[16];
    for (int i = 0; i < 16; i++)
        gpus[i] = i;
    net_coll_req across = a2a(NET_COLL_ALLTOALL, gpus, 16, 32e6), inside = a2a(NET_COLL_ALLTOALL, gpus, 8, 32e6);
    int64_t t_across = time_of(g, &across), t_inside = time_of(g, &inside);
    /* routing skew: the busiest rank receives more, never faster */
    double prev = 0;
    for (int k = 0; k <= 4; k++) {
        double hot = 1 + 0.5 * k;
        net_coll_req h = across;
        h.hot = hot;
        int64_t t = time_of(g, &h);
        cr_assert_geq((double)t, prev, "hot %g: %lld ns", hot, (long long)t);
        prev = (double)t;
    }
    /* a slower NIC (every GPU's, by halves) never makes it faster; inside
     * one server the all-to-all does not touch a NIC */
    int64_t last = t_across;
    for (int step = 0; step < 3; step++) {
        for (int gpu = 0; gpu < 16; gpu++) {
            int v = g->gpu_node[gpu], nic = net_graph_gpu_nic(g, gpu);
            ts_err e;
            cr_assert_eq(net_graph_scale_link(g, v, nic, 0.5, &e), TS_OK, "%s", e.msg);
        }
        int64_t t = time_of(g, &across);
        cr_assert_geq(t, last, "NIC / %d: %lld ns < %lld ns", 2 << step, (long long)t, (long long)last);
        last = t;
        cr_assert_eq(time_of(g, &inside), t_inside, "one server: independent of the NIC");
    }
    cr_assert_gt(last, t_across, "an eighth of the NIC rate is slower");
    cr_assert_eq(server_of_gpu(g, 0), server_of_gpu(g, 7));
    net_graph_free(g);
}

Test(net_a2a, zero_bytes_move_nothing_and_bad_requests_are_refused)
{
    net_graph *g = dgx("A100", 1);
    int gpus[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    net_coll_req q = a2a(NET_COLL_ALLTOALL, gpus, 8, 0);
    cr_assert_eq(time_of(g, &q), 0);
    net_router *r = NULL;
    ts_err e;
    cr_assert_eq(net_router_new(g, &r, &e), TS_OK);
    net_plan p = {0};
    q.bytes = 1e6;
    q.root = 8;
    cr_assert_eq(net_coll_plan(g, r, &q, &p, &e), TS_EINVAL);
    q.root = 0;
    q.hot = 0.5;
    cr_assert_eq(net_coll_plan(g, r, &q, &p, &e), TS_EINVAL);
    cr_assert(strstr(e.msg, ">= 1") != NULL, "%s", e.msg);
    net_plan_free(&p);
    net_router_free(r);
    net_graph_free(g);
}

Test(net_a2a, expert_groups_fold_etp_ep_edp_over_a_stage)
{
    net_graph *g = dgx("A100", 4);
    net_place pl;
    ts_err e;
    int t = 2, d = 8, p = 2, ranks[16];
    cr_assert_eq(net_place_init(&pl, g, t, d, p, NULL, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(net_place_set_experts(&pl, 3, 1, &e), TS_EINVAL, "3 does not divide t d = 16");
    cr_assert_eq(net_place_set_experts(&pl, 4, 1, &e), TS_OK, "%s", e.msg);
    /* rank (tp 1, dp 2, pp 1): stage index s = 1 + 2 x 2 = 5; EP group s = 4..7, EDP s = 1, 5, 9, 13 */
    int r = net_place_rank(&pl, 1, 2, 1);
    cr_assert_eq(net_place_ep_ranks(&pl, r, ranks), 4);
    int want_ep[4][2] = {{0, 2}, {1, 2}, {0, 3}, {1, 3}};
    for (int j = 0; j < 4; j++)
        cr_assert_eq(ranks[j], net_place_rank(&pl, want_ep[j][0], want_ep[j][1], 1), "EP member %d", j);
    cr_assert_eq(net_place_edp_ranks(&pl, r, ranks), 4);
    for (int j = 0; j < 4; j++) {
        int s = 1 + 4 * j;
        cr_assert_eq(ranks[j], net_place_rank(&pl, s % t, s / t, 1), "EDP member %d", j);
    }
    /* every group's leader is its first member, and every member is in its own group */
    for (int kind = NET_PLACE_TP; kind <= NET_PLACE_EDP; kind++)
        for (int q = 0; q < pl.n_ranks; q++) {
            int m = net_place_group_ranks(&pl, kind, q, ranks), in = 0;
            cr_assert_eq(net_place_group_leader(&pl, kind, q), ranks[0], "kind %d, rank %d", kind, q);
            for (int j = 0; j < m; j++)
                in |= ranks[j] == q;
            cr_assert(in, "rank %d in its group of kind %d", q, kind);
        }
    /* etp 2: ep ranks a stride of 2 apart, s = 5, 7 */
    cr_assert_eq(net_place_set_experts(&pl, 2, 2, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(net_place_ep_ranks(&pl, r, ranks), 2);
    cr_assert_eq(ranks[0], net_place_rank(&pl, 1, 2, 1));
    cr_assert_eq(ranks[1], net_place_rank(&pl, 1, 3, 1));
    net_place_free(&pl);
    net_graph_free(g);
}

/* Transfer a -> b's index in p (-1 if none). */
static int xfer_of(const net_plan *p, int src, int dst)
{
    for (int i = 0; i < p->nx; i++)
        if (p->x[i].src == src && p->x[i].dst == dst)
            return i;
    return -1;
}

Test(net_a2a, merged_peers_keep_the_transfers_routes_and_time)
{
    /* merge_peers (the symmetric mode): root's two bundles and the other
     * positions' local and remote transfers as one bundle each (without
     * skew, root's with them: two bundles); the same
     * transfers over the same routes, the same time on an idle fabric (to
     * the ns), and on a fabric where the peers differ (one of them behind a
     * NIC at a quarter) no earlier than the bundles one by one. */
    for (int deepep = 0; deepep < 2; deepep++) {
        net_graph *g = dgx(deepep ? "H100" : "A100", deepep ? 4 : 2);
        int n = deepep ? 32 : 16, gpus[32];
        for (int i = 0; i < n; i++)
            gpus[i] = i;
        for (int sends = 0; sends < 2; sends++) {
            net_coll_req q = a2a(deepep ? NET_COLL_DEEPEP : NET_COLL_ALLTOALL, gpus, n, 24e6);
            q.rdma_bytes = deepep ? 9e6 : 0;
            q.hot = 1.5;
            q.root = 3;
            q.hot_sends = sends;
            net_coll_req m = q;
            m.merge_peers = 1;
            net_plan p, pm;
            plan_of(g, &q, &p);
            plan_of(g, &m, &pm);
            cr_assert_eq(pm.nx, p.nx);
            cr_assert_eq(pm.nb, 4, "root's local and remote bundles, the peers' local and remote ones: %d", pm.nb);
            int root = g->gpu_node[3];
            for (int i = 0; i < pm.nx; i++) {
                const net_xfer *x = &pm.x[i];
                int j = xfer_of(&p, x->src, x->dst);
                cr_assert(j >= 0 && p.x[j].bytes == x->bytes && p.x[j].nlinks == x->nlinks &&
                              !memcmp(p.x[j].links, x->links, sizeof *x->links * (size_t)x->nlinks),
                          "transfer %d -> %d: the same bytes and route", x->src, x->dst);
                int own = sends ? x->src : x->dst;
                cr_assert_eq(x->bundle < 2, own == root, "root's transfers are bundles 0 and 1 alone");
            }
            int64_t t = time_of(g, &q), tm = time_of(g, &m);
            cr_assert(llabs(t - tm) <= 1, "%s, %s: idle fabric %lld ns merged, %lld one by one",
                      deepep ? "DeepEP" : "alltoall", sends ? "combine" : "dispatch", (long long)tm, (long long)t);
            net_plan_free(&p);
            net_plan_free(&pm);
            /* without skew root is a peer like the others: two flows */
            q.hot = m.hot = 1;
            plan_of(g, &m, &pm);
            cr_assert_eq(pm.nb, 2, "balanced: the local and the remote transfers, %d bundles", pm.nb);
            net_plan_free(&pm);
            int64_t tb = time_of(g, &q), tbm = time_of(g, &m);
            cr_assert(llabs(tb - tbm) <= 1, "balanced: %lld ns merged, %lld one by one", (long long)tbm, (long long)tb);
        }
        ts_err e;
        int v = g->gpu_node[n - 1];
        cr_assert_eq(net_graph_scale_link(g, v, net_graph_gpu_nic(g, n - 1), 0.25, &e), TS_OK, "%s", e.msg);
        for (int sends = 0; sends < 2; sends++) {
            net_coll_req q = a2a(deepep ? NET_COLL_DEEPEP : NET_COLL_ALLTOALL, gpus, n, 24e6);
            q.rdma_bytes = deepep ? 9e6 : 0;
            q.hot = 1.5;
            q.root = 3;
            q.hot_sends = sends;
            net_coll_req m = q;
            m.merge_peers = 1;
            int64_t t = time_of(g, &q), tm = time_of(g, &m);
            cr_assert_geq(tm, t, "a slow peer NIC: merged %lld ns, one by one %lld", (long long)tm, (long long)t);
        }
        net_graph_free(g);
    }
}
