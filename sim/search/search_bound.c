/* search_bound — lower bound on a layout's peak memory (see search_bound.h). */
#include "sim/search/search_bound.h"

#include <stdlib.h>

#include "sim/config/overheads.h"
#include "sim/core/plan_moe.h"
#include "sim/model/dataload.h"
#include "sim/model/flops.h"
#include "sim/model/layer.h"
#include "sim/model/mla.h"
#include "sim/model/moe.h"
#include "sim/model/mtp.h"

static int imin(int a, int b)
{
    return a < b ? a : b;
}
static int imax(int a, int b)
{
    return a > b ? a : b;
}

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

void search_bound_inflight_sched(const sched *s, search_bound_live *out)
{
    for (int r = 0; r < s->p; r++) {
        int f = 0, w = 0;
        search_bound_live pk = {0, 0, 0};
        for (size_t i = 0; i < s->n_actions[r]; i++) {
            int k = s->actions[r][i].kind;
            if (k == ACT_F) {
                f++;
            } else if (k == ACT_B) {
                f--;
            } else if (k == ACT_I) {
                f--;
                w++;
            } else if (k == ACT_W) {
                w--;
            }
            pk.f = imax(pk.f, f);
            pk.w = imax(pk.w, w);
            pk.fw = imax(pk.fw, f + w);
        }
        pk.f = imax(1, pk.f);
        pk.fw = imax(pk.f, pk.fw);
        out[r] = pk;
    }
}

/* Transformer layers held by pipeline rank r (all its chunks): from the
 * config's layers per virtual stage when it has them (loop placement:
 * stage c*p + r; ZB-V's V: stages r and 2p-1-r). */
static int rank_layers(const parallel_config *p, int num_layers, int r)
{
    if (p->pp == 1)
        return num_layers;
    int v = p->vp > 0 ? p->vp : 1;
    if (p->layout.n_stages == p->pp * v) {
        int n = 0;
        for (int c = 0; c < v; c++) {
            int st = p->schedule == SCHED_ZB_V && c == 1 ? 2 * p->pp - 1 - r : c * p->pp + r;
            n += p->layout.layers[st];
        }
        return n;
    }
    int first = p->first_stage_layers, last = p->last_stage_layers;
    if (first > 0 && r == 0)
        return first;
    if (last > 0 && r == p->pp - 1)
        return last;
    int middle_stages = p->pp - (first > 0) - (last > 0);
    return (num_layers - first - last) / middle_stages;
}

/* Per-micro-batch kept bytes: one layer under the run's mode and with no
 * recomputation (block method), the same for a MoE layer (the layer
 * without its MLP plus the MoE block at the busiest expert-parallel
 * rank's load factor, which the simulator applies to every rank), the
 * embedding and the output layer. */
typedef struct {
    double layer, layer_none, moe, moe_none, embedding, output;
    double layer_w, moe_w;   /* of a layer's saved tensors, those only the weight gradients need (LAYER_FREE_AFTER_W) */
    double mtp;              /* one multi-token prediction depth's own saved tensors (mtp_saved_bytes) */
    double layer_rc, moe_rc; /* of a layer's saved tensors under the run's mode, those not kept after F: what its
                                recomputation re-creates before its backward */
    double transient;        /* the dispatcher's buffers of one pass of a MoE layer (moe_block_transient_bytes) */
    /* the batch's tensors per micro-batch (dataload_mem_of) held to the end of the backward (B or I) and to the
     * end of the weight gradients (B or W): [0] on the first stage, [1] on the last, [2] on a single stage */
    double data_i[3], data_w[3];
} kept_bytes;

/* Bytes of the tensors of l not kept after F. */
static double by_rc_bytes(const layer_saved_list *l)
{
    double b = 0;
    for (int i = 0; i < l->n; i++)
        if (!l->t[i].kept_after_f)
            b += (double)l->t[i].bytes;
    return b;
}

/* Bytes of the tensors of l that only the weight gradients need. */
static double free_w_bytes(const layer_saved_list *l)
{
    double b = 0;
    for (int i = 0; i < l->n; i++)
        if (l->t[i].free_when == LAYER_FREE_AFTER_W)
            b += (double)l->t[i].bytes;
    return b;
}

/* The output gradients a split backward stashes from I to W for one layer
 * of shape L (layer_wgrad_stash_bytes of its I and W lists; a MoE layer's
 * lists as the plan builds them: the block's ops, then the dense layer's
 * without the MLP, at load factor lf; e NULL for a dense layer). */
static int stash_bytes(const layer_shape *L, const moe_config *e, double lf, double *out, ts_err *err)
{
    layer_ops *o = malloc(4 * sizeof *o); /* I, W, and the dense layer's part of each */
    if (!o)
        return err_set(err, TS_ENOMEM, "search: out of memory");
    int rc = TS_OK;
    for (int k = 0; k < 2 && rc == TS_OK; k++) {
        layer_pass pass = k == 0 ? LAYER_PASS_I : LAYER_PASS_W;
        o[k].n = 0;
        if ((rc = layer_ops_build(L, pass, &o[2 + k], err)))
            break;
        if (!e) {
            o[k] = o[2 + k];
        } else if ((rc = moe_block_ops(L, e, lf, pass, &o[k], err)) == TS_OK) {
            rc = layer_ops_append(&o[k], &o[2 + k], err);
        }
    }
    if (rc == TS_OK)
        *out = (double)layer_wgrad_stash_bytes(L, &o[0], &o[1]);
    free(o);
    return rc;
}

/* The batch's tensors each micro-batch holds (dataload_mem_of with the
 * plan's inputs, add_data_loader): to the end of B or I (*i, what the
 * weight gradients keep included) and to the end of B or W (*w). */
static int data_bytes(const config *c, bool first, bool last, double *i, double *w, ts_err *err)
{
    dataload_in in = {.first = first,
                      .last = last,
                      .mtp = c->moe.mtp_num_layers > 0,
                      .attn_mask = !c->par.no_loader_attn_mask,
                      .b = c->par.micro_batch_size,
                      .s = c->model.seq_length,
                      .tp = c->par.tp,
                      .cp = config_cp(c),
                      .host_gbps = 1};
    dataload_mem m;
    int rc = dataload_mem_of(&in, &m, err);
    if (rc)
        return rc;
    *i = (double)(m.kept_i_bytes + m.kept_w_bytes);
    *w = (double)m.kept_w_bytes;
    return TS_OK;
}

/* The busiest expert-parallel rank's tokens over the mean, as the
 * simulator's routing model sizes every MoE layer's activations with it
 * (plan_moe.h: padded to capacity, the capacity factor; forced balance or
 * no skew, 1; else moe_rank_load_factor of moe_expert_loads_zipf with
 * PLAN_MOE_ROUTING_SEED, times the kept share); at least 1. */
static int moe_load_factor(const layer_shape *L, const moe_config *e, double *lf, ts_err *err)
{
    *lf = 1;
    if (e->pad_to_capacity) {
        *lf = e->capacity_factor;
    } else if (!e->force_load_balancing && e->routing_skew > 0) {
        double *load = calloc((size_t)e->num_experts, sizeof *load);
        if (!load)
            return err_set(err, TS_ENOMEM, "search: loads of %d experts", e->num_experts);
        int64_t T = L->b * L->s / (L->sp && L->t > 1 ? L->t : 1);
        double routed = (double)T * e->topk, drop = 0;
        moe_expert_loads_zipf(e->num_experts, routed, e->routing_skew, PLAN_MOE_ROUTING_SEED, load);
        *lf = moe_rank_load_factor(load, e->num_experts, e->ep, e->capacity_factor, &drop);
        *lf *= 1 - (routed > 0 ? drop / routed : 0);
        free(load);
    }
    if (*lf < 1)
        *lf = 1;
    return TS_OK;
}

/* One MoE layer's kept bytes under shape's recompute mode at load factor
 * lf, (w not NULL) the bytes only its weight gradients need and (rc not
 * NULL) those not kept after F. */
static int kept_moe(const layer_shape *shape, const moe_config *e, double lf, double *out, double *w, double *rcb,
                    ts_err *err)
{
    layer_saved_list saved;
    layer_shape s = *shape;
    s.no_mlp = true;
    int rc = layer_saved_build(&s, &saved, err);
    if (rc)
        return rc;
    moe_block_mem blk;
    moe_block_mem_of(&s, e, lf, &blk);
    *out = (double)layer_saved_kept_bytes(&saved) + (double)blk.kept;
    if (w)
        *w = free_w_bytes(&saved) + (double)blk.free_w;
    if (rcb)
        *rcb = by_rc_bytes(&saved) + (double)blk.by_rc;
    return TS_OK;
}

static int kept(const config *c, const layer_shape *shape, const moe_config *e, kept_bytes *k, ts_err *err)
{
    layer_saved_list saved;
    layer_shape s = *shape;
    int rc;
    if ((rc = layer_saved_build(&s, &saved, err)))
        return rc;
    k->layer = (double)layer_saved_kept_bytes(&saved);
    k->layer_rc = by_rc_bytes(&saved);
    s.recompute = RECOMPUTE_NONE;
    if ((rc = layer_saved_build(&s, &saved, err)))
        return rc;
    k->layer_none = (double)layer_saved_kept_bytes(&saved);
    k->layer_w = free_w_bytes(&saved);
    k->moe = k->moe_none = k->moe_w = k->transient = k->moe_rc = 0;
    /* the output gradients I stashes for W (the lesser of a recomputed and a kept layer's) */
    double st_rc = 0, st_none = 0;
    if ((rc = stash_bytes(shape, NULL, 1, &st_rc, err)) || (rc = stash_bytes(&s, NULL, 1, &st_none, err)))
        return rc;
    k->layer_w += st_rc < st_none ? st_rc : st_none;
    double lf = 1;
    if (e->num_experts > 0 &&
        ((rc = moe_load_factor(shape, e, &lf, err)) || (rc = kept_moe(shape, e, lf, &k->moe, NULL, &k->moe_rc, err)) ||
         (rc = kept_moe(&s, e, lf, &k->moe_none, &k->moe_w, NULL, err))))
        return rc;
    if (e->num_experts > 0) {
        layer_shape mr = *shape, mn = s;
        mr.no_mlp = mn.no_mlp = true;
        if ((rc = stash_bytes(&mr, e, lf, &st_rc, err)) || (rc = stash_bytes(&mn, e, lf, &st_none, err)))
            return rc;
        k->moe_w += st_rc < st_none ? st_rc : st_none;
    }
    for (int j = 0; j < 3; j++)
        if ((rc = data_bytes(c, j != 1, j != 0, &k->data_i[j], &k->data_w[j], err)))
            return rc;
    /* the plan's routing may size a layer below the mean load only under a capacity factor
     * below 1 (plan_moe.c): there the floor of 1 is not a lower bound, so no transient term */
    bool below_mean = e->capacity_factor > 0 && e->capacity_factor < 1 && !e->pad_to_capacity;
    if (e->num_experts > 0 && !below_mean) {
        layer_shape m = *shape;
        m.no_mlp = true;
        k->transient = (double)moe_block_transient_bytes(&m, e, lf);
    }
    if ((rc = layer_embedding_saved(shape, &saved, err)))
        return rc;
    k->embedding = (double)layer_saved_kept_bytes(&saved);
    if ((rc = layer_output_saved(shape, &saved, err)))
        return rc;
    k->output = (double)layer_saved_kept_bytes(&saved);
    k->mtp = e->mtp_num_layers > 0 ? (double)mtp_saved_bytes(shape, NULL, NULL) : 0;
    return TS_OK;
}

/* Virtual stage of chunk ch of rank r (loop placement: ch*p + r; ZB-V's V:
 * stages r and 2p-1-r). */
static int stage_of(const parallel_config *p, int r, int ch)
{
    return p->schedule == SCHED_ZB_V && ch == 1 ? 2 * p->pp - 1 - r : ch * p->pp + r;
}

/* The first layer (model order) and the layers of chunk ch of rank r. */
static void chunk_range(const parallel_config *p, int num_layers, int r, int ch, int *first, int *n)
{
    int v = p->vp > 0 ? p->vp : 1;
    if (p->layout.n_stages == p->pp * v) {
        int st = stage_of(p, r, ch), a = 0;
        for (int j = 0; j < st; j++)
            a += p->layout.layers[j];
        *first = a;
        *n = p->layout.layers[st];
        return;
    }
    /* no layout (v = 1): the first/last split of rank_layers */
    int a = 0;
    for (int j = 0; j < r; j++)
        a += rank_layers(p, num_layers, j);
    *first = a;
    *n = rank_layers(p, num_layers, r);
}

/* What one micro-batch chunk of rank r holds at least (its lightest
 * chunk): *kept, from its forward to its input-gradient backward (each
 * layer's kept bytes by kind, block recomputation keeping only the input of
 * the first k); *w, from its input-gradient backward (I) to its weight
 * gradients (W): every layer's tensors that only W needs, recomputed or
 * kept. Returns the rank's MoE layers. */
static int chunk_bytes_of(const config *c, const kept_bytes *kb, int r, double *kept_out, double *w_out, double *rc_out)
{
    const parallel_config *p = &c->par;
    int v = p->vp > 0 ? p->vp : 1, moe_layers = 0;
    double least = -1, least_w = -1, least_rc = -1;
    for (int ch = 0; ch < v; ch++) {
        int a, n;
        chunk_range(p, c->model.num_layers, r, ch, &a, &n);
        bool block = p->recompute == RECOMPUTE_FULL && p->recompute_method == RECOMPUTE_METHOD_BLOCK &&
                     p->recompute_num_layers > 0 && p->recompute_num_layers < n;
        double bytes = 0, w = 0;
        for (int j = 0; j < n; j++) {
            bool moe = moe_layer_is_moe(&c->moe, a + j), rc = !block || j < p->recompute_num_layers;
            moe_layers += moe;
            bytes += moe ? (rc ? kb->moe : kb->moe_none) : (rc ? kb->layer : kb->layer_none);
            w += moe ? kb->moe_w : kb->layer_w;
        }
        if (least < 0 || bytes < least)
            least = bytes;
        if (least_w < 0 || w < least_w)
            least_w = w;
        /* full recomputation of the chunk's last layer (uniform, or block over every layer) */
        double rcl = 0;
        if (n > 0 && p->recompute == RECOMPUTE_FULL && !block)
            rcl = moe_layer_is_moe(&c->moe, a + n - 1) ? kb->moe_rc : kb->layer_rc;
        if (least_rc < 0 || rcl < least_rc)
            least_rc = rcl;
    }
    *kept_out = least > 0 ? least : 0;
    *w_out = least_w > 0 ? least_w : 0;
    *rc_out = least_rc > 0 ? least_rc : 0;
    return moe_layers;
}

static void bound_rank(const config *c, const kept_bytes *kb, const search_bound_live *live, int r, search_bound *b)
{
    int inflight = live->f;
    const model_config *mo = &c->model;
    const parallel_config *p = &c->par;
    int v = p->vp > 0 ? p->vp : 1;
    int layers = rank_layers(p, mo->num_layers, r);
    /* The last stage (output layer, loss) is on rank p-1, or on rank 0 under
     * ZB-V's V placement (rank r runs stages r and 2p-1-r). */
    bool first = r == 0;
    bool last = p->schedule == SCHED_ZB_V ? r == 0 : r == p->pp - 1;
    double params = (double)flops_params_stage(mo, p->tp, layers, first, last);
    /* MoE layers: their rank's share (the simulator's count: moe_layer_rank_params) instead of a dense
     * layer's; the routed experts' share of it is sharded by the distributed optimizer over edp */
    double expert = 0, moe_chunk = 0, chunk_w = 0, rc_last = 0;
    int n_moe = chunk_bytes_of(c, kb, r, &moe_chunk, &chunk_w, &rc_last);
    /* the dense layers' attention: multi-latent attention's parameters on the rank (the
     * down-projections whole, mla.h) instead of q/k/v's, as the plan counts them */
    double dense_layer = (double)flops_params_stage(mo, p->tp, 1, 0, 0),
           mla_delta = (double)mla_layer_params_delta(mo, &c->moe, p->tp);
    params += (layers - n_moe) * mla_delta;
    moe_rank_params P = {0};
    if (c->moe.num_experts > 0) {
        moe_layer_rank_params(mo, &c->moe, p->tp, p->pp, c->cluster.gpus, &P);
        params += n_moe * ((double)(P.dense + P.expert) - dense_layer);
        expert = n_moe * (double)P.expert;
    }
    /* multi-token prediction's depths on the last stage (mtp.h): each one layer of the
     * decoder's last layer's kind, eh_proj and three norms; with untied embeddings on
     * more than one stage the word embedding's copy for the lookups */
    int D = c->moe.mtp_num_layers;
    bool mtp_moe = D > 0 && c->moe.num_experts > 0 && moe_layer_is_moe(&c->moe, mo->num_layers - 1);
    if (last && D > 0) {
        double layer = mtp_moe ? (double)(P.dense + P.expert) : dense_layer + mla_delta;
        params += D * (layer + (double)mtp_depth_rank_params(mo, p->tp));
        expert += mtp_moe ? D * (double)P.expert : 0;
        if (mo->untie_embeddings && p->pp * v > 1)
            params += (double)mo->padded_vocab_size * mo->hidden_size / p->tp;
    }
    bool fp32 = mo->precision == PREC_FP32;
    /* Gradients: fp32 with bf16 (Megatron-LM accumulates and reduces bf16
     * gradients in fp32), 16-bit only with fp16. */
    double wb = fp32 ? 4.0 : 2.0, ob = fp32 ? 8.0 : 12.0;
    double gb = mo->precision == PREC_FP16 ? 2.0 : 4.0;
    int dcp = p->dp * (p->cp > 1 ? p->cp : 1); /* the optimizer is sharded over d x cp */
    int edp = c->moe.edp > 0 ? c->moe.edp : 1; /* the experts' over edp */
    b->weights_bytes = params * wb;
    b->grads_bytes = params * gb;
    b->optimizer_bytes =
        p->distributed_optimizer ? (params - expert) * ob / (dcp > 1 ? dcp : 1) + expert * ob / edp : params * ob;

    /* Activations: in-flight chunks x the bytes a chunk keeps; with block
     * recomputation k layers of each chunk keep only their input. */
    int chunk_layers = imax(1, layers / v);
    double chunk_bytes = chunk_layers * kb->layer;
    if (p->recompute == RECOMPUTE_FULL && p->recompute_method == RECOMPUTE_METHOD_BLOCK &&
        p->recompute_num_layers > 0 && p->recompute_num_layers < chunk_layers) {
        int k = p->recompute_num_layers;
        chunk_bytes = k * kb->layer + (chunk_layers - k) * kb->layer_none;
    }
    if (c->moe.num_experts > 0)
        chunk_bytes = moe_chunk;
    double act = inflight * chunk_bytes;
    if (first) /* the embedding's stash, per in-flight micro-batch of chunk 0 */
        act += (v == 1 ? inflight : 1) * kb->embedding;
    if (last) /* the output layer's tensors, per in-flight micro-batch of the last chunk */
        act += (v == 1 ? inflight : 1) * kb->output;
    double mtp_mb = D > 0 ? D * (kb->mtp + (mtp_moe ? kb->moe_none : kb->layer_none) + kb->output) : 0;
    if (last && D > 0) /* each MTP depth's own tensors, its layer's (not recomputed) and its output layer's */
        act += (v == 1 ? inflight : 1) * mtp_mb;
    /* the moments the rank certainly reaches, each as activations (a) and the data loader's batch
     * tensors (d), which the memory timeline leaves out of the fragmentation: [0] the f chunks' peak;
     * [1] the backward after it under full recomputation, whose chunk's last layer re-creates its
     * tensors while the f chunks are held (the last rank's backward has freed that micro-batch's output
     * layer and MTP depths by then); [2] zero-bubble schedules: the w chunks between I and W holding what
     * W needs; [3] f + w chunks held either way; [4] a MoE layer's pass with the dispatcher's buffers
     * (the allgather dispatcher's gathered tokens) beside the weights and optimizer state */
    double a[5] = {act, act + rc_last - (last ? kb->output + mtp_mb : 0), live->w * chunk_w,
                   live->fw * (chunk_w < chunk_bytes ? chunk_w : chunk_bytes), n_moe > 0 ? kb->transient : 0};
    double d[5] = {0, 0, 0, 0, 0};
    /* the batch's tensors on a stage that loads data (dataload.h), per micro-batch the rank holds: from F to
     * B or I what the loss and the lookups keep; from I to W the lookups' indices. With chunks (v > 1) one
     * micro-batch of the loading chunk, as the embedding's stash counts it. */
    if (first || last) {
        int j = p->pp * v == 1 ? 2 : first && last ? -1 : first ? 0 : 1;
        double di = j >= 0 ? kb->data_i[j] : kb->data_i[0] < kb->data_i[1] ? kb->data_i[0] : kb->data_i[1];
        double dw = j >= 0 ? kb->data_w[j] : kb->data_w[0] < kb->data_w[1] ? kb->data_w[0] : kb->data_w[1];
        d[0] = d[1] = (v == 1 ? inflight : 1) * di;
        if (v == 1) {
            d[2] = live->w * dw;
            d[3] = live->fw * dw;
        }
    }
    const memory_overheads *o = &c->cluster.overheads;
    overheads_layout ol = config_overheads_layout(c);
    int best = 0;
    double frag = 0, most = -1;
    for (int k = 0; k < 5; k++) {
        double fk = (double)overheads_fragmentation_bytes(o, (int64_t)a[k]);
        if (a[k] + d[k] + fk > most) {
            most = a[k] + d[k] + fk;
            best = k;
            frag = fk;
        }
    }
    act = a[best] + d[best];
    b->activations_bytes = act;
    /* What PyTorch, cuBLAS and NCCL hold besides tensors, as the simulator
     * adds it (overheads.h); the fragmentation on the activations floor only
     * (no pipeline buffers, no batch tensors), floored as the memory timeline
     * floors it. */
    b->overheads_bytes = (double)(overheads_cuda_context_bytes(o) + overheads_nccl_bytes(o, overheads_comms(&ol, r)) +
                                  overheads_cublas_bytes(o)) +
                         frag;
    b->total_bytes = b->weights_bytes + b->grads_bytes + b->optimizer_bytes + b->activations_bytes + b->overheads_bytes;
    b->rank = r;
}

int search_bound_compute(const config *c, const search_bound_live *live, search_bound *out, ts_err *err)
{
    layer_shape shape;
    kept_bytes kb;
    int rc = layer_shape_from_config(c, &shape, err);
    if (rc == TS_OK)
        rc = kept(c, &shape, &c->moe, &kb, err);
    if (rc)
        return rc;
    int m = config_num_microbatches(c);
    for (int r = 0; r < c->par.pp; r++) {
        search_bound b;
        search_bound_live l = {0, 0, 0};
        if (live) {
            l = live[r];
        } else {
            l.f = l.fw = search_bound_inflight(&c->par, m, r);
        }
        bound_rank(c, &kb, &l, r, &b);
        if (r == 0 || b.total_bytes > out->total_bytes)
            *out = b;
    }
    return TS_OK;
}
