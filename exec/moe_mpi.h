/* moe_mpi — the MoE layer's all-to-all exchange (exec/core/moe.h) over MPI:
 * MPI_Alltoall for the per-expert counts, MPI_Alltoallv (MPI_FLOAT) for the
 * token rows, on an expert-parallel communicator, and MPI_Allreduce of the
 * expert gradients on an expert-data-parallel one (borrowed). The CUDA
 * backend's version of the same exchange, NCCL send/recv groups on device
 * rows, is exec/cuda/moe_nccl.h (the NCCL comm's, comm_nccl_set_ep).
 *
 * Ownership: the returned moe_xchg holds a pointer to *ctx, which the caller
 * owns and keeps alive while the exchange is used; no allocation. */
#ifndef TRAINSIM_EXEC_MOE_MPI_H
#define TRAINSIM_EXEC_MOE_MPI_H

#include <mpi.h>

#include "exec/core/moe.h"

typedef struct {
    MPI_Comm comm;     /* the expert-parallel group */
    MPI_Comm edp_comm; /* the expert-data-parallel group (MPI_Allreduce of expert gradients); MPI_COMM_NULL: none */
} moe_mpi_ctx;

/* Exchange over ctx->comm (size = ep, rank = expert-parallel rank). */
moe_xchg moe_mpi_xchg(moe_mpi_ctx *ctx);
/* Expert gradient sums over ctx->edp_comm (edp_size 1 when MPI_COMM_NULL). */
moe_edp moe_mpi_edp(moe_mpi_ctx *ctx);

#endif
