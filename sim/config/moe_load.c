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

/* The layer cell of row r: *layer = -1 for "all" or empty, else a layer
 * number checked to be a MoE layer of the model. */
static int layer_of(const csvio_table *t, size_t r, const moe_config *e, int num_layers, int *layer, ts_err *err)
{
    const char *v = csvio_cell(t, r, "layer");
    *layer = -1;
    if (v[0] == '\0' || strcmp(v, "all") == 0)
        return TS_OK;
    char list[128];
    moe_layer_list(e, num_layers, list, sizeof list);
    if (csvio_get_int(t, r, "layer", 0, num_layers - 1, layer, err))
        return csvio_errf(t, r, "layer", err, "'%s' is not valid (valid: all, or a MoE layer 0 to %d: %s)", v,
                          num_layers - 1, list);
    if (!is_moe_layer(e, *layer))
        return csvio_errf(t, r, "layer", err, "layer %d is not a MoE layer (the MoE layers of --moe-layer-freq: %s)",
                          *layer, list);
    return TS_OK;
}

/* After the rows: every expert of the whole-model form (layer -1) or of
 * every MoE layer has a row (line[] its line, 0 none), and the sums > 0. */
static int check_complete(const csvio_table *t, const moe_config *e, int num_layers, bool per_layer, const int *line,
                          const double *loads, ts_err *err)
{
    int E = e->num_experts;
    for (int l = per_layer ? 0 : -1; l < (per_layer ? num_layers : 0); l++) {
        if (l >= 0 && !is_moe_layer(e, l))
            continue;
        const int *ln = line + (size_t)(l < 0 ? 0 : l) * (size_t)E;
        const double *ld = loads + (size_t)(l < 0 ? 0 : l) * (size_t)E;
        char which[40] = "";
        if (l >= 0)
            snprintf(which, sizeof which, " of layer %d", l);
        int given = 0, missing = -1;
        double sum = 0;
        for (int x = 0; x < E; x++) {
            given += ln[x] != 0;
            if (!ln[x] && missing < 0)
                missing = x;
            sum += ld[x];
        }
        if (l >= 0 && given == 0) {
            char list[128];
            moe_layer_list(e, num_layers, list, sizeof list);
            return err_set(err, TS_EINVAL,
                           "%s: column 'layer': MoE layer %d has no rows (per-layer loads give every MoE layer: %s; "
                           "or give 'all' rows summed over the layers)",
                           t->path, l, list);
        }
        if (missing >= 0)
            return err_set(err, TS_EINVAL,
                           "%s: column 'expert': expert %d%s has no row (give one row per expert 0 to %d, "
                           "--num-experts %d; %d given)",
                           t->path, missing, which, E - 1, E, given);
        if (!(sum > 0))
            return err_set(err, TS_EINVAL,
                           "%s: column 'tokens' sums to 0%s (give the tokens each expert received: at least one > 0)",
                           t->path, which);
    }
    return TS_OK;
}

int moe_load_parse(const csvio_table *t, const moe_config *e, int num_layers, double *loads, bool *per_layer,
                   ts_err *err)
{
    int E = e->num_experts, rc = TS_OK, nl = num_layers > 0 ? num_layers : 1;
    size_t cells = (size_t)(E > 0 ? E : 1) * (size_t)nl;
    int *line = calloc(cells, sizeof *line);
    if (!line)
        return err_set(err, TS_ENOMEM, "%s: out of memory for %d experts x %d layers", t->path, E, nl);
    memset(loads, 0, cells * sizeof *loads);
    *per_layer = false;
    int form_line = 0; /* the first row's line; its layer cell fixes the form */
    for (size_t r = 0; r < t->nrows && !rc; r++) {
        int x, layer;
        double v;
        if ((rc = layer_of(t, r, e, num_layers, &layer, err)))
            break;
        if (r == 0) {
            *per_layer = layer >= 0;
            form_line = t->rows[r].line;
        } else if (*per_layer != (layer >= 0)) {
            rc = csvio_errf(t, r, "layer", err,
                            "'%s' mixes the two forms (line %d has %s): give every row a MoE layer number, or every "
                            "row 'all' (or empty)",
                            csvio_cell(t, r, "layer"), form_line, *per_layer ? "a layer number" : "'all' or empty");
            break;
        }
        if ((rc = csvio_get_int(t, r, "expert", 0, E - 1, &x, err))) {
            csvio_errf(t, r, "expert", err, "'%s' is not an expert (valid: an integer 0 to %d, --num-experts %d)",
                       csvio_cell(t, r, "expert"), E - 1, E);
            break;
        }
        size_t at = (size_t)(layer < 0 ? 0 : layer) * (size_t)E + (size_t)x;
        if (line[at]) {
            char which[40] = "";
            if (layer >= 0)
                snprintf(which, sizeof which, " of layer %d", layer);
            rc = csvio_errf(t, r, "expert", err, "expert %d%s is given twice (first at line %d; one row per expert%s)",
                            x, which, line[at], layer >= 0 ? " and layer" : "");
            break;
        }
        line[at] = t->rows[r].line;
        if ((rc = csvio_get_double(t, r, "tokens", 0, MOE_LOAD_MAX_TOKENS, &v, err))) {
            csvio_errf(t, r, "tokens", err,
                       "'%s' is not a token count (valid: a number 0 to %g, the routed token-slots expert %d received "
                       "or its share)",
                       csvio_cell(t, r, "tokens"), MOE_LOAD_MAX_TOKENS, x);
            break;
        }
        loads[at] = v;
    }
    if (!rc)
        rc = check_complete(t, e, num_layers, *per_layer, line, loads, err);
    free(line);
    return rc;
}

int moe_load_read(const char *path, const moe_config *e, int num_layers, double *loads, bool *per_layer, ts_err *err)
{
    static const char *const REQUIRED[] = {"expert", "tokens", NULL};
    csvio_table *t = NULL;
    int rc = csvio_read(path, REQUIRED, 0, &t, err);
    if (!rc)
        rc = moe_load_parse(t, e, num_layers, loads, per_layer, err);
    csvio_free(t);
    return rc;
}

int moe_load_write(const char *path, const int64_t *counts, int n, int num_layers, const bool *moe_layer,
                   const char *note, ts_err *err)
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
    for (int l = num_layers > 0 ? 0 : -1; l < num_layers && !rc; l++) {
        if (l >= 0 && !moe_layer[l])
            continue;
        char ly[CSVIO_NUM_BYTES] = "all";
        if (l >= 0)
            snprintf(ly, sizeof ly, "%d", l);
        for (int x = 0; x < n && !rc; x++) {
            char ex[CSVIO_NUM_BYTES], tok[CSVIO_NUM_BYTES];
            snprintf(ex, sizeof ex, "%d", x);
            snprintf(tok, sizeof tok, "%lld", (long long)counts[(size_t)(l < 0 ? 0 : l) * (size_t)n + (size_t)x]);
            const char *cells[] = {ly, ex, tok};
            rc = csvio_write_row(a.f, 3, cells, err);
        }
    }
    if (rc) {
        afile_abort(&a);
        return rc;
    }
    return afile_commit(&a, err);
}
