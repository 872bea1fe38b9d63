/* Decoding ggml's q8_0 and q4_0 blocks into integers and scales: both formats are an integer
 * times one fp16 scale per 32 values, so qmoe's int8 / int4 per-group weights hold them exactly. */
#include <string.h>

#include "qmoe_ggml.h"

int qg_type_supported(enum ggml_type type)
{
    return type == GGML_TYPE_Q8_0 || type == GGML_TYPE_Q4_0;
}

static float half_at(const uint8_t *p)
{
    ggml_fp16_t h;
    memcpy(&h, p, sizeof h);
    return ggml_fp16_to_fp32(h);
}

void qg_decode_row(enum ggml_type type, const void *row, int64_t K, int8_t *q, float *d)
{
    const uint8_t *b = row;
    for (int64_t blk = 0; blk < K / QG_QK; blk++) {
        int8_t *v = q + blk * QG_QK;
        d[blk] = half_at(b);
        if (type == GGML_TYPE_Q8_0) {
            memcpy(v, b + 2, QG_QK);
            b += QG_Q8_0_BYTES;
        } else { /* q4_0: byte j holds value j (low nibble) and value j + 16 (high nibble) */
            for (int j = 0; j < QG_QK / 2; j++) {
                v[j] = (int8_t)((b[2 + j] & 0x0F) - 8);
                v[j + QG_QK / 2] = (int8_t)((b[2 + j] >> 4) - 8);
            }
            b += QG_Q4_0_BYTES;
        }
    }
}
