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
 * Resolution in flags_finish, whatever the order of the flags: every
 * field takes the first of
 *  1. its flag, given explicitly;
 *  2. with --model NAME only, the preset (topologies/models.csv): shape and
 *     starting layout (GPUs, t, p, virtual stages, batch, sequence
 *     parallelism, recomputation, distributed optimizer, schedule). A preset
 *     is never applied behind the user's back: without --model nothing
 *     comes from one, except when no shared flag at all is given, which
 *     runs the built-in default (FLAGS_DEFAULT_MODEL, named as such);
 *  3. Megatron-LM's own argument default (megatron/training/arguments.py):
 *     t = p = 1, 1F1B (interleaved when a virtual-pipeline flag is given),
 *     no sequence parallelism, no recomputation, fp32, tied embeddings,
 *     biases, LayerNorm, learned absolute positions, GPT-2's vocabulary
 *     (50257, pretrain_gpt.py's default tokenizer) padded to a multiple of
 *     --make-vocab-size-divisible-by (128) x t;
 *  4. Megatron-LM's derived values: --ffn-hidden-size 4h (SwiGLU: 8h/3
 *     rounded down to a multiple of 64), --kv-channels h / a, one query
 *     group per head (--num-query-groups takes effect only with
 *     --group-query-attention, whose default is 1 group), the padded
 *     vocabulary, --global-batch-size = micro-batch x d; and trainsim's:
 *     --gpus t x p x d (d = 1 when not given), --max-position-embeddings =
 *     --seq-length.
 * Without --model, Megatron-LM's required flags must be given
 * (--num-layers, --hidden-size, --num-attention-heads, --seq-length,
 * --micro-batch-size). With a preset, an explicit -p drops the preset's
 * interleaving and uneven split, and a --schedule other than interleaved
 * its virtual stages. The cluster: --gpu KIND (catalogue) and --topology
 * FILE; without a topology, the built-in default (topo_default_for) for the
 * GPU kind, sized to --gpus; a parametric topology gives the GPU kind unless
 * --gpu is given, and --gpu must then agree with it. Then config_resolve
 * (divisibility, gpus = t x p x d, ..., and the derived d, v, GPUs per
 * node). flags_print shows every value with where it came from.
 *
 * Files: flags.c (the table, the resolution: flags_register, flags_finish),
 * flags_parse.c (the command line and a --megatron-script's arguments:
 * flags_parse, flags_release), flags_print.c (flags_print).
 *
 * Ownership: the state borrows the config and the strings of argv, and
 * owns the argument array and the --megatron-script it read (flags_release);
 * the config owns the topology after flags_finish (config_free releases it).
 */
#ifndef TRAINSIM_FLAGS_H
#define TRAINSIM_FLAGS_H

#include <stdbool.h>

#include "sim/config/config.h"
#include "sim/config/moe_flags.h"
#include "sim/config/mscript.h"
#include "sim/util/err.h"
#include "sim/util/opt.h"

#define FLAGS_DEFAULT_MODEL "gpt3-175b"
/* The GPU when neither --gpu nor a topology names one. */
#define FLAGS_DEFAULT_GPU "A100-SXM4-80GB"

/* Where a resolved value came from (flags_print shows it). */
typedef enum {
    FLAGS_SRC_FLAG = 0, /* given on the command line (or by --megatron-script) */
    FLAGS_SRC_PRESET,   /* the --model preset */
    FLAGS_SRC_BUILTIN,  /* the built-in default run (no flag given at all) */
    FLAGS_SRC_MEGATRON, /* Megatron-LM's argument default */
    FLAGS_SRC_DERIVED,  /* computed from other values (the rule is printed) */
    FLAGS_SRC_TRAINSIM, /* trainsim's own default: something Megatron-LM has no flag for */
    FLAGS_SRC_COUNT
} flags_source;

/* The resolved values flags_print lists, one per row. */
typedef enum {
    FLAGS_F_LAYERS = 0,
    FLAGS_F_HIDDEN,
    FLAGS_F_HEADS,
    FLAGS_F_KV,
    FLAGS_F_GROUPS,
    FLAGS_F_FFN,
    FLAGS_F_SWIGLU,
    FLAGS_F_SEQ,
    FLAGS_F_MAXPOS,
    FLAGS_F_ADROP,
    FLAGS_F_HDROP,
    FLAGS_F_VOCAB,
    FLAGS_F_MAKEDIV,
    FLAGS_F_PADDED,
    FLAGS_F_UNTIE,
    FLAGS_F_BIAS,
    FLAGS_F_NORM,
    FLAGS_F_POS,
    FLAGS_F_PREC,
    FLAGS_F_MBS,
    FLAGS_F_GBS,
    FLAGS_F_TP,
    FLAGS_F_PP,
    FLAGS_F_DP,
    FLAGS_F_VP,
    FLAGS_F_FIRST,
    FLAGS_F_LAST,
    FLAGS_F_SP,
    FLAGS_F_RECOMPUTE,
    FLAGS_F_RMETHOD,
    FLAGS_F_RLAYERS,
    FLAGS_F_DISTOPT,
    FLAGS_F_OVERLAP,
    FLAGS_F_SCHEDULE,
    FLAGS_F_GPUS,
    FLAGS_F_GPU,
    FLAGS_F_TOPOLOGY,
    FLAGS_F_ATTN,
    FLAGS_F_RMODULES,
    FLAGS_F_COUNT
} flags_field;

#define FLAGS_RULE_BYTES 96

typedef struct {
    config *c;                                  /* the config being filled (borrowed) */
    bool model_given;                           /* --model was given (a preset applies) */
    bool builtin_default;                       /* no shared flag was given: the built-in default ran */
    bool gqa;                                   /* --group-query-attention */
    bool disable_bias;                          /* --disable-bias-linear */
    bool recompute_activations;                 /* --recompute-activations (= selective) */
    int normalization;                          /* --normalization, config_norm */
    int position;                               /* --position-embedding-type, config_position */
    bool no_position_embedding;                 /* --no-position-embedding (Megatron-LM's deprecated flag) */
    int vstages;                                /* --num-virtual-stages-per-pipeline-rank, 0 = unset */
    const char *pipeline_layout;                /* --pipeline-model-parallel-layout, NULL = not given */
    size_t first_entry, end_entry;              /* the shared flags' entries in the table */
    flags_source src[FLAGS_F_COUNT];            /* after flags_finish */
    char rule[FLAGS_F_COUNT][FLAGS_RULE_BYTES]; /* FLAGS_SRC_DERIVED: the rule; else empty */
    const char *model;                          /* --model */
    const char *topology;                       /* --topology FILE, NULL = built-in default */
    const char *gpu;                            /* --gpu KIND, NULL = from the topology or A100-SXM4-80GB */
    int schedule;                               /* --schedule, index into the schedule names */
    int recompute;                              /* --recompute-granularity, config_recompute */
    int recompute_method;                       /* --recompute-method, config_recompute_method */
    bool bf16, fp16, fp32;                      /* --bf16, --fp16, --fp32 */
    int dp;                                     /* --data-parallel-size, 0 = derived */
    char preset_source[512];       /* the preset's layout_source, after flags_finish ("" without a preset) */
    char **argv_owned;             /* the arguments flags_parse built and parsed (NULL-terminated); owned */
    const char *megatron_script;   /* --megatron-script FILE, NULL = none */
    mscript *script;               /* that script as flags_parse read it (its arguments, notes); owned */
    char gpus_arg[32];             /* "--gpus=N" from the script's launcher, when flags_parse adds it */
    char *megatron_ignored;        /* Megatron-LM flags flags_parse dropped as ignored, ", "-separated; NULL if none;
                                    owned (megatron_flags.h) */
    int attention_backend;         /* --attention-backend, config_attn_backend */
    bool use_flash_attn;           /* --use-flash-attn (= --attention-backend flash) */
    int fp8_format;                /* --fp8-format: index into flags.c's FP8_FORMATS (-1 = not given) */
    int fp8_recipe;                /* --fp8-recipe, config_fp8_recipe */
    double clip_grad;              /* --clip-grad (Megatron's default 1.0; 0: no gradient norm) */
    const char *recompute_modules; /* --recompute-modules' first value (flags_parse reads the whole list) */
    unsigned rc_modules;           /* --recompute-modules as CONFIG_RC_* bits; 0 = not given */
    moe_flags_state moe;           /* the MoE flags' own state (moe_flags.h) */
    /* context parallelism */
    int cp_comm;     /* --cp-comm-type, config_cp_comm */
    const char *hcp; /* --hierarchical-context-parallel-sizes' first value (flags_parse reads the list) */
    int hcp_a2a;     /* its first level (0 = not given) */
    int hcp_p2p;     /* its second level */
} flags_state;

/* Zero c and add every shared flag to t under the headings Model,
 * Parallelism, Schedule, Cluster and Memory besides tensors, with
 * Megatron-LM's defaults shown. TS_ENOMEM / TS_ESTATE only. */
int flags_register(flags_state *s, opt_table *t, config *c, ts_err *err);

/* Add the flags of the memory besides tensors (--cuda-context-gib,
 * --nccl-buffer-mib, --nccl-channels, --cublas-workspace-mib,
 * --allocator-fragmentation) to t, targeting *o, whose fields it sets to
 * OVERHEADS_DEFAULT (config_resolve or overheads_resolve then fill
 * the GPU kind's defaults). flags_register calls it; so does trainsim
 * search, which has its own cluster flags, so that every command counts the
 * same overheads. TS_ENOMEM / TS_ESTATE only. */
int flags_register_memory(opt_table *t, memory_overheads *o, ts_err *err);

/* Parse the command line into t: the arguments flags_parse assembles
 * (argv[1 ..]) go through opt_parse. String flags then point into an array
 * s owns, so keep s until their last use and release it with
 * flags_release. TS_EINVAL with the flag named; TS_ENOMEM; TS_EIO if the
 * Megatron-LM flag list must be read and cannot be.
 *
 * Megatron-LM flags trainsim does not model (from the command line or the
 * script) go through mflags_filter (megatron_flags.h) before opt_parse:
 * ignored ones are dropped and listed (flags_ignored), refused ones are
 * TS_EINVAL naming what they change.
 *
 * --megatron-script FILE (or =FILE) anywhere in argv: the script is read
 * (mscript.h, never run) and the arguments it passes to pretrain_gpt.py go
 * first, the command line's after, so a flag on the command line overrides
 * the script's: the script's copy of it is dropped with its values (as many
 * as the flag's type takes: none for a switch unless =v; a flag trainsim
 * does not know keeps the words up to the next flag). --gpus comes from the
 * launcher's nproc_per_node x nnodes unless the command line gives it.
 * Layout flags neither gives take Megatron-LM's defaults, not the preset's
 * (t = p = 1; no sequence parallelism, distributed optimizer, gradient-reduce
 * overlap or recomputation; 1F1B, interleaved with virtual stages; fp32
 * without --bf16/--fp16), so the script decides the run as it would on a
 * cluster. A refusal of a flag the script gives names its FILE:LINE.
 * Fatal: a flag trainsim reads whose value in the script is unresolved
 * (FILE:LINE, the flag and why), and an unresolved world size without
 * --gpus on the command line. An unresolved word that is no flag's value
 * ("$@") is dropped. What was not resolved is listed in s->script
 * (mscript_write_notes); commands print it as notes. TS_EIO when the
 * script cannot be read. */
int flags_parse(flags_state *s, opt_table *t, int argc, char **argv, ts_err *err);

/* Free what flags_parse allocated (safe on a state never parsed). */
void flags_release(flags_state *s);

/* Resolve the config as described above. TS_EINVAL / TS_EIO with a message
 * naming the flag, file:line or what would be valid. On failure the config
 * owns nothing (no topology). */
int flags_finish(flags_state *s, const opt_table *t, ts_err *err);

/* Write the resolved configuration as "key: value" lines, then every value
 * with its source (what `trainsim config` prints). */
void flags_print(const flags_state *s, FILE *f);

/* The Megatron-LM flags the last flags_parse dropped as ignored, ", "-
 * separated ("--lr, --data-path"), or NULL if none. Borrowed from s (valid
 * until flags_release). */
const char *flags_ignored(const flags_state *s);

/* Write "ignored (cannot change performance): --lr, --data-path\n" to f
 * when flags_parse ignored some flags; nothing otherwise. */
void flags_note_ignored(const flags_state *s, FILE *f);
/* Writes to f one line per kernel-fusion flag of the resolved c that takes
 * no effect in its model ("no effect here: FLAG (why)"): bias-GeLU with
 * SwiGLU or without biases, bias-SwiGLU with GeLU, masked softmax with
 * flash/fused attention, RoPE fusion without rotary positions. */
void flags_note_fusions(const config *c, FILE *f);

/* Write to f the treatment of every Megatron-LM flag (mflags_print):
 * the shared flags as modelled, the rows of the shipped megatron_flags.csv.
 * TS_EIO / TS_EINVAL reading the file; TS_ENOMEM. */
int flags_print_megatron(FILE *f, ts_err *err);

#endif
