/* trainsim config — validate the model, parallelism and cluster flags and
 * print the resolved configuration (preset + overrides + derived values);
 * list the model presets and GPU kinds of the catalogues. */
#include <math.h>
#include <stdio.h>

#include "sim/cli/cmd.h"
#include "sim/config/catalog.h"
#include "sim/config/catalog_models.h"
#include "sim/config/flags.h"
#include "sim/config/topo.h"
#include "sim/model/commcost.h"
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

static void print_group(FILE *f, const char *name, const commcost_params *cp, int n, int k)
{
    if (n <= 1) {
        fprintf(f, "  %-22s 1 rank: no communication\n", name);
        return;
    }
    commcost_group g = {n, k};
    commcost_choice ch;
    int64_t S = (int64_t)1 << 30;
    commcost_nccl_choose(cp, COMM_ALL_REDUCE, S, &g, &ch, NULL);
    fprintf(f,
            "  %-22s %d ranks, %d per node on %d node%s: a 1 GiB all-reduce runs %s/%s, %.3f ms, busbw %.1f GB/s "
            "(fabric factor %.2f)\n",
            name, n, k, n / k, n / k > 1 ? "s" : "", commcost_algo_name(ch.algo), commcost_proto_name(ch.proto),
            ch.time_ns / 1e6, ch.busbw_gbps, ch.net_factor);
}

/* The network lines: which mode and topology a simulation uses, and what
 * the default mode takes from the topology. */
static int print_network(FILE *f, const config *c)
{
    const topo *t = c->cluster.topology;
    if (!t)
        return TS_OK;
    commcost_params cp;
    ts_err none;
    fprintf(f, "\nnetwork (trainsim simulate):\n");
    if (commcost_params_topo(&c->cluster.gpu, t, c->cluster.gpus, &cp, &none)) {
        /* a kind without defaults (e.g. CPU) takes its costs from --calibration */
        fprintf(f, "  default mode:          collectives from --calibration (%s)\n", none.msg);
        return TS_OK;
    }
    fprintf(f, "  topology used:         %s (every mode)\n", t->source);
    fprintf(f, "  default mode:          closed-form NCCL cost model (algorithm and protocol picked per message "
               "size as NCCL's tuning model does) over this topology\n");
    fprintf(f, "  --network-flows:       flows on this topology's graph for one pipeline; --full: every rank's "
               "flows (contention, ECMP)\n");
    fprintf(f,
            "  default mode uses:     NVLink ring busbw %.1f GB/s, all-reduce busbw %.1f GB/s%s; %d NICs x %g GB/s "
            "per node = %.2f GB/s achievable per GPU; NIC-to-NIC latency %.2f us in a leaf\n",
            cp.nvlink_busbw_gbps, cp.nvlink_allreduce_busbw_gbps, cp.nvls ? " (NVLink SHARP)" : "", cp.nics_per_node,
            cp.nic_gbps, cp.nic_gbps_per_gpu, cp.lat_leaf_us);
    for (int i = 0; i < cp.tiers; i++)
        fprintf(f,
                "  fabric block %d:        %g nodes, uplinks %g:1 (cumulative), %.2f us across; limits a group "
                "spanning more nodes to %.2f of its NIC share\n",
                i + 1, cp.tier_nodes[i], cp.tier_oversub[i], cp.tier_lat_us[i],
                fmin(1.0, (cp.tier_nodes[i] > 1 ? cp.tier_nodes[i] : 1) / cp.tier_oversub[i]));
    if (t->form == TOPO_LINK_LIST)
        fprintf(f, "  link list:             NVLink and NIC rates from the links; switch levels and "
                   "oversubscription only in the flow modes\n");
    fprintf(f, "  default mode ignores:  contention between groups and ECMP collisions, CollNet/SHARP in "
               "switches (use --network-flows or --full for the first two)\n");
    int gpn = c->cluster.gpus_per_node > 0 ? c->cluster.gpus_per_node : 1, tp = c->par.tp, dp = c->par.dp;
    print_group(f, "tensor-parallel group:", &cp, tp, tp <= gpn ? tp : (tp % gpn ? 1 : gpn));
    print_group(f, "data-parallel group:", &cp, dp, commcost_group_strided(dp, tp, gpn).ranks_per_node);
    return TS_OK;
}

/* --nccl-table: NCCL's choice and time per collective and message size for
 * the data-parallel group and a full node (nccl-tests columns). */
static int print_nccl_table(FILE *f, const config *c, ts_err *e)
{
    commcost_params cp;
    int rc = commcost_params_topo(&c->cluster.gpu, c->cluster.topology, c->cluster.gpus, &cp, e);
    if (rc)
        return rc;
    int gpn = c->cluster.gpus_per_node > 0 ? c->cluster.gpus_per_node : 1;
    int dp = c->par.dp, k = commcost_group_strided(dp, c->par.tp, gpn).ranks_per_node;
    struct {
        const char *name;
        int n, k;
    } groups[2] = {{"node", gpn, gpn}, {"data-parallel", dp, k}};
    static const commcost_coll colls[3] = {COMM_ALL_REDUCE, COMM_ALL_GATHER, COMM_REDUCE_SCATTER};
    fprintf(f, "group,ranks,ranks_per_node,collective,bytes,algorithm,protocol,time_us,algbw_gbps,busbw_gbps\n");
    for (int gi = 0; gi < 2; gi++) {
        if (groups[gi].n <= 1)
            continue;
        commcost_group g = {groups[gi].n, groups[gi].k};
        for (int ci = 0; ci < 3; ci++)
            for (int64_t S = 1024; S <= ((int64_t)1 << 32); S *= 4) {
                commcost_choice ch;
                if ((rc = commcost_nccl_choose(&cp, colls[ci], S, &g, &ch, e)))
                    return rc;
                fprintf(f, "%s,%d,%d,%s,%lld,%s,%s,%.2f,%.2f,%.2f\n", groups[gi].name, g.ranks, g.ranks_per_node,
                        commcost_coll_name(colls[ci]), (long long)S, commcost_algo_name(ch.algo),
                        commcost_proto_name(ch.proto), ch.time_ns / 1e3, (double)S / ch.time_ns, ch.busbw_gbps);
            }
    }
    return TS_OK;
}

int cmd_config(int argc, char **argv)
{
    ts_err e;
    err_clear(&e);
    config c;
    flags_state fs;
    opt_table t;
    bool lmodels = false, lgpus = false, lnodes = false, lmegatron = false, nccl_table = false;
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
        rc = opt_add(&t,
                     &(opt_spec){.name = "--nccl-table",
                                 .type = OPT_BOOL,
                                 .target = &nccl_table,
                                 .help = "print, as CSV, the collective the default mode costs for a full node "
                                         "and the data-parallel group, 1 KiB to 4 GiB: NCCL's algorithm and "
                                         "protocol, time (us), algbw and busbw (GB/s, nccl-tests convention); "
                                         "and exit"},
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
    flags_note_fusions(&c, stderr);
    if (nccl_table) {
        rc = c.cluster.topology ? print_nccl_table(stdout, &c, &e)
                                : err_set(&e, TS_EINVAL, "--nccl-table needs a GPU cluster (not --gpu cpu)");
    } else {
        flags_print(&fs, stdout);
        rc = print_network(stdout, &c);
    }
    config_free(&c);
    if (rc) {
        flags_release(&fs);
        opt_table_free(&t);
        return fail(&e);
    }
    flags_release(&fs);
    opt_table_free(&t);
    return 0;
}
