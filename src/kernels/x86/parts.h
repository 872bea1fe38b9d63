/* Pieces of the x86 kernel tables that live in their own per-instruction-set files. */
#ifndef QMOE_KERNELS_X86_PARTS_H
#define QMOE_KERNELS_X86_PARTS_H

#include <stdint.h>

/* pack_avx2.c: the AVX2 and AVX-VNNI tables' rearrange (gmm_fast.h) */
void qmoe_rearrange_avx2(const uint8_t *const *src, const int64_t *stride, int64_t rows, int nub,
                         int int4, uint8_t *dst, int64_t wstep);

/* pack_avx512vnni.c */
int qmoe_avx512_has_vbmi(void); /* the CPU has AVX-512 VBMI (vpermt2b) */
/* Units u .. u + count - 1 continue one run of `bytes` per unit with row stride want_stride. */
int qmoe_units_run(const uint8_t *const *src, const int64_t *stride, int u, int count,
                   int64_t bytes, int64_t want_stride);
#ifdef __AVX512F__
#include <immintrin.h>
/* The cache level the AVX-512 kernels prefetch their weight stream into: L2. The loads that
 * follow bring each line on to L1; prefetcht0 ran one row per expert over DRAM 17-19 % slower on
 * Zen 4 (docs/performance.md, "Prefetching into L2"). */
#define QMOE_AVX512_WEIGHT_HINT _MM_HINT_T1
/* vpermt2b index gathering byte 16 * half + i of the four 32-byte rows of A:B into lane i. */
__m512i qmoe_avx512_strip_index(int half);
#endif
int qmoe_gemm_nz_avx512(int mr, int nu, int int4, int64_t kq, const int8_t *x, int64_t ldx,
                        const uint8_t *const *src, const int64_t *stride, int32_t *acc,
                        int64_t ldacc, int32_t *cs, int accumulate);
/* gemm_s8_avx512vnni.c: prepacked int4 steps -> the 64-byte steps gemm reads (gmm_fast.h). */
void qmoe_expand_i4_avx512(const uint8_t *src, int64_t steps, uint8_t *dst);
void qmoe_expand_c4_avx512(const uint8_t *src, int64_t steps, uint8_t *dst, const uint8_t *tbl);
void qmoe_expand_b6_avx512(const uint8_t *src, int64_t steps, uint8_t *dst);
void qmoe_rearrange_avx512(const uint8_t *const *src, const int64_t *stride, int64_t rows,
                           int nub, int int4, uint8_t *dst, int64_t wstep);

/* gemm_groups_avx512vnni.c: the table's gemm_groups (gmm_fast.h) */
void qmoe_gemm_groups_avx512(int mr, int nu, int i4, const uint8_t *tbl, int64_t ng, int64_t kq,
                             const int8_t *x,
                             int64_t ldx, const uint8_t *wp, int64_t wstep, const int32_t *xoff,
                             int64_t xoff_stride, const float *xs, const void *ws, int ws_kind,
                             int64_t ws_stride, const float *wsb, int64_t wblk, int64_t wb0,
                             float *f, int64_t ldf, int first);

/* gemm_s8_amx.c: releases this thread's tile state if the AMX kernel configured it (the end of
 * every AMX kernel call). */
void qmoe_amx_release(void);
/* gemm_s8_amx.c: loads the 64-byte tile configuration cfg on this thread unless it is loaded (the
 * thread's own earlier configuration is kept for qmoe_amx_release). */
void qmoe_amx_tiles(const uint8_t *cfg);
/* gemm_groups_amx.c: the AMX table's gemm_groups (gmm_fast.h) */
void qmoe_gemm_groups_amx(int mr, int nu, int i4, const uint8_t *tbl, int64_t ng, int64_t kq,
                          const int8_t *x, int64_t ldx, const uint8_t *wp, int64_t wstep,
                          const int32_t *xoff, int64_t xoff_stride, const float *xs, const void *ws,
                          int ws_kind, int64_t ws_stride, const float *wsb, int64_t wblk,
                          int64_t wb0, float *f, int64_t ldf, int first);

/* epilogue_avx512vnni.c */
void qmoe_fold_avx512(int64_t rows, int64_t cols, const int32_t *acc, int64_t ldacc,
                      const int32_t *xoff, int64_t xoff_stride, const float *xs, const float *ws,
                      float *f, int64_t ldf, int first);
void qmoe_swiglu_avx512(int64_t rows, int64_t nc, const float *f, int64_t ldf, int64_t gate,
                        const float *corr, const float *xs, float limit, float *s, int64_t lds);
void qmoe_quantize_row_avx512(const float *s, int64_t n2, int8_t *out, int64_t out_stride,
                              float *scale);

/* convert_avx512vnni.c: n floats -> bfloat16 by qmoe_f32_to_bf16's rule (core/halfconv.h) */
void qmoe_f32_to_bf16_avx512(uint16_t *d, const float *v, int64_t n);
/* ... and n float16 (bf16 0) / bfloat16 values -> float32 (gmm_fast.h half_to_f32) */
void qmoe_half_to_f32_avx512(float *d, const uint16_t *s, int bf16, int64_t n);
/* ... and prepacked scale blocks -> float32 (gmm_fast.h widen_s8) */
void qmoe_widen_s8_avx512(float *d, const int8_t *q, const float *base, int64_t G, int64_t block);
/* convert_avx2.c: the same with 256-bit F16C (also used by the AVX-VNNI table) */
void qmoe_half_to_f32_avx2(float *d, const uint16_t *s, int bf16, int64_t n);

/* gemm_s8_avx2.c: gmm_fast.h's expand_i4 / expand_c4 (also used by the AVX-VNNI table) */
void qmoe_expand_i4_avx2(const uint8_t *src, int64_t steps, uint8_t *dst);
void qmoe_expand_c4_avx2(const uint8_t *src, int64_t steps, uint8_t *dst, const uint8_t *tbl);
void qmoe_expand_b6_avx2(const uint8_t *src, int64_t steps, uint8_t *dst);

/* gemm_groups_avx2.c: gmm_fast.h's gemm_groups */
void qmoe_gemm_groups_avx2(int mr, int nu, int i4, const uint8_t *tbl, int64_t ng, int64_t kq,
                           const int8_t *x, int64_t ldx, const uint8_t *wp, int64_t wstep,
                           const int32_t *xoff, int64_t xoff_stride, const float *xs,
                           const void *ws, int ws_kind, int64_t ws_stride, const float *wsb,
                           int64_t wblk, int64_t wb0, float *f, int64_t ldf, int first);

/* epilogue_avx2.c (also used by the AVX-VNNI table) */
void qmoe_fold_avx2(int64_t rows, int64_t cols, const int32_t *acc, int64_t ldacc,
                    const int32_t *xoff, int64_t xoff_stride, const float *xs, const float *ws,
                    float *f, int64_t ldf, int first);
void qmoe_swiglu_avx2(int64_t rows, int64_t nc, const float *f, int64_t ldf, int64_t gate,
                      const float *corr, const float *xs, float limit, float *s, int64_t lds);
void qmoe_quantize_row_avx2(const float *s, int64_t n2, int8_t *out, int64_t out_stride,
                            float *scale);

#endif
