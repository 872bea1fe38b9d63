/*
 * AVX2 int8 micro-kernel without VNNI: up to 4 rows x 1 unit (16 columns, two ymm).
 * vpmaddubsw multiplies uint8 weights by int8 x and adds pairs into int16 with saturation; with
 * weights up to 255 a pair can reach 2 * 255 * 128 and saturate, so every weight byte is split
 * into nibbles, w = 16 h + l (h, l <= 15: pairs stay within 2 * 15 * 128), and the two products
 * are widened by vpmaddwd (times 16 and times 1) into the int32 accumulators. Exact for int8 and
 * int4 weights alike. Int4 weights (bytes <= 15) need no split: gemm_u4 on expanded steps and
 * gemm_i4 on prepacked nibbles (expanded in registers) do one vpmaddubsw per product, half the
 * multiplies of the split.
 */
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#include <string.h>

#include "kernels/gmm_fast.h"
#include "kernels/peak.h"
#include "kernels/x86/parts.h"

enum { MR = 4 };

/* w: 0 int8 bytes (split into nibbles), 1 bytes <= 15 (64-byte steps), 2 prepacked int4 steps
 * (32 bytes, byte i holding bytes i and 32 + i of the 64-byte step in its low and high nibble). */
static inline __attribute__((always_inline)) void tile(int w4, int mr, int64_t kq, const int8_t *x,
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
        __m256i wl[2], wh[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
        if (w4 == 2) {
            __m256i w = _mm256_loadu_si256((const __m256i *)wp);
            wl[0] = _mm256_and_si256(w, nib);
            wl[1] = _mm256_and_si256(_mm256_srli_epi16(w, 4), nib);
        }
        for (int h = 0; w4 < 2 && h < 2; h++) {
            __m256i w = _mm256_loadu_si256((const __m256i *)(wp + 32 * h));
            wl[h] = w4 ? w : _mm256_and_si256(w, nib);
            if (!w4) wh[h] = _mm256_and_si256(_mm256_srli_epi16(w, 4), nib);
        }
        wp += wstep;
        for (int r = 0; r < mr; r++) {
            int32_t xv;
            memcpy(&xv, x + r * ldx + 4 * q, sizeof xv);
            __m256i b = _mm256_set1_epi32(xv);
            for (int h = 0; h < 2; h++) {
                __m256i lo = _mm256_madd_epi16(_mm256_maddubs_epi16(wl[h], b), one);
                if (!w4) /* pairs of 15 * 128 cannot saturate int16; 255 * 128 could */
                    lo = _mm256_add_epi32(lo, _mm256_madd_epi16(_mm256_maddubs_epi16(wh[h], b), sixteen));
                c[r][h] = _mm256_add_epi32(c[r][h], lo);
            }
        }
    }
    for (int r = 0; r < mr; r++)
        for (int h = 0; h < 2; h++)
            _mm256_storeu_si256((__m256i *)(acc + r * ldacc + 8 * h), c[r][h]);
}

#define TILE_FN(W, R)                                                                            \
    static void tile_##W##_##R(int64_t kq, const int8_t *x, int64_t ldx, const uint8_t *wp,     \
                               int64_t wstep, int32_t *acc, int64_t ldacc, int accumulate)       \
    {                                                                                            \
        tile(W, R, kq, x, ldx, wp, wstep, acc, ldacc, accumulate);                               \
    }
#define TILE_FNS(W) TILE_FN(W, 1) TILE_FN(W, 2) TILE_FN(W, 3) TILE_FN(W, 4)
TILE_FNS(0) TILE_FNS(1) TILE_FNS(2)

typedef void (*tile_fn)(int64_t, const int8_t *, int64_t, const uint8_t *, int64_t, int32_t *,
                        int64_t, int);
static const tile_fn tiles[3][MR] = {{tile_0_1, tile_0_2, tile_0_3, tile_0_4},
                                     {tile_1_1, tile_1_2, tile_1_3, tile_1_4},
                                     {tile_2_1, tile_2_2, tile_2_3, tile_2_4}};

static inline void run(int w4, int mr, int nu, int64_t kq, const int8_t *x, int64_t ldx,
                       const uint8_t *wp, int64_t wstep, int32_t *acc, int64_t ldacc, int accumulate)
{
    int64_t ustep = w4 == 2 ? QMOE_PK_STEP / 2 : QMOE_PK_STEP;
    for (int u = 0; u < nu; u++)
        tiles[w4][mr - 1](kq, x, ldx, wp + u * ustep, wstep, acc + u * QMOE_PK_UNIT, ldacc,
                          accumulate);
}

/* Prepacked int4 steps -> the 64-byte steps gemm reads (gmm_fast.h, expand_i4). */
static void expand_i4_avx2(const uint8_t *src, int64_t steps, uint8_t *dst)
{
    const __m256i nib = _mm256_set1_epi8(0x0F);
    for (int64_t q = 0; q < steps; q++, src += 32, dst += QMOE_PK_STEP) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)src);
        _mm256_storeu_si256((__m256i *)(void *)dst, _mm256_and_si256(v, nib));
        _mm256_storeu_si256((__m256i *)(void *)(dst + 32), _mm256_and_si256(_mm256_srli_epi16(v, 4), nib));
    }
}

static void gemm_avx2(int mr, int nu, int64_t kq, const int8_t *x, int64_t ldx, const uint8_t *wp,
                      int64_t wstep, int32_t *acc, int64_t ldacc, int accumulate)
{
    run(0, mr, nu, kq, x, ldx, wp, wstep, acc, ldacc, accumulate);
}

static void gemm_u4_avx2(int mr, int nu, int64_t kq, const int8_t *x, int64_t ldx,
                         const uint8_t *wp, int64_t wstep, int32_t *acc, int64_t ldacc,
                         int accumulate)
{
    run(1, mr, nu, kq, x, ldx, wp, wstep, acc, ldacc, accumulate);
}

static void gemm_i4_avx2(int mr, int nu, int64_t kq, const int8_t *x, int64_t ldx,
                         const uint8_t *wp, int64_t wstep, int32_t *acc, int64_t ldacc,
                         int accumulate)
{
    run(2, mr, nu, kq, x, ldx, wp, wstep, acc, ldacc, accumulate);
}

const qmoe_gemm_isa qmoe_isa_avx2 = {
    .name = "avx2",
    .kernel_id = QMOE_KERNEL_AVX2,
    .mr = MR,
    .nu = 1,
    .gemm = gemm_avx2,
    .gemm_u4 = gemm_u4_avx2,
    .gemm_i4 = gemm_i4_avx2,
    .expand_i4 = expand_i4_avx2,
    .rearrange = qmoe_rearrange_portable,
    .fold = qmoe_fold_avx2,
    .peak_loop = qmoe_peak_avx2,
};
#endif
