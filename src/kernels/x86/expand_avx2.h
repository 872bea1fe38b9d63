/*
 * Prepacked 6-bit steps (core/prepack.h: 32 bytes of nibbles as int4 keeps them, then 16 bytes
 * whose bit pair j of byte i is the high two bits of step byte 16 j + i) -> the step's 64 values
 * 0..63 in two registers: gemm_groups_avx2.c multiplies them in place, qmoe_expand_b6_avx2 widens
 * a panel (each byte the value + 96). Included only by files built for AVX2.
 */
#ifndef QMOE_KERNELS_X86_EXPAND_AVX2_H
#define QMOE_KERNELS_X86_EXPAND_AVX2_H

#include <immintrin.h>
#include <stdint.h>

/* Both halves of a 6-bit step as the values themselves, 0..63 (the step's bytes less 96): the
 * nibbles, or'ed with bit pair j of byte 32 + i moved to bits 4-5 of step byte 16 j + i (one
 * variable shift per half, 32-bit lanes: the mask keeps each byte's own bits). */
static inline __attribute__((always_inline)) void qmoe_b6_values_ymm(const uint8_t *p, __m256i *v0,
                                                                     __m256i *v1)
{
    const __m256i nib = _mm256_set1_epi8(0x0F), two = _mm256_set1_epi8(0x30);
    __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)p);
    __m256i q = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(p + 32)));
    __m256i h0 = _mm256_and_si256(_mm256_sllv_epi32(q, _mm256_set_epi32(2, 2, 2, 2, 4, 4, 4, 4)), two);
    __m256i h1 = _mm256_and_si256(_mm256_srlv_epi32(q, _mm256_set_epi32(2, 2, 2, 2, 0, 0, 0, 0)), two);
    *v0 = _mm256_or_si256(_mm256_and_si256(v, nib), h0);
    *v1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), nib), h1);
}

#endif
