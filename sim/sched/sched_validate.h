/* sched_validate — prove a schedule runs: dependencies, completeness,
 * matched and deadlock-free point-to-point communication.
 *
 * Checks, in this order (the first failure is reported):
 *  1. each action is well formed: chunk in [0, v), micro-batch in [0, m),
 *     SEND/RECV peer = the rank of the adjacent stage (never the own rank);
 *  2. per rank, in order: every F after its input (the RECV_F, or the F of
 *     the previous stage when that stage is on the same rank), every B/I
 *     after its F and its output gradient (RECV_B, or the next stage's B/I
 *     on the same rank), every W after its I; each (mb, stage) runs F once
 *     and either one B or one I and one W; every SEND after the op that
 *     produces its data, once; REDUCE_GRAD of a chunk after all its
 *     backward work, OPTIM after everything else on the rank;
 *  3. completeness: nothing missing on a rank, every produced activation or
 *     gradient that another rank needs is sent;
 *  4. execution: the ranks are run with blocking rendezvous point-to-point
 *     (a SEND waits for the matching RECV on the peer and vice versa; a
 *     compute-only schedule waits for the remote producer instead); if they
 *     stall before the end, the schedule deadlocks.
 * Errors say "rank R, action I (TOKEN): what is wrong".
 */
#ifndef TRAINSIM_SCHED_VALIDATE_H
#define TRAINSIM_SCHED_VALIDATE_H

#include "sim/sched/sched.h"

typedef struct {
    int *peak_inflight; /* in: NULL, or p ints to fill (sched_peak_inflight) */
    int bad_rank;       /* out: rank of the first offending action, -1 if valid */
    long bad_index;     /* out: its index in that rank's list (may equal
                           n_actions[rank] when something is missing at the end) */
} sched_vinfo;

/* Validate s. TS_OK if it runs; TS_EINVAL with the first offending action
 * named (and info->bad_rank/bad_index set) otherwise; TS_ENOMEM. info may
 * be NULL. */
int sched_validate(const sched *s, sched_vinfo *info, ts_err *err);

#endif
