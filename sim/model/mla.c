/* mla — multi-latent attention's closed forms and ops (mla.h). */
#include "sim/model/mla.h"

#include <string.h>

#include "sim/model/flops.h"

/* ---------------------------------------------------------------- closed forms */

/* The sizes of e's MLA in int64. */
typedef struct {
    int64_t h, a, ql, kvl, dqk, dr, dv, q; /* q = d_qk + d_r */
} mla_sizes;

static mla_sizes sizes_of(const model_config *m, const moe_config *e)
{
    mla_sizes z = {m->hidden_size,     m->num_attention_heads,
                   e->mla_q_lora_rank, e->mla_kv_lora_rank,
                   e->mla_qk_head_dim, e->mla_qk_pos_emb_head_dim,
                   e->mla_v_head_dim,  (int64_t)e->mla_qk_head_dim + e->mla_qk_pos_emb_head_dim};
    return z;
}

int64_t mla_attn_params(const model_config *m, const moe_config *e)
{
    return mla_attn_rank_params(m, e, 1);
}

int64_t mla_attn_rank_params(const model_config *m, const moe_config *e, int t)
{
    mla_sizes z = sizes_of(m, e);
    int64_t bias = m->add_bias_linear ? 1 : 0, nw = m->normalization == NORM_RMSNORM ? 1 : 2;
    if (t < 1)
        t = 1;
    int64_t up_q = z.a * z.q, up_kv = z.a * (z.dqk + z.dv), down_kv = z.kvl + z.dr;
    int64_t whole = z.h * down_kv + bias * down_kv + nw * z.kvl + bias * z.h; /* kv down, its norm, proj bias */
    int64_t split = (z.kvl * up_kv + bias * up_kv) / t + z.a * z.dv * z.h / t;
    if (z.ql > 0) {
        whole += z.h * z.ql + bias * z.ql + nw * z.ql;
        split += (z.ql * up_q + bias * up_q) / t;
    } else {
        split += (z.h * up_q + bias * up_q) / t;
    }
    return whole + split;
}

int64_t mla_layer_params_delta(const model_config *m, const moe_config *e, int t)
{
    if (!e->mla)
        return 0;
    if (t < 1)
        t = 1;
    int64_t h = m->hidden_size, d = config_head_size(m), bias = m->add_bias_linear ? 1 : 0;
    int64_t g = m->num_query_groups > 0 ? m->num_query_groups : m->num_attention_heads;
    int64_t ad = (int64_t)m->num_attention_heads * d, qkv = ad + 2 * g * d;
    /* flops_params_stage's terms (with --qk-layernorm its q/k norms: MLA's own norms replace them) */
    int64_t dense = (h * qkv + bias * qkv) / t + ad * h / t + bias * h + flops_qk_norm_params(m);
    return mla_attn_rank_params(m, e, t) - dense;
}

double mla_proj_fwd_flops_per_token(const model_config *m, const moe_config *e)
{
    mla_sizes z = sizes_of(m, e);
    double q = z.ql > 0 ? (double)z.h * z.ql + (double)z.ql * z.a * z.q : (double)z.h * z.a * z.q;
    double kv = (double)z.h * (z.kvl + z.dr) + (double)z.kvl * z.a * (z.dqk + z.dv);
    return 2.0 * (q + kv + (double)z.a * z.dv * z.h);
}

double mla_core_fwd_flops_per_seq(const model_config *m, const moe_config *e, bool causal)
{
    mla_sizes z = sizes_of(m, e);
    int64_t half = ((int64_t)m->seq_length + 1) / 2; /* ceil(s/2): the causal kernel's keys */
    double s = m->seq_length, keys = causal ? (double)half : s;
    return 2.0 * s * keys * (double)z.a * (double)(z.q + z.dv);
}

double mla_model_flops_delta(const model_config *m, const moe_config *e, int64_t global_batch, bool causal)
{
    if (!e->mla)
        return 0;
    double s = m->seq_length, h = m->hidden_size, d = config_head_size(m);
    double g = m->num_query_groups > 0 ? m->num_query_groups : m->num_attention_heads;
    int64_t half = ((int64_t)m->seq_length + 1) / 2;
    double ad = m->num_attention_heads * d, keys = causal ? (double)half : s;
    /* the dense attention of flops.h: QKV, QK^T and attention.V, projection */
    double dense = 2.0 * s * h * (ad + 2 * g * d) + 4.0 * s * keys * ad + 2.0 * s * ad * h;
    double mla = s * mla_proj_fwd_flops_per_token(m, e) + mla_core_fwd_flops_per_seq(m, e, causal);
    return 3.0 * m->num_layers * (mla - dense) * (double)global_batch;
}
