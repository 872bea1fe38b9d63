/*
 * AVX2 int8 products with one vpmaddubsw each (gemm_s8_avx2.c, gemm_groups_avx2.c).
 *
 * The kernels get weight bytes u = w + 128 (0..255) and int8 x, and return the exact sums of
 * x * u. vpmaddubsw (unsigned x signed, pairs added into int16 with saturation) on u and x can
 * saturate (2 * 255 * 128), which is why int8 bytes were split into nibbles: two multiplies and
 * two widenings a product. Moving the signs instead: with w = u ^ 0x80 (= u - 128),
 * x * w = |x| * (w * sign(x)), and vpmaddubsw(|x|, vpsignb(w, x)) cannot saturate as long as no
 * w is -128 (|x| <= 128, |w * sign(x)| <= 127: a pair is at most 32512 in magnitude). A step with
 * a weight byte 0 (w = -128, which vpsignb cannot negate) takes the split instead; so every step
 * is exact, and x * u = x * w + 128 * x: the caller adds 128 times the sum of the x it used.
 */
#ifndef QMOE_KERNELS_X86_S8_SIGN_AVX2_H
#define QMOE_KERNELS_X86_S8_SIGN_AVX2_H

#include <immintrin.h>
#include <stdint.h>

/* 1 when neither 32-byte half of a step holds a byte 0 (a weight -128). */
static inline __attribute__((always_inline)) int qmoe_s8_signable(__m256i u0, __m256i u1)
{
    const __m256i e = _mm256_cmpeq_epi8(_mm256_min_epu8(u0, u1), _mm256_setzero_si256());
    return _mm256_testz_si256(e, e);
}

/* x * w of 8 columns (4 k each) as int32: ax = |x| (vpabsb of the broadcast b), w = u ^ 0x80
 * with no byte -128. */
static inline __attribute__((always_inline)) __m256i qmoe_s8_dot(__m256i ax, __m256i b, __m256i w)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(w, b)),
                             _mm256_set1_epi16(1));
}

/* x * u of 8 columns through the nibble split (any bytes u): the slow path's products. */
static inline __attribute__((always_inline)) __m256i qmoe_s8_dot_split(__m256i b, __m256i u)
{
    const __m256i nib = _mm256_set1_epi8(0x0F);
    const __m256i lo = _mm256_and_si256(u, nib), hi = _mm256_and_si256(_mm256_srli_epi16(u, 4), nib);
    return _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(lo, b), _mm256_set1_epi16(1)),
                            _mm256_madd_epi16(_mm256_maddubs_epi16(hi, b), _mm256_set1_epi16(16)));
}

/* 128 * (x0 + x1 + x2 + x3) of the broadcast b in every lane: what x * u adds to x * w. */
static inline __attribute__((always_inline)) __m256i qmoe_s8_dot_off(__m256i b)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8((char)0x80), b),
                             _mm256_set1_epi16(1));
}

/* 128 * the sum of n int8 values, modulo 2^32 as the int32 accumulators wrap (n < 2^24). */
static inline __attribute__((always_inline)) int32_t qmoe_s8_off(const int8_t *x, int64_t n)
{
    __m256i s = _mm256_setzero_si256();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1),
                                                                        _mm256_loadu_si256((const __m256i *)(const void *)(x + i))),
                                                  _mm256_set1_epi16(1)));
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xB1));
    int64_t t = _mm_cvtsi128_si32(h);
    for (; i < n; i++) t += x[i];
    return (int32_t)(uint32_t)((uint64_t)t * 128u);
}

#endif
