/*
 * The AVX-512 VNNI gemm_groups micro-kernel (src/kernels/x86/gemm_groups_avx512vnni.c): the same
 * bits as the table's gemm then fold, group by group, which is how every other kernel computes
 * per-group scales:
 *   - the micro-kernel alone, every tile shape (1-6 rows, 1-4 units), 1-9 groups of 1-9 steps,
 *     int8 steps, prepacked int4 steps (against expand_i4 + gemm), prepacked codes (against
 *     their table's bytes + gemm), int8 steps of bytes <= 15 and prepacked 6-bit steps (against
 *     the bytes their layout defines + gemm), with and without xScale,
 *     in one call and split into two (first = 0 continues the float tile); zero and negative
 *     scales, so signed zeros and their sums are compared too; scales given as float32 and as
 *     float16 / bfloat16 bits (read in place, widened on the load) and as prepacked scale
 *     blocks (int8 multipliers of per-block bases, a block of 1-9 groups) against their values;
 *   - through the driver, the kernel sweep's per-group cases and groups of 32 and 16 at K = 1024
 *     (A8W8 and A8W4): the table as it is against a copy without gemm_groups.
 */
#include "kernel_groups_cases.h"

int main(void)
{
    (void)kernel_test_main; /* the shared sweep is test_kernel_avx512vnni's */
    const qmoe_gemm_isa *isa = qmoe_gemm_isa_for(QMOE_KERNEL_AVX512_VNNI);
    if (!isa || !isa->gemm_groups || !qmoe_cpu_runs_kernel(QMOE_KERNEL_AVX512_VNNI))
        return qt_skip("test_kernel_avx512vnni_groups", "no AVX-512 VNNI on this CPU");
    groups_micro_sweep(isa, 2323, 6, 4);
    groups_driver_sweep(QMOE_KERNEL_AVX512_VNNI, isa, 777, 1, 60);
    return qt_finish("test_kernel_avx512vnni_groups");
}
