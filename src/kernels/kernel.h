/*
 * The device-side kernel interface of GroupedMatmulSwigluQuant.
 *
 * A kernel computes SwiGLU rows S for one expert, rows [m0, m1), output columns [j0, j1) (each
 * output column j pairs weight column j, activated, with j + N/2, the linear gate), into a float
 * block `s` with row stride `lds`. A second step turns complete S rows into int8 and the scale.
 * Splitting work by rows or by columns is the driver's business; the per-element arithmetic must
 * not depend on the split, so results are bit-identical for any thread or device count.
 */
#ifndef QMOE_KERNELS_KERNEL_H
#define QMOE_KERNELS_KERNEL_H

#include "core/gmm_params.h"
#include "runtime/thread_ctx.h"

typedef struct qmoe_kernel_ops {
    int32_t id; /* qmoe_kernel */
    const char *name;
    /* Planner hints (0: no preference). row_block: rows per swiglu_block call that keep the
     * packed weight panel's reuse high (weights are rearranged once per call and column panel);
     * col_align: column ranges starting at multiples of it take the fast packing path. */
    int32_t row_block;
    int32_t col_align;
    /* Scratchpad bytes one thread needs for blocks of at most `rows` x `cols` (planner sizes the
     * device scratchpad with it; the kernel receives that slice in ctx->scratch). */
    uint64_t (*scratch_bytes)(const qmoe_gmm_params *p, int64_t rows, int64_t cols);
    void (*swiglu_block)(const qmoe_gmm_params *p, qmoe_thread_ctx *ctx, int64_t e, int64_t m0,
                         int64_t m1, int64_t j0, int64_t j1, float *s, int64_t lds);
    /* Rows [m0, m1) of S (row r at s + (r - m0) * lds, N2 floats) -> output rows and scales. */
    void (*quantize_rows)(const qmoe_gmm_params *p, const float *s, int64_t lds, int64_t m0,
                          int64_t m1);
} qmoe_kernel_ops;

/* The reference kernel: follows the spec literally, including the A8W4 high/low nibble split
 * with the caller's bias. The oracle of every other kernel. */
extern const qmoe_kernel_ops qmoe_kernel_reference;

/* The kernel for `requested` on this CPU (QMOE_KERNEL_AUTO: the fastest); NULL when the CPU cannot
 * run the requested one. */
const qmoe_kernel_ops *qmoe_kernel_lookup(int32_t requested);

/* One S row -> int8 row and scale, per the spec's quantization step: the scalar form of the one
 * rule every kernel follows (kernels/quant_rule.h); vector epilogues take its decisions from there
 * too, so every kernel gives the same bits on every row. */
void qmoe_quantize_row_scalar(const float *s, int64_t n2, int8_t *out, int64_t out_stride,
                              float *scale);

#endif
