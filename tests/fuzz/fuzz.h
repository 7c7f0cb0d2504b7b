/*
 * tests/fuzz/fuzz.h — what every harness shares.
 *
 * A harness is one fuzz_<name>.c defining LLVMFuzzerTestOneInput. It is
 * built twice (tests/fuzz/CMakeLists.txt):
 *   fuzz_<name>         with libFuzzer (RELAY_FUZZ=ON, clang), for
 *                       scripts/fuzz;
 *   fuzz_<name>_replay  with replay_main.c, by any compiler, so ctest feeds
 *                       it the checked-in corpus (corpus/<name>/) and the
 *                       regression inputs (regressions/<name>/) under the
 *                       normal sanitizer suite.
 * A harness reports a broken invariant with fuzz_fail(), which aborts: to
 * libFuzzer that is a crash, to the replay a failed test.
 */
#ifndef RELAY_FUZZ_H
#define RELAY_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Prints "fuzz invariant broken: <message>" on stderr and aborts. */
void fuzz_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* A fresh private folder for this process (mkdtemp under $TMPDIR or /tmp),
 * created on the first call and removed at exit; static string. */
const char *fuzz_scratch_dir(void);

/* Removes the tree at `path` (no error when it is missing); links are
 * removed, never followed. */
void fuzz_remove_tree(const char *path);

/* Writes data[0..size) to `path` (created or truncated, 0600). 0 or -1. */
int fuzz_write_file(const char *path, const void *data, size_t size);

/* prefix + data[0..size) + suffix as a malloc'd string (free()); aborts
 * when out of memory. data may hold NULs (the string is then cut there for
 * C-string consumers, which is what they would see). */
char *fuzz_wrap(const char *prefix, const void *data, size_t size, const char *suffix);

#endif
