/*
 * Prepacked int4 steps and 4-bit codes -> the 64-byte int8 steps the ARM tiles read (gmm_fast.h
 * expand_i4, expand_c4): 16 bytes at a time (and / shift, then tbl for codes), where the
 * driver's portable loop went a byte at a time; both ARM tables expand a panel per call.
 */
#if defined(__aarch64__)
#include <arm_neon.h>

#include "kernels/arm/parts.h"

/* record byte i holds step bytes i (low nibble) and 32 + i (high nibble) */
void qmoe_expand_i4_neon(const uint8_t *src, int64_t steps, uint8_t *dst)
{
    const uint8x16_t m = vdupq_n_u8(0x0F);
    for (int64_t q = 0; q < steps; q++, src += 32, dst += QMOE_PK_STEP) {
        uint8x16_t a = vld1q_u8(src), b = vld1q_u8(src + 16);
        vst1q_u8(dst, vandq_u8(a, m));
        vst1q_u8(dst + 16, vandq_u8(b, m));
        vst1q_u8(dst + 32, vshrq_n_u8(a, 4));
        vst1q_u8(dst + 48, vshrq_n_u8(b, 4));
    }
}

/* the same nibbles as indices into the 16-byte table */
void qmoe_expand_c4_neon(const uint8_t *src, int64_t steps, uint8_t *dst, const uint8_t *tbl)
{
    const uint8x16_t m = vdupq_n_u8(0x0F), t = vld1q_u8(tbl);
    for (int64_t q = 0; q < steps; q++, src += 32, dst += QMOE_PK_STEP) {
        uint8x16_t a = vld1q_u8(src), b = vld1q_u8(src + 16);
        vst1q_u8(dst, vqtbl1q_u8(t, vandq_u8(a, m)));
        vst1q_u8(dst + 16, vqtbl1q_u8(t, vandq_u8(b, m)));
        vst1q_u8(dst + 32, vqtbl1q_u8(t, vshrq_n_u8(a, 4)));
        vst1q_u8(dst + 48, vqtbl1q_u8(t, vshrq_n_u8(b, 4)));
    }
}
#endif
