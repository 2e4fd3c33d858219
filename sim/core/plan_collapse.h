/* plan_collapse — a pass of the plan folded into collapsed steps: the ops'
 * timeline computed once (each step starts when its stream is free and its
 * dependencies have ended) and kept as segments and memory events of one
 * compute-stream step (plan.h, plan_seg; plan_build.h, plan_opts.inline_tp).
 */
#ifndef TRAINSIM_PLAN_COLLAPSE_H
#define TRAINSIM_PLAN_COLLAPSE_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/core/plan.h"

/* Replace the steps [base, pl->n_steps) of pass k (PLAN_PASS_*) of stage S,
 * compute and TP steps with relative dependencies in program order, by one
 * collapsed step (S->pass[k]); for B and W with buckets also build the
 * variant split after each step that closes a gradient bucket
 * (S->pass_final[k]). Each collapsed step's tp_exposed_ns is the time in it
 * when only its collectives run, ep_exposed_ns the part of that spent in the
 * MoE all-to-alls (segments of PLAN_CAT_EP). Segments and memory events go
 * to pl (owned by it). TS_ENOMEM. */
int plan_collapse_pass(plan *pl, uint32_t base, int k, bool buckets, plan_stage *S);

#endif
