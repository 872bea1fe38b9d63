/* The weighted row sum of finalize routing on AVX-512 (kernels/rows_sum.h): 64 columns stay in
 * registers across the rows instead of a load and store of acc per row; each element sees the
 * portable loop's multiplies and adds (no FMA), so the bits are the same. */
#include <immintrin.h>

#include "kernels/rows_sum_scalar.h"
#include "kernels/x86/rows_sum_avx512vnni.h"

void qmoe_rows_sum_avx512(float *acc, int64_t H, const char *const *rows, const float *w, int n,
                          int bf16)
{
    int64_t h = 0;
    for (; h + 64 <= H; h += 64) {
        __m512 a0 = _mm512_loadu_ps(acc + h), a1 = _mm512_loadu_ps(acc + h + 16),
               a2 = _mm512_loadu_ps(acc + h + 32), a3 = _mm512_loadu_ps(acc + h + 48);
        for (int j = 0; j < n; j++) {
            __m512 wj = _mm512_set1_ps(w[j]), r0, r1, r2, r3;
            if (bf16) {
                const __m256i *s = (const __m256i *)(const void *)(rows[j] + (size_t)h * 2);
#define WIDEN(v) _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(v)), 16))
                r0 = WIDEN(s), r1 = WIDEN(s + 1), r2 = WIDEN(s + 2), r3 = WIDEN(s + 3);
#undef WIDEN
            } else {
                const float *s = (const float *)(const void *)rows[j] + h;
                r0 = _mm512_loadu_ps(s), r1 = _mm512_loadu_ps(s + 16), r2 = _mm512_loadu_ps(s + 32),
                r3 = _mm512_loadu_ps(s + 48);
            }
            a0 = _mm512_add_ps(a0, _mm512_mul_ps(wj, r0));
            a1 = _mm512_add_ps(a1, _mm512_mul_ps(wj, r1));
            a2 = _mm512_add_ps(a2, _mm512_mul_ps(wj, r2));
            a3 = _mm512_add_ps(a3, _mm512_mul_ps(wj, r3));
        }
        _mm512_storeu_ps(acc + h, a0), _mm512_storeu_ps(acc + h + 16, a1);
        _mm512_storeu_ps(acc + h + 32, a2), _mm512_storeu_ps(acc + h + 48, a3);
    }
    qmoe_rows_sum_columns(acc, h, H, rows, w, n, bf16); /* the tail columns */
}
