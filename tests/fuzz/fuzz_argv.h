/* fuzz_argv — split a fuzz input into a command line and parse it, for the
 * harnesses of the flag parser and the flags -> simulate path.
 *
 * The input is split at '\n' (and NUL) into words, behind argv[0] =
 * "trainsim", at most FUZZ_ARGV_MAX words. A word holding '/' refuses the
 * whole input: --topology, --calibration and --megatron-script name files,
 * and a fuzzer that reaches /dev/zero or /proc would measure the machine, not
 * the parser. Names without '/' (files of the current directory) still reach
 * the readers' error paths.
 *
 * Ownership: on success *words (the copy the argv entries point into) and
 * *argv are malloc'ed; free both with fuzz_argv_free. fuzz_cmdline owns
 * its split command line, configuration, flag state and option table until
 * fuzz_cmdline_free. */
#ifndef TRAINSIM_FUZZ_ARGV_H
#define TRAINSIM_FUZZ_ARGV_H

#include "sim/config/config.h"
#include "sim/config/flags.h"
#include "sim/util/opt.h"
#include "tests/fuzz/fuzz.h"

#define FUZZ_ARGV_MAX 64

/* Split data into *argc words in *argv (NULL-terminated). 0 on success, -1
 * when the input is refused (too many words, a '/', no memory). */
static inline int fuzz_argv_split(const uint8_t *data, size_t size, int *argc, char ***argv, char **words)
{
    *argv = NULL;
    *words = NULL;
    if (size > 4096 || memchr(data, '/', size))
        return -1;
    char *w = fuzz_strdup(data, size);
    char **av = calloc(FUZZ_ARGV_MAX + 2, sizeof *av);
    if (!w || !av) {
        free(w);
        free(av);
        return -1;
    }
    int n = 0;
    av[n++] = "trainsim";
    char *p = w, *end = w + size;
    while (p <= end) {
        char *nl = p;
        while (nl < end && *nl != '\n' && *nl != '\0')
            nl++;
        *nl = '\0'; /* end == w + size already holds the NUL fuzz_strdup wrote */
        if (n > FUZZ_ARGV_MAX) {
            free(w);
            free(av);
            return -1;
        }
        av[n++] = p;
        p = nl + 1;
    }
    av[n] = NULL;
    *argc = n;
    *argv = av;
    *words = w;
    return 0;
}

static inline void fuzz_argv_free(char **argv, char *words)
{
    free(argv);
    free(words);
}

/* A command line parsed as trainsim config and simulate parse theirs. */
typedef struct {
    int argc;
    char **argv, *words; /* NULL when the input was refused */
    config c;
    flags_state fs;
    opt_table t;
    ts_err err;
} fuzz_cmdline;

/* Split data (fuzz_argv_split) and parse it with every shared flag
 * registered (flags_register, flags_parse). 0 when it parsed; -1 when the
 * input was refused or the parser reported an error (x->err). Call
 * fuzz_cmdline_free in every case. */
static inline int fuzz_cmdline_parse(fuzz_cmdline *x, const uint8_t *data, size_t size)
{
    memset(x, 0, sizeof *x);
    if (fuzz_argv_split(data, size, &x->argc, &x->argv, &x->words) != 0)
        return -1;
    opt_table_init(&x->t, "trainsim fuzz", "fuzz harness");
    if (flags_register(&x->fs, &x->t, &x->c, &x->err) != TS_OK)
        return -1;
    return flags_parse(&x->fs, &x->t, x->argc, x->argv, &x->err) == TS_OK ? 0 : -1;
}

static inline void fuzz_cmdline_free(fuzz_cmdline *x)
{
    if (!x->argv)
        return; /* refused: nothing was set up */
    config_free(&x->c);
    flags_release(&x->fs);
    opt_table_free(&x->t);
    fuzz_argv_free(x->argv, x->words);
}

#endif
