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

static int cell_text(const sched *s, const sched_action *a, char *buf, size_t n)
{
    static const char LETTER[] = {'F', 'B', 'I', 'W'};
    if (s->v > 1)
        return snprintf(buf, n, "%c%d.%d", LETTER[a->kind], (int)a->mb, a->chunk);
    return snprintf(buf, n, "%c%d", LETTER[a->kind], (int)a->mb);
}

int sched_print(const sched *s, const sched_op_times *t, FILE *f, ts_err *err)
{
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
    char buf[48];
    for (int r = 0; r < s->p; r++) {
        if (tm.last[r] > hi)
            hi = tm.last[r];
        for (size_t i = 0; i < s->n_actions[r]; i++)
            if (s->actions[r][i].kind <= ACT_W) {
                int n = cell_text(s, &s->actions[r][i], buf, sizeof buf);
                if (n > w)
                    w = n;
            }
    }
    w += 1;
    int64_t cols = hi / q;
    char *line = NULL;
    if (cols > SCHED_PRINT_MAX_COLS) {
        rc = err_set(err, TS_EINVAL,
                     "timeline of %lld columns is too wide to print (at most %d); use "
                     "fewer micro-batches or op times with a larger common divisor",
                     (long long)cols, SCHED_PRINT_MAX_COLS);
        goto out;
    }
    line = malloc((size_t)(cols * w) + 1);
    if (!line) {
        rc = err_set(err, TS_ENOMEM, "timeline: out of memory");
        goto out;
    }
    char colw[64];
    if (units)
        snprintf(colw, sizeof colw, "%.6g time unit (T_F = T_B = T_W = 1)", (double)q / (double)s->v);
    else
        snprintf(colw, sizeof colw, "%.6g ms", sched_ticks_ms(&tm, q));
    fprintf(f,
            "%s schedule, p=%d m=%d v=%d; one column = %s\n"
            "F forward, B backward, I input gradient, W weight gradient; number = micro-batch%s; "
            "'.' idle\n",
            sched_kind_name(s->kind), s->p, s->m, s->v, colw, s->v > 1 ? ".chunk" : "");
    for (int r = 0; r < s->p; r++) {
        for (int64_t c = 0; c < cols; c++) {
            memset(line + c * w, ' ', (size_t)w);
            line[c * w] = '.';
        }
        for (size_t i = 0; i < s->n_actions[r]; i++) {
            const sched_action *a = &s->actions[r][i];
            if (a->kind > ACT_W)
                continue;
            int64_t c0 = tm.start[r][i] / q, c1 = tm.end[r][i] / q;
            if (c1 == c0)
                continue; /* zero-time op */
            memset(line + c0 * w, ' ', (size_t)((c1 - c0) * w));
            int n = cell_text(s, a, buf, sizeof buf);
            memcpy(line + c0 * w, buf, (size_t)n);
        }
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
