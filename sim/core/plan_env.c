/* plan_env — the plan builder's shared inputs and reduction costs (see
 * plan_env.h). */
#include "sim/core/plan_env.h"

#include "sim/model/flops.h"
#include "sim/model/mla.h"

void plan_env_init(plan_env *E, const config *c, const sched *s, const cost_model *cm, const commcost_params *cc,
                   bool inline_tp, ts_err *err)
{
    const parallel_config *P = &c->par;
    *E = (plan_env){.c = c, .s = s, .cm = cm, .cc = cc, .inline_tp = inline_tp, .err = err};
    E->gpn = c->cluster.gpus_per_node > 0 ? c->cluster.gpus_per_node : 8;
    E->t = P->tp;
    E->d = P->dp > 0 ? P->dp : 1;
    E->d *= config_cp(c); /* dense gradients are reduced (and the optimizer sharded) over d x cp */
    E->dt = config_dtype_bytes(c);
    E->grad_bytes = c->model.precision == PREC_FP16 ? 2 : 4; /* bf16 accumulates and reduces in fp32 */
    E->dp_group = commcost_group_strided(E->d, E->t, E->gpn);
    E->edp = 1;
    E->edp_group = (commcost_group){1, 1};
    E->fsdp = P->torch_fsdp2 || P->megatron_fsdp;
    E->shard = config_fsdp_sharding(P);
    E->params_layer = flops_params_stage(&c->model, P->tp, 1, 0, 0) + mla_layer_params_delta(&c->model, &c->moe, P->tp);
}

int64_t plan_env_grad_reduce_ns(const plan_env *E, commcost_coll coll, int64_t params, int64_t expert)
{
    int64_t ns = commcost_ns(E->cc, coll, (params - expert) * E->grad_bytes, &E->dp_group);
    if (expert > 0 && E->edp > 1)
        ns += commcost_ns(E->cc, coll, expert * E->grad_bytes, &E->edp_group);
    return ns;
}

void plan_env_dp_flow_terms(const plan_env *E, commcost_coll coll, int64_t bytes, int64_t expert, plan_step *x)
{
    x->comm_bytes_edp = expert;
    commcost_flow_terms(E->cc, coll, bytes - expert, &E->dp_group, &x->comm_bw_factor, &x->comm_lat_ns);
    x->edp_bw_factor = 1;
    x->edp_lat_ns = 0;
    if (expert > 0 && E->edp > 1)
        commcost_flow_terms(E->cc, coll, expert, &E->edp_group, &x->edp_bw_factor, &x->edp_lat_ns);
}
