/* The AMX kernel's loop against the peak: the tile loads and TDPBSUDs of the driver's 32-row
 * block (2 A + 2 B tile loads per 4 products) over one prefill expert (2048 rows, K = 7168,
 * P panels of 2 x 64 weight columns, B tiles 16 rows 256 bytes apart as prepacked) and over one
 * mid expert (64 rows, K = 2048, 12 panels), with the operands where the driver finds them (x
 * in tile order from L3 for prefill, weights from L3 for mid) and with both operands held in
 * L1 (the same loop over 2 k tiles): the gap between the two is the memory hierarchy, not the
 * products. Also the same loop software-pipelined (each tile reloaded right after its last
 * reader). Numbers behind docs/performance.md; not part of the build (x86-64 with AMX only):
 *   cc -O2 -mamx-tile -mamx-int8 -mavx512f bench/amx_kernel_loops.c -o amx_kernel_loops */
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* palette 1, 8 tiles of 16 rows x 64 bytes */
static const unsigned char tiles_16x64[64] __attribute__((aligned(64))) = {
    1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 64, 0, 64, 0, 64, 0, 64, 0, 64, 0, 64, 0, 64, 0, 64, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 16, 16, 16, 16, 16, 16, 16, 16};

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* kt k tiles of 32 rows x 2 units; x0/x1: the two 16-row A groups (1 KB tiles, contiguous per
 * k tile); w: B at row stride ws; kmod: reuse the first kmod k tiles (0: none). */
static void block(int kt, int kmod, int pipe, const int8_t *x0, const int8_t *x1,
                  const uint8_t *w, int ws, int32_t *c)
{
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    if (!pipe) {
        for (int t = 0; t < kt; t++) {
            int k = kmod ? t % kmod : t;
            const uint8_t *b = w + 16 * k * ws;
            _tile_loadd(4, x0 + 1024 * k, 64);
            _tile_loadd(6, b, ws);
            _tile_loadd(5, x1 + 1024 * k, 64);
            _tile_dpbsud(0, 4, 6);
            _tile_dpbsud(2, 5, 6);
            _tile_loadd(7, b + 64, ws);
            _tile_dpbsud(1, 4, 7);
            _tile_dpbsud(3, 5, 7);
        }
    } else {
        _tile_loadd(4, x0, 64);
        _tile_loadd(6, w, ws);
        _tile_loadd(5, x1, 64);
        _tile_loadd(7, w + 64, ws);
        for (int t = 1; t < kt; t++) {
            int k = kmod ? t % kmod : t;
            const uint8_t *b = w + 16 * k * ws;
            _tile_dpbsud(0, 4, 6);
            _tile_dpbsud(2, 5, 6);
            _tile_loadd(6, b, ws);
            _tile_dpbsud(1, 4, 7);
            _tile_loadd(4, x0 + 1024 * k, 64);
            _tile_dpbsud(3, 5, 7);
            _tile_loadd(5, x1 + 1024 * k, 64);
            _tile_loadd(7, b + 64, ws);
        }
        _tile_dpbsud(0, 4, 6);
        _tile_dpbsud(2, 5, 6);
        _tile_dpbsud(1, 4, 7);
        _tile_dpbsud(3, 5, 7);
    }
    _tile_stored(0, c, 512);
    _tile_stored(2, c + 16 * 128, 512);
    _tile_stored(1, c + 16, 512);
    _tile_stored(3, c + 16 * 128 + 16, 512);
}

/* One expert: panels outer, 32-row blocks, both halves, unit pairs, all K in one pass (the
 * driver's order). Returns the best of `reps` in seconds. */
static double expert(int rows, int K, int panels, int experts, int kmod, int pipe, int reps,
                     const int8_t *xt, const uint8_t *w, int32_t *acc)
{
    int kt = K / 64;
    size_t panel = (size_t)2 * (K / 4) * 256;
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        for (int e = 0; e < experts; e++)
            for (int p = 0; p < panels; p++) {
                const uint8_t *pw = kmod ? w : w + ((size_t)e * panels + p) * panel;
                for (int m = 0; m < rows; m += 32) {
                    const int8_t *x0 = xt + (kmod ? 0 : (size_t)m * K), *x1 = x0 + 16 * K;
                    for (int h = 0; h < 2; h++)
                        for (int u = 0; u < 4; u += 2)
                            block(kt, kmod, pipe, x0, x1, pw + h * panel / 2 + u * 64, 256,
                                  acc + h * 64 + u * 16);
                }
            }
        double dt = now() - t0;
        if (dt < best) best = dt;
    }
    return best;
}

int main(void)
{
    syscall(SYS_arch_prctl, 0x1023, 18); /* ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA */
    _tile_loadconfig(tiles_16x64); /* a constant: gcc may drop stores to a stack config */
    /* peak: 6 independent products, best of 5 */
    double peak = 0;
    long iters = 2000000;
    for (int r = 0; r < 5; r++) {
        double t0 = now();
        for (long i = 0; i < iters; i++) {
            _tile_dpbsud(0, 6, 7);
            _tile_dpbsud(1, 6, 7);
            _tile_dpbsud(2, 6, 7);
            _tile_dpbsud(3, 6, 7);
            _tile_dpbsud(4, 6, 7);
            _tile_dpbsud(5, 6, 7);
        }
        double rate = 6.0 * (double)iters * 32768 / (now() - t0);
        if (rate > peak) peak = rate;
    }
    printf("TDPBSUD peak: %.0f GOPS\n", peak * 1e-9);
    struct {
        const char *name;
        int rows, K, panels, experts;
    } cases[] = {{"prefill expert (2048 rows, K 7168, 8 of its 32 panels)", 2048, 7168, 8, 1},
                 {"mid (8 experts x 64 rows, K 2048, 12 panels)", 64, 2048, 12, 8}};
    for (int c = 0; c < 2; c++) {
        int rows = cases[c].rows, K = cases[c].K, P = cases[c].panels, E = cases[c].experts;
        size_t wbytes = (size_t)E * P * 2 * (K / 4) * 256;
        uint8_t *w = aligned_alloc(4096, wbytes);
        int8_t *xt = aligned_alloc(4096, (size_t)rows * K);
        int32_t *acc = aligned_alloc(4096, 32 * 128 * 4);
        memset(w, 1, wbytes);
        memset(xt, 1, (size_t)rows * K);
        double ops = 2.0 * rows * K * 128 * P * E;
        printf("%s:\n", cases[c].name);
        for (int pipe = 0; pipe < 2; pipe++)
            for (int hot = 0; hot < 2; hot++) {
                double s = expert(rows, K, P, E, hot ? 2 : 0, pipe, 7, xt, w, acc);
                printf("  %-10s %-28s %8.3f ms %6.0f GOPS %5.1f%% of peak\n",
                       pipe ? "pipelined" : "driver's",
                       hot ? "operands in L1 (2 k tiles)" : "operands where they are", s * 1e3,
                       ops / s * 1e-9, 100.0 * ops / s / peak);
            }
        free(w);
        free(xt);
        free(acc);
    }
    _tile_release();
    return 0;
}
