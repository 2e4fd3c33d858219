/* trainsim sweep — simulate every configuration of a CSV (one per row, any
 * trainsim flag as a column), appending results to --out, resumably
 * (sweep.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sim/cli/cmd.h"
#include "sim/config/flags.h"
#include "sim/core/simulate.h"
#include "sim/search/sweep.h"
#include "sim/util/csvio.h"
#include "sim/util/opt.h"

static const char *const RESULT_COLUMNS[] = {
    "iteration_s",
    "tokens_per_s",
    "model_tflops_per_gpu",
    "megatron_tflops_per_gpu",
    "mfu",
    "hfu",
    "peak_mem_gib",
    "fits",
    "bubble_fraction",
    "exposed_tp_s",
    "exposed_pp_s",
    "exposed_dp_s",
    "train_days",
    "train_gpu_hours",
};
#define NRESULTS (sizeof RESULT_COLUMNS / sizeof RESULT_COLUMNS[0])

/* v as every CSV writer carries numbers (csvio_fmt_double: integers as
 * integers, others with the digits that round-trip), in a malloc'ed string. */
static char *fmt(double v)
{
    char buf[CSVIO_NUM_BYTES];
    return strdup(csvio_fmt_double(buf, sizeof buf, v));
}

/* The flags a row may set, i.e. the valid input columns: the shared flags
 * (flags.h) plus --train-tokens and --calibration. The table's targets point
 * into the struct, so it stays where row_flags_init built it; the caller
 * frees it with row_flags_free (also after a failed init). */
typedef struct {
    config c;
    flags_state fs;
    opt_table t;
    double train_tokens;
    const char *calibration;
} row_flags;

static int row_flags_init(row_flags *rf, ts_err *err)
{
    rf->train_tokens = 0;
    rf->calibration = NULL;
    opt_table_init(&rf->t, "trainsim sweep (row)", "");
    int rc = flags_register(&rf->fs, &rf->t, &rf->c, err);
    if (rc == TS_OK)
        rc = opt_add(&rf->t,
                     &(opt_spec){.name = "--train-tokens",
                                 .type = OPT_DOUBLE,
                                 .target = &rf->train_tokens,
                                 .min = 0,
                                 .max = 1e18,
                                 .help = "tokens to train"},
                     err);
    if (rc == TS_OK)
        rc = opt_add(
            &rf->t,
            &(opt_spec){
                .name = "--calibration", .type = OPT_STRING, .target = &rf->calibration, .help = "calibration CSV"},
            err);
    return rc;
}

static void row_flags_free(row_flags *rf)
{
    flags_release(&rf->fs);
    opt_table_free(&rf->t);
}

/* An input column (its name without "--") must be a flag a row can set;
 * checked once per column before any row runs (sweep_evaluator). user: the
 * row_flags of the sweep. */
static int check_column(void *user, const char *name, ts_err *err)
{
    const row_flags *rf = user;
    char flag[128];
    int n = snprintf(flag, sizeof flag, "--%s", name);
    for (int k = 2; k < n && (size_t)k < sizeof flag; k++) /* as a row's flag: megatron_script = megatron-script */
        if (flag[k] == '_')
            flag[k] = '-';
    if (n > 0 && (size_t)n < sizeof flag && opt_find(&rf->t, flag))
        return TS_OK;
    const char *near = opt_nearest(&rf->t, flag);
    return err_set(err, TS_EINVAL,
                   "not a flag a row can set; did you mean %s? (a column is a "
                   "trainsim flag with or without '--': the shared flags of `trainsim config --help`, "
                   "or train-tokens, calibration)",
                   near ? near + 2 : "tensor-model-parallel-size");
}

/* One row: the shared flags (flags.h) plus --train-tokens and
 * --calibration, resolved and validated, then one simulated iteration. */
static int eval_row(void *user, int argc, char **argv, char **cells, ts_err *err)
{
    (void)user;
    row_flags rf;
    simulate_result *r = NULL;
    int rc = row_flags_init(&rf, err);
    if (rc == TS_OK)
        rc = flags_parse(&rf.fs, &rf.t, argc, argv, err);
    if (rc == TS_OK && rf.t.help_requested)
        rc = err_set(err, TS_EINVAL, "a sweep row cannot ask for --help");
    if (rc == TS_OK)
        rc = flags_finish(&rf.fs, &rf.t, err);
    if (rc) {
        row_flags_free(&rf);
        return rc;
    }
    simulate_opts so = {.calibration_path = rf.calibration, .train_tokens = rf.train_tokens};
    rc = simulate_run(&rf.c, &so, &r, err);
    if (rc == TS_OK) {
        double ex[SIMULATE_COMM_KINDS];
        for (int k = 0; k < SIMULATE_COMM_KINDS; k++)
            ex[k] = r->exposed_ns[k] * 1e-9;
        char *v[NRESULTS] = {
            fmt(r->iteration_ns * 1e-9),
            fmt(r->tokens_per_s),
            fmt(r->model_tflops_per_gpu),
            fmt(r->megatron_tflops_per_gpu),
            fmt(r->mfu),
            fmt(r->hfu),
            fmt(r->peak_bytes / (1024.0 * 1024.0 * 1024.0)),
            strdup(r->fits ? "1" : "0"),
            fmt(r->bubble_fraction),
            fmt(ex[SIMULATE_COMM_TP]),
            fmt(ex[SIMULATE_COMM_PP]),
            fmt(ex[SIMULATE_COMM_DP]),
            rf.train_tokens > 0 ? fmt(r->train_s / 86400.0) : strdup(""),
            rf.train_tokens > 0 ? fmt(r->train_gpu_hours) : strdup(""),
        };
        for (size_t i = 0; i < NRESULTS; i++) {
            cells[i] = v[i];
            if (!v[i])
                rc = err_set(err, TS_ENOMEM, "out of memory");
        }
    }
    simulate_result_free(r);
    config_free(&rf.c);
    row_flags_free(&rf);
    return rc;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct {
    double start;
    size_t first_done; /* rows done when the run started (skipped) */
    bool tty, quiet;
} bar;

/* A progress bar with ETA, on a terminal only. */
static void on_progress(void *user, size_t done, size_t total, size_t skipped)
{
    bar *b = user;
    if (b->quiet || !b->tty || total == 0)
        return;
    if (b->start == 0) {
        b->start = now_s();
        b->first_done = skipped;
    }
    double el = now_s() - b->start;
    size_t ran = done - b->first_done;
    double eta = ran ? el * (double)(total - done) / (double)ran : 0;
    int width = 30, fill = (int)(width * (double)done / (double)total);
    char line[64];
    for (int i = 0; i < width; i++)
        line[i] = i < fill ? '#' : '.';
    line[width] = '\0';
    fprintf(stderr, "\rsweep [%s] %zu/%zu rows (%zu resumed) %.0f s, ETA %.0f s ", line, done, total, skipped, el, eta);
    if (done == total)
        fputc('\n', stderr);
}

int cmd_sweep(int argc, char **argv)
{
    const char *out = NULL;
    int threads = 1;
    bool quiet = false;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    threads = ncpu > 0 ? (int)ncpu : 1;
    opt_table t;
    opt_table_init(&t, "trainsim sweep FILE.csv",
                   "Simulate every row of FILE.csv: its header names trainsim flags "
                   "(tensor-model-parallel-size, gpus, model, schedule, ... with or without "
                   "'--'; also train-tokens and calibration), each row is one configuration "
                   "(empty cells keep the default). Results are appended to --out, one line per "
                   "row with a key; a killed sweep restarted with the same arguments skips "
                   "the rows already there and loses or duplicates none.");
    t.max_positional = 1;
    ts_err err;
    err_clear(&err);
    int rc = opt_add(&t,
                     &(opt_spec){.name = "--out",
                                 .type = OPT_STRING,
                                 .target = &out,
                                 .metavar = "RESULTS.csv",
                                 .defval = "required",
                                 .help = "results CSV (appended; created if missing)"},
                     &err);
    if (rc == TS_OK)
        rc = opt_add(&t,
                     &(opt_spec){.name = "--threads",
                                 .type = OPT_INT,
                                 .target = &threads,
                                 .min = 1,
                                 .max = 1024,
                                 .unit = "threads",
                                 .defval = "online CPUs",
                                 .help = "rows simulated at once"},
                     &err);
    if (rc == TS_OK)
        rc = opt_add(&t, &(opt_spec){.name = "--quiet", .type = OPT_BOOL, .target = &quiet, .help = "no progress bar"},
                     &err);
    if (rc == TS_OK)
        rc = opt_parse(&t, argc, argv, &err);
    if (rc == TS_OK && t.help_requested) {
        opt_help(&t, stdout);
        opt_table_free(&t);
        return 0;
    }
    if (rc == TS_OK && t.n_positional != 1)
        rc = err_set(&err, TS_EINVAL, "give the input CSV: trainsim sweep FILE.csv --out RESULTS.csv");
    if (rc == TS_OK && !out)
        rc = err_set(&err, TS_EINVAL, "--out RESULTS.csv is required (where results are appended)");
    if (rc) {
        fprintf(stderr, "trainsim sweep: %s\n", err.msg);
        opt_table_free(&t);
        return cmd_exit_status(rc);
    }
    bar b = {.tty = isatty(2), .quiet = quiet};
    sweep_opts o = {
        .input = t.positional[0], .output = out, .threads = threads, .progress = on_progress, .progress_user = &b};
    /* the valid columns, for check_column (eval_row builds its own table
     * per row: rows run on several threads) */
    row_flags cols;
    sweep_stats st;
    rc = row_flags_init(&cols, &err);
    sweep_evaluator ev = {NRESULTS, RESULT_COLUMNS, eval_row, &cols, check_column};
    if (rc == TS_OK)
        rc = sweep_run(&o, &ev, &st, &err);
    row_flags_free(&cols);
    if (rc) {
        fprintf(stderr, "trainsim sweep: %s\n", err.msg);
        opt_table_free(&t);
        return cmd_exit_status(rc);
    }
    if (st.stale_lock_pid)
        fprintf(stderr, "trainsim sweep: note: took over %s.lock, left by sweep PID %ld, which is no longer running\n",
                out, st.stale_lock_pid);
    printf("sweep: %zu rows: %zu already in %s, %zu simulated (%zu failed: see the error "
           "column)%s\n",
           st.rows, st.skipped, out, st.ran, st.failed,
           st.repaired ? "; a torn last line left by an interrupted run was cut off" : "");
    opt_table_free(&t);
    return 0;
}
