/* layer_mla — multi-latent attention's ops in the layer (layer_impl.h; the
 * closed forms are mla.h's). */
#include <string.h>

#include "sim/model/layer_impl.h"

/* ---------------------------------------------------------------- shape */

void layer_mla_from_config(const moe_config *e, layer_shape *L)
{
    memset(&L->mla, 0, sizeof L->mla);
    if (!e->mla)
        return;
    L->mla.on = true;
    L->mla.q_lora = e->mla_q_lora_rank;
    L->mla.kv_lora = e->mla_kv_lora_rank;
    L->mla.d_qk = e->mla_qk_head_dim;
    L->mla.d_rope = e->mla_qk_pos_emb_head_dim;
    L->mla.d_v = e->mla_v_head_dim;
}

int layer_mla_check(const layer_shape *L, ts_err *err)
{
    const layer_mla *M = &L->mla;
    if (!M->on)
        return TS_OK;
    if (M->q_lora < 0 || M->kv_lora < 1 || M->d_qk < 1 || M->d_rope < 1 || M->d_v < 1)
        return err_set(err, TS_EINVAL,
                       "multi-latent attention: --q-lora-rank %lld (0 = none), --kv-lora-rank %lld, --qk-head-dim "
                       "%lld, --qk-pos-emb-head-dim %lld, --v-head-dim %lld: the sizes must be >= 1",
                       (long long)M->q_lora, (long long)M->kv_lora, (long long)M->d_qk, (long long)M->d_rope,
                       (long long)M->d_v);
    if (L->g != L->a)
        return err_set(err, TS_EINVAL,
                       "--multi-latent-attention with --num-query-groups %lld < --num-attention-heads %lld: MLA has "
                       "no grouped-query attention (drop --group-query-attention)",
                       (long long)L->g, (long long)L->a);
    if (L->cp > 1)
        return err_set(err, TS_EINVAL,
                       "--multi-latent-attention with --context-parallel-size %d: not modelled together (give 1)",
                       L->cp);
    return TS_OK;
}

/* ---------------------------------------------------------------- ops */

/* Per-rank sizes of the ops (mla.h). */
typedef struct {
    int64_t T, Tl, at, q, ql, kvl, dqk, dr, dv, h, dt;
    int t;
    bool sp; /* sequence parallelism with t > 1: gathers and reduce-scatters */
} mla_dims;

static mla_dims dims_of(const layer_shape *L)
{
    mla_dims D;
    D.T = L->s * L->b;
    D.t = L->t;
    D.sp = L->sp && L->t > 1;
    D.Tl = D.sp ? D.T / L->t : D.T;
    D.at = L->a / L->t;
    D.ql = L->mla.q_lora;
    D.kvl = L->mla.kv_lora;
    D.dqk = L->mla.d_qk;
    D.dr = L->mla.d_rope;
    D.dv = L->mla.d_v;
    D.q = D.dqk + D.dr;
    D.h = L->h;
    D.dt = L->dtype_bytes;
    return D;
}

static void set_deps(layer_ops *o, int i, int d0, int d1)
{
    o->op[i].dep[0] = d0;
    o->op[i].dep[1] = d1;
}

static int64_t rope_bytes(const mla_dims *D)
{
    return (2 * D->T * D->at * D->q + D->T * D->at * D->dqk + D->T * D->dr + D->T * D->at * D->q) * D->dt;
}

/* The up-projections (column-parallel, SP gathering their inputs) and rope. */
static void up_fwd(const mla_dims *D, layer_ops *o)
{
    if (D->ql > 0) {
        if (D->sp)
            layer_ops_comm(o, "mla.q_up.ag", COMM_ALL_GATHER, D->T * D->ql * D->dt, D->t);
        layer_ops_gemm(o, "mla.q_up", D->T, D->at * D->q, D->ql, 1);
    } else {
        if (D->sp)
            layer_ops_comm(o, "mla.q.ag", COMM_ALL_GATHER, D->T * D->h * D->dt, D->t);
        layer_ops_gemm(o, "mla.q_proj", D->T, D->at * D->q, D->h, 1);
    }
    if (D->sp)
        layer_ops_comm(o, "mla.kv_up.ag", COMM_ALL_GATHER, D->T * (D->kvl + D->dr) * D->dt, D->t);
    layer_ops_gemm(o, "mla.kv_up", D->T, D->at * (D->dqk + D->dv), D->kvl, 1);
    layer_ops_mem(o, "mla.rope", rope_bytes(D));
}

void layer_mla_qkv_fwd(const layer_shape *L, layer_ops *o)
{
    mla_dims D = dims_of(L);
    if (D.ql > 0) {
        layer_ops_gemm(o, "mla.q_down", D.Tl, D.ql, D.h, 1);
        layer_ops_mem(o, "mla.q_norm", 2 * D.Tl * D.ql * D.dt);
    }
    layer_ops_gemm(o, "mla.kv_down", D.Tl, D.kvl + D.dr, D.h, 1);
    layer_ops_mem(o, "mla.kv_norm", 2 * D.Tl * D.kvl * D.dt);
    up_fwd(&D, o);
}

void layer_mla_up_fwd(const layer_shape *L, layer_ops *o)
{
    mla_dims D = dims_of(L);
    up_fwd(&D, o);
}

/* The backward of one column-parallel up-projection (T x n x k, input
 * width k, re-gathered under SP for the weight gradient): as layer.c's
 * column-parallel backward; its input gradient's collective is T x reduced
 * wide (the kv path's includes the rotary key's gradient, d_r). */
static void up_bwd(const mla_dims *D, layer_ops *o, bool dgrad, bool wgrad, const char *names[5], int64_t n, int64_t k,
                   int64_t reduced)
{
    int prev = o->n - 1, ag = -1;
    if (!dgrad) { /* W: the re-gathered input, then the weight gradient */
        if (D->sp)
            set_deps(o, ag = layer_ops_comm(o, names[0], COMM_ALL_GATHER, D->T * k * D->dt, D->t), -1, -1);
        set_deps(o, layer_ops_gemm(o, names[4], n, k, D->T, 1), prev, ag);
        return;
    }
    bool whole = wgrad;
    if (whole && D->sp)
        set_deps(o, ag = layer_ops_comm(o, names[0], COMM_ALL_GATHER, D->T * k * D->dt, D->t), prev, -1);
    int dg = layer_ops_gemm(o, names[1], D->T, k, n, 1);
    set_deps(o, dg, prev, -1);
    o->op[dg].overlap = ag;
    int c = -1;
    if (D->t > 1) {
        c = D->sp ? layer_ops_comm(o, names[3], COMM_REDUCE_SCATTER, D->T * reduced * D->dt, D->t)
                  : layer_ops_comm(o, names[2], COMM_ALL_REDUCE, D->T * reduced * D->dt, D->t);
        set_deps(o, c, dg, -1);
    }
    if (whole) {
        int wg = layer_ops_gemm(o, names[4], n, k, D->T, 1);
        set_deps(o, wg, dg, ag);
        o->op[wg].overlap = c;
    }
}

/* The op just pushed after up_bwd (from first_of_block) waits for both the
 * input gradient's collective and the last GEMM (layer.c's join). */
static void after_up(layer_ops *o, int first_of_block)
{
    int i = o->n - 1, a = -1, b = -1;
    for (int j = i - 1; j >= first_of_block; j--) {
        if (o->op[j].kind == LAYER_OP_COMM && a < 0 && o->op[j].coll != COMM_ALL_GATHER)
            a = j;
        if (o->op[j].kind == LAYER_OP_GEMM && b < 0)
            b = j;
    }
    if (a >= 0 && b >= 0)
        set_deps(o, i, a, b);
}

static const char *KV_UP[5] = {"mla.kv_up.ag.in", "mla.kv_up.dgrad", "mla.kv_up.ar", "mla.kv_up.rs", "mla.kv_up.wgrad"};
static const char *Q_UP[5] = {"mla.q_up.ag.in", "mla.q_up.dgrad", "mla.q_up.ar", "mla.q_up.rs", "mla.q_up.wgrad"};
static const char *Q_PROJ[5] = {"mla.q.ag.in", "mla.q_proj.dgrad", "mla.q_proj.ar", "mla.q_proj.rs",
                                "mla.q_proj.wgrad"};

void layer_mla_qkv_bwd(const layer_shape *L, layer_ops *o, bool dgrad, bool wgrad)
{
    mla_dims D = dims_of(L);
    if (dgrad)
        layer_ops_mem(o, "mla.rope.bwd", rope_bytes(&D));
    /* kv path: up-projection, norm, down-projection */
    int blk = o->n;
    up_bwd(&D, o, dgrad, wgrad, KV_UP, D.at * (D.dqk + D.dv), D.kvl, D.kvl + D.dr);
    if (dgrad) {
        layer_ops_mem(o, "mla.kv_norm.bwd", 4 * D.Tl * D.kvl * D.dt);
        after_up(o, blk);
        layer_ops_gemm(o, "mla.kv_down.dgrad", D.Tl, D.h, D.kvl + D.dr, 1);
    }
    if (wgrad)
        layer_ops_gemm(o, "mla.kv_down.wgrad", D.kvl + D.dr, D.h, D.Tl, 1);
    /* q path */
    blk = o->n;
    if (D.ql > 0) {
        up_bwd(&D, o, dgrad, wgrad, Q_UP, D.at * D.q, D.ql, D.ql);
        if (dgrad) {
            layer_ops_mem(o, "mla.q_norm.bwd", 4 * D.Tl * D.ql * D.dt);
            after_up(o, blk);
            layer_ops_gemm(o, "mla.q_down.dgrad", D.Tl, D.h, D.ql, 1);
        }
        if (wgrad)
            layer_ops_gemm(o, "mla.q_down.wgrad", D.ql, D.h, D.Tl, 1);
    } else {
        up_bwd(&D, o, dgrad, wgrad, Q_PROJ, D.at * D.q, D.h, D.h);
    }
}

void layer_mla_saved(const layer_shape *L, layer_mla_saved_bytes *out)
{
    memset(out, 0, sizeof *out);
    if (!L->mla.on)
        return;
    mla_dims D = dims_of(L);
    out->q_down_out = D.Tl * D.ql * D.dt;
    out->q_up_in = layer_fp8_saved_bytes(L, D.Tl * D.ql);
    out->kv_down_out = D.Tl * (D.kvl + D.dr) * D.dt;
    out->kv_up_in = layer_fp8_saved_bytes(L, D.Tl * D.kvl);
}
