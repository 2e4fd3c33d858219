/* sched_print — an ASCII timeline of a schedule, like the diagrams of the
 * Megatron-LM paper: one line per rank, time running left to right in
 * columns of one time quantum. Each compute op is drawn at its start with
 * its kind and micro-batch ("F3", "B0", "I2", "W2"; with v > 1 chunks the
 * local chunk follows a dot: "F3.1"), spaces while it runs, '.' where the
 * rank idles. Times come from sched_time(); SEND/RECV take no column.
 */
#ifndef TRAINSIM_SCHED_PRINT_H
#define TRAINSIM_SCHED_PRINT_H

#include <stdio.h>

#include "sim/sched/sched.h"
#include "sim/sched/sched_time.h"

/* Print s's timeline to f. t: op times, or NULL for unit times
 * (T_F = T_B = T_W = 1, no latency: a whole B is two columns). TS_EINVAL if
 * s does not run or the timeline would exceed SCHED_PRINT_MAX_COLS columns;
 * TS_EIO on a write error. */
#define SCHED_PRINT_MAX_COLS 100000
int sched_print(const sched *s, const sched_op_times *t, FILE *f, ts_err *err);

#endif
