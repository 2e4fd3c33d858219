/* plan_rank — each pipeline rank's steps outside its passes: its static
 * memory (weights, gradients, optimizer state), its optimizer step made of
 * parts (plan.h's PLAN_FIXED_*), the distributed optimizer's parameter
 * all-gather, and the tied embedding's gradient all-reduce. Internal to the
 * plan builder (plan_build.c).
 */
#ifndef TRAINSIM_PLAN_RANK_H
#define TRAINSIM_PLAN_RANK_H

#include "sim/core/plan.h"
#include "sim/core/plan_env.h"

/* The tied word embedding: the first and the last stage hold a copy each
 * and all-reduce its gradient (V*h/t per rank) before the optimizer; none
 * when both stages are on one rank. Adds pl->emb_allreduce. TS_ENOMEM. */
int plan_rank_add_emb_allreduce(plan *pl, const plan_env *E);

/* Per rank of pl: static memory, optimizer step (its parts in
 * pl->fixed_ns for the rank with the longest), parameter all-gather.
 * TS_ENOMEM. */
int plan_rank_add_steps(plan *pl, const plan_env *E);

#endif
