/* catalog — the data catalogues shipped in topologies/: GPU kinds
 * (gpus.csv) and model presets (models.csv), and where to find them.
 *
 * Data directory, first that exists: $TRAINSIM_DATA_DIR; <directory of the
 * running executable>/../topologies (via /proc/self/exe: build/trainsim finds
 * the repository's topologies/); ./topologies. If none holds the file, the
 * error lists every place looked at.
 *
 * GPU kinds are matched by their catalogue name or an alias, ignoring case
 * ("A100-SXM4-80GB", "a100-80gb", "h100"). An unknown kind is TS_EINVAL
 * listing the valid kinds and the nearest one.
 *
 * A model preset is a transformer shape plus the layout a run starts from
 * (GPU count, t, p, virtual stages, batch, recompute, schedule); explicit
 * flags override every field (flags.h).
 *
 * Ownership: catalog_*_load return tables owned by the caller (free with the
 * matching _free); lookups copy into caller structs.
 */
#ifndef TRAINSIM_CATALOG_H
#define TRAINSIM_CATALOG_H

#include <stddef.h>

#include "config.h"
#include "err.h"

#define CATALOG_PATH_BYTES 4096
#define CATALOG_ALIAS_BYTES 128
#define CATALOG_SOURCE_BYTES 512

/* Find FILE in the data directory; writes its path into buf. TS_EIO naming
 * every place looked at if not found. */
int catalog_find(const char *file, char *buf, size_t cap, ts_err *err);

/* ------------------------------------------------------------ GPUs */

typedef struct {
    size_t n;
    gpu_spec *gpus;                          /* n entries, file order */
    char (*aliases)[CATALOG_ALIAS_BYTES];    /* n entries: space-separated alias list */
    char path[CATALOG_PATH_BYTES];           /* where it was read from */
} catalog_gpus;

/* Load a GPU catalogue; path NULL = the shipped gpus.csv. Columns (units):
 * gpu, aliases, bf16_tflops, fp16_tflops, fp8_tflops (may be empty),
 * tf32_tflops, fp32_tflops (TFLOP/s), hbm_gib (GiB), hbm_gbps (GB/s),
 * nvlink_gbps_per_direction (GB/s), tdp_w (W). Messages name file:line and
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

/* ------------------------------------------------------------ models */

typedef struct {
    model_config model;          /* shape; model.name = preset name, precision bf16 */
    double params_billion;       /* nominal size the source names it by */
    int gpus;                    /* layout: GPU count */
    parallel_config par;         /* layout: tp, pp, layers_per_virtual_stage, first/last stage
                                  * layers, micro/global batch, sequence parallel, recompute,
                                  * distributed optimizer (dp, vp, schedule left 0) */
    char schedule[16];           /* layout: schedule name (sched_kind_parse) */
    char source[CATALOG_SOURCE_BYTES]; /* layout_source: which values are published */
} catalog_model;

typedef struct {
    size_t n;
    catalog_model *models;       /* n entries, file order */
    char path[CATALOG_PATH_BYTES];
} catalog_models;

/* Load model presets; path NULL = the shipped models.csv. Column names are
 * the Megatron-LM flag names with '_' for '-' (num_layers, hidden_size, ...)
 * plus name, params_billion, gpus, schedule, layout_source. */
int catalog_models_load(const char *path, catalog_models **out, ts_err *err);
void catalog_models_free(catalog_models *c);

/* Entry named name (any case), or NULL. */
const catalog_model *catalog_models_find(const catalog_models *c, const char *name);

/* Copy the preset into *out; TS_EINVAL listing the valid names and the
 * nearest one if absent. */
int catalog_models_lookup(const catalog_models *c, const char *name, catalog_model *out, ts_err *err);

/* Shorthand: load the shipped presets and look name up. */
int catalog_model_preset(const char *name, catalog_model *out, ts_err *err);

#endif
