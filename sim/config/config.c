#include "sim/config/config.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "sim/config/overheads.h"
#include "sim/config/topo.h"
#include "sim/util/ckd.h"

const char *const CONFIG_RECOMPUTE_NAMES[] = {"none", "selective", "full", NULL};
const char *const CONFIG_RECOMPUTE_METHOD_NAMES[] = {"uniform", "block", NULL};
const char *const CONFIG_PRECISION_NAMES[] = {"bf16", "fp16", "fp32", NULL};
const char *const CONFIG_NORM_NAMES[] = {"LayerNorm", "RMSNorm", NULL};
const char *const CONFIG_POSITION_NAMES[] = {"learned_absolute", "rope", "yarn", "none", NULL};
const char *const CONFIG_ATTN_BACKEND_NAMES[] = {"unfused", "flash", "fused", "local", "auto", NULL};
const char *const CONFIG_CP_COMM_NAMES[] = {"p2p", "all_gather", "a2a", "a2a+p2p", NULL};
const char *const CONFIG_FP8_FORMAT_NAMES[] = {"none", "e4m3", "hybrid", NULL};
const char *const CONFIG_FP8_RECIPE_NAMES[] = {"delayed", "tensorwise", "blockwise", "mxfp8", NULL};

int config_cp(const config *c)
{
    return c->par.cp > 1 ? c->par.cp : 1;
}
overheads_layout config_overheads_layout(const config *c)
{
    bool moe = c->moe.num_experts > 0;
    return (overheads_layout){.tp = c->par.tp,
                              .pp = c->par.pp,
                              .dp = c->par.dp,
                              .cp = config_cp(c),
                              .ep = moe ? c->moe.ep : 0,
                              .edp = moe ? c->moe.edp : 0,
                              .cp_all_gather = c->par.cp_comm == CP_COMM_ALL_GATHER,
                              .schedule = c->par.schedule,
                              .tied = !c->model.untie_embeddings};
}

const char *const CONFIG_RC_MODULE_NAMES[] = {"core_attn", "mlp",         "layernorm",      "moe",
                                              "moe_act",   "mla_up_proj", "shared_experts", NULL};

bool config_attn_is_flash(config_attn_backend b)
{
    return b == ATTN_BACKEND_FLASH || b == ATTN_BACKEND_FUSED;
}

config_attn_backend config_attn_auto(const gpu_spec *g, config_precision p)
{
    if (p != PREC_FP32 && !g->calibrated_only && g->bf16_tflops > 0)
        return ATTN_BACKEND_FLASH;
    return ATTN_BACKEND_UNFUSED;
}

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

/* The parameter count of flops_param_count (untied output weight and biases
 * counted whether or not the model has them: an upper bound), with checked
 * arithmetic: false when it passes int64, else *out. */
static bool param_count(const model_config *m, int64_t *out)
{
    int64_t h = m->hidden_size, d = config_head_size(m), V = m->padded_vocab_size;
    int64_t pos = m->max_position_embeddings > m->seq_length ? m->max_position_embeddings : m->seq_length;
    int64_t ffn = (m->swiglu ? 2 : 1) * (int64_t)m->ffn_hidden_size, ad, gd, qkv, t1, t2, t3, layer, all, emb;
    bool o = ckd_mul_i64(&ad, m->num_attention_heads, d) || ckd_mul_i64(&gd, 2 * (int64_t)m->num_query_groups, d) ||
             ckd_add_i64(&qkv, ad, gd) || ckd_mul_i64(&t1, h + 1, qkv) ||  /* QKV weight and bias */
             ckd_mul_i64(&t2, ad + 1, h) ||                                /* projection weight and bias */
             ckd_mul_i64(&t3, h + 1, ffn + (int64_t)m->ffn_hidden_size) || /* FC1 and FC2, weights and biases */
             ckd_add_i64(&layer, t1, t2) || ckd_add_i64(&layer, layer, t3) || ckd_add_i64(&layer, layer, 4 * h) ||
             ckd_mul_i64(&all, m->num_layers, layer) || ckd_add_i64(&emb, 2 * V, pos) || /* word, output, position */
             ckd_mul_i64(&emb, emb, h) || ckd_add_i64(&all, all, emb) || ckd_add_i64(&all, all, 2 * h);
    if (!o)
        *out = all;
    return !o;
}

int config_check_model(const model_config *m, ts_err *err)
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
    int64_t params = 0;
    bool fits = param_count(m, &params);
    if (!fits || params > CONFIG_MAX_PARAMS) {
        char count[64];
        if (fits)
            snprintf(count, sizeof count, "%lld", (long long)params);
        else
            snprintf(count, sizeof count, "more than 9.2e18 (past int64)");
        return err_set(err, TS_EINVAL,
                       "the model has %s parameters (--num-layers %d, --hidden-size %d, --ffn-hidden-size %d, "
                       "--padded-vocab-size %d, %d heads of %d): at most 2^56 = %lld are accepted, so that every "
                       "size in bytes stays inside int64; make the shape smaller",
                       count, m->num_layers, m->hidden_size, m->ffn_hidden_size, m->padded_vocab_size,
                       m->num_attention_heads, config_head_size(m), (long long)CONFIG_MAX_PARAMS);
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

static bool has_chunks(sched_kind k)
{
    return k == SCHED_INTERLEAVED || sched_kind_is_v(k);
}

/* The chunks per rank v of a schedule: interleaved >= 2, zb-v exactly 2,
 * the others 1. what names where v came from. */
static int check_chunks(const parallel_config *p, int v, const char *what, ts_err *err)
{
    const char *sn = sched_kind_name(p->schedule);
    if (has_chunks(p->schedule) && p->pp < 2)
        return err_set(err, TS_EINVAL,
                       "--schedule %s needs --pipeline-model-parallel-size >= 2 (got %d; use 1f1b with one stage)", sn,
                       p->pp);
    if (sched_kind_is_v(p->schedule) && v != 2)
        return err_set(err, TS_EINVAL, "--schedule %s runs exactly 2 chunks per pipeline rank; %s gives %d", sn, what,
                       v);
    if (p->schedule == SCHED_INTERLEAVED && v < 2)
        return err_set(err, TS_EINVAL,
                       "--schedule interleaved needs at least 2 chunks per pipeline rank; %s gives %d (or use "
                       "--schedule 1f1b)",
                       what, v);
    if (!has_chunks(p->schedule) && v != 1)
        return err_set(err, TS_EINVAL,
                       "--schedule %s runs one chunk per pipeline rank; %s gives %d (use --schedule interleaved)", sn,
                       what, v);
    return TS_OK;
}

/* --pipeline-model-parallel-layout (parsed into p->layout by flags_finish):
 * it must fit p, --num-layers and the schedule; it is the whole split, so
 * the other split flags must be unset. Derives vp. */
static int check_layout_given(config *c, ts_err *err)
{
    parallel_config *p = &c->par;
    if (p->first_stage_layers || p->last_stage_layers || p->account_for_embedding || p->account_for_loss ||
        p->layers_per_virtual_stage || p->virtual_stages_per_rank)
        return err_set(err, TS_EINVAL,
                       "--pipeline-model-parallel-layout gives the whole split: drop --decoder-first/last-pipeline-"
                       "num-layers, --account-for-embedding/loss-in-pipeline-split, "
                       "--num-layers-per-virtual-pipeline-stage and --num-virtual-stages-per-pipeline-rank");
    int v = 0, rc = sched_layout_check(&p->layout, p->pp, c->model.num_layers, &v, err);
    if (rc)
        return err_prefix(err, "--pipeline-model-parallel-layout: ");
    const sched_layout *l = &p->layout;
    for (int i = 0; i < l->n_stages; i++)
        if (l->layers[i] == 0 && i != l->emb_stage && i != l->loss_stage)
            return err_set(err, TS_EINVAL,
                           "--pipeline-model-parallel-layout: stage %d is empty (no t, E or L); Megatron-core "
                           "accepts empty stages but trainsim does not model them: give it at least one t",
                           i);
    char what[96];
    snprintf(what, sizeof what, "the layout's %d stages over p = %d", l->n_stages, p->pp);
    if ((rc = check_chunks(p, v, what, err)))
        return rc;
    p->vp = v;
    return TS_OK;
}

/* Chunks per rank from --num-virtual-stages-per-pipeline-rank or
 * --num-layers-per-virtual-pipeline-stage (of split_layers layers: with
 * the account-for flags the embedding and loss count, as Megatron-LM's
 * arguments.py) for the uneven forms; 1 without interleaving. */
static int uneven_chunks(config *c, long split_layers, const char *form, ts_err *err)
{
    parallel_config *p = &c->par;
    int vs = p->virtual_stages_per_rank, lv = p->layers_per_virtual_stage, v = 1;
    if (vs && lv)
        return err_set(err, TS_EINVAL,
                       "give one of --num-virtual-stages-per-pipeline-rank and --num-layers-per-virtual-pipeline-"
                       "stage");
    if (vs)
        v = vs;
    else if (lv && (split_layers % ((long)p->pp * lv) || split_layers < (long)p->pp * lv))
        return err_set(err, TS_EINVAL,
                       "%s: %ld layers to split are not divisible by --pipeline-model-parallel-size x "
                       "--num-layers-per-virtual-pipeline-stage = %d x %d (give --num-virtual-stages-per-pipeline-"
                       "rank instead)",
                       form, split_layers, p->pp, lv);
    else if (lv)
        v = (int)(split_layers / ((long)p->pp * lv));
    else if (sched_kind_is_v(p->schedule))
        v = 2;
    else if (p->schedule == SCHED_INTERLEAVED)
        return err_set(err, TS_EINVAL,
                       "--schedule interleaved with %s needs the chunks per rank: give "
                       "--num-virtual-stages-per-pipeline-rank (as Megatron-core for uneven splits)",
                       form);
    char what[160];
    snprintf(what, sizeof what, "%s with %s",
             vs   ? "--num-virtual-stages-per-pipeline-rank"
             : lv ? "--num-layers-per-virtual-pipeline-stage"
                  : "the default",
             form);
    int rc = check_chunks(p, v, what, err);
    if (rc == TS_OK)
        p->vp = v;
    return rc;
}

/* --account-for-embedding/loss-in-pipeline-split: vp here, the split in
 * fill_layout. Megatron-core refuses them with first/last stage counts. */
static int check_account(config *c, ts_err *err)
{
    parallel_config *p = &c->par;
    if (p->first_stage_layers || p->last_stage_layers)
        return err_set(err, TS_EINVAL,
                       "--account-for-embedding/loss-in-pipeline-split and --decoder-first/last-pipeline-num-layers "
                       "exclude each other (both set the first/last stage's share; give one)");
    long total = (long)c->model.num_layers + p->account_for_embedding + p->account_for_loss;
    return uneven_chunks(c, total, "--account-for-embedding/loss-in-pipeline-split", err);
}

/* --decoder-first/last-pipeline-num-layers with interleaving: as
 * Megatron-core, the chunks per rank come from
 * --num-virtual-stages-per-pipeline-rank; ZB-V's V placement puts the
 * first and last stage on rank 0, which Megatron's rank-level split does
 * not describe. */
static int check_uneven_chunks(config *c, ts_err *err)
{
    parallel_config *p = &c->par;
    if (sched_kind_is_v(p->schedule))
        return err_set(err, TS_EINVAL,
                       "--decoder-first/last-pipeline-num-layers cannot be combined with --schedule %s (its V "
                       "placement holds the first and the last stage on rank 0); give a "
                       "--pipeline-model-parallel-layout instead",
                       sched_kind_name(p->schedule));
    if (p->layers_per_virtual_stage)
        return err_set(err, TS_EINVAL,
                       "--decoder-first/last-pipeline-num-layers with --schedule interleaved: give the chunks per "
                       "rank with --num-virtual-stages-per-pipeline-rank, not "
                       "--num-layers-per-virtual-pipeline-stage (chunks differ in size; as Megatron-core)");
    return uneven_chunks(c, c->model.num_layers, "--decoder-first/last-pipeline-num-layers", err);
}

/* Layers to stages: derives vp; checks the schedule's chunk rules. */
static int check_layers(config *c, ts_err *err)
{
    parallel_config *p = &c->par;
    int l = c->model.num_layers, pp = p->pp, lv = p->layers_per_virtual_stage;
    const char *sn = sched_kind_name(p->schedule);
    bool uneven = p->first_stage_layers > 0 || p->last_stage_layers > 0;
    char buf[160];
    if (p->virtual_stages_per_rank < 0)
        return err_set(err, TS_EINVAL, "--num-virtual-stages-per-pipeline-rank %d must be >= 1 (0 = unset)",
                       p->virtual_stages_per_rank);
    if (p->layout_given)
        return check_layout_given(c, err);
    if (p->account_for_embedding || p->account_for_loss)
        return check_account(c, err);
    if (has_chunks(p->schedule) && uneven)
        return check_uneven_chunks(c, err);
    if (p->virtual_stages_per_rank && !has_chunks(p->schedule))
        return err_set(err, TS_EINVAL,
                       "--num-virtual-stages-per-pipeline-rank applies to --schedule interleaved or zb-v only (got "
                       "--schedule %s)",
                       sn);
    if (has_chunks(p->schedule)) {
        if (pp < 2)
            return err_set(err, TS_EINVAL,
                           "--schedule %s needs --pipeline-model-parallel-size >= 2 (got %d; use 1f1b with one stage)",
                           sn, pp);
        if (p->virtual_stages_per_rank) { /* the even split in v chunks per rank */
            int vs = p->virtual_stages_per_rank;
            if (lv)
                return err_set(err, TS_EINVAL,
                               "give one of --num-virtual-stages-per-pipeline-rank and "
                               "--num-layers-per-virtual-pipeline-stage");
            int rc = check_chunks(p, vs, "--num-virtual-stages-per-pipeline-rank", err);
            if (rc)
                return rc;
            if (l % ((long)pp * vs)) {
                nearby(l, (long)pp * vs, buf, sizeof buf);
                return err_set(err, TS_EINVAL,
                               "--num-layers %d is not divisible by --pipeline-model-parallel-size x "
                               "--num-virtual-stages-per-pipeline-rank = %d x %d (use %s layers, or an uneven "
                               "split: --account-for-embedding/loss-in-pipeline-split, "
                               "--decoder-first/last-pipeline-num-layers or --pipeline-model-parallel-layout)",
                               l, pp, vs, buf);
            }
            lv = l / (pp * vs);
        }
        if (sched_kind_is_v(p->schedule) && lv == 0) {
            if (l % (2 * pp)) {
                nearby(l, 2L * pp, buf, sizeof buf);
                return err_set(err, TS_EINVAL,
                               "--schedule %s runs exactly 2 chunks per pipeline rank: --num-layers %d is not "
                               "divisible by 2 x --pipeline-model-parallel-size = %d (use %s layers)",
                               sched_kind_name(p->schedule), l, 2 * pp, buf);
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
        if (sched_kind_is_v(p->schedule) && p->vp != 2)
            return err_set(err, TS_EINVAL,
                           "--schedule %s runs exactly 2 chunks per pipeline rank; "
                           "--num-layers-per-virtual-pipeline-stage %d gives %d (use %d, or leave it unset)",
                           sched_kind_name(p->schedule), lv, p->vp, l % (2 * pp) ? 0 : l / (2 * pp));
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

/* par.layout from the flags that were not a layout string (vp known). */
static int fill_layout(config *c, ts_err *err)
{
    parallel_config *p = &c->par;
    int l = c->model.num_layers, v = p->vp > 0 ? p->vp : 1;
    if (p->layout_given)
        return TS_OK;
    if ((long)p->pp * v > SCHED_LAYOUT_MAX_STAGES)
        return err_set(err, TS_EINVAL, "p x v = %d x %d virtual pipeline stages: at most %d", p->pp, v,
                       SCHED_LAYOUT_MAX_STAGES);
    if (p->schedule == SCHED_CUSTOM && l % (p->pp * v)) {
        memset(&p->layout, 0, sizeof p->layout); /* the schedule file's own split */
        return TS_OK;
    }
    if (p->schedule == SCHED_CUSTOM)
        return sched_layout_even(&p->layout, p->pp * v, l, err);
    if (p->account_for_embedding || p->account_for_loss)
        return sched_layout_account(&p->layout, p->pp, v, l, p->account_for_embedding, p->account_for_loss, err);
    if (p->first_stage_layers || p->last_stage_layers)
        return sched_layout_first_last(&p->layout, p->pp, v, l, p->first_stage_layers, p->last_stage_layers, err);
    return sched_layout_even(&p->layout, p->pp * v, l, err);
}

/* Resolve auto; flash and fused need 16-bit activations on a GPU that
 * runs them (Transformer Engine refuses fp32 inputs). */
static int check_attention(config *c, ts_err *err)
{
    model_config *m = &c->model;
    if ((int)m->attention_backend < ATTN_BACKEND_UNFUSED || (int)m->attention_backend > ATTN_BACKEND_AUTO)
        return err_set(err, TS_EINVAL, "--attention-backend: unknown backend %d", (int)m->attention_backend);
    if (m->attention_backend == ATTN_BACKEND_AUTO)
        m->attention_backend = config_attn_auto(&c->cluster.gpu, m->precision);
    if (config_attn_is_flash(m->attention_backend) &&
        config_attn_auto(&c->cluster.gpu, m->precision) != ATTN_BACKEND_FLASH)
        return err_set(err, TS_EINVAL,
                       "--attention-backend %s needs --bf16 or --fp16 on a GPU with bf16 tensor cores (Ampere or "
                       "later); got %s on %s: use --attention-backend unfused (or auto)",
                       CONFIG_ATTN_BACKEND_NAMES[m->attention_backend], CONFIG_PRECISION_NAMES[m->precision],
                       c->cluster.gpu.name[0] ? c->cluster.gpu.name : "an unnamed GPU");
    return TS_OK;
}

/* FP8 needs FP8 tensor cores (gpus.csv's fp8_tflops), 16-bit activations
 * around the FP8 GEMMs (Transformer Engine's FP8 autocast runs under bf16 or
 * fp16), and MXFP8 Blackwell's block-scaled tensor cores (sm100; Hopper's
 * FP8 MMA takes one scale per tensor). --fp8-param-gather needs FP8. */
static int check_fp8(const config *c, ts_err *err)
{
    const model_config *m = &c->model;
    const char *gpu = c->cluster.gpu.name[0] ? c->cluster.gpu.name : "an unnamed GPU";
    if ((int)m->fp8_format < FP8_FORMAT_NONE || (int)m->fp8_format > FP8_FORMAT_HYBRID ||
        (int)m->fp8_recipe < FP8_RECIPE_DELAYED || (int)m->fp8_recipe > FP8_RECIPE_MXFP8)
        return err_set(err, TS_EINVAL, "--fp8-format %d / --fp8-recipe %d: unknown value", (int)m->fp8_format,
                       (int)m->fp8_recipe);
    if (m->fp8_format == FP8_FORMAT_NONE) {
        if (m->fp8_param_gather)
            return err_set(err, TS_EINVAL, "--fp8-param-gather needs FP8 training: give --fp8-format e4m3|hybrid");
        return TS_OK;
    }
    if (!(c->cluster.gpu.fp8_tflops > 0))
        return err_set(err, TS_EINVAL,
                       "--fp8-format %s: %s has no FP8 tensor cores (no fp8_tflops in the GPU catalogue); FP8 "
                       "training needs Hopper or later (e.g. --gpu H100-SXM5-80GB)",
                       CONFIG_FP8_FORMAT_NAMES[m->fp8_format], gpu);
    if (m->fp8_param_gather && !c->par.distributed_optimizer && !c->par.torch_fsdp2 && !c->par.megatron_fsdp)
        return err_set(
            err, TS_EINVAL,
            "--fp8-param-gather needs a parameter all-gather to make FP8: give "
            "--use-distributed-optimizer, --use-torch-fsdp2 or --use-megatron-fsdp (as Megatron-LM asserts)");
    if (m->precision == PREC_FP32)
        return err_set(err, TS_EINVAL,
                       "--fp8-format %s needs --bf16 or --fp16 (Transformer Engine runs FP8 GEMMs inside 16-bit "
                       "training); got fp32",
                       CONFIG_FP8_FORMAT_NAMES[m->fp8_format]);
    /* Blackwell = the catalogue's GPUs with FP4 tensor cores: the block-scaled
     * MMA (MXFP8, MXFP4, NVFP4) came with them (gpus_blackwell.csv) */
    if (m->fp8_recipe == FP8_RECIPE_MXFP8 && !(c->cluster.gpu.fp4_tflops > 0))
        return err_set(err, TS_EINVAL,
                       "--fp8-recipe mxfp8 needs Blackwell's block-scaled tensor cores; %s has none: use "
                       "delayed, tensorwise or blockwise (or --gpu B200-SXM-180GB)",
                       gpu);
    return TS_OK;
}

static int check_recompute(const config *c, ts_err *err)
{
    const parallel_config *p = &c->par;
    unsigned dense = CONFIG_RC_CORE_ATTN | CONFIG_RC_MLP | CONFIG_RC_LAYERNORM;
    if (c->moe.num_experts > 0) /* the routed experts' activation; the whole MoE block (moe.h, moe_block_ops) */
        dense |= CONFIG_RC_MOE_ACT | CONFIG_RC_MOE;
    if (c->moe.mla) /* the MLA up-projections and rope (mla.h) */
        dense |= CONFIG_RC_MLA_UP_PROJ;
    if (p->recompute_modules & ~dense) {
        for (int i = 0; CONFIG_RC_MODULE_NAMES[i]; i++)
            if (p->recompute_modules & ~dense & (1u << i))
                return err_set(err, TS_EINVAL,
                               "--recompute-modules %s: not modelled%s (valid: core_attn, mlp, layernorm; "
                               "moe, moe_act with --num-experts; mla_up_proj with --multi-latent-attention)",
                               CONFIG_RC_MODULE_NAMES[i],
                               (1u << i) == CONFIG_RC_MOE_ACT || (1u << i) == CONFIG_RC_MOE
                                   ? " without --num-experts (moe: also --moe-layer-recompute)"
                                   : "");
        return err_set(err, TS_EINVAL, "--recompute-modules: unknown module bits 0x%x", p->recompute_modules);
    }
    if ((p->recompute_modules & CONFIG_RC_MOE) && (p->recompute_modules & CONFIG_RC_MOE_ACT))
        return err_set(err, TS_EINVAL,
                       "--recompute-modules moe with moe_act (or --moe-layer-recompute with --recompute-modules "
                       "moe_act): moe re-runs the whole MoE layer, the activation's own checkpoint nested inside it "
                       "is not modelled (give one)");
    if (p->recompute_modules && p->recompute != RECOMPUTE_SELECTIVE)
        return err_set(err, TS_EINVAL, "--recompute-modules applies to --recompute-granularity selective only (got %s)",
                       CONFIG_RECOMPUTE_NAMES[p->recompute]);
    if (p->recompute_num_layers < 0)
        return err_set(err, TS_EINVAL, "--recompute-num-layers %d must be >= 0", p->recompute_num_layers);
    if (p->recompute_num_layers > 0 && p->recompute != RECOMPUTE_FULL)
        return err_set(err, TS_EINVAL, "--recompute-num-layers applies to --recompute-granularity full only (got %s)",
                       CONFIG_RECOMPUTE_NAMES[p->recompute]);
    int per_stage = c->model.num_layers / (p->pp * (p->vp > 0 ? p->vp : 1));
    if (p->layout.n_stages > 0)
        per_stage = sched_layout_max_layers(&p->layout);
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
    if (p->cp < 0 || p->cp > 65536)
        return err_set(err, TS_EINVAL, "--context-parallel-size %d: must be in [1, 65536]", p->cp);
    int cp = config_cp(c);
    long tpp = (long)p->tp * p->pp * cp;
    char buf[160];
    if (cp > 1 && p->dp > 0 && tpp * p->dp != gpus)
        return err_set(err, TS_EINVAL,
                       "--gpus %d != t x cp x p x d = %d x %d x %d x %d = %ld (set --gpus %ld, or leave "
                       "--data-parallel-size unset to derive d = gpus / (t x cp x p))",
                       gpus, p->tp, cp, p->pp, p->dp, tpp * p->dp, tpp * p->dp);
    if (cp > 1 && p->dp <= 0 && gpus % tpp) {
        nearby(gpus, tpp, buf, sizeof buf);
        return err_set(err, TS_EINVAL,
                       "--gpus %d is not a multiple of t x cp x p = %d x %d x %d = %ld (the context-parallel "
                       "ranks are part of the world: use %s GPUs)",
                       gpus, p->tp, cp, p->pp, tpp, buf);
    }
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

const char *const CONFIG_SHARDING_NAMES[] = {"no_shard", "optim", "optim_grads", "optim_grads_params", NULL};

config_sharding config_fsdp_sharding(const parallel_config *p)
{
    if (p->torch_fsdp2)
        return SHARD_OPTIM_GRADS_PARAMS;
    if (p->megatron_fsdp)
        return (config_sharding)p->dp_sharding;
    return SHARD_NO_SHARD;
}

/* Megatron-LM's preconditions of the overlap flags (arguments.py asserts). */
static int check_overlap(config *c, ts_err *err)
{
    parallel_config *p = &c->par;
    if (p->overlap_param_gather && !(p->distributed_optimizer && p->overlap_grad_reduce))
        return err_set(err, TS_EINVAL,
                       "--overlap-param-gather needs --use-distributed-optimizer and --overlap-grad-reduce "
                       "(Megatron-LM's preconditions)");
    if (p->tp_comm_overlap && p->tp > 1 && !p->sequence_parallel)
        return err_set(err, TS_EINVAL,
                       "--tp-comm-overlap needs --sequence-parallel at t = %d (Megatron-LM overlaps "
                       "only the sequence-parallel all-gathers and reduce-scatters)",
                       p->tp);
    if (p->tp == 1)
        p->tp_comm_overlap = false; /* no tensor-parallel communication to overlap */
    if (p->torch_fsdp2 && p->megatron_fsdp)
        return err_set(err, TS_EINVAL, "--use-torch-fsdp2 and --use-megatron-fsdp exclude each other (give one)");
    if (p->dp_sharding < SHARD_NO_SHARD || p->dp_sharding > SHARD_OPTIM_GRADS_PARAMS)
        return err_set(err, TS_EINVAL, "--data-parallel-sharding-strategy %d is not valid", (int)p->dp_sharding);
    return TS_OK;
}

/* ---- context parallelism: Megatron-core's rules (cp.h has the costs) ---- */

/* The a2a and ring sizes of the comm type (a2a: the whole cp; p2p and
 * all_gather: 1 and cp; a2a+p2p: the hierarchical sizes). */
static void cp_levels(const parallel_config *p, int cp, int *a2a, int *ring)
{
    *a2a = p->cp_comm == CP_COMM_A2A ? cp : p->cp_comm == CP_COMM_A2A_P2P ? p->cp_a2a : 1;
    *ring = p->cp_comm == CP_COMM_A2A ? 1 : p->cp_comm == CP_COMM_A2A_P2P ? p->cp_p2p : cp;
}

static int check_cp(config *c, ts_err *err)
{
    parallel_config *p = &c->par;
    const model_config *m = &c->model;
    int cp = config_cp(c), a2a, ring;
    char buf[160];
    if ((int)p->cp_comm < CP_COMM_P2P || (int)p->cp_comm > CP_COMM_A2A_P2P)
        return err_set(err, TS_EINVAL, "--cp-comm-type %d: valid: p2p, all_gather, a2a, a2a+p2p", (int)p->cp_comm);
    bool hier = p->cp_a2a > 0 || p->cp_p2p > 0;
    if (hier && p->cp_comm != CP_COMM_A2A_P2P)
        return err_set(err, TS_EINVAL,
                       "--hierarchical-context-parallel-sizes is given with --cp-comm-type %s: it applies to "
                       "a2a+p2p only (remove it, or use --cp-comm-type a2a+p2p)",
                       CONFIG_CP_COMM_NAMES[p->cp_comm]);
    if (p->cp_comm == CP_COMM_A2A_P2P && (p->cp_a2a < 1 || p->cp_p2p < 1 || (long)p->cp_a2a * p->cp_p2p != cp))
        return err_set(err, TS_EINVAL,
                       "--cp-comm-type a2a+p2p needs --hierarchical-context-parallel-sizes A P with A x P = "
                       "--context-parallel-size %d (A: the all-to-all level, P: the ring level; got %d x %d)",
                       cp, p->cp_a2a, p->cp_p2p);
    if (cp == 1)
        return TS_OK;
    if (!config_attn_is_flash(m->attention_backend))
        return err_set(err, TS_EINVAL,
                       "--context-parallel-size %d needs --attention-backend flash or fused (Transformer "
                       "Engine's context-parallel attention; the %s kernels have no context-parallel form)",
                       cp, CONFIG_ATTN_BACKEND_NAMES[m->attention_backend]);
    if (m->seq_length % (2 * cp)) {
        nearby(m->seq_length, 2 * cp, buf, sizeof buf);
        return err_set(err, TS_EINVAL,
                       "--seq-length %d is not divisible by 2 x --context-parallel-size = %d (the sequence "
                       "is cut into 2 x cp chunks, two per rank, for the causal load balance; use %s tokens)",
                       m->seq_length, 2 * cp, buf);
    }
    if (p->sequence_parallel && p->tp > 1 && (m->seq_length / cp) % p->tp)
        return err_set(err, TS_EINVAL,
                       "--sequence-parallel: the %d tokens per context-parallel rank (--seq-length %d / "
                       "--context-parallel-size %d) are not divisible by --tensor-model-parallel-size %d",
                       m->seq_length / cp, m->seq_length, cp, p->tp);
    cp_levels(p, cp, &a2a, &ring);
    int groups = m->num_query_groups > 0 ? m->num_query_groups : m->num_attention_heads;
    if (a2a > 1 && ((m->num_attention_heads / p->tp) % a2a || (groups / p->tp) % a2a))
        return err_set(err, TS_EINVAL,
                       "--cp-comm-type %s: the all-to-all splits each tensor-parallel rank's heads over %d "
                       "ranks, but --num-attention-heads %d / t %d and --num-query-groups %d / t must both be "
                       "divisible by %d (use p2p or all_gather, or an all-to-all size dividing both)",
                       CONFIG_CP_COMM_NAMES[p->cp_comm], a2a, m->num_attention_heads, p->tp, groups, a2a);
    return TS_OK;
}

int config_resolve(config *c, ts_err *err)
{
    int rc;
    /* The simulator's lowering, memory model and the executor know one chain
     * of stages and one model copy; DualPipe has two. */
    if (c->par.schedule == SCHED_DUALPIPE)
        return err_set(err, TS_EINVAL,
                       "--schedule dualpipe (two model copies) is not modelled by simulate, search or trainexec; "
                       "time it with trainsim schedule --schedule dualpipe, or use --schedule dualpipev");
    if ((rc = config_check_model(&c->model, err)) || (rc = check_parallel(c, err)) || (rc = check_tp(c, err)))
        return rc;
    if (c->par.schedule < 0 || c->par.schedule >= SCHED_KIND_COUNT)
        return err_set(err, TS_EINVAL, "schedule kind %d is not valid", (int)c->par.schedule);
    if (c->par.schedule == SCHED_CUSTOM && c->par.layout_given) {
        if ((rc = sched_layout_check(&c->par.layout, c->par.pp, c->model.num_layers, &c->par.vp, err)))
            return err_prefix(err, "--pipeline-model-parallel-layout: ");
    } else if (c->par.schedule == SCHED_CUSTOM) {
        c->par.vp = c->par.layers_per_virtual_stage > 0
                        ? c->model.num_layers / (c->par.pp * c->par.layers_per_virtual_stage)
                        : 1;
    } else if ((rc = check_layers(c, err))) {
        return rc;
    }
    if ((rc = fill_layout(c, err)) || (rc = check_recompute(c, err)) || (rc = check_attention(c, err)) ||
        (rc = check_cp(c, err)) || (rc = check_fp8(c, err)))
        return rc;
    if (c->par.tp == 1)
        c->par.sequence_parallel = false; /* as Megatron-LM: a no-op with one tensor-parallel rank */
    if ((rc = check_overlap(c, err)))
        return rc;
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
