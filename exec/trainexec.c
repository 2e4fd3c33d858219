/* trainexec — the reference executor: runs a pipeline schedule of a GPT
 * model for real (fp32, CPU backend: OpenBLAS + MPI), measures it, and
 * writes the measurements in the simulator's formats.
 *
 *   mpirun -np N trainexec [model / parallel / schedule flags] [--trace F]
 *   mpirun -np 2 trainexec --microbench FILE
 *
 * N = t * p * d ranks, Megatron-LM's order (tensor innermost). Only rank 0
 * prints; every output file is written atomically by rank 0.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "comm_mpi.h"
#include "microbench.h"
#include "opt.h"
#include "runtime.h"
#include "sched.h"
#include "xout.h"

typedef struct {
    int layers, hidden, heads, ffn, seq, vocab;
    int tp, pp, mbs, gbs, lpvs, first_layers, last_layers;
    bool sp;
    const char *schedule;
    int iterations, warmup, threads;
    int64_t seed;
    double lr, beta1, beta2, eps, wd;
    const char *trace, *ops_csv, *report_csv, *microbench;
    bool op_trace;
} args;

static int add_flags(opt_table *t, args *a, ts_err *err)
{
    const opt_spec specs[] = {
        {.name = "Model", .type = OPT_SECTION},
        {.name = "--num-layers", .type = OPT_INT, .target = &a->layers, .min = 1, .max = 4096,
         .unit = "layers", .help = "transformer layers"},
        {.name = "--hidden-size", .type = OPT_INT, .target = &a->hidden, .min = 1, .max = 65536,
         .help = "hidden size h"},
        {.name = "--num-attention-heads", .type = OPT_INT, .target = &a->heads, .min = 1,
         .max = 1024, .help = "attention heads (must divide --hidden-size)"},
        {.name = "--ffn-hidden-size", .type = OPT_INT, .target = &a->ffn, .min = 0,
         .max = 1 << 20, .defval = "4h", .help = "MLP hidden size (0 = 4 x --hidden-size)"},
        {.name = "--seq-length", .type = OPT_INT, .target = &a->seq, .min = 1, .max = 1 << 16,
         .unit = "tokens", .help = "sequence length"},
        {.name = "--padded-vocab-size", .type = OPT_INT, .target = &a->vocab, .min = 2,
         .max = 1 << 20, .unit = "tokens", .help = "vocabulary size"},
        {.name = "Parallelism and schedule", .type = OPT_SECTION},
        {.name = "--tensor-model-parallel-size", .type = OPT_INT, .target = &a->tp, .min = 1,
         .max = 1024, .help = "tensor-parallel size t"},
        {.name = "--pipeline-model-parallel-size", .type = OPT_INT, .target = &a->pp, .min = 1,
         .max = 1024, .help = "pipeline-parallel size p (d = ranks / (t p))"},
        {.name = "--micro-batch-size", .type = OPT_INT, .target = &a->mbs, .min = 1,
         .max = 1 << 16, .unit = "sequences", .help = "micro-batch size b"},
        {.name = "--global-batch-size", .type = OPT_INT, .target = &a->gbs, .min = 1,
         .max = 1 << 24, .unit = "sequences",
         .help = "global batch B; micro-batches per pipeline m = B / (b d)"},
        {.name = "--num-layers-per-virtual-pipeline-stage", .type = OPT_INT, .target = &a->lpvs,
         .min = 0, .max = 4096, .unit = "layers",
         .help = "interleaved schedule: layers per chunk (v = L / (p x this)); 0 = v 1"},
        {.name = "--decoder-first-pipeline-num-layers", .type = OPT_INT,
         .target = &a->first_layers, .min = 0, .max = 4096, .unit = "layers",
         .help = "layers of the first stage (0 = even split)"},
        {.name = "--decoder-last-pipeline-num-layers", .type = OPT_INT, .target = &a->last_layers,
         .min = 0, .max = 4096, .unit = "layers", .help = "layers of the last stage (0 = even)"},
        {.name = "--sequence-parallel", .type = OPT_BOOL, .target = &a->sp,
         .help = "Megatron sequence parallelism (all-gather / reduce-scatter)"},
        {.name = "--schedule", .type = OPT_STRING, .target = &a->schedule, .metavar = "NAME",
         .help = "gpipe, 1f1b, interleaved, zb-h1, zb-h2 or zb-v"},
        {.name = "Executor", .type = OPT_SECTION},
        {.name = "--iterations", .type = OPT_INT, .target = &a->iterations, .min = 1,
         .max = 1000000, .help = "measured training iterations"},
        {.name = "--warmup", .type = OPT_INT, .target = &a->warmup, .min = 0, .max = 1000,
         .help = "iterations run before measuring"},
        {.name = "--seed", .type = OPT_INT64, .target = &a->seed, .min = 0, .max = 9e15,
         .help = "seed of the weights and the synthetic token stream"},
        {.name = "--lr", .type = OPT_DOUBLE, .target = &a->lr, .min = 0, .max = 10,
         .help = "Adam learning rate"},
        {.name = "--adam-beta1", .type = OPT_DOUBLE, .target = &a->beta1, .min = 0, .max = 1,
         .help = "Adam beta1"},
        {.name = "--adam-beta2", .type = OPT_DOUBLE, .target = &a->beta2, .min = 0, .max = 1,
         .help = "Adam beta2"},
        {.name = "--adam-eps", .type = OPT_DOUBLE, .target = &a->eps, .min = 0, .max = 1,
         .help = "Adam epsilon"},
        {.name = "--weight-decay", .type = OPT_DOUBLE, .target = &a->wd, .min = 0, .max = 1,
         .help = "AdamW weight decay"},
        {.name = "--threads", .type = OPT_INT, .target = &a->threads, .min = 0, .max = 1024,
         .help = "OpenBLAS threads per rank (0 = OpenBLAS default)"},
        {.name = "--trace", .type = OPT_STRING, .target = &a->trace, .metavar = "FILE",
         .help = "Chrome/Perfetto JSON trace of the last iteration"},
        {.name = "--op-trace", .type = OPT_BOOL, .target = &a->op_trace,
         .help = "also time every GEMM, kernel and collective (trace and ops CSV)"},
        {.name = "--ops-csv", .type = OPT_STRING, .target = &a->ops_csv, .metavar = "FILE",
         .help = "per-action (and per-op) start/end CSV of the last iteration"},
        {.name = "--report-csv", .type = OPT_STRING, .target = &a->report_csv,
         .metavar = "FILE", .help = "per-rank iteration time, bubble and peak memory CSV"},
        {.name = "--microbench", .type = OPT_STRING, .target = &a->microbench,
         .metavar = "FILE",
         .help = "instead of training: sweep GEMMs, element-wise ops and messages, write CSV"},
    };
    int rc = TS_OK;
    for (size_t i = 0; i < sizeof specs / sizeof specs[0] && !rc; i++)
        rc = specs[i].type == OPT_SECTION ? opt_section(t, specs[i].name, err)
                                          : opt_add(t, &specs[i], err);
    return rc;
}

static void defaults(args *a)
{
    memset(a, 0, sizeof *a);
    a->layers = 4;
    a->hidden = 256;
    a->heads = 8;
    a->seq = 128;
    a->vocab = 4096;
    a->tp = a->pp = a->mbs = 1;
    a->gbs = 8;
    a->schedule = "1f1b";
    a->iterations = 3;
    a->warmup = 1;
    a->threads = 1;
    a->seed = 1234;
    a->lr = 1e-4;
    a->beta1 = 0.9;
    a->beta2 = 0.95;
    a->eps = 1e-8;
}

/* Build the schedule from the flags; TS_EINVAL naming the flag. */
static int make_sched(const args *a, int d, sched **out, ts_err *err)
{
    sched_kind kind;
    int rc = sched_kind_parse(a->schedule, &kind, err);
    if (rc)
        return err_prefix(err, "--schedule: ");
    if ((long)a->mbs * d > a->gbs || a->gbs % (a->mbs * d))
        return err_set(err, TS_EINVAL,
                       "--global-batch-size %d must be a multiple of --micro-batch-size %d x "
                       "data-parallel size %d",
                       a->gbs, a->mbs, d);
    sched_opts o;
    sched_opts_default(&o, kind);
    o.p = a->pp;
    o.m = a->gbs / (a->mbs * d);
    o.num_layers = a->layers;
    o.first_stage_layers = a->first_layers;
    o.last_stage_layers = a->last_layers;
    o.with_comm = true;
    o.with_reduce_optim = true;
    o.v = 1;
    if (kind == SCHED_ZB_V)
        o.v = 2;
    if (a->lpvs) {
        if (kind != SCHED_INTERLEAVED)
            return err_set(err, TS_EINVAL,
                           "--num-layers-per-virtual-pipeline-stage needs --schedule interleaved");
        if (a->layers % (a->pp * a->lpvs))
            return err_set(err, TS_EINVAL,
                           "--num-layers %d is not a multiple of --pipeline-model-parallel-size "
                           "%d x --num-layers-per-virtual-pipeline-stage %d",
                           a->layers, a->pp, a->lpvs);
        o.v = a->layers / (a->pp * a->lpvs);
    } else if (kind == SCHED_INTERLEAVED) {
        return err_set(err, TS_EINVAL,
                       "--schedule interleaved needs --num-layers-per-virtual-pipeline-stage");
    }
    return sched_generate(&o, out, err);
}

static int fail(int rank, const char *what, const ts_err *e)
{
    if (rank == 0)
        fprintf(stderr, "trainexec: %s%s\n", what, e->msg);
    MPI_Finalize();
    return 1;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    ts_err err;
    err_clear(&err);
    args a;
    defaults(&a);
    opt_table t;
    opt_table_init(&t, "trainexec",
                   "Run training iterations of a GPT model for real (fp32, OpenBLAS, MPI) under "
                   "a pipeline schedule and measure them. Launch with mpirun -np t*p*d.");
    int rc = add_flags(&t, &a, &err);
    if (!rc)
        rc = opt_parse(&t, argc, argv, &err);
    if (!rc && t.help_requested) {
        if (rank == 0)
            opt_help(&t, stdout);
        opt_table_free(&t);
        MPI_Finalize();
        return 0;
    }
    opt_table_free(&t);
    if (rc) {
        if (rank == 0)
            fprintf(stderr, "trainexec: %s (trainexec --help)\n", err.msg);
        MPI_Finalize();
        return 2;
    }
    if (a.microbench) {
        rc = microbench_run(MPI_COMM_WORLD, a.microbench, a.threads, rank == 0 ? stdout : NULL,
                            &err);
        if (rc)
            return fail(rank, "--microbench: ", &err);
        MPI_Finalize();
        return 0;
    }
    if (size % (a.tp * a.pp)) {
        if (rank == 0)
            fprintf(stderr,
                    "trainexec: %d ranks is not a multiple of --tensor-model-parallel-size %d x "
                    "--pipeline-model-parallel-size %d\n",
                    size, a.tp, a.pp);
        MPI_Finalize();
        return 2;
    }
    int d = size / (a.tp * a.pp);
    rt_opts o;
    rt_opts_default(&o);
    o.dims = (gpt_dims){.vocab = a.vocab, .seq = a.seq, .hidden = a.hidden, .heads = a.heads,
                        .ffn = a.ffn ? a.ffn : 4 * a.hidden, .layers = a.layers,
                        .batch = a.mbs};
    o.sp = a.sp;
    o.seed = (uint64_t)a.seed;
    o.lr = (float)a.lr;
    o.beta1 = (float)a.beta1;
    o.beta2 = (float)a.beta2;
    o.eps = (float)a.eps;
    o.weight_decay = (float)a.wd;
    o.op_trace = a.op_trace;
    sched *s = NULL;
    backend *be = NULL;
    comm *cm = NULL;
    runtime *rt = NULL;
    if ((rc = gpt_dims_check(&o.dims, a.tp, a.sp, &err)) || (rc = make_sched(&a, d, &s, &err))) {
        sched_free(s);
        if (rank == 0)
            fprintf(stderr, "trainexec: %s (trainexec --help)\n", err.msg);
        MPI_Finalize();
        return 2;
    }
    if ((rc = backend_cpu_create(a.threads, &be, &err)) ||
        (rc = comm_mpi_create(MPI_COMM_WORLD, a.tp, a.pp, d, &cm, &err)) ||
        (rc = rt_create(&o, s, be, cm, &rt, &err)))
        return fail(rank, "", &err);
    if (rank == 0) {
        printf("trainexec: GPT %zu parameters (L=%d h=%d heads=%d ffn=%d s=%d V=%d), "
               "t=%d p=%d d=%d v=%d%s, %s, b=%d B=%d m=%d, %d ranks, fp32 cpu\n",
               gpt_num_params(&o.dims), a.layers, a.hidden, a.heads, o.dims.ffn, a.seq, a.vocab,
               a.tp, a.pp, d, s->v, a.sp ? " sp" : "", sched_kind_name(s->kind), a.mbs, a.gbs,
               s->m, size);
        fflush(stdout);
    }
    int total = a.warmup + a.iterations;
    int64_t *start = calloc((size_t)total, sizeof *start);
    double sum_ns = 0.0, sum_compute = 0.0;
    for (int it = 0; it < total && !rc; it++) {
        if (it == a.warmup) {
            rt_clear_spans(rt);
            be_reset_peaks(be);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        start[it] = rt_now_ns();
        double loss = 0.0;
        rc = rt_iteration(rt, it, &loss, &err);
        int64_t mine = rt_now_ns() - start[it], slowest = 0;
        int bad = rc != 0, anybad = 0;
        MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (anybad) {
            if (bad)
                fprintf(stderr, "trainexec: rank %d: %s\n", rank, err.msg);
            rc = rc ? rc : TS_EINVAL;
            break;
        }
        MPI_Allreduce(&mine, &slowest, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
        if (it >= a.warmup) {
            size_t n;
            const rt_span *sp = rt_spans(rt, &n);
            sum_ns += (double)slowest;
            sum_compute += (double)xout_compute_ns(sp, n, it);
        }
        if (rank == 0) {
            printf("iteration %d/%d%s: loss %.6f, %.3f ms\n", it + 1, total,
                   it < a.warmup ? " (warm-up)" : "", loss, slowest / 1e6);
            fflush(stdout);
        }
    }
    if (rc) {
        free(start);
        MPI_Abort(MPI_COMM_WORLD, 1);
        return 1;
    }
    /* outputs: spans carry absolute CLOCK_MONOTONIC times; t = 0 is the start
     * of the last iteration (after its barrier) */
    size_t n;
    const rt_span *sp = rt_spans(rt, &n);
    xout_rank xr;
    xout_rank_init(&xr, rank, cm, be);
    xr.iterations = a.iterations;
    xr.iteration_ns = sum_ns / a.iterations;
    xr.compute_ns = sum_compute / a.iterations;
    int last = total - 1;
    rc = xout_write_spans(MPI_COMM_WORLD, cm, sp, n, last, start[last], a.trace, a.ops_csv,
                          &err);
    xout_rank *all = NULL;
    if (!rc)
        rc = xout_write_report(MPI_COMM_WORLD, &xr, a.report_csv, &all, &err);
    if (!rc && rank == 0) {
        double mx = 0, mean_bubble = 0;
        for (int i = 0; i < size; i++) {
            mean_bubble += all[i].iteration_ns - all[i].compute_ns;
            if (all[i].peak_bytes > mx)
                mx = (double)all[i].peak_bytes;
        }
        mean_bubble /= size;
        printf("iteration time %.3f ms (mean of %d), bubble %.3f ms (%.1f%%, mean over ranks), "
               "peak memory %.2f MiB (max over ranks)\n",
               xr.iteration_ns / 1e6, a.iterations, mean_bubble / 1e6,
               100.0 * mean_bubble / xr.iteration_ns, mx / 1048576.0);
        for (int i = 0; i < size; i++)
            printf("  rank %d (tp %d pp %d dp %d): compute %.3f ms, bubble %.3f ms, peak %.2f MiB "
                   "(weights %.2f, gradients %.2f, optimizer %.2f, activations %.2f, buffers "
                   "%.2f)\n",
                   i, all[i].tp, all[i].pp, all[i].dp, all[i].compute_ns / 1e6,
                   (all[i].iteration_ns - all[i].compute_ns) / 1e6,
                   all[i].peak_bytes / 1048576.0, all[i].cat_bytes[XMEM_WEIGHTS] / 1048576.0,
                   all[i].cat_bytes[XMEM_GRADS] / 1048576.0,
                   all[i].cat_bytes[XMEM_OPTIM] / 1048576.0,
                   all[i].cat_bytes[XMEM_ACTS] / 1048576.0,
                   all[i].cat_bytes[XMEM_BUFFERS] / 1048576.0);
    }
    free(all);
    free(start);
    rt_free(rt);
    sched_free(s);
    cm->destroy(cm);
    be->destroy(be);
    if (rc)
        return fail(rank, "", &err);
    MPI_Finalize();
    return 0;
}
