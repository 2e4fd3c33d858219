/* moe — closed forms of a mixture-of-experts model (moe.h). */
#include "sim/model/moe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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

double moe_model_flops_per_iter(const model_config *m, const moe_config *e, int64_t global_batch)
{
    double dense = flops_model_per_iter(m, global_batch);
    if (e->num_experts <= 0)
        return dense;
    double s = m->seq_length, h = m->hidden_size, g = m->swiglu ? 3 : 2;
    double mlp = 2.0 * s * g * h * m->ffn_hidden_size; /* one dense MLP's forward per sequence */
    int n = 0;
    for (int l = 0; l < m->num_layers; l++)
        n += moe_layer_is_moe(e, l);
    return dense + 3.0 * n * (s * moe_block_fwd_flops_per_token(m, e) - mlp) * (double)global_batch;
}

int64_t moe_a2a_send_bytes(int64_t tokens, int topk, int64_t h, int dtype_bytes, int ep)
{
    if (ep <= 1)
        return 0;
    return tokens * topk * h * dtype_bytes / ep * (ep - 1) +
           tokens * topk * h * dtype_bytes % ep * (ep - 1) / ep; /* floor(X (ep-1) / ep) without overflow */
}

/* moe_a2a_alpha_ns unrounded */
static double a2a_alpha(const commcost_params *p, const commcost_group *g)
{
    int n = g->ranks, k = g->ranks_per_node < 1 ? 1 : g->ranks_per_node;
    return n > k ? p->nic_alpha_ns : p->nvlink_alpha_ns;
}

int64_t moe_a2a_alpha_ns(const commcost_params *p, const commcost_group *g)
{
    return (int64_t)llround(a2a_alpha(p, g));
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
    return (int64_t)llround(a2a_alpha(p, g) + (t_nv > t_net ? t_nv : t_net));
}

double moe_deepep_remote_nodes(int num_experts, int topk, int nodes)
{
    if (nodes <= 1 || num_experts <= 0 || topk <= 0 || num_experts % nodes)
        return 0;
    /* P(no chosen expert in a given node): topk draws without replacement
     * from E experts, none among that node's E / nodes */
    double miss = 1;
    int other = num_experts - num_experts / nodes;
    for (int i = 0; i < topk; i++)
        miss *= other - i > 0 ? (double)(other - i) / (num_experts - i) : 0;
    return (nodes - 1) * (1 - miss);
}

int64_t moe_deepep_ns(const commcost_params *p, int64_t tokens, int topk, int64_t h, int dtype_bytes, int num_experts,
                      const commcost_group *g)
{
    int n = g->ranks, k = g->ranks_per_node < 1 ? 1 : g->ranks_per_node;
    if (n <= 1 || tokens <= 0)
        return 0;
    if (k > n)
        k = n;
    int nodes = n / k;
    double row = (double)h * dtype_bytes;
    if (nodes == 1) /* DeepEP's intranode kernels: an NVLink all-to-all */
        return moe_a2a_ns(p, moe_a2a_send_bytes(tokens, topk, h, dtype_bytes, n), g);
    double rdma = (double)tokens * row * moe_deepep_remote_nodes(num_experts, topk, nodes);
    double nvl = (double)tokens * topk * row * (k - 1) / k;
    double t_nv = p->nvlink_busbw_gbps > 0 ? nvl / p->nvlink_busbw_gbps : 0; /* GB/s = B/ns */
    double net = p->nic_gbps_per_gpu * commcost_net_factor(p, nodes);
    double t_net = rdma > 0 && net > 0 ? rdma / net : 0;
    return (int64_t)llround(a2a_alpha(p, g) + (t_nv > t_net ? t_nv : t_net));
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

/* ------------------------------------------------------- MoE block ops */

/* Most ops one MoE block lists (the backward with shared experts and
 * all-to-alls: 17); moe_block_ops checks the room first. */
#define MOE_BLOCK_MAX_OPS 17

static void moe_a2a(layer_ops *o, const char *name, int64_t bytes, int ep)
{
    if (ep <= 1)
        return;
    int i = layer_ops_push(o, name, LAYER_OP_COMM);
    o->op[i].coll = COMM_P2P;
    o->op[i].a2a = true;
    o->op[i].bytes = bytes;
    o->op[i].group = ep;
}

/* Shapes of one MoE block on one rank (moe.h, moe_block_ops). */
typedef struct {
    int64_t T, k, h, E, el, m, fe, fc1e, fs, fc1s, dt, a2a, R;
    int ep;
} moe_dims;

static void moe_block_fwd(const moe_dims *D, layer_ops *o)
{
    layer_ops_gemm(o, "moe.router", D->T, D->E, D->h, 1);
    layer_ops_mem(o, "moe.topk", D->T * D->E * 4 * 2 + D->T * D->k * (4 + 8));
    layer_ops_mem(o, "moe.permute", (D->T + D->T * D->k) * D->h * D->dt);
    moe_a2a(o, "moe.a2a.dispatch", D->a2a, D->ep);
    layer_ops_gemm(o, "moe.fc1", D->m, D->fc1e, D->h, D->el);
    layer_ops_mem(o, "moe.act", D->m * D->el * (D->fc1e + D->fe) * D->dt);
    layer_ops_gemm(o, "moe.fc2", D->m, D->h, D->fe, D->el);
    moe_a2a(o, "moe.a2a.combine", D->a2a, D->ep);
    layer_ops_mem(o, "moe.unpermute", (D->T * D->k + D->T) * D->h * D->dt + D->T * D->k * 4);
    if (D->fs > 0) {
        layer_ops_gemm(o, "moe.shared.fc1", D->T, D->fc1s, D->h, 1);
        layer_ops_mem(o, "moe.shared.act", D->T * (D->fc1s + D->fs) * D->dt);
        layer_ops_gemm(o, "moe.shared.fc2", D->T, D->h, D->fs, 1);
    }
}

static void moe_block_bwd(const moe_dims *D, layer_ops *o, bool dgrad, bool wgrad)
{
    if (D->fs > 0) {
        if (dgrad)
            layer_ops_gemm(o, "moe.shared.fc2.dgrad", D->T, D->fs, D->h, 1);
        if (wgrad)
            layer_ops_gemm(o, "moe.shared.fc2.wgrad", D->fs, D->h, D->T, 1);
        if (dgrad)
            layer_ops_mem(o, "moe.shared.act.bwd", D->T * (D->fc1s + D->fs) * D->dt);
        if (dgrad)
            layer_ops_gemm(o, "moe.shared.fc1.dgrad", D->T, D->h, D->fc1s, 1);
        if (wgrad)
            layer_ops_gemm(o, "moe.shared.fc1.wgrad", D->h, D->fc1s, D->T, 1);
    }
    if (dgrad) {
        layer_ops_mem(o, "moe.unpermute.bwd", (D->T * D->k + D->T) * D->h * D->dt + D->T * D->k * 4);
        moe_a2a(o, "moe.a2a.combine.bwd", D->a2a, D->ep);
        layer_ops_gemm(o, "moe.fc2.dgrad", D->m, D->fe, D->h, D->el);
    }
    if (wgrad)
        layer_ops_gemm(o, "moe.fc2.wgrad", D->fe, D->h, D->m, D->el);
    if (dgrad) {
        layer_ops_mem(o, "moe.act.bwd", D->m * D->el * (D->fc1e + D->fe) * D->dt);
        layer_ops_gemm(o, "moe.fc1.dgrad", D->m, D->h, D->fc1e, D->el);
    }
    if (wgrad)
        layer_ops_gemm(o, "moe.fc1.wgrad", D->h, D->fc1e, D->m, D->el);
    if (dgrad) {
        moe_a2a(o, "moe.a2a.dispatch.bwd", D->a2a, D->ep);
        layer_ops_mem(o, "moe.permute.bwd", (D->T + D->T * D->k) * D->h * D->dt);
        layer_ops_mem(o, "moe.topk.bwd", D->T * D->E * 4 * 2 + D->T * D->k * (4 + 8));
        layer_ops_gemm(o, "moe.router.dgrad", D->T, D->h, D->E, 1);
    }
    if (wgrad)
        layer_ops_gemm(o, "moe.router.wgrad", D->h, D->E, D->T, 1);
}

int moe_block_ops(const layer_shape *L, const moe_config *e, double load_factor, layer_pass pass, layer_ops *out,
                  ts_err *err)
{
    if (e->num_experts < 1 || e->topk < 1)
        return err_set(err, TS_EINVAL, "moe_block_ops: --num-experts %d, --moe-router-topk %d: need both >= 1",
                       e->num_experts, e->topk);
    int ep = e->ep > 0 ? e->ep : 1;
    if (e->num_experts % ep != 0)
        return err_set(err, TS_EINVAL,
                       "moe_block_ops: --num-experts %d is not a multiple of "
                       "--expert-model-parallel-size %d",
                       e->num_experts, ep);
    if (e->etp > 1)
        return err_set(err, TS_EINVAL,
                       "--expert-tensor-parallel-size %d: not modelled: the MoE block's ops "
                       "with expert tensor parallelism (give 1)",
                       e->etp);
    if (!(load_factor >= 1.0))
        return err_set(err, TS_EINVAL,
                       "moe_block_ops: load factor %g: the busiest rank's load over the mean "
                       "is at least 1",
                       load_factor);
    moe_dims D;
    memset(&D, 0, sizeof D);
    D.T = L->b * L->s / (L->sp && L->t > 1 ? L->t : 1);
    D.k = e->topk;
    D.h = L->h;
    D.E = e->num_experts;
    D.ep = ep;
    D.el = D.E / ep;
    D.R = (int64_t)ceil((double)(D.T * D.k) * load_factor - 1e-9);
    D.m = (D.R + D.el - 1) / D.el;
    D.fe = e->ffn_hidden_size > 0 ? e->ffn_hidden_size : L->ffn;
    D.fc1e = (L->swiglu ? 2 : 1) * D.fe;
    D.fs = e->shared_ffn_hidden_size;
    D.fc1s = (L->swiglu ? 2 : 1) * D.fs;
    D.dt = L->dtype_bytes;
    D.a2a = moe_a2a_send_bytes(D.T, e->topk, L->h, L->dtype_bytes, ep);
    if (out->n < 0 || out->n > LAYER_MAX_OPS - MOE_BLOCK_MAX_OPS)
        return err_set(err, TS_EINVAL, "moe_block_ops: %d ops already listed; the block needs room for %d of %d",
                       out->n, MOE_BLOCK_MAX_OPS, LAYER_MAX_OPS);
    switch (pass) {
    case LAYER_PASS_F:
        moe_block_fwd(&D, out);
        break;
    case LAYER_PASS_B:
        moe_block_bwd(&D, out, true, true);
        break;
    case LAYER_PASS_I:
        moe_block_bwd(&D, out, true, false);
        break;
    case LAYER_PASS_W:
        moe_block_bwd(&D, out, false, true);
        break;
    case LAYER_PASS_R:
        if (L->recompute == RECOMPUTE_FULL)
            moe_block_fwd(&D, out);
        else if (L->recompute == RECOMPUTE_SELECTIVE && (L->rc_modules & CONFIG_RC_MOE_ACT))
            layer_ops_mem(out, "moe.act", D.m * D.el * (D.fc1e + D.fe) * D.dt);
        break;
    default:
        return err_set(err, TS_EINVAL, "moe_block_ops: unknown pass %d", (int)pass);
    }
    return TS_OK;
}

void moe_layer_rank_params(const model_config *m, const moe_config *e, int tp, int pp, int gpus, moe_rank_params *out)
{
    moe_params P;
    moe_param_count(m, e, &P);
    int ep = e->ep > 0 ? e->ep : 1, etp = e->etp > 0 ? e->etp : 1, t = tp > 0 ? tp : 1, p = pp > 0 ? pp : 1;
    int64_t nw = m->normalization == NORM_RMSNORM ? 1 : 2;
    int64_t norms = 2 * nw * m->hidden_size;
    out->expert = (int64_t)(e->num_experts / ep) * P.expert / etp;
    out->dense = P.attention / t + norms + P.router + P.shared / t;
    out->expert_dp = gpus / (p * etp * ep);
    out->dense_dp = gpus / (p * t);
}

int64_t moe_block_saved_bytes(const layer_shape *L, const moe_config *e, double load_factor)
{
    int64_t T = L->b * L->s / (L->sp && L->t > 1 ? L->t : 1), k = e->topk, E = e->num_experts;
    int64_t R = (int64_t)ceil((double)(T * k) * (load_factor < 1 ? 1 : load_factor) - 1e-9);
    int64_t fe = e->ffn_hidden_size > 0 ? e->ffn_hidden_size : L->ffn, fc1e = (L->swiglu ? 2 : 1) * fe;
    int64_t fs = e->shared_ffn_hidden_size, fc1s = (L->swiglu ? 2 : 1) * fs, dt = L->dtype_bytes;
    return 2 * 4 * T * E + T * k * (4 + 8) + 2 * R * L->h * dt + R * (fc1e + fe) * dt + T * (fc1s + fs) * dt;
}

void moe_block_mem_of(const layer_shape *L, const moe_config *e, double load_factor, moe_block_mem *out)
{
    int64_t T = L->b * L->s / (L->sp && L->t > 1 ? L->t : 1), k = e->topk, E = e->num_experts;
    int64_t R = (int64_t)ceil((double)(T * k) * (load_factor < 1 ? 1 : load_factor) - 1e-9);
    int64_t fe = e->ffn_hidden_size > 0 ? e->ffn_hidden_size : L->ffn, fc1e = (L->swiglu ? 2 : 1) * fe;
    int64_t fs = e->shared_ffn_hidden_size, fc1s = (L->swiglu ? 2 : 1) * fs, dt = L->dtype_bytes;
    int64_t act = R * fe * dt; /* the expert activation's output: FC2's input */
    out->free_w = R * L->h * dt + act + T * fs * dt;
    out->free_i = 2 * 4 * T * E + T * k * (4 + 8) + R * L->h * dt + R * fc1e * dt + T * fc1s * dt;
    out->kept = out->free_w + out->free_i;
    out->by_rc = 0;
    if (L->recompute == RECOMPUTE_FULL) {
        out->by_rc = out->kept;
        out->kept = 0;
    } else if (L->recompute == RECOMPUTE_SELECTIVE && (L->rc_modules & CONFIG_RC_MOE_ACT)) {
        out->by_rc = act;
        out->kept -= act;
    }
}

/* Compute time of one MoE block's F + B at load factor lf (moe.h). */
static int block_compute_ns(const cost_model *cm, const layer_shape *L, const moe_config *e, double lf, int64_t *ns,
                            ts_err *err)
{
    layer_pass passes[2] = {LAYER_PASS_F, LAYER_PASS_B};
    *ns = 0;
    for (int p = 0; p < 2; p++) {
        layer_ops o;
        o.n = 0;
        int rc = moe_block_ops(L, e, lf, passes[p], &o, err);
        if (rc != TS_OK)
            return rc;
        for (int i = 0; i < o.n; i++)
            *ns += cost_op_ns(cm, &o.op[i]);
    }
    return TS_OK;
}

int moe_block_imbalance_ns(const cost_model *cm, const layer_shape *L, const moe_config *e, double skew, uint64_t seed,
                           double *load_factor, int64_t *extra_ns, ts_err *err)
{
    *extra_ns = 0;
    if (load_factor)
        *load_factor = 1;
    if (!(skew >= 0))
        return err_set(err, TS_EINVAL, "--moe-imbalance %g: the routing skew is a Zipf exponent >= 0 (0 = balance)",
                       skew);
    int64_t base = 0, skewed = 0;
    int rc = block_compute_ns(cm, L, e, 1.0, &base, err);
    if (rc != TS_OK || skew == 0 || e->force_load_balancing)
        return rc;
    double *load = calloc((size_t)e->num_experts, sizeof *load);
    if (!load)
        return err_set(err, TS_ENOMEM, "moe_block_imbalance_ns: loads of %d experts", e->num_experts);
    int64_t T = L->b * L->s / (L->sp && L->t > 1 ? L->t : 1);
    moe_expert_loads_zipf(e->num_experts, (double)(T * e->topk), skew, seed, load);
    double lf = moe_rank_load_factor(load, e->num_experts, e->ep > 0 ? e->ep : 1, e->capacity_factor, NULL);
    free(load);
    if (lf < 1)
        lf = 1;
    if ((rc = block_compute_ns(cm, L, e, lf, &skewed, err)) != TS_OK)
        return rc;
    if (load_factor)
        *load_factor = lf;
    *extra_ns = skewed - base;
    return TS_OK;
}
