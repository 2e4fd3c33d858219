/* cp_mpi — the ring exchange of context-parallel attention (exec/core/
 * cp_attn.h) over MPI: MPI_Sendrecv to the next rank, from the previous,
 * on a context-parallel communicator (borrowed), host memory. The CUDA
 * backend stages the ring's blocks through the host and exec/cuda/comm_nccl
 * exchanges them the same way (NCCL send/recv on device buffers: not done).
 *
 * Ownership: the returned cp_ring points at *ctx, which the caller keeps
 * alive while the ring is used; no allocation. */
#ifndef TRAINSIM_EXEC_CP_MPI_H
#define TRAINSIM_EXEC_CP_MPI_H

#include <mpi.h>

#include "exec/core/cp_attn.h"

typedef struct {
    MPI_Comm comm;
} cp_mpi_ctx;

cp_ring cp_mpi_ring(cp_mpi_ctx *ctx);

#endif
