#include "sim/config/catalog.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "sim/util/csvio.h"
#include "sim/util/opt.h"

/* ---------------------------------------------------------------- locating */

static bool readable(const char *p)
{
    return access(p, R_OK) == 0;
}

int catalog_find(const char *file, char *buf, size_t cap, ts_err *err)
{
    const char *env = getenv("TRAINSIM_DATA_DIR");
    if (env && *env) {
        snprintf(buf, cap, "%s/%s", env, file);
        if (readable(buf))
            return TS_OK;
        return err_set(err, TS_EIO,
                       "%s not found: looked in %s (from TRAINSIM_DATA_DIR; unset it to use the "
                       "shipped topologies/)",
                       file, buf);
    }
    char tried[2 * CATALOG_PATH_BYTES] = "";
    char exe[CATALOG_PATH_BYTES];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0'; /* the executable's directory ... */
            char *up = strrchr(exe, '/');
            if (up && up != exe)
                *up = '\0'; /* ... and its parent: <dir>/../topologies without the ".." */
            else
                snprintf(exe, sizeof exe, "%s", up ? "" : "..");
            snprintf(buf, cap, "%s/topologies/%s", exe, file);
            if (readable(buf))
                return TS_OK;
            snprintf(tried, sizeof tried, "%s, ", buf);
        }
    }
    snprintf(buf, cap, "topologies/%s", file);
    if (readable(buf))
        return TS_OK;
    return err_set(err, TS_EIO, "%s not found: looked in %s./%s (set TRAINSIM_DATA_DIR to the folder holding it)", file,
                   tried, buf);
}

/* ---------------------------------------------------------------- GPUs */

void catalog_gpus_free(catalog_gpus *c)
{
    if (!c)
        return;
    free(c->gpus);
    free(c->aliases);
    free(c);
}

/* Whether word is one of the space-separated words of list (any case). */
static bool in_list(const char *list, const char *word)
{
    size_t wl = strlen(word);
    for (const char *p = list; *p;) {
        while (*p == ' ')
            p++;
        size_t n = strcspn(p, " ");
        if (n && n == wl && !strncasecmp(p, word, n))
            return true;
        p += n;
    }
    return false;
}

const gpu_spec *catalog_gpus_find(const catalog_gpus *c, const char *kind)
{
    for (size_t i = 0; i < c->n; i++)
        if (!strcasecmp(c->gpus[i].name, kind) || in_list(c->aliases[i], kind))
            return &c->gpus[i];
    return NULL;
}

static const char *const GPU_COLS[] = {
    "gpu", "bf16_tflops", "fp16_tflops", "fp32_tflops", "hbm_gib", "hbm_gbps", "nvlink_gbps_per_direction", NULL};

static int gpu_row(const csvio_table *t, size_t r, catalog_gpus *c, ts_err *err)
{
    gpu_spec *g = &c->gpus[r];
    const char *name;
    int rc = csvio_get_str(t, r, "gpu", &name, err);
    if (rc)
        return rc;
    if (strlen(name) >= sizeof g->name || strchr(name, ' '))
        return csvio_errf(t, r, "gpu", err, "'%s' is not a valid name (no spaces, under %zu characters)", name,
                          sizeof g->name);
    snprintf(g->name, sizeof g->name, "%s", name);
    const char *al = csvio_cell(t, r, "aliases");
    if (strlen(al) >= CATALOG_ALIAS_BYTES)
        return csvio_errf(t, r, "aliases", err, "too long (at most %d characters)", CATALOG_ALIAS_BYTES - 1);
    snprintf(c->aliases[r], CATALOG_ALIAS_BYTES, "%s", al);
    if ((rc = csvio_get_positive_max(t, r, "bf16_tflops", CATALOG_MAX_TFLOPS, &g->bf16_tflops, err)) ||
        (rc = csvio_get_positive_max(t, r, "fp16_tflops", CATALOG_MAX_TFLOPS, &g->fp16_tflops, err)) ||
        (rc = csvio_get_positive_max(t, r, "fp32_tflops", CATALOG_MAX_TFLOPS, &g->fp32_tflops, err)) ||
        (rc = csvio_get_positive_max(t, r, "hbm_gib", CATALOG_MAX_HBM_GIB, &g->hbm_gib, err)) ||
        (rc = csvio_get_double(t, r, "hbm_gbps", CATALOG_MIN_GBPS, CATALOG_MAX_GBPS, &g->hbm_gbps, err)) ||
        (rc = csvio_get_double(t, r, "nvlink_gbps_per_direction", CATALOG_MIN_GBPS, CATALOG_MAX_GBPS, &g->nvlink_gbps,
                               err)))
        return rc;
    /* optional columns: an empty cell (or no column) means "none" (0) */
    if (!csvio_empty(t, r, "fp8_tflops") &&
        (rc = csvio_get_positive_max(t, r, "fp8_tflops", CATALOG_MAX_TFLOPS, &g->fp8_tflops, err)))
        return rc;
    if (!csvio_empty(t, r, "tf32_tflops") &&
        (rc = csvio_get_positive_max(t, r, "tf32_tflops", CATALOG_MAX_TFLOPS, &g->tf32_tflops, err)))
        return rc;
    if (!csvio_empty(t, r, "tdp_w") && (rc = csvio_get_positive_max(t, r, "tdp_w", 1e6, &g->tdp_w, err)))
        return rc;
    if (!csvio_empty(t, r, "cuda_context_gib") &&
        (rc = csvio_get_positive_max(t, r, "cuda_context_gib", CATALOG_MAX_HBM_GIB, &g->cuda_context_gib, err)))
        return rc;
    if (!csvio_empty(t, r, "cublas_workspace_mib") &&
        (rc = csvio_get_positive_max(t, r, "cublas_workspace_mib", 1e6, &g->cublas_workspace_mib, err)))
        return rc;
    if (!csvio_empty(t, r, "nccl_channels") &&
        (rc = csvio_get_int(t, r, "nccl_channels", 1, 64, &g->nccl_channels, err)))
        return rc;
    if (!csvio_empty(t, r, "fp4_tflops") &&
        (rc = csvio_get_positive_max(t, r, "fp4_tflops", CATALOG_MAX_TFLOPS, &g->fp4_tflops, err)))
        return rc;
    if (!csvio_empty(t, r, "sms") && (rc = csvio_get_int(t, r, "sms", 1, 1024, &g->sms, err)))
        return rc;
    /* every name and alias must be unique */
    for (size_t j = 0; j < r; j++) {
        const char *clash = NULL;
        if (catalog_gpus_find(&(catalog_gpus){.n = 1, .gpus = &c->gpus[j], .aliases = &c->aliases[j]}, g->name))
            clash = g->name;
        for (const char *p = c->aliases[r]; !clash && *p;) {
            while (*p == ' ')
                p++;
            size_t n = strcspn(p, " ");
            char w[CATALOG_ALIAS_BYTES];
            snprintf(w, sizeof w, "%.*s", (int)n, p);
            /* NOLINTNEXTLINE(clang-analyzer-core.NonNullParamChecker): an array member, never null */
            if (n && (!strcasecmp(c->gpus[j].name, w) || in_list(c->aliases[j], w)))
                return csvio_errf(t, r, "aliases", err, "'%s' already names %s (line %d)", w, c->gpus[j].name,
                                  t->rows[j].line);
            p += n;
        }
        if (clash)
            return csvio_errf(t, r, "gpu", err, "'%s' already names %s (line %d)", clash, c->gpus[j].name,
                              t->rows[j].line);
    }
    return TS_OK;
}

int catalog_gpus_load(const char *path, catalog_gpus **out, ts_err *err)
{
    *out = NULL;
    char found[CATALOG_PATH_BYTES];
    int rc = TS_OK;
    if (!path) {
        if ((rc = catalog_find("gpus.csv", found, sizeof found, err)))
            return rc;
        path = found;
    }
    csvio_table *t = NULL;
    if ((rc = csvio_read(path, GPU_COLS, 0, &t, err)))
        return rc;
    catalog_gpus *c = calloc(1, sizeof *c);
    if (c) {
        c->gpus = calloc(t->nrows, sizeof *c->gpus);
        c->aliases = calloc(t->nrows, sizeof *c->aliases);
    }
    if (!c || !c->gpus || !c->aliases) {
        rc = err_set(err, TS_ENOMEM, "%s: out of memory", path);
        goto out;
    }
    c->n = t->nrows;
    snprintf(c->path, sizeof c->path, "%s", path);
    for (size_t r = 0; r < t->nrows && !rc; r++)
        rc = gpu_row(t, r, c, err);
out:
    csvio_free(t);
    if (rc) {
        catalog_gpus_free(c);
        return rc;
    }
    *out = c;
    return TS_OK;
}

int catalog_gpus_lookup(const catalog_gpus *c, const char *kind, gpu_spec *out, ts_err *err)
{
    const gpu_spec *g = catalog_gpus_find(c, kind);
    if (g) {
        *out = *g;
        return TS_OK;
    }
    char list[1024] = "";
    size_t off = 0, best = (size_t)-1;
    const char *near = NULL;
    for (size_t i = 0; i < c->n && off < sizeof list; i++) {
        off += (size_t)snprintf(list + off, sizeof list - off, "%s%s", i ? ", " : "", c->gpus[i].name);
        size_t d = opt_edit_distance(kind, c->gpus[i].name);
        if (d < best) {
            best = d;
            near = c->gpus[i].name;
        }
    }
    return err_set(err, TS_EINVAL, "unknown GPU kind '%s' (valid: %s; nearest: %s; catalogue %s)", kind, list,
                   near ? near : "none", c->path);
}

int catalog_gpu(const char *kind, gpu_spec *out, ts_err *err)
{
    catalog_gpus *c = NULL;
    int rc = catalog_gpus_load(NULL, &c, err);
    if (!rc)
        rc = catalog_gpus_lookup(c, kind, out, err);
    catalog_gpus_free(c);
    return rc;
}
