/* calib — the calibration CSV: measured kernel times of one machine, and the
 * efficiency tables fitted from them (`--calibration FILE`).
 *
 * Schema (one row per measurement; '#' lines are comments; column order is
 * free, extra columns are ignored):
 *
 *   gpu              GPU kind as in topologies/gpus.csv, e.g. A100-SXM4-80GB
 *   op               gemm | memory | launch
 *   dtype            bf16 | fp16 | fp32
 *   m, n, k          gemm: C[m x n] = A[m x k] B[k x n] (elements); else empty
 *   batch            gemm: batch count (>= 1); else empty
 *   bytes            memory: bytes read + written by the kernel; else empty
 *   kernel           memory, optional: which element-wise kernel was measured
 *                    (copy, layernorm, softmax, gelu, bias_residual, adam:
 *                    cost.h cost_mem_kind); empty = a generic memory-bound
 *                    kernel. Written only when some row has one.
 *   time_ns          measured time of one kernel, ns (median of repeats), > 0;
 *                    launch: the per-kernel overhead (an empty kernel)
 *   achieved_tflops  gemm: 2*m*n*k*batch / time, TFLOP/s (written for
 *                    readers; recomputed and ignored on reading); else empty
 *   achieved_gbps    memory: bytes / time, GB/s (likewise); else empty
 *   ranks            p2p, allreduce: ranks of the measured group (>= 2)
 *   alpha_ns         p2p, allreduce: fitted latency of one collective, ns (>= 0)
 *   gbps             p2p, allreduce: fitted bandwidth, GB/s (> 0): a collective of
 *                    S bytes (commcost.h convention) takes alpha_ns + S / gbps
 *                    (time_ns is empty on these rows)
 *
 * Example:
 *   gpu,op,dtype,m,n,k,batch,bytes,time_ns,achieved_tflops,achieved_gbps
 *   A100-SXM4-80GB,gemm,bf16,8192,2304,6144,1,,1400000,165.6,
 *   A100-SXM4-80GB,memory,bf16,,,,,268435456,160000,,1677.7
 *   A100-SXM4-80GB,launch,bf16,,,,,,4000,,
 *
 * Fitting (calib_fit): for the rows of one gpu and dtype, launch_ns is the
 * median of the launch rows (or the default table's when there are none);
 * each gemm row gives the knot (intensity, flops / ((time_ns - launch_ns) *
 * peak)), each memory row (bytes, bytes / ((time_ns - launch_ns) * hbm));
 * knots whose keys agree within 1% are averaged, efficiencies are clamped to
 * (0, 1]; a table with fewer than 2 distinct knots keeps the default table.
 * The generic memory table is fitted from all memory rows; in addition, the
 * rows of each kernel kind with >= 2 distinct sizes give that kind's table
 * (cost_params.mem_kind, same formula), which the cost model uses for the
 * layer ops of that kind (cost_mem_kind_of_op).
 * The executor writes the file (trainexec --microbench, cudacal) and
 * `trainsim calibrate` fits it.
 *
 * A calibrated-only device (gpu_spec.calibrated_only, `--gpu cpu`) has no
 * datasheet or default tables: calib_device_params takes everything from the
 * file. Its rows must contain a launch row, >= 2 distinct gemm shapes, >= 2
 * memory sizes, a p2p and an allreduce row; peak_tflops and hbm_gbps are the
 * best achieved GEMM and memory rates of the rows (so the fitted efficiencies
 * top out at 1), overlap_slowdown is 0 (the executor's collectives block the
 * rank: nothing overlaps). Link costs (commcost_params): the p2p row gives
 * the per-step latency and the p2p/inter-node bandwidth; the allreduce row,
 * fitted over n ranks as alpha + S/gbps = 2(n-1)*alpha' + 2(n-1)/n*S/busbw,
 * gives the bus bandwidth busbw = gbps * 2(n-1)/n for all-reduce, all-gather
 * and reduce-scatter. One machine has no separate inter-node link: the NIC
 * figures are the p2p ones.
 *
 * Ownership: calib_read returns a set owned by the caller (calib_free).
 */
#ifndef TRAINSIM_CALIB_H
#define TRAINSIM_CALIB_H

#include <stddef.h>
#include <stdint.h>

#include "sim/config/config.h"
#include "sim/model/cost.h"
#include "sim/util/err.h"

/* Ranges calib_read accepts; a value outside them is refused with FILE:LINE,
 * the column and the range. They are wide enough for any measurement of one
 * GPU and keep every derived quantity (FLOP counts, rates, fitted
 * efficiencies, cost times in int64 ns) finite:
 *   time_ns, alpha_ns  [1e-3, 1e12] ns (alpha_ns from 0): no kernel or
 *                      collective step of a calibration run takes 1000 s
 *   m, n, k, batch     [1, 2^24]: above every GEMM dimension of the models of
 *                      topologies/models.csv (vocabularies and micro-batch
 *                      tokens are below 2^20), and 2*m*n*k*batch < 2^98
 *   bytes              [1, 2^50] (1 PiB, 10 000 times the largest HBM)
 *   ranks              [2, 2^20]
 *   gbps               [CATALOG_MIN_GBPS, CATALOG_MAX_GBPS] GB/s (catalog.h)
 * and a row's achieved rate (2*m*n*k*batch / time_ns, bytes / time_ns) must
 * not exceed CATALOG_MAX_TFLOPS TFLOP/s or CATALOG_MAX_GBPS GB/s, the
 * catalogue's bounds for any GPU: a faster row is a measurement error. */
#define CALIB_MIN_TIME_NS 1e-3
#define CALIB_MAX_TIME_NS 1e12
#define CALIB_MAX_DIM     (INT64_C(1) << 24)
#define CALIB_MAX_BYTES   (INT64_C(1) << 50)
#define CALIB_MAX_RANKS   (1L << 20)

typedef enum { CALIB_GEMM = 0, CALIB_MEMORY, CALIB_LAUNCH, CALIB_P2P, CALIB_ALLREDUCE } calib_op;

typedef struct {
    char gpu[CONFIG_NAME_BYTES];
    calib_op op;
    config_precision dtype;
    int64_t m, n, k, batch; /* gemm */
    int64_t bytes;          /* memory */
    char kernel[24];        /* memory: kernel kind name, "" = generic */
    double time_ns;         /* > 0 (0 on p2p / allreduce rows) */
    int ranks;              /* p2p, allreduce */
    double alpha_ns, gbps;  /* p2p, allreduce */
} calib_row;

typedef struct {
    size_t n;
    calib_row *rows;
} calib_set;

/* Read path. TS_EIO if unreadable; TS_EINVAL with "FILE:LINE: column 'x':
 * ..." for a bad cell (unknown op/dtype, missing dims, a value outside the
 * ranges above, NaN or infinity, an achieved rate above the catalogue's). */
int calib_read(const char *path, calib_set *out, ts_err *err);

/* Write set to path atomically (temporary file, then rename). */
int calib_write(const char *path, const calib_set *set, ts_err *err);

/* Append one row (copies it). TS_ENOMEM. */
int calib_add(calib_set *set, const calib_row *row, ts_err *err);

void calib_free(calib_set *set); /* frees the rows; set itself is the caller's */

/* Start from base (usually cost_params_default) and replace launch_ns and
 * the tables with those fitted from the rows of base->gpu at dtype (see
 * above). TS_EINVAL if the set has no row for that gpu and dtype. */
int calib_fit(const calib_set *set, const cost_params *base, config_precision dtype, cost_params *out, ts_err *err);

/* What `--calibration FILE` does: cost_params_default(gpu, prec) as the
 * base (so the GPU kind must have default tables), calib_read(path),
 * calib_fit. Errors name the file. */
int calib_load_params(const char *path, const gpu_spec *gpu, config_precision prec, cost_params *out, ts_err *err);

/* What `--calibration FILE` does for a calibrated-only device (see above):
 * compute params and link params entirely from the file's rows for gpu at
 * prec. TS_EINVAL naming what is missing (rows, shapes, link rows). */
int calib_device_params(const calib_set *set, const gpu_spec *gpu, config_precision prec, cost_params *out,
                        commcost_params *link, ts_err *err);

const char *calib_op_name(calib_op op);

#endif
