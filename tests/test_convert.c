/* The public float conversions (qmoe.h, qmoe_convert_*): bfloat16 against the rounding written
 * here, float16 against the compiler's _Float16 where it has one; edge values; argument errors. */
#include <math.h>
#include <string.h>

#include "qmoe/qmoe.h"
#include "support/testlib.h"

static uint32_t bits(float f)
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

static uint16_t bf16_here(float f)
{
    uint32_t b = bits(f);
    if ((b & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((b >> 16) | 0x40u); /* NaN stays NaN */
    return (uint16_t)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}

int main(void)
{
    enum { N = 4096 };
    static float v[N], back[N];
    static uint16_t h[N];
    qt_rng r = {3};
    for (int i = 0; i < N; i++) v[i] = qt_uniform(&r, -70000.0f, 70000.0f) * (i % 7 ? 1e-3f : 1.0f);
    const float edge[] = {0.0f, -0.0f, INFINITY, -INFINITY, 65504.0f, 65520.0f, 6.1e-5f, 5.96e-8f, 1e-10f};
    memcpy(v, edge, sizeof edge);
    CHECK(qmoe_convert_f32_to_bf16(v, N, h) == QMOE_OK);
    int bad = 0;
    for (int i = 0; i < N; i++) bad += h[i] != bf16_here(v[i]);
    CHECK_MSG(bad == 0, "%d bf16 roundings differ", bad);
    CHECK(qmoe_convert_bf16_to_f32(h, N, back) == QMOE_OK);
    for (int i = 0; i < N; i++) bad += bits(back[i]) != (uint32_t)h[i] << 16;
    CHECK_MSG(bad == 0, "bf16 widening is not exact");
    float nan = NAN;
    uint16_t hn;
    CHECK(qmoe_convert_f32_to_bf16(&nan, 1, &hn) == QMOE_OK && (hn & 0x7F80) == 0x7F80 && (hn & 0x7F));
#ifdef __FLT16_MAX__
    CHECK(qmoe_convert_f32_to_f16(v, N, h) == QMOE_OK);
    for (int i = 0; i < N; i++) {
        _Float16 want = (_Float16)v[i];
        uint16_t wb;
        memcpy(&wb, &want, sizeof wb);
        bad += h[i] != wb;
    }
    CHECK_MSG(bad == 0, "%d f16 roundings differ from _Float16", bad);
    CHECK(qmoe_convert_f16_to_f32(h, N, back) == QMOE_OK);
    for (int i = 0; i < N; i++) {
        _Float16 x;
        memcpy(&x, &h[i], sizeof x);
        bad += bits(back[i]) != bits((float)x);
    }
    CHECK_MSG(bad == 0, "f16 widening differs from _Float16");
#else
    fprintf(stderr, "convert: no _Float16 in this compiler: float16 checked by round trip only\n");
    CHECK(qmoe_convert_f32_to_f16(v, N, h) == QMOE_OK && qmoe_convert_f16_to_f32(h, N, back) == QMOE_OK);
#endif
    /* errors write nothing */
    uint16_t keep = 0x1234;
    CHECK(qmoe_convert_f32_to_f16(v, -1, &keep) == QMOE_ERR_PARAM_INVALID && keep == 0x1234);
    CHECK(qmoe_convert_f32_to_bf16(NULL, 1, &keep) == QMOE_ERR_PARAM_NULLPTR && keep == 0x1234);
    CHECK(qmoe_convert_bf16_to_f32(&keep, 1, NULL) == QMOE_ERR_PARAM_NULLPTR);
    CHECK(qmoe_convert_f16_to_f32(NULL, 0, NULL) == QMOE_OK);
    return qt_finish("convert");
}
