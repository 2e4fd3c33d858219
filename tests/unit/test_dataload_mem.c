/* The data loader's batch in the memory timeline (sim/model/dataload.h
 * dataload_mem, the "data-batch" category): the bytes per micro-batch and
 * stage role in closed form (with and without the attention mask, cp
 * slices, multi-token prediction), the category's own peak on each rank of
 * a 1F1B pipeline in closed form (the first stage holds the embedding
 * indices of every micro-batch in flight, the last stage one micro-batch's),
 * everything freed by the iteration's end, and the metamorphic property
 * that the mask never lowers the memory peak. */
#include <criterion/criterion.h>
#include <string.h>

#include "sim/core/simulate.h"
#include "sim/model/dataload.h"
#include "tests/unit/flags_run.h"

static void fini(void)
{
    flags_run_free();
}

TestSuite(dataload_mem, .fini = fini);

static dataload_mem mem_of(dataload_in in)
{
    dataload_mem m;
    cr_assert_eq(dataload_mem_of(&in, &m, &E), TS_OK, "%s", E.msg);
    return m;
}

Test(dataload_mem, closed_form_by_role)
{
    const int64_t b = 2, s = 1024, bs = b * s;
    const int64_t whole = 3 * 8 * bs + 4 * bs + b * s * s; /* tokens, labels, position_ids; loss_mask; mask */
    /* first stage: all five on TP rank 0; tokens + position_ids kept to the weight gradient */
    dataload_mem m = mem_of((dataload_in){.first = true, .b = 2, .s = 1024, .tp = 4, .cp = 1, .attn_mask = true});
    cr_expect_eq(m.step_bytes, whole);
    cr_expect_eq(m.fwd_bytes, whole);
    cr_expect_eq(m.mask_bytes, b * s * s);
    cr_expect_eq(m.kept_w_bytes, 16 * bs);
    cr_expect_eq(m.kept_i_bytes, 0);
    /* last stage: labels + loss_mask kept to the backward */
    m = mem_of((dataload_in){.last = true, .b = 2, .s = 1024, .tp = 4, .cp = 1, .attn_mask = true});
    cr_expect_eq(m.step_bytes, whole);
    cr_expect_eq(m.kept_i_bytes, 12 * bs);
    cr_expect_eq(m.kept_w_bytes, 0);
    /* with multi-token prediction its depths embed the tokens: kept too */
    m = mem_of((dataload_in){.last = true, .mtp = true, .b = 2, .s = 1024, .tp = 4, .cp = 1, .attn_mask = true});
    cr_expect_eq(m.kept_w_bytes, 16 * bs);
    /* one stage: both */
    m = mem_of((dataload_in){.first = true, .last = true, .b = 2, .s = 1024, .tp = 1, .cp = 1, .attn_mask = true});
    cr_expect_eq(m.kept_i_bytes + m.kept_w_bytes, 28 * bs);
    /* no mask: 28 bytes per token */
    m = mem_of((dataload_in){.first = true, .b = 2, .s = 1024, .tp = 4, .cp = 1});
    cr_expect_eq(m.step_bytes, 28 * bs);
    cr_expect_eq(m.mask_bytes, 0);
}

Test(dataload_mem, cp_slices_the_sequence_and_the_mask)
{
    const int64_t b = 1, s = 4096, cp = 4, bs = b * s;
    const int64_t whole = 28 * bs + b * s * s;
    dataload_mem m =
        mem_of((dataload_in){.first = true, .last = true, .b = 1, .s = 4096, .tp = 2, .cp = 4, .attn_mask = true});
    /* get_batch_on_this_cp_rank: every tensor to s / cp, the mask [b, 1, s, s] on dim 2: b s^2 / cp */
    cr_expect_eq(m.mask_bytes, b * s * s / cp);
    cr_expect_eq(m.fwd_bytes, whole / cp);
    cr_expect_eq(m.step_bytes, whole + whole / cp); /* the whole batch and its slices during the step */
    cr_expect_eq(m.kept_i_bytes, 12 * bs / cp);
    cr_expect_eq(m.kept_w_bytes, 16 * bs / cp);
    dataload_in bad = {.first = true, .b = 1, .s = 4100, .tp = 1, .cp = 4};
    dataload_mem x;
    cr_expect_eq(dataload_mem_of(&bad, &x, &E), TS_EINVAL);
    cr_expect(strstr(E.msg, "2 x cp"), "%s", E.msg);
    bad = (dataload_in){.b = 1, .s = 4096, .tp = 1, .cp = 1};
    cr_expect_eq(dataload_mem_of(&bad, &x, &E), TS_EINVAL);
}

#define SMALL                                                                                                          \
    "--num-layers", "4", "--hidden-size", "1024", "--num-attention-heads", "16", "--seq-length", "1024",               \
        "--micro-batch-size", "2", "--global-batch-size", "16"

static simulate_result *run(void)
{
    simulate_result *r = NULL;
    simulate_opts o = {.keep_trace = true}; /* the memory tracker kept: each category's own peak */
    cr_assert_eq(simulate_run(&C, &o, &r, &E), TS_OK, "%s", E.msg);
    return r;
}

Test(dataload_mem, in_the_timeline_of_the_loading_stages)
{
    /* p = 4, 1F1B, m = 8: the first stage runs 3 forwards before its first
     * backward, so its batch peaks at one micro-batch's step while three
     * earlier ones hold their embedding indices; the last stage runs each
     * backward before the next forward: one step's bytes */
    cr_assert_eq(flags_run(SMALL, "--gpus", "8", "-t", "2", "-p", "4", NULL), TS_OK, "%s", E.msg);
    simulate_result *r = run();
    const dataload_mem *f = &r->data_mem[0], *l = &r->data_mem[1];
    cr_expect_eq(f->mask_bytes, 2LL * 1024 * 1024);
    cr_expect_eq(mem_cat_peak_bytes(r->mem, 0, MEM_BATCH), f->step_bytes + 3 * f->kept_w_bytes);
    cr_expect_eq(mem_cat_peak_bytes(r->mem, 1, MEM_BATCH), 0);
    cr_expect_eq(mem_cat_peak_bytes(r->mem, 2, MEM_BATCH), 0);
    cr_expect_eq(mem_cat_peak_bytes(r->mem, 3, MEM_BATCH), l->step_bytes);
    for (int k = 0; k < 4; k++) /* all freed by the iteration's end */
        cr_expect_eq(mem_live_bytes(r->mem, k, MEM_BATCH), 0, "rank %d", k);
    simulate_result_free(r);
}

/* The memory peak of the run of SMALL, the NULL-terminated flags a (at
 * most 7) and, without mask, --no-create-attention-mask-in-dataloader. */
static int64_t peak_of(const char *const *a, bool mask)
{
    const char *v[9] = {NULL};
    int n = 0;
    while (n < 7 && a[n]) {
        v[n] = a[n];
        n++;
    }
    if (!mask)
        v[n] = "--no-create-attention-mask-in-dataloader";
    cr_assert_eq(flags_run(SMALL, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], NULL), TS_OK, "%s", E.msg);
    simulate_result *r = run();
    int64_t p = r->peak_bytes;
    simulate_result_free(r);
    return p;
}

Test(dataload_mem, the_mask_never_lowers_the_peak)
{
    static const char *const cases[][8] = {
        {"--gpus", "1", NULL},
        {"--gpus", "8", "-t", "2", "-p", "4", NULL},
        {"--gpus", "2", "--context-parallel-size", "2", "--attention-backend", "flash", "--bf16", NULL},
        {"--gpus", "8", "-p", "4", "--schedule", "zb-h1", NULL},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        int64_t with = peak_of(cases[k], true);
        int64_t without = peak_of(cases[k], false);
        cr_expect_geq(with, without, "case %zu: %lld < %lld", k, (long long)with, (long long)without);
    }
}
