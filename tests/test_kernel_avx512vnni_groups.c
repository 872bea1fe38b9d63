/*
 * The AVX-512 VNNI gemm_groups micro-kernel (src/kernels/x86/gemm_groups_avx512vnni.c): the same
 * bits as the table's gemm then fold, group by group, which is how every other kernel computes
 * per-group scales:
 *   - the micro-kernel alone, every tile shape (1-6 rows, 1-4 units), 1-9 groups of 1-9 steps,
 *     int8 steps, prepacked int4 steps (against expand_i4 + gemm) and prepacked codes (against
 *     their table's bytes + gemm), with and without xScale,
 *     in one call and split into two (first = 0 continues the float tile); zero and negative
 *     scales, so signed zeros and their sums are compared too; scales given as float32 and as
 *     float16 / bfloat16 bits (read in place, widened on the load) and as prepacked scale
 *     blocks (int8 multipliers of per-block bases, a block of 1-9 groups) against their values;
 *   - through the driver, the kernel sweep's per-group cases and groups of 32 at K = 1024
 *     (A8W8 and A8W4): the table as it is against a copy without gemm_groups.
 */
#include "kernel_groups_cases.h"

static void check_micro(const qmoe_gemm_isa *isa)
{
    qt_rng r = {2323};
    long bad = 0, cases = 0;
    for (int mr = 1; mr <= 6; mr++)
        for (int nu = 1; nu <= 4; nu++)
            for (int i4 = 0; i4 < 3; i4++)
                for (int use_xs = 0; use_xs < 2; use_xs++)
                    for (int kind = 0; kind < 4; kind++)
                        for (int t = 0; t < 4; t++) {
                            int64_t ng = qt_range(&r, 1, MAXG), kq = qt_range(&r, 1, MAXQ);
                            int ok = micro_case(isa, &r, mr, nu, i4, use_xs, kind, ng, kq);
                            CHECK_MSG(ok, "gemm_groups != gemm + fold: mr %d nu %d i4 %d xs %d "
                                          "scales %d groups %lld steps %lld", mr, nu, i4, use_xs,
                                      kind, (long long)ng, (long long)kq);
                            bad += !ok;
                            cases++;
                        }
    CHECK(cases == 6 * 4 * 3 * 2 * 4 * 4 && bad == 0);
}

int main(void)
{
    (void)kernel_test_main; /* the shared sweep is test_kernel_avx512vnni's */
    const qmoe_gemm_isa *isa = qmoe_gemm_isa_for(QMOE_KERNEL_AVX512_VNNI);
    if (!isa || !isa->gemm_groups || !qmoe_cpu_runs_kernel(QMOE_KERNEL_AVX512_VNNI))
        return qt_skip("test_kernel_avx512vnni_groups", "no AVX-512 VNNI on this CPU");
    check_micro(isa);
    qt_rng r = {777};
    int grouped = 0;
    for (int i = 0; i < 240; i++) {
        kcase c;
        kcase_make(&c, &r, i);
        if (c.p.G > 1) grouped += driver_case(QMOE_KERNEL_AVX512_VNNI, isa, &c);
        kcase_free(&c);
    }
    CHECK(grouped > 20); /* the sweep's per-group cases ran */
    /* ggml's groups of 32 at K = 1024, 1 to 60 rows (every micro-tile shape, blocks of one) */
    for (int i = 0; i < 8; i++) {
        kcase c;
        kcase_make_groups(&c, &r, i % 2, 1024, 32, qt_range(&r, 1, 60));
        CHECK(driver_case(QMOE_KERNEL_AVX512_VNNI, isa, &c) >= 1);
        kcase_free(&c);
    }
    return qt_finish("test_kernel_avx512vnni_groups");
}
