#include "sim/config/config.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "sim/config/overheads.h"
#include "sim/config/topo.h"

const char *const CONFIG_RECOMPUTE_NAMES[] = {"none", "selective", "full", NULL};
const char *const CONFIG_RECOMPUTE_METHOD_NAMES[] = {"uniform", "block", NULL};
const char *const CONFIG_PRECISION_NAMES[] = {"bf16", "fp16", "fp32", NULL};
const char *const CONFIG_NORM_NAMES[] = {"LayerNorm", "RMSNorm", NULL};
const char *const CONFIG_POSITION_NAMES[] = {"learned_absolute", "rope", "yarn", "none", NULL};

int config_pad_vocab(int vocab, int divisible_by, int t, int *padded, ts_err *err)
{
    if (vocab < 1 || divisible_by < 1 || t < 1)
        return err_set(err, TS_EINVAL,
                       "vocabulary padding needs --vocab-size (%d), --make-vocab-size-divisible-by (%d) and "
                       "--tensor-model-parallel-size (%d) all >= 1",
                       vocab, divisible_by, t);
    long long multiple = (long long)divisible_by * t;
    long long p = ((long long)vocab + multiple - 1) / multiple * multiple;
    if (p > INT_MAX)
        return err_set(err, TS_EINVAL,
                       "--vocab-size %d padded to a multiple of %lld (--make-vocab-size-divisible-by x t) is %lld, "
                       "past %d",
                       vocab, multiple, p, INT_MAX);
    *padded = (int)p;
    return TS_OK;
}

int config_head_size(const model_config *m)
{
    if (m->kv_channels > 0)
        return m->kv_channels;
    return m->num_attention_heads > 0 ? m->hidden_size / m->num_attention_heads : 0;
}

void config_free(config *c)
{
    if (!c)
        return;
    topo_free(c->cluster.topology);
    c->cluster.topology = NULL;
}

int config_num_microbatches(const config *c)
{
    long d = (long)c->par.micro_batch_size * c->par.dp;
    return d > 0 ? (int)(c->par.global_batch_size / d) : 0;
}

int config_dtype_bytes(const config *c)
{
    return c->model.precision == PREC_FP32 ? 4 : 2;
}

/* "divisors of n: 1, 2, 4, 8" (at most 16 listed) */
static void divisors(long n, char *buf, size_t cap)
{
    size_t off = 0;
    int k = 0;
    buf[0] = '\0';
    for (long d = 1; d <= n && off < cap && k < 16; d++)
        if (n % d == 0) {
            off += (size_t)snprintf(buf + off, cap - off, "%s%ld", k ? ", " : "", d);
            k++;
        }
    if (k == 16 && off < cap)
        snprintf(buf + off, cap - off, ", ...");
}

/* Nearest multiples of d around x: "960 or 1056" */
static void nearby(long x, long d, char *buf, size_t cap)
{
    long lo = x / d * d, hi = lo + d;
    if (lo > 0)
        snprintf(buf, cap, "%ld or %ld", lo, hi);
    else
        snprintf(buf, cap, "%ld", hi);
}

static int check_model(const model_config *m, ts_err *err)
{
    struct {
        const char *flag;
        long v;
    } pos[] = {
        {"--num-layers", m->num_layers},
        {"--hidden-size", m->hidden_size},
        {"--num-attention-heads", m->num_attention_heads},
        {"--ffn-hidden-size", m->ffn_hidden_size},
        {"--num-query-groups", m->num_query_groups},
        {"--seq-length", m->seq_length},
        {"--padded-vocab-size", m->padded_vocab_size},
    };
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v < 1)
            return err_set(err, TS_EINVAL, "%s is %ld; it must be at least 1", pos[i].flag, pos[i].v);
    char buf[160];
    if (m->kv_channels < 0 || m->max_position_embeddings < 0)
        return err_set(err, TS_EINVAL, "--kv-channels %d and --max-position-embeddings %d must be >= 1 (0 = derived)",
                       m->kv_channels, m->max_position_embeddings);
    if (m->position_embedding == POS_LEARNED_ABSOLUTE && m->max_position_embeddings > 0 &&
        m->max_position_embeddings < m->seq_length)
        return err_set(err, TS_EINVAL,
                       "--max-position-embeddings %d is less than --seq-length %d (the learned position table needs "
                       "a row per position: give at least %d)",
                       m->max_position_embeddings, m->seq_length, m->seq_length);
    if (m->kv_channels == 0 && m->hidden_size % m->num_attention_heads) {
        nearby(m->hidden_size, m->num_attention_heads, buf, sizeof buf);
        return err_set(err, TS_EINVAL,
                       "--hidden-size %d is not divisible by --num-attention-heads %d (the head size must be a "
                       "whole number: use a hidden size of %s, or a head count that divides %d)",
                       m->hidden_size, m->num_attention_heads, buf, m->hidden_size);
    }
    if (m->num_query_groups > m->num_attention_heads || m->num_attention_heads % m->num_query_groups) {
        divisors(m->num_attention_heads, buf, sizeof buf);
        return err_set(err, TS_EINVAL,
                       "--num-query-groups %d does not divide --num-attention-heads %d (valid: %s; equal to the "
                       "head count means no grouped-query attention)",
                       m->num_query_groups, m->num_attention_heads, buf);
    }
    return TS_OK;
}

static int check_tp(const config *c, ts_err *err)
{
    const model_config *m = &c->model;
    int t = c->par.tp;
    char buf[160];
    struct {
        const char *flag;
        int v;
    } div[] = {
        {"--num-attention-heads", m->num_attention_heads},
        {"--num-query-groups", m->num_query_groups},
        {"--ffn-hidden-size", m->ffn_hidden_size},
        {"--padded-vocab-size", m->padded_vocab_size},
    };
    for (size_t i = 0; i < sizeof div / sizeof div[0]; i++)
        if (div[i].v % t) {
            divisors(div[i].v, buf, sizeof buf);
            return err_set(err, TS_EINVAL,
                           "%s %d is not divisible by --tensor-model-parallel-size %d (each tensor-parallel rank "
                           "holds an equal share; valid tensor-parallel sizes: %s)",
                           div[i].flag, div[i].v, t, buf);
        }
    if (c->par.sequence_parallel && m->seq_length % t) {
        nearby(m->seq_length, t, buf, sizeof buf);
        return err_set(err, TS_EINVAL,
                       "--seq-length %d is not divisible by --tensor-model-parallel-size %d, which "
                       "--sequence-parallel needs (use %s tokens)",
                       m->seq_length, t, buf);
    }
    return TS_OK;
}

/* Layers to stages: derives vp; checks the schedule's chunk rules. */
static int check_layers(config *c, ts_err *err)
{
    parallel_config *p = &c->par;
    int l = c->model.num_layers, pp = p->pp, lv = p->layers_per_virtual_stage;
    const char *sn = sched_kind_name(p->schedule);
    bool uneven = p->first_stage_layers > 0 || p->last_stage_layers > 0;
    char buf[160];
    if (p->schedule == SCHED_INTERLEAVED || p->schedule == SCHED_ZB_V) {
        if (uneven)
            return err_set(err, TS_EINVAL,
                           "--decoder-first/last-pipeline-num-layers cannot be combined with --schedule %s "
                           "(an uneven split is supported for gpipe, 1f1b, zb-h1 and zb-h2)",
                           sn);
        if (pp < 2)
            return err_set(err, TS_EINVAL,
                           "--schedule %s needs --pipeline-model-parallel-size >= 2 (got %d; use 1f1b with one stage)",
                           sn, pp);
        if (p->schedule == SCHED_ZB_V && lv == 0) {
            if (l % (2 * pp)) {
                nearby(l, 2L * pp, buf, sizeof buf);
                return err_set(err, TS_EINVAL,
                               "--schedule zb-v runs exactly 2 chunks per pipeline rank: --num-layers %d is not "
                               "divisible by 2 x --pipeline-model-parallel-size = %d (use %s layers)",
                               l, 2 * pp, buf);
            }
            lv = l / (2 * pp);
        }
        if (lv == 0)
            return err_set(err, TS_EINVAL,
                           "--schedule interleaved needs --num-layers-per-virtual-pipeline-stage (layers per model "
                           "chunk; %d layers over %d ranks: valid values are the divisors of %d that leave at least "
                           "2 chunks)",
                           l, pp, l % pp ? 0 : l / pp);
        if (l % ((long)pp * lv)) {
            divisors(l % pp ? 0 : l / pp, buf, sizeof buf);
            return err_set(err, TS_EINVAL,
                           "--num-layers %d is not divisible by --pipeline-model-parallel-size x "
                           "--num-layers-per-virtual-pipeline-stage = %d x %d = %ld (valid "
                           "--num-layers-per-virtual-pipeline-stage: %s)",
                           l, pp, lv, (long)pp * lv, l % pp ? "none: --num-layers is not a multiple of p" : buf);
        }
        p->vp = l / (pp * lv);
        if (p->schedule == SCHED_ZB_V && p->vp != 2)
            return err_set(err, TS_EINVAL,
                           "--schedule zb-v runs exactly 2 chunks per pipeline rank; "
                           "--num-layers-per-virtual-pipeline-stage %d gives %d (use %d, or leave it unset)",
                           lv, p->vp, l % (2 * pp) ? 0 : l / (2 * pp));
        if (p->vp < 2)
            return err_set(err, TS_EINVAL,
                           "--num-layers-per-virtual-pipeline-stage %d gives 1 chunk per pipeline rank; interleaving "
                           "needs at least 2 (use a smaller value, or --schedule 1f1b)",
                           lv);
        return TS_OK;
    }
    if (lv > 0)
        return err_set(err, TS_EINVAL,
                       "--num-layers-per-virtual-pipeline-stage applies to --schedule interleaved or zb-v only "
                       "(got --schedule %s)",
                       sn);
    p->vp = 1;
    if (!uneven) {
        if (l % pp) {
            nearby(l, pp, buf, sizeof buf);
            return err_set(err, TS_EINVAL,
                           "--num-layers %d is not divisible by --pipeline-model-parallel-size %d (use %s layers, or "
                           "an uneven split with --decoder-first-pipeline-num-layers / "
                           "--decoder-last-pipeline-num-layers)",
                           l, pp, buf);
        }
        return TS_OK;
    }
    int ends = (p->first_stage_layers > 0) + (p->last_stage_layers > 0);
    int rest = l - p->first_stage_layers - p->last_stage_layers;
    if (pp == 1)
        return err_set(err, TS_EINVAL,
                       "--decoder-first/last-pipeline-num-layers need --pipeline-model-parallel-size >= 2 (got %d)",
                       pp);
    if (pp == ends) {
        if (rest != 0)
            return err_set(err, TS_EINVAL,
                           "with 2 pipeline stages the first (%d) and last (%d) stage layers must add up to "
                           "--num-layers %d",
                           p->first_stage_layers, p->last_stage_layers, l);
        return TS_OK;
    }
    int mid = pp - ends;
    if (rest < mid || rest % mid) {
        return err_set(err, TS_EINVAL,
                       "--num-layers %d minus the first/last stage layers (%d + %d) leaves %d layers, not divisible "
                       "over the other %d pipeline stages (each needs the same whole number >= 1)",
                       l, p->first_stage_layers, p->last_stage_layers, rest, mid);
    }
    return TS_OK;
}

static int check_recompute(const config *c, ts_err *err)
{
    const parallel_config *p = &c->par;
    if (p->recompute_num_layers < 0)
        return err_set(err, TS_EINVAL, "--recompute-num-layers %d must be >= 0", p->recompute_num_layers);
    if (p->recompute_num_layers > 0 && p->recompute != RECOMPUTE_FULL)
        return err_set(err, TS_EINVAL, "--recompute-num-layers applies to --recompute-granularity full only (got %s)",
                       CONFIG_RECOMPUTE_NAMES[p->recompute]);
    int per_stage = c->model.num_layers / (p->pp * (p->vp > 0 ? p->vp : 1));
    if (p->first_stage_layers > per_stage)
        per_stage = p->first_stage_layers;
    if (p->last_stage_layers > per_stage)
        per_stage = p->last_stage_layers;
    if (p->recompute_num_layers > per_stage)
        return err_set(err, TS_EINVAL,
                       "--recompute-num-layers %d exceeds the %d layers of a pipeline stage (use 1..%d, or 0 for all)",
                       p->recompute_num_layers, per_stage, per_stage);
    return TS_OK;
}

static int check_parallel(config *c, ts_err *err)
{
    parallel_config *p = &c->par;
    int gpus = c->cluster.gpus;
    if (gpus < 1)
        return err_set(err, TS_EINVAL, "--gpus is %d; it must be at least 1", gpus);
    if (p->tp < 1 || p->pp < 1)
        return err_set(err, TS_EINVAL,
                       "--tensor-model-parallel-size %d and --pipeline-model-parallel-size %d must be at least 1",
                       p->tp, p->pp);
    if (p->micro_batch_size < 1 || p->global_batch_size < 1)
        return err_set(err, TS_EINVAL, "--micro-batch-size %d and --global-batch-size %d must be at least 1 sequence",
                       p->micro_batch_size, p->global_batch_size);
    if (p->first_stage_layers < 0 || p->last_stage_layers < 0 || p->layers_per_virtual_stage < 0)
        return err_set(err, TS_EINVAL, "layer counts per stage must be >= 0 (0 = unset)");
    long tpp = (long)p->tp * p->pp;
    char buf[160];
    if (p->dp > 0) {
        if (tpp * p->dp != gpus)
            return err_set(err, TS_EINVAL,
                           "--gpus %d != t x p x d = %d x %d x %d = %ld (set --gpus %ld, or leave "
                           "--data-parallel-size unset to derive d = gpus / (t x p))",
                           gpus, p->tp, p->pp, p->dp, tpp * p->dp, tpp * p->dp);
    } else {
        if (gpus % tpp) {
            nearby(gpus, tpp, buf, sizeof buf);
            return err_set(err, TS_EINVAL,
                           "--gpus %d is not a multiple of --tensor-model-parallel-size x "
                           "--pipeline-model-parallel-size = %d x %d = %ld, so no whole data-parallel size d "
                           "gives gpus = t x p x d (use %s GPUs)",
                           gpus, p->tp, p->pp, tpp, buf);
        }
        p->dp = (int)(gpus / tpp);
    }
    long per = (long)p->micro_batch_size * p->dp;
    if (p->global_batch_size % per) {
        nearby(p->global_batch_size, per, buf, sizeof buf);
        return err_set(err, TS_EINVAL,
                       "--global-batch-size %d is not divisible by --micro-batch-size x data-parallel size = "
                       "%d x %d = %ld (use a global batch of %s sequences)",
                       p->global_batch_size, p->micro_batch_size, p->dp, per, buf);
    }
    return TS_OK;
}

int config_resolve(config *c, ts_err *err)
{
    int rc;
    if ((rc = check_model(&c->model, err)) || (rc = check_parallel(c, err)) || (rc = check_tp(c, err)))
        return rc;
    if (c->par.schedule < 0 || c->par.schedule >= SCHED_KIND_COUNT)
        return err_set(err, TS_EINVAL, "schedule kind %d is not valid", (int)c->par.schedule);
    if (c->par.schedule == SCHED_CUSTOM) {
        c->par.vp = c->par.layers_per_virtual_stage > 0
                        ? c->model.num_layers / (c->par.pp * c->par.layers_per_virtual_stage)
                        : 1;
    } else if ((rc = check_layers(c, err))) {
        return rc;
    }
    if ((rc = check_recompute(c, err)))
        return rc;
    if (c->par.tp == 1)
        c->par.sequence_parallel = false; /* as Megatron-LM: a no-op with one tensor-parallel rank */
    if (!c->cluster.gpu.name[0])
        return err_set(err, TS_EINVAL, "no GPU kind (give --gpu KIND)");
    if ((rc = overheads_resolve(&c->cluster.overheads, &c->cluster.gpu, err)))
        return rc;
    if (c->cluster.topology) {
        if ((rc = topo_check_gpus(c->cluster.topology, c->cluster.gpus, err)))
            return rc;
        c->cluster.gpus_per_node = c->cluster.topology->params.gpus_per_node;
    }
    if (c->cluster.gpus_per_node < 1)
        return err_set(err, TS_EINVAL, "GPUs per node is %d; it must be at least 1", c->cluster.gpus_per_node);
    return TS_OK;
}
