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
#include "sim/model/moe.h"
#include "tests/unit/gpu_specs.h"
#include "tests/unit/layer_fixture.h"

static const gpu_spec A100 = {GPU_SPEC_A100};
static const gpu_spec H100 = {GPU_SPEC_H100, .fp8_tflops = 1978.9, .sms = 132};

/* Llama-3-8B-like layer (GQA, SwiGLU: layer_fixture.h's), s 8192, V
 * 128256, b 1, t 1, flash, no dropout. */
static layer_shape llama(config_fp8_format f, config_fp8_recipe r)
{
    layer_shape L = layer_fixture_mixtral();
    L.s = 8192;
    L.V = 128256;
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

/* ------------------------------------------------ MoE and MLA under FP8 */

/* Mixtral-8x7B-like MoE block (8 experts, top-2, ffn 14336, EP 8: one
 * expert a rank), s 4096 b 1, t 1, with or without shared experts. */
static moe_config mixtral_experts(int shared)
{
    moe_config e;
    memset(&e, 0, sizeof e);
    e.num_experts = 8;
    e.topk = 2;
    e.ffn_hidden_size = 14336;
    e.shared_ffn_hidden_size = shared;
    e.ep = 8;
    e.etp = 1;
    e.dispatcher = MOE_DISPATCH_ALLTOALL;
    return e;
}

static void moe_pass(config_fp8_format f, config_fp8_recipe r, const moe_config *e, layer_pass pass, layer_ops *o)
{
    layer_shape L = llama(f, r);
    L.s = 4096;
    o->n = 0;
    cr_assert_eq(moe_block_ops(&L, e, 1.0, pass, o, NULL), TS_OK);
}

static int64_t compute_ns(const cost_model *cm, const layer_ops *o)
{
    int64_t ns = 0;
    for (int i = 0; i < o->n; i++)
        if (o->op[i].kind != LAYER_OP_COMM)
            ns += cost_op_ns(cm, &o->op[i]);
    return ns;
}

/* The expert GEMMs (grouped) and the shared experts' are FP8, the router
 * is not; each expert GEMM's cast covers every expert's input: m x k x
 * batch elements at the recipe's bytes. */
Test(fp8, moe_expert_gemms_and_casts)
{
    moe_config e = mixtral_experts(2048);
    for (int r = FP8_RECIPE_DELAYED; r <= FP8_RECIPE_MXFP8; r++) {
        layer_ops f, b;
        moe_pass(FP8_FORMAT_HYBRID, (config_fp8_recipe)r, &e, LAYER_PASS_F, &f);
        moe_pass(FP8_FORMAT_HYBRID, (config_fp8_recipe)r, &e, LAYER_PASS_B, &b);
        const layer_op *fc1 = find(&f, "moe.fc1"), *fc2 = find(&f, "moe.fc2");
        cr_assert(fc1 && fc1->fp8 && fc2 && fc2->fp8);
        cr_assert(!find(&f, "moe.router")->fp8, "the router stays 16-bit");
        cr_assert(!find(&b, "moe.router.dgrad")->fp8 && !find(&b, "moe.router.wgrad")->fp8);
        cr_assert(find(&f, "moe.shared.fc1")->fp8 && find(&f, "moe.shared.fc2")->fp8);
        /* one expert a rank: EP x T x k / E = 8 x 4096 x 2 / 8 = 8192 rows */
        cr_assert_eq(fc1->m * fc1->batch, 8192);
        cr_assert_eq(find(&f, "moe.fc1.fp8.cast")->bytes, layer_fp8_cast_bytes((config_fp8_recipe)r, 8192LL * 4096));
        cr_assert_eq(find(&f, "moe.fc2.fp8.cast")->bytes, layer_fp8_cast_bytes((config_fp8_recipe)r, 8192LL * 14336));
        cr_assert_eq(find(&b, "moe.fc2.dgrad.fp8.cast")->bytes,
                     layer_fp8_cast_bytes((config_fp8_recipe)r, 8192LL * 4096));
        cr_assert_eq(find(&b, "moe.fc1.dgrad.fp8.cast")->bytes,
                     layer_fp8_cast_bytes((config_fp8_recipe)r, 8192LL * 2 * 14336));
        cr_assert(find(&b, "moe.fc1.wgrad")->fp8 && find(&b, "moe.fc2.wgrad")->fp8);
        cr_assert_null(find(&b, "moe.fc1.wgrad.fp8.cast"));
        /* without FP8: nothing marked, no casts */
        layer_ops n;
        moe_pass(FP8_FORMAT_NONE, (config_fp8_recipe)r, &e, LAYER_PASS_F, &n);
        for (int i = 0; i < n.n; i++) {
            cr_assert(!n.op[i].fp8, "%s", n.op[i].name);
            cr_assert_null(strstr(n.op[i].name, ".fp8."), "%s", n.op[i].name);
        }
        cr_assert_eq(f.n, n.n + 4, "4 casts: routed fc1, fc2, shared fc1, fc2");
    }
}

/* FP8 pads each expert's rows to 16 (32 for MXFP8): 8 x 100 x 2 / 8 = 200
 * rows become 208 (224); bf16 runs 200. */
Test(fp8, moe_expert_rows_padded)
{
    moe_config e = mixtral_experts(0);
    layer_shape L = llama(FP8_FORMAT_HYBRID, FP8_RECIPE_DELAYED);
    L.s = 100;
    const int64_t want[2][2] = {{208, 200}, {224, 200}};
    for (int x = 0; x < 2; x++)
        for (int f8 = 0; f8 < 2; f8++) {
            L.fp8 = f8 == 0 ? FP8_FORMAT_HYBRID : FP8_FORMAT_NONE;
            L.fp8_recipe = x == 0 ? FP8_RECIPE_DELAYED : FP8_RECIPE_MXFP8;
            layer_ops o;
            o.n = 0;
            cr_assert_eq(moe_block_ops(&L, &e, 1.0, LAYER_PASS_F, &o, NULL), TS_OK);
            cr_assert_eq(find(&o, "moe.fc1")->m, want[x][f8], "recipe %d fp8 %d: %lld", x, !f8,
                         (long long)find(&o, "moe.fc1")->m);
        }
}

/* Large expert GEMMs: FP8 at most the bf16 time and at least the FP8
 * peak's floor (2 m n k / peak); with the casts the block's compute is
 * never slower than bf16 for every recipe, forward and backward. */
Test(fp8, moe_fp8_not_slower_for_large_experts)
{
    cost_params p;
    cost_model *cm;
    cr_assert_eq(cost_params_default(&H100, PREC_BF16, &p, NULL), TS_OK);
    cr_assert_eq(cost_model_new(&p, &cm, NULL), TS_OK);
    int64_t m = 8192, n = 2 * 14336, k = 4096, batch = 2;
    int64_t f8 = cost_gemm_fp8_ns(cm, m, n, k, batch), bf = cost_gemm_ns(cm, m, n, k, batch);
    double floor_ns = 2.0 * m * n * k * batch / (1978.9e3);
    cr_assert_lt(f8, bf, "fp8 %lld bf16 %lld", (long long)f8, (long long)bf);
    cr_assert_geq((double)f8, floor_ns);
    cr_assert_lt((double)f8, 0.7 * (double)bf, "the FP8 peak is twice bf16's");
    moe_config e = mixtral_experts(0);
    for (int r = FP8_RECIPE_DELAYED; r <= FP8_RECIPE_MXFP8; r++)
        for (int ps = LAYER_PASS_F; ps <= LAYER_PASS_B; ps++) {
            layer_ops a, b;
            moe_pass(FP8_FORMAT_HYBRID, (config_fp8_recipe)r, &e, (layer_pass)ps, &a);
            moe_pass(FP8_FORMAT_NONE, (config_fp8_recipe)r, &e, (layer_pass)ps, &b);
            cr_assert_lt(compute_ns(cm, &a), compute_ns(cm, &b), "recipe %d pass %d", r, ps);
        }
    cost_model_free(cm);
}

/* The dispatcher's traffic is the same with FP8: Megatron-core dispatches
 * in bf16 by default (--moe-dispatch-fwd-dtype bf16; mxfp8:
 * test_fp8_moe.c). */
Test(fp8, moe_dispatch_bytes_unchanged)
{
    moe_config e = mixtral_experts(0);
    layer_ops a, b;
    moe_pass(FP8_FORMAT_E4M3, FP8_RECIPE_BLOCKWISE, &e, LAYER_PASS_F, &a);
    moe_pass(FP8_FORMAT_NONE, FP8_RECIPE_BLOCKWISE, &e, LAYER_PASS_F, &b);
    int seen = 0;
    for (int i = 0; i < b.n; i++)
        if (b.op[i].kind == LAYER_OP_COMM && b.op[i].a2a) {
            const layer_op *o = find(&a, b.op[i].name);
            cr_assert(o, "%s", b.op[i].name);
            cr_assert_eq(o->bytes, b.op[i].bytes, "%s", b.op[i].name);
            seen++;
        }
    cr_assert_gt(seen, 0);
}

/* MLA's down and up projections are FP8 GEMMs with their casts; the
 * attention core is not. */
Test(fp8, mla_projections_fp8_core_not)
{
    layer_shape L = llama(FP8_FORMAT_E4M3, FP8_RECIPE_BLOCKWISE);
    L.s = 4096;
    L.g = L.a;
    L.mla = (layer_mla){.on = true, .q_lora = 1536, .kv_lora = 512, .d_qk = 128, .d_rope = 64, .d_v = 128};
    layer_ops f, b;
    cr_assert_eq(layer_ops_build(&L, LAYER_PASS_F, &f, NULL), TS_OK);
    cr_assert_eq(layer_ops_build(&L, LAYER_PASS_B, &b, NULL), TS_OK);
    const char *proj[] = {"mla.q_down", "mla.kv_down", "mla.q_up", "mla.kv_up"};
    int64_t T = 4096;
    for (int i = 0; i < 4; i++) {
        const layer_op *g = find(&f, proj[i]);
        cr_assert(g && g->fp8, "%s", proj[i]);
        char name[64];
        snprintf(name, sizeof name, "%s.fp8.cast", proj[i]);
        const layer_op *c = find(&f, name);
        cr_assert(c, "%s", name);
        cr_assert_eq(c->bytes, layer_fp8_cast_bytes(FP8_RECIPE_BLOCKWISE, g->m * g->k));
        snprintf(name, sizeof name, "%s.dgrad", proj[i]);
        cr_assert(find(&b, name)->fp8, "%s", name);
        snprintf(name, sizeof name, "%s.wgrad", proj[i]);
        cr_assert(find(&b, name)->fp8, "%s", name);
    }
    cr_assert_eq(find(&f, "mla.kv_down")->m, T);
    for (int i = 0; i < f.n; i++)
        if (f.op[i].kind == LAYER_OP_GEMM && !strncmp(f.op[i].name, "attn.", 5))
            cr_assert(!f.op[i].fp8, "%s", f.op[i].name);
}
