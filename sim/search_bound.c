/* search_bound — lower bound on a layout's peak memory (see search_bound.h). */
#include "search_bound.h"

#include "flops.h"
#include "layer.h"

static int imin(int a, int b) { return a < b ? a : b; }
static int imax(int a, int b) { return a > b ? a : b; }

int search_bound_inflight(const parallel_config *p, int num_microbatches, int rank)
{
    int pp = p->pp, m = num_microbatches, v = p->vp > 0 ? p->vp : 1;
    switch (p->schedule) {
    case SCHED_GPIPE:
        return m * v;
    case SCHED_INTERLEAVED: { /* Megatron's warm-up, then the first steady forward */
        int warmup = 2 * (pp - rank - 1) + (v - 1) * pp;
        return imax(1, imin(warmup + 1, m * v));
    }
    case SCHED_1F1B:
    case SCHED_ZB_H1:
    case SCHED_ZB_H2: /* holds 2p-1 at rank 0; p - r is the floor it shares with 1F1B */
    case SCHED_ZB_V:  /* chunks of half a stage; at least p - r of them */
    default:
        return imax(1, imin(pp - rank, m));
    }
}

/* Transformer layers held by pipeline rank r (all its chunks). */
static int rank_layers(const parallel_config *p, int num_layers, int r)
{
    if (p->pp == 1)
        return num_layers;
    int first = p->first_stage_layers, last = p->last_stage_layers;
    if (first > 0 && r == 0)
        return first;
    if (last > 0 && r == p->pp - 1)
        return last;
    int middle_stages = p->pp - (first > 0) - (last > 0);
    return (num_layers - first - last) / middle_stages;
}

static int bound_rank(const config *c, const layer_shape *shape, int r, search_bound *b,
                      ts_err *err)
{
    const model_config *mo = &c->model;
    const parallel_config *p = &c->par;
    int v = p->vp > 0 ? p->vp : 1;
    int layers = rank_layers(p, mo->num_layers, r);
    bool first = r == 0, last = r == p->pp - 1;
    double params = (double)flops_params_stage(mo, p->tp, layers, first, last);
    bool fp32 = mo->precision == PREC_FP32;
    double wb = fp32 ? 4.0 : 2.0, gb = fp32 ? 4.0 : 2.0, ob = fp32 ? 8.0 : 12.0;
    if (p->distributed_optimizer && p->dp > 1)
        ob /= p->dp;
    b->weights_bytes = params * wb;
    b->grads_bytes = params * gb;
    b->optimizer_bytes = params * ob;

    /* Bytes one layer keeps per micro-batch: under the run's mode, and (for
     * block recomputation) under full recomputation and under none. */
    layer_shape s = *shape;
    layer_saved_list saved;
    int rc = layer_saved_build(&s, &saved, err);
    if (rc)
        return rc;
    double per_layer = (double)layer_saved_kept_bytes(&saved);
    int chunk_layers = imax(1, layers / v);
    double chunk_bytes = chunk_layers * per_layer;
    if (p->recompute == RECOMPUTE_FULL && p->recompute_method == RECOMPUTE_METHOD_BLOCK &&
        p->recompute_num_layers > 0 && p->recompute_num_layers < chunk_layers) {
        s.recompute = RECOMPUTE_NONE;
        if ((rc = layer_saved_build(&s, &saved, err)))
            return rc;
        double kept = (double)layer_saved_kept_bytes(&saved);
        int k = p->recompute_num_layers;
        chunk_bytes = k * per_layer + (chunk_layers - k) * kept;
    }
    int m = config_num_microbatches(c);
    int inflight = search_bound_inflight(p, m, r);
    double act = inflight * chunk_bytes;
    if (first) {
        if ((rc = layer_embedding_saved(shape, &saved, err)))
            return rc;
        act += (v == 1 ? inflight : 1) * (double)layer_saved_kept_bytes(&saved);
    }
    if (last) { /* the output layer's tensors of the micro-batch being turned around */
        if ((rc = layer_output_saved(shape, &saved, err)))
            return rc;
        act += (double)layer_saved_kept_bytes(&saved);
    }
    b->activations_bytes = act;
    b->total_bytes = b->weights_bytes + b->grads_bytes + b->optimizer_bytes + b->activations_bytes;
    b->rank = r;
    return TS_OK;
}

int search_bound_compute(const config *c, search_bound *out, ts_err *err)
{
    layer_shape shape;
    int rc = layer_shape_from_config(c, &shape, err);
    if (rc)
        return rc;
    if ((rc = bound_rank(c, &shape, 0, out, err)))
        return rc;
    if (c->par.pp > 1) {
        search_bound last;
        if ((rc = bound_rank(c, &shape, c->par.pp - 1, &last, err)))
            return rc;
        if (last.total_bytes > out->total_bytes)
            *out = last;
    }
    return TS_OK;
}
