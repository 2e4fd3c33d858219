/* bench_search — how fast the whole search space of a large case is
 * searched. Every layout is enumerated, the impossible and the memory-bound
 * ones rejected, and every memory-feasible candidate simulated on the
 * timeline. Prints the counts, the wall time and the winner (a figure,
 * never an assertion). Cases (--case):
 *   530b (default): Megatron's 530B model (Narayanan et al. 2021 Table 1:
 *     105 layers, hidden 20480, 128 heads, sequence 2048, vocabulary 51200)
 *     on 5,120 A100 80GB GPUs with global batch 2520;
 *   deepseek-v3: the deepseek-v3 preset (topologies/models.csv: 61 layers,
 *     multi-latent attention, 256 experts top-8 in 8 groups, B = 15360,
 *     seq 4096) on 2,048 H100 80GB, every expert layout and dispatcher
 *     (target: <= 30 s on 2 cores);
 *   deepseek-v3-shape: the same MoE shape without MLA and group-limited
 *     routing (plain attention of 128 heads, h / a = 56 per head): 61
 *     layers, h 7168, 256 experts top-8 of FFN 2048, one shared expert of
 *     2048, the first 3 layers dense (FFN 18432), B 15360, seq 4096.
 *
 *   build/tests/bench/bench_search [--case NAME] [--threads N]   (default: 530b, online CPUs)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sim/config/catalog_models.h"
#include "sim/config/topo.h"
#include "sim/search/search.h"
#include "sim/search/search_eval.h"
#include "sim/search/search_out.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The DeepSeek-V3 cases on 2,048 H100 (catalogue and built-in topology):
 * the preset, or with shape_only its MoE shape without MLA or group-limited
 * routing. *t owned by the caller. */
static int deepseek_space(bool shape_only, search_space *s, topo **t, ts_err *e)
{
    catalog_model p;
    int rc = catalog_model_preset("deepseek-v3", &p, e);
    cluster_config cl;
    memset(&cl, 0, sizeof cl);
    cl.gpus = 2048;
    if (rc == TS_OK)
        rc = catalog_gpu("H100-SXM5-80GB", &cl.gpu, e);
    if (rc == TS_OK)
        rc = topo_default_for(&cl.gpu, cl.gpus, t, e);
    if (rc)
        return rc;
    cl.gpus_per_node = (*t)->params.gpus_per_node;
    cl.topology = *t;
    cl.overheads = (memory_overheads){.cuda_context_gib = OVERHEADS_DEFAULT,
                                      .nccl_buffer_mib = OVERHEADS_DEFAULT,
                                      .nccl_channels = (int)OVERHEADS_DEFAULT,
                                      .cublas_workspace_mib = OVERHEADS_DEFAULT,
                                      .allocator_fragmentation = OVERHEADS_DEFAULT}; /* the GPU's */
    if ((rc = overheads_resolve(&cl.overheads, &cl.gpu, e)))
        return rc;
    model_config m = p.model;
    m.attention_backend = config_attn_auto(&cl.gpu, m.precision); /* as trainsim search's default, auto */
    moe_config moe = p.moe;
    if (shape_only) { /* plain attention: a 128 heads x 56 per head, as Megatron's default h / a */
        snprintf(m.name, sizeof m.name, "deepseek-v3-shape");
        m.kv_channels = 0;
        moe.mla = false;
        moe.router_num_groups = moe.router_group_topk = 0;
    }
    search_space_default(s, &m, &cl, p.par.global_batch_size);
    s->moe = moe;
    return TS_OK;
}

/* Megatron's 530B on 5,120 A100 80GB. *t owned by the caller. */
static int megatron_530b_space(search_space *s, topo **t, ts_err *e)
{
    model_config m;
    memset(&m, 0, sizeof m);
    snprintf(m.name, sizeof m.name, "megatron-530b");
    m.num_layers = 105;
    m.hidden_size = 20480;
    m.num_attention_heads = 128;
    m.num_query_groups = 128;
    m.ffn_hidden_size = 4 * 20480;
    m.seq_length = 2048;
    m.padded_vocab_size = 51200;
    m.add_bias_linear = true;                     /* GPT-2 style layers */
    m.attention_dropout = m.hidden_dropout = 0.1; /* Megatron-LM's default */
    m.precision = PREC_BF16;
    const int gpus = 5120, batch = 2520;
    int rc = topo_default(gpus, t, e);
    if (rc)
        return rc;
    cluster_config cl;
    memset(&cl, 0, sizeof cl);
    cl.gpus = gpus;
    cl.gpus_per_node = (*t)->params.gpus_per_node;
    cl.topology = *t;
    /* A100-SXM4-80GB, NVIDIA datasheet (../shared/reference/gpus.csv) */
    snprintf(cl.gpu.name, sizeof cl.gpu.name, "A100-SXM4-80GB");
    cl.gpu.bf16_tflops = 312;
    cl.gpu.fp16_tflops = 312;
    cl.gpu.fp32_tflops = 19.5;
    cl.gpu.hbm_gib = 80;
    cl.gpu.hbm_gbps = 2039;
    cl.gpu.nvlink_gbps = 300;
    search_space_default(s, &m, &cl, batch);
    return TS_OK;
}

int main(int argc, char **argv)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = ncpu > 0 ? (int)ncpu : 1;
    const char *name = "530b";
    bool bad = false;
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 < argc && !strcmp(argv[i], "--threads")) {
            char *end;
            long v = strtol(argv[i + 1], &end, 10);
            threads = *end || v > 4096 ? 0 : (int)v; /* not a number, or absurd: refused below */
        } else if (i + 1 < argc && !strcmp(argv[i], "--case")) {
            name = argv[i + 1];
        } else {
            bad = true;
        }
    }
    bool ds = !strcmp(name, "deepseek-v3"), shape = !strcmp(name, "deepseek-v3-shape");
    if (threads < 1 || bad || (!ds && !shape && strcmp(name, "530b"))) {
        fprintf(stderr, "usage: bench_search [--case 530b|deepseek-v3|deepseek-v3-shape] [--threads N]\n");
        return 2;
    }
    ts_err e;
    err_clear(&e);
    topo *t = NULL;
    search_space s;
    memset(&s, 0, sizeof s);
    if ((ds || shape ? deepseek_space(shape, &s, &t, &e) : megatron_530b_space(&s, &t, &e))) {
        fprintf(stderr, "bench_search: %s\n", e.msg);
        topo_free(t);
        return 1;
    }

    clock_t c0 = clock(); /* process CPU time, all threads: the figure under a loaded machine */
    double t0 = now_s();
    search_set *set = NULL;
    size_t *order = NULL, n = 0;
    int rc = search_enumerate(&s, &set, &e);
    double t1 = now_s();
    search_eval_opts o = {.threads = threads, .nshards = 1};
    if (rc == TS_OK)
        rc = search_evaluate(set, &o, &e);
    double t2 = now_s();
    double cpu_s = (double)(clock() - c0) / CLOCKS_PER_SEC;
    if (rc == TS_OK)
        rc = search_rank(set, &order, &n, &e);
    if (rc) {
        fprintf(stderr, "bench_search: %s\n", e.msg);
        search_set_free(set);
        topo_free(t);
        return 1;
    }
    const size_t *k = set->counts;
    size_t structural = 0;
    for (int st = SEARCH_REJ_HEADS; st <= SEARCH_REJ_EXPERTS; st++)
        structural += k[st];
    size_t simulated = k[SEARCH_SIMULATED] + k[SEARCH_REJ_MEMORY_SIM] + k[SEARCH_REJ_SIM_ERROR];
    const model_config *m = &s.model;
    printf("bench_search: %s (%d layers, h %d, %d heads, s %d, V %d", m->name, m->num_layers, m->hidden_size,
           m->num_attention_heads, m->seq_length, m->padded_vocab_size);
    if (s.moe.num_experts > 0)
        printf(", %d experts top-%d", s.moe.num_experts, s.moe.topk);
    printf(") on %d %s, B = %d, %d threads\n", s.cluster.gpus, s.cluster.gpu.name, s.global_batch_size, threads);
    printf("  enumerated %zu: impossible %zu (layers %zu, batch %zu, micro-batches %zu, "
           "tp %zu, expert folds %zu), config %zu, memory bound %zu\n",
           set->n, structural, k[SEARCH_REJ_LAYERS], k[SEARCH_REJ_BATCH], k[SEARCH_REJ_MICROBATCHES],
           k[SEARCH_REJ_HEADS] + k[SEARCH_REJ_GROUPS] + k[SEARCH_REJ_HIDDEN], k[SEARCH_REJ_EXPERTS],
           k[SEARCH_REJ_CONFIG], k[SEARCH_REJ_MEMORY_BOUND]);
    printf("  simulated %zu on the timeline: %zu fit, %zu over memory, %zu failed\n", simulated, k[SEARCH_SIMULATED],
           k[SEARCH_REJ_MEMORY_SIM], k[SEARCH_REJ_SIM_ERROR]);
    printf("  wall time %.2f s (enumerate + prune %.3f s, simulate %.2f s); CPU time %.2f s "
           "(%.1f ms per simulated candidate)\n",
           t2 - t0, t1 - t0, t2 - t1, cpu_s, simulated ? 1e3 * cpu_s / (double)simulated : 0.0);
    /* How tight the memory lower bound is on what was simulated. */
    double lo = 1e9, hi = 0;
    size_t above = 0;
    for (size_t i = 0; i < set->n; i++) {
        const search_cand *c = &set->cands[i];
        if (c->status != SEARCH_SIMULATED && c->status != SEARCH_REJ_MEMORY_SIM)
            continue;
        double q = c->mem_bound_bytes / c->r.peak_mem_bytes;
        lo = q < lo ? q : lo;
        hi = q > hi ? q : hi;
        above += q > 1.0;
    }
    if (k[SEARCH_SIMULATED] + k[SEARCH_REJ_MEMORY_SIM] > 0)
        printf("  memory bound / simulated peak: %.2f .. %.2f (%zu above 1: must be 0)\n", lo, hi, above);
    if (n > 0) {
        char d[256];
        search_describe(set, order[0], d, sizeof d);
        const search_cand *w = &set->cands[order[0]];
        printf("  best: %s: %.3f s/iteration, %.1f TFLOP/s per GPU, MFU %.1f%%, peak %.1f GiB\n", d, w->r.iteration_s,
               w->r.tflops_per_gpu, 100.0 * w->r.mfu, w->r.peak_mem_bytes / (1024.0 * 1024.0 * 1024.0));
    }
    free(order);
    search_set_free(set);
    topo_free(t);
    return 0;
}
