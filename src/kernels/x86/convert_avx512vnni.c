/*
 * float32 -> bfloat16 on 16 lanes at a time, bit for bit core/halfconv.h's qmoe_f32_to_bf16
 * (round to nearest even, NaN quieted) in 32-bit integer arithmetic: AVX512_BF16's
 * vcvtneps2bf16 is not used, as it flushes subnormal inputs to zero. And the way back, float16 /
 * bfloat16 -> float32 (exact: vcvtph2ps, or a shift), and prepacked scale blocks -> float32.
 */
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

#include "core/halfconv.h"
#include "kernels/x86/parts.h"

void qmoe_f32_to_bf16_avx512(uint16_t *d, const float *v, int64_t n)
{
    const __m512i one = _mm512_set1_epi32(1), round = _mm512_set1_epi32(0x7FFF),
                  quiet = _mm512_set1_epi32(0x40), abs = _mm512_set1_epi32(0x7FFFFFFF),
                  inf = _mm512_set1_epi32(0x7F800000);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512i b = _mm512_castps_si512(_mm512_loadu_ps(v + j)), hi = _mm512_srli_epi32(b, 16);
        __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(b, round),
                                                       _mm512_and_si512(hi, one)),
                                      16);
        __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(b, abs), inf);
        r = _mm512_mask_blend_epi32(nan, r, _mm512_or_si512(hi, quiet));
        _mm256_storeu_si256((__m256i *)(void *)(d + j), _mm512_cvtepi32_epi16(r));
    }
    for (; j < n; j++) d[j] = qmoe_f32_to_bf16(v[j]);
}

void qmoe_half_to_f32_avx512(float *d, const uint16_t *s, int bf16, int64_t n)
{
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)(s + j));
        __m512 f = bf16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
                        : _mm512_cvtph_ps(h);
        _mm512_storeu_ps(d + j, f);
    }
    for (; j < n; j++) d[j] = bf16 ? qmoe_bf16_to_f32(s[j]) : qmoe_f16_to_f32(s[j]);
}

/* d[g * 128 + c] = base[(g / block) * 128 + c] * (float)q[g * 128 + c]: one rounding, as the
 * portable loop (gmm_fast.h widen_s8). */
void qmoe_widen_s8_avx512(float *d, const int8_t *q, const float *base, int64_t G, int64_t block)
{
    for (int64_t g = 0; g < G; g++) {
        const float *b = base + g / block * 128;
        for (int c = 0; c < 128; c += 16) {
            __m512 v = _mm512_cvtepi32_ps(
                _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(q + g * 128 + c))));
            _mm512_storeu_ps(d + g * 128 + c, _mm512_mul_ps(_mm512_loadu_ps(b + c), v));
        }
    }
}
#endif
