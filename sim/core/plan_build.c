/* plan_build — the plan of a configuration from the layer ops (see plan.h):
 * the passes of each stage; plan_rank.c adds each rank's optimizer step and
 * static memory, plan_env.c the shared inputs and reduction costs. */
#include "sim/core/plan_build.h"

#include <stdlib.h>
#include <string.h>

#include "sim/core/ep_pair.h"
#include "sim/core/ep_pair_steps.h"
#include "sim/core/overlap.h"
#include "sim/core/plan_collapse.h"
#include "sim/core/plan_env.h"
#include "sim/core/plan_moe.h"
#include "sim/core/plan_rank.h"
#include "sim/model/cp.h"
#include "sim/model/dataload.h"
#include "sim/model/flops.h"
#include "sim/model/fp8.h"
#include "sim/model/layer.h"
#include "sim/model/mla.h"
#include "sim/model/moe.h"
#include "sim/model/mtp.h"
#include "sim/util/grow.h"

/* Megatron-LM's default gradient bucket with --overlap-grad-reduce:
 * max(40M, 1M * dp) parameters (megatron/core/distributed/
 * distributed_data_parallel.py, bucket_size default). */
#define PLAN_BUCKET_MIN_PARAMS    40000000LL
#define PLAN_BUCKET_PARAMS_PER_DP 1000000LL

/* ---------------------------------------------------------------- plan_build */

/* Builds one pass of one stage: op lists appended in program order. */
typedef struct {
    plan *pl;
    const cost_model *cm;
    const commcost_params *cc;
    commcost_group tp_group;
    uint32_t base;     /* first step of the pass */
    int32_t open;      /* open compute step (relative), -1 if none */
    int32_t prev_last; /* step of the previous list's last op (relative) */
    bool seen[PLAN_STREAMS];
    int stage;
    bool tpo;           /* --tp-comm-overlap: userbuffers closed forms (overlap.h) */
    bool ub;            /* the list being added is a transformer layer's (tpo applies) */
    int sms;            /* the GPU's SMs (overlap_gpu_sms; 0 unknown) */
    int gpn;            /* GPUs per node (context-parallel groups' placement) */
    int64_t a2a_ns;     /* MoE: one all-to-all over the expert-parallel group (plan_moe.h) */
    int64_t a2a_lat_ns; /* MoE: its latency, for the flow modes */
    int64_t a2a_mx_ns;  /* MoE: one carrying MXFP8 rows (layer_op.fp8; plan_moe.h) */
    int64_t data_ns[2]; /* the data loader's step on the first / last stage (plan.data) */
    /* its batch's memory, likewise (plan.data_mem) */
    dataload_mem data_mem[2];
} pass_builder;

static void pb_start(pass_builder *b, int stage)
{
    b->base = b->pl->n_steps;
    b->open = b->prev_last = -1;
    memset(b->seen, 0, sizeof b->seen);
    b->stage = stage;
}

static plan_step *pb_step(pass_builder *b, int32_t rel)
{
    return &b->pl->steps[b->base + (uint32_t)rel];
}

static int32_t pb_new(pass_builder *b, plan_step *x)
{
    uint32_t id;
    x->root = !b->seen[x->stream];
    b->seen[x->stream] = true;
    if (plan_push_step(b->pl, x, &id))
        return -1;
    return (int32_t)(id - b->base);
}

/* --tp-comm-overlap: does op i of ops (a collective) run pipelined with a
 * neighbouring GEMM (overlap.h)? Returns the GEMM's index or -1. An
 * all-gather pairs with the next op when that GEMM waits for it (and is not
 * a bulk overlap); a reduce-scatter in a forward list (F or R) with the GEMM
 * it waits for, when no later op runs beside it (bulk). */
static int ub_partner(const pass_builder *b, const layer_ops *ops, int i, int cat)
{
    const layer_op *op = &ops->op[i];
    if (!b->tpo || !b->ub || op->kind != LAYER_OP_COMM || op->a2a) /* userbuffers: TP collectives only */
        return -1;
    if (op->coll == COMM_ALL_GATHER && i + 1 < ops->n) {
        const layer_op *g = &ops->op[i + 1];
        if (g->kind == LAYER_OP_GEMM && g->overlap != i && (g->dep[0] == i || g->dep[1] == i))
            return i + 1;
    }
    if (op->coll == COMM_REDUCE_SCATTER && (cat == PLAN_CAT_FWD || cat == PLAN_CAT_RECOMP) && i > 0 &&
        op->dep[0] == i - 1 && ops->op[i - 1].kind == LAYER_OP_GEMM) {
        for (int j = i + 1; j < ops->n; j++)
            if (ops->op[j].overlap == i)
                return -1;
        return i - 1;
    }
    return -1;
}

/* Append the ops of one list. cat: category of its compute ops. alloc_bytes
 * are allocated when its first op starts, free_bytes freed when its last
 * op ends: compute ops merge into the open compute step except at those
 * two points, so each step's allocation is at its start and its free at
 * its end. Returns TS_OK or TS_ENOMEM. */
static int pb_add(pass_builder *b, const layer_ops *ops, int cat, int64_t alloc_bytes, int64_t free_bytes)
{
    int32_t map[LAYER_MAX_OPS];
    int64_t comm_ns[LAYER_MAX_OPS];
    int64_t gemm_ns[LAYER_MAX_OPS];
    int a2a_of = -1;      /* --moe-shared-expert-overlap: the all-to-all the shared experts run beside */
    int64_t a2a_left = 0; /* what remains of it (overlap_beside_chain_ns) */
    for (int i = 0; i < ops->n; i++) {
        const layer_op *op = &ops->op[i];
        int32_t ds[2] = {-1, -1};
        int nd = 0;
        for (int k = 0; k < 2; k++) {
            int d = op->dep[k];
            int32_t s = d >= 0 && d < i ? map[d] : (k == 0 && i == 0 ? b->prev_last : -1);
            if (s >= 0 && (nd == 0 || ds[0] != s))
                ds[nd++] = s;
        }
        if (op->kind != LAYER_OP_COMM) {
            int64_t dur = cost_op_ns(b->cm, op);
            if (op->overlap >= 0 && op->overlap < i && ops->op[op->overlap].a2a) { /* beside the MoE all-to-all */
                if (a2a_of != op->overlap)
                    a2a_left = comm_ns[a2a_of = op->overlap];
                dur = overlap_beside_chain_ns(dur, &a2a_left, b->sms, EP_PAIR_COMM_SMS);
            } else if (op->overlap >= 0 && op->overlap < i) /* shares the GPU with a running collective */
                dur = cost_overlap_ns(b->cm, dur, comm_ns[op->overlap]);
            if (i + 1 < ops->n && ub_partner(b, ops, i + 1, cat) == i &&
                ops->op[i + 1].coll == COMM_REDUCE_SCATTER) /* pipeline method: 16 SMs communicate */
                dur = overlap_sm_slowed_ns(dur, b->sms, OVERLAP_PIPELINE_SMS);
            comm_ns[i] = 0;
            gemm_ns[i] = dur;
            int32_t ext[2] = {-1, -1};
            int ne = 0;
            for (int k = 0; k < nd; k++)
                if (pb_step(b, ds[k])->stream != PLAN_STREAM_COMPUTE)
                    ext[ne++] = ds[k];
            /* a list that allocates starts a step of its own: its memory
             * changes at its first op's start, not at the start of a step
             * the previous list's ops began (which would count it before
             * their free) */
            bool merge = b->open >= 0 && pb_step(b, b->open)->cat == cat && !(i == 0 && alloc_bytes);
            for (int k = 0; k < ne && merge; k++) {
                const plan_step *o = pb_step(b, b->open);
                merge = o->dep[0] == ext[k] || o->dep[1] == ext[k];
            }
            if (merge) {
                plan_step *o = pb_step(b, b->open);
                o->dur_ns += dur;
                o->flops += op->flops;
                map[i] = b->open;
            } else {
                plan_step x = plan_step_init(op->name, PLAN_STREAM_COMPUTE, cat, b->stage, dur);
                x.flops = op->flops;
                x.dep[0] = ext[0];
                x.dep[1] = ext[1];
                int32_t id = pb_new(b, &x);
                if (id < 0)
                    return TS_ENOMEM;
                b->open = map[i] = id;
            }
        } else {
            commcost_group g = b->tp_group;
            g.ranks = op->group;
            if (g.ranks_per_node > g.ranks || g.ranks % g.ranks_per_node)
                g.ranks_per_node = 1;
            if (op->stride > 0) { /* a context-parallel group: span ranks, stride apart */
                int k = commcost_group_strided(op->span, op->stride, b->gpn > 0 ? b->gpn : 8).ranks_per_node;
                if (op->coll == COMM_P2P) /* a ring step: on NVLink only if the whole ring is in a node */
                    g = (commcost_group){2, k == op->span ? 2 : 1};
                else
                    g = (commcost_group){op->group, k};
            }
            plan_step x = plan_step_init(op->name, PLAN_STREAM_TP, PLAN_CAT_TP, b->stage,
                                         commcost_ns(b->cc, op->coll, op->bytes, &g));
            if (op->a2a) { /* the MoE dispatcher's traffic (moe_disp.h): its all-to-all timed by the plan */
                x.cat = PLAN_CAT_EP;
                if (op->coll == COMM_P2P)
                    x.dur_ns = op->fp8 ? b->a2a_mx_ns : b->a2a_ns;
            }
            x.comm_bytes = op->bytes;
            x.comm_coll = (uint8_t)op->coll;
            x.comm_cp = op->stride > 0 && !op->a2a && op->coll != COMM_ALL_REDUCE; /* CP never all-reduces */
            x.comm_ranks = op->stride > 0 && !op->a2a && op->coll == COMM_ALL_REDUCE ? op->span : 0;
            commcost_flow_terms(b->cc, op->coll, op->bytes, &g, &x.comm_bw_factor, &x.comm_lat_ns);
            if (op->a2a && op->coll == COMM_P2P) /* the all-to-all's; the dispatcher's gathers keep NCCL's */
                x.comm_lat_ns = b->a2a_lat_ns;
            else if (x.comm_cp && (op->coll == COMM_P2P || op->coll == COMM_ALL_TO_ALL))
                x.comm_lat_ns = commcost_ns(b->cc, op->coll, 1, &g); /* a CP ring step's or all-to-all's alphas */
            gemm_ns[i] = 0;
            int gp = ub_partner(b, ops, i, cat);
            if (gp > i) /* ring exchange: t chunks by the copy engines, the GEMM keeps its SMs */
                x.dur_ns = overlap_chunked_exposed_ns(x.dur_ns, cost_op_ns(b->cm, &ops->op[gp]), op->group);
            else if (gp >= 0) /* pipeline: 4 chunks behind the GEMM (already slowed) */
                x.dur_ns = overlap_chunked_exposed_ns(x.dur_ns, gemm_ns[gp], OVERLAP_PIPELINE_SPLITS);
            comm_ns[i] = x.dur_ns;
            int nx = 0;
            for (int k = 0; k < nd; k++) {
                if (ds[k] == b->open)
                    b->open = -1; /* the collective waits for the open step's end */
                if (pb_step(b, ds[k])->stream != PLAN_STREAM_TP)
                    x.dep[nx++] = ds[k];
            }
            int32_t id = pb_new(b, &x);
            if (id < 0)
                return TS_ENOMEM;
            map[i] = id;
        }
    }
    if (ops->n > 0) {
        pb_step(b, map[0])->alloc_bytes += alloc_bytes;
        pb_step(b, map[ops->n - 1])->free_bytes += free_bytes;
        b->prev_last = map[ops->n - 1];
        if (free_bytes && b->open == map[ops->n - 1])
            b->open = -1;           /* freed at the last op's end: later ops run in steps after it */
    } else if (b->prev_last >= 0) { /* no op (an embedding's I without dropout): the change at the previous end */
        pb_step(b, b->prev_last)->free_bytes += free_bytes - alloc_bytes;
    }
    return TS_OK;
}

/* pb_add for a transformer layer's list: the one --tp-comm-overlap applies
 * to (Transformer Engine layers; the embedding and output layer are not). */
static int pb_add_layer(pass_builder *b, const layer_ops *ops, int cat, int64_t alloc_bytes, int64_t free_bytes)
{
    b->ub = true;
    int rc = pb_add(b, ops, cat, alloc_bytes, free_bytes);
    b->ub = false;
    return rc;
}

/* The pass's last step closes gradient bucket k: end the open compute step
 * there, so later compute does not delay the bucket's reduction. */
static void pb_close_bucket(pass_builder *b, int k)
{
    if (b->prev_last >= 0)
        pb_step(b, b->prev_last)->dp_bucket = (int16_t)k;
    b->open = -1;
}

typedef struct {
    const config *c;
    layer_shape rc, none;     /* recompute as configured; no recompute */
    layer_ops f, r, b, i, w;  /* layer ops per pass (rc shape) */
    layer_ops nb, ni, nw;     /* no-recompute B, I, W (layers not recomputed) */
    layer_ops ef, eb, ei, ew; /* embedding */
    layer_ops of, ob, oi, ow; /* output layer */
    plan_layer_mem m_rc, m_none, m_emb, m_out;
    plan_moe_layers moe;  /* the MoE layers' ops, memory and parameters, per load factor (n_kinds > 0: the
                             model has some); owned */
    int64_t params_layer; /* per TP rank */
    int64_t bucket_params;
    int64_t cp_tf, cp_tb; /* context parallelism's transient buffers of a layer's forward / backward (cp.h) */
    int mtp;              /* --mtp-num-layers depths on the last stage (mtp.h), 0 = none */
    layer_ops mtp_f, mtp_b, mtp_i, mtp_w; /* one depth's ops besides its layer and output layer */
    plan_layer_mem m_mtp;
    int64_t mtp_params; /* one depth's parameters besides its layer's, per TP rank */
} model_ops;

/* --no-async-tensor-model-parallel-allreduce: a weight-gradient GEMM that
 * layer.h overlaps with the input-gradient all-reduce waits for it instead
 * (the all-reduce runs alone, the GEMM is not slowed by it). */
static void sync_tp_allreduce(layer_ops *o)
{
    for (int i = 0; i < o->n; i++) {
        layer_op *op = &o->op[i];
        int c = op->overlap;
        if (op->kind == LAYER_OP_GEMM && c >= 0 && c < i && o->op[c].kind == LAYER_OP_COMM &&
            o->op[c].coll == COMM_ALL_REDUCE) {
            op->dep[1] = c;
            op->overlap = -1;
        }
    }
}

static int model_ops_build(const config *c, int gpn, const commcost_params *cc, model_ops *mo, ts_err *err)
{
    int rc;
    memset(mo, 0, sizeof *mo);
    mo->c = c;
    if ((rc = layer_shape_from_config(c, &mo->rc, err)))
        return rc;
    mo->none = mo->rc;
    mo->none.recompute = RECOMPUTE_NONE;
    layer_saved_list sl;
    if ((rc = layer_ops_build(&mo->rc, LAYER_PASS_F, &mo->f, err)) ||
        (rc = layer_ops_build(&mo->rc, LAYER_PASS_R, &mo->r, err)) ||
        (rc = layer_ops_build(&mo->rc, LAYER_PASS_B, &mo->b, err)) ||
        (rc = layer_ops_build(&mo->rc, LAYER_PASS_I, &mo->i, err)) ||
        (rc = layer_ops_build(&mo->rc, LAYER_PASS_W, &mo->w, err)) ||
        (rc = layer_ops_build(&mo->none, LAYER_PASS_B, &mo->nb, err)) ||
        (rc = layer_ops_build(&mo->none, LAYER_PASS_I, &mo->ni, err)) ||
        (rc = layer_ops_build(&mo->none, LAYER_PASS_W, &mo->nw, err)) ||
        (rc = layer_embedding_ops(&mo->rc, LAYER_PASS_F, &mo->ef, err)) ||
        (rc = layer_embedding_ops(&mo->rc, LAYER_PASS_B, &mo->eb, err)) ||
        (rc = layer_embedding_ops(&mo->rc, LAYER_PASS_I, &mo->ei, err)) ||
        (rc = layer_embedding_ops(&mo->rc, LAYER_PASS_W, &mo->ew, err)) ||
        (rc = layer_output_ops(&mo->rc, LAYER_PASS_F, &mo->of, err)) ||
        (rc = layer_output_ops(&mo->rc, LAYER_PASS_B, &mo->ob, err)) ||
        (rc = layer_output_ops(&mo->rc, LAYER_PASS_I, &mo->oi, err)) ||
        (rc = layer_output_ops(&mo->rc, LAYER_PASS_W, &mo->ow, err)))
        return rc;
    if (c->par.sync_tp_allreduce) {
        sync_tp_allreduce(&mo->b);
        sync_tp_allreduce(&mo->nb);
        sync_tp_allreduce(&mo->eb);
        sync_tp_allreduce(&mo->ob);
    }
    if ((rc = layer_saved_build(&mo->rc, &sl, err)) || (plan_layer_mem_of(&sl, &mo->m_rc), 0) ||
        (rc = layer_saved_build(&mo->none, &sl, err)) || (plan_layer_mem_of(&sl, &mo->m_none), 0) ||
        (rc = layer_embedding_saved(&mo->rc, &sl, err)) || (plan_layer_mem_of(&sl, &mo->m_emb), 0) ||
        (rc = layer_output_saved(&mo->rc, &sl, err)) || (plan_layer_mem_of(&sl, &mo->m_out), 0))
        return rc;
    mo->m_rc.stash = layer_wgrad_stash_bytes(&mo->rc, &mo->i, &mo->w);
    mo->m_none.stash = layer_wgrad_stash_bytes(&mo->none, &mo->ni, &mo->nw);
    mo->m_emb.stash = layer_wgrad_stash_bytes(&mo->rc, &mo->ei, &mo->ew);
    mo->m_out.stash = layer_wgrad_stash_bytes(&mo->rc, &mo->oi, &mo->ow);
    if ((rc = plan_moe_layers_build(c, &mo->rc, gpn, cc, &mo->moe, err)))
        return rc;
    if ((mo->mtp = c->moe.mtp_num_layers) > 0) {
        if ((rc = mtp_ops(&mo->rc, LAYER_PASS_F, &mo->mtp_f, err)) ||
            (rc = mtp_ops(&mo->rc, LAYER_PASS_B, &mo->mtp_b, err)) ||
            (rc = mtp_ops(&mo->rc, LAYER_PASS_I, &mo->mtp_i, err)) ||
            (rc = mtp_ops(&mo->rc, LAYER_PASS_W, &mo->mtp_w, err)))
            return rc;
        if (c->par.sync_tp_allreduce)
            sync_tp_allreduce(&mo->mtp_b);
        mo->m_mtp.kept = mtp_saved_bytes(&mo->rc, &mo->m_mtp.free_i, &mo->m_mtp.free_w);
        mo->m_mtp.stash = layer_wgrad_stash_bytes(&mo->rc, &mo->mtp_i, &mo->mtp_w);
        mo->mtp_params = mtp_depth_rank_params(&c->model, c->par.tp);
    }
    mo->cp_tf = cp_transient_bytes(&mo->rc, false);
    mo->cp_tb = cp_transient_bytes(&mo->rc, true);
    mo->params_layer =
        flops_params_stage(&c->model, c->par.tp, 1, 0, 0) + mla_layer_params_delta(&c->model, &c->moe, c->par.tp);
    mo->bucket_params = PLAN_BUCKET_MIN_PARAMS;
    if (PLAN_BUCKET_PARAMS_PER_DP * c->par.dp > mo->bucket_params)
        mo->bucket_params = PLAN_BUCKET_PARAMS_PER_DP * c->par.dp;
    if (c->par.ddp_bucket_params > 0) /* --ddp-bucket-size */
        mo->bucket_params = c->par.ddp_bucket_params;
    if (c->par.torch_fsdp2 || c->par.megatron_fsdp) /* FSDP: one unit (bucket) per transformer layer */
        mo->bucket_params = mo->params_layer;
    return TS_OK;
}

/* Which layers of a stage are recomputed, and in which groups (full). */
typedef struct {
    int n;     /* layers in the stage */
    int group; /* layers per recompute group (full uniform); 1 otherwise */
    int n_rc;  /* the first n_rc layers are recomputed (block); n otherwise */
    int first; /* the stage's first layer in the model (0-based): which layers are MoE */
} rc_layout;

static rc_layout layout_of(const config *c, int n, int first)
{
    rc_layout L = {n, 1, 0, first};
    const parallel_config *P = &c->par;
    if (P->recompute == RECOMPUTE_SELECTIVE) {
        L.n_rc = n;
    } else if (P->recompute == RECOMPUTE_FULL) {
        int k = P->recompute_num_layers;
        if (P->recompute_method == RECOMPUTE_METHOD_BLOCK) {
            L.n_rc = (k <= 0 || k > n) ? n : k;
        } else {
            L.n_rc = n;
            L.group = (k <= 0) ? 1 : (k > n ? n : k);
        }
    }
    return L;
}

/* The op lists and memory of layer l of the stage: the MoE layer's or the
 * dense layer's. */
typedef struct {
    const layer_ops *f, *r, *b, *i, *w, *nb, *ni, *nw;
    const plan_layer_mem *m_rc, *m_none;
    int64_t params, expert_params;
    int64_t transient;    /* MoE: the dispatcher's buffers of one pass (plan_moe.h) */
    int64_t rc_transient; /* of them, the recompute pass's (0 where it does not re-run the dispatcher) */
} layer_kind;

static layer_kind kind_of(const model_ops *mo, const rc_layout *L, int l)
{
    const plan_moe *e = plan_moe_layers_of(&mo->moe, L->first + l);
    if (e)
        return (layer_kind){&e->f,
                            &e->r,
                            &e->b,
                            &e->i,
                            &e->w,
                            &e->nb,
                            &e->ni,
                            &e->nw,
                            &e->m_rc,
                            &e->m_none,
                            e->params_dense + e->params_expert,
                            e->params_expert,
                            e->transient,
                            e->rc_transient};
    return (layer_kind){&mo->f,  &mo->r,    &mo->b,      &mo->i,           &mo->w, &mo->nb, &mo->ni,
                        &mo->nw, &mo->m_rc, &mo->m_none, mo->params_layer, 0,      0,       0};
}

/* The kind of an MTP depth's layer: the decoder's last layer's (mtp.h). */
static layer_kind mtp_kind(const model_ops *mo)
{
    rc_layout last = {1, 1, 0, mo->c->model.num_layers - 1};
    return kind_of(mo, &last, 0);
}

/* The word embedding's copy an MTP stage holds for its lookups: untied
 * embeddings, the last stage not the first (mtp.h). */
static int64_t mtp_embedding_params(const model_ops *mo, bool first)
{
    const model_config *m = &mo->c->model;
    if (!mo->mtp || first || !m->untie_embeddings)
        return 0;
    return (int64_t)m->padded_vocab_size * m->hidden_size / (mo->c->par.tp > 0 ? mo->c->par.tp : 1);
}

/* FP8 delayed scaling: the amax all-reduce that ends a chunk's forward or
 * backward (fp8.h), over the t x cp x d ranks (contiguous in Megatron's rank
 * order); a TP-stream step the compute waits for (counted as TP time). */
static int pb_add_amax(pass_builder *b, const model_ops *mo, int n_layers, bool bwd, int cat)
{
    const config *c = mo->c;
    int64_t bytes = fp8_amax_reduce_bytes(&c->model, n_layers, bwd);
    int n = c->par.tp * config_cp(c) * (c->par.dp > 0 ? c->par.dp : 1);
    if (bytes == 0 || n < 2)
        return TS_OK;
    layer_ops o;
    o.n = 0;
    int i = layer_ops_push(&o, bwd ? "fp8.amax.ar.bwd" : "fp8.amax.ar", LAYER_OP_COMM);
    o.op[i].coll = COMM_ALL_REDUCE;
    o.op[i].bytes = bytes;
    o.op[i].group = o.op[i].span = n;
    o.op[i].stride = 1;
    return pb_add(b, &o, cat, 0, 0);
}

/* Free bytes of the data loader's batch (dataload_mem) when the pass's
 * last op ends: called once a pass's ops are all added. */
static void pb_free_batch(pass_builder *b, int64_t bytes)
{
    if (bytes && b->prev_last >= 0)
        pb_step(b, b->prev_last)->batch_free_bytes += bytes;
}

/* Backward-like pass over a stage: kind = PLAN_PASS_B, _I or _W. With
 * bucket_params (B and W), the parameters of each gradient bucket closed in
 * it are stored there and their count in *n_buckets. */
static int build_bwd(pass_builder *b, const model_ops *mo, const rc_layout *L, bool first, bool last, int kind,
                     int64_t extra_params, int64_t *bucket_params, int64_t *bucket_expert, int *n_buckets)
{
    int rc = TS_OK;
    int64_t acc = extra_params; /* embedding / output weights: their grads come first or last */
    int64_t acc_e = 0;          /* of acc, the routed experts' */
    int nb = 0;
    bool buckets = kind != PLAN_PASS_I && bucket_params;
    const layer_ops *o_out = kind == PLAN_PASS_B ? &mo->ob : kind == PLAN_PASS_I ? &mo->oi : &mo->ow;
    const layer_ops *o_emb = kind == PLAN_PASS_B ? &mo->eb : kind == PLAN_PASS_I ? &mo->ei : &mo->ew;
    /* frees by pass: B frees everything, I the I-part, W the W-part and the
     * output gradients I stashed for it (STASH_OF: allocated by I) */
#define STASH_OF(m) (kind == PLAN_PASS_I ? (m).stash : 0)
#define FREE_OF(m)                                                                                                     \
    (kind == PLAN_PASS_B ? (m).free_i + (m).free_w : kind == PLAN_PASS_I ? (m).free_i : (m).free_w + (m).stash)
    if (last)
        rc = pb_add(b, o_out, PLAN_CAT_BWD, STASH_OF(mo->m_out), FREE_OF(mo->m_out));
    if (last && mo->mtp) { /* the MTP depths, last first: output layer, layer (not recomputed), own ops */
        layer_kind K = mtp_kind(mo);
        const layer_ops *o_lay = kind == PLAN_PASS_B ? K.nb : kind == PLAN_PASS_I ? K.ni : K.nw;
        const layer_ops *o_mtp = kind == PLAN_PASS_B ? &mo->mtp_b : kind == PLAN_PASS_I ? &mo->mtp_i : &mo->mtp_w;
        int64_t tb = kind == PLAN_PASS_W ? 0 : mo->cp_tb;
        acc += mtp_embedding_params(mo, first);
        for (int k = 0; k < mo->mtp && rc == TS_OK; k++) {
            if ((rc = pb_add(b, o_out, PLAN_CAT_BWD, STASH_OF(mo->m_out), FREE_OF(mo->m_out))) ||
                (rc = pb_add_layer(b, o_lay, PLAN_CAT_BWD, tb + STASH_OF(*K.m_none), FREE_OF(*K.m_none) + tb)) ||
                (rc = pb_add(b, o_mtp, PLAN_CAT_BWD, STASH_OF(mo->m_mtp), FREE_OF(mo->m_mtp))))
                break;
            acc += K.params + mo->mtp_params;
            acc_e += K.expert_params;
        }
    }
    for (int hi = L->n; hi > 0 && rc == TS_OK;) {
        bool recomputed = hi <= L->n_rc;
        /* recompute groups are aligned from the stage's first layer (as F keeps them) */
        int lo = recomputed ? ((hi - 1) / L->group) * L->group : hi - 1;
        if (recomputed && kind != PLAN_PASS_W)
            for (int l = lo; l < hi && rc == TS_OK; l++) { /* a group's other inputs are re-created too */
                layer_kind K = kind_of(mo, L, l);
                int64_t disp = K.rc_transient; /* where the dispatcher re-runs */
                int64_t cp = K.r->n ? mo->cp_tf + disp : 0;
                rc = pb_add_layer(b, K.r, PLAN_CAT_RECOMP, K.m_rc->by_rc + (l % L->group ? K.m_rc->kept : 0) + cp, cp);
            }
        for (int l = hi - 1; l >= lo && rc == TS_OK; l--) {
            layer_kind K = kind_of(mo, L, l);
            const layer_ops *ops;
            const plan_layer_mem *m = recomputed ? K.m_rc : K.m_none;
            if (kind == PLAN_PASS_B)
                ops = recomputed ? K.b : K.nb;
            else if (kind == PLAN_PASS_I)
                ops = recomputed ? K.i : K.ni;
            else
                ops = recomputed ? K.w : K.nw;
            int64_t tb = kind == PLAN_PASS_W ? 0 : mo->cp_tb + K.transient; /* the exchanges run in B and I */
            rc = pb_add_layer(b, ops, PLAN_CAT_BWD, tb + STASH_OF(*m), FREE_OF(*m) + tb);
            acc += K.params;
            acc_e += K.expert_params;
            if (buckets && acc >= mo->bucket_params) {
                bucket_params[nb] = acc;
                bucket_expert[nb] = acc_e;
                pb_close_bucket(b, nb++);
                acc = acc_e = 0;
            }
        }
        hi = lo;
    }
    if (kind != PLAN_PASS_W && rc == TS_OK)
        rc = pb_add_amax(b, mo, L->n, true, PLAN_CAT_BWD);
    if (first && rc == TS_OK)
        rc = pb_add(b, o_emb, PLAN_CAT_BWD, STASH_OF(mo->m_emb), FREE_OF(mo->m_emb));
#undef FREE_OF
#undef STASH_OF
    if ((first || last) && rc == TS_OK) { /* the loss's tensors go with B or I, the indices with B or W */
        const dataload_mem *m = &b->data_mem[first ? 0 : 1];
        pb_free_batch(b, (kind != PLAN_PASS_W ? m->kept_i_bytes : 0) + (kind != PLAN_PASS_I ? m->kept_w_bytes : 0));
    }
    if (buckets && rc == TS_OK && acc > 0) {
        bucket_params[nb] = acc;
        bucket_expert[nb] = acc_e;
        pb_close_bucket(b, nb++);
    }
    if (n_buckets)
        *n_buckets = nb;
    return rc;
}

/* The data loader's step (plan.data): the forward's first compute step on
 * a stage that loads data, the op the next ones wait for. The batch
 * (dataload_mem) is allocated at its start; at its end what the forward
 * does not keep (the whole tensors cp slices replaced) is freed. */
static int pb_add_data(pass_builder *b, int64_t dur_ns, const dataload_mem *m)
{
    plan_step x = plan_step_init("data loader", PLAN_STREAM_COMPUTE, PLAN_CAT_DATA, b->stage, dur_ns);
    x.batch_alloc_bytes = m->step_bytes;
    x.batch_free_bytes = m->step_bytes - m->fwd_bytes;
    int32_t id = pb_new(b, &x);
    if (id < 0)
        return TS_ENOMEM;
    b->open = b->prev_last = id;
    return TS_OK;
}

static int build_fwd(pass_builder *b, const model_ops *mo, const rc_layout *L, bool first, bool last)
{
    int rc = TS_OK;
    if (first || last)
        rc = pb_add_data(b, b->data_ns[first ? 0 : 1], &b->data_mem[first ? 0 : 1]);
    if (first && rc == TS_OK)
        rc = pb_add(b, &mo->ef, PLAN_CAT_FWD, mo->m_emb.kept, 0);
    for (int l = 0; l < L->n && rc == TS_OK; l++) {
        layer_kind K = kind_of(mo, L, l);
        int64_t kept;
        if (l >= L->n_rc)
            kept = K.m_none->kept;
        else /* full uniform: only a group's first layer keeps its input */
            kept = (l % L->group == 0) ? K.m_rc->kept : 0;
        rc = pb_add_layer(b, K.f, PLAN_CAT_FWD, kept + mo->cp_tf + K.transient, mo->cp_tf + K.transient);
    }
    if (last && mo->mtp) { /* the MTP depths (mtp.h): own ops, one layer, the shared output layer */
        layer_kind K = mtp_kind(mo);
        for (int k = 0; k < mo->mtp && rc == TS_OK; k++)
            if ((rc = pb_add(b, &mo->mtp_f, PLAN_CAT_FWD, mo->m_mtp.kept, 0)) == TS_OK &&
                (rc = pb_add_layer(b, K.f, PLAN_CAT_FWD, K.m_none->kept + mo->cp_tf, mo->cp_tf)) == TS_OK)
                rc = pb_add(b, &mo->of, PLAN_CAT_FWD, mo->m_out.kept, 0);
    }
    if (rc == TS_OK)
        rc = pb_add_amax(b, mo, L->n, false, PLAN_CAT_FWD);
    if (last && rc == TS_OK)
        rc = pb_add(b, &mo->of, PLAN_CAT_FWD, mo->m_out.kept, 0);
    if ((first || last) && rc == TS_OK) { /* forward_step's frame ends: the mask and what no backward keeps */
        const dataload_mem *m = &b->data_mem[first ? 0 : 1];
        pb_free_batch(b, m->fwd_bytes - m->kept_i_bytes - m->kept_w_bytes);
    }
    return rc;
}

int plan_build(const config *c, const sched *s, const cost_model *cm, const commcost_params *cc, plan **out,
               ts_err *err)
{
    return plan_build_opts(c, s, cm, cc, NULL, out, err);
}

/* The pipeline transfers' cost: b*s*h activations (or their gradient) per
 * micro-batch; with t > 1 Megatron scatters them over the t ranks' NICs and
 * all-gathers over NVLink (scatter/gather); with sequence parallelism they
 * are already sharded. */
static int add_pipeline_transfers(plan *pl, const plan_env *E, const commcost_group *tp_group)
{
    const config *c = E->c;
    int t = E->t;
    int64_t S = (int64_t)c->par.micro_batch_size * (c->model.seq_length / config_cp(c)) * c->model.hidden_size * E->dt;
    bool same_node = (int64_t)t * E->d < E->gpn;
    commcost_group pair = {2, same_node ? 2 : 1};
    int64_t wire = (t > 1) ? S / t : S;
    int64_t p2p_ns = commcost_ns(E->cc, COMM_P2P, wire, &pair);
    if (t > 1 && !c->par.sequence_parallel)
        p2p_ns += commcost_ns(E->cc, COMM_ALL_GATHER, S, tp_group);
    if (plan_add_transfers(pl, p2p_ns, wire))
        return err_set(E->err, TS_ENOMEM, "plan: out of memory");
    return TS_OK;
}

/* The F, B, I and W passes of stage st; with buckets (bucket_params, room
 * for num_layers + 2), the parameters of each gradient bucket, and their
 * count in *n_buckets. */
/* FSDP with sharded parameters: each pass that uses the weights (F, B, I)
 * all-gathers every unit's parameters (each transformer layer, and the
 * embedding or output layer's when the stage has them) over the
 * data-parallel group before that unit runs, prefetching the next unit's
 * while the current one computes (again in the backward: the parameters
 * were resharded after the forward). The engine cannot split a pass into
 * per-layer waits, so the plan keeps the closed form (overlap.h) with the
 * stage's gather c split into n equal units beside the pass's compute g:
 * exposed = (c + (n-1) max(0, c - g)) / n, one DP-stream step per pass.
 * MoE (Megatron-FSDP): the routed experts' parameters are sharded over the
 * expert-data-parallel group instead (Megatron-FSDP keeps expert parameters
 * in buffers of their own over the expert data-parallel group, as the
 * distributed optimizer does), so c is the dense part's gather over d x cp
 * plus the experts' over edp, one after the other. */
static int add_fsdp_gathers(plan *pl, const plan_env *E, int st, int n_layers, bool has_extra)
{
    plan_stage *S_ = &pl->stages[st];
    int units = n_layers + (has_extra ? 1 : 0);
    if (units < 1)
        return TS_OK;
    int64_t expert = S_->expert_params;
    int64_t bytes = expert > 0 ? (S_->params - expert) * E->dt /* FP8 with experts: refused by the flags */
                               : fp8_gather_bytes(&E->c->model, E->dt, S_->params,
                                                  S_->params - (int64_t)n_layers * E->params_layer);
    int64_t c_ns = commcost_ns(E->cc, COMM_ALL_GATHER, bytes, &E->dp_group);
    if (expert > 0)
        c_ns += commcost_ns(E->cc, COMM_ALL_GATHER, expert * E->dt, &E->edp_group);
    static const int passes[] = {PLAN_PASS_F, PLAN_PASS_B, PLAN_PASS_I};
    for (size_t i = 0; i < sizeof passes / sizeof *passes; i++) {
        int k = passes[i];
        int64_t g_ns = 0;
        for (uint32_t j = 0; j < S_->pass[k].n; j++) {
            const plan_step *x = &pl->steps[S_->pass[k].first + j];
            if (x->stream == PLAN_STREAM_COMPUTE)
                g_ns += x->dur_ns;
        }
        plan_step x = plan_step_init("fsdp.param-all-gather", PLAN_STREAM_DP, PLAN_CAT_DP, st,
                                     overlap_chunked_exposed_ns(c_ns, g_ns, units));
        x.comm_bytes = bytes + expert * E->dt;
        x.comm_coll = COMM_ALL_GATHER;
        if (plan_push_step(pl, &x, &S_->fsdp_gather[k]))
            return err_set(E->err, TS_ENOMEM, "plan: out of memory");
    }
    return TS_OK;
}

static int build_stage_passes(plan *pl, const plan_env *E, pass_builder *b, const model_ops *mo, int st,
                              int64_t *bucket_params, int64_t *bucket_expert, int *n_buckets)
{
    const config *c = E->c;
    plan_stage *S_ = &pl->stages[st];
    int nl = E->s->stages[st].num_layers, rc = TS_OK;
    bool first = st == 0, last = st == pl->n_stages - 1;
    rc_layout L = layout_of(c, nl, E->s->stages[st].first_layer);
    S_->params = flops_params_stage(&c->model, E->t, nl, first, last) +
                 (int64_t)nl * mla_layer_params_delta(&c->model, &c->moe, E->t);
    int64_t extra = S_->params - (int64_t)nl * mo->params_layer;
    for (int l = 0; l < nl; l++) { /* MoE layers: their rank's share instead of a dense layer's */
        layer_kind K = kind_of(mo, &L, l);
        S_->params += K.params - mo->params_layer;
        S_->expert_params += K.expert_params;
    }
    if (last && mo->mtp) { /* the MTP depths' parameters: their layers, own weights, the embedding's copy */
        layer_kind K = mtp_kind(mo);
        S_->params += mo->mtp * (K.params + mo->mtp_params) + mtp_embedding_params(mo, first);
        S_->expert_params += mo->mtp * K.expert_params;
    }
    bool with_buckets = E->d > 1 && (c->par.overlap_grad_reduce || E->fsdp);
    int nb_b = 0, nb_w = 0;
    for (int k = 0; k < PLAN_PASSES && rc == TS_OK; k++) {
        pb_start(b, st);
        if (k == PLAN_PASS_F)
            rc = build_fwd(b, mo, &L, first, last);
        else
            rc = build_bwd(b, mo, &L, first, last, k, extra, with_buckets && k != PLAN_PASS_I ? bucket_params : NULL,
                           bucket_expert,
                           k == PLAN_PASS_B   ? &nb_b
                           : k == PLAN_PASS_W ? &nb_w
                                              : NULL);
        if (rc == TS_OK && E->inline_tp)
            rc = plan_collapse_pass(pl, b->base, k, with_buckets, S_);
        else
            S_->pass[k] = (plan_range){b->base, pl->n_steps - b->base};
        if (rc == TS_ENOMEM)
            rc = err_set(E->err, TS_ENOMEM, "plan: out of memory");
        if (S_->pass[k].n > pl->max_pass_steps)
            pl->max_pass_steps = S_->pass[k].n;
        if (S_->pass_final[k].n > pl->max_pass_steps)
            pl->max_pass_steps = S_->pass_final[k].n;
    }
    if (rc)
        return rc;
    if (nb_b != nb_w)
        return err_set(E->err, TS_ESTATE, "plan: stage %d has %d gradient buckets in B but %d in W", st, nb_b, nb_w);
    if (E->shard == SHARD_OPTIM_GRADS_PARAMS && E->d > 1 && (rc = add_fsdp_gathers(pl, E, st, nl, extra > 0)))
        return rc;
    *n_buckets = nb_b;
    return TS_OK;
}

/* Stage st's data-parallel gradient reduction (d > 1): the whole stage's,
 * then one per bucket (bucket_params[0 .. n_buckets-1] parameters, of which
 * bucket_expert[k] the routed experts'). */
static int add_dp_reduction(plan *pl, const plan_env *E, int st, const int64_t *bucket_params,
                            const int64_t *bucket_expert, int n_buckets)
{
    const parallel_config *P = &E->c->par;
    plan_stage *S_ = &pl->stages[st];
    bool rs = P->distributed_optimizer || E->shard >= SHARD_OPTIM;
    commcost_coll coll = rs ? COMM_REDUCE_SCATTER : COMM_ALL_REDUCE;
    const char *nm = rs ? "dp.reduce-scatter" : "dp.all-reduce";
    plan_step x = plan_step_init(nm, PLAN_STREAM_DP, PLAN_CAT_DP, st, 0);
    x.comm_coll = (uint8_t)coll;
    x.comm_bytes = S_->params * E->grad_bytes;
    x.dur_ns = plan_env_grad_reduce_ns(E, coll, S_->params, S_->expert_params);
    plan_env_dp_flow_terms(E, coll, x.comm_bytes, S_->expert_params * E->grad_bytes, &x);
    if (plan_push_step(pl, &x, &S_->dp_whole))
        return err_set(E->err, TS_ENOMEM, "plan: out of memory");
    S_->n_buckets = n_buckets;
    for (int k = 0; k < n_buckets; k++) {
        x.comm_bytes = bucket_params[k] * E->grad_bytes;
        x.dur_ns = plan_env_grad_reduce_ns(E, coll, bucket_params[k], bucket_expert[k]);
        plan_env_dp_flow_terms(E, coll, x.comm_bytes, bucket_expert[k] * E->grad_bytes, &x);
        uint32_t id;
        if (plan_push_step(pl, &x, &id))
            return err_set(E->err, TS_ENOMEM, "plan: out of memory");
        if (k == 0)
            S_->dp_bucket0 = id;
    }
    return TS_OK;
}

/* The data loader's step of the first and the last stage (plan.data,
 * dataload.h), or --data-loader-ns for both. */
static int add_data_loader(plan *pl, const plan_env *E, const commcost_group *tp_group, pass_builder *b)
{
    const config *c = E->c;
    double host = 0;
    ts_err unused; /* a measured step needs no host link: an unknown GPU kind is no error then */
    int rc = dataload_host_link_gbps(&c->cluster.gpu, cost_model_params(E->cm)->hbm_gbps, &host,
                                     c->par.data_loader_measured ? &unused : E->err);
    if (rc && !c->par.data_loader_measured)
        return rc;
    for (int k = 0; k < 2; k++) {
        dataload_in in = {.first = k == 0 || pl->n_stages == 1,
                          .last = k == 1 || pl->n_stages == 1,
                          .mtp = c->moe.mtp_num_layers > 0,
                          .attn_mask = !c->par.no_loader_attn_mask,
                          .b = c->par.micro_batch_size,
                          .s = c->model.seq_length,
                          .tp = E->t,
                          .cp = config_cp(c),
                          .host_gbps = host};
        if (host > 0 && (rc = dataload_cost_of(&in, E->cm, E->cc, tp_group, &pl->data[k], E->err)))
            return rc;
        if ((rc = dataload_mem_of(&in, &pl->data_mem[k], E->err)))
            return rc;
        b->data_mem[k] = pl->data_mem[k];
        if (c->par.data_loader_measured)
            pl->data[k].total_ns = (int64_t)(c->par.data_loader_ns + 0.5);
        b->data_ns[k] = pl->data[k].total_ns;
    }
    pl->data_measured = c->par.data_loader_measured;
    return TS_OK;
}

/* Every stage's passes and data-parallel reduction. */
static int build_stages(plan *pl, const plan_env *E, pass_builder *b, const model_ops *mo)
{
    const sched *s = E->s;
    int max_layers = 0, rc = TS_OK;
    for (int st = 0; st < s->p * s->v; st++)
        if (s->stages[st].num_layers > max_layers)
            max_layers = s->stages[st].num_layers;
    size_t nb_max = (size_t)max_layers + 2;
    int64_t *bucket_params = malloc(2 * nb_max * sizeof *bucket_params); /* then the experts' share of each */
    if (!bucket_params)
        return err_set(E->err, TS_ENOMEM, "plan: out of memory");
    for (int st = 0; st < pl->n_stages && rc == TS_OK; st++) {
        int n_buckets = 0;
        rc = build_stage_passes(pl, E, b, mo, st, bucket_params, bucket_params + nb_max, &n_buckets);
        if (rc == TS_OK && E->d > 1)
            rc = add_dp_reduction(pl, E, st, bucket_params, bucket_params + nb_max, n_buckets);
    }
    free(bucket_params);
    return rc;
}

int plan_build_opts(const config *c, const sched *s, const cost_model *cm, const commcost_params *cc,
                    const plan_opts *o, plan **out, ts_err *err)
{
    *out = NULL;
    const parallel_config *P = &c->par;
    if (s->p != P->pp || s->v != (P->vp > 0 ? P->vp : 1))
        return err_set(err, TS_EINVAL, "plan: schedule has p=%d v=%d but the configuration p=%d v=%d", s->p, s->v,
                       P->pp, P->vp);
    plan_env E;
    plan_env_init(&E, c, s, cm, cc, o && o->inline_tp, err);
    int rc = ep_pair_check(c, s->kind, s->v, !E.inline_tp, err);
    if (rc)
        return rc;
    model_ops *mo = malloc(sizeof *mo);
    plan *pl = NULL;
    rc = mo ? model_ops_build(c, E.gpn, cc, mo, err) : err_set(err, TS_ENOMEM, "plan: out of memory");
    const plan_moe *moe0 = rc == TS_OK && mo->moe.n_kinds > 0 ? &mo->moe.kinds[0] : NULL; /* groups, params, a2a:
                                                                                        the same in every variant */
    if (moe0) {
        E.edp = moe0->edp;
        E.edp_group = moe0->edp_group;
        E.moe_layer_params = moe0->params_dense + moe0->params_expert;
        if (E.d <= 1 && E.edp > 1)
            rc = err_set(err, TS_EINVAL,
                         "plan: expert-data-parallel size %d with data-parallel size 1: not modelled (the gradient "
                         "reduction runs only with d > 1; give --expert-model-parallel-size %d)",
                         E.edp, c->par.tp);
    }
    if (rc == TS_OK && plan_alloc(s->p, s->v, &pl))
        rc = err_set(err, TS_ENOMEM, "plan: out of memory");
    if (rc == TS_OK) {
        pl->d = E.d;
        pl->edp = E.edp;
        pl->moe_load_factor = moe0 ? mo->moe.lf_max : 0;
        pl->moe_load_factor_min = moe0 ? mo->moe.lf_min : 0;
        pl->moe_busiest_layer = moe0 ? mo->moe.busiest_layer : -1;
        pl->moe_dropped = moe0 ? mo->moe.dropped : 0;
        pl->overlap_grad_reduce = P->overlap_grad_reduce || E.fsdp; /* FSDP reduces per unit during the backward */
        pl->distributed_optimizer = P->distributed_optimizer || E.shard >= SHARD_OPTIM;
        int t = E.t, gpn = E.gpn;
        pass_builder b = {.pl = pl,
                          .cm = cm,
                          .cc = cc,
                          .gpn = gpn,
                          .tpo = P->tp_comm_overlap && P->sequence_parallel && E.t > 1,
                          .sms = overlap_gpu_sms(c->cluster.gpu.name)};
        b.tp_group = (commcost_group){t, t <= gpn ? t : (t % gpn ? 1 : gpn)};
        b.a2a_ns = moe0 ? moe0->a2a_ns : 0;
        b.a2a_lat_ns = moe0 ? moe0->a2a_lat_ns : 0;
        b.a2a_mx_ns = moe0 ? moe0->a2a_mx_ns : 0;
        rc = add_pipeline_transfers(pl, &E, &b.tp_group);
        if (rc == TS_OK)
            rc = add_data_loader(pl, &E, &b.tp_group, &b);
        if (rc == TS_OK)
            rc = build_stages(pl, &E, &b, mo);
        if (rc == TS_OK && P->overlap_moe_ep_comm && E.inline_tp)
            rc = ep_pair_build(pl, s, b.sms, P->delay_wgrad, err);
        pl->ep_pair_steps = P->overlap_moe_ep_comm && !E.inline_tp; /* the flow modes: lower.h */
        pl->ep_pair_combined = P->overlap_moe_ep_comm;
        if (rc == TS_OK && pl->ep_pair_steps)
            rc = ep_pair_steps_build(pl, s, b.sms, P->delay_wgrad, err);
    }
    if (rc == TS_OK)
        rc = plan_rank_add_emb_allreduce(pl, &E);
    if (rc == TS_OK)
        rc = plan_rank_add_steps(pl, &E);
    if (mo)
        plan_moe_layers_free(&mo->moe);
    free(mo);
    if (rc) {
        plan_free(pl);
        return rc;
    }
    *out = pl;
    return TS_OK;
}
