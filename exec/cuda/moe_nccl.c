/* moe_nccl — the MoE exchange over NCCL (device rows) and MPI (host counts). */
#include "exec/cuda/moe_nccl.h"

#include <string.h>

#include "exec/cuda/nccl_boot.h"

/* MPI sub-communicator (color, key) of base and, with more than one rank,
 * its NCCL communicator (nccl_boot_comm). */
static int make_group(MPI_Comm base, int color, int key, const char *name, MPI_Comm *mc, ncclComm_t *nc, int *size,
                      int *rank, ts_err *err)
{
    *nc = NULL;
    if (MPI_Comm_split(base, color, key, mc) != MPI_SUCCESS) {
        *mc = MPI_COMM_NULL;
        return err_set(err, TS_ESTATE, "moe nccl: MPI_Comm_split of the %s group failed", name);
    }
    MPI_Comm_size(*mc, size);
    MPI_Comm_rank(*mc, rank);
    if (*size == 1)
        return TS_OK;
    return nccl_boot_comm(*mc, *size, *rank, name, nc, err);
}

void moe_nccl_free(moe_nccl_ctx *x)
{
    if (x->nc)
        ncclCommDestroy(x->nc);
    if (x->edp_nc)
        ncclCommDestroy(x->edp_nc);
    if (x->comm != MPI_COMM_NULL)
        MPI_Comm_free(&x->comm);
    if (x->edp_comm != MPI_COMM_NULL)
        MPI_Comm_free(&x->edp_comm);
    x->nc = x->edp_nc = NULL;
}

int moe_nccl_init(moe_nccl_ctx *x, MPI_Comm base, const comm *c, int ep, cudaStream_t stream, ts_err *err)
{
    memset(x, 0, sizeof *x);
    x->comm = x->edp_comm = MPI_COMM_NULL;
    x->stream = stream;
    int t = c->size[COMM_TP], p = c->size[COMM_PP], dcp = c->size[COMM_DP];
    if (ep < 1 || (t * dcp) % ep)
        return err_set(err, TS_EINVAL,
                       "--expert-model-parallel-size %d must divide tensor x context x data parallel ranks %d x %d = "
                       "%d (experts fold into them)",
                       ep, t, dcp, t * dcp);
    /* comm_mpi_set_ep's fold: xi = tp + t * (data group's rank) within a stage */
    int xi = c->rank[COMM_TP] + t * c->rank[COMM_DP], pp = c->rank[COMM_PP];
    int rc =
        make_group(base, pp + p * (xi / ep), xi % ep, "expert-parallel", &x->comm, &x->nc, &x->size, &x->rank, err);
    if (!rc)
        rc = make_group(base, pp + p * (xi % ep), xi / ep, "expert-data-parallel", &x->edp_comm, &x->edp_nc,
                        &x->edp_size, &x->edp_rank, err);
    if (rc)
        moe_nccl_free(x);
    return rc;
}

static int nc_ints(void *ud, const int *send, int *recv, int per, ts_err *err)
{
    moe_nccl_ctx *x = ud;
    int e = MPI_Alltoall(send, per, MPI_INT, recv, per, MPI_INT, x->comm);
    return e == MPI_SUCCESS ? TS_OK : err_set(err, TS_ESTATE, "moe all-to-all of counts: MPI error %d", e);
}

static int nc_rows(void *ud, const float *send, const int *send_rows, float *recv, const int *recv_rows, int width,
                   ts_err *err)
{
    moe_nccl_ctx *x = ud;
    size_t so = 0, ro = 0, w = (size_t)width;
    for (int r = 0; r < x->size; r++) { /* this rank's own rows: a device copy, outside the group */
        if (r == x->rank && send_rows[r] != recv_rows[r])
            return err_set(err, TS_ESTATE, "moe nccl exchange: %d rows sent to self, %d expected", send_rows[r],
                           recv_rows[r]);
        if (r == x->rank && send_rows[r] > 0) {
            cudaError_t st = cudaMemcpyAsync(recv + ro * w, send + so * w, (size_t)send_rows[r] * w * sizeof(float),
                                             cudaMemcpyDeviceToDevice, x->stream);
            if (st != cudaSuccess)
                return err_set(err, TS_ESTATE, "moe nccl exchange: device copy of own rows: %s",
                               cudaGetErrorString(st));
        }
        so += (size_t)send_rows[r];
        ro += (size_t)recv_rows[r];
    }
    if (x->size == 1)
        return TS_OK;
    ncclResult_t res = ncclGroupStart();
    so = ro = 0;
    for (int r = 0; r < x->size && res == ncclSuccess; r++) {
        if (r != x->rank && send_rows[r] > 0)
            res = ncclSend(send + so * w, (size_t)send_rows[r] * w, ncclFloat, r, x->nc, x->stream);
        if (res == ncclSuccess && r != x->rank && recv_rows[r] > 0)
            res = ncclRecv(recv + ro * w, (size_t)recv_rows[r] * w, ncclFloat, r, x->nc, x->stream);
        so += (size_t)send_rows[r];
        ro += (size_t)recv_rows[r];
    }
    ncclResult_t end = ncclGroupEnd();
    if (res == ncclSuccess)
        res = end;
    return res == ncclSuccess
               ? TS_OK
               : err_set(err, TS_ESTATE, "moe all-to-all of rows (NCCL send/recv): %s", ncclGetErrorString(res));
}

moe_xchg moe_nccl_xchg(moe_nccl_ctx *x)
{
    moe_xchg xc = {.size = x->size, .rank = x->rank, .ud = x, .ints = nc_ints, .rows = nc_rows};
    return xc;
}

static int nc_edp_sum(void *ud, float *buf, size_t n, ts_err *err)
{
    moe_nccl_ctx *x = ud;
    ncclResult_t r = ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, x->edp_nc, x->stream);
    return r == ncclSuccess
               ? TS_OK
               : err_set(err, TS_ESTATE, "moe expert-gradient all-reduce (NCCL): %s", ncclGetErrorString(r));
}

moe_edp moe_nccl_edp(moe_nccl_ctx *x)
{
    moe_edp e = {.edp_size = x->edp_size, .ud = x, .edp_sum = x->edp_nc ? nc_edp_sum : NULL};
    return e;
}
