/* flags — the model, parallelism, schedule and cluster flags every
 * subcommand shares, named as Megatron-LM names them so users paste their
 * launch flags.
 *
 *   config c;
 *   flags_state fs;
 *   opt_table t;
 *   opt_table_init(&t, "trainsim simulate", "...");
 *   flags_register(&fs, &t, &c, &err);      // the shared flags
 *   opt_add(&t, ...);                       // the subcommand's own flags
 *   flags_parse(&fs, &t, argc, argv, &err); // not opt_parse: see below
 *   if (t.help_requested) { opt_help(&t, stdout); ... }
 *   flags_finish(&fs, &t, &err);            // c is now complete and validated
 *   ...
 *   config_free(&c); flags_release(&fs); opt_table_free(&t);
 *
 * Resolution in flags_finish, whatever the order of the flags:
 *  1. the --model preset (topologies/models.csv; default gpt3-175b) gives
 *     the shape and a starting layout (GPUs, t, p, virtual stages, batch,
 *     sequence parallel, recompute, distributed optimizer, schedule);
 *  2. every flag given explicitly overrides its field. Megatron-LM's derived
 *     defaults apply to what the user changed: --hidden-size without
 *     --ffn-hidden-size gives 4h (SwiGLU: 8h/3 rounded down to a multiple of
 *     64); --num-attention-heads without --num-query-groups gives no GQA;
 *     --pipeline-model-parallel-size drops the preset's uneven first/last
 *     stage split; a --schedule other than interleaved drops the preset's
 *     --num-layers-per-virtual-pipeline-stage;
 *  3. the cluster: --gpu KIND (catalogue) and --topology FILE; without a
 *     topology, the built-in default (topo_default_for) for the GPU kind,
 *     sized to --gpus; a parametric topology gives the GPU kind unless --gpu
 *     is given, and --gpu must then agree with it;
 *  4. config_resolve (divisibility, gpus = t x p x d, ..., and the derived
 *     d, v, GPUs per node).
 *
 * Ownership: the state borrows the config and the strings of argv; the
 * config owns the topology after flags_finish (config_free releases it).
 */
#ifndef TRAINSIM_FLAGS_H
#define TRAINSIM_FLAGS_H

#include <stdbool.h>

#include "sim/config/config.h"
#include "sim/util/err.h"
#include "sim/util/opt.h"

#define FLAGS_DEFAULT_MODEL "gpt3-175b"

typedef struct {
    config *c;                   /* the config being filled (borrowed) */
    const char *model;           /* --model */
    const char *topology;        /* --topology FILE, NULL = built-in default */
    const char *gpu;             /* --gpu KIND, NULL = from the topology or A100-SXM4-80GB */
    int schedule;                /* --schedule, index into the schedule names */
    int recompute;               /* --recompute-granularity, config_recompute */
    int recompute_method;        /* --recompute-method, config_recompute_method */
    bool bf16, fp16, fp32;       /* --bf16, --fp16, --fp32 */
    int dp;                      /* --data-parallel-size, 0 = derived */
    const char *pipeline_layout; /* --pipeline-model-parallel-layout, NULL = not given */
    char preset_source[512];     /* the preset's layout_source, after flags_finish */
    char **argv_owned;           /* the arguments flags_parse built and parsed (NULL-terminated); owned */
} flags_state;

/* Zero c, load the default preset's values into it (so --help shows them;
 * if the catalogue cannot be read the error surfaces in flags_finish), and
 * add every shared flag to t under the headings Model, Parallelism, Schedule
 * and Cluster. TS_ENOMEM / TS_ESTATE only. */
int flags_register(flags_state *s, opt_table *t, config *c, ts_err *err);

/* Parse the command line into t: the arguments flags_parse assembles
 * (argv[1 ..]) go through opt_parse. String flags then point into an array
 * s owns, so keep s until their last use and release it with
 * flags_release. TS_EINVAL with the flag named; TS_ENOMEM. */
int flags_parse(flags_state *s, opt_table *t, int argc, char **argv, ts_err *err);

/* Free what flags_parse allocated (safe on a state never parsed). */
void flags_release(flags_state *s);

/* Resolve the config as described above. TS_EINVAL / TS_EIO with a message
 * naming the flag, file:line or what would be valid. On failure the config
 * owns nothing (no topology). */
int flags_finish(flags_state *s, const opt_table *t, ts_err *err);

/* Write the resolved configuration as "key: value" lines (what `trainsim
 * config` prints and what a run records). */
void flags_print(const flags_state *s, FILE *f);

#endif
