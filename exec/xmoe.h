/* xmoe — trainexec's measurements of its MoE layers (exec/core/moe.h):
 * per rank, the expert rows its local experts received and the time of its
 * expert GEMMs over the measured iterations; per expert-parallel group
 * (the ep ranks of one pipeline rank exchanging tokens), the busiest rank's
 * expert rows against the mean, set beside the simulator's load factor
 * (sim/model/moe.h moe_rank_load_factor) of the same routing:
 *   - the measured per-expert row counts fed to moe_rank_load_factor
 *     (dropless: the counts are after capacity, so no cap is applied) must
 *     give the measured per-rank ratio: this checks that the simulator's
 *     placement of experts on ranks (rank r holds experts r*E/ep ..) and
 *     its ratio are what the executor runs;
 *   - with --moe-router-force-load-balancing the simulator's routing model
 *     (sim/core/plan_moe.c routing()) takes the factor as 1 exactly: the
 *     measured ratio must be 1 (every rank gets N*k/ep rows when E divides
 *     the N*k assignments of each routed batch).
 * Not compared: the simulator's Zipf skew model (--moe-routing-skew) with
 * the executor's learned router, whose imbalance is whatever its weights
 * give; the expert GEMM time against the simulator's (only reported).
 *
 * Ownership: nothing kept; arguments borrowed.
 */
#ifndef TRAINSIM_EXEC_XMOE_H
#define TRAINSIM_EXEC_XMOE_H

#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>

#include "exec/core/comm.h"
#include "exec/runtime.h"
#include "sim/util/err.h"

/* Zero this rank's MoE counters (row counts, expert GEMM seconds). */
void xmoe_reset(runtime *rt);

/* Collective over world (every rank of the run): gather each rank's
 * counters; rank 0 writes the per-rank lines, each group's comparison and
 * each MoE layer's load factor (moe_rank_load_factor of the layer's
 * per-expert rows summed over its expert groups) to out (NULL elsewhere). iterations: the measured ones (per-iteration
 * means). *all_match (rank 0) is false when a group's ratio differs from
 * the simulator's figure (see above). ep: --expert-model-parallel-size;
 * force_balance: --moe-router-force-load-balancing. TS_ENOMEM only. */
int xmoe_report(MPI_Comm world, runtime *rt, const comm *cm, int ep, bool force_balance, int iterations, FILE *out,
                bool *all_match, ts_err *err);

/* Collective over world: --moe-load-out. Sums each MoE layer's rows per
 * expert (the routed token-slots it received, over every rank and measured
 * iteration) and rank 0 writes them to path in --moe-expert-load's
 * per-layer format (sim/config/moe_load.h: layer, expert, tokens, one row
 * per MoE layer and expert; atomically), so that trainsim simulate
 * --moe-expert-load path simulates this run's routing layer by layer: the
 * simulator's factor of each layer is the one xmoe_report prints for it.
 * Every rank returns rank 0's status: TS_EIO naming the path, TS_ENOMEM.
 * Dense run: TS_OK, nothing written. */
int xmoe_write_loads(MPI_Comm world, runtime *rt, const char *path, ts_err *err);

#endif
