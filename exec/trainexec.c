/* trainexec — the reference executor: runs a pipeline schedule of a GPT
 * model for real (fp32, CPU backend: OpenBLAS + MPI), measures it, and
 * writes the measurements in the simulator's formats.
 *
 *   mpirun -np N trainexec [model / parallel / schedule flags] [--trace F]
 *   mpirun -np N trainexec --backend cuda ...   (one GPU per rank: NCCL)
 *   mpirun -np 2 trainexec --microbench FILE
 *
 * --backend cuda needs a build with the CUDA backend (TRAINSIM_CUDA: nvcc,
 * cuBLASLt, NCCL found by make); rank r uses GPU r's index among the ranks of
 * its node. Without that build, or when no GPU answers, trainexec says so and
 * exits non-zero.
 *
 * N = t * p * d ranks, Megatron-LM's order (tensor innermost). Only rank 0
 * prints; every output file is written atomically by rank 0.
 */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec/core/backend.h"
#include "exec/comm_mpi.h"
#ifdef TRAINSIM_CUDA
#include "exec/cuda/backend_cuda.h"
#include "exec/cuda/comm_nccl.h"
#endif
#include "sim/config/config.h"
#include "sim/config/flags.h"
#include "exec/microbench.h"
#include "sim/util/opt.h"
#include "exec/runtime.h"
#include "sim/sched/sched.h"
#include "sim/sched/sched_csv.h"
#include "exec/xout.h"
#include "exec/cpu/backend_cpu.h"
#include "sim/sched/sched_comm.h"

enum { BACKEND_CPU = 0, BACKEND_CUDA };
static const char *const backend_names[] = {"cpu", "cuda", NULL};

typedef struct {
    int iterations, warmup, threads, backend;
    int64_t seed;
    double lr, beta1, beta2, eps, wd;
    const char *trace, *ops_csv, *report_csv, *microbench, *schedule_csv;
    bool op_trace;
} args;

static int add_flags(opt_table *t, args *a, ts_err *err)
{
    const opt_spec specs[] = {
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
        {.name = "--backend", .type = OPT_ENUM, .target = &a->backend,
         .enum_names = backend_names,
         .help = "where the model runs: cpu (fp32, OpenBLAS, MPI) or cuda (one NVIDIA GPU per "
                 "rank: fp32 master weights, bf16 cuBLASLt GEMMs, NCCL; needs a build with CUDA)"},
        {.name = "--threads", .type = OPT_INT, .target = &a->threads, .min = 0, .max = 1024,
         .help = "OpenBLAS threads per rank (0 = OpenBLAS default)"},
        {.name = "--schedule-csv", .type = OPT_STRING, .target = &a->schedule_csv,
         .metavar = "FILE",
         .help = "run this schedule (torch.distributed.pipelining action CSV) instead of "
                 "--schedule; its micro-batch count sets the global batch"},
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
    a->iterations = 3;
    a->warmup = 1;
    a->threads = 1;
    a->backend = BACKEND_CPU;
    a->seed = 1234;
    a->lr = 1e-4;
    a->beta1 = 0.9;
    a->beta2 = 0.95;
    a->eps = 1e-8;
}

/* What the executor runs of a validated config; TS_ENOTSUP naming the flag
 * for what it does not implement. */
static int exec_supports(const config *c, ts_err *err)
{
    const model_config *m = &c->model;
    const parallel_config *p = &c->par;
    if (m->swiglu)
        return err_set(err, TS_ENOTSUP, "--swiglu: the executor's MLP is GELU only");
    if (m->num_query_groups != m->num_attention_heads)
        return err_set(err, TS_ENOTSUP,
                       "--num-query-groups %d: the executor has no grouped-query attention "
                       "(give --num-query-groups %d)",
                       m->num_query_groups, m->num_attention_heads);
    if (p->recompute != RECOMPUTE_NONE)
        return err_set(err, TS_ENOTSUP,
                       "--recompute-granularity: the executor does not recompute (give none)");
    if (p->distributed_optimizer)
        return err_set(err, TS_ENOTSUP,
                       "--use-distributed-optimizer: the executor's Adam is not sharded");
    return TS_OK;
}

/* The schedule of the config's layout (with SEND/RECV, REDUCE_GRAD and
 * OPTIM). */
static int make_sched_of(const parallel_config *p, const model_config *m, sched **out,
                         ts_err *err)
{
    sched_opts o;
    sched_opts_default(&o, p->schedule);
    o.p = p->pp;
    o.m = p->global_batch_size / (p->micro_batch_size * p->dp);
    o.v = p->vp > 0 ? p->vp : 1;
    o.num_layers = m->num_layers;
    o.first_stage_layers = p->first_stage_layers;
    o.last_stage_layers = p->last_stage_layers;
    o.with_comm = true;
    o.with_reduce_optim = true;
    return sched_generate(&o, out, err);
}

/* An imported schedule for the config's layout: SEND/RECV inserted if the
 * file is compute-only, the model's layers split evenly over its stages
 * (the first L mod S stages one more). */
static int load_sched_csv(const char *path, const parallel_config *p, const model_config *m,
                          sched **out, ts_err *err)
{
    sched *s = NULL;
    int rc = sched_csv_load(path, &s, err);
    if (!rc)
        rc = sched_add_comm(s, err);
    if (!rc && s->p != p->pp)
        rc = err_set(err, TS_EINVAL,
                     "--schedule-csv %s has %d pipeline ranks but --pipeline-model-parallel-size "
                     "is %d",
                     path, s->p, p->pp);
    if (!rc && (long)s->m * p->micro_batch_size * p->dp != p->global_batch_size)
        rc = err_set(err, TS_EINVAL,
                     "--schedule-csv %s has %d micro-batches: give --global-batch-size %ld "
                     "(m x --micro-batch-size %d x data-parallel size %d)",
                     path, s->m, (long)s->m * p->micro_batch_size * p->dp, p->micro_batch_size,
                     p->dp);
    int S = rc ? 0 : s->p * s->v;
    if (!rc && m->num_layers < S)
        rc = err_set(err, TS_EINVAL, "--schedule-csv %s has %d stages but --num-layers is %d",
                     path, S, m->num_layers);
    if (rc) {
        sched_free(s);
        return rc;
    }
    int first = 0;
    for (int i = 0; i < S; i++) {
        int n = m->num_layers / S + (i < m->num_layers % S ? 1 : 0);
        s->stages[i].first_layer = first;
        s->stages[i].num_layers = n;
        first += n;
    }
    s->num_layers = m->num_layers;
    *out = s;
    return TS_OK;
}

/* Bytes per rank the run needs at least (weights, gradients, Adam moments:
 * 16 bytes per parameter of its share), to refuse what cannot fit. */
static double min_bytes_per_rank(const gpt_dims *d, int t, int p)
{
    return 16.0 * (double)gpt_num_params(d) / ((double)t * p);
}

/* CPU time this process has used, ns. */
static int64_t cpu_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* A failure every rank agrees on (all call this collectively with their
 * own status): the lowest failing rank prints its message, all exit 1. */
static int agree_fail(int rank, int size, int rc, const char *what, const ts_err *e)
{
    int mine = rc ? rank : size, first = size;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (first == size)
        return 0;
    if (rank == first)
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
    /* Executor defaults for layout flags the command line does not give (the
     * model presets' layouts are for thousands of GPUs): --gpus = ranks, t = p
     * = 1, 1f1b, no sequence parallelism, no recomputation, b = 1, B = 8. */
    char gpus_arg[32];
    snprintf(gpus_arg, sizeof gpus_arg, "--gpus=%d", size);
    static const char *const inject[][3] = {
        {"--gpus", "-n", NULL},
        {"--tensor-model-parallel-size", "-t", "--tensor-model-parallel-size=1"},
        {"--pipeline-model-parallel-size", "-p", "--pipeline-model-parallel-size=1"},
        {"--sequence-parallel", NULL, "--sequence-parallel=false"},
        {"--recompute-granularity", NULL, "--recompute-granularity=none"},
        {"--schedule", NULL, "--schedule=1f1b"},
        {"--micro-batch-size", NULL, "--micro-batch-size=1"},
        {"--global-batch-size", NULL, "--global-batch-size=8"},
    };
    size_t ninject = sizeof inject / sizeof inject[0];
    char **av = calloc((size_t)argc + ninject + 1, sizeof *av);
    if (!av) {
        MPI_Finalize();
        return 1;
    }
    int ac = 0;
    for (int i = 0; i < argc; i++)
        av[ac++] = argv[i];
    for (size_t k = 0; k < ninject; k++) {
        bool given = false;
        size_t len = strlen(inject[k][0]);
        for (int i = 1; i < argc; i++)
            if ((!strncmp(argv[i], inject[k][0], len) &&
                 (argv[i][len] == '\0' || argv[i][len] == '=')) ||
                (inject[k][1] && !strcmp(argv[i], inject[k][1])))
                given = true;
        if (!given)
            av[ac++] = k == 0 ? gpus_arg : (char *)(uintptr_t)inject[k][2];
    }

    config c;
    flags_state fs;
    opt_table t;
    opt_table_init(&t, "trainexec",
                   "Run training iterations of a GPT model for real (fp32, OpenBLAS, MPI; or "
                   "--backend cuda on NVIDIA GPUs with NCCL) under a pipeline schedule and measure them: mpirun -np N trainexec [the flags of "
                   "trainsim simulate] [executor flags]. Layout flags not given default to "
                   "--gpus N, t = p = 1, --schedule 1f1b, no --sequence-parallel, no "
                   "recomputation, --micro-batch-size 1, --global-batch-size 8 (not to the "
                   "preset's). The GPU kind and precision flags are accepted and ignored (fp32 "
                   "on the CPU; --backend cuda: fp32 master weights, bf16 GEMMs). The default "
                   "--model is far too large for a CPU: give a shape (--num-layers, "
                   "--hidden-size, ...).");
    int rc = flags_register(&fs, &t, &c, &err);
    if (!rc)
        rc = add_flags(&t, &a, &err);
    if (!rc)
        rc = opt_parse(&t, ac, av, &err);
    if (!rc && t.help_requested) {
        if (rank == 0)
            opt_help(&t, stdout);
        opt_table_free(&t);
        free(av);
        MPI_Finalize();
        return 0;
    }
#ifndef TRAINSIM_CUDA
    if (!rc && a.backend == BACKEND_CUDA)
        rc = err_set(&err, TS_ENOTSUP,
                     "--backend cuda: this trainexec was built without CUDA (make's summary "
                     "must show '✓ CUDA': nvcc, cuBLASLt, NCCL and MPI); use --backend cpu");
#endif
    if (!rc && a.microbench && a.backend == BACKEND_CUDA)
        rc = err_set(&err, TS_ENOTSUP,
                     "--microbench measures the CPU backend only; for a GPU run "
                     "build/cudacal sweep (experiments/gpu-calibrate.sh)");
    if (!rc && a.microbench) {
        opt_table_free(&t);
        free(av);
        rc = microbench_run(MPI_COMM_WORLD, a.microbench, a.threads, rank == 0 ? stdout : NULL,
                            &err);
        if (agree_fail(rank, size, rc, "--microbench: ", &err))
            return 1;
        MPI_Finalize();
        return 0;
    }
    if (!rc)
        rc = flags_finish(&fs, &t, &err);
    opt_table_free(&t);
    free(av);
    if (!rc && (rc = exec_supports(&c, &err)))
        config_free(&c);
    if (rc) {
        if (rank == 0)
            fprintf(stderr, "trainexec: %s (trainexec --help)\n", err.msg);
        MPI_Finalize();
        return 2;
    }
    const model_config *mc = &c.model;
    const parallel_config *pc = &c.par;
    if (c.cluster.gpus != size) {
        if (rank == 0)
            fprintf(stderr, "trainexec: --gpus %d but mpirun started %d ranks (run mpirun -np %d)\n",
                    c.cluster.gpus, size, c.cluster.gpus);
        config_free(&c);
        MPI_Finalize();
        return 2;
    }
    rt_opts o;
    rt_opts_default(&o);
    o.dims = (gpt_dims){.vocab = mc->padded_vocab_size, .seq = mc->seq_length,
                        .hidden = mc->hidden_size, .heads = mc->num_attention_heads,
                        .ffn = mc->ffn_hidden_size, .layers = mc->num_layers,
                        .batch = pc->micro_batch_size};
    o.sp = pc->sequence_parallel;
    o.seed = (uint64_t)a.seed;
    o.lr = (float)a.lr;
    o.beta1 = (float)a.beta1;
    o.beta2 = (float)a.beta2;
    o.eps = (float)a.eps;
    o.weight_decay = (float)a.wd;
    o.op_trace = a.op_trace;
    if (rank == 0 && pc->overlap_grad_reduce)
        printf("trainexec: note: --overlap-grad-reduce is not overlapped here: gradients are "
               "reduced at the schedule's REDUCE_GRAD actions\n");
    int tp = pc->tp, pp = pc->pp, d = pc->dp;
    parallel_config par = *pc;
    model_config mod = *mc;
    config_free(&c); /* everything needed is copied out */
    double need = min_bytes_per_rank(&o.dims, tp, pp) * size;
    if (a.backend == BACKEND_CPU && need > 64.0 * 1073741824.0) {
        if (rank == 0)
            fprintf(stderr,
                    "trainexec: %zu parameters need at least %.0f GiB for weights, gradients and "
                    "Adam on %d ranks: too large for the CPU executor; give a smaller shape "
                    "(--num-layers, --hidden-size, --padded-vocab-size, ...)\n",
                    gpt_num_params(&o.dims), need / 1073741824.0, size);
        MPI_Finalize();
        return 2;
    }
    sched *s = NULL;
    backend *be = NULL;
    comm *cm = NULL;
    runtime *rt = NULL;
    rc = gpt_dims_check(&o.dims, tp, o.sp, &err);
    if (!rc)
        rc = a.schedule_csv ? load_sched_csv(a.schedule_csv, &par, &mod, &s, &err)
                            : make_sched_of(&par, &mod, &s, &err);
    if (rc) {
        sched_free(s);
        if (rank == 0)
            fprintf(stderr, "trainexec: %s (trainexec --help)\n", err.msg);
        MPI_Finalize();
        return 2;
    }
    int device = -1; /* --backend cuda: this rank's GPU (its index on its node) */
#ifdef TRAINSIM_CUDA
    if (a.backend == BACKEND_CUDA) {
        MPI_Comm node;
        device = 0;
        if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL,
                                &node) == MPI_SUCCESS) {
            MPI_Comm_rank(node, &device);
            MPI_Comm_free(&node);
        }
        rc = backend_cuda_create(device, false, &be, &err);
        if (rc == TS_EINVAL)
            err_prefix(&err, "rank %d: more ranks on its node than GPUs: ", rank);
    } else
#endif
        rc = backend_cpu_create(a.threads, &be, &err);
    /* every rank has its backend before the (collective) comm is created */
    if (agree_fail(rank, size, rc, "", &err)) {
        if (be)
            be->destroy(be);
        sched_free(s);
        return 1;
    }
    ts_err cerr; /* comm creation is collective: every rank calls it */
    int crc;
#ifdef TRAINSIM_CUDA
    if (a.backend == BACKEND_CUDA)
        crc = comm_nccl_create(MPI_COMM_WORLD, tp, pp, d, backend_cuda_stream(be), &cm, &cerr);
    else
#endif
        crc = comm_mpi_create(MPI_COMM_WORLD, tp, pp, d, &cm, &cerr);
    if (!rc && crc) {
        rc = crc;
        err = cerr;
    }
    if (!rc)
        rc = rt_create(&o, s, be, cm, &rt, &err);
    if (agree_fail(rank, size, rc, "", &err))
        return 1;
    if (rank == 0) {
        char where[96];
        if (device >= 0)
            snprintf(where, sizeof where, "fp32 master weights, bf16 GEMMs, cuda (GPU %d on "
                                          "rank 0)", device);
        else
            snprintf(where, sizeof where, "fp32 cpu");
        printf("trainexec: GPT %zu parameters (L=%d h=%d heads=%d ffn=%d s=%d V=%d), "
               "t=%d p=%d d=%d v=%d%s, %s, b=%d B=%d m=%d, %d ranks, %s\n",
               gpt_num_params(&o.dims), o.dims.layers, o.dims.hidden, o.dims.heads, o.dims.ffn,
               o.dims.seq, o.dims.vocab, tp, pp, d, s->v, o.sp ? " sp" : "",
               sched_kind_name(s->kind), o.dims.batch, o.dims.batch * d * s->m, s->m, size,
               where);
        (void)fflush(stdout); /* show it now */
    }
    int total = a.warmup + a.iterations;
    int64_t *start = calloc((size_t)total, sizeof *start);
    double sum_ns = 0.0, sum_compute = 0.0, sum_cpu = 0.0;
    for (int it = 0; it < total && !rc; it++) {
        if (it == a.warmup) {
            rt_clear_spans(rt);
            be_reset_peaks(be);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        start[it] = rt_now_ns();
        int64_t cpu0 = cpu_now_ns();
        double loss = 0.0;
        rc = rt_iteration(rt, it, &loss, &err);
        be->sync(be);
#ifdef TRAINSIM_CUDA
        if (!rc && a.backend == BACKEND_CUDA && (rc = backend_cuda_status(be, &err)))
            err_prefix(&err, "iteration %d: ", it);
#endif
        if (rc) {
            /* the other ranks may be blocked on this one's messages: abort them */
            fprintf(stderr, "trainexec: rank %d: %s\n", rank, err.msg);
            (void)fflush(stderr); /* before the abort */
            MPI_Abort(MPI_COMM_WORLD, 1);
            return 1;
        }
        int64_t mine = rt_now_ns() - start[it], slowest = 0, cpu = cpu_now_ns() - cpu0;
        MPI_Allreduce(&mine, &slowest, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
        if (it >= a.warmup) {
            size_t n;
            const rt_span *sp = rt_spans(rt, &n);
            sum_ns += (double)slowest;
            sum_compute += (double)xout_compute_ns(sp, n, it);
            sum_cpu += (double)cpu;
        }
        if (rank == 0) {
            printf("iteration %d/%d%s: loss %.6f, %.3f ms\n", it + 1, total,
                   it < a.warmup ? " (warm-up)" : "", loss, slowest / 1e6);
            (void)fflush(stdout); /* progress */
        }
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
    xr.cpu_ns = sum_cpu / a.iterations;
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
            printf("  rank %d (tp %d pp %d dp %d): compute %.3f ms, bubble %.3f ms, CPU %.0f%% "
                   "of the time, peak %.2f MiB (weights %.2f, gradients %.2f, optimizer %.2f, "
                   "activations %.2f, buffers %.2f)\n",
                   i, all[i].tp, all[i].pp, all[i].dp, all[i].compute_ns / 1e6,
                   (all[i].iteration_ns - all[i].compute_ns) / 1e6,
                   100.0 * all[i].cpu_ns / all[i].iteration_ns,
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
    if (rc) { /* an output file: every rank has the status (xout agrees) */
        if (rank == 0)
            fprintf(stderr, "trainexec: %s\n", err.msg);
        MPI_Finalize();
        return 1;
    }
    MPI_Finalize();
    return 0;
}
