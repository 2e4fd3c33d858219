/* fuzz — what every fuzz harness (tests/fuzz/fuzz_<target>.c) shares.
 *
 * Each harness defines LLVMFuzzerTestOneInput, the entry point libFuzzer
 * calls with one input; built by `make fuzz` with clang and
 * -fsanitize=fuzzer, or linked with replay.c (a main() that feeds it files)
 * by `make test`, so the saved regression inputs run on every build without
 * libFuzzer. A harness returns 0 for every input: an error status from the
 * library is the expected answer to a bad input; only a crash, a sanitizer
 * report or a leak is a finding.
 *
 * Ownership: fuzz_temp_file and fuzz_strdup return what the caller frees
 * (fuzz_temp_remove, free). */
#ifndef TRAINSIM_FUZZ_H
#define TRAINSIM_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Inputs larger than this are refused at once (return 0): the readers'
 * cost grows with the input and the interesting bugs live in small ones. */
#define FUZZ_MAX_INPUT_BYTES (64u * 1024u)

/* Write data to a fresh temporary file (for APIs that take a path); its
 * path goes into path[cap]. 0 on success, -1 if it could not be written
 * (the harness then skips the input). */
static inline int fuzz_temp_file(const uint8_t *data, size_t size, char *path, size_t cap)
{
    const char *dir = getenv("TMPDIR");
    if (snprintf(path, cap, "%s/trainsim-fuzz-XXXXXX", dir && *dir ? dir : "/tmp") >= (int)cap)
        return -1;
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    size_t done = 0;
    while (done < size) {
        ssize_t w = write(fd, data + done, size - done);
        if (w <= 0) {
            close(fd);
            unlink(path);
            return -1;
        }
        done += (size_t)w;
    }
    close(fd);
    return 0;
}

static inline void fuzz_temp_remove(const char *path)
{
    unlink(path);
}

/* The body of a harness whose API reads a path: an input over
 * FUZZ_MAX_INPUT_BYTES is skipped, any other goes to a temporary file that
 * reader(path) reads and that is removed after it. Returns 0, libFuzzer's
 * value for every input. */
static inline int fuzz_on_temp_file(const uint8_t *data, size_t size, void (*reader)(const char *path))
{
    char path[256];
    if (size > FUZZ_MAX_INPUT_BYTES || fuzz_temp_file(data, size, path, sizeof path) != 0)
        return 0;
    reader(path);
    fuzz_temp_remove(path);
    return 0;
}

/* A NUL-terminated copy of data (malloc'ed; NULL when out of memory). */
static inline char *fuzz_strdup(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (s) {
        if (size)
            memcpy(s, data, size);
        s[size] = '\0';
    }
    return s;
}

#endif
