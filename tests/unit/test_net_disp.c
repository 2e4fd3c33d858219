/* The MoE dispatchers' gathers and context parallelism in the flow modes:
 * the expert-tensor-parallel and tp_ep groups of the placement
 * (Megatron-core's etp-ep-edp fold), and net_engine running a collective
 * along them: every member's task ends when the group's collective does, at
 * the time of that collective alone on an idle fabric over the group's
 * GPUs, in the symmetric and full modes alike; the full mode runs one
 * collective per group. The context-parallel groups (cp inside dp, an
 * all-to-all and a ring level) and the ring step's plan and closed form. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "sim/core/engine.h"
#include "sim/net/net_coll.h"
#include "sim/net/net_engine.h"
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

static bool has(const int *ranks, int n, int r)
{
    for (int j = 0; j < n; j++)
        if (ranks[j] == r)
            return true;
    return false;
}

/* t 2, d 8, p 2 on 4 DGX A100s, etp 2 x ep 4: rank (tp 1, dp 2, pp 1) is
 * stage index s = 1 + 2 x 2 = 5; its ETP group s = 4, 5, its tp_ep group
 * s = 0..7, its EP group s = 5, 7 (a stride of etp), its EDP group s = 5, 13. */
Test(net_disp, etp_and_tp_ep_groups_are_consecutive_blocks_of_the_fold)
{
    net_graph *g = dgx("A100", 4);
    net_place pl;
    ts_err e;
    int t = 2, d = 8, p = 2, ranks[16], ep[16];
    cr_assert_eq(net_place_init(&pl, g, t, d, p, NULL, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(net_place_set_experts(&pl, 4, 2, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(net_place_group_size(&pl, NET_PLACE_ETP), 2);
    cr_assert_eq(net_place_group_size(&pl, NET_PLACE_TPEP), 8);
    cr_assert_eq(net_place_group_size(&pl, NET_PLACE_EP), 4);
    cr_assert_eq(net_place_group_size(&pl, NET_PLACE_EDP), 2);
    int r = net_place_rank(&pl, 1, 2, 1);
    cr_assert_eq(net_place_group_ranks(&pl, NET_PLACE_ETP, r, ranks), 2);
    for (int j = 0; j < 2; j++) {
        int s = 4 + j;
        cr_assert_eq(ranks[j], net_place_rank(&pl, s % t, s / t, 1), "ETP member %d", j);
    }
    cr_assert_eq(net_place_group_ranks(&pl, NET_PLACE_TPEP, r, ranks), 8);
    for (int j = 0; j < 8; j++)
        cr_assert_eq(ranks[j], net_place_rank(&pl, j % t, j / t, 1), "tp_ep member %d", j);
    /* the EP group lies in the tp_ep group and meets the ETP group in the rank alone */
    int nep = net_place_group_ranks(&pl, NET_PLACE_EP, r, ep);
    for (int j = 0; j < nep; j++)
        cr_assert(has(ranks, 8, ep[j]), "EP member %d in the tp_ep group", j);
    int netp = net_place_group_ranks(&pl, NET_PLACE_ETP, r, ranks);
    for (int j = 0; j < netp; j++)
        cr_assert_eq(has(ep, nep, ranks[j]), ranks[j] == r, "ETP member %d in the EP group", j);
    /* every group's leader is its first member, every member is in its own
     * group, and the groups of a kind partition the ranks */
    for (int kind = 0; kind < NET_PLACE_KINDS; kind++) {
        int size = net_place_group_size(&pl, kind), leaders = 0;
        for (int q = 0; q < pl.n_ranks; q++) {
            int m = net_place_group_ranks(&pl, kind, q, ranks);
            cr_assert_eq(m, size, "kind %d", kind);
            cr_assert_eq(net_place_group_leader(&pl, kind, q), ranks[0], "kind %d, rank %d", kind, q);
            cr_assert(has(ranks, m, q), "rank %d in its group of kind %d", q, kind);
            leaders += net_place_group_leader(&pl, kind, q) == q;
        }
        cr_assert_eq(leaders * size, pl.n_ranks, "kind %d: %d groups of %d", kind, leaders, size);
    }
    /* etp 2 keeps an ETP group on one server: two consecutive ranks */
    for (int q = 0; q < pl.n_ranks; q++) {
        net_place_group_ranks(&pl, NET_PLACE_ETP, q, ranks);
        cr_assert_eq(g->nodes[g->gpu_node[pl.gpu_of_rank[ranks[0]]]].server,
                     g->nodes[g->gpu_node[pl.gpu_of_rank[ranks[1]]]].server, "rank %d", q);
    }
    net_place_free(&pl);
    net_graph_free(g);
}

/* One task per rank: a collective of `coll` along `dim` of S bytes. */
typedef struct {
    uint8_t coll, dim;
    double bytes;
} one_coll;

static int describe(void *ctx, uint32_t tag, net_step_desc *d, ts_err *err)
{
    (void)tag;
    (void)err;
    const one_coll *oc = ctx;
    *d = (net_step_desc){.role = NET_STEP_COLL, .coll = oc->coll, .dim = oc->dim, .bytes = oc->bytes};
    return TS_OK;
}

typedef struct {
    int64_t end_ns; /* the last task's end */
    uint64_t collectives;
} one_out;

/* t 1, d 16, p 1 on 2 DGX H100s, etp 2 x ep 8 (so the tp_ep group is the
 * 16 ranks over both servers, an ETP group two GPUs of one server); with
 * cp > 0 instead of experts, context parallelism of cp (ring level). */
static one_out run_one(const net_graph *g, const one_coll *oc, bool full, int cp)
{
    ts_err err;
    net_place pl;
    cr_assert_eq(net_place_init(&pl, g, 1, 16, 1, NULL, &err), TS_OK, "%s", err.msg);
    if (cp > 0)
        cr_assert_eq(net_place_set_cp(&pl, cp, 1, &err), TS_OK, "%s", err.msg);
    else
        cr_assert_eq(net_place_set_experts(&pl, 8, 2, &err), TS_OK, "%s", err.msg);
    net_engine_opts o = {full, 0, NET_ALGO_AUTO};
    net_engine *ne = NULL;
    cr_assert_eq(net_engine_new(g, &pl, &o, describe, (void *)oc, &ne, &err), TS_OK, "%s", err.msg);
    engine_hooks h = net_engine_hooks(ne);
    engine *e = NULL;
    cr_assert_eq(engine_create(net_engine_n_ranks(ne), 1, &h, &e, &err), TS_OK, "%s", err.msg);
    for (int r = 0; r < net_engine_n_ranks(ne); r++) {
        engine_task_id id;
        cr_assert_eq(engine_task_add(e, r, 0, 0, 0, 0, &id, &err), TS_OK, "%s", err.msg);
    }
    cr_assert_eq(net_engine_attach(ne, e, &err), TS_OK, "%s", err.msg);
    int rc = engine_run(e, &err);
    ts_err nerr;
    cr_assert_eq(net_engine_error(ne, &nerr), TS_OK, "%s", nerr.msg);
    cr_assert_eq(rc, TS_OK, "%s", err.msg);
    one_out out = {engine_makespan_ns(e), net_engine_get_stats(ne).collectives};
    for (uint32_t id = 0; id < engine_task_count(e); id++)
        cr_assert_eq(engine_task_end_ns(e, id), out.end_ns, "task %u ends with its group's collective", id);
    engine_free(e);
    net_engine_free(ne);
    net_place_free(&pl);
    return out;
}

static int64_t alone_ns(const net_graph *g, net_coll_kind kind, int first, int n, double bytes)
{
    int gpus[16];
    ts_err err;
    for (int j = 0; j < n; j++)
        gpus[j] = first + j;
    net_coll_req q = {.kind = kind, .algo = NET_ALGO_AUTO, .gpus = gpus, .n = n, .bytes = bytes};
    int64_t ns;
    cr_assert_eq(net_coll_time_ns(g, &q, &ns, &err), TS_OK, "%s", err.msg);
    return ns;
}

Test(net_disp, expert_and_cp_collectives_run_over_the_whole_group_at_their_idle_time)
{
    net_graph *g = dgx("H100", 2);
    const struct {
        one_coll c;
        int n, groups, cp;
    } cases[] = {
        {{NET_COLL_ALLGATHER, NET_DIM_TPEP, 64e6}, 16, 1, 0},
        {{NET_COLL_REDUCE_SCATTER, NET_DIM_TPEP, 64e6}, 16, 1, 0},
        {{NET_COLL_ALLGATHER, NET_DIM_ETP, 64e6}, 2, 8, 0},
        {{NET_COLL_REDUCE_SCATTER, NET_DIM_ETP, 64e6}, 2, 8, 0},
        /* context parallelism: rings of 4 consecutive ranks (t 1), 16 over both servers */
        {{NET_COLL_RING_STEP, NET_DIM_CPR, 64e6}, 4, 4, 4},
        {{NET_COLL_RING_STEP, NET_DIM_CPR, 64e6}, 16, 1, 16},
        {{NET_COLL_ALLGATHER, NET_DIM_CPR, 64e6}, 16, 1, 16},
        /* the aux loss's and FP8 amax's all-reduces: t x cp = 4 consecutive ranks, a stage's 16 */
        {{NET_COLL_ALLREDUCE, NET_DIM_TCP, 64e6}, 4, 4, 4},
        {{NET_COLL_ALLREDUCE, NET_DIM_STAGE, 64e6}, 16, 1, 4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        one_out sym = run_one(g, &cases[i].c, false, cases[i].cp), full = run_one(g, &cases[i].c, true, cases[i].cp);
        int64_t want = alone_ns(g, (net_coll_kind)cases[i].c.coll, 0, cases[i].n, cases[i].c.bytes);
        cr_assert_eq(sym.end_ns, want, "case %zu: symmetric %lld ns, alone %lld ns", i, (long long)sym.end_ns,
                     (long long)want);
        cr_assert_eq(full.end_ns, want, "case %zu: full %lld ns, alone %lld ns", i, (long long)full.end_ns,
                     (long long)want);
        cr_assert_eq(sym.collectives, 1);
        cr_assert_eq(full.collectives, (uint64_t)cases[i].groups, "case %zu: one collective per group", i);
    }
    /* the tp_ep gather crosses the NICs, the ETP one stays on NVLink: per byte, slower */
    int64_t tpep = alone_ns(g, NET_COLL_ALLGATHER, 0, 16, 64e6), etp = alone_ns(g, NET_COLL_ALLGATHER, 0, 2, 64e6);
    cr_assert(tpep > 2 * etp, "tp_ep %lld ns, etp %lld ns", (long long)tpep, (long long)etp);
    net_graph_free(g);
}

/* An expert group's collective needs the expert groups of the placement. */
Test(net_disp, expert_groups_are_required)
{
    net_graph *g = dgx("H100", 1);
    net_place pl;
    ts_err err;
    cr_assert_eq(net_place_init(&pl, g, 1, 8, 1, NULL, &err), TS_OK, "%s", err.msg);
    one_coll oc = {NET_COLL_ALLGATHER, NET_DIM_TPEP, 1e6};
    net_engine_opts o = {false, 0, NET_ALGO_AUTO};
    net_engine *ne = NULL;
    cr_assert_eq(net_engine_new(g, &pl, &o, describe, &oc, &ne, &err), TS_OK, "%s", err.msg);
    engine_hooks h = net_engine_hooks(ne);
    engine *e = NULL;
    cr_assert_eq(engine_create(net_engine_n_ranks(ne), 1, &h, &e, &err), TS_OK, "%s", err.msg);
    engine_task_id id;
    cr_assert_eq(engine_task_add(e, 0, 0, 0, 0, 0, &id, &err), TS_OK, "%s", err.msg);
    cr_assert_eq(net_engine_attach(ne, e, &err), TS_EINVAL);
    cr_assert(strstr(err.msg, "without expert groups"), "%s", err.msg);
    engine_free(e);
    net_engine_free(ne);
    net_place_free(&pl);
    net_graph_free(g);
}

/* Context parallelism: t 2, cp 4 (a2a level 2, ring 2), d 2, p 1 on 2 DGX
 * A100s: the placement's data-parallel dimension holds cp x d = 8, the cp
 * index innermost. Rank (tp 1, dp' 6, pp 0) has cp index 2 (a2a index 0,
 * ring index 1): its all-to-all group dp' 6, 7, its ring dp' 4, 6; its
 * data-parallel group all 8. */
Test(net_disp, context_parallel_groups_are_cp_inside_dp)
{
    net_graph *g = dgx("A100", 2);
    net_place pl;
    ts_err e;
    int t = 2, ranks[16];
    cr_assert_eq(net_place_init(&pl, g, t, 8, 1, NULL, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(net_place_set_cp(&pl, 3, 1, &e), TS_EINVAL, "3 does not divide 8");
    cr_assert_eq(net_place_set_cp(&pl, 4, 3, &e), TS_EINVAL, "3 does not divide cp 4");
    cr_assert_eq(net_place_set_cp(&pl, 4, 2, &e), TS_OK, "%s", e.msg);
    int r = net_place_rank(&pl, 1, 6, 0);
    cr_assert_eq(net_place_group_ranks(&pl, NET_PLACE_CPA, r, ranks), 2);
    cr_assert_eq(ranks[0], net_place_rank(&pl, 1, 6, 0));
    cr_assert_eq(ranks[1], net_place_rank(&pl, 1, 7, 0));
    cr_assert_eq(net_place_group_ranks(&pl, NET_PLACE_CPR, r, ranks), 2);
    cr_assert_eq(ranks[0], net_place_rank(&pl, 1, 4, 0));
    cr_assert_eq(ranks[1], net_place_rank(&pl, 1, 6, 0));
    cr_assert_eq(net_place_group_ranks(&pl, NET_PLACE_DP, r, ranks), 8);
    /* the groups are t = 2 ranks apart (Megatron's tp-cp-dp-pp) */
    for (int kind = NET_PLACE_CPA; kind <= NET_PLACE_CPR; kind++) {
        int size = net_place_group_size(&pl, kind), leaders = 0;
        for (int q = 0; q < pl.n_ranks; q++) {
            int m = net_place_group_ranks(&pl, kind, q, ranks);
            cr_assert_eq(m, size);
            cr_assert_eq(net_place_group_leader(&pl, kind, q), ranks[0], "kind %d, rank %d", kind, q);
            cr_assert(has(ranks, m, q), "rank %d in its group of kind %d", q, kind);
            cr_assert_eq(ranks[1] - ranks[0], kind == NET_PLACE_CPA ? t : 2 * t, "kind %d, rank %d", kind, q);
            leaders += net_place_group_leader(&pl, kind, q) == q;
        }
        cr_assert_eq(leaders * size, pl.n_ranks, "kind %d", kind);
    }
    /* the tensor and context-parallel group: t x cp = 8 consecutive ranks
     * (dp' 4..7, both tensor ranks); the stage's: all 16; each a partition */
    cr_assert_eq(net_place_group_ranks(&pl, NET_PLACE_TCP, r, ranks), 8);
    for (int j = 0; j < 8; j++)
        cr_assert_eq(ranks[j], net_place_rank(&pl, j % t, 4 + j / t, 0), "member %d", j);
    cr_assert_eq(net_place_group_ranks(&pl, NET_PLACE_STAGE, r, ranks), 16);
    for (int kind = NET_PLACE_TCP; kind <= NET_PLACE_STAGE; kind++) {
        int size = net_place_group_size(&pl, kind), leaders = 0;
        for (int q = 0; q < pl.n_ranks; q++) {
            int m = net_place_group_ranks(&pl, kind, q, ranks);
            cr_assert_eq(m, size);
            cr_assert_eq(net_place_group_leader(&pl, kind, q), ranks[0], "kind %d, rank %d", kind, q);
            cr_assert(has(ranks, m, q), "rank %d in its group of kind %d", q, kind);
            leaders += net_place_group_leader(&pl, kind, q) == q;
        }
        cr_assert_eq(leaders * size, pl.n_ranks, "kind %d", kind);
    }
    /* pure a2a: one all-to-all group of cp, rings of one */
    cr_assert_eq(net_place_set_cp(&pl, 4, 4, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(net_place_group_ranks(&pl, NET_PLACE_CPA, r, ranks), 4);
    for (int j = 0; j < 4; j++)
        cr_assert_eq(ranks[j], net_place_rank(&pl, 1, 4 + j, 0));
    cr_assert_eq(net_place_group_size(&pl, NET_PLACE_CPR), 1);
    net_place_free(&pl);
    net_graph_free(g);
}

/* A ring step: n transfers of S in lockstep, one bundle, one step latency;
 * on an idle fabric S / B plus the slowest route's latency, B the NVLink
 * payload rate inside a server and a NIC's across servers. */
Test(net_disp, ring_step_is_one_block_to_the_next_rank)
{
    net_graph *g = dgx("A100", 2);
    net_router *rt = NULL;
    ts_err e;
    cr_assert_eq(net_router_new(g, &rt, &e), TS_OK, "%s", e.msg);
    const int inside[] = {0, 1, 2, 3}, across[] = {0, 8};
    const double S = 100e6;
    net_coll_req q = {.kind = NET_COLL_RING_STEP, .algo = NET_ALGO_AUTO, .gpus = inside, .n = 4, .bytes = S};
    net_plan p = {0};
    cr_assert_eq(net_coll_plan(g, rt, &q, &p, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(p.nph, 1);
    cr_assert_eq(p.nx, 4);
    cr_assert_eq(p.ph[0].nbundles, 1, "the ring moves in lockstep");
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(p.x[i].src, g->gpu_node[inside[i]]);
        cr_assert_eq(p.x[i].dst, g->gpu_node[inside[(i + 1) % 4]]);
        cr_assert_float_eq(p.x[i].bytes, S, 1e-9);
    }
    net_plan_free(&p);
    int64_t t[2];
    for (int c = 0; c < 2; c++) {
        q.gpus = c ? across : inside;
        q.n = c ? 2 : 4;
        net_plan pc = {0};
        cr_assert_eq(net_coll_plan(g, rt, &q, &pc, &e), TS_OK, "%s", e.msg);
        double bw = 1e30; /* each link carries one transfer: the bundle runs at its slowest link */
        for (int i = 0; i < pc.nx; i++)
            for (int h = 0; h < pc.x[i].nlinks; h++)
                bw = g->links[pc.x[i].links[h]].bw_gbps < bw ? g->links[pc.x[i].links[h]].bw_gbps : bw;
        double want = S / bw + (double)pc.lat_ns;
        cr_assert_eq(net_coll_time_ns(g, &q, &t[c], &e), TS_OK, "%s", e.msg);
        cr_assert(fabs((double)t[c] - want) <= 2, "case %d: %lld ns, closed form %.1f ns", c, (long long)t[c], want);
        cr_assert(pc.lat_ns > 0, "one step latency");
        net_plan_free(&pc);
    }
    cr_assert(t[1] > t[0], "across servers (a NIC) %lld ns, inside (NVLink) %lld ns", (long long)t[1], (long long)t[0]);
    net_router_free(rt);
    net_graph_free(g);
}
