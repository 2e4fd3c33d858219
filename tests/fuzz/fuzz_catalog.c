/* Fuzz harness: a GPU catalogue (sim/config/catalog.c catalog_gpus_load)
 * from a temporary file; every GPU of a catalogue that loads is looked up
 * again by name, as --gpu KIND does. */
#include "sim/config/catalog.h"
#include "tests/fuzz/fuzz.h"

static void read_catalog(const char *path)
{
    catalog_gpus *c = NULL;
    ts_err err = {0};
    if (catalog_gpus_load(path, &c, &err) == TS_OK) {
        for (size_t i = 0; i < c->n; i++) {
            gpu_spec g;
            ts_err e = {0};
            (void)catalog_gpus_find(c, c->gpus[i].name);
            (void)catalog_gpus_lookup(c, c->gpus[i].name, &g, &e);
        }
        (void)catalog_gpus_find(c, "no-such-gpu");
        catalog_gpus_free(c);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_on_temp_file(data, size, read_catalog);
}
