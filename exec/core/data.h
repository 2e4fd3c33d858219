/* data — the deterministic synthetic token stream the executor trains on.
 *
 * Sequence s of the stream (s = 0, 1, ...) is an arithmetic progression
 * modulo V with a start and a stride drawn from a hash of (seed, s), where
 * one token in eight is replaced by a hashed "noise" token: learnable (the
 * stride can be read from the context) yet never constant. Targets are the
 * next token. Nothing is read from disk or the network.
 *
 * Sequences are numbered so that every layout sees the same global batch:
 * iteration it, global micro-batch g in [0, m*d) (data-parallel rank r runs
 * g = r*m + j for its j-th micro-batch), row b in [0, B):
 * s = (it * m * d + g) * B + b.
 */
#ifndef TRAINSIM_EXEC_DATA_H
#define TRAINSIM_EXEC_DATA_H

#include <stdint.h>

/* Fill tokens[B*T] and targets[B*T] (caller-owned) for global micro-batch g
 * of iteration it with mb_per_iter = m*d micro-batches per iteration. */
void data_microbatch(uint64_t seed, int it, int mb_per_iter, int g, int B, int T, int V, int *tokens, int *targets);

#endif
