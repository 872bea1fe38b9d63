/*
 * The AVX-512 VNNI peak probe (peak.h): 16 vpdpbusd zmm per round on 16 accumulators (zmm0-15),
 * in assembly so the compiler can neither merge nor drop them. Zen 4/5 and Ice Lake-SP or later
 * issue up to 2 per cycle at a latency of 4-5: 16 chains cover both.
 */
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

#include "kernels/peak.h"

#define QMOE_PEAK_ZERO(r) "vpxord %%zmm" #r ", %%zmm" #r ", %%zmm" #r "\n\t"
#define QMOE_PEAK_STEP(r) "vpdpbusd %[b], %[w], %%zmm" #r "\n\t"
#define QMOE_PEAK_16(m)                                                                          \
    m(0) m(1) m(2) m(3) m(4) m(5) m(6) m(7) m(8) m(9) m(10) m(11) m(12) m(13) m(14) m(15)

uint64_t qmoe_peak_avx512vnni(uint64_t iters)
{
    if (iters == 0) return 0;
    const __m512i w = _mm512_set1_epi8(1), b = _mm512_set1_epi8(2);
    uint64_t n = iters;
    __asm__ volatile(QMOE_PEAK_16(QMOE_PEAK_ZERO) "1:\n\t" QMOE_PEAK_16(QMOE_PEAK_STEP)
                     "dec %[n]\n\t"
                     "jnz 1b"
                     : [n] "+r"(n)
                     : [w] "v"(w), [b] "v"(b)
                     : "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",
                       "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
    return iters * QMOE_PEAK_AVX512_VNNI_DOTS * QMOE_PEAK_AVX512_VNNI_OPS;
}
#endif
