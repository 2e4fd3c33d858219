/* Fuzz harness: a per-expert load file (sim/config/moe_load.c
 * moe_load_parse, what --moe-expert-load reads) from memory, for 8 experts
 * with MoE layers 0, 2, 4, 6 of 8, in either form (whole-model or per
 * layer); a file that parses must have a positive sum of tokens (per
 * layer: in every MoE layer, and none in a dense layer's rows; moe_load.h),
 * else the harness aborts. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "sim/config/moe_load.h"
#include "sim/util/csvio.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const REQ[] = {"expert", "tokens", NULL};
    if (size > FUZZ_MAX_INPUT_BYTES)
        return 0;
    csvio_table *t = NULL;
    ts_err err = {0};
    moe_config e;
    memset(&e, 0, sizeof e);
    e.num_experts = 8;
    e.layer_freq = 2;
    double loads[8 * 8] = {0};
    bool per_layer = false;
    if (csvio_read_mem("fuzz.csv", (const char *)data, size, REQ, 0, &t, &err) == TS_OK &&
        moe_load_parse(t, &e, 8, loads, &per_layer, &err) == TS_OK) {
        for (int l = 0; l < (per_layer ? 8 : 1); l++) {
            double sum = 0;
            for (int i = 0; i < 8; i++)
                sum += loads[l * 8 + i];
            if ((l % 2 == 0) != (sum > 0)) /* MoE layers (even) have tokens, dense ones none */
                abort();
        }
    }
    csvio_free(t);
    return 0;
}
