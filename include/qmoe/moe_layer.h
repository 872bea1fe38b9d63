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
 * The intermediates live in one workspace the caller sizes with qmoe_moe_layer_workspace_size().
 * The layer keeps the plan of its last forward: a forward with the same shapes, strides, dtypes
 * and workspace allocates nothing, whatever its tensors' addresses (docs/moe-layer.md). Results
 * do not depend on the thread count.
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
    QMOE_MOE_GATING_SOFTMAX = 0, /* softmax over E, + bias for selection, top-k */
    QMOE_MOE_GATING_SIGMOID = 1, /* sigmoid, + bias for selection, group top-k */
} qmoe_moe_gating;

/* The layer's configuration. Start from QMOE_MOE_LAYER_CONFIG_INIT (or zero it and set the sizes);
 * struct_size works as in qmoe_grouped_matmul_swiglu_quant_options: new fields are only ever
 * appended. */
typedef struct qmoe_moe_layer_config {
    uint32_t struct_size;
    int64_t hidden_size;       /* H */
    int64_t intermediate_size; /* I (per expert) */
    int64_t num_experts;       /* E */
    int64_t top_k;             /* experts per token, 1..min(E, 32) */
    int gating;                /* qmoe_moe_gating */
    /* Both gatings: nonzero divides the top-k weights by their sum (+ 1e-20); 0 keeps the
     * scores as they are (transformers' norm_topk_prob). */
    int renormalize;
    int64_t group_count;       /* sigmoid: expert groups (0: 1); divides E */
    int64_t k_group;           /* sigmoid: groups kept (0: 1) */
    double routed_scaling_factor; /* multiplies the top-k weights, renormalised or not (0: 1.0) */
    /* [E] selection bias (optional; copied at create), both gatings: experts are chosen by
     * score + bias, their weights are the scores without it (DeepSeek-V3's
     * e_score_correction_bias). */
    const float *correction_bias;
    qmoe_quant_mode mode;      /* QMOE_QUANT_A8W8 or QMOE_QUANT_A8W4 */
    int64_t group_size;        /* 0: per output channel; else a divisor of H and of I */
    int clip_search;           /* A8W4 from floats: per-group MSE-optimal clipping */
    int threads;               /* parts each operator is split into (0: the online cores) */
    /* A shared expert every token passes with weight 1 (DeepSeek-style; 0: none). Is must be a
     * multiple of I: it runs as Is / I more experts of size I (their int8 intermediate and down
     * scales are per chunk of I). From floats: its [Is, H], [Is, H], [H, Is] weights in the
     * experts' dtype; from quantized weights: experts E .. E + Is/I - 1 of w13 / w2. */
    int64_t shared_intermediate_size;
    const void *shared_gate, *shared_up, *shared_down;
    /* Qwen2-MoE's gated shared expert: [H] (from floats in the experts' dtype, from quantized
     * weights float32; copied at create). Token t's shared rows then weigh
     * sigmoid(s) = 1 / (1 + expf(-s)) with s = hidden[t] . shared_expert_gate summed in float32,
     * h = 0 .. H-1 in order, each product and sum rounded to float32 (hidden read as float32),
     * the weight rounded to the routing weights' dtype. NULL: ungated (weight 1). Not for shards. */
    const void *shared_expert_gate;
    /* gpt-oss: expert biases (from floats in the experts' dtype, from quantized weights float32;
     * copied at create; NULL: none). gate_up_bias [E, 2I] (row e: gate's I, then up's I) is added
     * to the dequantized gate/up product before SwiGLU; down_bias [E, H] to the down projection
     * (before the routing weight). The shared expert has none. */
    const void *gate_up_bias, *down_bias;
    /* The SwiGLU of the experts: GroupedMatmulSwigluQuant's swiglu_limit / swiglu_alpha (qmoe.h;
     * gpt-oss: limit 7, alpha 1.702). 0, 0: silu(gate) * up. */
    float swiglu_limit, swiglu_alpha;
} qmoe_moe_layer_config;

#define QMOE_MOE_LAYER_CONFIG_INIT \
    {(uint32_t)sizeof(qmoe_moe_layer_config), 0, 0, 0, 0, QMOE_MOE_GATING_SOFTMAX, 1, 0, 0, 0.0, \
     NULL, QMOE_QUANT_A8W8, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL, 0.0f, 0.0f}

/* From float weights in the checkpoint convention: gate[e], up[e] point at expert e's [I, H]
 * row-major matrices, down[e] at its [H, I] one, all of `dtype` (float32, float16, bfloat16).
 * Quantized on load (qmoe_quant_gate_up / qmoe_quant_linear), then prepacked; the float
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

/* NULL is a no-op. Destroy is not synchronised with use: the caller makes sure that no call
 * with the layer is running on any thread, that every forward queued on a stream has finished
 * (qmoe_stream_synchronize), and that none starts after; destroying a layer another thread is
 * using is undefined behaviour. Calls on several threads at once are safe; destroy is the one
 * call that must not overlap any other. (The Python MoELayer.close() waits for calls in flight
 * and refuses later ones with QMOE_ERR_PARAM_NULLPTR.) */
QMOE_API void qmoe_moe_layer_destroy(qmoe_moe_layer *layer);

/* Bytes of the workspace a forward pass of T tokens of hidden dtype `dtype` needs. */
QMOE_API qmoe_status qmoe_moe_layer_workspace_size(const qmoe_moe_layer *layer, int64_t tokens,
                                                   qmoe_dtype dtype, uint64_t *workspace_size);

/* Forward: hidden [T, H] float32/float16/bfloat16, router_logits [T, E] float32 or hidden's
 * dtype, out [T, H] hidden's dtype. out may be hidden itself (in place: hidden is read in full
 * before out is written) but must not overlap the routing tensors or the workspace, and no input
 * may overlap the workspace (QMOE_ERR_PARAM_INVALID, QMOE_RULE_OVERLAP). workspace: at least
 * qmoe_moe_layer_workspace_size(T) bytes, 64-byte aligned. The operators are planned once per
 * shape (tensors' shapes, strides, dtypes) and kept: a forward with the shapes of the last one
 * plans nothing and allocates nothing, whatever its data and workspace. stream NULL: runs
 * synchronously on the default device and returns the first error (out is then untouched);
 * otherwise queued on the stream (errors of data, e.g. expert ids, from
 * qmoe_stream_synchronize(), with out untouched as well: the chain stops at the failing
 * operator; the memory must stay valid until then). A layer may run on several threads at
 * once, each with its own workspace and output. */
QMOE_API qmoe_status qmoe_moe_layer_forward(const qmoe_moe_layer *layer, const qmoe_tensor *hidden,
                                            const qmoe_tensor *router_logits,
                                            const qmoe_tensor *out, void *workspace,
                                            uint64_t workspace_size, qmoe_stream *stream);

/* Forward with routing decided by the caller: topk_ids int32 [T, k] in [0, E), topk_weights
 * [T, k] float32 or hidden's dtype (used as given: no renormalisation). With a shared expert
 * they are copied into the workspace by this call (so they must be ready when it is made). */
QMOE_API qmoe_status qmoe_moe_layer_forward_routed(const qmoe_moe_layer *layer,
                                                   const qmoe_tensor *hidden,
                                                   const qmoe_tensor *topk_ids,
                                                   const qmoe_tensor *topk_weights,
                                                   const qmoe_tensor *out, void *workspace,
                                                   uint64_t workspace_size, qmoe_stream *stream);

/* Bytes of the prepacked weights the layer holds; 0 for NULL. */
QMOE_API uint64_t qmoe_moe_layer_weight_bytes(const qmoe_moe_layer *layer);

/* ---------------------------------------------------------------- shards ---------------------- */
/* For expert parallelism (qmoe_ep_layer_forward in qmoe/mpi.h): a shard holds the prepacked
 * weights of some routed experts only (and the shared expert, which every rank runs on its own
 * tokens), and exposes the forward's pieces so a caller can move rows between them. A shard is
 * refused by qmoe_moe_layer_forward*, qmoe_moe_layer_workspace_size. */

/* As qmoe_moe_layer_create_from_float with `config` the whole layer's (num_experts = E, gating,
 * bias of [E]), holding only the `num_held` experts expert_ids (strictly ascending, in [0, E);
 * copied): gate/up/down are still indexed by expert id, and only the held entries are read (the
 * others may be NULL). num_held 0: no routed expert (refused with a shared expert). */
QMOE_API qmoe_status qmoe_moe_layer_create_shard_from_float(const qmoe_moe_layer_config *config,
                                                            int64_t num_held,
                                                            const int32_t *expert_ids,
                                                            const void *const *gate,
                                                            const void *const *up,
                                                            const void *const *down,
                                                            qmoe_dtype dtype,
                                                            qmoe_moe_layer **layer);

/* As qmoe_moe_layer_create with num_held (>= 1) experts: w13 / w2 and their scales hold experts
 * expert_ids[0 .. num_held) in that order, then the shared expert's chunks. */
QMOE_API qmoe_status qmoe_moe_layer_create_shard(const qmoe_moe_layer_config *config,
                                                 int64_t num_held, const int32_t *expert_ids,
                                                 const qmoe_tensor *w13,
                                                 const qmoe_tensor *w13_scale,
                                                 const qmoe_tensor *w13_bias, const qmoe_tensor *w2,
                                                 const qmoe_tensor *w2_scale,
                                                 qmoe_moe_layer **layer);

/* The configuration the layer was made with (shared_gate/up/down NULL; correction_bias,
 * shared_expert_gate, gate_up_bias and down_bias the layer's float32 copies, the biases with a
 * zero row per shared chunk after the E experts'); the routed experts it holds (E for a whole layer) and the id of held expert i
 * (-1 out of range or for NULL). */
QMOE_API qmoe_status qmoe_moe_layer_config_of(const qmoe_moe_layer *layer,
                                               qmoe_moe_layer_config *config);
QMOE_API int64_t qmoe_moe_layer_held_experts(const qmoe_moe_layer *layer);
QMOE_API int64_t qmoe_moe_layer_held_expert_id(const qmoe_moe_layer *layer, int64_t i);

/* The forward's gating alone, on a whole layer or a shard: router_logits [T, E] (float32 or
 * a float dtype) -> topk_ids int32 [T, top_k], topk_weights [T, top_k] of router_logits' dtype,
 * the bits the forward routes by. Synchronous; allocates its own scratch. */
QMOE_API qmoe_status qmoe_moe_layer_route(const qmoe_moe_layer *layer,
                                          const qmoe_tensor *router_logits,
                                          const qmoe_tensor *topk_ids,
                                          const qmoe_tensor *topk_weights);

/* The forward's expert part alone: x int8 [R, H] with x_scale float32 [R] (a dynamic per-row
 * quantization, qmoe_dynamic_quant's), rows grouped by the layer's experts — held experts in
 * held order, then the shared expert's chunks — with group_list int64 [held + chunks], the
 * cumulative row counts; y [R, H] float32/float16/bfloat16 gets each row's gate/up, SwiGLU-quant
 * and down projection, the bits the forward computes for that row. Synchronous. workspace: at
 * least qmoe_moe_layer_experts_workspace_size(R) bytes, 64-byte aligned. */
QMOE_API qmoe_status qmoe_moe_layer_experts_workspace_size(const qmoe_moe_layer *layer,
                                                           int64_t rows, qmoe_dtype y_dtype,
                                                           uint64_t *workspace_size);
QMOE_API qmoe_status qmoe_moe_layer_experts(const qmoe_moe_layer *layer, const qmoe_tensor *x,
                                            const qmoe_tensor *x_scale,
                                            const qmoe_tensor *group_list, const qmoe_tensor *y,
                                            void *workspace, uint64_t workspace_size);

#ifdef __cplusplus
}
#endif

#endif /* QMOE_MOE_LAYER_H */
