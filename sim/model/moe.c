/* moe — closed forms of a mixture-of-experts model (moe.h). */
#include "sim/model/moe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/model/flops.h"
#include "sim/model/mla.h"

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

void moe_param_count(const model_config *m, const moe_config *e, moe_params *out)
{
    flops_params fp;
    flops_param_count(m, &fp);
    int64_t nw = m->normalization == NORM_RMSNORM ? 1 : 2;
    int64_t norms = 2 * nw * m->hidden_size;
    out->dense_mlp = mlp_params(m, m->ffn_hidden_size);
    out->attention = e->mla ? mla_attn_params(m, e) : fp.per_layer - out->dense_mlp - norms;
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

/* C(a - b, k) / C(a, k): k draws without replacement from a items miss b given ones. */
static double miss_all(double a, double b, int k)
{
    double q = 1;
    for (int i = 0; i < k; i++)
        q *= a - b - i > 0 ? (a - b - i) / (a - i) : 0;
    return q;
}

double moe_deepep_remote_nodes_grouped(int num_experts, int topk, int nodes, int groups, int group_topk)
{
    if (groups <= 0)
        return moe_deepep_remote_nodes(num_experts, topk, nodes);
    if (nodes <= 1)
        return 0;
    int E = num_experts, G = groups, M = group_topk;
    if (E <= 0 || topk <= 0 || M < 1 || M > G || E % G || E % nodes || (G % nodes && nodes % G))
        return -1;
    /* c chosen-able groups hold a node's experts, u of the node's experts in each */
    int c = G % nodes == 0 ? G / nodes : 1;
    double u = G % nodes == 0 ? (double)E / G : (double)E / nodes, pool = (double)M * E / G, hit = 0;
    for (int x = 0; x <= c && x <= M; x++) { /* X hypergeometric: M of G groups drawn, c of them the node's */
        if (M - x > G - c)
            continue;
        double pr = 1; /* C(c, x) C(G - c, M - x) / C(G, M) */
        for (int i = 0; i < x; i++)
            pr *= (double)(c - i) / (i + 1);
        for (int i = 0; i < M - x; i++)
            pr *= (double)(G - c - i) / (i + 1);
        for (int i = 0; i < M; i++)
            pr *= (double)(i + 1) / (G - i);
        hit += pr * (1 - miss_all(pool, x * u, topk));
    }
    return (nodes - 1) * hit;
}

int64_t moe_deepep_ns(const commcost_params *p, int64_t tokens, int topk, int64_t h, int dtype_bytes, int num_experts,
                      const commcost_group *g)
{
    int k = g->ranks_per_node < 1 ? 1 : g->ranks_per_node;
    int nodes = g->ranks / (k > g->ranks ? (g->ranks > 0 ? g->ranks : 1) : k);
    return moe_deepep_remote_ns(p, tokens, topk, h, dtype_bytes, moe_deepep_remote_nodes(num_experts, topk, nodes), g);
}

int64_t moe_deepep_remote_ns(const commcost_params *p, int64_t tokens, int topk, int64_t h, int dtype_bytes,
                             double remote_nodes, const commcost_group *g)
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
    double rdma = (double)tokens * row * remote_nodes;
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
        /* Megatron's capacity: ceil(factor x tokens x topk / experts), of whole
         * tokens; the loads' floating sum is rounded first (the Zipf shares add
         * up to the routed tokens only to rounding) */
        cap = capacity_factor * (double)llround(total) / n;
        cap = ceil(cap - 1e-9 * cap);
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

/* Most ops one MoE block lists (the backward with shared experts and the
 * dispatcher's collectives on both sides: 17 with every router option); moe_block_ops checks the
 * room first. */
#define MOE_BLOCK_MAX_OPS (17 + 2 * MOE_DISP_MAX_OPS + MOE_FP8_MAX_OPS)
/* FP8's casts in a block (layer_fp8_ops): the routed fc1 and fc2 and the
 * shared fc1 and fc2, plus one amax all-reduce (tensorwise under SP) */
#define MOE_FP8_MAX_OPS 5

/* Shapes of one MoE block on one rank (moe.h, moe_block_ops): the
 * dispatcher's (moe_disp.h) and the experts' GEMMs, whose N (FC1) or K
 * (FC2) is split over etp. */
typedef struct {
    moe_disp_dims d;
    int64_t T, k, h, E, el, m, fc1p, fep, fs, fc1s, dt;
    bool shared_overlap; /* --moe-shared-expert-overlap (moe.h) */
    moe_router_dims r;
} moe_dims;

void moe_router_dims_of(const layer_shape *L, const moe_config *e, moe_router_dims *r)
{
    memset(r, 0, sizeof *r);
    int64_t t = L->t > 0 ? L->t : 1, cp = L->cp > 1 ? L->cp : 1;
    r->fp32 = e->router_fp32 && L->dtype_bytes < 4;
    r->cast_bytes = r->fp32 ? (L->dtype_bytes + 4) : 0;
    r->zloss = e->z_loss_coeff > 0;
    r->bias = e->expert_bias;
    r->scale = e->topk_scaling > 0;
    r->tp = t;
    r->aux = e->aux_loss_coeff > 0 && e->lb_type != MOE_LB_NONE && e->lb_type != MOE_LB_SINKHORN;
    if (r->aux) {
        /* the token counts per expert (int64: a sum of the bool routing
         * map), per sequence for seq_aux_loss */
        r->aux_ar_bytes = 8 * (int64_t)e->num_experts * (e->lb_type == MOE_LB_SEQ_AUX ? L->b : 1);
        if (e->lb_type == MOE_LB_GLOBAL_AUX) /* t x cp x d = etp x ep x edp = gpus / p */
            r->aux_group = (int64_t)(e->etp > 0 ? e->etp : 1) * (e->ep > 0 ? e->ep : 1) * (e->edp > 0 ? e->edp : 1);
        else
            r->aux_group = t * cp;
    }
}

/* The router's ops before the top-k (forward): its input cast to fp32,
 * the GEMM. */
static void router_fwd_head(const moe_dims *D, layer_ops *o)
{
    if (D->r.fp32)
        layer_ops_mem(o, "moe.router.cast", D->r.cast_bytes * (D->T * D->h + D->h * D->E));
    int g = layer_ops_gemm(o, "moe.router", D->T, D->E, D->h, 1);
    o->op[g].fp32 = D->r.fp32;
}

/* The router's ops after the top-k (forward): z-loss, expert bias, top-k
 * scaling, the auxiliary loss and its all-reduce of the token counts. */
static void router_fwd_tail(const moe_dims *D, layer_ops *o)
{
    int64_t TE = D->T * D->E;
    if (D->r.zloss)
        layer_ops_mem(o, "moe.zloss", 4 * TE + 4 * D->T);
    if (D->r.bias)
        layer_ops_mem(o, "moe.bias", 8 * TE + 4 * D->E);
    if (D->r.scale)
        layer_ops_mem(o, "moe.topk.scale", 8 * D->T * D->k);
    if (D->r.aux) {
        layer_ops_mem(o, "moe.aux", 13 * TE);
        if (D->r.aux_group > 1) {
            int i = layer_ops_push(o, "moe.aux.ar", LAYER_OP_COMM);
            o->op[i].coll = COMM_ALL_REDUCE;
            o->op[i].bytes = D->r.aux_ar_bytes;
            o->op[i].group = (int)D->r.aux_group;
            if (D->r.aux_group != D->r.tp) { /* beyond the tensor-parallel group: consecutive ranks */
                o->op[i].stride = 1;
                o->op[i].span = (int)D->r.aux_group;
            }
        }
    }
}

/* Their backward (input gradients), in reverse order. */
static void router_bwd_tail(const moe_dims *D, layer_ops *o)
{
    int64_t TE = D->T * D->E;
    if (D->r.aux)
        layer_ops_mem(o, "moe.aux.bwd", 16 * TE);
    if (D->r.scale)
        layer_ops_mem(o, "moe.topk.scale.bwd", 8 * D->T * D->k);
    if (D->r.zloss)
        layer_ops_mem(o, "moe.zloss.bwd", 8 * TE + 4 * D->T);
}

/* The index of the dispatcher's all-to-all (coll COMM_P2P) among ops
 * from..o->n-1; -1 when none (ep 1). */
static int a2a_in(const layer_ops *o, int from)
{
    for (int i = from; i < o->n; i++)
        if (o->op[i].kind == LAYER_OP_COMM && o->op[i].a2a && o->op[i].coll == COMM_P2P)
            return i;
    return -1;
}

/* --moe-shared-expert-overlap: ops from..o->n-1 (the shared experts'), run
 * beside all-to-all a: the first waits for what a waits for, each is marked
 * as beside a (layer_op.overlap), and the next op listed must wait for both
 * them and the dispatcher's ops up to last (shared_join). */
static void shared_beside(layer_ops *o, int from, int a)
{
    if (from >= o->n)
        return;
    o->op[from].dep[0] = o->op[a].dep[0];
    for (int i = from; i < o->n; i++)
        o->op[i].overlap = a;
}

static void shared_join(layer_ops *o, int op, int last)
{
    if (op >= 0 && op < o->n && last >= 0)
        o->op[op].dep[1] = last;
}

static void shared_fwd(const moe_dims *D, layer_ops *o)
{
    if (D->fs <= 0)
        return;
    layer_ops_gemm(o, "moe.shared.fc1", D->T, D->fc1s, D->h, 1);
    layer_ops_mem(o, "moe.shared.act", D->T * (D->fc1s + D->fs) * D->dt);
    layer_ops_gemm(o, "moe.shared.fc2", D->T, D->h, D->fs, 1);
}

static void shared_bwd(const moe_dims *D, layer_ops *o, bool dgrad, bool wgrad)
{
    if (D->fs <= 0)
        return;
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

static void moe_block_fwd(const moe_dims *D, layer_ops *o)
{
    router_fwd_head(D, o);
    layer_ops_mem(o, "moe.topk", D->T * D->E * 4 * 2 + D->T * D->k * (4 + 8));
    router_fwd_tail(D, o);
    int in0 = o->n;
    moe_disp_fwd_in(&D->d, o);
    int a = D->shared_overlap && D->fs > 0 ? a2a_in(o, in0) : -1, last = o->n - 1;
    if (a >= 0) { /* the shared experts beside the dispatch all-to-all */
        shared_fwd(D, o);
        shared_beside(o, last + 1, a);
    }
    int fc1 = layer_ops_gemm(o, "moe.fc1", D->m, D->fc1p, D->h, D->el);
    if (a >= 0)
        shared_join(o, fc1, last);
    layer_ops_mem(o, "moe.act", D->m * D->el * (D->fc1p + D->fep) * D->dt);
    layer_ops_gemm(o, "moe.fc2", D->m, D->h, D->fep, D->el);
    moe_disp_fwd_out(&D->d, o);
    if (a < 0)
        shared_fwd(D, o);
}

static void moe_block_bwd(const moe_dims *D, layer_ops *o, bool dgrad, bool wgrad)
{
    int a = -1, last = -1;
    if (dgrad && D->shared_overlap && D->fs > 0) { /* the shared experts beside the combine's backward all-to-all */
        int out0 = o->n;
        moe_disp_bwd_out(&D->d, o);
        a = a2a_in(o, out0);
        last = o->n - 1;
        if (a >= 0) {
            shared_bwd(D, o, dgrad, wgrad);
            shared_beside(o, last + 1, a);
        } else { /* no all-to-all (ep 1): the order without the overlap */
            o->n = out0;
        }
    }
    if (a < 0)
        shared_bwd(D, o, dgrad, wgrad);
    if (dgrad) {
        if (a < 0)
            moe_disp_bwd_out(&D->d, o);
        int g = layer_ops_gemm(o, "moe.fc2.dgrad", D->m, D->fep, D->h, D->el);
        if (a >= 0)
            shared_join(o, g, last);
    }
    if (wgrad)
        layer_ops_gemm(o, "moe.fc2.wgrad", D->fep, D->h, D->m, D->el);
    if (dgrad) {
        layer_ops_mem(o, "moe.act.bwd", D->m * D->el * (D->fc1p + D->fep) * D->dt);
        layer_ops_gemm(o, "moe.fc1.dgrad", D->m, D->h, D->fc1p, D->el);
    }
    if (wgrad)
        layer_ops_gemm(o, "moe.fc1.wgrad", D->h, D->fc1p, D->m, D->el);
    if (dgrad) {
        moe_disp_bwd_in(&D->d, o);
        router_bwd_tail(D, o);
        layer_ops_mem(o, "moe.topk.bwd", D->T * D->E * 4 * 2 + D->T * D->k * (4 + 8));
        int g = layer_ops_gemm(o, "moe.router.dgrad", D->T, D->h, D->E, 1);
        o->op[g].fp32 = D->r.fp32;
        if (D->r.fp32)
            layer_ops_mem(o, "moe.router.cast.bwd", D->r.cast_bytes * D->T * D->h);
    }
    if (wgrad) {
        int g = layer_ops_gemm(o, "moe.router.wgrad", D->h, D->E, D->T, 1);
        o->op[g].fp32 = D->r.fp32;
    }
}

/* D for shape L, e and load factor lf (moe_block_ops' checks passed). */
static void moe_dims_of(const layer_shape *L, const moe_config *e, double lf, moe_dims *D)
{
    memset(D, 0, sizeof *D);
    moe_disp_dims_of(L, e, lf, &D->d);
    D->T = D->d.T;
    D->k = D->d.k;
    D->h = D->d.h;
    D->E = D->d.E;
    D->el = D->d.el;
    D->m = D->el > 0 ? (D->d.R + D->el - 1) / D->el : 0; /* no experts: nothing (callers check) */
    /* FP8: Megatron-core's TEGroupedMLP pads each expert's tokens to the FP8
     * GEMM's alignment (Fp8Padding; fp8_utils.get_fp8_align_size: 32 rows
     * for MXFP8, 16 otherwise) unless the router pads the routing map
     * (--moe-router-padding-for-fp8, refused); the expert GEMMs run the
     * padded rows. The pad and unpad copies themselves are not costed. */
    if (L->fp8 != FP8_FORMAT_NONE) {
        int64_t align = L->fp8_recipe == FP8_RECIPE_MXFP8 ? 32 : 16;
        D->m = (D->m + align - 1) / align * align;
    }
    int64_t fe = e->ffn_hidden_size > 0 ? e->ffn_hidden_size : L->ffn;
    D->fep = fe / D->d.etp;
    D->fc1p = (L->swiglu ? 2 : 1) * D->fep;
    D->fs = e->shared_ffn_hidden_size;
    D->fc1s = (L->swiglu ? 2 : 1) * D->fs;
    D->shared_overlap = e->shared_overlap;
    D->dt = L->dtype_bytes;
    moe_router_dims_of(L, e, &D->r);
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
    int etp = e->etp > 0 ? e->etp : 1;
    int64_t fe = e->ffn_hidden_size > 0 ? e->ffn_hidden_size : L->ffn;
    if (fe % etp != 0)
        return err_set(err, TS_EINVAL,
                       "moe_block_ops: --moe-ffn-hidden-size %lld is not a multiple of "
                       "--expert-tensor-parallel-size %d",
                       (long long)fe, etp);
    if (e->dispatcher == MOE_DISPATCH_FLEX && etp > 1)
        return err_set(err, TS_EINVAL,
                       "--expert-tensor-parallel-size %d with --moe-token-dispatcher-type flex: not modelled "
                       "(give --expert-tensor-parallel-size 1, or the alltoall or allgather dispatcher)",
                       etp);
    bool capped = e->capacity_factor > 0 && e->capacity_factor < 1;
    if (!(load_factor >= 1.0) && !(capped && load_factor > 0))
        return err_set(err, TS_EINVAL,
                       "moe_block_ops: load factor %g: the busiest rank's load over the mean "
                       "is at least 1 (above 0 under a capacity factor below 1)",
                       load_factor);
    moe_dims D;
    moe_dims_of(L, e, load_factor, &D);
    int first = out->n;
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
        if (moe_block_recomputed(L)) /* full, or the whole MoE layer checkpointed */
            moe_block_fwd(&D, out);
        else if (L->recompute == RECOMPUTE_SELECTIVE && (L->rc_modules & CONFIG_RC_MOE_ACT))
            layer_ops_mem(out, "moe.act", D.m * D.el * (D.fc1p + D.fep) * D.dt);
        break;
    default:
        return err_set(err, TS_EINVAL, "moe_block_ops: unknown pass %d", (int)pass);
    }
    return layer_fp8_ops(L, out, first, err);
}

bool moe_block_recomputed(const layer_shape *L)
{
    return L->recompute == RECOMPUTE_FULL || (L->recompute == RECOMPUTE_SELECTIVE && (L->rc_modules & CONFIG_RC_MOE));
}

void moe_layer_rank_params(const model_config *m, const moe_config *e, int tp, int pp, int gpus, moe_rank_params *out)
{
    moe_params P;
    moe_param_count(m, e, &P);
    int ep = e->ep > 0 ? e->ep : 1, etp = e->etp > 0 ? e->etp : 1, t = tp > 0 ? tp : 1, p = pp > 0 ? pp : 1;
    int64_t nw = m->normalization == NORM_RMSNORM ? 1 : 2;
    int64_t norms = 2 * nw * m->hidden_size;
    out->expert = (int64_t)(e->num_experts / ep) * P.expert / etp;
    int64_t attn = e->mla ? mla_attn_rank_params(m, e, t) : P.attention / t; /* MLA: down-projections whole */
    out->dense = attn + norms + P.router + P.shared / t;
    out->expert_dp = gpus / (p * etp * ep);
    out->dense_dp = gpus / (p * t);
}

void moe_block_mem_of(const layer_shape *L, const moe_config *e, double load_factor, moe_block_mem *out)
{
    moe_dims D;
    moe_dims_of(L, e, load_factor > 0 ? load_factor : 1, &D);
    int64_t T = D.T, k = D.k, E = D.E, R = D.d.R, h = D.h, dt = D.dt;
    bool ag = e->dispatcher == MOE_DISPATCH_ALLGATHER;
    /* allgather: the gathered routing map and probabilities of the local experts */
    int64_t meta = ag && D.d.n > 1 ? (int64_t)D.d.n * T * D.el * (1 + 4) : 0;
    /* FC1's and FC2's inputs, routed and shared: FP8 copies under FP8
     * (layer_fp8_saved_bytes: TEGroupedLinear and the shared experts' TE
     * linears keep the quantized input for the weight gradient); the shared
     * FC1's input is the block's input, which 16-bit training saves once
     * for the router and the shared FC1 (the dense layer's fc1.in), FP8
     * once more as the shared FC1's FP8 copy */
    int64_t act = layer_fp8_saved_bytes(L, R * D.fep); /* the expert activation's output: FC2's input */
    bool fp8 = L->fp8 != FP8_FORMAT_NONE;
    /* the routed probabilities the weighted activation scales by (fp32, one
     * a row); the unpermute then keeps only its row map, not the expert
     * outputs (moe.h) */
    int64_t probs = R * 4;
    out->free_w = layer_fp8_saved_bytes(L, R * h) + act + (D.fs > 0 ? layer_fp8_saved_bytes(L, T * D.fs) : 0) +
                  (fp8 && D.fs > 0 ? layer_fp8_saved_bytes(L, T * h) : 0);
    out->free_i =
        2 * 4 * T * E + T * k * (4 + 8) + meta + probs + R * D.fc1p * dt + T * D.fc1s * dt + (D.r.aux ? 4 * T * E : 0);
    out->kept = out->free_w + out->free_i;
    out->by_rc = 0;
    if (moe_block_recomputed(L)) { /* only the block's input kept: LN2's output, the dense layer's */
        out->by_rc = out->kept;
        out->kept = 0;
    } else if (L->recompute == RECOMPUTE_SELECTIVE && (L->rc_modules & CONFIG_RC_MOE_ACT)) {
        out->by_rc = act;
        out->kept -= act;
    }
}

int64_t moe_block_saved_bytes(const layer_shape *L, const moe_config *e, double load_factor)
{
    moe_block_mem m;
    moe_block_mem_of(L, e, load_factor, &m);
    return m.free_i + m.free_w;
}

int64_t moe_block_transient_bytes(const layer_shape *L, const moe_config *e, double load_factor)
{
    moe_disp_dims D;
    moe_disp_dims_of(L, e, load_factor > 0 ? load_factor : 1, &D);
    return moe_disp_transient_bytes(&D);
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
    int64_t T = moe_disp_tokens(L);
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
