/*
 * AVX2 rearrangement of staged weight rows into packed units (gmm_fast.h), per step of four
 * rows: each unit's four rows (16 int8, or 8 bytes of int4 nibbles split into 16 bytes in column
 * order) are offset as the portable code offsets them (int8 ^ 0x80, nibble ^ 0x8) and transposed
 * by byte then word unpacks into the step's 64 bytes (byte 4 c + t: column c of row t). The
 * portable code, one byte at a time, was about a sixth of a model's load in the ggml backend on
 * an AVX2 CPU. The last partial step is the portable code's.
 */
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

#include "kernels/gmm_fast.h"
#include "kernels/x86/parts.h"

/* Row r of a unit as 16 offset bytes in column order. */
static inline __m128i row16(const uint8_t *row, int int4)
{
    if (!int4)
        return _mm_xor_si128(_mm_loadu_si128((const __m128i *)(const void *)row), _mm_set1_epi8((char)0x80));
    const __m128i nib = _mm_set1_epi8(0x0F), b = _mm_loadl_epi64((const __m128i *)(const void *)row);
    const __m128i lo = _mm_and_si128(b, nib), hi = _mm_and_si128(_mm_srli_epi16(b, 4), nib);
    return _mm_xor_si128(_mm_unpacklo_epi8(lo, hi), _mm_set1_epi8(0x08)); /* column 2 i, 2 i + 1 */
}

void qmoe_rearrange_avx2(const uint8_t *const *src, const int64_t *stride, int64_t rows, int nub,
                         int int4, uint8_t *dst, int64_t wstep)
{
    const int64_t full = rows / 4;
    for (int u = 0; u < nub; u++) {
        const uint8_t *s = src[u];
        const int64_t st = stride[u];
        uint8_t *d = dst + u * QMOE_PK_STEP;
        for (int64_t q = 0; q < full; q++, s += 4 * st, d += wstep) {
            const __m128i r0 = row16(s, int4), r1 = row16(s + st, int4), r2 = row16(s + 2 * st, int4),
                          r3 = row16(s + 3 * st, int4);
            const __m128i a = _mm_unpacklo_epi8(r0, r1), b = _mm_unpackhi_epi8(r0, r1),
                          c = _mm_unpacklo_epi8(r2, r3), e = _mm_unpackhi_epi8(r2, r3);
            _mm_storeu_si128((__m128i *)(void *)d, _mm_unpacklo_epi16(a, c));
            _mm_storeu_si128((__m128i *)(void *)(d + 16), _mm_unpackhi_epi16(a, c));
            _mm_storeu_si128((__m128i *)(void *)(d + 32), _mm_unpacklo_epi16(b, e));
            _mm_storeu_si128((__m128i *)(void *)(d + 48), _mm_unpackhi_epi16(b, e));
        }
        if (rows > 4 * full)
            qmoe_rearrange_portable(&s, &stride[u], rows - 4 * full, 1, int4, d, wstep);
    }
}
#endif
