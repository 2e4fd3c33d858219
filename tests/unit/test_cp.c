/* Tests for context parallelism (cp.h and layer.c's CP ops): per-rank
 * attention FLOPs against the causal closed form, K,V bytes per ring step
 * with grouped-query attention, activation memory against cp = 1, the
 * exchange's ops per comm type, all-to-all's cost, and a property: more cp
 * never increases a rank's activations. */
#include <criterion/criterion.h>
#include <string.h>

#include "sim/model/commcost.h"
#include "sim/model/cp.h"
#include "sim/model/layer.h"

/* Llama 3 405B's layer (Dubey et al. 2024 Table 3: h 16384, 128 heads, 8
 * KV heads, FFN 53248) at seq S over cp ranks, t 8, flash attention. */
static layer_shape llama(int64_t S, int cp, int ca, bool gather, int t, bool sp)
{
    layer_shape L;
    memset(&L, 0, sizeof L);
    L.h = 16384;
    L.a = 128;
    L.g = 8;
    L.d = 128;
    L.no_attn_dropout = L.no_hidden_dropout = true;
    L.ffn = 53248;
    L.swiglu = true;
    L.s = S / cp;
    L.b = 1;
    L.V = 128256;
    L.t = t;
    L.sp = sp;
    L.dtype_bytes = 2;
    L.recompute = RECOMPUTE_NONE;
    L.attn = ATTN_BACKEND_FLASH;
    if (cp > 1) {
        L.cp = cp;
        L.cp_a2a = ca;
        L.cp_ring = cp / ca;
        L.cp_gather = gather;
    }
    return L;
}

static double attn_flops(const layer_ops *o)
{
    double f = 0;
    for (int i = 0; i < o->n; i++)
        if (!strncmp(o->op[i].name, "attn.flash", 10) && o->op[i].kind == LAYER_OP_GEMM)
            f += o->op[i].flops;
    return f;
}

static const layer_op *find(const layer_ops *o, const char *name)
{
    for (int i = 0; i < o->n; i++)
        if (!strcmp(o->op[i].name, name))
            return &o->op[i];
    return NULL;
}

Test(cp, attention_flops_per_rank_are_one_cp_th_of_the_causal_total)
{
    const int64_t S = 131072;
    /* the causal flash forward of the whole sequence, written out: two GEMMs
     * of S x S/2 x d per head, heads a/t: 2 * 2 S (S/2) d a/t */
    const double d = 128, at = 128.0 / 8;
    double total_f = 2.0 * 2.0 * S * (S / 2.0) * d * at;
    layer_shape one = llama(S, 1, 1, false, 8, true);
    layer_ops o;
    cr_assert_eq(layer_ops_build(&one, LAYER_PASS_F, &o, NULL), TS_OK);
    cr_assert_float_eq(attn_flops(&o), total_f, total_f * 1e-12);
    int checked = 0;
    for (int cp = 2; cp <= 16; cp *= 2)
        for (int kind = 0; kind < 4; kind++) {
            int ca = kind == 2 ? 2 : kind == 3 ? cp : 1; /* p2p, all_gather, a2a+p2p (2 x cp/2), a2a */
            layer_shape L = llama(S, cp, ca, kind == 1, 8, true);
            if ((L.a / L.t) % ca || (L.g / L.t) % ca) /* 8 query groups over t 8: one per rank */
                L.g = 128;                            /* no GQA for the head-split kinds */
            layer_ops f, b;
            cr_assert_eq(layer_ops_build(&L, LAYER_PASS_F, &f, NULL), TS_OK, "cp %d kind %d", cp, kind);
            cr_assert_eq(layer_ops_build(&L, LAYER_PASS_B, &b, NULL), TS_OK);
            cr_assert_float_eq(attn_flops(&f), total_f / cp, total_f * 1e-12, "cp %d kind %d: %g != %g", cp, kind,
                               attn_flops(&f), total_f / cp);
            cr_assert_float_eq(attn_flops(&b), 2.5 * total_f / cp, total_f * 1e-12);
            cr_assert_float_eq(cp_attn_flops(&L, false), total_f / cp, total_f * 1e-12);
            /* the other GEMMs run on s/cp tokens: QKV is T x qkv_n x h with T = S/cp */
            const layer_op *q = find(&f, "qkv");
            cr_assert_not_null(q);
            cr_assert_eq(q->m, S / cp);
            checked++;
        }
    cr_assert_geq(checked, 14);
}

Test(cp, kv_bytes_per_ring_step_with_gqa)
{
    /* 2 (K and V) x s/cp x b x g/t x d x 2 bytes: 405B at 128K, t 8, cp 16:
     * 2 x 8192 x 1 x 1 x 128 x 2 = 4 MiB per step, forward */
    layer_shape L = llama(131072, 16, 1, false, 8, true);
    cr_assert_eq(cp_kv_block_bytes(&L), 4194304);
    layer_ops f, b;
    cr_assert_eq(layer_ops_build(&L, LAYER_PASS_F, &f, NULL), TS_OK);
    cr_assert_eq(layer_ops_build(&L, LAYER_PASS_B, &b, NULL), TS_OK);
    const layer_op *first = find(&f, "cp.kv.p2p"), *ring = find(&f, "cp.kv.ring");
    cr_assert_not_null(first);
    cr_assert_not_null(ring);
    cr_assert_eq(first->coll, COMM_P2P);
    cr_assert_eq(first->bytes, 4194304);
    cr_assert_eq(ring->bytes, 14 * 4194304); /* cp-2 later steps */
    cr_assert_eq(first->stride, 8);          /* CP neighbours are t ranks apart */
    cr_assert_eq(first->span, 16);
    /* the backward passes K,V and dK,dV: twice the bytes */
    cr_assert_eq(find(&b, "cp.kv.p2p.bwd")->bytes, 2 * 4194304);
    cr_assert_eq(find(&b, "cp.kv.ring.bwd")->bytes, 2 * 14 * 4194304);
    /* the attention's first blocks run alongside the ring, the last waits for it */
    const layer_op *g = find(&f, "attn.flash.cp"), *last = find(&f, "attn.flash.cp.last");
    cr_assert_not_null(g);
    cr_assert_eq(f.op[g->overlap].bytes, ring->bytes);
    cr_assert(last->dep[1] >= 0 && f.op[last->dep[1]].bytes == ring->bytes);
    /* without GQA (g = a) the block is 16 times larger */
    L.g = 128;
    cr_assert_eq(cp_kv_block_bytes(&L), 16 * 4194304);
}

Test(cp, all_gather_and_a2a_volumes)
{
    layer_shape L = llama(131072, 4, 1, true, 8, true);
    layer_ops f, b;
    cr_assert_eq(layer_ops_build(&L, LAYER_PASS_F, &f, NULL), TS_OK);
    cr_assert_eq(layer_ops_build(&L, LAYER_PASS_B, &b, NULL), TS_OK);
    int64_t kv = 2 * (131072 / 4) * 1 * 128 * 2;
    cr_assert_eq(find(&f, "cp.kv.ag")->coll, COMM_ALL_GATHER);
    cr_assert_eq(find(&f, "cp.kv.ag")->bytes, 4 * kv); /* the gathered output */
    cr_assert_eq(find(&b, "cp.dkv.rs")->coll, COMM_REDUCE_SCATTER);
    cr_assert_eq(find(&b, "cp.dkv.rs")->bytes, 4 * kv);
    cr_assert_null(find(&f, "cp.kv.p2p"));
    /* a2a: q,k,v of the rank's tokens before, the output after */
    layer_shape U = llama(131072, 4, 4, false, 8, true);
    U.g = 128;
    cr_assert_eq(layer_ops_build(&U, LAYER_PASS_F, &f, NULL), TS_OK);
    int64_t T = 131072 / 4, d = 128;
    cr_assert_eq(find(&f, "cp.a2a.qkv")->coll, COMM_ALL_TO_ALL);
    cr_assert_eq(find(&f, "cp.a2a.qkv")->bytes, T * (16 + 2 * 16) * d * 2);
    cr_assert_eq(find(&f, "cp.a2a.out")->bytes, T * 16 * d * 2);
    cr_assert_eq(find(&f, "cp.a2a.qkv")->group, 4);
    cr_assert_null(find(&f, "cp.kv.p2p"));
    /* a head-split the query groups do not allow is refused */
    U.g = 8;
    ts_err e;
    err_clear(&e);
    cr_assert_eq(layer_ops_build(&U, LAYER_PASS_F, &f, &e), TS_EINVAL);
    cr_assert(strstr(e.msg, "all-to-all size 4"), "%s", e.msg);
}

Test(cp, activations_divide_by_cp)
{
    /* flash keeps no s x s term: every saved tensor is linear in the tokens,
     * so cp ranks keep exactly 1/cp each */
    const config_recompute rs[] = {RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL};
    for (int ri = 0; ri < 3; ri++) {
        layer_shape one = llama(32768, 1, 1, false, 8, true);
        one.recompute = rs[ri];
        layer_saved_list l;
        cr_assert_eq(layer_saved_build(&one, &l, NULL), TS_OK);
        int64_t base = layer_saved_kept_bytes(&l);
        cr_assert_gt(base, 0);
        for (int cp = 2; cp <= 4; cp *= 2) {
            layer_shape L = llama(32768, cp, 1, false, 8, true);
            L.recompute = rs[ri];
            cr_assert_eq(layer_saved_build(&L, &l, NULL), TS_OK);
            cr_assert_eq(layer_saved_kept_bytes(&l) * cp, base, "recompute %d cp %d", ri, cp);
        }
    }
}

Test(cp, more_cp_never_increases_activations)
{
    const int64_t seqs[] = {8192, 32768, 131072};
    for (size_t si = 0; si < 3; si++)
        for (int t = 1; t <= 8; t *= 2)
            for (int kind = 0; kind < 2; kind++) {
                int64_t prev = INT64_MAX, prev_tr = 0;
                for (int cp = 1; cp <= 32; cp *= 2) {
                    layer_shape L = llama(seqs[si], cp, 1, kind == 1, t, t > 1);
                    layer_saved_list l;
                    cr_assert_eq(layer_saved_build(&L, &l, NULL), TS_OK);
                    int64_t kept = layer_saved_kept_bytes(&l);
                    cr_assert_leq(kept, prev, "seq %lld t %d cp %d", (long long)seqs[si], t, cp);
                    /* the transient buffers: p2p two blocks (K,V and dK,dV), halving as cp
                     * doubles; all_gather the whole sequence's K,V and dK,dV, the same at every cp */
                    int64_t tr = cp_transient_bytes(&L, true);
                    if (cp == 1)
                        cr_assert_eq(tr, 0);
                    else if (kind == 0)
                        cr_assert_eq(tr, 2 * 2 * cp_kv_block_bytes(&L));
                    else
                        cr_assert_eq(tr, 2 * (int64_t)cp * cp_kv_block_bytes(&L));
                    if (cp > 2)
                        cr_assert_eq(kind == 0 ? tr * 2 : tr, prev_tr, "seq %lld t %d cp %d", (long long)seqs[si], t,
                                     cp);
                    prev = kept;
                    prev_tr = tr;
                }
            }
}

Test(cp, all_to_all_cost_is_n_minus_one_p2p_sends)
{
    commcost_params p;
    memset(&p, 0, sizeof p);
    p.nvlink_p2p_gbps = 100; /* bytes per ns */
    p.nvlink_alpha_ns = 1000;
    p.nic_gbps_per_gpu = 25;
    p.nic_alpha_ns = 5000;
    p.model = COMMCOST_ALPHA_BETA;
    commcost_group in = {4, 4}, across = {4, 1};
    int64_t S = 4000000;
    /* (n-1) x (alpha + S/n / beta) */
    cr_assert_eq(commcost_ns(&p, COMM_ALL_TO_ALL, S, &in), 3 * (1000 + 10000));
    cr_assert_eq(commcost_ns(&p, COMM_ALL_TO_ALL, S, &across), 3 * (5000 + 40000));
    cr_assert_str_eq(commcost_coll_name(COMM_ALL_TO_ALL), "all-to-all");
    cr_assert_float_eq(commcost_wire_bytes(COMM_ALL_TO_ALL, S, 4), 3000000.0, 1e-6);
    commcost_group one = {1, 1};
    cr_assert_eq(commcost_ns(&p, COMM_ALL_TO_ALL, S, &one), 0);
}
