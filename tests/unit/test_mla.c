/* mla, mtp and group-limited routing: multi-latent attention's parameters,
 * FLOPs and ops against closed forms written out here (DeepSeek-V2 section
 * 2.1 shapes; Megatron-LM's num_floating_point_operations for MLA), its
 * tensor-parallel split, its saved activations; multi-token prediction's
 * FLOPs in a simulated iteration; the DeepEP remote nodes under group-limited
 * routing against an independent Monte Carlo count. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "sim/config/flags.h"
#include "sim/core/plan_moe.h"
#include "sim/core/simulate.h"
#include "sim/model/flops.h"
#include "sim/model/mla.h"
#include "sim/model/moe.h"
#include "sim/model/mtp.h"
#include "tests/unit/flags_run.h"
#include "tests/unit/gpu_specs.h"

static void fini(void)
{
    flags_run_free();
}

/* DeepSeek-V3's attention shape (its config.json: hidden 7168, 128 heads,
 * q_lora 1536, kv_lora 512, qk_nope 128, qk_rope 64, v 128), bias-free
 * RMSNorm, a dense SwiGLU MLP, 4 layers. */
#define DSV3_SHAPE                                                                                                     \
    "--num-layers", "4", "--hidden-size", "7168", "--num-attention-heads", "128", "--ffn-hidden-size", "18432",        \
        "--swiglu", "--disable-bias-linear", "--normalization", "RMSNorm", "--position-embedding-type", "rope",        \
        "--untie-embeddings-and-output-weights", "--seq-length", "4096", "--micro-batch-size", "1", "--bf16", "--gpu", \
        "H100-SXM5-80GB", "--multi-latent-attention", "--kv-lora-rank", "512", "--qk-head-dim", "128",                 \
        "--qk-pos-emb-head-dim", "64", "--v-head-dim", "128"
#define DSV3_4 DSV3_SHAPE, "--global-batch-size", "16"

static layer_shape shape_of(void)
{
    layer_shape L;
    cr_assert_eq(layer_shape_from_config(&C, &L, &E), TS_OK, "%s", E.msg);
    return L;
}

/* Sum of the flops of the ops whose name starts with prefix. */
static double flops_of(const layer_ops *o, const char *prefix)
{
    double f = 0;
    for (int i = 0; i < o->n; i++)
        if (strncmp(o->op[i].name, prefix, strlen(prefix)) == 0)
            f += o->op[i].flops;
    return f;
}

/* Bytes of the saved tensor name kept after the forward (0: absent or re-created). */
static int64_t saved(const layer_saved_list *l, const char *name)
{
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->t[i].name, name) == 0)
            return l->t[i].kept_after_f ? l->t[i].bytes : 0;
    return 0;
}

static const layer_op *find(const layer_ops *o, const char *name)
{
    for (int i = 0; i < o->n; i++)
        if (strcmp(o->op[i].name, name) == 0)
            return &o->op[i];
    return NULL;
}

/* DeepSeek-V3's MLA block: q 7168 x 1536 + 1536 (norm) + 1536 x 128 x 192 =
 * 48 760 320; kv 7168 x 576 + 512 + 512 x 128 x 256 = 20 906 496; output
 * 128 x 128 x 7168 = 117 440 512; 187 107 328 in all. The whole model with
 * it: 671 026 404 352 parameters (published 671B: 0.004% off), 37 552 282 624
 * activated per token (published 37B: 1.5% above, the published figure being
 * rounded down from the same shapes). */
Test(mla, deepseek_v3_params, .fini = fini)
{
    cr_assert_eq(flags_run("--model", "deepseek-v3", "--gpu", "H100-SXM5-80GB", NULL), TS_OK, "%s", E.msg);
    cr_assert_eq(mla_attn_params(&C.model, &C.moe), 48760320LL + 20906496LL + 117440512LL);
    moe_params P;
    moe_param_count(&C.model, &C.moe, &P);
    cr_expect_eq(P.total, 671026404352LL);
    cr_expect_eq(P.active, 37552282624LL);
    cr_expect(fabs((double)P.total / 671e9 - 1) < 0.001);
    cr_expect(fabs((double)P.active / 37e9 - 1) < 0.02);
    /* the preset's tensor-parallel size is 1: the rank holds the whole block */
    cr_expect_eq(mla_attn_rank_params(&C.model, &C.moe, 1), mla_attn_params(&C.model, &C.moe));
}

/* Forward ops of one MLA layer at t = 1: the MLA projections' GEMMs (and
 * the output projection) are T x mla_proj_fwd_flops_per_token, the flash
 * core b x mla_core_fwd_flops_per_seq(causal); the hand-written closed form
 * 2 T (h q_l + q_l a q' + h (kv_l + d_r) + kv_l a (d_qk + d_v) + a d_v h). */
Test(mla, forward_flops_closed_form, .fini = fini)
{
    cr_assert_eq(flags_run(DSV3_4, "--q-lora-rank", "1536", "--gpus", "1", "--use-flash-attn", NULL), TS_OK, "%s",
                 E.msg);
    layer_shape L = shape_of();
    layer_ops f;
    cr_assert_eq(layer_ops_build(&L, LAYER_PASS_F, &f, &E), TS_OK, "%s", E.msg);
    double Tk = 4096, h = 7168, a = 128, ql = 1536, kvl = 512, q = 192;
    double proj = 2 * Tk * (h * ql + ql * a * q + h * 576 + kvl * a * 256 + a * 128 * h);
    cr_assert_float_eq(flops_of(&f, "mla.") + flops_of(&f, "proj"), proj, 1e-12 * proj);
    cr_assert_float_eq(mla_proj_fwd_flops_per_token(&C.model, &C.moe) * Tk, proj, 1e-12 * proj);
    double core = 2 * Tk * 2048 * a * (q + 128); /* causal: s x s/2 keys */
    cr_assert_float_eq(flops_of(&f, "attn.flash"), core, 1e-12 * core);
    cr_assert_float_eq(mla_core_fwd_flops_per_seq(&C.model, &C.moe, true), core, 1e-12 * core);
    cr_assert_float_eq(mla_core_fwd_flops_per_seq(&C.model, &C.moe, false), 2 * core, 1e-12 * core);
    /* the flash kernel's head sizes: d_qk + d_rope for the scores, d_v for the values */
    cr_assert_eq(find(&f, "attn.flash.qk")->k, 192);
    cr_assert_eq(find(&f, "attn.flash.av")->n, 128);
    cr_assert_eq(find(&f, "proj")->k, 128 * 128);
    cr_assert_null(find(&f, "qkv"));
    /* the flash backward: QK^T again, dQ, dK over 192, dP, dV over 128: (3 x 192 + 2 x 128) / 320 = 2.6x */
    layer_ops b;
    cr_assert_eq(layer_ops_build(&L, LAYER_PASS_B, &b, &E), TS_OK, "%s", E.msg);
    cr_assert_float_eq(flops_of(&b, "attn.flash"), 2.6 * core, 1e-9 * core);
}

/* Megatron-LM's num_floating_point_operations for an MLA model (training.py,
 * written out here): per token and layer 3 x 2 x [q_l (h + a q' + 1) +
 * kv_l (h + a (d_qk + d_v) + 1) + h d_r + a d_v h + s a q' / 2 + s a d_v / 2].
 * Its "+ 1" terms count the q and kv norms, element-wise work our
 * convention leaves out: without them it equals our causal count. */
Test(mla, megatron_flop_count, .fini = fini)
{
    cr_assert_eq(flags_run(DSV3_4, "--q-lora-rank", "1536", "--gpus", "1", NULL), TS_OK, "%s", E.msg);
    double s = 4096, h = 7168, a = 128, ql = 1536, kvl = 512, q = 192, dqk = 128, dv = 128, dr = 64, B = 16, l = 4;
    double meg =
        6 * l *
        (ql * (h + a * q + 1) + kvl * (h + a * (dqk + dv) + 1) + h * dr + a * dv * h + s * a * q / 2 + s * a * dv / 2);
    double norms = 6 * l * (ql + kvl);
    /* our attention per token: the causal model count less the dense attention of the same config */
    double dense_attn_causal = (flops_model_per_iter_causal(&C.model, 1) - 3 * l * 2 * s * 3 * h * 18432 -
                                3 * 2 * s * h * (double)C.model.padded_vocab_size) /
                               s;
    double ours = dense_attn_causal + mla_model_flops_delta(&C.model, &C.moe, 1, true) / s;
    cr_assert_float_eq(ours, meg - norms, 1e-9 * meg, "ours %.6e, Megatron's less the norms %.6e", ours, meg - norms);
    (void)B;
}

/* Without query compression (q_lora 0): one h x a q' projection; the
 * parameters and flops lose the down-projection and norm. */
Test(mla, no_query_compression, .fini = fini)
{
    cr_assert_eq(flags_run(DSV3_4, "--gpus", "1", NULL), TS_OK, "%s", E.msg);
    cr_assert_eq(C.moe.mla_q_lora_rank, 0);
    int64_t h = 7168, a = 128;
    cr_assert_eq(mla_attn_params(&C.model, &C.moe), h * a * 192 + 20906496LL + 117440512LL);
    layer_shape L = shape_of();
    layer_ops f, b;
    cr_assert_eq(layer_ops_build(&L, LAYER_PASS_F, &f, &E), TS_OK, "%s", E.msg);
    cr_assert_null(find(&f, "mla.q_down"));
    cr_assert_null(find(&f, "mla.q_norm"));
    const layer_op *qp = find(&f, "mla.q_proj");
    cr_assert_not_null(qp);
    cr_assert_eq(qp->n, a * 192);
    cr_assert_eq(qp->k, h);
    double Tk = 4096;
    cr_assert_float_eq(flops_of(&f, "mla.") + flops_of(&f, "proj"), Tk * mla_proj_fwd_flops_per_token(&C.model, &C.moe),
                       1e-6);
    cr_assert_eq(layer_ops_build(&L, LAYER_PASS_B, &b, &E), TS_OK, "%s", E.msg);
    cr_assert_float_eq(flops_of(&b, "mla."), 2 * flops_of(&f, "mla."), 1e-6);
    layer_saved_list sl;
    cr_assert_eq(layer_saved_build(&L, &sl, &E), TS_OK);
    cr_assert_eq(saved(&sl, "mla.q_norm.in") + saved(&sl, "mla.q_up.in"), 0);
    cr_assert_eq(saved(&sl, "mla.kv_norm.in"), 4096LL * 576 * 2);
}

/* Tensor parallelism as Megatron-core splits MLA: the up-projections and the
 * output projection over t (their flops summed over the t ranks are t = 1's),
 * the down-projections duplicated (every rank runs them on its tokens: all
 * T without sequence parallelism, T / t with it); parameters: whole down
 * parts plus split up parts; with SP the up-projections' inputs are
 * all-gathered (T x width bytes), without it their input gradients
 * all-reduced; B = I + W; backward GEMMs twice the forward's. */
Test(mla, tensor_parallel_split, .fini = fini)
{
    cr_assert_eq(flags_run(DSV3_4, "--q-lora-rank", "1536", "--gpus", "1", NULL), TS_OK, "%s", E.msg);
    layer_shape L1 = shape_of();
    layer_ops f1;
    cr_assert_eq(layer_ops_build(&L1, LAYER_PASS_F, &f1, &E), TS_OK);
    double up1 = flops_of(&f1, "mla.q_up") + flops_of(&f1, "mla.kv_up"),
           down1 = flops_of(&f1, "mla.q_down") + flops_of(&f1, "mla.kv_down");
    int64_t whole = 7168LL * 1536 + 1536 + 7168LL * 576 + 512, all = mla_attn_params(&C.model, &C.moe);
    const int ts[3] = {2, 4, 8};
    for (int k = 0; k < 3; k++) {
        for (int sp = 0; sp < 2; sp++) {
            int t = ts[k];
            layer_shape L = L1;
            L.t = t;
            L.sp = sp;
            layer_ops f, b, i, w;
            cr_assert_eq(layer_ops_build(&L, LAYER_PASS_F, &f, &E), TS_OK, "%s", E.msg);
            double up = flops_of(&f, "mla.q_up") + flops_of(&f, "mla.kv_up");
            double down = flops_of(&f, "mla.q_down") + flops_of(&f, "mla.kv_down");
            cr_expect_float_eq(up * t, up1, 1e-9 * up1, "t %d", t);
            cr_expect_float_eq(down, sp ? down1 / t : down1, 1e-9 * down1, "t %d sp %d", t, sp);
            cr_expect_float_eq(flops_of(&f, "proj") * t, flops_of(&f1, "proj"), 1.0);
            const layer_op *ag = find(&f, "mla.kv_up.ag");
            if (sp) {
                cr_assert_not_null(ag);
                cr_expect_eq(ag->bytes, 4096LL * 576 * 2);
                cr_expect_eq(find(&f, "mla.q_up.ag")->bytes, 4096LL * 1536 * 2);
            } else {
                cr_expect_null(ag);
            }
            cr_assert_eq(layer_ops_build(&L, LAYER_PASS_B, &b, &E), TS_OK);
            cr_assert_eq(layer_ops_build(&L, LAYER_PASS_I, &i, &E), TS_OK);
            cr_assert_eq(layer_ops_build(&L, LAYER_PASS_W, &w, &E), TS_OK);
            cr_expect_float_eq(flops_of(&b, "mla."), 2 * flops_of(&f, "mla."), 1.0, "t %d", t);
            cr_expect_float_eq(layer_ops_flops(&b), layer_ops_flops(&i) + layer_ops_flops(&w), 1.0);
            const layer_op *red = find(&b, sp ? "mla.kv_up.rs" : "mla.kv_up.ar");
            cr_assert_not_null(red, "t %d sp %d", t, sp);
            cr_expect_eq(red->bytes, 4096LL * 576 * 2); /* the latent's and the rotary key's gradients */
            if (sp) /* the weight gradient re-gathers the saved latent, not the rotary key */
                cr_expect_eq(find(&b, "mla.kv_up.ag.in")->bytes, 4096LL * 512 * 2);
            cr_expect_eq(find(&w, "mla.kv_up.ag.in") != NULL, sp, "W re-gathers with SP only");
            cr_expect_null(find(&i, "mla.kv_up.wgrad"));
            /* parameters: the down parts whole on every rank, the rest split */
            C.par.tp = t;
            cr_expect_eq(mla_attn_rank_params(&C.model, &C.moe, t), whole + (all - whole) / t, "t %d", t);
            cr_expect_eq(mla_layer_params_delta(&C.model, &C.moe, t),
                         mla_attn_rank_params(&C.model, &C.moe, t) -
                             (flops_params_stage(&C.model, t, 1, 0, 0) - (3LL * 7168 * 18432 / t + 2 * 7168)));
        }
    }
}

/* Saved activations: MLA keeps the latents (norm inputs and outputs);
 * --recompute-modules mla_up_proj drops q, k and v, which the R pass
 * re-creates with the up-projections and rope (their flops). */
Test(mla, saved_and_up_proj_recompute, .fini = fini)
{
    cr_assert_eq(flags_run(DSV3_4, "--q-lora-rank", "1536", "--gpus", "1", "--use-flash-attn",
                           "--recompute-granularity", "selective", "--recompute-modules", "core_attn", "mla_up_proj",
                           NULL),
                 TS_OK, "%s", E.msg);
    layer_shape L = shape_of(), N = L;
    N.recompute = RECOMPUTE_NONE;
    layer_saved_list ln, lr;
    cr_assert_eq(layer_saved_build(&N, &ln, &E), TS_OK, "%s", E.msg);
    cr_assert_eq(layer_saved_build(&L, &lr, &E), TS_OK, "%s", E.msg);
    int64_t Tk = 4096, at = 128, lse = 4 * at * Tk;
    int64_t qkv = Tk * at * (192 + 192 + 128) * 2;
    cr_expect_eq(layer_saved_kept_bytes(&ln) - layer_saved_kept_bytes(&lr), qkv + lse);
    cr_expect_eq(saved(&lr, "mla.q_norm.in"), Tk * 1536 * 2);
    cr_expect_eq(saved(&lr, "mla.q_up.in"), Tk * 1536 * 2);
    cr_expect_eq(saved(&lr, "mla.kv_norm.in"), Tk * 576 * 2);
    cr_expect_eq(saved(&lr, "mla.kv_up.in"), Tk * 512 * 2);
    cr_expect_eq(saved(&lr, "attn.k"), 0, "k re-created by mla_up_proj"); /* not kept */
    cr_expect_eq(saved(&ln, "attn.k"), Tk * at * 192 * 2);
    layer_ops r, f;
    cr_assert_eq(layer_ops_build(&L, LAYER_PASS_R, &r, &E), TS_OK);
    cr_assert_eq(layer_ops_build(&L, LAYER_PASS_F, &f, &E), TS_OK);
    cr_expect_float_eq(flops_of(&r, "mla."), flops_of(&f, "mla.q_up") + flops_of(&f, "mla.kv_up"), 1.0);
    cr_expect_not_null(find(&r, "mla.rope"));
    /* without MLA the module is refused */
    cr_assert_neq(flags_run("--num-layers", "2", "--hidden-size", "1024", "--num-attention-heads", "16", "--seq-length",
                            "1024", "--micro-batch-size", "1", "--global-batch-size", "8", "--gpus", "1",
                            "--recompute-granularity", "selective", "--recompute-modules", "mla_up_proj", NULL),
                  TS_OK);
    cr_expect(strstr(E.msg, "mla_up_proj with --multi-latent-attention"), "%s", E.msg);
}

/* What the MLA ops do not model is refused naming the flag. */
Test(mla, refusals, .fini = fini)
{
    cr_assert_eq(flags_run(DSV3_4, "--gpus", "1", NULL), TS_OK, "%s", E.msg);
    layer_shape L = shape_of(), X;
    layer_ops o;
    X = L;
    X.g = 8;
    cr_expect_eq(layer_ops_build(&X, LAYER_PASS_F, &o, &E), TS_EINVAL);
    cr_expect(strstr(E.msg, "no grouped-query attention"), "%s", E.msg);
    X = L;
    X.fp8 = FP8_FORMAT_E4M3; /* modelled: the projections are FP8 GEMMs (test_fp8.c) */
    cr_expect_eq(layer_ops_build(&X, LAYER_PASS_F, &o, &E), TS_OK, "%s", E.msg);
    X = L;
    X.mla.kv_lora = 0;
    cr_expect_eq(layer_ops_build(&X, LAYER_PASS_F, &o, &E), TS_EINVAL);
}

/* Simulated iterations with and without --mtp-num-layers D: with unfused
 * attention and no recomputation every op runs its model flops, so the
 * hardware FLOPs grow by exactly D depths' model FLOPs
 * (mtp_model_flops_per_iter: 3 B (2 s 2h h + one layer + the logit layer)
 * per depth), for a dense GPT and for an MLA + MoE model at forced balance
 * (the MTP layer a MoE layer, the last layer's type). */
/* flags_run over an array of n flags. */
static int flags_run_v(const char *const *flags, int n)
{
    const char *argv[64] = {"test"};
    int argc = 1;
    for (int i = 0; i < n && argc < 63; i++)
        argv[argc++] = flags[i];
    config_free(&C);
    flags_release(&S);
    opt_table_free(&T);
    err_clear(&E);
    opt_table_init(&T, "test", NULL);
    cr_assert_eq(flags_register(&S, &T, &C, &E), TS_OK, "%s", E.msg);
    int rc = flags_parse(&S, &T, argc, (char **)argv, &E);
    return rc ? rc : flags_finish(&S, &T, &E);
}

static void mtp_case(const char *const *flags, int n, double *hw, double *model)
{
    cr_assert_eq(flags_run_v(flags, n), TS_OK, "%s", E.msg);
    simulate_opts o = {0};
    simulate_result *r = NULL;
    cr_assert_eq(simulate_run(&C, &o, &r, &E), TS_OK, "%s", E.msg);
    *hw = r->hw_flops;
    *model = r->model_flops;
    simulate_result_free(r);
}

Test(mtp, adds_exactly_its_depths_flops, .fini = fini)
{
    const char *dense[] = {"--num-layers",
                           "4",
                           "--hidden-size",
                           "1024",
                           "--num-attention-heads",
                           "16",
                           "--seq-length",
                           "1024",
                           "--micro-batch-size",
                           "1",
                           "--global-batch-size",
                           "8",
                           "--gpus",
                           "4",
                           "-p",
                           "2",
                           "-t",
                           "2",
                           "--bf16",
                           "--gpu",
                           "H100-SXM5-80GB",
                           "--attention-backend",
                           "unfused",
                           "--mtp-num-layers",
                           "2"};
    int nd = (int)(sizeof dense / sizeof dense[0]);
    double hw0, m0, hw2, m2;
    mtp_case(dense, nd - 2, &hw0, &m0);
    cr_assert_float_eq(hw0, m0, 1e-9 * m0);
    mtp_case(dense, nd, &hw2, &m2);
    double s = 1024, h = 1024, V = (double)C.model.padded_vocab_size, B = 8;
    double depth = 3 * B * (2 * s * 2 * h * h + flops_layer_fwd_per_seq(&C.model) + 2 * s * h * V);
    cr_expect_float_eq(m2 - m0, 2 * depth, 1e-9 * depth);
    cr_expect_float_eq(hw2 - hw0, 2 * depth, 1e-9 * depth, "hardware %.6e, closed form %.6e", hw2 - hw0, 2 * depth);
    cr_expect_float_eq(mtp_model_flops_per_iter(&C.model, &C.moe, 2, 8, false), 2 * depth, 1e-9 * depth);

    const char *moe[] = {DSV3_4,
                         "--q-lora-rank",
                         "1536",
                         "--num-experts",
                         "8",
                         "--moe-router-topk",
                         "2",
                         "--moe-ffn-hidden-size",
                         "2048",
                         "--moe-layer-freq",
                         "([0]*1+[1]*3)",
                         "--moe-router-force-load-balancing",
                         "--moe-token-dispatcher-type",
                         "alltoall",
                         "--expert-model-parallel-size",
                         "8",
                         "--gpus",
                         "8",
                         "--attention-backend",
                         "unfused",
                         "--mtp-num-layers",
                         "1"};
    int nm = (int)(sizeof moe / sizeof moe[0]);
    double hwa, ma, hwb, mb;
    mtp_case(moe, nm - 2, &hwa, &ma);
    mtp_case(moe, nm, &hwb, &mb);
    double d1 = mtp_model_flops_per_iter(&C.model, &C.moe, 1, 16, false);
    cr_expect_float_eq(mb - ma, d1, 1e-9 * d1);
    cr_expect_float_eq(hwb - hwa, d1, 1e-6 * d1, "hardware %.6e, closed form %.6e", hwb - hwa, d1);
    /* the depth's layer is a MoE layer (the last layer's type): more than a dense MLA layer's forward */
    cr_expect_gt(d1, 3 * 16 * (2 * 4096.0 * 2 * 7168 * 7168 + 2 * 4096.0 * 7168 * C.model.padded_vocab_size));
}

/* Group-limited routing's remote nodes (moe_deepep_remote_nodes_grouped)
 * against a Monte Carlo count of the routing it assumes (M of G groups
 * uniformly, k experts uniformly without replacement among theirs),
 * written independently here; never above the ungrouped count; M = G gives
 * the ungrouped count; DeepSeek-V3's 256 experts, top-8, 8 nodes, 4 of 8
 * groups: 7 x 4/8 x (1 - C(96, 8) / C(128, 8)) = 3.175 against 4.633. */
static uint64_t rng(uint64_t *x)
{
    *x = *x * 6364136223846793005ULL + 1442695040888963407ULL;
    return *x >> 33;
}

static double monte_carlo(int ne, int k, int nodes, int G, int M, int trials)
{
    uint64_t x = 12345;
    double sum = 0;
    int groups[64], experts[256];
    for (int n = 0; n < trials; n++) {
        for (int i = 0; i < G; i++)
            groups[i] = i;
        for (int i = 0; i < M; i++) { /* partial Fisher-Yates: M groups */
            int j = i + (int)(rng(&x) % (uint64_t)(G - i)), t = groups[i];
            groups[i] = groups[j];
            groups[j] = t;
        }
        int P = 0, per = ne / G;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < per; j++)
                experts[P++] = groups[i] * per + j;
        bool hit[64] = {false};
        for (int i = 0; i < k; i++) {
            int j = i + (int)(rng(&x) % (uint64_t)(P - i)), t = experts[i];
            experts[i] = experts[j];
            experts[j] = t;
            hit[experts[i] / (ne / nodes)] = true;
        }
        int src = (int)(rng(&x) % (uint64_t)nodes), remote = 0;
        for (int i = 0; i < nodes; i++)
            remote += hit[i] && i != src;
        sum += remote;
    }
    return sum / trials;
}

Test(group_routing, remote_nodes)
{
    cr_assert_float_eq(moe_deepep_remote_nodes_grouped(256, 8, 8, 8, 4), 3.175384558872488, 1e-9);
    cr_assert_float_eq(moe_deepep_remote_nodes_grouped(256, 8, 8, 0, 0), moe_deepep_remote_nodes(256, 8, 8), 1e-12);
    cr_assert_float_eq(moe_deepep_remote_nodes_grouped(256, 8, 8, 8, 8), moe_deepep_remote_nodes(256, 8, 8), 1e-12);
    /* groups a multiple of the nodes (2 per node), and nodes a multiple of the groups */
    const int cases[][5] = {{64, 6, 4, 8, 3}, {64, 4, 8, 4, 2}, {256, 8, 8, 8, 4}, {32, 3, 2, 8, 2}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int *v = cases[c];
        double f = moe_deepep_remote_nodes_grouped(v[0], v[1], v[2], v[3], v[4]);
        double mc = monte_carlo(v[0], v[1], v[2], v[3], v[4], 200000);
        cr_expect(fabs(f - mc) < 0.01 * f + 0.005, "case %zu: closed form %.4f, Monte Carlo %.4f", c, f, mc);
    }
    /* never more remote nodes than without group limits */
    const int Es[] = {32, 64, 128, 256}, nodes[] = {2, 4, 8}, Gs[] = {2, 4, 8, 16, 32};
    for (size_t a = 0; a < 4; a++)
        for (size_t b = 0; b < 3; b++)
            for (size_t g = 0; g < 5; g++)
                for (int M = 1; M <= Gs[g]; M++)
                    for (int k = 1; k <= 8; k++) {
                        if (k > M * Es[a] / Gs[g])
                            continue;
                        double f = moe_deepep_remote_nodes_grouped(Es[a], k, nodes[b], Gs[g], M);
                        double u = moe_deepep_remote_nodes(Es[a], k, nodes[b]);
                        cr_assert_geq(f, 0);
                        cr_assert_leq(f, u + 1e-12, "E %d k %d nodes %d G %d M %d: %.6f > %.6f", Es[a], k, nodes[b],
                                      Gs[g], M, f, u);
                        int span = nodes[b] > Gs[g] ? M * (nodes[b] / Gs[g]) : M; /* nodes M groups cover */
                        cr_assert_leq(f, span < nodes[b] ? (double)span : nodes[b] - 1.0, "at most their nodes");
                    }
    cr_expect_eq(moe_deepep_remote_nodes_grouped(48, 4, 4, 6, 2), -1); /* 6 groups on 4 nodes: not modelled */
}

/* In the plan: DeepEP's dispatch with group limits is no slower than
 * without; the alltoall dispatcher's is unchanged. */
Test(group_routing, plan_dispatch_time, .fini = fini)
{
    static const gpu_spec H100 = {GPU_SPEC_H100};
    commcost_params cc;
    cr_assert_eq(commcost_params_default(&H100, &cc, &E), TS_OK, "%s", E.msg);
    int64_t ns[2][2];
    for (int deepep = 0; deepep < 2; deepep++)
        for (int grouped = 0; grouped < 2; grouped++) {
            const char *f[64] = {DSV3_SHAPE,
                                 "--gpus",
                                 "64",
                                 "--num-experts",
                                 "64",
                                 "--moe-router-topk",
                                 "8",
                                 "--moe-ffn-hidden-size",
                                 "2048",
                                 "--expert-model-parallel-size",
                                 "64",
                                 "--moe-router-force-load-balancing",
                                 "--moe-token-dispatcher-type",
                                 deepep ? "flex" : "alltoall",
                                 "--global-batch-size",
                                 "64"};
            int n = 0;
            while (f[n])
                n++;
            if (deepep)
                f[n++] = "--moe-enable-deepep";
            if (grouped) {
                f[n++] = "--moe-router-num-groups";
                f[n++] = "8";
                f[n++] = "--moe-router-group-topk";
                f[n++] = "2";
            }
            cr_assert_eq(flags_run_v(f, n), TS_OK, "%s", E.msg);
            layer_shape L = shape_of();
            plan_moe mo;
            cr_assert_eq(plan_moe_build(&C, &L, 8, &cc, &mo, &E), TS_OK, "%s", E.msg);
            ns[deepep][grouped] = mo.a2a_ns;
            if (deepep)
                cr_expect_float_eq(mo.remote_nodes,
                                   grouped ? moe_deepep_remote_nodes_grouped(64, 8, 8, 8, 2)
                                           : moe_deepep_remote_nodes(64, 8, 8),
                                   1e-12);
        }
    cr_expect_eq(ns[0][0], ns[0][1]);
    cr_expect_lt(ns[1][1], ns[1][0], "DeepEP: %lld grouped, %lld not", (long long)ns[1][1], (long long)ns[1][0]);
}
