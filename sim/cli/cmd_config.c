/* trainsim config — validate the model, parallelism and cluster flags and
 * print the resolved configuration (preset + overrides + derived values);
 * list the model presets and GPU kinds of the catalogues. */
#include <stdio.h>

#include "sim/cli/cmd.h"
#include "sim/config/catalog.h"
#include "sim/config/catalog_models.h"
#include "sim/config/flags.h"
#include "sim/config/topo.h"
#include "sim/net/net_names.h"
#include "sim/net/net_topo.h"
#include "sim/util/opt.h"

static int fail(const ts_err *e)
{
    fprintf(stderr, "trainsim config: error: %s\n", e->msg);
    return cmd_exit_status(e->code);
}

static int list_models(ts_err *e)
{
    catalog_models *c = NULL;
    if (catalog_models_load(NULL, &c, e))
        return fail(e);
    printf("# %s\n", c->path);
    printf("%-16s %8s %6s %6s %5s %5s %6s %5s %6s   %5s %3s %3s %5s %s\n", "name", "params_B", "layers", "hidden",
           "heads", "kv", "ffn", "glu", "seq", "gpus", "t", "p", "B", "schedule");
    for (size_t i = 0; i < c->n; i++) {
        const catalog_model *m = &c->models[i];
        printf("%-16s %8g %6d %6d %5d %5d %6d %5s %6d   %5d %3d %3d %5d %s\n", m->model.name, m->params_billion,
               m->model.num_layers, m->model.hidden_size, m->model.num_attention_heads, m->model.num_query_groups,
               m->model.ffn_hidden_size, m->model.swiglu ? "yes" : "no", m->model.seq_length, m->gpus, m->par.tp,
               m->par.pp, m->par.global_batch_size, m->schedule);
    }
    catalog_models_free(c);
    return 0;
}

static int list_gpus(ts_err *e)
{
    catalog_gpus *c = NULL;
    if (catalog_gpus_load(NULL, &c, e))
        return fail(e);
    printf("# %s (TFLOP/s dense; GiB; GB/s)\n", c->path);
    printf("%-16s %10s %10s %9s %8s %9s %11s  %s\n", "gpu", "bf16_tflops", "fp16_tflops", "fp8_tflops", "hbm_gib",
           "hbm_gbps", "nvlink_gbps", "aliases");
    for (size_t i = 0; i < c->n; i++) {
        const gpu_spec *g = &c->gpus[i];
        printf("%-16s %10g %10g %9g %8g %9g %11g  %s\n", g->name, g->bf16_tflops, g->fp16_tflops, g->fp8_tflops,
               g->hbm_gib, g->hbm_gbps, g->nvlink_gbps, c->aliases[i]);
    }
    catalog_gpus_free(c);
    return 0;
}

/* --list-nodes: the node and link names of the network graph that
 * --degrade-link works on. With --topology, that file's graph for --gpus GPUs
 * (all its nodes without --gpus), whatever the model and layout; without,
 * the built-in topology of the resolved flags, as simulate --full builds it. */
static int list_nodes(flags_state *fs, const opt_table *t, config *c, ts_err *e)
{
    topo *file = NULL;
    net_graph *g = NULL;
    const topo *tp = NULL;
    int gpus = 0, rc;
    const char *kind = NULL;
    if (fs->topology) {
        rc = topo_load(fs->topology, &file, e);
        tp = file;
        gpus = opt_was_set(t, "--gpus") ? c->cluster.gpus : 0;
    } else if ((rc = flags_finish(fs, t, e)) == TS_OK) {
        tp = c->cluster.topology;
        gpus = c->cluster.gpus;
        kind = c->cluster.gpu.name;
    }
    if (rc == TS_OK)
        rc = net_graph_from_topo(tp, gpus, kind, &g, e);
    if (rc == TS_OK)
        rc = net_names_list(g, stdout, e);
    net_graph_free(g);
    topo_free(file);
    config_free(c);
    return rc == TS_OK ? 0 : fail(e);
}

int cmd_config(int argc, char **argv)
{
    ts_err e;
    err_clear(&e);
    config c;
    flags_state fs;
    opt_table t;
    bool lmodels = false, lgpus = false, lnodes = false, lmegatron = false;
    opt_table_init(&t, "trainsim config",
                   "Check the model, parallelism and cluster flags and print the resolved configuration: the\n"
                   "--model preset (default " FLAGS_DEFAULT_MODEL ": GPT-3 175B on 1024 A100 80GB GPUs, t=8, p=16,\n"
                   "interleaved with 2 chunks, global batch 1536, micro-batch 1, on DGX A100 nodes with an HDR\n"
                   "InfiniBand fat tree like Selene), every explicit flag overriding it, and the derived values.\n"
                   "Exit status: 0 valid, 2 invalid flags or inputs, 1 other failure.");
    int rc = flags_register(&fs, &t, &c, &e);
    if (!rc)
        rc = opt_section(&t, "This command", &e);
    if (!rc)
        rc = opt_add(&t,
                     &(opt_spec){.name = "--list-models",
                                 .type = OPT_BOOL,
                                 .target = &lmodels,
                                 .help = "list the model presets and exit"},
                     &e);
    if (!rc)
        rc = opt_add(
            &t,
            &(opt_spec){
                .name = "--list-gpus", .type = OPT_BOOL, .target = &lgpus, .help = "list the GPU catalogue and exit"},
            &e);
    if (!rc)
        rc = opt_add(&t,
                     &(opt_spec){.name = "--list-nodes",
                                 .type = OPT_BOOL,
                                 .target = &lnodes,
                                 .help = "list the nodes and links of the network graph (of --topology FILE "
                                         "for --gpus GPUs, all its nodes without --gpus; else of the built-in "
                                         "topology): the names --degrade-link takes; and exit"},
                     &e);
    if (!rc)
        rc = opt_add(&t,
                     &(opt_spec){.name = "--megatron-flags",
                                 .type = OPT_BOOL,
                                 .target = &lmegatron,
                                 .help = "list what trainsim does with every Megatron-LM flag (modelled, ignored, "
                                         "refused, default-only, with the reason) and exit"},
                     &e);
    if (!rc)
        rc = flags_parse(&fs, &t, argc, argv, &e);
    mscript_write_notes(fs.script, "trainsim config", stderr); /* what the script left unresolved, if any */
    if (rc) {
        flags_release(&fs);
        opt_table_free(&t);
        return fail(&e);
    }
    if (t.help_requested) {
        opt_help(&t, stdout);
        flags_release(&fs);
        opt_table_free(&t);
        return 0;
    }
    flags_note_ignored(&fs, stderr);
    if (lnodes) {
        int st = list_nodes(&fs, &t, &c, &e);
        flags_release(&fs);
        opt_table_free(&t);
        return st;
    }
    if (lmodels || lgpus || lmegatron) {
        int st = lmodels ? list_models(&e) : 0;
        if (!st && lgpus)
            st = list_gpus(&e);
        if (!st && lmegatron && flags_print_megatron(stdout, &e))
            st = fail(&e);
        flags_release(&fs);
        opt_table_free(&t);
        return st;
    }
    rc = flags_finish(&fs, &t, &e);
    if (rc) {
        flags_release(&fs);
        opt_table_free(&t);
        return fail(&e);
    }
    flags_print(&fs, stdout);
    config_free(&c);
    flags_release(&fs);
    opt_table_free(&t);
    return 0;
}
