/*
 * GroupedMatmulSwigluQuant on a kernel. A block (expert e, rows [m0, m1), output columns [j0, j1);
 * output column j pairs weight column j, activated, with j + N/2, the linear gate) computes the
 * SwiGLU rows S into a float block `s` with row stride `lds`: fast kernels on the shared GEMM
 * driver (gemm_driver.h) with this operator's epilogue (epilogue_swiglu_quant.c), the reference
 * kernel in its own plain loops (gmm_reference.c). A second step turns complete S rows into int8
 * and the scale. Splitting work by rows or by columns is the caller's business; the per-element
 * arithmetic does not depend on the split, so results are bit-identical for any thread count.
 */
#ifndef QMOE_KERNELS_SWIGLU_QUANT_H
#define QMOE_KERNELS_SWIGLU_QUANT_H

#include <math.h>

#include "core/gmm_access.h"
#include "core/gmm_params.h"
#include "kernels/kernel.h"
#include "runtime/thread_ctx.h"

/* Whether the plan's SwiGLU is a variant the kernels' vector routines do not compute (an alpha or
 * a bias): then every kernel computes it with qmoe_swiglu_value, so all give the same bits. */
static inline int qmoe_swiglu_is_variant(const qmoe_gmm_params *p)
{
    return p->swiglu_alpha > 0.0f || p->swiglu_bias;
}

/* S of output column j of expert e from the dequantized halves a (column j) and l (j + N/2): the
 * options' bias, clamp and form (qmoe/qmoe.h), in float32, in the order written. */
static inline float qmoe_swiglu_value(const qmoe_gmm_params *p, int64_t e, int64_t j, float a, float l)
{
    if (p->swiglu_bias) {
        a += p->swiglu_bias[e * p->swiglu_bias_s0 + j];
        l += p->swiglu_bias[e * p->swiglu_bias_s0 + j + p->N2];
    }
    if (p->swiglu_limit > 0.0f) qmoe_swiglu_clamp(p->swiglu_limit, &a, &l);
    if (p->swiglu_alpha > 0.0f) return a / (1.0f + expf(-(p->swiglu_alpha * a))) * (l + 1.0f);
    float swish = a / (1.0f + expf(-a));
    return swish * l;
}

/* Scratchpad bytes one thread needs for blocks of at most `rows` x `cols` (the planner sizes the
 * device scratchpad with it; the block receives that slice in ctx->scratch). */
uint64_t qmoe_swiglu_quant_scratch_bytes(const qmoe_kernel_entry *k, const qmoe_gmm_params *p,
                                         int64_t rows, int64_t cols);
void qmoe_swiglu_quant_block(const qmoe_kernel_entry *k, const qmoe_gmm_params *p,
                             qmoe_thread_ctx *ctx, int64_t e, int64_t m0, int64_t m1, int64_t j0,
                             int64_t j1, float *s, int64_t lds);
/* Rows [m0, m1) of S (row r at s + (r - m0) * lds, N2 floats) -> output rows and scales. */
void qmoe_swiglu_quant_rows(const qmoe_kernel_entry *k, const qmoe_gmm_params *p, const float *s,
                            int64_t lds, int64_t m0, int64_t m1);

/* The reference kernel's block: the spec's formulas, one element at a time (gmm_reference.c). */
void qmoe_reference_swiglu_block(const qmoe_gmm_params *p, int64_t e, int64_t m0, int64_t m1,
                                 int64_t j0, int64_t j1, float *s, int64_t lds);

#endif
