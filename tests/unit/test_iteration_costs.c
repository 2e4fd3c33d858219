/* The per-iteration fixed costs of the optimizer step (plan.h plan_fixed:
 * zero-grad, fp16 unscale and found-inf all-reduce, gradient norm and its
 * all-reduce, Adam) against their byte counts on the default cost tables,
 * and whole runs through the shared flags: a fusion turned off never makes
 * an iteration faster, --clip-grad 0 makes it faster, FP8 delayed scaling's
 * amax all-reduce shows as tensor-parallel time where nothing else does. */
#include <criterion/criterion.h>
#include <string.h>

#include "sim/core/simulate.h"
#include "sim/model/cost.h"
#include "sim/model/flops.h"
#include "tests/unit/flags_run.h"

static void fini(void)
{
    flags_run_free();
}

TestSuite(iteration_costs, .fini = fini);

/* The run of C (resolved by flags_run): its result, owned by the caller. */
static simulate_result *run(void)
{
    simulate_result *r = NULL;
    simulate_opts o = {0};
    cr_assert_eq(simulate_run(&C, &o, &r, &E), TS_OK, "%s", E.msg);
    return r;
}

static cost_model *default_model(void)
{
    cost_params p;
    cost_model *cm;
    cr_assert_eq(cost_params_default(&C.cluster.gpu, C.model.precision, &p, NULL), TS_OK);
    cr_assert_eq(cost_model_new(&p, &cm, NULL), TS_OK);
    return cm;
}

#define SMALL                                                                                                          \
    "--num-layers", "2", "--hidden-size", "1024", "--num-attention-heads", "16", "--seq-length", "1024",               \
        "--micro-batch-size", "1", "--global-batch-size", "8"

Test(iteration_costs, fixed_parts_closed_forms_one_gpu)
{
    cr_assert_eq(flags_run(SMALL, "--gpus", "1", "--bf16", NULL), TS_OK, "%s", E.msg);
    simulate_result *r = run();
    cost_model *cm = default_model();
    int64_t n = flops_params_stage(&C.model, 1, 2, 1, 1);                    /* every parameter on the one rank */
    cr_expect_eq(r->fixed_ns[PLAN_FIXED_ZERO_GRAD], cost_mem_ns(cm, n * 4)); /* fp32 gradient buffer */
    cr_expect_eq(r->fixed_ns[PLAN_FIXED_NAN_CHECK], cost_mem_ns(cm, n * 4)); /* the buffer read once */
    cr_expect_eq(r->fixed_ns[PLAN_FIXED_ZEROS], 0);                          /* --log-num-zeros-in-grad off */
    cr_expect_eq(r->fixed_ns[PLAN_FIXED_GRAD_NORM], cost_mem_kind_ns(cm, COST_MEM_ADAM, n * 4));
    cr_expect_eq(r->fixed_ns[PLAN_FIXED_ADAM], cost_mem_kind_ns(cm, COST_MEM_ADAM, n * 30));
    cr_expect_eq(r->fixed_ns[PLAN_FIXED_UNSCALE], 0); /* bf16: no loss scaling */
    cr_expect_eq(r->fixed_ns[PLAN_FIXED_NORM_AR], 0); /* one rank: nothing to reduce */
    int64_t sum = 0;
    for (int k = 0; k < PLAN_FIXED_KINDS; k++)
        sum += r->fixed_ns[k];
    cr_expect_eq((double)sum, r->cat_ns[PLAN_CAT_OPTIM]); /* the step is its parts */
    simulate_result_free(r);
    cost_model_free(cm);

    cr_assert_eq(flags_run(SMALL, "--gpus", "1", "--fp16", NULL), TS_OK, "%s", E.msg);
    r = run();
    cm = default_model();
    cr_expect_eq(r->fixed_ns[PLAN_FIXED_ZERO_GRAD], cost_mem_ns(cm, n * 2));     /* fp16 gradient buffer */
    cr_expect_eq(r->fixed_ns[PLAN_FIXED_UNSCALE], cost_mem_ns(cm, n * (6 + 8))); /* copy to fp32, unscale */
    cr_expect_eq(r->fixed_ns[PLAN_FIXED_NAN_CHECK], 0); /* dynamic loss scaling: Megatron turns the check off */
    simulate_result_free(r);
    cost_model_free(cm);

    cr_assert_eq(flags_run(SMALL, "--gpus", "1", "--fp16", "--check-for-large-grads", NULL), TS_OK, "%s", E.msg);
    r = run();
    cm = default_model();
    cr_expect_eq(r->fixed_ns[PLAN_FIXED_NAN_CHECK], cost_mem_ns(cm, n * 2)); /* the same bucket norms */
    simulate_result_free(r);
    cost_model_free(cm);

    cr_assert_eq(flags_run(SMALL, "--gpus", "1", "--bf16", "--no-check-for-nan-in-loss-and-grad",
                           "--log-num-zeros-in-grad", NULL),
                 TS_OK, "%s", E.msg);
    r = run();
    cm = default_model();
    cr_expect_eq(r->fixed_ns[PLAN_FIXED_NAN_CHECK], 0);
    cr_expect_eq(r->fixed_ns[PLAN_FIXED_ZEROS], cost_mem_ns(cm, n * 4)); /* every fp32 gradient read */
    cr_expect_eq(r->fixed_ns[PLAN_FIXED_ZEROS_AR], 0);
    simulate_result_free(r);
    cost_model_free(cm);

    cr_assert_eq(flags_run(SMALL, "--gpus", "1", "--bf16", "--loss-scale", "1024", NULL), TS_OK, "%s", E.msg);
    r = run();
    cm = default_model();
    cr_expect_eq(r->fixed_ns[PLAN_FIXED_UNSCALE], cost_mem_ns(cm, n * 8)); /* a constant scale: unscaled too */
    simulate_result_free(r);
    cost_model_free(cm);

    cr_assert_eq(flags_run(SMALL, "--gpus", "1", "--fp32", "--loss-scale", "1024", NULL), TS_OK, "%s", E.msg);
    r = run();
    cr_expect_eq(r->fixed_ns[PLAN_FIXED_UNSCALE], 0); /* fp32: no grad scaler (Megatron's FP32Optimizer) */
    simulate_result_free(r);
}

Test(iteration_costs, scalar_all_reduces_over_the_model_parallel_group)
{
    cr_assert_eq(flags_run(SMALL, "--gpus", "8", "-t", "2", "-p", "2", "--fp16", NULL), TS_OK, "%s", E.msg);
    simulate_result *r = run();
    int64_t mp = r->fixed_ns[PLAN_FIXED_NORM_AR];
    cr_expect_gt(mp, 0);
    cr_expect_eq(r->fixed_ns[PLAN_FIXED_INF_AR], mp); /* the same fp32 over the same group */
    simulate_result_free(r);
    cr_assert_eq(flags_run(SMALL, "--gpus", "8", "-t", "2", "-p", "2", "--fp16", "--log-num-zeros-in-grad", NULL),
                 TS_OK, "%s", E.msg);
    r = run();
    cr_expect_eq(r->fixed_ns[PLAN_FIXED_ZEROS_AR], mp);
    simulate_result_free(r);
    /* the distributed optimizer reduces over every rank: never cheaper than the 4-rank group */
    cr_assert_eq(flags_run(SMALL, "--gpus", "8", "-t", "2", "-p", "2", "--fp16", "--use-distributed-optimizer", NULL),
                 TS_OK, "%s", E.msg);
    r = run();
    cr_expect_geq(r->fixed_ns[PLAN_FIXED_NORM_AR], mp);
    simulate_result_free(r);
}

Test(iteration_costs, clip_grad_zero_drops_the_norm)
{
    cr_assert_eq(flags_run(SMALL, "--gpus", "8", "-t", "2", "--bf16", NULL), TS_OK, "%s", E.msg);
    simulate_result *r0 = run();
    cr_expect_gt(r0->fixed_ns[PLAN_FIXED_GRAD_NORM], 0);
    cr_expect_gt(r0->fixed_ns[PLAN_FIXED_NORM_AR], 0);
    cr_assert_eq(flags_run(SMALL, "--gpus", "8", "-t", "2", "--bf16", "--clip-grad", "0", NULL), TS_OK, "%s", E.msg);
    simulate_result *r1 = run();
    cr_expect_eq(r1->fixed_ns[PLAN_FIXED_GRAD_NORM], 0);
    cr_expect_eq(r1->fixed_ns[PLAN_FIXED_NORM_AR], 0);
    cr_expect_lt(r1->iteration_ns, r0->iteration_ns);
    simulate_result_free(r0);
    simulate_result_free(r1);
}

/* Every fusion flag turned off (and the opt-in cross-entropy fusion's
 * absence) never makes the iteration faster: unfused attention, rotary
 * positions, GeLU with biases and SwiGLU, t = 2 with SP. */
Test(iteration_costs, fusion_off_never_faster)
{
    const char *flags[] = {
        "--no-bias-gelu-fusion",      "--no-bias-swiglu-fusion",           "--no-bias-dropout-fusion",
        "--no-masked-softmax-fusion", "--no-gradient-accumulation-fusion", "--no-rope-fusion"};
    for (int sw = 0; sw < 2; sw++) {
        const char *swiglu = sw ? "--swiglu" : "--swiglu=false";
        cr_assert_eq(flags_run(SMALL, "--gpus", "4", "-t", "2", "--sequence-parallel", "--bf16", "--attention-backend",
                               "unfused", "--position-embedding-type", "rope", swiglu, NULL),
                     TS_OK, "%s", E.msg);
        simulate_result *r0 = run();
        for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
            cr_assert_eq(flags_run(SMALL, "--gpus", "4", "-t", "2", "--sequence-parallel", "--bf16",
                                   "--attention-backend", "unfused", "--position-embedding-type", "rope", swiglu,
                                   flags[i], NULL),
                         TS_OK, "%s", E.msg);
            simulate_result *r1 = run();
            cr_expect_geq(r1->iteration_ns, r0->iteration_ns, "%s %s", swiglu, flags[i]);
            bool effect = !(sw && !strcmp(flags[i], "--no-bias-gelu-fusion")) &&
                          !(!sw && !strcmp(flags[i], "--no-bias-swiglu-fusion"));
            if (effect)
                cr_expect_gt(r1->iteration_ns, r0->iteration_ns, "%s %s", swiglu, flags[i]);
            else
                cr_expect_eq(r1->iteration_ns, r0->iteration_ns, "%s %s", swiglu, flags[i]);
            simulate_result_free(r1);
        }
        cr_assert_eq(flags_run(SMALL, "--gpus", "4", "-t", "2", "--sequence-parallel", "--bf16", "--attention-backend",
                               "unfused", "--position-embedding-type", "rope", swiglu, "--cross-entropy-loss-fusion",
                               NULL),
                     TS_OK, "%s", E.msg);
        simulate_result *r1 = run();
        cr_expect_leq(r1->iteration_ns, r0->iteration_ns);
        simulate_result_free(r1);
        simulate_result_free(r0);
    }
}

Test(iteration_costs, fusion_flags_refused_with_moe)
{
    cr_expect_eq(flags_run("--model", "mixtral-8x7b", "--no-gradient-accumulation-fusion", NULL), TS_EINVAL);
    cr_expect(strstr(E.msg, "--no-gradient-accumulation-fusion") != NULL, "%s", E.msg);
}

/* Delayed scaling all-reduces the amaxes once per micro-batch and chunk in
 * each direction over t x cp x d: with t = 1 it is the only tensor-parallel
 * time; current scaling without SP has none. */
Test(iteration_costs, fp8_delayed_amax_reduction)
{
    cr_assert_eq(flags_run(SMALL, "--gpus", "8", "--gpu", "H100-SXM5-80GB", "--bf16", "--fp8-format", "hybrid",
                           "--fp8-recipe", "tensorwise", NULL),
                 TS_OK, "%s", E.msg);
    simulate_result *r = run();
    cr_expect_eq(r->cat_ns[PLAN_CAT_TP], 0);
    simulate_result_free(r);
    cr_assert_eq(flags_run(SMALL, "--gpus", "8", "--gpu", "H100-SXM5-80GB", "--bf16", "--fp8-format", "hybrid",
                           "--fp8-recipe", "delayed", NULL),
                 TS_OK, "%s", E.msg);
    r = run();
    cr_expect_gt(r->cat_ns[PLAN_CAT_TP], 0);
    simulate_result_free(r);
    cr_assert_eq(flags_run(SMALL, "--gpus", "1", "--gpu", "H100-SXM5-80GB", "--bf16", "--fp8-format", "hybrid",
                           "--fp8-recipe", "delayed", NULL),
                 TS_OK, "%s", E.msg);
    r = run();
    cr_expect_eq(r->cat_ns[PLAN_CAT_TP], 0); /* one rank: nothing to reduce */
    simulate_result_free(r);
}
