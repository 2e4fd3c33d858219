/* Unit tests for search: enumeration counts on small cases derived by hand
 * in the comments, rejection reasons, the uneven pipeline split, the memory
 * lower bound against the simulated peak, and ranking determinism across
 * thread counts and shards. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim/config/overheads.h"
#include "sim/config/topo.h"
#include "sim/model/layer.h"
#include "sim/search/search.h"
#include "sim/search/search_bound.h"
#include "sim/search/search_eval.h"
#include "sim/search/search_out.h"

/* A small GPT: 8 layers, 8 heads, hidden 512, on one 8-GPU node of A100 80GB. */
static void small_space(search_space *s, int layers, int gpus, int batch)
{
    model_config m;
    memset(&m, 0, sizeof m);
    snprintf(m.name, sizeof m.name, "small");
    m.num_layers = layers;
    m.hidden_size = 512;
    m.num_attention_heads = 8;
    m.num_query_groups = 8;
    m.ffn_hidden_size = 2048;
    m.seq_length = 512;
    m.padded_vocab_size = 1024;
    m.add_bias_linear = true;                     /* GPT-2 style layers */
    m.attention_dropout = m.hidden_dropout = 0.1; /* Megatron-LM's default */
    m.precision = PREC_BF16;
    cluster_config cl;
    memset(&cl, 0, sizeof cl);
    cl.gpus = gpus;
    cl.gpus_per_node = 8;
    snprintf(cl.gpu.name, sizeof cl.gpu.name, "A100-SXM4-80GB");
    cl.gpu.bf16_tflops = 312;
    cl.gpu.fp16_tflops = 312;
    cl.gpu.fp32_tflops = 19.5;
    cl.gpu.hbm_gib = 80;
    cl.gpu.hbm_gbps = 2039;
    cl.gpu.nvlink_gbps = 300;
    /* the memory besides tensors, as the A100 defaults (overheads.h), so the
     * bound and the simulated peak both count it */
    cl.overheads = (memory_overheads){.cuda_context_gib = 0.75,
                                      .nccl_buffer_mib = OVERHEADS_NCCL_BUFFER_MIB,
                                      .nccl_channels = 16,
                                      .cublas_workspace_mib = 4,
                                      .allocator_fragmentation = 0.10};
    search_space_default(s, &m, &cl, batch);
}

static search_set *enumerate_ok(const search_space *s)
{
    search_set *set = NULL;
    ts_err e;
    err_clear(&e);
    cr_assert_eq(search_enumerate(s, &set, &e), TS_OK, "%s", e.msg);
    return set;
}

/* 8 layers on 8 GPUs, B = 16, b in {1, 2}, 1F1B only, no block recompute:
 *   t=1: p in {1,2,4,8} (d = 8,4,2,1); per b: recompute 3 x distopt (2 if d>1)
 *        -> p=1,2,4: 6 per b, p=8: 3 per b; two b values -> 2*(6+6+6+3) = 42
 *   t=2: p in {1,2,4} (d = 4,2,1); per b: sp 2 x recompute 3 x distopt
 *        -> 12, 12, 6 per b -> 2*30 = 60
 *   t=4: p in {1,2} (d = 2,1) -> 2*(12+6) = 36
 *   t=8: p = 1 (d = 1) -> 2*6 = 12
 * Total 150, every one pending (B divides, layers split evenly, it fits). */
Test(search, counts_simple_case)
{
    search_space s;
    small_space(&s, 8, 8, 16);
    s.n_micro_batch_sizes = 2;
    s.schedules = 1u << SCHED_1F1B;
    s.try_recompute_block = false;
    search_set *set = enumerate_ok(&s);
    cr_assert_eq(set->n, 150);
    cr_assert_eq(set->counts[SEARCH_PENDING], 150);
    search_set_free(set);
}

/* Same, with b in {1,2,4,8}: b*d must divide 16.
 *   t=1: d=8: b in {1,2} -> 2 x 6 kept, b=4,8 rejected (2 rows);
 *        d=4: b in {1,2,4} -> 3 x 6, b=8 rejected; d=2: 4 x 6; d=1 (p=8): 4 x 3
 *        kept = 12 + 18 + 24 + 12 = 66, rejected 3
 *   t=2: d=4 (p=1): 3 x 12 = 36, 1 rejected; d=2 (p=2): 4 x 12 = 48; d=1 (p=4): 4 x 6 = 24
 *        kept 108, rejected 1
 *   t=4: d=2 (p=1): 4 x 12 = 48; d=1 (p=2): 4 x 6 = 24 -> 72
 *   t=8: d=1: 4 x 6 = 24
 * kept 66 + 108 + 72 + 24 = 270, batch rejections 4. */
Test(search, counts_with_batch_rejections)
{
    search_space s;
    small_space(&s, 8, 8, 16);
    s.schedules = 1u << SCHED_1F1B;
    s.try_recompute_block = false;
    search_set *set = enumerate_ok(&s);
    cr_assert_eq(set->counts[SEARCH_PENDING], 270);
    cr_assert_eq(set->counts[SEARCH_REJ_BATCH], 4);
    cr_assert_eq(set->n, 274);
    char why[256];
    for (size_t i = 0; i < set->n; i++)
        if (set->cands[i].status == SEARCH_REJ_BATCH) {
            search_reason(set, i, why, sizeof why);
            cr_assert_not_null(strstr(why, "global batch 16 not divisible by micro-batch"), "%s", why);
        }
    search_set_free(set);
}

/* 6 layers on 8 GPUs, t = 1 only (max_tp 1), B = 8, b = 1, 1F1B and
 * interleaved with v in 2..3, no sp (t=1), no block recompute:
 *   p=1: 1F1B only, d=8: 3 recompute x 2 distopt = 6
 *   p=2: 1F1B even (6/2): 6; interleaved v=2: 6 % 4, but 6 + 2 = 8 splits
 *        with the embedding and loss counted as layers (1 2 2 1) -> 6;
 *        v=3: 6 % 6 = 0, m = 8/(1*4) = 2 >= p -> 6
 *   p=4: 1F1B uneven split (first 1, middle 2+2, last 1): d=2 -> 6;
 *        interleaved v=2 (6 + 2 = 8 chunks of 1: too small), v=3 -> 2
 *        layers rejections
 *   p=8: p > layers: 1F1B rejected, interleaved v=2, v=3 rejected -> 3
 * pending 6+6+6+6+6 = 30, layers rejections 2 + 3 = 5. */
Test(search, counts_uneven_and_interleaved)
{
    search_space s;
    small_space(&s, 6, 8, 8);
    s.max_tp = 1;
    s.max_vp = 3;
    s.n_micro_batch_sizes = 1;
    s.schedules = (1u << SCHED_1F1B) | (1u << SCHED_INTERLEAVED);
    s.try_recompute_block = false;
    search_set *set = enumerate_ok(&s);
    cr_assert_eq(set->counts[SEARCH_PENDING], 30, "pending %zu", set->counts[SEARCH_PENDING]);
    cr_assert_eq(set->counts[SEARCH_REJ_LAYERS], 5);
    cr_assert_eq(set->n, 35);
    bool saw_uneven = false, saw_account = false;
    for (size_t i = 0; i < set->n; i++) {
        const search_cand *c = &set->cands[i];
        if (c->pp == 2 && c->vp == 2 && c->status == SEARCH_PENDING) {
            cr_assert_eq(c->account_split, SEARCH_ACCOUNT_EMBEDDING | SEARCH_ACCOUNT_LOSS);
            config cfg;
            ts_err e;
            cr_assert_eq(search_cand_config(set, i, &cfg, &e), TS_OK, "%s", e.msg);
            int want[] = {1, 2, 2, 1};
            cr_assert_eq(cfg.par.layout.n_stages, 4);
            for (int st = 0; st < 4; st++)
                cr_expect_eq(cfg.par.layout.layers[st], want[st], "stage %d", st);
            char d[160];
            search_describe(set, i, d, sizeof d);
            cr_expect(strstr(d, "interleaved split=account-embedding+loss"), "%s", d);
            saw_account = true;
        }
        if (c->pp == 4 && c->status == SEARCH_PENDING) {
            cr_assert_eq(c->first_stage_layers, 1);
            cr_assert_eq(c->last_stage_layers, 1);
            saw_uneven = true;
        }
        if (c->status == SEARCH_REJ_LAYERS && c->pp == 8 && c->vp == 1) {
            char why[256];
            search_reason(set, i, why, sizeof why);
            cr_assert_str_eq(why, "6 layers cannot be split over 8 pipeline stages");
        }
    }
    cr_assert(saw_uneven);
    cr_assert(saw_account);
    search_set_free(set);
}

/* Block recomputation: k in {Ls/4, Ls/2, 3Ls/4}, distinct, 1 <= k < Ls.
 * 8 layers, t=1, p=1 (Ls = 8): k = 2, 4, 6 -> 6 variants; p=2 (Ls = 4):
 * k = 1, 2, 3 -> 6; p=4 (Ls = 2): k = 0 (dropped), 1, 1 (dup) -> 4;
 * p=8 (Ls = 1): none -> 3. With d > 1 x2 distopt, except p=8 (d=1).
 * One b: 12 + 12 + 8 + 3 = 35. */
Test(search, recompute_block_variants)
{
    search_space s;
    small_space(&s, 8, 8, 16);
    s.max_tp = 1;
    s.n_micro_batch_sizes = 1;
    s.schedules = 1u << SCHED_1F1B;
    search_set *set = enumerate_ok(&s);
    cr_assert_eq(set->n, 35);
    int blocks_p2 = 0;
    for (size_t i = 0; i < set->n; i++) {
        const search_cand *c = &set->cands[i];
        if (c->pp == 2 && c->recompute_method == RECOMPUTE_METHOD_BLOCK && !c->distributed_optimizer) {
            cr_assert_eq(c->recompute_num_layers, blocks_p2 + 1);
            blocks_p2++;
        }
    }
    cr_assert_eq(blocks_p2, 3);
    search_set_free(set);
}

/* Heads not divisible by t: one rejection row per t, nothing under it. */
Test(search, heads_rejection)
{
    search_space s;
    small_space(&s, 8, 8, 16);
    s.model.num_attention_heads = 4; /* head size 128 */
    s.model.num_query_groups = 4;
    s.n_micro_batch_sizes = 1;
    s.schedules = 1u << SCHED_1F1B;
    search_set *set = enumerate_ok(&s);
    cr_assert_eq(set->counts[SEARCH_REJ_HEADS], 1); /* t = 8 */
    for (size_t i = 0; i < set->n; i++)
        if (set->cands[i].status == SEARCH_REJ_HEADS) {
            char why[256];
            search_reason(set, i, why, sizeof why);
            cr_assert_str_eq(why, "attention heads 4 not divisible by tensor-parallel size 8");
        }
    search_set_free(set);
}

/* A model too large for the GPUs is rejected by the bound, with numbers. */
Test(search, memory_bound_rejects_with_reason)
{
    search_space s;
    small_space(&s, 8, 8, 16);
    s.model.hidden_size = 16384; /* 8 layers x 12 h^2 = 26e9 parameters */
    s.model.num_attention_heads = 128;
    s.model.num_query_groups = 128;
    s.model.ffn_hidden_size = 65536;
    s.n_micro_batch_sizes = 1;
    s.schedules = 1u << SCHED_1F1B;
    s.try_recompute_block = false;
    search_set *set = enumerate_ok(&s);
    /* t=1, p=1: 25.8e9 parameters x 16 bytes = 384 GiB > 80 GiB; with the
     * distributed optimizer over d = 8, x (2 + 2 + 12/8) bytes = 132 GiB. */
    bool saw = false;
    for (size_t i = 0; i < set->n; i++) {
        const search_cand *c = &set->cands[i];
        if (c->tp == 1 && c->pp == 1) {
            cr_assert_eq(c->status, SEARCH_REJ_MEMORY_BOUND);
            cr_assert_gt(c->mem_bound_bytes, (c->distributed_optimizer ? 132.0 : 384.0) * (1 << 30));
            char why[256];
            search_reason(set, i, why, sizeof why);
            cr_assert_not_null(strstr(why, "memory lower bound"), "%s", why);
            cr_assert_not_null(strstr(why, "> 80.0 GiB per GPU"), "%s", why);
            saw = true;
        }
    }
    cr_assert(saw);
    search_set_free(set);
}

Test(search, bad_space_is_refused)
{
    search_space s;
    small_space(&s, 8, 8, 16);
    s.n_micro_batch_sizes = 0;
    search_set *set = NULL;
    ts_err e;
    cr_assert_eq(search_enumerate(&s, &set, &e), TS_EINVAL);
    cr_assert_null(set);
    cr_assert_not_null(strstr(e.msg, "micro-batch sizes"), "%s", e.msg);
    small_space(&s, 8, 0, 16);
    cr_assert_eq(search_enumerate(&s, &set, &e), TS_EINVAL);
    cr_assert_not_null(strstr(e.msg, "--gpus"), "%s", e.msg);
}

/* ------------------------------------------------- with the simulator */

/* Enumerate and simulate the small case on 16 GPUs of the default topology. */
static search_set *simulated_case(topo **t, int threads, int shard, int nshards)
{
    search_space s;
    small_space(&s, 8, 16, 32);
    ts_err e;
    err_clear(&e);
    cr_assert_eq(topo_default(16, t, &e), TS_OK, "%s", e.msg);
    s.cluster.topology = *t;
    s.micro_batch_sizes[0] = 1;
    s.micro_batch_sizes[1] = 4;
    s.n_micro_batch_sizes = 2;
    search_set *set = enumerate_ok(&s);
    search_eval_opts o = {.threads = threads, .shard = shard, .nshards = nshards};
    cr_assert_eq(search_evaluate(set, &o, &e), TS_OK, "%s", e.msg);
    return set;
}

static bool same_result(const search_cand *a, const search_cand *b)
{
    /* NOLINTNEXTLINE(bugprone-suspicious-memory-comparison,cert-exp42-c,cert-flp37-c): bit-identical on purpose */
    return a->status == b->status && !memcmp(&a->r, &b->r, sizeof a->r) && a->mem_bound_bytes == b->mem_bound_bytes;
}

/* The bound is a lower bound: never above the simulated peak. */
Test(search, bound_never_exceeds_simulated_peak)
{
    topo *t = NULL;
    search_set *set = simulated_case(&t, 2, 0, 1);
    size_t checked = 0;
    for (size_t i = 0; i < set->n; i++) {
        const search_cand *c = &set->cands[i];
        if (c->status != SEARCH_SIMULATED && c->status != SEARCH_REJ_MEMORY_SIM)
            continue;
        cr_assert_leq(c->mem_bound_bytes, c->r.peak_mem_bytes, "candidate %zu: bound %.0f > peak %.0f", i,
                      c->mem_bound_bytes, c->r.peak_mem_bytes);
        checked++;
    }
    cr_assert_gt(checked, 50, "only %zu simulated", checked);
    search_set_free(set);
    topo_free(t);
}

/* The zero-bubble schedules' W stash: each chunk between its I and its W
 * holds, per layer, the tensors only W needs and the output gradients I
 * stashed for it (layer.h: a GPT layer's T (qkv_n + h + fc1_n + h) x dt),
 * and on a loading stage the batch's lookup indices (dataload.h: tokens and
 * position_ids, int64 [b, s]). Four chunks more between I and W (and f + w
 * four more) raise the activation floor by four times that, on the small
 * GPT at p = 1, t = 1, b = 1, no recomputation: 8 layers, T = b s = 512,
 * qkv_n = 3h = 1536, fc1_n = 4h = 2048, dt = 2: a layer's stash
 * 512 x 4608 x 2 = 4718592 B, the indices 2 x 8 x 512 = 8192 B. */
Test(search, zero_bubble_bound_counts_w_stash_and_batch)
{
    search_space s;
    small_space(&s, 8, 8, 16);
    s.schedules = 1u << SCHED_ZB_H1;
    s.n_micro_batch_sizes = 1;
    search_set *set = enumerate_ok(&s);
    bool found = false;
    for (size_t i = 0; i < set->n && !found; i++) {
        const search_cand *c = &set->cands[i];
        if (c->status != SEARCH_PENDING || c->tp != 1 || c->pp != 1 || c->mbs != 1 || c->recompute != RECOMPUTE_NONE)
            continue;
        found = true;
        config cfg;
        ts_err e;
        err_clear(&e);
        cr_assert_eq(search_cand_config(set, i, &cfg, &e), TS_OK, "%s", e.msg);
        layer_shape L;
        layer_saved_list sl;
        cr_assert_eq(layer_shape_from_config(&cfg, &L, &e), TS_OK, "%s", e.msg);
        L.recompute = RECOMPUTE_NONE;
        cr_assert_eq(layer_saved_build(&L, &sl, &e), TS_OK, "%s", e.msg);
        double free_w = 0;
        for (int k = 0; k < sl.n; k++)
            free_w += sl.t[k].free_when == LAYER_FREE_AFTER_W ? (double)sl.t[k].bytes : 0;
        cr_assert_gt(free_w, 0);
        double stash = 512.0 * (1536 + 512 + 2048 + 512) * 2, indices = 2.0 * 8 * 512;
        cr_assert_lt(free_w + stash, (double)layer_saved_kept_bytes(&sl), "the W part is the lesser per chunk");
        search_bound_live a = {1, 4, 5}, b = {1, 8, 9};
        search_bound ba, bb;
        cr_assert_eq(search_bound_compute(&cfg, &a, &ba, &e), TS_OK, "%s", e.msg);
        cr_assert_eq(search_bound_compute(&cfg, &b, &bb, &e), TS_OK, "%s", e.msg);
        double want = 4 * (8 * (free_w + stash) + indices);
        cr_assert_float_eq(bb.activations_bytes - ba.activations_bytes, want, 0.5, "%.0f, want %.0f",
                           bb.activations_bytes - ba.activations_bytes, want);
    }
    cr_assert(found, "no p = 1, t = 1, b = 1 candidate without recomputation");
    search_set_free(set);
}

/* Full uniform recomputation: the backward after the in-flight peak
 * re-creates its last layer's tensors (those not kept after F) while the
 * chunks are held, the output layer's of that micro-batch freed first; the
 * loading stage holds the batch's tensors to the backward (dataload.h:
 * tokens, labels, position_ids int64 and loss_mask float32 [b, s]: 28 b s B).
 * The small GPT at p = 1, t = 1, b = 1, one micro-batch in flight: 8 layers'
 * inputs + the embedding's + the batch's + a layer's recomputed tensors. */
Test(search, full_recompute_bound_counts_last_layer_and_batch)
{
    search_space s;
    small_space(&s, 8, 8, 16);
    s.schedules = 1u << SCHED_1F1B;
    s.n_micro_batch_sizes = 1;
    search_set *set = enumerate_ok(&s);
    bool found = false;
    for (size_t i = 0; i < set->n && !found; i++) {
        const search_cand *c = &set->cands[i];
        if (c->status != SEARCH_PENDING || c->tp != 1 || c->pp != 1 || c->mbs != 1 || c->recompute != RECOMPUTE_FULL ||
            c->recompute_method != RECOMPUTE_METHOD_UNIFORM)
            continue;
        found = true;
        config cfg;
        ts_err e;
        err_clear(&e);
        cr_assert_eq(search_cand_config(set, i, &cfg, &e), TS_OK, "%s", e.msg);
        layer_shape L;
        layer_saved_list sl;
        cr_assert_eq(layer_shape_from_config(&cfg, &L, &e), TS_OK, "%s", e.msg);
        cr_assert_eq(layer_saved_build(&L, &sl, &e), TS_OK, "%s", e.msg);
        double kept = (double)layer_saved_kept_bytes(&sl), by_rc = 0;
        for (int k = 0; k < sl.n; k++)
            by_rc += sl.t[k].kept_after_f ? 0 : (double)sl.t[k].bytes;
        cr_assert_eq(layer_embedding_saved(&L, &sl, &e), TS_OK, "%s", e.msg);
        double emb = (double)layer_saved_kept_bytes(&sl);
        cr_assert_eq(layer_output_saved(&L, &sl, &e), TS_OK, "%s", e.msg);
        cr_assert_gt(by_rc, (double)layer_saved_kept_bytes(&sl), "the recomputed layer outweighs the output layer");
        search_bound_live one = {1, 0, 1};
        search_bound b;
        cr_assert_eq(search_bound_compute(&cfg, &one, &b, &e), TS_OK, "%s", e.msg);
        double want = 8 * kept + emb + 28.0 * 512 + by_rc;
        cr_assert_float_eq(b.activations_bytes, want, 0.5, "%.0f, want %.0f", b.activations_bytes, want);
    }
    cr_assert(found, "no p = 1, t = 1, b = 1 candidate with full uniform recomputation");
    search_set_free(set);
}

/* One thread or two, the same results and the same ranking. */
Test(search, threads_do_not_change_results)
{
    topo *t1 = NULL, *t2 = NULL;
    search_set *a = simulated_case(&t1, 1, 0, 1), *b = simulated_case(&t2, 2, 0, 1);
    cr_assert_eq(a->n, b->n);
    for (size_t i = 0; i < a->n; i++)
        cr_assert(same_result(&a->cands[i], &b->cands[i]), "candidate %zu differs", i);
    size_t *oa, *ob, na, nb;
    ts_err e;
    cr_assert_eq(search_rank(a, &oa, &na, &e), TS_OK);
    cr_assert_eq(search_rank(b, &ob, &nb, &e), TS_OK);
    cr_assert_eq(na, nb);
    cr_assert_gt(na, 0);
    cr_assert_eq(memcmp(oa, ob, na * sizeof *oa), 0);
    for (size_t j = 1; j < na; j++)
        cr_assert_leq(a->cands[oa[j - 1]].r.iteration_s, a->cands[oa[j]].r.iteration_s);
    free(oa);
    free(ob);
    search_set_free(a);
    search_set_free(b);
    topo_free(t1);
    topo_free(t2);
}

/* Two shards evaluated apart cover the set exactly once and agree with the
 * whole: what each MPI rank does (tests/mpi/test_search_mpi.c exchanges them). */
Test(search, shards_partition_the_work)
{
    topo *t0 = NULL, *t1 = NULL, *tw = NULL;
    search_set *s0 = simulated_case(&t0, 1, 0, 2), *s1 = simulated_case(&t1, 1, 1, 2);
    search_set *w = simulated_case(&tw, 2, 0, 1);
    for (size_t i = 0; i < w->n; i++) {
        const search_cand *own = i % 2 ? &s1->cands[i] : &s0->cands[i];
        const search_cand *other = i % 2 ? &s0->cands[i] : &s1->cands[i];
        cr_assert(same_result(own, &w->cands[i]), "candidate %zu differs", i);
        if (w->cands[i].status == SEARCH_SIMULATED)
            cr_assert_eq(other->status, SEARCH_PENDING, "candidate %zu simulated twice", i);
    }
    search_set_free(s0);
    search_set_free(s1);
    search_set_free(w);
    topo_free(t0);
    topo_free(t1);
    topo_free(tw);
}

/* The CSV has a row per candidate, the reason of each rejection and the rank. */
Test(search, csv_lists_every_candidate)
{
    topo *t = NULL;
    search_set *set = simulated_case(&t, 2, 0, 1);
    size_t *o, n;
    ts_err e;
    cr_assert_eq(search_rank(set, &o, &n, &e), TS_OK);
    char path[] = "/tmp/test_search_csv.XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    cr_assert_eq(search_write_csv(set, o, n, path, &e), TS_OK, "%s", e.msg);
    FILE *f = fopen(path, "r");
    char line[2048];
    size_t rows = 0, ranked_first = 0;
    cr_assert_not_null(fgets(line, sizeof line, f));
    cr_assert_eq(strncmp(line, "index,status,reason,tp,pp,dp,vp,", 32), 0, "%s", line);
    while (fgets(line, sizeof line, f)) {
        rows++;
        size_t len = strlen(line);
        if (len > 3 && !strcmp(line + len - 3, ",1\n"))
            ranked_first++;
        if (strstr(line, ",batch,"))
            cr_assert_not_null(strstr(line, "not divisible by micro-batch"), "%s", line);
    }
    cr_assert_eq(fclose(f), 0);
    unlink(path);
    cr_assert_eq(rows, set->n);
    cr_assert_eq(ranked_first, 1);
    free(o);
    search_set_free(set);
    topo_free(t);
}
