/* bench_net — the network model's speed (figures, never assertions): one
 * iteration in --full mode (every rank, every flow on the topology graph),
 * one core, the best of --runs runs (this VM's speed drifts by up to ~40%
 * within minutes: every run's CPU seconds are printed too).
 *
 *   build/tests/bench/bench_net [--quick] [--runs N]   (N: 1..20, default 3)
 *
 * Cases (with the speed each should reach): the 1T-parameter GPT (megatron-1t
 * preset: 128 layers, hidden 25600, 160 heads, seq 2048; 3072 A100s, t 8,
 * p 64, d 6, B 3072, b 1, interleaved) in --full (target <= 10 s), and a
 * Llama-3-405B-shaped run on 8192 H100s (llama3-405b preset: 126 layers,
 * hidden 16384, 128 heads, 8 KV groups, FFN 53248, seq 8192; t 8, p 16,
 * d 64; target <= 30 s). --quick runs GPT-3 175B on 1024 A100s instead
 * (the full-size cases need ~6-10 GB of memory).
 *
 * Printed per case: wall and CPU seconds of the best run, engine tasks and
 * events, events/s, flows, flow-rate updates and updates/s (both per CPU
 * second of the best run), the predicted iteration time in the symmetric and
 * the full mode, and the CPU seconds of every run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    double wall_s, cpu_s, iter_s;
    unsigned long long tasks, events, flows, updates;
} outcome;

/* Run argv (flags as trainsim takes them) once; 0 on success. */
static int run(int argc, char **argv, outcome *o, ts_err *err)
{
    config c;
    flags_state fs;
    opt_table t;
    net_sim_opts no;
    net_simulate *ns = NULL;
    simulate_result *r = NULL;
    opt_table_init(&t, "bench", "");
    int rc = flags_register(&fs, &t, &c, err);
    if (!rc)
        rc = net_sim_opts_register(&no, &t, err);
    if (!rc)
        rc = flags_parse(&fs, &t, argc, argv, err);
    if (!rc)
        rc = flags_finish(&fs, &t, err);
    double t0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    if (!rc)
        rc = net_simulate_new(&c, &no, &ns, err);
    if (!rc) {
        simulate_opts so = {.net = net_simulate_hooks(ns)};
        rc = simulate_run(&c, &so, &r, err);
    }
    if (!rc) {
        o->wall_s = clock_s(CLOCK_MONOTONIC) - t0;
        o->cpu_s = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
        net_engine_stats st = net_simulate_stats(ns);
        o->iter_s = (double)r->iteration_ns * 1e-9;
        o->tasks = r->tasks;
        o->events = r->events;
        o->flows = st.flows.flows_started;
        o->updates = st.flows.rate_updates;
    }
    simulate_result_free(r);
    net_simulate_free(ns);
    if (!rc)
        config_free(&c);
    flags_release(&fs);
    opt_table_free(&t);
    return rc;
}

int main(int argc, char **argv)
{
    bool quick = false;
    int runs = 3;
    for (int i = 1; i < argc; i++) {
        char *end = NULL;
        if (!strcmp(argv[i], "--quick")) {
            quick = true;
        } else if (!strcmp(argv[i], "--runs") && i + 1 < argc) {
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 1 || v > 20) {
                fprintf(stderr, "bench_net: --runs '%s': expected a whole number of runs in 1..20\n", argv[i]);
                return 2;
            }
            runs = (int)v;
        } else {
            fprintf(stderr,
                    "bench_net: unknown argument '%s'\nusage: bench_net [--quick] [--runs N]  (N: 1..20, "
                    "default 3)\n",
                    argv[i]);
            return 2;
        }
    }
    struct {
        const char *name;
        double target_s;
        char *argv[8];
    } cases[] = {
        {"GPT 1T, 3072 x A100 (t8 p64 d6, interleaved), --full", 10, {"bench", "--model", "megatron-1t", NULL}},
        {"Llama-3-405B shape, 8192 x H100 (t8 p16 d64), --full",
         30,
         {"bench", "--model", "llama3-405b", "--gpu", "H100-SXM5-80GB", NULL}},
        {"GPT-3 175B, 1024 x A100 (t8 p16 d8, interleaved), --full", 0, {"bench", NULL}},
    };
    size_t first = quick ? 2 : 0, last = quick ? 3 : 2;
    printf("%-58s %7s %7s %6s %10s %10s %9s %9s %10s %9s %9s  %s\n", "configuration", "wall_s", "cpu_s", "target",
           "tasks", "events/s", "flows", "updates", "updates/s", "iter_sym", "iter_full", "cpu_s of each run");
    for (size_t k = first; k < last; k++) {
        char *av[12];
        int n = 0;
        while (cases[k].argv[n]) {
            av[n] = cases[k].argv[n];
            n++;
        }
        outcome sym, full = {0};
        ts_err err;
        av[n] = "--network-flows";
        if (run(n + 1, av, &sym, &err)) {
            fprintf(stderr, "bench_net: %s: %s\n", cases[k].name, err.msg);
            return 1;
        }
        av[n] = "--full";
        char each[20 * 12] = "";
        for (int r = 0; r < runs; r++) {
            outcome o;
            fprintf(stderr, "bench_net: %s: run %d of %d ...\n", cases[k].name, r + 1, runs);
            if (run(n + 1, av, &o, &err)) {
                fprintf(stderr, "bench_net: %s: %s\n", cases[k].name, err.msg);
                return 1;
            }
            snprintf(each + strlen(each), sizeof each - strlen(each), "%s%.2f", r ? " " : "", o.cpu_s);
            if (r == 0 || o.cpu_s < full.cpu_s)
                full = o;
        }
        printf("%-58s %7.2f %7.2f %6.0f %10llu %10.3g %9llu %9llu %10.3g %9.3f %9.3f  %s\n", cases[k].name, full.wall_s,
               full.cpu_s, cases[k].target_s, full.tasks, (double)full.events / full.cpu_s, full.flows, full.updates,
               (double)full.updates / full.cpu_s, sym.iter_s, full.iter_s, each);
        (void)fflush(stdout); /* progress */
    }
    return 0;
}
