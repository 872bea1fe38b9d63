/*
 * The kernel registry (registry.c, built from the one list kernels/isa_list.h): what a kernel id
 * stands for on this CPU. A kernel is an instruction set's GEMM table (gmm_fast.h), which the
 * operator-agnostic driver (gemm_driver.h) runs with an operator's epilogue, and its element-wise
 * routines, which epilogues and element-wise operators call; the reference kernel has no GEMM
 * table and computes each operator in plain loops (the oracle of the others). Operators' own
 * pieces (their epilogues, their block runners) are theirs, not the kernel's.
 */
#ifndef QMOE_KERNELS_KERNEL_H
#define QMOE_KERNELS_KERNEL_H

#include <stdint.h>

#include "kernels/isa_list.h"

struct qmoe_gemm_isa;

/* The element-wise routines of one instruction set (vector code of the SwiGLU and per-token
 * quantization steps; the same bits on every set: kernels/quant_rule.h, core/gmm_access.h). */
typedef struct qmoe_eltwise_isa {
    const char *name;
    /* s[r][j] = swish(a) * g, a = (f[r][j] + corr[j]) * xs[r], g = (f[r][gate + j] + corr[gate +
     * j]) * xs[r], for r < rows, j < nc; xs NULL: no xs factor (A8W8 folded it in already).
     * limit > 0: a and g are first clamped exactly as qmoe_swiglu_clamp does (core/gmm_access.h;
     * the weight-list operator's swiglu_limit), so every kernel gives the reference's clamped
     * values; limit 0: no clamp, and no cost (the test is made once per call, not per element). */
    void (*swiglu)(int64_t rows, int64_t nc, const float *f, int64_t ldf, int64_t gate,
                   const float *corr, const float *xs, float limit, float *s, int64_t lds);
    /* One S row -> int8 and scale (the spec's step 4). */
    void (*quantize_row)(const float *s, int64_t n2, int8_t *out, int64_t out_stride,
                         float *scale);
} qmoe_eltwise_isa;

/* The portable C routines: the portable and the reference kernel's (quant_rule.c); and the
 * qmoe_eltwise_<eltwise> of every kernel in kernels/isa_list.h (epilogue_<set>.c). */
extern const qmoe_eltwise_isa qmoe_eltwise_portable;
#define QMOE_ELTWISE_DECLARE_(SET, name, arch, suffix, needs, eltwise, ...)                       \
    extern const qmoe_eltwise_isa qmoe_eltwise_##eltwise;
QMOE_ISA_LIST(QMOE_ELTWISE_DECLARE_, QMOE_ISA_SKIP)
#undef QMOE_ELTWISE_DECLARE_

typedef struct qmoe_kernel_entry {
    int32_t id; /* qmoe_kernel */
    const char *name;
    const struct qmoe_gemm_isa *gemm; /* NULL: the reference kernel */
    const qmoe_eltwise_isa *eltwise;
} qmoe_kernel_entry;

/* The kernel for `requested` on this CPU (QMOE_KERNEL_AUTO: the fastest, capped by QMOE_ISA);
 * NULL when the CPU (or this build) cannot run the requested one, or it is no kernel id. */
const qmoe_kernel_entry *qmoe_kernel_lookup(int32_t requested);

/* Planner hints (0: no preference). Rows per block call that keep the packed weight panel's
 * reuse high (the GEMM table's row_block); column ranges starting at multiples of the alignment
 * take the driver's fast packing path. */
int32_t qmoe_kernel_row_block(const qmoe_kernel_entry *k);
int32_t qmoe_kernel_col_align(const qmoe_kernel_entry *k);
/* Rows of the driver's accumulator block (0: no preference): a block whose rows are a multiple
 * of it runs every row on the full-tile path, so planners cut an expert's rows there. */
int32_t qmoe_kernel_row_align(const qmoe_kernel_entry *k);

/* One S row -> int8 row and scale, per the spec's quantization step: the scalar form of the one
 * rule every kernel follows (kernels/quant_rule.h); vector epilogues take its decisions from there
 * too, so every kernel gives the same bits on every row. */
void qmoe_quantize_row_scalar(const float *s, int64_t n2, int8_t *out, int64_t out_stride,
                              float *scale);

#endif
