/* sched_csv: tokens, import errors with FILE:LINE:COLUMN, torch's idle
 * cells and CRLF, placement inference, round trips, golden files. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sim/sched/sched.h"
#include "sim/sched/sched_comm.h"
#include "sim/sched/sched_csv.h"
#include "sim/sched/sched_generate.h"
#include "tests/unit/sched_fixture.h"

static sched *gen(sched_kind k, int p, int m, int v, bool comm, bool reduce)
{
    return sched_fixture(k, p, m, v, comm, reduce);
}

/* s as CSV text (caller frees). */
static char *to_csv(const sched *s, size_t *len)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    ts_err e;
    cr_assert_eq(sched_csv_write(s, f, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(fclose(f), 0);
    return buf;
}

static int parse(const char *text, sched **s, ts_err *e)
{
    return sched_csv_parse("x.csv", text, strlen(text), s, e);
}

static void expect_parse_error(const char *text, const char *want)
{
    sched *s = NULL;
    ts_err e;
    cr_expect_eq(parse(text, &s, &e), TS_EINVAL, "accepted '%s'", text);
    cr_expect_null(s);
    cr_expect(strstr(e.msg, want) != NULL, "message '%s' lacks '%s'", e.msg, want);
}

Test(sched_csv, tokens)
{
    int st, k, mb;
    ts_err e;
    cr_assert_eq(sched_csv_token("12SEND_F34", &st, &k, &mb, &e), TS_OK);
    cr_expect(st == 12 && k == ACT_SEND_F && mb == 34);
    cr_assert_eq(sched_csv_token("1I0", &st, &k, &mb, &e), TS_OK);
    cr_expect(st == 1 && k == ACT_I && mb == 0);
    cr_assert_eq(sched_csv_token("3REDUCE_GRAD", &st, &k, &mb, &e), TS_OK);
    cr_expect(st == 3 && k == ACT_REDUCE_GRAD && mb == -1);
    cr_assert_eq(sched_csv_token("OPTIM", &st, &k, &mb, &e), TS_OK);
    cr_expect(st == -1 && k == ACT_OPTIM);
    const char *bad[][2] = {{"F1", "does not start with a stage"},
                            {"0X1", "unknown action kind 'X1'"},
                            {"0F", "missing micro-batch"},
                            {"0REDUCE_GRAD3", "takes no micro-batch"},
                            {"0UNSHARD", "FSDP"},
                            {"0F1x", "unexpected 'x'"},
                            {"99999999999F0", "too large"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_expect_eq(sched_csv_token(bad[i][0], &st, &k, &mb, &e), TS_EINVAL, "%s", bad[i][0]);
        cr_expect(strstr(e.msg, bad[i][1]) != NULL, "'%s': %s", bad[i][0], e.msg);
    }
}

Test(sched_csv, errors_name_file_line_column)
{
    expect_parse_error("0F0,0B0\n1F0,1Q0\n", "x.csv:2:2: '1Q0': unknown action kind");
    /* Validation errors point at the token. */
    expect_parse_error("0F0,0B0,0B0\n", "x.csv:1:3: rank 0, action 2 (0B0): second backward");
    /* Something missing: one column past the row's end. */
    expect_parse_error("0F0,0I0\n", "x.csv:1:3: rank 0, action 2 (end of the list): no W");
    /* Lines count blank lines and CRLF; columns count empty cells. */
    expect_parse_error("0F0,0B0\r\n\r\n1F0,,1F0,1B0\r\n", "x.csv:3:3: rank 1, action 1 (1F0): second F");
    expect_parse_error("", "x.csv: no rows");
    expect_parse_error("0F0,1B0\n1F0,1B0\n", "x.csv:1:2: stage 1 on row 1 (rank 0)");
    expect_parse_error("0F0,0B0\n1F0,1B0,2F0\n", "x.csv:2:3: stage 2 means 3 stages over 2 rows");
    expect_parse_error("0F0,\"0B0\n", "malformed CSV");
    expect_parse_error("OPTIM\n", "no action with a stage");
}

/* torch writes idle slots of its compute-only format as empty cells. */
Test(sched_csv, numbers_past_int_max_are_refused_with_row_and_column)
{
    /* read as int64: 2^31 and above never wrap to a negative stage or micro-batch */
    expect_parse_error("0F0,0F2147483648\n", "x.csv:1:2: '0F2147483648': micro-batch number too large; valid "
                                             "micro-batches are 0 to 2147483646");
    expect_parse_error("0F0,0F2147483647\n", "x.csv:1:2: '0F2147483647': micro-batch number too large");
    expect_parse_error("0F0\n2147483648F0\n", "x.csv:2:1: '2147483648F0': stage number too large; valid "
                                              "stages are 0 to 2147483646");
    expect_parse_error("0F99999999999999999999999\n", "x.csv:1:1: '0F99999999999999999999999': micro-batch "
                                                      "number too large");
    /* the largest accepted numbers reach the range checks, not an overflow */
    expect_parse_error("0F2147483646\n", "at most 65536 micro-batches");
}

Test(sched_csv, torch_compute_only_with_idle_cells)
{
    sched *s;
    ts_err e;
    cr_assert_eq(parse("0F0,0F1,,,0B0,,0B1\r\n,1F0,1B0,1F1,,1B1\r\n", &s, &e), TS_OK, "%s", e.msg);
    cr_expect_eq(s->p, 2);
    cr_expect_eq(s->m, 2);
    cr_expect_eq(s->v, 1);
    cr_expect_eq(s->kind, SCHED_CUSTOM);
    cr_expect_eq(s->n_actions[0], 4);
    cr_expect(!sched_has_comm(s));
    cr_assert_eq(sched_add_comm(s, &e), TS_OK, "%s", e.msg);
    cr_expect(sched_has_comm(s));
    sched_free(s);
    /* Quoted cells are plain cells to libcsv. */
    cr_assert_eq(parse("\"0F0\",\"0B0\"\n", &s, &e), TS_OK, "%s", e.msg);
    sched_free(s);
}

Test(sched_csv, placement_inferred)
{
    for (int k = 0; k < SCHED_CUSTOM; k++) {
        if (k == SCHED_DUALPIPE) /* two model copies: test_sched_dual.c */
            continue;
        int v = k == SCHED_INTERLEAVED ? 3 : sched_kind_is_v((sched_kind)k) ? 2 : 1;
        sched *s = gen((sched_kind)k, 3, 6, v, true, false), *t;
        size_t n;
        char *csv = to_csv(s, &n);
        ts_err e;
        cr_assert_eq(sched_csv_parse("x.csv", csv, n, &t, &e), TS_OK, "%s", e.msg);
        cr_expect_eq(t->placement, s->placement, "%s", sched_kind_name((sched_kind)k));
        cr_expect_eq(t->p, 3);
        cr_expect_eq(t->m, 6);
        cr_expect_eq(t->v, v);
        free(csv);
        sched_free(s);
        sched_free(t);
    }
}

/* CSV -> IR -> CSV is the identity, and IR -> CSV -> IR keeps every action. */
Test(sched_csv, round_trip_identity)
{
    for (int k = 0; k < SCHED_CUSTOM; k++)
        for (int p = 1; p <= 4; p++)
            for (int variant = 0; variant < 3; variant++) {
                if (k == SCHED_DUALPIPE) /* no CSV form: test_sched_dual.c */
                    continue;
                int v = k == SCHED_INTERLEAVED ? 1 + variant : sched_kind_is_v((sched_kind)k) ? 2 : 1;
                int m = 2 * p + variant;
                if (k == SCHED_INTERLEAVED && v > 1)
                    m = 2 * p;
                sched *s = gen((sched_kind)k, p, m, v, variant != 1, variant == 2), *t = NULL, *u = NULL;
                size_t n1, n2;
                char *a = to_csv(s, &n1);
                ts_err e;
                cr_assert_eq(sched_csv_parse("x.csv", a, n1, &t, &e), TS_OK, "%s", e.msg);
                char *b = to_csv(t, &n2);
                cr_expect(n1 == n2 && !memcmp(a, b, n1), "%s p=%d variant %d", sched_kind_name((sched_kind)k), p,
                          variant);
                for (int r = 0; r < p; r++) {
                    cr_assert_eq(s->n_actions[r], t->n_actions[r]);
                    for (size_t i = 0; i < s->n_actions[r]; i++) {
                        const sched_action *x = &s->actions[r][i], *y = &t->actions[r][i];
                        cr_expect(x->kind == y->kind && x->chunk == y->chunk && x->mb == y->mb && x->peer == y->peer);
                    }
                }
                cr_assert_eq(sched_csv_parse("x.csv", b, n2, &u, &e), TS_OK, "%s", e.msg);
                free(a);
                free(b);
                sched_free(s);
                sched_free(t);
                sched_free(u);
            }
}

/* Golden files, byte for byte (regenerate with: trainsim schedule ...
 * --validate-only --export tests/golden/sched/NAME.csv, then review). */
Test(sched_csv, golden_files)
{
    struct {
        const char *file;
        sched_kind k;
        int p, m, v;
        bool comm, reduce;
    } G[] = {
        {"gpipe_p2_m3.csv", SCHED_GPIPE, 2, 3, 1, true, false},
        {"1f1b_p3_m4.csv", SCHED_1F1B, 3, 4, 1, true, false},
        {"1f1b_p2_m2_reduce.csv", SCHED_1F1B, 2, 2, 1, true, true},
        {"interleaved_p2_m4_v2.csv", SCHED_INTERLEAVED, 2, 4, 2, true, false},
        {"interleaved_p3_m3_v3_compute.csv", SCHED_INTERLEAVED, 3, 3, 3, false, false},
        {"zb-h1_p3_m4.csv", SCHED_ZB_H1, 3, 4, 1, true, false},
        {"zb-h2_p2_m4.csv", SCHED_ZB_H2, 2, 4, 1, true, false},
        {"zb-v_p2_m4.csv", SCHED_ZB_V, 2, 4, 2, true, false},
    };
    for (size_t i = 0; i < sizeof G / sizeof G[0]; i++) {
        char path[256];
        snprintf(path, sizeof path, "tests/golden/sched/%s", G[i].file);
        FILE *f = fopen(path, "rb");
        cr_assert_not_null(f, "cannot open %s (run from the repository root)", path);
        static char want[1 << 16];
        size_t nw = fread(want, 1, sizeof want, f);
        cr_assert_eq(fclose(f), 0);
        sched *s = gen(G[i].k, G[i].p, G[i].m, G[i].v, G[i].comm, G[i].reduce), *t;
        size_t n;
        char *got = to_csv(s, &n);
        cr_expect(n == nw && !memcmp(got, want, n), "%s differs from the generated schedule:\n%.*s", path, (int)n, got);
        ts_err e;
        cr_expect_eq(sched_csv_load(path, &t, &e), TS_OK, "%s", e.msg);
        sched_free(t);
        free(got);
        sched_free(s);
    }
}

Test(sched_csv, save_is_atomic_and_load_reads_it)
{
    char dir[] = "/tmp/sched_csv_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char path[256], bad[256];
    snprintf(path, sizeof path, "%s/s.csv", dir);
    snprintf(bad, sizeof bad, "%s/missing/s.csv", dir);
    sched *s = gen(SCHED_ZB_H1, 3, 5, 1, true, false), *t;
    ts_err e;
    cr_assert_eq(sched_csv_save(s, path, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(sched_csv_load(path, &t, &e), TS_OK, "%s", e.msg);
    size_t n1, n2;
    char *a = to_csv(s, &n1), *b = to_csv(t, &n2);
    cr_expect(n1 == n2 && !memcmp(a, b, n1));
    sched_free(t);
    cr_expect_eq(sched_csv_save(s, bad, &e), TS_EIO);
    struct stat st;
    cr_expect_neq(stat(bad, &st), 0);
    cr_expect_eq(sched_csv_load(bad, &t, &e), TS_EIO);
    cr_expect_null(t);
    cr_expect(strstr(e.msg, "missing/s.csv") != NULL, "%s", e.msg);
    unlink(path);
    rmdir(dir);
    free(a);
    free(b);
    sched_free(s);
    sched_free(t);
}
