/* Tests for Megatron-LM's kernel fusions as ops (layer.h LAYER_UNFUSED_*,
 * LAYER_FUSED_CE): each unfused kernel's bytes against its closed form, the
 * saved SiLU output of unfused SwiGLU, which flags take effect where
 * (layer_fusion_of), and the metamorphic rule: turning a fusion off never
 * makes a pass faster (or moves fewer bytes). */
#include <criterion/criterion.h>
#include <string.h>

#include "sim/model/cost.h"
#include "sim/model/layer.h"
#include "tests/unit/gpu_specs.h"

static const gpu_spec A100 = {GPU_SPEC_A100};

/* A GPT layer of h = 4096, 32 heads, s = 2048, b = 2, t, sp, with biases. */
static layer_shape shape(int t, bool sp, bool swiglu, config_attn_backend attn)
{
    layer_shape L;
    memset(&L, 0, sizeof L);
    L.h = 4096;
    L.a = L.g = 32;
    L.ffn = swiglu ? 11008 : 4 * 4096;
    L.swiglu = swiglu;
    L.s = 2048;
    L.b = 2;
    L.V = 51200;
    L.t = t;
    L.sp = sp;
    L.dtype_bytes = 2;
    L.attn = attn;
    L.bias = true;
    L.main_grad_bytes = 4;
    return L;
}

static layer_ops build(const layer_shape *L, layer_pass p)
{
    layer_ops o;
    cr_assert_eq(layer_ops_build(L, p, &o, NULL), TS_OK);
    return o;
}

/* Bytes of the op named name in o; -1 when absent. */
static int64_t op_bytes(const layer_ops *o, const char *name)
{
    for (int i = 0; i < o->n; i++)
        if (!strcmp(o->op[i].name, name))
            return o->op[i].bytes;
    return -1;
}

static int64_t mem_bytes(const layer_ops *o)
{
    int64_t s = 0;
    for (int i = 0; i < o->n; i++)
        if (o->op[i].kind == LAYER_OP_MEM)
            s += o->op[i].bytes;
    return s;
}

Test(fusion, bias_gelu_closed_forms)
{
    layer_shape L = shape(4, false, false, ATTN_BACKEND_FLASH);
    int64_t F = L.s * L.b * L.ffn / L.t;
    layer_ops d = build(&L, LAYER_PASS_F);
    cr_expect_eq(op_bytes(&d, "gelu"), 2 * F * 2); /* fused: read x, write z */
    L.fusion = LAYER_UNFUSED_BIAS_ACT;
    layer_ops u = build(&L, LAYER_PASS_F);
    cr_expect_eq(op_bytes(&u, "fc1.bias_add"), 2 * F * 2); /* read x, write y */
    cr_expect_eq(op_bytes(&u, "gelu"), 2 * F * 2);         /* read y, write z */
    cr_expect_eq(mem_bytes(&u) - mem_bytes(&d), 4 * F);
    /* the backward is GeLU's either way (the bias add passes its gradient through) */
    layer_ops bd = build(&L, LAYER_PASS_B);
    cr_expect_eq(op_bytes(&bd, "gelu.bwd"), 3 * F * 2);
    L.bias = false; /* no biases: no bias-add kernel */
    u = build(&L, LAYER_PASS_F);
    cr_expect_eq(op_bytes(&u, "fc1.bias_add"), -1);
}

Test(fusion, bias_swiglu_closed_forms_and_saved_silu)
{
    layer_shape L = shape(2, true, true, ATTN_BACKEND_FLASH);
    int64_t F = L.s * L.b * L.ffn / L.t, dt = 2;
    layer_saved_list s0, s1;
    cr_assert_eq(layer_saved_build(&L, &s0, NULL), TS_OK);
    layer_ops f0 = build(&L, LAYER_PASS_F), b0 = build(&L, LAYER_PASS_B);
    cr_expect_eq(op_bytes(&f0, "swiglu"), 3 * F * dt);
    cr_expect_eq(op_bytes(&b0, "swiglu.bwd"), 5 * F * dt);
    L.fusion = LAYER_UNFUSED_BIAS_ACT;
    layer_ops f1 = build(&L, LAYER_PASS_F), b1 = build(&L, LAYER_PASS_B);
    cr_expect_eq(op_bytes(&f1, "fc1.bias_add"), 2 * 2 * F * dt); /* gate and up halves */
    cr_expect_eq(op_bytes(&f1, "swiglu.silu"), 2 * F * dt);
    cr_expect_eq(op_bytes(&f1, "swiglu.mul"), 3 * F * dt);
    cr_expect_eq(op_bytes(&b1, "swiglu.mul.bwd"), 6 * F * dt);
    cr_expect_eq(op_bytes(&b1, "swiglu.silu.bwd"), 3 * F * dt);
    cr_expect_eq(op_bytes(&b1, "swiglu.chunk.bwd"), 4 * F * dt);
    cr_expect_eq(op_bytes(&b1, "swiglu.bwd"), -1);
    cr_expect_eq(mem_bytes(&b1) - mem_bytes(&b0), (13 - 5) * F * dt);
    /* the multiply saves the SiLU output: F elements more, re-created by mlp recompute */
    cr_assert_eq(layer_saved_build(&L, &s1, NULL), TS_OK);
    cr_expect_eq(layer_saved_kept_bytes(&s1) - layer_saved_kept_bytes(&s0), F * dt);
    L.recompute = RECOMPUTE_SELECTIVE;
    L.rc_modules = CONFIG_RC_MLP;
    cr_assert_eq(layer_saved_build(&L, &s1, NULL), TS_OK);
    L.fusion = 0;
    cr_assert_eq(layer_saved_build(&L, &s0, NULL), TS_OK);
    cr_expect_eq(layer_saved_kept_bytes(&s1), layer_saved_kept_bytes(&s0));
}

Test(fusion, bias_dropout_add_closed_forms)
{
    layer_shape L = shape(8, true, false, ATTN_BACKEND_FLASH);
    int64_t E = L.s * L.b * L.h / L.t, dt = 2; /* SP: the sequence shard */
    layer_ops d = build(&L, LAYER_PASS_F), bd = build(&L, LAYER_PASS_B);
    cr_expect_eq(op_bytes(&d, "attn.dropadd"), E * (3 * dt + 1));
    L.fusion = LAYER_UNFUSED_BIAS_DROPOUT;
    layer_ops u = build(&L, LAYER_PASS_F), bu = build(&L, LAYER_PASS_B);
    const char *blk[] = {"attn", "mlp"};
    for (int i = 0; i < 2; i++) {
        char n[64];
        snprintf(n, sizeof n, "%s.dropadd.bias", blk[i]);
        cr_expect_eq(op_bytes(&u, n), 2 * E * dt);
        snprintf(n, sizeof n, "%s.dropadd.dropout", blk[i]);
        cr_expect_eq(op_bytes(&u, n), E * (2 * dt + 1));
        snprintf(n, sizeof n, "%s.dropadd.add", blk[i]);
        cr_expect_eq(op_bytes(&u, n), 3 * E * dt);
    }
    cr_expect_eq(mem_bytes(&u) - mem_bytes(&d), 2 * 4 * E * dt);
    cr_expect_eq(mem_bytes(&bu), mem_bytes(&bd)); /* the dropout backward is the only kernel either way */
    L.bias = false;
    L.no_hidden_dropout = true; /* no bias, no dropout: the residual add alone, as fused */
    u = build(&L, LAYER_PASS_F);
    cr_expect_eq(op_bytes(&u, "attn.dropadd.bias"), -1);
    cr_expect_eq(op_bytes(&u, "attn.dropadd.dropout"), -1);
    cr_expect_eq(op_bytes(&u, "attn.dropadd.add"), 3 * E * dt);
}

Test(fusion, masked_softmax_closed_forms)
{
    layer_shape L = shape(4, false, false, ATTN_BACKEND_UNFUSED);
    int64_t P = L.b * (L.a / L.t) * L.s * L.s, dt = 2;
    L.fusion = LAYER_UNFUSED_SOFTMAX;
    layer_ops f = build(&L, LAYER_PASS_F), b = build(&L, LAYER_PASS_B);
    cr_expect_eq(op_bytes(&f, "attn.softmax.mask"), 2 * P * dt);
    cr_expect_eq(op_bytes(&f, "attn.softmax"), 2 * P * dt);
    cr_expect_eq(op_bytes(&b, "attn.softmax.mask.bwd"), 2 * P * dt);
    cr_expect_eq(op_bytes(&b, "attn.softmax.bwd"), 3 * P * dt);
    /* selective recomputation of the attention core re-runs the mask kernel too */
    L.recompute = RECOMPUTE_SELECTIVE;
    layer_ops r = build(&L, LAYER_PASS_R);
    cr_expect_eq(op_bytes(&r, "attn.softmax.mask"), 2 * P * dt);
}

/* The fused causal softmax (Megatron-LM's scaled_upper_triang_masked_softmax):
 * row i of each head reads its i + 1 unmasked scores and writes the whole row;
 * its backward reads the gradient and the output on the same triangle and
 * writes the whole row. Per head s(s + 1)/2 elements read per input. */
Test(fusion, fused_causal_softmax_reads_the_lower_triangle)
{
    layer_shape L = shape(4, false, false, ATTN_BACKEND_UNFUSED);
    int64_t bh = L.b * (L.a / L.t), P = bh * L.s * L.s, tri = bh * L.s * (L.s + 1) / 2, dt = 2;
    cr_assert_eq(layer_causal_tri(L.s), L.s * (L.s + 1) / 2);
    cr_assert_eq(layer_causal_tri(1), 1);
    cr_assert_eq(layer_causal_tri(4), 10); /* 1 + 2 + 3 + 4 */
    layer_ops f = build(&L, LAYER_PASS_F), b = build(&L, LAYER_PASS_B);
    cr_expect_eq(op_bytes(&f, "attn.softmax"), (tri + P) * dt);
    cr_expect_eq(op_bytes(&b, "attn.softmax.bwd"), (2 * tri + P) * dt);
    cr_expect_eq(op_bytes(&f, "attn.softmax.mask"), -1);
    /* the fused kernel moves fewer bytes than PyTorch's softmax on the full rows */
    cr_expect_lt(op_bytes(&f, "attn.softmax"), 2 * P * dt);
    cr_expect_lt(op_bytes(&b, "attn.softmax.bwd"), 3 * P * dt);
    /* selective recomputation re-runs the same kernel */
    L.recompute = RECOMPUTE_SELECTIVE;
    layer_ops r = build(&L, LAYER_PASS_R);
    cr_expect_eq(op_bytes(&r, "attn.softmax"), (tri + P) * dt);
}

Test(fusion, grad_accum_closed_forms)
{
    layer_shape L = shape(2, false, true, ATTN_BACKEND_FLASH);
    int64_t h = L.h, f = L.ffn / L.t, qkv = 3 * h / L.t, dt = 2, acc = dt + 2 * 4;
    L.fusion = LAYER_UNFUSED_GRAD_ACCUM;
    layer_ops b = build(&L, LAYER_PASS_B), w = build(&L, LAYER_PASS_W), i = build(&L, LAYER_PASS_I);
    const layer_ops *with_wgrad[] = {&b, &w};
    for (int k = 0; k < 2; k++) {
        cr_expect_eq(op_bytes(with_wgrad[k], "qkv.wgrad.accum"), qkv * h * acc);
        cr_expect_eq(op_bytes(with_wgrad[k], "proj.wgrad.accum"), h / L.t * h * acc);
        cr_expect_eq(op_bytes(with_wgrad[k], "fc1.wgrad.accum"), 2 * f * h * acc);
        cr_expect_eq(op_bytes(with_wgrad[k], "fc2.wgrad.accum"), f * h * acc);
    }
    cr_expect_eq(op_bytes(&i, "qkv.wgrad.accum"), -1); /* no weight gradient in I */
    layer_ops o;
    cr_assert_eq(layer_output_ops(&L, LAYER_PASS_B, &o, NULL), TS_OK);
    cr_expect_eq(op_bytes(&o, "logit.wgrad.accum"), L.V / L.t * h * acc);
    L.main_grad_bytes = 2; /* fp16: the main gradient in 2 bytes */
    b = build(&L, LAYER_PASS_B);
    cr_expect_eq(op_bytes(&b, "proj.wgrad.accum"), h / L.t * h * (dt + 4));
}

Test(fusion, rope_closed_forms)
{
    layer_shape L = shape(4, false, true, ATTN_BACKEND_FLASH);
    L.g = 8; /* GQA: k has g heads */
    int64_t qk = L.s * L.b * (L.a + L.g) / L.t * (L.h / L.a), dt = 2;
    L.fusion = LAYER_UNFUSED_ROPE;
    layer_ops f = build(&L, LAYER_PASS_F), b = build(&L, LAYER_PASS_B);
    cr_expect_eq(op_bytes(&f, "rope.unfused"), 12 * qk * dt);
    cr_expect_eq(op_bytes(&b, "rope.unfused.bwd"), 10 * qk * dt);
}

Test(fusion, cross_entropy_fusion_closed_forms)
{
    layer_shape L = shape(8, false, false, ATTN_BACKEND_FLASH);
    int64_t T = L.s * L.b, logits = T * L.V / L.t, dt = 2;
    layer_ops d, u;
    cr_assert_eq(layer_output_ops(&L, LAYER_PASS_F, &d, NULL), TS_OK);
    L.fusion = LAYER_FUSED_CE;
    cr_assert_eq(layer_output_ops(&L, LAYER_PASS_F, &u, NULL), TS_OK);
    cr_expect_eq(op_bytes(&d, "ce"), logits * (dt + 16));
    cr_expect_eq(op_bytes(&u, "ce"), logits * (dt + 12));
    cr_expect_eq(op_bytes(&u, "ce.target_sum.ar"), 2 * T * 4);
    cr_expect_eq(op_bytes(&u, "ce.sum.ar"), -1);
    cr_expect_eq(layer_ops_comm_bytes(&u, COMM_ALL_REDUCE), layer_ops_comm_bytes(&d, COMM_ALL_REDUCE));
}

/* Metamorphic: every fusion turned off (alone and all together), in every
 * pass of the layer and the output layer, moves at least the default's bytes
 * and takes at least its time on the A100 model; the fused cross-entropy
 * (the opt-in fusion) never takes longer than the default. */
Test(fusion, unfusing_never_faster)
{
    cost_params p;
    commcost_params cp;
    cost_model *cm;
    cr_assert_eq(cost_params_default(&A100, PREC_BF16, &p, NULL), TS_OK);
    cr_assert_eq(commcost_params_default(&A100, &cp, NULL), TS_OK);
    cr_assert_eq(cost_model_new(&p, &cm, NULL), TS_OK);
    const unsigned bits[] = {LAYER_UNFUSED_BIAS_ACT,
                             LAYER_UNFUSED_BIAS_DROPOUT,
                             LAYER_UNFUSED_SOFTMAX,
                             LAYER_UNFUSED_GRAD_ACCUM,
                             LAYER_UNFUSED_ROPE,
                             LAYER_UNFUSED_BIAS_ACT | LAYER_UNFUSED_BIAS_DROPOUT | LAYER_UNFUSED_SOFTMAX |
                                 LAYER_UNFUSED_GRAD_ACCUM | LAYER_UNFUSED_ROPE};
    const config_recompute rcs[] = {RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL};
    for (int t = 1; t <= 8; t *= 8)
        for (int sp = 0; sp < (t > 1 ? 2 : 1); sp++)
            for (int sw = 0; sw < 2; sw++)
                for (int at = 0; at < 2; at++)
                    for (size_t r = 0; r < 3; r++)
                        for (size_t k = 0; k < sizeof bits / sizeof bits[0]; k++) {
                            layer_shape L0 = shape(t, sp, sw, at ? ATTN_BACKEND_FLASH : ATTN_BACKEND_UNFUSED);
                            L0.recompute = rcs[r];
                            layer_shape L1 = L0;
                            L1.fusion = bits[k];
                            commcost_group g = {t, t};
                            for (int pass = 0; pass < LAYER_PASS_COUNT; pass++) {
                                layer_ops o0 = build(&L0, (layer_pass)pass), o1 = build(&L1, (layer_pass)pass);
                                cr_expect_geq(mem_bytes(&o1), mem_bytes(&o0));
                                cr_expect_geq(cost_ops_run_ns(cm, &cp, &g, &o1, NULL),
                                              cost_ops_run_ns(cm, &cp, &g, &o0, NULL),
                                              "t %d sp %d swiglu %d flash %d "
                                              "recompute %zu fusion 0x%x pass %s",
                                              t, sp, sw, at, r, bits[k], layer_pass_name((layer_pass)pass));
                                layer_ops q0, q1;
                                cr_assert_eq(layer_output_ops(&L0, (layer_pass)pass, &q0, NULL), TS_OK);
                                cr_assert_eq(layer_output_ops(&L1, (layer_pass)pass, &q1, NULL), TS_OK);
                                cr_expect_geq(cost_ops_run_ns(cm, &cp, &g, &q1, NULL),
                                              cost_ops_run_ns(cm, &cp, &g, &q0, NULL));
                                L1.fusion = LAYER_FUSED_CE;
                                cr_assert_eq(layer_output_ops(&L1, (layer_pass)pass, &q1, NULL), TS_OK);
                                cr_expect_leq(cost_ops_run_ns(cm, &cp, &g, &q1, NULL),
                                              cost_ops_run_ns(cm, &cp, &g, &q0, NULL));
                                L1.fusion = bits[k];
                            }
                        }
    cost_model_free(cm);
}

Test(fusion, flags_take_effect_where_megatron_applies_them)
{
    model_config m;
    memset(&m, 0, sizeof m);
    m.add_bias_linear = true;
    m.attention_backend = ATTN_BACKEND_UNFUSED;
    cr_expect_eq(layer_fusion_of(&m), 0u);
    m.no_bias_gelu_fusion = true;
    cr_expect_eq(layer_fusion_of(&m), LAYER_UNFUSED_BIAS_ACT);
    m.add_bias_linear = false; /* Megatron turns bias-GeLU fusion off without biases */
    cr_expect_eq(layer_fusion_of(&m), 0u);
    m.swiglu = true; /* the GeLU flag does nothing for SwiGLU, the SwiGLU one does */
    cr_expect_eq(layer_fusion_of(&m), 0u);
    m.no_bias_swiglu_fusion = true;
    cr_expect_eq(layer_fusion_of(&m), LAYER_UNFUSED_BIAS_ACT);
    m.swiglu = false;
    m.no_bias_gelu_fusion = false;
    cr_expect_eq(layer_fusion_of(&m), 0u);
    m.no_masked_softmax_fusion = true;
    cr_expect_eq(layer_fusion_of(&m), LAYER_UNFUSED_SOFTMAX);
    m.attention_backend = ATTN_BACKEND_FLASH; /* the softmax runs inside the kernel */
    cr_expect_eq(layer_fusion_of(&m), 0u);
    m.no_rope_fusion = true;
    cr_expect_eq(layer_fusion_of(&m), 0u);
    m.position_embedding = POS_ROPE;
    cr_expect_eq(layer_fusion_of(&m), LAYER_UNFUSED_ROPE);
    m.no_rope_fusion = false;
    m.no_gradient_accumulation_fusion = true;
    m.cross_entropy_loss_fusion = true;
    cr_expect_eq(layer_fusion_of(&m), LAYER_UNFUSED_GRAD_ACCUM | LAYER_FUSED_CE);
}

Test(fusion, shape_check_refuses_unknown_bits)
{
    layer_shape L = shape(1, false, false, ATTN_BACKEND_FLASH);
    L.fusion = 0x100;
    layer_ops o;
    cr_expect_eq(layer_ops_build(&L, LAYER_PASS_F, &o, NULL), TS_EINVAL);
    L.fusion = 0;
    L.main_grad_bytes = 3;
    cr_expect_eq(layer_ops_build(&L, LAYER_PASS_F, &o, NULL), TS_EINVAL);
}

/* Current scaling with SP: the four casts of tensors all-gathered across TP
 * wait for a one-fp32 all-reduce of their amax over the t ranks; none
 * without SP or with delayed scaling (its reduction is per chunk: fp8.h). */
Test(fusion, fp8_current_scaling_amax_all_reduces)
{
    layer_shape L = shape(4, true, false, ATTN_BACKEND_FLASH);
    L.fp8 = FP8_FORMAT_HYBRID;
    L.fp8_recipe = FP8_RECIPE_TENSORWISE;
    const char *fwd[] = {"qkv", "fc1"}, *bwd[] = {"proj.dgrad", "fc2.dgrad"};
    layer_ops f = build(&L, LAYER_PASS_F), b = build(&L, LAYER_PASS_B);
    for (int k = 0; k < 2; k++) {
        const layer_ops *o = k ? &b : &f;
        const char *const *g = k ? bwd : fwd;
        for (int j = 0; j < 2; j++) {
            char amax[64], cast[64];
            snprintf(amax, sizeof amax, "%s.fp8.amax.ar", g[j]);
            snprintf(cast, sizeof cast, "%s.fp8.cast", g[j]);
            int ia = -1, ic = -1;
            for (int i = 0; i < o->n; i++) {
                if (!strcmp(o->op[i].name, amax))
                    ia = i;
                if (!strcmp(o->op[i].name, cast))
                    ic = i;
            }
            cr_assert_geq(ia, 0, "%s", amax);
            cr_assert_geq(ic, 0, "%s", cast);
            cr_expect_eq(o->op[ia].kind, LAYER_OP_COMM);
            cr_expect_eq(o->op[ia].coll, COMM_ALL_REDUCE);
            cr_expect_eq(o->op[ia].bytes, 4);
            cr_expect_eq(o->op[ia].group, L.t);
            cr_expect_eq(o->op[ic].dep[0], ia, "%s waits for %s", cast, amax);
        }
    }
    cr_expect_eq(op_bytes(&f, "proj.fp8.amax.ar"), -1); /* proj's input is not gathered */
    L.sp = false;
    f = build(&L, LAYER_PASS_F);
    cr_expect_eq(op_bytes(&f, "qkv.fp8.amax.ar"), -1);
    L.sp = true;
    L.fp8_recipe = FP8_RECIPE_DELAYED;
    f = build(&L, LAYER_PASS_F);
    cr_expect_eq(op_bytes(&f, "qkv.fp8.amax.ar"), -1);
}

/* The longest lists (every fusion off, FP8 current scaling with SP, unfused
 * attention, SwiGLU, biases, every pass and recompute mode) fit in
 * LAYER_MAX_OPS with room for the MoE block's ops. */
Test(fusion, longest_lists_fit)
{
    layer_shape L = shape(4, true, true, ATTN_BACKEND_UNFUSED);
    L.fusion = LAYER_UNFUSED_BIAS_ACT | LAYER_UNFUSED_BIAS_DROPOUT | LAYER_UNFUSED_SOFTMAX | LAYER_UNFUSED_GRAD_ACCUM |
               LAYER_UNFUSED_ROPE;
    L.fp8 = FP8_FORMAT_HYBRID;
    L.fp8_recipe = FP8_RECIPE_TENSORWISE;
    int most = 0;
    for (int r = RECOMPUTE_NONE; r <= RECOMPUTE_FULL; r++) {
        L.recompute = (config_recompute)r;
        L.rc_modules = CONFIG_RC_CORE_ATTN | CONFIG_RC_MLP | CONFIG_RC_LAYERNORM;
        for (int p = 0; p < LAYER_PASS_COUNT; p++) {
            layer_ops o = build(&L, (layer_pass)p);
            if (o.n > most)
                most = o.n;
        }
    }
    cr_expect_leq(most, LAYER_MAX_OPS - 16, "%d ops", most);
}
