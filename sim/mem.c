/* mem — memory timeline per rank (see mem.h). */
#include "mem.h"

#include <stdlib.h>

typedef struct {
    int64_t live[MEM_CATS];
    int64_t cat_peak[MEM_CATS];
    int64_t total, peak, peak_t_ns;
    int64_t at_peak[MEM_CATS];
    mem_sample *samples;
    size_t n_samples, cap_samples;
} rank_mem;

struct mem_tracker {
    int n_ranks;
    bool keep_samples;
    rank_mem *r;
    int status;
    int bad_rank, bad_cat;
    int64_t bad_t_ns, bad_bytes;
};

int mem_create(int n_ranks, bool keep_samples, mem_tracker **out, ts_err *err)
{
    *out = NULL;
    if (n_ranks < 1)
        return err_set(err, TS_EINVAL, "mem: %d ranks; valid: >= 1", n_ranks);
    mem_tracker *m = calloc(1, sizeof *m);
    if (!m || !(m->r = calloc((size_t)n_ranks, sizeof *m->r))) {
        free(m);
        return err_set(err, TS_ENOMEM, "mem: out of memory for %d ranks", n_ranks);
    }
    m->n_ranks = n_ranks;
    m->keep_samples = keep_samples;
    *out = m;
    return TS_OK;
}

void mem_free(mem_tracker *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->n_ranks; i++)
        free(m->r[i].samples);
    free(m->r);
    free(m);
}

static void sample(mem_tracker *m, rank_mem *R, int64_t now_ns)
{
    if (R->n_samples > 0 && R->samples[R->n_samples - 1].t_ns == now_ns) {
        R->samples[R->n_samples - 1].bytes = R->total;
        return;
    }
    if (R->n_samples == R->cap_samples) {
        size_t nc = R->cap_samples ? R->cap_samples * 2 : 64;
        mem_sample *q = realloc(R->samples, nc * sizeof *q);
        if (!q) {
            if (m->status == TS_OK)
                m->status = TS_ENOMEM;
            return;
        }
        R->samples = q;
        R->cap_samples = nc;
    }
    R->samples[R->n_samples++] = (mem_sample){now_ns, R->total};
}

void mem_add(mem_tracker *m, int rank, int cat, int64_t delta_bytes, int64_t now_ns)
{
    if (delta_bytes == 0 || rank < 0 || rank >= m->n_ranks || cat < 0 || cat >= MEM_CATS)
        return;
    rank_mem *R = &m->r[rank];
    R->live[cat] += delta_bytes;
    R->total += delta_bytes;
    if (R->live[cat] < 0 && m->status == TS_OK) {
        m->status = TS_ESTATE;
        m->bad_rank = rank;
        m->bad_cat = cat;
        m->bad_t_ns = now_ns;
        m->bad_bytes = R->live[cat];
    }
    if (R->live[cat] > R->cat_peak[cat])
        R->cat_peak[cat] = R->live[cat];
    if (R->total > R->peak) {
        R->peak = R->total;
        R->peak_t_ns = now_ns;
        for (int c = 0; c < MEM_CATS; c++)
            R->at_peak[c] = R->live[c];
    }
    if (m->keep_samples)
        sample(m, R, now_ns);
}

int mem_check(const mem_tracker *m, ts_err *err)
{
    if (m->status == TS_ESTATE)
        return err_set(err, TS_ESTATE, "mem: rank %d %s fell to %lld bytes at %lld ns (freed more than allocated)",
                       m->bad_rank, mem_cat_name(m->bad_cat), (long long)m->bad_bytes,
                       (long long)m->bad_t_ns);
    if (m->status == TS_ENOMEM)
        return err_set(err, TS_ENOMEM, "mem: out of memory for memory samples");
    return TS_OK;
}

int64_t mem_live_bytes(const mem_tracker *m, int rank, int cat) { return m->r[rank].live[cat]; }
int64_t mem_peak_bytes(const mem_tracker *m, int rank) { return m->r[rank].peak; }
int64_t mem_peak_time_ns(const mem_tracker *m, int rank) { return m->r[rank].peak_t_ns; }
int64_t mem_peak_cat_bytes(const mem_tracker *m, int rank, int cat) { return m->r[rank].at_peak[cat]; }
int64_t mem_cat_peak_bytes(const mem_tracker *m, int rank, int cat) { return m->r[rank].cat_peak[cat]; }

const mem_sample *mem_samples(const mem_tracker *m, int rank, size_t *n)
{
    *n = m->r[rank].n_samples;
    return m->r[rank].samples;
}

const char *mem_cat_name(int cat)
{
    static const char *const names[MEM_CATS] = {"weights", "gradients", "optimizer", "activations",
                                                "p2p-buffers"};
    return cat >= 0 && cat < MEM_CATS ? names[cat] : "?";
}
