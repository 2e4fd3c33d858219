/* plan_moe — a mixture-of-experts layer in the plan (plan_moe.h). */
#include "sim/core/plan_moe.h"

#include <stdlib.h>
#include <string.h>

#include "sim/model/fp8.h"
#include "sim/model/moe.h"
#include "sim/model/moe_disp.h"

void plan_layer_mem_of(const layer_saved_list *l, plan_layer_mem *m)
{
    memset(m, 0, sizeof *m);
    for (int i = 0; i < l->n; i++) {
        const layer_tensor *t = &l->t[i];
        if (t->kept_after_f)
            m->kept += t->bytes;
        else
            m->by_rc += t->bytes;
        if (t->free_when == LAYER_FREE_AFTER_I)
            m->free_i += t->bytes;
        else
            m->free_w += t->bytes;
    }
}

/* One pass of a MoE layer: the dense layer's ops without the MLP (L has
 * no_mlp) and the block's, in the order of plan_moe.h. */
static int moe_layer_pass(const layer_shape *L, const moe_config *e, double lf, layer_pass pass, layer_ops *out,
                          ts_err *err)
{
    layer_ops dense;
    int rc = layer_ops_build(L, pass, &dense, err);
    if (rc)
        return rc;
    out->n = 0;
    bool fwd = pass == LAYER_PASS_F || pass == LAYER_PASS_R;
    if (fwd && (rc = layer_ops_append(out, &dense, err)))
        return err_prefix(err, "MoE layer: ");
    if ((rc = moe_block_ops(L, e, lf, pass, out, err)))
        return rc;
    if (!fwd && (rc = layer_ops_append(out, &dense, err)))
        return err_prefix(err, "MoE layer: ");
    return TS_OK;
}

void plan_moe_scale_loads(const double *tokens, int n, double routed, double *out)
{
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += tokens[i];
    for (int i = 0; i < n; i++)
        out[i] = sum > 0 ? routed * (tokens[i] / sum) : routed / n;
}

/* The routing model (plan_moe.h) of MoE layer `layer`: *lf and *dropped. */
static int routing(const layer_shape *L, const moe_config *e, int layer, double *lf, double *dropped, ts_err *err)
{
    *lf = 1;
    *dropped = 0;
    bool capped = e->capacity_factor > 0, measured = e->expert_load && !e->force_load_balancing;
    double skew = !e->force_load_balancing && e->routing_skew > 0 ? e->routing_skew : 0;
    if (skew > 0 || capped || measured) { /* balance (skew 0) still drops under a capacity factor below 1 */
        double *load = calloc((size_t)e->num_experts, sizeof *load);
        if (!load)
            return err_set(err, TS_ENOMEM, "MoE routing: loads of %d experts", e->num_experts);
        double routed = (double)moe_disp_tokens(L) * e->topk, drop = 0;
        if (measured) /* the per-layer form: this layer's rows */
            plan_moe_scale_loads(e->expert_load + (e->expert_load_per_layer ? (size_t)layer * e->num_experts : 0),
                                 e->num_experts, routed, load);
        else
            moe_expert_loads_zipf(e->num_experts, routed, skew, PLAN_MOE_ROUTING_SEED, load);
        /* moe_rank_load_factor is over the mean of the kept tokens: over the
         * mean routed (what moe_block_ops multiplies) it is (1 - dropped) of that */
        *lf = moe_rank_load_factor(load, e->num_experts, e->ep, e->capacity_factor, &drop);
        *dropped = routed > 0 ? drop / routed : 0;
        *lf *= 1 - *dropped;
        free(load);
    }
    if (e->pad_to_capacity) /* every expert runs its capacity, whatever the routing */
        *lf = e->capacity_factor;
    else if (*lf < 1 && !(capped && e->capacity_factor < 1))
        *lf = 1; /* below the mean only where the capacity caps every expert below it */
    return TS_OK;
}

/* The first MoE layer of c's model (0 when it has none). */
static int first_moe_layer(const config *c)
{
    for (int l = 0; l < c->model.num_layers; l++)
        if (moe_layer_is_moe(&c->moe, l))
            return l;
    return 0;
}

int plan_moe_build(const config *c, const layer_shape *rc_shape, int gpn, const commcost_params *cc, plan_moe *mo,
                   ts_err *err)
{
    return plan_moe_build_layer(c, rc_shape, first_moe_layer(c), gpn, cc, mo, err);
}

int plan_moe_layer_routing(const config *c, const layer_shape *rc_shape, int layer, double *lf, double *dropped,
                           ts_err *err)
{
    layer_shape L = *rc_shape;
    L.no_mlp = true;
    return routing(&L, &c->moe, layer, lf, dropped, err);
}

int plan_moe_build_layer(const config *c, const layer_shape *rc_shape, int layer, int gpn, const commcost_params *cc,
                         plan_moe *mo, ts_err *err)
{
    memset(mo, 0, sizeof *mo);
    const moe_config *e = &c->moe;
    if (e->num_experts <= 0)
        return TS_OK;
    mo->on = true;
    layer_shape L = *rc_shape, N;
    L.no_mlp = true;
    N = L;
    N.recompute = RECOMPUTE_NONE;
    int rc = routing(&L, e, layer, &mo->load_factor, &mo->dropped, err);
    double lf = mo->load_factor;
    if (rc || (rc = moe_layer_pass(&L, e, lf, LAYER_PASS_F, &mo->f, err)) ||
        (rc = moe_layer_pass(&L, e, lf, LAYER_PASS_R, &mo->r, err)) ||
        (rc = moe_layer_pass(&L, e, lf, LAYER_PASS_B, &mo->b, err)) ||
        (rc = moe_layer_pass(&L, e, lf, LAYER_PASS_I, &mo->i, err)) ||
        (rc = moe_layer_pass(&L, e, lf, LAYER_PASS_W, &mo->w, err)) ||
        (rc = moe_layer_pass(&N, e, lf, LAYER_PASS_B, &mo->nb, err)) ||
        (rc = moe_layer_pass(&N, e, lf, LAYER_PASS_I, &mo->ni, err)) ||
        (rc = moe_layer_pass(&N, e, lf, LAYER_PASS_W, &mo->nw, err)))
        return rc;
    layer_saved_list sl;
    const layer_shape *shapes[2] = {&L, &N};
    plan_layer_mem *mems[2] = {&mo->m_rc, &mo->m_none};
    for (int k = 0; k < 2; k++) {
        if ((rc = layer_saved_build(shapes[k], &sl, err)))
            return rc;
        plan_layer_mem_of(&sl, mems[k]);
        moe_block_mem blk;
        moe_block_mem_of(shapes[k], e, lf, &blk);
        mems[k]->kept += blk.kept;
        mems[k]->by_rc += blk.by_rc;
        mems[k]->free_i += blk.free_i;
        mems[k]->free_w += blk.free_w;
        mems[k]->stash = layer_wgrad_stash_bytes(shapes[k], k == 0 ? &mo->i : &mo->ni, k == 0 ? &mo->w : &mo->nw);
    }
    moe_rank_params P;
    moe_layer_rank_params(&c->model, e, c->par.tp, c->par.pp, c->cluster.gpus, &P);
    mo->params_dense = P.dense;
    mo->params_expert = P.expert;
    mo->edp = P.expert_dp > 0 ? P.expert_dp : 1;
    int etp = e->etp > 0 ? e->etp : 1, ep = e->ep > 0 ? e->ep : 1;
    mo->ep_group = commcost_group_strided(ep, etp, gpn);
    mo->edp_group = commcost_group_strided(mo->edp, etp * ep, gpn);
    mo->transient = moe_block_transient_bytes(&L, e, lf);
    mo->rc_transient = moe_block_recomputed(&L) ? mo->transient : 0;
    int64_t T = moe_disp_tokens(&L);
    bool mx = e->dispatch_fwd_mxfp8 || e->combine_bwd_mxfp8; /* moe_disp.h: some all-to-alls carry MXFP8 rows */
    int64_t mx_row = fp8_mxfp8_bytes(1, L.h);
    if (e->dispatcher == MOE_DISPATCH_FLEX && e->enable_deepep) {
        int nodes = mo->ep_group.ranks / mo->ep_group.ranks_per_node;
        double remote =
            moe_deepep_remote_nodes_grouped(e->num_experts, e->topk, nodes, e->router_num_groups, e->router_group_topk);
        if (remote < 0)
            return err_set(err, TS_EINVAL,
                           "--moe-router-num-groups %d with DeepEP over %d nodes: not modelled (group-limited routing "
                           "is modelled when the groups are a multiple of the expert-parallel group's nodes or "
                           "divide them)",
                           e->router_num_groups, nodes);
        mo->remote_nodes = remote;
        mo->a2a_ns = moe_deepep_remote_ns(cc, T, e->topk, L.h, L.dtype_bytes, remote, &mo->ep_group);
        if (mx)
            mo->a2a_mx_ns = moe_deepep_remote_ns(cc, T, e->topk, mx_row, 1, remote, &mo->ep_group);
    } else if (e->dispatcher == MOE_DISPATCH_ALLTOALL) { /* group limits leave its volume as it is */
        mo->a2a_ns = moe_a2a_ns(cc, moe_a2a_send_bytes(T, e->topk, L.h, L.dtype_bytes, ep), &mo->ep_group);
        if (mx)
            mo->a2a_mx_ns = moe_a2a_ns(cc, moe_a2a_send_bytes(T, e->topk, mx_row, 1, ep), &mo->ep_group);
    }
    mo->a2a_lat_ns = mo->a2a_ns > 0 ? moe_a2a_alpha_ns(cc, &mo->ep_group) : 0;
    return TS_OK;
}

void plan_moe_layers_free(plan_moe_layers *s)
{
    free(s->kinds);
    free(s->of_layer);
    memset(s, 0, sizeof *s);
}

int plan_moe_layers_build(const config *c, const layer_shape *rc_shape, int gpn, const commcost_params *cc,
                          plan_moe_layers *s, ts_err *err)
{
    memset(s, 0, sizeof *s);
    int n = c->model.num_layers, rc = TS_OK, moe_layers = 0;
    if (c->moe.num_experts <= 0 || n <= 0)
        return TS_OK;
    s->of_layer = malloc((size_t)n * sizeof *s->of_layer);
    if (!s->of_layer)
        return err_set(err, TS_ENOMEM, "MoE plan: out of memory for %d layers", n);
    double dropped_sum = 0;
    int nk = 0; /* the variants built (s->n_kinds) */
    for (int l = 0; l < n && !rc; l++) {
        s->of_layer[l] = -1;
        if (!moe_layer_is_moe(&c->moe, l))
            continue;
        double lf, dropped;
        if ((rc = plan_moe_layer_routing(c, rc_shape, l, &lf, &dropped, err)))
            break;
        moe_layers++;
        dropped_sum += dropped;
        if (moe_layers == 1 || lf > s->lf_max) {
            s->lf_max = lf;
            s->busiest_layer = l;
        }
        if (moe_layers == 1 || lf < s->lf_min)
            s->lf_min = lf;
        int k = 0;
        while (k < nk && s->kinds[k].load_factor != lf) /* the same factor: the same ops */
            k++;
        if (k == nk) {
            plan_moe *more = realloc(s->kinds, (size_t)(k + 1) * sizeof *more);
            if (!more) {
                rc = err_set(err, TS_ENOMEM, "MoE plan: out of memory for %d layer variants", k + 1);
                break;
            }
            s->kinds = more;
            if ((rc = plan_moe_build_layer(c, rc_shape, l, gpn, cc, &s->kinds[k], err)))
                break;
            s->kinds[k].load_factor = lf; /* (the same routing: what the lookup above compares) */
            s->n_kinds = ++nk;
        }
        s->of_layer[l] = k;
    }
    s->dropped = moe_layers > 0 ? dropped_sum / moe_layers : 0;
    if (rc)
        plan_moe_layers_free(s);
    return rc;
}

const plan_moe *plan_moe_layers_of(const plan_moe_layers *s, int layer)
{
    if (!s->of_layer || layer < 0 || s->of_layer[layer] < 0)
        return NULL;
    return &s->kinds[s->of_layer[layer]];
}
