/*
 * Plain element accessors over a qmoe_gmm_params plan: the logical W[e][k][n], the weight scale
 * as float, and friends. Used by the reference kernel and by slow paths; fast kernels read the
 * layouts directly.
 */
#ifndef QMOE_CORE_GMM_ACCESS_H
#define QMOE_CORE_GMM_ACCESS_H

#include <string.h>

#include "core/gmm_params.h"
#include "core/halfconv.h"

static inline int qmoe_nibble(const uint8_t *bytes, int64_t index)
{
    int v = (bytes[index >> 1] >> ((index & 1) * 4)) & 0xF;
    return v >= 8 ? v - 16 : v;
}

static inline int qmoe_word_nibble(const int32_t *words, int64_t word, int j)
{
    uint32_t w;
    memcpy(&w, &words[word], sizeof w);
    int v = (int)((w >> (4 * j)) & 0xFu);
    return v >= 8 ? v - 16 : v;
}

/* Where expert e's weight starts: the stacked tensor's base with *e_off = e * w_s[0] elements, or
 * with a per-expert list (qmoe_gmm_params.w_list) the expert's own base with *e_off = 0. */
static inline const void *qmoe_w_expert(const qmoe_gmm_params *p, int64_t e, int64_t *e_off)
{
    if (p->w_list) {
        *e_off = 0;
        return p->w_list[e];
    }
    *e_off = e * p->w_s[0];
    return p->w;
}

static inline int qmoe_w_get(const qmoe_gmm_params *p, int64_t e, int64_t k, int64_t n)
{
    const int64_t *s = p->w_s;
    int64_t eo;
    const void *w = qmoe_w_expert(p, e, &eo);
    switch ((qmoe_wlayout)p->w_layout) {
    case QMOE_W_INT8_ND:
        return ((const int8_t *)w)[eo + k * s[1] + n * s[2]];
    case QMOE_W_INT8_NZ:
        return ((const int8_t *)w)[eo + (n / 32) * s[1] + (k / 16) * s[2] + (k % 16) * s[3] +
                                   (n % 32) * s[4]];
    case QMOE_W_INT4_ND:
        return qmoe_nibble(w, eo + k * s[1] + n * s[2]);
    case QMOE_W_INT4_NZ:
        return qmoe_nibble(w, eo + (n / 64) * s[1] + (k / 16) * s[2] + (k % 16) * s[3] +
                                  (n % 64) * s[4]);
    case QMOE_W_INT32_ND:
        return qmoe_word_nibble(w, eo + k * s[1] + (n / 8) * s[2], (int)(n % 8));
    case QMOE_W_INT32_NZ:
        return qmoe_word_nibble(w,
                                eo + (n / 64) * s[1] + (k / 16) * s[2] + (k % 16) * s[3] +
                                    ((n % 64) / 8) * s[4],
                                (int)(n % 8));
    }
    return 0;
}

/* weight_scale[e][g][n] as float (g is 0 for per-channel). */
static inline float qmoe_ws_get(const qmoe_gmm_params *p, int64_t e, int64_t g, int64_t n)
{
    const void *ws = p->ws_list ? p->ws_list[e] : p->ws;
    int64_t i = (p->ws_list ? 0 : e * p->ws_s[0]) + g * p->ws_s[1] + n * p->ws_s[2];
    switch ((qmoe_scale_type)p->ws_type) {
    case QMOE_SCALE_F32: return ((const float *)ws)[i];
    case QMOE_SCALE_F16: return qmoe_f16_to_f32(((const uint16_t *)ws)[i]);
    case QMOE_SCALE_BF16: return qmoe_bf16_to_f32(((const uint16_t *)ws)[i]);
    case QMOE_SCALE_U64_F32: {
        uint64_t word;
        memcpy(&word, (const uint8_t *)ws + 8 * i, sizeof word);
        return qmoe_bits_to_f32((uint32_t)word);
    }
    }
    return 0.0f;
}

/* weight_scale[e][g][n]'s 16 bits, for a float16 / bfloat16 weight scale (ws_type F16 / BF16). */
static inline uint16_t qmoe_ws_bits16(const qmoe_gmm_params *p, int64_t e, int64_t g, int64_t n)
{
    const void *ws = p->ws_list ? p->ws_list[e] : p->ws;
    int64_t i = (p->ws_list ? 0 : e * p->ws_s[0]) + g * p->ws_s[1] + n * p->ws_s[2];
    return ((const uint16_t *)ws)[i];
}

/* The swiglu_limit clamp of the weight-list operator (vendor definition, docs/ops/): the activated
 * half at most `limit`, the linear half within [-limit, limit]. Written with comparisons, not
 * fminf, so a NaN stays NaN (the row then gets its NaN scale, as without the clamp). */
static inline void qmoe_swiglu_clamp(float limit, float *act, float *lin)
{
    if (*act > limit) *act = limit;
    if (*lin > limit) *lin = limit;
    if (*lin < -limit) *lin = -limit;
}

static inline int qmoe_x_get(const qmoe_gmm_params *p, int64_t m, int64_t k)
{
    return p->x[m * p->x_s[0] + k * p->x_s[1]];
}

#endif
