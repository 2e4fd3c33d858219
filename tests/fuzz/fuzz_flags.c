/* Fuzz harness: the flag parser — opt_parse under flags_parse, with every
 * shared flag registered as trainsim config and simulate register them —
 * on a command line split from the input (fuzz_argv.h). Parsing only: the
 * flags -> simulate harness (fuzz_simulate.c) goes on to flags_finish. */
#include "sim/config/config.h"
#include "sim/config/flags.h"
#include "sim/util/opt.h"
#include "tests/fuzz/fuzz_argv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int argc = 0;
    char **argv = NULL, *words = NULL;
    if (fuzz_argv_split(data, size, &argc, &argv, &words) != 0)
        return 0;
    config c;
    memset(&c, 0, sizeof c);
    flags_state fs;
    memset(&fs, 0, sizeof fs);
    opt_table t;
    opt_table_init(&t, "trainsim fuzz", "fuzz harness");
    ts_err err = {0};
    if (flags_register(&fs, &t, &c, &err) == TS_OK && flags_parse(&fs, &t, argc, argv, &err) == TS_OK) {
        (void)flags_ignored(&fs);
        /* Misspelt names go through the suggestion's edit distance. */
        (void)opt_nearest(&t, argv[argc - 1]);
    }
    config_free(&c);
    flags_release(&fs);
    opt_table_free(&t);
    fuzz_argv_free(argv, words);
    return 0;
}
