/* nccl_boot — an NCCL communicator over an MPI group: the one bootstrap of
 * the executor's groups (comm_nccl.h) and of the MoE exchange's
 * (moe_nccl.h).
 *
 * Ownership: the caller owns the communicator it gets (ncclCommDestroy);
 * the MPI communicator is borrowed. */
#ifndef TRAINSIM_EXEC_CUDA_NCCL_BOOT_H
#define TRAINSIM_EXEC_CUDA_NCCL_BOOT_H

#include <mpi.h>
#include <nccl.h>

#include "sim/util/err.h"

/* The NCCL communicator *nc of the size ranks of mc (this one rank in it),
 * named group in errors ("tensor-parallel", "expert-parallel"): rank 0's
 * ncclGetUniqueId broadcast over mc (even when it failed, so that the
 * peers learn it instead of hanging), then ncclCommInitRank. Collective
 * over mc; call it only with size > 1. The caller owns *nc
 * (ncclCommDestroy); NULL on failure. TS_ESTATE, TS_ENOTSUP. */
int nccl_boot_comm(MPI_Comm mc, int size, int rank, const char *group, ncclComm_t *nc, ts_err *err);

#endif
