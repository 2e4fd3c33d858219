/* MPI test of KV-cache inference with tensor parallelism: on 2 ranks, t = 2
 * (with and without sequence parallelism in the stage) gives at every step
 * (the prefill and each greedy decode step) the logits of the t = 1 model
 * run on one rank, on both ranks; each rank caches half of the keys and
 * values.
 *
 * mpirun-np: 2
 *
 * Tolerance (fp32): t = 2 splits the attention output and MLP output GEMMs
 * into two partial sums added by the all-reduce, re-associating sums of at
 * most F = 32 products (each rounded at 6e-8 relative); through 2 layers and
 * the LayerNorms the logits (|l| ~ 0.1) move by far less than 1e-5.
 * Accepted: 1e-5 absolute per logit (the largest difference is printed). A
 * missing or doubled partial sum moves them by O(|l|).
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "exec/comm_mpi.h"
#include "exec/core/backend.h"
#include "exec/core/comm.h"
#include "exec/core/gpt.h"
#include "exec/core/gpt_infer.h"
#include "exec/cpu/backend_cpu.h"

#define TOL 1e-5
static const gpt_dims DIMS = {.vocab = 32, .seq = 8, .hidden = 16, .heads = 4, .ffn = 32, .layers = 2, .batch = 2};
enum { PROMPT = 3, STEPS = 4, B = 2, V = 32 };

static int world_rank, npass, nfail;

static void check(bool ok, const char *what)
{
    if (ok)
        npass++;
    else {
        nfail++;
        fprintf(stderr, "FAIL (rank %d): %s\n", world_rank, what);
    }
}

/* Logits of the prefill and each decode step of the t = 1 model (local comm)
 * and of the t = 2 model (world), fed the same greedy tokens (from t = 2). */
static void run_case(bool sp)
{
    ts_err err;
    err_clear(&err);
    backend *be = NULL;
    comm *local = NULL, *tp = NULL;
    gpt_stage *s1 = NULL, *s2 = NULL;
    gpt_kv *k1 = NULL, *k2 = NULL;
    int rc = backend_cpu_create(1, &be, &err);
    if (!rc)
        rc = comm_local_create(&local, &err);
    if (!rc)
        rc = comm_mpi_create(MPI_COMM_WORLD, 2, 1, 1, &tp, &err);
    if (!rc)
        rc = gpt_stage_create(&DIMS, 0, DIMS.layers, true, true, false, 5, be, local, &s1, &err);
    if (!rc)
        rc = gpt_stage_create(&DIMS, 0, DIMS.layers, true, true, sp, 5, be, tp, &s2, &err);
    if (!rc)
        rc = gpt_kv_create(s1, PROMPT, &k1, &err);
    if (!rc)
        rc = gpt_kv_create(s2, PROMPT, &k2, &err);
    check(rc == TS_OK, rc ? err.msg : "set-up");
    if (rc)
        MPI_Abort(MPI_COMM_WORLD, 1);
    check(gpt_kv_bytes(k2) * 2 == gpt_kv_bytes(k1), "each tensor rank caches half the keys and values");
    int tok[B * PROMPT], next[B];
    for (int i = 0; i < B * PROMPT; i++)
        tok[i] = (5 * i + 3) % V;
    float l1[B * V], l2[B * V], other[B * V];
    double worst = 0;
    bool same = true, ranks_agree = true;
    for (int s = 0; s <= STEPS; s++) {
        const int *in = s == 0 ? tok : next;
        int n = s == 0 ? PROMPT : 1;
        rc = gpt_infer_step(s1, k1, in, n, l1, &err);
        if (!rc)
            rc = gpt_infer_step(s2, k2, in, n, l2, &err);
        if (rc) {
            check(false, err.msg);
            MPI_Abort(MPI_COMM_WORLD, 1);
            return;
        }
        for (int i = 0; i < B * V; i++) {
            double d = fabs((double)l1[i] - l2[i]);
            worst = fmax(worst, d);
            same = same && d <= TOL;
        }
        /* the replicated head: rank 1's logits are rank 0's */
        MPI_Allreduce(l2, other, B * V, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
        for (int i = 0; i < B * V; i++)
            ranks_agree = ranks_agree && other[i] == l2[i];
        gpt_argmax(l2, B, V, next);
    }
    char what[128];
    snprintf(what, sizeof what, "t=2%s logits = t=1 logits within %g at every step (largest difference %.3g)",
             sp ? " (sp stage)" : "", TOL, worst);
    check(same, what);
    check(ranks_agree, "both tensor ranks hold the same logits");
    if (world_rank == 0)
        printf("%s\n", what);
    gpt_kv_free(s1, k1);
    gpt_kv_free(s2, k2);
    gpt_stage_free(s1);
    gpt_stage_free(s2);
    tp->destroy(tp);
    local->destroy(local);
    be->destroy(be);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int size;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (world_rank == 0)
            printf("needs 2 ranks (mpirun -np 2)\n0 passed, 1 failed\n");
        MPI_Finalize();
        return 1;
    }
    run_case(false);
    run_case(true);
    int counts[2] = {npass, nfail}, total[2] = {0, 0};
    MPI_Reduce(counts, total, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (world_rank == 0)
        printf("%d passed, %d failed\n", total[0], total[1]);
    MPI_Finalize();
    return nfail ? 1 : 0;
}
