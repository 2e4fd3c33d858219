/* Fuzz harness: the Megatron-LM launch-script reader (sim/config/mscript)
 * from memory; the notes of a script that reads are written out, as
 * --megatron-script does. */
#include "sim/config/mscript.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > FUZZ_MAX_INPUT_BYTES)
        return 0;
    mscript *m = NULL;
    ts_err err = {0};
    if (mscript_parse("fuzz.sh", (const char *)data, size, &m, &err) == TS_OK) {
        FILE *f = fopen("/dev/null", "w");
        if (f) {
            mscript_write_notes(m, "trainsim", f);
            (void)fclose(f);
        }
        mscript_free(m);
    }
    return 0;
}
