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
 *   - a model, precision or kernel setting (every other shared flag, those
 *     added to flags_register later included): passed through, resolved
 *     as trainsim simulate resolves it and set on every candidate
 *     (cmd_search.c).
 * Flags of neither table are left to search's own parser (unknown flag).
 *
 * Ownership: the result holds pointers into argv (borrowed) in arrays it
 * owns; free them with search_pass_free.
 */
#ifndef TRAINSIM_SEARCH_PASS_H
#define TRAINSIM_SEARCH_PASS_H

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
} search_pass;

/* Split argv (argc entries, argv[0] the command) against search's own table
 * own. TS_EINVAL naming a refused flag, what the search chooses for it and
 * how to pin it; TS_ENOMEM. */
int search_pass_split(const opt_table *own, int argc, char **argv, search_pass *p, ts_err *err);

void search_pass_free(search_pass *p);

#endif
