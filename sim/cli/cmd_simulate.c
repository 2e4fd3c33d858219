/* trainsim simulate — predict one training iteration by discrete-event
 * simulation and report it (text on stdout; --csv, --trace files). */
#include <stdio.h>
#include <string.h>

#include "sim/cli/cmd.h"
#include "sim/config/config.h"
#include "sim/config/flags.h"
#include "sim/core/report.h"
#include "sim/core/simulate.h"
#include "sim/core/trace.h"
#include "sim/net/net_simulate.h"
#include "sim/util/opt.h"

int cmd_simulate(int argc, char **argv)
{
    config c;
    memset(&c, 0, sizeof c);
    flags_state fs;
    opt_table t;
    ts_err err;
    err_clear(&err);
    double train_tokens = 0;
    const char *csv = NULL, *trace = NULL, *calib = NULL;
    simulate_result *r = NULL;
    net_sim_opts no; /* network model flags */
    net_simulate *ns = NULL;
    int status = 1, rc;

    opt_table_init(&t, "trainsim simulate",
                   "Predict one training iteration (time, pipeline bubble, exposed communication, "
                   "memory per GPU, tokens/s, TFLOP/s, MFU) by simulating it event by event. "
                   "With no flags: GPT-3 175B on 1024 A100 80GB GPUs.");
    if ((rc = flags_register(&fs, &t, &c, &err)) || (rc = opt_section(&t, "Simulation and outputs", &err)) ||
        (rc = opt_add(&t,
                      &(opt_spec){.name = "--train-tokens",
                                  .type = OPT_DOUBLE,
                                  .target = &train_tokens,
                                  .min = 0,
                                  .max = 1e18,
                                  .unit = "tokens",
                                  .defval = "0 (not reported)",
                                  .help = "also report the time and GPU-hours to train this many tokens"},
                      &err)) ||
        (rc = opt_add(&t,
                      &(opt_spec){.name = "--csv",
                                  .type = OPT_STRING,
                                  .target = &csv,
                                  .metavar = "FILE",
                                  .defval = "none",
                                  .help = "write the results as CSV (scope,metric,value,unit); - for stdout"},
                      &err)) ||
        (rc = opt_add(
             &t,
             &(opt_spec){
                 .name = "--trace",
                 .type = OPT_STRING,
                 .target = &trace,
                 .metavar = "FILE.json",
                 .defval = "none",
                 .help = "write a Chrome/Perfetto trace (one process per rank, one track per stream, memory counter)"},
             &err)) ||
        (rc = opt_add(&t,
                      &(opt_spec){.name = "--calibration",
                                  .type = OPT_STRING,
                                  .target = &calib,
                                  .metavar = "FILE",
                                  .defval = "built-in tables",
                                  .help = "efficiency tables fitted from measured kernel times (calibration CSV)"},
                      &err)) ||
        (rc = net_sim_opts_register(&no, &t, &err))) {
        fprintf(stderr, "trainsim simulate: %s\n", err.msg);
        status = cmd_exit_status(rc);
        goto out;
    }
    if ((rc = opt_parse(&t, argc, argv, &err))) {
        fprintf(stderr, "trainsim simulate: %s\n", err.msg);
        status = cmd_exit_status(rc);
        goto out;
    }
    if (t.help_requested) {
        opt_help(&t, stdout);
        status = 0;
        goto out;
    }
    if ((rc = flags_finish(&fs, &t, &err))) {
        fprintf(stderr, "trainsim simulate: %s\n", err.msg);
        status = cmd_exit_status(rc);
        goto out;
    }
    simulate_opts so = {.calibration_path = calib, .train_tokens = train_tokens, .keep_trace = trace != NULL};
    if (net_sim_opts_active(&no)) {
        if ((rc = net_simulate_new(&c, &no, &ns, &err))) {
            fprintf(stderr, "trainsim simulate: %s\n", err.msg);
            status = cmd_exit_status(rc);
            goto out;
        }
        if (net_simulate_note(ns)[0])
            fprintf(stderr, "trainsim simulate: note: %s\n", net_simulate_note(ns));
        so.net = net_simulate_hooks(ns);
    }
    if ((rc = simulate_run(&c, &so, &r, &err))) {
        fprintf(stderr, "trainsim simulate: %s\n", err.msg);
        status = cmd_exit_status(rc);
        goto out;
    }
    if (!csv || strcmp(csv, "-") != 0)
        report_text(r, stdout);
    if (ns && (!csv || strcmp(csv, "-") != 0)) {
        net_engine_stats st = net_simulate_stats(ns);
        printf("network (%s): %llu collectives, %llu p2p, %llu flows, %llu flow-rate updates\n",
               no.full ? "full: every rank and flow" : "flows, interchangeable ranks once",
               (unsigned long long)st.collectives, (unsigned long long)st.p2p,
               (unsigned long long)st.flows.flows_started, (unsigned long long)st.flows.rate_updates);
    }
    if (csv && (rc = report_csv_write(r, csv, &err))) {
        fprintf(stderr, "trainsim simulate: --csv: %s\n", err.msg);
        status = cmd_exit_status(rc);
        goto out;
    }
    if (trace && r->tasks > 100000) /* a large trace takes seconds to write */
        fprintf(stderr, "trainsim simulate: writing the trace of %llu tasks to %s ...\n", (unsigned long long)r->tasks,
                trace);
    if (trace && (rc = trace_write(r, trace, &err))) {
        fprintf(stderr, "trainsim simulate: --trace: %s\n", err.msg);
        status = cmd_exit_status(rc);
        goto out;
    }
    status = 0;
out:
    simulate_result_free(r);
    net_simulate_free(ns);
    config_free(&c);
    opt_table_free(&t);
    return status;
}
