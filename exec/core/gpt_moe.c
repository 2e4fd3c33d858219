/* gpt_moe — the MoE layers of a gpt stage (gpt.h, "MoE layers"): which
 * layers they are, their creation over the comm's expert groups, gradient
 * reduction and the Adam step of their weights. The passes are in
 * gpt_pass.c. */
#include <stdlib.h>

#include "exec/core/gpt_impl.h"

/* Seed of layer l's MoE weights: the model's seed and the layer (a splitmix
 * increment apart, so layers differ). */
#define MOE_SEED_STEP 0x9E3779B97F4A7C15ull

bool gpt_layer_is_moe(const gpt_dims *d, int layer)
{
    if (d->num_experts <= 0 || layer < d->moe_first_dense)
        return false;
    int f = d->moe_layer_freq > 0 ? d->moe_layer_freq : 1;
    return (layer - d->moe_first_dense) % f == 0;
}

static moe_route_cfg route_cfg(const gpt_dims *d)
{
    return (moe_route_cfg){.num_experts = d->num_experts,
                           .topk = d->moe_topk,
                           .capacity_factor = d->moe_capacity,
                           .force_balance = d->moe_force_balance};
}

size_t gpt_moe_num_params(const gpt_dims *d)
{
    size_t n = 0;
    moe_route_cfg rc = route_cfg(d);
    for (int l = 0; l < d->layers; l++)
        if (gpt_layer_is_moe(d, l))
            n += moe_full_floats(&rc, d->hidden, d->moe_ffn, d->swiglu);
    return n;
}

int gpt_moe_check(const gpt_dims *d, int t, bool sp, ts_err *err)
{
    if (d->num_experts <= 0)
        return TS_OK;
    if (d->moe_ffn < 1 || d->moe_layer_freq < 1 || d->moe_first_dense < 0)
        return err_set(err, TS_EINVAL,
                       "MoE: --moe-ffn-hidden-size %d, --moe-layer-freq %d, first dense layers %d (valid: >= 1, "
                       ">= 1, >= 0)",
                       d->moe_ffn, d->moe_layer_freq, d->moe_first_dense);
    moe_route_cfg rc = route_cfg(d);
    int r = moe_route_check(&rc, 1, err);
    if (r)
        return r;
    if (d->recompute != GPT_RC_NONE)
        return err_set(err, TS_ENOTSUP,
                       "--recompute-granularity full with --num-experts: the executor does not rerun a MoE layer's "
                       "dispatch (use selective recomputation or none)");
    if (d->dist_optim)
        return err_set(err, TS_ENOTSUP,
                       "--use-distributed-optimizer with --num-experts: the executor keeps the MoE weights' Adam "
                       "state unsharded (remove the flag)");
    if (t > 1 && !sp)
        return err_set(err, TS_ENOTSUP,
                       "--num-experts with --tensor-model-parallel-size %d: Megatron-core requires "
                       "--sequence-parallel with tensor and expert parallelism (give it)",
                       t);
    if (t > 1 && d->moe_aux_coeff > 0)
        return err_set(err, TS_ENOTSUP,
                       "--moe-aux-loss-coeff with --tensor-model-parallel-size %d: the executor computes the "
                       "auxiliary loss over each rank's sequence-parallel tokens only (give t = 1 or no aux loss)",
                       t);
    return TS_OK;
}

int gpt_moe_create(gpt_stage *st, ts_err *err)
{
    st->moe = calloc((size_t)st->nl + 1, sizeof *st->moe);
    if (!st->moe)
        return err_set(err, TS_ENOMEM, "gpt stage: out of memory");
    if (st->d.num_experts <= 0)
        return TS_OK;
    const comm *cm = st->cm;
    if (cm->size[COMM_CP] > 1 && st->d.moe_aux_coeff > 0)
        return err_set(err, TS_ENOTSUP,
                       "--moe-aux-loss-coeff with --context-parallel-size %d: the executor computes the auxiliary "
                       "loss over each rank's tokens only (give cp = 1 or no aux loss)",
                       cm->size[COMM_CP]);
    const moe_xchg *xc = cm->moe_xc;
    int world = cm->size[COMM_TP] * cm->size[COMM_DP];
    if (!xc && world > 1)
        return err_set(err, TS_EINVAL,
                       "MoE layers over %d tensor x context x data-parallel ranks: the %s comm has no expert groups "
                       "(comm_mpi_set_ep, comm_nccl_set_ep)",
                       world, cm->name);
    int ep = xc ? xc->size : 1, er = xc ? xc->rank : 0;
    moe_route_cfg rc = route_cfg(&st->d);
    for (int li = 0; li < st->nl; li++) {
        int l = st->l0 + li;
        if (!gpt_layer_is_moe(&st->d, l))
            continue;
        gpt_moe *g = &st->moe[li];
        int r = moe_layer_create(&rc, st->C, st->d.moe_ffn, st->d.swiglu, ep, er,
                                 st->seed + MOE_SEED_STEP * (uint64_t)(l + 1), st->be, &g->L, err);
        if (r) {
            err_prefix(err, "layer %d: ", l);
            return r;
        }
        g->L->aux_coeff = st->d.moe_aux_coeff;
        g->nr = (size_t)st->d.num_experts * (size_t)st->C;
        g->n1 = (size_t)g->L->El * (size_t)g->L->Fu * (size_t)st->C;
        g->n2 = (size_t)g->L->El * (size_t)st->C * (size_t)st->d.moe_ffn;
        size_t n = g->nr + g->n1 + g->n2;
        if ((r = be_alloc(st->be, n, XMEM_OPTIM, &g->m, err)) || (r = be_alloc(st->be, n, XMEM_OPTIM, &g->v, err))) {
            err_prefix(err, "layer %d's MoE Adam moments: ", l);
            return r;
        }
    }
    return TS_OK;
}

void gpt_moe_free(gpt_stage *st)
{
    for (int li = 0; st->moe && li < st->nl; li++) {
        size_t n = st->moe[li].nr + st->moe[li].n1 + st->moe[li].n2;
        be_free(st->be, st->moe[li].m, n, XMEM_OPTIM);
        be_free(st->be, st->moe[li].v, n, XMEM_OPTIM);
        moe_layer_free(st->moe[li].L);
    }
    free(st->moe);
    st->moe = NULL;
}

void gpt_stage_layers(const gpt_stage *st, int *first, int *count)
{
    *first = st->l0;
    *count = st->nl;
}

moe_layer *gpt_stage_moe(gpt_stage *st, int layer)
{
    int li = layer - st->l0;
    return li >= 0 && li < st->nl && st->moe ? st->moe[li].L : NULL;
}

void gpt_moe_zero_grads(gpt_stage *st)
{
    for (int li = 0; li < st->nl; li++) {
        gpt_moe *g = &st->moe[li];
        if (!g->L)
            continue;
        st->be->zero(st->be, g->L->gwr, g->nr);
        st->be->zero(st->be, g->L->gw1, g->n1);
        st->be->zero(st->be, g->L->gw2, g->n2);
    }
}

int gpt_moe_reduce_grads(gpt_stage *st, ts_err *err)
{
    comm *cm = st->cm;
    int rc = TS_OK;
    for (int li = 0; li < st->nl && !rc; li++) {
        gpt_moe *g = &st->moe[li];
        if (!g->L)
            continue;
        if (st->sp && st->t > 1) /* each tensor rank routed its own tokens */
            rc = cm->all_reduce(cm, COMM_TP, g->L->gwr, g->nr, err);
        if (!rc && cm->size[COMM_DP] > 1)
            rc = cm->all_reduce(cm, COMM_DP, g->L->gwr, g->nr, err);
        if (!rc)
            rc = moe_layer_reduce_experts(g->L, cm->moe_edp, err);
    }
    return rc;
}

void gpt_moe_adam(gpt_stage *st, float lr, float b1, float b2, float eps, float wd, int step)
{
    backend *be = st->be;
    for (int li = 0; li < st->nl; li++) {
        gpt_moe *g = &st->moe[li];
        if (!g->L)
            continue;
        be->adam(be, g->L->wr, g->L->gwr, g->m, g->v, g->nr, lr, b1, b2, eps, wd, step);
        be->adam(be, g->L->w1, g->L->gw1, g->m + g->nr, g->v + g->nr, g->n1, lr, b1, b2, eps, wd, step);
        be->adam(be, g->L->w2, g->L->gw2, g->m + g->nr + g->n1, g->v + g->nr + g->n1, g->n2, lr, b1, b2, eps, wd, step);
    }
}
