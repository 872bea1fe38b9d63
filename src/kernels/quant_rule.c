/*
 * The scalar form of the quantization rule (quant_rule.h): the reference kernel's and the
 * portable kernel's epilogue, and the tail / strided fallback of the vector ones; and the
 * portable element-wise routines.
 */
#include "kernels/gmm_fast.h"
#include "kernels/kernel.h"
#include "kernels/quant_rule.h"

void qmoe_quantize_row_scalar(const float *s, int64_t n2, int8_t *out, int64_t out_stride,
                              float *scale)
{
    float amax = 0.0f;
    int has_nan = 0;
    for (int64_t j = 0; j < n2; j++) qmoe_qrule_amax(s[j], &amax, &has_nan);
    float sc;
    if (!qmoe_qrule_scale(amax, has_nan, &sc)) {
        for (int64_t j = 0; j < n2; j++) out[j * out_stride] = 0;
    } else {
        for (int64_t j = 0; j < n2; j++) out[j * out_stride] = qmoe_qrule_value(s[j], sc);
    }
    *scale = sc;
}

const qmoe_eltwise_isa qmoe_eltwise_portable = {
    .name = "portable",
    .swiglu = qmoe_swiglu_portable,
    .quantize_row = qmoe_quantize_row_scalar,
};
