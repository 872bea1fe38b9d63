/*
 * The epilogue of GroupedMatmulSwigluQuant on the shared GEMM driver (gemm_driver.h): SwiGLU of
 * the two halves (plus the A8W4 correction and xScale) into the S block, and S rows -> int8 +
 * scale. The per-element arithmetic is the isa table's (gmm_fast.h).
 */
#include <string.h>

#include "core/prepack.h"
#include "kernels/gemm_driver.h"

static void swiglu_tile(const qmoe_gemm_block *B, const qmoe_gemm_tile *t)
{
    const qmoe_gemm_isa *isa = B->isa;
    float limit = B->p->swiglu_limit;
    float *s = B->out;
    float *srow = s + (t->m - B->m0) * B->ld + (t->jc + t->c_lo - B->j0);
    if (t->c_lo % QMOE_PK_UNIT == 0) {
        isa->swiglu(t->rows, t->c_hi - t->c_lo, t->f + t->c_lo, t->ldf, t->half,
                    t->corr + t->c_lo, t->xs, limit, srow, B->ld);
        return;
    }
    /* vector epilogues read whole 16-column groups: start on one, then copy (only prepacked
     * panels, which may start before the block's first column, come here) */
    int64_t c16 = t->c_lo / QMOE_PK_UNIT * QMOE_PK_UNIT;
    isa->swiglu(t->rows, t->c_hi - c16, t->f + c16, t->ldf, t->half, t->corr + c16, t->xs, limit,
                t->spare, QMOE_PP_COLS);
    for (int64_t r = 0; r < t->rows; r++)
        memcpy(srow + r * B->ld, t->spare + r * QMOE_PP_COLS + (t->c_lo - c16),
               sizeof(float) * (size_t)(t->c_hi - t->c_lo));
}

void qmoe_fast_swiglu_block(const qmoe_gemm_isa *isa, const qmoe_gmm_params *p,
                            qmoe_thread_ctx *ctx, int64_t e, int64_t m0, int64_t m1, int64_t j0,
                            int64_t j1, float *s, int64_t lds)
{
    qmoe_gemm_block B = {isa, p, ctx, e, m0, m1, j0, j1, swiglu_tile, s, lds, NULL};
    qmoe_gemm_run(&B);
}

void qmoe_fast_quantize_rows(const qmoe_gemm_isa *isa, const qmoe_gmm_params *p, const float *s,
                             int64_t lds, int64_t m0, int64_t m1)
{
    for (int64_t m = m0; m < m1; m++)
        isa->quantize_row(s + (m - m0) * lds, p->N2, p->out + m * p->out_s[0], p->out_s[1],
                          p->out_scale + m * p->out_scale_s);
}
