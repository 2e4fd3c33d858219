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
 * 4 layers, h 64, 4 heads, s 64, V 256, b 2, no dropout, bf16 flash. */
#define TINY                                                                                                           \
    "--num-layers", "4", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "64",                    \
        "--padded-vocab-size", "256", "--micro-batch-size", "2", "--attention-dropout", "0", "--hidden-dropout", "0",  \
        "--bf16"

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
    cr_assert_eq(flags_run(TINY, "--gpus", "2", "--context-parallel-size", "2", "--global-batch-size", "2", NULL),
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
