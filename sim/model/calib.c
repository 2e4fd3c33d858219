/* calib — calibration CSV: read, write, fit efficiency tables (calib.h). */
#include "sim/model/calib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/config/catalog.h"
#include "sim/util/afile.h"
#include "sim/util/csvio.h"

static const char *const COLUMNS[] = {
    "gpu",           "op",     "dtype", "m",        "n",    "k", "batch", "bytes", "time_ns", "achieved_tflops",
    "achieved_gbps", "kernel", "ranks", "alpha_ns", "gbps", NULL};
#define NCOLS      15
#define KERNEL_COL 11 /* written only when some row names a kernel */

const char *calib_op_name(calib_op op)
{
    switch (op) {
    case CALIB_GEMM:
        return "gemm";
    case CALIB_MEMORY:
        return "memory";
    case CALIB_LAUNCH:
        return "launch";
    case CALIB_P2P:
        return "p2p";
    case CALIB_ALLREDUCE:
        return "allreduce";
    }
    return "?";
}

static const char *dtype_name(config_precision p)
{
    switch (p) {
    case PREC_BF16:
        return "bf16";
    case PREC_FP16:
        return "fp16";
    case PREC_FP32:
        return "fp32";
    }
    return "?";
}

int calib_add(calib_set *set, const calib_row *row, ts_err *err)
{
    calib_row *r = realloc(set->rows, (set->n + 1) * sizeof *r);
    if (!r)
        return err_set(err, TS_ENOMEM, "calibration: out of memory");
    set->rows = r;
    set->rows[set->n++] = *row;
    return TS_OK;
}

void calib_free(calib_set *set)
{
    if (!set)
        return;
    free(set->rows);
    set->rows = NULL;
    set->n = 0;
}

static int parse_row(const csvio_table *t, size_t i, calib_row *r, ts_err *err)
{
    const char *s;
    int rc;
    memset(r, 0, sizeof *r);
    if ((rc = csvio_get_str(t, i, "gpu", &s, err)))
        return rc;
    if (strlen(s) >= sizeof r->gpu)
        return csvio_errf(t, i, "gpu", err, "'%s' is longer than %zu characters", s, sizeof r->gpu - 1);
    snprintf(r->gpu, sizeof r->gpu, "%s", s);
    if ((rc = csvio_get_str(t, i, "op", &s, err)))
        return rc;
    if (!strcmp(s, "gemm"))
        r->op = CALIB_GEMM;
    else if (!strcmp(s, "memory"))
        r->op = CALIB_MEMORY;
    else if (!strcmp(s, "launch"))
        r->op = CALIB_LAUNCH;
    else if (!strcmp(s, "p2p"))
        r->op = CALIB_P2P;
    else if (!strcmp(s, "allreduce"))
        r->op = CALIB_ALLREDUCE;
    else
        return csvio_errf(t, i, "op", err, "'%s' (expected gemm, memory, launch, p2p or allreduce)", s);
    if ((rc = csvio_get_str(t, i, "dtype", &s, err)))
        return rc;
    if (!strcmp(s, "bf16"))
        r->dtype = PREC_BF16;
    else if (!strcmp(s, "fp16"))
        r->dtype = PREC_FP16;
    else if (!strcmp(s, "fp32"))
        r->dtype = PREC_FP32;
    else
        return csvio_errf(t, i, "dtype", err, "'%s' (expected bf16, fp16 or fp32)", s);
    if (r->op == CALIB_P2P || r->op == CALIB_ALLREDUCE) {
        if ((rc = csvio_get_int(t, i, "ranks", 2, CALIB_MAX_RANKS, &r->ranks, err)) ||
            (rc = csvio_get_double(t, i, "alpha_ns", 0, CALIB_MAX_TIME_NS, &r->alpha_ns, err)) ||
            (rc = csvio_get_double(t, i, "gbps", CATALOG_MIN_GBPS, CATALOG_MAX_GBPS, &r->gbps, err)))
            return rc;
        return TS_OK;
    }
    if ((rc = csvio_get_double(t, i, "time_ns", CALIB_MIN_TIME_NS, CALIB_MAX_TIME_NS, &r->time_ns, err)))
        return rc;
    if (r->op == CALIB_GEMM) {
        if ((rc = csvio_get_int64(t, i, "m", 1, CALIB_MAX_DIM, &r->m, err)) ||
            (rc = csvio_get_int64(t, i, "n", 1, CALIB_MAX_DIM, &r->n, err)) ||
            (rc = csvio_get_int64(t, i, "k", 1, CALIB_MAX_DIM, &r->k, err)) ||
            (rc = csvio_get_int64(t, i, "batch", 1, CALIB_MAX_DIM, &r->batch, err)))
            return rc;
        /* Dimensions <= 2^24 keep the FLOP count (< 2^98) a finite double. */
        double tflops = 2.0 * (double)r->m * (double)r->n * (double)r->k * (double)r->batch / r->time_ns / 1e3;
        if (tflops > CATALOG_MAX_TFLOPS)
            return csvio_errf(t, i, "time_ns", err,
                              "%g ns for a %lld x %lld x %lld (batch %lld) GEMM is %g TFLOP/s, faster than "
                              "any GPU (the catalogue's range is (0, %g] TFLOP/s): a measurement error",
                              r->time_ns, (long long)r->m, (long long)r->n, (long long)r->k, (long long)r->batch,
                              tflops, CATALOG_MAX_TFLOPS);
    } else if (r->op == CALIB_MEMORY) {
        if ((rc = csvio_get_int64(t, i, "bytes", 1, CALIB_MAX_BYTES, &r->bytes, err)))
            return rc;
        double gbps = (double)r->bytes / r->time_ns;
        if (gbps > CATALOG_MAX_GBPS)
            return csvio_errf(t, i, "time_ns", err,
                              "%g ns for %lld bytes is %g GB/s, faster than any memory (the catalogue's "
                              "range is [%g, %g] GB/s): a measurement error",
                              r->time_ns, (long long)r->bytes, gbps, CATALOG_MIN_GBPS, CATALOG_MAX_GBPS);
        const char *kn = csvio_cell(t, i, "kernel");
        if (kn[0] && cost_mem_kind_from_name(kn) < 0)
            return csvio_errf(t, i, "kernel", err,
                              "'%s' (expected copy, layernorm, softmax, gelu, bias_residual, "
                              "adam or empty)",
                              kn);
        snprintf(r->kernel, sizeof r->kernel, "%s", kn);
    }
    return TS_OK;
}

int calib_read(const char *path, calib_set *out, ts_err *err)
{
    static const char *const required[] = {"gpu", "op", "dtype", "time_ns", NULL};
    csvio_table *t = NULL;
    calib_set set = {0, NULL};
    int rc = csvio_read(path, required, 0, &t, err);
    if (rc)
        return rc;
    for (size_t i = 0; i < t->nrows && rc == TS_OK; i++) {
        calib_row r;
        rc = parse_row(t, i, &r, err);
        if (rc == TS_OK)
            rc = calib_add(&set, &r, err);
    }
    csvio_free(t);
    if (rc) {
        calib_free(&set);
        return rc;
    }
    *out = set;
    return TS_OK;
}

int calib_write(const char *path, const calib_set *set, ts_err *err)
{
    afile a;
    int rc = afile_open(&a, path, err);
    if (rc)
        return rc;
    rc = csvio_write_comment(a.f, "trainsim calibration: measured kernel times (sim/model/calib.h)", err);
    bool kcol = false;
    for (size_t i = 0; i < set->n; i++)
        if (set->rows[i].kernel[0])
            kcol = true;
    size_t ncols = 0;
    const char *head[NCOLS];
    for (int j = 0; j < NCOLS; j++)
        if (kcol || j != KERNEL_COL)
            head[ncols++] = COLUMNS[j];
    if (!rc)
        rc = csvio_write_row(a.f, ncols, head, err);
    for (size_t i = 0; i < set->n && rc == TS_OK; i++) {
        const calib_row *r = &set->rows[i];
        char c[NCOLS][64];
        const char *cells[NCOLS];
        for (int j = 0; j < NCOLS; j++)
            c[j][0] = 0;
        snprintf(c[0], sizeof c[0], "%s", r->gpu);
        snprintf(c[1], sizeof c[1], "%s", calib_op_name(r->op));
        snprintf(c[2], sizeof c[2], "%s", dtype_name(r->dtype));
        if (r->op == CALIB_GEMM) {
            snprintf(c[3], sizeof c[3], "%lld", (long long)r->m);
            snprintf(c[4], sizeof c[4], "%lld", (long long)r->n);
            snprintf(c[5], sizeof c[5], "%lld", (long long)r->k);
            snprintf(c[6], sizeof c[6], "%lld", (long long)r->batch);
            double f = 2.0 * (double)r->m * (double)r->n * (double)r->k * (double)r->batch;
            csvio_fmt_double(c[9], sizeof c[9], f / r->time_ns / 1e3);
        } else if (r->op == CALIB_MEMORY) {
            snprintf(c[7], sizeof c[7], "%lld", (long long)r->bytes);
            csvio_fmt_double(c[10], sizeof c[10], (double)r->bytes / r->time_ns);
            snprintf(c[KERNEL_COL], sizeof c[KERNEL_COL], "%s", r->kernel);
        }
        if (r->op == CALIB_P2P || r->op == CALIB_ALLREDUCE) {
            snprintf(c[12], sizeof c[12], "%d", r->ranks);
            csvio_fmt_double(c[13], sizeof c[13], r->alpha_ns);
            csvio_fmt_double(c[14], sizeof c[14], r->gbps);
        } else {
            csvio_fmt_double(c[8], sizeof c[8], r->time_ns);
        }
        size_t nc = 0;
        for (int j = 0; j < NCOLS; j++)
            if (kcol || j != KERNEL_COL)
                cells[nc++] = c[j];
        rc = csvio_write_row(a.f, nc, cells, err);
    }
    if (rc) {
        afile_abort(&a);
        return rc;
    }
    return afile_commit(&a, err);
}

/* ---------------------------------------------------------------- fitting */

typedef struct {
    double key, eff;
} knot;

static int knot_cmp(const void *a, const void *b)
{
    double x = ((const knot *)a)->key, y = ((const knot *)b)->key;
    return (x > y) - (x < y);
}

static int dbl_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sort knots, average those whose keys agree within 1%, keep at most
 * COST_MAX_KNOTS (evenly thinned), write into t if >= 2 remain. */
static void knots_to_table(knot *k, size_t n, cost_table *t)
{
    if (n == 0)
        return;
    qsort(k, n, sizeof *k, knot_cmp);
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        double sk = 0, se = 0;
        while (j < n && k[j].key <= k[i].key * 1.01) {
            sk += k[j].key;
            se += k[j].eff;
            j++;
        }
        k[m].key = sk / (double)(j - i);
        k[m].eff = se / (double)(j - i);
        m++;
        i = j;
    }
    if (m < 2)
        return;
    size_t keep = m < COST_MAX_KNOTS ? m : COST_MAX_KNOTS;
    t->n = (int)keep;
    for (size_t i = 0; i < keep; i++) {
        size_t src = keep == m ? i : (size_t)llround((double)i * (double)(m - 1) / (double)(keep - 1));
        double e = k[src].eff;
        t->key[i] = k[src].key;
        t->eff[i] = e > 1.0 ? 1.0 : (e < 1e-6 ? 1e-6 : e);
    }
}

int calib_fit(const calib_set *set, const cost_params *base, config_precision dtype, cost_params *out, ts_err *err)
{
    size_t n = 0, nl = 0, ng = 0, nm = 0;
    for (size_t i = 0; i < set->n; i++)
        if (!strcmp(set->rows[i].gpu, base->gpu) && set->rows[i].dtype == dtype)
            n++;
    if (n == 0)
        return err_set(err, TS_EINVAL,
                       "calibration: no rows for GPU '%s' at %s (the file must have rows with "
                       "gpu=%s, dtype=%s)",
                       base->gpu, dtype_name(dtype), base->gpu, dtype_name(dtype));
    double *launch = malloc(n * sizeof *launch);
    knot *g = malloc(n * sizeof *g), *mk = malloc(n * sizeof *mk);
    if (!launch || !g || !mk) {
        free(launch);
        free(g);
        free(mk);
        return err_set(err, TS_ENOMEM, "calibration: out of memory");
    }
    cost_params p = *base;
    for (size_t i = 0; i < set->n; i++) {
        const calib_row *r = &set->rows[i];
        if (!strcmp(r->gpu, base->gpu) && r->dtype == dtype && r->op == CALIB_LAUNCH)
            launch[nl++] = r->time_ns;
    }
    if (nl > 0) {
        qsort(launch, nl, sizeof *launch, dbl_cmp);
        p.launch_ns = nl % 2 ? launch[nl / 2] : 0.5 * (launch[nl / 2 - 1] + launch[nl / 2]);
    }
    for (size_t i = 0; i < set->n; i++) {
        const calib_row *r = &set->rows[i];
        if (strcmp(r->gpu, base->gpu) || r->dtype != dtype)
            continue;
        double busy = r->time_ns - p.launch_ns;
        if (busy < 0.05 * r->time_ns)
            busy = 0.05 * r->time_ns; /* launch-dominated kernel */
        if (r->op == CALIB_GEMM) {
            double f = 2.0 * (double)r->m * (double)r->n * (double)r->k * (double)r->batch;
            g[ng].key = cost_gemm_intensity(r->m, r->n, r->k, p.dtype_bytes);
            g[ng++].eff = f / (busy * p.peak_tflops * 1e3);
        } else if (r->op == CALIB_MEMORY) {
            mk[nm].key = (double)r->bytes;
            mk[nm++].eff = (double)r->bytes / (busy * p.hbm_gbps);
        }
    }
    knots_to_table(g, ng, &p.gemm);
    p.tiles.sms = 0; /* the measured curve replaces the tile model (cost.h) */
    p.fp8_tiles.sms = 0;
    knots_to_table(mk, nm, &p.mem);
    /* per-kind tables from the rows naming a kernel (mk is free again) */
    for (int kind = 0; kind < COST_MEM_KINDS; kind++) {
        size_t nk = 0;
        for (size_t i = 0; i < set->n; i++) {
            const calib_row *r = &set->rows[i];
            if (strcmp(r->gpu, base->gpu) || r->dtype != dtype || r->op != CALIB_MEMORY ||
                cost_mem_kind_from_name(r->kernel) != kind)
                continue;
            double busy = r->time_ns - p.launch_ns;
            if (busy < 0.05 * r->time_ns)
                busy = 0.05 * r->time_ns;
            mk[nk].key = (double)r->bytes;
            mk[nk++].eff = (double)r->bytes / (busy * p.hbm_gbps);
        }
        if (nk > 0)
            knots_to_table(mk, nk, &p.mem_kind[kind]);
    }
    free(launch);
    free(g);
    free(mk);
    int rc = cost_table_check(&p.gemm, "calibrated GEMM", err);
    if (rc == TS_OK)
        rc = cost_table_check(&p.mem, "calibrated memory", err);
    for (int kind = 0; kind < COST_MEM_KINDS && rc == TS_OK; kind++)
        if (p.mem_kind[kind].n != 0)
            rc = cost_table_check(&p.mem_kind[kind], cost_mem_kind_name((cost_mem_kind)kind), err);
    if (rc == TS_OK)
        *out = p;
    return rc;
}

int calib_load_params(const char *path, const gpu_spec *gpu, config_precision prec, cost_params *out, ts_err *err)
{
    cost_params base;
    calib_set set = {0, NULL};
    int rc = cost_params_default(gpu, prec, &base, err);
    if (rc)
        return rc;
    rc = calib_read(path, &set, err);
    if (rc)
        return rc;
    rc = calib_fit(&set, &base, prec, out, err);
    if (rc)
        err_prefix(err, "%s: ", path);
    calib_free(&set);
    return rc;
}

int calib_device_params(const calib_set *set, const gpu_spec *gpu, config_precision prec, cost_params *out,
                        commcost_params *link, ts_err *err)
{
    cost_params base;
    memset(&base, 0, sizeof base);
    snprintf(base.gpu, sizeof base.gpu, "%s", gpu->name);
    base.dtype_bytes = prec == PREC_FP32 ? 4 : 2;
    base.overlap_slowdown = 0.0; /* see calib.h */
    const calib_row *p2p = NULL, *ar = NULL;
    size_t nl = 0, ng = 0, nm = 0;
    /* launch_ns as calib_fit takes it (median of the launch rows), so the
     * peaks are the best busy rates and the best kernel fits at efficiency 1 */
    double launch = 0, lv[64];
    for (size_t i = 0; i < set->n && nl < 64; i++)
        if (!strcmp(set->rows[i].gpu, gpu->name) && set->rows[i].dtype == prec && set->rows[i].op == CALIB_LAUNCH)
            lv[nl++] = set->rows[i].time_ns;
    if (nl > 0) {
        qsort(lv, nl, sizeof *lv, dbl_cmp);
        launch = nl % 2 ? lv[nl / 2] : 0.5 * (lv[nl / 2 - 1] + lv[nl / 2]);
    }
    for (size_t i = 0; i < set->n; i++) {
        const calib_row *r = &set->rows[i];
        if (strcmp(r->gpu, gpu->name) || r->dtype != prec)
            continue;
        switch (r->op) {
        case CALIB_GEMM: {
            double f = 2.0 * (double)r->m * (double)r->n * (double)r->k * (double)r->batch;
            double busy = r->time_ns - launch;
            if (busy < 0.05 * r->time_ns)
                busy = 0.05 * r->time_ns;
            double tf = f / busy / 1e3;
            if (tf > base.peak_tflops)
                base.peak_tflops = tf;
            ng++;
            break;
        }
        case CALIB_MEMORY: {
            double busy = r->time_ns - launch;
            if (busy < 0.05 * r->time_ns)
                busy = 0.05 * r->time_ns;
            double gb = (double)r->bytes / busy;
            if (gb > base.hbm_gbps)
                base.hbm_gbps = gb;
            nm++;
            break;
        }
        case CALIB_LAUNCH:
            break;
        case CALIB_P2P:
            p2p = r;
            break;
        case CALIB_ALLREDUCE:
            ar = r;
            break;
        }
    }
    const char *missing = nl == 0  ? "a launch row"
                          : ng < 2 ? "at least 2 gemm rows"
                          : nm < 2 ? "at least 2 memory rows"
                          : !p2p   ? "a p2p row (alpha_ns, gbps)"
                          : !ar    ? "an allreduce row (alpha_ns, gbps)"
                                   : NULL;
    if (missing)
        return err_set(err, TS_EINVAL,
                       "calibration: device '%s' takes all its costs from the file, which lacks "
                       "%s for gpu=%s, dtype=%s (write it with trainsim calibrate --gpu %s "
                       "--dtype %s)",
                       gpu->name, missing, gpu->name, dtype_name(prec), gpu->name, dtype_name(prec));
    int rc = calib_fit(set, &base, prec, out, err);
    if (rc)
        return rc;
    memset(link, 0, sizeof *link);
    int n = ar->ranks;
    link->nvlink_alpha_ns = p2p->alpha_ns;
    link->nvlink_p2p_gbps = p2p->gbps;
    link->nvlink_allreduce_busbw_gbps = ar->gbps * 2.0 * (n - 1) / n;
    link->nvlink_busbw_gbps = link->nvlink_allreduce_busbw_gbps;
    link->nic_alpha_ns = p2p->alpha_ns;
    link->nic_gbps_per_gpu = p2p->gbps;
    return TS_OK;
}
