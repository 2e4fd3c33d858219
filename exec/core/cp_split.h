/* cp_split — the causal load-balanced split of context parallelism, as pure
 * logic (Megatron-core / Transformer Engine's p2p ring attention).
 *
 * The sequence of T positions is cut into 2*cp chunks of T/(2cp); rank r
 * holds chunks r and 2cp-1-r (a "front" and a "back" chunk), so every rank
 * carries the same share of the causal triangle. Its local rows are the
 * front chunk's positions then the back chunk's.
 *
 * In the ring, at step i (0 <= i < cp) rank r holds the keys/values of rank
 * src = (r - i) mod cp. The blocks it computes, as Transformer Engine does:
 *   i == 0      both local query chunks against both local KV chunks, causal
 *               (front/front and back/back on the diagonal, back/front full);
 *   src < r     both query chunks against src's front KV chunk, no mask;
 *   src > r     only the back query chunk against both of src's KV chunks,
 *               no mask.
 * cp_block() classifies any (query chunk, key chunk) pair of global chunk
 * indices: key chunk after the query chunk: skipped; same chunk: causal;
 * before: full. Every step of every rank costs the same (two chunk-pairs of
 * full attention, or the diagonal's equivalent), which the unit test checks.
 *
 * Memory: no function allocates.
 */
#ifndef TRAINSIM_EXEC_CP_SPLIT_H
#define TRAINSIM_EXEC_CP_SPLIT_H

#include <stddef.h>

#include "sim/util/err.h"

typedef enum { CP_SKIP = 0, CP_CAUSAL, CP_FULL } cp_mask;

/* T divisible by 2*cp, cp >= 1; TS_EINVAL with what would be valid. */
int cp_split_check(int seq, int cp, ts_err *err);

/* Global chunk index of rank r's local chunk h (0 front, 1 back). */
int cp_chunk(int cp, int r, int h);

/* Global position of local row i (0 <= i < T/cp) of rank r. */
int cp_global_pos(int seq, int cp, int r, int i);

/* Mask of query chunk qc against key chunk kc (global chunk indices). */
cp_mask cp_block(int qc, int kc);

/* Rank whose keys/values rank r holds at ring step i. */
int cp_ring_src(int cp, int r, int i);

/* Attention work of rank r at ring step i, in units of one chunk-pair of
 * full (unmasked) attention; a causal diagonal block counts 1/2. */
double cp_step_work(int cp, int r, int i);

#endif
