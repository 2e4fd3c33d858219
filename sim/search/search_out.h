/* search_out — what a search writes: the CSV of every candidate (evaluated
 * or rejected, with the reason), a one-line description of a candidate, and
 * the explanation of what limits the winner.
 *
 * CSV columns (one row per candidate, enumeration order; fields a rejection
 * left undecided are empty):
 *   index, status, reason, tp, pp, dp, vp, micro_batch_size, num_microbatches,
 *   first_stage_layers, last_stage_layers, account_split, schedule, sequence_parallel,
 *   recompute, recompute_num_layers, distributed_optimizer, cp, ep, etp,
 *   dispatcher, mem_bound_gib,
 *   iteration_s, tflops_per_gpu, mfu, peak_mem_gib, bubble_fraction,
 *   exposed_comm_s, rank
 * where account_split is empty, embedding, loss or embedding+loss (the
 * account-for split of interleaved candidates whose layers do not divide
 * p x v, search.h), ep, etp and dispatcher are empty for a dense model
 * (dispatcher: alltoall, flex-deepep or allgather) and rank is the 1-based position among the simulated candidates that
 * fit (empty otherwise). Numbers use %.6g, so the file is the same byte for
 * byte on every run, thread count and MPI rank count.
 *
 * Ownership: buffers are the caller's; nothing is allocated for the caller.
 */
#ifndef TRAINSIM_SEARCH_OUT_H
#define TRAINSIM_SEARCH_OUT_H

#include <stddef.h>
#include <stdio.h>

#include "sim/search/search.h"
#include "sim/util/err.h"

/* Write the CSV to path atomically (afile.h; "-" = stdout). order/n_order
 * is search_rank()'s ranking (for the rank column). TS_EIO on failure. */
int search_write_csv(const search_set *set, const size_t *order, size_t n_order, const char *path, ts_err *err);

/* "t=8 p=16 d=40 v=1 b=1 1f1b sp selective distopt" (+ " split=4/3" when
 * uneven, " cp=2" with context parallelism, " ep=8 etp=1 alltoall" for a
 * mixture of experts) into buf. */
void search_describe(const search_set *set, size_t i, char *buf, size_t cap);

/* Explain what limits candidate `winner` (a SIMULATED index): the share of
 * the iteration lost to the pipeline bubble and to exposed communication,
 * its memory headroom, and whether memory forced its choices (the same
 * layout with less recomputation, without the distributed optimizer or with
 * a larger micro-batch was rejected for memory). Writes lines to f. */
void search_explain(const search_set *set, size_t winner, FILE *f);

#endif
