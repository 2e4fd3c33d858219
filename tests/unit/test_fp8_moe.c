/* FP8 in the MoE block and MLA: the MXFP8 dispatch (--moe-dispatch-fwd-dtype,
 * --moe-combine-bwd-dtype: moe_disp.h) — its row bytes, the volumes on every
 * dispatcher, the quantize cast, the flags' rules and "never slower EP
 * communication" — and the saved FP8 inputs of the expert, shared-expert and
 * MLA GEMMs (layer_fp8_saved_bytes) against their closed forms. */
#include <criterion/criterion.h>
#include <string.h>

#include "sim/core/plan_moe.h"
#include "sim/core/simulate.h"
#include "sim/model/fp8.h"
#include "sim/model/layer.h"
#include "sim/model/moe.h"
#include "sim/model/moe_disp.h"
#include "tests/unit/flags_run.h"
#include "tests/unit/layer_fixture.h"

static void fini(void)
{
    flags_run_free();
}

/* Mixtral 8x7B's layer (layer_fixture.h), flash, no dropout. */
static layer_shape shape(config_fp8_format f, config_fp8_recipe r)
{
    layer_shape L = layer_fixture_mixtral();
    L.attn = ATTN_BACKEND_FLASH;
    L.no_attn_dropout = L.no_hidden_dropout = true;
    L.fp8 = f;
    L.fp8_recipe = r;
    return L;
}

static moe_config experts(int dispatcher, int ep, int etp, bool fwd, bool bwd)
{
    moe_config e;
    memset(&e, 0, sizeof e);
    e.num_experts = 8;
    e.topk = 2;
    e.ffn_hidden_size = 14336;
    e.ep = ep;
    e.etp = etp;
    e.dispatcher = dispatcher;
    e.enable_deepep = dispatcher == MOE_DISPATCH_FLEX;
    e.dispatch_fwd_mxfp8 = fwd;
    e.combine_bwd_mxfp8 = bwd;
    return e;
}

static const layer_op *find(const layer_ops *o, const char *name)
{
    for (int i = 0; i < o->n; i++)
        if (!strcmp(o->op[i].name, name))
            return &o->op[i];
    return NULL;
}

static void ops(const layer_shape *L, const moe_config *e, layer_pass p, layer_ops *o)
{
    ts_err err;
    o->n = 0;
    cr_assert_eq(moe_block_ops(L, e, 1.0, p, o, &err), TS_OK, "%s", err.msg);
}

/* OCP MX: 1 byte an element and an e8m0 scale per 32 along the row. */
Test(fp8_moe, mxfp8_bytes_closed_form)
{
    cr_assert_eq(fp8_mxfp8_bytes(1, 4096), 4096 + 128);
    cr_assert_eq(fp8_mxfp8_bytes(1, 7168), 7168 + 224); /* DeepSeek-V3's token row: 7392 B against 14336 B */
    cr_assert_eq(fp8_mxfp8_bytes(3, 33), 3 * (33 + 2)); /* a partial block still has its scale */
    cr_assert_eq(fp8_mxfp8_quantize_bytes(10, 4096, 2), 10 * (2 * 4096 + 4096 + 128));
}

/* alltoall, ep 8, 4096 tokens top-2, h 4096: the dispatch all-to-all sends
 * T k (h + h/32) (ep-1)/ep bytes and is marked fp8, the combine's backward
 * the same with mx_bwd, the combine and the dispatch's backward 16-bit
 * T k h 2 (ep-1)/ep; one quantize per MXFP8 side, of the T k rows sent. */
Test(fp8_moe, alltoall_bytes_per_token)
{
    layer_shape L = shape(FP8_FORMAT_E4M3, FP8_RECIPE_MXFP8);
    const int64_t NT = 4096, k = 2, h = 4096, row = h + h / 32;
    for (int m = 0; m < 4; m++) {
        bool fwd = m & 1, bwd = m & 2;
        moe_config e = experts(MOE_DISPATCH_ALLTOALL, 8, 1, fwd, bwd);
        layer_ops f, b;
        ops(&L, &e, LAYER_PASS_F, &f);
        ops(&L, &e, LAYER_PASS_B, &b);
        const layer_op *d = find(&f, "moe.a2a.dispatch"), *c = find(&f, "moe.a2a.combine");
        const layer_op *cb = find(&b, "moe.a2a.combine.bwd"), *db = find(&b, "moe.a2a.dispatch.bwd");
        cr_assert(d && c && cb && db);
        cr_assert_eq(d->bytes, NT * k * (fwd ? row : 2 * h) * 7 / 8, "mode %d", m);
        cr_assert_eq(cb->bytes, NT * k * (bwd ? row : 2 * h) * 7 / 8, "mode %d", m);
        cr_assert_eq(c->bytes, NT * k * 2 * h * 7 / 8);
        cr_assert_eq(db->bytes, NT * k * 2 * h * 7 / 8);
        cr_assert_eq(d->fp8, fwd);
        cr_assert_eq(cb->fp8, bwd);
        cr_assert(!c->fp8 && !db->fp8);
        const layer_op *qf = find(&f, "moe.dispatch.mxfp8.cast"), *qb = find(&b, "moe.combine.bwd.mxfp8.cast");
        cr_assert_eq(qf != NULL, fwd);
        cr_assert_eq(qb != NULL, bwd);
        if (qf) /* read T k h 16-bit, write T k rows of MXFP8 */
            cr_assert_eq(qf->bytes, NT * k * (2 * h + row));
        if (qb)
            cr_assert_eq(qb->bytes, NT * k * (2 * h + row));
        /* the cast sits right before the send it feeds */
        if (qf)
            cr_assert_eq(d->dep[0], (int)(qf - f.op));
    }
}

/* allgather (n = ep 8): the hidden-state gather carries MXFP8 rows of the
 * T tokens (n T (h + h/32)), the combine's backward gather the gradients;
 * the routing gather and the combine's reduce-scatter are unchanged. ETP
 * behind the alltoall (ep 4, etp 2): the ETP gather of the dispatched rows
 * in MXFP8, its reduce-scatter 16-bit. */
Test(fp8_moe, allgather_and_etp_bytes)
{
    layer_shape L = shape(FP8_FORMAT_E4M3, FP8_RECIPE_MXFP8);
    const int64_t NT = 4096, h = 4096, row = h + h / 32;
    moe_config e = experts(MOE_DISPATCH_ALLGATHER, 8, 1, true, true), p = e;
    p.dispatch_fwd_mxfp8 = p.combine_bwd_mxfp8 = false;
    layer_ops f, b, pf, pb;
    ops(&L, &e, LAYER_PASS_F, &f);
    ops(&L, &e, LAYER_PASS_B, &b);
    ops(&L, &p, LAYER_PASS_F, &pf);
    ops(&L, &p, LAYER_PASS_B, &pb);
    cr_assert_eq(find(&f, "moe.ag.dispatch")->bytes, 8 * NT * row);
    cr_assert_eq(find(&pf, "moe.ag.dispatch")->bytes, 8 * NT * h * 2);
    cr_assert_eq(find(&b, "moe.rs.combine.bwd")->bytes, 8 * NT * row);
    cr_assert_eq(find(&f, "moe.rs.combine")->bytes, find(&pf, "moe.rs.combine")->bytes);
    cr_assert_eq(find(&f, "moe.ag.probs")->bytes, find(&pf, "moe.ag.probs")->bytes);
    cr_assert_eq(find(&b, "moe.ag.dispatch.bwd")->bytes, find(&pb, "moe.ag.dispatch.bwd")->bytes);
    cr_assert_eq(find(&f, "moe.dispatch.mxfp8.cast")->bytes, NT * (2 * h + row)); /* the T tokens, before the gather */
    cr_assert_eq(find(&b, "moe.combine.bwd.mxfp8.cast")->bytes, NT * (2 * h + row));
    /* transient: the gathered MXFP8 rows beside the 16-bit unpermuted output */
    moe_disp_dims D, P;
    moe_disp_dims_of(&L, &e, 1.0, &D);
    moe_disp_dims_of(&L, &p, 1.0, &P);
    cr_assert_eq(moe_disp_transient_bytes(&D), 8 * NT * row + 8 * NT * h * 2 + 8 * NT * 8 * 5);
    cr_assert_lt(moe_disp_transient_bytes(&D), moe_disp_transient_bytes(&P));

    moe_config x = experts(MOE_DISPATCH_ALLTOALL, 4, 2, true, true);
    ops(&L, &x, LAYER_PASS_F, &f);
    ops(&L, &x, LAYER_PASS_B, &b);
    const int64_t Ra = NT * 2;
    cr_assert_eq(find(&f, "moe.etp.ag")->bytes, 2 * Ra * row);
    cr_assert_eq(find(&f, "moe.etp.rs")->bytes, 2 * Ra * h * 2);
    cr_assert_eq(find(&b, "moe.etp.rs.bwd")->bytes, 2 * Ra * row);
    cr_assert_eq(find(&b, "moe.etp.ag.bwd")->bytes, 2 * Ra * h * 2);
}

/* Nothing is sent at ep = etp = 1: no cast, the block as in bf16 dispatch. */
Test(fp8_moe, no_collective_no_cast)
{
    layer_shape L = shape(FP8_FORMAT_E4M3, FP8_RECIPE_MXFP8);
    for (int d = MOE_DISPATCH_ALLGATHER; d <= MOE_DISPATCH_ALLTOALL; d++) {
        moe_config e = experts(d, 1, 1, true, true), p = experts(d, 1, 1, false, false);
        layer_ops a, b;
        for (int ps = LAYER_PASS_F; ps <= LAYER_PASS_B; ps++) {
            ops(&L, &e, (layer_pass)ps, &a);
            ops(&L, &p, (layer_pass)ps, &b);
            cr_assert_eq(a.n, b.n, "dispatcher %d pass %d", d, ps);
        }
    }
}

/* The flags: refused off Blackwell (the GPU named), without FP8 training
 * with the mxfp8 recipe, and without experts; accepted on B200. */
#define MOE_SMALL                                                                                                      \
    "--num-layers", "2", "--hidden-size", "4096", "--num-attention-heads", "32", "--group-query-attention",            \
        "--num-query-groups", "8", "--ffn-hidden-size", "14336", "--swiglu", "--disable-bias-linear", "--seq-length",  \
        "4096", "--micro-batch-size", "1", "--global-batch-size", "16", "--bf16"

Test(fp8_moe, flag_rules, .fini = fini)
{
    cr_assert_eq(flags_run(MOE_SMALL, "--gpus", "8", "--gpu", "H100-SXM5-80GB", "--num-experts", "8",
                           "--moe-dispatch-fwd-dtype", "mxfp8", NULL),
                 TS_EINVAL);
    cr_assert(strstr(E.msg, "--moe-dispatch-fwd-dtype mxfp8 needs Blackwell") && strstr(E.msg, "H100-SXM5-80GB"), "%s",
              E.msg);
    cr_assert_eq(flags_run(MOE_SMALL, "--gpus", "8", "--gpu", "B200-SXM-180GB", "--num-experts", "8",
                           "--moe-combine-bwd-dtype", "mxfp8", NULL),
                 TS_EINVAL);
    cr_assert(strstr(E.msg, "--moe-combine-bwd-dtype mxfp8 needs FP8 training with --fp8-recipe mxfp8"), "%s", E.msg);
    cr_assert_eq(flags_run(MOE_SMALL, "--gpus", "8", "--gpu", "B200-SXM-180GB", "--num-experts", "8", "--fp8-format",
                           "e4m3", "--fp8-recipe", "blockwise", "--moe-dispatch-fwd-dtype", "mxfp8", NULL),
                 TS_EINVAL);
    cr_assert(strstr(E.msg, "got --fp8-recipe blockwise"), "%s", E.msg);
    cr_assert_eq(
        flags_run(MOE_SMALL, "--gpus", "8", "--gpu", "B200-SXM-180GB", "--moe-dispatch-fwd-dtype", "mxfp8", NULL),
        TS_EINVAL);
    cr_assert(strstr(E.msg, "--moe-dispatch-fwd-dtype needs --num-experts"), "%s", E.msg);
    cr_assert_eq(flags_run(MOE_SMALL, "--gpus", "8", "--gpu", "B200-SXM-180GB", "--num-experts", "8", "--fp8-format",
                           "e4m3", "--fp8-recipe", "mxfp8", "--moe-dispatch-fwd-dtype", "mxfp8", NULL),
                 TS_OK, "%s", E.msg);
    cr_assert(C.moe.dispatch_fwd_mxfp8 && !C.moe.combine_bwd_mxfp8);
    cr_assert_eq(flags_run(MOE_SMALL, "--gpus", "8", "--gpu", "B200-SXM-180GB", "--num-experts", "8",
                           "--moe-dispatch-fwd-dtype", "bf16", "--moe-combine-bwd-dtype", "bf16", NULL),
                 TS_OK, "%s", E.msg);
    cr_assert(!C.moe.dispatch_fwd_mxfp8 && !C.moe.combine_bwd_mxfp8);
}

/* The EP time of a whole run, averaged over the ranks: busy and exposed. */
static void run_ep(const char *disp, const char *ep, const char *gpus, const char *dt, double *busy, double *exposed)
{
    const char *deepep = strcmp(disp, "flex") ? NULL : "--moe-enable-deepep";
    int rc = deepep ? flags_run(MOE_SMALL, "--gpu", "B200-SXM-180GB", "--num-experts", "16", "--fp8-format", "e4m3",
                                "--fp8-recipe", "mxfp8", "--moe-token-dispatcher-type", disp, "--gpus", gpus,
                                "--expert-model-parallel-size", ep, "--moe-dispatch-fwd-dtype", dt,
                                "--moe-combine-bwd-dtype", dt, "--expert-tensor-parallel-size", "1", deepep, NULL)
                    : flags_run(MOE_SMALL, "--gpu", "B200-SXM-180GB", "--num-experts", "16", "--fp8-format", "e4m3",
                                "--fp8-recipe", "mxfp8", "--moe-token-dispatcher-type", disp, "--gpus", gpus,
                                "--expert-model-parallel-size", ep, "--moe-dispatch-fwd-dtype", dt,
                                "--moe-combine-bwd-dtype", dt, NULL);
    cr_assert_eq(rc, TS_OK, "%s %s %s: %s", disp, ep, dt, E.msg);
    simulate_opts o;
    memset(&o, 0, sizeof o);
    simulate_result *r = NULL;
    cr_assert_eq(simulate_run(&C, &o, &r, &E), TS_OK, "%s", E.msg);
    *busy = r->cat_ns[PLAN_CAT_EP];
    *exposed = r->exposed_ns[SIMULATE_COMM_EP];
    simulate_result_free(r);
}

/* Metamorphic: MXFP8 dispatch never makes the EP communication slower
 * than bf16 on the same shape (busy and exposed), and with an EP group it
 * makes it faster; every dispatcher, inside a node and across nodes. */
Test(fp8_moe, mxfp8_never_slower_ep, .fini = fini, .timeout = 120)
{
    static const char *const DISP[] = {"alltoall", "allgather", "flex"};
    static const char *const EP[][2] = {{"2", "8"}, {"8", "8"}, {"16", "16"}};
    for (int d = 0; d < 3; d++)
        for (int k = 0; k < 3; k++) {
            double bb, be, mb, me;
            run_ep(DISP[d], EP[k][0], EP[k][1], "bf16", &bb, &be);
            run_ep(DISP[d], EP[k][0], EP[k][1], "mxfp8", &mb, &me);
            cr_assert_leq(mb, bb, "%s ep %s: busy %g > %g", DISP[d], EP[k][0], mb, bb);
            cr_assert_leq(me, be, "%s ep %s: exposed %g > %g", DISP[d], EP[k][0], me, be);
            cr_assert_lt(mb, bb, "%s ep %s: busy %g not below %g", DISP[d], EP[k][0], mb, bb);
        }
}

/* Saved bytes of one MoE block under FP8 (free_w: the GEMM inputs), the
 * closed form per recipe: the permuted tokens R h, the activation outputs
 * R f_e and T f_s, the shared FC1's copy of the block input T h, each
 * x + x/32 bytes for the block-scaled recipes, x for delayed/tensorwise;
 * 16-bit: 2 (R h + R f_e + T f_s), the block input counted by the layer.
 * What the input-gradient backward frees is unchanged. */
Test(fp8_moe, moe_block_saved_closed_form)
{
    const int64_t NT = 4096, R = 8192, h = 4096, fe = 14336, fs = 2048;
    moe_config e = experts(MOE_DISPATCH_ALLTOALL, 1, 1, false, false);
    e.shared_ffn_hidden_size = (int)fs;
    layer_shape B = shape(FP8_FORMAT_NONE, FP8_RECIPE_DELAYED);
    B.no_mlp = true;
    moe_block_mem mb;
    moe_block_mem_of(&B, &e, 1.0, &mb);
    cr_assert_eq(mb.free_w, 2 * (R * h + R * fe + NT * fs));
    for (int r = FP8_RECIPE_DELAYED; r <= FP8_RECIPE_MXFP8; r++) {
        layer_shape L = shape(FP8_FORMAT_HYBRID, (config_fp8_recipe)r);
        L.no_mlp = true;
        bool block = r == FP8_RECIPE_BLOCKWISE || r == FP8_RECIPE_MXFP8;
#define Q(x) ((x) + (block ? (x) / 32 : 0))
        moe_block_mem m;
        moe_block_mem_of(&L, &e, 1.0, &m);
        cr_assert_eq(m.free_w, Q(R * h) + Q(R * fe) + Q(NT * fs) + Q(NT * h), "recipe %d", r);
        cr_assert_eq(m.free_i, mb.free_i, "recipe %d", r);
        cr_assert_eq(m.kept, m.free_i + m.free_w);
        cr_assert_eq(moe_block_saved_bytes(&L, &e, 1.0), m.free_i + m.free_w);
        /* the MoE layer's block input stays 16-bit for the router */
        layer_saved_list l;
        cr_assert_eq(layer_saved_build(&L, &l, NULL), TS_OK);
        for (int i = 0; i < l.n; i++)
            if (!strcmp(l.t[i].name, "fc1.in"))
                cr_assert_eq(l.t[i].bytes, NT * h * 2);
#undef Q
    }
    /* no shared experts: no extra copy of the block input */
    e.shared_ffn_hidden_size = 0;
    layer_shape M = shape(FP8_FORMAT_E4M3, FP8_RECIPE_DELAYED);
    M.no_mlp = true;
    moe_block_mem m;
    moe_block_mem_of(&M, &e, 1.0, &m);
    cr_assert_eq(m.free_w, R * h + R * fe);
}

static int64_t saved_total(const layer_shape *L)
{
    layer_saved_list l;
    cr_assert_eq(layer_saved_build(L, &l, NULL), TS_OK);
    return layer_saved_kept_bytes(&l);
}

/* One MLA layer (DeepSeek-V3's head sizes, 32 heads, q_l 1536, kv_l 512)
 * under FP8 against bf16: qkv.in T h (2 -> q bytes), a second copy for the
 * kv down-projection (q), the up-projections' inputs T q_l and T kv_l
 * (2 -> q), proj's FP8 copy T a d_v (q; O stays 16-bit), fc1.in T h and
 * fc2.in T ffn (2 -> q); q(x) = x, or x + x/32 block-scaled. */
Test(fp8_moe, mla_saved_closed_form)
{
    const int64_t NT = 4096, h = 4096, ql = 1536, kvl = 512, a = 32, dv = 128, ffn = 14336;
    for (int r = FP8_RECIPE_DELAYED; r <= FP8_RECIPE_MXFP8; r++) {
        layer_shape B = shape(FP8_FORMAT_NONE, (config_fp8_recipe)r), L = shape(FP8_FORMAT_E4M3, (config_fp8_recipe)r);
        B.g = L.g = 32;
        B.mla = L.mla = (layer_mla){.on = true, .q_lora = ql, .kv_lora = kvl, .d_qk = 128, .d_rope = 64, .d_v = dv};
        bool block = r == FP8_RECIPE_BLOCKWISE || r == FP8_RECIPE_MXFP8;
#define Q(x) ((x) + (block ? (x) / 32 : 0))
        int64_t want = saved_total(&B) - 2 * (NT * h + NT * ql + NT * kvl + NT * h + NT * ffn) +
                       (Q(NT * h) + Q(NT * h) + Q(NT * ql) + Q(NT * kvl) + Q(NT * a * dv) + Q(NT * h) + Q(NT * ffn));
#undef Q
        cr_assert_eq(saved_total(&L), want, "recipe %d: %lld vs %lld", r, (long long)saved_total(&L), (long long)want);
    }
}

/* The dense layer under a block-scaled recipe: its FP8 inputs carry the
 * scales (1/32 byte an element), delayed scaling none. */
Test(fp8_moe, dense_saved_scales)
{
    const int64_t NT = 4096, h = 4096, ffn = 14336;
    layer_shape D = shape(FP8_FORMAT_E4M3, FP8_RECIPE_DELAYED), M = shape(FP8_FORMAT_E4M3, FP8_RECIPE_MXFP8);
    /* qkv.in, proj.in.fp8 (a d = h), fc1.in: T h each; fc2.in T ffn */
    cr_assert_eq(saved_total(&M) - saved_total(&D), (3 * NT * h + NT * ffn) / 32);
}
