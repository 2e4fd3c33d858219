#include "exec/core/backend.h"

#include <assert.h>

static_assert(sizeof(int) == sizeof(float), "be_alloc_ints hands out float blocks as ints");

static const char *const CAT_NAMES[XMEM_NCAT] = {"weights", "gradients", "optimizer", "activations", "buffers"};

const char *xmem_cat_name(xmem_cat c)
{
    return (unsigned)c < XMEM_NCAT ? CAT_NAMES[c] : "?";
}

int be_alloc(backend *be, size_t n, xmem_cat cat, float **out, ts_err *err)
{
    *out = NULL;
    if (n == 0)
        return TS_OK;
    float *p = NULL;
    for (int i = 0; i < be->pool_len && !p; i++)
        if (be->pool_n[i] == n) { /* a kept block of this size */
            p = be->pool_p[i];
            be->pool_p[i] = be->pool_p[be->pool_len - 1];
            be->pool_n[i] = be->pool_n[be->pool_len - 1];
            be->pool_len--;
            be->zero(be, p, n);
        }
    if (!p)
        p = be->alloc(be, n);
    if (!p)
        return err_set(err, TS_ENOMEM, "%s backend: cannot allocate %zu bytes of %s", be->name, n * sizeof(float),
                       xmem_cat_name(cat));
    be_count(be, cat, n * sizeof(float), true);
    *out = p;
    return TS_OK;
}

int be_alloc_ints(backend *be, size_t n, xmem_cat cat, int **out, ts_err *err)
{
    float *p = NULL;
    int rc = be_alloc(be, n, cat, &p, err);
    *out = (int *)(void *)p;
    return rc;
}

void be_free_ints(backend *be, int *p, size_t n, xmem_cat cat)
{
    be_free(be, (float *)(void *)p, n, cat);
}

void be_count(backend *be, xmem_cat cat, size_t bytes, bool alloc)
{
    if (!alloc) {
        be->cur_bytes[cat] -= bytes;
        be->cur_total_bytes -= bytes;
        return;
    }
    be->cur_bytes[cat] += bytes;
    be->cur_total_bytes += bytes;
    if (be->cur_bytes[cat] > be->peak_bytes[cat])
        be->peak_bytes[cat] = be->cur_bytes[cat];
    if (be->cur_total_bytes > be->peak_total_bytes) {
        be->peak_total_bytes = be->cur_total_bytes;
        for (int c = 0; c < XMEM_NCAT; c++)
            be->at_peak_bytes[c] = be->cur_bytes[c];
    }
}

void be_free(backend *be, float *p, size_t n, xmem_cat cat)
{
    if (!p)
        return;
    be_count(be, cat, n * sizeof(float), false);
    if (be->pool_len < BE_POOL_MAX) { /* kept for a later be_alloc of the same size */
        be->pool_p[be->pool_len] = p;
        be->pool_n[be->pool_len++] = n;
        return;
    }
    be->free(be, p);
}

void be_pool_drain(backend *be)
{
    for (int i = 0; i < be->pool_len; i++)
        be->free(be, be->pool_p[i]);
    be->pool_len = 0;
}

void be_reset_peaks(backend *be)
{
    be->peak_total_bytes = be->cur_total_bytes;
    for (int c = 0; c < XMEM_NCAT; c++) {
        be->peak_bytes[c] = be->cur_bytes[c];
        be->at_peak_bytes[c] = be->cur_bytes[c];
    }
}
