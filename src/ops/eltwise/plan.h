/*
 * The plans of the element-wise MoE operators (include/qmoe/moe_ops.h): the plan each phase one
 * fills, the executor that holds it, element access helpers, and the device-side entry points.
 * A plan holds only plain values and pointers to caller memory, so an executor is one block that
 * can be copied (into a queued job, or into the vendor layer's executor).
 */
#ifndef QMOE_OPS_MOE_PLAN_H
#define QMOE_OPS_MOE_PLAN_H

#include <stdint.h>
#include <string.h>

#include "core/view.h"
#include "kernels/rows_sum.h"
#include "qmoe/moe_ops.h"

typedef enum moe_kind {
    MOE_DYNAMIC_QUANT = 1,
    MOE_GATING_SOFTMAX = 2,
    MOE_GATING_TOPK = 3,
    MOE_INIT_ROUTING = 4,
    MOE_FINALIZE = 5,
    MOE_SWIGLU = 6,
} moe_kind;


/* The fastest row quantizer and SwiGLU of this CPU (the kernels' ISA table): the library's one
 * quantization rule, bit-identical across instruction sets. */
typedef void (*moe_qrow_fn)(const float *s, int64_t n, int8_t *out, int64_t out_stride,
                            float *scale);
typedef void (*moe_swiglu_fn)(int64_t rows, int64_t nc, const float *f, int64_t ldf,
                              int64_t gate, const float *corr, const float *xs, float limit,
                              float *s, int64_t lds);

typedef struct moe_quant_plan {
    moe_view x, smooth, y, scale;
    int64_t rows, H;
    moe_qrow_fn qrow;
} moe_quant_plan;

typedef struct moe_gating_plan {
    moe_view x, finished, bias, y, idx, row_idx, out;
    int64_t rows, E, k;
    qmoe_moe_gating_attrs a; /* MOE_GATING_TOPK only */
} moe_gating_plan;

typedef struct moe_routing_plan {
    moe_view x, idx, scale, ex, row_idx, tokens, escale;
    int64_t N, K, H, A, L; /* tokens, choices, hidden, rows of expanded_x, local experts */
    qmoe_moe_routing_attrs a;
    int smooth_per_expert; /* dynamic quant scale is [L, H] (else [1, H]) */
    int quant_once;        /* quantize each token once into the workspace, then copy rows */
    uint64_t q_offset;     /* workspace: int8 tokens [N, H] after the sort and N scales */
    moe_qrow_fn qrow;
} moe_routing_plan;

typedef struct moe_finalize_plan {
    moe_view ex, row_idx, x1, x2, bias, scales, idx, out;
    int64_t N, K, H, A, E;
    int64_t mode;
    qmoe_rows_sum_fn rows_sum;     /* this CPU's weighted row sum and bf16 store (same bits) */
    qmoe_bf16_store_fn bf16_store;
} moe_finalize_plan;

typedef struct moe_swiglu_plan {
    moe_view x, out;
    int dim;
    int64_t half, rows; /* rows: elements of out without its last axis */
    moe_swiglu_fn sw;   /* rows split on the last axis: a vector SwiGLU over float rows */
} moe_swiglu_plan;

/* The plan of every element-wise operator: one plain block (an op holds a copy, a run binds its
 * data into another). */
typedef struct moe_plan {
    int32_t kind;
    int32_t threads;         /* parts of the row split */
    uint64_t workspace_bytes;
    uint64_t slice_bytes;    /* per-thread scratch */
    union {
        moe_quant_plan quant;
        moe_gating_plan gating;
        moe_routing_plan routing;
        moe_finalize_plan finalize;
        moe_swiglu_plan swiglu;
    } u;
} moe_plan;

/* ---------------------------------------------------------------- device side ----------------- */

/* Data rules of phase two (read the caller's index tensors). */
qmoe_status moe_routing_check_data(const moe_routing_plan *p);
qmoe_status moe_finalize_check_data(const moe_finalize_plan *p);

/* Device side: rows [r0, r1) of each operator; `scratch` is the thread's slice. */
void moe_quant_rows(const moe_quant_plan *p, int64_t r0, int64_t r1, float *scratch);
void moe_gating_softmax_rows(const moe_gating_plan *p, int64_t r0, int64_t r1, void *scratch);
void moe_gating_topk_rows(const moe_gating_plan *p, int64_t r0, int64_t r1, void *scratch);
/* Init routing in two steps: the sort (one thread, into the workspace), then the rows. */
void moe_routing_sort(const moe_routing_plan *p, void *workspace);
void moe_routing_rows(const moe_routing_plan *p, const void *workspace, int64_t r0, int64_t r1,
                      float *scratch);
/* quant_once: tokens [n0, n1) quantized into the workspace. */
void moe_routing_quant_tokens(const moe_routing_plan *p, void *workspace, int64_t n0, int64_t n1,
                              float *scratch);
int64_t moe_routing_rows_written(const moe_routing_plan *p, const void *workspace);
/* quant_once with row_idx_type 0: tokens [n0, n1) quantized and written straight to their
 * expanded rows (the row index maps each (token, choice) to its row), no second pass. */
void moe_routing_quant_scatter(const moe_routing_plan *p, void *workspace, int64_t n0, int64_t n1,
                               float *scratch);
void moe_finalize_rows(const moe_finalize_plan *p, int64_t r0, int64_t r1, float *scratch);
void moe_swiglu_rows(const moe_swiglu_plan *p, int64_t r0, int64_t r1, float *scratch);


#endif
