/* Fuzz harness: the sweep input (sim/search/sweep.c sweep_run). The input
 * is the sweep's CSV, written to a temporary file; the output goes to a
 * second one. The evaluator stands in for trainsim's (which simulates): it
 * reports the number of arguments and the first one, so the harness
 * exercises the reading, keying, resuming and writing of rows, not the
 * simulator (fuzz_simulate.c does that). Columns named "bad..." are refused,
 * as trainsim refuses a misspelt flag column. One thread; then a second run
 * on the same output, which must skip every row (resume). */
#include "sim/search/sweep.h"
#include "tests/fuzz/fuzz.h"

static const char *const fuzz_sweep_names[] = {"argc", "first"};

static int fuzz_sweep_eval(void *user, int argc, char **argv, char **cells, ts_err *err)
{
    (void)user;
    if (argc > 1 && strstr(argv[1], "fail"))
        return err_set(err, TS_EINVAL, "asked to fail: %s", argv[1]);
    char buf[32];
    snprintf(buf, sizeof buf, "%d", argc);
    cells[0] = strdup(buf);
    cells[1] = strdup(argc > 1 ? argv[1] : "");
    if (!cells[0] || !cells[1])
        return err_set(err, TS_ENOMEM, "out of memory");
    return TS_OK;
}

static int fuzz_sweep_check(void *user, const char *name, ts_err *err)
{
    (void)user;
    if (strncmp(name, "bad", 3) == 0)
        return err_set(err, TS_EINVAL, "unknown column '%s'", name);
    return TS_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 16384)
        return 0;
    char in[256], out[256];
    if (fuzz_temp_file(data, size, in, sizeof in) != 0)
        return 0;
    if (fuzz_temp_file(NULL, 0, out, sizeof out) != 0) {
        fuzz_temp_remove(in);
        return 0;
    }
    fuzz_temp_remove(out); /* sweep_run creates the output */
    sweep_evaluator ev = {2, fuzz_sweep_names, fuzz_sweep_eval, NULL, fuzz_sweep_check};
    sweep_opts o = {.input = in, .output = out, .threads = 1};
    sweep_stats st;
    ts_err err = {0};
    if (sweep_run(&o, &ev, &st, &err) == TS_OK)
        (void)sweep_run(&o, &ev, &st, &err);
    fuzz_temp_remove(out);
    fuzz_temp_remove(in);
    return 0;
}
