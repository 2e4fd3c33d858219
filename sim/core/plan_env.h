/* plan_env — what the steps of plan_build_opts share: the inputs, the
 * layout's sizes and groups, and the data-parallel reductions' costs over
 * them. Internal to the plan builder (plan_build.c, plan_rank.c).
 */
#ifndef TRAINSIM_PLAN_ENV_H
#define TRAINSIM_PLAN_ENV_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/config/config.h"
#include "sim/core/plan.h"
#include "sim/model/commcost.h"
#include "sim/model/cost.h"
#include "sim/sched/sched.h"
#include "sim/util/err.h"

/* What the steps of plan_build_opts share: the inputs and the layout's
 * sizes and groups. */
typedef struct {
    const config *c;
    const sched *s;
    const cost_model *cm;
    const commcost_params *cc;
    bool inline_tp;           /* plan_opts.inline_tp: passes collapsed into one step each */
    int gpn;                  /* GPUs per node */
    int t, d;                 /* tensor- and data-parallel sizes */
    int dt;                   /* bytes of a weight or activation element */
    int grad_bytes;           /* bytes of a gradient element */
    commcost_group dp_group;  /* the data-parallel group */
    int edp;                  /* expert-data-parallel size (MoE; 1 otherwise) */
    commcost_group edp_group; /* the expert gradients' reduction group */
    bool fsdp;                /* --use-torch-fsdp2 or --use-megatron-fsdp */
    config_sharding shard;    /* what FSDP shards (config_fsdp_sharding) */
    int64_t params_layer;     /* parameters of one transformer layer per TP rank */
    int64_t moe_layer_params; /* one MoE layer's parameters on a rank (plan_moe.h; 0: dense model) */
    ts_err *err;
} plan_env;

/* Fill E from the inputs of plan_build_opts (inline_tp: its option). E
 * keeps the pointers; the caller keeps what they point to alive. */
void plan_env_init(plan_env *E, const config *c, const sched *s, const cost_model *cm, const commcost_params *cc,
                   bool inline_tp, ts_err *err);

/* One gradient reduction of params parameters, expert of them routed
 * experts', ns: the rest over the data-parallel group (d x cp), the
 * experts' over the expert-data-parallel group (none when edp is 1), one
 * after the other on the DP stream. */
int64_t plan_env_grad_reduce_ns(const plan_env *E, commcost_coll coll, int64_t params, int64_t expert);

/* The flow modes' terms of a data-parallel step x (plan_step): the dense
 * part of bytes over the data-parallel group, the experts' expert bytes
 * over the expert-data-parallel group. */
void plan_env_dp_flow_terms(const plan_env *E, commcost_coll coll, int64_t bytes, int64_t expert, plan_step *x);

#endif
