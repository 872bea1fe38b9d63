/*
 * Reference kernel: the spec's formulas, written plainly, one output element at a time.
 * Clarity over speed — this is the oracle every other kernel is tested against.
 */
#include <math.h>

#include "core/gmm_access.h"
#include "kernels/swiglu_quant.h"
#include "qmoe/qmoe.h"

/* Dequantized C[m][n] of expert e before SwiGLU, in the spec's order: acc * xScale * ws, left to
 * right (the vendor kernel's; a scale near FLT_MAX times acc would overflow first the other way).
 * Per-group: the same product per group, summed in group order, so [E,1,N] equals [E,N]. */
static float dequant_a8w8(const qmoe_gmm_params *p, int64_t e, int64_t m, int64_t n)
{
    float xs = p->xs[m * p->xs_s];
    float c = 0.0f;
    for (int64_t g = 0; g < p->G; g++) {
        int32_t acc = 0;
        for (int64_t k = g * p->group_k; k < (g + 1) * p->group_k; k++)
            acc += qmoe_x_get(p, m, k) * qmoe_w_get(p, e, k, n);
        float term = (float)acc * xs * qmoe_ws_get(p, e, p->per_group ? g : 0, n);
        c = g == 0 ? term : c + term;
    }
    return c;
}

/* A8W4: x = 16*hi + lo + 8 with hi = floor(x/16), lo = (x & 0xF) - 8; the +8 term comes from the
 * caller's bias, which is honoured as given. */
static float dequant_a8w4(const qmoe_gmm_params *p, int64_t e, int64_t m, int64_t n)
{
    float c_high = 0.0f, c_low = 0.0f;
    for (int64_t g = 0; g < p->G; g++) {
        int32_t acc_high = 0, acc_low = 0;
        for (int64_t k = g * p->group_k; k < (g + 1) * p->group_k; k++) {
            int x = qmoe_x_get(p, m, k);
            int lo_bits = (int)((uint8_t)x & 0xF);
            int hi = (x - lo_bits) / 16; /* exact: floor(x / 16) */
            int lo = lo_bits - 8;
            int w = qmoe_w_get(p, e, k, n);
            acc_high += hi * w;
            acc_low += lo * w;
        }
        float ws = qmoe_ws_get(p, e, p->per_group ? g : 0, n);
        c_high += (float)acc_high * ws;
        c_low += (float)acc_low * ws;
    }
    float bias = p->bias[e * p->bias_s[0] + n * p->bias_s[1]];
    return (c_high * 16.0f + c_low + bias) * p->xs[m * p->xs_s];
}

static float dequant(const qmoe_gmm_params *p, int64_t e, int64_t m, int64_t n)
{
    return p->mode == QMOE_MODE_A8W8 ? dequant_a8w8(p, e, m, n) : dequant_a8w4(p, e, m, n);
}

void qmoe_reference_swiglu_block(const qmoe_gmm_params *p, int64_t e, int64_t m0, int64_t m1,
                                 int64_t j0, int64_t j1, float *s, int64_t lds)
{
    for (int64_t m = m0; m < m1; m++)
        for (int64_t j = j0; j < j1; j++) {
            float act = dequant(p, e, m, j);
            float gate = dequant(p, e, m, j + p->N2);
            s[(m - m0) * lds + (j - j0)] = qmoe_swiglu_value(p, e, j, act, gate);
        }
}
