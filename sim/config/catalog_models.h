/* catalog_models — the model presets shipped in topologies/models.csv.
 *
 * A model preset is a transformer shape plus the layout a run starts from
 * (GPU count, t, p, virtual stages, batch, recompute, schedule); explicit
 * flags override every field (flags.h). The file is found as catalog.h's
 * catalog_find finds every shipped file.
 *
 * Ownership: catalog_models_load returns a table owned by the caller (free
 * with catalog_models_free); lookups copy into caller structs.
 */
#ifndef TRAINSIM_CATALOG_MODELS_H
#define TRAINSIM_CATALOG_MODELS_H

#include <stddef.h>

#include "sim/config/catalog.h"
#include "sim/config/config.h"
#include "sim/util/err.h"

#define CATALOG_SOURCE_BYTES 512

typedef struct {
    model_config model;                /* shape; model.name = preset name, precision bf16 */
    double params_billion;             /* nominal size the source names it by */
    int gpus;                          /* layout: GPU count */
    parallel_config par;               /* layout: tp, pp, layers_per_virtual_stage, first/last stage
                                  * layers, micro/global batch, sequence parallel, recompute,
                                  * distributed optimizer (dp, vp, schedule left 0) */
    char schedule[16];                 /* layout: schedule name (sched_kind_parse) */
    char source[CATALOG_SOURCE_BYTES]; /* layout_source: which values are published */
    /* optional columns (absent or empty: Megatron-LM's default): kv_channels
     * (0 = h / a), qk_layernorm (model.qk_layernorm), the MoE shape and layout (num_experts, moe_router_topk,
     * moe_ffn_hidden_size, moe_shared_expert_intermediate_size,
     * moe_layer_freq as Megatron's N or "([0]*K+[1]*M)", moe_router_num_groups,
     * moe_router_group_topk, expert_model_parallel_size,
     * expert_tensor_parallel_size, moe_token_dispatcher_type) and MLA's
     * (multi_latent_attention, q_lora_rank, kv_lora_rank, qk_head_dim,
     * qk_pos_emb_head_dim, v_head_dim): moe.num_experts 0 for a dense
     * preset. moe.layer_freq / first_dense_layers are parsed; moe.etp 0 =
     * unset (t). */
    moe_config moe;
} catalog_model;

typedef struct {
    size_t n;
    catalog_model *models; /* n entries, file order */
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
