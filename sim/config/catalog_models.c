#include "sim/config/catalog_models.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sim/config/moe_flags.h"
#include "sim/util/csvio.h"
#include "sim/util/opt.h"

static const char *const MODEL_COLS[] = {"name",
                                         "num_layers",
                                         "hidden_size",
                                         "num_attention_heads",
                                         "num_query_groups",
                                         "ffn_hidden_size",
                                         "swiglu",
                                         "seq_length",
                                         "padded_vocab_size",
                                         "untie_embeddings_and_output_weights",
                                         "normalization",
                                         "disable_bias_linear",
                                         "position_embedding_type",
                                         "params_billion",
                                         "gpus",
                                         "tensor_model_parallel_size",
                                         "pipeline_model_parallel_size",
                                         "num_layers_per_virtual_pipeline_stage",
                                         "decoder_first_pipeline_num_layers",
                                         "decoder_last_pipeline_num_layers",
                                         "micro_batch_size",
                                         "global_batch_size",
                                         "sequence_parallel",
                                         "recompute_granularity",
                                         "use_distributed_optimizer",
                                         "schedule",
                                         "layout_source",
                                         NULL};

void catalog_models_free(catalog_models *c)
{
    if (!c)
        return;
    free(c->models);
    free(c);
}

/* An optional integer column: absent or empty leaves *out. */
static int opt_int(const csvio_table *t, size_t r, const char *col, long min, long max, int *out, ts_err *err)
{
    if (csvio_col(t, col) < 0 || csvio_empty(t, r, col))
        return TS_OK;
    return csvio_get_int(t, r, col, min, max, out, err);
}

/* The optional MoE and MLA columns (catalog_models.h) over Megatron-LM's
 * defaults (moe_flags.c). */
static int moe_cols(const csvio_table *t, size_t r, catalog_model *m, ts_err *err)
{
    moe_config *e = &m->moe;
    const long BIG = 1L << 26;
    int rc, disp = MOE_DISPATCH_ALLGATHER;
    moe_config_defaults(e);
    if ((rc = opt_int(t, r, "kv_channels", 1, BIG, &m->model.kv_channels, err)) ||
        (rc = opt_int(t, r, "num_experts", 1, BIG, &e->num_experts, err)) ||
        (rc = opt_int(t, r, "moe_router_topk", 1, BIG, &e->topk, err)) ||
        (rc = opt_int(t, r, "moe_ffn_hidden_size", 1, BIG, &e->ffn_hidden_size, err)) ||
        (rc = opt_int(t, r, "moe_shared_expert_intermediate_size", 1, BIG, &e->shared_ffn_hidden_size, err)) ||
        (rc = opt_int(t, r, "moe_router_num_groups", 1, BIG, &e->router_num_groups, err)) ||
        (rc = opt_int(t, r, "moe_router_group_topk", 1, BIG, &e->router_group_topk, err)) ||
        (rc = opt_int(t, r, "expert_model_parallel_size", 1, BIG, &e->ep, err)) ||
        (rc = opt_int(t, r, "expert_tensor_parallel_size", 1, BIG, &e->etp, err)) ||
        (rc = opt_int(t, r, "q_lora_rank", 1, BIG, &e->mla_q_lora_rank, err)) ||
        (rc = opt_int(t, r, "kv_lora_rank", 1, BIG, &e->mla_kv_lora_rank, err)) ||
        (rc = opt_int(t, r, "qk_head_dim", 1, BIG, &e->mla_qk_head_dim, err)) ||
        (rc = opt_int(t, r, "qk_pos_emb_head_dim", 1, BIG, &e->mla_qk_pos_emb_head_dim, err)) ||
        (rc = opt_int(t, r, "v_head_dim", 1, BIG, &e->mla_v_head_dim, err)))
        return rc;
    if (csvio_col(t, "qk_layernorm") >= 0 && !csvio_empty(t, r, "qk_layernorm") &&
        (rc = csvio_get_bool(t, r, "qk_layernorm", &m->model.qk_layernorm, err)))
        return rc;
    if (csvio_col(t, "multi_latent_attention") >= 0 && !csvio_empty(t, r, "multi_latent_attention") &&
        (rc = csvio_get_bool(t, r, "multi_latent_attention", &e->mla, err)))
        return rc;
    if (csvio_col(t, "moe_token_dispatcher_type") >= 0 && !csvio_empty(t, r, "moe_token_dispatcher_type")) {
        if ((rc = csvio_get_enum(t, r, "moe_token_dispatcher_type", MOE_DISPATCHER_NAMES, &disp, err)))
            return rc;
        e->dispatcher = disp;
    }
    if (csvio_col(t, "moe_layer_freq") >= 0 && !csvio_empty(t, r, "moe_layer_freq")) {
        const char *v;
        if ((rc = csvio_get_str(t, r, "moe_layer_freq", &v, err)))
            return rc;
        ts_err pe;
        if (moe_flags_parse_layer_freq(v, m->model.num_layers, &e->layer_freq, &e->first_dense_layers, &pe))
            return csvio_errf(t, r, "moe_layer_freq", err, "%s", pe.msg);
    }
    return TS_OK;
}

static int model_row(const csvio_table *t, size_t r, catalog_model *m, ts_err *err)
{
    model_config *mc = &m->model;
    parallel_config *p = &m->par;
    const char *name, *sched_name, *src;
    int rc, rec = 0, norm = 0, pos = 0;
    bool no_bias = false;
    const long BIG = 1L << 30;
    if ((rc = csvio_get_str(t, r, "name", &name, err)))
        return rc;
    if (strlen(name) >= sizeof mc->name || strchr(name, ' '))
        return csvio_errf(t, r, "name", err, "'%s' is not a valid name (no spaces, under %zu characters)", name,
                          sizeof mc->name);
    snprintf(mc->name, sizeof mc->name, "%s", name);
    mc->precision = PREC_BF16;
    if ((rc = csvio_get_int(t, r, "num_layers", 1, 100000, &mc->num_layers, err)) ||
        (rc = csvio_get_int(t, r, "hidden_size", 1, BIG, &mc->hidden_size, err)) ||
        (rc = csvio_get_int(t, r, "num_attention_heads", 1, BIG, &mc->num_attention_heads, err)) ||
        (rc = csvio_get_int(t, r, "num_query_groups", 1, BIG, &mc->num_query_groups, err)) ||
        (rc = csvio_get_int(t, r, "ffn_hidden_size", 1, BIG, &mc->ffn_hidden_size, err)) ||
        (rc = csvio_get_bool(t, r, "swiglu", &mc->swiglu, err)) ||
        (rc = csvio_get_int(t, r, "seq_length", 1, BIG, &mc->seq_length, err)) ||
        (rc = csvio_get_int(t, r, "padded_vocab_size", 1, BIG, &mc->padded_vocab_size, err)) ||
        (rc = csvio_get_bool(t, r, "untie_embeddings_and_output_weights", &mc->untie_embeddings, err)) ||
        (rc = csvio_get_enum(t, r, "normalization", CONFIG_NORM_NAMES, &norm, err)) ||
        (rc = csvio_get_bool(t, r, "disable_bias_linear", &no_bias, err)) ||
        (rc = csvio_get_enum(t, r, "position_embedding_type", CONFIG_POSITION_NAMES, &pos, err)) ||
        (rc = csvio_get_positive(t, r, "params_billion", &m->params_billion, err)) ||
        (rc = csvio_get_int(t, r, "gpus", 1, BIG, &m->gpus, err)) ||
        (rc = csvio_get_int(t, r, "tensor_model_parallel_size", 1, BIG, &p->tp, err)) ||
        (rc = csvio_get_int(t, r, "pipeline_model_parallel_size", 1, BIG, &p->pp, err)) ||
        (rc =
             csvio_get_int(t, r, "num_layers_per_virtual_pipeline_stage", 0, BIG, &p->layers_per_virtual_stage, err)) ||
        (rc = csvio_get_int(t, r, "decoder_first_pipeline_num_layers", 0, BIG, &p->first_stage_layers, err)) ||
        (rc = csvio_get_int(t, r, "decoder_last_pipeline_num_layers", 0, BIG, &p->last_stage_layers, err)) ||
        (rc = csvio_get_int(t, r, "micro_batch_size", 1, BIG, &p->micro_batch_size, err)) ||
        (rc = csvio_get_int(t, r, "global_batch_size", 1, BIG, &p->global_batch_size, err)) ||
        (rc = csvio_get_bool(t, r, "sequence_parallel", &p->sequence_parallel, err)) ||
        (rc = csvio_get_enum(t, r, "recompute_granularity", CONFIG_RECOMPUTE_NAMES, &rec, err)) ||
        (rc = csvio_get_bool(t, r, "use_distributed_optimizer", &p->distributed_optimizer, err)) ||
        (rc = csvio_get_str(t, r, "schedule", &sched_name, err)) ||
        (rc = csvio_get_str(t, r, "layout_source", &src, err)))
        return rc;
    p->recompute = (config_recompute)rec;
    /* optional column: context_parallel_size (empty or absent = 1) */
    if (csvio_col(t, "context_parallel_size") >= 0 && !csvio_empty(t, r, "context_parallel_size") &&
        (rc = csvio_get_int(t, r, "context_parallel_size", 1, 65536, &p->cp, err)))
        return rc;
    mc->normalization = (config_norm)norm;
    mc->position_embedding = (config_position)pos;
    mc->add_bias_linear = !no_bias;
    mc->kv_channels = mc->hidden_size / mc->num_attention_heads;
    mc->max_position_embeddings = mc->seq_length;
    if ((rc = moe_cols(t, r, m, err)))
        return rc;
    mc->vocab_size = 0; /* the preset gives the padded size */
    if (strlen(sched_name) >= sizeof m->schedule)
        return csvio_errf(t, r, "schedule", err, "'%s' is too long", sched_name);
    snprintf(m->schedule, sizeof m->schedule, "%s", sched_name);
    snprintf(m->source, sizeof m->source, "%s", src);
    for (size_t j = 0; j < r; j++)
        if (!strcasecmp(t->rows[j].cells[csvio_col(t, "name")], name))
            return csvio_errf(t, r, "name", err, "'%s' is already defined at line %d", name, t->rows[j].line);
    return TS_OK;
}

int catalog_models_load(const char *path, catalog_models **out, ts_err *err)
{
    *out = NULL;
    char found[CATALOG_PATH_BYTES];
    int rc = TS_OK;
    if (!path) {
        if ((rc = catalog_find("models.csv", found, sizeof found, err)))
            return rc;
        path = found;
    }
    csvio_table *t = NULL;
    if ((rc = csvio_read(path, MODEL_COLS, 0, &t, err)))
        return rc;
    catalog_models *c = calloc(1, sizeof *c);
    if (c)
        c->models = calloc(t->nrows, sizeof *c->models);
    if (!c || !c->models) {
        rc = err_set(err, TS_ENOMEM, "%s: out of memory", path);
        goto out;
    }
    c->n = t->nrows;
    snprintf(c->path, sizeof c->path, "%s", path);
    for (size_t r = 0; r < t->nrows && !rc; r++)
        rc = model_row(t, r, &c->models[r], err);
out:
    csvio_free(t);
    if (rc) {
        catalog_models_free(c);
        return rc;
    }
    *out = c;
    return TS_OK;
}

const catalog_model *catalog_models_find(const catalog_models *c, const char *name)
{
    for (size_t i = 0; i < c->n; i++)
        if (!strcasecmp(c->models[i].model.name, name))
            return &c->models[i];
    return NULL;
}

int catalog_models_lookup(const catalog_models *c, const char *name, catalog_model *out, ts_err *err)
{
    const catalog_model *m = catalog_models_find(c, name);
    if (m) {
        *out = *m;
        return TS_OK;
    }
    char list[ERR_MSG_BYTES / 2] = "";
    size_t off = 0, best = (size_t)-1;
    const char *near = NULL;
    for (size_t i = 0; i < c->n && off < sizeof list; i++) {
        off += (size_t)snprintf(list + off, sizeof list - off, "%s%s", i ? ", " : "", c->models[i].model.name);
        size_t d = opt_edit_distance(name, c->models[i].model.name);
        if (d < best) {
            best = d;
            near = c->models[i].model.name;
        }
    }
    return err_set(err, TS_EINVAL, "unknown model '%s'; nearest: %s (valid: %s; presets in %s)", name,
                   near ? near : "none", list, c->path);
}

int catalog_model_preset(const char *name, catalog_model *out, ts_err *err)
{
    catalog_models *c = NULL;
    int rc = catalog_models_load(NULL, &c, err);
    if (!rc)
        rc = catalog_models_lookup(c, name, out, err);
    catalog_models_free(c);
    return rc;
}
