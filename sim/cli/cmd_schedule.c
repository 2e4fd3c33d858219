/* trainsim schedule — generate (or import) a pipeline schedule, validate it,
 * print its timeline, time it with fixed op times, export it as CSV. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "sim/cli/cmd.h"
#include "sim/sched/sched.h"
#include "sim/sched/sched_csv.h"
#include "sim/sched/sched_generate.h"
#include "sim/sched/sched_layout.h"
#include "sim/sched/sched_print.h"
#include "sim/sched/sched_time.h"
#include "sim/sched/sched_validate.h"
#include "sim/util/afile.h"
#include "sim/util/opt.h"

static const char *const SCHEDULE_NAMES[] = {"gpipe", "1f1b",      "interleaved", "zb-h1", "zb-h2",
                                             "zb-v",  "dualpipev", "dualpipe",    NULL};

typedef struct {
    int kind;
    int p, m, v, group, layers, first, last;
    int timeline_width;    /* columns */
    double tf, tb, tw, tc; /* ms */
    double ta_f, ta_b;     /* ms: exposed all-to-all of a forward / backward (EP) */
    double max_memory_gib; /* --max-memory */
    const char *export_path, *import_path;
    const char *layout; /* --pipeline-model-parallel-layout, NULL = not given */
    bool validate_only, with_reduce_optim, compute_only, no_timeline;
} sargs;

static int add_flags(opt_table *t, sargs *a, ts_err *err)
{
    const opt_spec specs[] = {
        {.type = OPT_SECTION, .name = "Schedule"},
        {.name = "--schedule",
         .type = OPT_ENUM,
         .target = &a->kind,
         .enum_names = SCHEDULE_NAMES,
         .help = "pipeline schedule: GPipe, 1F1B (PipeDream-Flush), Megatron's interleaved 1F1B, "
                 "zero-bubble ZB-H1, ZB-H2, ZB-V (Qi et al. 2024), DeepSeek-V3's DualPipeV (m >= 2p) and DualPipe (p, "
                 "m even, m >= 2p)"},
        {.name = "--pipeline-model-parallel-size",
         .alias = "-p",
         .type = OPT_INT,
         .target = &a->p,
         .min = 1,
         .max = SCHED_MAX_P,
         .unit = "ranks",
         .help = "pipeline ranks p"},
        {.name = "--num-microbatches",
         .alias = "-m",
         .type = OPT_INT,
         .target = &a->m,
         .min = 1,
         .max = SCHED_MAX_M,
         .unit = "micro-batches",
         .help = "micro-batches per iteration m"},
        {.name = "--num-virtual-stages-per-pipeline-rank",
         .alias = "-v",
         .type = OPT_INT,
         .target = &a->v,
         .min = 1,
         .max = SCHED_MAX_V,
         .unit = "chunks",
         .defval = "1; 2 for interleaved, zb-v and dualpipev",
         .help = "model chunks per rank v (interleaved: any; zb-v, dualpipev: 2; others: 1)"},
        {.name = "--microbatch-group-size-per-virtual-pipeline-stage",
         .type = OPT_INT,
         .target = &a->group,
         .min = 0,
         .max = SCHED_MAX_M,
         .unit = "micro-batches",
         .defval = "0 = p",
         .help = "interleaved: micro-batches run through a chunk before the next chunk (Megatron-core); "
                 "must lie in [p, m]"},
        {.name = "--num-layers",
         .type = OPT_INT,
         .target = &a->layers,
         .min = 0,
         .max = 1000000,
         .unit = "layers",
         .defval = "0 = one per stage",
         .help = "transformer layers, split over the p*v stages"},
        {.name = "--decoder-first-pipeline-num-layers",
         .type = OPT_INT,
         .target = &a->first,
         .min = 0,
         .max = 1000000,
         .unit = "layers",
         .defval = "0 = even",
         .help = "layers of the first stage"},
        {.name = "--decoder-last-pipeline-num-layers",
         .type = OPT_INT,
         .target = &a->last,
         .min = 0,
         .max = 1000000,
         .unit = "layers",
         .defval = "0 = even",
         .help = "layers of the last stage"},
        {.name = "--pipeline-model-parallel-layout",
         .type = OPT_STRING,
         .target = &a->layout,
         .metavar = "LAYOUT",
         .help = "Megatron-core layout of the p*v stages (E embedding, t layer, L loss, | stage boundary, *N "
                 "repeat, ( ) group; chunk-major); sets v = stages / p and the layers of each stage"},
        {.name = "--with-reduce-optim",
         .type = OPT_BOOL,
         .target = &a->with_reduce_optim,
         .help = "add a REDUCE_GRAD per chunk after its last backward and an OPTIM step at the end"},
        {.name = "--compute-only",
         .type = OPT_BOOL,
         .target = &a->compute_only,
         .help = "leave out SEND/RECV actions (torch's compute_only format)"},
        {.type = OPT_SECTION, .name = "Timing (schedule only, no model)"},
        {.name = "--time-f",
         .type = OPT_DOUBLE,
         .target = &a->tf,
         .min = 0,
         .max = 1e9,
         .unit = "ms",
         .help = "forward time of one stage of the v = 1 pipeline (a chunk takes 1/v)"},
        {.name = "--time-b",
         .type = OPT_DOUBLE,
         .target = &a->tb,
         .min = 0,
         .max = 1e9,
         .unit = "ms",
         .help = "backward input-gradient time (Qi et al.'s T_B); a whole B takes T_B + T_W"},
        {.name = "--time-w",
         .type = OPT_DOUBLE,
         .target = &a->tw,
         .min = 0,
         .max = 1e9,
         .unit = "ms",
         .help = "backward weight-gradient time T_W"},
        {.name = "--time-comm",
         .type = OPT_DOUBLE,
         .target = &a->tc,
         .min = 0,
         .max = 1e9,
         .unit = "ms",
         .help = "latency of one point-to-point send"},
        {.name = "--time-a2a-f",
         .type = OPT_DOUBLE,
         .target = &a->ta_f,
         .min = 0,
         .max = 1e9,
         .unit = "ms",
         .help = "expert-parallel all-to-all after each forward of a stage (a chunk takes 1/v); hidden inside "
                 "dualpipev's overlapped F&B pairs, paid in full elsewhere (the timeline leaves it out)"},
        {.name = "--time-a2a-b",
         .type = OPT_DOUBLE,
         .target = &a->ta_b,
         .min = 0,
         .max = 1e9,
         .unit = "ms",
         .help = "expert-parallel all-to-all after each backward (B or I) of a stage, as --time-a2a-f"},
        {.type = OPT_SECTION, .name = "Input and output"},
        {.name = "--import",
         .type = OPT_STRING,
         .target = &a->import_path,
         .metavar = "FILE.csv",
         .defval = "none",
         .help = "read the schedule from a torch.distributed.pipelining CSV instead of "
                 "generating it (p, m, v come from the file)"},
        {.name = "--export",
         .type = OPT_STRING,
         .target = &a->export_path,
         .metavar = "FILE.csv",
         .defval = "none",
         .help = "write the schedule as torch.distributed.pipelining CSV (atomically)"},
        {.name = "--validate-only",
         .type = OPT_BOOL,
         .target = &a->validate_only,
         .help = "only validate (and export); print one line"},
        {.name = "--max-memory",
         .type = OPT_DOUBLE,
         .target = &a->max_memory_gib,
         .min = 0.001,
         .max = 1e5,
         .unit = "GiB",
         .defval = "4",
         .help = "refuse to generate a schedule whose estimated memory (its actions and their "
                 "validation) exceeds this"},
        {.name = "--no-timeline", .type = OPT_BOOL, .target = &a->no_timeline, .help = "do not print the timeline"},
        {.name = "--timeline-width",
         .type = OPT_INT,
         .target = &a->timeline_width,
         .min = 1,
         .max = SCHED_PRINT_MAX_COLS,
         .unit = "columns",
         .defval = "120",
         .help = "the most columns of the timeline: when the exact timeline (one column per common "
                 "divisor of the op times) is wider, a column becomes a round time (the header "
                 "names it) and the timeline is scaled to fit"},
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        int rc = specs[i].type == OPT_SECTION ? opt_section(t, specs[i].name, err) : opt_add(t, &specs[i], err);
        if (rc != TS_OK)
            return rc;
    }
    return TS_OK;
}

static int64_t ms_to_ns(double ms)
{
    return (int64_t)llround(ms * 1e6);
}

static void print_summary(const sched *s, const sargs *a, bool timed, const sched_timing *tm)
{
    size_t n = 0;
    for (int r = 0; r < s->p; r++)
        n += s->n_actions[r];
    printf("%s: p=%d m=%d%s v=%d, %d layers, %zu actions; valid (no deadlock even with blocking "
           "point-to-point)\n",
           sched_kind_name(s->kind), s->p, s->placement == SCHED_PLACE_DUAL ? 2 * s->m : s->m,
           s->placement == SCHED_PLACE_DUAL ? " (half each way, 2 model copies)" : "", s->v, s->num_layers, n);
    int *peak = malloc((size_t)s->p * sizeof *peak);
    if (peak) {
        sched_peak_inflight(s, peak);
        printf("peak activations in flight per rank (micro-batch chunks):");
        for (int r = 0; r < s->p; r++)
            printf(" %d", peak[r]);
        printf("\n");
        free(peak);
    }
    if (!timed)
        return;
    printf("timing with T_F %g ms, T_B %g ms, T_W %g ms, p2p latency %g ms%s:\n", a->tf, a->tb, a->tw, a->tc,
           s->v > 1 ? " (a chunk takes 1/v)" : "");
    if (a->ta_f > 0 || a->ta_b > 0)
        printf("  all-to-all      %g ms after F, %g ms after B (hidden in F&B pairs: max of compute and "
               "communication)\n",
               a->ta_f, a->ta_b);
    printf("  makespan        %.6f ms (first op start to last op end)\n", sched_ticks_ms(tm, tm->makespan));
    printf("  longest span    %.6f ms (one rank's first op start to its last op end)\n", sched_ticks_ms(tm, tm->cost));
    printf("  ideal           %.6f ms (m*(T_F+T_B+T_W))\n", sched_ticks_ms(tm, tm->ideal));
    printf("  bubble rate     %.6f ((longest span - ideal) / longest span, Qi et al.)\n", tm->bubble_rate);
    printf("  idle per rank   ");
    for (int r = 0; r < s->p; r++)
        printf(" %.6g", sched_ticks_ms(tm, tm->idle[r]));
    printf(" ms (makespan - busy)\n");
}

/* Reads the schedule of --import into *s (the flags that generate a schedule
 * do not go with it). Returns a status code: TS_EINVAL for a generating flag
 * or a file that does not parse or validate, TS_EIO for one that cannot be
 * read; the message in *err. */
static int schedule_import(const opt_table *t, const sargs *a, sched **s, ts_err *err)
{
    static const char *const GEN_FLAGS[] = {"--schedule",
                                            "--pipeline-model-parallel-size",
                                            "--num-microbatches",
                                            "--num-virtual-stages-per-pipeline-rank",
                                            "--microbatch-group-size-per-virtual-pipeline-stage",
                                            "--num-layers",
                                            "--decoder-first-pipeline-num-layers",
                                            "--decoder-last-pipeline-num-layers",
                                            "--pipeline-model-parallel-layout",
                                            "--with-reduce-optim",
                                            "--compute-only"};
    for (size_t i = 0; i < sizeof GEN_FLAGS / sizeof GEN_FLAGS[0]; i++)
        if (opt_was_set(t, GEN_FLAGS[i]))
            return err_set(err, TS_EINVAL, "%s does not go with --import: the schedule comes from the file",
                           GEN_FLAGS[i]);
    return sched_csv_load(a->import_path, s, err);
}

/* --pipeline-model-parallel-layout: the layers of each stage into lay, and
 * o borrowing them (o->stage_layers points into lay, so lay must outlive
 * o's use) with v = stages / p; the flags it replaces must be unset, -v
 * and --num-layers must agree with it. */
static int layout_opts(const opt_table *t, const sargs *a, sched_layout *lay, sched_opts *o, ts_err *err)
{
    int v = 0, rc = sched_layout_parse(a->layout, lay, err);
    if (rc)
        return err_prefix(err, "--pipeline-model-parallel-layout: ");
    if (a->first || a->last)
        return err_set(err, TS_EINVAL,
                       "--pipeline-model-parallel-layout gives every stage's layers: drop "
                       "--decoder-first/last-pipeline-num-layers");
    if ((rc = sched_layout_check(lay, o->p, a->layers ? a->layers : lay->num_layers, &v, err)))
        return err_prefix(err, "--pipeline-model-parallel-layout: ");
    if (opt_was_set(t, "--num-virtual-stages-per-pipeline-rank") && a->v != v)
        return err_set(err, TS_EINVAL,
                       "--pipeline-model-parallel-layout lists %d stages = %d per rank at p %d, but "
                       "--num-virtual-stages-per-pipeline-rank is %d (drop it, or make them agree)",
                       lay->n_stages, v, o->p, a->v);
    o->v = v;
    o->num_layers = lay->num_layers;
    o->stage_layers = lay->layers;
    return TS_OK;
}

/* Memory of a generated schedule per (stage, micro-batch) pair: up to 7 actions
 * (F, B, W and, with communication, two sends and two receives) of about 48 bytes
 * each, counting the action itself and what validation and timing keep per action
 * (measured: 20 to 36 bytes per action at p = 64, m = 4096). */
#define SCHED_EST_BYTES_PER_PAIR (7.0 * 48.0)

/* Generates the schedule the flags describe into *s and validates it, unless its
 * estimated memory exceeds --max-memory: refused at once, with the figure. */
static int schedule_generate(const opt_table *t, const sargs *a, sched **s, ts_err *err)
{
    int v_est = opt_was_set(t, "--num-virtual-stages-per-pipeline-rank") ? a->v
                : a->kind == SCHED_INTERLEAVED || a->kind == SCHED_DUALPIPE || sched_kind_is_v((sched_kind)a->kind) ? 2
                                                                                                                    : 1;
    double est_gib = (double)a->p * a->m * v_est * SCHED_EST_BYTES_PER_PAIR / 1073741824.0;
    if (est_gib > a->max_memory_gib)
        return err_set(err, TS_EINVAL,
                       "-p %d -m %d -v %d: the schedule has about %.0f million actions and would need "
                       "about %.1f GiB, over --max-memory %g GiB; use fewer pipeline ranks or "
                       "micro-batches, or raise --max-memory",
                       a->p, a->m, v_est, (double)a->p * a->m * v_est * 7 / 1e6, est_gib, a->max_memory_gib);
    sched_opts o;
    sched_opts_default(&o, (sched_kind)a->kind);
    o.p = a->p;
    o.m = a->m;
    o.v = opt_was_set(t, "--num-virtual-stages-per-pipeline-rank")                                            ? a->v
          : a->kind == SCHED_INTERLEAVED || a->kind == SCHED_DUALPIPE || sched_kind_is_v((sched_kind)a->kind) ? 2
                                                                                                              : 1;
    o.mb_group_size = a->group;
    o.num_layers = a->layers;
    o.first_stage_layers = a->first;
    o.last_stage_layers = a->last;
    o.with_comm = !a->compute_only;
    o.with_reduce_optim = a->with_reduce_optim;
    sched_layout lay; /* o.stage_layers borrows it until sched_generate returns */
    int rc = a->layout ? layout_opts(t, a, &lay, &o, err) : TS_OK;
    if (rc == TS_OK)
        rc = sched_generate(&o, s, err);
    if (rc == TS_OK)
        rc = sched_validate(*s, NULL, err);
    return rc;
}

/* Prints the timeline (unless --validate-only or --no-timeline), then the
 * summary or --validate-only's one line, and writes --export. ot: the op
 * times when the schedule was timed (into *tm), else NULL. */
static int schedule_outputs(const sched *s, const sargs *a, const sched_op_times *ot, const sched_timing *tm,
                            ts_err *err)
{
    int rc;
    if (!a->validate_only && !a->no_timeline) {
        if ((rc = sched_print(s, ot, a->timeline_width, stdout, err)) != TS_OK)
            return rc;
        printf("\n");
    }
    if (a->validate_only) {
        size_t n = 0;
        for (int r = 0; r < s->p; r++)
            n += s->n_actions[r];
        printf("valid: %s p=%d m=%d v=%d, %zu actions\n", sched_kind_name(s->kind), s->p,
               s->placement == SCHED_PLACE_DUAL ? 2 * s->m : s->m, s->v, n);
    } else {
        print_summary(s, a, ot != NULL, tm);
    }
    if (a->export_path && s->placement == SCHED_PLACE_DUAL) {
        return err_set(err, TS_EINVAL,
                       "--export: torch's schedule CSV has one chain of stages; DualPipe's two model copies "
                       "do not fit it (export dualpipev instead)");
    }
    if (a->export_path) {
        if ((rc = sched_csv_save(s, a->export_path, err)) != TS_OK)
            return rc;
        if (!a->validate_only)
            printf("wrote %s\n", a->export_path);
    }
    return TS_OK;
}

int cmd_schedule(int argc, char **argv)
{
    sargs a = {
        .kind = SCHED_1F1B, .p = 4, .m = 8, .v = 1, .max_memory_gib = 4, .timeline_width = SCHED_PRINT_DEFAULT_COLS};
    ts_err err;
    err_clear(&err);
    opt_table t;
    opt_table_init(&t, "trainsim schedule",
                   "Generate a pipeline schedule (or import one), validate it, print its timeline like the "
                   "Megatron-LM paper's figures, time it with fixed per-stage op times, export it as "
                   "torch.distributed.pipelining CSV.");
    int status = 0, rc = add_flags(&t, &a, &err);
    sched *s = NULL;
    sched_timing tm = {0};
    if (rc == TS_OK)
        rc = opt_parse(&t, argc, argv, &err);
    if (rc != TS_OK)
        goto finish;
    if (t.help_requested) {
        opt_help(&t, stdout);
        goto out;
    }
    bool timed = opt_was_set(&t, "--time-f") || opt_was_set(&t, "--time-b") || opt_was_set(&t, "--time-w") ||
                 opt_was_set(&t, "--time-comm") || opt_was_set(&t, "--time-a2a-f") || opt_was_set(&t, "--time-a2a-b");
    /* --export's path is checked before the schedule is built (minutes for
     * the largest ones) and printed, so an unwritable path fails at once. */
    if (a.export_path && (rc = afile_check_writable(a.export_path, "--export", &err)) != TS_OK)
        goto finish;
    if (timed && a.tf + a.tb + a.tw <= 0) {
        rc = err_set(&err, TS_EINVAL, "--time-f, --time-b and --time-w are all 0; give at least one op time > 0 ms");
        goto finish;
    }
    if (a.import_path)
        rc = schedule_import(&t, &a, &s, &err);
    else
        rc = schedule_generate(&t, &a, &s, &err);
    if (rc != TS_OK)
        goto finish;
    sched_op_times ot = {ms_to_ns(a.tf), ms_to_ns(a.tb), ms_to_ns(a.tw), ms_to_ns(a.tc)};
    sched_ep_times ep = {ms_to_ns(a.ta_f), ms_to_ns(a.ta_b)};
    if (timed)
        rc = sched_time_ep(s, &ot, &ep, &tm, &err);
    if (rc == TS_OK)
        rc = schedule_outputs(s, &a, timed ? &ot : NULL, &tm, &err);
finish: /* the error of a library call, if any, is printed here */
    if (rc != TS_OK) {
        fprintf(stderr, "trainsim schedule: %s\n", err.msg);
        status = cmd_exit_status(rc);
    }
out:
    sched_timing_free(&tm);
    sched_free(s);
    opt_table_free(&t);
    return status;
}
