/* Fuzz harness: the flag parser — opt_parse under flags_parse, with every
 * shared flag registered as trainsim config and simulate register them —
 * on a command line split from the input (fuzz_argv.h). Parsing only: the
 * flags -> simulate harness (fuzz_simulate.c) goes on to flags_finish. */
#include "tests/fuzz/fuzz_argv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_cmdline x;
    if (fuzz_cmdline_parse(&x, data, size) == 0) {
        (void)flags_ignored(&x.fs);
        /* Misspelt names go through the suggestion's edit distance. */
        (void)opt_nearest(&x.t, x.argv[x.argc - 1]);
    }
    fuzz_cmdline_free(&x);
    return 0;
}
