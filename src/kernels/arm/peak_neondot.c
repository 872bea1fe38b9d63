/*
 * The ARMv8.2 dot-product peak probe (peak.h): 16 sdot (4s, 16 multiply-adds each) per round on
 * 16 accumulators (v16-v31, caller-saved), in assembly so the compiler can neither merge nor drop
 * them. Cores with four 128-bit pipes and a latency of 3-4 keep 12-16 in flight.
 */
#if defined(__aarch64__)
#include <arm_neon.h>

#include "kernels/peak.h"

#define QMOE_PEAK_ZERO(r) "movi v" #r ".16b, #0\n\t"
#define QMOE_PEAK_STEP(r) "sdot v" #r ".4s, %[w].16b, %[b].16b\n\t"
#define QMOE_PEAK_16(m)                                                                          \
    m(16) m(17) m(18) m(19) m(20) m(21) m(22) m(23) m(24) m(25) m(26) m(27) m(28) m(29) m(30) m(31)

uint64_t qmoe_peak_neondot(uint64_t iters)
{
    if (iters == 0) return 0;
    const int8x16_t w = vdupq_n_s8(1), b = vdupq_n_s8(2);
    uint64_t n = iters;
    __asm__ volatile(QMOE_PEAK_16(QMOE_PEAK_ZERO) "1:\n\t" QMOE_PEAK_16(QMOE_PEAK_STEP)
                     "subs %[n], %[n], #1\n\t"
                     "b.ne 1b"
                     : [n] "+r"(n)
                     : [w] "w"(w), [b] "w"(b)
                     : "cc", "v16", "v17", "v18", "v19", "v20", "v21", "v22", "v23", "v24", "v25",
                       "v26", "v27", "v28", "v29", "v30", "v31");
    return iters * QMOE_PEAK_NEON_DOT_DOTS * QMOE_PEAK_NEON_DOT_OPS;
}
#endif
