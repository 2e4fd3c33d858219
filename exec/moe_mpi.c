/* moe_mpi — all-to-all of MoE counts and token rows over MPI. */
#include "exec/moe_mpi.h"

#include <stdlib.h>

#include "exec/watchdog.h"

static int mpi_ints(void *ud, const int *send, int *recv, int per, ts_err *err)
{
    moe_mpi_ctx *c = ud;
    wd_wait_begin("MoE all-to-all of expert counts");
    int e = MPI_Alltoall(send, per, MPI_INT, recv, per, MPI_INT, c->comm);
    wd_wait_end();
    return e == MPI_SUCCESS ? TS_OK : err_set(err, TS_ESTATE, "moe all-to-all of counts: MPI error %d", e);
}

static int mpi_rows(void *ud, const float *send, const int *send_rows, float *recv, const int *recv_rows, int width,
                    ts_err *err)
{
    moe_mpi_ctx *c = ud;
    int size, rc = TS_OK;
    MPI_Comm_size(c->comm, &size);
    int *buf = calloc((size_t)size * 4, sizeof(int));
    if (!buf)
        return err_set(err, TS_ENOMEM, "moe all-to-all: out of memory");
    int *sc = buf, *sd = buf + size, *rcn = buf + 2 * size, *rd = buf + 3 * size;
    long so = 0, ro = 0;
    for (int r = 0; r < size; r++) {
        long s = (long)send_rows[r] * width, q = (long)recv_rows[r] * width;
        if (so + s > 0x7fffffffL || ro + q > 0x7fffffffL) {
            rc = err_set(err, TS_EINVAL, "moe all-to-all: more than 2^31 floats to exchange (MPI int counts)");
            goto done;
        }
        sc[r] = (int)s;
        sd[r] = (int)so;
        rcn[r] = (int)q;
        rd[r] = (int)ro;
        so += s;
        ro += q;
    }
    wd_wait_begin("MoE all-to-all of token rows");
    int e = MPI_Alltoallv(send, sc, sd, MPI_FLOAT, recv, rcn, rd, MPI_FLOAT, c->comm);
    wd_wait_end();
    if (e != MPI_SUCCESS)
        rc = err_set(err, TS_ESTATE, "moe all-to-all of rows: MPI error %d", e);
done:
    free(buf);
    return rc;
}

moe_xchg moe_mpi_xchg(moe_mpi_ctx *ctx)
{
    moe_xchg x = {.ud = ctx, .ints = mpi_ints, .rows = mpi_rows};
    MPI_Comm_size(ctx->comm, &x.size);
    MPI_Comm_rank(ctx->comm, &x.rank);
    return x;
}

static int mpi_edp_sum(void *ud, float *buf, size_t n, ts_err *err)
{
    moe_mpi_ctx *c = ud;
    if (n > 0x7fffffffUL)
        return err_set(err, TS_EINVAL, "moe expert-gradient all-reduce: %zu floats exceed MPI's int count", n);
    wd_wait_begin("MoE expert-data-parallel gradient all-reduce");
    int e = MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, c->edp_comm);
    wd_wait_end();
    return e == MPI_SUCCESS ? TS_OK : err_set(err, TS_ESTATE, "moe expert-gradient all-reduce: MPI error %d", e);
}

moe_edp moe_mpi_edp(moe_mpi_ctx *ctx)
{
    moe_edp x = {.edp_size = 1, .ud = ctx, .edp_sum = NULL};
    if (ctx->edp_comm != MPI_COMM_NULL) {
        MPI_Comm_size(ctx->edp_comm, &x.edp_size);
        x.edp_sum = mpi_edp_sum;
    }
    return x;
}
