/* sched_print — see sched_print.h. */
#include "sim/sched/sched_print.h"

#include <stdlib.h>
#include <string.h>

static int64_t gcd64(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* paired: a is the second op of an overlapped F&B pair ("&B3.1"). */
static int cell_text(const sched *s, const sched_action *a, bool paired, char *buf, size_t n)
{
    static const char LETTER[] = {'F', 'B', 'I', 'W'};
    const char *amp = paired ? "&" : "";
    if (s->v > 1)
        return snprintf(buf, n, "%s%c%d.%d", amp, LETTER[a->kind], (int)a->mb, a->chunk);
    return snprintf(buf, n, "%s%c%d", amp, LETTER[a->kind], (int)a->mb);
}

/* True if compute action i of rank r is the second op of an overlapped
 * pair: the compute action before it is an F marked overlap. */
static bool is_paired(const sched *s, int r, size_t i)
{
    while (i-- > 0)
        if (s->actions[r][i].kind <= ACT_W)
            return s->actions[r][i].overlap != 0;
    return false;
}

/* The smallest round time per column, in ns (1, 2, 5, 10, 20, 25, 50, 100,
 * ...: 1, 2, 2.5 or 5 times a power of ten, integral), that is at least
 * need_ns. Round values make the scale easy to read. */
static int64_t round_col_ns(int64_t need_ns)
{
    for (int64_t p10 = 1; p10 <= INT64_MAX / 50; p10 *= 10) {
        const int64_t cand[] = {p10, 2 * p10, p10 >= 10 ? p10 / 10 * 25 : 2 * p10, 5 * p10};
        for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++)
            if (cand[i] >= need_ns)
                return cand[i];
    }
    return need_ns;
}

/* "50 µs": d_ns in the largest unit (ns, µs, ms, s) that keeps it >= 1. */
static void fmt_ns(char *buf, size_t n, int64_t d_ns)
{
    if (d_ns < 1000)
        snprintf(buf, n, "%lld ns", (long long)d_ns);
    else if (d_ns < 1000000)
        snprintf(buf, n, "%.6g µs", (double)d_ns / 1e3);
    else if (d_ns < 1000000000)
        snprintf(buf, n, "%.6g ms", (double)d_ns / 1e6);
    else
        snprintf(buf, n, "%.6g s", (double)d_ns / 1e9);
}

/* Rank r's exact line: column c covers ticks [c*q, (c+1)*q), every op
 * starts and ends on a column boundary. */
static void line_exact(const sched *s, const sched_timing *tm, int r, int64_t q, int64_t cols, int w, char *line)
{
    char buf[48];
    for (int64_t c = 0; c < cols; c++) {
        memset(line + c * w, ' ', (size_t)w);
        line[c * w] = '.';
    }
    for (size_t i = 0; i < s->n_actions[r]; i++) {
        const sched_action *a = &s->actions[r][i];
        if (a->kind > ACT_W)
            continue;
        int64_t c0 = tm->start[r][i] / q, c1 = tm->end[r][i] / q;
        if (c1 == c0)
            continue; /* zero-time op */
        bool paired = is_paired(s, r, i);
        if (paired) {
            /* The pair's B shares the F's span: its label goes one column
             * after the F's, when the span has room. */
            if (c1 - c0 < 2)
                continue;
            c0++;
        } else {
            memset(line + c0 * w, ' ', (size_t)((c1 - c0) * w));
        }
        int n = cell_text(s, a, paired, buf, sizeof buf);
        memcpy(line + c0 * w, buf, (size_t)n);
    }
}

/* Rank r's scaled line: column c covers ticks [c*q, (c+1)*q). It shows the
 * compute op that overlaps it longest (its label in the first column it
 * wins, spaces after), or '.' if compute covers less than half of it. A
 * rank's compute ops run one after another, so one pass over them suffices. */
static void line_scaled(const sched *s, const sched_timing *tm, int r, int64_t q, int64_t cols, int w, char *line)
{
    char buf[48];
    size_t first = 0, n_act = s->n_actions[r], shown = SIZE_MAX;
    for (int64_t c = 0; c < cols; c++) {
        int64_t lo = c * q, hi = lo + q, busy = 0, best_ov = 0;
        size_t best = SIZE_MAX;
        while (first < n_act && (s->actions[r][first].kind > ACT_W || tm->end[r][first] <= lo))
            first++;
        for (size_t i = first; i < n_act; i++) {
            if (s->actions[r][i].kind > ACT_W)
                continue;
            if (tm->start[r][i] >= hi)
                break;
            int64_t a = tm->start[r][i] > lo ? tm->start[r][i] : lo;
            int64_t b = tm->end[r][i] < hi ? tm->end[r][i] : hi;
            if (b > a) {
                busy += b - a;
                if (b - a > best_ov) {
                    best_ov = b - a;
                    best = i;
                }
            }
        }
        char *cell = line + c * w;
        memset(cell, ' ', (size_t)w);
        if (best == SIZE_MAX || 2 * busy < q) {
            cell[0] = '.';
        } else if (best != shown) {
            int n = cell_text(s, &s->actions[r][best], is_paired(s, r, best), buf, sizeof buf);
            memcpy(cell, buf, (size_t)n);
            shown = best;
        }
    }
}

int sched_print(const sched *s, const sched_op_times *t, int width_cols, FILE *f, ts_err *err)
{
    if (width_cols < 1 || width_cols > SCHED_PRINT_MAX_COLS)
        return err_set(err, TS_EINVAL, "timeline width %d columns is out of range [1, %d]", width_cols,
                       SCHED_PRINT_MAX_COLS);
    sched_op_times unit = {1, 1, 1, 0};
    bool units = !t;
    if (units)
        t = &unit;
    sched_timing tm;
    int rc = sched_time(s, t, &tm, err);
    if (rc != TS_OK)
        return rc;
    int64_t q = 0, durs[] = {t->f_ns, t->b_ns, t->w_ns, t->b_ns + t->w_ns, t->comm_ns * s->v};
    for (size_t i = 0; i < sizeof durs / sizeof durs[0]; i++)
        q = gcd64(q, durs[i]);
    if (q == 0)
        q = 1;
    int64_t hi = 0;
    int w = 0;
    bool pairs = false;
    char buf[48];
    for (int r = 0; r < s->p; r++) {
        if (tm.last[r] > hi)
            hi = tm.last[r];
        for (size_t i = 0; i < s->n_actions[r]; i++)
            if (s->actions[r][i].kind <= ACT_W) {
                bool paired = is_paired(s, r, i);
                int n = cell_text(s, &s->actions[r][i], paired, buf, sizeof buf);
                pairs |= paired;
                if (n > w)
                    w = n;
            }
    }
    w += 1;
    int64_t cols = hi / q;
    bool scaled = cols > width_cols;
    char colw[96];
    if (scaled) {
        /* ticks are 1/v ns: a column of d ns is d*v ticks */
        int64_t need = (hi + width_cols - 1) / width_cols;
        int64_t d_ns = round_col_ns((need + s->v - 1) / s->v);
        q = d_ns * s->v;
        cols = (hi + q - 1) / q;
        if (units)
            snprintf(colw, sizeof colw, "%lld time units (T_F = T_B = T_W = 1)", (long long)d_ns);
        else
            fmt_ns(colw, sizeof colw, d_ns);
        size_t n = strlen(colw);
        snprintf(colw + n, sizeof colw - n, ", scaled to fit %d columns", width_cols);
    } else if (units) {
        snprintf(colw, sizeof colw, "%.6g time unit (T_F = T_B = T_W = 1)", (double)q / (double)s->v);
    } else {
        snprintf(colw, sizeof colw, "%.6g ms", sched_ticks_ms(&tm, q));
    }
    char *line = malloc((size_t)(cols * w) + 1);
    if (!line) {
        rc = err_set(err, TS_ENOMEM, "timeline: out of memory");
        goto out;
    }
    fprintf(f,
            "%s schedule, p=%d m=%d%s v=%d; one column = %s\n"
            "F forward, B backward, I input gradient, W weight gradient; number = micro-batch%s; "
            "'.' idle%s\n%s",
            sched_kind_name(s->kind), s->p, s->placement == SCHED_PLACE_DUAL ? 2 * s->m : s->m,
            s->placement == SCHED_PLACE_DUAL ? " (half each way)" : "", s->v, colw, s->v > 1 ? ".chunk" : "",
            scaled ? " for most of the column; a column shows the op that runs longest in it" : "",
            pairs ? "F ... &B: an F and a B of another micro-batch run overlapped over the whole span (DualPipe's "
                    "F&B)\n"
                  : "");
    for (int r = 0; r < s->p; r++) {
        if (scaled)
            line_scaled(s, &tm, r, q, cols, w, line);
        else
            line_exact(s, &tm, r, q, cols, w, line);
        int64_t len = cols * w;
        while (len > 0 && line[len - 1] == ' ')
            len--;
        line[len] = '\0';
        fprintf(f, "rank %*d | %s\n", s->p > 10 ? 2 : 1, r, line);
    }
    if (ferror(f))
        rc = err_set(err, TS_EIO, "timeline: write error");
out:
    free(line);
    sched_timing_free(&tm);
    return rc;
}
