/*
 * The AVX2 gemm_groups micro-kernel (src/kernels/x86/gemm_groups_avx2.c): the same bits as the
 * table's gemm then fold, group by group (kernel_groups_cases.h):
 *   - the micro-kernel alone, 1-4 rows (the table's gemm, the reference, has 4), 1-4 units,
 *     1-9 groups of 1-9 steps (more than RUN = 8 steps: the int16 sums widened twice a group),
 *     int8 steps (split into nibbles), prepacked int4 steps, prepacked codes and int8 steps of
 *     bytes <= 15 (one vpmaddubsw a product), with and without xScale, in one call and split in
 *     two; float32, float16, bfloat16 and scale-block scales, zero and negative ones;
 *   - through the driver: the kernel sweep's per-group cases and groups of 32 and 16 at K = 1024
 *     (A8W8 and A8W4, 1-60 rows), the table as it is against a copy without gemm_groups.
 */
#include "kernel_groups_cases.h"

int main(void)
{
    (void)kernel_test_main; /* the shared sweep is test_kernel_avx2's */
    const qmoe_gemm_isa *isa = qmoe_gemm_isa_for(QMOE_KERNEL_AVX2);
    if (!isa || !isa->gemm_groups || !qmoe_cpu_runs_kernel(QMOE_KERNEL_AVX2))
        return qt_skip("test_kernel_avx2_groups", "no AVX2 on this CPU");
    groups_micro_sweep(isa, 2525, isa->mr, 4);
    groups_driver_sweep(QMOE_KERNEL_AVX2, isa, 999, 1, 60);
    return qt_finish("test_kernel_avx2_groups");
}
