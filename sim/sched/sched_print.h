/* sched_print — an ASCII timeline of a schedule, like the diagrams of the
 * Megatron-LM paper: one line per rank, time running left to right in
 * columns. Each compute op is drawn at its start with its kind and
 * micro-batch ("F3", "B0", "I2", "W2"; with v > 1 chunks the local chunk
 * follows a dot: "F3.1"), spaces while it runs, '.' where the rank idles.
 * Times come from sched_time(); SEND/RECV take no column. Every column is as
 * wide as the longest label plus a space.
 *
 * Exact or scaled. A column is first one time quantum: the greatest common
 * divisor of the op times, so every op starts and ends on a column boundary
 * and the picture is exact. When that takes more than width_cols columns
 * (op times with no small common divisor, or many micro-batches), a column
 * becomes a round time instead (1, 2, 2.5 or 5 times a power of ten ns,
 * the smallest that fits width_cols columns) and the header names it
 * ("one column = 50 µs"). A scaled column shows the op that runs longest in
 * it, its label where that op first shows, '.' where the rank idles for more
 * than half of the column; an op much shorter than a column may not show.
 */
#ifndef TRAINSIM_SCHED_PRINT_H
#define TRAINSIM_SCHED_PRINT_H

#include <stdio.h>

#include "sim/sched/sched.h"
#include "sim/sched/sched_time.h"

/* The most columns a timeline may be given (width_cols). */
#define SCHED_PRINT_MAX_COLS 100000
/* The width `trainsim schedule` uses unless --timeline-width says otherwise. */
#define SCHED_PRINT_DEFAULT_COLS 120

/* Print s's timeline to f in at most width_cols columns (1 ..
 * SCHED_PRINT_MAX_COLS), exact when it fits, else scaled (see above).
 * t: op times, or NULL for unit times (T_F = T_B = T_W = 1, no latency: a
 * whole B is two columns). TS_EINVAL if width_cols is out of range or s does
 * not run; TS_ENOMEM; TS_EIO on a write error. */
int sched_print(const sched *s, const sched_op_times *t, int width_cols, FILE *f, ts_err *err);

#endif
