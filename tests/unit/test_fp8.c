/* FP8 training (--fp8-format, --fp8-recipe): the casts each recipe adds
 * (layer_fp8_cast_bytes) and where they go in a layer's op lists, the FP8
 * GEMMs' marking and tile-model time against their closed forms, the saved
 * FP8 inputs, and the defaults (an FP8 peak on H100, none on A100). */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "sim/model/cost.h"
#include "sim/model/fp8.h"
#include "sim/model/layer.h"
#include "tests/unit/gpu_specs.h"

static const gpu_spec A100 = {GPU_SPEC_A100};
static const gpu_spec H100 = {GPU_SPEC_H100, .fp8_tflops = 1978.9, .sms = 132};

/* Llama-3-8B-like layer (GQA, SwiGLU), s 8192, b 1, t 1, flash, no dropout. */
static layer_shape llama(config_fp8_format f, config_fp8_recipe r)
{
    layer_shape L;
    memset(&L, 0, sizeof L);
    L.h = 4096;
    L.a = 32;
    L.g = 8;
    L.ffn = 14336;
    L.swiglu = true;
    L.s = 8192;
    L.b = 1;
    L.V = 128256;
    L.t = 1;
    L.dtype_bytes = 2;
    L.attn = ATTN_BACKEND_FLASH;
    L.no_attn_dropout = L.no_hidden_dropout = true;
    L.fp8 = f;
    L.fp8_recipe = r;
    return L;
}

static const layer_op *find(const layer_ops *o, const char *name)
{
    for (int i = 0; i < o->n; i++)
        if (!strcmp(o->op[i].name, name))
            return &o->op[i];
    return NULL;
}

Test(fp8, cast_bytes_per_recipe)
{
    int64_t E = 1 << 20;
    cr_assert_eq(layer_fp8_cast_bytes(FP8_RECIPE_DELAYED, E), 4 * E);            /* read 2, write 1 + transpose 1 */
    cr_assert_eq(layer_fp8_cast_bytes(FP8_RECIPE_TENSORWISE, E), 6 * E);         /* + the amax pass, read 2 */
    cr_assert_eq(layer_fp8_cast_bytes(FP8_RECIPE_BLOCKWISE, E), 4 * E + E / 16); /* + 2 x 4 B / 128 */
    cr_assert_eq(layer_fp8_cast_bytes(FP8_RECIPE_MXFP8, E), 4 * E + E / 16);     /* + 2 x 1 B / 32 */
}

Test(fp8, linear_gemms_fp8_attention_not_and_casts_per_pass)
{
    layer_shape L = llama(FP8_FORMAT_HYBRID, FP8_RECIPE_TENSORWISE);
    const int64_t T = 8192, h = 4096, qkv_n = 4096 + 2 * 8 * 128, ffn = 14336;
    layer_ops f, i, w, plain;
    cr_assert_eq(layer_ops_build(&L, LAYER_PASS_F, &f, NULL), TS_OK);
    cr_assert_eq(layer_ops_build(&L, LAYER_PASS_I, &i, NULL), TS_OK);
    cr_assert_eq(layer_ops_build(&L, LAYER_PASS_W, &w, NULL), TS_OK);
    layer_shape B = llama(FP8_FORMAT_NONE, FP8_RECIPE_DELAYED);
    cr_assert_eq(layer_ops_build(&B, LAYER_PASS_F, &plain, NULL), TS_OK);
    cr_assert_eq(f.n, plain.n + 4, "forward: one cast per linear layer (%d vs %d ops)", f.n, plain.n);
    for (int k = 0; k < f.n; k++) {
        const layer_op *op = &f.op[k];
        bool linear = op->kind == LAYER_OP_GEMM && strncmp(op->name, "attn.", 5) != 0;
        cr_assert_eq(op->fp8, linear, "%s: fp8 %d", op->name, op->fp8);
    }
    /* forward casts read each linear layer's input: T x k */
    cr_assert_eq(find(&f, "qkv.fp8.cast")->bytes, 6 * T * h);
    cr_assert_eq(find(&f, "proj.fp8.cast")->bytes, 6 * T * h);
    cr_assert_eq(find(&f, "fc1.fp8.cast")->bytes, 6 * T * h);
    cr_assert_eq(find(&f, "fc2.fp8.cast")->bytes, 6 * T * ffn);
    /* the input-gradient pass casts each output gradient: T x n_out */
    cr_assert_eq(find(&i, "qkv.dgrad.fp8.cast")->bytes, 6 * T * qkv_n);
    cr_assert_eq(find(&i, "fc1.dgrad.fp8.cast")->bytes, 6 * T * 2 * ffn);
    cr_assert_eq(find(&i, "fc2.dgrad.fp8.cast")->bytes, 6 * T * h);
    cr_assert(find(&i, "qkv.dgrad")->fp8);
    /* the weight-gradient pass reads the copies those wrote: no casts */
    for (int k = 0; k < w.n; k++) {
        cr_assert_null(strstr(w.op[k].name, ".fp8.cast"), "W pass has %s", w.op[k].name);
        if (w.op[k].kind == LAYER_OP_GEMM)
            cr_assert(w.op[k].fp8, "%s not fp8", w.op[k].name);
    }
}

Test(fp8, saved_inputs_in_fp8)
{
    layer_shape L = llama(FP8_FORMAT_E4M3, FP8_RECIPE_DELAYED), B = llama(FP8_FORMAT_NONE, FP8_RECIPE_DELAYED);
    layer_saved_list l, b;
    cr_assert_eq(layer_saved_build(&L, &l, NULL), TS_OK);
    cr_assert_eq(layer_saved_build(&B, &b, NULL), TS_OK);
    const int64_t T = 8192, h = 4096, ffn = 14336;
    /* qkv.in, fc1.in (T h) and fc2.in (T ffn) drop from 2 to 1 byte; flash
     * keeps proj.in (O) in 16 bits and adds its 1-byte copy (T h) */
    int64_t want = layer_saved_kept_bytes(&b) - (T * h + T * h + T * ffn) + T * h;
    cr_assert_eq(layer_saved_kept_bytes(&l), want, "%lld vs %lld", (long long)layer_saved_kept_bytes(&l),
                 (long long)want);
}

Test(fp8, defaults_fp8_peak_and_tiles)
{
    cost_params a, p;
    cr_assert_eq(cost_params_default(&A100, PREC_BF16, &a, NULL), TS_OK);
    cr_assert_eq(a.fp8_peak_tflops, 0);
    cr_assert_eq(cost_params_default(&H100, PREC_BF16, &p, NULL), TS_OK);
    cr_assert_float_eq(p.fp8_peak_tflops, 1978.9, 1e-9);
    for (int i = 0; i < p.fp8_tiles.ntiles; i++) /* 8-bit tiles: twice the K per step */
        cr_assert_eq(p.fp8_tiles.tile[i].tk, 2 * p.tiles.tile[i].tk);
    cr_assert_float_eq(p.fp8_tiles.kloop_overhead_steps, p.tiles.kloop_overhead_steps, 1e-12);
}

Test(fp8, gemm_time_closed_form)
{
    cost_params p;
    cost_model *cm;
    cr_assert_eq(cost_params_default(&H100, PREC_BF16, &p, NULL), TS_OK);
    cr_assert_eq(cost_model_new(&p, &cm, NULL), TS_OK);
    /* 8192^3: 256x128x128 tiles: 32 x 64 = 2048 tiles in ceil(2048/132) = 16
     * waves of 64 K steps + the overhead; 128x128x128 tiles take 32 waves of
     * half-time steps, the same; the HBM floor is far below */
    double f = p.fp8_tiles.peak_frac, ko = p.fp8_tiles.kloop_overhead_steps;
    double step_ns = 2.0 * 256 * 128 * 128 / (1978.9e3 / 132 * f);
    double want = p.launch_ns + 16 * (64 + ko) * step_ns;
    int64_t got = cost_gemm_fp8_ns(cm, 8192, 8192, 8192, 1);
    cr_assert(fabs((double)got - want) <= 1, "%lld vs %.1f", (long long)got, want);
    /* FP8 is faster than bf16 on the same GEMM, at most by the peaks' ratio
     * (x peak_frac ratio) */
    int64_t bf = cost_gemm_ns(cm, 8192, 8192, 8192, 1);
    cr_assert_lt(got, bf);
    /* the op path: an op marked fp8 is costed so */
    layer_op op;
    memset(&op, 0, sizeof op);
    op.name = "fc1";
    op.kind = LAYER_OP_GEMM;
    op.m = op.n = op.k = 8192;
    op.batch = 1;
    op.fp8 = true;
    cr_assert_eq(cost_op_ns(cm, &op), got);
    op.fp8 = false;
    cr_assert_eq(cost_op_ns(cm, &op), bf);
    /* an efficiency in (0, peak_frac] */
    double e = cost_gemm_fp8_eff(cm, 8192, 8192, 8192, 1);
    cr_assert(e > 0.5 * f && e <= f, "eff %.4f", e);
    cost_model_free(cm);
}

Test(fp8, flash_gemms_have_no_hbm_floor)
{
    cost_params p;
    cost_model *cm;
    cr_assert_eq(cost_params_default(&H100, PREC_BF16, &p, NULL), TS_OK);
    cr_assert_eq(cost_model_new(&p, &cm, NULL), TS_OK);
    layer_op op;
    memset(&op, 0, sizeof op);
    op.kind = LAYER_OP_GEMM;
    op.m = 8192;
    op.n = 4096;
    op.k = 128;
    op.batch = 32;
    op.name = "attn.flash.qk";
    cr_assert_eq(cost_op_ns(cm, &op), cost_gemm_compute_ns(cm, 8192, 4096, 128, 32));
    /* a plain GEMM of that shape writes its 2 GiB output: HBM-bound, slower */
    op.name = "attn.qk";
    cr_assert_gt(cost_op_ns(cm, &op), cost_gemm_compute_ns(cm, 8192, 4096, 128, 32));
    cost_model_free(cm);
}

Test(fp8, weight_copies_and_gather_bytes)
{
    model_config m;
    memset(&m, 0, sizeof m);
    const int64_t L = 1000000, G = 64000, P = L + 4096;         /* layers' params, FSDP-gathered, all */
    cr_assert_eq(fp8_weight_copy_bytes(&m, false, 2, L, G), 0); /* no FP8 */
    cr_assert_eq(fp8_gather_bytes(&m, 2, P, P - L), 2 * P);     /* no FP8: 16-bit */
    m.fp8_format = FP8_FORMAT_HYBRID;
    cr_assert_eq(fp8_weight_copy_bytes(&m, false, 2, L, G), 2 * L); /* FP8 weight + transpose */
    cr_assert_eq(fp8_weight_copy_bytes(&m, true, 2, L, G), 2 * G);  /* FSDP: the gathered layers only */
    m.fp8_recipe = FP8_RECIPE_MXFP8;
    cr_assert_eq(fp8_weight_copy_bytes(&m, false, 2, L, G), 2 * L + L / 16);
    m.fp8_recipe = FP8_RECIPE_DELAYED;
    cr_assert_eq(fp8_gather_bytes(&m, 2, P, P - L), 2 * P); /* FP8 compute alone gathers 16-bit */
    m.fp8_param_gather = true;
    cr_assert_eq(fp8_weight_copy_bytes(&m, false, 2, L, G), 0);       /* the FP8 weight is the parameter */
    cr_assert_eq(fp8_gather_bytes(&m, 2, P, P - L), L + 2 * (P - L)); /* layers at 1 byte */
}

Test(fp8, delayed_amax_reduction_bytes)
{
    model_config m;
    memset(&m, 0, sizeof m);
    cr_expect_eq(fp8_amax_reduce_bytes(&m, 4, false), 0); /* no FP8 */
    m.fp8_format = FP8_FORMAT_HYBRID;
    m.fp8_recipe = FP8_RECIPE_DELAYED;
    /* 4 FP8 GEMMs a layer, fp32 amaxes: 3 per GEMM forward, 2 backward */
    cr_expect_eq(fp8_amax_reduce_bytes(&m, 4, false), 4 * 4 * 3 * 4);
    cr_expect_eq(fp8_amax_reduce_bytes(&m, 4, true), 4 * 4 * 2 * 4);
    cr_expect_eq(fp8_amax_reduce_bytes(&m, 0, false), 0);
    for (int r = FP8_RECIPE_TENSORWISE; r <= FP8_RECIPE_MXFP8; r++) {
        m.fp8_recipe = (config_fp8_recipe)r;
        cr_expect_eq(fp8_amax_reduce_bytes(&m, 4, false), 0);
    }
}
