/*
 * ARMv8.6 int8 matrix-multiply (I8MM) micro-kernel: usmmla multiplies a 2x8 uint8 matrix by an
 * 8x2 int8 one into a 2x2 int32 tile (32 multiply-adds), and takes the packed weights as they
 * are: uint8 W + off times int8 x, the exact sum with no correction.
 *
 * Operands per pair of steps (8 k): the unit's 16 columns are 4 registers per step, 4 columns x
 * 4 k each; zip1/zip2 of the 32-bit lanes of step q's and step q+1's register give two 2x8
 * matrices (columns c, c+1 and c+2, c+3, 8 k each). x rows r, r+1 (8 bytes each) form the 8x2
 * matrix. A tile holds [c][r], [c][r+1], [c+1][r], [c+1][r+1]; uzp1/uzp2 of two tiles give rows
 * r and r+1 for 4 columns at the end.
 *
 * Up to MR = 6 rows (3 row pairs) x 1 unit: 24 accumulators, 3 x matrices and the weights of one
 * column quad live at a time. Per 8 k and unit: 8 weight loads, 8 zips, 6 x loads (one per row)
 * and 24 usmmla. An odd last row reads its own row twice and drops the copy; an odd last step
 * pairs with zeros. A single row takes usdot instead (tile_1).
 */
#if defined(__aarch64__)
#include <arm_neon.h>
#include <string.h>

#include "kernels/arm/parts.h"
#include "kernels/gmm_fast.h"
#include "kernels/peak.h"

enum { MR = 6 };

/* x rows a, b (8 bytes each from k) as the 8x2 operand */
static inline int8x16_t load_pair(const int8_t *a, const int8_t *b)
{
    return vcombine_s8(vld1_s8(a), vld1_s8(b));
}

/* one step (4 bytes) of rows a, b, zeros in k 4..7 */
static inline int8x16_t load_pair_tail(const int8_t *a, const int8_t *b)
{
    int32_t v[4] = {0, 0, 0, 0};
    memcpy(&v[0], a, 4);
    memcpy(&v[2], b, 4);
    return vreinterpretq_s8_s32(vld1q_s32(v));
}

static inline __attribute__((always_inline)) void tile(int mr, int64_t kq, const int8_t *x,
                                                       int64_t ldx, const uint8_t *wp,
                                                       int64_t wstep, int32_t *acc,
                                                       int64_t ldacc, int accumulate)
{
    /* c<pair><quad><half>: half 0 holds columns 4 quad + 0, 1; half 1 columns + 2, 3 */
    int32x4_t c000 = vdupq_n_s32(0), c001 = c000, c010 = c000, c011 = c000, c020 = c000,
              c021 = c000, c030 = c000, c031 = c000;
    int32x4_t c100 = c000, c101 = c000, c110 = c000, c111 = c000, c120 = c000, c121 = c000,
              c130 = c000, c131 = c000;
    int32x4_t c200 = c000, c201 = c000, c210 = c000, c211 = c000, c220 = c000, c221 = c000,
              c230 = c000, c231 = c000;
    /* rows past mr read the last row (never stored) */
    const int8_t *r0 = x, *r1 = mr > 1 ? x + ldx : r0, *r2 = mr > 2 ? x + 2 * ldx : r1;
    const int8_t *r3 = mr > 3 ? x + 3 * ldx : r2, *r4 = mr > 4 ? x + 4 * ldx : r3;
    const int8_t *r5 = mr > 5 ? x + 5 * ldx : r4;

#define MM(P, J, A0, A1, B)                                                                      \
    c##P##J##0 = vusmmlaq_s32(c##P##J##0, A0, B);                                               \
    c##P##J##1 = vusmmlaq_s32(c##P##J##1, A1, B);
#define QUAD(J, WA, WB)                                                                          \
    {                                                                                            \
        uint32x4_t wa = vreinterpretq_u32_u8(WA), wb = vreinterpretq_u32_u8(WB);                 \
        uint8x16_t a0 = vreinterpretq_u8_u32(vzip1q_u32(wa, wb));                                \
        uint8x16_t a1 = vreinterpretq_u8_u32(vzip2q_u32(wa, wb));                                \
        MM(0, J, a0, a1, b0)                                                                     \
        if (mr > 2) { MM(1, J, a0, a1, b1) }                                                     \
        if (mr > 4) { MM(2, J, a0, a1, b2) }                                                     \
    }
    int64_t q = 0;
    for (; q + 2 <= kq; q += 2) {
        int8x16_t b0 = load_pair(r0 + 4 * q, r1 + 4 * q), b1 = b0, b2 = b0;
        if (mr > 2) b1 = load_pair(r2 + 4 * q, r3 + 4 * q);
        if (mr > 4) b2 = load_pair(r4 + 4 * q, r5 + 4 * q);
        const uint8_t *wq = wp, *wq1 = wp + wstep;
        QUAD(0, vld1q_u8(wq), vld1q_u8(wq1))
        QUAD(1, vld1q_u8(wq + 16), vld1q_u8(wq1 + 16))
        QUAD(2, vld1q_u8(wq + 32), vld1q_u8(wq1 + 32))
        QUAD(3, vld1q_u8(wq + 48), vld1q_u8(wq1 + 48))
        wp += 2 * wstep;
    }
    if (q < kq) {
        int8x16_t b0 = load_pair_tail(r0 + 4 * q, r1 + 4 * q), b1 = b0, b2 = b0;
        if (mr > 2) b1 = load_pair_tail(r2 + 4 * q, r3 + 4 * q);
        if (mr > 4) b2 = load_pair_tail(r4 + 4 * q, r5 + 4 * q);
        const uint8x16_t z = vdupq_n_u8(0);
        QUAD(0, vld1q_u8(wp), z)
        QUAD(1, vld1q_u8(wp + 16), z)
        QUAD(2, vld1q_u8(wp + 32), z)
        QUAD(3, vld1q_u8(wp + 48), z)
    }
#undef QUAD
#undef MM
/* row 2P + H of column quad J: lanes H and H + 2 of both halves */
#define ROWQ(P, J, H) (H ? vuzp2q_s32(c##P##J##0, c##P##J##1) : vuzp1q_s32(c##P##J##0, c##P##J##1))
#define OUT(P, H)                                                                                \
    if (mr > 2 * P + H) {                                                                        \
        int32_t *d = acc + (2 * P + H) * ldacc;                                                  \
        int32x4_t v0 = ROWQ(P, 0, H), v1 = ROWQ(P, 1, H), v2 = ROWQ(P, 2, H), v3 = ROWQ(P, 3, H); \
        if (accumulate) {                                                                        \
            v0 = vaddq_s32(v0, vld1q_s32(d)), v1 = vaddq_s32(v1, vld1q_s32(d + 4));              \
            v2 = vaddq_s32(v2, vld1q_s32(d + 8)), v3 = vaddq_s32(v3, vld1q_s32(d + 12));         \
        }                                                                                        \
        vst1q_s32(d, v0), vst1q_s32(d + 4, v1), vst1q_s32(d + 8, v2), vst1q_s32(d + 12, v3);     \
    }
    OUT(0, 0) OUT(0, 1) OUT(1, 0) OUT(1, 1) OUT(2, 0) OUT(2, 1)
#undef OUT
#undef ROWQ
}

/* One row (decode, the driver's sums of x): usdot, also part of I8MM, takes the same uint8 x int8
 * operands 4 at a time with no half-empty 2x2 tile: per step 4 weight loads and 4 usdot by
 * element, x loaded once per 4 steps. */
static void tile_1(int64_t kq, const int8_t *x, int64_t ldx, const uint8_t *wp, int64_t wstep,
                   int32_t *acc, int64_t ldacc, int accumulate)
{
    (void)ldx, (void)ldacc;
    int32x4_t c0 = vdupq_n_s32(0), c1 = c0, c2 = c0, c3 = c0;
#define STEP(XV, L)                                                                              \
    c0 = vusdotq_laneq_s32(c0, vld1q_u8(wp), XV, L);                                            \
    c1 = vusdotq_laneq_s32(c1, vld1q_u8(wp + 16), XV, L);                                       \
    c2 = vusdotq_laneq_s32(c2, vld1q_u8(wp + 32), XV, L);                                       \
    c3 = vusdotq_laneq_s32(c3, vld1q_u8(wp + 48), XV, L);                                       \
    wp += wstep;
    int64_t q = 0;
    for (; q + 4 <= kq; q += 4) {
        int8x16_t xv = vld1q_s8(x + 4 * q);
        STEP(xv, 0) STEP(xv, 1) STEP(xv, 2) STEP(xv, 3)
    }
    for (; q < kq; q++) {
        int32_t v;
        memcpy(&v, x + 4 * q, sizeof v); /* exactly this step's 4 bytes */
        int8x16_t xv = vreinterpretq_s8_s32(vdupq_n_s32(v));
        STEP(xv, 0)
    }
#undef STEP
    if (accumulate) {
        c0 = vaddq_s32(c0, vld1q_s32(acc)), c1 = vaddq_s32(c1, vld1q_s32(acc + 4));
        c2 = vaddq_s32(c2, vld1q_s32(acc + 8)), c3 = vaddq_s32(c3, vld1q_s32(acc + 12));
    }
    vst1q_s32(acc, c0), vst1q_s32(acc + 4, c1), vst1q_s32(acc + 8, c2), vst1q_s32(acc + 12, c3);
}

#define TILE_FN(R)                                                                               \
    static void tile_##R(int64_t kq, const int8_t *x, int64_t ldx, const uint8_t *wp,           \
                         int64_t wstep, int32_t *acc, int64_t ldacc, int accumulate)             \
    {                                                                                            \
        tile(R, kq, x, ldx, wp, wstep, acc, ldacc, accumulate);                                  \
    }
TILE_FN(2) TILE_FN(3) TILE_FN(4) TILE_FN(5) TILE_FN(6)
#undef TILE_FN

typedef void (*tile_fn)(int64_t, const int8_t *, int64_t, const uint8_t *, int64_t, int32_t *,
                        int64_t, int);
static const tile_fn tiles[MR] = {tile_1, tile_2, tile_3, tile_4, tile_5, tile_6};

static void gemm_neon_i8mm(int mr, int nu, int64_t kq, const int8_t *x, int64_t ldx,
                           const uint8_t *wp, int64_t wstep, int32_t *acc, int64_t ldacc,
                           int accumulate)
{
    for (int u = 0; u < nu; u++)
        tiles[mr - 1](kq, x, ldx, wp + u * QMOE_PK_STEP, wstep, acc + u * QMOE_PK_UNIT, ldacc,
                      accumulate);
}

const qmoe_gemm_isa qmoe_isa_neon_i8mm = {
    .name = "neon_i8mm",
    .kernel_id = QMOE_KERNEL_NEON_I8MM,
    .mr = MR,
    .nu = 1,
    .gemm = gemm_neon_i8mm,
    .expand_i4 = qmoe_expand_i4_neon,
    .expand_c4 = qmoe_expand_c4_neon,
    .rearrange = qmoe_rearrange_neon,
    .fold = qmoe_fold_neon,
    .half_to_f32 = qmoe_half_to_f32_neon,
    .peak_loop = qmoe_peak_i8mm,
};
#endif
