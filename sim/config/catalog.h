/* catalog — where the data files shipped in topologies/ are found, and the
 * GPU kinds they describe (gpus.csv). Model presets (models.csv) are
 * catalog_models.h's; they build on config.h, which this module does not
 * need, so the topology parser can name GPU kinds without the run
 * configuration.
 *
 * Data directory, first that exists: $TRAINSIM_DATA_DIR; <directory of the
 * running executable>/../topologies (via /proc/self/exe: build/trainsim finds
 * the repository's topologies/); ./topologies. If none holds the file, the
 * error lists every place looked at.
 *
 * GPU kinds are matched by their catalogue name or an alias, ignoring case
 * ("A100-SXM4-80GB", "a100-80gb", "h100"). An unknown kind is TS_EINVAL
 * listing the valid kinds and the nearest one.
 * *
 * Ownership: catalog_*_load return tables owned by the caller (free with the
 * matching _free); lookups copy into caller structs.
 */
#ifndef TRAINSIM_CATALOG_H
#define TRAINSIM_CATALOG_H

#include <stdbool.h>
#include <stddef.h>

#include "sim/util/err.h"

#define CATALOG_PATH_BYTES  4096
#define CATALOG_ALIAS_BYTES 128
#define CATALOG_NAME_BYTES  64

/* Physical ranges of the GPU catalogue's columns, wide enough for any real or planned
 * GPU and narrow enough that every derived size (bytes) and time (ns) stays inside
 * int64 and finite doubles: TFLOP/s in (0, 1e6], HBM and context GiB in (0, 1e5],
 * HBM and NVLink bandwidths in [1e-3, 1e6] GB/s, TDP and cuBLAS workspace MiB in (0, 1e6]. */
#define CATALOG_MAX_TFLOPS  1e6
#define CATALOG_MAX_HBM_GIB 1e5
#define CATALOG_MIN_GBPS    1e-3
#define CATALOG_MAX_GBPS    1e6

/* One GPU kind, from the catalogue topologies/gpus.csv. */
typedef struct {
    char name[CATALOG_NAME_BYTES]; /* e.g. "A100-SXM4-80GB" */
    double bf16_tflops;            /* dense peak, TFLOP/s */
    double fp16_tflops;
    double fp32_tflops;
    double hbm_gib;     /* memory, GiB */
    double hbm_gbps;    /* memory bandwidth, GB/s (1e9 B/s) */
    double nvlink_gbps; /* NVLink per GPU per direction, GB/s */
    double fp8_tflops;  /* dense FP8 peak, TFLOP/s (0 = no FP8 tensor cores) */
    double tf32_tflops; /* dense TF32 peak, TFLOP/s */
    double tdp_w;       /* board power, W */
    double fp4_tflops;  /* dense FP4 peak, TFLOP/s (0 = no FP4 tensor cores) */
    int sms;            /* streaming multiprocessors (0 = not given: the cost model's
                           per-architecture count, sim/model/cost.c) */
    /* Memory besides tensors (overheads.h; sources in gpus.csv's comments): */
    double cuda_context_gib;     /* CUDA context + loaded kernel modules per process, GiB */
    double cublas_workspace_mib; /* cuBLAS default workspace per handle/stream, MiB */
    int nccl_channels;           /* NCCL channels per communicator */
    bool calibrated_only;        /* no datasheet rates (`--gpu cpu`): every cost comes from
                                     --calibration FILE (calib_device_params); rates above are 0 */
} gpu_spec;

/* Find FILE in the data directory; writes its path into buf. TS_EIO naming
 * every place looked at if not found. */
int catalog_find(const char *file, char *buf, size_t cap, ts_err *err);

/* ------------------------------------------------------------ GPUs */

typedef struct {
    size_t n;
    gpu_spec *gpus;                       /* n entries, file order */
    char (*aliases)[CATALOG_ALIAS_BYTES]; /* n entries: space-separated alias list */
    char path[CATALOG_PATH_BYTES];        /* where it was read from */
} catalog_gpus;

/* Load a GPU catalogue; path NULL = the shipped gpus.csv. Columns (units):
 * gpu, aliases, bf16_tflops, fp16_tflops, fp8_tflops (may be empty),
 * tf32_tflops, fp32_tflops (TFLOP/s), hbm_gib (GiB), hbm_gbps (GB/s),
 * nvlink_gbps_per_direction (GB/s), tdp_w (W); cuda_context_gib (GiB),
 * cublas_workspace_mib (MiB), nccl_channels (may be empty: 0); fp4_tflops
 * (TFLOP/s) and sms (1..1024), each may be empty or absent: 0. Messages name file:line and
 * column; duplicate names/aliases are errors. */
int catalog_gpus_load(const char *path, catalog_gpus **out, ts_err *err);
void catalog_gpus_free(catalog_gpus *c);

/* Entry for kind (name or alias, any case), or NULL. */
const gpu_spec *catalog_gpus_find(const catalog_gpus *c, const char *kind);

/* Copy the entry for kind into *out; TS_EINVAL "unknown GPU kind 'x'
 * (valid: A, B, ...; nearest: A)" if absent. */
int catalog_gpus_lookup(const catalog_gpus *c, const char *kind, gpu_spec *out, ts_err *err);

/* Shorthand: load the shipped catalogue and look kind up. */
int catalog_gpu(const char *kind, gpu_spec *out, ts_err *err);

#endif
