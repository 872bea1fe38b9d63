/* The public float conversions (qmoe.h): core/halfconv.h's rules over arrays. */
#include "core/halfconv.h"
#include "core/status.h"

static qmoe_status check(const void *src, int64_t n, const void *dst)
{
    if (n < 0) return qmoe_fail(QMOE_ERR_PARAM_INVALID, "convert: n = %lld is negative", (long long)n);
    if (n > 0 && (!src || !dst))
        return qmoe_fail(QMOE_ERR_PARAM_NULLPTR, "convert: %s is a null pointer", !src ? "src" : "dst");
    qmoe_clear_error();
    return QMOE_OK;
}

qmoe_status qmoe_convert_f32_to_f16(const float *src, int64_t n, uint16_t *dst)
{
    qmoe_status st = check(src, n, dst);
    for (int64_t i = 0; !st && i < n; i++) dst[i] = qmoe_f32_to_f16(src[i]);
    return st;
}

qmoe_status qmoe_convert_f16_to_f32(const uint16_t *src, int64_t n, float *dst)
{
    qmoe_status st = check(src, n, dst);
    for (int64_t i = 0; !st && i < n; i++) dst[i] = qmoe_f16_to_f32(src[i]);
    return st;
}

qmoe_status qmoe_convert_f32_to_bf16(const float *src, int64_t n, uint16_t *dst)
{
    qmoe_status st = check(src, n, dst);
    for (int64_t i = 0; !st && i < n; i++) dst[i] = qmoe_f32_to_bf16(src[i]);
    return st;
}

qmoe_status qmoe_convert_bf16_to_f32(const uint16_t *src, int64_t n, float *dst)
{
    qmoe_status st = check(src, n, dst);
    for (int64_t i = 0; !st && i < n; i++) dst[i] = qmoe_bf16_to_f32(src[i]);
    return st;
}
