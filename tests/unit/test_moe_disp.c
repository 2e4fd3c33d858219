/* Unit tests: the MoE token dispatchers (sim/model/moe_disp.h), expert
 * tensor parallelism in the MoE block (sim/model/moe.h), and the plan's MoE
 * layer with the allgather dispatcher, ETP, context parallelism and
 * capacity factors below 1 (sim/core/plan_moe.h). */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "sim/core/plan_moe.h"
#include "sim/model/commcost.h"
#include "sim/model/cost.h"
#include "sim/model/moe.h"
#include "sim/model/moe_disp.h"
#include "tests/unit/flags_run.h"
#include "tests/unit/gpu_specs.h"
#include "tests/unit/layer_fixture.h"

static void fini(void)
{
    flags_run_free();
}

/* Mixtral 8x7B's MoE block, one micro-batch of 4096 tokens, t 1
 * (layer_fixture.h). */
static layer_shape shape_of(void)
{
    return layer_fixture_mixtral();
}

static moe_config experts(int dispatcher, int ep, int etp)
{
    moe_config e;
    memset(&e, 0, sizeof e);
    e.num_experts = 8;
    e.topk = 2;
    e.ffn_hidden_size = 14336;
    e.ep = ep;
    e.etp = etp;
    e.dispatcher = dispatcher;
    return e;
}

static void ops_of(const layer_shape *L, const moe_config *e, double lf, layer_pass pass, layer_ops *o)
{
    ts_err err;
    o->n = 0;
    cr_assert_eq(moe_block_ops(L, e, lf, pass, o, &err), TS_OK, "%s", err.msg);
}

static const layer_op *find(const layer_ops *o, const char *name)
{
    for (int i = 0; i < o->n; i++)
        if (strcmp(o->op[i].name, name) == 0)
            return &o->op[i];
    return NULL;
}

static double expert_flops(const layer_ops *o)
{
    double f = 0;
    for (int i = 0; i < o->n; i++)
        if (strncmp(o->op[i].name, "moe.fc", 6) == 0)
            f += o->op[i].flops;
    return f;
}

/* The volumes: a gathered buffer of n x T rows; a rank sends (n-1)/n of it
 * in a ring all-gather (commcost_wire_bytes); the routing gather carries a
 * bool and an fp32 per token and expert; ETP gathers etp x Ra rows. */
Test(moe_disp, volumes_closed_form)
{
    int64_t gathered = moe_ag_hidden_bytes(4096, 4096, 2, 8);
    cr_assert_eq(gathered, 4096LL * 8 * 4096 * 2);
    cr_assert_float_eq(commcost_wire_bytes(COMM_ALL_GATHER, gathered, 8), 7.0 / 8 * (double)gathered, 1e-6);
    cr_assert_float_eq(commcost_wire_bytes(COMM_REDUCE_SCATTER, gathered, 8), 7.0 / 8 * (double)gathered, 1e-6);
    cr_assert_eq(moe_ag_meta_bytes(4096, 256, 16), 4096LL * 16 * 256 * 5);
    cr_assert_eq(moe_etp_bytes(8192, 4096, 2, 4), 4LL * 8192 * 4096 * 2);
    layer_shape L = shape_of();
    L.t = 2;
    L.sp = true;
    L.s = 2048; /* 4096 over context parallelism 2: s is a CP rank's */
    cr_assert_eq(moe_disp_tokens(&L), 1024);
    L.sp = false;
    cr_assert_eq(moe_disp_tokens(&L), 2048);
}

/* The allgather dispatcher over n = etp x ep = 8 ranks: forward gathers the
 * routing (T n E 5 bytes) and the hidden states (T n h dt), reduce-scatters
 * the output (T n h dt); backward gathers the output gradient and
 * reduce-scatters the hidden and probability gradients (T n E 4). Every
 * collective is over 8 consecutive ranks, in the EP category. The experts
 * run the same rows as with the alltoall dispatcher: the forward flops are
 * the closed form per token x T. */
Test(moe_disp, allgather_ops)
{
    layer_shape L = shape_of();
    moe_config e = experts(MOE_DISPATCH_ALLGATHER, 8, 1);
    layer_ops f, b;
    ops_of(&L, &e, 1.0, LAYER_PASS_F, &f);
    ops_of(&L, &e, 1.0, LAYER_PASS_B, &b);
    int64_t tok = 4096, hid = tok * 8 * 4096 * 2;
    cr_assert_eq(layer_ops_comm_bytes(&f, COMM_ALL_GATHER), tok * 8 * 8 * 5 + hid);
    cr_assert_eq(layer_ops_comm_bytes(&f, COMM_REDUCE_SCATTER), hid);
    cr_assert_eq(layer_ops_comm_bytes(&f, COMM_P2P), 0);
    cr_assert_eq(layer_ops_comm_bytes(&b, COMM_ALL_GATHER), hid);
    cr_assert_eq(layer_ops_comm_bytes(&b, COMM_REDUCE_SCATTER), hid + tok * 8 * 8 * 4);
    const layer_ops *lists[2] = {&f, &b};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < lists[k]->n; i++) {
            const layer_op *op = &lists[k]->op[i];
            if (op->kind != LAYER_OP_COMM)
                continue;
            cr_assert(op->a2a, "%s", op->name);
            cr_assert_eq(op->group, 8);
            cr_assert_eq(op->span, 8);
            cr_assert_eq(op->stride, 1);
        }
    model_config m;
    memset(&m, 0, sizeof m);
    m.hidden_size = 4096;
    m.ffn_hidden_size = 14336;
    m.swiglu = true;
    double want = moe_block_fwd_flops_per_token(&m, &e) * (double)tok;
    cr_assert(fabs(layer_ops_flops(&f) - want) <= 1e-12 * want);
    layer_ops a;
    moe_config e2 = experts(MOE_DISPATCH_ALLTOALL, 8, 1);
    ops_of(&L, &e2, 1.5, LAYER_PASS_F, &a);
    ops_of(&L, &e, 1.5, LAYER_PASS_F, &f);
    cr_assert_eq(expert_flops(&f), expert_flops(&a));
    /* one rank: nothing to gather */
    e.ep = 1;
    ops_of(&L, &e, 1.0, LAYER_PASS_B, &b);
    for (int i = 0; i < b.n; i++)
        cr_assert_neq(b.op[i].kind, LAYER_OP_COMM, "%s", b.op[i].name);
}

/* ETP: each expert's FC1 N and FC2 K split over etp, the experts run the
 * ETP group's etp x Ra rows, so their flops are those of the gathered rows
 * divided by etp: the same as etp 1 for the rank's own tokens. The
 * alltoall dispatcher adds an all-gather and a reduce-scatter of etp x Ra
 * rows over the etp consecutive ranks each way. */
Test(moe_disp, etp_split)
{
    layer_shape L = shape_of();
    for (int etp = 1; etp <= 4; etp *= 2) {
        moe_config e = experts(MOE_DISPATCH_ALLTOALL, 4, etp);
        layer_ops f, b;
        ops_of(&L, &e, 1.25, LAYER_PASS_F, &f);
        const layer_op *fc1 = find(&f, "moe.fc1"), *fc2 = find(&f, "moe.fc2");
        cr_assert(fc1 && fc2);
        int64_t Ra = (int64_t)ceil(4096.0 * 2 * 1.25), R = etp * Ra;
        cr_assert_eq(fc1->n, 2 * 14336 / etp);
        cr_assert_eq(fc2->k, 14336 / etp);
        cr_assert_eq(fc1->m, (R + 1) / 2);                               /* two local experts */
        double gathered = 2.0 * (double)(fc1->m * 2) * 3 * 4096 * 14336; /* the gathered rows on whole experts */
        cr_assert(fabs(expert_flops(&f) - gathered / etp) <= 1e-12 * gathered, "etp %d", etp);
        const layer_op *ag = find(&f, "moe.etp.ag"), *rs = find(&f, "moe.etp.rs");
        ops_of(&L, &e, 1.25, LAYER_PASS_B, &b);
        if (etp == 1) {
            cr_assert(ag == NULL && rs == NULL);
            cr_assert_eq(layer_ops_comm_bytes(&b, COMM_ALL_GATHER) + layer_ops_comm_bytes(&b, COMM_REDUCE_SCATTER), 0);
            continue;
        }
        cr_assert(ag && rs);
        cr_assert_eq(ag->coll, COMM_ALL_GATHER);
        cr_assert_eq(ag->bytes, moe_etp_bytes(Ra, 4096, 2, etp));
        cr_assert_eq(ag->group, etp);
        cr_assert_eq(rs->coll, COMM_REDUCE_SCATTER);
        cr_assert_eq(rs->bytes, ag->bytes);
        cr_assert_eq(layer_ops_comm_bytes(&b, COMM_ALL_GATHER), ag->bytes);
        cr_assert_eq(layer_ops_comm_bytes(&b, COMM_REDUCE_SCATTER), ag->bytes);
        cr_assert_eq(layer_ops_comm_bytes(&f, COMM_P2P), moe_a2a_send_bytes(4096, 2, 4096, 2, 4) * 2);
    }
    moe_config e = experts(MOE_DISPATCH_FLEX, 4, 2);
    e.enable_deepep = true;
    layer_ops o;
    o.n = 0;
    ts_err err;
    cr_assert_eq(moe_block_ops(&L, &e, 1.0, LAYER_PASS_F, &o, &err), TS_EINVAL);
    cr_assert(strstr(err.msg, "flex") != NULL, "%s", err.msg);
}

/* Expert weights per rank are 1/(etp x ep) of a layer's experts: the
 * product etp x ep x (expert params per rank) is constant; expert
 * gradients over edp = gpus / (p etp ep), dense over d x cp = gpus / (p t). */
Test(moe_disp, rank_params_scale)
{
    model_config m;
    memset(&m, 0, sizeof m);
    m.num_layers = 4;
    m.hidden_size = 4096;
    m.num_attention_heads = 32;
    m.num_query_groups = 8;
    m.ffn_hidden_size = 14336;
    m.swiglu = true;
    m.normalization = NORM_RMSNORM;
    m.padded_vocab_size = 32000;
    m.seq_length = 4096;
    int64_t all = -1;
    int lay[][2] = {{1, 1}, {1, 8}, {2, 4}, {4, 2}, {8, 1}, {2, 2}};
    for (size_t i = 0; i < sizeof lay / sizeof lay[0]; i++) {
        moe_config e = experts(MOE_DISPATCH_ALLTOALL, lay[i][1], lay[i][0]);
        moe_rank_params r;
        moe_layer_rank_params(&m, &e, 2, 2, 64, &r);
        int64_t whole = r.expert * lay[i][0] * lay[i][1];
        if (all < 0)
            all = whole;
        cr_assert_eq(whole, all, "etp %d ep %d", lay[i][0], lay[i][1]);
        cr_assert_eq(r.expert_dp, 64 / (2 * lay[i][0] * lay[i][1]));
        cr_assert_eq(r.dense_dp, 16);
    }
    cr_assert_eq(all, 8LL * 3 * 4096 * 14336);
}

/* The dispatcher's transient buffers: allgather 2 n T h dt + n T E 5 over
 * n > 1 ranks; alltoall with ETP the partial outputs R h dt; none else. */
Test(moe_disp, transient_bytes)
{
    layer_shape L = shape_of();
    moe_config e = experts(MOE_DISPATCH_ALLGATHER, 8, 1);
    int64_t tok = 4096;
    cr_assert_eq(moe_block_transient_bytes(&L, &e, 1.0), 2 * tok * 8 * 4096 * 2 + tok * 8 * 8 * 5);
    e.ep = 1;
    cr_assert_eq(moe_block_transient_bytes(&L, &e, 1.0), 0);
    e = experts(MOE_DISPATCH_ALLTOALL, 4, 2);
    cr_assert_eq(moe_block_transient_bytes(&L, &e, 1.0), 2 * tok * 2 * 4096 * 2);
    e.etp = 1;
    cr_assert_eq(moe_block_transient_bytes(&L, &e, 1.0), 0);
}

/* The block's time on one rank: compute ops by the cost model, the
 * all-to-alls by moe_a2a_ns on the EP group (ep ranks at a stride of etp),
 * the all-gathers and reduce-scatters by commcost_ns on n consecutive
 * ranks (the plan's placement, gpn GPUs per node). */
static int64_t block_ns(const cost_model *cm, const commcost_params *cc, const layer_shape *L, const moe_config *e,
                        double lf, int gpn)
{
    int64_t ns = 0;
    layer_pass passes[2] = {LAYER_PASS_F, LAYER_PASS_B};
    int span = e->ep * e->etp;
    commcost_group epg = {e->ep, span <= gpn ? e->ep : e->ep / (span / gpn)};
    for (int p = 0; p < 2; p++) {
        layer_ops o;
        ops_of(L, e, lf, passes[p], &o);
        for (int i = 0; i < o.n; i++) {
            const layer_op *op = &o.op[i];
            if (op->kind != LAYER_OP_COMM) {
                ns += cost_op_ns(cm, op);
            } else if (op->coll == COMM_P2P) {
                ns += moe_a2a_ns(cc, op->bytes, &epg);
            } else {
                commcost_group g = {op->group, op->group <= gpn ? op->group : gpn};
                ns += commcost_ns(cc, op->coll, op->bytes, &g);
            }
        }
    }
    return ns;
}

/* Metamorphic: a slower NIC never makes a block faster (allgather over 16
 * ranks on two nodes; alltoall with ETP 2 across nodes), more load never
 * makes it faster, and the allgather dispatcher's traffic over two nodes
 * exceeds one node's. */
Test(moe_disp, slower_nic_and_more_load_never_faster)
{
    static const gpu_spec H100 = {GPU_SPEC_H100};
    cost_params cp;
    cost_model *cm = NULL;
    commcost_params cc;
    ts_err err;
    cr_assert_eq(cost_params_default(&H100, PREC_BF16, &cp, &err), TS_OK);
    cr_assert_eq(cost_model_new(&cp, &cm, &err), TS_OK);
    cr_assert_eq(commcost_params_default(&H100, &cc, &err), TS_OK);
    layer_shape L = shape_of();
    moe_config cases[3] = {experts(MOE_DISPATCH_ALLGATHER, 8, 2), experts(MOE_DISPATCH_ALLTOALL, 8, 2),
                           experts(MOE_DISPATCH_ALLGATHER, 8, 1)};
    for (int c = 0; c < 3; c++) {
        commcost_params slow = cc;
        int64_t prev = block_ns(cm, &cc, &L, &cases[c], 1.0, 8);
        for (int q = 0; q < 4; q++) {
            slow.nic_gbps_per_gpu /= 2;
            slow.nic_gbps /= 2;
            int64_t t = block_ns(cm, &slow, &L, &cases[c], 1.0, 8);
            cr_assert_geq(t, prev, "case %d: NIC / %d: %lld < %lld", c, 2 << q, (long long)t, (long long)prev);
            if (c < 2)
                cr_assert_gt(t, block_ns(cm, &cc, &L, &cases[c], 1.0, 8), "case %d crosses nodes", c);
            prev = t;
        }
        prev = 0;
        for (int q = 0; q <= 6; q++) {
            int64_t t = block_ns(cm, &cc, &L, &cases[c], 1.0 + 0.25 * q, 8);
            cr_assert_geq(t, prev, "case %d load %g", c, 1.0 + 0.25 * q);
            prev = t;
        }
    }
    cr_assert_gt(block_ns(cm, &cc, &L, &cases[0], 1.0, 8), block_ns(cm, &cc, &L, &cases[0], 1.0, 16));
    cost_model_free(cm);
}

/* Mixtral 8x7B's shape, 4 layers, bias-free. */
#define MIXTRAL_4                                                                                                      \
    "--num-layers", "4", "--hidden-size", "4096", "--num-attention-heads", "32", "--group-query-attention",            \
        "--num-query-groups", "8", "--ffn-hidden-size", "14336", "--swiglu", "--disable-bias-linear", "--seq-length",  \
        "4096", "--micro-batch-size", "1", "--global-batch-size", "16", "--bf16", "--gpu", "H100-SXM5-80GB",           \
        "--num-experts", "8"

static void build(int gpn, plan_moe *mo)
{
    layer_shape L;
    cr_assert_eq(layer_shape_from_config(&C, &L, &E), TS_OK, "%s", E.msg);
    commcost_params cc;
    static const gpu_spec H100 = {GPU_SPEC_H100};
    cr_assert_eq(commcost_params_default(&H100, &cc, &E), TS_OK, "%s", E.msg);
    cr_assert_eq(plan_moe_build(&C, &L, gpn, &cc, mo, &E), TS_OK, "%s", E.msg);
}

/* Megatron's default dispatcher (no --moe-token-dispatcher-type) is the
 * allgather one: the plan has no all-to-all, its collectives in the EP
 * category, and the gathered buffers as transient memory. */
Test(plan_moe_layout, allgather_default, .fini = fini)
{
    cr_assert_eq(flags_run(MIXTRAL_4, "--gpus", "8", "--expert-model-parallel-size", "8",
                           "--moe-router-force-load-balancing", NULL),
                 TS_OK, "%s", E.msg);
    cr_assert_eq(C.moe.dispatcher, MOE_DISPATCH_ALLGATHER);
    plan_moe mo;
    build(8, &mo);
    cr_assert_eq(mo.a2a_ns, 0);
    cr_assert_eq(layer_ops_comm_bytes(&mo.f, COMM_P2P), 0);
    cr_assert_eq(mo.transient, 2 * 4096LL * 8 * 4096 * 2 + 4096LL * 8 * 8 * 5);
    int n = 0;
    for (int i = 0; i < mo.f.n; i++)
        n += mo.f.op[i].a2a;
    cr_assert_eq(n, 3);
    /* the gathered routing of the local experts is saved: more than alltoall's */
    plan_moe a;
    cr_assert_eq(flags_run(MIXTRAL_4, "--gpus", "8", "--expert-model-parallel-size", "8",
                           "--moe-router-force-load-balancing", "--moe-token-dispatcher-type", "alltoall", NULL),
                 TS_OK, "%s", E.msg);
    build(8, &a);
    cr_assert_eq(mo.m_none.kept - a.m_none.kept, 8LL * 4096 * 1 * 5);
}

/* ETP 2 x EP 4 with t 2 (sequence parallel) on 8 GPUs: each rank holds 2
 * experts' halves; edp 1; the tokens are the rank's b s / t. CP 2: the
 * block sees s / cp tokens; EDP = gpus / (p etp ep) includes cp. */
Test(plan_moe_layout, etp_and_cp, .fini = fini)
{
    cr_assert_eq(flags_run(MIXTRAL_4, "--gpus", "8", "--expert-model-parallel-size", "4", "-t", "2",
                           "--sequence-parallel", "--moe-token-dispatcher-type", "alltoall",
                           "--moe-router-force-load-balancing", NULL),
                 TS_OK, "%s", E.msg);
    cr_assert_eq(C.moe.etp, 2); /* Megatron's default: t */
    plan_moe mo;
    build(8, &mo);
    cr_assert_eq(mo.params_expert, 2 * 3LL * 4096 * 14336 / 2);
    cr_assert_eq(mo.edp, 1);
    const layer_op *router = find(&mo.f, "moe.router"), *ag = find(&mo.f, "moe.etp.ag");
    cr_assert(router && ag);
    cr_assert_eq(router->m, 2048);
    cr_assert_eq(ag->bytes, 2LL * 2048 * 2 * 4096 * 2);
    cr_assert_eq(flags_run(MIXTRAL_4, "--gpus", "16", "--expert-model-parallel-size", "8", "--context-parallel-size",
                           "2", "--use-flash-attn", "--moe-token-dispatcher-type", "alltoall",
                           "--moe-router-force-load-balancing", NULL),
                 TS_OK, "%s", E.msg);
    build(8, &mo);
    router = find(&mo.f, "moe.router");
    cr_assert_eq(router->m, 2048);
    cr_assert_eq(mo.edp, 2);
    cr_assert_eq(mo.edp_group.ranks_per_node, 1); /* 8 ranks apart: the other node */
    cr_assert_eq(find(&mo.f, "moe.a2a.dispatch")->bytes, moe_a2a_send_bytes(2048, 2, 4096, 2, 8));
}

/* A capacity factor below 1 caps every expert below its mean: under forced
 * balance the busiest rank runs ceil(0.5 x mean) per expert and half the
 * tokens are dropped; the expert GEMMs shrink; skew drops more (at 0.9,
 * where some experts fall below the capacity). */
Test(plan_moe_layout, capacity_below_one, .fini = fini)
{
    cr_assert_eq(flags_run(MIXTRAL_4, "--gpus", "8", "--expert-model-parallel-size", "8", "--moe-token-dispatcher-type",
                           "alltoall", "--moe-router-force-load-balancing", NULL),
                 TS_OK, "%s", E.msg);
    plan_moe full, half, skew;
    build(8, &full);
    C.moe.capacity_factor = 0.5;
    build(8, &half);
    cr_assert_float_eq(half.load_factor, 0.5, 1e-9);
    cr_assert_float_eq(half.dropped, 0.5, 1e-9);
    cr_assert_lt(layer_ops_flops(&half.f), layer_ops_flops(&full.f));
    cr_assert_lt(half.m_none.kept, full.m_none.kept);
    C.moe.force_load_balancing = false; /* skew 0.3: every expert of 8 gets more than half the mean */
    build(8, &skew);
    cr_assert_float_eq(skew.dropped, 0.5, 1e-9, "%.17g", skew.dropped); /* capacity ceil(0.5 x 1024) = 512 */
    cr_assert_leq(skew.load_factor, 0.5 + 1e-9);
    C.moe.capacity_factor = 0.9; /* the lighter experts fall below 0.9 x the mean: skew drops more */
    build(8, &skew);
    C.moe.force_load_balancing = true;
    build(8, &half);
    cr_assert_float_eq(half.dropped, 1 - 922.0 / 1024, 1e-9); /* ceil(0.9 x 1024) kept of 1024 */
    cr_assert_gt(skew.dropped, half.dropped);
    C.moe.capacity_factor = 1.0; /* at or above the mean: balance drops nothing, as before */
    C.moe.force_load_balancing = true;
    build(8, &half);
    cr_assert_eq(half.load_factor, 1.0);
    cr_assert_eq(half.dropped, 0.0);
}

/* ETP 1 with the alltoall dispatcher is the block as it was before the
 * dispatchers were split out: the same ops in the same order, the permute
 * and unpermute bytes of moe.h's closed forms, no all-gather or
 * reduce-scatter, no transient buffer. */
Test(moe_disp, etp1_alltoall_unchanged)
{
    static const char *const FWD[] = {"moe.router", "moe.topk", "moe.permute",     "moe.a2a.dispatch", "moe.fc1",
                                      "moe.act",    "moe.fc2",  "moe.a2a.combine", "moe.unpermute"};
    static const char *const BWD[] = {"moe.unpermute.bwd", "moe.a2a.combine.bwd",  "moe.fc2.dgrad",
                                      "moe.fc2.wgrad",     "moe.act.bwd",          "moe.fc1.dgrad",
                                      "moe.fc1.wgrad",     "moe.a2a.dispatch.bwd", "moe.permute.bwd",
                                      "moe.topk.bwd",      "moe.router.dgrad",     "moe.router.wgrad"};
    layer_shape L = shape_of();
    moe_config e = experts(MOE_DISPATCH_ALLTOALL, 8, 1);
    layer_ops f, b;
    ops_of(&L, &e, 1.0, LAYER_PASS_F, &f);
    ops_of(&L, &e, 1.0, LAYER_PASS_B, &b);
    cr_assert_eq(f.n, 9);
    for (int i = 0; i < f.n; i++)
        cr_assert_str_eq(f.op[i].name, FWD[i]);
    cr_assert_eq(b.n, 12);
    for (int i = 0; i < b.n; i++)
        cr_assert_str_eq(b.op[i].name, BWD[i]);
    int64_t tok = 4096;
    cr_assert_eq(find(&f, "moe.permute")->bytes, (tok + tok * 2) * 4096 * 2);
    cr_assert_eq(find(&f, "moe.unpermute")->bytes, (tok * 2 + tok) * 4096 * 2 + tok * 2 * 4);
    cr_assert_eq(find(&f, "moe.fc1")->n, 2 * 14336);
    cr_assert_eq(layer_ops_comm_bytes(&b, COMM_ALL_GATHER) + layer_ops_comm_bytes(&b, COMM_REDUCE_SCATTER), 0);
    cr_assert_eq(moe_block_transient_bytes(&L, &e, 1.0), 0);
}
