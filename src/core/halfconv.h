/* float16 / bfloat16 <-> float32 conversion, exact and portable (no F16C needed). */
#ifndef QMOE_CORE_HALFCONV_H
#define QMOE_CORE_HALFCONV_H

#include <stdint.h>
#include <string.h>

static inline float qmoe_bits_to_f32(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline uint32_t qmoe_f32_to_bits(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return bits;
}

static inline float qmoe_bf16_to_f32(uint16_t h) { return qmoe_bits_to_f32((uint32_t)h << 16); }

/* float32 -> bfloat16, round to nearest even, a NaN stays a quiet NaN: the one rule of every
 * bf16 output (vector forms, e.g. qmoe_f32_to_bf16_avx512, compute the same bits). */
static inline uint16_t qmoe_f32_to_bf16(float f)
{
    uint32_t b = qmoe_f32_to_bits(f);
    uint32_t r = (b + 0x7FFFu + ((b >> 16) & 1u)) >> 16, q = (b >> 16) | 0x40u;
    return (uint16_t)((b & 0x7FFFFFFFu) > 0x7F800000u ? q : r);
}

static inline float qmoe_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu;
    uint32_t man = h & 0x3FFu;
    if (exp == 0x1F) return qmoe_bits_to_f32(sign | 0x7F800000u | (man << 13)); /* inf / nan */
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24, exact in float */
        float f = (float)man * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    return qmoe_bits_to_f32(sign | ((exp + 112) << 23) | (man << 13));
}

/* Round-to-nearest-even float32 -> float16 (used by tools and tests to write <f2 data). */
static inline uint16_t qmoe_f32_to_f16(float f)
{
    uint32_t x = qmoe_f32_to_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t absx = x & 0x7FFFFFFFu;
    if (absx >= 0x7F800000u) return (uint16_t)(sign | 0x7C00u | (absx > 0x7F800000u ? 0x200u : 0));
    if (absx >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u); /* rounds past 65504 */
    if (absx < 0x38800000u) {                                   /* subnormal or zero in f16 */
        float a = qmoe_bits_to_f32(absx);
        /* scale to units of 2^-24 and round half to even via the FPU's default mode */
        float units = a * 16777216.0f;
        uint32_t r = (uint32_t)__builtin_rintf(units);
        return (uint16_t)(sign | r);
    }
    uint32_t mant = absx + 0xC8000FFFu + ((absx >> 13) & 1u); /* rebias exp by -112, round even */
    return (uint16_t)(sign | (mant >> 13));
}

#endif
