/* trainsim infer — one inference workload on a layout: a static batch, or a
 * stream of requests served with continuous batching (sim/infer/). And
 * trainsim search --inference, which runs the static batch over layouts,
 * batch sizes and precisions (sim/infer/infer_search.h). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/cli/cmd.h"
#include "sim/config/config.h"
#include "sim/config/flags.h"
#include "sim/infer/infer_calib.h"
#include "sim/infer/infer_cost.h"
#include "sim/infer/infer_kv.h"
#include "sim/infer/infer_search.h"
#include "sim/infer/infer_static.h"
#include "sim/infer/infer_stream.h"
#include "sim/model/calib.h"
#include "sim/util/afile.h"
#include "sim/util/csvio.h"
#include "sim/util/opt.h"

#define GIB      (1024.0 * 1024.0 * 1024.0)
#define MAX_ARGS 4096

static const char *const WQ_NAMES[] = {"none", "int8", "int4", NULL};
static const char *const KV_NAMES[] = {"auto", "fp16", "bf16", "fp8", "int8", NULL};

/* The flags infer and search --inference share beside the model's. */
typedef struct {
    int fp8;        /* config_fp8_format (the shared --fp8-format) */
    int wq;         /* index into WQ_NAMES */
    int kv;         /* index into KV_NAMES */
    int64_t batch;  /* --batch-size */
    int64_t in_len; /* --input-len */
    int64_t out_len;
    const char *csv;
    const char *calib;        /* --calibration: kernel calibration CSV (calib.h) */
    const char *decode_calib; /* --decode-calibration: decode fit (infer_calib.h) */
    /* stream mode */
    double rate;
    int64_t num_requests, seed, max_num_tokens;
    /* search --inference */
    double max_ttft_ms, max_tpot_ms;
    int max_tp, max_pp, top;
    const char *batches, *out;
    bool search;
} infer_args;

static bool arg_given(int argc, char **argv, const char *name, const char *alias)
{
    size_t n = strlen(name);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--"))
            break;
        if (!strncmp(argv[i], name, n) && (argv[i][n] == '\0' || argv[i][n] == '='))
            return true;
        if (alias && !strcmp(argv[i], alias))
            return true;
    }
    return false;
}

/* The value of a flag in argv ("--x V", "--x=V", alias "-x V"), or NULL. */
static const char *arg_value(int argc, char **argv, const char *name, const char *alias)
{
    size_t n = strlen(name);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--"))
            break;
        if (!strncmp(argv[i], name, n) && argv[i][n] == '=')
            return argv[i] + n + 1;
        if ((!strcmp(argv[i], name) || (alias && !strcmp(argv[i], alias))) && i + 1 < argc)
            return argv[i + 1];
    }
    return NULL;
}

static long arg_long(int argc, char **argv, const char *name, const char *alias, long dflt)
{
    const char *v = arg_value(argc, argv, name, alias);
    char *end;
    long x = v ? strtol(v, &end, 10) : dflt;
    return v && (end == v || *end || x < 1 || x > (1L << 24)) ? dflt : x;
}

/* Room for the arguments infer_argv adds. */
typedef struct {
    char **v; /* owned */
    char gpus[48], gbs[48];
} infer_argbuf;

/* The arguments with inference's defaults for the training layout flags a
 * preset would otherwise set (t = p = 1, one sequence per micro-batch, the
 * GPUs dflt_gpus (0: t x p) and the global batch one sequence per replica) and, with no
 * model flag at all, GPT-3 175B on t = 8. Values the flags' own checks
 * refuse are left to them. b->v is owned by the caller (free). */
static int infer_argv(int argc, char **argv, long dflt_gpus, int *out_argc, infer_argbuf *b, ts_err *err)
{
    static char mdl[] = "--model=" FLAGS_DEFAULT_MODEL, t1[] = "--tensor-model-parallel-size=1",
                t8[] = "--tensor-model-parallel-size=8", p1[] = "--pipeline-model-parallel-size=1",
                b1[] = "--micro-batch-size=1";
    if (argc > MAX_ARGS)
        return err_set(err, TS_EINVAL, "more than %d arguments", MAX_ARGS);
    char **v = calloc((size_t)argc + 8, sizeof *v);
    if (!v)
        return err_set(err, TS_ENOMEM, "out of memory");
    int n = 0;
    v[n++] = argv[0];
    bool help = arg_given(argc, argv, "--help", "-h");
    bool script = arg_given(argc, argv, "--megatron-script", NULL);
    bool model = arg_given(argc, argv, "--model", NULL), custom = arg_given(argc, argv, "--num-layers", NULL);
    bool t_given = arg_given(argc, argv, "--tensor-model-parallel-size", "-t");
    long t = arg_long(argc, argv, "--tensor-model-parallel-size", "-t", 1);
    long p = arg_long(argc, argv, "--pipeline-model-parallel-size", "-p", 1);
    if (!help && !script) {
        if (!model && !custom) {
            v[n++] = mdl;
            if (!t_given) {
                v[n++] = t8;
                t = 8;
            }
            t_given = true;
        }
        if (!t_given)
            v[n++] = t1;
        if (!arg_given(argc, argv, "--pipeline-model-parallel-size", "-p"))
            v[n++] = p1;
        if (!arg_given(argc, argv, "--micro-batch-size", NULL))
            v[n++] = b1;
        long gpus = arg_long(argc, argv, "--gpus", NULL, dflt_gpus > 0 ? dflt_gpus : t * p);
        if (!arg_given(argc, argv, "--gpus", NULL)) {
            snprintf(b->gpus, sizeof b->gpus, "--gpus=%ld", gpus);
            v[n++] = b->gpus;
        }
        if (!arg_given(argc, argv, "--global-batch-size", NULL)) {
            long d = gpus % (t * p) == 0 ? gpus / (t * p) : 1;
            snprintf(b->gbs, sizeof b->gbs, "--global-batch-size=%ld", d);
            v[n++] = b->gbs;
        }
    }
    for (int i = 1; i < argc; i++)
        v[n++] = argv[i];
    v[n] = NULL;
    *out_argc = n;
    b->v = v;
    return TS_OK;
}

static int add_common(opt_table *t, infer_args *a, ts_err *err)
{
    const opt_spec specs[] = {
        {.name = "--input-len",
         .type = OPT_INT64,
         .target = &a->in_len,
         .min = 1,
         .max = 1 << 24,
         .unit = "tokens",
         .help = "prompt tokens per request"},
        {.name = "--output-len",
         .type = OPT_INT64,
         .target = &a->out_len,
         .min = 1,
         .max = 1 << 24,
         .unit = "tokens",
         .help = "generated tokens per request (the first comes from the prefill)"},
        {.name = "--weight-quant",
         .type = OPT_ENUM,
         .target = &a->wq,
         .enum_names = WQ_NAMES,
         .help = "weight-only quantisation of the transformer layers (weights read at 8 or 4 bits, computed "
                 "at the activations' precision)"},
        {.name = "--kv-cache-dtype",
         .type = OPT_ENUM,
         .target = &a->kv,
         .enum_names = KV_NAMES,
         .help = "KV-cache element type (auto: the activations')"},
        {.name = "--csv",
         .type = OPT_STRING,
         .target = &a->csv,
         .metavar = "FILE",
         .defval = "none",
         .help = "write the results as CSV (scope,metric,value,unit); - for stdout"},
        {.name = "--calibration",
         .type = OPT_STRING,
         .target = &a->calib,
         .metavar = "FILE",
         .defval = "none (the GPU kind's default tables)",
         .help = "kernel calibration CSV (trainsim calibrate --output): efficiency tables and launch overhead "
                 "fitted from measured kernels; required with --gpu cpu (with its link rows)"},
        {.name = "--decode-calibration",
         .type = OPT_STRING,
         .target = &a->decode_calib,
         .metavar = "FILE",
         .defval = "none",
         .help = "decode calibration CSV (trainsim calibrate --decode-output): launch overhead (ns) and HBM "
                 "bandwidth (GB/s) fitted from measured decode steps; its gpu must be --gpu"},
    };
    int rc = opt_section(t, "Inference", err);
    for (size_t i = 0; !rc && i < sizeof specs / sizeof specs[0]; i++)
        rc = opt_add(t, &specs[i], err);
    return rc;
}

static int add_infer(opt_table *t, infer_args *a, ts_err *err)
{
    const opt_spec specs[] = {
        {.name = "--batch-size",
         .type = OPT_INT64,
         .target = &a->batch,
         .min = 1,
         .max = 1 << 20,
         .unit = "sequences",
         .help = "sequences in flight: the static batch, or the most running at once"},
        {.name = "--request-rate",
         .type = OPT_DOUBLE,
         .target = &a->rate,
         .min = 0,
         .max = 1e9,
         .unit = "requests/s",
         .defval = "0 (static batch)",
         .help = "serve a Poisson stream of requests at this rate with continuous batching"},
        {.name = "--num-requests",
         .type = OPT_INT64,
         .target = &a->num_requests,
         .min = 1,
         .max = 1e7,
         .unit = "requests",
         .help = "requests in the stream"},
        {.name = "--seed",
         .type = OPT_INT64,
         .target = &a->seed,
         .min = 0,
         .max = 4294967295.0,
         .help = "seed of the arrivals (GSL MT19937)"},
        {.name = "--max-num-tokens",
         .type = OPT_INT64,
         .target = &a->max_num_tokens,
         .min = 1,
         .max = 1 << 24,
         .unit = "tokens",
         .help = "token budget of a continuous-batching step (chunked prefill; 2048 is an assumption: vLLM V1's "
                 "API-server figure)"},
    };
    int rc = TS_OK;
    for (size_t i = 0; !rc && i < sizeof specs / sizeof specs[0]; i++)
        rc = opt_add(t, &specs[i], err);
    return rc;
}

static int add_search(opt_table *t, infer_args *a, ts_err *err)
{
    const opt_spec specs[] = {
        {.name = "--inference",
         .type = OPT_BOOL,
         .target = &a->search,
         .help = "search inference deployments (this mode)"},
        {.name = "--max-ttft-ms",
         .type = OPT_DOUBLE,
         .target = &a->max_ttft_ms,
         .min = 0,
         .max = 1e9,
         .unit = "ms",
         .defval = "0 (no limit)",
         .help = "keep deployments whose time to first token is at most this"},
        {.name = "--max-tpot-ms",
         .type = OPT_DOUBLE,
         .target = &a->max_tpot_ms,
         .min = 0,
         .max = 1e9,
         .unit = "ms",
         .defval = "0 (no limit)",
         .help = "keep deployments whose time per output token is at most this"},
        {.name = "--max-tp",
         .type = OPT_INT,
         .target = &a->max_tp,
         .min = 1,
         .max = 1024,
         .unit = "ranks",
         .help = "largest tensor-parallel size tried (powers of two)"},
        {.name = "--max-pp",
         .type = OPT_INT,
         .target = &a->max_pp,
         .min = 1,
         .max = 1024,
         .unit = "ranks",
         .help = "largest pipeline-parallel size tried (powers of two)"},
        {.name = "--batch-sizes",
         .type = OPT_STRING,
         .target = &a->batches,
         .metavar = "LIST",
         .help = "batch sizes tried (comma-separated; those that do not fit are skipped)"},
        {.name = "--top", .type = OPT_INT, .target = &a->top, .min = 1, .max = 100000, .help = "rows printed"},
        {.name = "--out",
         .type = OPT_STRING,
         .target = &a->out,
         .metavar = "FILE",
         .defval = "none",
         .help = "write every deployment evaluated as CSV, with its Pareto-front flag"},
    };
    int rc = TS_OK;
    for (size_t i = 0; !rc && i < sizeof specs / sizeof specs[0]; i++)
        rc = opt_add(t, &specs[i], err);
    return rc;
}

/* Parse; *help true after --help (printed). */
static int parse(opt_table *t, flags_state *fs, config *c, infer_args *a, int argc, char **argv, bool *help,
                 infer_argbuf *owned, ts_err *err)
{
    int ac = 0;
    int rc = infer_argv(argc, argv, a->search ? 8 : 0, &ac, owned, err);
    if (!rc)
        rc = flags_register(fs, t, c, err);
    if (!rc)
        rc = add_common(t, a, err);
    if (!rc)
        rc = a->search ? add_search(t, a, err) : add_infer(t, a, err);
    if (!rc)
        rc = flags_parse(fs, t, ac, owned->v, err);
    mscript_write_notes(fs->script, t->prog, stderr);
    if (!rc)
        flags_note_ignored(fs, stderr);
    if (!rc && t->help_requested) {
        opt_help(t, stdout);
        *help = true;
        return TS_OK;
    }
    /* training-only flags, refused before flags_finish so that their own
     * rules (the GPU, the layout they need) do not hide that they are */
    static const struct {
        const char *flag, *what;
    } TRAIN_ONLY[] = {
        {"--no-bias-gelu-fusion", "kernel fusions"},
        {"--no-bias-swiglu-fusion", "kernel fusions"},
        {"--no-bias-dropout-fusion", "kernel fusions"},
        {"--no-masked-softmax-fusion", "kernel fusions"},
        {"--no-gradient-accumulation-fusion", "kernel fusions"},
        {"--no-rope-fusion", "kernel fusions"},
        {"--cross-entropy-loss-fusion", "kernel fusions"},
        {"--clip-grad", "per-iteration costs"},
        {"--loss-scale", "per-iteration costs"},
        {"--no-check-for-nan-in-loss-and-grad", "per-iteration costs"},
        {"--check-for-large-grads", "per-iteration costs"},
        {"--log-num-zeros-in-grad", "per-iteration costs"},
        {"--moe-dispatch-fwd-dtype", "the MoE training dispatch"},
        {"--moe-combine-bwd-dtype", "the MoE backward's combine"},
        {"--delay-wgrad-compute", "the MoE backward's weight gradients"},
        {"--overlap-moe-expert-parallel-comm", "the MoE training step's forward/backward pairing"},
    };
    for (size_t i = 0; !rc && i < sizeof TRAIN_ONLY / sizeof TRAIN_ONLY[0]; i++)
        if (opt_was_set(t, TRAIN_ONLY[i].flag))
            rc = err_set(err, TS_EINVAL, "%s: a training-only flag (%s), not modelled for inference (drop it)",
                         TRAIN_ONLY[i].flag, TRAIN_ONLY[i].what);
    if (!rc)
        rc = flags_finish(fs, t, err);
    /* --fp8-format is the shared flag (flags.c): FP8 weights and activations,
     * GEMMs at the GPU's FP8 peak, the KV cache following unless
     * --kv-cache-dtype; the training-only FP8 flags are refused */
    if (!rc)
        a->fp8 = (int)c->model.fp8_format;
    if (!rc && (c->model.fp8_param_gather || opt_was_set(t, "--fp8-recipe")))
        rc = err_set(err, TS_EINVAL,
                     "--fp8-recipe / --fp8-param-gather: training flags, not modelled for inference (give "
                     "--fp8-format alone)");
    if (!rc && config_cp(c) > 1)
        rc = err_set(err, TS_EINVAL,
                     "--context-parallel-size %d: not modelled for inference (context parallelism is a training "
                     "layout here; give 1)",
                     config_cp(c));
    if (!rc && (c->moe.mla || c->moe.mtp_num_layers > 0)) /* the inference model's layers are the dense GPT's */
        rc = err_set(err, TS_EINVAL, "%s: not modelled for inference (training only: trainsim simulate)",
                     c->moe.mla ? "--multi-latent-attention" : "--mtp-num-layers");
    if (!rc && fs->fp32 && !c->cluster.gpu.calibrated_only)
        rc = err_set(err, TS_EINVAL,
                     "--fp32: fp32 inference is not modelled on a GPU (valid: --fp16, --bf16, --fp8-format; "
                     "--fp32 only with --gpu cpu, the CPU executor's precision)");
    if (!rc && a->in_len + a->out_len > c->model.seq_length)
        rc = err_set(err, TS_EINVAL,
                     "--input-len %lld + --output-len %lld: more than the model's context window --seq-length %d",
                     (long long)a->in_len, (long long)a->out_len, c->model.seq_length);
    return rc;
}

static infer_prec prec_of(const config *c, const infer_args *a)
{
    infer_prec p;
    if (c->model.precision == PREC_FP32 && !a->fp8 && !a->wq && !a->kv)
        return (infer_prec){INFER_FP32, INFER_FP32, INFER_FP32};
    p.act = a->fp8 ? INFER_FP8 : c->model.precision == PREC_BF16 ? INFER_BF16 : INFER_FP16;
    p.weight = a->wq == 1 ? INFER_INT8 : a->wq == 2 ? INFER_INT4 : p.act;
    static const infer_dtype kv[] = {INFER_FP16, INFER_FP16, INFER_BF16, INFER_FP8, INFER_INT8};
    p.kv = a->kv ? kv[a->kv] : p.act;
    return p;
}

/* ------------------------------------------------------------ constants */

/* The model's constants and where they came from. */
typedef struct {
    infer_params ip;
    cost_params cost; /* valid when ip.cost points at it */
    commcost_params link;
    const char *tables_src; /* kernel tables, peaks, launch default */
    const char *launch_src; /* launch overhead per kernel */
    const char *mem_src;    /* HBM efficiency */
} infer_consts;

/* --calibration and --decode-calibration into *k (see the flags' help). */
static int load_consts(const config *c, const infer_args *a, infer_prec pr, infer_consts *k, ts_err *err)
{
    const gpu_spec *gpu = &c->cluster.gpu;
    memset(k, 0, sizeof *k);
    k->ip = infer_params_default();
    k->tables_src = k->launch_src = "cost model default";
    k->mem_src = "cost model default";
    int rc = TS_OK;
    if (gpu->calibrated_only) {
        if (!a->calib)
            return err_set(err, TS_EINVAL,
                           "device '%s' has no datasheet or default cost tables: give --calibration FILE "
                           "(written by trainsim calibrate from trainexec --microbench) with its gemm, memory, "
                           "launch, p2p and allreduce rows",
                           gpu->name);
        calib_set set = {0, NULL};
        if ((rc = calib_read(a->calib, &set, err)))
            return err_prefix(err, "--calibration: ");
        rc = calib_device_params(&set, gpu, PREC_FP32, &k->cost, &k->link, err);
        calib_free(&set);
        if (rc)
            return err_prefix(err, "--calibration %s: ", a->calib);
        k->ip.link = &k->link;
    } else if (a->calib) {
        config_precision cp = pr.act == INFER_BF16 ? PREC_BF16 : PREC_FP16;
        if ((rc = calib_load_params(a->calib, gpu, cp, &k->cost, err)))
            return err_prefix(err, "--calibration: ");
    }
    if (a->calib) {
        k->ip.cost = &k->cost;
        k->tables_src = k->launch_src = k->mem_src = a->calib;
    }
    if (a->decode_calib) {
        infer_calib dc;
        double hbm = k->ip.cost ? k->cost.hbm_gbps : gpu->hbm_gbps;
        if (!(rc = infer_calib_read(a->decode_calib, &dc, err)))
            rc = infer_calib_apply(&dc, a->decode_calib, gpu, hbm, &k->ip, err);
        if (rc)
            return rc;
        k->launch_src = k->mem_src = a->decode_calib;
    }
    return TS_OK;
}

/* The line saying which constants came from which file. */
static void text_consts(const infer_model *m, const infer_consts *k)
{
    printf("constants: launch %.0f ns per kernel (%s); HBM efficiency ", infer_model_layout(m)->launch_ns,
           k->launch_src);
    if (k->ip.mem_eff > 0)
        printf("%.4f", k->ip.mem_eff);
    else
        printf("per kernel size");
    printf(" (%s); GEMM efficiency and peaks (%s)\n", k->mem_src, k->tables_src);
}

/* ------------------------------------------------------------ reports */

static void row(FILE *f, const char *metric, double v, const char *unit)
{
    char num[CSVIO_NUM_BYTES];
    fprintf(f, "inference,%s,%s,%s\n", metric, csvio_fmt_double(num, sizeof num, v), unit);
}

static void csv_head(FILE *f, const config *c, const infer_model *m, const char *mode, int gpus, const infer_args *a)
{
    const infer_layout *L = infer_model_layout(m);
    char prec[64];
    infer_prec_name(infer_model_prec(m), prec, sizeof prec);
    fprintf(f, "scope,metric,value,unit\n");
    fprintf(f, "inference,model,%s,\ninference,gpu,%s,\ninference,mode,%s,\ninference,precision,%s,\n", c->model.name,
            c->cluster.gpu.name, mode, prec);
    row(f, "gpus", gpus, "GPUs");
    row(f, "tp", L->t, "ranks");
    row(f, "pp", L->p, "ranks");
    int replicas = gpus / (L->t * L->p);
    row(f, "replicas", replicas, "replicas");
    row(f, "batch_size", (double)a->batch, "sequences");
    row(f, "input_len", (double)a->in_len, "tokens");
    row(f, "output_len", (double)a->out_len, "tokens");
}

static void csv_mem(FILE *f, const infer_mem *mem)
{
    row(f, "memory_weights", (double)mem->weights_bytes, "bytes");
    row(f, "memory_kv_cache", (double)mem->kv_bytes, "bytes");
    row(f, "memory_workspace", (double)mem->workspace_bytes, "bytes");
    row(f, "memory_overheads", (double)mem->overhead_bytes, "bytes");
    row(f, "memory_peak", (double)mem->peak_bytes, "bytes");
    row(f, "memory_hbm", (double)mem->hbm_bytes, "bytes");
}

static void text_head(const config *c, const infer_model *m, int gpus, const infer_args *a)
{
    const infer_layout *L = infer_model_layout(m);
    char prec[64];
    infer_prec_name(infer_model_prec(m), prec, sizeof prec);
    printf("%s on %d x %s: t=%d p=%d (%d replica%s), %s; batch %lld, input %lld, output %lld tokens\n", c->model.name,
           gpus, c->cluster.gpu.name, L->t, L->p, gpus / (L->t * L->p), gpus / (L->t * L->p) == 1 ? "" : "s", prec,
           (long long)a->batch, (long long)a->in_len, (long long)a->out_len);
}

static void text_mem(const infer_mem *mem)
{
    printf("memory per GPU (stage %d): weights %.2f GiB, KV cache %.2f GiB, workspace %.2f GiB, overheads %.2f GiB; "
           "peak %.2f of %.2f GiB%s\n",
           mem->stage, mem->weights_bytes / GIB, mem->kv_bytes / GIB, mem->workspace_bytes / GIB,
           mem->overhead_bytes / GIB, mem->peak_bytes / GIB, mem->hbm_bytes / GIB, mem->fits ? "" : " (DOES NOT FIT)");
}

static int write_static(const config *c, const infer_model *m, const infer_args *a, int gpus,
                        const infer_static_result *r, ts_err *err)
{
    bool text = !a->csv || strcmp(a->csv, "-") != 0;
    if (text) {
        text_head(c, m, gpus, a);
        printf("static batch: time to first token %.3f ms, time per output token %.3f ms, end-to-end %.3f ms\n",
               r->ttft_ns * 1e-6, r->tpot_ns * 1e-6, r->e2e_ns * 1e-6);
        printf("output tokens/s: %.1f in total, %.1f per GPU\n", r->tokens_per_s, r->throughput_per_gpu);
        text_mem(&r->mem);
        printf("largest batch that fits: %lld sequences\n", (long long)r->max_batch);
    }
    if (!a->csv)
        return TS_OK;
    afile f;
    int rc = afile_open(&f, a->csv, err);
    if (rc)
        return rc;
    csv_head(f.f, c, m, "static", gpus, a);
    row(f.f, "ttft", (double)r->ttft_ns, "ns");
    row(f.f, "tpot", (double)r->tpot_ns, "ns");
    row(f.f, "e2e_latency", (double)r->e2e_ns, "ns");
    row(f.f, "prefill_time", (double)r->prefill_ns, "ns");
    row(f.f, "decode_time", (double)r->decode_ns, "ns");
    row(f.f, "throughput", r->tokens_per_s, "tokens/s");
    row(f.f, "throughput_per_gpu", r->throughput_per_gpu, "tokens/s");
    csv_mem(f.f, &r->mem);
    row(f.f, "max_batch", (double)r->max_batch, "sequences");
    return afile_commit(&f, err);
}

static void dist_rows(FILE *f, const char *name, const infer_dist *d)
{
    char m[64];
    row(f, name, d->mean_ns, "ns");
    snprintf(m, sizeof m, "%s_p50", name);
    row(f, m, d->p50_ns, "ns");
    snprintf(m, sizeof m, "%s_p99", name);
    row(f, m, d->p99_ns, "ns");
}

static int write_stream(const config *c, const infer_model *m, const infer_args *a, int gpus,
                        const infer_stream_result *r, ts_err *err)
{
    bool text = !a->csv || strcmp(a->csv, "-") != 0;
    if (text) {
        text_head(c, m, gpus, a);
        printf("stream: %lld requests at %g/s (seed %lld), continuous batching, token budget %lld\n",
               (long long)a->num_requests, a->rate, (long long)a->seed, (long long)a->max_num_tokens);
        printf("time to first token   mean %.3f ms, p50 %.3f ms, p99 %.3f ms\n", r->ttft.mean_ns * 1e-6,
               r->ttft.p50_ns * 1e-6, r->ttft.p99_ns * 1e-6);
        printf("time per output token mean %.3f ms, p50 %.3f ms, p99 %.3f ms\n", r->tpot.mean_ns * 1e-6,
               r->tpot.p50_ns * 1e-6, r->tpot.p99_ns * 1e-6);
        printf("end-to-end latency    mean %.3f ms, p50 %.3f ms, p99 %.3f ms\n", r->e2e.mean_ns * 1e-6,
               r->e2e.p50_ns * 1e-6, r->e2e.p99_ns * 1e-6);
        printf("output tokens/s: %.1f in total, %.1f per GPU; %lld steps, %.1f sequences running on average, "
               "last request ends at %.3f s\n",
               r->tokens_per_s, r->throughput_per_gpu, (long long)r->steps, r->mean_running, r->makespan_ns * 1e-9);
        printf("KV cache: room for %lld tokens per replica, %lld reserved at the peak\n",
               (long long)r->kv_capacity_tokens, (long long)r->peak_kv_tokens);
        text_mem(&r->mem);
    }
    if (!a->csv)
        return TS_OK;
    afile f;
    int rc = afile_open(&f, a->csv, err);
    if (rc)
        return rc;
    csv_head(f.f, c, m, "stream", gpus, a);
    row(f.f, "request_rate", a->rate, "requests/s");
    row(f.f, "num_requests", (double)a->num_requests, "requests");
    row(f.f, "seed", (double)a->seed, "");
    row(f.f, "max_num_tokens", (double)a->max_num_tokens, "tokens");
    dist_rows(f.f, "ttft", &r->ttft);
    dist_rows(f.f, "tpot", &r->tpot);
    dist_rows(f.f, "e2e_latency", &r->e2e);
    row(f.f, "throughput", r->tokens_per_s, "tokens/s");
    row(f.f, "throughput_per_gpu", r->throughput_per_gpu, "tokens/s");
    row(f.f, "makespan", (double)r->makespan_ns, "ns");
    row(f.f, "steps", (double)r->steps, "steps");
    row(f.f, "kv_capacity", (double)r->kv_capacity_tokens, "tokens");
    row(f.f, "kv_peak", (double)r->peak_kv_tokens, "tokens");
    csv_mem(f.f, &r->mem);
    return afile_commit(&f, err);
}

static int run_infer(config *c, infer_args *a, bool *fits, ts_err *err)
{
    int gpus = c->cluster.gpus;
    infer_prec pr = prec_of(c, a);
    infer_consts k;
    infer_model *m = NULL;
    int rc = load_consts(c, a, pr, &k, err);
    if (!rc)
        rc = infer_model_new(c, &pr, &k.ip, &m, err);
    if (!rc && a->rate > 0) {
        infer_stream_in in = {.request_rate = a->rate,
                              .num_requests = a->num_requests,
                              .seed = (unsigned long)a->seed,
                              .input_len = a->in_len,
                              .output_len = a->out_len,
                              .max_seqs = a->batch,
                              .max_num_tokens = a->max_num_tokens,
                              .gpus = gpus};
        infer_stream_result r;
        rc = infer_stream_run(m, &in, &r, err);
        if (!rc)
            rc = write_stream(c, m, a, gpus, &r, err);
    } else if (!rc) {
        infer_static_in in = {.batch = a->batch, .input_len = a->in_len, .output_len = a->out_len, .gpus = gpus};
        infer_static_result r;
        rc = infer_static_run(m, &in, &r, err);
        if (!rc) {
            *fits = r.mem.fits;
            rc = write_static(c, m, a, gpus, &r, err);
        }
    }
    if (!rc && (!a->csv || strcmp(a->csv, "-") != 0))
        text_consts(m, &k);
    infer_model_free(m);
    return rc;
}

int cmd_infer(int argc, char **argv)
{
    config c;
    memset(&c, 0, sizeof c);
    infer_args a = {.batch = 1, .in_len = 128, .out_len = 128, .num_requests = 1000, .seed = 1, .max_num_tokens = 2048};
    opt_table t;
    opt_table_init(&t, "trainsim infer",
                   "Predict one inference workload on a layout: a static batch (prefill, then decode steps "
                   "until the outputs end), or with --request-rate a Poisson stream of requests served with "
                   "continuous batching and chunked prefill, simulated event by event. Reports time to first "
                   "token, time per output token, end-to-end latency, output tokens/s and memory per GPU. Model "
                   "flags as for training (dense); -t and -p default to 1 (with no model flag: GPT-3 175B, t=8).");
    ts_err err;
    err_clear(&err);
    flags_state fs;
    memset(&fs, 0, sizeof fs);
    infer_argbuf owned;
    memset(&owned, 0, sizeof owned);
    bool help = false, fits = true;
    int rc = parse(&t, &fs, &c, &a, argc, argv, &help, &owned, &err);
    if (!rc && !help && a.csv)
        rc = afile_check_writable(a.csv, "--csv", &err);
    if (!rc && !help)
        rc = run_infer(&c, &a, &fits, &err);
    if (rc)
        fprintf(stderr, "trainsim infer: %s\n", err.msg);
    int status = rc || help || fits ? cmd_exit_status(rc) : CMD_EXIT_DOES_NOT_FIT;
    config_free(&c);
    flags_release(&fs);
    opt_table_free(&t);
    free(owned.v);
    return status;
}

/* ------------------------------------------------------------ search --inference */

/* "1,2,4" -> batch sizes in [1, 2^20]. */
static int parse_batches(const char *s, infer_search_in *in, ts_err *err)
{
    in->n_batches = 0;
    for (const char *p = s; *p;) {
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 1 || v > (1 << 20) || (*end && *end != ','))
            return err_set(err, TS_EINVAL,
                           "--batch-sizes '%s': expected a comma-separated list of integers in [1, 1048576], "
                           "e.g. 1,8,64",
                           s);
        if (in->n_batches == INFER_SEARCH_MAX_LIST)
            return err_set(err, TS_EINVAL, "--batch-sizes '%s': at most %d values", s, INFER_SEARCH_MAX_LIST);
        in->batches[in->n_batches++] = v;
        p = *end ? end + 1 : end;
    }
    if (!in->n_batches)
        return err_set(err, TS_EINVAL, "--batch-sizes is empty (e.g. 1,8,64)");
    return TS_OK;
}

/* The precisions tried: the one the flags name when --fp8-format,
 * --weight-quant or --kv-cache-dtype is given, or on a calibrated-only
 * device (fp32); otherwise 16-bit, weight-only
 * int8 and int4, and FP8 (weights, activations, KV cache) on GPUs with it. */
static void search_precs(const config *c, const opt_table *t, const infer_args *a, infer_search_in *in)
{
    infer_prec base = prec_of(c, a);
    in->n_precs = 0;
    in->precs[in->n_precs++] = base;
    if (c->cluster.gpu.calibrated_only || opt_was_set(t, "--fp8-format") || opt_was_set(t, "--weight-quant") ||
        opt_was_set(t, "--kv-cache-dtype"))
        return; /* a calibrated-only device runs fp32 only */
    in->precs[in->n_precs++] = (infer_prec){base.act, INFER_INT8, base.kv};
    in->precs[in->n_precs++] = (infer_prec){base.act, INFER_INT4, base.kv};
    if (c->cluster.gpu.fp8_tflops > 0)
        in->precs[in->n_precs++] = (infer_prec){INFER_FP8, INFER_FP8, INFER_FP8};
}

static void cand_line(FILE *f, const infer_cand *x, bool csv)
{
    char prec[64];
    infer_prec_name(&x->prec, prec, sizeof prec);
    if (csv) {
        fprintf(f, "%d,%d,%s,%lld,%.6f,%.6f,%.6f,%.3f,%.3f,%lld,%d,%d\n", x->t, x->p, prec, (long long)x->batch,
                x->r.ttft_ns * 1e-6, x->r.tpot_ns * 1e-6, x->r.e2e_ns * 1e-6, x->r.throughput_per_gpu,
                x->r.mem.peak_bytes / GIB, (long long)x->r.max_batch, x->meets ? 1 : 0, x->pareto ? 1 : 0);
    } else {
        fprintf(f, "%3d %3d  %-20s %6lld %10.2f %9.3f %10.2f %10.1f %8.2f%s\n", x->t, x->p, prec, (long long)x->batch,
                x->r.ttft_ns * 1e-6, x->r.tpot_ns * 1e-6, x->r.e2e_ns * 1e-6, x->r.throughput_per_gpu,
                x->r.mem.peak_bytes / GIB, x->pareto ? "  *" : "");
    }
}

static int search_write(const char *path, const infer_cand *v, size_t n, ts_err *err)
{
    afile f;
    int rc = afile_open(&f, path, err);
    if (rc)
        return rc;
    fprintf(f.f, "tp,pp,precision,batch,ttft_ms,tpot_ms,latency_ms,throughput_per_gpu,memory_peak_gib,max_batch,"
                 "meets_limits,pareto\n");
    for (size_t i = 0; i < n; i++)
        cand_line(f.f, &v[i], true);
    return afile_commit(&f, err);
}

static int search_run(config *c, const opt_table *t, const infer_args *a, size_t *kept, ts_err *err)
{
    infer_search_in in;
    memset(&in, 0, sizeof in);
    in.base = c;
    in.gpus = c->cluster.gpus;
    in.input_len = a->in_len;
    in.output_len = a->out_len;
    in.max_tp =
        a->max_tp < c->cluster.gpus_per_node || !c->cluster.gpus_per_node ? a->max_tp : c->cluster.gpus_per_node;
    in.max_pp = a->max_pp;
    in.max_ttft_ns = a->max_ttft_ms * 1e6;
    in.max_tpot_ns = a->max_tpot_ms * 1e6;
    int rc = parse_batches(a->batches, &in, err);
    if (rc)
        return rc;
    search_precs(c, t, a, &in);
    infer_consts k;
    if ((rc = load_consts(c, a, in.precs[0], &k, err)))
        return rc;
    in.params = &k.ip;
    if (a->calib || a->decode_calib)
        printf("constants: launch per kernel (%s); HBM efficiency (%s); GEMM efficiency and peaks (%s)\n", k.launch_src,
               k.mem_src, k.tables_src);
    infer_cand *v = NULL;
    size_t n = 0, skipped = 0;
    rc = infer_search_run(&in, &v, &n, &skipped, err);
    if (rc)
        return rc;
    size_t meet = 0, front = 0;
    for (size_t i = 0; i < n; i++) {
        meet += v[i].meets;
        front += v[i].pareto;
    }
    char lim[96];
    snprintf(lim, sizeof lim, "TTFT <= %g ms, TPOT <= %g ms (0: none)", a->max_ttft_ms, a->max_tpot_ms);
    printf("search --inference: %s on %d x %s, input %lld, output %lld tokens; %zu deployments fit, %zu meet the "
           "limits (%s), %zu on the Pareto front (*)%s\n",
           c->model.name, in.gpus, c->cluster.gpu.name, (long long)a->in_len, (long long)a->out_len, n, meet, lim,
           front, skipped ? "; some layouts skipped: the shape does not split over them" : "");
    if (meet)
        printf("  t   p  precision             batch  TTFT (ms) TPOT (ms) E2E (ms)   tok/s/GPU  mem GiB\n");
    for (size_t i = 0; i < meet && i < (size_t)a->top; i++)
        cand_line(stdout, &v[i], false);
    if (a->out)
        rc = search_write(a->out, v, n, err);
    *kept = meet;
    free(v);
    return rc;
}

int cmd_search_inference(int argc, char **argv)
{
    config c;
    memset(&c, 0, sizeof c);
    infer_args a = {.batch = 1,
                    .in_len = 128,
                    .out_len = 128,
                    .max_tp = 8,
                    .max_pp = 8,
                    .top = 10,
                    .batches = "1,2,4,8,16,32,64,128,256,512,1024",
                    .search = true};
    opt_table t;
    opt_table_init(&t, "trainsim search --inference",
                   "Find inference deployments of a model on --gpus GPUs (default 8): tensor and pipeline "
                   "parallel sizes, precision and batch size, each run as a static batch of --input-len and "
                   "--output-len tokens; keep those within --max-ttft-ms and --max-tpot-ms, rank them by output "
                   "tokens/s per GPU and mark the Pareto front of throughput per GPU against end-to-end latency.");
    ts_err err;
    err_clear(&err);
    flags_state fs;
    memset(&fs, 0, sizeof fs);
    infer_argbuf owned;
    memset(&owned, 0, sizeof owned);
    bool help = false;
    size_t kept = 0;
    int rc = parse(&t, &fs, &c, &a, argc, argv, &help, &owned, &err);
    if (!rc && !help && a.out)
        rc = afile_check_writable(a.out, "--out", &err);
    if (!rc && !help)
        rc = search_run(&c, &t, &a, &kept, &err);
    if (rc)
        fprintf(stderr, "trainsim search --inference: %s\n", err.msg);
    else if (!help && !kept)
        fprintf(stderr, "trainsim search --inference: no deployment fits and meets the limits\n");
    int status = rc ? cmd_exit_status(rc) : help || kept ? 0 : 1;
    config_free(&c);
    flags_release(&fs);
    opt_table_free(&t);
    free(owned.v);
    return status;
}
