/* The optional oneDNN peer of `qmoe bench` (compiled in only when QMOE_HAVE_DNNL is defined). */
#ifndef QMOE_BENCH_PEER_ONEDNN_H
#define QMOE_BENCH_PEER_ONEDNN_H

#include <stdint.h>

/* Median ms of oneDNN int8 matmuls [rows[e], K] x [K, N] -> s32 over experts e < E run one after
 * another on `threads` threads, `repeat` timed runs after a warm-up. 0, or -1 (message on
 * stderr). */
int peer_onednn_time(const int64_t *rows, int64_t E, int64_t K, int64_t N, int threads,
                     int repeat, double *median_ms);

#endif
