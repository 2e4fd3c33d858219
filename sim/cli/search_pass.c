/* trainsim search: simulate's shared flags split into refused layout
 * settings and passed-through model settings (search_pass.h). */
#include "sim/cli/search_pass.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/config/catalog_models.h"
#include "sim/config/config.h"
#include "sim/config/flags.h"
#include "sim/config/topo.h"

/* The shared flags the search refuses: the layout it chooses, and the
 * settings whose validity or cost depends on that layout. Every other
 * shared flag passes through to the candidates. */
static const struct {
    const char *flag, *why;
} SEARCH_PASS_REFUSED[] = {
    {"--tensor-model-parallel-size", "the search chooses t; bound it with --max-tensor-model-parallel-size N"},
    {"--pipeline-model-parallel-size", "the search chooses p; bound it with --max-pipeline-model-parallel-size N"},
    {"--data-parallel-size", "the search derives d from the GPUs and its t, p and cp"},
    {"--micro-batch-size", "the search chooses the micro-batch size; give the values to try with --micro-batch-sizes "
                           "LIST (e.g. --micro-batch-sizes 1 to pin it)"},
    {"--schedule", "the search chooses the schedule; give those to try with --schedules LIST"},
    {"--num-layers-per-virtual-pipeline-stage",
     "the search chooses the interleaving depth; bound it with --max-virtual-pipeline-stages N"},
    {"--num-virtual-stages-per-pipeline-rank",
     "the search chooses the interleaving depth; bound it with --max-virtual-pipeline-stages N"},
    {"--decoder-first-pipeline-num-layers", "the search chooses the stage split (even, uneven first/last stage)"},
    {"--decoder-last-pipeline-num-layers", "the search chooses the stage split (even, uneven first/last stage)"},
    {"--account-for-embedding-in-pipeline-split", "the search chooses the stage split (account-for splits included)"},
    {"--account-for-loss-in-pipeline-split", "the search chooses the stage split (account-for splits included)"},
    {"--pipeline-model-parallel-layout", "the search chooses the stage split"},
    {"--sequence-parallel", "the search tries sequence parallelism at t > 1; --no-sequence-parallel leaves it out"},
    {"--recompute-granularity",
     "the search chooses the recomputation (none, selective, full uniform/block); --no-recompute-block leaves "
     "the block method out"},
    {"--recompute-method", "the search chooses the recomputation; --no-recompute-block leaves the block method out"},
    {"--recompute-num-layers", "the search chooses the recomputation"},
    {"--recompute-activations", "the search chooses the recomputation (selective included)"},
    {"--recompute-modules", "the search chooses the recomputation (selective modules included)"},
    {"--moe-layer-recompute", "the search chooses the recomputation (selective modules included)"},
    {"--use-distributed-optimizer", "the search tries it at d > 1; --no-distributed-optimizer leaves it out"},
    {"--overlap-grad-reduce", "the search sets it on every candidate"},
    {"--overlap-param-gather", "it needs the distributed optimizer, which the search chooses; not searched"},
    {"--tp-comm-overlap", "it needs t > 1 with sequence parallelism, which the search chooses; not searched"},
    {"--context-parallel-size", "the search chooses cp; bound it with --max-context-parallel-size N"},
    {"--cp-comm-type", "the search tries the p2p ring only"},
    {"--hierarchical-context-parallel-sizes", "the search tries the p2p ring only"},
    {"--expert-model-parallel-size", "the search chooses ep; bound it with --max-expert-model-parallel-size N"},
    {"--expert-tensor-parallel-size", "the search chooses etp (1 and t); --no-expert-tensor-parallel keeps it at 1"},
    {"--moe-token-dispatcher-type", "the search chooses the dispatcher; give those to try with --dispatchers LIST"},
    {"--moe-enable-deepep", "the search chooses the dispatcher; --dispatchers flex-deepep pins DeepEP"},
    {"--overlap-moe-expert-parallel-comm",
     "it needs ep > 1, the alltoall or flex dispatcher, interleaving at p > 1 and no full recomputation, which "
     "the search chooses; --try-overlap-moe-expert-parallel-comm tries it where they hold"},
    {"--use-torch-fsdp2", "FSDP sharding is not searched (the memory bound counts unsharded parameters)"},
    {"--use-megatron-fsdp", "FSDP sharding is not searched (the memory bound counts unsharded parameters)"},
    {"--data-parallel-sharding-strategy", "FSDP sharding is not searched"},
    {"--fp8-param-gather", "FP8 parameter copies are not in the search's memory bound; not searched"},
};

/* search's own flags the shared table also has that are not model
 * settings: the cluster, the batch, the inputs (the resolution gets them
 * its own way, cmd_search.c). */
static const char *const NOT_FORWARDED[] = {"--model", "--megatron-script", "--gpus",       "--global-batch-size",
                                            "--gpu",   "--topology",        "--calibration"};

/* The entry named name (long name or alias), NULL if none. */
static const opt_spec *find(const opt_table *t, const char *name, size_t len)
{
    for (size_t i = 0; i < t->n; i++) {
        const opt_spec *s = &t->entries[i].spec;
        if (s->type == OPT_SECTION)
            continue;
        if ((strlen(s->name) == len && !strncmp(s->name, name, len)) ||
            (s->alias && strlen(s->alias) == len && !strncmp(s->alias, name, len)))
            return s;
    }
    return NULL;
}

static bool listed(const char *const *l, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(l[i], name))
            return true;
    return false;
}

/* Append argv[*i] (and its value when the flag takes one as the next
 * argument) to out. */
static void take(char **out, int *n, const opt_spec *s, bool has_eq, int argc, char **argv, int *i)
{
    out[(*n)++] = argv[*i];
    if (s && s->type != OPT_BOOL && !has_eq && *i + 1 < argc)
        out[(*n)++] = argv[++*i];
}

int search_pass_split(const opt_table *own, int argc, char **argv, search_pass *p, ts_err *err)
{
    memset(p, 0, sizeof *p);
    config c;
    flags_state fs;
    opt_table shared;
    opt_table_init(&shared, "trainsim simulate", "");
    int rc = flags_register(&fs, &shared, &c, err);
    size_t cap = (size_t)argc + 1;
    if (!rc && (!(p->rest = calloc(cap, sizeof *p->rest)) || !(p->pass = calloc(cap, sizeof *p->pass)) ||
                !(p->fwd = calloc(cap, sizeof *p->fwd))))
        rc = err_set(err, TS_ENOMEM, "trainsim search: out of memory splitting the flags");
    if (!rc && argc > 0)
        p->rest[p->n_rest++] = argv[0];
    for (int i = 1; !rc && i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) { /* the rest as given */
            while (i < argc)
                p->rest[p->n_rest++] = argv[i++];
            break;
        }
        if (a[0] != '-' || !strcmp(a, "--help") || !strcmp(a, "-h")) {
            p->rest[p->n_rest++] = argv[i];
            continue;
        }
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        const opt_spec *mine = find(own, a, len), *sh = find(&shared, a, len);
        if (mine) {
            if (sh && !listed(NOT_FORWARDED, sizeof NOT_FORWARDED / sizeof NOT_FORWARDED[0], mine->name)) {
                int k = i;
                take(p->fwd, &p->n_fwd, mine, eq != NULL, argc, argv, &k);
            }
            take(p->rest, &p->n_rest, mine, eq != NULL, argc, argv, &i);
            continue;
        }
        if (!sh) { /* unknown: search's parser names it and the nearest flag */
            p->rest[p->n_rest++] = argv[i];
            continue;
        }
        if (!strcmp(sh->name, "--delay-wgrad-compute")) { /* the overlapped candidates' (search_pass.h) */
            static const char *const yes[] = {"true", "1", "yes", "on"}, *const no[] = {"false", "0", "no", "off"};
            bool y = !eq || listed(yes, 4, eq + 1);
            if (!y && !listed(no, 4, eq + 1))
                rc =
                    err_set(err, TS_EINVAL, "flag %s: '%s' is not a switch value (give %.*s alone, or %.*s=true|false)",
                            a, eq + 1, (int)len, a, (int)len, a);
            p->delay_wgrad = y;
            continue;
        }
        for (size_t k = 0; k < sizeof SEARCH_PASS_REFUSED / sizeof SEARCH_PASS_REFUSED[0]; k++)
            if (!strcmp(SEARCH_PASS_REFUSED[k].flag, sh->name))
                rc = err_set(err, TS_EINVAL, "%.*s: not taken by trainsim search: %s (trainsim simulate takes it)",
                             (int)len, a, SEARCH_PASS_REFUSED[k].why);
        if (!rc)
            take(p->pass, &p->n_pass, sh, eq != NULL, argc, argv, &i);
    }
    opt_table_free(&shared);
    flags_release(&fs);
    if (rc)
        search_pass_free(p);
    return rc;
}

void search_pass_free(search_pass *p)
{
    free(p->rest);
    free(p->pass);
    free(p->fwd);
    memset(p, 0, sizeof *p);
}

int search_pass_resolve(const search_pass *p, const search_pass_base *b, bool quiet, config *c, flags_state *fs,
                        opt_table *ft, ts_err *err)
{
    char gpus[32], **av = calloc((size_t)p->n_pass + (size_t)p->n_fwd + 32, sizeof *av);
    if (!av)
        return err_set(err, TS_ENOMEM, "trainsim search: out of memory resolving the flags");
    int ac = 0, rc = TS_OK;
    av[ac++] = "search";
    if (b->script) {
        av[ac++] = "--megatron-script";
        av[ac++] = (char *)(uintptr_t)b->script;
        const char *pass[][2] = {{"--model", b->model}, {"--gpu", b->gpu}, {"--topology", b->topology}};
        for (size_t k = 0; k < sizeof pass / sizeof pass[0]; k++)
            if (pass[k][1]) {
                av[ac++] = (char *)(uintptr_t)pass[k][0];
                av[ac++] = (char *)(uintptr_t)pass[k][1];
            }
        if (b->gpus) {
            snprintf(gpus, sizeof gpus, "--gpus=%d", b->gpus);
            av[ac++] = gpus;
        }
    } else {
        static char *const NEUTRAL[] = {"--gpus=1", "-t",
                                        "1",        "-p",
                                        "1",        "--micro-batch-size",
                                        "1",        "--global-batch-size",
                                        "1",        "--context-parallel-size",
                                        "1",        "--schedule",
                                        "1f1b"};
        av[ac++] = "--model";
        av[ac++] = (char *)(uintptr_t)b->model;
        for (size_t k = 0; k < sizeof NEUTRAL / sizeof NEUTRAL[0]; k++)
            av[ac++] = NEUTRAL[k];
        catalog_model preset;
        if ((rc = catalog_model_preset(b->model, &preset, err))) {
            free(av);
            return err_prefix(err, "--model: ");
        }
        if (preset.moe.num_experts > 0 || b->experts) {
            static char *const EXPERTS[] = {"--expert-model-parallel-size", "1", "--expert-tensor-parallel-size", "1"};
            for (size_t k = 0; k < sizeof EXPERTS / sizeof EXPERTS[0]; k++)
                av[ac++] = EXPERTS[k];
        }
        av[ac++] = "--gpu";
        av[ac++] = (char *)(uintptr_t)b->gpu;
        for (int k = 0; k < p->n_fwd; k++)
            av[ac++] = p->fwd[k];
    }
    for (int k = 0; k < p->n_pass; k++)
        av[ac++] = p->pass[k];
    rc = flags_register(fs, ft, c, err);
    if (!rc)
        rc = flags_parse(fs, ft, ac, av, err);
    free(av);
    if (!quiet && b->script)
        mscript_write_notes(fs->script, "trainsim search", stderr);
    if (!rc && !quiet)
        flags_note_ignored(fs, stderr); /* the script's Megatron-LM flags that cannot change performance */
    if (!rc && (rc = flags_finish(fs, ft, err)) && b->script) /* the script's layout, say, on the GPUs given */
        err_prefix(err, "--megatron-script %s: ", b->script);
    return rc;
}

int search_pass_gpu_kind(const char *gpu_flag, const char *topology, char *gpu, size_t gpu_bytes, ts_err *err)
{
    topo *t = NULL;
    int rc;
    if (!gpu_flag && topology && (rc = topo_load(topology, &t, err)))
        return rc;
    snprintf(gpu, gpu_bytes, "%s", gpu_flag ? gpu_flag : (t && t->params.gpu[0] ? t->params.gpu : "A100-SXM4-80GB"));
    topo_free(t);
    return TS_OK;
}
