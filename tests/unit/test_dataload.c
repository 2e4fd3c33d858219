/* The data loader's step of a micro-batch (sim/model/dataload.h): its bytes
 * and time against the closed form on the default cost tables, which
 * tensors each pipeline role broadcasts, metamorphic properties (a slower
 * host link or a larger batch never faster; no mask never slower), the host
 * links by GPU kind, and whole runs through the shared flags: the step is
 * in the plan's forward of the first and last stages only, and
 * --data-loader-ns replaces it. */
#include <criterion/criterion.h>
#include <string.h>

#include "sim/core/simulate.h"
#include "sim/model/commcost.h"
#include "sim/model/cost.h"
#include "sim/model/dataload.h"
#include "tests/unit/flags_run.h"

static void fini(void)
{
    flags_run_free();
}

TestSuite(dataload, .fini = fini);

static gpu_spec gpu(const char *kind)
{
    gpu_spec g;
    cr_assert_eq(catalog_gpu(kind, &g, &E), TS_OK, "%s", E.msg);
    return g;
}

static cost_model *model_of(const gpu_spec *g)
{
    cost_params p;
    cost_model *cm;
    cr_assert_eq(cost_params_default(g, PREC_BF16, &p, NULL), TS_OK);
    cr_assert_eq(cost_model_new(&p, &cm, NULL), TS_OK);
    return cm;
}

static commcost_params comm_of(const gpu_spec *g)
{
    commcost_params cc;
    cr_assert_eq(commcost_params_default(g, &cc, &E), TS_OK, "%s", E.msg);
    return cc;
}

static dataload_cost cost(const dataload_in *in, const cost_model *cm, const commcost_params *cc)
{
    commcost_group g = {in->tp, in->tp};
    dataload_cost d;
    cr_assert_eq(dataload_cost_of(in, cm, cc, &g, &d, &E), TS_OK, "%s", E.msg);
    return d;
}

Test(dataload, closed_form_first_stage)
{
    gpu_spec g = gpu("H100-SXM5-80GB");
    cost_model *cm = model_of(&g);
    commcost_params cc = comm_of(&g);
    dataload_in in = {.first = true, .b = 2, .s = 1024, .tp = 4, .cp = 1, .attn_mask = true, .host_gbps = 64};
    dataload_cost d = cost(&in, cm, &cc);
    int64_t bs = 2 * 1024;
    int64_t tok = bs * 8, lm = bs * 4, mask = bs * 1024; /* int64 [b, s]; float32 [b, s]; bool [b, 1, s, s] */
    cr_expect_eq(d.h2d_bytes, 3 * tok + lm + mask);
    cr_expect_eq(d.mask_bytes, mask);
    cr_expect_eq(d.n_h2d, 5);
    double launch = cost_model_params(cm)->launch_ns;
    int64_t h2d = 0;
    int64_t sizes[] = {tok, tok, lm, mask, tok};
    for (int k = 0; k < 5; k++)
        h2d += (int64_t)(launch + (double)sizes[k] / 64.0 + 0.5); /* bytes / (GB/s) = ns */
    cr_expect_eq(d.h2d_ns, h2d);
    /* the first stage broadcasts tokens, attention_mask, position_ids: each the all-gather of x * 4/3 */
    commcost_group tg = {4, 4};
    int64_t bc =
        2 * commcost_ns(&cc, COMM_ALL_GATHER, tok * 4 / 3, &tg) + commcost_ns(&cc, COMM_ALL_GATHER, mask * 4 / 3, &tg);
    cr_expect_eq(d.n_bcast, 3);
    cr_expect_eq(d.bcast_bytes, 2 * tok + mask);
    cr_expect_eq(d.bcast_ns, bc);
    cr_expect_eq(d.slice_ns, 0);
    cr_expect_eq(d.total_ns, h2d + bc);
    /* context parallelism: one 16-byte index copy and one index_select of 2 x/cp bytes per tensor */
    in.cp = 2;
    dataload_cost c = cost(&in, cm, &cc);
    cr_expect_eq(c.n_h2d, 10);
    cr_expect_eq(c.h2d_bytes, d.h2d_bytes + 5 * 16);
    cr_expect_eq(c.h2d_ns, h2d + 5 * (int64_t)(launch + 16.0 / 64.0 + 0.5));
    int64_t sl = 0;
    for (int k = 0; k < 5; k++)
        sl += cost_mem_ns(cm, 2 * (sizes[k] / 2));
    cr_expect_eq(c.slice_ns, sl);
    cr_expect_eq(c.total_ns, c.h2d_ns + bc + sl);
    cost_model_free(cm);
}

Test(dataload, broadcasts_by_pipeline_role)
{
    /* one stage: all five; first: tokens, mask, position ids; last: labels, loss mask, mask (+ tokens and
     * position ids with MTP) — get_batch_on_this_tp_rank */
    for (int k = 0; k < DATALOAD_TENSORS; k++)
        cr_expect(dataload_broadcast((dataload_tensor)k, true, true, false));
    cr_expect(dataload_broadcast(DATALOAD_TOKENS, true, false, false));
    cr_expect(dataload_broadcast(DATALOAD_ATTN_MASK, true, false, false));
    cr_expect(dataload_broadcast(DATALOAD_POSITION_IDS, true, false, false));
    cr_expect_not(dataload_broadcast(DATALOAD_LABELS, true, false, false));
    cr_expect_not(dataload_broadcast(DATALOAD_LOSS_MASK, true, false, false));
    cr_expect(dataload_broadcast(DATALOAD_LABELS, false, true, false));
    cr_expect(dataload_broadcast(DATALOAD_LOSS_MASK, false, true, false));
    cr_expect(dataload_broadcast(DATALOAD_ATTN_MASK, false, true, false));
    cr_expect_not(dataload_broadcast(DATALOAD_TOKENS, false, true, false));
    cr_expect_not(dataload_broadcast(DATALOAD_POSITION_IDS, false, true, false));
    cr_expect(dataload_broadcast(DATALOAD_TOKENS, false, true, true));
    cr_expect(dataload_broadcast(DATALOAD_POSITION_IDS, false, true, true));
    /* tp 1: nothing to broadcast; a middle stage: refused */
    gpu_spec g = gpu("A100-SXM4-80GB");
    cost_model *cm = model_of(&g);
    commcost_params cc = comm_of(&g);
    dataload_in in = {
        .first = true, .last = true, .b = 1, .s = 2048, .tp = 1, .cp = 1, .attn_mask = true, .host_gbps = 32};
    dataload_cost d = cost(&in, cm, &cc);
    cr_expect_eq(d.n_bcast, 0);
    cr_expect_eq(d.bcast_ns, 0);
    in.s = 1023; /* an odd sequence: fine without context parallelism */
    cr_expect_eq(cost(&in, cm, &cc).h2d_bytes, 1023 * 28 + 1023 * 1023);
    in.cp = 2; /* 2 x cp chunks of the sequence: 1022 is not a multiple of 4 */
    in.s = 1022;
    commcost_group one = {1, 1};
    cr_expect_eq(dataload_cost_of(&in, cm, &cc, &one, &d, &E), TS_EINVAL);
    cr_expect(strstr(E.msg, "2 x cp"), "%s", E.msg);
    in.cp = 1;
    in.first = in.last = false;
    cr_expect_eq(dataload_cost_of(&in, cm, &cc, &one, &d, &E), TS_EINVAL);
    cr_expect(strstr(E.msg, "middle"), "%s", E.msg);
    cost_model_free(cm);
}

Test(dataload, slower_link_or_more_data_never_faster)
{
    gpu_spec g = gpu("H100-SXM5-80GB");
    cost_model *cm = model_of(&g);
    commcost_params cc = comm_of(&g);
    static const double links[] = {450, 64, 32, 16, 8, 1};
    for (int role = 0; role < 3; role++)
        for (int tp = 1; tp <= 8; tp *= 2)
            for (int cp = 1; cp <= 4; cp *= 2)
                for (int mask = 0; mask < 2; mask++) {
                    dataload_in in = {.first = role != 1,
                                      .last = role != 0,
                                      .b = 1,
                                      .s = 4096,
                                      .tp = tp,
                                      .cp = cp,
                                      .attn_mask = mask,
                                      .host_gbps = links[0]};
                    int64_t prev = cost(&in, cm, &cc).total_ns;
                    for (size_t k = 1; k < sizeof links / sizeof *links; k++) {
                        in.host_gbps = links[k];
                        int64_t t = cost(&in, cm, &cc).total_ns;
                        cr_expect_geq(t, prev, "tp %d cp %d mask %d: %g GB/s faster", tp, cp, mask, links[k]);
                        prev = t;
                    }
                    dataload_in big = in;
                    big.b = 2;
                    cr_expect_geq(cost(&big, cm, &cc).total_ns, prev, "a larger micro-batch faster");
                    if (mask) {
                        dataload_in none = in;
                        none.attn_mask = false;
                        cr_expect_leq(cost(&none, cm, &cc).total_ns, prev, "no mask slower");
                    }
                }
    cost_model_free(cm);
}

Test(dataload, host_links_by_gpu)
{
    double gbps;
    gpu_spec a = gpu("A100-SXM4-80GB"), h = gpu("H100-SXM5-80GB"), gb = gpu("GB200-186GB");
    cr_assert_eq(dataload_host_link_gbps(&a, 0, &gbps, &E), TS_OK);
    cr_expect_eq(gbps, 32); /* PCIe Gen4 x16, per direction */
    cr_assert_eq(dataload_host_link_gbps(&h, 0, &gbps, &E), TS_OK);
    cr_expect_eq(gbps, 64); /* PCIe Gen5 x16 */
    cr_assert_eq(dataload_host_link_gbps(&gb, 0, &gbps, &E), TS_OK);
    cr_expect_eq(gbps, 450); /* NVLink-C2C */
    gpu_spec x = h;
    strcpy(x.name, "MI300X");
    cr_expect_eq(dataload_host_link_gbps(&x, 0, &gbps, &E), TS_EINVAL);
    cr_expect(strstr(E.msg, "MI300X") && strstr(E.msg, "--data-loader-ns"), "%s", E.msg);
    x.calibrated_only = true; /* --gpu cpu: a memcpy at half the calibrated memory rate */
    cr_assert_eq(dataload_host_link_gbps(&x, 20, &gbps, &E), TS_OK);
    cr_expect_eq(gbps, 10);
}

#define SMALL                                                                                                          \
    "--num-layers", "4", "--hidden-size", "1024", "--num-attention-heads", "16", "--seq-length", "1024",               \
        "--micro-batch-size", "1", "--global-batch-size", "8"

static simulate_result *run(void)
{
    simulate_result *r = NULL;
    simulate_opts o = {0};
    cr_assert_eq(simulate_run(&C, &o, &r, &E), TS_OK, "%s", E.msg);
    return r;
}

Test(dataload, in_the_plan_of_the_loading_stages)
{
    /* p = 4: the first and the last stage load, m = 8 micro-batches each; the middle ranks none */
    cr_assert_eq(flags_run(SMALL, "--gpus", "8", "-t", "2", "-p", "4", NULL), TS_OK, "%s", E.msg);
    simulate_result *r = run();
    cr_expect_gt(r->data[0].total_ns, 0);
    cr_expect_gt(r->data[1].total_ns, 0);
    cr_expect_eq(r->data[0].n_bcast, 3);
    cr_expect_eq(r->data[1].n_bcast, 3);
    cr_expect_eq(r->ranks[0].cat_ns[PLAN_CAT_DATA], 8 * r->data[0].total_ns);
    cr_expect_eq(r->ranks[1].cat_ns[PLAN_CAT_DATA], 0);
    cr_expect_eq(r->ranks[2].cat_ns[PLAN_CAT_DATA], 0);
    cr_expect_eq(r->ranks[3].cat_ns[PLAN_CAT_DATA], 8 * r->data[1].total_ns);
    cr_expect_eq(r->data_rank_ns,
                 8 * (r->data[0].total_ns > r->data[1].total_ns ? r->data[0].total_ns : r->data[1].total_ns));
    int64_t it = r->iteration_ns;
    simulate_result_free(r);
    /* a measured step replaces it on both stages; a longer one never makes the iteration faster */
    cr_assert_eq(flags_run(SMALL, "--gpus", "8", "-t", "2", "-p", "4", "--data-loader-ns", "2000000", NULL), TS_OK,
                 "%s", E.msg);
    r = run();
    cr_expect(r->data_measured);
    cr_expect_eq(r->data[0].total_ns, 2000000);
    cr_expect_eq(r->data[1].total_ns, 2000000);
    cr_expect_eq(r->ranks[0].cat_ns[PLAN_CAT_DATA], 8 * 2000000);
    cr_expect_gt(r->iteration_ns, it);
    simulate_result_free(r);
    cr_assert_eq(flags_run(SMALL, "--gpus", "8", "-t", "2", "-p", "4", "--data-loader-ns", "0", NULL), TS_OK, "%s",
                 E.msg);
    r = run();
    cr_expect_eq(r->data_rank_ns, 0);
    cr_expect_leq(r->iteration_ns, it);
    simulate_result_free(r);
    /* no mask in the batch: fewer bytes, never slower */
    cr_assert_eq(
        flags_run(SMALL, "--gpus", "8", "-t", "2", "-p", "4", "--no-create-attention-mask-in-dataloader", NULL), TS_OK,
        "%s", E.msg);
    r = run();
    cr_expect_eq(r->data[0].mask_bytes, 0);
    cr_expect_eq(r->data[0].n_bcast, 2);
    cr_expect_leq(r->iteration_ns, it);
    simulate_result_free(r);
}
