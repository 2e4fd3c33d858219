/* search_eval — phase 2 of the search: every pending candidate simulated on
 * a pool of worker threads (pool.h), optionally a shard of them (the MPI
 * split of sim/cli/search_mpi.h), each outcome stored in its slot.
 */
#ifndef TRAINSIM_SEARCH_EVAL_H
#define TRAINSIM_SEARCH_EVAL_H

#include "sim/config/config.h"
#include "sim/search/search.h"
#include "sim/util/err.h"

/* Simulates one validated configuration. Called from several threads at
 * once with distinct configs: must not share mutable state. */
typedef int (*search_eval_fn)(void *user, const config *c, search_metrics *out, ts_err *err);

typedef struct {
    search_eval_fn eval; /* NULL = search_eval_simulate (simulate_run) */
    void *eval_user;
    int threads;                 /* worker threads (>= 1) */
    int shard, nshards;          /* evaluate only candidates with index % nshards == shard */
    search_progress_fn progress; /* may be NULL */
    void *progress_user;
} search_eval_opts;

/* Simulate every pending candidate of this shard (phase 2). Each result (or
 * rejection, for memory or a failed simulation) lands in the candidate's
 * slot. TS_ENOMEM / TS_ESTATE on internal failures only: a candidate whose
 * simulation fails is recorded, not returned as an error. */
int search_evaluate(search_set *set, const search_eval_opts *o, ts_err *err);

#endif
