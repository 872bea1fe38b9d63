/*
 * Prepacked 4-bit steps (core/prepack.h) -> the 64-byte step the AVX-512 kernels read, in
 * registers: int4 (the nibbles are the bytes) and codes (each nibble indexes a 16-byte table);
 * and prepacked 6-bit steps (48 bytes: the nibbles, then the high two bits of each byte).
 * Included only by files built for AVX-512.
 */
#ifndef QMOE_KERNELS_X86_EXPAND_AVX512_H
#define QMOE_KERNELS_X86_EXPAND_AVX512_H

#include <immintrin.h>
#include <stdint.h>

/* 32 bytes, byte i holding bytes i and 32 + i of the step in its low and high nibble. */
static inline __attribute__((always_inline)) __m512i qmoe_expand_i4_zmm(const uint8_t *p)
{
    const __m256i m = _mm256_set1_epi8(0x0F);
    __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)p);
    __m256i lo = _mm256_and_si256(v, m), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m);
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* The 16-byte table in every 128-bit lane, for qmoe_expand_c4_zmm's vpshufb. */
static inline __attribute__((always_inline)) __m512i qmoe_code_table_zmm(const uint8_t *tbl)
{
    return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)tbl));
}

/* Codes: the nibbles looked up in the table (the nibble's top bit is 0, so vpshufb indexes). */
static inline __attribute__((always_inline)) __m512i qmoe_expand_c4_zmm(const uint8_t *p, __m512i tb)
{
    return _mm512_shuffle_epi8(tb, qmoe_expand_i4_zmm(p));
}

/* 6 bits: 32 bytes of nibbles as int4, then 16 bytes whose bit pair j of byte i is the high two
 * bits of step byte 16 j + i; each byte is that 6-bit value + 96 (core/prepack.h). The 16 bytes
 * go to every 128-bit lane, lane j shifted right by 2 j (16-bit shifts: the mask keeps each
 * byte's own bits), masked to two bits and moved to bits 4-5. */
static inline __attribute__((always_inline)) __m512i qmoe_expand_b6_zmm(const uint8_t *p)
{
    const __m512i counts = _mm512_set_epi64(0x0006000600060006, 0x0006000600060006,
                                            0x0004000400040004, 0x0004000400040004,
                                            0x0002000200020002, 0x0002000200020002, 0, 0);
    __m512i h = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)(p + 32)));
    h = _mm512_and_si512(_mm512_srlv_epi16(h, counts), _mm512_set1_epi8(3));
    __m512i v = _mm512_or_si512(qmoe_expand_i4_zmm(p), _mm512_slli_epi16(h, 4));
    return _mm512_add_epi8(v, _mm512_set1_epi8(96));
}

#endif
