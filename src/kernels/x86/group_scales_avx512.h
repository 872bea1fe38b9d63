/*
 * The per-group weight scales of gemm_groups (gmm_fast.h) as 16 floats of a unit, read in place in
 * each of their prepacked kinds, for the AVX-512 and AMX groups kernels. Included only by files
 * built for AVX-512.
 */
#ifndef QMOE_KERNELS_X86_GROUP_SCALES_AVX512_H
#define QMOE_KERNELS_X86_GROUP_SCALES_AVX512_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

/* 16 scales of group g, unit u: float32 as they are; float16 / bfloat16 widened on the load
 * (vcvtph2ps / a shift: half_to_f32's values), so prepacked 16-bit scales are read in place. */
static inline __attribute__((always_inline)) __m512 qmoe_ws_load(const void *ws, int kind, int64_t at)
{
    if (kind == 0) return _mm512_loadu_ps((const float *)ws + at);
    __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)((const uint16_t *)ws + at));
    return kind == 1 ? _mm512_cvtph_ps(h)
                     : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* ... and prepacked scale blocks (ws_kind 3): base * (float)multiplier, widen_s8's values. */
static inline __attribute__((always_inline)) __m512 qmoe_ws_block_load(const void *ws, const float *base,
                                                                  int64_t at, int64_t c)
{
    __m128i q = _mm_loadu_si128((const __m128i *)(const void *)((const int8_t *)ws + at));
    return _mm512_mul_ps(_mm512_loadu_ps(base + c), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)));
}


#endif
