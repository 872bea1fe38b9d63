/*
 * The program's side of `qmoe bench --peer onednn`: loads the oneDNN plugin (built by make
 * bench-venv into <build>/bench-venv/lib, with oneDNN itself beside it) at run time, so that
 * neither the qmoe program nor the library links oneDNN, and a build without it says how to get
 * it instead of failing.
 */
#define _GNU_SOURCE
#include "peer_onednn.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>

#include "peer_open.h"

int peer_onednn_time(const int64_t *rows, int64_t E, int64_t K, int64_t N, int threads,
                     int repeat, double *median_ms)
{
    static const char *const names[] = {QMOE_PEER_ONEDNN_SO};
    char where[PATH_MAX + 64], why[512];
    void *h = peer_open("QMOE_ONEDNN_PEER", names, 1, where, sizeof where, why, sizeof why);
    if (!h) {
        fprintf(stderr, "qmoe bench: --peer onednn: the oneDNN peer is not installed (%s; make "
                        "bench-venv installs oneDNN 3.x from PyPI and builds it, or set "
                        "QMOE_ONEDNN_PEER)%s%s; peer skipped\n",
                QMOE_PEER_ONEDNN_SO, why[0] ? ": " : "", why);
        return -1;
    }
    qmoe_peer_onednn_abi_fn *abi = (qmoe_peer_onednn_abi_fn *)dlsym(h, "qmoe_peer_onednn_abi");
    qmoe_peer_onednn_time_fn *run = (qmoe_peer_onednn_time_fn *)dlsym(h, "qmoe_peer_onednn_time");
    if (!abi || !run || abi() != QMOE_PEER_ONEDNN_ABI) {
        fprintf(stderr, "qmoe bench: --peer onednn: %s is not a oneDNN peer of this qmoe (interface "
                        "%d expected; make bench-venv rebuilds it); peer skipped\n",
                where, QMOE_PEER_ONEDNN_ABI);
        dlclose(h);
        return -1;
    }
    /* kept loaded: oneDNN's OpenMP threads outlive the call */
    return run(rows, E, K, N, threads, repeat, median_ms);
}
