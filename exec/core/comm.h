/* comm — the executor's communication interface: MPI (exec/comm_mpi.h), NCCL
 * (exec/cuda/comm_nccl.h) and the 1-rank local comm below implement it.
 *
 * A comm is a small vtable over four process groups of one rank, laid out
 * in Megatron-core's default order tp-cp-dp-pp (tensor innermost, pipeline
 * outermost): global rank
 * g = tp_rank + t * (cp_rank + cp * (dp_rank + d * pp_rank)) within the
 * layout's communicator (cp = 1: tp + t * (dp + d * pp)), as trainsim
 * numbers its ranks.
 *   COMM_TP  the t ranks of one tensor-parallel group (same cp, pp, dp)
 *   COMM_PP  the p ranks of one pipeline (same tp, cp, dp); peers are pp ranks
 *   COMM_DP  the d x cp ranks with the same tp, pp: the d data-parallel
 *            replicas and their context-parallel ranks, rank cp_rank + cp *
 *            dp_rank. Gradients are reduced and the distributed optimizer
 *            sharded over it, as Megatron-core's data-parallel group with
 *            context parallelism; the replica (which micro-batches) is
 *            rank[COMM_DP] / size[COMM_CP]
 *   COMM_CP  the cp context-parallel ranks of one replica (same tp, pp, dp),
 *            each holding its chunks of every sequence (cp_split.h)
 * Collectives are synchronous and in place or out of place as stated, on
 * backend memory (float*), summing in fp32. Point-to-point is asynchronous:
 * isend/irecv return a request id that wait() completes; the buffer must
 * stay alive and untouched until then.
 *
 * comm_local_create() gives the 1x1x1 comm (every group has one rank; the
 * collectives are identities), for the single-process model and its tests.
 * The MPI implementation is exec/comm_mpi.h.
 *
 * Ownership: created by a constructor, released by destroy().
 */
#ifndef TRAINSIM_EXEC_COMM_H
#define TRAINSIM_EXEC_COMM_H

#include <stddef.h>

#include "exec/core/moe.h"
#include "sim/util/err.h"

typedef enum { COMM_TP = 0, COMM_PP, COMM_DP, COMM_CP, COMM_NGROUPS } comm_group;

typedef struct comm comm;

struct comm {
    const char *name; /* "local", "mpi", "nccl" */
    void *ctx;
    int size[COMM_NGROUPS]; /* t, p, d x cp, cp */
    int rank[COMM_NGROUPS]; /* this rank's index in each group */
    /* Expert parallelism of the MoE layers (exec/core/moe.h), folded into
     * tensor x data parallelism as Megatron-core folds it with an expert
     * tensor-parallel size of 1 (etp-ep-edp-pp over the ranks of tp-cp-dp-pp):
     * of the t*cp*d ranks of one pipeline stage (index x = tp_rank + t *
     * rank[COMM_DP], consecutive global ranks), EP group = ep consecutive x (ep
     * rank x % ep), EDP group = those of equal x % ep. NULL (the local and
     * NCCL comms, and MPI without comm_mpi_set_ep): no expert parallelism
     * (each rank holds every expert and sums nothing). Owned by ctx. */
    const moe_xchg *moe_xc;
    const moe_edp *moe_edp;

    /* buf[0..n) = sum over the group, in place. */
    int (*all_reduce)(comm *c, comm_group g, float *buf, size_t n, ts_err *err);
    /* out[r*n .. (r+1)*n) = in of group rank r (out holds size*n floats). */
    int (*all_gather)(comm *c, comm_group g, float *out, const float *in, size_t n, ts_err *err);
    /* out[0..n) = sum over the group of in[rank*n .. (rank+1)*n) (in holds size*n). */
    int (*reduce_scatter)(comm *c, comm_group g, float *out, const float *in, size_t n, ts_err *err);
    /* Pipeline point-to-point to/from pp rank `peer` (same tp, dp), matched by tag
     * (0 <= tag < 2^30). *req receives an id for wait(). */
    int (*isend)(comm *c, int peer, const float *buf, size_t n, int tag, int *req, ts_err *err);
    int (*irecv)(comm *c, int peer, float *buf, size_t n, int tag, int *req, ts_err *err);
    int (*wait)(comm *c, int req, ts_err *err);
    /* Poll req: *done = 1 (and req released) if it has completed, else 0. */
    int (*test)(comm *c, int req, int *done, ts_err *err);
    /* Wait for every request still pending. */
    int (*wait_all)(comm *c, ts_err *err);
    /* Context-parallel ring step (cp_attn.h's exchange): send n floats to
     * COMM_CP rank + 1, receive n from rank - 1 (mod cp); blocking. NULL
     * where the comm has no context parallelism (the local and NCCL comms). */
    int (*cp_sendrecv)(comm *c, const float *send, float *recv, size_t n, ts_err *err);
    void (*destroy)(comm *c);
};

/* The single-rank comm (t = p = d = cp = 1). isend/irecv fail with TS_ESTATE
 * (there is no peer). Caller releases with (*out)->destroy(*out). */
int comm_local_create(comm **out, ts_err *err);

#endif
