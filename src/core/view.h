/*
 * A tensor as operators and their epilogues read it (base pointer, dtype, shape and element
 * strides) and the element access helpers over it: float32 / float16 / bfloat16 widened exactly,
 * rounded once to nearest even on the way back (core/halfconv.h's rules). Named moe_ for the
 * MoE operators that use them most; every layer from the kernels up may.
 */
#ifndef QMOE_CORE_VIEW_H
#define QMOE_CORE_VIEW_H

#include <stdint.h>
#include <string.h>

#include "core/halfconv.h"
#include "qmoe/qmoe.h"

/* A tensor as the kernels read it: base pointer, dtype, shape and element strides. */
typedef struct moe_view {
    char *data; /* NULL: absent (optional argument) */
    int32_t dtype;
    int32_t nd;
    int64_t shape[QMOE_MAX_DIMS];
    int64_t st[QMOE_MAX_DIMS];
} moe_view;

/* ---------------------------------------------------------------- element access -------------- */

static inline float moe_load(const moe_view *v, int64_t off)
{
    switch (v->dtype) {
    case QMOE_DTYPE_FLOAT32: return ((const float *)v->data)[off];
    case QMOE_DTYPE_FLOAT16: return qmoe_f16_to_f32(((const uint16_t *)v->data)[off]);
    case QMOE_DTYPE_BFLOAT16: return qmoe_bf16_to_f32(((const uint16_t *)v->data)[off]);
    case QMOE_DTYPE_INT8: return (float)((const int8_t *)v->data)[off];
    case QMOE_DTYPE_INT32: return (float)((const int32_t *)v->data)[off];
    default: return 0.0f;
    }
}

/* Round-to-nearest-even float32 -> bfloat16 (NaN stays NaN): core/halfconv.h's rule. */
static inline uint16_t moe_f32_to_bf16(float f) { return qmoe_f32_to_bf16(f); }

static inline void moe_store(const moe_view *v, int64_t off, float f)
{
    switch (v->dtype) {
    case QMOE_DTYPE_FLOAT32: ((float *)v->data)[off] = f; break;
    case QMOE_DTYPE_FLOAT16: ((uint16_t *)v->data)[off] = qmoe_f32_to_f16(f); break;
    case QMOE_DTYPE_BFLOAT16: ((uint16_t *)v->data)[off] = moe_f32_to_bf16(f); break;
    default: break;
    }
}

static inline int64_t moe_load_index(const moe_view *v, int64_t off)
{
    return v->dtype == QMOE_DTYPE_INT64 ? ((const int64_t *)v->data)[off]
                                        : (int64_t)((const int32_t *)v->data)[off];
}

static inline void moe_store_index(const moe_view *v, int64_t off, int64_t value)
{
    if (v->dtype == QMOE_DTYPE_INT64) ((int64_t *)v->data)[off] = value;
    else ((int32_t *)v->data)[off] = (int32_t)value;
}

/* n elements from off with element stride `stride` -> float32 (exact widening). */
static inline void moe_load_row(const moe_view *v, int64_t off, int64_t stride, int64_t n,
                                float *dst)
{
    switch (v->dtype) {
    case QMOE_DTYPE_FLOAT32: {
        const float *s = (const float *)v->data + off;
        if (stride == 1) memcpy(dst, s, (size_t)n * sizeof *s);
        else
            for (int64_t j = 0; j < n; j++) dst[j] = s[j * stride];
        break;
    }
    case QMOE_DTYPE_BFLOAT16: {
        const uint16_t *s = (const uint16_t *)v->data + off;
        if (stride == 1)
            for (int64_t j = 0; j < n; j++) dst[j] = qmoe_bits_to_f32((uint32_t)s[j] << 16);
        else
            for (int64_t j = 0; j < n; j++) dst[j] = qmoe_bits_to_f32((uint32_t)s[j * stride] << 16);
        break;
    }
    default:
        for (int64_t j = 0; j < n; j++) dst[j] = moe_load(v, off + j * stride);
        break;
    }
}

/* float32 -> n elements of the view's dtype, rounded to nearest even. */
static inline void moe_store_row(const moe_view *v, int64_t off, int64_t stride, int64_t n,
                                 const float *src)
{
    switch (v->dtype) {
    case QMOE_DTYPE_FLOAT32: {
        float *d = (float *)v->data + off;
        if (stride == 1) memcpy(d, src, (size_t)n * sizeof *d);
        else
            for (int64_t j = 0; j < n; j++) d[j * stride] = src[j];
        break;
    }
    case QMOE_DTYPE_BFLOAT16: {
        uint16_t *d = (uint16_t *)v->data + off;
        for (int64_t j = 0; j < n; j++) d[j * stride] = moe_f32_to_bf16(src[j]);
        break;
    }
    default:
        for (int64_t j = 0; j < n; j++) moe_store(v, off + j * stride, src[j]);
        break;
    }
}

/* Element offset of row `row` of a view whose leading nd-1 axes are flattened into rows. */
static inline int64_t moe_row_offset(const moe_view *v, int64_t row)
{
    int64_t off = 0;
    for (int d = v->nd - 2; d >= 0; d--) {
        int64_t n = v->shape[d];
        if (n <= 0) return 0;
        off += (row % n) * v->st[d];
        row /= n;
    }
    return off;
}

#endif
