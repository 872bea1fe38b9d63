/*
 * The AMX tile state of a thread (parts.h): qmoe's kernels load the configuration they need
 * (gemm_s8_amx.c's 16 x 64 tiles, gemm_groups_amx.c's per group size) and give the thread's
 * own earlier configuration back, or release the tiles, at the end of each kernel call. A
 * thread that had a tile configuration of its own before the call (ggml's CPU backend configures
 * its tiles once per thread and never again, and qmoe runs on ggml's threads) would otherwise
 * fault on its next tile instruction.
 */
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#include <stdalign.h>
#include <string.h>

#include "kernels/cpu_features.h"
#include "kernels/x86/parts.h"

static _Thread_local int tiles_ready;
/* The configuration the thread had when qmoe configured its tiles (all zero: none), and the one
 * qmoe loaded last (the groups kernel's shapes differ from the 16 x 64 one). */
static _Thread_local alignas(64) uint8_t caller_cfg[64];
static _Thread_local alignas(64) uint8_t loaded_cfg[64];

void qmoe_amx_tiles(const uint8_t *cfg)
{
    if (tiles_ready && !memcmp(loaded_cfg, cfg, 64)) return;
    if (!tiles_ready) {
        /* The first detection also asks the OS for the tile state (callers reach this table
         * through detection anyway; this keeps a direct caller from faulting). */
        (void)qmoe_cpu_features_get();
        _tile_storeconfig(caller_cfg); /* 64 zero bytes when the tiles are not configured */
    }
    memcpy(loaded_cfg, cfg, 64);
    _tile_loadconfig(loaded_cfg);
    tiles_ready = 1;
}

void qmoe_amx_release(void)
{
    if (!tiles_ready) return;
    if (caller_cfg[0]) /* palette 0 is the unconfigured state */
        _tile_loadconfig(caller_cfg);
    else
        _tile_release();
    tiles_ready = 0;
}
#endif
