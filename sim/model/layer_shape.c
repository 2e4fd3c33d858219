/* layer_shape — a layer shape from a resolved config and its validation
 * (layer.h: layer_shape_check, layer_shape_check_size, layer_fusion_of,
 * layer_shape_from_config). */
#include "sim/model/layer.h"

#include <math.h>
#include <string.h>

#include "sim/model/layer_impl.h"
#include "sim/util/ckd.h"

/* ---------------------------------------------------------------- shape */

int layer_shape_check(const layer_shape *L, ts_err *err)
{
    if (L->h < 1 || L->a < 1 || L->g < 1 || L->ffn < 1 || L->s < 1 || L->b < 1 || L->V < 1 || L->t < 1)
        return err_set(err, TS_EINVAL,
                       "layer shape: hidden %lld, heads %lld, query groups %lld, ffn %lld, "
                       "seq %lld, micro-batch %lld, vocab %lld, tp %d: all must be >= 1",
                       (long long)L->h, (long long)L->a, (long long)L->g, (long long)L->ffn, (long long)L->s,
                       (long long)L->b, (long long)L->V, L->t);
    if (L->dtype_bytes != 2 && L->dtype_bytes != 4)
        return err_set(err, TS_EINVAL, "layer shape: dtype bytes %d (expected 2 or 4)", L->dtype_bytes);
    if ((int)L->fp8 < FP8_FORMAT_NONE || (int)L->fp8 > FP8_FORMAT_HYBRID || (int)L->fp8_recipe < FP8_RECIPE_DELAYED ||
        (int)L->fp8_recipe > FP8_RECIPE_MXFP8)
        return err_set(err, TS_EINVAL, "layer shape: FP8 format %d (expected 0..2), recipe %d (expected 0..3)",
                       (int)L->fp8, (int)L->fp8_recipe);
    if (L->d == 0 && L->h % L->a)
        return err_set(err, TS_EINVAL, "--hidden-size %lld is not a multiple of --num-attention-heads %lld",
                       (long long)L->h, (long long)L->a);
    if (L->a % L->g)
        return err_set(err, TS_EINVAL, "--num-attention-heads %lld is not a multiple of --num-query-groups %lld",
                       (long long)L->a, (long long)L->g);
    if (L->a % L->t || L->g % L->t)
        return err_set(err, TS_EINVAL,
                       "--tensor-model-parallel-size %d must divide --num-attention-heads "
                       "%lld and --num-query-groups %lld",
                       L->t, (long long)L->a, (long long)L->g);
    if (L->ffn % L->t)
        return err_set(err, TS_EINVAL, "--tensor-model-parallel-size %d must divide --ffn-hidden-size %lld", L->t,
                       (long long)L->ffn);
    if (L->V % L->t)
        return err_set(err, TS_EINVAL, "--tensor-model-parallel-size %d must divide --padded-vocab-size %lld", L->t,
                       (long long)L->V);
    if (L->sp && (L->s * L->b) % L->t)
        return err_set(err, TS_EINVAL,
                       "--sequence-parallel: tokens per micro-batch %lld (seq x micro-batch) "
                       "are not a multiple of --tensor-model-parallel-size %d",
                       (long long)L->s * L->b, L->t);
    if ((int)L->recompute < RECOMPUTE_NONE || (int)L->recompute > RECOMPUTE_FULL)
        return err_set(err, TS_EINVAL, "layer shape: unknown recompute mode %d", (int)L->recompute);
    if ((int)L->attn < ATTN_BACKEND_UNFUSED || (int)L->attn >= ATTN_BACKEND_AUTO)
        return err_set(err, TS_EINVAL,
                       "layer shape: attention backend %d (expected unfused, flash, fused or local; auto is "
                       "resolved by config_resolve)",
                       (int)L->attn);
    if (L->fusion & ~(LAYER_UNFUSED_BIAS_ACT | LAYER_UNFUSED_BIAS_DROPOUT | LAYER_UNFUSED_SOFTMAX |
                      LAYER_UNFUSED_GRAD_ACCUM | LAYER_UNFUSED_ROPE | LAYER_FUSED_CE))
        return err_set(err, TS_EINVAL, "layer shape: fusion bits 0x%x (expected LAYER_UNFUSED_* / LAYER_FUSED_CE)",
                       L->fusion);
    if (L->main_grad_bytes != 0 && L->main_grad_bytes != 2 && L->main_grad_bytes != 4)
        return err_set(err, TS_EINVAL, "layer shape: main gradient bytes %d (expected 2 or 4; 0 = 4)",
                       L->main_grad_bytes);
    /* moe_act and moe are the MoE block's (moe.h): the dense ops ignore them; mla_up_proj needs MLA */
    unsigned rc_ok = CONFIG_RC_CORE_ATTN | CONFIG_RC_MLP | CONFIG_RC_LAYERNORM | CONFIG_RC_MOE_ACT | CONFIG_RC_MOE;
    if (L->rc_modules & ~(rc_ok | (L->mla.on ? CONFIG_RC_MLA_UP_PROJ : 0u)))
        return err_set(err, TS_EINVAL,
                       "layer shape: recompute modules 0x%x: only core_attn, mlp, layernorm, moe, moe_act and (with "
                       "multi-latent attention) mla_up_proj are modelled (shared_experts is not)",
                       L->rc_modules);
    int rc = layer_mla_check(L, err);
    if (rc != TS_OK)
        return rc;
    if (L->cp > 1) {
        int ca = L->cp_a2a > 0 ? L->cp_a2a : 1, cr = L->cp_ring > 0 ? L->cp_ring : 1;
        if ((int64_t)ca * cr != L->cp)
            return err_set(err, TS_EINVAL, "layer shape: context-parallel levels %d x %d != --context-parallel-size %d",
                           ca, cr, L->cp);
        if (!config_attn_is_flash(L->attn))
            return err_set(err, TS_EINVAL,
                           "--context-parallel-size %d needs --attention-backend flash or fused (Transformer "
                           "Engine's context-parallel attention)",
                           L->cp);
        if ((L->a / L->t) % ca || (L->g / L->t) % ca)
            return err_set(err, TS_EINVAL,
                           "--cp-comm-type a2a: the heads (%lld) and query groups (%lld) of a tensor-parallel rank "
                           "must be divisible by the all-to-all size %d",
                           (long long)(L->a / L->t), (long long)(L->g / L->t), ca);
    }
    return layer_shape_check_size(L, err);
}

/* The sizes of one layer, in double (exact to 2^53, then within a relative
 * 1e-16): every int64 product of this module is a term of one of these sums,
 * so when they stay within CKD_MAX_BYTES (2^62) no int64 product overflows.
 * Bytes of a 2-byte element; fp32 doubles them. */
int layer_shape_check_size(const layer_shape *L, ts_err *err)
{
    double s = (double)L->s, b = (double)L->b, h = (double)L->h, a = (double)L->a, dt = L->dtype_bytes;
    double d = L->d > 0 ? (double)L->d : h / a, g = (double)L->g;
    double wide = fmax(fmax(h, a * d + 2 * g * d), fmax((L->swiglu ? 2.0 : 1.0) * (double)L->ffn, (double)L->V));
    if (L->mla.on) /* the up-projections' outputs */
        wide = fmax(wide, a * (double)(2 * L->mla.d_qk + L->mla.d_rope + L->mla.d_v));
    /* Korthikanti et al.'s activations of one layer (34 sbh + 5 a s^2 b bytes at 2 bytes
     * an element, no tensor parallelism: it bounds every rank's share, the attention
     * scores included) and the widest tensor of the layer (fp32 logits and their
     * gradient), in bytes. */
    double act = (34.0 * s * b * h + 5.0 * a * s * s * b) * dt / 2;
    double widest = s * b * wide * 4 * 2;
    double worst = fmax(act, widest);
    if (!(worst <= (double)CKD_MAX_BYTES))
        return err_set(err, TS_EINVAL,
                       "--seq-length %lld, --micro-batch-size %lld, --num-attention-heads %lld, "
                       "--hidden-size %lld: one layer's activations would take %.3g bytes, past 2^62 "
                       "(%.3g, the int64 bytes the simulator counts in); valid shapes keep "
                       "34 s b h + 5 a s^2 b bytes (twice that in fp32) and the widest tensor within "
                       "2^62: reduce the sequence length or the micro-batch size",
                       (long long)L->s, (long long)L->b, (long long)L->a, (long long)L->h, worst,
                       (double)CKD_MAX_BYTES);
    return TS_OK;
}

unsigned layer_fusion_of(const model_config *m)
{
    unsigned f = 0;
    bool rope = m->position_embedding == POS_ROPE || m->position_embedding == POS_YARN;
    /* Megatron-LM turns bias-GeLU fusion off without biases (arguments.py):
     * the unfused path is then the GeLU alone, the fused kernel's bytes */
    if (m->swiglu ? m->no_bias_swiglu_fusion : m->no_bias_gelu_fusion && m->add_bias_linear)
        f |= LAYER_UNFUSED_BIAS_ACT;
    if (m->no_bias_dropout_fusion)
        f |= LAYER_UNFUSED_BIAS_DROPOUT;
    if (m->no_masked_softmax_fusion && !config_attn_is_flash(m->attention_backend))
        f |= LAYER_UNFUSED_SOFTMAX;
    if (m->no_gradient_accumulation_fusion)
        f |= LAYER_UNFUSED_GRAD_ACCUM;
    if (m->no_rope_fusion && rope)
        f |= LAYER_UNFUSED_ROPE;
    if (m->cross_entropy_loss_fusion)
        f |= LAYER_FUSED_CE;
    return f;
}

int layer_shape_from_config(const config *c, layer_shape *out, ts_err *err)
{
    layer_shape L;
    memset(&L, 0, sizeof L);
    L.h = c->model.hidden_size;
    L.a = c->model.num_attention_heads;
    L.g = c->model.num_query_groups > 0 ? c->model.num_query_groups : c->model.num_attention_heads;
    L.d = config_head_size(&c->model);
    L.no_attn_dropout = c->model.attention_dropout <= 0;
    L.no_hidden_dropout = c->model.hidden_dropout <= 0;
    L.ffn = c->model.ffn_hidden_size;
    L.swiglu = c->model.swiglu;
    L.s = c->model.seq_length;
    L.b = c->par.micro_batch_size;
    L.V = c->model.padded_vocab_size;
    L.t = c->par.tp;
    L.sp = c->par.sequence_parallel && c->par.tp > 1;
    L.dtype_bytes = c->model.precision == PREC_FP32 ? 4 : 2;
    L.recompute = c->par.recompute;
    L.attn = c->model.attention_backend;
    L.rc_modules = c->par.recompute_modules;
    L.fp8 = c->model.fp8_format;
    L.fp8_recipe = c->model.fp8_recipe;
    layer_mla_from_config(&c->moe, &L);             /* MLA: a key and a value per head (layer_mla_check: g = a) */
    L.qk_norm = c->model.qk_layernorm && !L.mla.on; /* MLA: its q and kv norms (layer.h) */
    L.bias = c->model.add_bias_linear;
    L.main_grad_bytes = c->model.precision == PREC_FP16 ? 2 : 4;
    L.fusion = layer_fusion_of(&c->model);
    int cp = config_cp(c);
    if (cp > 1) { /* the rank's s/cp tokens (config_resolve checked seq % 2cp) */
        L.s = c->model.seq_length / cp;
        L.cp = cp;
        L.cp_a2a = c->par.cp_comm == CP_COMM_A2A ? cp : c->par.cp_comm == CP_COMM_A2A_P2P ? c->par.cp_a2a : 1;
        L.cp_ring = cp / L.cp_a2a;
        L.cp_gather = c->par.cp_comm == CP_COMM_ALL_GATHER;
    }
    int rc = layer_shape_check(&L, err);
    if (rc == TS_OK)
        *out = L;
    return rc;
}
