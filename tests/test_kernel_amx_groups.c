/*
 * The AMX gemm_groups micro-kernel (src/kernels/x86/gemm_groups_amx.c): the same bits as the
 * table's gemm then fold, group by group (kernel_groups_cases.h):
 *   - the micro-kernel alone: 1-40 rows (tiles for each 16, the AVX-512 kernel for the rest), 1-4
 *     units, 1-9 groups of 1-9 steps (K padding of a group included), int8 steps, int8 steps of
 *     bytes <= 15 (and the int4 steps and codes it hands to the AVX-512 kernel), with and
 *     without xScale, in one call and
 *     split into two; float32, float16, bfloat16 and scale-block scales; zero and negative
 *     scales;
 *   - through the driver: the kernel sweep's per-group cases and groups of 32 and 16 (ggml's q8_0 /
 *     q4_0 / mxfp4 and q6_K) at 16 to 90 rows, the table as it is against a copy without
 *     gemm_groups;
 *   - the tile configuration: a caller's own is put back after a groups call.
 */
#include "kernel_groups_cases.h"

static void check_micro(const qmoe_gemm_isa *isa)
{
    static const int mrs[] = {1, 5, 15, 16, 17, 31, 32, 33, 40};
    qt_rng r = {2424};
    long bad = 0, cases = 0;
    for (size_t m = 0; m < sizeof mrs / sizeof mrs[0]; m++)
        for (int nu = 1; nu <= 4; nu++)
            for (int i4 = 0; i4 < 4; i4++)
                for (int use_xs = 0; use_xs < 2; use_xs++)
                    for (int kind = 0; kind < 4; kind++)
                        for (int t = 0; t < (i4 ? 1 : 3); t++) {
                            int mr = mrs[m];
                            int64_t ng = qt_range(&r, 1, MAXG), kq = qt_range(&r, 1, MAXQ);
                            int ok = micro_case(isa, &r, mr, nu, i4, use_xs, kind, ng, kq);
                            isa->release();
                            CHECK_MSG(ok, "gemm_groups != gemm + fold: mr %d nu %d i4 %d xs %d "
                                          "scales %d groups %lld steps %lld", mr, nu, i4, use_xs,
                                      kind, (long long)ng, (long long)kq);
                            bad += !ok;
                            cases++;
                        }
    CHECK(cases == 9 * 4 * (3 + 1 + 1 + 1) * 2 * 4 && bad == 0);
}

#if defined(__x86_64__)
#include <immintrin.h>
/* A caller's tile configuration (as ggml's CPU backend keeps one per thread) is put back. */
__attribute__((target("amx-tile"))) static void check_caller_config(const qmoe_gemm_isa *isa)
{
    qt_rng r = {99};
    static uint8_t mine[64] __attribute__((aligned(64))), after[64] __attribute__((aligned(64)));
    memset(mine, 0, sizeof mine);
    mine[0] = 1;
    for (int t = 0; t < 8; t++) {
        mine[16 + 2 * t] = 64;
        mine[48 + t] = (uint8_t)(t + 1);
    }
    _tile_loadconfig(mine);
    CHECK(micro_case(isa, &r, 32, 4, 0, 1, 0, 4, 8));
    isa->release();
    _tile_storeconfig(after);
    CHECK_MSG(memcmp(mine, after, sizeof mine) == 0, "the caller's tile configuration was not put back");
    _tile_release();
}
#endif

int main(void)
{
    (void)kernel_test_main; /* the shared sweep is test_kernel_amx's */
    const qmoe_gemm_isa *isa = qmoe_gemm_isa_for(QMOE_KERNEL_AMX_INT8);
    if (!isa || !isa->gemm_groups || !qmoe_cpu_runs_kernel(QMOE_KERNEL_AMX_INT8))
        return qt_skip("test_kernel_amx_groups", "no AMX-INT8 on this CPU");
    check_micro(isa);
#if defined(__x86_64__)
    check_caller_config(isa);
#endif
    groups_driver_sweep(QMOE_KERNEL_AMX_INT8, isa, 888, 16, 90);
    return qt_finish("test_kernel_amx_groups");
}
