/* Fuzz harness: a calibration file (sim/model/calib.c calib_read) from a
 * temporary file. The rows of a file that reads are fitted for each
 * precision on the A100's default tables (what --calibration does for a
 * datasheet GPU) and alone (what it does for a calibrated-only device, `--gpu
 * cpu`), under the GPU name of the first row so the fit uses the rows. */
#include <stdbool.h>

#include "sim/config/catalog.h"
#include "sim/model/calib.h"
#include "sim/model/commcost.h"
#include "sim/model/cost.h"
#include "tests/fuzz/fuzz.h"

/* The shipped catalogue is read once: a GPU with default tables. */
static gpu_spec a100;
static int have_a100 = -1;

static void read_calib(const char *path)
{
    calib_set set = {0};
    ts_err err = {0};
    if (calib_read(path, &set, &err) == TS_OK && set.n > 0 && have_a100) {
        gpu_spec g = a100;
        snprintf(g.name, sizeof g.name, "%s", set.rows[0].gpu);
        for (int p = PREC_BF16; p <= PREC_FP32; p++) {
            cost_params base, out;
            commcost_params link;
            ts_err e = {0};
            if (cost_params_default(&a100, (config_precision)p, &base, &e) == TS_OK) {
                snprintf(base.gpu, sizeof base.gpu, "%s", set.rows[0].gpu);
                (void)calib_fit(&set, &base, (config_precision)p, &out, &e);
            }
            gpu_spec dev = g;
            dev.calibrated_only = true;
            (void)calib_device_params(&set, &dev, (config_precision)p, &out, &link, &e);
        }
    }
    calib_free(&set);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (have_a100 < 0) {
        ts_err e = {0};
        have_a100 = catalog_gpu("A100-SXM4-80GB", &a100, &e) == TS_OK;
    }
    return fuzz_on_temp_file(data, size, read_calib);
}
