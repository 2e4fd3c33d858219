/* Unit tests for sweep: keys, output format, resuming after lost or torn
 * lines, thread-count independence, header checks. The evaluator here is a
 * small pure function of the flags (x*y), so every expected output line can
 * be written down by hand; tests/cli/sweep.sh kills the real command. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sim/search/sweep.h"

static const char *const RES_NAMES[] = {"product"};

/* product = x * y from "--x=N" "--y=M"; x < 0 is an error. */
static int eval_product(void *user, int argc, char **argv, char **cells, ts_err *err)
{
    (void)user;
    long x = 1, y = 1;
    for (int i = 1; i < argc; i++) {
        if (!strncmp(argv[i], "--x=", 4))
            x = strtol(argv[i] + 4, NULL, 10);
        else if (!strncmp(argv[i], "--y=", 4))
            y = strtol(argv[i] + 4, NULL, 10);
        else
            return err_set(err, TS_EINVAL, "unknown flag '%s'", argv[i]);
    }
    if (x < 0)
        return err_set(err, TS_EINVAL, "--x must be >= 0 (got %ld)", x);
    char buf[32];
    snprintf(buf, sizeof buf, "%ld", x * y);
    cells[0] = strdup(buf);
    return TS_OK;
}

static const sweep_evaluator EV = {1, RES_NAMES, eval_product, NULL, NULL};

static char dir[64];
static char in_path[128], out_path[128];

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/test_sweep.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(in_path, sizeof in_path, "%s/in.csv", dir);
    snprintf(out_path, sizeof out_path, "%s/out.csv", dir);
}

static void teardown(void)
{
    unlink(in_path);
    unlink(out_path);
    rmdir(dir);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    cr_assert_eq(fclose(f), 0);
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    cr_assert_eq(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    cr_assert(n >= 0 && fseek(f, 0, SEEK_SET) == 0, "cannot size %s", path);
    char *b = malloc((size_t)n + 1);
    cr_assert_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    b[n] = '\0';
    cr_assert_eq(fclose(f), 0);
    return b;
}

static int run(int threads, sweep_stats *st, ts_err *e)
{
    sweep_opts o = {.input = in_path, .output = out_path, .threads = threads};
    err_clear(e);
    return sweep_run(&o, &EV, st, e);
}

static const char *INPUT = "# a comment row\n"
                           "x,--y\n"
                           "2,3\n"
                           "4,\n"
                           "-1,5\n"
                           "6,7\n"
                           "0,9\n";

TestSuite(sweep, .init = setup, .fini = teardown);

Test(sweep, key_is_row_and_content_hash)
{
    const char *h[] = {"x", "y"}, *a[] = {"2", "3"}, *b[] = {"2", "4"}, *c[] = {"23", ""};
    char ka[SWEEP_KEY_BYTES], ka2[SWEEP_KEY_BYTES], kb[SWEEP_KEY_BYTES], kc[SWEEP_KEY_BYTES];
    const char *h2[] = {"x2", "y"}, *c2[] = {"3", ""};
    sweep_row_key(1, 2, h, a, ka);
    sweep_row_key(2, 2, h, a, ka2);
    sweep_row_key(1, 2, h, b, kb);
    sweep_row_key(1, 2, h2, c2, kc);
    cr_assert_str_eq(ka2 + 2, ka + 2, "same content, same hash");
    cr_assert_eq(strncmp(ka, "1-", 2), 0);
    cr_assert_eq(strncmp(ka2, "2-", 2), 0);
    cr_assert_str_neq(ka, kb);
    /* field boundaries count: ("x2","3") vs ("x","23") differ */
    char kd[SWEEP_KEY_BYTES];
    const char *h3[] = {"x", "y"};
    sweep_row_key(1, 2, h3, c, kd);
    cr_assert_str_neq(kc, kd);
    cr_assert_eq(strlen(ka), 2 + 16);
}

Test(sweep, full_run_output)
{
    write_file(in_path, INPUT);
    sweep_stats st;
    ts_err e;
    cr_assert_eq(run(1, &st, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(st.rows, 5);
    cr_assert_eq(st.ran, 5);
    cr_assert_eq(st.skipped, 0);
    cr_assert_eq(st.failed, 1);
    char *out = read_file(out_path);
    /* header, then one line per row in input order */
    cr_assert_eq(strncmp(out, "key,x,--y,status,product,error\n", 31), 0, "%s", out);
    cr_assert_not_null(strstr(out, ",2,3,ok,6,\n"));
    cr_assert_not_null(strstr(out, ",4,,ok,4,\n"));
    cr_assert_not_null(strstr(out, ",-1,5,error,,--x must be >= 0 (got -1)\n"));
    cr_assert_not_null(strstr(out, ",6,7,ok,42,\n"));
    cr_assert_not_null(strstr(out, ",0,9,ok,0,\n"));
    cr_assert_lt(strstr(out, ",2,3,ok"), strstr(out, ",0,9,ok"));
    int lines = 0;
    for (char *p = out; *p; p++)
        lines += *p == '\n';
    cr_assert_eq(lines, 6);
    free(out);
}

Test(sweep, threads_do_not_change_the_output)
{
    write_file(in_path, INPUT);
    sweep_stats st;
    ts_err e;
    cr_assert_eq(run(1, &st, &e), TS_OK, "%s", e.msg);
    char *one = read_file(out_path);
    unlink(out_path);
    cr_assert_eq(run(4, &st, &e), TS_OK, "%s", e.msg);
    char *four = read_file(out_path);
    cr_assert_str_eq(one, four);
    free(one);
    free(four);
}

Test(sweep, second_run_skips_everything)
{
    write_file(in_path, INPUT);
    sweep_stats st;
    ts_err e;
    cr_assert_eq(run(2, &st, &e), TS_OK, "%s", e.msg);
    char *first = read_file(out_path);
    cr_assert_eq(run(2, &st, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(st.skipped, 5);
    cr_assert_eq(st.ran, 0);
    char *second = read_file(out_path);
    cr_assert_str_eq(first, second);
    free(first);
    free(second);
}

/* Cut the output after `keep` bytes, as a kill at that moment would. */
static void truncate_to(const char *path, size_t keep)
{
    cr_assert_eq(truncate(path, (off_t)keep), 0);
}

Test(sweep, resume_after_every_possible_cut)
{
    write_file(in_path, INPUT);
    sweep_stats st;
    ts_err e;
    cr_assert_eq(run(1, &st, &e), TS_OK, "%s", e.msg);
    char *full = read_file(out_path);
    size_t n = strlen(full);
    /* Every cut point: the header torn, a row torn, between rows. */
    for (size_t keep = 0; keep <= n; keep++) {
        write_file(out_path, "");
        FILE *f = fopen(out_path, "w");
        fwrite(full, 1, keep, f);
        cr_assert_eq(fclose(f), 0);
        cr_assert_eq(run(keep % 3 + 1, &st, &e), TS_OK, "cut at %zu: %s", keep, e.msg);
        bool torn = keep > 0 && full[keep - 1] != '\n';
        cr_assert_eq(st.repaired, torn, "cut at %zu", keep);
        char *again = read_file(out_path);
        cr_assert_str_eq(again, full, "cut at %zu", keep);
        free(again);
    }
    free(full);
}

Test(sweep, torn_header_line_is_rewritten)
{
    write_file(in_path, INPUT);
    write_file(out_path, "key,x,--y,sta");
    sweep_stats st;
    ts_err e;
    cr_assert_eq(run(1, &st, &e), TS_OK, "%s", e.msg);
    cr_assert(st.repaired);
    cr_assert_eq(st.ran, 5);
    char *out = read_file(out_path);
    cr_assert_eq(strncmp(out, "key,x,--y,status,product,error\n", 31), 0);
    free(out);
    truncate_to(out_path, 0);
}

Test(sweep, edited_row_runs_again)
{
    write_file(in_path, INPUT);
    sweep_stats st;
    ts_err e;
    cr_assert_eq(run(1, &st, &e), TS_OK, "%s", e.msg);
    write_file(in_path, "x,--y\n2,3\n4,\n-1,5\n6,8\n0,9\n");
    cr_assert_eq(run(1, &st, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(st.skipped, 4);
    cr_assert_eq(st.ran, 1);
    char *out = read_file(out_path);
    cr_assert_not_null(strstr(out, ",6,8,ok,48,\n"));
    free(out);
}

Test(sweep, foreign_header_is_refused)
{
    write_file(in_path, INPUT);
    write_file(out_path, "key,a,b\n1-0000000000000000,1,2\n");
    sweep_stats st;
    ts_err e;
    cr_assert_eq(run(1, &st, &e), TS_EINVAL);
    cr_assert_not_null(strstr(e.msg, "header differs"), "%s", e.msg);
    cr_assert_not_null(strstr(e.msg, "out.csv:1:"), "%s", e.msg);
}

Test(sweep, reserved_column_is_refused)
{
    write_file(in_path, "x,status\n1,2\n");
    sweep_stats st;
    ts_err e;
    cr_assert_eq(run(1, &st, &e), TS_EINVAL);
    cr_assert_not_null(strstr(e.msg, "'status'"), "%s", e.msg);
}

Test(sweep, missing_input_names_the_file)
{
    sweep_stats st;
    ts_err e;
    cr_assert_neq(run(1, &st, &e), TS_OK);
    cr_assert_not_null(strstr(e.msg, "in.csv"), "%s", e.msg);
}

Test(sweep, newline_in_a_cell_stays_on_one_line)
{
    write_file(in_path, "x,y\n\"1\n2\",3\n");
    sweep_stats st;
    ts_err e;
    cr_assert_eq(run(1, &st, &e), TS_OK, "%s", e.msg);
    char *out = read_file(out_path);
    int lines = 0;
    for (char *p = out; *p; p++)
        lines += *p == '\n';
    cr_assert_eq(lines, 2, "%s", out);
    free(out);
}

/* Only x and y are columns of eval_product. */
static int check_xy(void *user, const char *name, ts_err *err)
{
    (void)user;
    if (!strcmp(name, "x") || !strcmp(name, "y"))
        return TS_OK;
    return err_set(err, TS_EINVAL, "not x or y");
}

/* An unknown column stops the sweep before any row runs: the message has
 * FILE:LINE, the column's number and name and the checker's words, and the
 * output is never created. */
Test(sweep, unknown_column_stops_before_any_row)
{
    write_file(in_path, "# comment\nx,--z\n2,3\n");
    sweep_evaluator ev = EV;
    ev.check_column = check_xy;
    sweep_opts o = {.input = in_path, .output = out_path, .threads = 1};
    sweep_stats st;
    ts_err e;
    err_clear(&e);
    cr_expect_eq(sweep_run(&o, &ev, &st, &e), TS_EINVAL);
    cr_expect_not_null(strstr(e.msg, "in.csv:2: column 2 '--z': not x or y"), "%s", e.msg);
    cr_expect_eq(st.ran, 0);
    cr_expect_neq(access(out_path, F_OK), 0, "the output was created");
    /* known columns, with or without "--", pass the check */
    write_file(in_path, "x,--y\n2,3\n");
    err_clear(&e);
    cr_expect_eq(sweep_run(&o, &ev, &st, &e), TS_OK, "%s", e.msg);
    cr_expect_eq(st.ran, 1);
}

Test(sweep, duplicate_key_on_resume_names_key_and_lines)
{
    write_file(in_path, INPUT);
    sweep_stats st;
    ts_err e;
    cr_assert_eq(run(1, &st, &e), TS_OK, "%s", e.msg);
    /* line 2 (the first row) written again at the end, as two sweeps at once would */
    char *text = read_file(out_path);
    char *l2 = strchr(text, '\n') + 1;
    char *l3 = strchr(l2, '\n') + 1;
    FILE *f = fopen(out_path, "a");
    cr_assert_not_null(f);
    fwrite(l2, 1, (size_t)(l3 - l2), f);
    cr_assert_eq(fclose(f), 0);
    char key[SWEEP_KEY_BYTES];
    snprintf(key, sizeof key, "%.*s", (int)(strchr(l2, ',') - l2), l2);
    free(text);
    cr_assert_eq(run(1, &st, &e), TS_EINVAL);
    cr_assert(strstr(e.msg, key) && strstr(e.msg, "2 times (lines 2, 7)"), "%s", e.msg);
}

Test(sweep, a_second_sweep_on_one_output_is_refused_naming_the_holder)
{
    write_file(in_path, INPUT);
    char lock[160];
    snprintf(lock, sizeof lock, "%s.lock", out_path);
    int ready[2], done[2];
    cr_assert_eq(pipe(ready), 0);
    cr_assert_eq(pipe(done), 0);
    pid_t c = fork();
    if (c == 0) { /* holds the lock as a running sweep would, until told */
        int fd = open(lock, O_RDWR | O_CREAT, 0644);
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
        if (fd < 0 || fcntl(fd, F_SETLK, &fl) != 0)
            _exit(1);
        dprintf(fd, "%ld 1\n", (long)getpid());
        char b = 0;
        (void)!write(ready[1], &b, 1);
        (void)!read(done[0], &b, 1);
        _exit(0);
    }
    char b;
    cr_assert_eq(read(ready[0], &b, 1), 1);
    sweep_stats st;
    ts_err e;
    int rc = run(1, &st, &e);
    cr_assert_eq(write(done[1], &b, 1), 1);
    waitpid(c, NULL, 0);
    char want[64];
    snprintf(want, sizeof want, "(PID %ld,", (long)c);
    cr_assert_eq(rc, TS_EIO);
    cr_assert(strstr(e.msg, want) && strstr(e.msg, "another trainsim sweep"), "%s", e.msg);
    cr_assert_neq(access(out_path, F_OK), 0, "the output is not touched");
    /* the holder gone, its lock file is taken over and removed at the end */
    cr_assert_eq(run(1, &st, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(st.stale_lock_pid, (long)c);
    cr_assert_neq(access(lock, F_OK), 0);
}
