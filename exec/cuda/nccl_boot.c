/* nccl_boot — NCCL communicator bootstrap over MPI. Contract in nccl_boot.h. */
#include "exec/cuda/nccl_boot.h"

#include <string.h>

int nccl_boot_comm(MPI_Comm mc, int size, int rank, const char *group, ncclComm_t *nc, ts_err *err)
{
    *nc = NULL;
    struct {
        int ok;
        ncclUniqueId id;
    } boot;
    memset(&boot, 0, sizeof boot);
    ncclResult_t r = ncclSuccess;
    if (rank == 0) {
        r = ncclGetUniqueId(&boot.id);
        boot.ok = r == ncclSuccess;
    }
    if (MPI_Bcast(&boot, (int)sizeof boot, MPI_BYTE, 0, mc) != MPI_SUCCESS)
        return err_set(err, TS_ESTATE, "nccl bootstrap: MPI_Bcast of the %s group's unique id failed", group);
    if (!boot.ok)
        return rank == 0
                   ? err_set(err, TS_ESTATE, "NCCL unique id on the %s group failed: %s", group, ncclGetErrorString(r))
                   : err_set(err, TS_ENOTSUP, "nccl bootstrap: rank 0 of the %s group could not create an NCCL id",
                             group);
    r = ncclCommInitRank(nc, size, boot.id, rank);
    if (r != ncclSuccess) {
        *nc = NULL;
        return err_set(err, TS_ENOTSUP, "NCCL communicator for the %s group (%d ranks) could not be created: %s", group,
                       size, ncclGetErrorString(r));
    }
    return TS_OK;
}
