/*
 * The portable kernel's peak probe (peak.h): 16 scalar multiply-adds per round on 16
 * accumulators. The empty asm statements make the factors opaque at every multiply: without
 * them the compiler replaced the whole loop by one multiply by `iters` (the products were
 * loop-invariant), with one barrier per round it still derived 15 of the 16 products from
 * the first by additions, and gcc for aarch64 put 4 of them in one vector mla.
 */
#include "kernels/peak.h"

uint64_t qmoe_peak_portable(uint64_t iters)
{
    int32_t acc[QMOE_PEAK_PORTABLE_MACS] = {0};
    int32_t a = 3, b = 4;
    for (uint64_t i = 0; i < iters; i++) {
        __asm__ volatile("" : "+r"(b));
        for (int j = 0; j < QMOE_PEAK_PORTABLE_MACS; j++) {
            __asm__ volatile("" : "+r"(a));
            acc[j] += a * b;
            __asm__ volatile("" : "+r"(acc[j])); /* in a scalar register: no vector lanes */
        }
    }
    int32_t sum = 0;
    for (int j = 0; j < QMOE_PEAK_PORTABLE_MACS; j++) sum += acc[j];
    volatile int32_t sink = sum;
    (void)sink;
    return iters * QMOE_PEAK_PORTABLE_MACS * 2;
}
