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
 * N = t * cp * p * d ranks in Megatron-core's order tp-cp-dp-pp (exec/core/comm.h). Only rank 0
 * prints; every output file is written atomically by rank 0.
 */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "exec/comm_mpi.h"
#include "exec/core/backend.h"
#include "exec/infer.h"
#ifdef TRAINSIM_CUDA
#include "exec/cuda/backend_cuda.h"
#include "exec/cuda/comm_nccl.h"
#endif
#include "exec/cpu/backend_cpu.h"
#include "exec/microbench.h"
#include "exec/runtime.h"
#include "exec/watchdog.h"
#include "exec/xargs.h"
#include "exec/xconfig.h"
#include "exec/xmoe.h"
#include "exec/xout.h"
#include "exec/xsched.h"
#include "sim/config/config.h"
#include "sim/config/flags.h"
#include "sim/sched/sched.h"
#include "sim/util/afile.h"
#include "sim/util/opt.h"

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
 * own status): the lowest failing rank prints its message. Returns 1 if
 * some rank failed (every rank then exits 1), else 0. */
static int agree_fail(int rank, int size, int rc, const char *what, const ts_err *e)
{
    int mine = rc ? rank : size, first = size;
    wd_wait_begin("agreement on a status");
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    wd_wait_end();
    if (first == size)
        return 0;
    if (rank == first)
        fprintf(stderr, "trainexec: %s%s\n", what, e->msg);
    return 1;
}

/* Append the pointer to --help to a command-line error message. */
static void add_help_hint(ts_err *e)
{
    size_t n = strlen(e->msg);
    snprintf(e->msg + n, sizeof e->msg - n, " (trainexec --help)");
}

/* The exit status of a start-up error, as trainsim's (README's table): 1
 * for a file that cannot be read or written (TS_EIO) or no memory, 2 for
 * anything else (a bad flag or value, a malformed file, a layout or flag
 * combination this build or mode cannot run). */
static int start_status(int rc)
{
    return rc == TS_EIO || rc == TS_ENOMEM || rc == TS_ESTATE ? 1 : 2;
}

/* FNV-1a, 64 bits, of n bytes continuing from h (start: FNV_OFFSET). */
#define FNV_OFFSET 14695981039346656037ULL
static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ULL;
    }
    return h;
}

/* A step of main: GO_ON, or the exit status the process ends with. */
enum { GO_ON = -1 };

/* One rank's run: what main's steps share. */
typedef struct {
    int rank, size;                            /* in MPI_COMM_WORLD */
    xargs a;                                   /* executor flags */
    config c;                                  /* resolved flags; owns its topology until resolve_config */
    flags_state fs;                            /* the parsed arguments the string flags point into; owned */
    rt_opts o;                                 /* the model and Adam the runtime runs */
    parallel_config par;                       /* layout, copied out of c */
    model_config mod;                          /* model shape, copied out of c */
    moe_config moe;                            /* experts and their layout, copied out of c */
    sched *s;                                  /* owned */
    backend *be;                               /* owned */
    comm *cm;                                  /* owned */
    runtime *rt;                               /* owned */
    int device;                                /* --backend cuda: this rank's GPU (its index on its node); -1 */
    int64_t *start;                            /* [warmup + iterations] iteration starts, CLOCK_MONOTONIC ns; owned */
    char canon[1024];                          /* canonical text of what the ranks must agree on */
    double sum_ns, sum_compute_ns, sum_cpu_ns; /* over the measured iterations */
    double first_loss;                         /* of iteration 0, for --divergence-factor */
    ts_err err;
} run;

/* Set up x for this rank with the executor's defaults; nothing owned yet. */
static void run_init(run *x)
{
    memset(x, 0, sizeof *x);
    MPI_Comm_rank(MPI_COMM_WORLD, &x->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &x->size);
    err_clear(&x->err);
    xargs_defaults(&x->a);
    x->device = -1;
}

/* Free everything x owns (before MPI_Finalize: the comm frees MPI groups). */
static void run_free(run *x)
{
    free(x->start);
    rt_free(x->rt);
    sched_free(x->s);
    if (x->cm)
        x->cm->destroy(x->cm);
    if (x->be)
        x->be->destroy(x->be);
    config_free(&x->c);
    flags_release(&x->fs);
}

/* argv with --gpus = ranks appended when the command line does not give
 * it: the launcher's world size, as Megatron-LM takes it. Every other value
 * resolves as in trainsim (flags.h: the same resolver, Megatron-LM's
 * defaults). gpus_arg (gpus_bytes) holds the flag. Sets *ac; NULL when out
 * of memory. The caller frees the array (not its strings). */
static char **with_world_size(int argc, char **argv, int size, char *gpus_arg, size_t gpus_bytes, int *ac)
{
    snprintf(gpus_arg, gpus_bytes, "--gpus=%d", size);
    char **av = calloc((size_t)argc + 3, sizeof *av); /* + --gpus, --micro-batch-size (infer_batch_arg), NULL */
    if (!av)
        return NULL;
    int n = 0;
    bool given = false;
    for (int i = 0; i < argc; i++) {
        av[n++] = argv[i];
        if (i > 0 && (!strcmp(argv[i], "-n") || !strcmp(argv[i], "--gpus") || !strncmp(argv[i], "--gpus=", 7)))
            given = true;
    }
    if (!given)
        av[n++] = gpus_arg;
    *ac = n;
    return av;
}

/* Parse the command line into x->a and, unless --microbench, x->c (resolved
 * and within what the executor runs). GO_ON; 0 after --help; 1 out of
 * memory or an input file that cannot be read (--topology, --megatron-script);
 * 2 for a bad command line (x->err says why; agree_start prints). */
static int parse_command_line(run *x, int argc, char **argv)
{
    char gpus_arg[32];
    int ac = 0;
    char **av = with_world_size(argc, argv, x->size, gpus_arg, sizeof gpus_arg, &ac);
    if (!av)
        return 1;
    char mb_arg[64];
    infer_batch_arg(av, &ac, mb_arg, sizeof mb_arg);
    flags_state *fs = &x->fs;
    opt_table t;
    opt_table_init(&t, "trainexec",
                   "Run training iterations of a GPT model for real (fp32, OpenBLAS, MPI; or "
                   "--backend cuda on NVIDIA GPUs with NCCL) under a pipeline schedule and measure them: mpirun -np N "
                   "trainexec [the flags of "
                   "trainsim simulate] [executor flags]. The flags resolve exactly as trainsim's "
                   "(Megatron-LM's defaults: t = p = 1, 1F1B, no sequence parallelism, no "
                   "recomputation, global batch = micro-batch x d), with --gpus = the ranks "
                   "mpirun started. Give the shape Megatron-LM requires (--num-layers, "
                   "--hidden-size, --num-attention-heads, --seq-length, --micro-batch-size). "
                   "The GPU kind and precision flags are accepted and ignored (fp32 on the CPU; "
                   "--backend cuda: fp32 master weights, bf16 GEMMs).");
    int code = GO_ON;
    int rc = flags_register(fs, &t, &x->c, &x->err);
    if (!rc)
        rc = xargs_add_flags(&t, &x->a, &x->err);
    if (!rc)
        rc = flags_parse(fs, &t, ac, av, &x->err);
    if (x->rank == 0)
        mscript_write_notes(fs->script, "trainexec", stderr); /* what the script left unresolved, if any */
    if (!rc && x->rank == 0)
        flags_note_ignored(fs, stderr);
    if (!rc && t.help_requested) {
        if (x->rank == 0)
            opt_help(&t, stdout);
        code = 0;
        goto done;
    }
    if (!rc)
        rc = xargs_check_backend(&x->a, &x->err);
    if (!rc)
        rc = xargs_check_inference(&x->a, &x->err);
    if (!rc && !x->a.microbench)
        rc = flags_finish(fs, &t, &x->err);
    if (!rc && !x->a.microbench)
        rc = xconfig_supports(&x->c, x->a.inf.inference, &x->err);
    if (rc) {
        code = start_status(rc);
        if (code == 2)
            add_help_hint(&x->err);
    }
done:
    opt_table_free(&t);
    free(av);
    return code;
}

/* --microbench: sweep and write the CSV instead of training; 0, or 1 if it
 * failed on some rank. */
static int run_microbench(run *x)
{
    int rc = microbench_run(MPI_COMM_WORLD, x->a.microbench, x->a.threads, x->rank == 0 ? stdout : NULL, &x->err);
    return agree_fail(x->rank, x->size, rc, "--microbench: ", &x->err) ? 1 : 0;
}

/* Copy what the run needs out of x->c (then freed) into x->o, x->par and
 * x->mod; GO_ON, or 2 when the ranks or the memory do not fit the config
 * (x->err says why). */
static int resolve_config(run *x)
{
    const model_config *mc = &x->c.model;
    const parallel_config *pc = &x->c.par;
    if (x->c.cluster.gpus != x->size) {
        err_set(&x->err, TS_EINVAL, "--gpus %d but mpirun started %d ranks (run mpirun -np %d)", x->c.cluster.gpus,
                x->size, x->c.cluster.gpus);
        return 2;
    }
    rt_opts *o = &x->o;
    rt_opts_default(o);
    o->dims = xconfig_dims(mc, pc, &x->c.moe);
    o->sp = pc->sequence_parallel;
    o->seed = (uint64_t)x->a.seed;
    o->lr = (float)x->a.lr;
    o->beta1 = (float)x->a.beta1;
    o->beta2 = (float)x->a.beta2;
    o->eps = (float)x->a.eps;
    o->weight_decay = (float)x->a.wd;
    o->op_trace = x->a.op_trace;
    o->watch_device = x->a.backend == XARGS_BACKEND_CUDA;
    if (x->rank == 0 && pc->overlap_grad_reduce)
        printf("trainexec: note: --overlap-grad-reduce is not overlapped here: gradients are "
               "reduced at the schedule's REDUCE_GRAD actions\n");
    if (x->rank == 0 && pc->tp_comm_overlap)
        printf("trainexec: note: --tp-comm-overlap is not overlapped here: tensor-parallel collectives run whole "
               "between the GEMMs\n");
    if (x->a.inf.inference && x->a.inf.batch_size)
        o->dims.batch = x->a.inf.batch_size;
    x->par = *pc;
    x->mod = *mc;
    x->moe = x->c.moe;
    x->moe.expert_load = NULL; /* (refused by moe_supports; the flags' state owns it) */
    config_free(&x->c);        /* everything needed is copied out */
    if (x->a.moe_load_out && x->moe.num_experts <= 0) {
        err_set(&x->err, TS_EINVAL, "--moe-load-out %s needs --num-experts (a dense model routes no tokens)",
                x->a.moe_load_out);
        return 2;
    }
    double need = min_bytes_per_rank(&o->dims, x->par.tp, x->par.pp) * x->size;
    if (x->a.backend == XARGS_BACKEND_CPU && need > 64.0 * 1073741824.0) {
        err_set(&x->err, TS_EINVAL,
                "%zu parameters need at least %.0f GiB for weights, gradients and "
                "Adam on %d ranks: too large for the CPU executor; give a smaller shape "
                "(--num-layers, --hidden-size, --padded-vocab-size, ...)",
                gpt_num_params(&o->dims), need / 1073741824.0, x->size);
        return 2;
    }
    return GO_ON;
}

/* x->s: the schedule generated for the layout or read from --schedule-csv;
 * GO_ON, 2 for a shape or schedule the run cannot take, 1 for a
 * --schedule-csv that cannot be read (x->err says why). */
static int build_schedule(run *x)
{
    int rc = gpt_dims_check(&x->o.dims, x->par.tp, x->o.sp, &x->err);
    if (!rc)
        rc = x->a.schedule_csv ? xsched_load_csv(x->a.schedule_csv, &x->par, &x->mod, &x->s, &x->err)
                               : xsched_generate(&x->par, &x->mod, &x->s, &x->err);
    if (!rc)
        return GO_ON;
    if (start_status(rc) == 2)
        add_help_hint(&x->err);
    return start_status(rc);
}

/* This rank's backend in x->be (--backend cuda: the GPU of its index on
 * its node, x->device). TS_* with x->err set. */
static int create_backend(run *x)
{
    int rc;
#ifdef TRAINSIM_CUDA
    if (x->a.backend == XARGS_BACKEND_CUDA) {
        MPI_Comm node;
        x->device = 0;
        if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, x->rank, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
            MPI_Comm_rank(node, &x->device);
            MPI_Comm_free(&node);
        }
        rc = backend_cuda_create(x->device, false, &x->be, &x->err);
        if (rc == TS_EINVAL)
            err_prefix(&x->err, "rank %d: more ranks on its node than GPUs: ", x->rank);
    } else
#endif
        rc = backend_cpu_create(x->a.threads, &x->be, &x->err);
    return rc;
}

/* Backend, communicator and runtime of this rank (collective); GO_ON, or 1
 * when some rank failed (the first has said why). */
static int set_up_rank(run *x)
{
    int rc = create_backend(x);
    /* every rank has its backend before the (collective) comm is created */
    if (agree_fail(x->rank, x->size, rc, "", &x->err))
        return 1;
    ts_err cerr; /* comm creation is collective: every rank calls it */
    int crc, tp = x->par.tp, pp = x->par.pp, d = x->par.dp;
#ifdef TRAINSIM_CUDA
    if (x->a.backend == XARGS_BACKEND_CUDA)
        crc = comm_nccl_create_cp(MPI_COMM_WORLD, tp, x->par.cp > 1 ? x->par.cp : 1, pp, d, backend_cuda_stream(x->be),
                                  &x->cm, &cerr);
    else
#endif
        crc = comm_mpi_create_cp(MPI_COMM_WORLD, tp, x->par.cp > 1 ? x->par.cp : 1, pp, d, &x->cm, &cerr);
    if (!crc && x->moe.num_experts > 0) { /* collective too */
#ifdef TRAINSIM_CUDA
        if (x->a.backend == XARGS_BACKEND_CUDA)
            crc = comm_nccl_set_ep(x->cm, x->moe.ep, &cerr);
        else
#endif
            crc = comm_mpi_set_ep(x->cm, x->moe.ep, &cerr);
    }
    if (!rc && crc) {
        rc = crc;
        x->err = cerr;
    }
    if (!rc && x->s) /* --inference runs no schedule */
        rc = rt_create(&x->o, x->s, x->be, x->cm, &x->rt, &x->err);
    return agree_fail(x->rank, x->size, rc, "", &x->err) ? 1 : GO_ON;
}

/* x->canon: a canonical text of the resolved configuration and the
 * executor flags every rank must share (the model, the layout, the
 * schedule, Adam, the iteration counts, the divergence rule; not output
 * paths, threads or the watchdog's timeout, which may differ per rank),
 * and its hash with the schedule's actions folded in. Only called on a
 * rank whose start-up succeeded. */
static uint64_t config_hash(run *x)
{
    const xargs *a = &x->a;
    int n = snprintf(x->canon, sizeof x->canon,
                     "backend=%s iterations=%d warmup=%d seed=%lld lr=%.17g betas=%.17g,%.17g eps=%.17g wd=%.17g "
                     "divergence=%.17g op_trace=%d microbench=%d",
                     XARGS_BACKEND_NAMES[a->backend], a->iterations, a->warmup, (long long)a->seed, a->lr, a->beta1,
                     a->beta2, a->eps, a->wd, a->divergence_factor, (int)a->op_trace, a->microbench != NULL);
    if (!a->microbench && x->s) {
        const gpt_dims *d = &x->o.dims;
        const sched *sc = x->s;
        char arch[96], mode[128];
        xconfig_arch_text(d, arch, sizeof arch);
        xconfig_mode_text(d, mode, sizeof mode);
        n += snprintf(x->canon + n, sizeof x->canon - (size_t)n,
                      " L=%d h=%d heads=%d ffn=%d s=%d V=%d b=%d sp=%d t=%d cp=%d p=%d d=%d schedule=%s v=%d m=%d%s%s",
                      d->layers, d->hidden, d->heads, d->ffn, d->seq, d->vocab, d->batch, (int)x->o.sp, x->par.tp,
                      x->par.cp, x->par.pp, x->par.dp, sched_kind_name(sc->kind), sc->v, sc->m, arch, mode);
        if (d->num_experts > 0)
            n += snprintf(x->canon + n, sizeof x->canon - (size_t)n,
                          " moe E=%d k=%d f=%d freq=%d first=%d cf=%.17g fb=%d ep=%d", d->num_experts, d->moe_topk,
                          d->moe_ffn, d->moe_layer_freq, d->moe_first_dense, d->moe_capacity, (int)d->moe_force_balance,
                          x->moe.ep);
        for (int i = 0; i < sc->p * sc->v && n < (int)sizeof x->canon; i++)
            n += snprintf(x->canon + n, sizeof x->canon - (size_t)n, "%s%d+%d",
                          i ? "," : " stages=", sc->stages[i].first_layer, sc->stages[i].num_layers);
    }
    if (a->inf.inference) {
        const gpt_dims *d = &x->o.dims;
        n += snprintf(x->canon + n, sizeof x->canon - (size_t)n,
                      " inference L=%d h=%d heads=%d ffn=%d s=%d V=%d B=%d I=%d O=%d t=%d p=%d d=%d", d->layers,
                      d->hidden, d->heads, d->ffn, d->seq, d->vocab, d->batch, a->inf.input_len, a->inf.output_len,
                      x->par.tp, x->par.pp, x->par.dp);
    }
    uint64_t h = fnv1a(FNV_OFFSET, x->canon, strlen(x->canon));
    for (int r = 0; !a->microbench && x->s && r < x->s->p; r++)
        for (size_t i = 0; i < x->s->n_actions[r]; i++) {
            const sched_action *ac = &x->s->actions[r][i];
            int v[3] = {ac->kind, ac->chunk, ac->mb};
            h = fnv1a(h, v, sizeof v);
        }
    return h;
}

/* The first collective of the run, reached by every rank whatever
 * happened before it (code: this rank's start-up outcome, GO_ON or an exit
 * status with x->err set). The ranks exchange their status and
 * configuration hash; a failing rank prints its message (once when every
 * rank failed alike), a rank whose configuration differs from rank 0's
 * prints it, and rank 0 names the ranks that failed or disagree. Returns
 * GO_ON when every rank goes on with one configuration, else the status
 * every rank exits with (the largest, or 2). */
static int agree_start(run *x, int code)
{
    typedef struct {
        int64_t code;            /* GO_ON or the exit status */
        uint64_t hash, msg_hash; /* configuration (GO_ON) / error message (failed) */
    } st;
    st mine = {.code = code, .hash = code == GO_ON ? config_hash(x) : 0};
    mine.msg_hash = fnv1a(FNV_OFFSET, x->err.msg, strlen(x->err.msg));
    st *all = calloc((size_t)x->size, sizeof *all);
    if (!all) {
        fprintf(stderr, "trainexec: rank %d: out of memory for the start-up agreement\n", x->rank);
        (void)fflush(stderr); /* before the abort: a peer waiting in the gather cannot be told otherwise */
        MPI_Abort(MPI_COMM_WORLD, 1);
        return 1;
    }
    wd_wait_begin("start-up agreement on status and configuration");
    MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, MPI_COMM_WORLD);
    wd_wait_end();
    int failed = 0, same_msg = 0, differ = 0, worst = GO_ON, helped = 0;
    for (int r = 0; r < x->size; r++) {
        if (all[r].code != GO_ON) {
            failed++;
            same_msg += all[r].msg_hash == all[0].msg_hash && all[0].code != GO_ON;
            helped += all[r].code == 0;
            worst = (int)all[r].code > worst ? (int)all[r].code : worst;
        } else if (all[0].code == GO_ON && all[r].hash != all[0].hash)
            differ++;
    }
    int result = GO_ON;
    char list[512] = ""; /* rank 0's list of ranks: one write, so another rank's line cannot split it */
    if (failed == x->size && helped == x->size)
        result = 0; /* --help on every rank */
    else if (failed == x->size && same_msg == x->size) {
        /* the common case: one command line, the same error on every rank */
        if (x->rank == 0)
            fprintf(stderr, "trainexec: %s\n", x->err.msg);
        result = worst;
    } else if (failed) {
        if (code != GO_ON && code != 0)
            fprintf(stderr, "trainexec: rank %d: %s\n", x->rank, x->err.msg);
        if (x->rank == 0) {
            size_t n = 0;
            for (int r = 0; r < x->size && n < sizeof list; r++)
                if (all[r].code != GO_ON)
                    n += (size_t)snprintf(list + n, sizeof list - n, " %d%s", r, all[r].code == 0 ? " (--help)" : "");
            fprintf(stderr,
                    "trainexec: %d of %d ranks failed to start (ranks%s); each says why above; every rank stops\n",
                    failed, x->size, list);
        }
        result = worst > 0 ? worst : 2;
    } else if (differ) {
        if (mine.hash != all[0].hash)
            fprintf(stderr, "trainexec: rank %d: configuration differs from rank 0's: %s\n", x->rank, x->canon);
        if (x->rank == 0) {
            size_t n = 0;
            for (int r = 0; r < x->size && n < sizeof list; r++)
                if (all[r].hash != all[0].hash)
                    n += (size_t)snprintf(list + n, sizeof list - n, " %d", r);
            fprintf(stderr, "trainexec: rank 0: configuration %s\n", x->canon);
            fprintf(stderr,
                    "trainexec: %d of %d ranks resolved a different configuration or schedule (ranks%s): give "
                    "every rank the same model, parallel, schedule and executor flags\n",
                    differ, x->size, list);
        }
        result = 2;
    }
    free(all);
    return result;
}

/* --pid-file FILE: write this rank's process id to FILE.rank (a temporary
 * file renamed into place, so a reader never sees half a number). 0, or 1
 * with x->err set. */
static int write_pid_file(run *x)
{
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s.%d", x->a.pid_file, x->rank);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    int ok = f && fprintf(f, "%ld\n", (long)getpid()) > 0;
    ok = f && fclose(f) == 0 && ok;
    ok = ok && rename(tmp, path) == 0;
    if (ok)
        return 0;
    err_set(&x->err, TS_EIO, "--pid-file %s: cannot write %s (does its directory exist and is it writable?)",
            x->a.pid_file, path);
    return 1;
}

/* Rank 0, which writes every output: the output paths can be written,
 * checked before the run (afile_check_writable). GO_ON, or 1 with x->err. */
static int check_outputs(run *x)
{
    const char *flag[] = {"--trace", "--ops-csv", "--report-csv", "--microbench", "--moe-load-out"};
    const char *path[] = {x->a.trace, x->a.ops_csv, x->a.report_csv, x->a.microbench, x->a.moe_load_out};
    for (int i = 0; i < 5 && x->rank == 0; i++)
        if (path[i] && afile_check_writable(path[i], flag[i], &x->err) != TS_OK)
            return 1;
    return GO_ON;
}

/* Rank 0: one line saying what runs where. */
static void print_banner(const run *x)
{
    if (x->rank != 0)
        return;
    const rt_opts *o = &x->o;
    const sched *s = x->s;
    char where[96];
    if (x->device >= 0)
        snprintf(where, sizeof where,
                 "fp32 master weights, bf16 GEMMs, cuda (GPU %d on "
                 "rank 0)",
                 x->device);
    else
        snprintf(where, sizeof where, "fp32 cpu");
    char arch[96], rcs[128], cps[32] = "";
    xconfig_arch_text(&o->dims, arch, sizeof arch);
    xconfig_mode_text(&o->dims, rcs, sizeof rcs);
    char moe[192] = "";
    if (o->dims.num_experts > 0) {
        int moe_layers = 0;
        for (int l = 0; l < o->dims.layers; l++)
            moe_layers += gpt_layer_is_moe(&o->dims, l);
        snprintf(moe, sizeof moe, " + %zu in %d MoE layers (E=%d top-%d expert ffn=%d, %s%s, ep=%d edp=%d)",
                 gpt_moe_num_params(&o->dims), moe_layers, o->dims.num_experts, o->dims.moe_topk, o->dims.moe_ffn,
                 o->dims.moe_capacity > 0 ? "capacity" : "dropless",
                 o->dims.moe_force_balance ? ", forced balance" : "", x->moe.ep,
                 x->par.tp * (x->par.cp > 1 ? x->par.cp : 1) * x->par.dp / x->moe.ep);
    }
    if (x->par.cp > 1)
        snprintf(cps, sizeof cps, " cp=%d", x->par.cp);
    printf("trainexec: GPT %zu parameters%s (L=%d h=%d heads=%d ffn=%d s=%d V=%d%s), "
           "t=%d%s p=%d d=%d v=%d%s, %s%s, b=%d B=%d m=%d, %d ranks, %s\n",
           gpt_num_params(&o->dims), moe, o->dims.layers, o->dims.hidden, o->dims.heads, o->dims.ffn, o->dims.seq,
           o->dims.vocab, arch, x->par.tp, cps, x->par.pp, x->par.dp, s->v, o->sp ? " sp" : "",
           sched_kind_name(s->kind), rcs, o->dims.batch, o->dims.batch * x->par.dp * s->m, s->m, x->size, where);
    (void)fflush(stdout); /* show it now */
}

/* Automatic watchdog timeout (--timeout -1): AUTO_TIMEOUT_START_S through
 * start-up and the first iteration (whose length is unknown), then
 * max(AUTO_TIMEOUT_MIN_S, AUTO_TIMEOUT_ITERS x the first iteration): a
 * wait that long is no pipeline bubble or slow peer but a stuck one. */
#define AUTO_TIMEOUT_START_S 600.0
#define AUTO_TIMEOUT_MIN_S   60.0
#define AUTO_TIMEOUT_ITERS   10.0

/* Whether iteration it's loss (the global-batch mean, the same on every
 * rank) ends the run: not finite, or above --divergence-factor times the
 * first iteration's. Collective, so every rank stops together; the lowest
 * rank that saw it says so. */
static bool diverged(run *x, int it, int total, double loss)
{
    int rc = TS_OK;
    double f = x->a.divergence_factor;
    if (!isfinite(loss))
        rc = err_set(&x->err, TS_EINVAL,
                     "iteration %d/%d: loss %g is not finite: training diverged (lower --lr, now %g)", it + 1, total,
                     loss, x->a.lr);
    else if (f > 0 && it > 0 && x->first_loss > 0 && loss > f * x->first_loss)
        rc = err_set(&x->err, TS_EINVAL,
                     "iteration %d/%d: loss %g exceeds --divergence-factor %g x the first loss %g: training "
                     "diverged (lower --lr, now %g; --divergence-factor 0 turns the check off)",
                     it + 1, total, loss, f, x->first_loss, x->a.lr);
    char what[32];
    snprintf(what, sizeof what, "rank %d: ", x->rank);
    wd_action("divergence check", it, -1);
    return agree_fail(x->rank, x->size, rc, what, &x->err) != 0;
}

/* Run the warm-up and measured iterations, summing the measured ones'
 * times into x; rank 0 prints each. GO_ON; a failing rank aborts every rank. */
static int run_iterations(run *x)
{
    int total = x->a.warmup + x->a.iterations, rc = TS_OK;
    x->start = calloc((size_t)total, sizeof *x->start);
    if (!x->start) {
        fprintf(stderr, "trainexec: rank %d: out of memory for %d iterations' start times\n", x->rank, total);
        (void)fflush(stderr); /* before the abort */
        MPI_Abort(MPI_COMM_WORLD, 1);
        return 1;
    }
    for (int it = 0; it < total && !rc; it++) {
        if (it == x->a.warmup) {
            rt_clear_spans(x->rt);
            rt_data_step_reset(x->rt);
            be_reset_peaks(x->be);
            xmoe_reset(x->rt);
        }
        wd_action("barrier before the iteration", it, -1);
        wd_wait_begin("barrier");
        MPI_Barrier(MPI_COMM_WORLD);
        wd_wait_end();
        x->start[it] = rt_now_ns();
        int64_t cpu0 = cpu_now_ns();
        double loss = 0.0;
        rc = rt_iteration(x->rt, it, &loss, &x->err);
        x->be->sync(x->be);
#ifdef TRAINSIM_CUDA
        if (!rc && x->a.backend == XARGS_BACKEND_CUDA && (rc = backend_cuda_status(x->be, &x->err)))
            err_prefix(&x->err, "iteration %d: ", it);
#endif
        if (rc) {
            /* the other ranks may be blocked on this one's messages: abort them */
            fprintf(stderr, "trainexec: rank %d: %s\n", x->rank, x->err.msg);
            (void)fflush(stderr); /* before the abort */
            MPI_Abort(MPI_COMM_WORLD, 1);
            return 1;
        }
        int64_t mine = rt_now_ns() - x->start[it], slowest = 0, cpu = cpu_now_ns() - cpu0;
        wd_action("iteration time reduction", it, -1);
        wd_wait_begin("all-reduce of the iteration time");
        MPI_Allreduce(&mine, &slowest, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
        wd_wait_end();
        if (it == 0 && x->a.timeout_s < 0) /* the automatic rule, from the first iteration's time */
            wd_set_timeout(fmax(AUTO_TIMEOUT_MIN_S, AUTO_TIMEOUT_ITERS * (double)slowest / 1e9));
        if (it >= x->a.warmup) {
            size_t n;
            const rt_span *sp = rt_spans(x->rt, &n);
            x->sum_ns += (double)slowest;
            x->sum_compute_ns += (double)xout_compute_ns(sp, n, it);
            x->sum_cpu_ns += (double)cpu;
        }
        if (x->rank == 0) {
            printf("iteration %d/%d%s: loss %.6f, %.3f ms\n", it + 1, total, it < x->a.warmup ? " (warm-up)" : "", loss,
                   slowest / 1e6);
            (void)fflush(stdout); /* progress */
        }
        if (it == 0)
            x->first_loss = loss;
        if (diverged(x, it, total, loss))
            return 1;
    }
    return GO_ON;
}

/* Rank 0: the data step per micro-batch of the rank with the longest one
 * (the first or the last stage's), as trainsim simulate --data-loader-ns
 * takes it. */
static void print_data_step(const run *x, const xout_rank *all)
{
    int w = -1;
    for (int i = 0; i < x->size; i++)
        if (all[i].data_mb > 0 &&
            (w < 0 || all[i].data_gen_ns + all[i].data_copy_ns > all[w].data_gen_ns + all[w].data_copy_ns))
            w = i;
    if (w < 0)
        return;
    double t = all[w].data_gen_ns + all[w].data_copy_ns;
    printf("data step %.3f us per micro-batch (rank %d: host generation %.3f us, copy to the device %.3f us; mean of "
           "%lld): trainsim simulate --data-loader-ns %.0f\n",
           t / 1e3, w, all[w].data_gen_ns / 1e3, all[w].data_copy_ns / 1e3, (long long)all[w].data_mb, t);
}

/* Rank 0: iteration time, bubble and peak memory, overall and per rank
 * (all: every rank's record). */
static void print_summary(const run *x, const xout_rank *xr, const xout_rank *all)
{
    double mx = 0, mean_bubble = 0;
    for (int i = 0; i < x->size; i++) {
        mean_bubble += all[i].iteration_ns - all[i].compute_ns;
        if (all[i].peak_bytes > mx)
            mx = (double)all[i].peak_bytes;
    }
    mean_bubble /= x->size;
    printf("iteration time %.3f ms (mean of %d), bubble %.3f ms (%.1f%%, mean over ranks), "
           "peak memory %.2f MiB (max over ranks)\n",
           xr->iteration_ns / 1e6, x->a.iterations, mean_bubble / 1e6, 100.0 * mean_bubble / xr->iteration_ns,
           mx / 1048576.0);
    for (int i = 0; i < x->size; i++) {
        char cpr[24] = "";
        if (x->par.cp > 1)
            snprintf(cpr, sizeof cpr, " cp %d", all[i].cp);
        printf("  rank %d (tp %d%s pp %d dp %d): compute %.3f ms, bubble %.3f ms, CPU %.0f%% "
               "of the time, peak %.2f MiB (weights %.2f, gradients %.2f, optimizer %.2f, "
               "activations %.2f, buffers %.2f)\n",
               i, all[i].tp, cpr, all[i].pp, all[i].dp, all[i].compute_ns / 1e6,
               (all[i].iteration_ns - all[i].compute_ns) / 1e6, 100.0 * all[i].cpu_ns / all[i].iteration_ns,
               all[i].peak_bytes / 1048576.0, all[i].cat_bytes[XMEM_WEIGHTS] / 1048576.0,
               all[i].cat_bytes[XMEM_GRADS] / 1048576.0, all[i].cat_bytes[XMEM_OPTIM] / 1048576.0,
               all[i].cat_bytes[XMEM_ACTS] / 1048576.0, all[i].cat_bytes[XMEM_BUFFERS] / 1048576.0);
    }
}

/* Write the trace, ops and report files (collective) and print the
 * summary; 0, or 1 when an output failed (every rank has the status; rank
 * 0 says why). */
static int write_outputs(run *x)
{
    /* spans carry absolute CLOCK_MONOTONIC times; t = 0 is the start of the
     * last iteration (after its barrier) */
    size_t n;
    const rt_span *sp = rt_spans(x->rt, &n);
    xout_rank xr;
    xout_rank_init(&xr, x->rank, x->cm, x->be);
    xr.iterations = x->a.iterations;
    xr.iteration_ns = x->sum_ns / x->a.iterations;
    xr.compute_ns = x->sum_compute_ns / x->a.iterations;
    xr.cpu_ns = x->sum_cpu_ns / x->a.iterations;
    rt_data_stats ds;
    rt_data_step(x->rt, &ds);
    xr.data_mb = ds.mb;
    xr.data_gen_ns = ds.mb ? (double)ds.gen_ns / (double)ds.mb : 0;
    xr.data_copy_ns = ds.mb ? (double)ds.copy_ns / (double)ds.mb : 0;
    int last = x->a.warmup + x->a.iterations - 1;
    int rc = xout_write_spans(MPI_COMM_WORLD, x->cm, sp, n, last, x->start[last], x->a.trace, x->a.ops_csv, &x->err);
    xout_rank *all = NULL;
    if (!rc)
        rc = xout_write_report(MPI_COMM_WORLD, &xr, x->a.report_csv, &all, &x->err);
    if (!rc && x->rank == 0) {
        print_summary(x, &xr, all);
        print_data_step(x, all);
    }
    free(all);
    bool match = true;
    if (!rc && x->moe.num_experts > 0)
        rc = xmoe_report(MPI_COMM_WORLD, x->rt, x->cm, x->moe.ep, x->moe.force_load_balancing, x->a.iterations,
                         x->rank == 0 ? stdout : NULL, &match, &x->err);
    if (!rc && x->moe.num_experts > 0)
        rc = xmoe_write_loads(MPI_COMM_WORLD, x->rt, x->a.moe_load_out, &x->err);
    if (!rc && x->moe.num_experts > 0 && x->rank == 0)
        printf("MoE load check against the simulator's load factor: %s\n",
               match ? "every expert group matches" : "a group DIFFERS (see above)");
    if (!rc)
        return 0;
    if (x->rank == 0)
        fprintf(stderr, "trainexec: %s\n", x->err.msg);
    return 1;
}

/* --inference: the options of exec/infer.h from the resolved flags. */
static infer_opts inference_opts(const run *x)
{
    return (infer_opts){.dims = x->o.dims,
                        .sp = x->o.sp,
                        .seed = x->o.seed,
                        .input_len = x->a.inf.input_len,
                        .output_len = x->a.inf.output_len,
                        .warmup = x->a.warmup,
                        .iterations = x->a.iterations,
                        .output = x->a.inf.output,
                        .samples = x->a.inf.samples,
                        .backend_name = XARGS_BACKEND_NAMES[x->a.backend]};
}

/* --inference, before the start-up agreement: what the run can take; GO_ON
 * or 2 (x->err says why). */
static int check_inference(run *x)
{
    infer_opts o = inference_opts(x);
    int rc = gpt_dims_check(&o.dims, x->par.tp, o.sp, &x->err);
    if (!rc)
        rc = infer_check(&o, x->par.tp, x->par.pp, &x->err);
    if (!rc && o.output)
        rc = afile_check_writable(o.output, "--output", &x->err);
    if (!rc && o.samples)
        rc = afile_check_writable(o.samples, "--decode-samples", &x->err);
    if (!rc)
        return GO_ON;
    add_help_hint(&x->err);
    return 2;
}

/* --inference: decode and write the outputs; 0, or 1 when some rank failed
 * (rank 0 says why). */
static int run_inference(run *x)
{
    infer_opts o = inference_opts(x);
    if (x->rank == 0) {
        printf("trainexec: inference, GPT %zu parameters (L=%d h=%d heads=%d ffn=%d s=%d V=%d), t=%d d=%d, "
               "B=%d, prompt %d tokens, %d decode steps, %d ranks, %s\n",
               gpt_num_params(&o.dims), o.dims.layers, o.dims.hidden, o.dims.heads, o.dims.ffn, o.dims.seq,
               o.dims.vocab, x->par.tp, x->par.dp, o.dims.batch, o.input_len, o.output_len, x->size,
               x->device >= 0 ? "cuda" : "fp32 cpu");
        (void)fflush(stdout);
    }
    int rc = infer_run(MPI_COMM_WORLD, &o, x->be, x->cm, x->rank == 0 ? stdout : NULL, &x->err);
#ifdef TRAINSIM_CUDA
    if (!rc && x->a.backend == XARGS_BACKEND_CUDA)
        rc = backend_cuda_status(x->be, &x->err);
#endif
    return agree_fail(x->rank, x->size, rc, "--inference: ", &x->err) ? 1 : 0;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    /* outputs go through afile: on SIGINT/SIGTERM/SIGHUP its handlers remove
     * this rank's temporaries before the process dies of the signal */
    if (afile_install_signal_handlers() != TS_OK)
        fprintf(stderr, "trainexec: note: cannot install the handlers that remove temporary files on a signal\n");
    run x;
    run_init(&x);
    /* every rank checks its own inputs (no collective may come first: a
     * rank that failed would never reach it), then all agree */
    int code = parse_command_line(&x, argc, argv);
    if (code == GO_ON && x.a.pid_file && write_pid_file(&x))
        code = 1;
    if (code == GO_ON)
        code = check_outputs(&x);
    if (code == GO_ON && !x.a.microbench)
        code = resolve_config(&x);
    if (code == GO_ON && x.a.inf.inference)
        code = check_inference(&x);
    else if (code == GO_ON && !x.a.microbench)
        code = build_schedule(&x);
    double timeout = x.a.timeout_s < 0 ? AUTO_TIMEOUT_START_S : x.a.timeout_s;
    if (wd_start(x.rank, timeout) && x.a.timeout_s != 0)
        fprintf(stderr, "trainexec: rank %d: note: no watchdog thread could be started: --timeout has no effect\n",
                x.rank);
    code = agree_start(&x, code);
    if (code == GO_ON && x.a.microbench)
        code = run_microbench(&x);
    if (code == GO_ON)
        code = set_up_rank(&x);
    if (code == GO_ON && x.a.inf.inference)
        code = run_inference(&x);
    if (code == GO_ON) {
        print_banner(&x);
        code = run_iterations(&x);
    }
    if (code == GO_ON)
        code = write_outputs(&x);
    wd_stop();
    run_free(&x);
    MPI_Finalize();
    return code;
}
