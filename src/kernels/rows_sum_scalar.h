/* The weighted row sum's element loop (kernels/rows_sum.h's arithmetic), columns [h0, H): shared
 * by the portable sum and the vector sums' tails, in a header of its own so neither file calls
 * the other. */
#ifndef QMOE_KERNELS_ROWS_SUM_SCALAR_H
#define QMOE_KERNELS_ROWS_SUM_SCALAR_H

#include <stdint.h>
#include <string.h>

static inline void qmoe_rows_sum_columns(float *acc, int64_t h0, int64_t H, const char *const *rows,
                                         const float *w, int n, int bf16)
{
    for (int64_t h = h0; h < H; h++) {
        float a = acc[h];
        for (int j = 0; j < n; j++) {
            float r;
            if (bf16) {
                uint32_t bits = (uint32_t)((const uint16_t *)(const void *)rows[j])[h] << 16;
                memcpy(&r, &bits, sizeof r);
            } else {
                r = ((const float *)(const void *)rows[j])[h];
            }
            a += w[j] * r;
        }
        acc[h] = a;
    }
}

#endif
