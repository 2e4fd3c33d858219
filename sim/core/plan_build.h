/* plan_build — the plan of one configuration: its stages' compute steps
 * from the cost model, their transfers, gradient reductions and optimizer
 * steps, and each rank's static memory (plan.h describes the plan itself).
 */
#ifndef TRAINSIM_PLAN_BUILD_H
#define TRAINSIM_PLAN_BUILD_H

#include "sim/config/config.h"
#include "sim/core/plan.h"
#include "sim/model/commcost.h"
#include "sim/model/cost.h"
#include "sim/sched/sched.h"
#include "sim/util/err.h"

/* Options of plan_build_opts. */
typedef struct {
    /* Collapse each pass (between gradient-bucket boundaries) into one
     * compute-stream step whose segments keep the ops' timeline: exact when
     * tensor-parallel collectives are costed (fixed durations, symmetric
     * ranks), and many times fewer engine tasks. Off when a network model
     * drives every collective as its own task. */
    bool inline_tp;
} plan_opts;

/* Build the plan of config c for schedule s (its stages and placement) with
 * the cost model cm and collective costs cc. The plan is for one TP rank of
 * one data-parallel replica: tensor-parallel and data-parallel peers are
 * symmetric and their collectives are costed, not simulated per rank.
 * *out is owned by the caller (plan_free). TS_EINVAL for shapes layer.h
 * rejects, TS_ENOMEM. */
int plan_build(const config *c, const sched *s, const cost_model *cm, const commcost_params *cc, plan **out,
               ts_err *err);
/* The same with options (plan_build: all off). */
int plan_build_opts(const config *c, const sched *s, const cost_model *cm, const commcost_params *cc,
                    const plan_opts *o, plan **out, ts_err *err);

#endif
