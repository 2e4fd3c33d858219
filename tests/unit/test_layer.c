/* Tests for layer: ops per pass, TP communication volume (Megatron), FLOPs
 * per layer, saved activations against Korthikanti et al. 2022 Table 2 (unfused
 * attention) and the flash closed form sbh(34 + 4a/h), selective recompute
 * modules. */
#include <criterion/criterion.h>
#include <string.h>

#include "sim/model/layer.h"

/* GPT shapes of the papers (Narayanan 2021 Table 1, Korthikanti 2022 Table 3). */
typedef struct {
    int64_t h, a;
} gpt;
static const gpt MODELS[] = {{2304, 24}, {6144, 64}, {8192, 64}, {12288, 96}, {16384, 128}, {20480, 128}, {25600, 160}};
#define NMODELS (sizeof MODELS / sizeof MODELS[0])

static layer_shape shape(int64_t h, int64_t a, int64_t s, int64_t b, int t, bool sp, config_recompute r)
{
    layer_shape L = {.h = h,
                     .a = a,
                     .g = a,
                     .ffn = 4 * h,
                     .s = s,
                     .b = b,
                     .V = 51200,
                     .t = t,
                     .sp = sp,
                     .dtype_bytes = 2,
                     .recompute = r,
                     .attn = ATTN_BACKEND_UNFUSED};
    return L;
}

/* Korthikanti Table 2, written out here (independently of the library). */
static int64_t table2(const layer_shape *L)
{
    int64_t s = L->s, b = L->b, h = L->h, a = L->a, t = L->t;
    int64_t sbh = s * b * h;
    if (L->recompute == RECOMPUTE_FULL)
        return L->sp ? 2 * sbh / t : 2 * sbh;
    if (L->recompute == RECOMPUTE_SELECTIVE)
        return L->sp ? 34 * sbh / t : sbh * 10 + 24 * sbh / t;
    if (t == 1)
        return 34 * sbh + 5 * a * s * s * b; /* sbh(34 + 5as/h) */
    if (L->sp)
        return (34 * sbh + 5 * a * s * s * b) / t;          /* sbh(34 + 5as/h)/t */
    return 10 * sbh + 24 * sbh / t + 5 * a * s * s * b / t; /* sbh(10 + 24/t + 5as/(ht)) */
}

Test(layer, saved_bytes_equal_korthikanti_table2_every_row)
{
    const int tps[] = {1, 2, 4, 8};
    const config_recompute rs[] = {RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL};
    int checked = 0;
    for (size_t m = 0; m < NMODELS; m++)
        for (int ti = 0; ti < 4; ti++)
            for (int sp = 0; sp < 2; sp++)
                for (int ri = 0; ri < 3; ri++)
                    for (int64_t b = 1; b <= 4; b *= 2) {
                        if (sp && tps[ti] == 1)
                            continue;
                        layer_shape L = shape(MODELS[m].h, MODELS[m].a, 2048, b, tps[ti], sp, rs[ri]);
                        layer_saved_list l;
                        cr_assert_eq(layer_saved_build(&L, &l, NULL), TS_OK);
                        int64_t got = layer_saved_kept_bytes(&l);
                        cr_assert_eq(got, table2(&L), "h %lld t %d sp %d r %d b %lld: %lld != %lld", (long long)L.h,
                                     L.t, sp, ri, (long long)b, (long long)got, (long long)table2(&L));
                        cr_assert_eq(got, layer_korthikanti_bytes(&L));
                        checked++;
                    }
    cr_assert_gt(checked, 300);
}

Test(layer, long_sequences_exact_or_refused)
{
    /* --seq-length 2^24 with 128 heads (h 16384, t 8): micro-batch 8 fits int64
     * bytes and must equal Korthikanti's closed form, computed here in double
     * (exact: every term is below 2^53 times a power of two); micro-batch 128
     * would take 2^65 bytes and is refused naming the flags. */
    const int64_t S = (int64_t)1 << 24;
    for (int sp = 0; sp < 2; sp++) {
        layer_shape L = shape(16384, 128, S, 8, 8, sp, RECOMPUTE_NONE);
        ts_err e;
        cr_assert_eq(layer_shape_check(&L, &e), TS_OK, "%s", e.msg);
        double s = (double)S, b = 8, h = 16384, a = 128, t = 8;
        double want =
            sp ? (34 * s * b * h + 5 * a * s * s * b) / t : 10 * s * b * h + 24 * s * b * h / t + 5 * a * s * s * b / t;
        layer_saved_list l;
        cr_assert_eq(layer_saved_build(&L, &l, &e), TS_OK, "%s", e.msg);
        cr_expect_eq((double)layer_saved_kept_bytes(&l), want, "sp %d: %lld != %.0f", sp,
                     (long long)layer_saved_kept_bytes(&l), want);
        cr_expect_eq((double)layer_korthikanti_bytes(&L), want);
    }
    layer_shape L = shape(16384, 128, S, 128, 8, false, RECOMPUTE_NONE);
    ts_err e;
    cr_expect_eq(layer_shape_check(&L, &e), TS_EINVAL);
    cr_expect(strstr(e.msg, "--seq-length 16777216, --micro-batch-size 128, --num-attention-heads 128") &&
                  strstr(e.msg, "past 2^62"),
              "%s", e.msg);
    layer_saved_list l;
    cr_expect_eq(layer_saved_build(&L, &l, &e), TS_EINVAL);
}

Test(layer, saved_flags_consistent)
{
    for (int r = RECOMPUTE_NONE; r <= RECOMPUTE_FULL; r++) {
        layer_shape L = shape(6144, 64, 2048, 4, 8, false, (config_recompute)r);
        layer_saved_list l;
        cr_assert_eq(layer_saved_build(&L, &l, NULL), TS_OK);
        int64_t kept = 0, rec = 0, all = 0;
        int w_only = 0;
        for (int i = 0; i < l.n; i++) {
            cr_assert(l.t[i].kept_after_f != l.t[i].by_recompute, "%s", l.t[i].name);
            if (l.t[i].kept_after_f)
                kept += l.t[i].bytes;
            else
                rec += l.t[i].bytes;
            all += l.t[i].bytes;
            if (l.t[i].free_when == LAYER_FREE_AFTER_W) {
                w_only++;
                cr_assert(strstr(l.t[i].name, ".in") != NULL, "%s", l.t[i].name);
            }
        }
        cr_assert_eq(w_only, 4); /* inputs of QKV, projection, FC1, FC2 */
        cr_assert_eq(kept + rec, all);
        /* what is kept plus what recompute re-creates = the no-recompute set */
        layer_shape N = L;
        N.recompute = RECOMPUTE_NONE;
        cr_assert_eq(all, layer_korthikanti_bytes(&N));
    }
}

Test(layer, fp32_doubles_tensors_not_masks)
{
    layer_shape L = shape(4096, 32, 1024, 2, 4, false, RECOMPUTE_NONE);
    layer_shape F = L;
    F.dtype_bytes = 4;
    layer_saved_list a, b;
    cr_assert_eq(layer_saved_build(&L, &a, NULL), TS_OK);
    cr_assert_eq(layer_saved_build(&F, &b, NULL), TS_OK);
    for (int i = 0; i < a.n; i++) {
        bool mask = strstr(a.t[i].name, "mask") != NULL;
        cr_assert_eq(b.t[i].bytes, mask ? a.t[i].bytes : 2 * a.t[i].bytes, "%s", a.t[i].name);
    }
}

static int count_comm(const layer_ops *o, commcost_coll c, int64_t bytes)
{
    int n = 0;
    for (int i = 0; i < o->n; i++)
        if (o->op[i].kind == LAYER_OP_COMM && o->op[i].coll == c) {
            cr_assert_eq(o->op[i].bytes, bytes, "%s", o->op[i].name);
            n++;
        }
    return n;
}

static double wire(const layer_ops *o)
{
    double w = 0;
    for (int i = 0; i < o->n; i++)
        if (o->op[i].kind == LAYER_OP_COMM)
            w += commcost_wire_bytes(o->op[i].coll, o->op[i].bytes, o->op[i].group);
    return w;
}

Test(layer, megatron_tp_communication_volume)
{
    layer_shape L = shape(12288, 96, 2048, 1, 8, false, RECOMPUTE_NONE);
    int64_t S = L.b * L.s * L.h * 2; /* b*s*h elements, 16-bit */
    layer_ops f, b, i, w, r;
    cr_assert_eq(layer_ops_build(&L, LAYER_PASS_F, &f, NULL), TS_OK);
    cr_assert_eq(layer_ops_build(&L, LAYER_PASS_B, &b, NULL), TS_OK);
    cr_assert_eq(count_comm(&f, COMM_ALL_REDUCE, S), 2);
    cr_assert_eq(count_comm(&b, COMM_ALL_REDUCE, S), 2);
    cr_assert_eq(count_comm(&f, COMM_ALL_GATHER, S) + count_comm(&f, COMM_REDUCE_SCATTER, S), 0);
    /* I carries the input-gradient all-reduces, W none */
    cr_assert_eq(layer_ops_build(&L, LAYER_PASS_I, &i, NULL), TS_OK);
    cr_assert_eq(layer_ops_build(&L, LAYER_PASS_W, &w, NULL), TS_OK);
    cr_assert_eq(count_comm(&i, COMM_ALL_REDUCE, S), 2);
    cr_assert_eq(wire(&w), 0.0);
    /* group size t everywhere */
    for (int k = 0; k < f.n; k++)
        if (f.op[k].kind == LAYER_OP_COMM)
            cr_assert_eq(f.op[k].group, 8);
    /* recompute: full repeats the forward's all-reduces, selective none */
    L.recompute = RECOMPUTE_FULL;
    cr_assert_eq(layer_ops_build(&L, LAYER_PASS_R, &r, NULL), TS_OK);
    cr_assert_eq(count_comm(&r, COMM_ALL_REDUCE, S), 2);
    L.recompute = RECOMPUTE_SELECTIVE;
    cr_assert_eq(layer_ops_build(&L, LAYER_PASS_R, &r, NULL), TS_OK);
    cr_assert_eq(wire(&r), 0.0);
    L.recompute = RECOMPUTE_NONE;
    cr_assert_eq(layer_ops_build(&L, LAYER_PASS_R, &r, NULL), TS_OK);
    cr_assert_eq(r.n, 0);
}

Test(layer, sequence_parallel_same_volume)
{
    layer_shape L = shape(12288, 96, 2048, 2, 8, false, RECOMPUTE_NONE);
    layer_shape P = L;
    P.sp = true;
    int64_t S = L.b * L.s * L.h * 2;
    layer_ops f, fs, b, bs;
    cr_assert_eq(layer_ops_build(&L, LAYER_PASS_F, &f, NULL), TS_OK);
    cr_assert_eq(layer_ops_build(&P, LAYER_PASS_F, &fs, NULL), TS_OK);
    cr_assert_eq(layer_ops_build(&L, LAYER_PASS_B, &b, NULL), TS_OK);
    cr_assert_eq(layer_ops_build(&P, LAYER_PASS_B, &bs, NULL), TS_OK);
    /* each all-reduce becomes an all-gather + a reduce-scatter */
    cr_assert_eq(count_comm(&fs, COMM_ALL_GATHER, S), 2);
    cr_assert_eq(count_comm(&fs, COMM_REDUCE_SCATTER, S), 2);
    cr_assert_eq(count_comm(&fs, COMM_ALL_REDUCE, S), 0);
    cr_assert_float_eq(wire(&fs), wire(&f), 1e-6);
    /* backward: gradient all-gathers + reduce-scatters (same volume), plus
     * the two re-gathers of the saved sharded GEMM inputs (QKV, FC1) */
    cr_assert_eq(count_comm(&bs, COMM_REDUCE_SCATTER, S), 2);
    cr_assert_eq(count_comm(&bs, COMM_ALL_GATHER, S), 4);
    cr_assert_float_eq(wire(&bs) - 2 * commcost_wire_bytes(COMM_ALL_GATHER, S, 8), wire(&b), 1e-6);
}

Test(layer, no_collectives_without_tp)
{
    layer_shape L = shape(2304, 24, 2048, 4, 1, false, RECOMPUTE_FULL);
    for (int p = 0; p < LAYER_PASS_COUNT; p++) {
        layer_ops o;
        cr_assert_eq(layer_ops_build(&L, (layer_pass)p, &o, NULL), TS_OK);
        for (int i = 0; i < o.n; i++)
            cr_assert_neq(o.op[i].kind, LAYER_OP_COMM, "%s", o.op[i].name);
    }
}

Test(layer, flops_per_pass)
{
    for (size_t m = 0; m < NMODELS; m++) {
        int t = 8;
        layer_shape L = shape(MODELS[m].h, MODELS[m].a, 2048, 2, t, m % 2, RECOMPUTE_SELECTIVE);
        double b = L.b, s = L.s, h = L.h;
        double fwd = (24 * b * s * h * h + 4 * b * s * s * h) / t; /* formulas.md */
        layer_ops o[LAYER_PASS_COUNT];
        for (int p = 0; p < LAYER_PASS_COUNT; p++)
            cr_assert_eq(layer_ops_build(&L, (layer_pass)p, &o[p], NULL), TS_OK);
        cr_assert_float_eq(layer_ops_flops(&o[LAYER_PASS_F]), fwd, fwd * 1e-12);
        cr_assert_float_eq(layer_ops_flops(&o[LAYER_PASS_B]), 2 * fwd, fwd * 1e-12);
        cr_assert_float_eq(layer_ops_flops(&o[LAYER_PASS_I]) + layer_ops_flops(&o[LAYER_PASS_W]), 2 * fwd, fwd * 1e-12);
        cr_assert_float_eq(layer_ops_flops(&o[LAYER_PASS_W]), 24 * b * s * h * h / t, fwd * 1e-12);
        cr_assert_float_eq(layer_ops_flops(&o[LAYER_PASS_R]), 4 * b * s * s * h / t, fwd * 1e-12);
    }
}

Test(layer, gqa_swiglu_shapes)
{
    /* LLaMA-3-8B-like: h 4096, 32 heads, 8 groups, ffn 14336, SwiGLU, t 4 */
    layer_shape L = {.h = 4096,
                     .a = 32,
                     .g = 8,
                     .ffn = 14336,
                     .swiglu = true,
                     .s = 4096,
                     .b = 1,
                     .V = 128256,
                     .t = 4,
                     .dtype_bytes = 2,
                     .recompute = RECOMPUTE_NONE,
                     .attn = ATTN_BACKEND_UNFUSED};
    layer_ops f;
    cr_assert_eq(layer_ops_build(&L, LAYER_PASS_F, &f, NULL), TS_OK);
    const layer_op *qkv = NULL, *fc1 = NULL, *fc2 = NULL;
    for (int i = 0; i < f.n; i++) {
        if (!strcmp(f.op[i].name, "qkv"))
            qkv = &f.op[i];
        if (!strcmp(f.op[i].name, "fc1"))
            fc1 = &f.op[i];
        if (!strcmp(f.op[i].name, "fc2"))
            fc2 = &f.op[i];
    }
    cr_assert(qkv && fc1 && fc2);
    cr_assert_eq(qkv->n, (4096 + 2 * 8 * 128) / 4);
    cr_assert_eq(fc1->n, 2 * 14336 / 4);
    cr_assert_eq(fc2->k, 14336 / 4);
    layer_saved_list l;
    cr_assert_eq(layer_saved_build(&L, &l, NULL), TS_OK);
    for (int i = 0; i < l.n; i++) {
        if (!strcmp(l.t[i].name, "attn.k"))
            cr_assert_eq(l.t[i].bytes, 4096LL * 2 * 128 * 2);
        if (!strcmp(l.t[i].name, "act.in"))
            cr_assert_eq(l.t[i].bytes, 4096LL * 2 * 3584 * 2);
    }
}

Test(layer, deps_point_backwards)
{
    for (int sp = 0; sp < 2; sp++)
        for (int p = 0; p < LAYER_PASS_COUNT; p++) {
            layer_shape L = shape(8192, 64, 2048, 1, 8, sp, RECOMPUTE_FULL);
            layer_ops o[3];
            cr_assert_eq(layer_ops_build(&L, (layer_pass)p, &o[0], NULL), TS_OK);
            cr_assert_eq(layer_embedding_ops(&L, (layer_pass)p, &o[1], NULL), TS_OK);
            cr_assert_eq(layer_output_ops(&L, (layer_pass)p, &o[2], NULL), TS_OK);
            for (int k = 0; k < 3; k++)
                for (int i = 0; i < o[k].n; i++)
                    for (int d = 0; d < 2; d++)
                        cr_assert_lt(o[k].op[i].dep[d], i);
        }
}

Test(layer, backward_overlaps_allreduce_with_wgrad)
{
    layer_shape L = shape(6144, 64, 2048, 4, 8, false, RECOMPUTE_NONE);
    layer_ops b;
    cr_assert_eq(layer_ops_build(&L, LAYER_PASS_B, &b, NULL), TS_OK);
    int found = 0;
    for (int i = 0; i < b.n; i++) {
        if (b.op[i].kind != LAYER_OP_COMM)
            continue;
        /* the all-reduce and the following wgrad both wait only for the dgrad */
        cr_assert(strstr(b.op[i + 1].name, "wgrad"), "%s then %s", b.op[i].name, b.op[i + 1].name);
        cr_assert_eq(b.op[i].dep[0], i - 1);
        cr_assert_eq(b.op[i + 1].dep[0], i - 1);
        cr_assert_eq(b.op[i + 2].dep[0] == i || b.op[i + 2].dep[1] == i, 1);
        cr_assert_eq(b.op[i + 1].overlap, i);
        found++;
    }
    cr_assert_eq(found, 2);
}

Test(layer, embedding_and_output)
{
    layer_shape L = shape(12288, 96, 2048, 1, 8, false, RECOMPUTE_FULL);
    double b = 1, s = 2048, h = 12288, V = 51200;
    layer_ops f, bw, i, w, r;
    cr_assert_eq(layer_output_ops(&L, LAYER_PASS_F, &f, NULL), TS_OK);
    cr_assert_eq(layer_output_ops(&L, LAYER_PASS_B, &bw, NULL), TS_OK);
    cr_assert_eq(layer_output_ops(&L, LAYER_PASS_I, &i, NULL), TS_OK);
    cr_assert_eq(layer_output_ops(&L, LAYER_PASS_W, &w, NULL), TS_OK);
    cr_assert_eq(layer_output_ops(&L, LAYER_PASS_R, &r, NULL), TS_OK);
    cr_assert_float_eq(layer_ops_flops(&f), 2 * b * s * h * V / 8, 1);
    cr_assert_float_eq(layer_ops_flops(&bw), 4 * b * s * h * V / 8, 1);
    cr_assert_float_eq(layer_ops_flops(&i) + layer_ops_flops(&w), 4 * b * s * h * V / 8, 1);
    cr_assert_eq(r.n, 0);
    cr_assert_eq(layer_embedding_ops(&L, LAYER_PASS_F, &f, NULL), TS_OK);
    cr_assert_eq(layer_ops_flops(&f), 0.0);
    cr_assert_eq(count_comm(&f, COMM_ALL_REDUCE, (int64_t)(b * s * h * 2)), 1);
    layer_saved_list l;
    cr_assert_eq(layer_output_saved(&L, &l, NULL), TS_OK);
    cr_assert_eq(l.t[2].bytes, (int64_t)(4 * b * s * V / 8)); /* fp32 logits 4sbV/t */
}

Test(layer, bad_shapes_named)
{
    ts_err e;
    layer_shape L = shape(6144, 64, 2048, 4, 3, false, RECOMPUTE_NONE);
    layer_ops o;
    cr_assert_eq(layer_ops_build(&L, LAYER_PASS_F, &o, &e), TS_EINVAL);
    cr_assert(strstr(e.msg, "--tensor-model-parallel-size 3"), "%s", e.msg);
    L = shape(6144, 60, 2048, 4, 1, false, RECOMPUTE_NONE);
    L.h = 6145;
    cr_assert_eq(layer_ops_build(&L, LAYER_PASS_F, &o, &e), TS_EINVAL);
    cr_assert(strstr(e.msg, "--hidden-size"), "%s", e.msg);
    L = shape(6144, 64, 2047, 1, 8, true, RECOMPUTE_NONE);
    cr_assert_eq(layer_ops_build(&L, LAYER_PASS_F, &o, &e), TS_EINVAL);
    cr_assert(strstr(e.msg, "--sequence-parallel"), "%s", e.msg);
}

Test(layer, shape_from_config)
{
    config c;
    memset(&c, 0, sizeof c);
    c.model.num_layers = 32;
    c.model.hidden_size = 4096;
    c.model.num_attention_heads = 32;
    c.model.num_query_groups = 8;
    c.model.ffn_hidden_size = 14336;
    c.model.swiglu = true;
    c.model.seq_length = 8192;
    c.model.padded_vocab_size = 128256;
    c.model.precision = PREC_BF16;
    c.par.micro_batch_size = 2;
    c.par.tp = 4;
    c.par.sequence_parallel = true;
    c.par.recompute = RECOMPUTE_SELECTIVE;
    layer_shape L;
    cr_assert_eq(layer_shape_from_config(&c, &L, NULL), TS_OK);
    cr_assert_eq(L.h, 4096);
    cr_assert_eq(L.g, 8);
    cr_assert(L.swiglu && L.sp);
    cr_assert_eq(L.b, 2);
    cr_assert_eq(L.dtype_bytes, 2);
    cr_assert_eq(L.recompute, RECOMPUTE_SELECTIVE);
    /* SP is a no-op with one TP rank; fp32 uses 4-byte activations */
    c.par.tp = 1;
    c.model.precision = PREC_FP32;
    cr_assert_eq(layer_shape_from_config(&c, &L, NULL), TS_OK);
    cr_assert(!L.sp);
    cr_assert_eq(L.dtype_bytes, 4);
    /* a vocabulary the TP size does not divide is named */
    c.par.tp = 4;
    c.model.padded_vocab_size = 128257;
    ts_err e;
    cr_assert_eq(layer_shape_from_config(&c, &L, &e), TS_EINVAL);
    cr_assert(strstr(e.msg, "--padded-vocab-size 128257"), "%s", e.msg);
}

Test(layer, embedding_saved_and_sp_sharding)
{
    layer_shape L = shape(8192, 64, 2048, 2, 8, false, RECOMPUTE_NONE);
    layer_saved_list l;
    cr_assert_eq(layer_embedding_saved(&L, &l, NULL), TS_OK);
    cr_assert_eq(l.n, 1);
    cr_assert_eq(l.t[0].bytes, 2048LL * 2 * 8192); /* 1-byte dropout mask, sbh */
    L.sp = true;
    cr_assert_eq(layer_embedding_saved(&L, &l, NULL), TS_OK);
    cr_assert_eq(l.t[0].bytes, 2048LL * 2 * 8192 / 8);
    cr_assert_eq(layer_output_saved(&L, &l, NULL), TS_OK);
    cr_assert_eq(l.t[0].bytes, 2048LL * 2 * 8192 * 2 / 8); /* final LN input, sharded */
    for (int i = 0; i < l.n; i++)
        cr_assert(l.t[i].kept_after_f && !l.t[i].by_recompute);
}

/* --attention-dropout 0 drops the s x s mask (1 byte) and the dropped-out scores (2 bytes) Korthikanti's 5as/h term
 * counts; --hidden-dropout 0 the two 1-byte residual masks: sbh(34 + 5as/h) becomes sbh(32 + 2as/h) without both */
Test(layer, dropout_zero_saves_its_masks)
{
    int64_t h = 4096, a = 32, s = 2048, b = 1, sbh = s * b * h, as2b = a * s * s * b;
    layer_shape L = shape(h, a, s, b, 1, false, RECOMPUTE_NONE);
    layer_saved_list l;
    cr_assert_eq(layer_saved_build(&L, &l, NULL), TS_OK);
    cr_expect_eq(layer_saved_kept_bytes(&l), 34 * sbh + 5 * as2b);
    L.no_attn_dropout = true;
    cr_assert_eq(layer_saved_build(&L, &l, NULL), TS_OK);
    cr_expect_eq(layer_saved_kept_bytes(&l), 34 * sbh + 2 * as2b);
    L.no_hidden_dropout = true;
    cr_assert_eq(layer_saved_build(&L, &l, NULL), TS_OK);
    cr_expect_eq(layer_saved_kept_bytes(&l), 32 * sbh + 2 * as2b);
    /* and the kernels go: no attn.dropout op, the residual adds move no mask byte */
    layer_ops o;
    cr_assert_eq(layer_ops_build(&L, LAYER_PASS_F, &o, NULL), TS_OK);
    for (int i = 0; i < o.n; i++) {
        cr_expect_str_neq(o.op[i].name, "attn.dropout");
        if (!strcmp(o.op[i].name, "attn.dropadd"))
            cr_expect_eq(o.op[i].bytes, sbh * 3 * 2);
    }
}

/* ------------------------------------------------ flash attention, recompute modules */

static layer_shape flash_shape(int64_t h, int64_t a, int64_t s, int64_t b, int t, bool sp, config_recompute r)
{
    layer_shape L = shape(h, a, s, b, t, sp, r);
    L.attn = ATTN_BACKEND_FLASH;
    return L;
}

/* The flash closed form, written out here: Korthikanti's 34 sbh (every
 * tensor but the s x s ones) plus the fp32 log-sum-exp, 4 bytes per score
 * row: 4asb. */
static int64_t flash_form(const layer_shape *L)
{
    int64_t s = L->s, b = L->b, h = L->h, a = L->a, t = L->t, sbh = s * b * h, asb = a * s * b;
    if (t == 1)
        return 34 * sbh + 4 * asb; /* sbh(34 + 4a/h) */
    if (L->sp)
        return (34 * sbh + 4 * asb) / t;
    return 10 * sbh + 24 * sbh / t + 4 * asb / t;
}

Test(layer, flash_saved_bytes_equal_closed_form_every_row)
{
    const int tps[] = {1, 2, 4, 8};
    int checked = 0;
    for (size_t m = 0; m < NMODELS; m++)
        for (int ti = 0; ti < 4; ti++)
            for (int sp = 0; sp < 2; sp++)
                for (int64_t b = 1; b <= 4; b *= 2) {
                    if (sp && tps[ti] == 1)
                        continue;
                    for (int fused = 0; fused < 2; fused++) {
                        layer_shape L = flash_shape(MODELS[m].h, MODELS[m].a, 2048, b, tps[ti], sp, RECOMPUTE_NONE);
                        if (fused)
                            L.attn = ATTN_BACKEND_FUSED; /* costed as flash */
                        layer_saved_list l;
                        cr_assert_eq(layer_saved_build(&L, &l, NULL), TS_OK);
                        int64_t got = layer_saved_kept_bytes(&l);
                        cr_assert_eq(got, flash_form(&L), "h %lld t %d sp %d b %lld: %lld != %lld", (long long)L.h, L.t,
                                     sp, (long long)b, (long long)got, (long long)flash_form(&L));
                        cr_assert_eq(got, layer_flash_bytes(&L));
                        /* the unfused layer keeps 5as^2b/t more, less the log-sum-exp */
                        layer_shape U = L;
                        U.attn = ATTN_BACKEND_UNFUSED;
                        cr_assert_eq(layer_korthikanti_bytes(&U) - got,
                                     (5 * L.a * L.s * L.s * L.b - 4 * L.a * L.s * L.b) / L.t);
                        /* selective core_attn drops the log-sum-exp: Korthikanti's selective row */
                        L.recompute = RECOMPUTE_SELECTIVE;
                        cr_assert_eq(layer_saved_build(&L, &l, NULL), TS_OK);
                        cr_assert_eq(layer_saved_kept_bytes(&l), table2(&L));
                        /* full: the layer input only, whatever the kernels */
                        L.recompute = RECOMPUTE_FULL;
                        cr_assert_eq(layer_saved_build(&L, &l, NULL), TS_OK);
                        cr_assert_eq(layer_saved_kept_bytes(&l), table2(&L));
                        checked++;
                    }
                }
    cr_assert_eq(checked, 7 * 7 * 3 * 2); /* models x (t, sp) x b x (flash, fused) */
}

Test(layer, flash_keeps_no_score_tensors_or_ops)
{
    layer_shape L = flash_shape(6144, 64, 8192, 2, 8, true, RECOMPUTE_NONE);
    layer_saved_list l;
    cr_assert_eq(layer_saved_build(&L, &l, NULL), TS_OK);
    int lse = 0;
    for (int i = 0; i < l.n; i++) {
        cr_assert_null(strstr(l.t[i].name, "softmax"), "%s", l.t[i].name);
        cr_assert_null(strstr(l.t[i].name, "dropout"), "%s", l.t[i].name);
        if (!strcmp(l.t[i].name, "attn.lse")) {
            cr_assert_eq(l.t[i].bytes, 4 * 2 * (64 / 8) * 8192); /* fp32 x b x a/t x s */
            lse++;
        }
    }
    cr_assert_eq(lse, 1);
    for (int p = 0; p < LAYER_PASS_COUNT; p++) {
        layer_ops o;
        cr_assert_eq(layer_ops_build(&L, (layer_pass)p, &o, NULL), TS_OK);
        for (int i = 0; i < o.n; i++) {
            cr_assert_null(strstr(o.op[i].name, "attn.softmax"), "%s", o.op[i].name);
            cr_assert_null(strstr(o.op[i].name, "attn.dropout"), "%s", o.op[i].name);
            if (o.op[i].kind == LAYER_OP_MEM) /* no element-wise op touches s x s elements */
                cr_assert_lt(o.op[i].bytes, L.b * (L.a / L.t) * L.s * L.s, "%s", o.op[i].name);
        }
    }
}

Test(layer, flash_flops_causal_half_and_backward_2_5x)
{
    for (size_t m = 0; m < NMODELS; m++) {
        int t = 8;
        layer_shape U = shape(MODELS[m].h, MODELS[m].a, 2048, 2, t, m % 2, RECOMPUTE_SELECTIVE);
        layer_shape L = U;
        L.attn = ATTN_BACKEND_FLASH;
        double b = L.b, s = L.s, h = L.h;
        double gemms = 24 * b * s * h * h / t, attn = 4 * b * s * s * h / t; /* formulas.md, unfused forward */
        layer_ops o[LAYER_PASS_COUNT];
        for (int p = 0; p < LAYER_PASS_COUNT; p++)
            cr_assert_eq(layer_ops_build(&L, (layer_pass)p, &o[p], NULL), TS_OK);
        /* forward: the causal half of QK^T and attention.V */
        cr_assert_float_eq(layer_ops_flops(&o[LAYER_PASS_F]), gemms + attn / 2, gemms * 1e-12);
        /* backward: 2x the GEMMs, 2.5x the flash forward (five GEMMs of its two) */
        cr_assert_float_eq(layer_ops_flops(&o[LAYER_PASS_B]), 2 * gemms + 2.5 * attn / 2, gemms * 1e-12);
        cr_assert_float_eq(layer_ops_flops(&o[LAYER_PASS_I]) + layer_ops_flops(&o[LAYER_PASS_W]),
                           layer_ops_flops(&o[LAYER_PASS_B]), gemms * 1e-12);
        cr_assert_float_eq(layer_ops_flops(&o[LAYER_PASS_W]), gemms, gemms * 1e-12);
        /* selective core_attn re-runs the flash forward */
        cr_assert_float_eq(layer_ops_flops(&o[LAYER_PASS_R]), attn / 2, gemms * 1e-12);
        /* against unfused: forward attn/2 less, backward 0.75 attn less */
        layer_ops uf, ub;
        cr_assert_eq(layer_ops_build(&U, LAYER_PASS_F, &uf, NULL), TS_OK);
        cr_assert_eq(layer_ops_build(&U, LAYER_PASS_B, &ub, NULL), TS_OK);
        cr_assert_float_eq(layer_ops_flops(&uf) - layer_ops_flops(&o[LAYER_PASS_F]), attn / 2, gemms * 1e-12);
        cr_assert_float_eq(layer_ops_flops(&ub) - layer_ops_flops(&o[LAYER_PASS_B]), 0.75 * attn, gemms * 1e-12);
    }
}

Test(layer, selective_modules_memory_and_ops)
{
    for (int fl = 0; fl < 2; fl++)
        for (int sp = 0; sp < 2; sp++) {
            int t = 4;
            layer_shape N = shape(6144, 64, 2048, 2, t, sp, RECOMPUTE_NONE);
            N.attn = fl ? ATTN_BACKEND_FLASH : ATTN_BACKEND_UNFUSED;
            int64_t sbh = N.s * N.b * N.h, norm = sp ? 2 * sbh / t : 2 * sbh; /* a norm's output */
            int64_t none = fl ? flash_form(&N) : table2(&N);
            int64_t core = fl ? 4 * N.a * N.s * N.b / t : 5 * N.a * N.s * N.s * N.b / t;
            layer_shape L = N;
            L.recompute = RECOMPUTE_SELECTIVE;
            layer_saved_list l;
            layer_ops o;
            double gemms = 24.0 * N.b * N.s * N.h * N.h / t;
            /* mlp: FC1's output (4h columns) and GeLU's output, 8sbh/t each, recomputed by FC1 and FC2 */
            L.rc_modules = CONFIG_RC_MLP;
            cr_assert_eq(layer_saved_build(&L, &l, NULL), TS_OK);
            cr_assert_eq(layer_saved_kept_bytes(&l), none - 16 * sbh / t);
            cr_assert_eq(layer_ops_build(&L, LAYER_PASS_R, &o, NULL), TS_OK);
            cr_assert_float_eq(layer_ops_flops(&o), gemms * 16 / 24, gemms * 1e-12); /* FC1 + FC2 */
            cr_assert_eq(layer_ops_comm_bytes(&o, sp ? COMM_REDUCE_SCATTER : COMM_ALL_REDUCE),
                         N.s * N.b * N.h * 2); /* FC2's reduction re-run with the module */
            /* layernorm: the two norms' outputs, no GEMM */
            L.rc_modules = CONFIG_RC_LAYERNORM;
            cr_assert_eq(layer_saved_build(&L, &l, NULL), TS_OK);
            cr_assert_eq(layer_saved_kept_bytes(&l), none - 2 * norm);
            cr_assert_eq(layer_ops_build(&L, LAYER_PASS_R, &o, NULL), TS_OK);
            cr_assert_eq(o.n, 2);
            cr_assert_float_eq(layer_ops_flops(&o), 0, 1e-9);
            /* all three */
            L.rc_modules = CONFIG_RC_CORE_ATTN | CONFIG_RC_MLP | CONFIG_RC_LAYERNORM;
            cr_assert_eq(layer_saved_build(&L, &l, NULL), TS_OK);
            cr_assert_eq(layer_saved_kept_bytes(&l), none - core - 16 * sbh / t - 2 * norm);
            if (fl && sp) /* flash + SP: 14 sbh / t (34 - 16 - 4) */
                cr_assert_eq(layer_saved_kept_bytes(&l), 14 * sbh / t);
            /* default (0) is core_attn */
            L.rc_modules = 0;
            cr_assert_eq(layer_saved_build(&L, &l, NULL), TS_OK);
            cr_assert_eq(layer_saved_kept_bytes(&l), none - core);
            /* every tensor is kept or re-created, never both */
            for (int i = 0; i < l.n; i++)
                cr_assert(l.t[i].kept_after_f != l.t[i].by_recompute, "%s", l.t[i].name);
        }
    layer_shape B = shape(6144, 64, 2048, 2, 4, false, RECOMPUTE_SELECTIVE);
    B.rc_modules = CONFIG_RC_SHARED_EXPERTS;
    layer_saved_list l;
    ts_err e;
    cr_assert_eq(layer_saved_build(&B, &l, &e), TS_EINVAL);
    cr_assert(strstr(e.msg, "shared_experts is not"), "%s", e.msg);
    B.rc_modules = CONFIG_RC_MLA_UP_PROJ; /* without multi-latent attention */
    cr_assert_eq(layer_saved_build(&B, &l, &e), TS_EINVAL);
    B.rc_modules = 0;
    B.attn = ATTN_BACKEND_AUTO;
    cr_assert_eq(layer_saved_build(&B, &l, &e), TS_EINVAL);
    cr_assert(strstr(e.msg, "auto is resolved by config_resolve"), "%s", e.msg);
}

/* Llama-3-8B at seq 8192, its preset layout (t 2, SP, micro-batch 1), no
 * recomputation: per layer, in MiB (T = 8192 tokens, T/2 = 4096 on a rank
 * with SP; a/t = 16 heads, g/t = 4 groups of 128; FFN 14336 per gate):
 *   ln1.in, qkv.in, ln2.in, fc1.in  4 x 4096 x 4096 x 2       = 4 x 32
 *   q 8192 x 16 x 128 x 2 = 32; k, v 8192 x 4 x 128 x 2       = 32 + 2 x 8
 *   proj.in 8192 x 2048 x 2                                   = 32
 *   act.in 8192 x 14336 x 2 (gate and up, of 7168 each)       = 224
 *   fc2.in 8192 x 7168 x 2                                    = 112
 *   two dropout masks 4096 x 4096 x 1                         = 2 x 16
 *   flash: log-sum-exp 16 x 8192 x 4                          = 0.5
 * = 576.5 MiB; 32 layers: 18.02 GiB. Unfused adds the scores: softmax
 * output, dropout mask and output, 16 x 8192^2 x (2 + 1 + 2) = 5 GiB a
 * layer (160 GiB), less the log-sum-exp: 178.0 GiB. */
Test(layer, llama3_8b_seq8192_activations_drop_with_flash)
{
    layer_shape L = {.h = 4096,
                     .a = 32,
                     .g = 8,
                     .ffn = 14336,
                     .swiglu = true,
                     .s = 8192,
                     .b = 1,
                     .V = 128256,
                     .t = 2,
                     .sp = true,
                     .dtype_bytes = 2,
                     .recompute = RECOMPUTE_NONE,
                     .attn = ATTN_BACKEND_FLASH};
    const int64_t MiB = 1 << 20, layers = 32;
    layer_saved_list l;
    cr_assert_eq(layer_saved_build(&L, &l, NULL), TS_OK);
    int64_t flash = layer_saved_kept_bytes(&l);
    cr_assert_eq(flash * 2, 1153 * MiB, "%lld", (long long)flash); /* 576.5 MiB */
    L.attn = ATTN_BACKEND_UNFUSED;
    cr_assert_eq(layer_saved_build(&L, &l, NULL), TS_OK);
    int64_t unfused = layer_saved_kept_bytes(&l);
    cr_assert_eq(unfused, 576 * MiB + 5 * 1024 * MiB, "%lld", (long long)unfused);
    double gib = 1024.0 * MiB;
    cr_assert_float_eq(layers * flash / gib, 18.015625, 1e-9);
    cr_assert_float_eq(layers * unfused / gib, 178.0, 1e-9);
}
