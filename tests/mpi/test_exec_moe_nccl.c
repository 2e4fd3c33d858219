/* MPI + GPU test of the NCCL comm's MoE exchange (comm_nccl_set_ep,
 * exec/cuda/moe_nccl.h): on every rank's own GPU, the per-expert counts
 * (host ints) and rows of uneven sizes (device memory) go through the
 * expert-parallel group (ep = all ranks) and must arrive where moe.h's
 * moe_xchg layout puts them, equal to the MPI comm's exchange
 * (comm_mpi_set_ep) of the same data; the expert-data-parallel sum (ep = 1:
 * every rank in the EDP group) must equal the sum over ranks; and
 * comm_nccl_set_ep refuses an ep that does not divide the ranks and a
 * second call.
 *
 * mpirun-np: 2
 *
 * Skipped (every rank agrees, "0 passed, 0 failed") in a build without CUDA
 * or when the node has fewer GPUs than ranks (NCCL needs one GPU per rank).
 * Tolerance: exact. The rows are small integers, exact in fp32, and an
 * exchange only moves them; the EDP sum adds 2 or more integers < 2^24.
 */
#include <mpi.h>
#include <stdio.h>

#ifndef TRAINSIM_CUDA
int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0)
        printf("test_exec_moe_nccl: SKIPPED: built without CUDA\n0 passed, 0 failed\n");
    MPI_Finalize();
    return 0;
}
#else
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "exec/comm_mpi.h"
#include "exec/cuda/backend_cuda.h"
#include "exec/cuda/comm_nccl.h"
#include "exec/watchdog.h"

#define PER   3 /* ints per destination */
#define WIDTH 5 /* floats per row */

static int world_rank, world_size, npass, nfail;

/* Collective: ok on every rank. */
static void check(int ok, const char *what)
{
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (world_rank != 0)
        return;
    if (all)
        npass++;
    else
        nfail++;
    printf("%s: %s\n", all ? "PASS" : "FAIL", what);
}

/* Rows this rank sends to rank d, and receives from rank s. */
static int nrows(int from, int to)
{
    return 1 + (from + 2 * to) % 3;
}

static float row_val(int from, int to, int j, int c)
{
    return (float)(from * 1000 + to * 100 + j * 10 + c);
}

/* The exchange through xc; rows staged through device memory when be is
 * given (the NCCL comm's), else host memory (the MPI comm's). ints / rows
 * receive what arrived. */
static int exchange(const moe_xchg *xc, backend *be, int *ints, float *rows, size_t nrecv, ts_err *err)
{
    int P = world_size, send_i[64 * PER], send_rows[64], recv_rows[64];
    size_t ns = 0;
    for (int d = 0; d < P; d++) {
        for (int i = 0; i < PER; i++)
            send_i[d * PER + i] = 100 * world_rank + 10 * d + i;
        send_rows[d] = nrows(world_rank, d);
        recv_rows[d] = nrows(d, world_rank);
        ns += (size_t)send_rows[d];
    }
    float *sh = malloc(ns * WIDTH * sizeof *sh);
    size_t o = 0;
    for (int d = 0; d < P; d++)
        for (int j = 0; j < send_rows[d]; j++, o++)
            for (int c = 0; c < WIDTH; c++)
                sh[o * WIDTH + c] = row_val(world_rank, d, j, c);
    int rc = xc->ints(xc->ud, send_i, ints, PER, err);
    if (!rc && be) {
        float *sd = be->alloc(be, ns * WIDTH), *rd = be->alloc(be, nrecv * WIDTH);
        be->to_device(be, sd, sh, ns * WIDTH);
        rc = xc->rows(xc->ud, sd, send_rows, rd, recv_rows, WIDTH, err);
        be->to_host(be, rows, rd, nrecv * WIDTH);
        be->free(be, sd);
        be->free(be, rd);
    } else if (!rc)
        rc = xc->rows(xc->ud, sh, send_rows, rows, recv_rows, WIDTH, err);
    free(sh);
    return rc;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    int ndev = 0, ok = cudaGetDeviceCount(&ndev) == cudaSuccess && ndev >= world_size && world_size <= 64, all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all) {
        if (world_rank == 0)
            printf("test_exec_moe_nccl: SKIPPED: a GPU per rank is needed (%d ranks, %d GPUs on rank 0)\n"
                   "0 passed, 0 failed\n",
                   world_size, ndev);
        MPI_Finalize();
        return 0;
    }
    wd_start(world_rank, 120.0);
    ts_err e = {0};
    backend *be = NULL;
    comm *nc = NULL, *mc = NULL, *nc1 = NULL;
    int rc = backend_cuda_create(world_rank, false, &be, &e);
    check(rc == TS_OK, "CUDA backend on each rank's GPU");
    if (!rc)
        rc = comm_nccl_create(MPI_COMM_WORLD, 1, 1, world_size, backend_cuda_stream(be), &nc, &e);
    if (!rc)
        rc = comm_mpi_create(MPI_COMM_WORLD, 1, 1, world_size, &mc, &e);
    check(rc == TS_OK, "NCCL and MPI comms (d = ranks)");
    if (rc || !be || !nc || !mc) {
        if (world_rank == 0)
            printf("  %s\n", e.msg);
        goto done;
    }

    ts_err e3 = {0};
    int bad = comm_nccl_set_ep(nc, world_size + 1, &e3);
    check(bad == TS_EINVAL && strstr(e3.msg, "--expert-model-parallel-size") != NULL,
          "set_ep with ep not dividing the ranks: TS_EINVAL naming --expert-model-parallel-size");
    rc = comm_nccl_set_ep(nc, world_size, &e);
    if (!rc)
        rc = comm_mpi_set_ep(mc, world_size, &e);
    check(rc == TS_OK && nc->moe_xc && nc->moe_edp && nc->moe_xc->size == world_size &&
              nc->moe_xc->rank == world_rank && nc->moe_edp->edp_size == 1 && !nc->moe_edp->edp_sum,
          "set_ep(ep = ranks): the exchange over every rank, no expert-data-parallel sum");
    ts_err e2 = {0};
    check(comm_nccl_set_ep(nc, world_size, &e2) == TS_ESTATE, "set_ep twice: TS_ESTATE");

    size_t nrecv = 0;
    for (int s = 0; s < world_size; s++)
        nrecv += (size_t)nrows(s, world_rank);
    int gi[64 * PER] = {0}, wi[64 * PER] = {0};
    float *gr = calloc(nrecv * WIDTH + 1, sizeof *gr), *mr = calloc(nrecv * WIDTH + 1, sizeof *mr);
    int rn = rc ? rc : exchange(nc->moe_xc, be, gi, gr, nrecv, &e);
    int rm = rc ? rc : exchange(mc->moe_xc, NULL, wi, mr, nrecv, &e);
    ts_err bs = {0};
    check(rn == TS_OK && rm == TS_OK && backend_cuda_status(be, &bs) == TS_OK, "both exchanges run");
    int good = 1;
    for (int s = 0; s < world_size; s++)
        for (int i = 0; i < PER; i++)
            good &= gi[s * PER + i] == 100 * s + 10 * world_rank + i && wi[s * PER + i] == gi[s * PER + i];
    check(good, "counts (host ints): recv[s per + i] = what rank s sent here, as the MPI comm's");
    size_t o = 0;
    good = 1;
    for (int s = 0; s < world_size; s++)
        for (int j = 0; j < nrows(s, world_rank); j++, o++)
            for (int c = 0; c < WIDTH; c++)
                good &= gr[o * WIDTH + c] == row_val(s, world_rank, j, c) && mr[o * WIDTH + c] == gr[o * WIDTH + c];
    check(good, "rows (device memory, uneven counts): in source-rank order, as the MPI comm's");
    free(gr);
    free(mr);

    /* ep = 1: every rank holds every expert, the EDP group is all ranks */
    rc = comm_nccl_create(MPI_COMM_WORLD, 1, 1, world_size, backend_cuda_stream(be), &nc1, &e);
    if (!rc)
        rc = comm_nccl_set_ep(nc1, 1, &e);
    check(rc == TS_OK && nc1->moe_edp->edp_size == world_size && nc1->moe_edp->edp_sum,
          "set_ep(1): the expert-data-parallel group is every rank");
    if (!rc) {
        const size_t n = 7;
        float h[7], *d = be->alloc(be, n);
        for (size_t i = 0; i < n; i++)
            h[i] = (float)(world_rank + 1) * (float)(i + 1);
        be->to_device(be, d, h, n);
        rc = nc1->moe_edp->edp_sum(nc1->moe_edp->ud, d, n, &e);
        be->to_host(be, h, d, n);
        be->free(be, d);
        float ranks = (float)world_size * (float)(world_size + 1) / 2.0f;
        good = rc == TS_OK;
        for (size_t i = 0; i < n; i++)
            good &= h[i] == ranks * (float)(i + 1);
        check(good, "edp_sum (NCCL all-reduce on device memory) = the sum over ranks");
    }
done:
    if (nc1)
        nc1->destroy(nc1);
    if (nc)
        nc->destroy(nc);
    if (mc)
        mc->destroy(mc);
    if (be)
        be->destroy(be);
    if (world_rank == 0)
        printf("%d passed, %d failed\n", npass, nfail);
    wd_stop();
    MPI_Finalize();
    return nfail ? 1 : 0;
}
#endif
