/*
 * NEON weight rearrangement for the ARM tables: staged rows of a unit (16 int8, or 8 bytes of
 * int4 nibbles, low nibble first) -> the packed unit layout of gmm_fast.h, byte (c, t) of a step
 * = W[4q + t][c] + off. One step of a unit is 4 rows x 16 columns stored interleaved, which is
 * exactly what vst4q_u8 writes (r0[0] r1[0] r2[0] r3[0] r0[1] ...); + off is eor 0x80 (int8) or
 * eor 0x8 (a nibble, 0..15). Rows past `rows` are 0, as in the portable rearrangement.
 */
#if defined(__aarch64__)
#include <arm_neon.h>

#include "kernels/arm/parts.h"
#include "kernels/gmm_fast.h"

/* row r of a unit as 16 bytes + off */
static inline uint8x16_t load_row(const uint8_t *row, int int4)
{
    if (!int4) return veorq_u8(vld1q_u8(row), vdupq_n_u8(0x80));
    uint8x8_t v = vld1_u8(row), m = vdup_n_u8(0xF);
    uint8x8_t lo = vand_u8(v, m), hi = vshr_n_u8(v, 4); /* columns 2i and 2i + 1 */
    uint8x16_t w = vcombine_u8(vzip1_u8(lo, hi), vzip2_u8(lo, hi));
    return veorq_u8(w, vdupq_n_u8(0x8));
}

void qmoe_rearrange_neon(const uint8_t *const *src, const int64_t *stride, int64_t rows, int nub,
                         int int4, uint8_t *dst, int64_t wstep)
{
    int64_t steps = (rows + 3) / 4;
    for (int64_t q = 0; q < steps; q++) {
        uint8_t *d = dst + q * wstep;
        int64_t r0 = 4 * q, have = rows - r0 < 4 ? rows - r0 : 4;
        for (int u = 0; u < nub; u++) {
            const uint8_t *row = src[u] + r0 * stride[u];
            uint8x16x4_t t;
            t.val[0] = load_row(row, int4);
            t.val[1] = have > 1 ? load_row(row + stride[u], int4) : vdupq_n_u8(0);
            t.val[2] = have > 2 ? load_row(row + 2 * stride[u], int4) : vdupq_n_u8(0);
            t.val[3] = have > 3 ? load_row(row + 3 * stride[u], int4) : vdupq_n_u8(0);
            vst4q_u8(d + u * QMOE_PK_STEP, t);
        }
    }
}
#endif
