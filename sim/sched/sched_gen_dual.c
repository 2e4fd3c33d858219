/* sched_gen_dual — DualPipeV and DualPipe, after deepseek-ai/DualPipe's
 * dualpipev.py (DualPipeV.step) and dualpipe.py (DualPipe.step). Compute actions only; F&B pairs carry the overlap
 * mark of sched.h. */
#include "sim/sched/sched_gen_dual.h"

#include <stdlib.h>

/* One rank's generator state: next F and next backward micro-batch of each
 * chunk, and the FIFO of deferred W passes (dualpipev.py's
 * WeightGradStore: a zero-bubble backward queues its W, _weight_chunk runs
 * the oldest). */
typedef struct {
    sched_list *l;
    ts_err *err;
    int swap; /* chunk = phase ^ swap (dualpipe.py's second half of the ranks) */
    int f[2], b[2];
    int *wq_chunk, *wq_mb; /* 2m entries each, owned by the caller */
    int wq_head, wq_tail;
} dstate;

static int fwd(dstate *d, int ph, bool overlap)
{
    int c = ph ^ d->swap;
    if (sched_list_push(d->l, ACT_F, c, d->f[c]++, -1, d->err))
        return TS_ENOMEM;
    d->l->a[d->l->n - 1].overlap = overlap ? 1 : 0;
    return TS_OK;
}

/* _backward_chunk(c, enable_zb): a whole B, or with zb the input-gradient
 * part I now and its W queued. */
static int bwd(dstate *d, int ph, bool zb)
{
    int c = ph ^ d->swap;
    int mb = d->b[c]++;
    if (!zb)
        return sched_list_push(d->l, ACT_B, c, mb, -1, d->err);
    d->wq_chunk[d->wq_tail] = c;
    d->wq_mb[d->wq_tail++] = mb;
    return sched_list_push(d->l, ACT_I, c, mb, -1, d->err);
}

/* _weight_chunk(): the oldest queued W. */
static int wgt(dstate *d)
{
    int i = d->wq_head++;
    return sched_list_push(d->l, ACT_W, d->wq_chunk[i], d->wq_mb[i], -1, d->err);
}

/* _forward_backward_chunk(c0, c1): F of chunk c0 overlapped with the whole
 * B of chunk c1 (two different micro-batches). */
static int fb(dstate *d, int c0, int c1)
{
    return fwd(d, c0, true) || bwd(d, c1, false) ? TS_ENOMEM : TS_OK;
}

/* The eight steps of DualPipeV.step for rank r (p ranks, m >= 2p chunks of
 * micro-batches). Phase 0 of dualpipev.py is stage r, phase 1 stage
 * 2p-1-r; rank p-1 is the bottom of the V (`last`). DualPipe.step is the
 * same with p = half the ranks, m = the micro-batches of one direction,
 * r = the rank's distance to the nearer end, `last` = a middle rank, and
 * the phases swapped on the second half of the ranks (d->swap). */
static int gen_rank(dstate *d, int p, int m, int r, bool last)
{
#define DO(x)                                                                                                          \
    do {                                                                                                               \
        if ((x) != TS_OK)                                                                                              \
            return TS_ENOMEM;                                                                                          \
    } while (0)
    for (int i = 0; i < 2 * (p - r - 1); i++) /* step 1: nF0 */
        DO(fwd(d, 0, false));
    for (int i = 0; i < r + 1; i++) { /* step 2: nF0F1 */
        DO(fwd(d, 0, false));
        DO(fwd(d, 1, false));
    }
    for (int i = 0; i < p - r - 1; i++) { /* step 3: nB1W1F1, zero bubble */
        DO(bwd(d, 1, true));
        DO(wgt(d));
        DO(fwd(d, 1, false));
    }
    for (int i = 0; i < m - 2 * p + r + 1; i++) { /* step 4 (main): nF0B1F1B0 */
        if (i == 0 && last) {
            /* dualpipev.py does not overlap these two on the last rank, to
             * shorten the bubble. */
            DO(fwd(d, 0, false));
            DO(bwd(d, 1, false));
        } else {
            DO(fb(d, 0, 1));
        }
        DO(fb(d, 1, 0));
    }
    for (int i = 0; i < p - r - 1; i++) { /* step 5: nB1F1B0 */
        DO(bwd(d, 1, false));
        DO(fb(d, 1, 0));
    }
    bool zb = false;
    for (int i = 0; i < r + 1; i++) { /* step 6: nB1B0, second half zero bubble */
        if (i == (r + 1) / 2 && r % 2 == 1)
            zb = true;
        DO(bwd(d, 1, zb));
        if (i == (r + 1) / 2 && r % 2 == 0)
            zb = true;
        DO(bwd(d, 0, zb));
    }
    for (int i = 0; i < p - r - 1; i++) { /* step 7: nWB0, zero bubble */
        DO(wgt(d));
        DO(bwd(d, 0, true));
    }
    for (int i = 0; i < r + 1; i++) /* step 8: nW */
        DO(wgt(d));
#undef DO
    return TS_OK;
}

static int gen_dual(const sched_opts *o, bool dual, sched_list *lists, ts_err *err)
{
    int p = o->p, m = o->m, rc = TS_OK;
    int *wq_chunk = malloc(2 * (size_t)m * sizeof *wq_chunk), *wq_mb = malloc(2 * (size_t)m * sizeof *wq_mb);
    if (!wq_chunk || !wq_mb) {
        rc = err_set(err, TS_ENOMEM, "schedule: out of memory");
        goto out;
    }
    for (int r = 0; r < p && rc == TS_OK; r++) {
        dstate d = {.l = &lists[r], .err = err, .wq_chunk = wq_chunk, .wq_mb = wq_mb};
        if (dual) {
            /* DualPipe.step: half_rank = min(r, p-1-r), phases swapped on
             * ranks >= p/2, m/2 micro-batches each way */
            int h = r < p - 1 - r ? r : p - 1 - r;
            d.swap = r >= p / 2;
            rc = gen_rank(&d, p / 2, m / 2, h, h == p / 2 - 1);
        } else {
            rc = gen_rank(&d, p, m, r, r == p - 1);
        }
        if (rc == TS_OK && d.wq_head != d.wq_tail)
            rc = err_set(err, TS_EINVAL, "%s: rank %d leaves %d weight-gradient passes unrun (internal error)",
                         dual ? "dualpipe" : "dualpipev", r, d.wq_tail - d.wq_head);
    }
out:
    free(wq_chunk);
    free(wq_mb);
    return rc;
}

int sched_gen_dualpipev(const sched_opts *o, sched_list *lists, ts_err *err)
{
    return gen_dual(o, false, lists, err);
}

int sched_gen_dualpipe(const sched_opts *o, sched_list *lists, ts_err *err)
{
    return gen_dual(o, true, lists, err);
}
