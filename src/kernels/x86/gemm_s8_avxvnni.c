/*
 * AVX-VNNI int8 micro-kernel (VEX vpdpbusd on ymm): up to 6 rows x 1 unit (16 columns, two ymm)
 * of int32 accumulators in 12 ymm registers; per step of 4 k, 2 weight vectors (uint8) and one
 * broadcast dword of x per row (int8). Weight rearrangement is the AVX2 one (pack_avx2.c); the epilogue is
 * the 256-bit one shared with the AVX2 kernel.
 */
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#include <string.h>

#include "kernels/gmm_fast.h"
#include "kernels/peak.h"
#include "kernels/x86/parts.h"

enum { MR = 6 };

static inline __attribute__((always_inline)) void tile(int mr, int64_t kq, const int8_t *x,
                                                       int64_t ldx, const uint8_t *wp,
                                                       int64_t wstep, int32_t *acc, int64_t ldacc,
                                                       int accumulate)
{
    __m256i c[MR][2];
    for (int r = 0; r < mr; r++)
        for (int h = 0; h < 2; h++)
            c[r][h] = accumulate ? _mm256_loadu_si256((const __m256i *)(acc + r * ldacc + 8 * h))
                                 : _mm256_setzero_si256();
    for (int64_t q = 0; q < kq; q++) {
        __m256i w0 = _mm256_loadu_si256((const __m256i *)wp);
        __m256i w1 = _mm256_loadu_si256((const __m256i *)(wp + 32));
        wp += wstep;
        for (int r = 0; r < mr; r++) {
            int32_t xv;
            memcpy(&xv, x + r * ldx + 4 * q, sizeof xv);
            __m256i b = _mm256_set1_epi32(xv);
            c[r][0] = _mm256_dpbusd_avx_epi32(c[r][0], w0, b);
            c[r][1] = _mm256_dpbusd_avx_epi32(c[r][1], w1, b);
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
TILE_FN(1) TILE_FN(2) TILE_FN(3) TILE_FN(4) TILE_FN(5) TILE_FN(6)

typedef void (*tile_fn)(int64_t, const int8_t *, int64_t, const uint8_t *, int64_t, int32_t *,
                        int64_t, int);
static const tile_fn tiles[MR] = {tile_1, tile_2, tile_3, tile_4, tile_5, tile_6};

static void gemm_avxvnni(int mr, int nu, int64_t kq, const int8_t *x, int64_t ldx,
                         const uint8_t *wp, int64_t wstep, int32_t *acc, int64_t ldacc,
                         int accumulate)
{
    for (int u = 0; u < nu; u++)
        tiles[mr - 1](kq, x, ldx, wp + u * QMOE_PK_STEP, wstep, acc + u * QMOE_PK_UNIT, ldacc,
                      accumulate);
}

const qmoe_gemm_isa qmoe_isa_avx_vnni = {
    .name = "avx_vnni",
    .kernel_id = QMOE_KERNEL_AVX_VNNI,
    .mr = MR,
    .nu = 1,
    .gemm = gemm_avxvnni,
    .expand_i4 = qmoe_expand_i4_avx2,
    .expand_c4 = qmoe_expand_c4_avx2,
    .expand_b6 = qmoe_expand_b6_avx2,
    .rearrange = qmoe_rearrange_avx2,
    .fold = qmoe_fold_avx2,
    .half_to_f32 = qmoe_half_to_f32_avx2,
    .peak_loop = qmoe_peak_avxvnni,
};
#endif
