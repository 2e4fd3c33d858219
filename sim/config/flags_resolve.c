/* flags_resolve — the flag table resolved into a configuration: presets
 * and Megatron-LM's defaults under the flags given, the checks of their
 * combinations, each with the flag that broke it (flags.h: flags_finish). */
#include "sim/config/flags.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "sim/config/catalog.h"
#include "sim/config/catalog_models.h"
#include "sim/config/megatron_flags.h"
#include "sim/config/moe_flags.h"
#include "sim/config/topo.h"

/* Megatron-LM's argument defaults (megatron/training/arguments.py) for the
 * fields it has defaults for; 0 marks a required or derived value. */
#define MEGATRON_VOCAB                   50257 /* GPT2BPETokenizer, pretrain_gpt.py's default tokenizer */
#define MEGATRON_MAKE_VOCAB_DIVISIBLE_BY 128
#define MEGATRON_DROPOUT                 0.1 /* --attention-dropout and --hidden-dropout */

static void megatron_defaults(config *b)
{
    memset(b, 0, sizeof *b);
    snprintf(b->model.name, sizeof b->model.name, "custom");
    b->model.vocab_size = MEGATRON_VOCAB;
    b->model.make_vocab_size_divisible_by = MEGATRON_MAKE_VOCAB_DIVISIBLE_BY;
    b->model.add_bias_linear = true;
    b->model.normalization = NORM_LAYERNORM;
    b->model.position_embedding = POS_LEARNED_ABSOLUTE;
    b->model.attention_dropout = MEGATRON_DROPOUT;
    b->model.hidden_dropout = MEGATRON_DROPOUT;
    b->model.precision = PREC_FP32;
    b->model.attention_backend = ATTN_BACKEND_AUTO;
    b->par.tp = 1;
    b->par.pp = 1;
    b->par.schedule = SCHED_1F1B;
}

/* A preset over Megatron-LM's defaults: what models.csv gives. */
static int preset_base(const catalog_model *pm, config *b, ts_err *err)
{
    megatron_defaults(b);
    b->model = pm->model;
    b->model.make_vocab_size_divisible_by = MEGATRON_MAKE_VOCAB_DIVISIBLE_BY;
    b->model.attention_dropout = MEGATRON_DROPOUT; /* no preset sets them */
    b->model.hidden_dropout = MEGATRON_DROPOUT;
    b->model.attention_backend = ATTN_BACKEND_AUTO; /* no preset sets it: Megatron-LM's default */
    b->par = pm->par;
    b->moe = pm->moe;
    b->cluster.gpus = pm->gpus;
    if (sched_kind_parse(pm->schedule, &b->par.schedule, err))
        return err_prefix(err, "model preset %s (topologies/models.csv), column 'schedule': ", pm->model.name);
    return TS_OK;
}

static void rule(flags_state *s, flags_field f, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void rule(flags_state *s, flags_field f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->rule[f], sizeof s->rule[f], fmt, ap);
    va_end(ap);
    s->src[f] = FLAGS_SRC_DERIVED;
}

/* The field's flag was given: keep its value. Otherwise take the base's
 * and record where it came from. */
#define TAKE(F, flag, dst, base)                                                                                       \
    do {                                                                                                               \
        if (opt_was_set(t, flag)) {                                                                                    \
            s->src[F] = FLAGS_SRC_FLAG;                                                                                \
        } else {                                                                                                       \
            (dst) = (base);                                                                                            \
            s->src[F] = basesrc;                                                                                       \
        }                                                                                                              \
    } while (0)

static const char *const REQUIRED[] = {"--num-layers", "--hidden-size",      "--num-attention-heads",
                                       "--seq-length", "--micro-batch-size", NULL};

/* Megatron-LM's required flags, when no preset gives them. */
static int check_required(const opt_table *t, ts_err *err)
{
    char miss[256] = "";
    size_t off = 0;
    for (int i = 0; REQUIRED[i]; i++)
        if (!opt_was_set(t, REQUIRED[i]) && off < sizeof miss)
            off += (size_t)snprintf(miss + off, sizeof miss - off, "%s%s", off ? ", " : "", REQUIRED[i]);
    if (off)
        return err_set(err, TS_EINVAL,
                       "no model: Megatron-LM requires %s (missing: %s); or start from a preset with --model NAME "
                       "(trainsim config --list-models; --model " FLAGS_DEFAULT_MODEL " is the built-in default)",
                       "--num-layers, --hidden-size, --num-attention-heads, --seq-length and --micro-batch-size", miss);
    return TS_OK;
}

static int resolve_model(flags_state *s, const opt_table *t, const config *base, flags_source basesrc, ts_err *err)
{
    model_config *m = &s->c->model;
    const model_config *q = &base->model;
    bool preset = basesrc != FLAGS_SRC_MEGATRON;
    bool set_h = opt_was_set(t, "--hidden-size"), set_sw = opt_was_set(t, "--swiglu");
    bool set_heads = opt_was_set(t, "--num-attention-heads");
    TAKE(FLAGS_F_LAYERS, "--num-layers", m->num_layers, q->num_layers);
    TAKE(FLAGS_F_HIDDEN, "--hidden-size", m->hidden_size, q->hidden_size);
    TAKE(FLAGS_F_HEADS, "--num-attention-heads", m->num_attention_heads, q->num_attention_heads);
    TAKE(FLAGS_F_SWIGLU, "--swiglu", m->swiglu, q->swiglu);
    TAKE(FLAGS_F_SEQ, "--seq-length", m->seq_length, q->seq_length);
    TAKE(FLAGS_F_ADROP, "--attention-dropout", m->attention_dropout, q->attention_dropout);
    TAKE(FLAGS_F_HDROP, "--hidden-dropout", m->hidden_dropout, q->hidden_dropout);
    if (!opt_was_set(t, "--attention-dropout"))
        s->src[FLAGS_F_ADROP] = FLAGS_SRC_MEGATRON;
    if (!opt_was_set(t, "--hidden-dropout"))
        s->src[FLAGS_F_HDROP] = FLAGS_SRC_MEGATRON;
    TAKE(FLAGS_F_UNTIE, "--untie-embeddings-and-output-weights", m->untie_embeddings, q->untie_embeddings);
    TAKE(FLAGS_F_MAKEDIV, "--make-vocab-size-divisible-by", m->make_vocab_size_divisible_by,
         q->make_vocab_size_divisible_by);
    if (!opt_was_set(t, "--make-vocab-size-divisible-by"))
        s->src[FLAGS_F_MAKEDIV] = FLAGS_SRC_MEGATRON; /* no preset sets it */
    if (opt_was_set(t, "--normalization")) {
        m->normalization = (config_norm)s->normalization;
        s->src[FLAGS_F_NORM] = FLAGS_SRC_FLAG;
    } else {
        m->normalization = q->normalization;
        s->src[FLAGS_F_NORM] = basesrc;
    }
    if (opt_was_set(t, "--position-embedding-type")) {
        m->position_embedding = (config_position)s->position;
        s->src[FLAGS_F_POS] = FLAGS_SRC_FLAG;
    } else {
        m->position_embedding = q->position_embedding;
        s->src[FLAGS_F_POS] = basesrc;
    }
    /* Megatron-LM's validate_args (arguments.py): "--no-position-embedding is deprecated, use
     * --position-embedding-type" unless the type is rope, whose rotary embedding has no table to drop */
    if (opt_was_set(t, "--no-position-embedding") && s->no_position_embedding && m->position_embedding != POS_ROPE)
        return err_set(err, TS_EINVAL,
                       "--no-position-embedding with --position-embedding-type %s: Megatron-LM refuses it (deprecated; "
                       "it is accepted only with rope, where it changes nothing): give --position-embedding-type none",
                       CONFIG_POSITION_NAMES[m->position_embedding]);
    if (!opt_was_set(t, "--qk-layernorm"))
        m->qk_layernorm = q->qk_layernorm;
    m->add_bias_linear = opt_was_set(t, "--disable-bias-linear") ? !s->disable_bias : q->add_bias_linear;
    s->src[FLAGS_F_BIAS] = opt_was_set(t, "--disable-bias-linear") ? FLAGS_SRC_FLAG : basesrc;

    /* --kv-channels: Megatron-LM derives h / a */
    if (opt_was_set(t, "--kv-channels")) {
        s->src[FLAGS_F_KV] = FLAGS_SRC_FLAG;
    } else if (preset && !set_h && !set_heads && q->kv_channels > 0 && q->num_attention_heads > 0 &&
               q->kv_channels != q->hidden_size / q->num_attention_heads) {
        m->kv_channels = q->kv_channels; /* the preset's head size (models.csv kv_channels) */
        s->src[FLAGS_F_KV] = basesrc;
    } else {
        m->kv_channels = m->num_attention_heads > 0 && m->hidden_size % m->num_attention_heads == 0
                             ? m->hidden_size / m->num_attention_heads
                             : 0;
        rule(s, FLAGS_F_KV, "h / a");
    }
    /* grouped-query attention: a GQA preset counts as --group-query-attention */
    bool gqa = s->gqa || (preset && !opt_was_set(t, "--group-query-attention") && q->num_query_groups > 0 &&
                          q->num_query_groups < q->num_attention_heads);
    if (opt_was_set(t, "--num-query-groups")) {
        if (!gqa)
            return err_set(err, TS_EINVAL,
                           "--num-query-groups %d takes effect only with --group-query-attention (Megatron-LM "
                           "ignores it otherwise): add --group-query-attention, or drop --num-query-groups",
                           m->num_query_groups);
        s->src[FLAGS_F_GROUPS] = FLAGS_SRC_FLAG;
    } else if (!gqa) {
        m->num_query_groups = m->num_attention_heads;
        rule(s, FLAGS_F_GROUPS, "one per head (no --group-query-attention)");
    } else if (preset && q->num_query_groups < q->num_attention_heads &&
               (!set_heads || m->num_attention_heads % q->num_query_groups == 0)) {
        m->num_query_groups = q->num_query_groups; /* the preset's groups, while they divide the heads */
        s->src[FLAGS_F_GROUPS] = basesrc;
    } else {
        m->num_query_groups = 1; /* Megatron-LM's default for --num-query-groups */
        s->src[FLAGS_F_GROUPS] = FLAGS_SRC_MEGATRON;
    }
    /* --ffn-hidden-size: the preset's, unless h or the MLP kind changed */
    if (opt_was_set(t, "--ffn-hidden-size")) {
        s->src[FLAGS_F_FFN] = FLAGS_SRC_FLAG;
    } else if (preset && !set_h && !set_sw) {
        m->ffn_hidden_size = q->ffn_hidden_size;
        s->src[FLAGS_F_FFN] = basesrc;
    } else if (m->swiglu) { /* Megatron-LM's rule (arguments.py) */
        m->ffn_hidden_size = (int)((4.0 * m->hidden_size * 2 / 3) / 64) * 64;
        rule(s, FLAGS_F_FFN, "SwiGLU: 8h/3 rounded down to a multiple of 64");
    } else {
        m->ffn_hidden_size = 4 * m->hidden_size;
        rule(s, FLAGS_F_FFN, "4h");
    }
    if (opt_was_set(t, "--max-position-embeddings")) {
        s->src[FLAGS_F_MAXPOS] = FLAGS_SRC_FLAG;
    } else {
        m->max_position_embeddings = m->seq_length;
        rule(s, FLAGS_F_MAXPOS, "= --seq-length (the smallest table Megatron-LM accepts)");
    }
    m->precision = s->fp32 ? PREC_FP32 : s->fp16 ? PREC_FP16 : s->bf16 ? PREC_BF16 : q->precision;
    s->src[FLAGS_F_PREC] = s->fp32 || s->fp16 || s->bf16 ? FLAGS_SRC_FLAG : basesrc;

    static const char *const SHAPE[] = {"--num-layers",
                                        "--hidden-size",
                                        "--num-attention-heads",
                                        "--kv-channels",
                                        "--num-query-groups",
                                        "--group-query-attention",
                                        "--ffn-hidden-size",
                                        "--swiglu",
                                        "--seq-length",
                                        "--vocab-size",
                                        "--padded-vocab-size",
                                        "--untie-embeddings-and-output-weights",
                                        "--disable-bias-linear",
                                        "--normalization",
                                        "--qk-layernorm",
                                        "--position-embedding-type",
                                        NULL};
    bool changed = false;
    for (int i = 0; SHAPE[i]; i++)
        changed |= opt_was_set(t, SHAPE[i]);
    if (basesrc == FLAGS_SRC_BUILTIN)
        snprintf(m->name, sizeof m->name, "%.40s (built-in default)", q->name);
    else if (preset)
        snprintf(m->name, sizeof m->name, "%.40s%s", q->name, changed ? " (modified)" : "");
    else
        snprintf(m->name, sizeof m->name, "custom");
    return TS_OK;
}

/* The vocabulary, once t is known: --padded-vocab-size as given, or the
 * preset's padded size, or --vocab-size padded as Megatron-LM pads it. */
static int resolve_vocab(flags_state *s, const opt_table *t, const config *base, flags_source basesrc, ts_err *err)
{
    model_config *m = &s->c->model;
    bool set_v = opt_was_set(t, "--vocab-size"), set_pv = opt_was_set(t, "--padded-vocab-size");
    if (set_v && set_pv)
        return err_set(err, TS_EINVAL,
                       "--vocab-size and --padded-vocab-size exclude each other (give the tokenizer's size with "
                       "--vocab-size, padded as Megatron-LM pads it, or the padded size itself)");
    if (set_pv) {
        m->vocab_size = 0;
        s->src[FLAGS_F_PADDED] = FLAGS_SRC_FLAG;
        s->src[FLAGS_F_VOCAB] = FLAGS_SRC_FLAG;
        snprintf(s->rule[FLAGS_F_VOCAB], sizeof s->rule[FLAGS_F_VOCAB], "(not used: --padded-vocab-size given)");
        return TS_OK;
    }
    if (!set_v && base->model.vocab_size == 0) { /* a preset with a published padded size */
        m->vocab_size = 0;
        m->padded_vocab_size = base->model.padded_vocab_size;
        s->src[FLAGS_F_PADDED] = basesrc;
        s->src[FLAGS_F_VOCAB] = basesrc;
        snprintf(s->rule[FLAGS_F_VOCAB], sizeof s->rule[FLAGS_F_VOCAB], "(the preset gives the padded size)");
        return TS_OK;
    }
    if (!set_v) {
        m->vocab_size = base->model.vocab_size;
        s->src[FLAGS_F_VOCAB] = basesrc;
    } else {
        s->src[FLAGS_F_VOCAB] = FLAGS_SRC_FLAG;
    }
    int rc = config_pad_vocab(m->vocab_size, m->make_vocab_size_divisible_by, s->c->par.tp, &m->padded_vocab_size, err);
    if (rc)
        return rc;
    rule(s, FLAGS_F_PADDED, "--vocab-size padded to a multiple of %d x t = %lld", m->make_vocab_size_divisible_by,
         (long long)m->make_vocab_size_divisible_by * s->c->par.tp);
    return TS_OK;
}

static int resolve_recompute(flags_state *s, const opt_table *t, const config *base, flags_source basesrc, ts_err *err)
{
    parallel_config *p = &s->c->par;
    bool set_g = opt_was_set(t, "--recompute-granularity");
    if (s->recompute_activations) {
        if (set_g && s->recompute != RECOMPUTE_SELECTIVE)
            return err_set(err, TS_EINVAL,
                           "--recompute-activations means --recompute-granularity selective; it conflicts with "
                           "--recompute-granularity %s (give one)",
                           CONFIG_RECOMPUTE_NAMES[s->recompute]);
        p->recompute = RECOMPUTE_SELECTIVE;
        s->src[FLAGS_F_RECOMPUTE] = FLAGS_SRC_FLAG;
    } else if (set_g) {
        p->recompute = (config_recompute)s->recompute;
        s->src[FLAGS_F_RECOMPUTE] = FLAGS_SRC_FLAG;
    } else {
        p->recompute = base->par.recompute;
        s->src[FLAGS_F_RECOMPUTE] = basesrc;
    }
    p->recompute_method = (config_recompute_method)s->recompute_method;
    s->src[FLAGS_F_RMETHOD] = opt_was_set(t, "--recompute-method") ? FLAGS_SRC_FLAG : FLAGS_SRC_MEGATRON;
    if (opt_was_set(t, "--recompute-method") && p->recompute != RECOMPUTE_FULL) /* as Megatron-LM */
        return err_set(err, TS_EINVAL, "--recompute-method applies to --recompute-granularity full only (got %s)",
                       CONFIG_RECOMPUTE_NAMES[p->recompute]);
    if (!opt_was_set(t, "--recompute-num-layers"))
        p->recompute_num_layers = 0;
    s->src[FLAGS_F_RLAYERS] = opt_was_set(t, "--recompute-num-layers") ? FLAGS_SRC_FLAG : FLAGS_SRC_MEGATRON;
    p->recompute_modules = opt_was_set(t, "--recompute-modules") ? s->rc_modules : 0;
    s->src[FLAGS_F_RMODULES] = opt_was_set(t, "--recompute-modules") ? FLAGS_SRC_FLAG : FLAGS_SRC_MEGATRON;
    if (s->moe.layer_recompute) {
        s->src[FLAGS_F_RECOMPUTE] = s->src[FLAGS_F_RMODULES] = FLAGS_SRC_FLAG;
        return moe_flags_layer_recompute(&s->moe, p, err);
    }
    return TS_OK;
}

/* --attention-backend and --use-flash-attn; auto is resolved by
 * config_resolve, once the GPU and the precision are known. */
static int resolve_attention(flags_state *s, const opt_table *t, ts_err *err)
{
    model_config *m = &s->c->model;
    bool set_b = opt_was_set(t, "--attention-backend");
    if (s->use_flash_attn && set_b && s->attention_backend != ATTN_BACKEND_FLASH)
        return err_set(err, TS_EINVAL,
                       "--use-flash-attn means --attention-backend flash; it conflicts with "
                       "--attention-backend %s (give one)",
                       CONFIG_ATTN_BACKEND_NAMES[s->attention_backend]);
    m->attention_backend = s->use_flash_attn ? ATTN_BACKEND_FLASH : (config_attn_backend)s->attention_backend;
    m->fp8_format = s->fp8_format < 0 ? FP8_FORMAT_NONE : (config_fp8_format)(s->fp8_format + 1);
    m->fp8_recipe = (config_fp8_recipe)s->fp8_recipe;
    s->src[FLAGS_F_ATTN] = set_b || s->use_flash_attn ? FLAGS_SRC_FLAG : FLAGS_SRC_MEGATRON;
    return TS_OK;
}

/* --pipeline-model-parallel-layout into par.layout. A layout is the whole
 * split, so it drops the preset's (not explicitly given) first/last split
 * and interleaving, and without --schedule more stages than p mean
 * interleaved 1F1B (Megatron-core takes v from the layout); the
 * account-for flags and an explicit virtual-pipeline flag drop the
 * preset's first/last split too (it was chosen for the preset's chunks). */
static int resolve_pipeline_layout(flags_state *s, const opt_table *t, ts_err *err)
{
    parallel_config *p = &s->c->par;
    p->layout_given = s->pipeline_layout != NULL;
    bool chunks = opt_was_set(t, "--num-virtual-stages-per-pipeline-rank") ||
                  opt_was_set(t, "--num-layers-per-virtual-pipeline-stage");
    const char *why = p->layout_given                                   ? "--pipeline-model-parallel-layout"
                      : p->account_for_embedding || p->account_for_loss ? "an account-for flag"
                                                                        : "a virtual-pipeline flag";
    if ((p->layout_given || p->account_for_embedding || p->account_for_loss || chunks) &&
        (p->first_stage_layers || p->last_stage_layers)) {
        if (!opt_was_set(t, "--decoder-first-pipeline-num-layers")) {
            p->first_stage_layers = 0;
            rule(s, FLAGS_F_FIRST, "the preset's uneven split dropped (%s given)", why);
        }
        if (!opt_was_set(t, "--decoder-last-pipeline-num-layers")) {
            p->last_stage_layers = 0;
            rule(s, FLAGS_F_LAST, "the preset's uneven split dropped (%s given)", why);
        }
    }
    if (p->layout_given && !opt_was_set(t, "--num-layers-per-virtual-pipeline-stage") && p->layers_per_virtual_stage) {
        p->layers_per_virtual_stage = 0;
        rule(s, FLAGS_F_VP, "the preset's interleaving dropped (%s given)", why);
    }
    if (!p->layout_given)
        return TS_OK;
    int rc = sched_layout_parse(s->pipeline_layout, &p->layout, err);
    if (rc)
        return err_prefix(err, "--pipeline-model-parallel-layout: ");
    if (!opt_was_set(t, "--schedule") && p->layout.n_stages > p->pp) {
        p->schedule = SCHED_INTERLEAVED;
        rule(s, FLAGS_F_SCHEDULE, "interleaved 1F1B (the layout lists more stages than p)");
    }
    return TS_OK;
}

/* The schedule and its virtual stages. */
static int resolve_schedule(flags_state *s, const opt_table *t, const config *base, flags_source basesrc, ts_err *err)
{
    parallel_config *p = &s->c->par;
    const parallel_config *q = &base->par;
    bool set_pp = opt_was_set(t, "--pipeline-model-parallel-size") && basesrc != FLAGS_SRC_MEGATRON && p->pp != q->pp;
    bool set_lv = opt_was_set(t, "--num-layers-per-virtual-pipeline-stage");
    bool set_vs = opt_was_set(t, "--num-virtual-stages-per-pipeline-rank");
    bool set_sched = opt_was_set(t, "--schedule");
    if (set_lv && set_vs) /* Megatron-LM asserts the same */
        return err_set(err, TS_EINVAL,
                       "--num-layers-per-virtual-pipeline-stage and --num-virtual-stages-per-pipeline-rank exclude "
                       "each other (give one)");
    /* an uneven split (first/last, account-for, layout string) keeps the
     * chunk count for config_resolve; an even one becomes layers per chunk */
    bool uneven = opt_was_set(t, "--decoder-first-pipeline-num-layers") ||
                  opt_was_set(t, "--decoder-last-pipeline-num-layers") ||
                  opt_was_set(t, "--account-for-embedding-in-pipeline-split") ||
                  opt_was_set(t, "--account-for-loss-in-pipeline-split") || s->pipeline_layout;
    p->virtual_stages_per_rank = set_vs && uneven ? s->vstages : 0;
    if (set_vs && !uneven) {
        long per = (long)p->pp * s->vstages;
        if (s->c->model.num_layers % per)
            return err_set(err, TS_EINVAL,
                           "--num-virtual-stages-per-pipeline-rank %d: --num-layers %d is not divisible by p x v = "
                           "%d x %d = %ld",
                           s->vstages, s->c->model.num_layers, p->pp, s->vstages, per);
        p->layers_per_virtual_stage = (int)(s->c->model.num_layers / per);
    }
    if (set_lv || set_vs) {
        s->src[FLAGS_F_VP] = FLAGS_SRC_FLAG;
    } else if (set_pp || (set_sched && s->schedule != SCHED_INTERLEAVED) || basesrc == FLAGS_SRC_MEGATRON) {
        p->layers_per_virtual_stage = 0;
        if (basesrc == FLAGS_SRC_MEGATRON)
            s->src[FLAGS_F_VP] = FLAGS_SRC_MEGATRON;
        else
            rule(s, FLAGS_F_VP, "the preset's interleaving dropped (%s given)", set_pp ? "-p" : "--schedule");
    } else {
        p->layers_per_virtual_stage = q->layers_per_virtual_stage;
        s->src[FLAGS_F_VP] = basesrc;
    }
    if (set_sched) {
        p->schedule = (sched_kind)s->schedule;
        s->src[FLAGS_F_SCHEDULE] = FLAGS_SRC_FLAG;
    } else if (set_lv || set_vs) {
        p->schedule = SCHED_INTERLEAVED;
        rule(s, FLAGS_F_SCHEDULE, "interleaved 1F1B (a virtual-pipeline flag is given)");
    } else if (basesrc == FLAGS_SRC_MEGATRON || (set_pp && q->schedule == SCHED_INTERLEAVED)) {
        p->schedule = SCHED_1F1B;
        s->src[FLAGS_F_SCHEDULE] = FLAGS_SRC_MEGATRON;
    } else {
        p->schedule = q->schedule;
        s->src[FLAGS_F_SCHEDULE] = basesrc;
    }
    bool set_first = opt_was_set(t, "--decoder-first-pipeline-num-layers");
    bool set_last = opt_was_set(t, "--decoder-last-pipeline-num-layers");
    if (!set_first)
        p->first_stage_layers = set_pp ? 0 : q->first_stage_layers;
    if (!set_last)
        p->last_stage_layers = set_pp ? 0 : q->last_stage_layers;
    s->src[FLAGS_F_FIRST] = set_first ? FLAGS_SRC_FLAG : set_pp ? FLAGS_SRC_MEGATRON : basesrc;
    s->src[FLAGS_F_LAST] = set_last ? FLAGS_SRC_FLAG : set_pp ? FLAGS_SRC_MEGATRON : basesrc;
    return TS_OK;
}

static int resolve_layout(flags_state *s, const opt_table *t, const config *base, flags_source basesrc, ts_err *err)
{
    parallel_config *p = &s->c->par;
    const parallel_config *q = &base->par;
    int rc;
    TAKE(FLAGS_F_TP, "--tensor-model-parallel-size", p->tp, q->tp);
    TAKE(FLAGS_F_PP, "--pipeline-model-parallel-size", p->pp, q->pp);
    TAKE(FLAGS_F_MBS, "--micro-batch-size", p->micro_batch_size, q->micro_batch_size);
    TAKE(FLAGS_F_SP, "--sequence-parallel", p->sequence_parallel, q->sequence_parallel);
    TAKE(FLAGS_F_DISTOPT, "--use-distributed-optimizer", p->distributed_optimizer, q->distributed_optimizer);
    TAKE(FLAGS_F_OVERLAP, "--overlap-grad-reduce", p->overlap_grad_reduce, false);
    if (!opt_was_set(t, "--overlap-grad-reduce"))
        s->src[FLAGS_F_OVERLAP] = FLAGS_SRC_MEGATRON;
    if (!opt_was_set(t, "--no-async-tensor-model-parallel-allreduce"))
        p->sync_tp_allreduce = q->sync_tp_allreduce;
    p->no_clip_grad = s->clip_grad <= 0;
    p->data_loader_measured = opt_was_set(t, "--data-loader-ns");
    if ((rc = resolve_recompute(s, t, base, basesrc, err)) || (rc = resolve_attention(s, t, err)) ||
        (rc = resolve_schedule(s, t, base, basesrc, err)))
        return rc;
    p->dp = opt_was_set(t, "--data-parallel-size") ? s->dp : 0;
    p->vp = 0;
    /* context parallelism: the flags, else the preset's */
    if (!opt_was_set(t, "--context-parallel-size"))
        p->cp = q->cp;
    p->cp_comm = opt_was_set(t, "--cp-comm-type") ? (config_cp_comm)s->cp_comm : q->cp_comm;
    if (opt_was_set(t, "--hierarchical-context-parallel-sizes")) {
        p->cp_a2a = s->hcp_a2a;
        p->cp_p2p = s->hcp_p2p;
    } else {
        p->cp_a2a = q->cp_a2a;
        p->cp_p2p = q->cp_p2p;
    }
    /* GPUs: the preset's, or t x p x d (the smallest world the layout runs on) */
    if (opt_was_set(t, "--gpus")) {
        s->src[FLAGS_F_GPUS] = FLAGS_SRC_FLAG;
    } else if (basesrc != FLAGS_SRC_MEGATRON) {
        s->c->cluster.gpus = base->cluster.gpus;
        s->src[FLAGS_F_GPUS] = basesrc;
    } else {
        long g = (long)p->tp * p->pp * (p->dp > 0 ? p->dp : 1) * (p->cp > 1 ? p->cp : 1);
        if (g > (1L << 24))
            return err_set(err, TS_EINVAL, "t x p x d = %ld GPUs is past the limit of %d", g, 1 << 24);
        s->c->cluster.gpus = (int)g;
        rule(s, FLAGS_F_GPUS, "t x p x d (no --gpus; d = %d)", p->dp > 0 ? p->dp : 1);
    }
    s->src[FLAGS_F_DP] = opt_was_set(t, "--data-parallel-size") ? FLAGS_SRC_FLAG : FLAGS_SRC_DERIVED;
    if (!opt_was_set(t, "--data-parallel-size"))
        snprintf(s->rule[FLAGS_F_DP], sizeof s->rule[FLAGS_F_DP], "gpus / (t x p)");
    /* global batch: the preset's, or Megatron-LM's b x d (once d is known) */
    if (opt_was_set(t, "--global-batch-size")) {
        s->src[FLAGS_F_GBS] = FLAGS_SRC_FLAG;
    } else if (basesrc != FLAGS_SRC_MEGATRON) {
        p->global_batch_size = q->global_batch_size;
        s->src[FLAGS_F_GBS] = basesrc;
    } else {
        p->global_batch_size = 0; /* filled after config_resolve's d */
        rule(s, FLAGS_F_GBS, "micro-batch x d (Megatron-LM's default)");
    }
    return resolve_pipeline_layout(s, t, err);
}

static int resolve_cluster(flags_state *s, ts_err *err)
{
    cluster_config *cl = &s->c->cluster;
    int rc;
    gpu_spec g;
    topo *tp = NULL;
    catalog_gpus *cat = NULL;
    if ((rc = catalog_gpus_load(NULL, &cat, err)))
        return rc;
    if (s->gpu && !strcasecmp(s->gpu, "cpu")) {
        /* calibrated-only device (config.h): no rates; capacity = this machine's memory */
        memset(&g, 0, sizeof g);
        snprintf(g.name, sizeof g.name, "CPU");
        g.calibrated_only = true;
        long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGE_SIZE);
        g.hbm_gib = pages > 0 && psz > 0 ? (double)pages * (double)psz / 1073741824.0 : 0.0;
        if (s->topology) {
            rc = err_set(err, TS_EINVAL, "--gpu cpu takes no --topology (one machine)");
            goto out;
        }
        if ((rc = topo_default_for(&g, cl->gpus, &tp, err)))
            goto out;
        goto done;
    }
    if (s->gpu && (rc = catalog_gpus_lookup(cat, s->gpu, &g, err))) {
        err_prefix(err, "--gpu: ");
        goto out;
    }
    if (s->topology) {
        if ((rc = topo_load(s->topology, &tp, err)))
            goto out;
        if (tp->form == TOPO_PARAMETRIC) {
            if (s->gpu && strcmp(g.name, tp->params.gpu)) {
                rc = err_set(err, TS_EINVAL,
                             "--gpu %s conflicts with the topology %s, whose nodes hold %s (drop --gpu, or use a "
                             "topology of %s nodes)",
                             g.name, tp->source, tp->params.gpu, g.name);
                goto out;
            }
            if ((rc = catalog_gpus_lookup(cat, tp->params.gpu, &g, err)))
                goto out;
        } else if (!s->gpu && (rc = catalog_gpus_lookup(cat, FLAGS_DEFAULT_GPU, &g, err))) {
            goto out;
        }
    } else {
        if (!s->gpu && (rc = catalog_gpus_lookup(cat, FLAGS_DEFAULT_GPU, &g, err)))
            goto out;
        if ((rc = topo_default_for(&g, cl->gpus, &tp, err)))
            goto out;
    }
done:
    cl->gpu = g;
    cl->topology = tp;
    cl->gpus_per_node = tp->params.gpus_per_node;
    tp = NULL;
out:
    topo_free(tp);
    catalog_gpus_free(cat);
    return rc;
}

/* Whether any of the shared flags was given. */
static bool any_shared_flag(const flags_state *s, const opt_table *t)
{
    for (size_t i = s->first_entry; i < s->end_entry && i < t->n; i++)
        if (t->entries[i].set)
            return true;
    return false;
}

int flags_finish(flags_state *s, const opt_table *t, ts_err *err)
{
    config *c = s->c;
    c->cluster.topology = NULL;
    s->preset_source[0] = '\0';
    if (s->bf16 && s->fp16)
        return err_set(err, TS_EINVAL, "--bf16 and --fp16 exclude each other (give one)");
    if (s->fp32 && (s->fp16 || s->bf16))
        return err_set(err, TS_EINVAL, "--fp32 excludes --bf16 and --fp16 (give one)");
    s->model_given = opt_was_set(t, "--model");
    s->builtin_default = !any_shared_flag(s, t);
    config base;
    flags_source basesrc = FLAGS_SRC_MEGATRON;
    int rc;
    if (s->model_given || s->builtin_default) {
        catalog_model pm;
        rc = catalog_model_preset(s->model_given ? s->model : FLAGS_DEFAULT_MODEL, &pm, err);
        if (rc)
            return rc == TS_EINVAL ? err_prefix(err, "--model: ") : rc;
        if ((rc = preset_base(&pm, &base, err)))
            return rc;
        snprintf(s->preset_source, sizeof s->preset_source, "%s", pm.source);
        basesrc = s->model_given ? FLAGS_SRC_PRESET : FLAGS_SRC_BUILTIN;
    } else {
        megatron_defaults(&base);
        if ((rc = check_required(t, err)))
            return rc;
    }
    if ((rc = resolve_model(s, t, &base, basesrc, err)) || (rc = resolve_layout(s, t, &base, basesrc, err)) ||
        (rc = resolve_vocab(s, t, &base, basesrc, err)))
        return rc;
    if (basesrc != FLAGS_SRC_MEGATRON) /* the preset's experts and MLA, where no flag overrides them */
        moe_flags_take(&s->moe, t, &base.moe, c);
    parallel_config *p = &c->par;
    if (p->global_batch_size == 0) { /* Megatron-LM: b x d */
        long tpp = (long)p->tp * p->pp * config_cp(c);
        long d = p->dp > 0 ? p->dp : (c->cluster.gpus % tpp ? 1 : c->cluster.gpus / tpp);
        long gbs = (long)p->micro_batch_size * d;
        if (gbs > (1L << 30))
            return err_set(err, TS_EINVAL, "--global-batch-size b x d = %ld is past the limit of %d sequences", gbs,
                           1 << 30);
        p->global_batch_size = (int)gbs;
    }
    s->src[FLAGS_F_GPU] = s->gpu ? FLAGS_SRC_FLAG : FLAGS_SRC_TRAINSIM;
    s->src[FLAGS_F_TOPOLOGY] = s->topology ? FLAGS_SRC_FLAG : FLAGS_SRC_TRAINSIM;
    if ((rc = resolve_cluster(s, err)) || (rc = config_resolve(c, err)) ||
        (rc = moe_flags_finish(&s->moe, t, c, err))) {
        config_free(c);
        return rc;
    }
    const model_config *fm = &c->model;
    if ((fm->no_bias_swiglu_fusion || fm->no_bias_gelu_fusion || fm->no_gradient_accumulation_fusion ||
         fm->no_rope_fusion) &&
        (c->moe.num_experts > 0 || c->moe.mla)) {
        config_free(c);
        return err_set(err, TS_EINVAL,
                       "--no-bias-gelu-fusion, --no-bias-swiglu-fusion, --no-gradient-accumulation-fusion and "
                       "--no-rope-fusion are modelled for dense layers with standard attention only (not the "
                       "experts' GEMMs and activations, nor MLA's rotary part); drop them or the MoE/MLA flags");
    }
    if (s->attention_backend == ATTN_BACKEND_AUTO && !s->use_flash_attn)
        rule(s, FLAGS_F_ATTN, "auto (%s): Transformer Engine's pick for %s on %s",
             opt_was_set(t, "--attention-backend") ? "given" : "Megatron-LM's default",
             CONFIG_PRECISION_NAMES[c->model.precision], c->cluster.gpu.name);
    return TS_OK;
}
