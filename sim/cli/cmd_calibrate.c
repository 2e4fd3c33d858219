/* trainsim calibrate — turn the executor's microbenchmark samples
 * (`trainexec --microbench FILE`, exec/microbench.h) into a calibration CSV
 * (sim/model/calib.h) that `trainsim simulate --calibration FILE` reads.
 *
 * Fits, with GSL:
 *   gemm, memory, launch: the median of each shape's repeats (memory: of
 *     each kernel and size; a sample whose name is a cost.h kernel kind,
 *     e.g. gelu, keeps it in the row's kernel column, so the simulator costs
 *     each element-wise kind with its own table)
 *     (gsl_stats_median_from_sorted_data) becomes one calibration row; the
 *     cost model's efficiency tables are interpolated from those rows by
 *     calib_fit when the simulator loads the file;
 *   p2p, allreduce: a least-squares latency + bandwidth line
 *     time_ns = alpha_ns + bytes / gbps over the medians (gsl_fit_linear),
 *     printed, written into the calibration CSV as p2p / allreduce rows
 *     (ranks, alpha_ns, gbps; sim/model/calib.h), which a calibrated-only device
 *     (`trainsim simulate --gpu cpu`) takes its link costs from, and with
 *     --comm-output also as a CSV (coll,ranks,alpha_ns,gbps,r2,points).
 *   decode (--decode FILE, the per-op decode samples of trainexec --inference
 *     --decode-samples): a least-squares line time_ns = launch + bytes / gbps
 *     over the medians of each (op, bytes) group, each weighted by its
 *     sample count (gsl_fit_wlinear: the op sizes count as often as the
 *     measured steps ran them, so the line's sum over a step's ops matches
 *     the measured steps): decode_launch_overhead_ns = the intercept (the fixed cost
 *     of one kernel), decode_hbm_efficiency = gbps / the reference bandwidth
 *     (the --gpu kind's datasheet HBM bandwidth, topologies/gpus.csv; for a
 *     calibrated-only device such as cpu, the best element-wise rate of
 *     --microbench FILE, as calib.h takes hbm_gbps for it). Printed and
 *     written to --decode-output FILE (quantity,value rows, with the device
 *     kind as gpu and the most sequences a sampled step decoded as batch
 *     when the samples have an m column; sim/infer/infer_calib.h), which trainsim infer and search
 *     --inference read with --decode-calibration FILE.
 */
#include <gsl/gsl_fit.h>
#include <gsl/gsl_sort.h>
#include <gsl/gsl_statistics_double.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sim/cli/cmd.h"
#include "sim/config/catalog.h"
#include "sim/infer/infer_calib.h"
#include "sim/model/calib.h"
#include "sim/util/afile.h"
#include "sim/util/csvio.h"
#include "sim/util/grow.h"
#include "sim/util/opt.h"

typedef struct {
    char kind[16];
    char kernel[24]; /* memory: cost_mem_kind name, or "" */
    int64_t m, n, k, bytes;
    int ranks;
    double *t; /* samples, ns */
    size_t nt, cap;
} group;

typedef struct {
    group *g;
    size_t n, cap;
} groups;

static group *find_or_add(groups *G, const char *kind, const char *kernel, int64_t m, int64_t n, int64_t k,
                          int64_t bytes, int ranks)
{
    for (size_t i = 0; i < G->n; i++) {
        group *x = &G->g[i];
        if (!strcmp(x->kind, kind) && !strcmp(x->kernel, kernel) && x->m == m && x->n == n && x->k == k &&
            x->bytes == bytes && x->ranks == ranks)
            return x;
    }
    if (G->n == G->cap && grow_to((void **)&G->g, &G->cap, G->n + 1, 64, sizeof *G->g))
        return NULL;
    group *x = &G->g[G->n++];
    memset(x, 0, sizeof *x);
    snprintf(x->kind, sizeof x->kind, "%s", kind);
    snprintf(x->kernel, sizeof x->kernel, "%s", kernel);
    x->m = m, x->n = n, x->k = k, x->bytes = bytes, x->ranks = ranks;
    return x;
}

static int add_sample(group *x, double t)
{
    if (x->nt == x->cap && grow_to((void **)&x->t, &x->cap, x->nt + 1, 8, sizeof *x->t))
        return TS_ENOMEM;
    x->t[x->nt++] = t;
    return TS_OK;
}

static double median(group *x)
{
    gsl_sort(x->t, 1, x->nt);
    return gsl_stats_median_from_sorted_data(x->t, 1, x->nt);
}

static int64_t cell_or_zero(const csvio_table *t, size_t r, const char *col, ts_err *err, int *rc)
{
    int64_t v = 0;
    if (!*rc && !csvio_empty(t, r, col))
        *rc = csvio_get_int64(t, r, col, 0, INT64_MAX, &v, err);
    return v;
}

static int read_samples(const char *path, groups *G, ts_err *err)
{
    static const char *const req[] = {"kind", "m", "n", "k", "bytes", "ranks", "time_ns", NULL};
    csvio_table *t;
    int rc = csvio_read(path, req, 0, &t, err);
    if (rc)
        return rc;
    for (size_t r = 0; r < t->nrows && !rc; r++) {
        const char *kind;
        double ns;
        int ranks = 1;
        if ((rc = csvio_get_str(t, r, "kind", &kind, err)))
            break;
        if (strcmp(kind, "gemm") && strcmp(kind, "memory") && strcmp(kind, "launch") && strcmp(kind, "p2p") &&
            strcmp(kind, "allreduce")) {
            rc =
                csvio_errf(t, r, "kind", err, "'%s' is not a sample kind (gemm, memory, launch, p2p, allreduce)", kind);
            break;
        }
        int64_t m = cell_or_zero(t, r, "m", err, &rc), n = cell_or_zero(t, r, "n", err, &rc),
                k = cell_or_zero(t, r, "k", err, &rc), bytes = cell_or_zero(t, r, "bytes", err, &rc);
        if (!rc)
            rc = csvio_get_int(t, r, "ranks", 1, 1 << 20, &ranks, err);
        if (!rc)
            rc = csvio_get_positive(t, r, "time_ns", &ns, err);
        if (!rc && !strcmp(kind, "gemm") && (!m || !n || !k))
            rc = csvio_errf(t, r, "m", err, "a gemm sample needs m, n and k > 0");
        if (!rc && (!strcmp(kind, "memory") || !strcmp(kind, "p2p") || !strcmp(kind, "allreduce")) && !bytes)
            rc = csvio_errf(t, r, "bytes", err, "a %s sample needs bytes > 0", kind);
        if (rc)
            break;
        /* an element-wise kind the cost model knows keeps its name */
        const char *name = csvio_cell(t, r, "name");
        const char *kernel = !strcmp(kind, "memory") && cost_mem_kind_from_name(name) >= 0 ? name : "";
        group *x = find_or_add(G, kind, kernel, m, n, k, bytes, ranks);
        if (!x || add_sample(x, ns))
            rc = err_set(err, TS_ENOMEM, "calibrate: out of memory");
    }
    csvio_free(t);
    return rc;
}

/* Least-squares alpha + bytes/gbps over the medians of one collective. */
static int fit_line(groups *G, const char *kind, double *alpha, double *gbps, double *r2, int *points, int *ranks)
{
    double x[64], y[64];
    int n = 0;
    for (size_t i = 0; i < G->n && n < 64; i++)
        if (!strcmp(G->g[i].kind, kind)) {
            x[n] = (double)G->g[i].bytes;
            y[n] = median(&G->g[i]);
            *ranks = G->g[i].ranks;
            n++;
        }
    *points = n;
    if (n < 2)
        return TS_EINVAL;
    double c0, c1, cov00, cov01, cov11, sumsq;
    gsl_fit_linear(x, 1, y, 1, (size_t)n, &c0, &c1, &cov00, &cov01, &cov11, &sumsq);
    double tss = gsl_stats_tss(y, 1, (size_t)n);
    *alpha = c0 > 0 ? c0 : 0.0;
    *gbps = c1 > 0 ? 1.0 / c1 : 0.0; /* bytes per ns = GB/s */
    *r2 = tss > 0 ? 1.0 - sumsq / tss : 1.0;
    return TS_OK;
}

static const char *const DTYPES[] = {"bf16", "fp16", "fp32", NULL};

/* The command's flags. */
typedef struct {
    const char *in, *out, *comm_out, *gpu;
    const char *decode, *decode_out; /* decode samples and the fit's CSV */
    int dtype;                       /* index into DTYPES, a config_precision */
} calibrate_args;

/* Parses the flags into *a; -1 to go on, else the exit status to return
 * (0 after --help, which it prints; errors are printed here). */
static int calibrate_parse(int argc, char **argv, calibrate_args *a)
{
    ts_err err;
    err_clear(&err);
    opt_table t;
    opt_table_init(&t, "trainsim calibrate",
                   "Fit the cost model to a machine's microbenchmark samples (trainexec "
                   "--microbench FILE) and write a calibration CSV for trainsim simulate "
                   "--calibration.");
    const opt_spec specs[] = {
        {.name = "--microbench",
         .type = OPT_STRING,
         .target = &a->in,
         .metavar = "FILE",
         .defval = "required",
         .help = "samples written by trainexec --microbench"},
        {.name = "--output",
         .alias = "-o",
         .type = OPT_STRING,
         .target = &a->out,
         .metavar = "FILE",
         .defval = "required",
         .help = "calibration CSV to write"},
        {.name = "--gpu",
         .type = OPT_STRING,
         .target = &a->gpu,
         .metavar = "KIND",
         .help = "device kind named in the rows (as --gpu of trainsim simulate names it)"},
        {.name = "--dtype",
         .type = OPT_ENUM,
         .target = &a->dtype,
         .enum_names = DTYPES,
         .help = "precision the rows are filed under (the samples are fp32; a simulator run "
                 "at another precision looks its rows up under that name)"},
        {.name = "--comm-output",
         .type = OPT_STRING,
         .target = &a->comm_out,
         .metavar = "FILE",
         .help = "also write the fitted latency/bandwidth of p2p and all-reduce (CSV)"},
        {.name = "--decode",
         .type = OPT_STRING,
         .target = &a->decode,
         .metavar = "FILE",
         .help = "per-op decode samples (trainexec --inference --decode-samples FILE): fit "
                 "decode_hbm_efficiency and decode_launch_overhead_ns (--microbench and --output "
                 "are then optional)"},
        {.name = "--decode-output",
         .type = OPT_STRING,
         .target = &a->decode_out,
         .metavar = "FILE",
         .help = "with --decode: CSV of the fitted decode constants (quantity,value)"},
    };
    int rc = TS_OK;
    for (size_t i = 0; i < sizeof specs / sizeof specs[0] && !rc; i++)
        rc = opt_add(&t, &specs[i], &err);
    if (!rc)
        rc = opt_parse(&t, argc, argv, &err);
    if (!rc && t.help_requested) {
        opt_help(&t, stdout);
        opt_table_free(&t);
        return 0;
    }
    opt_table_free(&t);
    if (!rc && !a->decode && (!a->in || !a->out))
        rc = err_set(&err, TS_EINVAL, "%s is required", !a->in ? "--microbench FILE" : "--output FILE");
    if (!rc && a->decode && a->in && !a->out)
        rc = err_set(&err, TS_EINVAL, "--output FILE is required with --microbench");
    if (!rc && a->decode && !a->decode_out)
        rc = err_set(&err, TS_EINVAL, "--decode needs --decode-output FILE (where the fitted constants go)");
    if (!rc && a->comm_out && !a->in)
        rc = err_set(&err, TS_EINVAL, "--comm-output needs --microbench FILE (the message samples to fit)");
    if (!rc && a->decode_out && !a->decode)
        rc = err_set(&err, TS_EINVAL, "--decode-output needs --decode FILE (the samples to fit)");
    if (!rc && a->out) /* the outputs can be written, before the fit */
        rc = afile_check_writable(a->out, "--output", &err);
    if (!rc && a->decode_out)
        rc = afile_check_writable(a->decode_out, "--decode-output", &err);
    if (!rc && a->comm_out)
        rc = afile_check_writable(a->comm_out, "--comm-output", &err);
    if (rc) {
        /* opt's own messages already point at --help */
        fprintf(stderr, "trainsim calibrate: %s%s\n", err.msg,
                strstr(err.msg, "--help") ? "" : " (trainsim calibrate --help)");
        return cmd_exit_status(rc);
    }
    return -1;
}

/* The best kernel figures among the samples, for the summary line. */
typedef struct {
    double tflops, gbps, launch_ns;
} kernel_best;

/* Files one calibration row per gemm, memory and launch group (the median of
 * its samples) into *set and notes the best figures in *best. */
static int add_kernel_rows(groups *G, const calibrate_args *a, calib_set *set, kernel_best *best, ts_err *err)
{
    int rc = TS_OK;
    for (size_t i = 0; i < G->n && !rc; i++) {
        group *x = &G->g[i];
        calib_row row = {.dtype = (config_precision)a->dtype, .batch = 1};
        snprintf(row.gpu, sizeof row.gpu, "%s", a->gpu);
        row.time_ns = median(x);
        if (!strcmp(x->kind, "gemm")) {
            row.op = CALIB_GEMM;
            row.m = x->m, row.n = x->n, row.k = x->k;
            double tf = 2.0 * x->m * x->n * x->k / row.time_ns / 1e3;
            best->tflops = tf > best->tflops ? tf : best->tflops;
        } else if (!strcmp(x->kind, "memory")) {
            row.op = CALIB_MEMORY;
            row.bytes = x->bytes;
            snprintf(row.kernel, sizeof row.kernel, "%s", x->kernel);
            double gb = (double)x->bytes / row.time_ns;
            best->gbps = gb > best->gbps ? gb : best->gbps;
        } else if (!strcmp(x->kind, "launch")) {
            row.op = CALIB_LAUNCH;
            best->launch_ns = row.time_ns;
        } else {
            continue;
        }
        rc = calib_add(set, &row, err);
    }
    return rc;
}

/* Fits the p2p and allreduce lines and prints them; writes them to comm (if
 * open) and files each usable one as a row of *set. */
static int add_comm_rows(groups *G, const calibrate_args *a, afile *comm, calib_set *set, ts_err *err)
{
    static const char *const colls[] = {"p2p", "allreduce"};
    int rc = TS_OK;
    for (int c = 0; c < 2 && !rc; c++) {
        double alpha, gbps, r2;
        int pts = 0, ranks = 0;
        if (fit_line(G, colls[c], &alpha, &gbps, &r2, &pts, &ranks)) {
            printf("  %s: %d message sizes, no fit\n", colls[c], pts);
            continue;
        }
        printf("  %s over %d ranks: latency %.0f ns, bandwidth %.2f GB/s (R^2 %.4f, %d sizes)\n", colls[c], ranks,
               alpha, gbps, r2, pts);
        if (comm->f) {
            char na[CSVIO_NUM_BYTES], ng[CSVIO_NUM_BYTES], nr[CSVIO_NUM_BYTES];
            fprintf(comm->f, "%s,%d,%s,%s,%s,%d\n", colls[c], ranks, csvio_fmt_double(na, sizeof na, alpha),
                    csvio_fmt_double(ng, sizeof ng, gbps), csvio_fmt_double(nr, sizeof nr, r2), pts);
        }
        if (!(gbps > 0))
            continue; /* no usable line: the simulator reports the missing row */
        calib_row row = {.dtype = (config_precision)a->dtype,
                         .op = c ? CALIB_ALLREDUCE : CALIB_P2P,
                         .ranks = ranks,
                         .alpha_ns = alpha,
                         .gbps = gbps};
        snprintf(row.gpu, sizeof row.gpu, "%s", a->gpu);
        rc = calib_add(set, &row, err);
    }
    return rc;
}

/* The per-op decode samples of `path` into G: one group per (op, bytes,
 * sequences m), kind "decode", the op's name in kernel. */
static int read_decode(const char *path, groups *G, ts_err *err)
{
    static const char *const req[] = {"kind", "name", "bytes", "time_ns", NULL};
    csvio_table *t;
    int rc = csvio_read(path, req, 0, &t, err);
    if (rc)
        return rc;
    for (size_t r = 0; r < t->nrows && !rc; r++) {
        const char *kind, *name;
        int64_t bytes = 0;
        double ns;
        if ((rc = csvio_get_str(t, r, "kind", &kind, err)))
            break;
        if (strcmp(kind, "decode")) {
            rc = csvio_errf(t, r, "kind", err,
                            "'%s' is not a decode sample (kind decode; trainexec --inference "
                            "--decode-samples writes them)",
                            kind);
            break;
        }
        if (!(rc = csvio_get_str(t, r, "name", &name, err)) &&
            !(rc = csvio_get_int64(t, r, "bytes", 1, INT64_MAX, &bytes, err)))
            rc = csvio_get_positive(t, r, "time_ns", &ns, err);
        if (rc)
            break;
        int64_t seqs = 0; /* m: the sequences the step decoded (optional column) */
        if (csvio_col(t, "m") >= 0 && !csvio_empty(t, r, "m") &&
            (rc = csvio_get_int64(t, r, "m", 1, INT64_MAX, &seqs, err)))
            break;
        group *x = find_or_add(G, "decode", name, seqs, 0, 0, bytes, 1);
        if (!x || add_sample(x, ns))
            rc = err_set(err, TS_ENOMEM, "calibrate: out of memory");
    }
    csvio_free(t);
    return rc;
}

/* The reference bandwidth decode_hbm_efficiency divides by: the --gpu kind's
 * datasheet HBM bandwidth, or for cpu (calibrated-only) the best
 * element-wise rate of the microbenchmark samples (0 when none were read);
 * kind gets the device's name as the simulator's --gpu resolves it. */
static int reference_gbps(const calibrate_args *a, double best_mem_gbps, double *out, char *kind, size_t kind_n,
                          ts_err *err)
{
    if (!strcasecmp(a->gpu, "cpu")) {
        snprintf(kind, kind_n, "CPU"); /* as --gpu cpu names the device */
        if (!(best_mem_gbps > 0))
            return err_set(err, TS_EINVAL,
                           "--decode with --gpu %s: decode_hbm_efficiency needs a reference bandwidth: give "
                           "--microbench FILE (its best element-wise rate is the calibrated-only device's HBM "
                           "bandwidth) or --gpu KIND of topologies/gpus.csv (its datasheet HBM bandwidth)",
                           a->gpu);
        *out = best_mem_gbps;
        return TS_OK;
    }
    gpu_spec g;
    int rc = catalog_gpu(a->gpu, &g, err);
    if (rc) {
        err_prefix(err, "--gpu: ");
        return rc;
    }
    *out = g.hbm_gbps;
    snprintf(kind, kind_n, "%s", g.name);
    return TS_OK;
}

/* --decode: fit the decode line, print it and write --decode-output. */
static int calibrate_decode(const calibrate_args *a, double best_mem_gbps, ts_err *err)
{
    groups D = {0};
    double *x = NULL, *y = NULL, *w = NULL, ref = 0;
    char kind[CONFIG_NAME_BYTES] = "";
    int rc = reference_gbps(a, best_mem_gbps, &ref, kind, sizeof kind, err);
    if (!rc)
        rc = read_decode(a->decode, &D, err);
    if (!rc && D.n < 2)
        rc =
            err_set(err, TS_EINVAL, "%s: %zu distinct (op, bytes) decode samples; the line needs >= 2", a->decode, D.n);
    if (!rc && (!(x = malloc(D.n * sizeof *x)) || !(y = malloc(D.n * sizeof *y)) || !(w = malloc(D.n * sizeof *w))))
        rc = err_set(err, TS_ENOMEM, "calibrate: out of memory");
    double alpha = 0, gbps = 0, r2 = 0;
    int64_t seqs = 0; /* the most sequences a measured step decoded */
    if (!rc) {
        /* each group weighs its sample count: as often as the steps ran the
         * op at that size, so the line predicts the measured steps' total
         * (an attention size runs in few steps, a GEMM in every one) */
        for (size_t i = 0; i < D.n; i++) {
            x[i] = (double)D.g[i].bytes;
            y[i] = median(&D.g[i]);
            w[i] = (double)D.g[i].nt;
            seqs = D.g[i].m > seqs ? D.g[i].m : seqs;
        }
        double c0, c1, cov00, cov01, cov11, sumsq;
        gsl_fit_wlinear(x, 1, w, 1, y, 1, D.n, &c0, &c1, &cov00, &cov01, &cov11, &sumsq);
        double tss = gsl_stats_wtss(w, 1, y, 1, D.n);
        alpha = c0 > 0 ? c0 : 0.0;
        gbps = c1 > 0 ? 1.0 / c1 : 0.0; /* bytes per ns = GB/s */
        r2 = tss > 0 ? 1.0 - sumsq / tss : 1.0;
        if (!(gbps > 0))
            rc = err_set(err, TS_EINVAL,
                         "%s: the decode op times do not grow with their bytes (slope %g ns/byte): no bandwidth "
                         "to fit",
                         a->decode, c1);
    }
    if (!rc && gbps / ref > infer_calib_max_efficiency(kind))
        rc = err_set(err, TS_EINVAL,
                     "%s: the decode ops ran at %.2f GB/s, %.3g x the %s reference of %.1f GB/s: above the %g a "
                     "decode calibration may hold (infer_calib.h); the samples are not a memory-bound decode (check "
                     "the run, or give --gpu KIND for its datasheet bandwidth)",
                     a->decode, gbps, gbps / ref, kind, ref, infer_calib_max_efficiency(kind));
    if (!rc) {
        printf("decode: %zu (op, bytes) groups from %s: launch %.0f ns, %.2f GB/s (R^2 %.4f) = %.4f of %.1f GB/s\n",
               D.n, a->decode, alpha, gbps, r2, gbps / ref, ref);
        printf("  decode_hbm_efficiency %.6g, decode_launch_overhead_ns %.6g -> %s\n", gbps / ref, alpha,
               a->decode_out);
        afile f = {0};
        rc = afile_open(&f, a->decode_out, err);
        if (!rc) {
            char v[6][CSVIO_NUM_BYTES];
            fprintf(f.f,
                    "quantity,value\ngpu,%s\ndecode_hbm_efficiency,%s\ndecode_launch_overhead_ns,%s\ndecode_gbps,%s\n"
                    "reference_gbps,%s\nr2,%s\npoints,%zu\n",
                    kind, csvio_fmt_double(v[0], sizeof v[0], gbps / ref), csvio_fmt_double(v[1], sizeof v[1], alpha),
                    csvio_fmt_double(v[2], sizeof v[2], gbps), csvio_fmt_double(v[3], sizeof v[3], ref),
                    csvio_fmt_double(v[4], sizeof v[4], r2), D.n);
            if (seqs > 0)
                fprintf(f.f, "batch,%lld\n", (long long)seqs);
            rc = afile_commit(&f, err);
        }
    }
    for (size_t i = 0; i < D.n; i++)
        free(D.g[i].t);
    free(D.g);
    free(x);
    free(y);
    free(w);
    return rc;
}

int cmd_calibrate(int argc, char **argv)
{
    calibrate_args a = {.gpu = "CPU", .dtype = PREC_FP32};
    int status = calibrate_parse(argc, argv, &a);
    if (status >= 0)
        return status;
    ts_err err;
    err_clear(&err);
    groups G = {0};
    calib_set set = {0};
    kernel_best best = {0};
    afile comm = {0};
    int rc = a.in ? read_samples(a.in, &G, &err) : TS_OK;
    if (!rc && a.in)
        rc = add_kernel_rows(&G, &a, &set, &best, &err);
    if (!rc && a.in && set.n == 0)
        rc = err_set(&err, TS_EINVAL, "%s: no gemm, memory or launch samples", a.in);
    if (!rc && a.in) {
        printf("calibration: %zu kernel rows for '%s' (%s) -> %s\n", set.n, a.gpu, DTYPES[a.dtype], a.out);
        printf("  best GEMM %.1f GFLOP/s, best element-wise %.2f GB/s, launch %.0f ns\n", best.tflops * 1e3, best.gbps,
               best.launch_ns);
    }
    if (!rc && a.comm_out && (rc = afile_open(&comm, a.comm_out, &err)) == TS_OK)
        fputs("coll,ranks,alpha_ns,gbps,r2,points\n", comm.f);
    if (!rc && a.in)
        rc = add_comm_rows(&G, &a, &comm, &set, &err);
    if (!rc && a.in)
        rc = calib_write(a.out, &set, &err);
    if (!rc && a.decode)
        rc = calibrate_decode(&a, best.gbps, &err);
    if (comm.f) {
        if (rc)
            afile_abort(&comm);
        else
            rc = afile_commit(&comm, &err);
    }
    for (size_t i = 0; i < G.n; i++)
        free(G.g[i].t);
    free(G.g);
    calib_free(&set);
    if (rc)
        fprintf(stderr, "trainsim calibrate: %s\n", err.msg);
    return cmd_exit_status(rc);
}
