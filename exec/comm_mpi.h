/* comm_mpi — the comm interface (cpu/comm.h) over MPI.
 *
 * Splits a base communicator of exactly t*cp*p*d ranks into the tensor,
 * context, pipeline and data-parallel groups of comm.h in Megatron-core's
 * order tp-cp-dp-pp (tensor innermost, pipeline outermost): base rank
 * g = tp + t * (cpr + cp * (dp + d * pp)). Collectives map to
 * MPI_Allreduce / MPI_Allgather / MPI_Reduce_scatter_block (MPI_FLOAT,
 * MPI_SUM); pipeline point-to-point to MPI_Isend / MPI_Irecv on the pipeline
 * group, whose ranks are the IR's pipeline ranks.
 *
 * Ownership: the comm owns its four communicators and request table; the
 * base communicator is borrowed. Release with c->destroy(c) (collective
 * over base: MPI_Comm_free).
 */
#ifndef TRAINSIM_EXEC_COMM_MPI_H
#define TRAINSIM_EXEC_COMM_MPI_H

#include <mpi.h>

#include "exec/core/comm.h"

/* Collective over base. TS_EINVAL if base's size is not t*p*d. */
int comm_mpi_create(MPI_Comm base, int t, int p, int d, comm **out, ts_err *err);
/* With cp context-parallel ranks (comm.h's layout, COMM_CP's ring over
 * MPI_Sendrecv, exec/cp_mpi.h). TS_EINVAL if base's size is not t*cp*p*d. */
int comm_mpi_create_cp(MPI_Comm base, int t, int cp, int p, int d, comm **out, ts_err *err);

/* Expert parallelism of size ep over the t*cp*d ranks of each pipeline
 * stage (comm.h's moe_xc / moe_edp), folded as Megatron-core's
 * etp-ep-edp-pp with etp = 1: within a stage, xi = tp + t * (cp rank + cp *
 * dp) (consecutive global ranks), the EP group the ranks of equal xi / ep,
 * the EDP group those of equal xi % ep. ep must divide t*cp*d. Collective
 * over the comm's base communicator. */
int comm_mpi_set_ep(comm *c, int ep, ts_err *err);

/* The MPI communicator of group g (for the runtime's own reductions). */
MPI_Comm comm_mpi_group(const comm *c, comm_group g);

#endif
