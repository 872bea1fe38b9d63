/*
 * The portable kernel's peak probe (peak.h): 16 scalar multiply-adds per round on 16
 * accumulators, written out (an inner loop was left rolled in sanitizer builds, 1 multiply per
 * compiled round). The empty asm statements make the factors opaque at every multiply and keep
 * each accumulator in a scalar register: without them the compiler replaced the whole loop by
 * one multiply by `iters` (the products were loop-invariant), derived 15 of the 16 products from
 * the first by additions, or (gcc for aarch64) put 4 of them in one vector mla.
 */
#include "kernels/peak.h"

#define QMOE_PEAK_MAC(acc)                                                                       \
    do {                                                                                         \
        __asm__ volatile("" : "+r"(a));                                                          \
        acc += a * b;                                                                            \
        __asm__ volatile("" : "+r"(acc));                                                        \
    } while (0)

uint64_t qmoe_peak_portable(uint64_t iters)
{
    /* unsigned: the sums wrap (defined) over the billions of rounds the benchmark runs */
    uint32_t c0 = 0, c1 = 0, c2 = 0, c3 = 0, c4 = 0, c5 = 0, c6 = 0, c7 = 0, c8 = 0, c9 = 0,
             c10 = 0, c11 = 0, c12 = 0, c13 = 0, c14 = 0, c15 = 0;
    uint32_t a = 3, b = 4;
    for (uint64_t i = 0; i < iters; i++) {
        __asm__ volatile("" : "+r"(b));
        QMOE_PEAK_MAC(c0);
        QMOE_PEAK_MAC(c1);
        QMOE_PEAK_MAC(c2);
        QMOE_PEAK_MAC(c3);
        QMOE_PEAK_MAC(c4);
        QMOE_PEAK_MAC(c5);
        QMOE_PEAK_MAC(c6);
        QMOE_PEAK_MAC(c7);
        QMOE_PEAK_MAC(c8);
        QMOE_PEAK_MAC(c9);
        QMOE_PEAK_MAC(c10);
        QMOE_PEAK_MAC(c11);
        QMOE_PEAK_MAC(c12);
        QMOE_PEAK_MAC(c13);
        QMOE_PEAK_MAC(c14);
        QMOE_PEAK_MAC(c15);
    }
    volatile uint32_t sink = c0 + c1 + c2 + c3 + c4 + c5 + c6 + c7 + c8 + c9 + c10 + c11 + c12 +
                             c13 + c14 + c15;
    (void)sink;
    return iters * QMOE_PEAK_PORTABLE_MACS * 2;
}
