/* Tests for --qk-layernorm (layer.h layer_shape.qk_norm, flops.h
 * flops_qk_norm_params): the norm's bytes per pass and its saved input
 * against their closed forms (GQA: a d query and g d key elements per token,
 * over t), which recomputation re-creates it, FLOPs unchanged, the
 * parameters it adds (and MLA's, which has its own norms), and the
 * metamorphic rule: the norm never makes a pass faster nor a layer keep
 * fewer bytes. */
#include <criterion/criterion.h>
#include <string.h>

#include "sim/config/moe_flags.h"
#include "sim/model/cost.h"
#include "sim/model/flops.h"
#include "sim/model/layer.h"
#include "sim/model/mla.h"
#include "tests/unit/gpu_specs.h"

static const gpu_spec H100 = {GPU_SPEC_H100};

/* Qwen3-235B-A22B's layer shape: h 4096, 64 heads of 128, 4 query groups,
 * s 4096, b 1, no dropout; t, sp and the attention kernel given. */
static layer_shape shape(int t, bool sp, config_attn_backend attn)
{
    layer_shape L;
    memset(&L, 0, sizeof L);
    L.h = 4096;
    L.a = 64;
    L.g = 4;
    L.d = 128;
    L.ffn = 12288;
    L.swiglu = true;
    L.s = 4096;
    L.b = 1;
    L.V = 151936;
    L.t = t;
    L.sp = sp;
    L.dtype_bytes = 2;
    L.attn = attn;
    L.no_attn_dropout = L.no_hidden_dropout = true;
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

static const layer_tensor *tensor(const layer_saved_list *l, const char *name)
{
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->t[i].name, name))
            return &l->t[i];
    return NULL;
}

/* q and k elements of one TP rank: T (a + g) d / t. */
static int64_t qk_elems(const layer_shape *L)
{
    return L->s * L->b * (L->a + L->g) * L->d / L->t;
}

Test(qk_norm, bytes_per_pass_closed_forms)
{
    for (int t = 1; t <= 4; t *= 2) {
        layer_shape L = shape(t, t > 1, ATTN_BACKEND_FLASH);
        L.qk_norm = true;
        int64_t Q = qk_elems(&L), dt = 2;
        /* t = 4: 4096 x (16 + 1) x 128 = 8912896 elements, 17.8 MB forward */
        if (t == 4)
            cr_expect_eq(Q, 8912896);
        layer_ops f = build(&L, LAYER_PASS_F), b = build(&L, LAYER_PASS_B), i = build(&L, LAYER_PASS_I),
                  w = build(&L, LAYER_PASS_W);
        cr_expect_eq(op_bytes(&f, "qk_norm"), 2 * Q * dt, "t %d", t);
        cr_expect_eq(op_bytes(&b, "qk_norm.bwd"), 3 * Q * dt, "t %d", t);
        cr_expect_eq(op_bytes(&i, "qk_norm.bwd"), 3 * Q * dt, "t %d", t);
        cr_expect_eq(op_bytes(&w, "qk_norm.bwd"), -1, "the weight-gradient pass has no norm backward");
        cr_expect_eq(op_bytes(&f, "qk_norm.bwd"), -1);
        L.qk_norm = false;
        layer_ops f0 = build(&L, LAYER_PASS_F), b0 = build(&L, LAYER_PASS_B);
        cr_expect_eq(op_bytes(&f0, "qk_norm"), -1);
        cr_expect_eq(op_bytes(&b0, "qk_norm.bwd"), -1);
        cr_expect_eq(f.n, f0.n + 1);
        cr_expect_eq(b.n, b0.n + 1);
    }
}

/* The norm runs between the QKV GEMM and the attention core (before the
 * unfused rope), and its backward between rope's and the QKV dgrad. */
Test(qk_norm, program_order)
{
    layer_shape L = shape(2, false, ATTN_BACKEND_FLASH);
    L.qk_norm = true;
    L.fusion = LAYER_UNFUSED_ROPE;
    layer_ops f = build(&L, LAYER_PASS_F), b = build(&L, LAYER_PASS_B);
    int qkv = -1, norm = -1, rope = -1, rope_b = -1, norm_b = -1, dgrad = -1;
    for (int i = 0; i < f.n; i++) {
        qkv = !strcmp(f.op[i].name, "qkv") ? i : qkv;
        norm = !strcmp(f.op[i].name, "qk_norm") ? i : norm;
        rope = !strcmp(f.op[i].name, "rope.unfused") ? i : rope;
    }
    for (int i = 0; i < b.n; i++) {
        rope_b = !strcmp(b.op[i].name, "rope.unfused.bwd") ? i : rope_b;
        norm_b = !strcmp(b.op[i].name, "qk_norm.bwd") ? i : norm_b;
        dgrad = !strcmp(b.op[i].name, "qkv.dgrad") ? i : dgrad;
    }
    cr_expect(qkv >= 0 && norm == qkv + 1 && rope == norm + 1, "qkv %d, qk_norm %d, rope %d", qkv, norm, rope);
    cr_expect(rope_b >= 0 && norm_b == rope_b + 1 && dgrad > norm_b, "rope.bwd %d, qk_norm.bwd %d, qkv.dgrad %d",
              rope_b, norm_b, dgrad);
}

/* Recomputation: full re-runs the norm, selective never does (Megatron-core's
 * layernorm module re-runs input_layernorm and pre_mlp_layernorm only). */
Test(qk_norm, recompute_pass)
{
    layer_shape L = shape(2, true, ATTN_BACKEND_FLASH);
    L.qk_norm = true;
    int64_t Q = qk_elems(&L);
    L.recompute = RECOMPUTE_FULL;
    layer_ops r = build(&L, LAYER_PASS_R);
    cr_expect_eq(op_bytes(&r, "qk_norm"), 2 * Q * 2);
    L.recompute = RECOMPUTE_SELECTIVE;
    for (unsigned m = 1; m < 8; m++) { /* every set of core_attn, mlp, layernorm */
        L.rc_modules = m;
        r = build(&L, LAYER_PASS_R);
        cr_expect_eq(op_bytes(&r, "qk_norm"), -1, "modules 0x%x", m);
    }
}

/* Saved bytes per layer: the norm's input, Q dt, kept unless the whole
 * layer is recomputed; every other tensor unchanged. */
Test(qk_norm, saved_bytes_closed_forms)
{
    const config_recompute rcs[] = {RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL};
    for (int t = 1; t <= 4; t *= 4)
        for (int sp = 0; sp < (t > 1 ? 2 : 1); sp++)
            for (size_t r = 0; r < 3; r++)
                for (unsigned m = 0; m < (rcs[r] == RECOMPUTE_SELECTIVE ? 8u : 1u); m++) {
                    layer_shape L = shape(t, sp, ATTN_BACKEND_FLASH);
                    L.recompute = rcs[r];
                    L.rc_modules = m;
                    layer_saved_list s0, s1;
                    cr_assert_eq(layer_saved_build(&L, &s0, NULL), TS_OK);
                    L.qk_norm = true;
                    cr_assert_eq(layer_saved_build(&L, &s1, NULL), TS_OK);
                    int64_t Q = qk_elems(&L);
                    const layer_tensor *in = tensor(&s1, "qk_norm.in");
                    cr_assert_not_null(in);
                    cr_expect_eq(in->bytes, Q * 2);
                    cr_expect_eq(in->free_when, LAYER_FREE_AFTER_I);
                    bool full = rcs[r] == RECOMPUTE_FULL;
                    cr_expect_eq(in->kept_after_f, !full, "t %d sp %d recompute %zu modules 0x%x", t, sp, r, m);
                    cr_expect_eq(in->by_recompute, full);
                    cr_expect_eq(layer_saved_kept_bytes(&s1), layer_saved_kept_bytes(&s0) + (full ? 0 : Q * 2));
                    cr_expect_eq(s1.n, s0.n + 1);
                    cr_expect_null(tensor(&s0, "qk_norm.in"));
                }
    /* Qwen3-235B at t = 2 with sequence parallelism: 4096 x 34 x 128 x 2 B = 35.65 MB per layer */
    layer_shape L = shape(2, true, ATTN_BACKEND_FLASH);
    L.qk_norm = true;
    layer_saved_list s;
    cr_assert_eq(layer_saved_build(&L, &s, NULL), TS_OK);
    cr_expect_eq(tensor(&s, "qk_norm.in")->bytes, 35651584);
}

/* Element-wise: no FLOPs in any pass, and no collective. */
Test(qk_norm, flops_and_comm_unchanged)
{
    for (int at = 0; at < 2; at++)
        for (int r = RECOMPUTE_NONE; r <= RECOMPUTE_FULL; r++) {
            layer_shape L = shape(4, true, at ? ATTN_BACKEND_FLASH : ATTN_BACKEND_UNFUSED);
            L.recompute = (config_recompute)r;
            for (int p = 0; p < LAYER_PASS_COUNT; p++) {
                L.qk_norm = false;
                layer_ops o0 = build(&L, (layer_pass)p);
                L.qk_norm = true;
                layer_ops o1 = build(&L, (layer_pass)p);
                cr_expect_eq(layer_ops_flops(&o1), layer_ops_flops(&o0));
                for (int c = 0; c < COMM_COLL_COUNT; c++)
                    cr_expect_eq(layer_ops_comm_bytes(&o1, (commcost_coll)c),
                                 layer_ops_comm_bytes(&o0, (commcost_coll)c));
            }
        }
}

/* Parameters: 2d (RMSNorm) or 4d (LayerNorm) per layer, replicated over t;
 * with MLA, whose own norms mla_attn_rank_params counts, none added. */
Test(qk_norm, parameters)
{
    model_config m;
    memset(&m, 0, sizeof m);
    m.num_layers = 94;
    m.hidden_size = 4096;
    m.num_attention_heads = 64;
    m.kv_channels = 128;
    m.num_query_groups = 4;
    m.ffn_hidden_size = 12288;
    m.swiglu = true;
    m.seq_length = 4096;
    m.padded_vocab_size = 151936;
    m.untie_embeddings = true;
    m.normalization = NORM_RMSNORM;
    m.position_embedding = POS_ROPE;
    flops_params p0, p1;
    flops_param_count(&m, &p0);
    int64_t st0 = flops_params_stage(&m, 2, 11, 1, 0);
    cr_expect_eq(flops_qk_norm_params(&m), 0);
    m.qk_layernorm = true;
    flops_param_count(&m, &p1);
    cr_expect_eq(flops_qk_norm_params(&m), 2 * 128);
    cr_expect_eq(p1.per_layer, p0.per_layer + 256);
    cr_expect_eq(p1.total, p0.total + 94 * 256);
    cr_expect_eq(flops_params_stage(&m, 2, 11, 1, 0), st0 + 11 * 256, "replicated, not split over t");
    m.normalization = NORM_LAYERNORM;
    cr_expect_eq(flops_qk_norm_params(&m), 4 * 128);

    /* MLA: the stage's parameters do not depend on the flag */
    moe_config e;
    moe_config_defaults(&e);
    e.mla = true;
    e.mla_q_lora_rank = 1536;
    e.mla_kv_lora_rank = 512;
    e.mla_qk_head_dim = 128;
    e.mla_qk_pos_emb_head_dim = 64;
    e.mla_v_head_dim = 128;
    m.num_query_groups = 64;
    for (int t = 1; t <= 4; t *= 2) {
        m.qk_layernorm = false;
        int64_t a = flops_params_stage(&m, t, 1, 0, 0) + mla_layer_params_delta(&m, &e, t);
        m.qk_layernorm = true;
        int64_t b = flops_params_stage(&m, t, 1, 0, 0) + mla_layer_params_delta(&m, &e, t);
        cr_expect_eq(a, b, "t %d", t);
    }
}

/* Metamorphic: with the norm, no pass is faster and no layer keeps fewer
 * bytes, over t, sequence parallelism, the attention kernel and every
 * recomputation mode (H100 cost model). */
Test(qk_norm, never_faster_never_less_memory)
{
    cost_params p;
    commcost_params cp;
    cost_model *cm;
    cr_assert_eq(cost_params_default(&H100, PREC_BF16, &p, NULL), TS_OK);
    cr_assert_eq(commcost_params_default(&H100, &cp, NULL), TS_OK);
    cr_assert_eq(cost_model_new(&p, &cm, NULL), TS_OK);
    const config_recompute rcs[] = {RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL};
    for (int t = 1; t <= 4; t *= 2)
        for (int sp = 0; sp < (t > 1 ? 2 : 1); sp++)
            for (int at = 0; at < 2; at++)
                for (size_t r = 0; r < 3; r++) {
                    layer_shape L0 = shape(t, sp, at ? ATTN_BACKEND_FLASH : ATTN_BACKEND_UNFUSED);
                    L0.s = 1024; /* keeps the unfused scores small */
                    L0.recompute = rcs[r];
                    L0.rc_modules = CONFIG_RC_LAYERNORM | CONFIG_RC_CORE_ATTN;
                    layer_shape L1 = L0;
                    L1.qk_norm = true;
                    commcost_group g = {t, t};
                    double more = 0;
                    for (int pass = 0; pass < LAYER_PASS_COUNT; pass++) {
                        layer_ops o0 = build(&L0, (layer_pass)pass), o1 = build(&L1, (layer_pass)pass);
                        double n0 = cost_ops_run_ns(cm, &cp, &g, &o0, NULL),
                               n1 = cost_ops_run_ns(cm, &cp, &g, &o1, NULL);
                        cr_expect_geq(n1, n0, "t %d sp %d flash %d recompute %zu pass %s", t, sp, at, r,
                                      layer_pass_name((layer_pass)pass));
                        more += n1 - n0;
                    }
                    cr_expect_gt(more, 0, "the norm costs something somewhere");
                    layer_saved_list s0, s1;
                    cr_assert_eq(layer_saved_build(&L0, &s0, NULL), TS_OK);
                    cr_assert_eq(layer_saved_build(&L1, &s1, NULL), TS_OK);
                    cr_expect_geq(layer_saved_kept_bytes(&s1), layer_saved_kept_bytes(&s0));
                }
    cost_model_free(cm);
}
