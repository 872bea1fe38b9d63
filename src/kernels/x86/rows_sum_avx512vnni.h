/* The AVX-512 weighted row sum (kernels/rows_sum.h's contract): 64 columns stay in registers
 * across the rows. */
#ifndef QMOE_KERNELS_ROWS_SUM_AVX512VNNI_H
#define QMOE_KERNELS_ROWS_SUM_AVX512VNNI_H

#include <stdint.h>

void qmoe_rows_sum_avx512(float *acc, int64_t H, const char *const *rows, const float *w, int n,
                          int bf16);

#endif
