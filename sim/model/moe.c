/* moe — closed forms of a mixture-of-experts model (moe.h). */
#include "sim/model/moe.h"

#include <math.h>

#include "sim/model/flops.h"

bool moe_layer_is_moe(const moe_config *e, int layer)
{
    if (e->num_experts <= 0 || layer < e->first_dense_layers)
        return false;
    int f = e->layer_freq > 0 ? e->layer_freq : 1;
    return (layer - e->first_dense_layers) % f == 0;
}

/* An MLP of FFN size f with the model's activation and biases. */
static int64_t mlp_params(const model_config *m, int64_t f)
{
    int64_t h = m->hidden_size, fc1 = (m->swiglu ? 2 : 1) * f, bias = m->add_bias_linear ? 1 : 0;
    return h * fc1 + bias * fc1 + f * h + bias * h;
}

/* Multi-latent attention's parameters (moe.h). */
static int64_t mla_params(const model_config *m, const moe_config *e)
{
    int64_t h = m->hidden_size, a = m->num_attention_heads, bias = m->add_bias_linear ? 1 : 0;
    int64_t nw = m->normalization == NORM_RMSNORM ? 1 : 2; /* a norm's parameters per element */
    int64_t qk = (int64_t)e->mla_qk_head_dim + e->mla_qk_pos_emb_head_dim, ql = e->mla_q_lora_rank;
    int64_t kvl = e->mla_kv_lora_rank, dv = e->mla_v_head_dim;
    int64_t q = ql > 0 ? h * ql + bias * ql + nw * ql + ql * a * qk + bias * a * qk : h * a * qk + bias * a * qk;
    int64_t kv_down = kvl + e->mla_qk_pos_emb_head_dim;
    int64_t kv = h * kv_down + bias * kv_down + nw * kvl + kvl * a * ((int64_t)e->mla_qk_head_dim + dv) +
                 bias * a * ((int64_t)e->mla_qk_head_dim + dv);
    return q + kv + a * dv * h + bias * h;
}

void moe_param_count(const model_config *m, const moe_config *e, moe_params *out)
{
    flops_params fp;
    flops_param_count(m, &fp);
    int64_t nw = m->normalization == NORM_RMSNORM ? 1 : 2;
    int64_t norms = 2 * nw * m->hidden_size;
    out->dense_mlp = mlp_params(m, m->ffn_hidden_size);
    out->attention = e->mla ? mla_params(m, e) : fp.per_layer - out->dense_mlp - norms;
    int n = e->num_experts > 0 ? e->num_experts : 0;
    int64_t fe = e->ffn_hidden_size > 0 ? e->ffn_hidden_size : m->ffn_hidden_size;
    out->expert = n > 0 ? mlp_params(m, fe) : 0;
    out->shared = n > 0 && e->shared_ffn_hidden_size > 0 ? mlp_params(m, e->shared_ffn_hidden_size) : 0;
    out->router = (int64_t)m->hidden_size * n;
    out->moe_layers = 0;
    for (int i = 0; i < m->num_layers; i++)
        out->moe_layers += moe_layer_is_moe(e, i);
    int64_t dense_layers = m->num_layers - out->moe_layers;
    int64_t moe_common = out->attention + norms + out->router + out->shared;
    int64_t outside = fp.embedding + fp.final_norm + fp.output;
    int64_t dense_layer = out->attention + norms + out->dense_mlp;
    int k = n > 0 ? (e->topk < n ? e->topk : n) : 0;
    out->expert_total = out->moe_layers * n * out->expert;
    out->total = dense_layers * dense_layer + out->moe_layers * moe_common + out->expert_total + outside;
    out->active = dense_layers * dense_layer + out->moe_layers * (moe_common + k * out->expert) + outside;
}

double moe_block_fwd_flops_per_token(const model_config *m, const moe_config *e)
{
    if (e->num_experts <= 0)
        return 0;
    double h = m->hidden_size, g = m->swiglu ? 3 : 2; /* weight matrices of an MLP */
    double fe = e->ffn_hidden_size > 0 ? e->ffn_hidden_size : m->ffn_hidden_size;
    return 2.0 * h * e->num_experts + 2.0 * e->topk * g * h * fe + 2.0 * g * h * e->shared_ffn_hidden_size;
}

int64_t moe_a2a_send_bytes(int64_t tokens, int topk, int64_t h, int dtype_bytes, int ep)
{
    if (ep <= 1)
        return 0;
    return tokens * topk * h * dtype_bytes / ep * (ep - 1) +
           tokens * topk * h * dtype_bytes % ep * (ep - 1) / ep; /* floor(X (ep-1) / ep) without overflow */
}

int64_t moe_a2a_ns(const commcost_params *p, int64_t send_bytes, const commcost_group *g)
{
    int n = g->ranks, k = g->ranks_per_node < 1 ? 1 : g->ranks_per_node;
    if (n <= 1 || send_bytes <= 0)
        return 0;
    if (k > n)
        k = n;
    int nodes = n / k;
    double S = (double)send_bytes, intra = S * (k - 1) / (n - 1), inter = S * (n - k) / (n - 1);
    double t_nv = p->nvlink_busbw_gbps > 0 ? intra / p->nvlink_busbw_gbps : 0; /* GB/s = B/ns */
    double net = p->nic_gbps_per_gpu * commcost_net_factor(p, nodes);
    double t_net = inter > 0 && net > 0 ? inter / net : 0;
    double alpha = nodes > 1 ? p->nic_alpha_ns : p->nvlink_alpha_ns;
    return (int64_t)llround(alpha + (t_nv > t_net ? t_nv : t_net));
}

int moe_ep_group_nodes(int etp, int ep, int gpus_per_node)
{
    int64_t span = (int64_t)etp * ep, g = gpus_per_node < 1 ? 1 : gpus_per_node;
    return (int)((span + g - 1) / g);
}

double moe_rank_load_factor(const double *load, int n, int ep, double capacity_factor, double *dropped)
{
    double total = 0, kept_total = 0, max_rank = 0, drop = 0;
    for (int i = 0; i < n; i++)
        total += load[i];
    double cap = 0;
    if (capacity_factor > 0 && n > 0) {
        cap = capacity_factor * total / n;
        cap = (double)(int64_t)cap < cap ? (double)((int64_t)cap + 1) : cap; /* ceil */
    }
    int per = ep > 0 && n % ep == 0 ? n / ep : n;
    int ranks = per > 0 ? n / per : 0;
    for (int r = 0; r < ranks; r++) {
        double rank = 0;
        for (int i = r * per; i < (r + 1) * per; i++) {
            double kept = cap > 0 && load[i] > cap ? cap : load[i];
            drop += load[i] - kept;
            rank += kept;
        }
        kept_total += rank;
        if (rank > max_rank)
            max_rank = rank;
    }
    if (dropped)
        *dropped = drop;
    if (kept_total <= 0)
        return 0;
    return max_rank / (kept_total / ranks);
}

/* splitmix64 (Steele, Lea and Flood 2014): the permutation's random source. */
static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

void moe_expert_loads_zipf(int n, double routed_tokens, double skew, uint64_t seed, double *out)
{
    if (n <= 0)
        return;
    double sum = 0;
    for (int j = 0; j < n; j++)
        sum += skew == 0 ? 1.0 : pow(j + 1.0, -skew);
    for (int i = 0; i < n; i++)
        out[i] = (double)i; /* popularity rank of expert i, shuffled below */
    uint64_t x = seed;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(splitmix64(&x) % (uint64_t)(i + 1));
        double t = out[i];
        out[i] = out[j];
        out[j] = t;
    }
    for (int i = 0; i < n; i++)
        out[i] = routed_tokens * (skew == 0 ? 1.0 : pow(out[i] + 1.0, -skew)) / sum;
}
