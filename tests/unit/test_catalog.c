/* catalog: the shipped GPU catalogue matches ../shared/reference/gpus.csv,
 * the model presets have the shapes their sources give (parameter counts),
 * lookups and every error message. Run from the repository root. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim/config/catalog.h"
#include "sim/config/catalog_models.h"
#include "sim/model/moe.h"
#include "sim/util/csvio.h"
#include "tests/unit/tmp_csv.h"

static ts_err E;

/* A catalogue figure next to the reference file's column of the same name. */
typedef struct {
    const char *col;
    double got;
} ref_col;

/* Expect each cols[i].got to equal row r's cell cols[i].col of ref. */
static void expect_reference(const csvio_table *ref, size_t r, const char *name, const ref_col *cols, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double v;
        cr_assert_eq(csvio_get_positive(ref, r, cols[i].col, &v, &E), TS_OK, "%s", E.msg);
        cr_expect_float_eq(cols[i].got, v, 1e-9, "%s %s: %g vs reference %g", name, cols[i].col, cols[i].got, v);
    }
}

Test(catalog, gpus_match_reference_figures)
{
    catalog_gpus *c = NULL;
    cr_assert_eq(catalog_gpus_load(NULL, &c, &E), TS_OK, "%s", E.msg);
    cr_assert_eq(c->n, 6, "4 rows of ../shared/reference/gpus.csv and 2 of gpus_blackwell.csv");
    csvio_table *ref = NULL;
    if (csvio_read("../shared/reference/gpus.csv", NULL, 0, &ref, &E) != TS_OK) {
        catalog_gpus_free(c);
        cr_skip_test("../shared/reference/gpus.csv not beside the checkout: %s", E.msg);
    }
    cr_assert_eq(ref->nrows + 2, c->n);
    for (size_t r = 0; r < ref->nrows; r++) {
        const char *name = csvio_cell(ref, r, "gpu");
        const gpu_spec *g = catalog_gpus_find(c, name);
        cr_assert_not_null(g, "reference GPU %s missing from the catalogue", name);
        const ref_col cols[] = {
            {"bf16_tflops", g->bf16_tflops},
            {"fp16_tflops", g->fp16_tflops},
            {"tf32_tflops", g->tf32_tflops},
            {"fp32_tflops", g->fp32_tflops},
            {"hbm_gib", g->hbm_gib},
            {"hbm_gbps", g->hbm_gbps},
            {"nvlink_gbps_per_direction", g->nvlink_gbps},
            {"tdp_w", g->tdp_w},
        };
        expect_reference(ref, r, name, cols, sizeof cols / sizeof cols[0]);
        if (csvio_empty(ref, r, "fp8_tflops"))
            cr_expect_eq(g->fp8_tflops, 0.0, "%s has no FP8", name);
        else /* NOLINTNEXTLINE(cert-err34-c): a bad reference cell reads 0 and fails the check */
            cr_expect_float_eq(g->fp8_tflops, atof(csvio_cell(ref, r, "fp8_tflops")), 1e-9);
        cr_expect_eq(g->fp4_tflops, 0.0, "%s has no FP4", name);
    }
    csvio_free(ref);
    catalog_gpus_free(c);
}

Test(catalog, blackwell_match_reference_figures)
{
    catalog_gpus *c = NULL;
    cr_assert_eq(catalog_gpus_load(NULL, &c, &E), TS_OK, "%s", E.msg);
    csvio_table *ref = NULL;
    if (csvio_read("../shared/reference/gpus_blackwell.csv", NULL, 0, &ref, &E) != TS_OK) {
        catalog_gpus_free(c);
        cr_skip_test("../shared/reference/gpus_blackwell.csv not beside the checkout: %s", E.msg);
    }
    cr_assert_eq(ref->nrows, 2);
    for (size_t r = 0; r < ref->nrows; r++) {
        const char *name = csvio_cell(ref, r, "gpu");
        const gpu_spec *g = catalog_gpus_find(c, name);
        cr_assert_not_null(g, "reference GPU %s missing from the catalogue", name);
        const ref_col cols[] = {
            {"bf16_tflops", g->bf16_tflops},
            {"fp16_tflops", g->fp16_tflops},
            {"fp8_tflops", g->fp8_tflops},
            {"fp4_tflops", g->fp4_tflops},
            {"hbm_gib", g->hbm_gib},
            {"hbm_gbps", g->hbm_gbps},
            {"nvlink_gbps_per_direction", g->nvlink_gbps},
            {"tdp_w", g->tdp_w},
        };
        expect_reference(ref, r, name, cols, sizeof cols / sizeof cols[0]);
        cr_expect_eq(g->sms, 148, "%s: %d SMs", name, g->sms);
    }
    csvio_free(ref);
    catalog_gpus_free(c);
}

Test(catalog, sm_counts_from_datasheets)
{
    gpu_spec g;
    cr_assert_eq(catalog_gpu("a100", &g, &E), TS_OK, "%s", E.msg);
    cr_expect_eq(g.sms, 108);
    cr_assert_eq(catalog_gpu("h100", &g, &E), TS_OK, "%s", E.msg);
    cr_expect_eq(g.sms, 132);
    cr_assert_eq(catalog_gpu("b200", &g, &E), TS_OK, "%s", E.msg);
    cr_expect_eq(g.sms, 148);
    cr_expect_float_eq(g.fp4_tflops, 9000, 1e-9);
}

Test(catalog, gpu_aliases_any_case)
{
    gpu_spec g;
    cr_assert_eq(catalog_gpu("h100", &g, &E), TS_OK, "%s", E.msg);
    cr_expect_str_eq(g.name, "H100-SXM5-80GB");
    cr_assert_eq(catalog_gpu("A100", &g, &E), TS_OK, "%s", E.msg);
    cr_expect_str_eq(g.name, "A100-SXM4-80GB");
    cr_assert_eq(catalog_gpu("a100-sxm4-40gb", &g, &E), TS_OK, "%s", E.msg);
    cr_expect_float_eq(g.hbm_gib, 40.0, 1e-12);
}

Test(catalog, unknown_gpu_lists_valid_and_nearest)
{
    gpu_spec g;
    cr_assert_eq(catalog_gpu("H100-SXM5-94GB", &g, &E), TS_EINVAL);
    cr_expect(strstr(E.msg, "unknown GPU kind 'H100-SXM5-94GB'"), "%s", E.msg);
    cr_expect(strstr(E.msg, "valid: A100-SXM4-40GB, A100-SXM4-80GB, H100-SXM5-80GB, H200-SXM-141GB"), "%s", E.msg);
    cr_expect(strstr(E.msg, "nearest: H100-SXM5-80GB"), "%s", E.msg);
}

Test(catalog, gpu_catalogue_errors)
{
    catalog_gpus *c = NULL;
    const char *hdr = "gpu,bf16_tflops,fp16_tflops,fp32_tflops,hbm_gib,hbm_gbps,nvlink_gbps_per_direction\n";
    char text[512];
    snprintf(text, sizeof text, "# c\n%sX1,312,312,19.5,80,abc,300\n", hdr);
    const char *p = tmp_csv(text);
    cr_expect_eq(catalog_gpus_load(p, &c, &E), TS_EINVAL);
    char want[128];
    snprintf(want, sizeof want, "%s:3: column 'hbm_gbps': 'abc' is not a number", p);
    cr_expect(strstr(E.msg, want), "%s", E.msg);
    unlink(p);
    p = tmp_csv("gpu,bf16_tflops\nX,1\n");
    cr_expect_eq(catalog_gpus_load(p, &c, &E), TS_EINVAL);
    cr_expect(strstr(E.msg, ":1: missing column 'fp16_tflops'"), "%s", E.msg);
    unlink(p);
    /* physical ranges: sizes and rates that would leave int64 bytes / ns are refused */
    snprintf(text, sizeof text, "%sX1,312,312,19.5,1e30,2000,300\n", hdr);
    p = tmp_csv(text);
    cr_expect_eq(catalog_gpus_load(p, &c, &E), TS_EINVAL);
    cr_expect(strstr(E.msg, ":2: column 'hbm_gib': 1e30 is out of range (expected a number in (0, 100000])"), "%s",
              E.msg);
    unlink(p);
    snprintf(text, sizeof text, "%sX1,1e7,312,19.5,80,2000,300\n", hdr);
    p = tmp_csv(text);
    cr_expect_eq(catalog_gpus_load(p, &c, &E), TS_EINVAL);
    cr_expect(strstr(E.msg, ":2: column 'bf16_tflops': 1e7 is out of range (expected a number in (0, 1e+06])"), "%s",
              E.msg);
    unlink(p);
    snprintf(text, sizeof text, "%sX1,312,312,19.5,80,1e-300,300\n", hdr);
    p = tmp_csv(text);
    cr_expect_eq(catalog_gpus_load(p, &c, &E), TS_EINVAL);
    cr_expect(strstr(E.msg, ":2: column 'hbm_gbps': 1e-300 is out of range (expected a number in [0.001, 1e+06])"),
              "%s", E.msg);
    unlink(p);
    snprintf(text, sizeof text, "%sX1,312,312,19.5,80,2000,-300\n", hdr);
    p = tmp_csv(text);
    cr_expect_eq(catalog_gpus_load(p, &c, &E), TS_EINVAL);
    cr_expect(
        strstr(E.msg,
               ":2: column 'nvlink_gbps_per_direction': -300 is out of range (expected a number in [0.001, 1e+06])"),
        "%s", E.msg);
    unlink(p);
    snprintf(text, sizeof text, "gpu,aliases,%sX1,x,1,1,1,1,1,1\nX2,x,1,1,1,1,1,1\n",
             "bf16_tflops,fp16_tflops,fp32_tflops,hbm_gib,hbm_gbps,nvlink_gbps_per_direction\n");
    p = tmp_csv(text);
    cr_expect_eq(catalog_gpus_load(p, &c, &E), TS_EINVAL);
    cr_expect(strstr(E.msg, ":3: column 'aliases': 'x' already names X1 (line 2)"), "%s", E.msg);
    unlink(p);
    p = tmp_csv("");
    cr_expect_eq(catalog_gpus_load(p, &c, &E), TS_EINVAL);
    cr_expect(strstr(E.msg, "empty: no header row (expected columns: gpu, bf16_tflops"), "%s", E.msg);
    unlink(p);
    cr_expect_null(c);
}

Test(catalog, data_dir_env_is_authoritative)
{
    setenv("TRAINSIM_DATA_DIR", "/nonexistent-trainsim", 1);
    gpu_spec g;
    cr_assert_eq(catalog_gpu("h100", &g, &E), TS_EIO);
    cr_expect(strstr(E.msg, "gpus.csv not found: looked in /nonexistent-trainsim/gpus.csv"), "%s", E.msg);
    setenv("TRAINSIM_DATA_DIR", "topologies", 1);
    cr_expect_eq(catalog_gpu("h100", &g, &E), TS_OK, "%s", E.msg);
}

/* Parameters of a GPT (GeLU, tied embedding; formulas.md) or Llama-style
 * (SwiGLU, GQA, untied embedding, no biases) model. */
static double params(const model_config *m)
{
    double l = m->num_layers, h = m->hidden_size, V = m->padded_vocab_size, s = m->seq_length;
    if (!m->swiglu)
        return 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h));
    double kv = h / m->num_attention_heads * m->num_query_groups;
    return l * (2 * h * h + 2 * h * kv + 3 * h * m->ffn_hidden_size) + 2 * V * h;
}

Test(catalog, model_presets_have_their_published_sizes)
{
    catalog_models *c = NULL;
    cr_assert_eq(catalog_models_load(NULL, &c, &E), TS_OK, "%s", E.msg);
    cr_assert_eq(c->n, 24);
    for (size_t i = 0; i < c->n; i++) {
        const catalog_model *m = &c->models[i];
        double b = params(&m->model) / 1e9;
        if (m->moe.num_experts > 0) { /* every expert counted (moe.h) */
            moe_params mp;
            moe_param_count(&m->model, &m->moe, &mp);
            b = (double)mp.total / 1e9;
        }
        /* named sizes are rounded (7B is 6.7B); 5% covers that and the small terms the formulas drop */
        cr_expect(fabs(b - m->params_billion) / m->params_billion < 0.05, "%s: %.2fB parameters, named %.1fB",
                  m->model.name, b, m->params_billion);
        cr_expect(m->source[0], "%s has no layout_source", m->model.name);
    }
    const catalog_model *g = catalog_models_find(c, "GPT3-175B");
    cr_assert_not_null(g);
    cr_expect_eq(g->model.num_layers, 96);
    cr_expect_eq(g->model.hidden_size, 12288);
    cr_expect_eq(g->gpus, 1024);
    cr_expect_eq(g->par.tp, 8);
    cr_expect_eq(g->par.pp, 16);
    cr_expect_eq(g->par.global_batch_size, 1536);
    cr_expect_str_eq(g->schedule, "interleaved");
    const catalog_model *l = catalog_models_find(c, "llama3-405b");
    cr_assert_not_null(l);
    cr_expect_eq(l->model.num_query_groups, 8);
    cr_expect_eq(l->par.first_stage_layers, 7);
    /* the MoE presets: their released config.json shapes */
    const catalog_model *q = catalog_models_find(c, "qwen3-235b-a22b");
    cr_assert_not_null(q);
    cr_expect_eq(q->model.kv_channels, 128);
    cr_expect_eq(q->moe.num_experts, 128);
    cr_expect_eq(q->moe.topk, 8);
    cr_expect_eq(q->moe.ffn_hidden_size, 1536);
    cr_expect_eq(q->moe.ep, 32);
    cr_expect_eq(q->moe.etp, 1);
    cr_expect(q->model.qk_layernorm, "Qwen3: q and k norms (column qk_layernorm)");
    const catalog_model *q30 = catalog_models_find(c, "qwen3-30b-a3b");
    cr_assert_not_null(q30);
    cr_expect(q30->model.qk_layernorm);
    cr_expect_not(l->model.qk_layernorm, "an empty qk_layernorm cell: Megatron-LM's default, off");
    const catalog_model *d = catalog_models_find(c, "deepseek-v3");
    cr_assert_not_null(d);
    cr_expect_eq(d->moe.first_dense_layers, 3);
    cr_expect_eq(d->moe.shared_ffn_hidden_size, 2048);
    cr_expect(d->moe.mla);
    cr_expect_eq(d->moe.mla_kv_lora_rank, 512);
    cr_expect_eq(d->moe.router_num_groups, 8);
    const catalog_model *x = catalog_models_find(c, "mixtral-8x7b");
    cr_assert_not_null(x);
    cr_expect_eq(x->moe.num_experts, 8);
    cr_expect_eq(x->moe.topk, 2);
    cr_expect_eq(x->moe.dispatcher, MOE_DISPATCH_ALLTOALL);
    cr_expect_eq(g->moe.num_experts, 0); /* dense presets have none */
    catalog_models_free(c);
}

Test(catalog, megatron_table_rows_match_reference)
{
    csvio_table *ref = NULL;
    if (csvio_read("../shared/reference/megatron_calibration.csv", NULL, 0, &ref, &E) != TS_OK)
        cr_skip_test("reference not beside the checkout: %s", E.msg);
    catalog_models *c = NULL;
    cr_assert_eq(catalog_models_load(NULL, &c, &E), TS_OK, "%s", E.msg);
    /* NOLINTBEGIN(cert-err34-c): reference cells; a bad one reads 0 and fails the checks */
    for (size_t r = 0; r < ref->nrows; r++) {
        const catalog_model *m = NULL;
        for (size_t i = 0; i < c->n; i++)
            if (!strncmp(c->models[i].model.name, "megatron-", 9) &&
                fabs(c->models[i].params_billion - atof(csvio_cell(ref, r, "params_billion"))) < 0.05)
                m = &c->models[i];
        cr_assert_not_null(m, "no preset for the %sB row", csvio_cell(ref, r, "params_billion"));
        cr_expect_eq(m->model.num_attention_heads, atoi(csvio_cell(ref, r, "attention_heads")));
        cr_expect_eq(m->model.hidden_size, atoi(csvio_cell(ref, r, "hidden_size")));
        cr_expect_eq(m->model.num_layers, atoi(csvio_cell(ref, r, "num_layers")));
        cr_expect_eq(m->par.tp, atoi(csvio_cell(ref, r, "tp_size")));
        cr_expect_eq(m->par.pp, atoi(csvio_cell(ref, r, "pp_size")));
        cr_expect_eq(m->gpus, atoi(csvio_cell(ref, r, "num_gpus")));
        cr_expect_eq(m->par.global_batch_size, atoi(csvio_cell(ref, r, "global_batch_size")));
        cr_expect_eq(m->par.recompute, RECOMPUTE_FULL);
        cr_expect_eq(m->model.seq_length, 2048);
        cr_expect_eq(m->model.padded_vocab_size, 51200);
    }
    /* NOLINTEND(cert-err34-c) */
    catalog_models_free(c);
    csvio_free(ref);
}

Test(catalog, unknown_model_names_nearest)
{
    catalog_model m;
    cr_assert_eq(catalog_model_preset("llama2-8b", &m, &E), TS_EINVAL);
    cr_expect(strstr(E.msg, "unknown model 'llama2-8b'; nearest: llama2-7b"), "%s", E.msg);
    cr_expect(strstr(E.msg, "bloom-176b"), "%s", E.msg);
}

Test(catalog, model_catalogue_errors)
{
    catalog_models *c = NULL;
    const char *p = tmp_csv("name,num_layers\nx,2\n");
    cr_expect_eq(catalog_models_load(p, &c, &E), TS_EINVAL);
    cr_expect(strstr(E.msg, ":1: missing column 'hidden_size'"), "%s", E.msg);
    unlink(p);
    /* a bad recompute name in an otherwise good row */
    FILE *f = fopen("topologies/models.csv", "r");
    cr_assert_not_null(f);
    char text[16384];
    size_t n = fread(text, 1, sizeof text - 1, f);
    cr_assert_eq(fclose(f), 0);
    text[n] = '\0';
    char *row = strstr(text, "\nmegatron-1.7b,");
    cr_assert_not_null(row);
    char *full = strstr(row, ",full,");
    cr_assert_not_null(full);
    /* NOLINTNEXTLINE(bugprone-not-null-terminated-result): overwrites 6 bytes inside text */
    memcpy(full, ",fuul,", 6);
    p = tmp_csv(text);
    cr_expect_eq(catalog_models_load(p, &c, &E), TS_EINVAL);
    cr_expect(strstr(E.msg, "column 'recompute_granularity': 'fuul' is not valid (valid: none, selective, full)"), "%s",
              E.msg);
    unlink(p);
    cr_expect_null(c);
}
