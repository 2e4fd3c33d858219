/* plan_moe: a MoE layer's op lists, memory, parameters and all-to-all cost
 * as simulate plans them; the DeepEP closed form; MoE model FLOPs; the MoE
 * block's memory split and its selective recomputation (moe_act). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "sim/config/flags.h"
#include "sim/core/plan_moe.h"
#include "sim/model/flops.h"
#include "sim/model/moe.h"
#include "sim/util/opt.h"
#include "tests/unit/flags_run.h"
#include "tests/unit/gpu_specs.h"

static void fini(void)
{
    flags_run_free();
}

/* Mixtral 8x7B's layer shape (bias-free), 4 layers, 8 GPUs, EP 8, t 1. */
#define MIXTRAL_4                                                                                                      \
    "--num-layers", "4", "--hidden-size", "4096", "--num-attention-heads", "32", "--group-query-attention",            \
        "--num-query-groups", "8", "--ffn-hidden-size", "14336", "--swiglu", "--disable-bias-linear", "--seq-length",  \
        "4096", "--micro-batch-size", "1", "--global-batch-size", "16", "--bf16", "--gpu", "H100-SXM5-80GB",           \
        "--num-experts", "8", "--moe-token-dispatcher-type", "alltoall"

static int count_a2a(const layer_ops *o)
{
    int n = 0;
    for (int i = 0; i < o->n; i++)
        n += o->op[i].a2a;
    return n;
}

/* The MoE layer is the dense layer without the MLP plus the MoE block: its
 * forward's flops are the dense layer's less the MLP's plus the block's;
 * two all-to-alls each way; the memory split adds up; one expert per rank
 * at EP 8; the all-to-all inside a node costs moe_a2a_ns. */
Test(plan_moe, layer_of_mixtral, .fini = fini)
{
    cr_assert_eq(flags_run(MIXTRAL_4, "--gpus", "8", "--expert-model-parallel-size", "8",
                           "--moe-router-force-load-balancing", NULL),
                 TS_OK, "%s", E.msg);
    layer_shape L;
    cr_assert_eq(layer_shape_from_config(&C, &L, &E), TS_OK, "%s", E.msg);
    commcost_params cc;
    static const gpu_spec H100 = {GPU_SPEC_H100};
    cr_assert_eq(commcost_params_default(&H100, &cc, &E), TS_OK, "%s", E.msg);
    plan_moe mo;
    cr_assert_eq(plan_moe_build(&C, &L, 8, &cc, &mo, &E), TS_OK, "%s", E.msg);
    cr_assert(mo.on);
    cr_assert_eq(mo.load_factor, 1.0);
    layer_ops dense;
    cr_assert_eq(layer_ops_build(&L, LAYER_PASS_F, &dense, &E), TS_OK);
    double T_ = 4096, h = 4096, f = 14336;
    double mlp = 2 * T_ * 3 * h * f, block = moe_block_fwd_flops_per_token(&C.model, &C.moe) * T_;
    cr_assert_float_eq(layer_ops_flops(&mo.f), layer_ops_flops(&dense) - mlp + block, 1e-6 * block);
    cr_assert_eq(count_a2a(&mo.f), 2);
    cr_assert_eq(count_a2a(&mo.b), 2);
    cr_assert_eq(count_a2a(&mo.i), 2);
    cr_assert_eq(count_a2a(&mo.w), 0);
    layer_shape N = L; /* the block's backward is twice its forward (input and weight gradients) */
    N.no_mlp = true;
    layer_ops nf, nb;
    cr_assert_eq(layer_ops_build(&N, LAYER_PASS_F, &nf, &E), TS_OK);
    cr_assert_eq(layer_ops_build(&N, LAYER_PASS_B, &nb, &E), TS_OK);
    double bf = layer_ops_flops(&mo.f) - layer_ops_flops(&nf), bb = layer_ops_flops(&mo.b) - layer_ops_flops(&nb);
    cr_assert_float_eq(bf, block, 1e-9 * block);
    cr_assert_float_eq(bb, 2 * bf, 1e-9 * bb);
    cr_assert_eq(mo.m_none.kept + mo.m_none.by_rc, mo.m_none.free_i + mo.m_none.free_w);
    cr_assert_eq(mo.m_none.by_rc, 0);
    cr_assert_eq(mo.params_expert, 3LL * 4096 * 14336);
    cr_assert_eq(mo.edp, 1);
    cr_assert_eq(mo.ep_group.ranks, 8);
    cr_assert_eq(mo.ep_group.ranks_per_node, 8);
    cr_assert_eq(mo.a2a_ns, moe_a2a_ns(&cc, moe_a2a_send_bytes(4096, 2, 4096, 2, 8), &mo.ep_group));
    /* every op's dependencies point back into its own list */
    const layer_ops *lists[8] = {&mo.f, &mo.r, &mo.b, &mo.i, &mo.w, &mo.nb, &mo.ni, &mo.nw};
    for (int k = 0; k < 8; k++)
        for (int i = 0; i < lists[k]->n; i++)
            for (int d = 0; d < 2; d++)
                cr_assert_lt(lists[k]->op[i].dep[d], i, "list %d op %d (%s)", k, i, lists[k]->op[i].name);
}

/* Skew: the busiest rank above the mean, and so more saved bytes; EP 4 on
 * 8 GPUs holds two experts and reduces them over edp 2 (one rank apart by
 * 4: inside a node). */
Test(plan_moe, skew_and_edp, .fini = fini)
{
    cr_assert_eq(flags_run(MIXTRAL_4, "--gpus", "8", "--expert-model-parallel-size", "4", NULL), TS_OK, "%s", E.msg);
    layer_shape L;
    cr_assert_eq(layer_shape_from_config(&C, &L, &E), TS_OK, "%s", E.msg);
    commcost_params cc;
    static const gpu_spec H100 = {GPU_SPEC_H100};
    cr_assert_eq(commcost_params_default(&H100, &cc, &E), TS_OK, "%s", E.msg);
    plan_moe skew, bal;
    cr_assert_eq(plan_moe_build(&C, &L, 8, &cc, &skew, &E), TS_OK, "%s", E.msg);
    C.moe.force_load_balancing = true;
    cr_assert_eq(plan_moe_build(&C, &L, 8, &cc, &bal, &E), TS_OK, "%s", E.msg);
    cr_assert_gt(skew.load_factor, 1.01);
    cr_assert_eq(bal.load_factor, 1.0);
    cr_assert_gt(skew.m_none.kept, bal.m_none.kept);
    cr_assert_gt(layer_ops_flops(&skew.f), layer_ops_flops(&bal.f));
    cr_assert_eq(skew.params_expert, 2 * 3LL * 4096 * 14336);
    cr_assert_eq(skew.edp, 2);
    cr_assert_eq(skew.edp_group.ranks, 2);
    cr_assert_eq(skew.edp_group.ranks_per_node, 2);
}

/* A dense model: nothing. */
Test(plan_moe, dense_is_off, .fini = fini)
{
    cr_assert_eq(flags_run("--num-layers", "4", "--hidden-size", "1024", "--num-attention-heads", "16", "--seq-length",
                           "1024", "--micro-batch-size", "1", "--gpus", "8", NULL),
                 TS_OK, "%s", E.msg);
    layer_shape L;
    cr_assert_eq(layer_shape_from_config(&C, &L, &E), TS_OK, "%s", E.msg);
    commcost_params cc;
    static const gpu_spec H100 = {GPU_SPEC_H100};
    cr_assert_eq(commcost_params_default(&H100, &cc, &E), TS_OK, "%s", E.msg);
    plan_moe mo;
    cr_assert_eq(plan_moe_build(&C, &L, 8, &cc, &mo, &E), TS_OK);
    cr_assert(!mo.on);
}

/* DeepEP's remote nodes per token: the closed form against its limits; its
 * time is the alltoall's inside a node and less across nodes (one copy per
 * remote node instead of one per expert). */
Test(plan_moe, deepep_closed_form)
{
    cr_assert_eq(moe_deepep_remote_nodes(128, 8, 1), 0.0);
    /* top-1: the one expert is remote with probability (N-1)/N */
    cr_assert_float_eq(moe_deepep_remote_nodes(128, 1, 4), 3.0 / 4, 1e-12);
    /* more experts chosen than fit outside a node: every remote node is hit */
    cr_assert_float_eq(moe_deepep_remote_nodes(8, 7, 2), 1.0, 1e-12);
    double miss = 1;
    for (int i = 0; i < 8; i++)
        miss *= (96.0 - i) / (128.0 - i);
    cr_assert_float_eq(moe_deepep_remote_nodes(128, 8, 4), 3 * (1 - miss), 1e-12);
    cr_assert_lt(moe_deepep_remote_nodes(128, 8, 4), 8 * 0.75); /* alltoall: k x (N-1)/N copies remote */
    commcost_params cc;
    ts_err err;
    static const gpu_spec H100 = {GPU_SPEC_H100};
    cr_assert_eq(commcost_params_default(&H100, &cc, &err), TS_OK);
    commcost_group node = {8, 8}, four = {32, 8};
    int64_t bytes8 = moe_a2a_send_bytes(2048, 8, 4096, 2, 8), bytes32 = moe_a2a_send_bytes(2048, 8, 4096, 2, 32);
    cr_assert_eq(moe_deepep_ns(&cc, 2048, 8, 4096, 2, 128, &node), moe_a2a_ns(&cc, bytes8, &node));
    int64_t dp = moe_deepep_ns(&cc, 2048, 8, 4096, 2, 128, &four), a2a = moe_a2a_ns(&cc, bytes32, &four);
    cr_assert_gt(dp, 0);
    cr_assert_lt(dp, a2a);
    /* RDMA-bound: the remote copies over the NIC share */
    double net =
        2048.0 * 4096 * 2 * moe_deepep_remote_nodes(128, 8, 4) / (cc.nic_gbps_per_gpu * commcost_net_factor(&cc, 4));
    cr_assert_geq((double)dp, net + cc.nic_alpha_ns - 1);
}

/* MoE model FLOPs: a dense model's are flops_model_per_iter's; one expert of
 * the MLP's size, top-1, adds only the router (2 h E per token, x3 for the
 * backward). */
Test(plan_moe, model_flops)
{
    model_config m;
    memset(&m, 0, sizeof m);
    m.num_layers = 4;
    m.hidden_size = 1024;
    m.num_attention_heads = 16;
    m.num_query_groups = 16;
    m.ffn_hidden_size = 4096;
    m.swiglu = true;
    m.seq_length = 2048;
    m.padded_vocab_size = 32000;
    moe_config e;
    memset(&e, 0, sizeof e);
    cr_assert_eq(moe_model_flops_per_iter(&m, &e, 8), flops_model_per_iter(&m, 8));
    e.num_experts = 1;
    e.topk = 1;
    e.layer_freq = 1;
    double router = 3.0 * 8 * 4 * 2048 * 2.0 * 1024 * 1;
    cr_assert_float_eq(moe_model_flops_per_iter(&m, &e, 8) - flops_model_per_iter(&m, 8), router, 1e-6 * router);
    e.num_experts = 8; /* top-1 of 8: the same active FLOPs plus a wider router */
    cr_assert_float_eq(moe_model_flops_per_iter(&m, &e, 8) - flops_model_per_iter(&m, 8), 8 * router, 1e-6 * router);
}

/* The block's memory split: kept + re-created = freed by I + by W =
 * moe_block_saved_bytes; moe_act re-creates the routed experts'
 * activation output (R f_e) and its R pass runs moe.act; full keeps none. */
Test(plan_moe, block_memory_and_moe_act)
{
    layer_shape L;
    memset(&L, 0, sizeof L);
    L.h = 4096;
    L.a = L.g = 32;
    L.ffn = 14336;
    L.swiglu = true;
    L.s = 4096;
    L.b = 1;
    L.V = 32000;
    L.t = 1;
    L.dtype_bytes = 2;
    moe_config e;
    memset(&e, 0, sizeof e);
    e.num_experts = 8;
    e.topk = 2;
    e.ffn_hidden_size = 14336;
    e.layer_freq = 1;
    e.ep = 8;
    moe_block_mem m;
    moe_block_mem_of(&L, &e, 1.25, &m);
    int64_t all = moe_block_saved_bytes(&L, &e, 1.25);
    cr_assert_eq(m.kept, all);
    cr_assert_eq(m.by_rc, 0);
    cr_assert_eq(m.free_i + m.free_w, all);
    L.recompute = RECOMPUTE_SELECTIVE;
    L.rc_modules = CONFIG_RC_MOE_ACT;
    moe_block_mem_of(&L, &e, 1.25, &m);
    int64_t R = (int64_t)ceil(4096 * 2 * 1.25);
    cr_assert_eq(m.by_rc, R * 14336 * 2);
    cr_assert_eq(m.kept + m.by_rc, all);
    layer_ops o;
    o.n = 0;
    ts_err err;
    cr_assert_eq(moe_block_ops(&L, &e, 1.25, LAYER_PASS_R, &o, &err), TS_OK);
    cr_assert_eq(o.n, 1);
    cr_assert_str_eq(o.op[0].name, "moe.act");
    L.recompute = RECOMPUTE_FULL;
    L.rc_modules = 0;
    moe_block_mem_of(&L, &e, 1.25, &m);
    cr_assert_eq(m.kept, 0);
    cr_assert_eq(m.by_rc, all);
}
