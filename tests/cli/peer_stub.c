/*
 * A stand-in for the oneDNN peer plugin of `qmoe bench --peer onednn` (test_bench_peer.py): it
 * records what the bench asked of it in $QMOE_PEER_STUB_OUT and reports a fixed time, so the test
 * can check the arguments and the JSON line the bench makes of a peer's time without oneDNN.
 * STUB_ABI set to another value builds a plugin of a foreign interface, which must be refused.
 */
#include <stdio.h>
#include <stdlib.h>

#include "peer_onednn.h"

#ifndef STUB_ABI
#define STUB_ABI QMOE_PEER_ONEDNN_ABI
#endif
#define EXPORT __attribute__((visibility("default")))

EXPORT int qmoe_peer_onednn_abi(void)
{
    return STUB_ABI;
}

EXPORT int qmoe_peer_onednn_time(const int64_t *rows, int64_t E, int64_t K, int64_t N,
                                 int threads, int repeat, double *median_ms)
{
    const char *path = getenv("QMOE_PEER_STUB_OUT");
    FILE *f = path ? fopen(path, "w") : NULL;
    if (!f) return -1;
    fprintf(f, "%lld %lld %lld %d %d", (long long)E, (long long)K, (long long)N, threads, repeat);
    for (int64_t e = 0; e < E; e++) fprintf(f, " %lld", (long long)rows[e]);
    fprintf(f, "\n");
    *median_ms = 1234.5;
    return fclose(f) ? -1 : 0;
}
