/*
 * float16 / bfloat16 -> float32 on 4 lanes at a time (fcvtl, or a shift): exact, the values of
 * core/halfconv.h's rule; the prepacked 16-bit weight scales of both ARM tables.
 */
#if defined(__aarch64__)
#include <arm_neon.h>

#include "core/halfconv.h"
#include "kernels/arm/parts.h"

void qmoe_half_to_f32_neon(float *d, const uint16_t *s, int bf16, int64_t n)
{
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        uint16x4_t h = vld1_u16(s + j);
        float32x4_t f = bf16 ? vreinterpretq_f32_u32(vshll_n_u16(h, 16))
                             : vcvt_f32_f16(vreinterpret_f16_u16(h));
        vst1q_f32(d + j, f);
    }
    for (; j < n; j++) d[j] = bf16 ? qmoe_bf16_to_f32(s[j]) : qmoe_f16_to_f32(s[j]);
}
#endif
