/* Pieces of the aarch64 kernel tables that live in their own per-instruction-set files. */
#ifndef QMOE_KERNELS_ARM_PARTS_H
#define QMOE_KERNELS_ARM_PARTS_H

#include <stdint.h>

#include "kernels/gmm_fast.h"

#if defined(__aarch64__)
/* pack_neon.c (base NEON; both tables): the rearrange of gmm_fast.h */
void qmoe_rearrange_neon(const uint8_t *const *src, const int64_t *stride, int64_t rows, int nub,
                         int int4, uint8_t *dst, int64_t wstep);

/* expand_neon.c (base NEON; both tables): gmm_fast.h's expand_i4 and expand_c4 */
void qmoe_expand_i4_neon(const uint8_t *src, int64_t steps, uint8_t *dst);
void qmoe_expand_c4_neon(const uint8_t *src, int64_t steps, uint8_t *dst, const uint8_t *tbl);

/* convert_neon.c (base NEON; both tables): gmm_fast.h's half_to_f32 */
void qmoe_half_to_f32_neon(float *d, const uint16_t *s, int bf16, int64_t n);

/* epilogue_neon.c (base NEON; both tables) */
void qmoe_fold_neon(int64_t rows, int64_t cols, const int32_t *acc, int64_t ldacc,
                    const int32_t *xoff, int64_t xoff_stride, const float *xs, const float *ws,
                    float *f, int64_t ldf, int first);
void qmoe_swiglu_neon(int64_t rows, int64_t nc, const float *f, int64_t ldf, int64_t gate,
                      const float *corr, const float *xs, float limit, float *s, int64_t lds);
void qmoe_quantize_row_neon(const float *s, int64_t n2, int8_t *out, int64_t out_stride,
                            float *scale);
#endif

#endif
