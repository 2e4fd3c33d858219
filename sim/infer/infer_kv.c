/* infer_kv — inference memory per GPU (infer_kv.h). */
#include "sim/infer/infer_kv.h"

#include <math.h>

#include "sim/config/overheads.h"
#include "sim/model/flops.h"
#include "sim/util/ckd.h"

int64_t infer_kv_bytes_per_token(const infer_model *m, int stage)
{
    const infer_layout *L = infer_model_layout(m);
    if (stage < 0 || stage >= L->p)
        return 0;
    int bits = infer_dtype_bits(infer_model_prec(m)->kv);
    /* 2 x layers x kv heads x d x bits / 8, rounded up to whole bytes */
    int64_t b = 2 * (int64_t)L->layers[stage] * L->kv_heads_rank * L->head_dim * bits;
    return (b + 7) / 8;
}

int64_t infer_weight_bytes(const infer_model *m, int stage)
{
    const infer_layout *L = infer_model_layout(m);
    const config *c = infer_model_config(m);
    if (stage < 0 || stage >= L->p)
        return 0;
    int64_t layers = flops_params_stage(&c->model, L->t, L->layers[stage], 0, 0);
    int64_t all = flops_params_stage(&c->model, L->t, L->layers[stage], stage == 0, stage == L->p - 1);
    int bits = infer_dtype_bits(infer_model_prec(m)->weight);
    return (layers * bits + 7) / 8 + (all - layers) * 2;
}

/* Activations of a rank's widest step: T tokens through one layer (input,
 * qkv, the FFN's widest tensor, output) and the last stage's fp32 logits. */
static int64_t workspace_bytes(const infer_model *m, int stage, double T, double rows)
{
    const infer_layout *L = infer_model_layout(m);
    const model_config *mc = &infer_model_config(m)->model;
    double ab = infer_dtype_bits(infer_model_prec(m)->act) / 8.0;
    double h = mc->hidden_size, t = L->t;
    double width = 2 * h +
                   ((double)mc->num_attention_heads / t + 2.0 * (double)L->kv_heads_rank) * (double)L->head_dim +
                   (double)mc->ffn_hidden_size * (mc->swiglu ? 2 : 1) / t;
    double bytes = T * width * ab;
    if (stage == L->p - 1)
        bytes += rows * (double)mc->padded_vocab_size / t * 4.0;
    return ckd_ns(ceil(bytes)); /* clamped like a time: never wraps */
}

infer_mem infer_memory(const infer_model *m, int64_t kv_tokens, int64_t step_tokens, int64_t seqs, int64_t logit_rows)
{
    const infer_layout *L = infer_model_layout(m);
    const config *c = infer_model_config(m);
    const memory_overheads *o = &c->cluster.overheads;
    int mb = seqs < L->p ? (int)(seqs > 0 ? seqs : 1) : L->p;
    double T = ceil((double)step_tokens / mb), rows = ceil((double)logit_rows / mb);
    unsigned comms = (L->t > 1 ? 1u << OVERHEADS_COMM_TP : 0) | (L->p > 1 ? 1u << OVERHEADS_COMM_PP : 0);
    infer_mem best = {0};
    for (int s = 0; s < L->p; s++) {
        infer_mem r = {0};
        r.stage = s;
        r.weights_bytes = infer_weight_bytes(m, s);
        r.kv_bytes = ckd_ns((double)kv_tokens * (double)infer_kv_bytes_per_token(m, s));
        int64_t act = workspace_bytes(m, s, T, rows);
        r.workspace_bytes = ckd_add_ns(act, overheads_fragmentation_bytes(o, act));
        r.overhead_bytes = overheads_cuda_context_bytes(o) + overheads_cublas_bytes(o) + overheads_nccl_bytes(o, comms);
        r.peak_bytes =
            ckd_add_ns(ckd_add_ns(r.weights_bytes, r.kv_bytes), ckd_add_ns(r.workspace_bytes, r.overhead_bytes));
        r.hbm_bytes = (int64_t)L->hbm_bytes;
        r.fits = r.peak_bytes <= r.hbm_bytes;
        if (s == 0 || r.peak_bytes > best.peak_bytes)
            best = r;
    }
    return best;
}

static bool batch_fits(const infer_model *m, int64_t b, int64_t in, int64_t out)
{
    return infer_memory(m, b * (in + out), b * in, b, b).fits;
}

int64_t infer_max_batch(const infer_model *m, int64_t in, int64_t out, int64_t cap)
{
    if (cap < 1 || !batch_fits(m, 1, in, out))
        return 0;
    int64_t lo = 1, hi = cap; /* lo fits; find the largest */
    if (batch_fits(m, hi, in, out))
        return hi;
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (batch_fits(m, mid, in, out))
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}
