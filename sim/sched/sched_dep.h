/* sched_dep — the data a compute action of a schedule waits for and the
 * data it hands on: one rule for every reader of the IR (the comm
 * inserter, the validator, the schedule timer, the simulator's lowering
 * and the executor's runtime).
 *
 * Rule. F of (mb, stage st) reads the activations F of (mb, st-1) made
 * (none on stage 0: it reads tokens); B or I of (mb, st) reads the output
 * gradient B or I of (mb, st+1) made (none on the last stage: it starts
 * from the loss); W reads only its own I's saved state. When the other
 * stage runs on another rank the data travels by a SEND there and a RECV
 * here (SEND_F / RECV_F for activations, SEND_B / RECV_B for gradients;
 * implicit in a compute-only schedule). When it runs on the same rank
 * (ZB-V's bottom of the V, or any placement with p = 1) the producing
 * action hands it over locally, with no SEND/RECV.
 */
#ifndef TRAINSIM_SCHED_DEP_H
#define TRAINSIM_SCHED_DEP_H

#include <stdbool.h>

#include "sim/sched/sched.h"

/* How data moves between a compute action and the stage at the other end. */
typedef enum {
    SCHED_DEP_NONE = 0, /* nothing moves: no stage at the other end, W, or not F / B / I */
    SCHED_DEP_LOCAL,    /* the other stage runs on the same rank: local hand-off */
    SCHED_DEP_REMOTE    /* another rank: SEND there, RECV here (or the reverse) */
} sched_dep_via;

/* One data dependency of a compute action a of micro-batch a->mb. */
typedef struct {
    sched_dep_via via;
    bool grad;      /* a gradient (B / I; SEND_B / RECV_B), else activations
                       (F; SEND_F / RECV_F); false unless a is F, B or I */
    int stage;      /* global stage of a itself; -1 unless a is F, B or I */
    int peer_stage; /* global stage at the other end (the producer of an
                       input, the consumer of an output); -1 when NONE */
    int peer_rank;  /* pipeline rank that runs peer_stage; -1 when NONE */
    int peer_chunk; /* local chunk of peer_stage on peer_rank; -1 when NONE */
} sched_dep;

/* What action a on pipeline rank `rank` waits for before it starts: for F
 * the activations of (a->mb, stage - 1), produced by an F; for B and I the
 * output gradient of (a->mb, stage + 1), produced by a B or an I. REMOTE:
 * the RECV_F / RECV_B of (a->mb, stage) on `rank` brings it; LOCAL: the
 * producing action on `rank` hands it over; NONE: no input to wait for.
 * a->chunk must be in [0, s->v) when a is F, B or I. Fills *out and
 * returns out->via. */
sched_dep_via sched_dep_input(const sched *s, int rank, const sched_action *a, sched_dep *out);

/* What action a on pipeline rank `rank` produces for another stage: for F
 * the activations of (a->mb, stage) that the F of stage + 1 reads; for B
 * and I the input gradient of (a->mb, stage) that the B or I of stage - 1
 * reads. REMOTE: a SEND_F / SEND_B of (a->mb, stage) on `rank` must send
 * it; LOCAL: handed over on `rank`; NONE: nothing goes on (the last
 * stage's F, the first stage's B or I, W, and the other kinds).
 * a->chunk must be in [0, s->v) when a is F, B or I. Fills *out and
 * returns out->via. */
sched_dep_via sched_dep_output(const sched *s, int rank, const sched_action *a, sched_dep *out);

#endif
