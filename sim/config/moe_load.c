/* moe_load — the per-expert load file (moe_load.h). */
#include "sim/config/moe_load.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/util/afile.h"

/* The largest count accepted: far above any run's routed token-slots
 * (10^18 is ~10^6 times a 10^12-token run at top-8 over 100 layers), low
 * enough that the sum of 2^20 experts stays finite and exact to ~1e-16. */
#define MOE_LOAD_MAX_TOKENS 1e18

/* Whether layer i (0-based) is a MoE layer: sim/model/moe.h's
 * moe_layer_is_moe (the config package sits below the model's). */
static bool is_moe_layer(const moe_config *e, int i)
{
    int f = e->layer_freq > 0 ? e->layer_freq : 1;
    return i >= e->first_dense_layers && (i - e->first_dense_layers) % f == 0;
}

/* The MoE layers of a model of n layers as "a, b, c" (the first few) into buf. */
static void moe_layer_list(const moe_config *e, int n, char *buf, size_t cap)
{
    size_t used = 0;
    int shown = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && used + 16 < cap; i++) {
        if (!is_moe_layer(e, i))
            continue;
        if (shown == 8) {
            snprintf(buf + used, cap - used, ", ...");
            return;
        }
        int w = snprintf(buf + used, cap - used, "%s%d", shown ? ", " : "", i);
        used += w > 0 ? (size_t)w : 0;
        shown++;
    }
}

/* The layer cell of row r: "all" or empty passes; a layer number is checked
 * and refused (per-layer loads are not modelled). */
static int check_layer(const csvio_table *t, size_t r, const moe_config *e, int num_layers, ts_err *err)
{
    const char *v = csvio_cell(t, r, "layer");
    if (v[0] == '\0' || strcmp(v, "all") == 0)
        return TS_OK;
    int layer;
    char range[48];
    snprintf(range, sizeof range, "all, or a layer 0 to %d", num_layers - 1);
    int rc = csvio_get_int(t, r, "layer", 0, num_layers - 1, &layer, err);
    if (rc)
        return csvio_errf(t, r, "layer", err, "'%s' is not valid (valid: %s)", v, range);
    char list[128];
    moe_layer_list(e, num_layers, list, sizeof list);
    if (!is_moe_layer(e, layer))
        return csvio_errf(t, r, "layer", err, "layer %d is not a MoE layer (the MoE layers of --moe-layer-freq: %s)",
                          layer, list);
    return csvio_errf(t, r, "layer", err,
                      "per-layer loads (layer %d) are not modelled: the simulator gives every MoE layer one load "
                      "factor (give 'all', or leave the column out, with each expert's tokens summed over the layers)",
                      layer);
}

int moe_load_parse(const csvio_table *t, const moe_config *e, int num_layers, double *loads, ts_err *err)
{
    int E = e->num_experts, rc = TS_OK;
    int *line = calloc((size_t)(E > 0 ? E : 1), sizeof *line);
    if (!line)
        return err_set(err, TS_ENOMEM, "%s: out of memory for %d experts", t->path, E);
    double sum = 0;
    for (size_t r = 0; r < t->nrows && !rc; r++) {
        int x;
        double v;
        if ((rc = check_layer(t, r, e, num_layers, err)))
            break;
        if ((rc = csvio_get_int(t, r, "expert", 0, E - 1, &x, err))) {
            csvio_errf(t, r, "expert", err, "'%s' is not an expert (valid: an integer 0 to %d, --num-experts %d)",
                       csvio_cell(t, r, "expert"), E - 1, E);
            break;
        }
        if (line[x]) {
            rc = csvio_errf(t, r, "expert", err, "expert %d is given twice (first at line %d; one row per expert)", x,
                            line[x]);
            break;
        }
        line[x] = t->rows[r].line;
        if ((rc = csvio_get_double(t, r, "tokens", 0, MOE_LOAD_MAX_TOKENS, &v, err))) {
            csvio_errf(t, r, "tokens", err,
                       "'%s' is not a token count (valid: a number 0 to %g, the routed token-slots expert %d received "
                       "or its share)",
                       csvio_cell(t, r, "tokens"), MOE_LOAD_MAX_TOKENS, x);
            break;
        }
        loads[x] = v;
        sum += v;
    }
    for (int x = 0; x < E && !rc; x++)
        if (!line[x])
            rc = err_set(err, TS_EINVAL,
                         "%s: expert %d has no row (give one row per expert 0 to %d, --num-experts %d; %zu given)",
                         t->path, x, E - 1, E, t->nrows);
    if (!rc && !(sum > 0))
        rc = err_set(err, TS_EINVAL,
                     "%s: column 'tokens' sums to 0 (give the tokens each expert received: at least one > 0)", t->path);
    free(line);
    return rc;
}

int moe_load_read(const char *path, const moe_config *e, int num_layers, double *loads, ts_err *err)
{
    static const char *const REQUIRED[] = {"expert", "tokens", NULL};
    csvio_table *t = NULL;
    int rc = csvio_read(path, REQUIRED, 0, &t, err);
    if (!rc)
        rc = moe_load_parse(t, e, num_layers, loads, err);
    csvio_free(t);
    return rc;
}

int moe_load_write(const char *path, const int64_t *counts, int n, const char *note, ts_err *err)
{
    afile a = {0};
    int rc = afile_open(&a, path, err);
    if (rc)
        return rc;
    static const char *const HEADER[] = {"layer", "expert", "tokens"};
    if (note)
        rc = csvio_write_comment(a.f, note, err);
    if (!rc)
        rc = csvio_write_row(a.f, 3, HEADER, err);
    for (int x = 0; x < n && !rc; x++) {
        char ex[CSVIO_NUM_BYTES], tok[CSVIO_NUM_BYTES];
        snprintf(ex, sizeof ex, "%d", x);
        snprintf(tok, sizeof tok, "%lld", (long long)counts[x]);
        const char *cells[] = {"all", ex, tok};
        rc = csvio_write_row(a.f, 3, cells, err);
    }
    if (rc) {
        afile_abort(&a);
        return rc;
    }
    return afile_commit(&a, err);
}
