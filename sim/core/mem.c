/* mem — memory timeline per rank (see mem.h). */
#include "sim/core/mem.h"

#include <stdlib.h>
#include <string.h>

#include "sim/config/overheads.h"
#include "sim/util/ckd.h"
#include "sim/util/grow.h"

typedef struct {
    int64_t t_ns;
    uint64_t seq;
    int64_t delta;
    int cat;
} mem_ev;

typedef struct {
    mem_ev *pend; /* future changes pend[head..n_pend), sorted on (t_ns, seq): mostly added in
                     order (a collapsed pass's changes at growing offsets), so an append */
    size_t head, n_pend, cap_pend;
    uint64_t seq;
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
    bool done;
    memory_overheads ov; /* zero unless mem_set_overheads: no fragmentation */
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
    for (int i = 0; i < m->n_ranks; i++) {
        free(m->r[i].pend);
        free(m->r[i].samples);
    }
    free(m->r);
    free(m);
}

static void fail(mem_tracker *m, int code)
{
    if (m->status == TS_OK)
        m->status = code;
}

void mem_set_overheads(mem_tracker *m, const memory_overheads *o)
{
    m->ov = *o;
}

/* Apply one change now. */
static void apply(mem_tracker *m, int rank, const mem_ev *e)
{
    rank_mem *R = &m->r[rank];
    /* A rank's bytes stay within 2^62: past it a sum would wrap negative. */
    int64_t live, total;
    if (ckd_add_i64(&live, R->live[e->cat], e->delta) || ckd_add_i64(&total, R->total, e->delta) ||
        live > CKD_MAX_BYTES || total > CKD_MAX_BYTES) {
        if (m->status == TS_OK) {
            m->status = TS_EINVAL;
            m->bad_rank = rank;
            m->bad_cat = e->cat;
            m->bad_t_ns = e->t_ns;
        }
        return;
    }
    R->live[e->cat] = live;
    R->total = total;
    if (e->cat == MEM_ACTIV || e->cat == MEM_P2P) { /* the fragmentation follows them */
        int64_t frag = overheads_fragmentation_bytes(&m->ov, R->live[MEM_ACTIV] + R->live[MEM_P2P]);
        R->total += frag - R->live[MEM_FRAG];
        R->live[MEM_FRAG] = frag;
        if (frag > R->cat_peak[MEM_FRAG])
            R->cat_peak[MEM_FRAG] = frag;
    }
    if (R->live[e->cat] < 0 && m->status == TS_OK) {
        m->status = TS_ESTATE;
        m->bad_rank = rank;
        m->bad_cat = e->cat;
        m->bad_t_ns = e->t_ns;
        m->bad_bytes = R->live[e->cat];
    }
    if (R->live[e->cat] > R->cat_peak[e->cat])
        R->cat_peak[e->cat] = R->live[e->cat];
    if (R->total > R->peak) {
        R->peak = R->total;
        R->peak_t_ns = e->t_ns;
        memcpy(R->at_peak, R->live, sizeof R->at_peak);
    }
    if (!m->keep_samples)
        return;
    if (R->n_samples > 0 && R->samples[R->n_samples - 1].t_ns == e->t_ns) {
        R->samples[R->n_samples - 1].bytes = R->total;
        return;
    }
    if (R->n_samples == R->cap_samples &&
        grow_to((void **)&R->samples, &R->cap_samples, R->n_samples + 1, 256, sizeof *R->samples)) {
        fail(m, TS_ENOMEM);
        return;
    }
    R->samples[R->n_samples++] = (mem_sample){e->t_ns, R->total};
}

/* Apply the pending changes of rank due at or before t_ns, in order. */
static void flush(mem_tracker *m, int rank, int64_t t_ns)
{
    rank_mem *R = &m->r[rank];
    while (R->head < R->n_pend && R->pend[R->head].t_ns <= t_ns) {
        mem_ev top = R->pend[R->head++];
        apply(m, rank, &top);
    }
    if (R->head == R->n_pend)
        R->head = R->n_pend = 0;
}

void mem_add(mem_tracker *m, int rank, int cat, int64_t delta_bytes, int64_t t_ns, int64_t now_ns)
{
    if (delta_bytes == 0 || rank < 0 || rank >= m->n_ranks || cat < 0 || cat >= MEM_CATS || cat == MEM_FRAG || m->done)
        return;
    rank_mem *R = &m->r[rank];
    flush(m, rank, now_ns);
    mem_ev e = {t_ns, R->seq++, delta_bytes, cat};
    if (t_ns <= now_ns) {
        apply(m, rank, &e);
        return;
    }
    if (R->n_pend == R->cap_pend && R->head > 0) { /* reuse the room of the changes applied */
        memmove(R->pend, R->pend + R->head, (R->n_pend - R->head) * sizeof *R->pend);
        R->n_pend -= R->head;
        R->head = 0;
    }
    if (R->n_pend == R->cap_pend && grow_to((void **)&R->pend, &R->cap_pend, R->n_pend + 1, 64, sizeof *R->pend)) {
        fail(m, TS_ENOMEM);
        return;
    }
    /* after every pending change due at or before t_ns (their seq is lower) */
    size_t i = R->n_pend;
    if (i > R->head && R->pend[i - 1].t_ns > t_ns) {
        size_t lo = R->head, hi = i;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (R->pend[mid].t_ns <= t_ns)
                lo = mid + 1;
            else
                hi = mid;
        }
        memmove(R->pend + lo + 1, R->pend + lo, (i - lo) * sizeof *R->pend);
        i = lo;
    }
    R->pend[i] = e;
    R->n_pend++;
}

int mem_check(mem_tracker *m, ts_err *err)
{
    if (!m->done) {
        for (int r = 0; r < m->n_ranks; r++)
            flush(m, r, INT64_MAX);
        m->done = true;
    }
    if (m->status == TS_ESTATE)
        return err_set(err, TS_ESTATE, "mem: rank %d %s fell to %lld bytes at %lld ns (freed more than allocated)",
                       m->bad_rank, mem_cat_name(m->bad_cat), (long long)m->bad_bytes, (long long)m->bad_t_ns);
    if (m->status == TS_EINVAL)
        return err_set(err, TS_EINVAL,
                       "mem: rank %d's memory (%s) would pass 2^62 bytes (4 EiB) at %lld ns; the "
                       "activations are too large to count: reduce --seq-length, --micro-batch-size "
                       "or --num-layers per pipeline stage",
                       m->bad_rank, mem_cat_name(m->bad_cat), (long long)m->bad_t_ns);
    if (m->status == TS_ENOMEM)
        return err_set(err, TS_ENOMEM, "mem: out of memory for the memory timeline");
    return TS_OK;
}

int64_t mem_live_bytes(const mem_tracker *m, int rank, int cat)
{
    return m->r[rank].live[cat];
}
int64_t mem_peak_bytes(const mem_tracker *m, int rank)
{
    return m->r[rank].peak;
}
int64_t mem_peak_time_ns(const mem_tracker *m, int rank)
{
    return m->r[rank].peak_t_ns;
}
int64_t mem_peak_cat_bytes(const mem_tracker *m, int rank, int cat)
{
    return m->r[rank].at_peak[cat];
}
int64_t mem_cat_peak_bytes(const mem_tracker *m, int rank, int cat)
{
    return m->r[rank].cat_peak[cat];
}

const mem_sample *mem_samples(const mem_tracker *m, int rank, size_t *n)
{
    *n = m->r[rank].n_samples;
    return m->r[rank].samples;
}

const char *mem_cat_name(int cat)
{
    static const char *const names[MEM_CATS] = {
        "weights",    "gradients",    "optimizer",    "activations",      "p2p-buffers",
        "data-batch", "cuda-context", "nccl-buffers", "cublas-workspace", "allocator-fragmentation"};
    return cat >= 0 && cat < MEM_CATS ? names[cat] : "?";
}
