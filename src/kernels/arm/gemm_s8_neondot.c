/*
 * ARMv8.2 dot-product (sdot) int8 micro-kernel: up to MR rows x 1 unit (16 columns) of int32
 * accumulators, 4 q registers per row.
 *
 * The packed weights are uint8 W + off (gmm_fast.h) and x is int8, but sdot multiplies signed by
 * signed: the kernel flips each weight byte's top bit (w ^ 0x80 = w - 128 as int8, one eor per
 * weight register) and adds 128 * sum_k x back per row, so
 *   sum_k x * w = sdot(x, w ^ 0x80) + 128 * sum_k x
 * exactly (int32 arithmetic wraps, and the true sum fits in int32). sum_k x comes from a pass of
 * sdot against ones over each row once per call (16 k per instruction), shared by its units.
 *
 * Per step of 4 k and unit: 4 weight loads + 4 eor, and per row 4 sdot by element (x's 4 bytes
 * of that step picked from a register holding 4 steps, loaded once per 4 steps).
 */
#if defined(__aarch64__)
#include <arm_neon.h>
#include <string.h>

#include "kernels/arm/parts.h"
#include "kernels/gmm_fast.h"
#include "kernels/peak.h"

enum { MR = 4 };

/* sum of x[0 .. 4 kq) in int32 */
static inline int32_t row_sum(const int8_t *x, int64_t kq)
{
    const int8x16_t ones = vdupq_n_s8(1);
    int32x4_t s = vdupq_n_s32(0);
    int64_t n = 4 * kq, i = 0;
    for (; i + 16 <= n; i += 16) s = vdotq_s32(s, vld1q_s8(x + i), ones);
    int32_t t = vaddvq_s32(s);
    for (; i < n; i++) t += x[i];
    return t;
}

/* 4 bytes of x (one step) in lane 0 of a register; reads exactly those bytes */
static inline int8x16_t load_step(const int8_t *x)
{
    int32_t v;
    memcpy(&v, x, sizeof v);
    return vreinterpretq_s8_s32(vdupq_n_s32(v));
}

static inline __attribute__((always_inline)) void tile(int mr, int64_t kq, const int8_t *x,
                                                       int64_t ldx, const int32_t *sum,
                                                       const uint8_t *wp, int64_t wstep,
                                                       int32_t *acc, int64_t ldacc,
                                                       int accumulate)
{
    const uint8x16_t flip = vdupq_n_u8(0x80);
    int32x4_t c00 = vdupq_n_s32(0), c01 = c00, c02 = c00, c03 = c00;
    int32x4_t c10 = c00, c11 = c00, c12 = c00, c13 = c00, c20 = c00, c21 = c00, c22 = c00,
              c23 = c00, c30 = c00, c31 = c00, c32 = c00, c33 = c00;
    const int8_t *x0 = x, *x1 = x + ldx, *x2 = x + 2 * ldx, *x3 = x + 3 * ldx;

/* weights of one step, top bit flipped to int8 */
#define LOADW()                                                                                  \
    int8x16_t w0 = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(wp), flip));                           \
    int8x16_t w1 = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(wp + 16), flip));                      \
    int8x16_t w2 = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(wp + 32), flip));                      \
    int8x16_t w3 = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(wp + 48), flip));                      \
    wp += wstep;
#define DOT(R, XV, L)                                                                            \
    if (mr > R) {                                                                                \
        c##R##0 = vdotq_laneq_s32(c##R##0, w0, XV, L);                                          \
        c##R##1 = vdotq_laneq_s32(c##R##1, w1, XV, L);                                          \
        c##R##2 = vdotq_laneq_s32(c##R##2, w2, XV, L);                                          \
        c##R##3 = vdotq_laneq_s32(c##R##3, w3, XV, L);                                          \
    }
#define STEP(L)                                                                                  \
    {                                                                                            \
        LOADW()                                                                                  \
        DOT(0, xv0, L) DOT(1, xv1, L) DOT(2, xv2, L) DOT(3, xv3, L)                              \
    }
    int64_t q = 0;
    for (; q + 4 <= kq; q += 4) {
        int8x16_t xv0 = vld1q_s8(x0 + 4 * q), xv1 = xv0, xv2 = xv0, xv3 = xv0;
        if (mr > 1) xv1 = vld1q_s8(x1 + 4 * q);
        if (mr > 2) xv2 = vld1q_s8(x2 + 4 * q);
        if (mr > 3) xv3 = vld1q_s8(x3 + 4 * q);
        STEP(0) STEP(1) STEP(2) STEP(3)
    }
    for (; q < kq; q++) {
        int8x16_t xv0 = load_step(x0 + 4 * q), xv1 = xv0, xv2 = xv0, xv3 = xv0;
        if (mr > 1) xv1 = load_step(x1 + 4 * q);
        if (mr > 2) xv2 = load_step(x2 + 4 * q);
        if (mr > 3) xv3 = load_step(x3 + 4 * q);
        STEP(0)
    }
#undef STEP
#undef DOT
#undef LOADW
/* + 128 * sum_k x, in unsigned arithmetic (wraps like the vector adds; the total fits) */
#define OUT(R)                                                                                   \
    if (mr > R) {                                                                                \
        int32_t *d = acc + R * ldacc;                                                            \
        int32x4_t b = vdupq_n_s32((int32_t)((uint32_t)sum[R] << 7));                             \
        int32x4_t v0 = vaddq_s32(c##R##0, b), v1 = vaddq_s32(c##R##1, b);                        \
        int32x4_t v2 = vaddq_s32(c##R##2, b), v3 = vaddq_s32(c##R##3, b);                        \
        if (accumulate) {                                                                        \
            v0 = vaddq_s32(v0, vld1q_s32(d)), v1 = vaddq_s32(v1, vld1q_s32(d + 4));              \
            v2 = vaddq_s32(v2, vld1q_s32(d + 8)), v3 = vaddq_s32(v3, vld1q_s32(d + 12));         \
        }                                                                                        \
        vst1q_s32(d, v0), vst1q_s32(d + 4, v1), vst1q_s32(d + 8, v2), vst1q_s32(d + 12, v3);     \
    }
    OUT(0) OUT(1) OUT(2) OUT(3)
#undef OUT
}

#define TILE_FN(R)                                                                               \
    static void tile_##R(int64_t kq, const int8_t *x, int64_t ldx, const int32_t *sum,          \
                         const uint8_t *wp, int64_t wstep, int32_t *acc, int64_t ldacc,          \
                         int accumulate)                                                         \
    {                                                                                            \
        tile(R, kq, x, ldx, sum, wp, wstep, acc, ldacc, accumulate);                             \
    }
TILE_FN(1) TILE_FN(2) TILE_FN(3) TILE_FN(4)
#undef TILE_FN

typedef void (*tile_fn)(int64_t, const int8_t *, int64_t, const int32_t *, const uint8_t *,
                        int64_t, int32_t *, int64_t, int);
static const tile_fn tiles[MR] = {tile_1, tile_2, tile_3, tile_4};

static void gemm_neon_dot(int mr, int nu, int64_t kq, const int8_t *x, int64_t ldx,
                          const uint8_t *wp, int64_t wstep, int32_t *acc, int64_t ldacc,
                          int accumulate)
{
    /* sum_k x once for all units of the call */
    int32_t sum[MR];
    for (int r = 0; r < mr; r++) sum[r] = row_sum(x + r * ldx, kq);
    for (int u = 0; u < nu; u++)
        tiles[mr - 1](kq, x, ldx, sum, wp + u * QMOE_PK_STEP, wstep, acc + u * QMOE_PK_UNIT,
                      ldacc, accumulate);
}

const qmoe_gemm_isa qmoe_isa_neon_dot = {
    .name = "neon_dot",
    .kernel_id = QMOE_KERNEL_NEON_DOT,
    .mr = MR,
    .nu = QMOE_PK_BLOCK, /* a unit at a time inside, the row sums shared */
    .gemm = gemm_neon_dot,
    .expand_i4 = qmoe_expand_i4_neon,
    .expand_c4 = qmoe_expand_c4_neon,
    .rearrange = qmoe_rearrange_neon,
    .fold = qmoe_fold_neon,
    .half_to_f32 = qmoe_half_to_f32_neon,
    .peak_loop = qmoe_peak_neondot,
};
#endif
