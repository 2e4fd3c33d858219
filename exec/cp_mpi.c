/* cp_mpi — ring send/receive of keys and values over MPI. */
#include "exec/cp_mpi.h"

#include "exec/watchdog.h"

/* Tag of the ring's messages (one ring in flight per communicator). */
#define CP_RING_TAG 7100

static int mpi_sendrecv(void *ud, const float *send, float *recv, size_t n, ts_err *err)
{
    cp_mpi_ctx *c = ud;
    int size, rank;
    MPI_Comm_size(c->comm, &size);
    MPI_Comm_rank(c->comm, &rank);
    if (n > 0x7fffffffu)
        return err_set(err, TS_EINVAL, "context-parallel ring: %zu floats exceed MPI's int count", n);
    wd_wait_begin("context-parallel ring send/receive");
    int e = MPI_Sendrecv(send, (int)n, MPI_FLOAT, (rank + 1) % size, CP_RING_TAG, recv, (int)n, MPI_FLOAT,
                         (rank + size - 1) % size, CP_RING_TAG, c->comm, MPI_STATUS_IGNORE);
    wd_wait_end();
    return e == MPI_SUCCESS ? TS_OK : err_set(err, TS_ESTATE, "context-parallel ring: MPI error %d", e);
}

cp_ring cp_mpi_ring(cp_mpi_ctx *ctx)
{
    cp_ring r = {.ud = ctx, .sendrecv = mpi_sendrecv};
    MPI_Comm_size(ctx->comm, &r.size);
    MPI_Comm_rank(ctx->comm, &r.rank);
    return r;
}
