/* sched_gen_zb — the zero-bubble schedules of Qi et al., "Zero Bubble
 * Pipeline Parallelism" (ICLR 2024): the backward is split into I (the
 * paper's B, input gradient) and W (weight gradient), and W is deferred to
 * fill the bubbles. Compute actions only. */
#include "sim/sched/sched_gen_zb.h"

#include "sim/sched/sched_gen.h"

#include <stdlib.h>

/* ZB-H1, as torch.distributed.pipelining builds it for one chunk
 * (ScheduleInterleavedZeroBubble with v = 1, _get_1f1b_rank_ops): rank r
 * runs 1F1B's min(p-r-1, m) warm-up forwards, then F+I pairs; its W passes
 * lag r steps behind the I passes, and the last r W fill the tail bubble.
 * Activations in flight stay <= p, the 1F1B peak. */
int sched_gen_zb_h1(const sched_opts *o, sched_list *lists, ts_err *err)
{
    int p = o->p, m = o->m;
    for (int r = 0; r < p; r++) {
        sched_list *l = &lists[r];
        int warm = p - 1 - r < m ? p - 1 - r : m;
        int f = 0, b = 0, w = 0;
        /* warm-up ops, then m-warm F+I steps, then warm I-only steps. */
        for (int op = 0; op < m + warm; op++) {
            if (op < warm) {
                if (sched_list_push(l, ACT_F, 0, f++, -1, err))
                    return TS_ENOMEM;
                continue;
            }
            if (op < m && sched_list_push(l, ACT_F, 0, f++, -1, err))
                return TS_ENOMEM;
            if (sched_list_push(l, ACT_I, 0, b++, -1, err))
                return TS_ENOMEM;
            if (op - warm >= r && sched_list_push(l, ACT_W, 0, w++, -1, err))
                return TS_ENOMEM;
        }
        while (w < m)
            if (sched_list_push(l, ACT_W, 0, w++, -1, err))
                return TS_ENOMEM;
    }
    return TS_OK;
}

/* ZB-H2: the paper's handcrafted schedule for T_F = T_B = T_W, built by
 * list scheduling in unit time steps with those times: a free rank runs an
 * I when its gradient has arrived, else an F while fewer than 2p-1
 * micro-batches are in flight (the extra warm-up forwards that fill the
 * bubble before the first B), else its oldest pending W (which fills the
 * rest and reorders the W passes at the tail). Rank r thus starts with
 * 2(p-r)-1 forwards; the peak is 2p-1 activations. */
int sched_gen_zb_h2(const sched_opts *o, sched_list *lists, ts_err *err)
{
    int p = o->p, m = o->m, limit = 2 * p - 1, rc = TS_OK;
    long long *fend = malloc((size_t)p * (size_t)m * sizeof *fend);
    long long *iend = malloc((size_t)p * (size_t)m * sizeof *iend);
    int *nf = calloc((size_t)p, sizeof *nf), *ni = calloc((size_t)p, sizeof *ni);
    int *nw = calloc((size_t)p, sizeof *nw);
    if (!fend || !iend || !nf || !ni || !nw) {
        rc = err_set(err, TS_ENOMEM, "schedule: out of memory");
        goto out;
    }
    for (size_t i = 0; i < (size_t)p * (size_t)m; i++)
        fend[i] = iend[i] = -1;
    int done = 0;
    for (long long t = 0; done < p && rc == TS_OK; t++) {
        for (int r = 0; r < p && rc == TS_OK; r++) {
            if (nw[r] == m)
                continue;
            /* Ops take one step, so every rank is free at every step. */
            long long *fe = fend + (size_t)r * m, *ie = iend + (size_t)r * m;
            bool can_i =
                ni[r] < nf[r] && fe[ni[r]] <= t &&
                (r == p - 1 || (iend[(size_t)(r + 1) * m + ni[r]] >= 0 && iend[(size_t)(r + 1) * m + ni[r]] <= t));
            bool can_f = nf[r] < m && nf[r] - nw[r] < limit &&
                         (r == 0 || (fend[(size_t)(r - 1) * m + nf[r]] >= 0 && fend[(size_t)(r - 1) * m + nf[r]] <= t));
            bool can_w = nw[r] < ni[r] && ie[nw[r]] <= t;
            if (can_i) {
                ie[ni[r]] = t + 1;
                rc = sched_list_push(&lists[r], ACT_I, 0, ni[r]++, -1, err);
            } else if (can_f) {
                fe[nf[r]] = t + 1;
                rc = sched_list_push(&lists[r], ACT_F, 0, nf[r]++, -1, err);
            } else if (can_w) {
                rc = sched_list_push(&lists[r], ACT_W, 0, nw[r]++, -1, err);
                if (nw[r] == m)
                    done++;
            }
        }
    }
out:
    free(fend);
    free(iend);
    free(nf);
    free(ni);
    free(nw);
    return rc;
}

/* ZB-V, as torch.distributed.pipelining's ScheduleZBVZeroBubble (ported
 * from the paper's authors): rank r holds stage r (chunk 0) and stage
 * 2p-1-r (chunk 1). It plans max(2p-1, m) micro-batches and drops those
 * >= m, keeping the order of the rest. */
int sched_gen_zb_v(const sched_opts *o, sched_list *lists, ts_err *err)
{
    int p = o->p, m = o->m, n = m > 2 * p - 1 ? m : 2 * p - 1;
    for (int r = 0; r < p; r++) {
        sched_list *l = &lists[r];
        int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
#define PUSH(kind, chunk, mbv)                                                                                         \
    do {                                                                                                               \
        int mb_ = (mbv);                                                                                               \
        if (mb_ < m && sched_list_push(l, (kind), (chunk), mb_, -1, err))                                              \
            return TS_ENOMEM;                                                                                          \
    } while (0)
        for (int i = 0; i < 2 * (p - r) - 1; i++)
            PUSH(ACT_F, 0, f0++);
        for (int i = 0; i < r; i++) {
            PUSH(ACT_F, 1, f1++);
            PUSH(ACT_F, 0, f0++);
        }
        for (int i = 0; i < p - r; i++) {
            PUSH(ACT_F, 1, f1++);
            PUSH(ACT_I, 1, b1);
            PUSH(ACT_W, 1, b1++);
        }
        while (f1 < f0 || f0 < n) {
            if (f0 < n)
                PUSH(ACT_F, 0, f0++);
            PUSH(ACT_I, 0, b0);
            PUSH(ACT_W, 0, b0++);
            PUSH(ACT_F, 1, f1++);
            PUSH(ACT_I, 1, b1);
            PUSH(ACT_W, 1, b1++);
        }
        int w0 = b0, w1 = b1;
        for (int i = 0; i < r; i++) {
            PUSH(ACT_I, 0, b0++);
            PUSH(ACT_I, 1, b1++);
        }
        for (int i = 0; i < p - r; i++) {
            PUSH(ACT_I, 0, b0++);
            PUSH(ACT_W, 0, w0++);
        }
        while (w1 < b1)
            PUSH(ACT_W, 1, w1++);
        while (w0 < b0)
            PUSH(ACT_W, 0, w0++);
#undef PUSH
    }
    return TS_OK;
}
