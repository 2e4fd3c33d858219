/* layer_saved — the tensors a layer, the embedding and the output layer
 * save for the backward, and the closed-form activation bytes (layer.h). */
#include "sim/model/layer.h"

#include <string.h>

#include "sim/model/layer_impl.h"

/* ---------------------------------------------------------------- saved tensors */

/* module: the CONFIG_RC_* module whose selective recomputation re-creates
 * the tensor (0: none does); mods: the shape's selective modules. */
static void save(layer_saved_list *l, const char *name, int64_t bytes, unsigned module, layer_free_when when,
                 config_recompute r, unsigned mods, bool is_input)
{
    layer_tensor *t = &l->t[l->n++];
    t->name = name;
    t->bytes = bytes;
    t->free_when = when;
    switch (r) {
    case RECOMPUTE_NONE:
        t->kept_after_f = true;
        break;
    case RECOMPUTE_SELECTIVE:
        t->kept_after_f = !(module & mods);
        break;
    case RECOMPUTE_FULL:
        t->kept_after_f = is_input;
        break;
    }
    t->by_recompute = !t->kept_after_f;
}

int64_t layer_fp8_saved_bytes(const layer_shape *L, int64_t elems)
{
    if (L->fp8 == FP8_FORMAT_NONE)
        return elems * L->dtype_bytes;
    bool block = L->fp8_recipe == FP8_RECIPE_BLOCKWISE || L->fp8_recipe == FP8_RECIPE_MXFP8;
    return elems + (block ? elems / 32 : 0);
}

int layer_saved_build(const layer_shape *L, layer_saved_list *out, ts_err *err)
{
    int rc = layer_shape_check(L, err);
    if (rc != TS_OK)
        return rc;
    layer_dims D = layer_dims_of(L);
    int64_t E = D.Tl * L->h, dt = D.dt, P = L->b * D.at * L->s * L->s;
    config_recompute r = L->recompute;
    unsigned m = layer_rc_modules_of(L);
    const unsigned CORE = CONFIG_RC_CORE_ATTN, MLP = CONFIG_RC_MLP, NORM = CONFIG_RC_LAYERNORM;
    layer_free_when I = LAYER_FREE_AFTER_I, W = LAYER_FREE_AFTER_W;
    out->n = 0;
    /* FP8: the linear layers keep the FP8 copy of their input the cast wrote
     * for the weight gradient (layer_fp8_saved_bytes), not the 16-bit one
     * (Transformer Engine); flash attention's backward still needs O in 16
     * bits, so proj keeps both. A MoE layer's block input (fc1.in) stays
     * 16-bit: Megatron-core's router GEMM (RouterGatingLinearFunction, a
     * torch GEMM) saves it for its weight gradient; the shared experts'
     * FP8 copy is the block's (moe_block_mem_of). */
    bool fp8 = L->fp8 != FP8_FORMAT_NONE;
    save(out, "ln1.in", E * dt, 0, I, r, m, true); /* the layer input */
    save(out, "qkv.in", layer_fp8_saved_bytes(L, E), NORM, W, r, m, false);
    unsigned UP = L->mla.on ? CONFIG_RC_MLA_UP_PROJ : 0; /* q, k, v: re-created by mla_up_proj */
    if (L->mla.on) {
        layer_mla_saved_bytes ms;
        layer_mla_saved(L, &ms);
        /* FP8: the q (down or whole) and kv down projections are two
         * modules, each keeping its own FP8 copy of the normed input (16
         * bits: one tensor both reference, qkv.in) */
        if (fp8)
            save(out, "mla.kv_down.in", layer_fp8_saved_bytes(L, E), NORM, W, r, m, false);
        if (ms.q_down_out > 0) {
            save(out, "mla.q_norm.in", ms.q_down_out, 0, I, r, m, false);
            save(out, "mla.q_up.in", ms.q_up_in, 0, W, r, m, false);
        }
        save(out, "mla.kv_norm.in", ms.kv_down_out, 0, I, r, m, false);
        save(out, "mla.kv_up.in", ms.kv_up_in, 0, W, r, m, false);
    }
    if (L->qk_norm) /* q and k before their norms (no recompute module re-creates them: layer.h) */
        save(out, "qk_norm.in", D.T * (D.at + D.gt) * D.d * dt, 0, I, r, m, false);
    save(out, "attn.q", D.T * D.at * D.dqk * dt, UP, I, r, m, false);
    save(out, "attn.k", D.T * D.gt * D.dqk * dt, UP, I, r, m, false);
    if (layer_is_flash(L)) { /* the log-sum-exp of each score row, fp32 */
        save(out, "attn.lse", L->b * D.at * L->s * 4, CORE, I, r, m, false);
    } else {
        save(out, "attn.softmax.out", P * dt, CORE, I, r, m, false);
        if (!L->no_attn_dropout) { /* without it, attention.V reads the softmax output saved above */
            save(out, "attn.dropout.mask", P, CORE, I, r, m, false);
            save(out, "attn.dropout.out", P * dt, CORE, I, r, m, false);
        }
    }
    save(out, "attn.v", D.T * D.gt * D.dv * dt, UP, I, r, m, false);
    if (fp8 && layer_is_flash(L)) {
        save(out, "proj.in", D.T * D.adt * dt, 0, I, r, m, false); /* the kernel's output O */
        save(out, "proj.in.fp8", layer_fp8_saved_bytes(L, D.T * D.adt), 0, W, r, m, false);
    } else { /* flash: also the kernel's output O */
        save(out, "proj.in", layer_fp8_saved_bytes(L, D.T * D.adt), 0, W, r, m, false);
    }
    if (!L->no_hidden_dropout)
        save(out, "attn.dropadd.mask", E, 0, I, r, m, false);
    save(out, "ln2.in", E * dt, 0, I, r, m, false);
    save(out, "fc1.in", L->no_mlp ? E * dt : layer_fp8_saved_bytes(L, E), NORM, W, r, m, false);
    if (!L->no_mlp) { /* a MoE layer's block saves its own (moe_block_saved_bytes) */
        save(out, "act.in", D.T * D.fc1_n * dt, MLP, I, r, m, false);
        if (L->swiglu && (L->fusion & LAYER_UNFUSED_BIAS_ACT)) /* the multiply's saved SiLU output */
            save(out, "act.silu.out", D.T * D.ffn_t * dt, MLP, I, r, m, false);
        save(out, "fc2.in", layer_fp8_saved_bytes(L, D.T * D.ffn_t), MLP, W, r, m, false);
    }
    if (!L->no_hidden_dropout)
        save(out, "mlp.dropadd.mask", E, 0, I, r, m, false);
    return TS_OK;
}

int layer_embedding_saved(const layer_shape *L, layer_saved_list *out, ts_err *err)
{
    int rc = layer_shape_check(L, err);
    if (rc != TS_OK)
        return rc;
    layer_dims D = layer_dims_of(L);
    out->n = 0;
    if (!L->no_hidden_dropout)
        save(out, "emb.dropout.mask", D.Tl * L->h, 0, LAYER_FREE_AFTER_I, RECOMPUTE_NONE, 0, false);
    return TS_OK;
}

int layer_output_saved(const layer_shape *L, layer_saved_list *out, ts_err *err)
{
    int rc = layer_shape_check(L, err);
    if (rc != TS_OK)
        return rc;
    layer_dims D = layer_dims_of(L);
    int64_t E = D.Tl * L->h;
    out->n = 0;
    save(out, "final.ln.in", E * D.dt, 0, LAYER_FREE_AFTER_I, RECOMPUTE_NONE, 0, false);
    save(out, "logit.in", E * D.dt, 0, LAYER_FREE_AFTER_W, RECOMPUTE_NONE, 0, false);
    save(out, "ce.logits", D.T * D.Vt * 4, 0, LAYER_FREE_AFTER_I, RECOMPUTE_NONE, 0, false);
    return TS_OK;
}

int64_t layer_saved_kept_bytes(const layer_saved_list *l)
{
    int64_t s = 0;
    for (int i = 0; i < l->n; i++)
        if (l->t[i].kept_after_f)
            s += l->t[i].bytes;
    return s;
}

/* The op of list o named stem + suffix (GEMMs), or NULL. */
static const layer_op *gemm_named(const layer_ops *o, const char *stem, size_t n, const char *suffix)
{
    for (int j = 0; j < o->n; j++) {
        const layer_op *op = &o->op[j];
        if (op->kind == LAYER_OP_GEMM && !strncmp(op->name, stem, n) && !strcmp(op->name + n, suffix))
            return op;
    }
    return NULL;
}

int64_t layer_wgrad_stash_bytes(const layer_shape *L, const layer_ops *i, const layer_ops *w)
{
    layer_dims D = layer_dims_of(L);
    int64_t s = 0;
    for (int j = 0; j < w->n; j++) {
        const layer_op *op = &w->op[j];
        size_t nl = strlen(op->name);
        if (op->kind == LAYER_OP_GEMM && nl > 6 && !strcmp(op->name + nl - 6, ".wgrad")) {
            const layer_op *dg = gemm_named(i, op->name, nl - 6, ".dgrad");
            int64_t el =
                dg ? dg->m * dg->k * (dg->batch > 0 ? dg->batch : 1) : op->k * op->m * (op->batch > 0 ? op->batch : 1);
            s += el * (op->fp8 ? 1 : D.dt);
        } else if (!strcmp(op->name, "emb.wgrad")) {
            s += D.T * L->h * D.dt;
        }
    }
    return s;
}

int64_t layer_korthikanti_bytes(const layer_shape *L)
{
    int64_t sbh = L->s * L->b * L->h, as2b = L->a * L->s * L->s * L->b, t = L->t;
    switch (L->recompute) {
    case RECOMPUTE_FULL:
        return L->sp ? 2 * sbh / t : 2 * sbh;
    case RECOMPUTE_SELECTIVE:
        return L->sp ? 34 * sbh / t : 10 * sbh + 24 * sbh / t;
    case RECOMPUTE_NONE:
    default:
        if (L->sp)
            return (34 * sbh + 5 * as2b) / t;
        return 10 * sbh + 24 * sbh / t + 5 * as2b / t;
    }
}

int64_t layer_flash_bytes(const layer_shape *L)
{
    int64_t sbh = L->s * L->b * L->h, asb = L->a * L->s * L->b, t = L->t;
    if (L->sp)
        return (34 * sbh + 4 * asb) / t;
    return 10 * sbh + 24 * sbh / t + 4 * asb / t;
}
