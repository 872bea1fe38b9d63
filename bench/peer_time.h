/* The clock and the median of the peers of `qmoe bench` (header-only: the oneDNN peer is a plugin
 * of its own and links nothing of the program). */
#ifndef QMOE_BENCH_PEER_TIME_H
#define QMOE_BENCH_PEER_TIME_H

#include <stdlib.h>
#include <time.h>

static inline double peer_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static inline int peer_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of ms[0..n) (n >= 1); sorts ms. */
static inline double peer_median(double *ms, int n)
{
    qsort(ms, (size_t)n, sizeof *ms, peer_cmp_double);
    return n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
}

#endif
