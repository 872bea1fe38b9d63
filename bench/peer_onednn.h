/* The oneDNN peer of `qmoe bench --peer onednn`: a plugin (bench/peer_onednn.c, built by make
 * bench-venv against the venv's oneDNN) that the program loads at run time
 * (bench/peer_onednn_load.c), so neither the program nor the library links oneDNN. */
#ifndef QMOE_BENCH_PEER_ONEDNN_H
#define QMOE_BENCH_PEER_ONEDNN_H

#include <stdint.h>

/* The plugin's file name, and the version of the interface below: a plugin built from other
 * sources is refused, never called with the wrong arguments. */
#define QMOE_PEER_ONEDNN_SO "libqmoe_peer_onednn.so"
#define QMOE_PEER_ONEDNN_ABI 1

/* What the plugin exports: qmoe_peer_onednn_abi() returns QMOE_PEER_ONEDNN_ABI, and
 * qmoe_peer_onednn_time() is peer_onednn_time() below, run by oneDNN. */
typedef int qmoe_peer_onednn_abi_fn(void);
typedef int qmoe_peer_onednn_time_fn(const int64_t *rows, int64_t E, int64_t K, int64_t N,
                                     int threads, int repeat, double *median_ms);

/* Median ms of oneDNN int8 matmuls [rows[e], K] s8 x [K, N] s8 -> s32 over experts e < E run one
 * after another on `threads` threads, `repeat` timed runs after a warm-up; the weights are
 * reordered to oneDNN's preferred layout outside the timing. 0, or -1 with a message on stderr
 * (the plugin absent: the caller skips the peer). */
int peer_onednn_time(const int64_t *rows, int64_t E, int64_t K, int64_t N, int threads,
                     int repeat, double *median_ms);

#endif
