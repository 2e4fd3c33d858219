/* report — a simulation result as text (for people) and as CSV (for tools).
 *
 * Text: iteration time, bubble, compute split, exposed communication,
 * throughput (tokens/s, TFLOP/s per GPU, MFU, HFU), memory peak with its
 * breakdown and fit, training time for --train-tokens, and a per-rank table.
 * CSV: long format, one value per row, header "scope,metric,value,unit",
 * scope "iteration" or "rank N"; numbers printed with fixed precision so the
 * same result gives the same bytes.
 *
 * Both are deterministic: no wall-clock time, no addresses.
 */
#ifndef TRAINSIM_REPORT_H
#define TRAINSIM_REPORT_H

#include <stdio.h>

#include "sim/core/simulate.h"
#include "sim/util/err.h"

/* Write the text report to f. */
void report_text(const simulate_result *r, FILE *f);

/* Write the CSV to f. */
void report_csv(const simulate_result *r, FILE *f);

/* Write the CSV to path atomically ("-" = standard output). TS_EIO naming
 * the path. */
int report_csv_write(const simulate_result *r, const char *path, ts_err *err);

#endif
