/* The plan's memory timeline, pass by pass: the order of each pass's
 * allocations and frees (collapsed steps' memory events) on a tiny model,
 * where merged compute steps must not move an allocation before the free
 * that precedes it in program order. */
#include <criterion/criterion.h>
#include <stdint.h>

#include "sim/core/plan.h"
#include "sim/core/simulate.h"
#include "sim/model/cp.h"
#include "sim/model/layer.h"
#include "tests/unit/flags_run.h"

static void fini(void)
{
    flags_run_free();
}

/* The trainexec memory test's model (tests/cli/trainexec_memory.sh):
 * 4 layers, h 64, 4 heads, s 64, V 256, b 2, no dropout. */
#define TINY                                                                                                           \
    "--num-layers", "4", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "64",                    \
        "--padded-vocab-size", "256", "--micro-batch-size", "2", "--attention-dropout", "0", "--hidden-dropout", "0"

/* The memory changes of stage st's pass k in time order, replayed from 0:
 * the level at the pass's end in *end, the highest level reached returned;
 * *first gets the first change (0: none). */
static int64_t replay(const plan *pl, int st, int k, int64_t *end, int64_t *first)
{
    const plan_range *r = &pl->stages[st].pass[k];
    int64_t live = 0, hi = 0;
    *first = 0;
    for (uint32_t i = r->first; i < r->first + r->n; i++) {
        const plan_step *x = &pl->steps[i];
        cr_assert(x->mem_n > 0 || (x->alloc_bytes == 0 && x->free_bytes == 0), "step %u: collapsed", i);
        for (uint32_t e = 0; e < x->mem_n; e++) {
            int64_t d = pl->mem_evs[x->mem_first + e].delta_bytes;
            if (*first == 0)
                *first = d;
            live += d;
            if (live > hi)
                hi = live;
        }
    }
    *end = live;
    return hi;
}

/* Context parallelism, cp = 2 (one stage): the backward starts with the
 * output layer's, which frees its saved tensors (final norm input, logits
 * input, fp32 logits: more than a layer's ring buffers) before the last
 * layer's backward allocates its ring buffers. Its merged compute step must
 * keep that order: the backward never rises above the forward's end, and
 * its first change is the output layer's free. The forward holds at most one
 * layer's transient ring buffers on top of what it keeps. */
Test(plan_mem, cp_backward_frees_the_output_layer_first, .fini = fini)
{
    cr_assert_eq(
        flags_run(TINY, "--bf16", "--gpus", "2", "--context-parallel-size", "2", "--global-batch-size", "2", NULL),
        TS_OK, "%s", E.msg);
    layer_shape L;
    cr_assert_eq(layer_shape_from_config(&C, &L, &E), TS_OK, "%s", E.msg);
    layer_saved_list out;
    cr_assert_eq(layer_output_saved(&L, &out, &E), TS_OK, "%s", E.msg);
    int64_t out_bytes = 0;
    for (int i = 0; i < out.n; i++)
        out_bytes += out.t[i].bytes;
    int64_t tf = cp_transient_bytes(&L, false), tb = cp_transient_bytes(&L, true);
    cr_assert(tb > 0 && tf > 0 && out_bytes > tb, "the case needs ring buffers smaller than the output layer's");

    simulate_opts o = {.keep_trace = true}; /* keeps the plan */
    simulate_result *r = NULL;
    cr_assert_eq(simulate_run(&C, &o, &r, &E), TS_OK, "%s", E.msg);
    int64_t f_end, f_first, b_end, b_first;
    int64_t f_hi = replay(r->pl, 0, PLAN_PASS_F, &f_end, &f_first);
    int64_t b_hi = replay(r->pl, 0, PLAN_PASS_B, &b_end, &b_first);
    cr_expect_eq(b_end, -f_end, "the backward frees what the forward kept");
    cr_expect_eq(b_first, -out_bytes, "the backward's first change: the output layer's free (%lld), got %lld",
                 (long long)-out_bytes, (long long)b_first);
    cr_expect_eq(b_hi, 0, "the backward rises %lld bytes above the forward's end", (long long)b_hi);
    cr_expect_leq(f_hi, f_end + tf, "the forward's high %lld, its end %lld + one layer's ring buffers %lld",
                  (long long)f_hi, (long long)f_end, (long long)tf);
    /* so the iteration's activation peak is the forward's end */
    cr_expect_eq(r->ranks[0].peak_cat_bytes[MEM_ACTIV], f_end);
    simulate_result_free(r);
}

/* The zero-bubble stash, closed form: W reads each linear layer's output
 * gradient, [T, n] for a weight of n outputs, so a GPT layer keeps
 * T (3h + h + 4h + h) = 9 T h elements from its I to its W (t = 1, fp32:
 * 4 bytes), the output layer T V, the embedding T h; none without a W
 * list. */
Test(plan_mem, wgrad_stash_closed_form, .fini = fini)
{
    cr_assert_eq(
        flags_run(TINY, "--gpus", "1", "--global-batch-size", "2", "--fp32", "--attention-backend", "unfused", NULL),
        TS_OK, "%s", E.msg);
    layer_shape L;
    cr_assert_eq(layer_shape_from_config(&C, &L, &E), TS_OK, "%s", E.msg);
    const int64_t tok = 2 * 64, h = 64, V = 256, dt = 4;
    layer_ops w, ew, ow, i, ei, oi;
    cr_assert_eq(layer_ops_build(&L, LAYER_PASS_W, &w, &E), TS_OK, "%s", E.msg);
    cr_assert_eq(layer_ops_build(&L, LAYER_PASS_I, &i, &E), TS_OK, "%s", E.msg);
    cr_assert_eq(layer_embedding_ops(&L, LAYER_PASS_W, &ew, &E), TS_OK, "%s", E.msg);
    cr_assert_eq(layer_embedding_ops(&L, LAYER_PASS_I, &ei, &E), TS_OK, "%s", E.msg);
    cr_assert_eq(layer_output_ops(&L, LAYER_PASS_W, &ow, &E), TS_OK, "%s", E.msg);
    cr_assert_eq(layer_output_ops(&L, LAYER_PASS_I, &oi, &E), TS_OK, "%s", E.msg);
    cr_expect_eq(layer_wgrad_stash_bytes(&L, &i, &w), 9 * tok * h * dt, "layer: %lld",
                 (long long)layer_wgrad_stash_bytes(&L, &i, &w));
    cr_expect_eq(layer_wgrad_stash_bytes(&L, &oi, &ow), tok * V * dt);
    cr_expect_eq(layer_wgrad_stash_bytes(&L, &ei, &ew), tok * h * dt);
    /* B (no W list) keeps none */
    layer_ops none = {0};
    cr_expect_eq(layer_wgrad_stash_bytes(&L, &i, &none), 0);
}

/* In a zero-bubble plan I allocates the stash and W frees it with the
 * inputs it kept: over one micro-batch's I and W the stage ends where the
 * forward began, and I's net change is the stash less what I frees. */
Test(plan_mem, zero_bubble_stash_from_i_to_w, .fini = fini)
{
    cr_assert_eq(flags_run(TINY, "--gpus", "2", "-p", "2", "--global-batch-size", "8", "--schedule", "zb-h1", "--fp32",
                           "--attention-backend", "unfused", NULL),
                 TS_OK, "%s", E.msg);
    layer_shape L;
    cr_assert_eq(layer_shape_from_config(&C, &L, &E), TS_OK, "%s", E.msg);
    layer_ops w, ow, i, oi;
    cr_assert_eq(layer_ops_build(&L, LAYER_PASS_W, &w, &E), TS_OK, "%s", E.msg);
    cr_assert_eq(layer_ops_build(&L, LAYER_PASS_I, &i, &E), TS_OK, "%s", E.msg);
    cr_assert_eq(layer_output_ops(&L, LAYER_PASS_W, &ow, &E), TS_OK, "%s", E.msg);
    cr_assert_eq(layer_output_ops(&L, LAYER_PASS_I, &oi, &E), TS_OK, "%s", E.msg);
    layer_saved_list sl, so;
    cr_assert_eq(layer_saved_build(&L, &sl, &E), TS_OK, "%s", E.msg);
    cr_assert_eq(layer_output_saved(&L, &so, &E), TS_OK, "%s", E.msg);
    int64_t free_i = 0, free_i_out = 0;
    for (int k = 0; k < sl.n; k++)
        free_i += sl.t[k].free_when == LAYER_FREE_AFTER_I ? sl.t[k].bytes : 0;
    for (int k = 0; k < so.n; k++)
        free_i_out += so.t[k].free_when == LAYER_FREE_AFTER_I ? so.t[k].bytes : 0;
    simulate_opts o = {.keep_trace = true};
    simulate_result *r = NULL;
    cr_assert_eq(simulate_run(&C, &o, &r, &E), TS_OK, "%s", E.msg);
    int64_t f_end, i_end, w_end, first;
    replay(r->pl, 1, PLAN_PASS_F, &f_end, &first);
    replay(r->pl, 1, PLAN_PASS_I, &i_end, &first);
    replay(r->pl, 1, PLAN_PASS_W, &w_end, &first);
    int64_t stash = 2 * layer_wgrad_stash_bytes(&L, &i, &w) + layer_wgrad_stash_bytes(&L, &oi, &ow); /* 2 layers */
    cr_expect_eq(i_end, stash - 2 * free_i - free_i_out, "I: %lld", (long long)i_end);
    cr_expect_eq(f_end + i_end + w_end, 0, "F, I and W of the last stage leave %lld bytes",
                 (long long)(f_end + i_end + w_end));
    simulate_result_free(r);
}
