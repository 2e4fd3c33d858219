/* sched_csv — schedules as CSV in torch.distributed.pipelining's action
 * format: one row per pipeline rank, one action token per cell, e.g.
 *
 *   0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,...
 *   1RECV_F0,1F0,1B0,1SEND_B0,...
 *
 * A token is STAGE KIND MB: the global stage index, the kind (F, B, I, W,
 * SEND_F, RECV_F, SEND_B, RECV_B) and the micro-batch; "STAGE REDUCE_GRAD"
 * has no micro-batch and "OPTIM" (a trainsim extension) neither. Empty cells
 * (torch writes them for idle slots of its compute-only format) are
 * skipped. A file with no SEND/RECV is a compute-only schedule.
 *
 * Import infers p (rows), v (stages / p), m (largest micro-batch + 1) and
 * the placement (loop: stage = chunk*p + rank; V: rank r holds r and
 * 2p-1-r), then validates the schedule (sched_validate); every error reads
 * "FILE:LINE:COLUMN: ...". Export then import then export gives the same
 * bytes. Reading and writing go through libcsv (csvio for writing).
 */
#ifndef TRAINSIM_SCHED_CSV_H
#define TRAINSIM_SCHED_CSV_H

#include <stdio.h>

#include "sim/sched/sched.h"

/* Write s to f, one row per rank. TS_EIO on a write error. */
int sched_csv_write(const sched *s, FILE *f, ts_err *err);

/* Write s to path atomically (temporary file, then rename); "-" = stdout. */
int sched_csv_save(const sched *s, const char *path, ts_err *err);

/* Parse a schedule from data[0 .. len-1]; name is used in messages. On
 * success *out owns a new sched of kind SCHED_CUSTOM, one layer per stage
 * (free with sched_free). TS_EINVAL "NAME:LINE:COL: ..." on bad input. */
int sched_csv_parse(const char *name, const char *data, size_t len, sched **out, ts_err *err);

/* Read and parse path. TS_EIO if it cannot be read. */
int sched_csv_load(const char *path, sched **out, ts_err *err);

/* Parse one action token. On success sets *stage (-1 for OPTIM), *kind and
 * *mb (-1 for REDUCE_GRAD and OPTIM). TS_EINVAL saying what is wrong
 * (without a location). */
int sched_csv_token(const char *tok, int *stage, int *kind, int *mb, ts_err *err);

#endif
