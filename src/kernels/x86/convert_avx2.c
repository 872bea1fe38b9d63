/*
 * float16 / bfloat16 -> float32 on 8 lanes at a time (F16C's vcvtph2ps, or a shift): exact, the
 * values of core/halfconv.h's rule; the prepacked 16-bit weight scales of the AVX2 and AVX-VNNI
 * tables.
 */
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

#include "core/halfconv.h"
#include "kernels/x86/parts.h"

void qmoe_half_to_f32_avx2(float *d, const uint16_t *s, int bf16, int64_t n)
{
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(s + j));
        __m256 f = bf16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
                        : _mm256_cvtph_ps(h);
        _mm256_storeu_ps(d + j, f);
    }
    for (; j < n; j++) d[j] = bf16 ? qmoe_bf16_to_f32(s[j]) : qmoe_f16_to_f32(s[j]);
}
#endif
