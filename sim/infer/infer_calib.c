/* infer_calib — the decode calibration CSV (infer_calib.h). */
#include "sim/infer/infer_calib.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "sim/util/csvio.h"

/* The quantities, in the order calibrate writes them. */
enum { Q_GPU = 0, Q_EFF, Q_LAUNCH, Q_GBPS, Q_REF, Q_R2, Q_POINTS, Q_BATCH, Q_COUNT };
static const char *const QUANTITIES[] = {"gpu",
                                         "decode_hbm_efficiency",
                                         "decode_launch_overhead_ns",
                                         "decode_gbps",
                                         "reference_gbps",
                                         "r2",
                                         "points",
                                         "batch",
                                         NULL};
#define VALID_QUANTITIES                                                                                               \
    "gpu, decode_hbm_efficiency, decode_launch_overhead_ns, decode_gbps, reference_gbps, r2, points, batch"

/* Relative agreement of decode_hbm_efficiency with decode_gbps / reference_gbps. */
#define EFF_TOLERANCE 1e-3

/* One row's value into *k; q is its quantity. */
static int read_value(const csvio_table *t, size_t r, int q, infer_calib *k, ts_err *err)
{
    const char *s;
    switch (q) {
    case Q_GPU: {
        int rc = csvio_get_str(t, r, "value", &s, err);
        if (!rc && (!*s || strlen(s) >= sizeof k->gpu))
            rc = csvio_errf(t, r, "value", err, "gpu '%s': expected a device kind of 1 to %zu characters", s,
                            sizeof k->gpu - 1);
        if (!rc)
            snprintf(k->gpu, sizeof k->gpu, "%s", s);
        return rc;
    }
    case Q_EFF:
        return csvio_get_positive_max(t, r, "value", INFER_CALIB_MAX_EFF_CPU, &k->hbm_efficiency, err);
    case Q_LAUNCH:
        return csvio_get_double(t, r, "value", 0.0, 1e9, &k->launch_ns, err);
    case Q_GBPS:
        return csvio_get_positive_max(t, r, "value", 1e7, &k->decode_gbps, err);
    case Q_REF:
        return csvio_get_positive_max(t, r, "value", 1e7, &k->reference_gbps, err);
    case Q_R2:
        return csvio_get_double(t, r, "value", -1e9, 1.0, &k->r2, err);
    case Q_POINTS:
        return csvio_get_int64(t, r, "value", 2, INT64_MAX, &k->points, err);
    default:
        return csvio_get_int64(t, r, "value", 1, INT64_MAX, &k->batch, err);
    }
}

double infer_calib_max_efficiency(const char *device)
{
    return strcasecmp(device, "CPU") ? INFER_CALIB_MAX_EFF_GPU : INFER_CALIB_MAX_EFF_CPU;
}

int infer_calib_read(const char *path, infer_calib *out, ts_err *err)
{
    static const char *const req[] = {"quantity", "value", NULL};
    memset(out, 0, sizeof *out);
    out->r2 = NAN;
    csvio_table *t = NULL;
    int rc = csvio_read(path, req, 0, &t, err);
    if (rc)
        return err_prefix(err, "--decode-calibration: ");
    int line[Q_COUNT] = {0};
    for (size_t r = 0; r < t->nrows && !rc; r++) {
        int q;
        rc = csvio_get_enum(t, r, "quantity", QUANTITIES, &q, err);
        if (!rc && line[q])
            rc = csvio_errf(t, r, "quantity", err, "'%s' given twice (first on line %d)", QUANTITIES[q], line[q]);
        if (!rc)
            rc = read_value(t, r, q, out, err);
        if (!rc)
            line[q] = t->rows[r].line;
    }
    for (int q = Q_GPU; !rc && q <= Q_REF; q++)
        if (!line[q])
            rc = err_set(err, TS_EINVAL,
                         "%s: no '%s' row (a decode calibration has the quantities " VALID_QUANTITIES
                         "; trainsim calibrate --decode FILE --decode-output writes it)",
                         path, QUANTITIES[q]);
    if (!rc && out->hbm_efficiency > infer_calib_max_efficiency(out->gpu))
        rc = err_set(err, TS_EINVAL,
                     "%s:%d: column 'value': decode_hbm_efficiency %g is out of range for device '%s' (expected a "
                     "number in (0, %g]: infer_calib.h)",
                     path, line[Q_EFF], out->hbm_efficiency, out->gpu, infer_calib_max_efficiency(out->gpu));
    if (!rc) {
        double ratio = out->decode_gbps / out->reference_gbps;
        if (fabs(out->hbm_efficiency - ratio) > EFF_TOLERANCE * ratio)
            rc = err_set(err, TS_EINVAL,
                         "%s:%d: decode_hbm_efficiency %g is not decode_gbps / reference_gbps = %g / %g = %g "
                         "(within 0.1%%): an inconsistent file",
                         path, line[Q_EFF], out->hbm_efficiency, out->decode_gbps, out->reference_gbps, ratio);
    }
    csvio_free(t);
    return rc;
}

int infer_calib_apply(const infer_calib *k, const char *path, const gpu_spec *gpu, double hbm_gbps, infer_params *ip,
                      ts_err *err)
{
    if (strcasecmp(k->gpu, gpu->name))
        return err_set(err, TS_EINVAL,
                       "--decode-calibration %s: fitted for device '%s', not for --gpu '%s' (calibrate the "
                       "decode samples of this device, or pass --gpu %s)",
                       path, k->gpu, gpu->name, k->gpu);
    if (!(hbm_gbps > 0))
        return err_set(err, TS_EINVAL, "--decode-calibration %s: device '%s' has no HBM bandwidth to scale", path,
                       gpu->name);
    ip->launch_ns = k->launch_ns;
    ip->mem_eff = k->decode_gbps / hbm_gbps;
    ip->decode_line = true;
    ip->decode_rows = (double)k->batch;
    return TS_OK;
}
