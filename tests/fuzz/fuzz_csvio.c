/* Fuzz harness: the CSV reader (sim/util/csvio) from memory. The first byte
 * picks the flags (CSVIO_ALLOW_NO_ROWS or none), the rest is the file; every
 * cell of the table is then read back as a string, an integer and a number,
 * so the typed getters see whatever the parser accepted. */
#include "sim/util/csvio.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > FUZZ_MAX_INPUT_BYTES)
        return 0;
    unsigned flags = (data[0] & 1) ? CSVIO_ALLOW_NO_ROWS : 0;
    csvio_table *t = NULL;
    ts_err err = {0};
    if (csvio_read_mem("fuzz.csv", (const char *)data + 1, size - 1, NULL, flags, &t, &err) != TS_OK)
        return 0;
    for (size_t r = 0; r < t->nrows; r++) {
        for (size_t c = 0; c < t->ncols; c++) {
            const char *name = t->header[c];
            const char *s = NULL;
            int i = 0;
            int64_t i64 = 0;
            double d = 0;
            ts_err e = {0};
            (void)csvio_get_str(t, r, name, &s, &e);
            (void)csvio_get_int(t, r, name, -1000, 1000, &i, &e);
            (void)csvio_get_int64(t, r, name, INT64_MIN, INT64_MAX, &i64, &e);
            (void)csvio_get_double(t, r, name, -1e300, 1e300, &d, &e);
            (void)csvio_get_positive(t, r, name, &d, &e);
            (void)csvio_empty(t, r, name);
        }
    }
    csvio_free(t);
    return 0;
}
