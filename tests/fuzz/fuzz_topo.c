/* Fuzz harness: a topology file (sim/config/topo.c topo_load). topo_load
 * takes a path, so the input goes to a temporary file first; a topology that
 * loads is described and checked against a few GPU counts, the calls every
 * command makes next. */
#include "sim/config/topo.h"
#include "tests/fuzz/fuzz.h"

static void read_topo(const char *path)
{
    topo *t = NULL;
    ts_err err = {0};
    if (topo_load(path, &t, &err) == TS_OK) {
        char buf[512];
        topo_describe(t, buf, sizeof buf);
        (void)topo_gpu_capacity(t);
        ts_err e = {0};
        (void)topo_check_gpus(t, 1, &e);
        (void)topo_check_gpus(t, 8, &e);
        (void)topo_check_gpus(t, 1024, &e);
        topo_free(t);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_on_temp_file(data, size, read_topo);
}
