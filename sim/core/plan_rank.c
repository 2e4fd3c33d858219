/* plan_rank — per-rank static memory, optimizer step and parameter
 * all-gather (see plan_rank.h). */
#include "sim/core/plan_rank.h"

#include <string.h>

#include "sim/model/flops.h"
#include "sim/model/fp8.h"
#include "sim/model/layer.h"
#include "sim/model/moe.h"

/* Bytes the Adam step moves per parameter of the local shard with mixed
 * precision: read the fp32 gradient (4), read and write the fp32 master
 * weight, momentum and variance (24), write the 16-bit weight (2) — apex/TE
 * fused multi-tensor Adam, counted by us. The gradient norm for clipping
 * reads the gradient once more (PLAN_NORM_BYTES_PER_PARAM, its own part). */
#define PLAN_ADAM_BYTES_PER_PARAM 30
/* Same in fp32 training: no master copy; read grad (4), m, v, weight read +
 * write (24). */
#define PLAN_ADAM_BYTES_PER_PARAM_FP32 28
/* --clip-grad > 0 (Megatron's default 1.0): get_grad_norm_fp32 reads each
 * fp32 main gradient of the shard once (multi-tensor L2 norm), then
 * all-reduces the sum of squares (one fp32) over the model-parallel group,
 * or with the distributed optimizer over every rank (each holds a shard):
 * megatron/core/optimizer/clip_grads.py, optimizer.py
 * get_grad_stats_parallel_group. The clip itself (a scale of every
 * gradient) runs only when the norm passes --clip-grad: data-dependent, not
 * costed. */
#define PLAN_NORM_BYTES_PER_PARAM 4
/* fp16 or a constant --loss-scale (Megatron's MixedPrecisionOptimizer with
 * a grad scaler): _unscale_main_grads_and_check_for_nan reads and writes
 * each fp32 main gradient once (torch._amp_foreach_non_finite_check_and_
 * unscale_: 8 bytes), then all-reduces found_inf (one fp32, MAX) over the
 * same group as the norm. With fp16 the gradient buffer is 16-bit (no fp32
 * accumulation), so the main gradients are first copied to fp32
 * (_copy_model_grads_to_main_grads: read 2, write 4). */
#define PLAN_UNSCALE_BYTES_PER_PARAM 8
#define PLAN_FP16_GRAD_COPY_BYTES    6
/* An all-reduce of one fp32 (the norm, the found-inf flag). */
#define PLAN_SCALAR_BYTES 4

int plan_rank_add_emb_allreduce(plan *pl, const plan_env *E)
{
    const config *c = E->c;
    int r_first, r_last, ch0, t = E->t;
    sched_rank_chunk_of(E->s, 0, &r_first, &ch0);
    sched_rank_chunk_of(E->s, pl->n_stages - 1, &r_last, &ch0);
    if (r_first == r_last)
        return TS_OK;
    int64_t apart = (int64_t)(r_last > r_first ? r_last - r_first : r_first - r_last) * t * E->d;
    commcost_group emb_pair = {2, apart < E->gpn ? 2 : 1};
    plan_step x = plan_step_init("emb.grad-all-reduce", PLAN_STREAM_DP, PLAN_CAT_DP, -1, 0);
    x.comm_bytes = (int64_t)c->model.padded_vocab_size / t * c->model.hidden_size * E->grad_bytes;
    x.dur_ns = commcost_ns(E->cc, COMM_ALL_REDUCE, x.comm_bytes, &emb_pair);
    if (plan_push_step(pl, &x, &pl->emb_allreduce))
        return err_set(E->err, TS_ENOMEM, "plan: out of memory");
    return TS_OK;
}

/* Parameters of the two transformer layers FSDP holds gathered on rank r
 * (the one computing and the one prefetched); 0 when the rank has none. */
static int64_t unit_layer_params(const plan_env *E, int r, const plan *pl)
{
    for (int ch = 0; ch < pl->v; ch++)
        if (E->s->stages[sched_stage_of(E->s, r, ch)].num_layers > 0)
            return 2 * E->params_layer;
    return 0;
}

/* The parts of one rank's optimizer step (plan_fixed), ns: shard = the
 * parameters its optimizer updates, grads = its gradient buffer's bytes,
 * layer_params = its transformer layers' parameters (FP8 weight casts). */
static void fixed_costs(const plan_env *E, int64_t shard, int64_t grads, int64_t layer_params,
                        int64_t part[PLAN_FIXED_KINDS])
{
    const config *c = E->c;
    bool fp32 = c->model.precision == PREC_FP32, fp16 = c->model.precision == PREC_FP16;
    int mp = E->t * c->par.pp; /* the model-parallel group: t x p (the cp ranks hold the same gradients) */
    int world = mp * E->d;     /* d x cp: every rank */
    bool distopt = c->par.distributed_optimizer || E->shard >= SHARD_OPTIM;
    int n = distopt ? world : mp;
    commcost_group g = commcost_group_strided(n, 1, E->gpn);
    if (!distopt) { /* t consecutive ranks per stage, stages t x cp x d apart */
        int blk = E->t, stride = E->t * E->d, gpn = E->gpn;
        if (blk >= gpn || gpn % blk)
            g.ranks_per_node = commcost_gcd(blk, gpn);
        else if (stride >= gpn || gpn % stride)
            g.ranks_per_node = blk;
        else
            g.ranks_per_node = blk * commcost_gcd(c->par.pp, gpn / stride);
    }
    memset(part, 0, sizeof(int64_t) * PLAN_FIXED_KINDS);
    part[PLAN_FIXED_ZERO_GRAD] = cost_mem_ns(E->cm, grads);
    if (!fp32 && (fp16 || c->par.loss_scale > 0)) {
        int64_t per = PLAN_UNSCALE_BYTES_PER_PARAM + (E->grad_bytes == 2 ? PLAN_FP16_GRAD_COPY_BYTES : 0);
        part[PLAN_FIXED_UNSCALE] = cost_mem_ns(E->cm, shard * per);
        if (n > 1)
            part[PLAN_FIXED_INF_AR] = commcost_ns(E->cc, COMM_ALL_REDUCE, PLAN_SCALAR_BYTES, &g);
    }
    /* Megatron-LM checks each gradient bucket's norm for NaN (and with
     * --check-for-large-grads for spikes) before reducing it
     * (_ParamAndGradBucketGroup.check_grads): one read of the gradient
     * buffer, on the compute stream; it turns the NaN check off with fp16 and
     * dynamic loss scaling (arguments.py). Costed with the step: the same
     * compute time, the buckets' reductions not delayed by it. */
    bool nan_check = !c->par.no_nan_check && !(fp16 && c->par.loss_scale <= 0);
    if (nan_check || c->par.check_large_grads)
        part[PLAN_FIXED_NAN_CHECK] = cost_mem_ns(E->cm, grads);
    if (c->par.log_num_zeros) { /* count_zeros_fp32: read each gradient of the shard, all-reduce the count */
        part[PLAN_FIXED_ZEROS] = cost_mem_ns(E->cm, shard * PLAN_NORM_BYTES_PER_PARAM);
        if (n > 1)
            part[PLAN_FIXED_ZEROS_AR] = commcost_ns(E->cc, COMM_ALL_REDUCE, PLAN_SCALAR_BYTES, &g);
    }
    if (!c->par.no_clip_grad) {
        part[PLAN_FIXED_GRAD_NORM] = cost_mem_kind_ns(E->cm, COST_MEM_ADAM, shard * PLAN_NORM_BYTES_PER_PARAM);
        if (n > 1)
            part[PLAN_FIXED_NORM_AR] = commcost_ns(E->cc, COMM_ALL_REDUCE, PLAN_SCALAR_BYTES, &g);
    }
    part[PLAN_FIXED_ADAM] = cost_mem_kind_ns(
        E->cm, COST_MEM_ADAM, shard * (fp32 ? PLAN_ADAM_BYTES_PER_PARAM_FP32 : PLAN_ADAM_BYTES_PER_PARAM));
    if (c->model.fp8_format != FP8_FORMAT_NONE) /* the layers' weights cast to FP8 once per iteration */
        part[PLAN_FIXED_FP8_CAST] = cost_mem_ns(E->cm, layer_fp8_cast_bytes(c->model.fp8_recipe, layer_params));
    /* aux-loss-free balancing: Megatron-core's finalize_model_grads
     * (_update_router_expert_bias, moe_utils.get_updated_expert_bias)
     * all-reduces the stage's fp32 token counts, E per MoE layer, over the
     * t x cp x d ranks once per iteration (the stage's MoE layers taken as
     * ceil(MoE layers / p)) */
    int tdp = E->t * E->d;
    if (c->moe.expert_bias && c->moe.num_experts > 0 && tdp > 1) {
        int moe_layers = 0, p = c->par.pp > 0 ? c->par.pp : 1;
        for (int l = 0; l < c->model.num_layers; l++)
            moe_layers += moe_layer_is_moe(&c->moe, l);
        commcost_group gb = commcost_group_strided(tdp, 1, E->gpn);
        int64_t bytes = 4 * (int64_t)c->moe.num_experts * ((moe_layers + p - 1) / p);
        part[PLAN_FIXED_BIAS_AR] = commcost_ns(E->cc, COMM_ALL_REDUCE, bytes, &gb);
    }
}

int plan_rank_add_steps(plan *pl, const plan_env *E)
{
    const config *c = E->c;
    const parallel_config *P = &c->par;
    int d = E->d, dt = E->dt;
    int64_t longest = -1;
    for (int r = 0; r < pl->p; r++) {
        int64_t params = 0, expert = 0;
        for (int ch = 0; ch < pl->v; ch++) {
            params += pl->stages[sched_stage_of(E->s, r, ch)].params;
            expert += pl->stages[sched_stage_of(E->s, r, ch)].expert_params;
        }
        /* the distributed optimizer shards the dense part over d, the experts over edp */
        int64_t per_rank = (params - expert + d - 1) / d + (expert + E->edp - 1) / E->edp, layer_params = 0;
        for (int ch = 0; ch < pl->v; ch++) {
            int st = sched_stage_of(E->s, r, ch);
            int nl = E->s->stages[st].num_layers;
            if (pl->stages[st].expert_params > 0) /* MoE: the stage's parameters less its embedding / output layer */
                layer_params +=
                    pl->stages[st].params - (flops_params_stage(&c->model, E->t, nl, st == 0, st == pl->n_stages - 1) -
                                             (int64_t)nl * flops_params_stage(&c->model, E->t, 1, 0, 0));
            else
                layer_params += (int64_t)nl * E->params_layer;
        }
        int64_t shard = P->distributed_optimizer || E->shard >= SHARD_OPTIM ? per_rank : params;
        bool fp32 = c->model.precision == PREC_FP32;
        pl->weights_bytes[r] = params * dt;
        pl->grads_bytes[r] = (E->shard >= SHARD_OPTIM_GRADS ? per_rank : params) * E->grad_bytes;
        if (E->shard == SHARD_OPTIM_GRADS_PARAMS) {
            /* the shard, plus the gathered unit being computed and the one
             * prefetched: two of the rank's largest units (a layer, or the
             * embedding / output layer of its first or last stage) */
            int64_t unit = 0;
            for (int ch = 0; ch < pl->v; ch++) {
                int st = sched_stage_of(E->s, r, ch);
                int nl = E->s->stages[st].num_layers;
                int64_t layer = flops_params_stage(&c->model, E->t, 1, 0, 0);
                /* the embedding / output layer: the dense stage's less its layers (MoE layers differ) */
                int64_t extra =
                    flops_params_stage(&c->model, E->t, nl, st == 0, st == pl->n_stages - 1) - (int64_t)nl * layer;
                if (pl->stages[st].expert_params > 0 && E->moe_layer_params > layer)
                    layer = E->moe_layer_params; /* a MoE layer's rank share, gathered over d x cp and edp */
                if (nl > 0 && layer > unit)
                    unit = layer;
                if (extra > unit)
                    unit = extra;
            }
            pl->weights_bytes[r] = (per_rank + 2 * unit) * dt;
        }
        pl->weights_bytes[r] += fp8_weight_copy_bytes(&c->model, E->shard == SHARD_OPTIM_GRADS_PARAMS, dt, layer_params,
                                                      unit_layer_params(E, r, pl));
        pl->optim_bytes[r] = shard * (fp32 ? 8 : 12); /* fp32 master + momentum + variance */
        int64_t part[PLAN_FIXED_KINDS], optim_ns = 0;
        fixed_costs(E, shard, pl->grads_bytes[r], layer_params, part);
        for (int k = 0; k < PLAN_FIXED_KINDS; k++)
            optim_ns += part[k];
        if (optim_ns > longest) {
            longest = optim_ns;
            memcpy(pl->fixed_ns, part, sizeof part);
        }
        plan_step x = plan_step_init("optimizer", PLAN_STREAM_COMPUTE, PLAN_CAT_OPTIM, -1, optim_ns);
        if (plan_push_step(pl, &x, &pl->optim[r]))
            return err_set(E->err, TS_ENOMEM, "plan: out of memory");
        if ((P->distributed_optimizer || E->shard >= SHARD_OPTIM) && E->shard != SHARD_OPTIM_GRADS_PARAMS && d > 1) {
            x = plan_step_init("dp.param-all-gather", PLAN_STREAM_DP, PLAN_CAT_DP, -1, 0);
            x.comm_coll = COMM_ALL_GATHER;
            x.comm_bytes = fp8_gather_bytes(&c->model, dt, params, params - layer_params);
            const plan_stage *S0 = &pl->stages[sched_stage_of(E->s, r, 0)];
            if (P->overlap_param_gather && S0->n_buckets > 0) {
                /* --overlap-param-gather: the gathers run behind the next
                 * forward; the one it waits for is the bucket of the rank's
                 * first layers, the last one its backward closed */
                x.name = "dp.param-all-gather.first-bucket";
                x.comm_bytes = pl->steps[S0->dp_bucket0 + (uint32_t)S0->n_buckets - 1].comm_bytes / E->grad_bytes *
                               (c->model.fp8_param_gather ? 1 : dt); /* --fp8-param-gather: FP8 (the bucket's layers) */
            }
            x.dur_ns = commcost_ns(E->cc, COMM_ALL_GATHER, x.comm_bytes, &E->dp_group);
            commcost_flow_terms(E->cc, COMM_ALL_GATHER, x.comm_bytes, &E->dp_group, &x.comm_bw_factor, &x.comm_lat_ns);
            if (expert > 0 && E->edp > 1 && !P->overlap_param_gather) { /* the experts over edp instead */
                x.dur_ns = commcost_ns(E->cc, COMM_ALL_GATHER, (params - expert) * dt, &E->dp_group) +
                           commcost_ns(E->cc, COMM_ALL_GATHER, expert * dt, &E->edp_group);
                plan_env_dp_flow_terms(E, COMM_ALL_GATHER, x.comm_bytes, expert * dt, &x);
            }
            if (plan_push_step(pl, &x, &pl->param_gather[r]))
                return err_set(E->err, TS_ENOMEM, "plan: out of memory");
        }
    }
    return TS_OK;
}
