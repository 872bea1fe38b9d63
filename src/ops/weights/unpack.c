/*
 * Reading the integers and scales back out of prepacked weights (qmoe_weights_unpack,
 * qmoe_weights_unpack_scales, qmoe/weights.h): a program that keeps only the prepacked object
 * (not the raw weights beside it) can still give the weights back, e.g. a ggml buffer's
 * get_tensor. The inverse of the record layout of core/prepack.h, common to every kernel: byte
 * (c, t) of a unit step is W[4q + t][c] + off.
 */
#include <stddef.h>
#include <string.h>

#include "core/gmm_params.h"
#include "core/prepack.h"
#include "core/status.h"
#include "core/tensor.h"
#include "kernels/gmm_fast.h"
#include "qmoe/weights.h"

#define INVALID(rule, arg, ...) qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_##rule, arg, __VA_ARGS__)
#define NULLPTR(arg, ...) qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, arg, __VA_ARGS__)

/* The checks both unpack calls share. */
static qmoe_status check_expert(const struct qmoe_weights *pp, int64_t expert, const void *out,
                                const char *out_name)
{
    if (!pp) return NULLPTR("weights", "unpack: weights is a null pointer");
    if (!out) return NULLPTR(out_name, "unpack: %s is a null pointer", out_name);
    if (pp->magic != QMOE_PP_MAGIC || pp->version != QMOE_PP_VERSION || pp->build != &qmoe_pp_build_tag)
        return INVALID(UNSUPPORTED, "weights",
                       "unpack: prepacked weights of another qmoe build or layout version");
    if (expert < 0 || expert >= pp->E)
        return INVALID(VALUE, "expert", "unpack: expert %lld is outside [0, %lld)", (long long)expert,
                       (long long)pp->E);
    if (expert >= pp->filled)
        return INVALID(VALUE, "expert", "unpack: expert %lld is not packed yet (%lld of %lld are)",
                       (long long)expert, (long long)pp->filled, (long long)pp->E);
    return QMOE_OK;
}

qmoe_status qmoe_weights_unpack_scales(const qmoe_weights *weights, int64_t expert, qmoe_dtype dtype,
                                       void *scales)
{
    const struct qmoe_weights *pp = weights;
    qmoe_status st = check_expert(pp, expert, scales, "scales");
    if (st) return st;
    const qmoe_dtype kept = pp->ws_kind == QMOE_SCALE_F16    ? QMOE_DTYPE_FLOAT16
                            : pp->ws_kind == QMOE_SCALE_BF16 ? QMOE_DTYPE_BFLOAT16
                                                             : QMOE_DTYPE_FLOAT32;
    if (dtype != kept)
        return INVALID(DTYPE, "dtype", "unpack: the object keeps its scales as %s, not %s",
                       qmoe_dtype_name(kept), qmoe_dtype_name(dtype));
    /* per record [G][128]: element g * 128 + h * 64 + c is column h * N2 + panel * 64 + c */
    const size_t es = kept == QMOE_DTYPE_FLOAT32 ? 4 : 2;
    const int64_t G = pp->G, N = pp->N;
    for (int64_t i = 0; i < pp->panels; i++) {
        const int64_t jc = i * QMOE_PP_COLS, nc = pp->N2 - jc < QMOE_PP_COLS ? pp->N2 - jc : QMOE_PP_COLS;
        const int64_t r = expert * pp->panels + i;
        if (pp->ws_block) { /* base * multiplier, as the driver widens them */
            const int8_t *q = (const int8_t *)pp->ws + (size_t)(r * G * QMOE_PP_LD);
            const float *base = pp->wsb + (size_t)(r * pp->nblk * QMOE_PP_LD);
            for (int64_t g = 0; g < G; g++)
                for (int64_t h = 0; h < 2; h++)
                    for (int64_t c = 0; c < nc; c++) {
                        ((float *)scales)[g * N + h * pp->N2 + jc + c] =
                            qmoe_pp_block_scale(q, base, pp->ws_block, g, h * QMOE_PP_COLS + c);
                    }
            continue;
        }
        const uint8_t *rec = (const uint8_t *)pp->ws + (size_t)(r * G * QMOE_PP_LD) * es;
        for (int64_t g = 0; g < G; g++)
            for (int64_t h = 0; h < 2; h++)
                memcpy((uint8_t *)scales + (size_t)(g * N + h * pp->N2 + jc) * es,
                       rec + (size_t)(g * QMOE_PP_LD + h * QMOE_PP_COLS) * es, (size_t)nc * es);
    }
    qmoe_clear_error();
    return QMOE_OK;
}

qmoe_status qmoe_weights_unpack(const qmoe_weights *weights, int64_t expert, int8_t *values)
{
    const struct qmoe_weights *pp = weights;
    qmoe_status st = check_expert(pp, expert, values, "values");
    if (st) return st;
    const int int4 = pp->mode == QMOE_MODE_A8W4 || pp->codes; /* 4 bits a value stored */
    const int off = pp->mode == QMOE_MODE_A8W4 ? 8 : 128;
    const int64_t steps = pp->Kp / 4, N = pp->N;
    for (int64_t i = 0; i < pp->panels; i++) {
        const uint8_t *rec = pp->w + (uint64_t)expert * pp->expert_wbytes + (uint64_t)i * pp->panel_wbytes;
        const int64_t jc = i * QMOE_PP_COLS, nu = qmoe_pp_units(pp, i);
        const int64_t nc = pp->N2 - jc < QMOE_PP_COLS ? pp->N2 - jc : QMOE_PP_COLS;
        for (int64_t h = 0; h < 2; h++)
            for (int64_t q = 0; q < steps; q++)
                for (int64_t u = 0; u < nu; u++) {
                    /* the step's index in the record: halves, then steps, then units */
                    const int64_t s = (h * steps + q) * nu + u;
                    for (int t = 0; t < 4; t++) {
                        const int64_t pos = 4 * q + t, g = pos / pp->gkp, kk = pos % pp->gkp;
                        if (kk >= pp->gk) continue; /* group padding */
                        const int64_t k = g * pp->gk + kk;
                        for (int c = 0; c < QMOE_PK_UNIT; c++) {
                            const int64_t col = u * QMOE_PK_UNIT + c;
                            if (col >= nc) break;
                            const int b = 4 * c + t;
                            int v;
                            if (pp->bits6) { /* 48 bytes a step: core/prepack.h */
                                const uint8_t *st6 = rec + s * QMOE_PP_STEP6;
                                uint8_t x = st6[b & 31], hb = st6[32 + (b & 15)];
                                v = (b < 32 ? x & 0xF : x >> 4) | (hb >> (2 * (b / 16)) & 3) << 4;
                                v += 96;
                            } else if (int4) { /* 32 bytes a step: byte b holds v[b] | v[b + 32] << 4 */
                                uint8_t x = rec[s * 32 + (b & 31)];
                                v = b < 32 ? x & 0xF : x >> 4;
                                if (pp->codes) v = pp->tbl[v];
                            } else {
                                v = rec[s * QMOE_PK_STEP + b];
                            }
                            values[k * N + h * pp->N2 + jc + col] = (int8_t)(v - off);
                        }
                    }
                }
    }
    qmoe_clear_error();
    return QMOE_OK;
}
