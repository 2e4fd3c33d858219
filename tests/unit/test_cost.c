/* Tests for cost: GSL interpolation of the efficiency tables (at knots,
 * monotone between, clamped outside), op times, defaults, bad params, and
 * the two-stream op-list runner with overlap. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "sim/model/cost.h"
#include "tests/unit/gpu_specs.h"

static const gpu_spec A100 = {GPU_SPEC_A100};
static const gpu_spec H100 = {GPU_SPEC_H100};
static const gpu_spec H200 = {GPU_SPEC_H200};

static cost_params simple(void)
{
    cost_params p;
    memset(&p, 0, sizeof p);
    strcpy(p.gpu, "test");
    p.peak_tflops = 100;
    p.hbm_gbps = 1000;
    p.dtype_bytes = 2;
    p.launch_ns = 1000;
    p.gemm = (cost_table){4, {10, 100, 1000, 10000}, {0.1, 0.4, 0.6, 0.7}};
    p.mem = (cost_table){3, {1e3, 1e6, 1e9}, {0.05, 0.5, 0.9}};
    return p;
}

Test(cost, interpolation_at_knots_monotone_and_clamped)
{
    cost_params p = simple();
    cost_model *cm;
    cr_assert_eq(cost_model_new(&p, &cm, NULL), TS_OK);
    /* at knots: square GEMMs m=n=k have intensity 2m^3/(2*3m^2) = m/3 */
    cr_assert_float_eq(cost_gemm_eff(cm, 300, 300, 300), 0.4, 1e-9);
    cr_assert_float_eq(cost_gemm_eff(cm, 3000, 3000, 3000), 0.6, 1e-9);
    cr_assert_float_eq(cost_mem_eff(cm, 1000000), 0.5, 1e-12);
    /* clamped */
    cr_assert_float_eq(cost_gemm_eff(cm, 3, 3, 3), 0.1, 1e-12);
    cr_assert_float_eq(cost_gemm_eff(cm, 1 << 20, 1 << 20, 1 << 20), 0.7, 1e-12);
    cr_assert_float_eq(cost_mem_eff(cm, 1), 0.05, 1e-12);
    cr_assert_float_eq(cost_mem_eff(cm, 1LL << 40), 0.9, 1e-12);
    /* monotone between knots (Steffen: no overshoot) */
    double prev = 0;
    for (int64_t b = 500; b < (1LL << 31); b += b / 7 + 1) {
        double e = cost_mem_eff(cm, b);
        cr_assert_geq(e, prev - 1e-15, "bytes %lld", (long long)b);
        cr_assert_leq(e, 0.9 + 1e-15);
        prev = e;
    }
    prev = 0;
    for (int64_t m = 8; m < 100000; m += m / 9 + 1) {
        double e = cost_gemm_eff(cm, m, m, m);
        cr_assert_geq(e, prev - 1e-15, "m %lld", (long long)m);
        prev = e;
    }
    cost_model_free(cm);
}

Test(cost, two_knots_linear)
{
    cost_params p = simple();
    p.mem = (cost_table){2, {1e3, 1e9}, {0.2, 0.8}};
    cost_model *cm;
    cr_assert_eq(cost_model_new(&p, &cm, NULL), TS_OK);
    cr_assert_float_eq(cost_mem_eff(cm, 1000000), 0.5, 1e-12); /* midpoint in log10 */
    cost_model_free(cm);
}

Test(cost, op_times)
{
    cost_params p = simple();
    cost_model *cm;
    cr_assert_eq(cost_model_new(&p, &cm, NULL), TS_OK);
    /* 3000^3 GEMM x 2: flops 2*2.7e10*2 at 0.6 * 100 TFLOP/s = 1.8 ms */
    double want = 1000 + 2.0 * 3000 * 3000 * 3000 * 2 / (100e3 * 0.6);
    cr_assert_eq(cost_gemm_ns(cm, 3000, 3000, 3000, 2), llround(want));
    cr_assert_eq(cost_mem_ns(cm, 1000000), llround(1000 + 1e6 / (1000 * 0.5)));
    cr_assert_eq(cost_mem_ns(cm, 0), 1000);
    layer_op g = {.name = "g", .kind = LAYER_OP_GEMM, .m = 3000, .n = 3000, .k = 3000, .batch = 2};
    layer_op c = {.name = "c", .kind = LAYER_OP_COMM, .batch = 1, .bytes = 1 << 20, .group = 8};
    cr_assert_eq(cost_op_ns(cm, &g), cost_gemm_ns(cm, 3000, 3000, 3000, 2));
    cr_assert_eq(cost_op_ns(cm, &c), 0);
    cost_model_free(cm);
}

Test(cost, intensity)
{
    cr_assert_float_eq(cost_gemm_intensity(300, 300, 300, 2), 100.0, 1e-9);
    /* thin attention GEMM (k = head dim) is far below a square one */
    cr_assert_lt(cost_gemm_intensity(2048, 2048, 96, 2), cost_gemm_intensity(8192, 2304, 6144, 2) / 10);
}

Test(cost, defaults_per_gpu)
{
    cost_params pa, ph, p2;
    cr_assert_eq(cost_params_default(&A100, PREC_BF16, &pa, NULL), TS_OK);
    cr_assert_eq(cost_params_default(&H100, PREC_BF16, &ph, NULL), TS_OK);
    cr_assert_eq(cost_params_default(&H200, PREC_BF16, &p2, NULL), TS_OK);
    cr_assert_eq(pa.peak_tflops, 312.0);
    cr_assert_eq(ph.hbm_gbps, 3350.0);
    cr_assert_eq(cost_table_check(&pa.gemm, "A100 GEMM", NULL), TS_OK);
    cr_assert_eq(cost_table_check(&ph.mem, "H100 memory", NULL), TS_OK);
    cost_model *a, *h, *h2;
    cr_assert_eq(cost_model_new(&pa, &a, NULL), TS_OK);
    cr_assert_eq(cost_model_new(&ph, &h, NULL), TS_OK);
    cr_assert_eq(cost_model_new(&p2, &h2, NULL), TS_OK);
    /* big GEMM: faster on H100; efficiency below 1 */
    cr_assert_lt(cost_gemm_ns(h, 8192, 8192, 8192, 1), cost_gemm_ns(a, 8192, 8192, 8192, 1));
    cr_assert_lt(cost_gemm_eff(a, 8192, 8192, 8192), 1.0);
    /* memory-bound op: H200's HBM is faster than H100's */
    cr_assert_lt(cost_mem_ns(h2, 1 << 30), cost_mem_ns(h, 1 << 30));
    /* thin GEMMs are less efficient than square ones */
    cr_assert_lt(cost_gemm_eff(a, 2048, 2048, 96), cost_gemm_eff(a, 8192, 8192, 8192));
    cost_model_free(a);
    cost_model_free(h);
    cost_model_free(h2);
    /* fp32 uses the fp32 peak */
    cr_assert_eq(cost_params_default(&A100, PREC_FP32, &pa, NULL), TS_OK);
    cr_assert_eq(pa.peak_tflops, 19.5);
    cr_assert_eq(pa.dtype_bytes, 4);
}

Test(cost, errors)
{
    ts_err e;
    gpu_spec v = {.name = "V100-SXM2-32GB",
                  .bf16_tflops = 125,
                  .fp16_tflops = 125,
                  .fp32_tflops = 15.7,
                  .hbm_gib = 32,
                  .hbm_gbps = 900,
                  .nvlink_gbps = 150};
    cost_params p;
    cr_assert_eq(cost_params_default(&v, PREC_BF16, &p, &e), TS_EINVAL);
    cr_assert(strstr(e.msg, "--calibration"), "%s", e.msg);
    p = simple();
    p.gemm.key[2] = 50;
    cost_model *cm = NULL;
    cr_assert_eq(cost_model_new(&p, &cm, &e), TS_EINVAL);
    cr_assert(strstr(e.msg, "GEMM table: knot 2"), "%s", e.msg);
    cr_assert_null(cm);
    p = simple();
    p.mem.eff[0] = 1.5;
    cr_assert_eq(cost_model_new(&p, &cm, &e), TS_EINVAL);
    cr_assert(strstr(e.msg, "memory table"), "%s", e.msg);
    p = simple();
    p.gemm.n = 1;
    cr_assert_eq(cost_model_new(&p, &cm, &e), TS_EINVAL);
    p = simple();
    p.peak_tflops = 0;
    cr_assert_eq(cost_model_new(&p, &cm, &e), TS_EINVAL);
    cost_model_free(NULL);
}

Test(cost, ops_runner_serial_and_overlap)
{
    cost_params p = simple();
    p.overlap_slowdown = 0;
    cost_model *cm;
    cr_assert_eq(cost_model_new(&p, &cm, NULL), TS_OK);
    commcost_params cp = {
        .nvlink_allreduce_busbw_gbps = 100, .nvlink_busbw_gbps = 100, .nvlink_p2p_gbps = 100, .nic_gbps_per_gpu = 10};
    commcost_group g = {8, 8};
    /* dgrad, all-reduce || wgrad, next op waits for both */
    layer_ops o = {0};
    layer_op gm = {.name = "d",
                   .kind = LAYER_OP_GEMM,
                   .m = 3000,
                   .n = 3000,
                   .k = 3000,
                   .batch = 1,
                   .dep = {-1, -1},
                   .overlap = -1};
    layer_op ar = {.name = "ar",
                   .kind = LAYER_OP_COMM,
                   .batch = 1,
                   .bytes = 800000000,
                   .coll = COMM_ALL_REDUCE,
                   .group = 8,
                   .dep = {0, -1},
                   .overlap = -1};
    layer_op mm = {.name = "m", .kind = LAYER_OP_MEM, .batch = 1, .bytes = 1000000, .dep = {1, 2}, .overlap = -1};
    o.op[0] = gm;
    o.op[1] = ar;
    o.op[2] = gm;
    o.op[2].dep[0] = 0;
    o.op[3] = mm;
    o.n = 4;
    int64_t tg = cost_gemm_ns(cm, 3000, 3000, 3000, 1), tm = cost_mem_ns(cm, 1000000);
    commcost_group gg = {8, 8};
    int64_t tc = commcost_ns(&cp, COMM_ALL_REDUCE, 800000000, &gg);
    cr_assert_gt(tc, tg); /* the collective is the longer branch */
    cost_ops_times t;
    cr_assert_eq(cost_ops_run_ns(cm, &cp, &g, &o, &t), tg + tc + tm);
    cr_assert_eq(t.compute_ns, 2 * tg + tm);
    cr_assert_eq(t.comm_ns, tc);
    cr_assert_eq(t.exposed_comm_ns, tc - tg);
    /* serial chain: makespan = sum */
    o.op[2].dep[0] = 1;
    cr_assert_eq(cost_ops_run_ns(cm, &cp, &g, &o, NULL), tg + tc + tg + tm);
    cost_model_free(cm);
    /* slowdown: the wgrad overlapping the collective takes (1 + sigma) longer */
    p.overlap_slowdown = 0.5;
    cr_assert_eq(cost_model_new(&p, &cm, NULL), TS_OK);
    o.op[2].dep[0] = 0;
    int64_t got = cost_ops_run_ns(cm, &cp, &g, &o, NULL);
    cr_assert_eq(got, tg + tc + tm); /* 1.5 * tg still inside the collective */
    cr_assert_lt(llround(1.5 * tg), tc);
    /* a short collective: the wgrad is slowed only while it runs */
    o.op[1].bytes = 25000000;
    tc = commcost_ns(&cp, COMM_ALL_REDUCE, 25000000, &gg);
    cr_assert_lt(tc, tg);
    got = cost_ops_run_ns(cm, &cp, &g, &o, NULL);
    double wg_end = (double)tg + tc + ((double)tg - tc / 1.5);
    cr_assert(llabs(got - llround(wg_end + tm)) <= 1, "%lld vs %.1f", (long long)got, wg_end + tm);
    /* the static form the engine uses gives the same wgrad duration */
    cr_assert(llabs(cost_overlap_ns(cm, tg, tc) - llround(wg_end - tg)) <= 1);
    cr_assert_eq(cost_overlap_ns(cm, tg, 10 * tg), llround(1.5 * tg));
    cr_assert_eq(cost_overlap_ns(cm, tg, 0), tg);
    cost_model_free(cm);
}

/* The tile model against its closed form (cost.h): the A100's defaults,
 * 108 SMs, tiles 128x256x64, 256x128x64 and 128x128x64. */
Test(cost, gemm_tiles_closed_form)
{
    cost_params p;
    cost_model *a;
    cr_assert_eq(cost_params_default(&A100, PREC_BF16, &p, NULL), TS_OK);
    cr_assert_eq(p.tiles.sms, 108);
    cr_assert_eq(cost_model_new(&p, &a, NULL), TS_OK);
    double pf = p.tiles.peak_frac, ov = p.tiles.kloop_overhead_steps;
    cr_assert(pf > 0.5 && pf < 1 && ov >= 0);
    /* one full wave (108 tiles of 128x256), K loop 100 steps: peak_frac x
     * 100 / (100 + overhead) of the peak */
    double full = pf * 100 / (100 + ov);
    cr_expect_float_eq(cost_gemm_eff(a, 128 * 108, 256, 6400), full, 1e-9);
    /* one more tile row: 109 big tiles need 2 waves; the 128x128 tiles
     * (218, 3 waves of half-time tiles) do it in 1.5 big-tile waves */
    cr_expect_float_eq(cost_gemm_eff(a, 128 * 109, 256, 6400), full * (109.0 / 108) / 1.5, 1e-9);
    /* a 10x shorter K loop pays the prologue/epilogue 10x more */
    cr_expect_float_eq(cost_gemm_eff(a, 128 * 108, 256, 640), pf * 10 / (10 + ov), 1e-9);
    cr_expect_lt(cost_gemm_eff(a, 128 * 108, 256, 640), full);
    /* time = launch + busy */
    double flops = 2.0 * 128 * 108 * 256 * 6400;
    cr_expect_eq(cost_gemm_ns(a, 128 * 108, 256, 6400, 1), llround(p.launch_ns + flops / (312e3 * full)));
    /* a batch packs its tiles into waves: 27 GEMMs of four 128x256 tiles each
     * take one wave, like the single big GEMM above (same flops) */
    cr_expect_float_eq(cost_gemm_eff_batch(a, 256, 512, 6400, 27), full, 1e-9);
    /* split-K: 27 tiles of 128x256 (m 128, n 6912) split their 100 K steps 4
     * ways over 108 SMs: ceil(100/4) + overhead steps instead of 100 +
     * overhead; or 54 tiles of 128x128 split 2 ways, (50 + overhead) half
     * steps: the faster of the two */
    double split_steps = fmin(25 + ov, (50 + ov) / 2);
    double step_ns = 2.0 * 128 * 256 * 64 / (312e3 / 108 * pf);
    cr_expect_eq(cost_gemm_compute_ns(a, 128, 27 * 256, 6400, 1), llround(p.launch_ns + split_steps * step_ns));
    cr_expect_lt(split_steps, (100 + ov) / 3);
    cost_model_free(a);
}

/* Thin and small GEMMs: a decode GEMM with m = 1 is bound by reading its
 * weights (the bytes of A, B and C at the memory-op rate); attention's QK^T
 * with head size 128 runs 2 K steps beside the prologue/epilogue. */
Test(cost, gemm_tiles_memory_bound)
{
    cost_params p;
    cost_model *a;
    cr_assert_eq(cost_params_default(&A100, PREC_BF16, &p, NULL), TS_OK);
    cr_assert_eq(cost_model_new(&p, &a, NULL), TS_OK);
    /* decode: 1 x 8192 times 8192 x 8192 */
    double bytes = 2.0 * (8192.0 * 8192 + 8192 + 8192);
    double want = p.launch_ns + bytes / (p.hbm_gbps * cost_mem_eff(a, (int64_t)bytes));
    cr_expect_eq(cost_gemm_ns(a, 1, 8192, 8192, 1), llround(want));
    cr_expect_lt(cost_gemm_eff(a, 1, 8192, 8192), 0.01);
    /* attention QK^T, s 2048, head size 128, 32 heads: 8192 tiles of
     * 128x128 in 76 waves (75.85 full), 2 K steps + the overhead each */
    double ov = p.tiles.kloop_overhead_steps;
    cr_expect_float_eq(cost_gemm_eff_batch(a, 2048, 2048, 128, 32),
                       p.tiles.peak_frac * 2 / (2 + ov) * (8192.0 / 108) / 76, 1e-9);
    cr_expect_lt(cost_gemm_eff_batch(a, 2048, 2048, 128, 32), 0.8 * p.tiles.peak_frac);
    /* efficiency grows with hidden size (square-ish MLP GEMMs of b s = 8192
     * rows, t = 8) the way published runs do */
    double e_small = cost_gemm_eff(a, 8192, 4 * 2304 / 8, 2304), e_mid = cost_gemm_eff(a, 8192, 4 * 6144 / 8, 6144),
           e_big = cost_gemm_eff(a, 8192, 4 * 16384 / 8, 16384);
    cr_expect_lt(e_small, e_mid);
    cr_expect_lt(e_mid, e_big);
    cr_expect_lt(e_big, p.tiles.peak_frac);
    cost_model_free(a);
}

/* Blackwell: defaults exist (derived, cost.c), 148 SMs, faster than H100. */
Test(cost, blackwell_defaults)
{
    gpu_spec b = {.name = "B200-SXM-180GB",
                  .bf16_tflops = 2250,
                  .fp16_tflops = 2250,
                  .fp32_tflops = 75,
                  .hbm_gib = 180,
                  .hbm_gbps = 8000,
                  .nvlink_gbps = 900};
    cost_params pb, ph;
    cost_model *mb, *mh;
    cr_assert_eq(cost_params_default(&b, PREC_BF16, &pb, NULL), TS_OK);
    cr_assert_eq(pb.tiles.sms, 148);
    cr_assert_eq(cost_params_default(&H100, PREC_BF16, &ph, NULL), TS_OK);
    cr_assert_eq(ph.tiles.sms, 132);
    cr_assert_eq(cost_model_new(&pb, &mb, NULL), TS_OK);
    cr_assert_eq(cost_model_new(&ph, &mh, NULL), TS_OK);
    /* a big GEMM: ~2250/989.4 faster (same fraction of peak, more SMs) */
    double r = (double)(cost_gemm_ns(mh, 8192, 8192, 8192, 1) - (int64_t)ph.launch_ns) /
               (double)(cost_gemm_ns(mb, 8192, 8192, 8192, 1) - (int64_t)pb.launch_ns);
    cr_expect(r > 0.8 * 2250 / 989.4 && r < 1.25 * 2250 / 989.4, "B200/H100 speed-up %.3f", r);
    cost_model_free(mb);
    cost_model_free(mh);
    /* a gpu_spec's own SM count wins over the architecture's */
    b.sms = 100;
    cr_assert_eq(cost_params_default(&b, PREC_BF16, &pb, NULL), TS_OK);
    cr_expect_eq(pb.tiles.sms, 100);
}
