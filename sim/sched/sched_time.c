/* sched_time — see sched_time.h for the timing model. */
#include "sim/sched/sched_time.h"

#include <stdlib.h>
#include <string.h>

#include "sim/sched/sched_dep.h"

void sched_timing_free(sched_timing *out)
{
    if (!out)
        return;
    if (out->start)
        for (int r = 0; r < out->p; r++)
            free(out->start[r]);
    if (out->end)
        for (int r = 0; r < out->p; r++)
            free(out->end[r]);
    free(out->start);
    free(out->end);
    free(out->busy);
    free(out->idle);
    free(out->first);
    free(out->last);
    free(out->peak_inflight);
    memset(out, 0, sizeof *out);
}

double sched_ticks_ms(const sched_timing *tm, int64_t ticks)
{
    return (double)ticks / (double)tm->tick_den / 1e6;
}

static bool is_comm(int kind)
{
    return kind >= ACT_SEND_F && kind <= ACT_RECV_B;
}

typedef struct {
    const sched *s;
    bool comm;
    int64_t dur[ACT_KIND_COUNT], lat;
    int64_t comp[ACT_KIND_COUNT], xcomm[ACT_KIND_COUNT]; /* compute / exposed comm of a paired op */
    int64_t *send_f, *recv_f; /* post times of the transfer of activations into (stage, mb) */
    int64_t *send_b, *recv_b; /* same for the gradient into (stage, mb) */
    int64_t *end_f, *end_bi;  /* end of F / of B or I of (stage, mb) */
} tstate;

static int64_t *slot(const tstate *T, int64_t *a, int st, int mb)
{
    return &a[(size_t)st * (size_t)T->s->m + (size_t)mb];
}

/* Record the post time of a SEND/RECV action a of rank r. */
static void post(tstate *T, int r, const sched_action *a, int64_t t)
{
    int st = sched_stage_of(T->s, r, a->chunk);
    switch (a->kind) {
    case ACT_SEND_F:
        *slot(T, T->send_f, st + 1, a->mb) = t;
        break;
    case ACT_RECV_F:
        *slot(T, T->recv_f, st, a->mb) = t;
        break;
    case ACT_SEND_B:
        *slot(T, T->send_b, st - 1, a->mb) = t;
        break;
    case ACT_RECV_B:
        *slot(T, T->recv_b, st, a->mb) = t;
        break;
    default:
        break;
    }
}

/* When the input of compute action a on rank r is there, or -1 if not yet
 * known. Local inputs are there by program order. */
static int64_t input_ready(const tstate *T, int r, const sched_action *a)
{
    sched_dep in;
    if (sched_dep_input(T->s, r, a, &in) != SCHED_DEP_REMOTE)
        return 0;
    bool fwd = !in.grad;
    if (T->comm) {
        int64_t x = *slot(T, fwd ? T->send_f : T->send_b, in.stage, a->mb);
        int64_t y = *slot(T, fwd ? T->recv_f : T->recv_b, in.stage, a->mb);
        if (x < 0 || y < 0)
            return -1;
        return x + T->lat;
    }
    int64_t e = *slot(T, fwd ? T->end_f : T->end_bi, in.peer_stage, a->mb);
    return e < 0 ? -1 : e + T->lat;
}

/* Index of the next compute action after i on rank r (n_actions[r] if none). */
static size_t next_compute(const sched *s, int r, size_t i)
{
    size_t j = i + 1;
    while (j < s->n_actions[r] && s->actions[r][j].kind > ACT_W)
        j++;
    return j;
}

/* Record the end of compute action a (stage, mb) for the compute-only readers. */
static void mark_end(tstate *T, int r, const sched_action *a, int64_t e)
{
    int stg = sched_stage_of(T->s, r, a->chunk);
    if (a->kind == ACT_F)
        *slot(T, T->end_f, stg, a->mb) = e;
    else if (a->kind != ACT_W)
        *slot(T, T->end_bi, stg, a->mb) = e;
}

int sched_time(const sched *s, const sched_op_times *t, sched_timing *out, ts_err *err)
{
    return sched_time_ep(s, t, NULL, out, err);
}

int sched_time_ep(const sched *s, const sched_op_times *t, const sched_ep_times *ep, sched_timing *out, ts_err *err)
{
    memset(out, 0, sizeof *out);
    if (t->f_ns < 0 || t->b_ns < 0 || t->w_ns < 0 || t->comm_ns < 0)
        return err_set(err, TS_EINVAL, "op times must be >= 0 ns (got F %lld, B %lld, W %lld, comm %lld)",
                       (long long)t->f_ns, (long long)t->b_ns, (long long)t->w_ns, (long long)t->comm_ns);
    int64_t af = ep ? ep->a2a_f_ns : 0, ab = ep ? ep->a2a_b_ns : 0;
    if (af < 0 || ab < 0)
        return err_set(err, TS_EINVAL, "all-to-all times must be >= 0 ns (got F %lld, B %lld)", (long long)af,
                       (long long)ab);
    int p = s->p, rc = TS_OK;
    size_t cells = (size_t)p * (size_t)s->v * (size_t)s->m;
    tstate T = {.s = s, .comm = sched_has_comm(s), .lat = t->comm_ns * s->v};
    T.dur[ACT_F] = t->f_ns;
    T.dur[ACT_B] = t->b_ns + t->w_ns;
    T.dur[ACT_I] = t->b_ns;
    T.dur[ACT_W] = t->w_ns;
    memcpy(T.comp, T.dur, sizeof T.comp);
    T.xcomm[ACT_F] = af;
    T.xcomm[ACT_B] = T.xcomm[ACT_I] = ab;
    /* DualPipe's chunks are whole stages of a p-stage split: v ticks per ns */
    int64_t scale = s->placement == SCHED_PLACE_DUAL ? s->v : 1;
    for (int k = ACT_F; k <= ACT_W; k++) {
        T.comp[k] *= scale;
        T.xcomm[k] *= scale;
        T.dur[k] = T.comp[k] + T.xcomm[k];
    }
    T.send_f = malloc(cells * sizeof *T.send_f);
    T.recv_f = malloc(cells * sizeof *T.recv_f);
    T.send_b = malloc(cells * sizeof *T.send_b);
    T.recv_b = malloc(cells * sizeof *T.recv_b);
    T.end_f = malloc(cells * sizeof *T.end_f);
    T.end_bi = malloc(cells * sizeof *T.end_bi);
    size_t *pos = calloc((size_t)p, sizeof *pos);
    int64_t *clock = calloc((size_t)p, sizeof *clock);
    out->p = p;
    out->tick_den = s->v;
    out->busy = calloc((size_t)p, sizeof *out->busy);
    out->idle = calloc((size_t)p, sizeof *out->idle);
    out->first = calloc((size_t)p, sizeof *out->first);
    out->last = calloc((size_t)p, sizeof *out->last);
    out->peak_inflight = calloc((size_t)p, sizeof *out->peak_inflight);
    out->start = calloc((size_t)p, sizeof *out->start);
    out->end = calloc((size_t)p, sizeof *out->end);
    bool ok = T.send_f && T.recv_f && T.send_b && T.recv_b && T.end_f && T.end_bi && pos && clock && out->busy &&
              out->idle && out->first && out->last && out->peak_inflight && out->start && out->end;
    for (int r = 0; ok && r < p; r++) {
        out->start[r] = malloc((s->n_actions[r] + 1) * sizeof **out->start);
        out->end[r] = malloc((s->n_actions[r] + 1) * sizeof **out->end);
        ok = out->start[r] && out->end[r];
        out->first[r] = -1;
    }
    if (!ok) {
        rc = err_set(err, TS_ENOMEM, "schedule timing: out of memory");
        goto out;
    }
    for (size_t i = 0; i < cells; i++)
        T.send_f[i] = T.recv_f[i] = T.send_b[i] = T.recv_b[i] = T.end_f[i] = T.end_bi[i] = -1;
    sched_peak_inflight(s, out->peak_inflight);
    bool progress = true;
    while (progress) {
        progress = false;
        for (int r = 0; r < p; r++)
            while (pos[r] < s->n_actions[r]) {
                size_t i = pos[r], j;
                const sched_action *a = &s->actions[r][i];
                if (is_comm(a->kind)) {
                    post(&T, r, a, clock[r]);
                    out->start[r][i] = out->end[r][i] = clock[r];
                    pos[r]++;
                } else if (a->overlap && (j = next_compute(s, r, i)) < s->n_actions[r]) {
                    /* An F&B pair: post the RECVs between the two (posting
                     * ahead changes no time), start when both inputs are
                     * there, end together; SENDs between go at the end. */
                    const sched_action *b = &s->actions[r][j];
                    for (size_t k = i + 1; k < j; k++)
                        if (s->actions[r][k].kind == ACT_RECV_F || s->actions[r][k].kind == ACT_RECV_B)
                            post(&T, r, &s->actions[r][k], clock[r]);
                    int64_t ra = input_ready(&T, r, a), rb = input_ready(&T, r, b);
                    if (ra < 0 || rb < 0)
                        break;
                    int64_t st = clock[r] > ra ? clock[r] : ra;
                    st = st > rb ? st : rb;
                    int64_t cp = T.comp[a->kind] + T.comp[b->kind], cm = T.xcomm[a->kind] + T.xcomm[b->kind];
                    int64_t en = st + (cp > cm ? cp : cm);
                    out->start[r][i] = out->start[r][j] = st;
                    out->end[r][i] = out->end[r][j] = en;
                    for (size_t k = i + 1; k < j; k++) {
                        post(&T, r, &s->actions[r][k], en);
                        out->start[r][k] = out->end[r][k] = en;
                    }
                    mark_end(&T, r, a, en);
                    mark_end(&T, r, b, en);
                    out->busy[r] += en - st;
                    if (out->first[r] < 0)
                        out->first[r] = st;
                    out->last[r] = clock[r] = en;
                    pos[r] = j + 1;
                } else {
                    int64_t ready = input_ready(&T, r, a);
                    if (ready < 0)
                        break;
                    int64_t st = ready > clock[r] ? ready : clock[r];
                    int64_t d = a->kind <= ACT_W ? T.dur[a->kind] : 0;
                    out->start[r][i] = st;
                    out->end[r][i] = clock[r] = st + d;
                    if (a->kind <= ACT_W) {
                        mark_end(&T, r, a, clock[r]);
                        out->busy[r] += d;
                        if (out->first[r] < 0)
                            out->first[r] = st;
                        out->last[r] = clock[r];
                    }
                    pos[r]++;
                }
                progress = true;
            }
    }
    for (int r = 0; r < p; r++)
        if (pos[r] < s->n_actions[r]) {
            char tok[SCHED_TOKEN_BYTES];
            sched_action_token(s, r, &s->actions[r][pos[r]], tok, sizeof tok);
            rc = err_set(err, TS_EINVAL,
                         "schedule timing: rank %d blocks forever at action %zu (%s); "
                         "the schedule does not run (check it with sched_validate)",
                         r, pos[r], tok);
            goto out;
        }
    int64_t lo = -1, hi = 0;
    for (int r = 0; r < p; r++) {
        if (out->first[r] < 0)
            out->first[r] = out->last[r] = 0;
        if (lo < 0 || out->first[r] < lo)
            lo = out->first[r];
        if (out->last[r] > hi)
            hi = out->last[r];
        if (out->last[r] - out->first[r] > out->cost)
            out->cost = out->last[r] - out->first[r];
    }
    out->makespan = hi - (lo < 0 ? 0 : lo);
    for (int r = 0; r < p; r++)
        out->idle[r] = out->makespan - out->busy[r];
    /* m*v chunk ops of T ticks each = m*T ns. */
    out->ideal = (int64_t)s->m * s->v * (t->f_ns + t->b_ns + t->w_ns) * scale;
    out->bubble_rate = out->cost > 0 ? (double)(out->cost - out->ideal) / (double)out->cost : 0.0;
out:
    free(T.send_f);
    free(T.recv_f);
    free(T.send_b);
    free(T.recv_b);
    free(T.end_f);
    free(T.end_bi);
    free(pos);
    free(clock);
    if (rc != TS_OK)
        sched_timing_free(out);
    return rc;
}
