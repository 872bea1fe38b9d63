/* A tiny test harness: CHECK macros that count failures, and a deterministic RNG. */
#ifndef QMOE_TESTLIB_H
#define QMOE_TESTLIB_H

#include <stdint.h>
#include <stdio.h>

extern int qt_failures;
extern int qt_checks;

#define CHECK(cond)                                                                              \
    do {                                                                                         \
        qt_checks++;                                                                             \
        if (!(cond)) {                                                                           \
            qt_failures++;                                                                       \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);           \
        }                                                                                        \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                     \
    do {                                                                                         \
        qt_checks++;                                                                             \
        if (!(cond)) {                                                                           \
            qt_failures++;                                                                       \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);           \
            fprintf(stderr, __VA_ARGS__);                                                        \
            fputc('\n', stderr);                                                                 \
        }                                                                                        \
    } while (0)

/* Prints "N passed, N failed" and returns the process exit code. A suite that ran no check at
 * all fails: it tested nothing. */
int qt_finish(const char *suite);

/* For a suite that cannot run here (e.g. the CPU lacks the instruction set): says why and
 * returns QT_SKIP, which ctest reports as skipped (SKIP_RETURN_CODE), or 1 if a check failed. */
#define QT_SKIP 77
int qt_skip(const char *suite, const char *why);

/* splitmix64: deterministic, seedable. */
typedef struct { uint64_t s; } qt_rng;
uint64_t qt_next(qt_rng *r);
int64_t qt_range(qt_rng *r, int64_t lo, int64_t hi); /* inclusive */
float qt_uniform(qt_rng *r, float lo, float hi);

#endif
