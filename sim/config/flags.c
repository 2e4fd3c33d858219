#include "sim/config/flags.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "sim/config/catalog.h"
#include "sim/config/catalog_models.h"
#include "sim/config/topo.h"

#define DEFAULT_GPU "A100-SXM4-80GB"

/* The schedule names, from sched.h (generated kinds only, not "custom"). */
static const char *SCHED_NAMES[SCHED_CUSTOM + 1];

static void fill_sched_names(void)
{
    for (int k = 0; k < SCHED_CUSTOM; k++)
        SCHED_NAMES[k] = sched_kind_name((sched_kind)k);
    SCHED_NAMES[SCHED_CUSTOM] = NULL;
}

static void apply_preset(config *c, const catalog_model *pm)
{
    c->model = pm->model;
    c->par = pm->par;
    c->cluster.gpus = pm->gpus;
}

#define ADD(...)                                                                                                       \
    do {                                                                                                               \
        if ((rc = opt_add(t, &(opt_spec){__VA_ARGS__}, err)))                                                          \
            return rc;                                                                                                 \
    } while (0)
#define SECTION(title)                                                                                                 \
    do {                                                                                                               \
        if ((rc = opt_section(t, title, err)))                                                                         \
            return rc;                                                                                                 \
    } while (0)

static int add_model_flags(flags_state *s, opt_table *t, config *c, ts_err *err)
{
    int rc;
    model_config *m = &c->model;
    SECTION("Model (defaults shown are those of the default preset, " FLAGS_DEFAULT_MODEL ")");
    ADD(.name = "--model", .type = OPT_STRING, .target = &s->model, .metavar = "NAME",
        .help = "model preset from topologies/models.csv: gpt3-175b; megatron-1.7b, -3.6b, -7.5b, -18.4b, -39.1b, "
                "-76.1b, -145.6b, -310.1b, -529.6b, -1t (Narayanan et al. 2021 Table 1); llama2-7b, -13b, -70b; "
                "llama3-8b, -70b, -405b; bloom-176b. It sets the shape and the starting layout (GPUs, t, p, batch, "
                "recompute, schedule); every flag below overrides it (trainsim config --list-models)");
    ADD(.name = "--num-layers", .type = OPT_INT, .target = &m->num_layers, .min = 1, .max = 100000, .unit = "layers",
        .help = "transformer layers");
    ADD(.name = "--hidden-size", .type = OPT_INT, .target = &m->hidden_size, .min = 1, .max = 1 << 24,
        .unit = "elements", .help = "hidden size h");
    ADD(.name = "--num-attention-heads", .type = OPT_INT, .target = &m->num_attention_heads, .min = 1, .max = 1 << 20,
        .unit = "heads", .help = "attention heads a (h must be a multiple of a)");
    ADD(.name = "--num-query-groups", .type = OPT_INT, .target = &m->num_query_groups, .min = 1, .max = 1 << 20,
        .unit = "KV groups",
        .help = "key/value head groups of grouped-query attention (= heads: none; given --num-attention-heads "
                "alone, it follows it)");
    ADD(.name = "--ffn-hidden-size", .type = OPT_INT, .target = &m->ffn_hidden_size, .min = 1, .max = 1 << 26,
        .unit = "elements",
        .help = "MLP hidden size (given --hidden-size or --swiglu alone: 4h, SwiGLU 8h/3 rounded down to a "
                "multiple of 64, as Megatron-LM)");
    ADD(.name = "--swiglu", .type = OPT_BOOL, .target = &m->swiglu,
        .help = "SwiGLU MLP (3 weight matrices) instead of GeLU (2); --swiglu=false turns a preset's off");
    ADD(.name = "--seq-length", .type = OPT_INT, .target = &m->seq_length, .min = 1, .max = 1 << 24, .unit = "tokens",
        .help = "sequence length s");
    ADD(.name = "--padded-vocab-size", .type = OPT_INT, .target = &m->padded_vocab_size, .min = 1, .max = 1 << 26,
        .unit = "tokens", .help = "vocabulary size V after padding (a multiple of t)");
    ADD(.name = "--bf16", .type = OPT_BOOL, .target = &s->bf16, .defval = "on (bf16 unless --fp16/--fp32)",
        .help = "bf16 mixed precision (weights, activations, gradients in 2 bytes; fp32 master weights)");
    ADD(.name = "--fp16", .type = OPT_BOOL, .target = &s->fp16, .help = "fp16 mixed precision (exclusive with --bf16)");
    ADD(.name = "--fp32", .type = OPT_BOOL, .target = &s->fp32,
        .help = "fp32 training, no mixed precision (weights, activations, gradients in 4 bytes, no "
                "master copy; exclusive with --bf16 and --fp16)");
    return TS_OK;
}

static int add_parallel_flags(flags_state *s, opt_table *t, config *c, ts_err *err)
{
    int rc;
    parallel_config *p = &c->par;
    SECTION("Parallelism and batch");
    ADD(.name = "--micro-batch-size", .type = OPT_INT, .target = &p->micro_batch_size, .min = 1, .max = 1 << 20,
        .unit = "sequences", .help = "micro-batch size b");
    ADD(.name = "--global-batch-size", .type = OPT_INT, .target = &p->global_batch_size, .min = 1, .max = 1 << 30,
        .unit = "sequences", .help = "global batch B per iteration (a multiple of b x d)");
    ADD(.name = "--tensor-model-parallel-size", .alias = "-t", .type = OPT_INT, .target = &p->tp, .min = 1,
        .max = 65536, .unit = "GPUs", .help = "tensor-parallel size t");
    ADD(.name = "--pipeline-model-parallel-size", .alias = "-p", .type = OPT_INT, .target = &p->pp, .min = 1,
        .max = 65536, .unit = "GPUs",
        .help = "pipeline-parallel size p (given explicitly, the preset's uneven first/last split is dropped)");
    ADD(.name = "--data-parallel-size", .alias = "-d", .type = OPT_INT, .target = &s->dp, .min = 1, .max = 1 << 24,
        .unit = "GPUs", .defval = "derived: gpus / (t x p)",
        .help = "data-parallel size d; if given, --gpus must equal t x p x d");
    ADD(.name = "--num-layers-per-virtual-pipeline-stage", .type = OPT_INT, .target = &p->layers_per_virtual_stage,
        .min = 1, .max = 100000, .unit = "layers",
        .help = "layers per model chunk for --schedule interleaved (v = layers / (p x this)); zb-v: optional, "
                "must give v = 2; 0 = unset");
    ADD(.name = "--decoder-first-pipeline-num-layers", .type = OPT_INT, .target = &p->first_stage_layers, .min = 1,
        .max = 100000, .unit = "layers",
        .help = "layers on the first pipeline stage (uneven split; the other stages share the rest evenly); 0 = "
                "even split");
    ADD(.name = "--decoder-last-pipeline-num-layers", .type = OPT_INT, .target = &p->last_stage_layers, .min = 1,
        .max = 100000, .unit = "layers", .help = "layers on the last pipeline stage (uneven split); 0 = even split");
    ADD(.name = "--sequence-parallel", .type = OPT_BOOL, .target = &p->sequence_parallel,
        .help = "sequence parallelism (Korthikanti et al. 2022; no effect with t = 1); --sequence-parallel=false "
                "turns a preset's off");
    ADD(.name = "--recompute-granularity", .type = OPT_ENUM, .target = &s->recompute,
        .enum_names = CONFIG_RECOMPUTE_NAMES, .help = "activation recomputation");
    ADD(.name = "--recompute-method", .type = OPT_ENUM, .target = &s->recompute_method,
        .enum_names = CONFIG_RECOMPUTE_METHOD_NAMES,
        .help = "full recomputation: uniform (groups of --recompute-num-layers) or block (that many layers per "
                "stage)");
    ADD(.name = "--recompute-num-layers", .type = OPT_INT, .target = &p->recompute_num_layers, .min = 0, .max = 100000,
        .unit = "layers", .help = "layers per recompute group/block for full recomputation (0 = all)");
    ADD(.name = "--use-distributed-optimizer", .type = OPT_BOOL, .target = &p->distributed_optimizer,
        .help = "shard optimizer state over data-parallel ranks (ZeRO-1 like)");
    ADD(.name = "--overlap-grad-reduce", .type = OPT_BOOL, .target = &p->overlap_grad_reduce,
        .help = "overlap the data-parallel gradient reduction with the backward pass");
    return TS_OK;
}

/* Megatron-core's ways of splitting the layers unevenly over the virtual
 * stages (all reduce to par.layout, see config.h). */
static int add_layout_flags(flags_state *s, opt_table *t, config *c, ts_err *err)
{
    int rc;
    parallel_config *p = &c->par;
    ADD(.name = "--pipeline-model-parallel-layout", .type = OPT_STRING, .target = &s->pipeline_layout,
        .metavar = "LAYOUT",
        .help = "Megatron-core layout of the virtual stages: E embedding, t transformer layer, L loss, | stage "
                "boundary, *N repeat, ( ) group; stages listed chunk-major (chunk 0 of ranks 0..p-1, then chunk 1 "
                "...), a multiple of p of them (v = stages / p), layers summing to --num-layers; e.g. Llama 3 "
                "405B at p 16: 'Et*3|(t*4|)*30t*3L' (docs/schedules.md)");
    ADD(.name = "--num-virtual-stages-per-pipeline-rank", .type = OPT_INT, .target = &p->virtual_stages_per_rank,
        .min = 1, .max = SCHED_MAX_V, .unit = "chunks",
        .help = "chunks per pipeline rank v for interleaved (needed with --decoder-first/last-pipeline-num-layers, "
                "as Megatron-core); 0 = unset");
    ADD(.name = "--account-for-embedding-in-pipeline-split", .type = OPT_BOOL, .target = &p->account_for_embedding,
        .help = "count the embedding as one layer of the split: the first virtual stage gets one transformer layer "
                "fewer ((layers + 1 [+ 1]) must split evenly over p x v)");
    ADD(.name = "--account-for-loss-in-pipeline-split", .type = OPT_BOOL, .target = &p->account_for_loss,
        .help = "count the loss as one layer of the split: the last virtual stage gets one transformer layer fewer");
    return TS_OK;
}

/* --pipeline-model-parallel-layout into par.layout; a layout is the whole
 * split, so it drops the preset's (not explicitly given) split flags, as
 * --num-virtual-stages-per-pipeline-rank drops the preset's layers per
 * virtual stage. */
static int resolve_pipeline_layout(flags_state *s, const opt_table *t, ts_err *err)
{
    parallel_config *p = &s->c->par;
    if (opt_was_set(t, "--num-virtual-stages-per-pipeline-rank") &&
        !opt_was_set(t, "--num-layers-per-virtual-pipeline-stage"))
        p->layers_per_virtual_stage = 0; /* the preset's chunk size gives way to the chunk count */
    p->layout_given = s->pipeline_layout != NULL;
    if (!p->layout_given)
        return TS_OK;
    if (!opt_was_set(t, "--decoder-first-pipeline-num-layers"))
        p->first_stage_layers = 0;
    if (!opt_was_set(t, "--decoder-last-pipeline-num-layers"))
        p->last_stage_layers = 0;
    if (!opt_was_set(t, "--num-layers-per-virtual-pipeline-stage"))
        p->layers_per_virtual_stage = 0;
    int rc = sched_layout_parse(s->pipeline_layout, &p->layout, err);
    return rc ? err_prefix(err, "--pipeline-model-parallel-layout: ") : TS_OK;
}

/* The layout line of flags_print: layers per virtual stage, compactly,
 * for the splits the "uneven split" line does not describe. */
static void print_layout(const parallel_config *p, FILE *f)
{
    const sched_layout *l = &p->layout;
    if (l->n_stages < 1 || !(p->layout_given || p->account_for_embedding || p->account_for_loss ||
                             (p->vp > 1 && !sched_layout_is_even(l))))
        return;
    char buf[256];
    size_t n = sched_layout_format(l, buf, sizeof buf);
    fprintf(f,
            "layers per stage:      %s%s (%d virtual stages, stage c x p + r is chunk c of rank r; embedding on "
            "stage %d, loss on stage %d)\n",
            buf, n >= sizeof buf ? " ..." : "", l->n_stages, l->emb_stage, l->loss_stage);
}

static int add_cluster_flags(flags_state *s, opt_table *t, config *c, ts_err *err)
{
    int rc;
    SECTION("Schedule");
    ADD(.name = "--schedule", .type = OPT_ENUM, .target = &s->schedule, .enum_names = SCHED_NAMES,
        .help = "pipeline schedule (interleaved = Megatron's interleaved 1F1B; zb-* = zero bubble, Qi et al. "
                "2024)");
    SECTION("Cluster");
    ADD(.name = "--gpus", .alias = "-n", .type = OPT_INT, .target = &c->cluster.gpus, .min = 1, .max = 1 << 24,
        .unit = "GPUs", .help = "GPUs in the run");
    ADD(.name = "--gpu", .type = OPT_STRING, .target = &s->gpu, .metavar = "KIND",
        .defval = "the topology's, else " DEFAULT_GPU,
        .help = "GPU kind from topologies/gpus.csv: A100-SXM4-40GB, A100-SXM4-80GB, H100-SXM5-80GB, H200-SXM-141GB "
                "(or an alias: a100, h100, h200); or 'cpu': a device with no datasheet, all of whose compute "
                "and link costs come from --calibration FILE (trainsim calibrate)");
    ADD(.name = "--topology", .type = OPT_STRING, .target = &s->topology, .metavar = "FILE",
        .defval = "built-in: DGX A100 80GB nodes, 3-level HDR fat tree like Selene, sized to --gpus (DGX H100-like "
                  "for --gpu h100/h200)",
        .help = "cluster topology CSV, parametric or link list (topologies/*.csv; docs/inputs.md)");
    return TS_OK;
}

int flags_register(flags_state *s, opt_table *t, config *c, ts_err *err)
{
    memset(s, 0, sizeof *s);
    memset(c, 0, sizeof *c);
    s->c = c;
    s->model = FLAGS_DEFAULT_MODEL;
    fill_sched_names();
    catalog_model pm;
    if (catalog_model_preset(FLAGS_DEFAULT_MODEL, &pm, NULL) == TS_OK) {
        apply_preset(c, &pm);
        s->recompute = (int)pm.par.recompute;
        sched_kind k;
        if (sched_kind_parse(pm.schedule, &k, NULL) == TS_OK)
            s->schedule = (int)k;
    }
    s->bf16 = true;
    int rc;
    if ((rc = add_model_flags(s, t, c, err)) || (rc = add_parallel_flags(s, t, c, err)) ||
        (rc = add_layout_flags(s, t, c, err)) || (rc = add_cluster_flags(s, t, c, err)))
        return rc;
    s->bf16 = false; /* "given" is tracked by the table; the value only matters with --fp16 */
    return TS_OK;
}

/* ---------------------------------------------------------------- parse */

int flags_parse(flags_state *s, opt_table *t, int argc, char **argv, ts_err *err)
{
    flags_release(s);
    if (argc < 1)
        return err_set(err, TS_EINVAL, "no command name in the argument vector");
    char **av = calloc((size_t)argc + 1, sizeof *av);
    if (!av)
        return err_set(err, TS_ENOMEM, "out of memory copying %d arguments", argc);
    for (int i = 0; i < argc; i++)
        av[i] = argv[i];
    s->argv_owned = av;
    return opt_parse(t, argc, av, err);
}

void flags_release(flags_state *s)
{
    free(s->argv_owned);
    s->argv_owned = NULL;
}

/* ---------------------------------------------------------------- finish */

static void resolve_model(flags_state *s, const opt_table *t, const catalog_model *pm)
{
    model_config *m = &s->c->model;
    const model_config *q = &pm->model;
    bool set_h = opt_was_set(t, "--hidden-size"), set_sw = opt_was_set(t, "--swiglu");
    bool set_heads = opt_was_set(t, "--num-attention-heads");
    static const char *const SHAPE[] = {"--num-layers",       "--hidden-size",       "--num-attention-heads",
                                        "--num-query-groups", "--ffn-hidden-size",   "--swiglu",
                                        "--seq-length",       "--padded-vocab-size", NULL};
    if (!opt_was_set(t, "--num-layers"))
        m->num_layers = q->num_layers;
    if (!set_h)
        m->hidden_size = q->hidden_size;
    if (!set_heads)
        m->num_attention_heads = q->num_attention_heads;
    if (!set_sw)
        m->swiglu = q->swiglu;
    if (!opt_was_set(t, "--seq-length"))
        m->seq_length = q->seq_length;
    if (!opt_was_set(t, "--padded-vocab-size"))
        m->padded_vocab_size = q->padded_vocab_size;
    if (!opt_was_set(t, "--ffn-hidden-size")) {
        if (set_h || set_sw) /* Megatron-LM's default (arguments.py) */
            m->ffn_hidden_size = m->swiglu ? (int)((4.0 * m->hidden_size * 2 / 3) / 64) * 64 : 4 * m->hidden_size;
        else
            m->ffn_hidden_size = q->ffn_hidden_size;
    }
    if (!opt_was_set(t, "--num-query-groups"))
        m->num_query_groups = set_heads ? m->num_attention_heads : q->num_query_groups;
    bool changed = false;
    for (int i = 0; SHAPE[i]; i++)
        changed |= opt_was_set(t, SHAPE[i]);
    snprintf(m->name, sizeof m->name, "%.40s%s", q->name, changed ? " (modified)" : "");
    m->precision = s->fp32 ? PREC_FP32 : s->fp16 ? PREC_FP16 : PREC_BF16;
}

static int resolve_layout(flags_state *s, const opt_table *t, const catalog_model *pm, ts_err *err)
{
    parallel_config *p = &s->c->par;
    const parallel_config *q = &pm->par;
    int rc;
    if (!opt_was_set(t, "--tensor-model-parallel-size"))
        p->tp = q->tp;
    bool set_pp = opt_was_set(t, "--pipeline-model-parallel-size");
    if (!set_pp)
        p->pp = q->pp;
    if (!opt_was_set(t, "--micro-batch-size"))
        p->micro_batch_size = q->micro_batch_size;
    if (!opt_was_set(t, "--global-batch-size"))
        p->global_batch_size = q->global_batch_size;
    if (!opt_was_set(t, "--sequence-parallel"))
        p->sequence_parallel = q->sequence_parallel;
    if (!opt_was_set(t, "--use-distributed-optimizer"))
        p->distributed_optimizer = q->distributed_optimizer;
    if (!opt_was_set(t, "--gpus"))
        s->c->cluster.gpus = pm->gpus;
    p->recompute = opt_was_set(t, "--recompute-granularity") ? (config_recompute)s->recompute : q->recompute;
    p->recompute_method = (config_recompute_method)s->recompute_method;
    if (opt_was_set(t, "--recompute-method") && p->recompute != RECOMPUTE_FULL) /* as Megatron-LM */
        return err_set(err, TS_EINVAL, "--recompute-method applies to --recompute-granularity full only (got %s)",
                       CONFIG_RECOMPUTE_NAMES[p->recompute]);
    if (!opt_was_set(t, "--recompute-num-layers"))
        p->recompute_num_layers = 0;
    if (!opt_was_set(t, "--overlap-grad-reduce"))
        p->overlap_grad_reduce = false;
    bool set_sched = opt_was_set(t, "--schedule");
    if (set_sched) {
        p->schedule = (sched_kind)s->schedule;
    } else if ((rc = sched_kind_parse(pm->schedule, &p->schedule, err))) {
        return err_prefix(err, "model preset %s (topologies/models.csv), column 'schedule': ", pm->model.name);
    }
    if (!opt_was_set(t, "--num-layers-per-virtual-pipeline-stage"))
        p->layers_per_virtual_stage = set_sched && p->schedule != SCHED_INTERLEAVED ? 0 : q->layers_per_virtual_stage;
    if (!opt_was_set(t, "--decoder-first-pipeline-num-layers"))
        p->first_stage_layers = set_pp ? 0 : q->first_stage_layers;
    if (!opt_was_set(t, "--decoder-last-pipeline-num-layers"))
        p->last_stage_layers = set_pp ? 0 : q->last_stage_layers;
    p->dp = opt_was_set(t, "--data-parallel-size") ? s->dp : 0;
    p->vp = 0;
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
        } else if (!s->gpu && (rc = catalog_gpus_lookup(cat, DEFAULT_GPU, &g, err))) {
            goto out;
        }
    } else {
        if (!s->gpu && (rc = catalog_gpus_lookup(cat, DEFAULT_GPU, &g, err)))
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

int flags_finish(flags_state *s, const opt_table *t, ts_err *err)
{
    config *c = s->c;
    c->cluster.topology = NULL;
    if (s->bf16 && s->fp16)
        return err_set(err, TS_EINVAL, "--bf16 and --fp16 exclude each other (give one; bf16 is the default)");
    if (s->fp32 && (s->fp16 || (s->bf16 && opt_was_set(t, "--bf16"))))
        return err_set(err, TS_EINVAL, "--fp32 excludes --bf16 and --fp16 (give one; bf16 is the default)");
    catalog_model pm;
    int rc = catalog_model_preset(s->model, &pm, err);
    if (rc)
        return rc == TS_EINVAL ? err_prefix(err, "--model: ") : rc;
    snprintf(s->preset_source, sizeof s->preset_source, "%s", pm.source);
    resolve_model(s, t, &pm);
    if ((rc = resolve_layout(s, t, &pm, err)) || (rc = resolve_cluster(s, err)) || (rc = config_resolve(c, err))) {
        config_free(c);
        return rc;
    }
    return TS_OK;
}

void flags_print(const flags_state *s, FILE *f)
{
    const config *c = s->c;
    const model_config *m = &c->model;
    const parallel_config *p = &c->par;
    const gpu_spec *g = &c->cluster.gpu;
    fprintf(f, "model:                 %s\n", m->name);
    fprintf(f,
            "shape:                 %d layers, hidden %d, %d heads, %d query groups, FFN %d (%s), sequence %d "
            "tokens, vocabulary %d\n",
            m->num_layers, m->hidden_size, m->num_attention_heads, m->num_query_groups, m->ffn_hidden_size,
            m->swiglu ? "SwiGLU" : "GeLU", m->seq_length, m->padded_vocab_size);
    fprintf(f, "precision:             %s (%d bytes per element)\n", CONFIG_PRECISION_NAMES[m->precision],
            config_dtype_bytes(c));
    fprintf(f, "parallelism:           t=%d p=%d d=%d v=%d (%d GPUs = %d x %d x %d)\n", p->tp, p->pp, p->dp, p->vp,
            c->cluster.gpus, p->tp, p->pp, p->dp);
    if (p->first_stage_layers || p->last_stage_layers)
        fprintf(f, "uneven split:          first stage %d layers, last stage %d layers (0 = even share)\n",
                p->first_stage_layers, p->last_stage_layers);
    fprintf(f, "batch:                 micro-batch %d, global batch %d sequences, %d micro-batches per pipeline\n",
            p->micro_batch_size, p->global_batch_size, config_num_microbatches(c));
    fprintf(f, "schedule:              %s", sched_kind_name(p->schedule));
    if (p->vp > 1 && sched_layout_is_even(&p->layout))
        fprintf(f, " (%d chunks per rank, %d layers each)", p->vp, m->num_layers / (p->pp * p->vp));
    else if (p->vp > 1)
        fprintf(f, " (%d chunks per rank)", p->vp);
    fputc('\n', f);
    print_layout(p, f);
    fprintf(f, "sequence parallel:     %s\n", p->sequence_parallel ? "on" : "off");
    fprintf(f, "recompute:             %s", CONFIG_RECOMPUTE_NAMES[p->recompute]);
    if (p->recompute == RECOMPUTE_FULL)
        fprintf(f, " (method %s, %d layers; 0 = all)", CONFIG_RECOMPUTE_METHOD_NAMES[p->recompute_method],
                p->recompute_num_layers);
    fputc('\n', f);
    fprintf(f, "distributed optimizer: %s\n", p->distributed_optimizer ? "on" : "off");
    fprintf(f, "overlap grad reduce:   %s\n", p->overlap_grad_reduce ? "on" : "off");
    fprintf(f,
            "gpu:                   %s: %g TFLOP/s bf16, %g TFLOP/s fp16, %g GiB HBM at %g GB/s, NVLink %g GB/s "
            "per direction\n",
            g->name, g->bf16_tflops, g->fp16_tflops, g->hbm_gib, g->hbm_gbps, g->nvlink_gbps);
    if (c->cluster.topology) {
        char d[1024];
        topo_describe(c->cluster.topology, d, sizeof d);
        fprintf(f, "topology:              %s\n", d);
        if (c->cluster.topology->description[0])
            fprintf(f, "topology notes:        %s\n", c->cluster.topology->description);
    }
    fprintf(f, "preset layout source:  %s\n", s->preset_source);
}
