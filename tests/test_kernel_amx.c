/* The amx_int8 kernel against the reference kernel and exact accumulators (test_kernel_common.h),
 * and its micro-kernels alone (x row-major, and x also in tile order) against plain sums over
 * every tile shape they split into: 16- and 32-row blocks, one or two units, a K tail, rows past
 * the tiles, accumulate on and off. */
#include "test_kernel_common.h"

enum { MRMAX = 70, KQMAX = 48, LDACC = 80 };

/* want[i][c] (= or +=) sum_k x[i][k] * wp[k / 4][c / 16][4 (c % 16) + k % 4] (gmm_fast.h). */
static void plain_gemm(int mr, int nu, int64_t kq, const int8_t *x, int64_t ldx, const uint8_t *wp,
                       int64_t wstep, int32_t *want, int accumulate)
{
    for (int i = 0; i < mr; i++)
        for (int c = 0; c < 16 * nu; c++) {
            int32_t s = 0;
            for (int64_t k = 0; k < 4 * kq; k++)
                s += x[i * ldx + k] *
                     wp[(k / 4) * wstep + (c / 16) * QMOE_PK_STEP + 4 * (c % 16) + k % 4];
            want[i * LDACC + c] = accumulate ? want[i * LDACC + c] + s : s;
        }
}

/* The mr rows of x in tile order (gmm_fast.h, gemm_xt), the last group padded with zero rows;
 * returns the group stride. */
static int64_t tile_order(int mr, int64_t kq, const int8_t *x, int64_t ldx, int8_t *xt)
{
    int64_t kb = 4 * kq; /* bytes of a row */
    for (int i = 0; i < (mr + 15) / 16 * 16; i++)
        for (int64_t k = 0; k < kb; k++)
            xt[(i / 16) * 16 * kb + (k / 64) * 1024 + (i % 16) * 64 + k % 64] =
                i < mr ? x[i * ldx + k] : 0;
    return 16 * kb;
}

static void check_gemm(const qmoe_gemm_isa *isa)
{
    qt_rng r = {4242};
    static int8_t x[MRMAX * (4 * KQMAX + 3)], xt[(MRMAX + 15) / 16 * 16 * 4 * KQMAX];
    static uint8_t wp[KQMAX * QMOE_PK_BLOCK * QMOE_PK_STEP];
    static int32_t init[MRMAX * LDACC], got[MRMAX * LDACC], want[MRMAX * LDACC];
    static const int mrs[] = {1, 15, 16, 17, 31, 32, 33, 48, 50, 64, 70};
    static const int kqs[] = {1, 15, 16, 17, 32, 40, 48};
    for (size_t a = 0; a < sizeof mrs / sizeof mrs[0]; a++)
        for (size_t b = 0; b < sizeof kqs / sizeof kqs[0]; b++)
            for (int nu = 1; nu <= QMOE_PK_BLOCK; nu++)
                for (int accumulate = 0; accumulate < 2; accumulate++) {
                    int mr = mrs[a];
                    int64_t kq = kqs[b], ldx = 4 * kq + 3, wstep = nu * QMOE_PK_STEP;
                    for (int64_t i = 0; i < mr * ldx; i++) x[i] = (int8_t)qt_range(&r, -128, 127);
                    for (int64_t i = 0; i < kq * wstep; i++) wp[i] = (uint8_t)qt_range(&r, 0, 255);
                    for (int64_t i = 0; i < mr * LDACC; i++)
                        init[i] = want[i] = (int32_t)qt_range(&r, -100000, 100000);
                    plain_gemm(mr, nu, kq, x, ldx, wp, wstep, want, accumulate);
                    /* gemm_xt takes whole 64-k tiles only */
                    for (int tiled = 0; tiled < 1 + (kq % 16 == 0); tiled++) {
                        memcpy(got, init, sizeof got);
                        if (tiled) {
                            int64_t xt_ld = tile_order(mr, kq, x, ldx, xt);
                            isa->gemm_xt(mr, nu, kq, x, ldx, xt, xt_ld, wp, wstep, got, LDACC,
                                         accumulate);
                        } else {
                            isa->gemm(mr, nu, kq, x, ldx, wp, wstep, got, LDACC, accumulate);
                        }
                        int64_t bad = 0;
                        for (int64_t i = 0; i < mr * LDACC; i++) bad += got[i] != want[i];
                        CHECK_MSG(bad == 0, "gemm%s mr %d nu %d kq %lld accumulate %d: %lld differ",
                                  tiled ? "_xt" : "", mr, nu, (long long)kq, accumulate,
                                  (long long)bad);
                    }
                }
}

#if defined(__x86_64__)
#include <immintrin.h>
#include <stdalign.h>

/* One tiled call (32 rows x 2 units x 64 k) and the kernel's end-of-call release. */
static void one_tiled_call(const qmoe_gemm_isa *isa)
{
    static int8_t x[32 * 64], xt[32 * 64];
    static uint8_t wp[16 * 2 * QMOE_PK_STEP];
    static int32_t acc[32 * LDACC];
    memset(x, 1, sizeof x);
    memset(wp, 1, sizeof wp);
    int64_t xt_ld = tile_order(32, 16, x, 64, xt);
    isa->gemm_xt(32, 2, 16, x, 64, xt, xt_ld, wp, 2 * QMOE_PK_STEP, acc, LDACC, 0);
    isa->release();
    CHECK_MSG(acc[0] == 64, "a tiled call: %d, not 64", (int)acc[0]);
}

/* A thread's own tile configuration survives qmoe's kernel calls: ggml's CPU backend configures
 * its tiles once per thread (8- and 16-row tiles of 32 and 64 bytes) and never again, and qmoe
 * runs on ggml's threads; releasing or keeping qmoe's layout made its next tile instruction fault
 * (SIGILL) or read the wrong shape. A thread without one ends with none. */
__attribute__((target("amx-tile"))) static void check_caller_config(const qmoe_gemm_isa *isa)
{
    alignas(64) uint8_t mine[64], after[64], none[64];
    isa->release(); /* check_gemm's micro-kernel calls leave qmoe's layout loaded */
    memset(mine, 0, sizeof mine);
    memset(none, 0, sizeof none);
    mine[0] = 1;
    for (int t = 0; t < 8; t++) {
        uint16_t colsb = t == 2 || t == 3 ? 32 : 64;
        memcpy(mine + 16 + 2 * t, &colsb, 2);
        mine[48 + t] = t < 2 ? 8 : 16;
    }
    _tile_loadconfig(mine);
    one_tiled_call(isa);
    _tile_storeconfig(after);
    CHECK_MSG(memcmp(mine, after, sizeof mine) == 0, "the caller's tile configuration was not put back");
    _tile_release();
    one_tiled_call(isa);
    _tile_storeconfig(after);
    CHECK_MSG(memcmp(none, after, sizeof none) == 0, "tiles left configured after a call");
}
#endif

int main(void)
{
    if (qmoe_cpu_runs_kernel(QMOE_KERNEL_AMX_INT8)) {
        check_gemm(qmoe_gemm_isa_for(QMOE_KERNEL_AMX_INT8));
#if defined(__x86_64__)
        check_caller_config(qmoe_gemm_isa_for(QMOE_KERNEL_AMX_INT8));
#endif
    }
    return kernel_test_main(QMOE_KERNEL_AMX_INT8, "test_kernel_amx", 120);
}
