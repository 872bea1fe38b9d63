/*
 * The AVX-VNNI peak probe (peak.h): 12 VEX vpdpbusd ymm per round on 12 accumulators (ymm0-11),
 * in assembly so the compiler can neither merge nor drop them; the operands take ymm12-15.
 */
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

#include "kernels/peak.h"

#define QMOE_PEAK_ZERO(r) "vpxor %%ymm" #r ", %%ymm" #r ", %%ymm" #r "\n\t"
/* {vex}: the assembler would otherwise pick the EVEX (AVX512-VL) encoding */
#define QMOE_PEAK_STEP(r) "%{vex%} vpdpbusd %[b], %[w], %%ymm" #r "\n\t"
#define QMOE_PEAK_12(m) m(0) m(1) m(2) m(3) m(4) m(5) m(6) m(7) m(8) m(9) m(10) m(11)

uint64_t qmoe_peak_avxvnni(uint64_t iters)
{
    if (iters == 0) return 0;
    const __m256i w = _mm256_set1_epi8(1), b = _mm256_set1_epi8(2);
    uint64_t n = iters;
    __asm__ volatile(QMOE_PEAK_12(QMOE_PEAK_ZERO) "1:\n\t" QMOE_PEAK_12(QMOE_PEAK_STEP)
                     "dec %[n]\n\t"
                     "jnz 1b"
                     : [n] "+r"(n)
                     : [w] "x"(w), [b] "x"(b)
                     : "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",
                       "xmm8", "xmm9", "xmm10", "xmm11");
    return iters * QMOE_PEAK_AVX_VNNI_DOTS * QMOE_PEAK_AVX_VNNI_OPS;
}
#endif
