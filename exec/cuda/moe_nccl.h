/* moe_nccl — the MoE layer's expert-parallel exchange (exec/core/moe.h's
 * moe_xchg and moe_edp) for the CUDA backend: the per-expert counts by
 * MPI_Alltoall on the host (they size the row exchange, so they must reach
 * the host anyway, as Megatron-core's .cpu() of the counts does), the token
 * rows by grouped ncclSend/ncclRecv of DEVICE memory, the expert gradients
 * by ncclAllReduce, all on the backend's compute stream (stream order: work
 * issued after a call sees its result; the host does not block on rows).
 *
 * Groups: split exactly as comm_mpi_set_ep splits the MPI ones (Megatron-
 * core's etp-ep-edp-pp fold with etp = 1: within a pipeline stage xi = tp +
 * t * (the data group's rank), EP rank xi % ep, EDP rank xi / ep), each
 * bootstrapped as comm_nccl's groups are (rank 0's ncclGetUniqueId by
 * MPI_Bcast, then ncclCommInitRank). A group of one rank has no NCCL
 * communicator: its rows are copied device to device.
 *
 * Status: compiled, not run (no GPU where it was written; NCCL send/recv
 * between ranks needs two or more GPUs). comm_nccl_set_ep (comm_nccl.h)
 * gives it to the NCCL comm, for the MoE layers of --backend cuda.
 *
 * Ownership: moe_nccl_init fills a caller-owned ctx whose communicators
 * moe_nccl_free releases (collective over base); base and the stream are
 * borrowed. The moe_xchg / moe_edp returned point at ctx, which must outlive
 * them. */
#ifndef TRAINSIM_EXEC_CUDA_MOE_NCCL_H
#define TRAINSIM_EXEC_CUDA_MOE_NCCL_H

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include "exec/core/comm.h"
#include "exec/core/moe.h"

typedef struct {
    MPI_Comm comm, edp_comm; /* the expert-parallel and expert-data-parallel groups */
    ncclComm_t nc, edp_nc;   /* their NCCL communicators; NULL for a group of one rank */
    int size, rank;          /* ep, this rank's EP rank */
    int edp_size, edp_rank;
    cudaStream_t stream; /* borrowed: the backend's compute stream */
} moe_nccl_ctx;

/* Collective over base (the comm's base communicator, in c's layout). ep
 * must divide t x cp x d, as comm_mpi_set_ep requires (TS_EINVAL naming
 * --expert-model-parallel-size); TS_ESTATE / TS_ENOTSUP with MPI's or NCCL's
 * message when a group cannot be made. On failure ctx holds nothing. */
int moe_nccl_init(moe_nccl_ctx *ctx, MPI_Comm base, const comm *c, int ep, cudaStream_t stream, ts_err *err);
void moe_nccl_free(moe_nccl_ctx *ctx);

/* The exchange over ctx's EP group: ints on HOST arrays, rows on DEVICE
 * arrays (moe_xchg's layout). */
moe_xchg moe_nccl_xchg(moe_nccl_ctx *ctx);
/* Expert gradient sums (DEVICE buffers) over the EDP group (edp_size 1 and
 * no edp_sum when the group has one rank). */
moe_edp moe_nccl_edp(moe_nccl_ctx *ctx);

#endif
