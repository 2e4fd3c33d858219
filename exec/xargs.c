/* xargs — trainexec's own flags (the executor, its outputs, the watchdog,
 * --inference) and the checks that need only them. Contract in xargs.h. */
#include "exec/xargs.h"

#include <string.h>

const char *const XARGS_BACKEND_NAMES[] = {"cpu", "cuda", NULL};

int xargs_add_flags(opt_table *t, xargs *a, ts_err *err)
{
    const opt_spec specs[] = {
        {.name = "Executor", .type = OPT_SECTION},
        {.name = "--iterations",
         .type = OPT_INT,
         .target = &a->iterations,
         .min = 1,
         .max = 1000000,
         .help = "measured training iterations"},
        {.name = "--warmup",
         .type = OPT_INT,
         .target = &a->warmup,
         .min = 0,
         .max = 1000,
         .help = "iterations run before measuring"},
        {.name = "--seed",
         .type = OPT_INT64,
         .target = &a->seed,
         .min = 0,
         .max = 9e15,
         .help = "seed of the weights and the synthetic token stream"},
        {.name = "--lr", .type = OPT_DOUBLE, .target = &a->lr, .min = 0, .max = 10, .help = "Adam learning rate"},
        {.name = "--adam-beta1", .type = OPT_DOUBLE, .target = &a->beta1, .min = 0, .max = 1, .help = "Adam beta1"},
        {.name = "--adam-beta2", .type = OPT_DOUBLE, .target = &a->beta2, .min = 0, .max = 1, .help = "Adam beta2"},
        {.name = "--adam-eps", .type = OPT_DOUBLE, .target = &a->eps, .min = 0, .max = 1, .help = "Adam epsilon"},
        {.name = "--weight-decay",
         .type = OPT_DOUBLE,
         .target = &a->wd,
         .min = 0,
         .max = 1,
         .help = "AdamW weight decay"},
        {.name = "--backend",
         .type = OPT_ENUM,
         .target = &a->backend,
         .enum_names = XARGS_BACKEND_NAMES,
         .help = "where the model runs: cpu (fp32, OpenBLAS, MPI) or cuda (one NVIDIA GPU per "
                 "rank: fp32 master weights, bf16 cuBLASLt GEMMs, NCCL; needs a build with CUDA)"},
        {.name = "--threads",
         .type = OPT_INT,
         .target = &a->threads,
         .min = 0,
         .max = 1024,
         .help = "OpenBLAS threads per rank (0 = OpenBLAS default)"},
        {.name = "--schedule-csv",
         .type = OPT_STRING,
         .target = &a->schedule_csv,
         .metavar = "FILE",
         .help = "run this schedule (torch.distributed.pipelining action CSV) instead of "
                 "--schedule; its micro-batch count sets the global batch"},
        {.name = "--trace",
         .type = OPT_STRING,
         .target = &a->trace,
         .metavar = "FILE",
         .help = "Chrome/Perfetto JSON trace of the last iteration"},
        {.name = "--op-trace",
         .type = OPT_BOOL,
         .target = &a->op_trace,
         .help = "also time every GEMM, kernel and collective (trace and ops CSV)"},
        {.name = "--ops-csv",
         .type = OPT_STRING,
         .target = &a->ops_csv,
         .metavar = "FILE",
         .help = "per-action (and per-op) start/end CSV of the last iteration"},
        {.name = "--report-csv",
         .type = OPT_STRING,
         .target = &a->report_csv,
         .metavar = "FILE",
         .help = "per-rank iteration time, bubble and peak memory CSV"},
        {.name = "--moe-load-out",
         .type = OPT_STRING,
         .target = &a->moe_load_out,
         .metavar = "FILE",
         .unit = "routed token-slots per expert",
         .defval = "none",
         .help = "MoE: the measured tokens each expert received (summed over ranks, layers and measured "
                 "iterations) as CSV layer,expert,tokens, what trainsim simulate --moe-expert-load reads"},
        {.name = "--timeout",
         .type = OPT_DOUBLE,
         .target = &a->timeout_s,
         .min = -1,
         .max = 604800,
         .unit = "s",
         .defval = "-1 = auto",
         .help = "watchdog: a rank that waits this long in one communication (a stuck or dead peer) "
                 "names itself and the operation and aborts the job; -1 = 600 s until the first "
                 "iteration ends, then max(60 s, 10 x that iteration); 0 = off"},
        {.name = "--divergence-factor",
         .type = OPT_DOUBLE,
         .target = &a->divergence_factor,
         .min = 0,
         .max = 1e9,
         .unit = "ratio",
         .help = "stop with an error when the loss exceeds this times its first iteration's value "
                 "(a loss that is not finite always stops the run); 0 = off"},
        {.name = "--pid-file",
         .type = OPT_STRING,
         .target = &a->pid_file,
         .metavar = "FILE",
         .help = "each rank r writes its process id to FILE.r (to signal one rank)"},
        {.name = "--microbench",
         .type = OPT_STRING,
         .target = &a->microbench,
         .metavar = "FILE",
         .help = "instead of training: sweep GEMMs, element-wise ops and messages, write CSV"},
    };
    int rc = TS_OK;
    for (size_t i = 0; i < sizeof specs / sizeof specs[0] && !rc; i++)
        rc = specs[i].type == OPT_SECTION ? opt_section(t, specs[i].name, err) : opt_add(t, &specs[i], err);
    return rc ? rc : infer_add_flags(t, &a->inf, err);
}

void xargs_defaults(xargs *a)
{
    memset(a, 0, sizeof *a);
    a->iterations = 3;
    a->warmup = 1;
    a->threads = 1;
    a->backend = XARGS_BACKEND_CPU;
    a->seed = 1234;
    a->lr = 1e-4;
    a->beta1 = 0.9;
    a->beta2 = 0.95;
    a->eps = 1e-8;
    a->timeout_s = -1;
    a->divergence_factor = 10;
    infer_args_default(&a->inf);
}

int xargs_check_inference(const xargs *a, ts_err *err)
{
    const char *train = a->microbench     ? "--microbench"
                        : a->schedule_csv ? "--schedule-csv"
                        : a->trace        ? "--trace"
                        : a->ops_csv      ? "--ops-csv"
                        : a->report_csv   ? "--report-csv"
                        : a->moe_load_out ? "--moe-load-out"
                        : a->op_trace     ? "--op-trace"
                                          : NULL;
    return infer_check_flags(&a->inf, train, err);
}

int xargs_check_backend(const xargs *a, ts_err *err)
{
#ifndef TRAINSIM_CUDA
    if (a->backend == XARGS_BACKEND_CUDA)
        return err_set(err, TS_ENOTSUP,
                       "--backend cuda: this trainexec was built without CUDA (make's summary "
                       "must show '✓ CUDA': nvcc, cuBLASLt, NCCL and MPI); use --backend cpu");
#endif
    if (a->microbench && a->backend == XARGS_BACKEND_CUDA)
        return err_set(err, TS_ENOTSUP,
                       "--microbench measures the CPU backend only; for a GPU run "
                       "build/cudacal sweep (experiments/gpu-calibrate.sh)");
    return TS_OK;
}
