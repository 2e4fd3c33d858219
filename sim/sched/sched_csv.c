/* sched_csv — see sched_csv.h. */
#include "sim/sched/sched_csv.h"

#include <csv.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sched/sched_build.h"
#include "sim/sched/sched_validate.h"
#include "sim/util/afile.h"
#include "sim/util/csvio.h"
#include "sim/util/grow.h"

int sched_csv_write(const sched *s, FILE *f, ts_err *err)
{
    int rc = TS_OK;
    size_t cap = 0;
    for (int r = 0; r < s->p; r++)
        if (s->n_actions[r] > cap)
            cap = s->n_actions[r];
    char *buf = malloc((cap ? cap : 1) * SCHED_TOKEN_BYTES);
    const char **cells = malloc((cap ? cap : 1) * sizeof *cells);
    if (!buf || !cells) {
        rc = err_set(err, TS_ENOMEM, "schedule CSV: out of memory");
        goto out;
    }
    for (int r = 0; r < s->p && rc == TS_OK; r++) {
        for (size_t i = 0; i < s->n_actions[r]; i++) {
            char *t = buf + i * SCHED_TOKEN_BYTES;
            sched_action_token(s, r, &s->actions[r][i], t, SCHED_TOKEN_BYTES);
            cells[i] = t;
        }
        rc = csvio_write_row(f, s->n_actions[r], cells, err);
    }
out:
    free(buf);
    free(cells);
    return rc;
}

int sched_csv_save(const sched *s, const char *path, ts_err *err)
{
    afile a;
    int rc = afile_open(&a, path, err);
    if (rc != TS_OK)
        return rc;
    rc = sched_csv_write(s, a.f, err);
    if (rc != TS_OK) {
        afile_abort(&a);
        return err_prefix(err, "%s: ", path);
    }
    return afile_commit(&a, err);
}

int sched_csv_token(const char *tok, int *stage, int *kind, int *mb, ts_err *err)
{
    static const char *const VALID = "expected STAGE KIND MB like 0F1, 1I0, 2W3, 1B0, 0SEND_F1, "
                                     "1RECV_B0, or STAGE REDUCE_GRAD (0REDUCE_GRAD), or OPTIM";
    if (!strcmp(tok, "OPTIM")) {
        *stage = -1, *kind = ACT_OPTIM, *mb = -1;
        return TS_OK;
    }
    const char *p = tok;
    /* Numbers are read as int64 and refused past INT_MAX - 1, so that the stage and
     * micro-batch counts (number + 1) still fit an int. */
    int64_t st = 0;
    if (*p < '0' || *p > '9')
        return err_set(err, TS_EINVAL, "'%s' does not start with a stage number; %s", tok, VALID);
    while (*p >= '0' && *p <= '9' && st <= INT_MAX)
        st = st * 10 + (*p++ - '0');
    if (st > INT_MAX - 1 || (*p >= '0' && *p <= '9'))
        return err_set(err, TS_EINVAL, "'%s': stage number too large; valid stages are 0 to %d", tok, INT_MAX - 1);
    /* Longest kind name first, so that SEND_F is not read as S... */
    static const int ORDER[] = {ACT_REDUCE_GRAD, ACT_SEND_F, ACT_RECV_F, ACT_SEND_B, ACT_RECV_B,
                                ACT_F,           ACT_B,      ACT_I,      ACT_W};
    int k = -1;
    size_t kl = 0;
    for (size_t i = 0; i < sizeof ORDER / sizeof ORDER[0]; i++) {
        const char *name = sched_act_name((sched_act_kind)ORDER[i]);
        size_t n = strlen(name);
        if (!strncmp(p, name, n)) {
            k = ORDER[i];
            kl = n;
            break;
        }
    }
    if (k < 0) {
        if (!strncmp(p, "UNSHARD", 7) || !strncmp(p, "RESHARD", 7))
            return err_set(err, TS_EINVAL, "'%s': FSDP actions (UNSHARD, RESHARD) are not supported; %s", tok, VALID);
        return err_set(err, TS_EINVAL, "'%s': unknown action kind '%s'; %s", tok, p, VALID);
    }
    p += kl;
    int64_t m = -1;
    if (k == ACT_REDUCE_GRAD) {
        if (*p)
            return err_set(err, TS_EINVAL, "'%s': REDUCE_GRAD takes no micro-batch; %s", tok, VALID);
    } else {
        if (*p < '0' || *p > '9')
            return err_set(err, TS_EINVAL, "'%s': missing micro-batch number after %s; %s", tok,
                           sched_act_name((sched_act_kind)k), VALID);
        m = 0;
        while (*p >= '0' && *p <= '9' && m <= INT_MAX)
            m = m * 10 + (*p++ - '0');
        if (m > INT_MAX - 1 || (*p >= '0' && *p <= '9'))
            return err_set(err, TS_EINVAL, "'%s': micro-batch number too large; valid micro-batches are 0 to %d", tok,
                           INT_MAX - 1);
        if (*p)
            return err_set(err, TS_EINVAL, "'%s': unexpected '%s' after the micro-batch; %s", tok, p, VALID);
    }
    *stage = (int)st, *kind = k, *mb = (int)m;
    return TS_OK;
}

/* One parsed token with its place in the file. */
typedef struct {
    int stage, kind, mb;
    int line, col;
} ptok;

typedef struct {
    ptok *t;
    size_t n, cap;
    int line;     /* line of the row's first field */
    int last_col; /* columns in the row */
} prow;

typedef struct {
    const char *name;
    ts_err *err;
    int rc;
    int line; /* line being fed to libcsv */
    int col;  /* column of the next field in the current row */
    prow *rows;
    size_t nrows, cap;
    bool row_open;
} pstate;

static prow *cur_row(pstate *P)
{
    if (!P->row_open) {
        if (P->nrows == P->cap && grow_to((void **)&P->rows, &P->cap, P->nrows + 1, 16, sizeof *P->rows))
            return NULL;
        memset(&P->rows[P->nrows], 0, sizeof P->rows[0]);
        P->rows[P->nrows].line = P->line;
        P->nrows++;
        P->row_open = true;
        P->col = 1;
    }
    return &P->rows[P->nrows - 1];
}

static void on_field(void *data, size_t len, void *arg)
{
    pstate *P = arg;
    if (P->rc != TS_OK)
        return;
    prow *row = cur_row(P);
    if (!row) {
        P->rc = err_set(P->err, TS_ENOMEM, "%s: out of memory", P->name);
        return;
    }
    int col = P->col++;
    row->last_col = col;
    if (len == 0)
        return; /* torch's idle slot */
    char tok[64];
    if (len >= sizeof tok) {
        P->rc = err_set(P->err, TS_EINVAL,
                        "%s:%d:%d: token of %zu characters is too long to be an "
                        "action token (like 0F1)",
                        P->name, P->line, col, len);
        return;
    }
    memcpy(tok, data, len);
    tok[len] = '\0';
    ptok t = {.line = P->line, .col = col};
    if (sched_csv_token(tok, &t.stage, &t.kind, &t.mb, P->err) != TS_OK) {
        P->rc = err_prefix(P->err, "%s:%d:%d: ", P->name, P->line, col);
        return;
    }
    if (row->n == row->cap && grow_to((void **)&row->t, &row->cap, row->n + 1, 64, sizeof *row->t)) {
        P->rc = err_set(P->err, TS_ENOMEM, "%s: out of memory", P->name);
        return;
    }
    row->t[row->n++] = t;
}

static void on_row(int c, void *arg)
{
    (void)c;
    pstate *P = arg;
    if (P->rc == TS_OK && !P->row_open && !cur_row(P))
        P->rc = err_set(P->err, TS_ENOMEM, "%s: out of memory", P->name);
    P->row_open = false;
}

/* Tokenise data into P->rows with libcsv, feeding it line by line so that
 * fields know their line. */
static int tokenise(pstate *P, const char *data, size_t len)
{
    struct csv_parser cp;
    if (csv_init(&cp, CSV_STRICT | CSV_STRICT_FINI) != 0)
        return err_set(P->err, TS_ENOMEM, "%s: cannot start the CSV parser", P->name);
    size_t at = 0;
    P->line = 1;
    while (at < len && P->rc == TS_OK) {
        const char *nl = memchr(data + at, '\n', len - at);
        size_t n = nl ? (size_t)(nl - (data + at)) + 1 : len - at;
        if (csv_parse(&cp, data + at, n, on_field, on_row, P) != n) {
            P->rc =
                err_set(P->err, TS_EINVAL, "%s:%d: malformed CSV: %s", P->name, P->line, csv_strerror(csv_error(&cp)));
            break;
        }
        at += n;
        if (nl)
            P->line++;
    }
    if (P->rc == TS_OK && csv_fini(&cp, on_field, on_row, P) != 0)
        P->rc = err_set(P->err, TS_EINVAL, "%s:%d: malformed CSV: %s", P->name, P->line, csv_strerror(csv_error(&cp)));
    csv_free(&cp);
    return P->rc;
}

/* Infer the shape and placement, build the sched, validate it. */
static int build(pstate *P, sched **out)
{
    const char *nm = P->name;
    int p = (int)P->nrows, S = 0, m = 0;
    if (p == 0)
        return err_set(P->err, TS_EINVAL,
                       "%s: no rows; expected one row of action tokens (like 0F0) "
                       "per pipeline rank",
                       nm);
    if (p > SCHED_MAX_P)
        return err_set(P->err, TS_EINVAL, "%s: %d rows = pipeline ranks; at most %d", nm, p, SCHED_MAX_P);
    const ptok *maxst = NULL;
    for (int r = 0; r < p; r++)
        for (size_t i = 0; i < P->rows[r].n; i++) {
            const ptok *t = &P->rows[r].t[i];
            if (t->stage + 1 > S)
                S = t->stage + 1, maxst = t;
            if (t->mb + 1 > m)
                m = t->mb + 1;
        }
    if (S == 0 || m == 0)
        return err_set(P->err, TS_EINVAL, "%s: no action with a stage and a micro-batch (like 0F0)", nm);
    if (S % p != 0 || S / p > SCHED_MAX_V)
        return err_set(P->err, TS_EINVAL,
                       "%s:%d:%d: stage %d means %d stages over %d rows (ranks); the "
                       "stage count must be a multiple of the rank count, at most %d per rank",
                       nm, maxst->line, maxst->col, maxst->stage, S, p, SCHED_MAX_V);
    if (m > SCHED_MAX_M)
        return err_set(P->err, TS_EINVAL, "%s: micro-batch %d: at most %d micro-batches", nm, m - 1, SCHED_MAX_M);
    int v = S / p;
    sched_placement pl = SCHED_PLACE_LOOP;
    const ptok *bad_loop = NULL, *bad_v = NULL;
    int bad_row = 0;
    for (int r = 0; r < p; r++)
        for (size_t i = 0; i < P->rows[r].n; i++) {
            const ptok *t = &P->rows[r].t[i];
            if (t->stage < 0)
                continue;
            if (!bad_loop && t->stage % p != r)
                bad_loop = t, bad_row = r;
            if (!bad_v && (v != 2 || (t->stage != r && t->stage != 2 * p - 1 - r)))
                bad_v = t;
        }
    if (bad_loop && !bad_v) {
        pl = SCHED_PLACE_V;
    } else if (bad_loop) {
        int r = bad_row;
        return err_set(P->err, TS_EINVAL,
                       "%s:%d:%d: stage %d on row %d (rank %d): with %d ranks and %d "
                       "stages, rank %d runs stages %d, %d, ... (loop placement, stage = chunk*%d + rank)%s",
                       nm, bad_loop->line, bad_loop->col, bad_loop->stage, r + 1, r, p, S, r, r, r + p, p,
                       v == 2 ? " or its V pair (rank, 2p-1-rank)" : "");
    }
    sched *s = NULL;
    int rc = sched_build_alloc(SCHED_CUSTOM, pl, p, m, v, &s, P->err);
    if (rc != TS_OK)
        return rc;
    for (int r = 0; r < p && rc == TS_OK; r++) {
        sched_list l = {0};
        for (size_t i = 0; i < P->rows[r].n && rc == TS_OK; i++) {
            const ptok *t = &P->rows[r].t[i];
            int rank = r, chunk = -1, peer = -1;
            if (t->stage >= 0)
                sched_rank_chunk_of(s, t->stage, &rank, &chunk);
            int nb = t->kind == ACT_SEND_F || t->kind == ACT_RECV_B   ? t->stage + 1
                     : t->kind == ACT_SEND_B || t->kind == ACT_RECV_F ? t->stage - 1
                                                                      : -1;
            if (nb >= 0 && nb < S) {
                int c;
                sched_rank_chunk_of(s, nb, &peer, &c);
            }
            rc = sched_list_push(&l, t->kind, chunk, t->mb, peer, P->err);
        }
        if (rc == TS_OK)
            sched_build_take(s, r, &l);
        sched_list_free(&l);
    }
    sched_vinfo vi = {0};
    if (rc == TS_OK && (rc = sched_validate(s, &vi, P->err)) != TS_OK && vi.bad_rank >= 0) {
        const prow *row = &P->rows[vi.bad_rank];
        int line = row->line, col = row->last_col + 1;
        if (vi.bad_index >= 0 && (size_t)vi.bad_index < row->n)
            line = row->t[vi.bad_index].line, col = row->t[vi.bad_index].col;
        err_prefix(P->err, "%s:%d:%d: ", nm, line, col);
    }
    if (rc != TS_OK) {
        sched_free(s);
        return rc;
    }
    *out = s;
    return TS_OK;
}

int sched_csv_parse(const char *name, const char *data, size_t len, sched **out, ts_err *err)
{
    *out = NULL;
    pstate P = {.name = name, .err = err, .rc = TS_OK};
    int rc = tokenise(&P, data, len);
    if (rc == TS_OK)
        rc = build(&P, out);
    for (size_t r = 0; r < P.nrows; r++)
        free(P.rows[r].t);
    free(P.rows);
    return rc;
}

int sched_csv_load(const char *path, sched **out, ts_err *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return err_set(err, TS_EIO, "%s: cannot open: %s", path, strerror(errno));
    char *buf = NULL;
    size_t n = 0, cap = 0;
    int rc = TS_OK;
    for (;;) {
        if (n == cap && grow_to((void **)&buf, &cap, n + 1, 65536, 1)) {
            rc = err_set(err, TS_ENOMEM, "%s: out of memory", path);
            break;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f))
                rc = err_set(err, TS_EIO, "%s: read error", path);
            break;
        }
    }
    (void)fclose(f); /* read only: nothing to lose */
    if (rc == TS_OK)
        rc = sched_csv_parse(path, buf ? buf : "", n, out, err);
    free(buf);
    return rc;
}
