/* The oneMKL peer of `qmoe bench --peer mkl` (oneMKL found at run time by dlopen). */
#ifndef QMOE_BENCH_PEER_MKL_H
#define QMOE_BENCH_PEER_MKL_H

#include <stdint.h>

/* Median ms of oneMKL packed int8 GEMMs [rows[e], K] x packed [K, N] -> s32 over experts e < E
 * run one after another on `threads` threads, `repeat` timed runs after a warm-up; the packing
 * is not timed. 0, or -1 with a message on stderr (oneMKL absent: the caller skips the peer). */
int peer_mkl_time(const int64_t *rows, int64_t E, int64_t K, int64_t N, int threads, int repeat,
                  double *median_ms);

#endif
