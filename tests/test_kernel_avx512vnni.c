/* The avx512vnni kernel against the reference kernel and exact accumulators (test_kernel_common.h),
 * and its fused gemm + fold (gemm_fold) against gemm then fold: the same bits. */
#include "test_kernel_common.h"

/* Every expert's rows as one block through the table as it is and through a copy without
 * gemm_fold (the driver then stores the int32 tile and folds it in a second pass). */
static void check_fold_fused(const qmoe_gemm_isa *isa, int cases)
{
    qmoe_gemm_isa plain = *isa;
    plain.gemm_fold = NULL;
    const qmoe_kernel_entry *k = qmoe_kernel_lookup(QMOE_KERNEL_AVX512_VNNI);
    qmoe_kernel_entry as_is = *k, unfused = *k;
    as_is.gemm = isa;
    unfused.gemm = &plain;
    qt_rng r = {4242};
    int fused = 0;
    for (int i = 0; i < cases; i++) {
        kcase c;
        kcase_make(&c, &r, i);
        qmoe_gmm_params *p = &c.p;
        int64_t N2 = p->N2;
        for (int64_t e = 0; e < p->E_groups; e++) {
            int64_t m0 = kc_start(&c, e), m1 = c.ends[e], rows = m1 - m0;
            if (rows < 1) continue;
            fused += rows > isa->mr && p->group_k > 0;
            uint64_t bytes = qmoe_swiglu_quant_scratch_bytes(&as_is, p, rows, N2);
            void *sp = aligned_alloc(64, (bytes + 63) & ~(uint64_t)63);
            float *a = calloc((size_t)(rows * N2 + 1), sizeof(float));
            float *b = calloc((size_t)(rows * N2 + 1), sizeof(float));
            qmoe_thread_ctx ctx = {.thread = 0, .nthreads = 1, .scratch = sp,
                                   .scratch_bytes = bytes};
            qmoe_swiglu_quant_block(&as_is, p, &ctx, e, m0, m1, 0, N2, a, N2);
            qmoe_swiglu_quant_block(&unfused, p, &ctx, e, m0, m1, 0, N2, b, N2);
            CHECK_MSG(!memcmp(a, b, sizeof(float) * (size_t)(rows * N2)),
                      "gemm_fold differs from gemm + fold: mode %d G %lld K %lld N %lld rows %lld",
                      p->mode, (long long)p->G, (long long)p->K, (long long)p->N, (long long)rows);
            free(sp);
            free(a);
            free(b);
        }
        kcase_free(&c);
    }
    CHECK(fused > 0); /* the sweep took the fused path */
}

int main(void)
{
    const qmoe_gemm_isa *isa = qmoe_gemm_isa_for(QMOE_KERNEL_AVX512_VNNI);
    if (isa && isa->gemm_fold && qmoe_cpu_runs_kernel(QMOE_KERNEL_AVX512_VNNI))
        check_fold_fused(isa, 60);
    return kernel_test_main(QMOE_KERNEL_AVX512_VNNI, "test_kernel_avx512vnni", 120);
}
