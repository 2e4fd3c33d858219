/* moe: parameter counts against published totals and hand-computed closed
 * forms, the dispatcher's all-to-all volume, EP group placement, and the
 * busiest rank's load under skew and capacity. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "sim/model/flops.h"
#include "sim/model/moe.h"
#include "tests/unit/gpu_specs.h"

/* A bias-free RMSNorm SwiGLU model with untied rotary embeddings. */
static model_config shape(int layers, int h, int heads, int groups, int d, int ffn, int vocab)
{
    model_config m;
    memset(&m, 0, sizeof m);
    m.num_layers = layers;
    m.hidden_size = h;
    m.num_attention_heads = heads;
    m.num_query_groups = groups;
    m.kv_channels = d;
    m.ffn_hidden_size = ffn;
    m.swiglu = true;
    m.seq_length = 4096;
    m.padded_vocab_size = vocab;
    m.untie_embeddings = true;
    m.normalization = NORM_RMSNORM;
    m.position_embedding = POS_ROPE;
    return m;
}

static moe_config experts(int n, int topk, int ffn)
{
    moe_config e;
    memset(&e, 0, sizeof e);
    e.num_experts = n;
    e.topk = topk;
    e.ffn_hidden_size = ffn;
    e.layer_freq = 1;
    e.ep = e.etp = e.edp = 1;
    return e;
}

/* Mixtral 8x7B (Mistral AI's config.json): 46.7B total, 12.9B active (its
 * announcement). By hand: attention 4096(4096 + 2 x 8 x 128) + 4096^2 =
 * 41 943 040, norms 8192, router 32 768, expert 3 x 4096 x 14336 =
 * 176 160 768; outside the layers 2 x 32000 x 4096 + 4096. */
Test(moe, mixtral_8x7b_params)
{
    model_config m = shape(32, 4096, 32, 8, 128, 14336, 32000);
    moe_config e = experts(8, 2, 14336);
    moe_params p;
    moe_param_count(&m, &e, &p);
    cr_expect_eq(p.attention, 41943040);
    cr_expect_eq(p.expert, 176160768);
    cr_expect_eq(p.router, 32768);
    cr_expect_eq(p.moe_layers, 32);
    int64_t layer = 41943040 + 8192 + 32768, outside = 2LL * 32000 * 4096 + 4096;
    cr_expect_eq(p.total, 32 * (layer + 8 * 176160768LL) + outside);
    cr_expect_eq(p.active, 32 * (layer + 2 * 176160768LL) + outside);
    cr_expect_eq(p.expert_total, 32 * 8 * 176160768LL);
    cr_expect(fabs(p.total / 46.7e9 - 1) < 0.002, "total %lld", (long long)p.total);
    cr_expect(fabs(p.active / 12.9e9 - 1) < 0.002, "active %lld", (long long)p.active);
}

/* DeepSeek-V3 (its config.json: 61 layers, the first 3 dense of FFN 18432,
 * 256 routed experts of 2048 + 1 shared, top-8, MLA q_lora 1536, kv_lora
 * 512, d_qk 128, d_rope 64, d_v 128, 128 heads, vocabulary 129280): 671B
 * total, 37B activated (DeepSeek-V3 technical report, without the MTP
 * module). MLA by hand: q 7168 x 1536 + 1536 + 1536 x 128 x 192, kv 7168 x
 * 576 + 512 + 512 x 128 x 256, output 128 x 128 x 7168. */
Test(moe, deepseek_v3_params)
{
    model_config m = shape(61, 7168, 128, 128, 128, 18432, 129280);
    moe_config e = experts(256, 8, 2048);
    e.shared_ffn_hidden_size = 2048;
    e.first_dense_layers = 3;
    e.mla = true;
    e.mla_q_lora_rank = 1536;
    e.mla_kv_lora_rank = 512;
    e.mla_qk_head_dim = 128;
    e.mla_qk_pos_emb_head_dim = 64;
    e.mla_v_head_dim = 128;
    moe_params p;
    moe_param_count(&m, &e, &p);
    int64_t q = 7168LL * 1536 + 1536 + 1536LL * 128 * 192, kv = 7168LL * 576 + 512 + 512LL * 128 * 256;
    cr_expect_eq(p.attention, q + kv + 128LL * 128 * 7168);
    cr_expect_eq(p.moe_layers, 58);
    cr_expect_eq(p.expert, 3LL * 7168 * 2048);
    cr_expect_eq(p.shared, 3LL * 7168 * 2048);
    cr_log_info("deepseek-v3: total %lld, active %lld", (long long)p.total, (long long)p.active);
    cr_expect(fabs(p.total / 671e9 - 1) < 0.005, "total %lld", (long long)p.total);
    cr_expect(fabs(p.active / 37e9 - 1) < 0.02, "active %lld", (long long)p.active);
    cr_expect_gt(p.total, 17 * p.active); /* under 6% of the parameters are active */
}

/* Qwen3-235B-A22B (its config.json: 94 layers, h 4096, 64 heads of 128, 4
 * KV groups, q_norm and k_norm over the head size, 128 experts of 1536,
 * top-8, vocabulary 151936, untied): 235B total, 22B activated (the name;
 * Qwen3 technical report). */
Test(moe, qwen3_235b_params)
{
    model_config m = shape(94, 4096, 64, 4, 128, 12288, 151936);
    m.qk_layernorm = true;
    moe_config e = experts(128, 8, 1536);
    moe_params p;
    moe_param_count(&m, &e, &p);
    cr_expect_eq(p.attention, 4096LL * (8192 + 1024) + 8192LL * 4096 + 2 * 128); /* + the q and k norms */
    cr_expect_eq(p.total, 235093634560LL);                                       /* docs/moe.md */
    cr_expect_eq(p.active, 22190763520LL);
    cr_expect(fabs(p.total / 235e9 - 1) < 0.005, "total %lld", (long long)p.total);
    cr_expect(fabs(p.active / 22e9 - 1) < 0.015, "active %lld", (long long)p.active);
}

Test(moe, dense_model_matches_flops_param_count)
{
    model_config m = shape(24, 2048, 16, 16, 0, 5504, 50304);
    m.add_bias_linear = true;
    m.normalization = NORM_LAYERNORM;
    moe_config e = experts(0, 2, 0);
    moe_params p;
    flops_params fp;
    moe_param_count(&m, &e, &p);
    flops_param_count(&m, &fp);
    cr_expect_eq(p.total, fp.total);
    cr_expect_eq(p.active, fp.total);
    cr_expect_eq(p.moe_layers, 0);
    /* E experts of the dense FFN, top-1: the same active count, E x the MLPs in total */
    e = experts(4, 1, 0);
    moe_param_count(&m, &e, &p);
    cr_expect_eq(p.active, fp.total + 24LL * 2048 * 4);
    cr_expect_eq(p.total - p.active, 24LL * 3 * p.dense_mlp);
}

Test(moe, layer_freq)
{
    moe_config e = experts(8, 2, 0);
    e.layer_freq = 2;
    cr_expect(moe_layer_is_moe(&e, 0) && !moe_layer_is_moe(&e, 1) && moe_layer_is_moe(&e, 2));
    e.layer_freq = 1;
    e.first_dense_layers = 3;
    cr_expect(!moe_layer_is_moe(&e, 2) && moe_layer_is_moe(&e, 3) && moe_layer_is_moe(&e, 60));
    e.num_experts = 0;
    cr_expect(!moe_layer_is_moe(&e, 5));
}

/* Forward flops per token of the block: router 2hE + k x 2 x 3 h f_e +
 * 2 x 3 h f_s; twice the active MoE-block parameters plus nothing else. */
Test(moe, block_flops_per_token)
{
    model_config m = shape(32, 4096, 32, 8, 128, 14336, 32000);
    moe_config e = experts(8, 2, 14336);
    cr_expect_float_eq(moe_block_fwd_flops_per_token(&m, &e), 2.0 * 4096 * 8 + 2.0 * 2 * 3 * 4096 * 14336, 1e-3);
    e.shared_ffn_hidden_size = 1024;
    cr_expect_float_eq(moe_block_fwd_flops_per_token(&m, &e),
                       2.0 * 4096 * 8 + 2.0 * 2 * 3 * 4096 * 14336 + 2.0 * 3 * 4096 * 1024, 1e-3);
    moe_params p;
    e.shared_ffn_hidden_size = 0;
    moe_param_count(&m, &e, &p);
    cr_expect_float_eq(moe_block_fwd_flops_per_token(&m, &e), 2.0 * (p.router + 2 * p.expert), 1e-3);
}

/* tokens x topk x h x bytes x (ep - 1) / ep */
Test(moe, a2a_volume)
{
    cr_expect_eq(moe_a2a_send_bytes(4096, 8, 7168, 2, 8), 4096LL * 8 * 7168 * 2 * 7 / 8);
    cr_expect_eq(moe_a2a_send_bytes(4096, 2, 4096, 2, 1), 0);
    cr_expect_eq(moe_a2a_send_bytes(3, 1, 1, 1, 2), 1);                                  /* floor(3/2) */
    cr_expect_eq(moe_a2a_send_bytes(4096, 8, 7168, 1, 64), 4096LL * 8 * 7168 * 63 / 64); /* FP8 dispatch */
    cr_expect_lt(moe_a2a_send_bytes(4096, 8, 7168, 2, 8), moe_a2a_send_bytes(4096, 8, 7168, 2, 64));
}

Test(moe, ep_group_nodes)
{
    cr_expect_eq(moe_ep_group_nodes(1, 8, 8), 1);
    cr_expect_eq(moe_ep_group_nodes(2, 4, 8), 1);
    cr_expect_eq(moe_ep_group_nodes(1, 64, 8), 8);
    cr_expect_eq(moe_ep_group_nodes(2, 8, 8), 2);
    cr_expect_eq(moe_ep_group_nodes(1, 64, 72), 1); /* a GB200 NVL72 rack */
}

Test(moe, balanced_load_is_one_and_skew_never_lowers_it)
{
    double even[8] = {10, 10, 10, 10, 10, 10, 10, 10}, dropped = -1;
    cr_expect_float_eq(moe_rank_load_factor(even, 8, 4, 0, &dropped), 1.0, 1e-12);
    cr_expect_float_eq(dropped, 0.0, 1e-12);
    double prev = 1.0;
    for (int s = 1; s <= 8; s++) { /* move s tokens from the last expert to the first, more each time */
        double l[8] = {10, 10, 10, 10, 10, 10, 10, 10};
        l[0] += s;
        l[7] -= s;
        double f = moe_rank_load_factor(l, 8, 4, 0, NULL);
        cr_expect_float_eq(f, (20.0 + s) / 20.0, 1e-12); /* the busiest rank: experts 0 and 1 */
        cr_expect_geq(f, prev);
        prev = f;
    }
    /* skew inside one rank costs nothing at that EP */
    double inside[8] = {15, 5, 10, 10, 10, 10, 10, 10};
    cr_expect_float_eq(moe_rank_load_factor(inside, 8, 4, 0, NULL), 1.0, 1e-12);
    cr_expect_float_eq(moe_rank_load_factor(inside, 8, 8, 0, NULL), 1.5, 1e-12);
}

/* Capacity 1.0 x mean = 10: expert 0's 30 tokens are cut to 10 (20 dropped). */
Test(moe, capacity_caps_and_counts_drops)
{
    double l[4] = {30, 10, 0, 0}, dropped = 0;
    cr_expect_float_eq(moe_rank_load_factor(l, 4, 4, 0, &dropped), 3.0, 1e-12);
    cr_expect_float_eq(dropped, 0.0, 1e-12);
    double f = moe_rank_load_factor(l, 4, 4, 1.0, &dropped);
    cr_expect_float_eq(dropped, 20.0, 1e-12);
    cr_expect_float_eq(f, 2.0, 1e-12); /* kept 10, 10, 0, 0: max 10 over mean 5 */
    cr_expect_float_eq(moe_rank_load_factor(l, 4, 4, 1.25, &dropped), 13.0 / (23.0 / 4), 1e-12); /* kept 13, 10, 0, 0 */
    cr_expect_float_eq(dropped, 17.0, 1e-12); /* capacity ceil(12.5) = 13 */
}

/* All-to-all time against its closed form, on hand-set alpha-beta params:
 * inside a node only NVLink carries it; across nodes the NIC share does
 * (it is the slower), and more ranks per node move bytes off the NICs. */
Test(moe, a2a_time_closed_form)
{
    commcost_params p;
    memset(&p, 0, sizeof p);
    p.model = COMMCOST_ALPHA_BETA;
    p.nvlink_busbw_gbps = 360;
    p.nvlink_alpha_ns = 5000;
    p.nic_gbps_per_gpu = 47;
    p.nic_alpha_ns = 10000;
    int64_t S = 1LL << 30;
    commcost_group g1 = {8, 8}, g8 = {64, 8}, g4 = {64, 4}, one = {1, 1};
    cr_expect_eq(moe_a2a_ns(&p, S, &g1), llround(5000 + (double)S / 360));
    cr_expect_eq(moe_a2a_ns(&p, S, &g8), llround(10000 + (double)S * 56 / 63 / 47));
    cr_expect_eq(moe_a2a_ns(&p, S, &g4), llround(10000 + (double)S * 60 / 63 / 47));
    cr_expect_lt(moe_a2a_ns(&p, S, &g8), moe_a2a_ns(&p, S, &g4));
    cr_expect_gt(moe_a2a_ns(&p, S, &g8), 5 * moe_a2a_ns(&p, S, &g1)); /* the NIC share is ~8x below NVLink */
    cr_expect_eq(moe_a2a_ns(&p, S, &one), 0);
    cr_expect_eq(moe_a2a_ns(&p, 0, &g8), 0);
}

/* skew 0 is forced balance exactly; more skew never lowers the busiest
 * rank's load (DeepSeek-V3's 256 experts over ep 8, 16, 64); the loads sum
 * to the routed tokens; the same seed gives the same loads. */
Test(moe, zipf_skew_model)
{
    double l[256], l2[256];
    moe_expert_loads_zipf(256, 4096.0 * 8, 0, 7, l);
    for (int i = 0; i < 256; i++)
        cr_expect_float_eq(l[i], 128.0, 1e-12);
    cr_expect_float_eq(moe_rank_load_factor(l, 256, 8, 0, NULL), 1.0, 1e-12);
    int eps[3] = {8, 16, 64};
    for (int e = 0; e < 3; e++) {
        double prev = 1.0;
        for (int s = 1; s <= 12; s++) {
            moe_expert_loads_zipf(256, 4096.0 * 8, 0.1 * s, 1, l);
            double sum = 0;
            for (int i = 0; i < 256; i++)
                sum += l[i];
            cr_expect_float_eq(sum, 4096.0 * 8, 1e-6);
            double f = moe_rank_load_factor(l, 256, eps[e], 0, NULL);
            cr_expect_geq(f, prev - 1e-12, "ep %d skew %.1f: %.6f < %.6f", eps[e], 0.1 * s, f, prev);
            cr_expect_gt(f, 1.0);
            prev = f;
        }
    }
    moe_expert_loads_zipf(256, 1000, 0.8, 42, l);
    moe_expert_loads_zipf(256, 1000, 0.8, 42, l2);
    cr_expect_arr_eq(l, l2, sizeof l);
    moe_expert_loads_zipf(256, 1000, 0.8, 43, l2);
    cr_expect_arr_neq(l, l2, sizeof l);
    /* finer EP sees more of the skew: one expert per rank at ep 256 */
    cr_expect_gt(moe_rank_load_factor(l, 256, 256, 0, NULL), moe_rank_load_factor(l, 256, 8, 0, NULL));
}

/* The figures docs/moe.md gives: DeepSeek-V3's 256 experts, 32768 routed
 * tokens, seed 1. */
Test(moe, zipf_figures)
{
    static const double skew[4] = {0.18, 0.3, 0.6, 1.0};
    static const double want[4][5] = {{1.034, 1.105, 1.371, 1.245, 2.33},
                                      {1.070, 1.206, 1.788, 1.344, 7.0},
                                      {1.235, 1.607, 3.966, 1.633, 23.5},
                                      {1.907, 3.192, 11.281, 2.457, 50.65}};
    double l[256], dropped;
    for (int s = 0; s < 4; s++) {
        moe_expert_loads_zipf(256, 32768, skew[s], 1, l);
        cr_expect(fabs(moe_rank_load_factor(l, 256, 8, 0, NULL) - want[s][0]) < 1e-3);
        cr_expect(fabs(moe_rank_load_factor(l, 256, 16, 0, NULL) - want[s][1]) < 1e-3);
        cr_expect(fabs(moe_rank_load_factor(l, 256, 64, 0, NULL) - want[s][2]) < 1e-3);
        cr_expect(fabs(moe_rank_load_factor(l, 256, 64, 1.25, &dropped) - want[s][3]) < 1e-3);
        cr_expect(fabs(100 * dropped / 32768 - want[s][4]) < 0.1, "skew %g dropped %.4f%%", skew[s],
                  100 * dropped / 32768);
    }
}

/* ---------------------------------------------------- MoE block ops */

static layer_shape moe_shape(int64_t h, int64_t ffn, int64_t s, int64_t b)
{
    layer_shape L;
    memset(&L, 0, sizeof L);
    L.h = h;
    L.a = 32;
    L.g = 8;
    L.ffn = ffn;
    L.swiglu = true;
    L.s = s;
    L.b = b;
    L.V = 32000;
    L.t = 1;
    L.dtype_bytes = 2;
    return L;
}

static moe_config moe_of(int E, int k, int ffn, int shared, int ep)
{
    moe_config e;
    memset(&e, 0, sizeof e);
    e.num_experts = E;
    e.topk = k;
    e.ffn_hidden_size = ffn;
    e.shared_ffn_hidden_size = shared;
    e.ep = ep;
    e.etp = 1;
    e.dispatcher = MOE_DISPATCH_ALLTOALL;
    return e;
}

static double block_flops(const layer_shape *L, const moe_config *e, double lf, layer_pass pass)
{
    layer_ops o;
    o.n = 0;
    ts_err err;
    cr_assert_eq(moe_block_ops(L, e, lf, pass, &o, &err), TS_OK);
    return layer_ops_flops(&o);
}

/* Balanced load: the forward's flops are the closed form per token x the
 * rank's tokens (Mixtral 8x7B's block, EP 8; a 256-expert block with a
 * shared expert, EP 8); the backward is twice the forward, I + W = B. */
Test(moe_ops, flops_closed_form)
{
    model_config m = shape(32, 4096, 32, 8, 128, 14336, 32000);
    layer_shape L = moe_shape(4096, 14336, 4096, 1);
    moe_config e = moe_of(8, 2, 14336, 0, 8);
    double T = 4096, f = block_flops(&L, &e, 1.0, LAYER_PASS_F);
    double want = moe_block_fwd_flops_per_token(&m, &e) * T;
    cr_assert(fabs(f - want) <= 1e-12 * want, "fwd %.17g want %.17g", f, want);
    cr_assert_float_eq(want, T * (2.0 * 4096 * 8 + 2.0 * 2 * 3 * 4096 * 14336), 1.0);
    double B = block_flops(&L, &e, 1.0, LAYER_PASS_B);
    cr_assert(fabs(B - 2 * f) <= 1e-12 * f);
    double I = block_flops(&L, &e, 1.0, LAYER_PASS_I), W = block_flops(&L, &e, 1.0, LAYER_PASS_W);
    cr_assert(fabs(I + W - B) <= 1e-12 * B);
    cr_assert(I > 0.45 * B && I < 0.55 * B, "I %.3g of B %.3g", I, B);

    model_config m2 = shape(61, 7168, 128, 128, 128, 18432, 129280);
    layer_shape L2 = moe_shape(7168, 18432, 4096, 1);
    moe_config e2 = moe_of(256, 8, 2048, 2048, 8);
    double f2 = block_flops(&L2, &e2, 1.0, LAYER_PASS_F), w2 = moe_block_fwd_flops_per_token(&m2, &e2) * 4096;
    cr_assert(fabs(f2 - w2) <= 1e-12 * w2, "fwd %.17g want %.17g", f2, w2);
    cr_assert_eq(block_flops(&L2, &e2, 1.0, LAYER_PASS_R), 0.0); /* no recomputation */
    L2.recompute = RECOMPUTE_FULL;
    cr_assert(fabs(block_flops(&L2, &e2, 1.0, LAYER_PASS_R) - w2) <= 1e-12 * w2);
}

/* The expert GEMMs run at the busiest rank's count: m = ceil(T k lf / (E/ep))
 * rows per local expert, batch E/ep; more load never fewer flops; below the
 * mean only under a capacity factor below 1; ETP must divide f_e. */
Test(moe_ops, busiest_rank_shapes)
{
    layer_shape L = moe_shape(7168, 18432, 4096, 1);
    moe_config e = moe_of(256, 8, 2048, 0, 8);
    layer_ops o;
    o.n = 0;
    ts_err err;
    cr_assert_eq(moe_block_ops(&L, &e, 1.5, LAYER_PASS_F, &o, &err), TS_OK);
    int fc1 = -1;
    for (int i = 0; i < o.n; i++)
        if (strcmp(o.op[i].name, "moe.fc1") == 0)
            fc1 = i;
    cr_assert_geq(fc1, 0);
    cr_assert_eq(o.op[fc1].m, 4096 * 8 * 3 / 2 / 32); /* 1536 rows per local expert */
    cr_assert_eq(o.op[fc1].batch, 32);
    cr_assert_eq(o.op[fc1].n, 2 * 2048);
    cr_assert_eq(o.op[fc1].k, 7168);
    double prev = 0;
    for (int q = 0; q <= 8; q++) {
        double f = block_flops(&L, &e, 1.0 + 0.25 * q, LAYER_PASS_F);
        cr_assert_geq(f, prev);
        prev = f;
    }
    cr_assert_eq(moe_block_ops(&L, &e, 0.9, LAYER_PASS_F, &o, &err), TS_EINVAL); /* dropless: never below the mean */
    e.capacity_factor = 0.5; /* capped below the mean: the busiest rank may run less */
    o.n = 0;
    cr_assert_eq(moe_block_ops(&L, &e, 0.5, LAYER_PASS_F, &o, &err), TS_OK, "%s", err.msg);
    cr_assert_eq(moe_block_ops(&L, &e, 0, LAYER_PASS_F, &o, &err), TS_EINVAL);
    e.capacity_factor = 0;
    e.etp = 3; /* 2048 is not a multiple of 3: the expert FFN does not split */
    o.n = 0;
    cr_assert_eq(moe_block_ops(&L, &e, 1.0, LAYER_PASS_F, &o, &err), TS_EINVAL);
    cr_assert(strstr(err.msg, "--expert-tensor-parallel-size 3") != NULL, "%s", err.msg);
}

/* Two all-to-alls forward, two backward, on the EP group, each carrying
 * moe_a2a_send_bytes; none with EP 1. */
Test(moe_ops, all_to_alls)
{
    layer_shape L = moe_shape(4096, 14336, 4096, 1);
    moe_config e = moe_of(8, 2, 14336, 0, 8);
    int64_t S = moe_a2a_send_bytes(4096, 2, 4096, 2, 8);
    cr_assert_eq(S, (int64_t)4096 * 2 * 4096 * 2 * 7 / 8);
    layer_pass passes[] = {LAYER_PASS_F, LAYER_PASS_B};
    for (int p = 0; p < 2; p++) {
        layer_ops o;
        o.n = 0;
        ts_err err;
        cr_assert_eq(moe_block_ops(&L, &e, 1.0, passes[p], &o, &err), TS_OK);
        int n = 0;
        for (int i = 0; i < o.n; i++)
            if (o.op[i].kind == LAYER_OP_COMM) {
                cr_assert(o.op[i].a2a);
                cr_assert_eq(o.op[i].group, 8);
                cr_assert_eq(o.op[i].bytes, S);
                n++;
            }
        cr_assert_eq(n, 2);
    }
    e.ep = 1;
    layer_ops o;
    o.n = 0;
    ts_err err;
    cr_assert_eq(moe_block_ops(&L, &e, 1.0, LAYER_PASS_B, &o, &err), TS_OK);
    cr_assert_eq(layer_ops_comm_bytes(&o, COMM_P2P), 0);
}

/* Per-rank parameters of a Mixtral 8x7B MoE layer with EP 8, t 1, 64 GPUs:
 * one whole expert (3 h f_e, bias-free) and the replicated rest; expert
 * gradients reduced over 64 / 8 = 8 ranks, dense over 64. With ETP 2 the
 * expert halves. */
Test(moe_ops, rank_params)
{
    model_config m = shape(32, 4096, 32, 8, 128, 14336, 32000);
    moe_config e = moe_of(8, 2, 14336, 0, 8);
    moe_rank_params r;
    moe_layer_rank_params(&m, &e, 1, 1, 64, &r);
    cr_assert_eq(r.expert, (int64_t)3 * 4096 * 14336);
    int64_t attn = (int64_t)4096 * (4096 + 2 * 1024) + (int64_t)4096 * 4096; /* q, k, v (GQA 8), proj */
    cr_assert_eq(r.dense, attn + 2 * 4096 + 4096 * 8, "dense %lld", (long long)r.dense);
    cr_assert_eq(r.expert_dp, 8);
    cr_assert_eq(r.dense_dp, 64);
    e.etp = 2;
    e.ep = 4;
    moe_layer_rank_params(&m, &e, 2, 2, 64, &r);
    cr_assert_eq(r.expert, (int64_t)2 * 3 * 4096 * 14336 / 2);
    cr_assert_eq(r.expert_dp, 4);
    cr_assert_eq(r.dense_dp, 16);
}

/* Saved bytes of the MoE block: the closed form for Mixtral's block (router
 * logits and probabilities 8 T E, top-k T k 12, the permuted tokens R h,
 * the permuted probabilities R x 4, FC1's output and the activation's R
 * (2 f + f); the expert outputs are not saved: the probabilities scale the
 * activation, the unpermute keeps its row map only), and more load never
 * less memory (the busiest rank's intermediates grow). The same with the
 * allgather dispatcher (EP 8): the gathered routing of the local expert,
 * 8 T x 1 x 5, on top; nothing for the expert outputs either. */
Test(moe_ops, saved_bytes)
{
    layer_shape L = moe_shape(4096, 14336, 4096, 1);
    moe_config e = moe_of(8, 2, 14336, 0, 8);
    int64_t T = 4096, R = T * 2;
    int64_t want = 8 * T * 8 + T * 2 * 12 + R * 4096 * 2 + R * 4 + R * 3 * 14336 * 2;
    cr_assert_eq(moe_block_saved_bytes(&L, &e, 1.0), want);
    cr_assert_gt(moe_block_saved_bytes(&L, &e, 1.5), want);
    cr_assert_eq(moe_block_saved_bytes(&L, &e, 2.0) - want, R * (4096 * 2 + 4 + 3 * 14336 * 2));
    e.dispatcher = MOE_DISPATCH_ALLGATHER;
    cr_assert_eq(moe_block_saved_bytes(&L, &e, 1.0), want + 8 * T * 1 * 5);
}

/* The imbalance's cost: 0 at skew 0 and under forced balance; more skew
 * never faster; at a load factor lf the extra time of Mixtral's block on an
 * H100 is between 0.5 and 1.1 x (lf - 1) x the balanced block (the expert
 * GEMMs, most of the block, grow with lf; the router and top-k do not). */
Test(moe_ops, imbalance_monotone)
{
    static const gpu_spec H100 = {GPU_SPEC_H100};
    cost_params cp;
    cost_model *cm = NULL;
    ts_err err;
    cr_assert_eq(cost_params_default(&H100, PREC_BF16, &cp, &err), TS_OK);
    cr_assert_eq(cost_model_new(&cp, &cm, &err), TS_OK);
    layer_shape L = moe_shape(4096, 14336, 4096, 1);
    moe_config e = moe_of(8, 2, 14336, 0, 8);
    double lf = 0;
    int64_t extra = -1, prev = 0, base = 0;
    cr_assert_eq(moe_block_imbalance_ns(cm, &L, &e, 0, 1, &lf, &extra, &err), TS_OK);
    cr_assert_eq(extra, 0);
    cr_assert_eq(lf, 1.0);
    for (int p = 0; p < 2; p++) {
        layer_ops o;
        o.n = 0;
        cr_assert_eq(moe_block_ops(&L, &e, 1.0, p == 0 ? LAYER_PASS_F : LAYER_PASS_B, &o, &err), TS_OK);
        for (int i = 0; i < o.n; i++)
            base += cost_op_ns(cm, &o.op[i]);
    }
    cr_assert_gt(base, 0);
    double skews[] = {0.2, 0.5, 1.0, 1.5, 2.0};
    for (int i = 0; i < 5; i++) {
        cr_assert_eq(moe_block_imbalance_ns(cm, &L, &e, skews[i], 1, &lf, &extra, &err), TS_OK);
        cr_assert_geq(extra, prev, "skew %g: %lld < %lld", skews[i], (long long)extra, (long long)prev);
        cr_assert_gt(lf, 1.0);
        cr_assert_geq((double)extra, 0.5 * (lf - 1) * (double)base, "skew %g lf %g extra %lld base %lld", skews[i], lf,
                      (long long)extra, (long long)base);
        cr_assert_leq((double)extra, 1.1 * (lf - 1) * (double)base);
        prev = extra;
    }
    e.force_load_balancing = true;
    cr_assert_eq(moe_block_imbalance_ns(cm, &L, &e, 1.0, 1, &lf, &extra, &err), TS_OK);
    cr_assert_eq(extra, 0);
    cr_assert_eq(moe_block_imbalance_ns(cm, &L, &e, -1, 1, &lf, &extra, &err), TS_EINVAL);
    cost_model_free(cm);
}
