/* flops — FLOPs per iteration and parameter counts (flops.h). */
#include "sim/model/flops.h"

/* Query groups, 0 meaning "no GQA". */
static int64_t groups(const model_config *m)
{
    return m->num_query_groups > 0 ? m->num_query_groups : m->num_attention_heads;
}

/* Attention width a*d: the query heads times the head size (= h unless
 * --kv-channels says otherwise). */
static int64_t attn_width(const model_config *m)
{
    return (int64_t)m->num_attention_heads * config_head_size(m);
}

/* Output columns of the QKV GEMM: a*d + 2*g*d. */
static int64_t qkv_cols(const model_config *m)
{
    return attn_width(m) + 2 * groups(m) * config_head_size(m);
}

/* Parameters of one normalization layer: LayerNorm's weight and bias, or
 * RMSNorm's weight. */
static int64_t norm_params(const model_config *m)
{
    return (m->normalization == NORM_RMSNORM ? 1 : 2) * (int64_t)m->hidden_size;
}

int64_t flops_qk_norm_params(const model_config *m)
{
    return m->qk_layernorm ? 2 * (m->normalization == NORM_RMSNORM ? 1 : 2) * (int64_t)config_head_size(m) : 0;
}

/* Rows of the learned position table (0 for rotary or no positions). */
static int64_t position_rows(const model_config *m)
{
    if (m->position_embedding != POS_LEARNED_ABSOLUTE)
        return 0;
    return m->max_position_embeddings > 0 ? m->max_position_embeddings : m->seq_length;
}

/* Output columns of FC1: ffn, or 2*ffn (gate and up) with SwiGLU. */
static int64_t fc1_cols(const model_config *m)
{
    return (m->swiglu ? 2 : 1) * (int64_t)m->ffn_hidden_size;
}

double flops_attn_core_fwd_per_seq(const model_config *m)
{
    double s = m->seq_length, ad = (double)attn_width(m);
    /* QK^T: a heads of s x s x d; attention.V the same: 2*2*s*s*a*d */
    return 4.0 * s * s * ad;
}

double flops_attn_core_fwd_causal_per_seq(const model_config *m)
{
    int64_t half_rows = ((int64_t)m->seq_length + 1) / 2; /* ceil(s/2): the kernel's lower half */
    double s = m->seq_length, half = (double)half_rows, ad = (double)attn_width(m);
    return 4.0 * s * half * ad;
}

/* FC1 and FC2 forward flops per sequence (what mlp recomputation re-runs). */
static double mlp_fwd_per_seq(const model_config *m)
{
    double s = m->seq_length, h = m->hidden_size, ffn = m->ffn_hidden_size;
    return 2.0 * s * h * (double)fc1_cols(m) + 2.0 * s * ffn * h;
}

double flops_layer_fwd_per_seq(const model_config *m)
{
    double s = m->seq_length, h = m->hidden_size, ffn = m->ffn_hidden_size;
    double qkv = 2.0 * s * h * (double)qkv_cols(m);
    double proj = 2.0 * s * (double)attn_width(m) * h;
    double mlp = 2.0 * s * h * (double)fc1_cols(m) + 2.0 * s * ffn * h;
    return qkv + flops_attn_core_fwd_per_seq(m) + proj + mlp;
}

double flops_logit_fwd_per_seq(const model_config *m)
{
    return 2.0 * m->seq_length * (double)m->hidden_size * (double)m->padded_vocab_size;
}

double flops_model_per_iter(const model_config *m, int64_t global_batch)
{
    double per_seq = m->num_layers * flops_layer_fwd_per_seq(m) + flops_logit_fwd_per_seq(m);
    return 3.0 * per_seq * (double)global_batch; /* backward = 2 x forward */
}

double flops_model_per_iter_causal(const model_config *m, int64_t global_batch)
{
    double diff = flops_attn_core_fwd_per_seq(m) - flops_attn_core_fwd_causal_per_seq(m);
    return flops_model_per_iter(m, global_batch) - 3.0 * m->num_layers * diff * (double)global_batch;
}

double flops_hardware_per_iter_modules(const model_config *m, int64_t global_batch, config_recompute r,
                                       unsigned modules, int recompute_layers)
{
    bool flash = config_attn_is_flash(m->attention_backend);
    double full = flops_attn_core_fwd_per_seq(m), causal = flops_attn_core_fwd_causal_per_seq(m);
    double core = flash ? causal : full;                         /* attention forward as run */
    double layer_fwd = flops_layer_fwd_per_seq(m) - full + core; /* a layer's forward as run */
    double layer = 3.0 * (layer_fwd - core) + (flash ? 3.5 : 3.0) * core;
    double extra = 0;
    unsigned mods = modules ? modules : CONFIG_RC_DEFAULT;
    if (r == RECOMPUTE_SELECTIVE)
        extra =
            m->num_layers * ((mods & CONFIG_RC_CORE_ATTN ? core : 0) + (mods & CONFIG_RC_MLP ? mlp_fwd_per_seq(m) : 0));
    else if (r == RECOMPUTE_FULL)
        extra = recompute_layers * layer_fwd;
    double per_seq = m->num_layers * layer + 3.0 * flops_logit_fwd_per_seq(m) + extra;
    return per_seq * (double)global_batch;
}

double flops_hardware_per_iter(const model_config *m, int64_t global_batch, config_recompute r, int recompute_layers)
{
    return flops_hardware_per_iter_modules(m, global_batch, r, 0, recompute_layers);
}

/* ---------------------------------------------------------------- closed forms */

static double base(int64_t B, int64_t s, int64_t l, int64_t h)
{
    return (double)B * (double)s * (double)l * (double)h * (double)h;
}

double flops_closed_model(int64_t B, int64_t s, int64_t l, int64_t h, int64_t V)
{
    return 72.0 * base(B, s, l, h) * (1.0 + (double)s / (6.0 * h) + (double)V / (12.0 * (double)l * (double)h));
}

double flops_closed_full_recompute(int64_t B, int64_t s, int64_t l, int64_t h, int64_t V)
{
    return 96.0 * base(B, s, l, h) * (1.0 + (double)s / (6.0 * h) + (double)V / (16.0 * (double)l * (double)h));
}

double flops_closed_selective_published(int64_t B, int64_t s, int64_t l, int64_t h, int64_t V)
{
    return 72.0 * base(B, s, l, h) * (1.0 + (double)s / (3.0 * h) + (double)V / (12.0 * (double)l * (double)h));
}

double flops_closed_selective_ops(int64_t B, int64_t s, int64_t l, int64_t h, int64_t V)
{
    return 72.0 * base(B, s, l, h) * (1.0 + 2.0 * (double)s / (9.0 * h) + (double)V / (12.0 * (double)l * (double)h));
}

double flops_closed_params(int64_t l, int64_t h, int64_t V, int64_t s)
{
    double dl = (double)l, dh = (double)h;
    return 12.0 * dl * dh * dh * (1.0 + 13.0 / (12.0 * dh) + (double)(V + s) / (12.0 * dl * dh));
}

/* ---------------------------------------------------------------- parameters */

void flops_param_count(const model_config *m, flops_params *out)
{
    int64_t h = m->hidden_size, ffn = m->ffn_hidden_size, ad = attn_width(m);
    int64_t qkv = qkv_cols(m), fc1 = fc1_cols(m), bias = m->add_bias_linear ? 1 : 0;
    out->per_layer = (h * qkv + bias * qkv)   /* QKV weight + bias */
                     + (ad * h + bias * h)    /* projection */
                     + (h * fc1 + bias * fc1) /* FC1 */
                     + (ffn * h + bias * h)   /* FC2 */
                     + 2 * norm_params(m)     /* two LayerNorms / RMSNorms */
                     + flops_qk_norm_params(m);
    out->embedding = (int64_t)m->padded_vocab_size * h + position_rows(m) * h;
    out->final_norm = norm_params(m);
    out->output = m->untie_embeddings ? (int64_t)m->padded_vocab_size * h : 0;
    out->total = (int64_t)m->num_layers * out->per_layer + out->embedding + out->final_norm + out->output;
    out->total_no_embedding = out->total - out->embedding - out->output;
}

int64_t flops_params_stage(const model_config *m, int t, int num_layers, int with_embedding, int with_output)
{
    int64_t h = m->hidden_size, ffn = m->ffn_hidden_size, V = m->padded_vocab_size, ad = attn_width(m);
    int64_t qkv = qkv_cols(m), fc1 = fc1_cols(m), bias = m->add_bias_linear ? 1 : 0;
    if (t < 1)
        t = 1;
    int64_t layer = (h * qkv + bias * qkv) / t   /* column-parallel: weight and bias split */
                    + ad * h / t + bias * h      /* row-parallel: weight split, bias replicated */
                    + (h * fc1 + bias * fc1) / t /* column-parallel */
                    + ffn * h / t + bias * h     /* row-parallel */
                    + 2 * norm_params(m)         /* norms, replicated */
                    + flops_qk_norm_params(m);
    int64_t p = (int64_t)num_layers * layer;
    if (with_embedding)
        p += V * h / t + position_rows(m) * h;
    if (with_output) {
        p += norm_params(m);
        if (m->untie_embeddings || !with_embedding)
            p += V * h / t; /* the output weight: its own, or the tied copy of the word embedding */
    }
    return p;
}
