/* trace — a simulated iteration as a Chrome / Perfetto trace (JSON).
 *
 * {"traceEvents": [...], "displayTimeUnit": "ms"} with:
 *   ph "M"  process_name per rank ("rank R: stages ..."), thread_name and
 *           thread_sort_index per stream (compute, tp, pp-send, pp-recv-fwd,
 *           pp-recv-bwd, dp);
 *   ph "X"  one complete event per task of non-zero duration: name = step
 *           name, cat = category, ts/dur in microseconds (ns precision), args
 *           micro-batch and stage;
 *   ph "C"  a "memory" counter per rank (GiB live), one point per change.
 * pid = rank, tid = stream. Opens in ui.perfetto.dev and chrome://tracing.
 */
#ifndef TRAINSIM_TRACE_H
#define TRAINSIM_TRACE_H

#include <stdio.h>

#include "sim/core/simulate.h"
#include "sim/util/err.h"

/* Write r's trace to f. r must come from simulate_run with keep_trace
 * (TS_EINVAL otherwise). */
int trace_write_file(const simulate_result *r, FILE *f, ts_err *err);

/* Same, to path atomically. TS_EIO naming the path. */
int trace_write(const simulate_result *r, const char *path, ts_err *err);

#endif
