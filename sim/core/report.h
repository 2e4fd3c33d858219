/* report — a simulation result as text (for people) and as CSV (for tools).
 *
 * Text: a first line saying so when the run does not fit, iteration time, bubble, compute split, exposed communication,
 * throughput (tokens/s, TFLOP/s per GPU, MFU, HFU), memory peak with its
 * breakdown (one line per category with its source) and fit, training time for --train-tokens, and a per-rank table.
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

/* If the run does not fit in the GPU's memory, write one line to f:
 * "DOES NOT FIT: rank R needs X GiB of Y GiB (...: try ...)" with what
 * takes the memory and what would lower it; nothing if it fits. It names
 * --no-create-attention-mask-in-dataloader when the batch holds a mask and
 * is >= 5% of the peak at the peak, --moe-layer-recompute on MoE models
 * without it (and without full recomputation). */
void report_fit_line(const simulate_result *r, FILE *f);

/* Write the text report to f; its first line is report_fit_line's when the
 * run does not fit. */
void report_text(const simulate_result *r, FILE *f);

/* Write the CSV to f. */
void report_csv(const simulate_result *r, FILE *f);

/* Write the CSV to path atomically ("-" = standard output). TS_EIO naming
 * the path. */
int report_csv_write(const simulate_result *r, const char *path, ts_err *err);

#endif
