/* The search split across MPI ranks gives the very results of one process.
 * mpirun-np: 3
 *
 * Every rank enumerates the same space; search_mpi_evaluate() simulates a
 * third of the candidates on each rank and exchanges them. Each rank then
 * runs the whole search alone (2 threads) and compares, candidate by
 * candidate, and rank 0 compares the two CSV files byte for byte. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim/cli/search_mpi.h"
#include "sim/config/topo.h"
#include "sim/search/search.h"
#include "sim/search/search_eval.h"
#include "sim/search/search_out.h"

static int passed, failed;

static void check(int ok, const char *what)
{
    if (ok) {
        passed++;
    } else {
        failed++;
        printf("FAIL: %s\n", what);
    }
}

static void space(search_space *s, topo *t)
{
    model_config m;
    memset(&m, 0, sizeof m);
    snprintf(m.name, sizeof m.name, "mpi-test");
    m.num_layers = 8;
    m.hidden_size = 1024;
    m.num_attention_heads = 16;
    m.num_query_groups = 16;
    m.ffn_hidden_size = 4096;
    m.seq_length = 1024;
    m.padded_vocab_size = 32768;
    m.add_bias_linear = true;                     /* GPT-2 style layers */
    m.attention_dropout = m.hidden_dropout = 0.1; /* Megatron-LM's default */
    m.precision = PREC_BF16;
    cluster_config cl;
    memset(&cl, 0, sizeof cl);
    cl.gpus = 16;
    cl.gpus_per_node = 8;
    cl.topology = t;
    snprintf(cl.gpu.name, sizeof cl.gpu.name, "A100-SXM4-80GB");
    cl.gpu.bf16_tflops = 312;
    cl.gpu.fp16_tflops = 312;
    cl.gpu.fp32_tflops = 19.5;
    cl.gpu.hbm_gib = 80;
    cl.gpu.hbm_gbps = 2039;
    cl.gpu.nvlink_gbps = 300;
    search_space_default(s, &m, &cl, 32);
    s->micro_batch_sizes[0] = 1;
    s->micro_batch_sizes[1] = 2;
    s->n_micro_batch_sizes = 2;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    char *b = n >= 0 && fseek(f, 0, SEEK_SET) == 0 ? malloc((size_t)n + 1) : NULL;
    if (b && fread(b, 1, (size_t)n, f) == (size_t)n)
        b[n] = '\0';
    (void)fclose(f); /* read only */
    return b;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    ts_err e;
    err_clear(&e);
    topo *t = NULL;
    if (topo_default(16, &t, &e)) {
        printf("FAIL: topo_default: %s\n", e.msg);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    search_space s;
    space(&s, t);
    search_set *split = NULL, *alone = NULL;
    check(search_enumerate(&s, &split, &e) == TS_OK, "enumerate (split)");
    check(search_enumerate(&s, &alone, &e) == TS_OK, "enumerate (alone)");
    if (!split || !alone) {
        printf("FAIL: %s\n", e.msg);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    search_eval_opts o = {.threads = 1, .nshards = 1};
    int rc = search_mpi_evaluate(split, MPI_COMM_WORLD, &o, &e);
    check(rc == TS_OK, "search_mpi_evaluate");
    if (rc)
        printf("  %s\n", e.msg);
    search_eval_opts o2 = {.threads = 2, .nshards = 1};
    rc = search_evaluate(alone, &o2, &e);
    check(rc == TS_OK, "search_evaluate alone");

    /* NOLINTNEXTLINE(clang-analyzer-core.NullDereference): both set (MPI_Abort above does not return) */
    check(split->n == alone->n && split->n > 0, "same candidate count");
    size_t differ = 0, simulated = 0;
    for (size_t i = 0; i < split->n && i < alone->n; i++) {
        const search_cand *a = &split->cands[i], *b = &alone->cands[i];
        simulated += b->status == SEARCH_SIMULATED;
        bool same = a->status == b->status && a->r.iteration_s == b->r.iteration_s &&
                    a->r.tflops_per_gpu == b->r.tflops_per_gpu && a->r.mfu == b->r.mfu &&
                    a->r.peak_mem_bytes == b->r.peak_mem_bytes && a->r.bubble_fraction == b->r.bubble_fraction &&
                    a->r.exposed_comm_s == b->r.exposed_comm_s && !!split->msgs[i] == !!alone->msgs[i] &&
                    (!split->msgs[i] || !strcmp(split->msgs[i], alone->msgs[i]));
        differ += !same;
    }
    check(differ == 0, "every candidate identical to the single-process run");
    check(simulated > 10, "the case simulates more than 10 layouts");
    for (int st = 0; st < SEARCH_STATUS_COUNT; st++)
        check(split->counts[st] == alone->counts[st], "same counts per status");

    size_t *o_split = NULL, *o_alone = NULL, n_split = 0, n_alone = 0;
    search_rank(split, &o_split, &n_split, &e);
    search_rank(alone, &o_alone, &n_alone, &e);
    check(n_split == n_alone && n_split > 0 && !memcmp(o_split, o_alone, n_split * sizeof *o_split), "same ranking");
    if (rank == 0) {
        char d[] = "/tmp/test_search_mpi.XXXXXX";
        if (mkdtemp(d)) {
            char p1[64], p2[64];
            snprintf(p1, sizeof p1, "%s/split.csv", d);
            snprintf(p2, sizeof p2, "%s/alone.csv", d);
            check(search_write_csv(split, o_split, n_split, p1, &e) == TS_OK, "write split CSV");
            check(search_write_csv(alone, o_alone, n_alone, p2, &e) == TS_OK, "write alone CSV");
            char *a = slurp(p1), *b = slurp(p2);
            check(a && b && !strcmp(a, b), "CSV files identical byte for byte");
            free(a);
            free(b);
            unlink(p1);
            unlink(p2);
            rmdir(d);
        }
    }
    free(o_split);
    free(o_alone);
    search_set_free(split);
    search_set_free(alone);
    topo_free(t);

    int counts[2] = {passed, failed}, total[2] = {0, 0};
    MPI_Reduce(counts, total, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("%d passed, %d failed\n", total[0], total[1]);
    MPI_Finalize();
    return rank == 0 && total[1] ? 1 : 0;
}
