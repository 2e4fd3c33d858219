/* bench_net — the network model's speed (figures, never assertions): one
 * iteration in --full mode (every rank, every flow on the topology graph),
 * one core, the best of --runs runs (this VM's speed drifts by up to ~40%
 * within minutes: every run's CPU seconds are printed too). Each run is a
 * child process, so that its peak resident memory is its own.
 *
 *   build/tests/bench/bench_net [--quick | --full-scale | --moe] [--runs N]
 *   (N: 1..20, default 2; --full-scale: default 1; --moe: the MoE case alone)
 *
 * Cases (with the CPU time each should take): the 1T-parameter GPT
 * (megatron-1t preset: 128 layers, hidden 25600, 160 heads, seq 2048; 3072
 * A100s, t 8, p 64, d 6, B 3072, b 1, interleaved; target <= 10 s), then the
 * Llama-3-405B shape (llama3-405b preset: 126 layers, hidden 16384, 128
 * heads, 8 KV groups, FFN 53248, seq 8192; H100s, t 8, p 16) at growing
 * data-parallel size d with the batch growing along (B = 32 d, 32
 * micro-batches per pipeline as in the preset's 8192-GPU layout, so tasks
 * and events grow linearly with the GPUs): 8192 and 16384 GPUs by default;
 * 8192 to 131072 with --full-scale (targets: 65536 GPUs <= 30 s, 131072 <=
 * 60 s, each under 4 GB; doubling the GPUs at most 2.2x the time), and a
 * DeepSeek-V3-shaped MoE run (below; target <= 60 s with --full, whose
 * every dispatch and combine all-to-all is a set of flows, the symmetric mode
 * with flows <= 1 s, printed as sym_s, and the default closed-form mode <= 1
 * s, printed as def_s). --quick runs GPT-3 175B on
 * 1024 A100s instead.
 *
 * The DeepSeek-V3 case: the deepseek-v3 preset on H100s ("--model
 * deepseek-v3 --gpu H100-SXM5-80GB": 2048 GPUs, 61 layers, hidden 7168,
 * 128 heads with multi-latent attention (q_lora 1536, kv_lora 512), FFN
 * 18432 in the first 3 (dense) layers, 256 routed experts of FFN 2048,
 * top-8 with group-limited routing (4 of 8 groups), one shared expert
 * (2048), seq 4096, vocabulary 129280, p 16 (4 and 1 layers on the first
 * and last stage), ep 64, t 1, B 15360, b 1, the alltoall dispatcher, the
 * default routing skew (so simulate also runs it under forced balance)).
 * Until MLA simulated, the case was this shape with standard attention
 * (128 heads of 56) and without group-limited routing.
 *
 * Printed per case: CPU seconds of the best run, its wall seconds, engine
 * tasks and events, events/s, flows, flow-rate updates and updates/s (both
 * per CPU second of the best run), ns of CPU per event, peak resident
 * memory, the ratio of CPU time to the case before (x prev), the CPU time
 * of the symmetric mode with flows (--network-flows; target <= 0.5 s at any
 * size for the dense cases), that of the default mode (def_s), the predicted iteration time in the symmetric and the full mode,
 * and the CPU seconds of every run. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sim/config/config.h"
#include "sim/config/flags.h"
#include "sim/core/simulate.h"
#include "sim/net/net_simulate.h"
#include "sim/util/opt.h"

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    int rc;
    double wall_s, cpu_s, iter_s, rss_mib;
    unsigned long long tasks, events, flows, updates;
    char msg[ERR_MSG_BYTES];
} outcome;

/* Run argv (flags as trainsim takes them) once in this process. */
static void run_here(int argc, char **argv, outcome *o)
{
    config c;
    flags_state fs;
    opt_table t;
    net_sim_opts no;
    net_simulate *ns = NULL;
    simulate_result *r = NULL;
    ts_err err;
    err_clear(&err);
    memset(o, 0, sizeof *o);
    opt_table_init(&t, "bench", "");
    int rc = flags_register(&fs, &t, &c, &err);
    if (!rc)
        rc = net_sim_opts_register(&no, &t, &err);
    if (!rc)
        rc = flags_parse(&fs, &t, argc, argv, &err);
    if (!rc)
        rc = flags_finish(&fs, &t, &err);
    double t0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    if (!rc && net_sim_opts_active(&no)) /* else the default mode */
        rc = net_simulate_new(&c, &no, &ns, &err);
    if (!rc) {
        simulate_opts so = {.net = ns ? net_simulate_hooks(ns) : NULL};
        rc = simulate_run(&c, &so, &r, &err);
    }
    if (!rc) {
        o->wall_s = clock_s(CLOCK_MONOTONIC) - t0;
        o->cpu_s = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
        net_engine_stats st = ns ? net_simulate_stats(ns) : (net_engine_stats){0};
        o->iter_s = (double)r->iteration_ns * 1e-9;
        o->tasks = r->tasks;
        o->events = r->events;
        o->flows = st.flows.flows_started;
        o->updates = st.flows.rate_updates;
        struct rusage ru;
        if (getrusage(RUSAGE_SELF, &ru) == 0)
            o->rss_mib = (double)ru.ru_maxrss / 1024.0; /* Linux: KiB */
    }
    o->rc = rc;
    if (rc)
        memcpy(o->msg, err.msg, sizeof o->msg);
    simulate_result_free(r);
    net_simulate_free(ns);
    if (!rc)
        config_free(&c);
    flags_release(&fs);
    opt_table_free(&t);
}

/* Run argv in a child process (its own peak memory); 0 on success. */
static int run(int argc, char **argv, outcome *o)
{
    int fd[2];
    memset(o, 0, sizeof *o);
    o->rc = 1;
    (void)fflush(stdout);
    (void)fflush(stderr);
    if (pipe(fd) != 0) {
        snprintf(o->msg, sizeof o->msg, "pipe: %s", strerror(errno));
        return 1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(o->msg, sizeof o->msg, "fork: %s", strerror(errno));
        close(fd[0]);
        close(fd[1]);
        return 1;
    }
    if (pid == 0) {
        close(fd[0]);
        outcome mine;
        run_here(argc, argv, &mine);
        ssize_t w = write(fd[1], &mine, sizeof mine);
        _exit(w == (ssize_t)sizeof mine ? 0 : 1);
    }
    close(fd[1]);
    size_t got = 0;
    while (got < sizeof *o) {
        ssize_t n = read(fd[0], (char *)o + got, sizeof *o - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (got != sizeof *o) {
        o->rc = 1;
        snprintf(o->msg, sizeof o->msg, "the run died (status %d; out of memory?)", status);
    }
    return o->rc;
}

typedef struct {
    char name[80];
    double target_s;
    char *argv[64];
    char buf[2][24]; /* numbers the argv points to */
} bench_case;

static void case_1t(bench_case *k)
{
    memset(k, 0, sizeof *k);
    snprintf(k->name, sizeof k->name, "GPT 1T, 3072 x A100 (t8 p64 d6, interleaved)");
    k->target_s = 10;
    char *av[] = {"bench", "--model", "megatron-1t", NULL};
    memcpy(k->argv, av, sizeof av);
}

static void case_405b(bench_case *k, int gpus, double target_s)
{
    memset(k, 0, sizeof *k);
    int d = gpus / 128;
    snprintf(k->name, sizeof k->name, "Llama-3-405B shape, %d x H100 (t8 p16 d%d, B %d)", gpus, d, 32 * d);
    k->target_s = target_s;
    snprintf(k->buf[0], sizeof k->buf[0], "%d", gpus);
    snprintf(k->buf[1], sizeof k->buf[1], "%d", 32 * d);
    char *av[] = {"bench",  "--model", "llama3-405b",         "--gpu",   "H100-SXM5-80GB",
                  "--gpus", k->buf[0], "--global-batch-size", k->buf[1], NULL};
    memcpy(k->argv, av, sizeof av);
}

static void case_dsv3(bench_case *k)
{
    memset(k, 0, sizeof *k);
    snprintf(k->name, sizeof k->name, "DeepSeek-V3 preset (MoE, MLA), 2048 x H100 (p16 ep64)");
    k->target_s = 60;
    char *av[] = {"bench", "--model", "deepseek-v3", "--gpu", "H100-SXM5-80GB", NULL};
    _Static_assert(sizeof av <= sizeof k->argv, "room for the flags");
    memcpy(k->argv, av, sizeof av);
}

static void case_175b(bench_case *k)
{
    memset(k, 0, sizeof *k);
    snprintf(k->name, sizeof k->name, "GPT-3 175B, 1024 x A100 (t8 p16 d8, interleaved)");
    char *av[] = {"bench", NULL};
    memcpy(k->argv, av, sizeof av);
}

int main(int argc, char **argv)
{
    bool quick = false, scale = false, moe = false;
    int runs = 0;
    for (int i = 1; i < argc; i++) {
        char *end = NULL;
        if (!strcmp(argv[i], "--quick")) {
            quick = true;
        } else if (!strcmp(argv[i], "--full-scale")) {
            scale = true;
        } else if (!strcmp(argv[i], "--moe")) {
            moe = true;
        } else if (!strcmp(argv[i], "--runs") && i + 1 < argc) {
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 1 || v > 20) {
                fprintf(stderr, "bench_net: --runs '%s': expected a whole number of runs in 1..20\n", argv[i]);
                return 2;
            }
            runs = (int)v;
        } else {
            fprintf(stderr,
                    "bench_net: unknown argument '%s'\nusage: bench_net [--quick | --full-scale | --moe] [--runs N]  "
                    "(N: 1..20, default 2; 1 with --full-scale)\n",
                    argv[i]);
            return 2;
        }
    }
    if (quick + scale + moe > 1) {
        fprintf(stderr, "bench_net: --quick, --full-scale and --moe exclude each other\n");
        return 2;
    }
    if (runs == 0)
        runs = scale ? 1 : 2;
    bench_case cases[10];
    int n_cases = 0;
    if (quick) {
        case_175b(&cases[n_cases++]);
    } else if (moe) {
        case_dsv3(&cases[n_cases++]);
    } else {
        case_1t(&cases[n_cases++]);
        int top = scale ? 131072 : 16384;
        for (int g = 8192; g <= top; g *= 2)
            case_405b(&cases[n_cases++], g, g == 65536 ? 30 : g == 131072 ? 60 : 0);
        case_dsv3(&cases[n_cases++]);
    }
    printf("%-56s %7s %7s %6s %10s %10s %10s %9s %10s %10s %7s %8s %6s %7s %6s %9s %9s  %s\n", "configuration (--full)",
           "cpu_s", "wall_s", "target", "tasks", "events", "events/s", "flows", "updates", "updates/s", "ns/ev",
           "rss_MiB", "x_prev", "sym_s", "def_s", "iter_sym", "iter_full", "cpu_s of each run");
    double prev_cpu = 0;
    for (int k = 0; k < n_cases; k++) {
        char *av[66];
        int n = 0;
        while (cases[k].argv[n]) {
            av[n] = cases[k].argv[n];
            n++;
        }
        outcome def, sym, full = {0};
        av[n] = NULL;
        if (run(n, av, &def)) {
            fprintf(stderr, "bench_net: %s, default mode: %s\n", cases[k].name, def.msg);
            return 1;
        }
        av[n] = "--network-flows";
        if (run(n + 1, av, &sym)) {
            fprintf(stderr, "bench_net: %s, --network-flows: %s\n", cases[k].name, sym.msg);
            return 1;
        }
        av[n] = "--full";
        char each[20 * 12] = "";
        for (int r = 0; r < runs; r++) {
            outcome o;
            fprintf(stderr, "bench_net: %s: run %d of %d ...\n", cases[k].name, r + 1, runs);
            if (run(n + 1, av, &o)) {
                fprintf(stderr, "bench_net: %s: %s\n", cases[k].name, o.msg);
                return 1;
            }
            snprintf(each + strlen(each), sizeof each - strlen(each), "%s%.2f", r ? " " : "", o.cpu_s);
            if (r == 0 || o.cpu_s < full.cpu_s)
                full = o;
        }
        char ratio[16] = "-";
        /* the 405B series: the time against the case with half the GPUs */
        if (k > 0 && strstr(cases[k - 1].name, "405B") && strstr(cases[k].name, "405B"))
            snprintf(ratio, sizeof ratio, "%.2f", full.cpu_s / prev_cpu);
        printf("%-56s %7.2f %7.2f %6.0f %10llu %10llu %10.3g %9llu %10llu %10.3g %7.1f %8.0f %6s %7.2f %6.2f %9.3f "
               "%9.3f  %s\n",
               cases[k].name, full.cpu_s, full.wall_s, cases[k].target_s, full.tasks, full.events,
               (double)full.events / full.cpu_s, full.flows, full.updates, (double)full.updates / full.cpu_s,
               full.cpu_s * 1e9 / (double)(full.events ? full.events : 1), full.rss_mib, ratio, sym.cpu_s, def.cpu_s,
               sym.iter_s, full.iter_s, each);
        (void)fflush(stdout); /* progress */
        prev_cpu = full.cpu_s;
    }
    return 0;
}
