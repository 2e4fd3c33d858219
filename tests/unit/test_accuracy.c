/* Accuracy of the default A100 cost model on the calibration set
 * (../shared/reference/korthikanti_layer_times.csv): the per-layer forward
 * and backward times of Korthikanti et al. 2022 Table 4 (22B: 64 heads,
 * hidden 6144, seq 2048, micro-batch 4, t 8 on one DGX A100 80GB). The
 * prediction runs the layer's ops (layer.h) on one GPU's two streams with
 * the default cost tables (cost.h) and collectives (commcost.h); the backward
 * includes the recompute pass and overlaps its TP all-reduces with the
 * weight-gradient GEMMs. Tolerance: 4%, the per-layer target the cost
 * model is fitted to on the calibration set (experiments/cost-fit/run.sh). The attention is unfused
 * (softmax on stored s x s scores): the kernels Megatron-LM ran in 2022,
 * set explicitly below (ATTN_BACKEND_UNFUSED), not Megatron-core's
 * flash default of today. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>

#include "sim/model/cost.h"
#include "sim/model/layer.h"
#include "tests/unit/gpu_specs.h"

#define LAYER_TIME_TOLERANCE 0.04

static const gpu_spec A100 = {GPU_SPEC_A100};

/* korthikanti_layer_times.csv, copied: experiment, forward_ms, backward_ms */
static const struct {
    const char *experiment;
    bool sp;
    config_recompute r;
    double forward_ms, backward_ms;
} ROWS[] = {
    {"baseline no recompute", false, RECOMPUTE_NONE, 7.7, 11.9},
    {"sequence parallelism", true, RECOMPUTE_NONE, 7.2, 11.8},
    {"baseline with full recompute", false, RECOMPUTE_FULL, 7.7, 19.5},
    {"selective recompute", false, RECOMPUTE_SELECTIVE, 7.7, 13.2},
    {"selective recompute + sequence parallelism", true, RECOMPUTE_SELECTIVE, 7.2, 13.1},
};

static double run_ms(const cost_model *cm, const commcost_params *cp, const layer_shape *L, layer_pass p)
{
    layer_ops o;
    commcost_group g = {8, 8};
    cr_assert_eq(layer_ops_build(L, p, &o, NULL), TS_OK);
    return (double)cost_ops_run_ns(cm, cp, &g, &o, NULL) / 1e6;
}

Test(accuracy, korthikanti_22b_layer_times_within_4pct)
{
    cost_params p;
    commcost_params cp;
    cost_model *cm;
    cr_assert_eq(cost_params_default(&A100, PREC_BF16, &p, NULL), TS_OK);
    cr_assert_eq(commcost_params_default(&A100, &cp, NULL), TS_OK);
    cr_assert_eq(cost_model_new(&p, &cm, NULL), TS_OK);
    for (size_t i = 0; i < sizeof ROWS / sizeof ROWS[0]; i++) {
        layer_shape L = {.h = 6144,
                         .a = 64,
                         .g = 64,
                         .ffn = 4 * 6144,
                         .s = 2048,
                         .b = 4,
                         .V = 51200,
                         .t = 8,
                         .sp = ROWS[i].sp,
                         .dtype_bytes = 2,
                         .recompute = ROWS[i].r,
                         .attn = ATTN_BACKEND_UNFUSED};
        double f = run_ms(cm, &cp, &L, LAYER_PASS_F);
        double b = run_ms(cm, &cp, &L, LAYER_PASS_R) + run_ms(cm, &cp, &L, LAYER_PASS_B);
        double ef = f / ROWS[i].forward_ms - 1, eb = b / ROWS[i].backward_ms - 1;
        printf("%-44s forward %5.2f ms (published %4.1f, %+5.1f%%)  backward %5.2f ms (published "
               "%4.1f, %+5.1f%%)\n",
               ROWS[i].experiment, f, ROWS[i].forward_ms, 100 * ef, b, ROWS[i].backward_ms, 100 * eb);
        cr_expect_leq(fabs(ef), LAYER_TIME_TOLERANCE, "%s forward %.2f ms vs %.1f", ROWS[i].experiment, f,
                      ROWS[i].forward_ms);
        cr_expect_leq(fabs(eb), LAYER_TIME_TOLERANCE, "%s backward %.2f ms vs %.1f", ROWS[i].experiment, b,
                      ROWS[i].backward_ms);
    }
    cost_model_free(cm);
}

Test(accuracy, recompute_overheads_ordered_like_table4)
{
    /* Table 4: full recompute costs far more backward time than selective */
    cost_params p;
    commcost_params cp;
    cost_model *cm;
    cr_assert_eq(cost_params_default(&A100, PREC_BF16, &p, NULL), TS_OK);
    cr_assert_eq(commcost_params_default(&A100, &cp, NULL), TS_OK);
    cr_assert_eq(cost_model_new(&p, &cm, NULL), TS_OK);
    layer_shape L = {.h = 6144,
                     .a = 64,
                     .g = 64,
                     .ffn = 4 * 6144,
                     .s = 2048,
                     .b = 4,
                     .V = 51200,
                     .t = 8,
                     .dtype_bytes = 2,
                     .recompute = RECOMPUTE_SELECTIVE,
                     .attn = ATTN_BACKEND_UNFUSED};
    double sel = run_ms(cm, &cp, &L, LAYER_PASS_R);
    L.recompute = RECOMPUTE_FULL;
    double full = run_ms(cm, &cp, &L, LAYER_PASS_R);
    /* published: selective 1.3 ms, full 7.6 ms of extra backward time. Full
     * is a whole forward: 7% (a difference of two published times, each
     * held to the 4% layer tolerance). Selective is a small
     * difference of two rounded ~12 ms figures (13.2 - 11.9): 25%. */
    printf("recompute: selective %.2f ms (published 1.3), full %.2f ms (published 7.6)\n", sel, full);
    cr_expect_leq(fabs(full / 7.6 - 1), 0.07, "full recompute %.2f ms", full);
    cr_expect_leq(fabs(sel / 1.3 - 1), 0.25, "selective recompute %.2f ms", sel);
    cr_expect_lt(4 * sel, full);
    cost_model_free(cm);
}
