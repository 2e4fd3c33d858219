/* moe router options: each option's ops against its closed form (bytes,
 * flops, the all-reduce's group), the fp32 GEMM's cost, and the metamorphic
 * properties (fp32 router never faster than bf16; an auxiliary loss, z-loss
 * or expert bias never faster than without). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "sim/model/cost.h"
#include "sim/model/moe.h"
#include "tests/unit/gpu_specs.h"

static layer_shape shape(int64_t h, int64_t s, int64_t b, int t, int cp)
{
    layer_shape L;
    memset(&L, 0, sizeof L);
    L.h = h;
    L.a = 32;
    L.g = 8;
    L.ffn = 4 * h;
    L.swiglu = true;
    L.s = s;
    L.b = b;
    L.V = 32000;
    L.t = t;
    L.cp = cp;
    L.sp = t > 1;
    L.dtype_bytes = 2;
    return L;
}

static moe_config experts(int E, int k, int ep)
{
    moe_config e;
    memset(&e, 0, sizeof e);
    e.num_experts = E;
    e.topk = k;
    e.ffn_hidden_size = 2048;
    e.ep = ep;
    e.etp = 1;
    e.edp = 4;
    e.dispatcher = MOE_DISPATCH_ALLTOALL;
    return e;
}

static void ops_of(const layer_shape *L, const moe_config *e, layer_pass pass, layer_ops *o)
{
    ts_err err;
    o->n = 0;
    cr_assert_eq(moe_block_ops(L, e, 1.0, pass, o, &err), TS_OK, "%s", err.msg);
}

static const layer_op *find(const layer_ops *o, const char *name)
{
    for (int i = 0; i < o->n; i++)
        if (!strcmp(o->op[i].name, name))
            return &o->op[i];
    return NULL;
}

static int64_t pass_ns(const cost_model *cm, const layer_shape *L, const moe_config *e)
{
    int64_t ns = 0;
    for (int p = 0; p < 2; p++) {
        layer_ops o;
        ops_of(L, e, p == 0 ? LAYER_PASS_F : LAYER_PASS_B, &o);
        for (int i = 0; i < o.n; i++)
            ns += cost_op_ns(cm, &o.op[i]);
    }
    return ns;
}

/* Defaults (Megatron-LM's: aux_loss with coefficient 0, softmax, the run's
 * dtype): none of the options' ops. */
Test(moe_router, defaults_add_nothing)
{
    layer_shape L = shape(4096, 4096, 1, 1, 1);
    moe_config e = experts(8, 2, 8);
    static const char *const NAMES[] = {"moe.router.cast", "moe.zloss",     "moe.bias",
                                        "moe.topk.scale",  "moe.aux",       "moe.aux.ar",
                                        "moe.aux.bwd",     "moe.zloss.bwd", "moe.router.cast.bwd"};
    for (int p = 0; p < 2; p++) {
        layer_ops o;
        ops_of(&L, &e, p ? LAYER_PASS_B : LAYER_PASS_F, &o);
        for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++)
            cr_expect_null(find(&o, NAMES[i]), "%s listed by default", NAMES[i]);
        for (int i = 0; i < o.n; i++)
            cr_expect(!o.op[i].fp32);
    }
    e.lb_type = MOE_LB_NONE;
    e.aux_loss_coeff = 1e-2; /* "none" computes no loss whatever the coefficient */
    layer_ops o;
    ops_of(&L, &e, LAYER_PASS_F, &o);
    cr_expect_null(find(&o, "moe.aux"));
}

/* Every option's bytes (T = s b / t tokens, E experts, k top-k). */
Test(moe_router, closed_forms)
{
    int64_t h = 7168, s = 4096, b = 2, E = 256, k = 8, t = 2, cp = 2;
    layer_shape L = shape(h, s, b, (int)t, (int)cp);
    moe_config e = experts((int)E, (int)k, 8);
    e.router_fp32 = true;
    e.router_score = 1;
    e.expert_bias = true;
    e.z_loss_coeff = 1e-3;
    e.topk_scaling = 2.5;
    e.aux_loss_coeff = 1e-4;
    e.lb_type = MOE_LB_AUX;
    int64_t T = s * b / t, TE = T * E;
    layer_ops f, bw;
    ops_of(&L, &e, LAYER_PASS_F, &f);
    ops_of(&L, &e, LAYER_PASS_B, &bw);
    const layer_op *op;
    cr_assert_not_null(op = find(&f, "moe.router.cast"));
    cr_expect_eq(op->bytes, 6 * (T * h + h * E));
    cr_assert_not_null(op = find(&f, "moe.router"));
    cr_expect(op->fp32);
    cr_expect_eq(op->flops, 2.0 * T * E * h);
    cr_assert_not_null(op = find(&f, "moe.zloss"));
    cr_expect_eq(op->bytes, 4 * TE + 4 * T);
    cr_assert_not_null(op = find(&f, "moe.bias"));
    cr_expect_eq(op->bytes, 8 * TE + 4 * E);
    cr_assert_not_null(op = find(&f, "moe.topk.scale"));
    cr_expect_eq(op->bytes, 8 * T * k);
    cr_assert_not_null(op = find(&f, "moe.aux"));
    cr_expect_eq(op->bytes, 13 * TE);
    cr_assert_not_null(op = find(&f, "moe.aux.ar"));
    cr_expect_eq(op->kind, LAYER_OP_COMM);
    cr_expect_eq(op->coll, COMM_ALL_REDUCE);
    cr_expect_eq(op->bytes, 8 * E);
    cr_expect_eq(op->group, t * cp);
    cr_expect_eq(op->span, t * cp);
    cr_expect_eq(op->stride, 1);
    cr_assert_not_null(op = find(&bw, "moe.aux.bwd"));
    cr_expect_eq(op->bytes, 16 * TE);
    cr_assert_not_null(op = find(&bw, "moe.zloss.bwd"));
    cr_expect_eq(op->bytes, 8 * TE + 4 * T);
    cr_assert_not_null(op = find(&bw, "moe.topk.scale.bwd"));
    cr_expect_eq(op->bytes, 8 * T * k);
    cr_assert_not_null(op = find(&bw, "moe.router.cast.bwd"));
    cr_expect_eq(op->bytes, 6 * T * h);
    cr_assert_not_null(op = find(&bw, "moe.router.dgrad"));
    cr_expect(op->fp32);
    cr_assert_not_null(op = find(&bw, "moe.router.wgrad"));
    cr_expect(op->fp32);
    cr_expect_null(find(&bw, "moe.bias.bwd"), "the bias has no gradient");
    /* I + W = B: the casts and losses go with the input gradients */
    layer_ops i, w;
    ops_of(&L, &e, LAYER_PASS_I, &i);
    ops_of(&L, &e, LAYER_PASS_W, &w);
    cr_expect_eq(i.n + w.n, bw.n);
    cr_expect_not_null(find(&i, "moe.aux.bwd"));
    cr_expect_null(find(&w, "moe.aux.bwd"));
    /* seq_aux_loss: counts per sequence; global_aux_loss: over t x cp x d
     * (= etp x ep x edp) ranks */
    e.lb_type = MOE_LB_SEQ_AUX;
    ops_of(&L, &e, LAYER_PASS_F, &f);
    cr_assert_not_null(op = find(&f, "moe.aux.ar"));
    cr_expect_eq(op->bytes, 8 * E * b);
    cr_expect_eq(op->group, t * cp);
    e.lb_type = MOE_LB_GLOBAL_AUX;
    ops_of(&L, &e, LAYER_PASS_F, &f);
    cr_assert_not_null(op = find(&f, "moe.aux.ar"));
    cr_expect_eq(op->bytes, 8 * E);
    cr_expect_eq(op->group, 1 * 8 * 4);
    /* t x cp = t: the tensor-parallel group */
    L = shape(h, s, b, (int)t, 1);
    e.lb_type = MOE_LB_AUX;
    ops_of(&L, &e, LAYER_PASS_F, &f);
    cr_assert_not_null(op = find(&f, "moe.aux.ar"));
    cr_expect_eq(op->group, t);
    cr_expect_eq(op->stride, 0);
    /* one rank, no all-reduce */
    L = shape(h, s, b, 1, 1);
    e.lb_type = MOE_LB_AUX;
    ops_of(&L, &e, LAYER_PASS_F, &f);
    cr_expect_not_null(find(&f, "moe.aux"));
    cr_expect_null(find(&f, "moe.aux.ar"));
    /* an fp32 run: the router is already fp32, no cast */
    L.dtype_bytes = 4;
    ops_of(&L, &e, LAYER_PASS_F, &f);
    cr_expect_null(find(&f, "moe.router.cast"));
    cr_expect(!find(&f, "moe.router")->fp32);
}

/* The auxiliary loss keeps its scores for the backward: 4 T E more saved. */
Test(moe_router, aux_loss_saves_its_scores)
{
    layer_shape L = shape(4096, 4096, 1, 1, 1);
    moe_config e = experts(64, 6, 8);
    int64_t base = moe_block_saved_bytes(&L, &e, 1.0);
    e.aux_loss_coeff = 1e-2;
    cr_expect_eq(moe_block_saved_bytes(&L, &e, 1.0) - base, 4 * 4096 * 64);
}

/* cost_gemm_fp32_ns: the 16-bit busy time x max(2, bf16 peak / TF32 peak). */
Test(moe_router, fp32_gemm_closed_form)
{
    static const gpu_spec H100 = {GPU_SPEC_H100};
    cost_params cp;
    cost_model *cm = NULL;
    ts_err err;
    cr_assert_eq(cost_params_default(&H100, PREC_BF16, &cp, &err), TS_OK);
    cr_assert_gt(cp.fp32_peak_tflops, 0);
    cr_assert_eq(cost_model_new(&cp, &cm, &err), TS_OK);
    int64_t m = 8192, n = 256, k = 7168;
    double f = cp.peak_tflops / cp.fp32_peak_tflops;
    if (f < 2)
        f = 2;
    double busy = (double)cost_gemm_ns(cm, m, n, k, 1) - cp.launch_ns;
    cr_expect_leq(llabs(cost_gemm_fp32_ns(cm, m, n, k, 1) - (int64_t)(cp.launch_ns + busy * f)), 1);
    cost_model_free(cm);
    /* an fp32 run: the same GEMM */
    cr_assert_eq(cost_params_default(&H100, PREC_FP32, &cp, &err), TS_OK);
    cr_assert_eq(cost_model_new(&cp, &cm, &err), TS_OK);
    cr_expect_eq(cost_gemm_fp32_ns(cm, m, n, k, 1), cost_gemm_ns(cm, m, n, k, 1));
    cost_model_free(cm);
}

/* Metamorphic: the fp32 router is never faster than the bf16 one, and each
 * loss or the expert bias never makes the block faster, over shapes. */
Test(moe_router, options_never_faster)
{
    static const gpu_spec GPUS[] = {{GPU_SPEC_A100}, {GPU_SPEC_H100}};
    int64_t hs[] = {1024, 4096, 7168};
    int Es[] = {8, 64, 256};
    for (size_t g = 0; g < 2; g++) {
        cost_params cp;
        cost_model *cm = NULL;
        ts_err err;
        cr_assert_eq(cost_params_default(&GPUS[g], PREC_BF16, &cp, &err), TS_OK);
        cr_assert_eq(cost_model_new(&cp, &cm, &err), TS_OK);
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++) {
                layer_shape L = shape(hs[a], 2048, 2, 2, 1);
                moe_config e = experts(Es[b], 2, Es[b] >= 8 ? 8 : 1);
                int64_t base = pass_ns(cm, &L, &e);
                moe_config x = e;
                x.router_fp32 = true;
                cr_expect_gt(pass_ns(cm, &L, &x), base, "fp32 router h %lld E %d", (long long)hs[a], Es[b]);
                for (int lb = MOE_LB_AUX; lb <= MOE_LB_GLOBAL_AUX; lb++) {
                    x = e;
                    x.aux_loss_coeff = 1e-2;
                    x.lb_type = lb;
                    cr_expect_gt(pass_ns(cm, &L, &x), base, "aux loss %d", lb);
                }
                x = e;
                x.z_loss_coeff = 1e-3;
                cr_expect_gt(pass_ns(cm, &L, &x), base);
                x = e;
                x.expert_bias = true;
                x.router_score = 1;
                cr_expect_gt(pass_ns(cm, &L, &x), base);
                x = e;
                x.topk_scaling = 2.5;
                cr_expect_geq(pass_ns(cm, &L, &x), base);
                x = e;
                x.pre_softmax = true; /* the order only */
                cr_expect_eq(pass_ns(cm, &L, &x), base);
            }
        cost_model_free(cm);
    }
}
