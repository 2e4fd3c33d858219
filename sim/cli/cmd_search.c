/* trainsim search — the fastest layout that fits, for a model, a GPU count
 * and a global batch (search.h). Built with TRAINSIM_MPI (build/trainsim-mpi)
 * it splits the simulations across MPI ranks (search_mpi.h). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sim/cli/cmd.h"
#include "sim/cli/search_pass.h"
#include "sim/config/catalog.h"
#include "sim/config/catalog_models.h"
#include "sim/config/flags.h"
#include "sim/config/moe_flags.h"
#include "sim/config/overheads.h"
#include "sim/config/topo.h"
#include "sim/core/simulate.h"
#include "sim/model/calib.h"
#include "sim/search/search.h"
#include "sim/search/search_eval.h"
#include "sim/search/search_out.h"
#include "sim/util/afile.h"
#include "sim/util/opt.h"
#ifdef TRAINSIM_MPI
#include "sim/cli/search_mpi.h"
#endif

/* --fp8-format's values (Megatron-LM's choices); index i is config_fp8_format i + 1 */
static const char *const FP8_FORMATS[] = {"e4m3", "hybrid", NULL};

#define GIB (1024.0 * 1024.0 * 1024.0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Progress on stderr once the simulations have run for 2 s: a line
 * rewritten in place on a terminal, a line every 5 s otherwise. */
typedef struct {
    double start, last;
    bool tty, shown, quiet;
} progress;

static void on_progress(void *user, size_t done, size_t total)
{
    progress *p = user;
    if (p->quiet)
        return;
    double t = now_s(), el = t - p->start;
    bool end = done == total;
    if (el < 2.0 || (!end && t - p->last < (p->tty ? 0.25 : 5.0)) || (end && !p->shown))
        return;
    p->last = t;
    p->shown = true;
    double eta = done ? el * (double)(total - done) / (double)done : 0;
    fprintf(stderr, "%ssearch: simulated %zu/%zu (%.0f%%), %.1f s elapsed, ETA %.1f s%s", p->tty ? "\r" : "", done,
            total, 100.0 * (double)done / (double)total, el, eta, p->tty && !end ? "" : "\n");
}

/* "1,2,4,8" -> ints. */
static int parse_ints(const char *s, int *out, int cap, int *n, ts_err *err)
{
    *n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 1024 || (*end && *end != ','))
            return err_set(err, TS_EINVAL,
                           "--micro-batch-sizes '%s': expected a comma-separated "
                           "list of integers in [1, 1024], e.g. 1,2,4,8",
                           s);
        if (*n == cap)
            return err_set(err, TS_EINVAL, "--micro-batch-sizes '%s': at most %d values", s, cap);
        out[(*n)++] = (int)v;
        p = *end ? end + 1 : end;
    }
    if (*n == 0)
        return err_set(err, TS_EINVAL, "--micro-batch-sizes is empty (e.g. 1,2,4,8)");
    return TS_OK;
}

/* "alltoall,flex-deepep" -> search_dispatcher bit mask. */
static int parse_dispatchers(const char *s, unsigned *mask, ts_err *err)
{
    *mask = 0;
    for (const char *p = s;;) {
        size_t len = strcspn(p, ",");
        int k = 0;
        while (SEARCH_DISPATCHER_NAMES[k] &&
               (strlen(SEARCH_DISPATCHER_NAMES[k]) != len || strncmp(SEARCH_DISPATCHER_NAMES[k], p, len)))
            k++;
        if (!SEARCH_DISPATCHER_NAMES[k])
            return err_set(err, TS_EINVAL,
                           "--dispatchers '%s': '%.*s' is not a token dispatcher (valid: alltoall, flex-deepep, "
                           "allgather)",
                           s, (int)len, p);
        *mask |= 1u << k;
        if (!p[len])
            break;
        p += len + 1;
    }
    return TS_OK;
}

/* "1f1b,zb-v" -> schedule bit mask. */
static int parse_schedules(const char *s, unsigned *mask, ts_err *err)
{
    *mask = 0;
    for (const char *p = s;;) {
        size_t len = strcspn(p, ",");
        if (len > 0) {
            char name[32];
            if (len >= sizeof name)
                return err_set(err, TS_EINVAL,
                               "--schedules '%s': '%.*s' is not a schedule (valid: "
                               "gpipe, 1f1b, interleaved, zb-h1, zb-h2, zb-v)",
                               s, (int)len, p);
            memcpy(name, p, len);
            name[len] = '\0';
            sched_kind k;
            if (sched_kind_parse(name, &k, err) || k == SCHED_CUSTOM)
                return err_prefix(err, "--schedules '%s': ", s);
            if (k == SCHED_DUALPIPEV || k == SCHED_DUALPIPE)
                return err_set(err, TS_EINVAL,
                               "--schedules '%s': %s is not searched (its m >= 2p rule and placement "
                               "bounds are not in the search); simulate dualpipev with --schedule dualpipev",
                               s, sched_kind_name(k));
            *mask |= 1u << k;
        }
        if (!p[len])
            break;
        p += len + 1;
    }
    if (!*mask)
        return err_set(err, TS_EINVAL,
                       "--schedules is empty (valid: gpipe, 1f1b, interleaved, "
                       "zb-h1, zb-h2, zb-v)");
    return TS_OK;
}

typedef struct {
    memory_overheads overheads; /* --cuda-context-gib ... (flags_register_memory) */
    double margin_gib;          /* --memory-margin */
    const char *model, *gpu, *topology, *calibration, *out, *mbs, *schedules, *script, *dispatchers;
    int gpus, batch, top, threads, max_tp, max_pp, max_vp;
    int num_layers, hidden, heads, groups, ffn, seq, vocab;
    bool explain, no_sp, no_distopt, no_block, quiet;
    int attention_backend; /* --attention-backend, config_attn_backend (auto: resolved for the GPU) */
    int fp8_format;        /* --fp8-format: index into FP8_FORMATS, -1 = not given (a script's, else none) */
    int fp8_recipe;        /* --fp8-recipe, config_fp8_recipe */
    int max_cp;            /* --max-context-parallel-size, 0 = not given (1) */
    int max_ep;            /* --max-expert-model-parallel-size, 0 = not given (the experts) */
    bool no_etp;           /* --no-expert-tensor-parallel */
    bool ep_overlap;       /* --try-overlap-moe-expert-parallel-comm */
    int experts, topk, moe_ffn, shared_ffn; /* --num-experts ... overrides, 0 = the preset's */
    const char *layer_freq;                 /* --moe-layer-freq override, NULL = the preset's */
} search_args;

static int add_flags(opt_table *t, search_args *a, ts_err *err)
{
    const opt_spec specs[] = {
        {.name = "--model",
         .type = OPT_STRING,
         .target = &a->model,
         .metavar = "NAME",
         .defval = "gpt3-175b",
         .help = "model preset from topologies/models.csv"},
        {.name = "--megatron-script",
         .type = OPT_STRING,
         .target = &a->script,
         .metavar = "FILE",
         .defval = "none",
         .help = "a Megatron-LM bash launch script: the model, GPU count (nproc_per_node x nnodes), GPU kind and "
                 "global batch come from it, resolved as trainsim config --megatron-script reads it; the flags "
                 "here override them"},
        {.name = "--num-layers",
         .type = OPT_INT,
         .target = &a->num_layers,
         .min = 1,
         .max = 100000,
         .unit = "layers",
         .defval = "preset",
         .help = "override the preset's transformer layers"},
        {.name = "--hidden-size",
         .type = OPT_INT,
         .target = &a->hidden,
         .min = 1,
         .max = 1 << 20,
         .defval = "preset",
         .help = "override the hidden size"},
        {.name = "--num-attention-heads",
         .type = OPT_INT,
         .target = &a->heads,
         .min = 1,
         .max = 1 << 16,
         .defval = "preset",
         .help = "override the attention heads"},
        {.name = "--num-query-groups",
         .type = OPT_INT,
         .target = &a->groups,
         .min = 1,
         .max = 1 << 16,
         .defval = "preset",
         .help = "override the key/value groups (GQA)"},
        {.name = "--ffn-hidden-size",
         .type = OPT_INT,
         .target = &a->ffn,
         .min = 1,
         .max = 1 << 22,
         .defval = "preset",
         .help = "override the MLP hidden size"},
        {.name = "--seq-length",
         .type = OPT_INT,
         .target = &a->seq,
         .min = 1,
         .max = 1 << 22,
         .unit = "tokens",
         .defval = "preset",
         .help = "override the sequence length"},
        {.name = "--attention-backend",
         .type = OPT_ENUM,
         .target = &a->attention_backend,
         .enum_names = CONFIG_ATTN_BACKEND_NAMES,
         .defval = "auto",
         .help = "attention kernels (as trainsim simulate): auto = flash with bf16/fp16 on Ampere or later; with "
                 "flash/fused, selective recomputation re-runs mlp and layernorm instead of core_attn"},
        {.name = "--fp8-format",
         .type = OPT_ENUM,
         .target = &a->fp8_format,
         .enum_names = FP8_FORMATS,
         .defval = "none (a script's when given)",
         .help = "FP8 GEMMs in the transformer layers, as trainsim simulate (needs a GPU with FP8 tensor cores)"},
        {.name = "--fp8-recipe",
         .type = OPT_ENUM,
         .target = &a->fp8_recipe,
         .enum_names = CONFIG_FP8_RECIPE_NAMES,
         .defval = "delayed",
         .help = "FP8 scaling recipe, as trainsim simulate"},
        {.name = "--padded-vocab-size",
         .type = OPT_INT,
         .target = &a->vocab,
         .min = 1,
         .max = 1 << 24,
         .defval = "preset",
         .help = "override the padded vocabulary"},
        {.name = "--gpus",
         .type = OPT_INT,
         .target = &a->gpus,
         .min = 1,
         .max = 1 << 20,
         .unit = "GPUs",
         .defval = "preset",
         .help = "GPUs the job uses"},
        {.name = "--global-batch-size",
         .type = OPT_INT,
         .target = &a->batch,
         .min = 1,
         .max = 1 << 24,
         .unit = "sequences",
         .defval = "preset",
         .help = "sequences per iteration"},
        {.name = "--gpu",
         .type = OPT_STRING,
         .target = &a->gpu,
         .metavar = "KIND",
         .defval = "A100-SXM4-80GB (or the topology's)",
         .help = "GPU kind from topologies/gpus.csv"},
        {.name = "--topology",
         .type = OPT_STRING,
         .target = &a->topology,
         .metavar = "FILE",
         .defval = "built-in for the GPU kind (DGX A100 or DGX H100 servers, fat tree)",
         .help = "cluster topology CSV"},
        {.name = "--calibration",
         .type = OPT_STRING,
         .target = &a->calibration,
         .metavar = "FILE",
         .defval = "built-in tables",
         .help = "measured efficiency tables"},
        {.name = "--top",
         .type = OPT_INT,
         .target = &a->top,
         .min = 1,
         .max = 1000000,
         .unit = "configurations",
         .help = "how many of the best to print"},
        {.name = "--out",
         .type = OPT_STRING,
         .target = &a->out,
         .metavar = "FILE.csv",
         .defval = "none",
         .help = "CSV of every candidate: evaluated or rejected with its reason"},
        {.name = "--explain",
         .type = OPT_BOOL,
         .target = &a->explain,
         .help = "say what limits the winner (memory, bubble, exposed communication)"},
        {.name = "--threads",
         .type = OPT_INT,
         .target = &a->threads,
         .min = 1,
         .max = 1024,
         .unit = "threads",
         .defval = "online CPUs",
         .help = "simulations run at once"},
        {.name = "--micro-batch-sizes",
         .type = OPT_STRING,
         .target = &a->mbs,
         .metavar = "LIST",
         .unit = "sequences",
         .help = "micro-batch sizes tried"},
        {.name = "--schedules",
         .type = OPT_STRING,
         .target = &a->schedules,
         .metavar = "LIST",
         .help = "schedules tried (gpipe, 1f1b, interleaved, zb-h1, zb-h2, zb-v)"},
        {.name = "--max-tensor-model-parallel-size",
         .type = OPT_INT,
         .target = &a->max_tp,
         .min = 1,
         .max = 1024,
         .help = "largest t tried (powers of 2, at most a node's GPUs)"},
        {.name = "--max-pipeline-model-parallel-size",
         .type = OPT_INT,
         .target = &a->max_pp,
         .min = 1,
         .max = 1 << 20,
         .defval = "GPUs",
         .help = "largest p tried"},
        {.name = "--max-virtual-pipeline-stages",
         .type = OPT_INT,
         .target = &a->max_vp,
         .min = 2,
         .max = 64,
         .unit = "chunks",
         .help = "largest interleaving depth v tried"},
        {.name = "--max-context-parallel-size",
         .type = OPT_INT,
         .target = &a->max_cp,
         .min = 1,
         .max = 65536,
         .unit = "GPUs",
         .defval = "1",
         .help = "largest context-parallel size cp tried (powers of 2 dividing the GPUs; p2p ring; needs flash "
                 "or fused attention and seq divisible by 2cp)"},
        {.name = "--max-expert-model-parallel-size",
         .type = OPT_INT,
         .target = &a->max_ep,
         .min = 1,
         .max = 1 << 20,
         .unit = "GPUs",
         .defval = "the expert count",
         .help = "MoE: largest expert-parallel size ep tried (every divisor of the experts up to it; the GPUs "
                 "must be a multiple of p x etp x ep, else the fold is rejected with its reason)"},
        {.name = "--no-expert-tensor-parallel",
         .type = OPT_BOOL,
         .target = &a->no_etp,
         .help = "MoE: try only etp = 1 (default: etp = 1 and etp = t)"},
        {.name = "--try-overlap-moe-expert-parallel-comm",
         .type = OPT_BOOL,
         .target = &a->ep_overlap,
         .help = "MoE: also try --overlap-moe-expert-parallel-comm (as trainsim simulate models it) where its rules "
                 "allow it: ep > 1, alltoall or flex-deepep, no full recomputation, interleaved with v > 1 (or "
                 "1f1b at p = 1)"},
        {.name = "--dispatchers",
         .type = OPT_STRING,
         .target = &a->dispatchers,
         .metavar = "LIST",
         .defval = "alltoall,flex-deepep,allgather",
         .help = "MoE: token dispatchers tried (alltoall; flex-deepep: flex with DeepEP; allgather); where the "
                 "expert-parallel group lies in one node (ep = 1 included) flex-deepep is costed as alltoall and "
                 "is tried only without alltoall"},
        {.name = "--num-experts",
         .type = OPT_INT,
         .target = &a->experts,
         .min = 1,
         .max = 1 << 20,
         .unit = "experts",
         .defval = "preset",
         .help = "override the routed experts per MoE layer (a dense preset becomes a mixture of experts)"},
        {.name = "--moe-router-topk",
         .type = OPT_INT,
         .target = &a->topk,
         .min = 1,
         .max = 1 << 20,
         .unit = "experts",
         .defval = "preset (Megatron-LM's 2)",
         .help = "override the experts each token is routed to"},
        {.name = "--moe-ffn-hidden-size",
         .type = OPT_INT,
         .target = &a->moe_ffn,
         .min = 1,
         .max = 1 << 26,
         .unit = "elements",
         .defval = "preset (--ffn-hidden-size)",
         .help = "override the FFN hidden size of one routed expert"},
        {.name = "--moe-shared-expert-intermediate-size",
         .type = OPT_INT,
         .target = &a->shared_ffn,
         .min = 1,
         .max = 1 << 26,
         .unit = "elements",
         .defval = "preset",
         .help = "override the shared experts' FFN hidden size"},
        {.name = "--moe-layer-freq",
         .type = OPT_STRING,
         .target = &a->layer_freq,
         .metavar = "N|PATTERN",
         .defval = "preset (1)",
         .help = "override the MoE layers: N, every N-th; ([0]*K+[1]*M), the first K dense"},
        {.name = "--no-sequence-parallel",
         .type = OPT_BOOL,
         .target = &a->no_sp,
         .help = "do not try sequence parallelism"},
        {.name = "--no-distributed-optimizer",
         .type = OPT_BOOL,
         .target = &a->no_distopt,
         .help = "do not try the distributed optimizer"},
        {.name = "--no-recompute-block",
         .type = OPT_BOOL,
         .target = &a->no_block,
         .help = "do not try full recomputation of part of each stage's layers (block method)"},
        {.name = "--quiet", .type = OPT_BOOL, .target = &a->quiet, .help = "no progress on stderr"},
        {.name = "--memory-margin",
         .type = OPT_DOUBLE,
         .target = &a->margin_gib,
         .min = 0,
         .max = 1024,
         .unit = "GiB",
         .help = "memory kept free on every GPU on top of the modelled peak (overheads included): a candidate whose "
                 "peak + margin exceeds the GPU's memory is rejected. It covers what the model leaves out (op "
                 "temporaries, fragmentation above the estimate); docs/search.md"},
    };
    a->margin_gib = SEARCH_MEMORY_MARGIN_GIB;
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        int rc = opt_add(t, &specs[i], err);
        if (rc)
            return rc;
    }
    return flags_register_memory(t, &a->overheads, err);
}

/* The fixed settings into *c (search_pass_resolve); with a script, unless
 * the search's flags give them, its GPU count, global batch and GPU kind go
 * into a (the kind's name in gpu). */
static int resolve_fixed(search_args *a, const search_pass *sp, config *c, flags_state *fs, opt_table *ft, char *gpu,
                         size_t gpu_bytes, bool quiet, ts_err *err)
{
    int rc = TS_OK;
    if (!a->script && (rc = search_pass_gpu_kind(a->gpu, a->topology, gpu, gpu_bytes, err)))
        return rc;
    search_pass_base base = {.script = a->script,
                             .model = a->model,
                             .gpu = a->script ? a->gpu : gpu,
                             .topology = a->topology,
                             .gpus = a->gpus,
                             .experts = a->experts > 0};
    if ((rc = search_pass_resolve(sp, &base, quiet, c, fs, ft, err)) || !a->script)
        return rc;
    if (!a->gpus)
        a->gpus = c->cluster.gpus;
    if (!a->batch)
        a->batch = c->par.global_batch_size;
    if (!a->gpu && !a->topology) {
        snprintf(gpu, gpu_bytes, "%s", c->cluster.gpu.name);
        a->gpu = gpu;
    }
    return TS_OK;
}

/* Model, cluster and space from the arguments; the model starts from
 * *base when given (a --megatron-script's), else from the --model preset.
 * *topo_out is owned by the caller (the space borrows it). */
/* The experts: the script's or the preset's, with the MoE flags applied
 * (Megatron-LM's defaults for a dense base given --num-experts). */
static int build_moe(const search_args *a, const moe_config *base, const model_config *m, moe_config *e, ts_err *err)
{
    *e = *base;
    if (a->experts && e->num_experts == 0) {
        moe_config_defaults(e);
        e->dispatcher = MOE_DISPATCH_ALLTOALL;
    }
    if (a->experts)
        e->num_experts = a->experts;
    if (e->num_experts == 0) {
        static const char *const NEED[] = {"--moe-router-topk",
                                           "--moe-ffn-hidden-size",
                                           "--moe-shared-expert-intermediate-size",
                                           "--moe-layer-freq",
                                           "--max-expert-model-parallel-size",
                                           "--try-overlap-moe-expert-parallel-comm"};
        bool given[] = {a->topk > 0,           a->moe_ffn > 0, a->shared_ffn > 0,
                        a->layer_freq != NULL, a->max_ep > 0,  a->ep_overlap};
        for (size_t i = 0; i < sizeof NEED / sizeof NEED[0]; i++)
            if (given[i])
                return err_set(err, TS_EINVAL, "%s needs a mixture of experts (--num-experts, or a MoE --model)",
                               NEED[i]);
        return TS_OK;
    }
    if (a->topk)
        e->topk = a->topk;
    if (a->moe_ffn)
        e->ffn_hidden_size = a->moe_ffn;
    if (a->shared_ffn)
        e->shared_ffn_hidden_size = a->shared_ffn;
    if (e->ffn_hidden_size == 0)
        e->ffn_hidden_size = m->ffn_hidden_size; /* Megatron-LM's default: --ffn-hidden-size */
    int rc;
    if (a->layer_freq &&
        (rc = moe_flags_parse_layer_freq(a->layer_freq, m->num_layers, &e->layer_freq, &e->first_dense_layers, err)))
        return rc;
    if (e->first_dense_layers >= m->num_layers)
        return err_set(err, TS_EINVAL,
                       "the MoE layer pattern has %d dense layers first of %d layers (give --moe-layer-freq for "
                       "--num-layers %d)",
                       e->first_dense_layers, m->num_layers, m->num_layers);
    if (e->topk > e->num_experts)
        return err_set(err, TS_EINVAL, "--moe-router-topk %d is more than --num-experts %d (valid: 1 to %d)", e->topk,
                       e->num_experts, e->num_experts);
    if (e->router_num_groups > 0 && e->num_experts % e->router_num_groups)
        return err_set(err, TS_EINVAL,
                       "--num-experts %d is not a multiple of the preset's %d router groups (give a multiple)",
                       e->num_experts, e->router_num_groups);
    return TS_OK;
}

static int build_space(const search_args *a, const model_config *base, const moe_config *base_moe, search_space *s,
                       topo **topo_out, ts_err *err)
{
    *topo_out = NULL;
    catalog_model preset;
    int rc = catalog_model_preset(a->model, &preset, err);
    if (rc)
        return err_prefix(err, "--model: ");
    model_config m = base ? *base : preset.model;
    if (a->num_layers)
        m.num_layers = a->num_layers;
    if (a->hidden)
        m.hidden_size = a->hidden;
    if (a->heads)
        m.num_attention_heads = a->heads;
    if (a->groups)
        m.num_query_groups = a->groups;
    else if (a->heads)
        m.num_query_groups = a->heads;
    if (a->ffn)
        m.ffn_hidden_size = a->ffn;
    else if (a->hidden) /* Megatron-LM's defaults: 4h, SwiGLU 8h/3 down to a multiple of 64 */
        m.ffn_hidden_size = m.swiglu ? 8 * a->hidden / 3 / 64 * 64 : 4 * a->hidden;
    if (a->seq)
        m.seq_length = a->seq;
    if (a->vocab)
        m.padded_vocab_size = a->vocab;
    /* derived as flags_finish derives them (Megatron-LM's rules): the head
     * size h / a, the learned position table of --seq-length rows */
    if (a->hidden || a->heads)
        m.kv_channels = m.hidden_size % m.num_attention_heads == 0 ? m.hidden_size / m.num_attention_heads : 0;
    if (a->seq)
        m.max_position_embeddings = m.seq_length;
    /* the shape rules simulate applies (hidden size divisible by the heads, ...) */
    if ((rc = config_check_model(&m, err)))
        return rc;
    moe_config moe;
    if ((rc = build_moe(a, base ? base_moe : &preset.moe, &m, &moe, err)))
        return rc;
    cluster_config cl;
    memset(&cl, 0, sizeof cl);
    cl.gpus = a->gpus ? a->gpus : preset.gpus;
    /* The GPU kind: --gpu, else the topology file's, else A100 80GB; the
     * topology: --topology, else the built-in default for that kind. */
    topo *t = NULL;
    if (a->topology && (rc = topo_load(a->topology, &t, err)))
        return rc;
    const char *kind = a->gpu ? a->gpu : (t && t->params.gpu[0] ? t->params.gpu : "A100-SXM4-80GB");
    if ((rc = catalog_gpu(kind, &cl.gpu, err))) {
        topo_free(t);
        return err_prefix(err, "--gpu: ");
    }
    if (!t && (rc = topo_default_for(&cl.gpu, cl.gpus, &t, err)))
        return rc;
    if ((rc = topo_check_gpus(t, cl.gpus, err))) {
        topo_free(t);
        return rc;
    }
    cl.gpus_per_node = t->params.gpus_per_node;
    cl.topology = t;
    /* the attention kernels: a script's (resolved) unless --attention-backend is given */
    if (!base || a->attention_backend != ATTN_BACKEND_AUTO)
        m.attention_backend = (config_attn_backend)a->attention_backend;
    if (m.attention_backend == ATTN_BACKEND_AUTO)
        m.attention_backend = config_attn_auto(&cl.gpu, m.precision);
    if (a->fp8_format >= 0) { /* --fp8-format given: it and --fp8-recipe replace a script's */
        m.fp8_format = (config_fp8_format)(a->fp8_format + 1);
        m.fp8_recipe = (config_fp8_recipe)a->fp8_recipe;
        m.fp8_param_gather = false;
    }
    if (m.fp8_format != FP8_FORMAT_NONE && !(cl.gpu.fp8_tflops > 0)) {
        topo_free(t);
        return err_set(err, TS_EINVAL,
                       "--fp8-format %s: %s has no FP8 tensor cores (no fp8_tflops in the GPU catalogue); FP8 "
                       "training needs Hopper or later",
                       CONFIG_FP8_FORMAT_NAMES[m.fp8_format], cl.gpu.name);
    }
    cl.overheads = a->overheads; /* the GPU's defaults unless a flag is given, as every command */
    if ((rc = overheads_resolve(&cl.overheads, &cl.gpu, err))) {
        topo_free(t);
        return rc;
    }
    search_space_default(s, &m, &cl, a->batch ? a->batch : preset.par.global_batch_size);
    s->memory_margin_bytes = a->margin_gib * GIB;
    if (a->max_tp)
        s->max_tp = a->max_tp;
    if (a->max_pp)
        s->max_pp = a->max_pp;
    if (a->max_vp)
        s->max_vp = a->max_vp;
    if (a->max_cp)
        s->max_cp = a->max_cp;
    s->moe = moe;
    if (a->max_ep)
        s->max_ep = a->max_ep;
    s->try_etp = !a->no_etp;
    s->try_ep_overlap = a->ep_overlap;
    s->try_sequence_parallel = !a->no_sp;
    s->try_distributed_optimizer = !a->no_distopt;
    s->try_recompute_block = !a->no_block;
    if ((a->mbs && (rc = parse_ints(a->mbs, s->micro_batch_sizes, SEARCH_MAX_MBS, &s->n_micro_batch_sizes, err))) ||
        (a->schedules && (rc = parse_schedules(a->schedules, &s->schedules, err))) ||
        (a->dispatchers && (rc = parse_dispatchers(a->dispatchers, &s->dispatchers, err)))) {
        topo_free(t);
        return rc;
    }
    *topo_out = t;
    return TS_OK;
}

/* --calibration read and fitted once, before the search, as every
 * candidate's simulation would (simulate.c), so a malformed file (2) or an
 * unreadable one (1) is the search's error and not every candidate's. */
static int check_calibration(const search_space *s, const char *path, ts_err *err)
{
    const gpu_spec *gpu = &s->cluster.gpu;
    cost_params cp;
    commcost_params link;
    calib_set set = {0, NULL};
    int rc;
    if (!gpu->calibrated_only) {
        if ((rc = calib_load_params(path, gpu, s->model.precision, &cp, err)))
            err_prefix(err, "--calibration: ");
        return rc;
    }
    if ((rc = calib_read(path, &set, err)))
        return err_prefix(err, "--calibration: ");
    rc = calib_device_params(&set, gpu, s->model.precision, &cp, &link, err);
    calib_free(&set);
    if (rc)
        err_prefix(err, "--calibration %s: ", path);
    return rc;
}

static void print_counts(const search_set *set, double enum_s, double eval_s, FILE *f)
{
    const size_t *k = set->counts;
    size_t structural = 0;
    for (int st = SEARCH_REJ_HEADS; st <= SEARCH_REJ_EXPERTS; st++)
        structural += k[st];
    size_t simulated = k[SEARCH_SIMULATED] + k[SEARCH_REJ_MEMORY_SIM] + k[SEARCH_REJ_SIM_ERROR];
    char experts[48] = "";
    if (set->space.moe.num_experts > 0)
        snprintf(experts, sizeof experts, ", expert folds %zu", k[SEARCH_REJ_EXPERTS]);
    fprintf(f,
            "%zu candidates: %zu impossible layouts (heads %zu, groups %zu, hidden %zu, "
            "layers %zu, batch %zu, micro-batches %zu%s), %zu refused by config, %zu over the "
            "memory bound; %zu simulated (%zu over memory, %zu failed); %.2f s + %.2f s\n",
            set->n, structural, k[SEARCH_REJ_HEADS], k[SEARCH_REJ_GROUPS], k[SEARCH_REJ_HIDDEN], k[SEARCH_REJ_LAYERS],
            k[SEARCH_REJ_BATCH], k[SEARCH_REJ_MICROBATCHES], experts, k[SEARCH_REJ_CONFIG], k[SEARCH_REJ_MEMORY_BOUND],
            simulated, k[SEARCH_REJ_MEMORY_SIM], k[SEARCH_REJ_SIM_ERROR], enum_s, eval_s);
}

static void print_top(const search_set *set, const size_t *order, size_t n, int top, FILE *f)
{
    const search_space *s = &set->space;
    fprintf(f, "\nBest of %zu layouts that fit: %s on %d x %s, global batch %d\n", n, s->model.name, s->cluster.gpus,
            s->cluster.gpu.name, s->global_batch_size);
    fprintf(f, "%4s %11s %11s %6s %9s %7s  %s\n", "rank", "iteration_s", "TFLOP/s/GPU", "MFU", "peak_GiB", "bubble",
            "layout");
    for (size_t j = 0; j < n && j < (size_t)top; j++) {
        const search_cand *c = &set->cands[order[j]];
        char d[256];
        search_describe(set, order[j], d, sizeof d);
        fprintf(f, "%4zu %11.3f %11.1f %5.1f%% %9.1f %6.1f%%  %s\n", j + 1, c->r.iteration_s, c->r.tflops_per_gpu,
                100.0 * c->r.mfu, c->r.peak_mem_bytes / GIB, 100.0 * c->r.bubble_fraction, d);
    }
}

int cmd_search(int argc, char **argv)
{
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
        if (!strcmp(argv[i], "--inference")) /* inference deployments: cmd_infer.c */
            return cmd_search_inference(argc, argv);
    int rank = 0, size = 1;
#ifdef TRAINSIM_MPI
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited)
        MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
#endif
    search_args a = {.model = "gpt3-175b",
                     .top = 10,
                     .max_vp = 8,
                     .max_tp = 8,
                     .mbs = "1,2,4,8",
                     .attention_backend = ATTN_BACKEND_AUTO,
                     .fp8_format = -1,
                     .schedules = "gpipe,1f1b,interleaved,zb-h1,zb-h2,zb-v"};
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    a.threads = ncpu > 0 ? (int)ncpu : 1;
    opt_table t;
    opt_table_init(&t, "trainsim search",
                   "Find the fastest parallel layout that fits in memory: enumerate tensor, "
                   "pipeline and data parallel sizes, interleaving, micro-batch size, sequence "
                   "parallelism, recomputation, distributed optimizer and schedule (and for a "
                   "mixture of experts the expert-parallel and expert-tensor-parallel sizes and "
                   "the token dispatcher); reject "
                   "impossible layouts and those over a memory lower bound; simulate the rest "
                   "on the timeline; rank by iteration time. Under mpirun (build/trainsim-mpi) "
                   "the simulations are split across ranks. trainsim simulate's model, precision and kernel "
                   "flags (e.g. --moe-router-dtype fp32, --moe-dispatch-fwd-dtype mxfp8, --clip-grad 0) are "
                   "taken as simulate takes them and set on every candidate; its layout flags (-t, -p, "
                   "--micro-batch-size, --expert-model-parallel-size, ...) are refused, naming the search's "
                   "flag that bounds them (docs/search.md).");
    ts_err err;
    err_clear(&err);
    int status = 1;
    search_set *set = NULL;
    size_t *order = NULL, n_order = 0;
    topo *tp = NULL;
    search_pass sp = {0};
    config fc; /* the fixed settings (resolve_fixed) */
    flags_state ffs;
    opt_table fft;
    memset(&fc, 0, sizeof fc);
    memset(&ffs, 0, sizeof ffs);
    opt_table_init(&fft, "trainsim search", "");
    int rc = add_flags(&t, &a, &err);
    if (rc == TS_OK)
        rc = search_pass_split(&t, argc, argv, &sp, &err); /* simulate's flags: refused or passed through */
    if (rc == TS_OK)
        rc = opt_parse(&t, sp.n_rest, sp.rest, &err);
    if (rc)
        goto out;
    if (t.help_requested) {
        if (rank == 0)
            opt_help(&t, stdout);
        status = 0;
        goto out;
    }
    /* --out is checked before the search, which may take minutes */
    if (a.out && (rc = afile_check_writable(a.out, "--out", &err)))
        goto out;
    char script_gpu[64];
    /* the shared flags resolve the model as trainsim simulate does (Megatron-LM's defaults too) */
    if ((rc = resolve_fixed(&a, &sp, &fc, &ffs, &fft, script_gpu, sizeof script_gpu, rank != 0, &err)))
        goto out;
    search_space s;
    memset(&s, 0, sizeof s); /* every field set by build_space on success; zero for the analyzer */
    if ((rc = build_space(&a, &fc.model, &fc.moe, &s, &tp, &err)))
        goto out;
    s.par = fc.par; /* --clip-grad, --loss-scale, ...; search_cand_config keeps the layout the candidate's */
    if (sp.delay_wgrad && !a.ep_overlap) {
        rc = err_set(&err, TS_EINVAL,
                     "--delay-wgrad-compute: it needs --overlap-moe-expert-parallel-comm, which the search chooses; "
                     "give --try-overlap-moe-expert-parallel-comm too (it then applies to the overlapped candidates)");
        goto out;
    }
    s.delay_wgrad = sp.delay_wgrad;
    if (a.calibration && (rc = check_calibration(&s, a.calibration, &err)))
        goto out;
    double t0 = now_s();
    if ((rc = search_enumerate(&s, &set, &err)))
        goto out;
    double t1 = now_s();
    simulate_opts so = {.calibration_path = a.calibration};
    progress pr = {.start = t1, .tty = isatty(2), .quiet = a.quiet || rank != 0};
    search_eval_opts eo = {.eval_user = &so,
                           .threads = a.threads,
                           .shard = 0,
                           .nshards = 1,
                           .progress = on_progress,
                           .progress_user = &pr};
#ifdef TRAINSIM_MPI
    rc = search_mpi_evaluate(set, MPI_COMM_WORLD, &eo, &err);
#else
    rc = search_evaluate(set, &eo, &err);
#endif
    if (rc)
        goto out;
    double t2 = now_s();
    if ((rc = search_rank(set, &order, &n_order, &err)))
        goto out;
    if (rank == 0) {
        print_counts(set, t1 - t0, t2 - t1, stdout);
        if (size > 1)
            printf("(simulations split over %d MPI ranks x %d threads)\n", size, a.threads);
        if (n_order == 0) {
            printf("no layout fits: every candidate was rejected (see --out FILE.csv for the "
                   "reasons)\n");
        } else {
            print_top(set, order, n_order, a.top, stdout);
            if (a.explain) {
                printf("\n");
                search_explain(set, order[0], stdout);
            }
        }
        if (a.out) {
            if ((rc = search_write_csv(set, order, n_order, a.out, &err)))
                goto out;
            printf("\nwrote %s (%zu rows: every candidate, with the reason of each rejection)\n", a.out, set->n);
        }
    }
    status = n_order == 0 ? 1 : 0;
out:
    if (rc)
        status = cmd_exit_status(rc);
    if (status != 0 && err.msg[0] && rank == 0)
        fprintf(stderr, "trainsim search: %s\n", err.msg);
    free(order);
    search_set_free(set);
    topo_free(tp);
    config_free(&fc);
    flags_release(&ffs);
    opt_table_free(&fft);
    search_pass_free(&sp);
    opt_table_free(&t);
#ifdef TRAINSIM_MPI
    MPI_Finalize();
#endif
    return status;
}
