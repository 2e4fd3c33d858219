/* Fuzz harness: the flags -> simulate path (flags_parse, flags_finish,
 * simulate_run) on a command line split from the input (fuzz_argv.h).
 * Small configurations only, so one input runs in milliseconds: a command
 * line asking for more than FUZZ_SIM_MAX_GPUS GPUs is refused before the
 * configuration is resolved (the built-in topology grows with --gpus), and a
 * resolved one with more GPUs, layers or micro-batches than the caps below is
 * not simulated. The built-in default (no flag: 1024 GPUs) is refused so. */
#include "sim/core/simulate.h"
#include "tests/fuzz/fuzz_argv.h"

#define FUZZ_SIM_MAX_GPUS         64
#define FUZZ_SIM_MAX_LAYERS       8
#define FUZZ_SIM_MAX_MICROBATCHES 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_cmdline x;
    simulate_result *r = NULL;
    config *c = &x.c;
    if (fuzz_cmdline_parse(&x, data, size) == 0 && c->cluster.gpus >= 1 && c->cluster.gpus <= FUZZ_SIM_MAX_GPUS &&
        flags_finish(&x.fs, &x.t, &x.err) == TS_OK) {
        const parallel_config *par = &c->par;
        long dp = par->dp > 0 ? par->dp : 1, b = par->micro_batch_size > 0 ? par->micro_batch_size : 1;
        long m = par->global_batch_size / (b * dp);
        if (c->cluster.gpus <= FUZZ_SIM_MAX_GPUS && c->model.num_layers <= FUZZ_SIM_MAX_LAYERS &&
            m <= FUZZ_SIM_MAX_MICROBATCHES) {
            FILE *f = fopen("/dev/null", "w");
            if (f) {
                flags_print(&x.fs, f);
                (void)fclose(f);
            }
            simulate_opts so;
            memset(&so, 0, sizeof so);
            (void)simulate_run(c, &so, &r, &x.err);
        }
    }
    simulate_result_free(r);
    fuzz_cmdline_free(&x);
    return 0;
}
