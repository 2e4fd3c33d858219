/* replay — a main() for the fuzz harnesses without libFuzzer: feeds every
 * file named on the command line to LLVMFuzzerTestOneInput, one at a time,
 * so `make test` replays tests/fuzz/regressions/ (and the seed corpora) with
 * the ordinary compiler and, in make test-sanitize, under ASan + UBSan.
 * A crash or sanitizer report ends the program with the file's name printed
 * first; otherwise it prints "N passed, 0 failed". */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz.h"

/* Read the whole file (malloc'ed into *data, size into *size). 0 or -1. */
static int replay_read(const char *path, uint8_t **data, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    while (buf) {
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (n < cap)
            break;
        uint8_t *bigger = realloc(buf, cap * 2);
        if (!bigger) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = bigger;
        cap *= 2;
    }
    int bad = ferror(f);
    (void)fclose(f);
    if (!buf || bad) {
        free(buf);
        return -1;
    }
    *data = buf;
    *size = n;
    return 0;
}

int main(int argc, char **argv)
{
    int passed = 0, failed = 0;
    for (int i = 1; i < argc; i++) {
        uint8_t *data = NULL;
        size_t size = 0;
        if (replay_read(argv[i], &data, &size) != 0) {
            fprintf(stderr, "replay: cannot read %s: %s\n", argv[i], strerror(errno));
            failed++;
            continue;
        }
        /* Name the input first, so a crash's report follows its file. */
        fprintf(stderr, "replay: %s\n", argv[i]);
        LLVMFuzzerTestOneInput(data, size);
        free(data);
        passed++;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
