/*
 * AVX2 int8 micro-kernel without VNNI: up to 4 rows x 1 unit (16 columns, two ymm).
 * vpmaddubsw multiplies uint8 weights by int8 x and adds pairs into int16 with saturation; with
 * weights up to 255 a pair can reach 2 * 255 * 128 and saturate, so every weight byte is split
 * into nibbles, w = 16 h + l (h, l <= 15: pairs stay within 2 * 15 * 128), and the two products
 * are widened by vpmaddwd (times 16 and times 1) into the int32 accumulators. Exact for int8 and
 * int4 weights alike.
 */
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#include <string.h>

#include "kernels/gmm_fast.h"
#include "kernels/peak.h"
#include "kernels/x86/parts.h"

enum { MR = 4 };

static inline __attribute__((always_inline)) void tile(int mr, int64_t kq, const int8_t *x,
                                                       int64_t ldx, const uint8_t *wp,
                                                       int64_t wstep, int32_t *acc, int64_t ldacc,
                                                       int accumulate)
{
    const __m256i nib = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi16(1);
    const __m256i sixteen = _mm256_set1_epi16(16);
    __m256i c[MR][2];
    for (int r = 0; r < mr; r++)
        for (int h = 0; h < 2; h++)
            c[r][h] = accumulate ? _mm256_loadu_si256((const __m256i *)(acc + r * ldacc + 8 * h))
                                 : _mm256_setzero_si256();
    for (int64_t q = 0; q < kq; q++) {
        __m256i wl[2], wh[2];
        for (int h = 0; h < 2; h++) {
            __m256i w = _mm256_loadu_si256((const __m256i *)(wp + 32 * h));
            wl[h] = _mm256_and_si256(w, nib);
            wh[h] = _mm256_and_si256(_mm256_srli_epi16(w, 4), nib);
        }
        wp += wstep;
        for (int r = 0; r < mr; r++) {
            int32_t xv;
            memcpy(&xv, x + r * ldx + 4 * q, sizeof xv);
            __m256i b = _mm256_set1_epi32(xv);
            for (int h = 0; h < 2; h++) {
                __m256i lo = _mm256_madd_epi16(_mm256_maddubs_epi16(wl[h], b), one);
                __m256i hi = _mm256_madd_epi16(_mm256_maddubs_epi16(wh[h], b), sixteen);
                c[r][h] = _mm256_add_epi32(c[r][h], _mm256_add_epi32(lo, hi));
            }
        }
    }
    for (int r = 0; r < mr; r++)
        for (int h = 0; h < 2; h++)
            _mm256_storeu_si256((__m256i *)(acc + r * ldacc + 8 * h), c[r][h]);
}

#define TILE_FN(R)                                                                               \
    static void tile_##R(int64_t kq, const int8_t *x, int64_t ldx, const uint8_t *wp,           \
                         int64_t wstep, int32_t *acc, int64_t ldacc, int accumulate)             \
    {                                                                                            \
        tile(R, kq, x, ldx, wp, wstep, acc, ldacc, accumulate);                                  \
    }
TILE_FN(1) TILE_FN(2) TILE_FN(3) TILE_FN(4)

typedef void (*tile_fn)(int64_t, const int8_t *, int64_t, const uint8_t *, int64_t, int32_t *,
                        int64_t, int);
static const tile_fn tiles[MR] = {tile_1, tile_2, tile_3, tile_4};

static void gemm_avx2(int mr, int nu, int64_t kq, const int8_t *x, int64_t ldx, const uint8_t *wp,
                      int64_t wstep, int32_t *acc, int64_t ldacc, int accumulate)
{
    for (int u = 0; u < nu; u++)
        tiles[mr - 1](kq, x, ldx, wp + u * QMOE_PK_STEP, wstep, acc + u * QMOE_PK_UNIT, ldacc,
                      accumulate);
}

const qmoe_gemm_isa qmoe_isa_avx2 = {
    .name = "avx2",
    .kernel_id = QMOE_KERNEL_AVX2,
    .mr = MR,
    .nu = 1,
    .gemm = gemm_avx2,
    .rearrange = qmoe_rearrange_portable,
    .fold = qmoe_fold_avx2,
    .peak_loop = qmoe_peak_avx2,
};
#endif
