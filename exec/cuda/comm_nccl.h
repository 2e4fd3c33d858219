/* comm_nccl — the comm interface (exec/core/comm.h) over NCCL, for the CUDA backend.
 *
 * Groups as comm_mpi lays them out (Megatron-core order, tensor innermost):
 * base rank g = tp + t * (cp_rank + cp * (dp + d * pp)) (comm.h's order; the data-parallel group
 * holds the cp x d ranks that share the parameters). Each group with more than one rank
 * gets its own NCCL communicator, bootstrapped over MPI: the group's rank 0
 * calls ncclGetUniqueId and MPI_Bcast's it over the group's MPI
 * sub-communicator, then every member calls ncclCommInitRank (groups in the
 * fixed order TP, PP, DP on every rank, so the blocking inits cannot cross).
 * The context-parallel group has an MPI sub-communicator only: its ring hop
 * (cp_sendrecv) is MPI_Sendrecv on HOST memory, as exec/cp_mpi.c's; the
 * CUDA backend's flash attention stages the ring's blocks through the host
 * for it (exec/cuda/backend_cuda.h).
 *
 * Streams: collectives run on a communication stream and point-to-point on
 * a second one, never on the compute stream. Each operation first waits
 * (cudaStreamWaitEvent) for the work already issued on the compute stream,
 * and a collective makes the compute stream wait for its end. So "synchronous"
 * in comm.h's sense holds in stream order: every op issued after the call
 * sees the result, while the host does not block and compute issued before
 * the call overlaps nothing it should not.
 *
 * Point-to-point: isend/irecv are queued; wait()/wait_all() launch every
 * queued transfer in one ncclGroupStart/End on the p2p stream (so a send and
 * a receive between the same two ranks cannot deadlock on order), record an
 * event, and make the compute stream wait for it; the host never blocks.
 * NCCL matches transfers between two ranks in issue order, so `tag` is only
 * checked for range: both sides must issue their matching transfers in the
 * same order (the schedule IR's send/recv pairs do).
 *
 * Ownership: the comm owns its NCCL communicators, MPI sub-communicators
 * (comm_nccl_set_ep's expert groups too), streams and events; the base communicator and compute stream are borrowed.
 * c->destroy(c) releases them (collective over base).
 */
#ifndef TRAINSIM_COMM_NCCL_H
#define TRAINSIM_COMM_NCCL_H

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include "exec/core/comm.h"

#define COMM_NCCL_MAX_REQ 1024 /* isend/irecv in flight */

/* Collective over base. TS_EINVAL if base's size is not t*p*d, TS_ENOTSUP
 * with NCCL's message when a communicator cannot be created. `compute` is
 * the backend's stream (backend_cuda_stream). */
int comm_nccl_create(MPI_Comm base, int t, int p, int d, cudaStream_t compute, comm **out, ts_err *err);
/* The same with cp context-parallel ranks (base's size t*cp*p*d; cp = 1 is
 * comm_nccl_create). */
int comm_nccl_create_cp(MPI_Comm base, int t, int cp, int p, int d, cudaStream_t compute, comm **out, ts_err *err);

/* Expert parallelism of size ep (comm.h's moe_xc / moe_edp), the groups
 * folded as comm_mpi_set_ep folds them, the exchange moe_nccl.h's on the
 * compute stream (host counts, device rows). ep must divide t*cp*d
 * (TS_EINVAL naming --expert-model-parallel-size); TS_ESTATE when already
 * set, or with MPI's or NCCL's message when a group cannot be made (the
 * comm is then as before). Collective over the comm's base communicator;
 * c->destroy releases the groups. */
int comm_nccl_set_ep(comm *c, int ep, ts_err *err);

#endif
