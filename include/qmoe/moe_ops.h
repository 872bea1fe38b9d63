/*
 * qmoe — the element-wise operators of a quantized MoE layer around GroupedMatmulSwigluQuant:
 * dynamic per-token quantization, gating (softmax top-k and DeepSeek-style sigmoid group top-k),
 * init routing (sort by expert, optional fused dynamic int8 quantization), finalize routing
 * (weighted sum back in token order) and SwiGLU.
 *
 * Each operator has the two phases of the fused operator: qmoe_<op>_workspace_size() validates
 * every argument that does not need tensor data, plans the work and returns the workspace size and
 * an executor; qmoe_<op>() queues the operator on a stream (NULL: runs it synchronously on the
 * process-wide default device), which checks the index data (expert ids, row indices) when it runs
 * - after the operators queued before it - and computes. A data error writes nothing and is
 * returned by the call (NULL stream) or by qmoe_stream_synchronize(). Executors are reusable and
 * are destroyed with qmoe_moe_executor_destroy(). Contracts: docs/ops/<op>.md.
 *
 * Common rules: tensors are qmoe_tensor views (any non-negative strides, including outputs);
 * outputs must not share memory with an input or with each other (QMOE_ERR_PARAM_INVALID); a failed
 * call writes nothing and says why in qmoe_last_error(). Float inputs are read as float32, computed
 * in float32 and rounded once to the output dtype (round to nearest even). Results do not depend on
 * the thread count.
 */
#ifndef QMOE_MOE_OPS_H
#define QMOE_MOE_OPS_H

#include <stdint.h>

#include "qmoe/export.h"
#include "qmoe/qmoe.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qmoe_moe_executor qmoe_moe_executor;

/* Options of phase one; NULL or all-zero: rows split into as many parts as there are online cores.
 * struct_size is sizeof(qmoe_moe_options) as the caller was compiled (0: this first layout); new
 * fields are only appended, read as qmoe_grouped_matmul_swiglu_quant_options are (qmoe.h). */
typedef struct qmoe_moe_options {
    uint32_t struct_size;
    int threads; /* parts the rows are split into (0: the online cores), at most 4096 */
} qmoe_moe_options;

#define QMOE_MOE_OPTIONS_INIT {(uint32_t)sizeof(qmoe_moe_options), 0}

QMOE_API void qmoe_moe_executor_destroy(qmoe_moe_executor *executor); /* NULL is a no-op */

/* ---------------------------------------------------------------- dynamic quant --------------- */

/* x float32/float16/bfloat16, rank 2..8 [..., H]; smooth_scales (optional) [H], x's dtype or
 * float32; y int8, x's shape; scale float32, x's shape without the last axis.
 * scale = max|x*s| / 127, y = round_half_even(x*s / scale) clamped to [-127, 127]; a row whose
 * maximum is 0 gets scale 0 and zeros. */
QMOE_API qmoe_status qmoe_dynamic_quant_workspace_size(
    const qmoe_tensor *x, const qmoe_tensor *smooth_scales, const qmoe_tensor *y,
    const qmoe_tensor *scale, const qmoe_moe_options *options, uint64_t *workspace_size,
    qmoe_moe_executor **executor);
QMOE_API qmoe_status qmoe_dynamic_quant(void *workspace, uint64_t workspace_size,
                                        qmoe_moe_executor *executor, qmoe_stream *stream);

/* ---------------------------------------------------------------- gating ---------------------- */

/* MoeGatingTopKSoftmax. x float32/float16/bfloat16 [R, E] or [B, S, E]; finished (optional) int8
 * (a bool byte: nonzero = finished) of x's shape without the last axis; 0 <= k <= min(E, 1024);
 * y x's dtype [..., k]; expert_idx int32 [..., k]; row_idx int32 [..., k].
 * y, expert_idx = top-k of softmax(x) (ties: the lower expert index first); a finished row's
 * expert_idx is E; row_idx[r][j] = j * R + r. */
QMOE_API qmoe_status qmoe_moe_gating_top_k_softmax_workspace_size(
    const qmoe_tensor *x, const qmoe_tensor *finished, int64_t k, const qmoe_tensor *y,
    const qmoe_tensor *expert_idx, const qmoe_tensor *row_idx, const qmoe_moe_options *options,
    uint64_t *workspace_size, qmoe_moe_executor **executor);
QMOE_API qmoe_status qmoe_moe_gating_top_k_softmax(void *workspace, uint64_t workspace_size,
                                                   qmoe_moe_executor *executor,
                                                   qmoe_stream *stream);

/* The attributes of MoeGatingTopK (vendor names and defaults in docs/ops/moe-gating-top-k.md). */
typedef struct qmoe_moe_gating_attrs {
    int64_t k;                    /* experts per token, 1..32 and <= E / group_count * k_group */
    int64_t k_group;              /* groups kept, 1..group_count */
    int64_t group_count;          /* groups the experts are split into; E % group_count == 0 */
    int64_t group_select_mode;    /* 0: group score = max; 1: sum of the group's top 2 */
    int64_t renorm;               /* 0 only: normalise first, then select */
    int64_t norm_type;            /* 0: softmax; 1: sigmoid */
    int out_flag;                 /* nonzero: write the normalised scores to `out` */
    double routed_scaling_factor; /* y = y / (sum(y) + eps) * routed_scaling_factor */
    double eps;
} qmoe_moe_gating_attrs;

/* MoeGatingTopK. x float32/float16/bfloat16 [R, E] (E <= 2048); bias (optional) [E], x's dtype
 * or float32; y x's dtype [R, k]; expert_idx int32 [R, k]; out float32 [R, E] (needed when
 * attrs->out_flag, ignored otherwise). */
QMOE_API qmoe_status qmoe_moe_gating_top_k_workspace_size(
    const qmoe_tensor *x, const qmoe_tensor *bias, const qmoe_moe_gating_attrs *attrs,
    const qmoe_tensor *y, const qmoe_tensor *expert_idx, const qmoe_tensor *out,
    const qmoe_moe_options *options, uint64_t *workspace_size, qmoe_moe_executor **executor);
QMOE_API qmoe_status qmoe_moe_gating_top_k(void *workspace, uint64_t workspace_size,
                                           qmoe_moe_executor *executor, qmoe_stream *stream);

/* ---------------------------------------------------------------- init routing ---------------- */

typedef enum qmoe_moe_tokens_mode {
    QMOE_MOE_TOKENS_NONE = 0,   /* no per-expert token output */
    QMOE_MOE_TOKENS_CUMSUM = 1, /* running total of rows per expert (the GMM groupList, cumsum) */
    QMOE_MOE_TOKENS_COUNT = 2,  /* rows per expert */
} qmoe_moe_tokens_mode;

typedef enum qmoe_moe_quant_mode {
    QMOE_MOE_QUANT_NONE = -1,   /* expanded_x has x's dtype */
    QMOE_MOE_QUANT_DYNAMIC = 1, /* expanded_x int8 with a per-row float32 scale */
} qmoe_moe_quant_mode;

/* The attributes of MoeInitRoutingV2 / V3 (dropless: drop_pad_mode 0 only). */
typedef struct qmoe_moe_routing_attrs {
    int64_t active_num;      /* 0: every routed row; > 0: at most this many rows of expanded_x */
    int64_t expert_capacity; /* drop/pad mode only: ignored (dropless) */
    int64_t expert_num;      /* experts, >= 1; expert_idx values must be in [0, expert_num) */
    int64_t drop_pad_mode;   /* 0 (dropless) */
    int tokens_mode;         /* qmoe_moe_tokens_mode */
    int quant_mode;          /* qmoe_moe_quant_mode */
    int64_t expert_start;    /* local experts [expert_start, expert_end); 0, 0: all experts */
    int64_t expert_end;
    int row_idx_type;        /* 0: gather (expanded_row_idx[token*K + j] = row); 1: scatter */
} qmoe_moe_routing_attrs;

/* MoeInitRoutingV2 (+ V3's dynamic quant and expert range). x [N, H] float32/float16/bfloat16
 * (int8 without quantization); expert_idx int32 [N, K]; scale (optional): quant none: float32 [N]
 * (per-token scales carried along), dynamic: float32 smooth scales [L, H] (per local expert) or
 * [1, H]; offset reserved (NULL); expanded_x [A, H] with A = N*K, or min(N*K, active_num);
 * expanded_row_idx int32 [N*K]; expert_tokens int32/int64 [L] (L = local experts; needed unless
 * tokens_mode is NONE); expanded_scale float32 [A] (dynamic quant, or scale given).
 * Rows of expanded_x past the routed rows are not written. */
QMOE_API qmoe_status qmoe_moe_init_routing_workspace_size(
    const qmoe_tensor *x, const qmoe_tensor *expert_idx, const qmoe_tensor *scale,
    const qmoe_tensor *offset, const qmoe_moe_routing_attrs *attrs, const qmoe_tensor *expanded_x,
    const qmoe_tensor *expanded_row_idx, const qmoe_tensor *expert_tokens,
    const qmoe_tensor *expanded_scale, const qmoe_moe_options *options, uint64_t *workspace_size,
    qmoe_moe_executor **executor);
/* Phase two: every expert_idx value must be in [0, expert_num) (else QMOE_ERR_PARAM_INVALID,
 * nothing written; see the top of this header for when it is reported). */
QMOE_API qmoe_status qmoe_moe_init_routing(void *workspace, uint64_t workspace_size,
                                           qmoe_moe_executor *executor, qmoe_stream *stream);

/* ---------------------------------------------------------------- finalize routing ------------ */

/* MoeFinalizeRoutingV2, dropless. expanded_x [A, H] float32/float16/bfloat16; expanded_row_idx
 * int32 [N*K]; x1, x2 (optional) [N, H] x's dtype; bias (optional) [E, H] x's dtype (needs
 * expert_idx); scales (optional) [N, K] x's dtype or float32 (absent: weight 1); expert_idx
 * (optional) int32 [N, K]; out [N, H] x's dtype. drop_pad_mode 0: row r of token i, choice j is
 * expanded_row_idx[j*N + i]; 2: expanded_row_idx[i*K + j].
 * out[i] = x1[i] + x2[i] + sum_j scales[i,j] * (expanded_x[r] + bias[expert_idx[i,j]]); a row
 * index of -1 (a row routed to no local expert) adds nothing. */
QMOE_API qmoe_status qmoe_moe_finalize_routing_workspace_size(
    const qmoe_tensor *expanded_x, const qmoe_tensor *expanded_row_idx, const qmoe_tensor *x1,
    const qmoe_tensor *x2, const qmoe_tensor *bias, const qmoe_tensor *scales,
    const qmoe_tensor *expert_idx, int64_t drop_pad_mode, const qmoe_tensor *out,
    const qmoe_moe_options *options, uint64_t *workspace_size, qmoe_moe_executor **executor);
/* Phase two: every row index must be -1 or in [0, A) and every expert_idx used with bias in
 * [0, E) (else QMOE_ERR_PARAM_INVALID, nothing written; reported as above). */
QMOE_API qmoe_status qmoe_moe_finalize_routing(void *workspace, uint64_t workspace_size,
                                               qmoe_moe_executor *executor, qmoe_stream *stream);

/* ---------------------------------------------------------------- SwiGLU ---------------------- */

/* x float32/float16/bfloat16, rank >= 1, even along `dim` (in [-rank, rank)); out x's dtype and
 * shape with that axis halved. out = silu(A) * B with A the first half along dim, B the second. */
QMOE_API qmoe_status qmoe_swiglu_workspace_size(const qmoe_tensor *x, int64_t dim,
                                                const qmoe_tensor *out,
                                                const qmoe_moe_options *options,
                                                uint64_t *workspace_size,
                                                qmoe_moe_executor **executor);
QMOE_API qmoe_status qmoe_swiglu(void *workspace, uint64_t workspace_size,
                                 qmoe_moe_executor *executor, qmoe_stream *stream);

#ifdef __cplusplus
}
#endif

#endif /* QMOE_MOE_OPS_H */
