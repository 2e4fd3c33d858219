/* sched_layout — how the transformer layers are split over the virtual
 * pipeline stages: one count per virtual stage, the single representation
 * that the schedule generators, the simulator, the search and the executor
 * consume, whichever flags produced it.
 *
 * Stage order: virtual stages are listed in model order, i.e. by global
 * stage id (sched.h). Under the loop placement of GPipe, 1F1B, interleaved
 * and ZB-H1/H2 that is chunk-major: stage c*p + r is chunk c of rank r, so
 * the first p entries are chunk 0 of ranks 0..p-1, the next p chunk 1, and
 * so on. This is Megatron-core's PipelineParallelLayerLayout order (its
 * flat stage list is indexed vp_stage * pp_size + pp_rank). Under ZB-V's V
 * placement the same list maps stage r and 2p-1-r to rank r.
 *
 * The embedding always sits in stage 0 and the output layer with the loss
 * in the last stage: emb_stage / loss_stage record it (0 and n_stages-1
 * after any successful call below).
 *
 * Producers:
 *  - sched_layout_parse: Megatron-core's --pipeline-model-parallel-layout
 *    string (grammar below);
 *  - sched_layout_even: num_layers / stages each;
 *  - sched_layout_first_last: --decoder-first/last-pipeline-num-layers as
 *    Megatron-core splits them: whole pipeline ranks, each rank's layers
 *    split evenly over its v chunks;
 *  - sched_layout_account: --account-for-embedding/loss-in-pipeline-split:
 *    the embedding / the loss counts as one layer of the split, so stage 0 /
 *    the last stage gets one transformer layer fewer.
 *
 * Ownership: sched_layout is a plain fixed-capacity value (no heap), so it
 * can be copied with the config that holds it.
 */
#ifndef TRAINSIM_SCHED_LAYOUT_H
#define TRAINSIM_SCHED_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>

#include "sim/util/err.h"

/* Most virtual stages a layout can hold (p x v). */
#define SCHED_LAYOUT_MAX_STAGES 1024
/* Most transformer layers a layout string may expand to. */
#define SCHED_LAYOUT_MAX_LAYERS 1000000

typedef struct {
    int n_stages;                        /* virtual stages (p x v); 0 = none yet */
    int num_layers;                      /* sum of layers[0 .. n_stages-1] */
    int emb_stage;                       /* stage holding the embedding: 0 */
    int loss_stage;                      /* stage holding the output layer and loss: n_stages-1 */
    int layers[SCHED_LAYOUT_MAX_STAGES]; /* transformer layers of each virtual stage, model order */
} sched_layout;

/* Parse a Megatron-core pipeline layout string into out:
 *
 *   layout := item*
 *   item   := atom ('*' N)?          N: a whole number >= 1, repeats the atom
 *   atom   := 'E' | 't' | 'L' | '|' | '(' item* ')'
 *
 * 'E' the embedding, 't' one transformer layer, 'L' the output layer and
 * loss, '|' the boundary between two virtual stages. Spaces and ',' are
 * cosmetic and ignored (as in Megatron-core). E must appear once, in the
 * first stage before its layers; L once, in the last stage after its
 * layers. A stage may be empty (Megatron-core allows it); whether an empty
 * stage can run is the consumer's business. Nesting is limited to 32
 * levels, the expansion to SCHED_LAYOUT_MAX_STAGES stages and
 * SCHED_LAYOUT_MAX_LAYERS layers. TS_EINVAL with the 1-based position in
 * the string, what is there and what would be valid. */
int sched_layout_parse(const char *str, sched_layout *out, ts_err *err);

/* Check a parsed layout against the run: its stage count must be a
 * multiple of p (then *v = stages / p) and its layers must sum to
 * num_layers. TS_EINVAL saying which and what would be valid. */
int sched_layout_check(const sched_layout *l, int p, int num_layers, int *v, ts_err *err);

/* num_layers split evenly over `stages` stages; TS_EINVAL if it does not
 * divide or stages is out of [1, SCHED_LAYOUT_MAX_STAGES]. */
int sched_layout_even(sched_layout *out, int stages, int num_layers, ts_err *err);

/* Megatron-core's uneven split over p ranks of v chunks each: rank 0 holds
 * `first` layers (0 = no special first rank), rank p-1 holds `last`
 * (0 = none), the other ranks share the rest evenly; each rank's layers
 * are split evenly over its v chunks (loop placement: stage c*p + r). So
 * first and last must be multiples of v and the rest a multiple of
 * (ranks left) x v, at least one layer per stage. TS_EINVAL naming
 * --decoder-first/last-pipeline-num-layers and what would be valid. */
int sched_layout_first_last(sched_layout *out, int p, int v, int num_layers, int first, int last, ts_err *err);

/* Megatron-core's --account-for-embedding-in-pipeline-split /
 * --account-for-loss-in-pipeline-split: num_layers + emb + loss must split
 * evenly over the p x v stages (k each); stage 0 then holds k - 1 layers
 * with emb, the last stage k - 1 with loss (either may become 0: a stage
 * with the embedding or the loss only). TS_EINVAL naming the flags and
 * the layer counts that would be valid. */
int sched_layout_account(sched_layout *out, int p, int v, int num_layers, bool emb, bool loss, ts_err *err);

/* True if every stage holds the same number of layers. */
bool sched_layout_is_even(const sched_layout *l);

/* Largest layer count of one stage. */
int sched_layout_max_layers(const sched_layout *l);

/* Write the counts compactly, runs collapsed: "3 4x30 3" for Llama 3
 * 405B's layout. Returns the length snprintf would have written; the text
 * is truncated (NUL-terminated) to size. */
size_t sched_layout_format(const sched_layout *l, char *buf, size_t size);

#endif
