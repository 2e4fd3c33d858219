/* search_bound — lower bound on a layout's peak memory (see search_bound.h). */
#include "sim/search/search_bound.h"

#include <stdlib.h>

#include "sim/config/overheads.h"
#include "sim/model/flops.h"
#include "sim/model/layer.h"

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

void search_bound_inflight_sched(const sched *s, int *out)
{
    for (int r = 0; r < s->p; r++) {
        int live = 0, peak = 0;
        for (size_t i = 0; i < s->n_actions[r]; i++) {
            int k = s->actions[r][i].kind;
            if (k == ACT_F)
                live++;
            else if (k == ACT_B || k == ACT_I)
                live--;
            peak = imax(peak, live);
        }
        out[r] = imax(1, peak);
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
 * recomputation (block method), the embedding and the output layer. */
typedef struct {
    double layer, layer_none, embedding, output;
} kept_bytes;

static int kept(const layer_shape *shape, kept_bytes *k, ts_err *err)
{
    layer_saved_list saved;
    layer_shape s = *shape;
    int rc;
    if ((rc = layer_saved_build(&s, &saved, err)))
        return rc;
    k->layer = (double)layer_saved_kept_bytes(&saved);
    s.recompute = RECOMPUTE_NONE;
    if ((rc = layer_saved_build(&s, &saved, err)))
        return rc;
    k->layer_none = (double)layer_saved_kept_bytes(&saved);
    if ((rc = layer_embedding_saved(shape, &saved, err)))
        return rc;
    k->embedding = (double)layer_saved_kept_bytes(&saved);
    if ((rc = layer_output_saved(shape, &saved, err)))
        return rc;
    k->output = (double)layer_saved_kept_bytes(&saved);
    return TS_OK;
}

static void bound_rank(const config *c, const kept_bytes *kb, int inflight, int r, search_bound *b)
{
    const model_config *mo = &c->model;
    const parallel_config *p = &c->par;
    int v = p->vp > 0 ? p->vp : 1;
    int layers = rank_layers(p, mo->num_layers, r);
    /* The last stage (output layer, loss) is on rank p-1, or on rank 0 under
     * ZB-V's V placement (rank r runs stages r and 2p-1-r). */
    bool first = r == 0;
    bool last = p->schedule == SCHED_ZB_V ? r == 0 : r == p->pp - 1;
    double params = (double)flops_params_stage(mo, p->tp, layers, first, last);
    bool fp32 = mo->precision == PREC_FP32;
    /* Gradients: fp32 with bf16 (Megatron-LM accumulates and reduces bf16
     * gradients in fp32), 16-bit only with fp16. */
    double wb = fp32 ? 4.0 : 2.0, ob = fp32 ? 8.0 : 12.0;
    double gb = mo->precision == PREC_FP16 ? 2.0 : 4.0;
    int dcp = p->dp * (p->cp > 1 ? p->cp : 1); /* the optimizer is sharded over d x cp */
    if (p->distributed_optimizer && dcp > 1)
        ob /= dcp;
    b->weights_bytes = params * wb;
    b->grads_bytes = params * gb;
    b->optimizer_bytes = params * ob;

    /* Activations: in-flight chunks x the bytes a chunk keeps; with block
     * recomputation k layers of each chunk keep only their input. */
    int chunk_layers = imax(1, layers / v);
    double chunk_bytes = chunk_layers * kb->layer;
    if (p->recompute == RECOMPUTE_FULL && p->recompute_method == RECOMPUTE_METHOD_BLOCK &&
        p->recompute_num_layers > 0 && p->recompute_num_layers < chunk_layers) {
        int k = p->recompute_num_layers;
        chunk_bytes = k * kb->layer + (chunk_layers - k) * kb->layer_none;
    }
    double act = inflight * chunk_bytes;
    if (first) /* the embedding's stash, per in-flight micro-batch of chunk 0 */
        act += (v == 1 ? inflight : 1) * kb->embedding;
    if (last) /* the output layer's tensors of the micro-batch being turned around */
        act += kb->output;
    b->activations_bytes = act;
    /* What PyTorch, cuBLAS and NCCL hold besides tensors, as the simulator
     * adds it (overheads.h); the fragmentation on the activations floor only
     * (no pipeline buffers), floored as the memory timeline floors it. */
    const memory_overheads *o = &c->cluster.overheads;
    b->overheads_bytes =
        (double)(overheads_cuda_context_bytes(o) +
                 overheads_nccl_bytes(o, overheads_comms(p->tp, p->pp, p->dp, p->schedule, !mo->untie_embeddings, r)) +
                 overheads_cublas_bytes(o) + overheads_fragmentation_bytes(o, (int64_t)act));
    b->total_bytes = b->weights_bytes + b->grads_bytes + b->optimizer_bytes + b->activations_bytes + b->overheads_bytes;
    b->rank = r;
}

int search_bound_compute(const config *c, const int *inflight, search_bound *out, ts_err *err)
{
    layer_shape shape;
    kept_bytes kb;
    int rc = layer_shape_from_config(c, &shape, err);
    if (rc == TS_OK)
        rc = kept(&shape, &kb, err);
    if (rc)
        return rc;
    int m = config_num_microbatches(c);
    for (int r = 0; r < c->par.pp; r++) {
        search_bound b;
        int n = inflight ? inflight[r] : search_bound_inflight(&c->par, m, r);
        bound_rank(c, &kb, n, r, &b);
        if (r == 0 || b.total_bytes > out->total_bytes)
            *out = b;
    }
    return TS_OK;
}
