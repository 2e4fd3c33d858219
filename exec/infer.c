/* infer — trainexec --inference (contract in infer.h). */
#include "exec/infer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/core/data.h"
#include "exec/core/gpt_infer.h"
#include "exec/runtime.h"
#include "sim/util/afile.h"
#include "sim/util/csvio.h"
#include "sim/util/grow.h"

/* One timed op of a measured decode step. */
typedef struct {
    const char *name; /* gpt_infer's static op name */
    int layer, kv_len, rep;
    int64_t t0_ns, t1_ns;
} op_sample;

/* The profiling hook's state. */
typedef struct {
    backend *be;
    op_sample *s;
    size_t n, cap;
    bool record; /* rank 0 with --decode-samples */
    bool on, oom;
    int kv_len, rep; /* of the step running */
} prof_state;

static void prof_hook(void *ud, const char *op, int layer, bool end)
{
    prof_state *p = ud;
    if (!p->on || !strncmp(op, "tp_", 3))
        return;
    p->be->sync(p->be);
    int64_t now = rt_now_ns();
    if (!end) {
        if (p->n == p->cap && grow_to((void **)&p->s, &p->cap, p->n + 1, 1024, sizeof *p->s)) {
            p->oom = true;
            return;
        }
        p->s[p->n++] =
            (op_sample){.name = op, .layer = layer, .kv_len = p->kv_len, .rep = p->rep, .t0_ns = now, .t1_ns = -1};
        return;
    }
    for (size_t i = p->n; i-- > 0;)
        if (p->s[i].t1_ns < 0 && !strcmp(p->s[i].name, op)) {
            p->s[i].t1_ns = now;
            return;
        }
}

void infer_args_default(infer_args *a)
{
    memset(a, 0, sizeof *a);
    a->input_len = 8;
    a->output_len = 8;
}

int infer_add_flags(opt_table *t, infer_args *a, ts_err *err)
{
    const opt_spec specs[] = {
        {.name = "Inference", .type = OPT_SECTION},
        {.name = "--inference",
         .type = OPT_BOOL,
         .target = &a->inference,
         .help = "instead of training: greedy decoding with a KV cache, each iteration a prefill of "
                 "--input-len tokens then --output-len decode steps for --batch-size sequences "
                 "(tensor parallel across ranks; pipeline parallel not implemented); prints prefill and "
                 "decode step times and tokens/s"},
        {.name = "--batch-size",
         .type = OPT_INT,
         .target = &a->batch_size,
         .min = 1,
         .max = 1 << 20,
         .unit = "sequences",
         .defval = "--micro-batch-size",
         .help = "--inference: sequences decoded together (refused without --inference: Megatron-LM's old name of "
                 "--micro-batch-size)"},
        {.name = "--input-len",
         .type = OPT_INT,
         .target = &a->input_len,
         .min = 1,
         .max = 1 << 24,
         .unit = "tokens",
         .defval = "8",
         .help = "--inference: prompt tokens per sequence (the prefill)"},
        {.name = "--output-len",
         .type = OPT_INT,
         .target = &a->output_len,
         .min = 1,
         .max = 1 << 24,
         .unit = "tokens",
         .defval = "8",
         .help = "--inference: decode steps (one token per sequence each); --input-len + --output-len <= "
                 "--seq-length"},
        {.name = "--output",
         .type = OPT_STRING,
         .target = &a->output,
         .metavar = "FILE",
         .help = "--inference: CSV of the prefill time, decode step mean/p50/p99 and tokens/s"},
        {.name = "--decode-samples",
         .type = OPT_STRING,
         .target = &a->samples,
         .metavar = "FILE",
         .help = "--inference: per-op decode times in the sample format trainsim calibrate --decode reads"},
    };
    int rc = TS_OK;
    for (size_t i = 0; i < sizeof specs / sizeof specs[0] && !rc; i++)
        rc = specs[i].type == OPT_SECTION ? opt_section(t, specs[i].name, err) : opt_add(t, &specs[i], err);
    return rc;
}

int infer_check_flags(const infer_args *a, const char *training_flag, ts_err *err)
{
    if (!a->inference) {
        const char *only = a->batch_size ? "--batch-size"
                           : a->output   ? "--output"
                           : a->samples  ? "--decode-samples"
                                         : NULL;
        if (only)
            return err_set(err, TS_EINVAL, "%s is an --inference flag%s", only,
                           a->batch_size ? " (for training give --micro-batch-size: --batch-size is Megatron-LM's "
                                           "old name of it)"
                                         : "");
        return TS_OK;
    }
    if (training_flag)
        return err_set(err, TS_EINVAL,
                       "--inference with %s: that is a training (or --microbench) flag; --inference writes --output "
                       "and --decode-samples",
                       training_flag);
    return TS_OK;
}

void infer_batch_arg(char **av, int *ac, char *buf, size_t bytes)
{
    bool inference = false, micro = false;
    const char *b = NULL;
    for (int i = 1; i < *ac; i++) {
        if (!strcmp(av[i], "--"))
            break;
        inference = inference || !strcmp(av[i], "--inference");
        micro = micro || !strcmp(av[i], "--micro-batch-size") || !strncmp(av[i], "--micro-batch-size=", 19);
        if (!strcmp(av[i], "--batch-size") && i + 1 < *ac)
            b = av[i + 1];
        else if (!strncmp(av[i], "--batch-size=", 13))
            b = av[i] + 13;
    }
    if (!inference || micro || !b)
        return;
    snprintf(buf, bytes, "--micro-batch-size=%s", b);
    av[(*ac)++] = buf;
}

int infer_check(const infer_opts *o, int tp, int pp, ts_err *err)
{
    (void)tp;
    if (pp != 1)
        return err_set(err, TS_ENOTSUP,
                       "--inference with --pipeline-model-parallel-size %d: pipeline-parallel decoding is not "
                       "implemented (give 1; tensor parallelism is)",
                       pp);
    if (o->input_len < 1 || o->output_len < 1)
        return err_set(err, TS_EINVAL, "--inference needs --input-len >= 1 and --output-len >= 1 (got %d and %d)",
                       o->input_len, o->output_len);
    if ((long)o->input_len + o->output_len > o->dims.seq)
        return err_set(err, TS_EINVAL,
                       "--input-len %d + --output-len %d = %ld positions exceed --seq-length %d (the model's learned "
                       "positions; give --seq-length >= %ld)",
                       o->input_len, o->output_len, (long)o->input_len + o->output_len, o->dims.seq,
                       (long)o->input_len + o->output_len);
    return TS_OK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile q (0 < q <= 1) of sorted v[0..n). */
static double percentile(const double *v, size_t n, double q)
{
    size_t r = (size_t)ceil(q * (double)n);
    return v[r > 0 ? r - 1 : 0];
}

/* The measured times (every rank: its own; rank 0 after the reduction: the
 * slowest rank's). */
typedef struct {
    double *prefill; /* [iterations] */
    double *step;    /* [iterations * O] */
} times;

/* One generation: prefill then O decode steps; times[it] written when it
 * is measured (>= 0). */
static int generate(gpt_stage *st, gpt_kv *kv, const infer_opts *o, const int *prompt, float *logits, int *next,
                    prof_state *ps, times *tm, int it, ts_err *err)
{
    int B = o->dims.batch, V = o->dims.vocab, O = o->output_len;
    gpt_kv_reset(kv);
    ps->be->sync(ps->be);
    int64_t t0 = rt_now_ns();
    int rc = gpt_infer_step(st, kv, prompt, o->input_len, logits, err);
    ps->be->sync(ps->be);
    if (rc)
        return rc;
    if (it >= 0)
        tm->prefill[it] = (double)(rt_now_ns() - t0);
    gpt_argmax(logits, B, V, next);
    for (int s = 0; s < O; s++) {
        ps->on = it >= 0 && ps->record;
        ps->kv_len = gpt_kv_len(kv) + 1;
        ps->rep = it * O + s;
        t0 = rt_now_ns();
        rc = gpt_infer_step(st, kv, next, 1, logits, err);
        ps->be->sync(ps->be);
        if (rc)
            return rc;
        if (it >= 0)
            tm->step[(size_t)it * O + s] = (double)(rt_now_ns() - t0);
        gpt_argmax(logits, B, V, next);
    }
    ps->on = false;
    return TS_OK;
}

/* Rank 0: the --decode-samples CSV. */
static int write_samples(const char *path, const gpt_stage *st, const prof_state *ps, int B, int t, ts_err *err)
{
    afile a = {0};
    int rc = afile_open(&a, path, err);
    if (rc)
        return rc;
    static const char *const head[] = {"kind",  "name",  "dtype", "m",   "n",      "k",
                                       "batch", "bytes", "ranks", "rep", "time_ns"};
    rc = csvio_write_row(a.f, 11, head, err);
    for (size_t i = 0; i < ps->n && !rc; i++) {
        const op_sample *x = &ps->s[i];
        if (x->t1_ns < 0)
            continue;
        char c[11][40];
        const char *cells[11];
        snprintf(c[0], 40, "decode");
        snprintf(c[1], 40, "%s", x->name);
        snprintf(c[2], 40, "fp32");
        snprintf(c[3], 40, "%d", B);
        snprintf(c[4], 40, "%d", x->kv_len);
        if (x->layer >= 0)
            snprintf(c[5], 40, "%d", x->layer);
        else
            c[5][0] = '\0';
        c[6][0] = '\0';
        snprintf(c[7], 40, "%.0f", gpt_infer_op_bytes(st, x->name, 1, x->kv_len));
        snprintf(c[8], 40, "%d", t);
        snprintf(c[9], 40, "%d", x->rep);
        snprintf(c[10], 40, "%lld", (long long)(x->t1_ns > x->t0_ns ? x->t1_ns - x->t0_ns : 1));
        for (int k = 0; k < 11; k++)
            cells[k] = c[k];
        rc = csvio_write_row(a.f, 11, cells, err);
    }
    if (rc) {
        afile_abort(&a);
        return rc;
    }
    return afile_commit(&a, err);
}

/* Rank 0: print and write the summary. */
static int report(const infer_opts *o, const comm *cm, int size, const times *tm, size_t kv_bytes, size_t peak,
                  FILE *progress, ts_err *err)
{
    int R = o->iterations, O = o->output_len, d = cm->size[COMM_DP], B = o->dims.batch;
    size_t ns = (size_t)R * O;
    double pre = 0, mean = 0;
    for (int i = 0; i < R; i++)
        pre += tm->prefill[i] / R;
    for (size_t i = 0; i < ns; i++)
        mean += tm->step[i] / (double)ns;
    qsort(tm->step, ns, sizeof *tm->step, cmp_double);
    double p50 = percentile(tm->step, ns, 0.50), p99 = percentile(tm->step, ns, 0.99);
    double dec_tps = (double)d * B / (mean / 1e9), tps = (double)d * B * O / ((pre + O * mean) / 1e9);
    if (progress) {
        fprintf(progress,
                "prefill %.3f ms (%d x %d tokens, mean of %d); decode step mean %.3f ms, p50 %.3f ms, p99 %.3f ms "
                "(%zu steps)\n",
                pre / 1e6, d * B, o->input_len, R, mean / 1e6, p50 / 1e6, p99 / 1e6, ns);
        fprintf(progress,
                "decode %.1f tokens/s, end to end %.1f tokens/s; KV cache %.2f MiB on rank 0 (%zu bytes per token per "
                "rank), "
                "peak memory %.2f MiB on rank 0\n",
                dec_tps, tps, kv_bytes / 1048576.0, gpt_kv_bytes_per_token(&o->dims) / (size_t)cm->size[COMM_TP],
                peak / 1048576.0);
    }
    if (!o->output)
        return TS_OK;
    afile a = {0};
    int rc = afile_open(&a, o->output, err);
    if (rc)
        return rc;
    static const char *const head[] = {"backend",
                                       "ranks",
                                       "tp",
                                       "dp",
                                       "batch",
                                       "input_len",
                                       "output_len",
                                       "iterations",
                                       "prefill_ns",
                                       "decode_step_mean_ns",
                                       "decode_step_p50_ns",
                                       "decode_step_p99_ns",
                                       "decode_tokens_per_s",
                                       "tokens_per_s",
                                       "kv_cache_bytes",
                                       "peak_bytes"};
    char c[16][CSVIO_NUM_BYTES];
    const char *cells[16];
    snprintf(c[0], sizeof c[0], "%s", o->backend_name);
    snprintf(c[1], sizeof c[1], "%d", size);
    snprintf(c[2], sizeof c[2], "%d", cm->size[COMM_TP]);
    snprintf(c[3], sizeof c[3], "%d", d);
    snprintf(c[4], sizeof c[4], "%d", B);
    snprintf(c[5], sizeof c[5], "%d", o->input_len);
    snprintf(c[6], sizeof c[6], "%d", O);
    snprintf(c[7], sizeof c[7], "%d", R);
    csvio_fmt_double(c[8], sizeof c[8], pre);
    csvio_fmt_double(c[9], sizeof c[9], mean);
    csvio_fmt_double(c[10], sizeof c[10], p50);
    csvio_fmt_double(c[11], sizeof c[11], p99);
    csvio_fmt_double(c[12], sizeof c[12], dec_tps);
    csvio_fmt_double(c[13], sizeof c[13], tps);
    snprintf(c[14], sizeof c[14], "%zu", kv_bytes);
    snprintf(c[15], sizeof c[15], "%zu", peak);
    for (int k = 0; k < 16; k++)
        cells[k] = c[k];
    rc = csvio_write_row(a.f, 16, head, err);
    if (!rc)
        rc = csvio_write_row(a.f, 16, cells, err);
    if (rc) {
        afile_abort(&a);
        return rc;
    }
    return afile_commit(&a, err);
}

/* Every rank's status: the lowest failing rank's message in err on all. */
static int agree(MPI_Comm world, int rc, ts_err *err)
{
    int rank, size;
    MPI_Comm_rank(world, &rank);
    MPI_Comm_size(world, &size);
    int mine = rc ? rank : size, first = size;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, world);
    if (first == size)
        return TS_OK;
    int code = rc;
    MPI_Bcast(&code, 1, MPI_INT, first, world);
    MPI_Bcast(err->msg, (int)sizeof err->msg, MPI_CHAR, first, world);
    return code ? code : TS_EIO;
}

int infer_run(MPI_Comm world, const infer_opts *o, backend *be, comm *cm, FILE *progress, ts_err *err)
{
    int rank, size;
    MPI_Comm_rank(world, &rank);
    MPI_Comm_size(world, &size);
    int B = o->dims.batch, V = o->dims.vocab, I = o->input_len, O = o->output_len, R = o->iterations;
    gpt_stage *st = NULL;
    gpt_kv *kv = NULL;
    prof_state ps = {.be = be};
    times tm = {0};
    int *prompt = malloc(sizeof(int) * (size_t)B * I), *tgt = malloc(sizeof(int) * (size_t)B * I);
    int *next = malloc(sizeof(int) * (size_t)B);
    float *logits = malloc(sizeof(float) * (size_t)B * V);
    tm.prefill = calloc((size_t)R, sizeof(double));
    tm.step = calloc((size_t)R * O, sizeof(double));
    int rc = TS_OK;
    if (!prompt || !tgt || !next || !logits || !tm.prefill || !tm.step)
        rc = err_set(err, TS_ENOMEM, "--inference: out of memory");
    if (!rc)
        rc = gpt_stage_create(&o->dims, 0, o->dims.layers, true, true, o->sp, o->seed, be, cm, &st, err);
    if (!rc)
        rc = gpt_kv_create(st, I, &kv, err);
    rc = agree(world, rc, err);
    if (!rc) {
        /* the prompt: the synthetic stream's sequences of this data-parallel group */
        int d = cm->size[COMM_DP];
        data_microbatch(o->seed, 0, d, cm->rank[COMM_DP], B, I, V, prompt, tgt);
        if (o->samples)
            gpt_stage_set_prof(st, prof_hook, &ps);
        ps.record = o->samples && rank == 0;
        be_reset_peaks(be);
    }
    for (int it = -o->warmup; it < R && !rc; it++) {
        MPI_Barrier(world);
        rc = generate(st, kv, o, prompt, logits, next, &ps, &tm, it, err);
        if (rc) {
            /* a tensor-parallel peer may wait in a collective of this step */
            fprintf(stderr, "trainexec: rank %d: --inference: %s\n", rank, err->msg);
            (void)fflush(stderr);
            MPI_Abort(world, 1);
        }
        if (!rc && rank == 0 && progress && it >= 0) {
            double dec = 0;
            for (int s = 0; s < O; s++)
                dec += tm.step[(size_t)it * O + s];
            fprintf(progress, "generation %d/%d: prefill %.3f ms, %d decode steps %.3f ms (rank 0)\n", it + 1, R,
                    tm.prefill[it] / 1e6, O, dec / 1e6);
            (void)fflush(progress);
        }
    }
    if (!rc) {
        /* the slowest rank's times */
        MPI_Reduce(rank == 0 ? MPI_IN_PLACE : tm.prefill, tm.prefill, R, MPI_DOUBLE, MPI_MAX, 0, world);
        MPI_Reduce(rank == 0 ? MPI_IN_PLACE : tm.step, tm.step, R * O, MPI_DOUBLE, MPI_MAX, 0, world);
        int wrc = TS_OK;
        if (rank == 0) {
            wrc = report(o, cm, size, &tm, gpt_kv_bytes(kv), be->peak_total_bytes, progress, err);
            if (!wrc && o->samples) {
                wrc = ps.oom ? err_set(err, TS_ENOMEM, "--decode-samples: out of memory for the op times")
                             : write_samples(o->samples, st, &ps, B, cm->size[COMM_TP], err);
            }
        }
        rc = agree(world, wrc, err);
    }
    free(ps.s);
    gpt_kv_free(st, kv);
    gpt_stage_free(st);
    free(prompt);
    free(tgt);
    free(next);
    free(logits);
    free(tm.prefill);
    free(tm.step);
    return rc;
}
