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

/* Prints "N passed, N failed" and returns the process exit code. */
int qt_finish(const char *suite);

/* splitmix64: deterministic, seedable. */
typedef struct { uint64_t s; } qt_rng;
uint64_t qt_next(qt_rng *r);
int64_t qt_range(qt_rng *r, int64_t lo, int64_t hi); /* inclusive */
float qt_uniform(qt_rng *r, float lo, float hi);

#endif
