/* Fuzz harness: a schedule CSV (sim/sched/sched_csv.c sched_csv_parse) from
 * memory; a schedule that parses is validated and written back, as
 * trainsim schedule --load does. */
#include "sim/sched/sched.h"
#include "sim/sched/sched_csv.h"
#include "sim/sched/sched_validate.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > FUZZ_MAX_INPUT_BYTES)
        return 0;
    sched *s = NULL;
    ts_err err = {0};
    if (sched_csv_parse("fuzz.csv", (const char *)data, size, &s, &err) == TS_OK) {
        ts_err e = {0};
        sched_vinfo info = {.peak_inflight = NULL};
        (void)sched_validate(s, &info, &e);
        FILE *f = fopen("/dev/null", "w");
        if (f) {
            (void)sched_csv_write(s, f, &e);
            (void)fclose(f);
        }
        sched_free(s);
    }
    return 0;
}
