/* infer_calib — the decode calibration: the constants `trainsim calibrate
 * --decode SAMPLES --decode-output FILE` fits from measured decode steps
 * (trainexec --inference --decode-samples), read back into infer_params by
 * `trainsim infer --decode-calibration FILE` and `trainsim search
 * --inference --decode-calibration FILE`.
 *
 * Schema: a CSV with the columns quantity,value ('#' lines are comments;
 * extra columns are ignored), one row per quantity, each once:
 *   gpu                        device kind the samples were fitted for, as
 *                              --gpu resolves it (topologies/gpus.csv name,
 *                              or CPU for `--gpu cpu`)
 *   decode_hbm_efficiency      decode_gbps / reference_gbps, in (0, max]
 *                              with max = infer_calib_max_efficiency(gpu)
 *                              (above 1 when the measured ops ran from a
 *                              cache faster than the reference bandwidth:
 *                              a CPU with a model that fits in its caches)
 *   decode_launch_overhead_ns  fixed cost of one kernel, ns, in [0, 1e9]
 *   decode_gbps                fitted bandwidth of the decode ops, GB/s, > 0
 *   reference_gbps             the bandwidth the efficiency divides by, GB/s, > 0
 *   r2                         the fit's R^2, optional, in [-1e9, 1]
 *   points                     (op, bytes) groups of the fit, optional, >= 2
 *   batch                      sequences the measured decode steps ran (per
 *                              replica), optional, >= 1
 * decode_hbm_efficiency must equal decode_gbps / reference_gbps within
 * 0.1% (a file edited in one place only is refused).
 *
 * Applying (infer_calib_apply): the gpu must be the --gpu kind (refused
 * naming both); launch_ns = decode_launch_overhead_ns and mem_eff =
 * decode_gbps / the model's HBM bandwidth, so the model's memory-bound
 * kernels run at the measured decode bandwidth whatever reference the fit
 * used, decode_line and decode_rows = batch (infer_cost.h: a decode step
 * of at most batch rows costs its GEMMs by the fitted line alone, a larger
 * one bounds them by the GEMM curve's plateau too). gemm_eff is left
 * as it was (the decode samples do not determine a compute efficiency).
 *
 * Ownership: plain values; nothing allocated survives a call.
 */
#ifndef TRAINSIM_INFER_CALIB_H
#define TRAINSIM_INFER_CALIB_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/config/catalog.h"
#include "sim/config/config.h"
#include "sim/infer/infer_cost.h"
#include "sim/util/err.h"

typedef struct {
    char gpu[CONFIG_NAME_BYTES];
    double hbm_efficiency; /* decode_hbm_efficiency */
    double launch_ns;      /* decode_launch_overhead_ns */
    double decode_gbps;    /* GB/s */
    double reference_gbps; /* GB/s */
    double r2;             /* NAN when absent */
    int64_t points;        /* 0 when absent */
    int64_t batch;         /* 0 when absent */
} infer_calib;

/* The largest decode_hbm_efficiency a fit for device may have. A GPU's
 * decode ops stream their weights and KV cache from HBM, whose datasheet
 * bandwidth is the reference: a ratio above 1 can only come from its L2
 * (tens of MB, a few times HBM's bandwidth), so INFER_CALIB_MAX_EFF_GPU 4.
 * The calibrated-only CPU device's reference is the best element-wise rate
 * of its own microbenchmark, itself measured under whatever load the machine
 * had, and a small model's decode tensors sit in L1/L2, which serve one to
 * two orders of magnitude more bytes per cycle than a loaded memory stream:
 * INFER_CALIB_MAX_EFF_CPU 64. `trainsim calibrate --decode` refuses to
 * write a fit above the bound and infer_calib_read refuses to read one. */
#define INFER_CALIB_MAX_EFF_GPU 4.0
#define INFER_CALIB_MAX_EFF_CPU 64.0
double infer_calib_max_efficiency(const char *device);

/* Read path into *out. TS_EIO if unreadable; TS_EINVAL with "FILE:LINE:
 * column 'x': ..." for a bad cell (unknown or repeated quantity, a value
 * out of its range), "FILE: ..." for a missing quantity or an
 * inconsistent efficiency. */
int infer_calib_read(const char *path, infer_calib *out, ts_err *err);

/* Set ip->launch_ns and ip->mem_eff from k (see above) for a model on gpu
 * whose HBM bandwidth is hbm_gbps (> 0). path names the file in messages.
 * TS_EINVAL when k's gpu is not gpu's kind. */
int infer_calib_apply(const infer_calib *k, const char *path, const gpu_spec *gpu, double hbm_gbps, infer_params *ip,
                      ts_err *err);

#endif
