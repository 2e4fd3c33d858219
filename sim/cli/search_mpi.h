/* search_mpi — the search spread over MPI ranks (and machines).
 *
 * Header-only on purpose: sim/ is built without MPI, so this glue is
 * compiled only into programs built with mpicc (build/trainsim-mpi, whose
 * cmd_search.c includes it under TRAINSIM_MPI, and tests/mpi/). Include it
 * after <mpi.h> is reachable (mpicc's include path).
 *
 * Every rank enumerates and prunes the same set (phase 1 is deterministic
 * and cheap), simulates its slice (candidate index % size == rank) on its
 * threads, and the slices are exchanged with MPI_Allgatherv, so every rank
 * ends with the complete set — the very set a single process computes,
 * because each candidate's result depends only on the candidate.
 */
#ifndef TRAINSIM_SEARCH_MPI_H
#define TRAINSIM_SEARCH_MPI_H

#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sim/search/search.h"
#include "sim/search/search_eval.h"

/* One simulated candidate's outcome as it travels between ranks. */
typedef struct {
    uint64_t index;
    search_metrics r;
    uint32_t status;
    char msg[SEARCH_MSG_BYTES]; /* REJ_SIM_ERROR message (truncated) */
} search_mpi_item;

/* Evaluate set across the ranks of comm (collective: every rank calls it
 * with an identically enumerated set). o->shard / o->nshards are replaced
 * by the rank and size. On return every rank's set holds every result.
 * The status is agreed: if any rank fails, all return its code. */
static inline int search_mpi_evaluate(search_set *set, MPI_Comm comm, const search_eval_opts *o, ts_err *err)
{
    int rank = 0, size = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    search_eval_opts so = *o;
    so.shard = rank;
    so.nshards = size;
    int rc = search_evaluate(set, &so, err);
    int worst = rc;
    MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MIN, comm); /* TS_E* codes are negative */
    if (worst != TS_OK)
        return rc != TS_OK ? rc : err_set(err, worst, "search: another MPI rank failed (%s)", err_code_name(worst));

    /* Pack this rank's slice: every candidate it simulated. */
    size_t mine = 0;
    for (size_t i = (size_t)rank; i < set->n; i += (size_t)size)
        mine += set->cands[i].status == SEARCH_SIMULATED || set->cands[i].status == SEARCH_REJ_MEMORY_SIM ||
                set->cands[i].status == SEARCH_REJ_SIM_ERROR;
    search_mpi_item *items = calloc(mine ? mine : 1, sizeof *items);
    int *counts = calloc((size_t)size, sizeof *counts), *displs = calloc((size_t)size, sizeof *displs);
    search_mpi_item *all = NULL;
    int ok = items && counts && displs, all_ok = 0;
    size_t k = 0;
    for (size_t i = (size_t)rank; ok && i < set->n; i += (size_t)size) {
        const search_cand *c = &set->cands[i];
        if (c->status != SEARCH_SIMULATED && c->status != SEARCH_REJ_MEMORY_SIM && c->status != SEARCH_REJ_SIM_ERROR)
            continue;
        items[k].index = i;
        items[k].r = c->r;
        items[k].status = c->status;
        if (set->msgs[i])
            strncpy(items[k].msg, set->msgs[i], sizeof items[k].msg - 1);
        k++;
    }
    int my_bytes = (int)(mine * sizeof *items), total = 0;
    if (ok)
        MPI_Allgather(&my_bytes, 1, MPI_INT, counts, 1, MPI_INT, comm);
    if (ok) {
        for (int r = 0; r < size; r++) {
            displs[r] = total;
            total += counts[r];
        }
        all = malloc(total ? (size_t)total : 1);
        ok = all != NULL;
    }
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm);
    if (!all_ok) {
        free(items);
        free(counts);
        free(displs);
        free(all);
        return err_set(err, TS_ENOMEM, "search: out of memory exchanging results over MPI");
    }
    MPI_Allgatherv(items, my_bytes, MPI_BYTE, all, counts, displs, MPI_BYTE, comm);
    size_t n_all = (size_t)total / sizeof *items;
    rc = TS_OK;
    for (size_t j = 0; j < n_all && rc == TS_OK; j++) {
        const search_mpi_item *it = &all[j];
        /* NOLINTNEXTLINE(clang-analyzer-core.NullDereference): all is set: all_ok is every rank's ok (MPI_MIN) */
        if (it->index >= set->n) {
            rc = err_set(err, TS_ESTATE, "search: MPI result for candidate %llu of %zu", (unsigned long long)it->index,
                         set->n);
            break;
        }
        search_cand *c = &set->cands[it->index];
        c->r = it->r;
        c->status = (uint8_t)it->status;
        if (it->status == SEARCH_REJ_SIM_ERROR && !set->msgs[it->index]) {
            set->msgs[it->index] = strdup(it->msg);
            if (!set->msgs[it->index])
                rc = err_set(err, TS_ENOMEM, "search: out of memory");
        }
    }
    search_recount(set);
    free(items);
    free(counts);
    free(displs);
    free(all);
    return rc;
}

#endif
