/* search_pass — trainsim simulate's shared flags (flags_register) on
 * trainsim search's command line.
 *
 * A flag of the shared table that search does not define itself is either
 *   - a layout dimension or a setting that depends on one (t, p, the
 *     micro-batch size, the schedule and stage split, sequence parallelism,
 *     recomputation, the distributed optimizer, cp, ep, etp, the dispatcher,
 *     the overlaps that need a given layout, FSDP): refused, naming what the
 *     search chooses and how to pin or bound it (SEARCH_PASS_REFUSED in
 *     search_pass.c, the one list), or
 *   - --delay-wgrad-compute, which needs --overlap-moe-expert-parallel-comm:
 *     not passed (the neutral layout has no overlap) but recorded
 *     (search_pass.delay_wgrad); the caller sets it on the candidates that
 *     overlap their EP pairs (--try-overlap-moe-expert-parallel-comm) and
 *     refuses it without that flag;
 *   - a model, precision or kernel setting (every other shared flag, those
 *     added to flags_register later included): passed through, resolved
 *     as trainsim simulate resolves it (search_pass_resolve) and set on
 *     every candidate (the model and experts through search_space.model
 *     and .moe, the training step's other settings through
 *     search_space.par).
 * Flags of neither table are left to search's own parser (unknown flag).
 * Files: search_pass.c; used by cmd_search.c.
 *
 * Ownership: the result holds pointers into argv (borrowed) in arrays it
 * owns; free them with search_pass_free.
 */
#ifndef TRAINSIM_SEARCH_PASS_H
#define TRAINSIM_SEARCH_PASS_H

#include <stdbool.h>
#include <stddef.h>

#include "sim/config/flags.h"
#include "sim/util/err.h"
#include "sim/util/opt.h"

typedef struct {
    char **rest; /* argv[0] then search's own arguments and unknown ones, for opt_parse */
    int n_rest;
    char **pass; /* the shared flags passed through, each with its value */
    int n_pass;
    char **fwd; /* search's own flags that the shared table also has (the model's shape, FP8, the experts),
                   with their values: the same settings for the pass-through resolution */
    int n_fwd;
    bool delay_wgrad; /* --delay-wgrad-compute given (true, or =true|1|yes|on) */
} search_pass;

/* Split argv (argc entries, argv[0] the command) against search's own table
 * own. TS_EINVAL naming a refused flag, what the search chooses for it and
 * how to pin it; TS_ENOMEM. */
int search_pass_split(const opt_table *own, int argc, char **argv, search_pass *p, ts_err *err);

void search_pass_free(search_pass *p);

/* What the fixed settings are resolved from (borrowed strings). */
typedef struct {
    const char *script;   /* --megatron-script FILE, NULL = none */
    const char *model;    /* --model (the preset; with a script, only when given) */
    const char *gpu;      /* the GPU kind (without a script: always, search_pass_gpu_kind) */
    const char *topology; /* --topology FILE (with a script), NULL = none */
    int gpus;             /* --gpus (with a script), 0 = the script's */
    bool experts;         /* --num-experts given (without a script: the neutral layout's ep, etp flags) */
} search_pass_base;

/* The fixed settings, resolved by the shared flags (flags_parse,
 * flags_finish) into *c as trainsim simulate resolves them: the
 * --megatron-script's arguments with the pass-through flags (p->pass), or
 * without a script the --model preset with search's own model flags
 * (p->fwd) and the pass-through flags on a neutral layout (one GPU, t = p
 * = cp = ep = etp = 1, 1F1B, one sequence), whose layout the search then
 * replaces. The script's notes and ignored flags go to stderr unless
 * quiet. The caller owns c, fs and ft, set up or not (config_free,
 * flags_release, opt_table_free; c->moe borrows from fs). TS_EINVAL with
 * simulate's message (a script's prefixed with its path); TS_ENOMEM,
 * TS_EIO. */
int search_pass_resolve(const search_pass *p, const search_pass_base *b, bool quiet, config *c, flags_state *fs,
                        opt_table *ft, ts_err *err);

/* The GPU kind without a script into gpu: gpu_flag, else the topology
 * file's, else A100 80GB (as the search picks it). TS_EINVAL / TS_EIO
 * reading the topology. */
int search_pass_gpu_kind(const char *gpu_flag, const char *topology, char *gpu, size_t gpu_bytes, ts_err *err);

#endif
