/*
 * The operator-agnostic int8 GEMM driver (gemm_driver.c) and its epilogue interface.
 *
 * An operator hands the driver a block (expert e, rows [m0, m1), output columns [j0, j1) of each
 * of the two column halves, weight columns j and N2 + j) and an epilogue; the driver packs or
 * streams the weights, runs the isa's micro-kernels and folds the exact int32 accumulators with
 * the weight scales (and xScale for A8W8) into a float tile, which it hands to the epilogue row
 * block by row block. The epilogue's arithmetic must not depend on the block split, so results
 * stay bit-identical for any thread count.
 */
#ifndef QMOE_KERNELS_GEMM_DRIVER_H
#define QMOE_KERNELS_GEMM_DRIVER_H

#include "kernels/gmm_fast.h"

/* One folded float tile: rows [m, m + rows), output columns jc + [c_lo, c_hi) of both halves. */
typedef struct qmoe_gemm_tile {
    int64_t m, rows;
    int64_t jc, c_lo, c_hi;
    int64_t half;        /* the second half's columns are at f + half, corr + half */
    const float *f;      /* f[r * ldf + c] (row r of the tile, column c of the panel) */
    int64_t ldf;
    const float *corr;   /* A8W4 SwiGLU correction per column (0 for A8W8), both halves */
    const float *xs;     /* xScale of the rows when the epilogue applies it (A8W4), else NULL */
    float *spare;        /* prepacked weights: room for rows x QMOE_PP_COLS floats, else NULL */
} qmoe_gemm_tile;

struct qmoe_gemm_block;
typedef void (*qmoe_gemm_epilogue)(const struct qmoe_gemm_block *B, const qmoe_gemm_tile *t);

typedef struct qmoe_gemm_block {
    const qmoe_gemm_isa *isa;
    const qmoe_gmm_params *p;
    qmoe_thread_ctx *ctx;
    int64_t e, m0, m1, j0, j1;
    qmoe_gemm_epilogue epilogue;
    void *out;     /* the epilogue's destination, its own business */
    int64_t ld;
    int32_t *dump; /* tests only (QMOE_TESTING): exact accumulators instead of the epilogue */
} qmoe_gemm_block;

/* Scratchpad bytes one thread needs for blocks of at most rows x cols. */
uint64_t qmoe_gemm_scratch_bytes(const qmoe_gemm_isa *isa, const qmoe_gmm_params *p,
                                 int64_t rows, int64_t cols);
/* Runs a block in ctx->scratch (sized by qmoe_gemm_scratch_bytes for the plan's largest block). */
void qmoe_gemm_run(const qmoe_gemm_block *B);
#ifdef QMOE_TESTING
/* The same with a temporary scratchpad when ctx's is missing or small; 0: out of memory. */
int qmoe_gemm_run_testing(const qmoe_gemm_block *B);
#endif

#endif
