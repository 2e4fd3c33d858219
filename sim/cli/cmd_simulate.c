/* trainsim simulate — predict one training iteration by discrete-event
 * simulation and report it (text on stdout; --csv, --trace files). */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "sim/cli/cmd.h"
#include "sim/config/config.h"
#include "sim/config/flags.h"
#include "sim/core/report.h"
#include "sim/core/simulate.h"
#include "sim/core/trace.h"
#include "sim/net/net_simulate.h"
#include "sim/util/afile.h"
#include "sim/util/opt.h"

/* The command's own flags, beside the shared Megatron-LM set (flags.h). */
typedef struct {
    double train_tokens;
    const char *csv, *trace, *calib;
    net_sim_opts no; /* network model flags */
} simulate_args;

/* Adds every flag of the command to t: the shared set (into *c, with *fs),
 * the outputs and the network model's (into *a). */
static int simulate_add_flags(opt_table *t, flags_state *fs, config *c, simulate_args *a, ts_err *err)
{
    int rc;
    if ((rc = flags_register(fs, t, c, err)) || (rc = opt_section(t, "Simulation and outputs", err)) ||
        (rc = opt_add(t,
                      &(opt_spec){.name = "--train-tokens",
                                  .type = OPT_DOUBLE,
                                  .target = &a->train_tokens,
                                  .min = 0,
                                  .max = 1e18,
                                  .unit = "tokens",
                                  .defval = "0 (not reported)",
                                  .help = "also report the time and GPU-hours to train this many tokens"},
                      err)) ||
        (rc = opt_add(t,
                      &(opt_spec){.name = "--csv",
                                  .type = OPT_STRING,
                                  .target = &a->csv,
                                  .metavar = "FILE",
                                  .defval = "none",
                                  .help = "write the results as CSV (scope,metric,value,unit); - for stdout"},
                      err)) ||
        (rc = opt_add(
             t,
             &(opt_spec){
                 .name = "--trace",
                 .type = OPT_STRING,
                 .target = &a->trace,
                 .metavar = "FILE.json",
                 .defval = "none",
                 .help = "write a Chrome/Perfetto trace (one process per rank, one track per stream, memory counter)"},
             err)) ||
        (rc = opt_add(t,
                      &(opt_spec){.name = "--calibration",
                                  .type = OPT_STRING,
                                  .target = &a->calib,
                                  .metavar = "FILE",
                                  .defval = "built-in tables",
                                  .help = "efficiency tables fitted from measured kernel times (calibration CSV)"},
                      err)) ||
        (rc = net_sim_opts_register(&a->no, t, err)))
        return rc;
    return TS_OK;
}

/* Adds and parses the flags (string flags then point into *fs, which the
 * caller releases) and resolves the configuration into *c; after
 * --help, which it prints, *help is true and *c is not resolved. */
static int simulate_parse(opt_table *t, flags_state *fs, config *c, simulate_args *a, int argc, char **argv, bool *help,
                          ts_err *err)
{
    int rc = simulate_add_flags(t, fs, c, a, err);
    if (!rc)
        rc = flags_parse(fs, t, argc, argv, err);
    mscript_write_notes(fs->script, "trainsim simulate", stderr); /* what the script left unresolved, if any */
    if (!rc)
        flags_note_ignored(fs, stderr);
    if (!rc && t->help_requested) {
        opt_help(t, stdout);
        *help = true;
        return TS_OK;
    }
    if (!rc)
        rc = flags_finish(fs, t, err);
    if (!rc)
        flags_note_fusions(c, stderr);
    return rc;
}

/* Simulates the iteration, with the network model when its flags ask for it
 * (its note, if any, on stderr). The caller frees *ns and *r. */
static int simulate_iteration(config *c, const simulate_args *a, net_simulate **ns, simulate_result **r, ts_err *err)
{
    simulate_opts so = {.calibration_path = a->calib, .train_tokens = a->train_tokens, .keep_trace = a->trace != NULL};
    if (net_sim_opts_active(&a->no)) {
        int rc = net_simulate_new(c, &a->no, ns, err);
        if (rc)
            return rc;
        if (net_simulate_note(*ns)[0])
            fprintf(stderr, "trainsim simulate: note: %s\n", net_simulate_note(*ns));
        so.net = net_simulate_hooks(*ns);
    }
    return simulate_run(c, &so, r, err);
}

/* Prints the report and the network model's counts on stdout (unless --csv
 * is -), then writes --csv and --trace; on failure *flag names the flag whose
 * file failed ("--csv: "). */
static int simulate_outputs(const simulate_result *r, const net_simulate *ns, const simulate_args *a, const char **flag,
                            ts_err *err)
{
    int rc = TS_OK;
    const bool text = !a->csv || strcmp(a->csv, "-") != 0;
    if (text)
        report_text(r, stdout);
    else /* stdout carries the CSV: say it on stderr */
        report_fit_line(r, stderr);
    if (ns && text) {
        net_engine_stats st = net_simulate_stats(ns);
        printf("network (%s): %llu collectives, %llu p2p, %llu flows, %llu flow-rate updates\n",
               a->no.full ? "full: every rank and flow" : "flows, interchangeable ranks once",
               (unsigned long long)st.collectives, (unsigned long long)st.p2p,
               (unsigned long long)st.flows.flows_started, (unsigned long long)st.flows.rate_updates);
    }
    if (a->csv && (rc = report_csv_write(r, a->csv, err))) {
        *flag = "--csv: ";
        return rc;
    }
    if (a->trace && r->tasks > 100000) /* a large trace takes seconds to write */
        fprintf(stderr, "trainsim simulate: writing the trace of %llu tasks to %s ...\n", (unsigned long long)r->tasks,
                a->trace);
    if (a->trace && (rc = trace_write(r, a->trace, err)))
        *flag = "--trace: ";
    if (!rc && ns && a->no.link_report)
        rc = net_simulate_link_report(ns, a->no.link_report, text ? stdout : stderr, err);
    return rc;
}

int cmd_simulate(int argc, char **argv)
{
    config c;
    memset(&c, 0, sizeof c);
    simulate_args a;
    memset(&a, 0, sizeof a);
    opt_table t;
    ts_err err;
    err_clear(&err);
    simulate_result *r = NULL;
    net_simulate *ns = NULL;
    const char *flag = ""; /* the output flag an error is about */
    bool help = false;
    flags_state fs;
    memset(&fs, 0, sizeof fs);

    opt_table_init(&t, "trainsim simulate",
                   "Predict one training iteration (time, pipeline bubble, exposed communication, "
                   "memory per GPU, tokens/s, TFLOP/s, MFU) by simulating it event by event. "
                   "With no flags: GPT-3 175B on 1024 A100 80GB GPUs.");
    int rc = simulate_parse(&t, &fs, &c, &a, argc, argv, &help, &err);
    /* output paths are checked before the simulation, not after it */
    if (!rc && !help && a.csv)
        rc = afile_check_writable(a.csv, "--csv", &err);
    if (!rc && !help && a.trace)
        rc = afile_check_writable(a.trace, "--trace", &err);
    if (!rc && !help && a.no.link_report)
        rc = afile_check_writable(a.no.link_report, "--link-report", &err);
    if (!rc && !help)
        rc = simulate_iteration(&c, &a, &ns, &r, &err);
    if (!rc && !help)
        rc = simulate_outputs(r, ns, &a, &flag, &err);
    if (rc)
        fprintf(stderr, "trainsim simulate: %s%s\n", flag, err.msg);
    /* a run that does not fit is reported in full, then exits with its own status */
    int status = rc || help || !r || r->fits ? cmd_exit_status(rc) : CMD_EXIT_DOES_NOT_FIT;
    simulate_result_free(r);
    net_simulate_free(ns);
    config_free(&c);
    flags_release(&fs);
    opt_table_free(&t);
    return status;
}
