/* infer_cost — time of one inference step (infer_cost.h). */
#include "sim/infer/infer_cost.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/util/ckd.h"

#define GIB_BYTES (1024.0 * 1024.0 * 1024.0)

/* All-reduces and pipeline hand-offs carry 16-bit activations, whatever the
 * GEMMs' precision: TensorRT-LLM and Megatron-LM reduce the row-parallel
 * GEMM outputs in the model's 16-bit dtype (FP8 is a GEMM input format). */
#define COMM_ELEM_BYTES 2.0

/* The GEMM efficiency of a large square GEMM: the plateau of the cost
 * model's curve, used for the attention kernels' compute bound in decode. */
#define PLATEAU_DIM 16384

const char *const INFER_DTYPE_NAMES[] = {"fp16", "bf16", "fp8", "int8", "int4", "fp32", NULL};

int infer_dtype_bits(infer_dtype d)
{
    switch (d) {
    case INFER_FP16:
    case INFER_BF16:
        return 16;
    case INFER_FP8:
    case INFER_INT8:
        return 8;
    case INFER_INT4:
        return 4;
    case INFER_FP32:
        return 32;
    default:
        return 16;
    }
}

int infer_prec_check(const infer_prec *p, const gpu_spec *gpu, ts_err *err)
{
    bool fp32 = p->act == INFER_FP32 || p->weight == INFER_FP32 || p->kv == INFER_FP32;
    if (gpu->calibrated_only && (p->act != INFER_FP32 || p->weight != INFER_FP32 || p->kv != INFER_FP32))
        return err_set(err, TS_EINVAL,
                       "device '%s' (calibrated only) runs inference in fp32 only, as the CPU executor does: "
                       "give --fp32 and no --fp8-format, --weight-quant or --kv-cache-dtype",
                       gpu->name);
    if (gpu->calibrated_only)
        return TS_OK;
    if (fp32)
        return err_set(err, TS_EINVAL,
                       "fp32 inference on GPU '%s' is not modelled (valid: fp16, bf16, fp8; fp32 only on "
                       "--gpu cpu, the CPU executor's precision)",
                       gpu->name);
    if (p->act != INFER_FP16 && p->act != INFER_BF16 && p->act != INFER_FP8)
        return err_set(err, TS_EINVAL, "activations in %s: not modelled (valid: fp16, bf16, fp8 with --fp8-format)",
                       INFER_DTYPE_NAMES[p->act]);
    bool w_ok = p->weight == p->act || p->weight == INFER_INT8 || p->weight == INFER_INT4;
    if (!w_ok)
        return err_set(err, TS_EINVAL,
                       "--weight-quant: weights in %s with %s activations are not modelled (valid: the "
                       "activations' dtype, or weight-only int8 or int4)",
                       INFER_DTYPE_NAMES[p->weight], INFER_DTYPE_NAMES[p->act]);
    if (p->kv == INFER_INT4)
        return err_set(err, TS_EINVAL, "--kv-cache-dtype int4: not modelled (valid: fp16, bf16, fp8, int8)");
    bool fp8 = p->act == INFER_FP8 || p->weight == INFER_FP8 || p->kv == INFER_FP8;
    if (fp8 && !(gpu->fp8_tflops > 0))
        return err_set(err, TS_EINVAL,
                       "%s: GPU '%s' has no FP8 tensor cores (gpus.csv fp8_tflops is empty); use fp16/bf16 or "
                       "int8 instead",
                       p->act == INFER_FP8 ? "--fp8-format" : "--kv-cache-dtype fp8", gpu->name);
    return TS_OK;
}

void infer_prec_name(const infer_prec *p, char *buf, size_t n)
{
    int k = snprintf(buf, n, "%s", INFER_DTYPE_NAMES[p->act]);
    if (p->weight != p->act && k >= 0 && (size_t)k < n)
        k += snprintf(buf + k, n - (size_t)k, "/w-%s", INFER_DTYPE_NAMES[p->weight]);
    if (p->kv != p->act && k >= 0 && (size_t)k < n)
        snprintf(buf + k, n - (size_t)k, "/kv-%s", INFER_DTYPE_NAMES[p->kv]);
}

infer_params infer_params_default(void)
{
    return (infer_params){.launch_ns = -1,
                          .mem_eff = 0,
                          .gemm_eff = 0,
                          .decode_line = false,
                          .decode_rows = 0,
                          .cost = NULL,
                          .link = NULL};
}

infer_step infer_step_prefill(int64_t b, int64_t in)
{
    double n = (double)in;
    return (infer_step){.tokens = (double)b * n,
                        .logits = (double)b,
                        .pre_pairs = (double)b * n * (n + 1) / 2,
                        .pre_keys = (double)b * n,
                        .pre_chunk_len = n};
}

infer_step infer_step_decode(int64_t b, int64_t ctx)
{
    return (infer_step){
        .tokens = (double)b, .logits = (double)b, .dec_seqs = (double)b, .dec_keys = (double)b * (double)ctx};
}

struct infer_model {
    config c; /* a copy; its topology pointer is cleared (not owned) */
    infer_prec pr;
    infer_params ip;
    cost_model *cm;
    commcost_params cc;
    infer_layout lay;
    int gpn;            /* GPUs per node */
    double ab, wb, kvb; /* bytes per element: activations, weights, KV cache */
    double h, a_rank, d, ffn1, ffn2, vocab_rank;
    double plateau_eff; /* the GEMM curve's plateau */
    bool in_decode;     /* evaluating a pure decode step (infer_stage_ns) */
    bool rope;
};

const infer_layout *infer_model_layout(const infer_model *m)
{
    return &m->lay;
}
const config *infer_model_config(const infer_model *m)
{
    return &m->c;
}
const infer_prec *infer_model_prec(const infer_model *m)
{
    return &m->pr;
}

static int check_shape(const config *c, ts_err *err)
{
    const model_config *mc = &c->model;
    int t = c->par.tp, p = c->par.pp, g = mc->num_query_groups > 0 ? mc->num_query_groups : mc->num_attention_heads;
    if (t < 1 || p < 1)
        return err_set(err, TS_EINVAL, "-t %d, -p %d: both must be >= 1", t, p);
    if (mc->num_attention_heads % t)
        return err_set(err, TS_EINVAL, "-t %d does not divide --num-attention-heads %d", t, mc->num_attention_heads);
    if (g % t && t % g)
        return err_set(err, TS_EINVAL, "-t %d and --num-query-groups %d: one must divide the other", t, g);
    if (mc->ffn_hidden_size % t)
        return err_set(err, TS_EINVAL, "-t %d does not divide --ffn-hidden-size %d", t, mc->ffn_hidden_size);
    if (mc->padded_vocab_size % t)
        return err_set(err, TS_EINVAL, "-t %d does not divide the padded vocabulary %d", t, mc->padded_vocab_size);
    if (p > mc->num_layers || p > SCHED_LAYOUT_MAX_STAGES)
        return err_set(err, TS_EINVAL, "-p %d: more stages than --num-layers %d (or than %d)", p, mc->num_layers,
                       SCHED_LAYOUT_MAX_STAGES);
    int gpn = c->cluster.gpus_per_node > 0 ? c->cluster.gpus_per_node : 8;
    if (t > gpn && t % gpn)
        return err_set(err, TS_EINVAL, "-t %d: spans nodes of %d GPUs without filling them", t, gpn);
    return TS_OK;
}

int infer_model_new(const config *c, const infer_prec *pr, const infer_params *ip, infer_model **out, ts_err *err)
{
    *out = NULL;
    int rc = infer_prec_check(pr, &c->cluster.gpu, err);
    if (!rc)
        rc = check_shape(c, err);
    if (rc)
        return rc;
    infer_model *m = calloc(1, sizeof *m);
    if (!m)
        return err_set(err, TS_ENOMEM, "out of memory");
    m->c = *c;
    m->c.cluster.topology = NULL;
    m->pr = *pr;
    m->ip = *ip;
    m->ip.cost = NULL; /* copied into cp and m->cc below, not kept */
    m->ip.link = NULL;
    const gpu_spec *gpu = &c->cluster.gpu;
    cost_params cp;
    memset(&cp, 0, sizeof cp);
    if (ip->cost)
        cp = *ip->cost;
    else if (gpu->calibrated_only)
        rc = err_set(err, TS_EINVAL,
                     "device '%s' has no datasheet or default cost tables: give --calibration FILE (written by "
                     "trainsim calibrate from trainexec --microbench) with its gemm, memory, launch, p2p and "
                     "allreduce rows",
                     gpu->name);
    else
        rc = cost_params_default(gpu, pr->act == INFER_BF16 ? PREC_BF16 : PREC_FP16, &cp, err);
    if (!rc && pr->act == INFER_FP8)
        cp.peak_tflops = gpu->fp8_tflops; /* dtype_bytes stays 2: the curve's intensity key */
    if (!rc && ip->launch_ns >= 0)
        cp.launch_ns = ip->launch_ns;
    if (!rc)
        rc = cost_model_new(&cp, &m->cm, err);
    if (!rc && ip->link)
        m->cc = *ip->link;
    else if (!rc)
        rc = commcost_params_default(gpu, &m->cc, err);
    if (rc) {
        infer_model_free(m);
        return rc;
    }
    const model_config *mc = &c->model;
    int t = c->par.tp, p = c->par.pp;
    int64_t g = mc->num_query_groups > 0 ? mc->num_query_groups : mc->num_attention_heads;
    m->gpn = c->cluster.gpus_per_node > 0 ? c->cluster.gpus_per_node : 8;
    m->lay.t = t;
    m->lay.p = p;
    for (int s = 0; s < p; s++)
        m->lay.layers[s] = mc->num_layers / p + (s < mc->num_layers % p ? 1 : 0);
    m->lay.kv_heads_rank = g >= t ? g / t : 1;
    m->lay.head_dim = config_head_size(mc);
    m->lay.launch_ns = cp.launch_ns;
    m->lay.hbm_bytes = gpu->hbm_gib * GIB_BYTES;
    m->ab = infer_dtype_bits(pr->act) / 8.0;
    m->wb = infer_dtype_bits(pr->weight) / 8.0;
    m->kvb = infer_dtype_bits(pr->kv) / 8.0;
    m->h = mc->hidden_size;
    m->a_rank = (double)mc->num_attention_heads / t;
    m->d = (double)m->lay.head_dim;
    m->ffn1 = (double)mc->ffn_hidden_size * (mc->swiglu ? 2 : 1) / t;
    m->ffn2 = (double)mc->ffn_hidden_size / t;
    m->vocab_rank = (double)mc->padded_vocab_size / t;
    m->rope = mc->position_embedding == POS_ROPE || mc->position_embedding == POS_YARN;
    m->plateau_eff = ip->gemm_eff > 0 ? ip->gemm_eff : cost_gemm_eff(m->cm, PLATEAU_DIM, PLATEAU_DIM, PLATEAU_DIM);
    *out = m;
    return TS_OK;
}

void infer_model_free(infer_model *m)
{
    if (!m)
        return;
    cost_model_free(m->cm);
    free(m);
}

/* ---------------------------------------------------------------- kernels */

static double mem_eff(const infer_model *m, double bytes)
{
    return m->ip.mem_eff > 0 ? m->ip.mem_eff : cost_mem_eff(m->cm, (int64_t)bytes);
}

/* Bytes over the HBM at the achievable fraction, ns (no launch). */
static double hbm_ns(const infer_model *m, double bytes)
{
    if (!(bytes > 0))
        return 0;
    return bytes / (cost_model_params(m->cm)->hbm_gbps * mem_eff(m, bytes));
}

/* An element-wise kernel of bytes read + written. */
static double elem_ns(const infer_model *m, double bytes)
{
    return bytes > 0 ? m->lay.launch_ns + hbm_ns(m, bytes) : 0;
}

/* A GEMM of rows x n x k with weights of wbytes per element: launch +
 * max(compute, weights and activations over HBM). */
static double gemm_ns(const infer_model *m, double rows, double n, double k, double wbytes)
{
    if (!(rows > 0))
        return 0;
    int64_t M = (int64_t)ceil(rows), N = (int64_t)ceil(n), K = (int64_t)ceil(k);
    double comp;
    bool line = m->in_decode && m->ip.decode_line && !(m->ip.gemm_eff > 0); /* see infer_params.decode_line */
    if (line && rows <= m->ip.decode_rows)
        comp = 0;
    else if (line)
        comp = 2.0 * (double)M * (double)N * (double)K / (cost_model_params(m->cm)->peak_tflops * 1e3 * m->plateau_eff);
    else if (m->ip.gemm_eff > 0)
        comp = 2.0 * (double)M * (double)N * (double)K / (cost_model_params(m->cm)->peak_tflops * 1e3 * m->ip.gemm_eff);
    else
        comp = (double)cost_gemm_compute_ns(m->cm, M, N, K, 1) - m->lay.launch_ns;
    double bytes = (double)N * (double)K * wbytes + ((double)M * (double)K + (double)M * (double)N) * m->ab;
    return m->lay.launch_ns + fmax(comp, hbm_ns(m, bytes));
}

/* The attention of a step's share on one rank of one layer. */
static double attn_ns(const infer_model *m, const infer_step *s)
{
    double kvh = (double)m->lay.kv_heads_rank, ns = 0;
    double peak = cost_model_params(m->cm)->peak_tflops * 1e3; /* flops per ns */
    if (s->dec_seqs > 0) {
        double flops = 4.0 * s->dec_keys * m->a_rank * m->d;
        double bytes = s->dec_keys * 2 * kvh * m->d * m->kvb + s->dec_seqs * 2 * m->a_rank * m->d * m->ab;
        ns += m->lay.launch_ns + fmax(flops / (peak * m->plateau_eff), hbm_ns(m, bytes));
    }
    if (s->pre_pairs > 0) {
        double flops = 4.0 * s->pre_pairs * m->a_rank * m->d;
        int64_t n = (int64_t)ceil(s->pre_chunk_len > 1 ? s->pre_chunk_len : 1);
        double new_tok = s->tokens - s->dec_seqs;
        /* the attention GEMMs of every prefill chunk and head run as one batch */
        int64_t batch = (int64_t)fmax(1.0, ceil(new_tok / (double)n) * m->a_rank);
        double eff = m->ip.gemm_eff > 0 ? m->ip.gemm_eff : cost_gemm_eff_batch(m->cm, n, n, (int64_t)m->d, batch);
        double bytes = s->pre_keys * 2 * kvh * m->d * m->kvb + new_tok * 2 * m->a_rank * m->d * m->ab;
        ns += m->lay.launch_ns + fmax(flops / (peak * eff), hbm_ns(m, bytes));
    }
    return ns;
}

static double allreduce_ns(const infer_model *m, double tokens)
{
    int t = m->lay.t;
    if (t <= 1 || !(tokens > 0))
        return 0;
    commcost_group g = {.ranks = t, .ranks_per_node = t <= m->gpn ? t : m->gpn};
    int64_t bytes = (int64_t)ceil(tokens * m->h * COMM_ELEM_BYTES);
    return (double)commcost_ns(&m->cc, COMM_ALL_REDUCE, bytes, &g);
}

static double layer_ns(const infer_model *m, const infer_step *s)
{
    double T = s->tokens, h = m->h, ab = m->ab, kvh = (double)m->lay.kv_heads_rank;
    double ns = 0;
    ns += elem_ns(m, 2 * T * h * ab);                            /* ln1 */
    ns += gemm_ns(m, T, (m->a_rank + 2 * kvh) * m->d, h, m->wb); /* qkv */
    if (m->c.model.qk_layernorm)
        ns += elem_ns(m, 2 * T * (m->a_rank + kvh) * m->d * ab); /* --qk-layernorm: q, k norms (layer.h) */
    if (m->rope)
        ns += elem_ns(m, 2 * T * (m->a_rank + kvh) * m->d * ab);      /* rotary on q, k */
    ns += elem_ns(m, T * 2 * kvh * m->d * (ab + m->kvb));             /* KV-cache append */
    ns += attn_ns(m, s);                                              /* attention */
    ns += gemm_ns(m, T, h, m->a_rank * m->d, m->wb);                  /* projection */
    ns += allreduce_ns(m, T);                                         /* row-parallel all-reduce */
    ns += elem_ns(m, 3 * T * h * ab);                                 /* residual */
    ns += elem_ns(m, 2 * T * h * ab);                                 /* ln2 */
    ns += gemm_ns(m, T, m->ffn1, h, m->wb);                           /* fc1 */
    ns += elem_ns(m, (m->c.model.swiglu ? 3 : 2) * T * m->ffn2 * ab); /* activation */
    ns += gemm_ns(m, T, h, m->ffn2, m->wb);                           /* fc2 */
    ns += allreduce_ns(m, T);                                         /* row-parallel all-reduce */
    ns += elem_ns(m, 3 * T * h * ab);                                 /* residual */
    return ns;
}

int64_t infer_stage_ns(infer_model *m, int stage, const infer_step *s)
{
    if (!(s->tokens > 0) || stage < 0 || stage >= m->lay.p)
        return 0;
    m->in_decode = s->dec_seqs > 0 && s->dec_seqs >= s->tokens;
    double ns = m->lay.layers[stage] * layer_ns(m, s);
    if (stage == 0) /* embedding lookup (vocabulary-parallel: an all-reduce at t > 1) */
        ns += elem_ns(m, 2 * s->tokens * m->h * m->ab) + allreduce_ns(m, s->tokens);
    if (stage == m->lay.p - 1 && s->logits > 0) /* final norm, logits (16-bit weights, fp32 in fp32) */
        ns += elem_ns(m, 2 * s->logits * m->h * m->ab) +
              gemm_ns(m, s->logits, m->vocab_rank, m->h, m->pr.act == INFER_FP32 ? 4.0 : 2.0);
    m->in_decode = false;
    return ckd_ns(ns);
}

int64_t infer_handoff_ns(const infer_model *m, int stage, double tokens)
{
    if (stage < 0 || stage >= m->lay.p - 1 || !(tokens > 0))
        return 0;
    int t = m->lay.t;
    /* the first rank of stage+1 starts a node: the hand-off leaves the node */
    bool cross = ((int64_t)(stage + 1) * t) % m->gpn == 0;
    commcost_group g = {.ranks = 2, .ranks_per_node = cross ? 1 : 2};
    int64_t bytes = (int64_t)ceil(tokens * m->h * COMM_ELEM_BYTES);
    return commcost_ns(&m->cc, COMM_P2P, bytes, &g);
}

infer_step_times infer_step_time(infer_model *m, const infer_step *s, int64_t seqs)
{
    infer_step_times r = {0, 0, 0, 1};
    if (!(s->tokens > 0))
        return r;
    int p = m->lay.p;
    int mb = seqs < p ? (int)(seqs > 0 ? seqs : 1) : p;
    double f = 1.0 / mb;
    infer_step sh = {s->tokens * f,    s->logits * f,   s->dec_seqs * f, s->dec_keys * f,
                     s->pre_pairs * f, s->pre_keys * f, s->pre_chunk_len};
    int64_t trip = 0, slow = 0;
    for (int i = 0; i < p; i++) {
        int64_t st = infer_stage_ns(m, i, &sh);
        if (st > slow)
            slow = st;
        trip = ckd_add_ns(trip, ckd_add_ns(st, infer_handoff_ns(m, i, sh.tokens)));
    }
    int64_t full = ckd_ns((double)mb * (double)slow);
    r.step_ns = full > trip ? full : trip;
    r.first_ns = trip;
    r.last_ns = ckd_add_ns(trip, ckd_ns((double)(mb - 1) * (double)slow));
    r.micro_batches = mb;
    return r;
}
