/*
 * The AVX2 peak probe (peak.h): the int8 step of the AVX2 kernel's int4 loop, vpmaddubsw (32
 * multiply-adds into int16 pairs) + vpaddw into int16 sums, 6 per round on 6 accumulators
 * (ymm0-5, with ymm6-11 for the products), in assembly so the compiler can neither merge nor
 * hoist them: in C, the products of the loop-invariant operands were computed once per round,
 * not six times. Until 2026-12-02 each step also widened with vpmaddwd + vpaddd, as the kernel
 * did; that shares vpmaddubsw's ports and made the probe about 1.4x slower than the instruction
 * (the Zen 3 VM), which the int4 loop, widening once per 8 steps, now beats.
 */
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

#include "kernels/peak.h"

#define QMOE_PEAK_ZERO(a, t) "vpxor %%ymm" #a ", %%ymm" #a ", %%ymm" #a "\n\t"
#define QMOE_PEAK_STEP(a, t)                                                                     \
    "vpmaddubsw %[b], %[w], %%ymm" #t "\n\t"                                                     \
    "vpaddw %%ymm" #t ", %%ymm" #a ", %%ymm" #a "\n\t"
#define QMOE_PEAK_6(m) m(0, 6) m(1, 7) m(2, 8) m(3, 9) m(4, 10) m(5, 11)

uint64_t qmoe_peak_avx2(uint64_t iters)
{
    if (iters == 0) return 0;
    const __m256i w = _mm256_set1_epi8(1), b = _mm256_set1_epi8(2);
    uint64_t n = iters;
    __asm__ volatile(QMOE_PEAK_6(QMOE_PEAK_ZERO) "1:\n\t" QMOE_PEAK_6(QMOE_PEAK_STEP)
                     "dec %[n]\n\t"
                     "jnz 1b"
                     : [n] "+r"(n)
                     : [w] "x"(w), [b] "x"(b)
                     : "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",
                       "xmm8", "xmm9", "xmm10", "xmm11");
    return iters * QMOE_PEAK_AVX2_DOTS * QMOE_PEAK_AVX2_OPS;
}
#endif
