/* layer — the op lists of a Megatron-LM GPT layer (layer.h); its shape is
 * built in layer_shape.c, its saved tensors listed in layer_saved.c. */
#include "sim/model/layer.h"

#include <string.h>

#include "sim/model/layer_impl.h"

/* ---------------------------------------------------------------- derived sizes */

layer_dims layer_dims_of(const layer_shape *L)
{
    layer_dims D;
    D.T = L->s * L->b;
    D.Tl = L->sp ? D.T / L->t : D.T;
    D.d = L->d > 0 ? L->d : L->h / L->a;
    D.at = L->a / L->t;
    D.gt = L->g / L->t;
    D.dqk = L->mla.on ? L->mla.d_qk + L->mla.d_rope : D.d;
    D.dv = L->mla.on ? L->mla.d_v : D.d;
    D.adt = L->a * D.dv / L->t;
    D.qkv_n = (L->a * D.d + 2 * L->g * D.d) / L->t;
    D.ffn_t = L->ffn / L->t;
    D.fc1_n = (L->swiglu ? 2 : 1) * D.ffn_t;
    D.Vt = L->V / L->t;
    D.dt = L->dtype_bytes;
    D.S = D.T * L->h * D.dt;
    D.comm = L->t > 1;
    return D;
}

bool layer_is_flash(const layer_shape *L)
{
    return config_attn_is_flash(L->attn);
}

unsigned layer_rc_modules_of(const layer_shape *L)
{
    return L->rc_modules ? L->rc_modules : CONFIG_RC_DEFAULT;
}

/* ---------------------------------------------------------------- op lists */

int layer_ops_push(layer_ops *o, const char *name, layer_op_kind kind)
{
    int i = o->n++;
    layer_op *op = &o->op[i];
    memset(op, 0, sizeof *op);
    op->name = name;
    op->kind = kind;
    op->batch = 1;
    op->dep[0] = i - 1;
    op->dep[1] = -1;
    op->overlap = -1;
    return i;
}

int layer_ops_gemm(layer_ops *o, const char *name, int64_t m, int64_t n, int64_t k, int64_t batch)
{
    int i = layer_ops_push(o, name, LAYER_OP_GEMM);
    layer_op *op = &o->op[i];
    op->m = m;
    op->n = n;
    op->k = k;
    op->batch = batch;
    op->flops = 2.0 * (double)m * (double)n * (double)k * (double)batch;
    return i;
}

static int gemm(layer_ops *o, const char *name, int64_t m, int64_t n, int64_t k)
{
    return layer_ops_gemm(o, name, m, n, k, 1);
}

int layer_ops_mem(layer_ops *o, const char *name, int64_t bytes)
{
    int i = layer_ops_push(o, name, LAYER_OP_MEM);
    o->op[i].bytes = bytes;
    return i;
}

int layer_ops_comm(layer_ops *o, const char *name, commcost_coll coll, int64_t bytes, int group)
{
    int i = layer_ops_push(o, name, LAYER_OP_COMM);
    o->op[i].coll = coll;
    o->op[i].bytes = bytes;
    o->op[i].group = group;
    return i;
}

int layer_ops_append(layer_ops *dst, const layer_ops *src, ts_err *err)
{
    int off = dst->n;
    if (off + src->n > LAYER_MAX_OPS)
        return err_set(err, TS_EINVAL, "%d + %d ops are more than LAYER_MAX_OPS %d", off, src->n, LAYER_MAX_OPS);
    for (int i = 0; i < src->n; i++) {
        layer_op op = src->op[i];
        for (int k = 0; k < 2; k++)
            if (op.dep[k] >= 0)
                op.dep[k] += off;
        if (i == 0 && op.dep[0] < 0 && off > 0)
            op.dep[0] = off - 1;
        if (op.overlap >= 0)
            op.overlap += off;
        dst->op[dst->n++] = op;
    }
    return TS_OK;
}

/* A collective of the context-parallel group: span ranks, stride apart. */
static int cp_comm(layer_ops *o, const char *name, commcost_coll coll, int64_t bytes, int span, int stride)
{
    int i = layer_ops_comm(o, name, coll, bytes, coll == COMM_P2P ? 2 : span);
    o->op[i].stride = stride;
    o->op[i].span = span;
    return i;
}

static void deps(layer_ops *o, int i, int d0, int d1)
{
    o->op[i].dep[0] = d0;
    o->op[i].dep[1] = d1;
}

/* The forward attention core: QK^T, softmax, dropout, attention.V; with
 * flash, the kernel's two GEMMs over the causal lower half (s x ceil(s/2)). */
static void cp_attn(const layer_shape *L, const layer_dims *D, layer_ops *o, bool bwd);

static void attn_core_fwd(const layer_shape *L, const layer_dims *D, layer_ops *o)
{
    int64_t bh = L->b * D->at, P = bh * L->s * L->s; /* score elements */
    if (L->cp > 1) {
        cp_attn(L, D, o, false);
        return;
    }
    if (layer_is_flash(L)) {
        int64_t half = (L->s + 1) / 2;
        layer_ops_gemm(o, "attn.flash.qk", L->s, half, D->dqk, bh);
        layer_ops_gemm(o, "attn.flash.av", L->s, D->dv, half, bh);
        return;
    }
    layer_ops_gemm(o, "attn.qk", L->s, L->s, D->dqk, bh);
    if (L->fusion & LAYER_UNFUSED_SOFTMAX) { /* the causal mask filled in place, then PyTorch's softmax */
        layer_ops_mem(o, "attn.softmax.mask", 2 * P * D->dt);
        layer_ops_mem(o, "attn.softmax", 2 * P * D->dt);
    } else /* fused causal softmax: reads the lower triangle, writes every row */
        layer_ops_mem(o, "attn.softmax", (layer_causal_tri(L->s) * bh + P) * D->dt);
    if (!L->no_attn_dropout)
        layer_ops_mem(o, "attn.dropout", P * (2 * D->dt + 1)); /* read, write, 1-byte mask */
    layer_ops_gemm(o, "attn.av", L->s, D->dv, L->s, bh);
}

/* Row-parallel GEMM output reduction: all-reduce, or reduce-scatter with SP. */
static void tp_reduce(const layer_shape *L, const layer_dims *D, layer_ops *o, const char *ar, const char *rs)
{
    if (!D->comm)
        return;
    if (L->sp)
        layer_ops_comm(o, rs, COMM_REDUCE_SCATTER, D->S, L->t);
    else
        layer_ops_comm(o, ar, COMM_ALL_REDUCE, D->S, L->t);
}

/* The MLP module's forward: [SP all-gather], FC1, activation, FC2, its
 * reduction. */
static void mlp_fwd(const layer_shape *L, const layer_dims *D, layer_ops *o)
{
    int64_t h = L->h;
    if (L->no_mlp) /* a MoE layer: the caller adds the MoE block */
        return;
    if (L->sp && D->comm)
        layer_ops_comm(o, "ln2.ag", COMM_ALL_GATHER, D->S, L->t);
    gemm(o, "fc1", D->T, D->fc1_n, h);
    int64_t F = D->T * D->ffn_t;
    if (!(L->fusion & LAYER_UNFUSED_BIAS_ACT)) {
        layer_ops_mem(o, L->swiglu ? "swiglu" : "gelu", D->T * (D->fc1_n + D->ffn_t) * D->dt);
    } else {
        if (L->bias) /* fc1's bias added by a kernel of its own: read, write fc1's output */
            layer_ops_mem(o, "fc1.bias_add", 2 * D->T * D->fc1_n * D->dt);
        if (L->swiglu) {
            layer_ops_mem(o, "swiglu.silu", 2 * F * D->dt); /* SiLU of the gate half */
            layer_ops_mem(o, "swiglu.mul", 3 * F * D->dt);  /* times the up half */
        } else {
            layer_ops_mem(o, "gelu", 2 * F * D->dt);
        }
    }
    gemm(o, "fc2", D->T, h, D->ffn_t);
    tp_reduce(L, D, o, "fc2.ar", "fc2.rs");
}

/* Selective recomputation: each module's forward, in program order. */
static void selective_fwd(const layer_shape *L, const layer_dims *D, layer_ops *o)
{
    unsigned mods = layer_rc_modules_of(L);
    int64_t E = D->Tl * L->h;
    if (mods & CONFIG_RC_LAYERNORM)
        layer_ops_mem(o, "ln1", 2 * E * D->dt);
    if (L->mla.on && (mods & CONFIG_RC_MLA_UP_PROJ))
        layer_mla_up_fwd(L, o);
    if (mods & CONFIG_RC_CORE_ATTN)
        attn_core_fwd(L, D, o);
    if (mods & CONFIG_RC_LAYERNORM)
        layer_ops_mem(o, "ln2", 2 * E * D->dt);
    if (mods & CONFIG_RC_MLP)
        mlp_fwd(L, D, o);
}

int64_t layer_causal_tri(int64_t s)
{
    return s * (s + 1) / 2;
}

/* Elements of q and k on this rank (what the rotary embedding rotates). */
static int64_t rope_elems(const layer_dims *D)
{
    return D->T * (D->at + D->gt) * D->d;
}

/* Bias-dropout-add after a block: one fused kernel (2 reads, write, mask),
 * or [bias add], dropout, residual add (LAYER_UNFUSED_BIAS_DROPOUT). */
static void dropadd_fwd(const layer_shape *L, const layer_dims *D, layer_ops *o, const char *fused, const char *bias,
                        const char *drop, const char *add)
{
    int64_t E = D->Tl * L->h, mask = L->no_hidden_dropout ? 0 : 1; /* the dropout mask's byte per element */
    if (!(L->fusion & LAYER_UNFUSED_BIAS_DROPOUT)) {
        layer_ops_mem(o, fused, E * (3 * D->dt + mask));
        return;
    }
    if (L->bias)
        layer_ops_mem(o, bias, 2 * E * D->dt);
    if (!L->no_hidden_dropout)
        layer_ops_mem(o, drop, E * (2 * D->dt + 1));
    layer_ops_mem(o, add, 3 * E * D->dt);
}

static void layer_fwd(const layer_shape *L, const layer_dims *D, layer_ops *o)
{
    int64_t h = L->h, E = D->Tl * h; /* elements of an element-wise op */
    layer_ops_mem(o, "ln1", 2 * E * D->dt);
    if (L->mla.on) {
        layer_mla_qkv_fwd(L, o);
    } else {
        if (L->sp && D->comm)
            layer_ops_comm(o, "ln1.ag", COMM_ALL_GATHER, D->S, L->t);
        gemm(o, "qkv", D->T, D->qkv_n, h);
        if (L->qk_norm) /* q_layernorm, k_layernorm: read and write q and k */
            layer_ops_mem(o, "qk_norm", 2 * rope_elems(D) * D->dt);
        if (L->fusion & LAYER_UNFUSED_ROPE)
            layer_ops_mem(o, "rope.unfused", 12 * rope_elems(D) * D->dt);
    }
    attn_core_fwd(L, D, o);
    gemm(o, "proj", D->T, h, D->adt);
    tp_reduce(L, D, o, "proj.ar", "proj.rs");
    dropadd_fwd(L, D, o, "attn.dropadd", "attn.dropadd.bias", "attn.dropadd.dropout", "attn.dropadd.add");
    layer_ops_mem(o, "ln2", 2 * E * D->dt);
    mlp_fwd(L, D, o);
    dropadd_fwd(L, D, o, "mlp.dropadd", "mlp.dropadd.bias", "mlp.dropadd.dropout", "mlp.dropadd.add");
}

/* Column-parallel GEMM backward (QKV or FC1). whole: dgrad, the input-grad
 * collective overlapped with wgrad (SP: re-gather of the input overlapped
 * with dgrad). !whole (I pass): dgrad and the collective only. */
static void colpar_bwd(const layer_shape *L, const layer_dims *D, layer_ops *o, bool whole, const char *ag_name,
                       const char *dg_name, const char *ar_name, const char *rs_name, const char *wg_name,
                       int64_t n_out)
{
    int64_t h = L->h;
    int prev = o->n - 1, ag = -1;
    if (whole && L->sp && D->comm) {
        ag = layer_ops_comm(o, ag_name, COMM_ALL_GATHER, D->S, L->t);
        deps(o, ag, prev, -1);
    }
    int dg = gemm(o, dg_name, D->T, h, n_out);
    deps(o, dg, prev, -1);
    o->op[dg].overlap = ag;
    int c = -1;
    if (D->comm) {
        if (L->sp)
            c = layer_ops_comm(o, rs_name, COMM_REDUCE_SCATTER, D->S, L->t);
        else
            c = layer_ops_comm(o, ar_name, COMM_ALL_REDUCE, D->S, L->t);
        deps(o, c, dg, -1);
    }
    if (whole) {
        int wg = gemm(o, wg_name, n_out, h, D->T);
        deps(o, wg, dg, ag);
        o->op[wg].overlap = D->comm ? c : -1;
    }
}

/* The op just pushed (after a column-parallel backward starting at
 * first_of_block) waits for both the input-gradient collective and the last
 * GEMM (the wgrad in B, the dgrad in I). */
static void join_last_two(layer_ops *o, int first_of_block)
{
    int i = o->n - 1; /* the op just pushed */
    int a = -1, b = -1;
    for (int j = i - 1; j >= first_of_block; j--) {
        if (o->op[j].kind == LAYER_OP_COMM && a < 0 && o->op[j].coll != COMM_ALL_GATHER)
            a = j;
        if (o->op[j].kind == LAYER_OP_GEMM && b < 0)
            b = j;
    }
    if (a >= 0 && b >= 0)
        deps(o, i, a, b);
}

static void layer_bwd(const layer_shape *L, const layer_dims *D, layer_ops *o, bool dgrad, bool wgrad)
{
    int64_t h = L->h, E = D->Tl * h, bh = L->b * D->at, P = bh * L->s * L->s;
    int64_t mask = L->no_hidden_dropout ? 0 : 1; /* the dropout mask's byte per element */
    bool whole = dgrad && wgrad;
    int blk;
    if (!dgrad) { /* W pass: weight-gradient GEMMs only (SP: re-gather the inputs first) */
        bool regather = L->sp && D->comm;
        int ag = -1, proj;
        if (L->no_mlp) {
            proj = gemm(o, "proj.wgrad", D->adt, h, D->T);
        } else {
            int fc2 = gemm(o, "fc2.wgrad", D->ffn_t, h, D->T);
            if (regather) {
                deps(o, ag = layer_ops_comm(o, "fc1.ag.in", COMM_ALL_GATHER, D->S, L->t), -1, -1);
                o->op[fc2].overlap = ag; /* both start when the W pass starts */
            }
            int fc1 = gemm(o, "fc1.wgrad", D->fc1_n, h, D->T);
            deps(o, fc1, fc2, ag);
            proj = gemm(o, "proj.wgrad", D->adt, h, D->T);
            deps(o, proj, fc1, -1);
        }
        if (L->mla.on) {
            layer_mla_qkv_bwd(L, o, false, true);
            return;
        }
        if (regather)
            deps(o, ag = layer_ops_comm(o, "qkv.ag.in", COMM_ALL_GATHER, D->S, L->t), -1, -1);
        deps(o, gemm(o, "qkv.wgrad", D->qkv_n, h, D->T), proj, ag);
        return;
    }
    /* MLP block */
    layer_ops_mem(o, "mlp.dropadd.bwd", E * (2 * D->dt + mask));
    if (L->no_mlp) { /* a MoE layer: the caller's MoE block backward ran first */
        layer_ops_mem(o, "ln2.bwd", 4 * E * D->dt);
    } else {
        if (L->sp && D->comm)
            layer_ops_comm(o, "fc2.ag.grad", COMM_ALL_GATHER, D->S, L->t);
        gemm(o, "fc2.dgrad", D->T, D->ffn_t, h);
        if (whole)
            gemm(o, "fc2.wgrad", D->ffn_t, h, D->T);
        if (L->swiglu && (L->fusion & LAYER_UNFUSED_BIAS_ACT)) { /* autograd through multiply, SiLU, chunk */
            layer_ops_mem(o, "swiglu.mul.bwd", 6 * D->T * D->ffn_t * D->dt);
            layer_ops_mem(o, "swiglu.silu.bwd", 3 * D->T * D->ffn_t * D->dt);
            layer_ops_mem(o, "swiglu.chunk.bwd", 4 * D->T * D->ffn_t * D->dt);
        } else {
            layer_ops_mem(o, L->swiglu ? "swiglu.bwd" : "gelu.bwd",
                          D->T * (L->swiglu ? 5 * D->ffn_t : 3 * D->ffn_t) * D->dt);
        }
        blk = o->n;
        colpar_bwd(L, D, o, whole, "fc1.ag.in", "fc1.dgrad", "fc1.ar", "fc1.rs", "fc1.wgrad", D->fc1_n);
        layer_ops_mem(o, "ln2.bwd", 4 * E * D->dt); /* grad in, input, residual grad in, grad out */
        join_last_two(o, blk);
    }
    /* attention block */
    layer_ops_mem(o, "attn.dropadd.bwd", E * (2 * D->dt + mask));
    if (L->sp && D->comm)
        layer_ops_comm(o, "proj.ag.grad", COMM_ALL_GATHER, D->S, L->t);
    gemm(o, "proj.dgrad", D->T, D->adt, h);
    if (whole)
        gemm(o, "proj.wgrad", D->adt, h, D->T);
    if (L->cp > 1) {
        layer_ops_mem(o, "attn.flash.bwd.pre", 2 * D->T * D->adt * D->dt + bh * L->s * 4);
        cp_attn(L, D, o, true);
    } else if (layer_is_flash(L)) { /* FlashAttention-2 backward: rowsum(dO o O), then five causal-half GEMMs */
        int64_t half = (L->s + 1) / 2;
        layer_ops_mem(o, "attn.flash.bwd.pre", 2 * D->T * D->adt * D->dt + bh * L->s * 4);
        layer_ops_gemm(o, "attn.flash.qk.re", L->s, half, D->dqk, bh);
        layer_ops_gemm(o, "attn.flash.dgrad_v", L->s, D->dv, half, bh);
        layer_ops_gemm(o, "attn.flash.dgrad_p", L->s, half, D->dv, bh);
        layer_ops_gemm(o, "attn.flash.dgrad_q", L->s, D->dqk, half, bh);
        layer_ops_gemm(o, "attn.flash.dgrad_k", L->s, D->dqk, half, bh);
    } else {
        layer_ops_gemm(o, "attn.av.dgrad_p", L->s, L->s, D->dv, bh);
        layer_ops_gemm(o, "attn.av.dgrad_v", L->s, D->dv, L->s, bh);
        if (!L->no_attn_dropout)
            layer_ops_mem(o, "attn.dropout.bwd", P * (2 * D->dt + 1));
        if (L->fusion & LAYER_UNFUSED_SOFTMAX) { /* PyTorch's softmax backward, then the masked gradient zeroed */
            layer_ops_mem(o, "attn.softmax.bwd", 3 * P * D->dt);
            layer_ops_mem(o, "attn.softmax.mask.bwd", 2 * P * D->dt);
        } else /* fused causal softmax: reads gradient and output on the lower triangle, writes every row */
            layer_ops_mem(o, "attn.softmax.bwd", (2 * layer_causal_tri(L->s) * bh + P) * D->dt);
        layer_ops_gemm(o, "attn.qk.dgrad_q", L->s, D->dqk, L->s, bh);
        layer_ops_gemm(o, "attn.qk.dgrad_k", L->s, D->dqk, L->s, bh);
    }
    if (L->mla.on) { /* the down-projections' input gradients end the block: no collective to join */
        layer_mla_qkv_bwd(L, o, true, whole);
        layer_ops_mem(o, "ln1.bwd", 4 * E * D->dt);
        return;
    }
    if (L->fusion & LAYER_UNFUSED_ROPE)
        layer_ops_mem(o, "rope.unfused.bwd", 10 * rope_elems(D) * D->dt);
    if (L->qk_norm) /* read the gradient and the saved input, write the input gradient */
        layer_ops_mem(o, "qk_norm.bwd", 3 * rope_elems(D) * D->dt);
    blk = o->n;
    colpar_bwd(L, D, o, whole, "qkv.ag.in", "qkv.dgrad", "qkv.ar", "qkv.rs", "qkv.wgrad", D->qkv_n);
    layer_ops_mem(o, "ln1.bwd", 4 * E * D->dt);
    join_last_two(o, blk);
}

/* The flash kernel under context parallelism (cp.h has the closed forms).
 * ca = all-to-all level, cr = ring level, s = this rank's tokens, S = s x cp
 * the full sequence. The attention sees s x ca queries of at/ca heads
 * (after the all-to-all) against the S keys, causally balanced: S/2 keys
 * per query on average, so its GEMMs are (s ca) x (S/2) x d, batch
 * b at/ca, two products forward (QK^T, attention.V), five backward;
 * 1/cp of the causal total on every rank. K,V of one ring block: kv =
 * 2 T g/t d bytes (T = s b; GQA: g query groups).
 *   p2p: cr-1 steps, each passing one block (backward: K,V and dK,dV,
 *        2 kv); the first step is exposed, the other cr-2 run alongside
 *        the first cr-1 of the cr blocks of attention work, the last block
 *        waits for them: exposed = step + max(0, (cr-2) step - (cr-1) block).
 *   all_gather: K,V all-gathered (cr kv bytes) before the kernel, exposed;
 *        the backward gathers them again and reduce-scatters dK,dV.
 *   a2a: all-to-all of q,k,v before (T (at + 2 gt) d bytes sent) and of the
 *        output after (T at d); the backward all-to-alls dO before and
 *        dq,dk,dv after. */
static void cp_attn(const layer_shape *L, const layer_dims *D, layer_ops *o, bool bwd)
{
    int ca = L->cp_a2a > 0 ? L->cp_a2a : 1, cr = L->cp_ring > 0 ? L->cp_ring : 1;
    int64_t q = L->s * ca, Sfull = L->s * L->cp, half = Sfull / 2;
    int64_t bh = L->b * D->at / ca, npass = bwd ? 5 : 2;
    int64_t kv = 2 * D->T * D->gt * D->d * D->dt;
    int64_t qkv_b = D->T * (D->at + 2 * D->gt) * D->d * D->dt, out_b = D->T * D->at * D->d * D->dt;
    int st_a2a = L->t, st_ring = L->t * ca;
    if (ca > 1)
        cp_comm(o, bwd ? "cp.a2a.dout" : "cp.a2a.qkv", COMM_ALL_TO_ALL, bwd ? out_b : qkv_b, ca, st_a2a);
    const char *gname = bwd ? "attn.flash.cp.bwd" : "attn.flash.cp";
    if (cr > 1 && !L->cp_gather) {
        int64_t step = bwd ? 2 * kv : kv;
        int first = cp_comm(o, bwd ? "cp.kv.p2p.bwd" : "cp.kv.p2p", COMM_P2P, step, cr, st_ring);
        int ring = -1;
        if (cr > 2)
            deps(o, ring = cp_comm(o, bwd ? "cp.kv.ring.bwd" : "cp.kv.ring", COMM_P2P, (cr - 2) * step, cr, st_ring),
                 first, -1);
        int g = layer_ops_gemm(o, gname, q, half / cr * (cr - 1), D->d, bh * npass);
        deps(o, g, first, -1);
        o->op[g].overlap = ring;
        deps(o,
             layer_ops_gemm(o, bwd ? "attn.flash.cp.bwd.last" : "attn.flash.cp.last", q, half / cr, D->d, bh * npass),
             g, ring);
    } else if (cr > 1) {
        cp_comm(o, bwd ? "cp.kv.ag.bwd" : "cp.kv.ag", COMM_ALL_GATHER, (int64_t)cr * kv, cr, st_ring);
        layer_ops_gemm(o, gname, q, half, D->d, bh * npass);
        if (bwd)
            cp_comm(o, "cp.dkv.rs", COMM_REDUCE_SCATTER, (int64_t)cr * kv, cr, st_ring);
    } else {
        layer_ops_gemm(o, gname, q, half, D->d, bh * npass);
    }
    if (ca > 1)
        cp_comm(o, bwd ? "cp.a2a.dqkv" : "cp.a2a.out", COMM_ALL_TO_ALL, bwd ? qkv_b : out_b, ca, st_a2a);
}

int64_t layer_fp8_cast_bytes(config_fp8_recipe r, int64_t elems)
{
    switch (r) {
    case FP8_RECIPE_TENSORWISE:
        return 6 * elems;
    case FP8_RECIPE_BLOCKWISE:
    case FP8_RECIPE_MXFP8:
        return 4 * elems + elems / 16;
    case FP8_RECIPE_DELAYED:
    default:
        return 4 * elems;
    }
}

/* The FP8 linear GEMMs and the cast each needs: a forward GEMM casts its
 * input (m x k), a dgrad GEMM its output gradient (its m x k: the incoming
 * gradient); the weight's cast is once per iteration (plan_build.c), the
 * wgrad GEMM reads the copies those casts wrote. amax: current scaling
 * (tensorwise) with sequence parallelism all-reduces the amax of the tensors
 * all-gathered across the tensor-parallel ranks (the column-parallel
 * layers' inputs, the row-parallel layers' output gradients) before their
 * cast, so every rank scales with the same amax (Transformer Engine's
 * Float8CurrentScaling quantizers with_amax_reduction over the TP group);
 * NULL: none. fwd: a forward GEMM, whose ".wgrad" GEMM is FP8 too.
 * Beyond the dense layer's four: MLA's down and up projections (TELinear /
 * TEColumnParallelLinear under fp8_autocast; the attention core stays
 * 16-bit as in the dense flash path), the routed experts' grouped GEMMs
 * (TEGroupedLinear: one cast per expert input, batch experts of m rows
 * each, no amax reduction: the dispatched tokens are not gathered over the
 * tensor-parallel group) and the shared experts (a dense MLP). The router
 * ("moe.router*") is not listed: Megatron-core's TopKRouter is a plain
 * torch GEMM outside Transformer Engine's modules, so it stays 16-bit (or
 * fp32 with --moe-router-dtype fp32). */
static const struct {
    const char *gemm, *cast, *amax;
    bool fwd;
} FP8_CASTS[] = {
    {"qkv", "qkv.fp8.cast", "qkv.fp8.amax.ar", true},
    {"proj", "proj.fp8.cast", NULL, true},
    {"fc1", "fc1.fp8.cast", "fc1.fp8.amax.ar", true},
    {"fc2", "fc2.fp8.cast", NULL, true},
    {"qkv.dgrad", "qkv.dgrad.fp8.cast", NULL, false},
    {"proj.dgrad", "proj.dgrad.fp8.cast", "proj.dgrad.fp8.amax.ar", false},
    {"fc1.dgrad", "fc1.dgrad.fp8.cast", NULL, false},
    {"fc2.dgrad", "fc2.dgrad.fp8.cast", "fc2.dgrad.fp8.amax.ar", false},
    {"mla.q_down", "mla.q_down.fp8.cast", NULL, true},
    {"mla.kv_down", "mla.kv_down.fp8.cast", NULL, true},
    {"mla.q_up", "mla.q_up.fp8.cast", "mla.q_up.fp8.amax.ar", true},
    {"mla.kv_up", "mla.kv_up.fp8.cast", "mla.kv_up.fp8.amax.ar", true},
    {"mla.q_proj", "mla.q_proj.fp8.cast", "mla.q_proj.fp8.amax.ar", true},
    {"mla.q_down.dgrad", "mla.q_down.dgrad.fp8.cast", NULL, false},
    {"mla.kv_down.dgrad", "mla.kv_down.dgrad.fp8.cast", NULL, false},
    {"mla.q_up.dgrad", "mla.q_up.dgrad.fp8.cast", NULL, false},
    {"mla.kv_up.dgrad", "mla.kv_up.dgrad.fp8.cast", NULL, false},
    {"mla.q_proj.dgrad", "mla.q_proj.dgrad.fp8.cast", NULL, false},
    {"moe.fc1", "moe.fc1.fp8.cast", NULL, true},
    {"moe.fc2", "moe.fc2.fp8.cast", NULL, true},
    {"moe.fc1.dgrad", "moe.fc1.dgrad.fp8.cast", NULL, false},
    {"moe.fc2.dgrad", "moe.fc2.dgrad.fp8.cast", NULL, false},
    {"moe.shared.fc1", "moe.shared.fc1.fp8.cast", "moe.shared.fc1.fp8.amax.ar", true},
    {"moe.shared.fc2", "moe.shared.fc2.fp8.cast", NULL, true},
    {"moe.shared.fc1.dgrad", "moe.shared.fc1.dgrad.fp8.cast", NULL, false},
    {"moe.shared.fc2.dgrad", "moe.shared.fc2.dgrad.fp8.cast", "moe.shared.fc2.dgrad.fp8.amax.ar", false},
};

int layer_fp8_ops(const layer_shape *L, layer_ops *o, int from, ts_err *err)
{
    if (L->fp8 == FP8_FORMAT_NONE)
        return TS_OK;
    int n = o->n;
    for (int i = from < 0 ? 0 : from; i < n; i++) {
        layer_op *op = &o->op[i];
        if (op->kind != LAYER_OP_GEMM || op->fp8)
            continue;
        for (size_t j = 0; j < sizeof FP8_CASTS / sizeof FP8_CASTS[0]; j++) {
            size_t gl = strlen(FP8_CASTS[j].gemm);
            bool wgrad =
                FP8_CASTS[j].fwd && strncmp(op->name, FP8_CASTS[j].gemm, gl) == 0 && !strcmp(op->name + gl, ".wgrad");
            if (wgrad) {
                op->fp8 = true;
                break;
            }
            if (strcmp(op->name, FP8_CASTS[j].gemm) != 0)
                continue;
            if (o->n + 2 > LAYER_MAX_OPS)
                return err_set(err, TS_EINVAL, "FP8 casts: %d ops listed, no room for %s's cast (at most %d ops)", o->n,
                               op->name, LAYER_MAX_OPS);
            op->fp8 = true;
            int64_t m = op->m, k = op->k;
            if (FP8_CASTS[j].amax && L->fp8_recipe == FP8_RECIPE_TENSORWISE && L->sp && L->t > 1)
                layer_ops_comm(o, FP8_CASTS[j].amax, COMM_ALL_REDUCE, LAYER_FP8_AMAX_BYTES,
                               L->t); /* the cast waits for it */
            layer_ops_mem(o, FP8_CASTS[j].cast, layer_fp8_cast_bytes(L->fp8_recipe, m * k * op->batch));
            break;
        }
    }
    return TS_OK;
}

/* --no-gradient-accumulation-fusion: the add of each weight gradient into
 * the main gradient, after the pass's other ops (the compute stream runs
 * them in order: the pass's time grows by theirs). */
static const struct {
    const char *gemm, *accum;
} GRAD_ACCUM[] = {
    {"qkv.wgrad", "qkv.wgrad.accum"}, {"proj.wgrad", "proj.wgrad.accum"},   {"fc1.wgrad", "fc1.wgrad.accum"},
    {"fc2.wgrad", "fc2.wgrad.accum"}, {"logit.wgrad", "logit.wgrad.accum"},
};

int64_t layer_grad_accum_bytes(const layer_shape *L, int64_t weight_elems)
{
    int64_t g = L->main_grad_bytes > 0 ? L->main_grad_bytes : 4;
    return weight_elems * (L->dtype_bytes + 2 * g);
}

static void grad_accum_ops(const layer_shape *L, layer_ops *o)
{
    if (!(L->fusion & LAYER_UNFUSED_GRAD_ACCUM))
        return;
    int n = o->n;
    for (int i = 0; i < n; i++) {
        const layer_op *op = &o->op[i];
        if (op->kind != LAYER_OP_GEMM)
            continue;
        for (size_t j = 0; j < sizeof GRAD_ACCUM / sizeof GRAD_ACCUM[0]; j++)
            if (!strcmp(op->name, GRAD_ACCUM[j].gemm)) { /* wgrad GEMM m x n = the weight's shape */
                layer_ops_mem(o, GRAD_ACCUM[j].accum, layer_grad_accum_bytes(L, op->m * op->n));
                break;
            }
    }
}

int layer_ops_build(const layer_shape *L, layer_pass pass, layer_ops *out, ts_err *err)
{
    int rc = layer_shape_check(L, err);
    if (rc != TS_OK)
        return rc;
    layer_dims D = layer_dims_of(L);
    out->n = 0;
    switch (pass) {
    case LAYER_PASS_F:
        layer_fwd(L, &D, out);
        break;
    case LAYER_PASS_B:
        layer_bwd(L, &D, out, true, true);
        break;
    case LAYER_PASS_I:
        layer_bwd(L, &D, out, true, false);
        break;
    case LAYER_PASS_W:
        layer_bwd(L, &D, out, false, true);
        break;
    case LAYER_PASS_R:
        if (L->recompute == RECOMPUTE_SELECTIVE)
            selective_fwd(L, &D, out);
        else if (L->recompute == RECOMPUTE_FULL)
            layer_fwd(L, &D, out);
        break;
    default:
        return err_set(err, TS_EINVAL, "layer_ops_build: unknown pass %d", (int)pass);
    }
    if ((rc = layer_fp8_ops(L, out, 0, err)) != TS_OK)
        return rc;
    grad_accum_ops(L, out);
    return TS_OK;
}

int layer_embedding_ops(const layer_shape *L, layer_pass pass, layer_ops *out, ts_err *err)
{
    int rc = layer_shape_check(L, err);
    if (rc != TS_OK)
        return rc;
    layer_dims D = layer_dims_of(L);
    int64_t E = D.Tl * L->h, full = D.T * L->h;
    out->n = 0;
    switch (pass) {
    case LAYER_PASS_F:
        /* vocabulary-parallel lookup: read word and position rows, write the sum */
        layer_ops_mem(out, "emb.lookup", 3 * full * D.dt);
        tp_reduce(L, &D, out, "emb.ar", "emb.rs");
        if (!L->no_hidden_dropout)
            layer_ops_mem(out, "emb.dropout", E * (2 * D.dt + 1));
        break;
    case LAYER_PASS_B:
    case LAYER_PASS_I:
    case LAYER_PASS_W:
        if (pass != LAYER_PASS_W) {
            if (!L->no_hidden_dropout)
                layer_ops_mem(out, "emb.dropout.bwd", E * (2 * D.dt + 1));
            if (L->sp && D.comm)
                layer_ops_comm(out, "emb.ag.grad", COMM_ALL_GATHER, D.S, L->t);
        }
        /* word scatter-add (read grad, read-modify-write rows) + position sum */
        if (pass != LAYER_PASS_I)
            layer_ops_mem(out, "emb.wgrad", 4 * full * D.dt);
        break;
    case LAYER_PASS_R:
        break;
    default:
        return err_set(err, TS_EINVAL, "layer_embedding_ops: unknown pass %d", (int)pass);
    }
    return TS_OK;
}

int layer_output_ops(const layer_shape *L, layer_pass pass, layer_ops *out, ts_err *err)
{
    int rc = layer_shape_check(L, err);
    if (rc != TS_OK)
        return rc;
    layer_dims D = layer_dims_of(L);
    int64_t h = L->h, E = D.Tl * h, logits = D.T * D.Vt;
    out->n = 0;
    switch (pass) {
    case LAYER_PASS_F:
        layer_ops_mem(out, "final.ln", 2 * E * D.dt);
        if (L->sp && D.comm)
            layer_ops_comm(out, "final.ag", COMM_ALL_GATHER, D.S, L->t);
        gemm(out, "logit", D.T, D.Vt, h);
        /* vocabulary-parallel cross-entropy: fp32 cast (read dt, write 4),
         * max (read 4), exp in place (read 4, write 4), sum (read 4) */
        if (L->fusion & LAYER_FUSED_CE) { /* cast with max, exp with sum: dt + 4, then 8 */
            layer_ops_mem(out, "ce", logits * (D.dt + 12));
            if (D.comm) { /* the target logit and the sum batched into one all-reduce */
                layer_ops_comm(out, "ce.max.ar", COMM_ALL_REDUCE, D.T * 4, L->t);
                layer_ops_comm(out, "ce.target_sum.ar", COMM_ALL_REDUCE, 2 * D.T * 4, L->t);
            }
        } else {
            layer_ops_mem(out, "ce", logits * (D.dt + 16));
            if (D.comm) {
                layer_ops_comm(out, "ce.max.ar", COMM_ALL_REDUCE, D.T * 4, L->t);
                layer_ops_comm(out, "ce.target.ar", COMM_ALL_REDUCE, D.T * 4, L->t);
                layer_ops_comm(out, "ce.sum.ar", COMM_ALL_REDUCE, D.T * 4, L->t);
            }
        }
        break;
    case LAYER_PASS_B:
    case LAYER_PASS_I: {
        /* softmax - one-hot in fp32 (read 4, write 4), cast (read 4, write dt) */
        layer_ops_mem(out, "ce.bwd", logits * (12 + D.dt));
        int blk = out->n;
        int prev = out->n - 1, ag = -1;
        if (pass == LAYER_PASS_B && L->sp && D.comm) {
            ag = layer_ops_comm(out, "final.ag.in", COMM_ALL_GATHER, D.S, L->t);
            deps(out, ag, prev, -1);
        }
        int dg = gemm(out, "logit.dgrad", D.T, h, D.Vt), c = -1;
        deps(out, dg, prev, -1);
        out->op[dg].overlap = ag;
        if (D.comm) {
            c = layer_ops_comm(out, L->sp ? "logit.rs" : "logit.ar", L->sp ? COMM_REDUCE_SCATTER : COMM_ALL_REDUCE, D.S,
                               L->t);
            deps(out, c, dg, -1);
        }
        if (pass == LAYER_PASS_B) {
            int wg = gemm(out, "logit.wgrad", D.Vt, h, D.T);
            deps(out, wg, dg, ag);
            out->op[wg].overlap = c;
        }
        layer_ops_mem(out, "final.ln.bwd", 3 * E * D.dt);
        join_last_two(out, blk);
        break;
    }
    case LAYER_PASS_W: {
        int ag = -1;
        if (L->sp && D.comm)
            deps(out, ag = layer_ops_comm(out, "final.ag.in", COMM_ALL_GATHER, D.S, L->t), -1, -1);
        int wg = gemm(out, "logit.wgrad", D.Vt, h, D.T);
        deps(out, wg, -1, ag);
    } break;
    case LAYER_PASS_R:
        break;
    default:
        return err_set(err, TS_EINVAL, "layer_output_ops: unknown pass %d", (int)pass);
    }
    grad_accum_ops(L, out);
    return TS_OK;
}

double layer_ops_flops(const layer_ops *ops)
{
    double f = 0;
    for (int i = 0; i < ops->n; i++)
        f += ops->op[i].flops;
    return f;
}

int64_t layer_ops_comm_bytes(const layer_ops *ops, commcost_coll coll)
{
    int64_t s = 0;
    for (int i = 0; i < ops->n; i++)
        if (ops->op[i].kind == LAYER_OP_COMM && ops->op[i].coll == coll)
            s += ops->op[i].bytes;
    return s;
}

const char *layer_pass_name(layer_pass p)
{
    static const char *const names[LAYER_PASS_COUNT] = {"F", "B", "I", "W", "R"};
    return (unsigned)p < LAYER_PASS_COUNT ? names[p] : "?";
}
