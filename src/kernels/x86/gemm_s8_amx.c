/*
 * AMX-INT8 micro-kernel (Sapphire Rapids tile matmul, TDPBSUD: signed x times unsigned weights).
 *
 * The packed weights of gmm_fast.h are already in the B-tile order: one step of 4 k of a unit is
 * 16 columns x 4 bytes = one 64-byte tile row, and steps follow each other at `wstep`, so 16
 * steps of one unit load as one B tile (64 k x 16 columns) with stride wstep. A tiles are 16
 * rows of x x 64 k at the x row stride; C tiles 16 rows x 16 int32 columns of acc. Blocks of 32
 * rows x 2 units use 4 C tiles, 2 A and 2 B (all 8 tile registers). Rows past the last multiple
 * of 16, the K tail past the last multiple of 64 and the driver's special calls (a repeated step,
 * a broadcast row of ones) go to the AVX-512 VNNI micro-kernel, which has the same contract, so
 * the int32 results are exact either way.
 *
 * Tiles are configured lazily per thread (all 8 as 16 rows x 64 bytes) and released by
 * qmoe_amx_release() at the end of a kernel call, so a thread does not keep the 8 KB tile state
 * alive between calls. A thread that had a tile configuration of its own before the call (another
 * library's AMX code on the same thread: ggml's CPU backend configures its tiles once per thread
 * and never again, and qmoe runs on ggml's threads) gets that configuration back instead, or its
 * next tile instruction would fault on an unconfigured or foreign layout.
 */
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#include <stdalign.h>
#include <string.h>

#include "kernels/cpu_features.h"
#include "kernels/gmm_fast.h"
#include "kernels/peak.h"
#include "kernels/x86/parts.h"

/* Rows per call from the driver, which are also its accumulator block: 32 rows (two C tiles
 * high) measured fastest; 64 or 128 rows (a unit pair's weights reused by every 32 rows) were
 * 5-15% slower in bench_kernel. The driver passes a whole K group per call (tile loads are the
 * bottleneck, so fewer C tile reloads beat keeping A in L1: 5-10% faster than 512-k passes).
 * Software prefetch of the next weight or x tile, issuing each tile load right after the last
 * product that reads its register, and a 32 x 16 block with double-buffered A and B tiles (1.5
 * tile loads per product instead of 1: 20% slower) did not help. */
enum { MR = 32 };

/* Palette 1, all 8 tiles 16 rows x 64 bytes. A constant, not built on the stack: gcc may drop
 * stores to a stack buffer that only ldtilecfg reads (seen in a test loop here, and the cause of
 * llama.cpp's AMX crash, upstream PR 26954). */
static const alignas(64) uint8_t qmoe_tiles_16x64[64] = {
    1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,         /* palette, start row, reserved */
    64, 0, 64, 0, 64, 0, 64, 0, 64, 0, 64, 0, 64, 0, 64, 0, /* colsb of tiles 0-7 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,         /* colsb of tiles 8-15 (none) */
    16, 16, 16, 16, 16, 16, 16, 16,                         /* rows of tiles 0-7 */
};

static void tiles_config(void) { qmoe_amx_tiles(qmoe_tiles_16x64); }

/* The VNNI kernel in blocks of its own row count. */
static void vnni_rows(int mr, int nu, int64_t kq, const int8_t *x, int64_t ldx, const uint8_t *wp,
                      int64_t wstep, int32_t *acc, int64_t ldacc, int accumulate)
{
    const qmoe_gemm_isa *v = &qmoe_isa_avx512_vnni;
    for (int r = 0; r < mr; r += v->mr) {
        int n = mr - r < v->mr ? mr - r : v->mr;
        v->gemm(n, nu, kq, x + r * ldx, ldx, wp, wstep, acc + r * ldacc, ldacc, accumulate);
    }
}

/* Where the A tiles are: rows 16 i .. 16 i + 15 at k block t (64 k) start at
 * p + i * group + t * step, one row `stride` bytes after the other. */
typedef struct asrc {
    const int8_t *p;
    int64_t stride, step, group;
} asrc;

/* 32 rows x units u, u + 1 (two == 0: unit u only) over kt tiles of 64 k; C rows 0-15 at acc
 * (row stride ldacc), rows 16-31 at c1 (stride ld1). */
static void block32(int two, int64_t kt, asrc a, const uint8_t *wp, int64_t wstep, int32_t *acc,
                    int64_t ldacc, int32_t *c1, int64_t ld1, int accumulate)
{
    int64_t lda = ldacc * 4, lda1 = ld1 * 4, ldb = wstep;
    if (accumulate) {
        _tile_loadd(0, acc, lda);
        _tile_loadd(2, c1, lda1);
        if (two) {
            _tile_loadd(1, acc + 16, lda);
            _tile_loadd(3, c1 + 16, lda1);
        }
    } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    }
    const int8_t *x0 = a.p, *x1 = a.p + a.group;
    for (int64_t t = 0; t < kt; t++) {
        const uint8_t *b = wp + 16 * t * wstep;
        _tile_loadd(4, x0 + a.step * t, a.stride);
        _tile_loadd(6, b, ldb);
        _tile_loadd(5, x1 + a.step * t, a.stride);
        _tile_dpbsud(0, 4, 6);
        _tile_dpbsud(2, 5, 6);
        if (two) {
            _tile_loadd(7, b + 64, ldb);
            _tile_dpbsud(1, 4, 7);
            _tile_dpbsud(3, 5, 7);
        }
    }
    _tile_stored(0, acc, lda);
    _tile_stored(2, c1, lda1);
    if (two) {
        _tile_stored(1, acc + 16, lda);
        _tile_stored(3, c1 + 16, lda1);
    }
}

/* 16 rows x units u, u + 1 (two == 0: unit u only). */
static void block16(int two, int64_t kt, asrc a, const uint8_t *wp, int64_t wstep, int32_t *acc,
                    int64_t ldacc, int accumulate)
{
    int64_t lda = ldacc * 4, ldb = wstep;
    if (accumulate) {
        _tile_loadd(0, acc, lda);
        if (two) _tile_loadd(1, acc + 16, lda);
    } else {
        _tile_zero(0);
        _tile_zero(1);
    }
    for (int64_t t = 0; t < kt; t++) {
        const uint8_t *b = wp + 16 * t * wstep;
        _tile_loadd(4, a.p + a.step * t, a.stride);
        _tile_loadd(6, b, ldb);
        _tile_dpbsud(0, 4, 6);
        if (two) {
            _tile_loadd(7, b + 64, ldb);
            _tile_dpbsud(1, 4, 7);
        }
    }
    _tile_stored(0, acc, lda);
    if (two) _tile_stored(1, acc + 16, lda);
}

/* The rows [0, mr & ~15) x kt tiles of 64 k from `a`; the K tail and the remaining rows from the
 * row-major x through the VNNI kernel, or, when `a` is padded to whole groups (padded), the
 * remaining rows through tiles too. */
static void gemm_tiles(int mr, int nu, int64_t kq, asrc a, const int8_t *x, int64_t ldx,
                       const uint8_t *wp, int64_t wstep, int32_t *acc, int64_t ldacc,
                       int accumulate, int padded)
{
    int64_t kt = kq / 16;
    tiles_config();
    /* Units outer, rows inner: a unit pair's weights come from L2 once per call. */
    /* With padded A groups (and no K tail) the last, partial group goes through tiles too:
     * its C tile lands in `part`, of which the rows that exist are kept. */
    int full = mr & ~15;
    int pad = padded && full < mr && kq == 16 * kt;
    int tiled = pad ? full + 16 : full, rem = mr - full;
    alignas(64) int32_t part[16 * 32];
    for (int u = 0; u < nu; u += 2) {
        int two = u + 1 < nu;
        size_t cb = sizeof(int32_t) * (two ? 32 : 16);
        int32_t *pc = acc + full * ldacc + u * QMOE_PK_UNIT; /* the partial group's rows */
        if (pad && accumulate)
            for (int r = 0; r < rem; r++) memcpy(part + 32 * r, pc + r * ldacc, cb);
        for (int r = 0; r < tiled; r += 32) {
            asrc ar = {a.p + (r / 16) * a.group, a.stride, a.step, a.group};
            const uint8_t *wu = wp + u * QMOE_PK_STEP;
            int32_t *c0 = acc + r * ldacc + u * QMOE_PK_UNIT, *c1 = c0 + 16 * ldacc;
            int64_t ld0 = ldacc, ld1 = ldacc;
            if (pad && r == full) c0 = part, ld0 = 32;
            if (pad && r + 16 == full) c1 = part, ld1 = 32;
            if (r + 32 <= tiled) block32(two, kt, ar, wu, wstep, c0, ld0, c1, ld1, accumulate);
            else block16(two, kt, ar, wu, wstep, c0, ld0, accumulate);
        }
        if (pad)
            for (int r = 0; r < rem; r++) memcpy(pc + r * ldacc, part + 32 * r, cb);
    }
    if (pad) return;
    if (kq > 16 * kt) /* K tail of the tiled rows */
        vnni_rows(tiled, nu, kq - 16 * kt, x + 64 * kt, ldx, wp + 16 * kt * wstep, wstep, acc,
                  ldacc, 1);
    if (tiled < mr)
        vnni_rows(mr - tiled, nu, kq, x + tiled * ldx, ldx, wp, wstep, acc + tiled * ldacc, ldacc,
                  accumulate);
}

static void gemm_amx(int mr, int nu, int64_t kq, const int8_t *x, int64_t ldx, const uint8_t *wp,
                     int64_t wstep, int32_t *acc, int64_t ldacc, int accumulate)
{
    /* ldx/wstep 0 are the driver's broadcast calls; tiles want real rows. */
    if (kq < 16 || mr < 16 || ldx == 0 || wstep == 0) {
        vnni_rows(mr, nu, kq, x, ldx, wp, wstep, acc, ldacc, accumulate);
        return;
    }
    asrc a = {x, ldx, 64, 16 * ldx};
    gemm_tiles(mr, nu, kq, a, x, ldx, wp, wstep, acc, ldacc, accumulate, 0);
}

static void gemm_xt_amx(int mr, int nu, int64_t kq, const int8_t *x, int64_t ldx,
                        const int8_t *xt, int64_t xt_ld, const uint8_t *wp, int64_t wstep,
                        int32_t *acc, int64_t ldacc, int accumulate)
{
    if (kq < 16 || wstep == 0) {
        gemm_amx(mr, nu, kq, x, ldx, wp, wstep, acc, ldacc, accumulate);
        return;
    }
    asrc a = {xt, 64, 1024, xt_ld};
    gemm_tiles(mr, nu, kq, a, x, ldx, wp, wstep, acc, ldacc, accumulate, 1);
}

/* TDPBSUD on 6 independent C tiles (its latency is several times its issue interval). The loop
 * is assembly, as the other probes (peak.h): clang unrolled the intrinsics' loop, and
 * tests/test_peak_loops.c counts the instructions of one compiled round against the claim. */
static uint64_t peak_amx(uint64_t iters)
{
    tiles_config();
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_zero(4);
    _tile_zero(5);
    _tile_zero(6);
    _tile_zero(7);
    uint64_t n = iters;
    if (n)
        __asm__ volatile("1:\n\t"
                         "tdpbsud %%tmm7, %%tmm6, %%tmm0\n\t"
                         "tdpbsud %%tmm7, %%tmm6, %%tmm1\n\t"
                         "tdpbsud %%tmm7, %%tmm6, %%tmm2\n\t"
                         "tdpbsud %%tmm7, %%tmm6, %%tmm3\n\t"
                         "tdpbsud %%tmm7, %%tmm6, %%tmm4\n\t"
                         "tdpbsud %%tmm7, %%tmm6, %%tmm5\n\t"
                         "dec %[n]\n\t"
                         "jnz 1b"
                         : [n] "+r"(n)
                         :
                         : "cc", "memory");
    alignas(64) int32_t sink[16 * 16];
    _tile_stored(0, sink, 64);
    volatile int32_t keep = sink[0];
    (void)keep;
    qmoe_amx_release();
    return iters * QMOE_PEAK_AMX_DOTS * QMOE_PEAK_AMX_OPS;
}

const qmoe_gemm_isa qmoe_isa_amx_int8 = {
    .name = "amx_int8",
    .kernel_id = QMOE_KERNEL_AMX_INT8,
    .mr = MR,
    .nu = 4,
    .mc = MR,
    /* Each call repacks its columns' weights: 2048-row calls (the planner caps them at 16 MiB
     * of x) were 6-10% faster than 512 in bench_kernel; the VNNI kernel gained nothing. */
    .row_block = 2048,
    /* Tiles pay off from 16 rows up (a C tile is 16 rows); smaller blocks (decode) take the
     * AVX-512 VNNI table, whose in-place NZ path streams the weights once. */
    .few_rows = &qmoe_isa_avx512_vnni,
    .few_rows_below = 16,
    .release = qmoe_amx_release,
    .gemm = gemm_amx,
    .gemm_xt = gemm_xt_amx,
    /* Groups of at most 64 k (ggml's 32): a product of tiles per group, folded from memory
     * (gemm_groups_amx.c). */
    .gemm_groups = qmoe_gemm_groups_amx,
    .rearrange = qmoe_rearrange_avx512,
    .fold = qmoe_fold_avx512,
    .gemm_nz = qmoe_gemm_nz_avx512,
    .expand_i4 = qmoe_expand_i4_avx512,
    .expand_b6 = qmoe_expand_b6_avx512,
    .expand_c4 = qmoe_expand_c4_avx512,
    .to_bf16 = qmoe_f32_to_bf16_avx512,
    .half_to_f32 = qmoe_half_to_f32_avx512,
    .widen_s8 = qmoe_widen_s8_avx512,
    .peak_loop = peak_amx,
};
#endif
