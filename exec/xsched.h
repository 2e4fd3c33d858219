/* xsched — the schedule trainexec runs: generated for the configuration's
 * layout, or read from a --schedule-csv file and fitted to it. Every rank
 * builds the same schedule from the same flags.
 *
 * Ownership: *out is owned by the caller (sched_free); nothing is
 * allocated on failure.
 */
#ifndef TRAINSIM_EXEC_XSCHED_H
#define TRAINSIM_EXEC_XSCHED_H

#include "sim/config/config.h"
#include "sim/sched/sched.h"
#include "sim/util/err.h"

/* The schedule of p's layout for model m, with SEND/RECV, REDUCE_GRAD and
 * OPTIM actions; the layers per virtual stage from p's layout when it has
 * one stage count per virtual stage. sched_generate's errors. */
int xsched_generate(const parallel_config *p, const model_config *m, sched **out, ts_err *err);

/* The schedule in the CSV file path for p's layout: SEND/RECV inserted if
 * the file is compute-only, the model's layers split evenly over its
 * stages (the first L mod S stages one more). TS_EINVAL (with
 * "--schedule-csv" and what would be valid) when its ranks, micro-batches
 * or stages do not match p and m; the reader's errors otherwise. */
int xsched_load_csv(const char *path, const parallel_config *p, const model_config *m, sched **out, ts_err *err);

#endif
