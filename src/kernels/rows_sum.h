/*
 * The weighted row sum of finalize routing: acc[h] += w[j] * rows[j][h] for j = 0..n-1 in
 * order, rows float32 or bfloat16 (widened exactly). Every implementation does each element's
 * multiplies and adds in that order without fused multiply-adds, so all give the same bits; the
 * operator picks one at planning (qmoe_rows_sum_pick) and never looks at the CPU again.
 */
#ifndef QMOE_KERNELS_ROWS_SUM_H
#define QMOE_KERNELS_ROWS_SUM_H

#include <stdint.h>

typedef void (*qmoe_rows_sum_fn)(float *acc, int64_t H, const char *const *rows, const float *w,
                                 int n, int bf16);
/* n floats -> bfloat16, rounded as core/halfconv.h's qmoe_f32_to_bf16. */
typedef void (*qmoe_bf16_store_fn)(uint16_t *d, const float *v, int64_t n);

void qmoe_rows_sum_portable(float *acc, int64_t H, const char *const *rows, const float *w, int n,
                            int bf16);
void qmoe_bf16_store_portable(uint16_t *d, const float *v, int64_t n);

/* The fastest pair this CPU runs. */
void qmoe_rows_sum_pick(qmoe_rows_sum_fn *sum, qmoe_bf16_store_fn *store);

#endif
