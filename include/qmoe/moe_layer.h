/*
 * qmoe — a whole MoE expert layer: made once from a model's expert weights, then run on hidden
 * states and router logits.
 *
 * The forward pass chains the pipeline operators (qmoe/moe_ops.h, qmoe.h, grouped_matmul.h) on
 * one stream, exactly as a caller would by hand, so its bits equal that chain's:
 *
 *   gating        softmax top-k (renormalised or not) or sigmoid + bias + group top-k
 *   init routing  sort rows by expert, fused dynamic per-token int8 quant
 *   gate/up       GroupedMatmulSwigluQuant (prepacked weights): int8 intermediate + scale
 *   down          GroupedMatmul (prepacked weights), per-token dequant to the hidden dtype
 *   finalize      weighted sum of each token's top-k rows back in token order
 *
 * The intermediates live in one workspace the caller sizes with qmoe_moe_layer_workspace_size()
 * (nothing is allocated for them per call). Results do not depend on the thread count.
 * Quantization of float weights: docs/moe-layer.md (qmoe/quantize.h).
 */
#ifndef QMOE_MOE_LAYER_H
#define QMOE_MOE_LAYER_H

#include <stdint.h>

#include "qmoe/export.h"
#include "qmoe/qmoe.h"
#include "qmoe/quantize.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qmoe_moe_layer qmoe_moe_layer;

typedef enum qmoe_moe_gating {
    QMOE_MOE_GATING_SOFTMAX = 0, /* softmax over E, top-k (renormalize: weights sum to 1) */
    QMOE_MOE_GATING_SIGMOID = 1, /* sigmoid, + bias for selection, group top-k, renormalised */
} qmoe_moe_gating;

/* The layer's configuration. Start from QMOE_MOE_LAYER_CONFIG_INIT (or zero it and set the
 * sizes); struct_size works as in qmoe_op_options: new fields are only ever appended. */
typedef struct qmoe_moe_layer_config {
    uint32_t struct_size;
    int64_t hidden_size;       /* H */
    int64_t intermediate_size; /* I (per expert) */
    int64_t num_experts;       /* E */
    int64_t top_k;             /* experts per token, 1..min(E, 32) */
    int gating;                /* qmoe_moe_gating */
    int renormalize;           /* softmax: nonzero divides the top-k weights by their sum */
    int64_t group_count;       /* sigmoid: expert groups (0: 1); divides E */
    int64_t k_group;           /* sigmoid: groups kept (0: 1) */
    double routed_scaling_factor; /* applied to renormalised weights (0: 1.0) */
    const float *correction_bias; /* sigmoid: [E] selection bias (optional; copied at create) */
    qmoe_quant_mode mode;      /* QMOE_QUANT_A8W8 or QMOE_QUANT_A8W4 */
    int64_t group_size;        /* 0: per output channel; else a divisor of H and of I */
    int clip_search;           /* A8W4 from floats: per-group MSE-optimal clipping */
    int threads;               /* parts each operator is split into (0: the online cores) */
} qmoe_moe_layer_config;

#define QMOE_MOE_LAYER_CONFIG_INIT \
    {(uint32_t)sizeof(qmoe_moe_layer_config), 0, 0, 0, 0, QMOE_MOE_GATING_SOFTMAX, 1, 0, 0, 0.0, \
     NULL, QMOE_QUANT_A8W8, 0, 0, 0}

/* From float weights in the checkpoint convention: gate[e], up[e] point at expert e's [I, H]
 * row-major matrices, down[e] at its [H, I] one, all of `dtype` (float32, float16, bfloat16).
 * Quantized on load (qmoe_quantize_gate_up / qmoe_quantize_linear), then prepacked; the float
 * weights are not kept. QMOE_ERR_PARAM_NULLPTR / _INVALID for a bad configuration (named
 * field) or weights; QMOE_ERR_INNER when out of memory. On error *layer is left as it was. */
QMOE_API qmoe_status qmoe_moe_layer_create_from_float(const qmoe_moe_layer_config *config,
                                                      const void *const *gate,
                                                      const void *const *up,
                                                      const void *const *down, qmoe_dtype dtype,
                                                      qmoe_moe_layer **layer);

/* From quantized weights in the operators' layouts: w13 / w13_scale / w13_bias as
 * GroupedMatmulSwigluQuant takes them (K = H, N = 2I; bias: the A8W4 assist matrix, NULL for
 * A8W8), w2 / w2_scale as GroupedMatmul takes them (K = I, N = H). Their data is read once. */
QMOE_API qmoe_status qmoe_moe_layer_create(const qmoe_moe_layer_config *config,
                                           const qmoe_tensor *w13, const qmoe_tensor *w13_scale,
                                           const qmoe_tensor *w13_bias, const qmoe_tensor *w2,
                                           const qmoe_tensor *w2_scale, qmoe_moe_layer **layer);

QMOE_API void qmoe_moe_layer_destroy(qmoe_moe_layer *layer); /* NULL is a no-op */

/* Bytes of the workspace a forward pass of T tokens of hidden dtype `dtype` needs. */
QMOE_API qmoe_status qmoe_moe_layer_workspace_size(const qmoe_moe_layer *layer, int64_t tokens,
                                                   qmoe_dtype dtype, uint64_t *workspace_size);

/* Forward: hidden [T, H] float32/float16/bfloat16, router_logits [T, E] float32 or hidden's
 * dtype, out [T, H] hidden's dtype (must not overlap the inputs or the workspace). workspace:
 * at least qmoe_moe_layer_workspace_size(T) bytes, 64-byte aligned. stream NULL: runs
 * synchronously on the default device and returns the first error (out is then untouched);
 * otherwise queued on the stream (errors of data, e.g. expert ids, from
 * qmoe_stream_synchronize(); the memory must stay valid until then). A layer may run on
 * several threads at once, each with its own workspace and output. */
QMOE_API qmoe_status qmoe_moe_layer_forward(const qmoe_moe_layer *layer, const qmoe_tensor *hidden,
                                            const qmoe_tensor *router_logits,
                                            const qmoe_tensor *out, void *workspace,
                                            uint64_t workspace_size, qmoe_stream *stream);

/* Forward with routing decided by the caller: topk_ids int32 [T, k] in [0, E), topk_weights
 * [T, k] float32 or hidden's dtype (used as given: no renormalisation). */
QMOE_API qmoe_status qmoe_moe_layer_forward_routed(const qmoe_moe_layer *layer,
                                                   const qmoe_tensor *hidden,
                                                   const qmoe_tensor *topk_ids,
                                                   const qmoe_tensor *topk_weights,
                                                   const qmoe_tensor *out, void *workspace,
                                                   uint64_t workspace_size, qmoe_stream *stream);

/* Bytes of the prepacked weights the layer holds; 0 for NULL. */
QMOE_API uint64_t qmoe_moe_layer_weight_bytes(const qmoe_moe_layer *layer);

#ifdef __cplusplus
}
#endif

#endif /* QMOE_MOE_LAYER_H */
