/* MPI test of context-parallel ring attention (exec/core/cp_attn.h over
 * exec/cp_mpi.h): on cp = 1, 2, 4 ranks, each holding its two chunks of
 * the sequence (cp_split.h), the outputs and the q, k, v gradients put back
 * at their global positions equal the single-rank attention's.
 *
 * mpirun-np: 4
 *
 * Tolerance: the layouts re-associate the softmax sums (online merges in a
 * different order, in double) and the dK, dV sums (over ranks, in fp32,
 * <= T terms of magnitude <= ~1): ~T * 6e-8 ~ 2e-6 at T = 32. Accepted
 * 1e-5 absolute (values ~1); a wrong chunk, mask or hop moves results by
 * O(1e-1). Measured maxima are printed.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/core/cp_attn.h"
#include "exec/core/cp_split.h"
#include "exec/cp_mpi.h"
#include "exec/watchdog.h"

enum { B = 2, T = 32, NH = 2, HS = 8, C = NH * HS, C3 = 3 * C };

static int world_rank, world_size, npass, nfail;

/* Forward + backward on comm; the global out and dqkv summed onto rank 0 of
 * comm (each global row written by exactly one rank). */
static int run(MPI_Comm comm, const float *qkv, const float *dout, float *gout, float *gdq, char *msg, size_t msz)
{
    int cp, r;
    MPI_Comm_size(comm, &cp);
    MPI_Comm_rank(comm, &r);
    int Tl = T / cp, rc;
    size_t rows = (size_t)B * Tl;
    float *lq = calloc(rows * C3, 4), *lo = calloc(rows * C, 4), *ldo = calloc(rows * C, 4),
          *ldq = calloc(rows * C3, 4);
    float *lse = calloc((size_t)B * NH * Tl, 4), *o = calloc((size_t)B * T * C, 4), *dq = calloc((size_t)B * T * C3, 4);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < Tl; i++) {
            size_t g = (size_t)b * T + (size_t)cp_global_pos(T, cp, r, i), l = (size_t)b * Tl + i;
            memcpy(lq + l * C3, qkv + g * C3, C3 * sizeof(float));
            memcpy(ldo + l * C, dout + g * C, C * sizeof(float));
        }
    cp_mpi_ctx ctx = {.comm = comm};
    cp_ring ring = cp_mpi_ring(&ctx);
    ts_err err;
    err_clear(&err);
    rc = cp_attn_fwd(&ring, lo, lse, lq, B, T, NH, NH, HS, NULL, &err);
    if (!rc)
        rc = cp_attn_bwd(&ring, ldq, ldo, lo, lse, lq, B, T, NH, NH, HS, NULL, &err);
    if (rc)
        snprintf(msg, msz, "%s", err.msg);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < Tl; i++) {
            size_t g = (size_t)b * T + (size_t)cp_global_pos(T, cp, r, i), l = (size_t)b * Tl + i;
            memcpy(o + g * C, lo + l * C, C * sizeof(float));
            memcpy(dq + g * C3, ldq + l * C3, C3 * sizeof(float));
        }
    MPI_Reduce(o, gout, B * T * C, MPI_FLOAT, MPI_SUM, 0, comm);
    MPI_Reduce(dq, gdq, B * T * C3, MPI_FLOAT, MPI_SUM, 0, comm);
    free(lq);
    free(lo);
    free(ldo);
    free(ldq);
    free(lse);
    free(o);
    free(dq);
    return rc;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    wd_start(world_rank, 60.0);
    static float qkv[B * T * C3], dout[B * T * C], ro[B * T * C], rdq[B * T * C3], o[B * T * C], dq[B * T * C3];
    unsigned s = 11;
    for (int i = 0; i < B * T * C3; i++) {
        s = s * 1664525u + 1013904223u;
        qkv[i] = (float)((s >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
    for (int i = 0; i < B * T * C; i++) {
        s = s * 1664525u + 1013904223u;
        dout[i] = (float)((s >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
    char msg[1024] = "";
    int rc = 0;
    if (world_rank == 0)
        rc = run(MPI_COMM_SELF, qkv, dout, ro, rdq, msg, sizeof msg);
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rc && world_rank == 0) {
        printf("FAIL: single-rank reference (%s)\n", msg);
        nfail++;
    }
    for (int cp = 2; cp <= world_size && cp <= 4 && !rc; cp *= 2) {
        MPI_Comm sub;
        MPI_Comm_split(MPI_COMM_WORLD, world_rank < cp ? 0 : MPI_UNDEFINED, world_rank, &sub);
        int lrc = 0;
        if (sub != MPI_COMM_NULL) {
            lrc = run(sub, qkv, dout, o, dq, msg, sizeof msg);
            MPI_Comm_free(&sub);
        }
        int bad;
        MPI_Allreduce(&lrc, &bad, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (world_rank == 0) {
            double wo = 0.0, wd = 0.0;
            for (int i = 0; i < B * T * C; i++)
                wo = fmax(wo, fabs((double)o[i] - ro[i]));
            for (int i = 0; i < B * T * C3; i++)
                wd = fmax(wd, fabs((double)dq[i] - rdq[i]));
            int ok = !bad && wo <= 1e-5 && wd <= 1e-5;
            printf("%s: cp=%d (T %d, chunks of %d): max |out diff| %.2e, max |dqkv diff| %.2e%s%s\n",
                   ok ? "PASS" : "FAIL", cp, T, T / (2 * cp), wo, wd, bad ? ", error: " : "", bad ? msg : "");
            ok ? npass++ : nfail++;
        }
    }
    if (world_rank == 0)
        printf("%d passed, %d failed\n", npass, nfail);
    wd_stop();
    MPI_Finalize();
    return nfail ? 1 : 0;
}
