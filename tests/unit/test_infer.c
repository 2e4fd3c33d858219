/* infer: KV-cache and weight bytes against their closed forms, decode and
 * prefill time bounds from the datasheet, the pipeline and static-batch
 * formulas, the request stream (determinism, one request = a static batch
 * of one, load), and the two calibration rows of
 * ../shared/reference/inference_calibration.csv within the stated
 * tolerance. Run from the repository root (catalogues in topologies/). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "sim/config/flags.h"
#include "sim/infer/infer_cost.h"
#include "sim/infer/infer_kv.h"
#include "sim/infer/infer_static.h"
#include "sim/infer/infer_stream.h"
#include "sim/model/flops.h"
#include "sim/util/csvio.h"
#include "tests/unit/flags_run.h"

/* The tolerance the two calibration rows meet (docs/inference.md): the
 * predicted output tokens/s per GPU within 15% of the published figure. */
#define CALIB_TOLERANCE 0.15

static void fini(void)
{
    flags_run_free();
}

TestSuite(infer, .fini = fini);

/* Resolve a NULL-terminated flag list into C; it must be valid. */
#define cfg(...) cr_assert_eq(flags_run(__VA_ARGS__), TS_OK, "%s", E.msg)

/* Llama-2-7B's shape (inference_calibration.csv's comment) with GQA of g groups. */
#define LLAMA7B(g)                                                                                                     \
    "--num-layers", "32", "--hidden-size", "4096", "--num-attention-heads", "32", "--ffn-hidden-size", "11008",        \
        "--swiglu", "--vocab-size", "32000", "--seq-length", "4096", "--micro-batch-size", "1", "--normalization",     \
        "RMSNorm", "--position-embedding-type", "rope", "--disable-bias-linear",                                       \
        "--untie-embeddings-and-output-weights", "--group-query-attention", "--num-query-groups", g

static infer_model *model(infer_prec pr, infer_params ip)
{
    infer_model *m = NULL;
    cr_assert_eq(infer_model_new(&C, &pr, &ip, &m, &E), TS_OK, "%s", E.msg);
    return m;
}

static const infer_prec FP16 = {INFER_FP16, INFER_FP16, INFER_FP16};

Test(infer, kv_bytes_closed_form)
{
    /* 2 x layers x kv_heads x head_dim x bytes / t / p */
    cfg(LLAMA7B("8"), "--gpu", "H100-SXM5-80GB", "--fp16", "-t", "2", "-p", "2", NULL);
    infer_model *m = model(FP16, infer_params_default());
    int64_t want = 2LL * 32 * 8 * 128 * 2 / 2 / 2;
    cr_assert_eq(infer_kv_bytes_per_token(m, 0), want);
    cr_assert_eq(infer_kv_bytes_per_token(m, 1), want);
    infer_model_free(m);
    infer_prec p8 = {INFER_FP16, INFER_FP16, INFER_INT8};
    m = model(p8, infer_params_default());
    cr_assert_eq(infer_kv_bytes_per_token(m, 0), want / 2);
    /* KV for b sequences of (in + out) tokens in the memory report */
    infer_mem mem = infer_memory(m, 10 * 300, 10, 10, 10);
    cr_assert_eq(mem.kv_bytes, 3000 * want / 2);
    infer_model_free(m);
    /* t > g: each rank holds one replicated KV head (the training
     * configuration refuses g % t, so the layout is set after it) */
    cfg(LLAMA7B("2"), "--fp16", NULL);
    C.par.tp = 4;
    m = model(FP16, infer_params_default());
    cr_assert_eq(infer_kv_bytes_per_token(m, 0), 2LL * 32 * 1 * 128 * 2);
    infer_model_free(m);
}

Test(infer, weight_bytes_by_dtype)
{
    cfg(LLAMA7B("32"), "--fp16", NULL);
    int64_t layers = flops_params_stage(&C.model, 1, 32, 0, 0), all = flops_params_stage(&C.model, 1, 32, 1, 1);
    cr_assert_gt(layers, 6000000000LL); /* Llama-2-7B: 6.5e9 parameters in its layers */
    cr_assert_lt(layers, 7000000000LL);
    infer_model *m = model(FP16, infer_params_default());
    cr_assert_eq(infer_weight_bytes(m, 0), 2 * all);
    infer_model_free(m);
    infer_prec w4 = {INFER_FP16, INFER_INT4, INFER_FP16};
    m = model(w4, infer_params_default());
    cr_assert_eq(infer_weight_bytes(m, 0), layers / 2 + 2 * (all - layers));
    infer_model_free(m);
}

Test(infer, decode_batch1_is_memory_bound)
{
    /* a decode step of one sequence reads every weight: no faster than
     * weights / HBM bandwidth, and within the achievable fraction (cost.c's
     * memory curve tops out at 0.8) plus the kernels' launches */
    cfg(LLAMA7B("32"), "--fp16", "--gpu", "A100-SXM4-80GB", NULL);
    infer_model *m = model(FP16, infer_params_default());
    infer_step s = infer_step_decode(1, 256);
    int64_t ns = infer_step_time(m, &s, 1).step_ns;
    double w = (double)infer_weight_bytes(m, 0), bw = 2039.0; /* bytes per ns (gpus.csv) */
    double kv = 256.0 * (double)infer_kv_bytes_per_token(m, 0);
    double lo = (w - 2.0 * 32000 * 4096 + kv) / bw; /* the input embedding is looked up, not read */
    double kernels = 32 * 14 + 4, launch = infer_model_layout(m)->launch_ns;
    cr_assert_gt((double)ns, lo, "%lld ns", (long long)ns);
    cr_assert_lt((double)ns, (w + kv) / (bw * 0.7) + kernels * launch, "%lld ns", (long long)ns);
    infer_model_free(m);
    /* with launches 0 and full bandwidth it meets the bound within 3% */
    infer_params ip = {.launch_ns = 0, .mem_eff = 1.0, .gemm_eff = 0};
    m = model(FP16, ip);
    ns = infer_step_time(m, &s, 1).step_ns;
    cr_assert_geq((double)ns, lo);
    cr_assert_lt((double)ns, lo * 1.03, "%lld ns vs %.0f", (long long)ns, lo);
    infer_model_free(m);
}

/* A decode calibration's rule (infer_params.decode_line): a decode step of
 * at most decode_rows rows costs its GEMMs by the fitted bandwidth alone,
 * exactly as with no compute bound at all; beyond, a GEMM compute-bound at
 * the curve's plateau takes longer; at 4 rows the plateau bound never
 * binds (memory-bound), so the two rules agree. */
Test(infer, decode_line_bounds_gemms)
{
    cfg(LLAMA7B("32"), "--fp16", NULL);
    infer_params line = {.launch_ns = 0, .mem_eff = 0.5, .decode_line = true, .decode_rows = 512};
    infer_params plat = line, free_compute = {.launch_ns = 0, .mem_eff = 0.5, .gemm_eff = 1e9};
    plat.decode_rows = 0;
    infer_model *a = model(FP16, line), *b = model(FP16, plat), *d = model(FP16, free_compute);
    infer_step big = infer_step_decode(512, 256), small = infer_step_decode(4, 256);
    int64_t ta = infer_step_time(a, &big, 1).step_ns, tb = infer_step_time(b, &big, 1).step_ns;
    int64_t td = infer_step_time(d, &big, 1).step_ns;
    cr_assert_lt(llabs(ta - td), 2, "within the measured rows: %lld ns, memory only %lld ns", (long long)ta,
                 (long long)td);
    /* 512 rows of fp16 GEMMs: 2 x 512 flops per 2 weight bytes, above the
     * A100's 312 TFLOP/s / (0.5 x 2039 GB/s) = 306 flops per byte */
    cr_assert_gt((double)tb, 1.1 * (double)ta, "beyond them: %lld ns vs %lld ns", (long long)tb, (long long)ta);
    int64_t sa = infer_step_time(a, &small, 1).step_ns, sb = infer_step_time(b, &small, 1).step_ns;
    cr_assert_lt(llabs(sa - sb), 2, "4 rows: %lld vs %lld ns", (long long)sa, (long long)sb);
    /* a prefill keeps the curve: the rule changes nothing there */
    infer_params nol = line;
    nol.decode_line = false;
    infer_model *c = model(FP16, nol);
    infer_step pre = infer_step_prefill(4, 128);
    cr_assert_eq(infer_step_time(a, &pre, 1).step_ns, infer_step_time(c, &pre, 1).step_ns);
    infer_model_free(a);
    infer_model_free(b);
    infer_model_free(c);
    infer_model_free(d);
}

Test(infer, prefill_flops_bound)
{
    /* prefill step attention pairs: b n (n+1) / 2 */
    infer_step s = infer_step_prefill(3, 100);
    cr_assert_float_eq(s.pre_pairs, 3 * 100 * 101 / 2.0, 1e-9);
    cr_assert_float_eq(s.tokens, 300, 1e-9);
    /* a long prefill is compute-bound: at least 2 x params x tokens flops
     * at the peak; the element-wise kernels (norms, residuals, SwiGLU,
     * rotary: ~170 kB per token per layer over HBM) add ~15% at most */
    cfg(LLAMA7B("32"), "--fp16", "--gpu", "H100-SXM5-80GB", NULL);
    infer_params ip = {.launch_ns = 0, .mem_eff = 0, .gemm_eff = 1.0};
    infer_model *m = model(FP16, ip);
    int64_t tokens = 16 * 2048;
    s = infer_step_prefill(16, 2048);
    int64_t ns = infer_step_time(m, &s, 16).step_ns;
    double params = (double)flops_params_stage(&C.model, 1, 32, 0, 0) + 32000.0 * 4096; /* layers + logits */
    double gemm = 2.0 * params * (double)tokens / 989.4e3;                              /* ns at the peak */
    double attn = 4.0 * s.pre_pairs * 4096 * 32 / 989.4e3;
    cr_assert_gt((double)ns, gemm + attn, "%lld ns", (long long)ns);
    cr_assert_lt((double)ns, 1.20 * (gemm + attn), "%lld ns vs %.0f", (long long)ns, gemm + attn);
    infer_model_free(m);
}

Test(infer, pipeline_step_formula)
{
    cfg(LLAMA7B("32"), "--fp16", "-p", "4", NULL);
    infer_model *m = model(FP16, infer_params_default());
    /* one sequence: one micro-batch's trip through the 4 stages */
    infer_step s = infer_step_decode(1, 100);
    int64_t trip = 0;
    for (int i = 0; i < 4; i++)
        trip += infer_stage_ns(m, i, &s) + infer_handoff_ns(m, i, s.tokens);
    infer_step_times st = infer_step_time(m, &s, 1);
    cr_assert_eq(st.step_ns, trip);
    cr_assert_eq(st.micro_batches, 1);
    /* 64 sequences: 4 micro-batches of 16; the pipeline full */
    s = infer_step_decode(64, 100);
    infer_step q = infer_step_decode(16, 100);
    int64_t slow = 0;
    trip = 0;
    for (int i = 0; i < 4; i++) {
        int64_t x = infer_stage_ns(m, i, &q);
        slow = x > slow ? x : slow;
        trip += x + infer_handoff_ns(m, i, q.tokens);
    }
    st = infer_step_time(m, &s, 64);
    cr_assert_eq(st.micro_batches, 4);
    cr_assert_eq(st.step_ns, 4 * slow > trip ? 4 * slow : trip);
    cr_assert_eq(st.last_ns, trip + 3 * slow);
    cr_assert_gt(infer_handoff_ns(m, 0, 16), 0);
    cr_assert_eq(infer_handoff_ns(m, 3, 16), 0); /* the last stage hands nothing on */
    infer_model_free(m);
}

Test(infer, static_batch_closed_form)
{
    cfg(LLAMA7B("32"), "--fp16", "-t", "2", NULL);
    infer_model *m = model(FP16, infer_params_default());
    infer_static_in in = {.batch = 8, .input_len = 64, .output_len = 5, .gpus = 8};
    infer_static_result r;
    cr_assert_eq(infer_static_run(m, &in, &r, &E), TS_OK, "%s", E.msg);
    infer_step pre = infer_step_prefill(8, 64);
    int64_t ttft = infer_step_time(m, &pre, 8).last_ns, dec = 0;
    for (int i = 1; i < 5; i++) {
        infer_step s = infer_step_decode(8, 64 + i);
        dec += infer_step_time(m, &s, 8).step_ns;
    }
    cr_assert_eq(r.ttft_ns, ttft);
    cr_assert_eq(r.e2e_ns, ttft + dec);
    cr_assert_eq(r.tpot_ns, dec / 4);
    cr_assert_eq(r.replicas, 4);
    cr_assert_float_eq(r.throughput_per_gpu, 8.0 * 5 / (r.e2e_ns * 1e-9) / 2, 1e-6);
    cr_assert_float_eq(r.tokens_per_s, r.throughput_per_gpu * 8, 1e-6);
    /* the decode steps grow with the context: the last is the slowest */
    infer_step first = infer_step_decode(8, 65), last = infer_step_decode(8, 68);
    cr_assert_lt(infer_step_time(m, &first, 8).step_ns, infer_step_time(m, &last, 8).step_ns);
    /* output of one token: no decode step */
    in.output_len = 1;
    cr_assert_eq(infer_static_run(m, &in, &r, &E), TS_OK);
    cr_assert_eq(r.e2e_ns, ttft);
    cr_assert_eq(r.tpot_ns, 0);
    /* the largest batch fits, one more does not */
    in.output_len = 5;
    cr_assert_eq(infer_static_run(m, &in, &r, &E), TS_OK);
    int64_t b = r.max_batch;
    cr_assert_gt(b, 100);
    cr_assert(infer_memory(m, b * 69, b * 64, b, b).fits);
    cr_assert(!infer_memory(m, (b + 1) * 69, (b + 1) * 64, b + 1, b + 1).fits);
    /* bad inputs */
    in.gpus = 3;
    cr_assert_eq(infer_static_run(m, &in, &r, &E), TS_EINVAL);
    cr_assert(strstr(E.msg, "--gpus"), "%s", E.msg);
    infer_model_free(m);
}

Test(infer, fp8_refused_without_fp8)
{
    cfg(LLAMA7B("32"), "--fp16", "--gpu", "A100-SXM4-80GB", NULL);
    infer_prec p = {INFER_FP8, INFER_FP8, INFER_FP8};
    infer_params ip = infer_params_default();
    infer_model *m = NULL;
    cr_assert_eq(infer_model_new(&C, &p, &ip, &m, &E), TS_EINVAL);
    cr_assert_null(m);
    cr_assert(strstr(E.msg, "A100-SXM4-80GB") && strstr(E.msg, "FP8"), "%s", E.msg);
    infer_prec kv = {INFER_FP16, INFER_FP16, INFER_FP8};
    cr_assert_eq(infer_model_new(&C, &kv, &ip, &m, &E), TS_EINVAL);
    cr_assert(strstr(E.msg, "--kv-cache-dtype"), "%s", E.msg);
}

static infer_stream_in stream_in(double rate, unsigned long seed)
{
    return (infer_stream_in){.request_rate = rate,
                             .num_requests = 300,
                             .seed = seed,
                             .input_len = 256,
                             .output_len = 64,
                             .max_seqs = 32,
                             .max_num_tokens = 2048,
                             .gpus = 1};
}

Test(infer, stream_deterministic_and_seeded)
{
    cfg(LLAMA7B("32"), "--fp16", NULL);
    infer_model *m = model(FP16, infer_params_default());
    infer_stream_in in = stream_in(8, 7);
    infer_stream_result a, b, c;
    cr_assert_eq(infer_stream_run(m, &in, &a, &E), TS_OK, "%s", E.msg);
    cr_assert_eq(infer_stream_run(m, &in, &b, &E), TS_OK);
    cr_assert_eq(a.makespan_ns, b.makespan_ns);
    cr_assert_eq(a.steps, b.steps);
    cr_assert_eq(a.ttft.mean_ns, b.ttft.mean_ns);
    cr_assert_eq(a.tpot.p99_ns, b.tpot.p99_ns);
    cr_assert_eq(a.e2e.p50_ns, b.e2e.p50_ns);
    cr_assert_eq(a.peak_kv_tokens, b.peak_kv_tokens);
    in.seed = 8;
    cr_assert_eq(infer_stream_run(m, &in, &c, &E), TS_OK);
    cr_assert_neq(a.makespan_ns, c.makespan_ns);
    infer_model_free(m);
}

Test(infer, stream_one_request_is_a_static_batch_of_one)
{
    cfg(LLAMA7B("32"), "--fp16", NULL);
    infer_model *m = model(FP16, infer_params_default());
    infer_stream_in in = stream_in(1, 1);
    in.num_requests = 1;
    infer_stream_result r;
    cr_assert_eq(infer_stream_run(m, &in, &r, &E), TS_OK, "%s", E.msg);
    infer_static_in si = {.batch = 1, .input_len = 256, .output_len = 64, .gpus = 1};
    infer_static_result s;
    cr_assert_eq(infer_static_run(m, &si, &s, &E), TS_OK);
    cr_assert_float_eq(r.ttft.mean_ns, (double)s.ttft_ns, 0.5);
    cr_assert_float_eq(r.e2e.mean_ns, (double)s.e2e_ns, 0.5);
    cr_assert_eq(r.steps, 64);
    infer_model_free(m);
}

Test(infer, stream_load)
{
    cfg(LLAMA7B("32"), "--fp16", NULL);
    infer_model *m = model(FP16, infer_params_default());
    /* higher request rate never lowers the mean TTFT (same seed: the same
     * arrivals, compressed) */
    double rates[] = {0.5, 2, 8, 32, 128};
    double prev = 0;
    infer_stream_result r;
    for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++) {
        infer_stream_in in = stream_in(rates[i], 3);
        cr_assert_eq(infer_stream_run(m, &in, &r, &E), TS_OK, "%s", E.msg);
        cr_assert_geq(r.ttft.mean_ns, prev, "rate %g: %g < %g", rates[i], r.ttft.mean_ns, prev);
        cr_assert_leq(r.ttft.p50_ns, r.ttft.p99_ns);
        prev = r.ttft.mean_ns;
        if (i == 1) { /* light load: every request served as it comes, output tokens/s = rate x output */
            /* 300 exponential gaps: the makespan is 150 s +- 6% (one sigma) */
            cr_assert_float_eq(r.tokens_per_s / 64, 2.0, 0.3, "%g requests/s served", r.tokens_per_s / 64);
            cr_assert_lt(r.mean_running, 32);
        }
    }
    /* Little's law on the running set, L = lambda W: the time-averaged
     * sequences running equal the completion rate times the mean time from
     * admission to the end (every request admitted once, removed once) */
    double lambda = 300.0 / (double)r.makespan_ns;
    cr_assert_float_eq(r.mean_in_batch, lambda * r.mean_service_ns, 1e-6 * r.mean_in_batch, "%g vs %g", r.mean_in_batch,
                       lambda * r.mean_service_ns);
    /* saturated (128/s is past what one GPU serves): queues build, TTFT is
     * seconds, the batch is full */
    cr_assert_gt(r.ttft.mean_ns, 1e9);
    cr_assert_gt(r.mean_running, 28);
    infer_model_free(m);
}

/* ---------------------------------------------------------------- calibration */

Test(infer, calibration_rows_within_tolerance)
{
    csvio_table *t = NULL;
    if (csvio_read("../shared/reference/inference_calibration.csv", NULL, 0, &t, &E) != TS_OK)
        cr_skip_test("../shared/reference/inference_calibration.csv not beside the checkout: %s", E.msg);
    cr_assert_eq(t->nrows, 2);
    for (size_t i = 0; i < t->nrows; i++) {
        const char *gpu = csvio_cell(t, i, "gpu"), *prec = csvio_cell(t, i, "precision");
        int64_t b, tp, in, out;
        double want;
        cr_assert_eq(csvio_get_int64(t, i, "batch", 1, 1 << 20, &b, &E), TS_OK);
        cr_assert_eq(csvio_get_int64(t, i, "tp", 1, 64, &tp, &E), TS_OK);
        cr_assert_eq(csvio_get_int64(t, i, "input_len", 1, 1 << 20, &in, &E), TS_OK);
        cr_assert_eq(csvio_get_int64(t, i, "output_len", 1, 1 << 20, &out, &E), TS_OK);
        cr_assert_eq(csvio_get_double(t, i, "output_tokens_per_s_per_gpu", 1, 1e9, &want, &E), TS_OK);
        cr_assert(strstr(csvio_cell(t, i, "model"), "LLaMA 7B"));
        char tps[16];
        snprintf(tps, sizeof tps, "%lld", (long long)tp);
        cfg(LLAMA7B("32"), "--fp16", "--gpu", gpu, "-t", tps, NULL);
        /* "fp8 (weights and KV cache)": FP8 GEMMs, weights and KV cache */
        infer_prec p = strncmp(prec, "fp8", 3) == 0 ? (infer_prec){INFER_FP8, INFER_FP8, INFER_FP8} : FP16;
        infer_model *m = model(p, infer_params_default());
        infer_static_in si = {.batch = b, .input_len = in, .output_len = out, .gpus = (int)tp};
        infer_static_result r;
        cr_assert_eq(infer_static_run(m, &si, &r, &E), TS_OK, "%s", E.msg);
        cr_assert(r.mem.fits);
        double rel = r.throughput_per_gpu / want - 1;
        cr_log_info("calibration row %zu (%s %s): %.0f tokens/s/GPU predicted, %.0f published (%+.1f%%)", i + 1, gpu,
                    prec, r.throughput_per_gpu, want, 100 * rel);
        cr_assert_lt(fabs(rel), CALIB_TOLERANCE, "row %zu (%s %s): %.0f predicted vs %.0f published (%+.1f%%)", i + 1,
                     gpu, prec, r.throughput_per_gpu, want, 100 * rel);
        infer_model_free(m);
    }
    csvio_free(t);
}
