/* bench_search — how fast the whole search space of a large case is
 * searched: Megatron's 530B model (Narayanan et al. 2021 Table 1: 105
 * layers, hidden 20480, 128 heads, sequence 2048, vocabulary 51200) on 5,120
 * A100 80GB GPUs with global batch 2520. Every layout is enumerated, the
 * impossible and the memory-bound ones rejected, and every memory-feasible
 * candidate simulated on the timeline. Prints the counts, the wall time and
 * the winner (a figure, never an assertion).
 *
 *   build/tests/bench/bench_search [--threads N]   (default: online CPUs)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

int main(int argc, char **argv)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = ncpu > 0 ? (int)ncpu : 1;
    if (argc == 3 && !strcmp(argv[1], "--threads")) {
        char *end;
        long v = strtol(argv[2], &end, 10);
        threads = *end || v > 4096 ? 0 : (int)v; /* not a number, or absurd: refused below */
    }
    if (threads < 1 || (argc != 1 && argc != 3)) {
        fprintf(stderr, "usage: bench_search [--threads N]\n");
        return 2;
    }
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
    ts_err e;
    err_clear(&e);
    topo *t = NULL;
    if (topo_default(gpus, &t, &e)) {
        fprintf(stderr, "bench_search: %s\n", e.msg);
        return 1;
    }
    cluster_config cl;
    memset(&cl, 0, sizeof cl);
    cl.gpus = gpus;
    cl.gpus_per_node = t->params.gpus_per_node;
    cl.topology = t;
    /* A100-SXM4-80GB, NVIDIA datasheet (../shared/reference/gpus.csv) */
    snprintf(cl.gpu.name, sizeof cl.gpu.name, "A100-SXM4-80GB");
    cl.gpu.bf16_tflops = 312;
    cl.gpu.fp16_tflops = 312;
    cl.gpu.fp32_tflops = 19.5;
    cl.gpu.hbm_gib = 80;
    cl.gpu.hbm_gbps = 2039;
    cl.gpu.nvlink_gbps = 300;
    search_space s;
    search_space_default(&s, &m, &cl, batch);

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
    for (int st = SEARCH_REJ_HEADS; st <= SEARCH_REJ_MICROBATCHES; st++)
        structural += k[st];
    size_t simulated = k[SEARCH_SIMULATED] + k[SEARCH_REJ_MEMORY_SIM] + k[SEARCH_REJ_SIM_ERROR];
    printf("bench_search: megatron-530b (105 layers, h 20480, 128 heads, s 2048, V 51200) on "
           "%d A100-SXM4-80GB, B = %d, %d threads\n",
           gpus, batch, threads);
    printf("  enumerated %zu: impossible %zu (layers %zu, batch %zu, micro-batches %zu, "
           "tp %zu), config %zu, memory bound %zu\n",
           set->n, structural, k[SEARCH_REJ_LAYERS], k[SEARCH_REJ_BATCH], k[SEARCH_REJ_MICROBATCHES],
           k[SEARCH_REJ_HEADS] + k[SEARCH_REJ_GROUPS] + k[SEARCH_REJ_HIDDEN], k[SEARCH_REJ_CONFIG],
           k[SEARCH_REJ_MEMORY_BOUND]);
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
    if (simulated)
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
