/*
 * GroupedMatmulSwigluQuant's epilogue on the shared GEMM driver (gemm_driver.h): SwiGLU of the
 * two halves (plus the A8W4 correction and xScale) into the S block, and S rows -> int8 + scale,
 * with the kernel's element-wise routines (kernel.h). The reference kernel keeps its own plain
 * path (gmm_reference.c).
 */
#include "kernels/swiglu_quant.h"

#include <string.h>

#include "core/prepack.h"
#include "kernels/gemm_driver.h"

/* Where the epilogue writes: the S block and the routines that compute it. */
typedef struct swiglu_out {
    float *s;
    const qmoe_eltwise_isa *eltwise;
} swiglu_out;

/* The variant (an alpha or a bias) element by element, the halves formed as the portable
 * routine forms them (corr, then xScale), so every kernel gives the reference's bits. */
static void variant_tile(const qmoe_gemm_block *B, const qmoe_gemm_tile *t, float *srow)
{
    for (int64_t r = 0; r < t->rows; r++)
        for (int64_t c = t->c_lo; c < t->c_hi; c++) {
            float a = t->f[r * t->ldf + c] + t->corr[c];
            float l = t->f[r * t->ldf + t->half + c] + t->corr[t->half + c];
            if (t->xs) a *= t->xs[r], l *= t->xs[r];
            srow[r * B->ld + (c - t->c_lo)] = qmoe_swiglu_value(B->p, B->e, t->jc + c, a, l);
        }
}

static void swiglu_tile(const qmoe_gemm_block *B, const qmoe_gemm_tile *t)
{
    const swiglu_out *o = B->out;
    void (*swiglu)(int64_t, int64_t, const float *, int64_t, int64_t, const float *,
                   const float *, float, float *, int64_t) = o->eltwise->swiglu;
    float limit = B->p->swiglu_limit;
    float *srow = o->s + (t->m - B->m0) * B->ld + (t->jc + t->c_lo - B->j0);
    if (qmoe_swiglu_is_variant(B->p)) {
        variant_tile(B, t, srow);
        return;
    }
    if (t->c_lo % QMOE_PK_UNIT == 0) {
        swiglu(t->rows, t->c_hi - t->c_lo, t->f + t->c_lo, t->ldf, t->half, t->corr + t->c_lo,
               t->xs, limit, srow, B->ld);
        return;
    }
    /* vector epilogues read whole 16-column groups: start on one, then copy (only prepacked
     * panels, which may start before the block's first column, come here) */
    int64_t c16 = t->c_lo / QMOE_PK_UNIT * QMOE_PK_UNIT;
    swiglu(t->rows, t->c_hi - c16, t->f + c16, t->ldf, t->half, t->corr + c16, t->xs, limit,
           t->spare, QMOE_PP_COLS);
    for (int64_t r = 0; r < t->rows; r++)
        memcpy(srow + r * B->ld, t->spare + r * QMOE_PP_COLS + (t->c_lo - c16),
               sizeof(float) * (size_t)(t->c_hi - t->c_lo));
}

uint64_t qmoe_swiglu_quant_scratch_bytes(const qmoe_kernel_entry *k, const qmoe_gmm_params *p,
                                         int64_t rows, int64_t cols)
{
    return k->gemm ? qmoe_gemm_scratch_bytes(k->gemm, p, rows, cols) : 0;
}

void qmoe_swiglu_quant_block(const qmoe_kernel_entry *k, const qmoe_gmm_params *p,
                             qmoe_thread_ctx *ctx, int64_t e, int64_t m0, int64_t m1, int64_t j0,
                             int64_t j1, float *s, int64_t lds)
{
    if (!k->gemm) {
        qmoe_reference_swiglu_block(p, e, m0, m1, j0, j1, s, lds);
        return;
    }
    swiglu_out o = {s, k->eltwise};
    qmoe_gemm_block B = {k->gemm, p, ctx, e, m0, m1, j0, j1, swiglu_tile, &o, lds, NULL};
    qmoe_gemm_run(&B);
}

void qmoe_swiglu_quant_rows(const qmoe_kernel_entry *k, const qmoe_gmm_params *p, const float *s,
                            int64_t lds, int64_t m0, int64_t m1)
{
    void (*quantize_row)(const float *, int64_t, int8_t *, int64_t, float *) =
        k->eltwise->quantize_row;
    for (int64_t m = m0; m < m1; m++)
        quantize_row(s + (m - m0) * lds, p->N2, p->out + m * p->out_s[0], p->out_s[1],
                     p->out_scale + m * p->out_scale_s);
}
