/* moe_load — the per-expert load file of --moe-expert-load (trainsim
 * simulate) and --moe-load-out (trainexec): the tokens each routed expert
 * received, measured on a run, read and written through csvio (libcsv).
 *
 * Format (docs/moe.md "Measured per-expert loads"): a header and one row per
 * routed expert, '#' comment rows allowed:
 *   layer,expert,tokens
 *   all,0,1536
 *   all,1,1410
 *   ...
 *   - expert: the expert's index 0 .. E-1 (E = --num-experts), as
 *     Megatron-core numbers them (rank r of an expert-parallel group holds
 *     experts r E/ep .. (r+1) E/ep - 1);
 *   - tokens: routed token-slots the expert received (a token routed to k
 *     experts counts once at each), summed over any number of micro-batches,
 *     iterations and MoE layers (Megatron-core's tokens_per_expert, summed);
 *     a number >= 0, not necessarily whole: only the shares tokens_i / sum
 *     are used, so relative shares (fractions, percentages) are valid too.
 *     The sum must be > 0;
 *   - layer (optional column): "all" or empty (the loads of every MoE
 *     layer together: one row per expert), or a layer number 0 .. L-1
 *     (0-based, as moe.h numbers layers; L = num_layers) that is a MoE
 *     layer: per-layer loads, one row per expert for every MoE layer. One
 *     file is either form: a number beside "all"/empty is refused.
 * Whole-model form: every expert 0 .. E-1 has exactly one row. Per-layer
 * form: every MoE layer has exactly one row per expert and its tokens sum
 * to > 0. Errors (TS_EINVAL) name FILE:LINE, the column and what would be
 * valid: an expert outside 0 .. E-1 or not an integer, a negative or
 * non-numeric count, a duplicate expert (or layer and expert, with the
 * line of its first row), a layer that is not a MoE layer or out of
 * 0 .. num_layers-1, the two forms mixed; and FILE, the column and the
 * index for what has no row: a missing expert (the first missing index; of
 * which layer), a missing MoE layer, a zero sum (of which layer).
 *
 * Ownership: moe_load_read / _parse fill a caller-owned array of
 * num_layers x E doubles.
 */
#ifndef TRAINSIM_MOE_LOAD_H
#define TRAINSIM_MOE_LOAD_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/config/config.h"
#include "sim/util/csvio.h"
#include "sim/util/err.h"

/* Read path for e (num_experts >= 1, layer_freq and first_dense_layers
 * resolved) in a model of num_layers layers into loads (room for
 * num_layers x E, zeroed here): the whole-model form fills loads[0 .. E-1]
 * and sets *per_layer false; the per-layer form fills loads[l E + x] for
 * each MoE layer l (the dense layers' rows stay 0) and sets *per_layer
 * true. TS_EIO if the file cannot be read; TS_EINVAL as above. */
int moe_load_read(const char *path, const moe_config *e, int num_layers, double *loads, bool *per_layer, ts_err *err);

/* The same from a parsed table (csvio_read with the columns expert and
 * tokens; tests use csvio_read_mem). */
int moe_load_parse(const csvio_table *t, const moe_config *e, int num_layers, double *loads, bool *per_layer,
                   ts_err *err);

/* Write routed token-slots to path atomically (afile.h: a temporary in the
 * same directory, renamed; removed on failure or on an interrupting
 * signal), after a comment row "# note" when note is not NULL. "-" is
 * stdout. num_layers 0: the whole-model form, counts[0 .. n-1] of experts
 * 0 .. n-1 (layer "all"); num_layers > 0: the per-layer form, for each
 * layer l with moe_layer[l] the rows of counts[l n .. l n + n-1]. TS_EIO
 * naming the path. */
int moe_load_write(const char *path, const int64_t *counts, int n, int num_layers, const bool *moe_layer,
                   const char *note, ts_err *err);

#endif
