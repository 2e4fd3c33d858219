/* Communication tasks of the engine driven by flows: the symmetric and full
 * modes agree on a uniform cluster; a straggler slows the pipeline by what
 * the critical path implies; the SM-slowdown knob; the what-if parsers. */
#include <criterion/criterion.h>
#include <string.h>

#include "sim/core/engine.h"
#include "sim/net/net_engine.h"
#include "sim/net/net_graph.h"
#include "sim/net/net_place.h"
#include "sim/net/net_whatif.h"

/* A small pipeline, lowered by hand (what sim/lower does for a schedule,
 * reduced to forward passes): per micro-batch, on every stage, a forward
 * step F (compute, T_NS), then the tensor-parallel all-reduce of its output
 * (the next F waits for it, as in Megatron), then the send to the next
 * stage; the next stage's F waits for the receive. After the last
 * micro-batch (and its send), the data-parallel gradient all-reduce. */
enum { K_F = 0, K_AR, K_SEND, K_RECV, K_DP, K_KINDS };
enum { S_COMPUTE = 0, S_TP, S_SEND, S_RECV, S_DP, N_STREAMS };
#define T_NS     100000
#define AR_BYTES 16e6
#define DP_BYTES 200e6

typedef struct {
    int p;
    double p2p_bytes;
} pipe_ctx;

static int describe(void *ctx, uint32_t tag, net_step_desc *d, ts_err *err)
{
    (void)err;
    const pipe_ctx *pc = ctx;
    int stage = (int)tag / K_KINDS, kind = (int)tag % K_KINDS;
    switch (kind) {
    case K_F:
        *d = (net_step_desc){.role = NET_STEP_COMPUTE, .dur_ns = T_NS};
        break;
    case K_AR:
        *d = (net_step_desc){.role = NET_STEP_COLL, .coll = NET_COLL_ALLREDUCE, .dim = NET_DIM_TP, .bytes = AR_BYTES};
        break;
    case K_SEND:
        *d = (net_step_desc){.role = NET_STEP_SEND, .peer_pp = (stage + 1) % pc->p, .bytes = pc->p2p_bytes};
        break;
    case K_DP:
        *d = (net_step_desc){.role = NET_STEP_COLL, .coll = NET_COLL_ALLREDUCE, .dim = NET_DIM_DP, .bytes = DP_BYTES};
        break;
    default:
        *d = (net_step_desc){.role = NET_STEP_ENGINE};
        break;
    }
    return TS_OK;
}

/* Lower replica (tp, dp) into engine ranks rank_of[pp]. */
static void lower_replica(engine *e, int p, int m, const int *rank_of)
{
    ts_err err;
    engine_task_id prev_send[64];
    for (int pp = 0; pp < p; pp++) {
        int R = rank_of[pp];
        engine_task_id last_ar = ENGINE_NO_TASK, sends[64];
        for (int mb = 0; mb < m; mb++) {
            engine_task_id f, ar, s, r = ENGINE_NO_TASK;
            if (pp > 0) {
                cr_assert_eq(engine_task_add(e, R, S_RECV, 0, (uint32_t)(pp * K_KINDS + K_RECV), mb, &r, &err), TS_OK);
                cr_assert_eq(engine_task_join(e, r, prev_send[mb], &err), TS_OK, "%s", err.msg);
            }
            cr_assert_eq(engine_task_add(e, R, S_COMPUTE, T_NS, (uint32_t)(pp * K_KINDS + K_F), mb, &f, &err), TS_OK);
            if (r != ENGINE_NO_TASK)
                engine_dep_add(e, r, f, &err);
            if (last_ar != ENGINE_NO_TASK)
                engine_dep_add(e, last_ar, f, &err);
            cr_assert_eq(engine_task_add(e, R, S_TP, 0, (uint32_t)(pp * K_KINDS + K_AR), mb, &ar, &err), TS_OK);
            engine_dep_add(e, f, ar, &err);
            last_ar = ar;
            if (pp < p - 1) {
                cr_assert_eq(engine_task_add(e, R, S_SEND, 0, (uint32_t)(pp * K_KINDS + K_SEND), mb, &s, &err), TS_OK);
                engine_dep_add(e, ar, s, &err);
                sends[mb] = s;
            }
        }
        engine_task_id dp;
        cr_assert_eq(engine_task_add(e, R, S_DP, 0, (uint32_t)(pp * K_KINDS + K_DP), -1, &dp, &err), TS_OK);
        engine_dep_add(e, last_ar, dp, &err);
        if (pp < p - 1)
            engine_dep_add(e, sends[m - 1], dp, &err);
        memcpy(prev_send, sends, sizeof sends);
    }
}

typedef struct {
    int64_t makespan_ns;
    int64_t last_end_ns[64]; /* per pipeline rank of replica (0, 0) */
    net_engine_stats st;
} run_out;

static run_out run(const net_graph *g, int t, int d, int p, int m, bool full, int straggler, double factor,
                   double slowdown)
{
    ts_err err;
    net_place pl;
    cr_assert_eq(net_place_init(&pl, g, t, d, p, NULL, &err), TS_OK, "%s", err.msg);
    pipe_ctx pc = {p, 2e6}; /* 2 MB: ~45 us over a NIC, less than T + all-reduce */
    net_engine_opts o = {full, slowdown, NET_ALGO_AUTO};
    net_engine *ne = NULL;
    cr_assert_eq(net_engine_new(g, &pl, &o, describe, &pc, &ne, &err), TS_OK, "%s", err.msg);
    engine_hooks h = net_engine_hooks(ne);
    engine *e = NULL;
    cr_assert_eq(engine_create(net_engine_n_ranks(ne), N_STREAMS, &h, &e, &err), TS_OK, "%s", err.msg);
    int rank_of[64];
    if (full) {
        for (int dp = 0; dp < d; dp++)
            for (int tp = 0; tp < t; tp++) {
                for (int pp = 0; pp < p; pp++)
                    rank_of[pp] = net_engine_rank(ne, tp, dp, pp);
                lower_replica(e, p, m, rank_of);
            }
    } else {
        for (int pp = 0; pp < p; pp++)
            rank_of[pp] = pp;
        lower_replica(e, p, m, rank_of);
    }
    if (straggler >= 0) {
        int tp, dp, pp;
        net_place_coords(&pl, straggler, &tp, &dp, &pp);
        cr_assert_eq(net_engine_set_compute_factor(ne, net_engine_rank(ne, tp, dp, pp), factor, &err), TS_OK, "%s",
                     err.msg);
    }
    cr_assert_eq(net_engine_attach(ne, e, &err), TS_OK, "%s", err.msg);
    int rc = engine_run(e, &err);
    ts_err nerr;
    cr_assert_eq(net_engine_error(ne, &nerr), TS_OK, "%s", nerr.msg);
    cr_assert_eq(rc, TS_OK, "%s", err.msg);
    run_out out;
    memset(&out, 0, sizeof out);
    out.makespan_ns = engine_makespan_ns(e);
    for (uint32_t id = 0; id < engine_task_count(e); id++) {
        int R = engine_task_rank(e, id), pp = R < p ? R : -1; /* engine ranks 0..p-1: replica (0, 0) */
        if (pp >= 0 && engine_task_end_ns(e, id) > out.last_end_ns[pp])
            out.last_end_ns[pp] = engine_task_end_ns(e, id);
    }
    out.st = net_engine_get_stats(ne);
    engine_free(e);
    net_engine_free(ne);
    net_place_free(&pl);
    return out;
}

static net_graph *cluster(int servers)
{
    net_fabric_params p;
    ts_err e;
    net_graph *g = NULL;
    cr_assert_eq(net_fabric_defaults(&p, "H100", servers, &e), TS_OK);
    cr_assert_eq(net_graph_build_fabric(&p, &g, &e), TS_OK, "%s", e.msg);
    return g;
}

/* 4 servers, t = 8, d = 2, p = 2: rail-optimized leaves hold every server,
 * so the groups of different replicas never share a link. */
Test(net_engine, symmetric_and_full_modes_agree_exactly)
{
    net_graph *g = cluster(4);
    run_out a = run(g, 8, 2, 2, 4, false, -1, 1, 0);
    run_out b = run(g, 8, 2, 2, 4, true, -1, 1, 0);
    cr_assert_eq(a.makespan_ns, b.makespan_ns, "symmetric %lld vs full %lld", (long long)a.makespan_ns,
                 (long long)b.makespan_ns);
    for (int pp = 0; pp < 2; pp++)
        cr_assert_eq(a.last_end_ns[pp], b.last_end_ns[pp]);
    cr_assert(b.st.collectives > a.st.collectives, "full mode runs every group's collectives");
    cr_assert(a.makespan_ns > 4 * T_NS);
    net_graph_free(g);
}

/* Rank (tp 3, dp 1, pp 0) computes twice as slowly. Its tensor group waits
 * for it at every all-reduce, the next stage of its replica waits for its
 * sends, and the data-parallel all-reduce waits for that replica: the
 * iteration grows by m x T (each of the m forwards on the critical path is
 * T longer), exactly. */
Test(net_engine, straggler_slows_by_the_critical_path)
{
    net_graph *g = cluster(4);
    const int m = 4;
    run_out base = run(g, 8, 2, 2, m, true, -1, 1, 0);
    int slow = 3 + 8 * (1 + 2 * 0);
    run_out s = run(g, 8, 2, 2, m, true, slow, 2.0, 0);
    cr_assert_eq(s.makespan_ns - base.makespan_ns, (int64_t)m * T_NS, "straggler added %lld ns, expected %lld",
                 (long long)(s.makespan_ns - base.makespan_ns), (long long)m * T_NS);
    net_graph_free(g);
}

Test(net_engine, straggler_needs_full_mode)
{
    net_graph *g = cluster(4);
    net_place pl;
    ts_err err;
    cr_assert_eq(net_place_init(&pl, g, 8, 2, 2, NULL, &err), TS_OK);
    pipe_ctx pc = {2, 2e6};
    net_engine_opts o = {false, 0, NET_ALGO_AUTO};
    net_engine *ne = NULL;
    cr_assert_eq(net_engine_new(g, &pl, &o, describe, &pc, &ne, &err), TS_OK);
    cr_assert_eq(net_engine_set_compute_factor(ne, 0, 2.0, &err), TS_EINVAL);
    cr_assert(strstr(err.msg, "--full"), "%s", err.msg);
    net_engine_free(ne);
    net_place_free(&pl);
    net_graph_free(g);
}

/* With the SM-slowdown knob s, a compute step that starts while the rank
 * has a send in flight takes T (1 + s); off by default. Rank 0 of a 2-stage
 * pipeline on one server: F1 (starts at 0, before the send), a 100 MB send
 * over NVLink (~278 us), F2 after F1 (starts at T, during the send). */
static int64_t f2_end(double slowdown)
{
    net_graph *g = cluster(1);
    ts_err err;
    net_place pl;
    cr_assert_eq(net_place_init(&pl, g, 1, 1, 2, NULL, &err), TS_OK);
    pipe_ctx pc = {2, 100e6};
    net_engine_opts o = {true, slowdown, NET_ALGO_AUTO};
    net_engine *ne = NULL;
    cr_assert_eq(net_engine_new(g, &pl, &o, describe, &pc, &ne, &err), TS_OK);
    engine_hooks h = net_engine_hooks(ne);
    engine *e = NULL;
    cr_assert_eq(engine_create(2, N_STREAMS, &h, &e, &err), TS_OK);
    engine_task_id f1, f2, snd, rcv;
    cr_assert_eq(engine_task_add(e, 0, S_COMPUTE, T_NS, K_F, 0, &f1, &err), TS_OK);
    cr_assert_eq(engine_task_add(e, 0, S_COMPUTE, T_NS, K_F, 1, &f2, &err), TS_OK);
    cr_assert_eq(engine_task_add(e, 0, S_SEND, 0, K_SEND, 0, &snd, &err), TS_OK);
    cr_assert_eq(engine_task_add(e, 1, S_RECV, 0, K_KINDS + K_RECV, 0, &rcv, &err), TS_OK);
    cr_assert_eq(engine_task_join(e, rcv, snd, &err), TS_OK);
    cr_assert_eq(net_engine_attach(ne, e, &err), TS_OK, "%s", err.msg);
    cr_assert_eq(engine_run(e, &err), TS_OK, "%s", err.msg);
    cr_assert_eq(net_engine_error(ne, &err), TS_OK, "%s", err.msg);
    cr_assert(engine_task_end_ns(e, snd) > 2 * T_NS, "the send outlasts both forwards");
    int64_t t = engine_task_end_ns(e, f2);
    engine_free(e);
    net_engine_free(ne);
    net_place_free(&pl);
    net_graph_free(g);
    return t;
}

Test(net_engine, comm_compute_slowdown_is_off_by_default_and_slows_when_on)
{
    cr_assert_eq(f2_end(0), 2 * T_NS);
    cr_assert_eq(f2_end(0.25), T_NS + T_NS * 5 / 4);
}

Test(net_engine, whatif_parsers)
{
    net_graph *g = cluster(2);
    ts_err err;
    int r, a, b;
    double f;
    cr_assert_eq(net_parse_straggler("5:1.5", 16, &r, &f, &err), TS_OK);
    cr_assert(r == 5 && f == 1.5);
    cr_assert_eq(net_parse_straggler("16:2", 16, &r, &f, &err), TS_EINVAL);
    cr_assert(strstr(err.msg, "RANK:FACTOR"), "%s", err.msg);
    cr_assert_eq(net_parse_straggler("4294967297:2", 16, &r, &f, &err), TS_EINVAL, "not rank 1 (wrapped)");
    cr_assert_eq(net_parse_straggler("5:1.5x", 16, &r, &f, &err), TS_EINVAL);
    cr_assert_eq(net_parse_degrade(g, "nic1.3-sw1.3:0.5", &a, &b, &f, &err), TS_OK, "%s", err.msg);
    cr_assert_eq(f, 0.5);
    cr_assert_eq(net_parse_degrade(g, "nic1.3-sw9.9:0.5", &a, &b, &f, &err), TS_EINVAL);
    cr_assert(strstr(err.msg, "sw9.9"), "%s", err.msg);
    /* the valid names and their index ranges */
    cr_assert(strstr(err.msg, "nodes: gpu<s>.<k> with s in 0..1, k in 0..7; nvs<s> with s in 0..1"), "%s", err.msg);
    cr_assert_eq(net_parse_degrade(g, "gpu0.0-gpu1.0:0.5", &a, &b, &f, &err), TS_EINVAL);
    cr_assert(strstr(err.msg, "not linked (gpu0.0 links to: nvs0, nic0.0;"), "%s", err.msg);
    net_graph_free(g);
}
