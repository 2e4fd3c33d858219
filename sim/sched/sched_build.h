/* sched_build — building blocks shared by the schedule generators, the comm
 * inserter and the CSV importer: growable per-rank action lists, allocation
 * of an empty sched, and the layer split. Internal to the sched modules.
 */
#ifndef TRAINSIM_SCHED_BUILD_H
#define TRAINSIM_SCHED_BUILD_H

#include "sim/sched/sched.h"

/* A growable array of actions for one rank. Zero-initialise; owns a. */
typedef struct {
    sched_action *a;
    size_t n, cap;
} sched_list;

/* Append {kind, chunk, mb, peer}; TS_ENOMEM (err set) if allocation fails. */
int sched_list_push(sched_list *l, int kind, int chunk, int mb, int peer, ts_err *err);
/* Free l's array and zero it. */
void sched_list_free(sched_list *l);

/* Allocate an empty sched (stages one layer each, no actions). On success
 * *out owns it (sched_free). */
int sched_build_alloc(sched_kind kind, sched_placement pl, int p, int m, int v, sched **out, ts_err *err);

/* Move rank's list into s (replacing and freeing what s had); l is zeroed. */
void sched_build_take(sched *s, int rank, sched_list *l);

/* Split num_layers over s's p*v stages. 0 layers = one per stage. first /
 * last = layers of stage 0 / of the last stage (0 = even split); the other
 * stages share the rest evenly. TS_EINVAL naming the option if that is not
 * possible. */
int sched_build_layers(sched *s, int num_layers, int first, int last, ts_err *err);

/* Set s's stages from per-stage layer counts n[0 .. p*v-1] (each >= 0,
 * summing to at least 1; and to num_layers unless that is 0). TS_EINVAL
 * naming the stage or the sum otherwise. */
int sched_build_layers_from(sched *s, const int *n, int num_layers, ts_err *err);

#endif
