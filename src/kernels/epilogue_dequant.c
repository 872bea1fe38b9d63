/*
 * The grouped matmul's epilogue on the shared GEMM driver (gemm_driver.h): per-token dequant of
 * the folded tile to the output's float type. A8W8 folded acc * xScale * scale already (xs NULL
 * here); A8W4 folded sum_g acc_g * scale_g and multiplies xScale last, as the vendor formula does.
 * The optional float32 bias comes after the scaling; one rounding to the output dtype.
 */
#include "ops/grouped_matmul_exec.h"

void qmoe_epilogue_dequant(const qmoe_gemm_block *B, const qmoe_gemm_tile *t)
{
    const gmm_dequant_out *o = B->out;
    const qmoe_gmm_params *p = B->p;
    const moe_view *out = &o->out;
    for (int64_t r = 0; r < t->rows; r++) {
        const float *fr = t->f + r * t->ldf;
        float xs = t->xs ? t->xs[r] : 1.0f;
        int64_t row = (t->m + r) * out->st[0];
        for (int64_t h = 0; h < 2; h++) {
            int64_t n0 = (h ? p->N2 : 0) + t->jc;
            const float *fh = fr + h * t->half;
            for (int64_t c = t->c_lo; c < t->c_hi; c++) {
                float v = fh[c];
                if (t->xs) v *= xs;
                if (o->bias.data)
                    v += ((const float *)o->bias.data)[B->e * o->bias.st[0] + (n0 + c) * o->bias.st[1]];
                moe_store(out, row + (n0 + c) * out->st[1], v);
            }
        }
    }
}
