/*
 * Quantizing float expert weights, as a checkpoint stores them, into the operators' weights.
 *
 * A checkpoint holds each expert's linear layers as nn.Linear weights [out, in] row-major:
 * gate_proj [I, H], up_proj [I, H], down_proj [H, I] (fp32, fp16 or bf16). The operators take
 * W[e][k][n] (K inputs, N outputs per expert) with one scale per output channel (or per group of K)
 * — so quantizing is a transpose as well:
 *
 *   GroupedMatmulSwigluQuant: K = H, N = 2I; columns [0, I) hold gate_proj (the activated half:
 *   output j = Swish(gate_j) * up_j) and columns [I, 2I) hold up_proj (the linear half).
 *   Down projection:          K = I, N = H from down_proj.
 *
 * The scheme (docs/moe-layer.md): symmetric, per output channel or per group of `group_size`
 * inputs; scale = amax / 127 (A8W8) or amax / 7 (A8W4) in float32; q = round-half-even(w / scale)
 * in float32, clamped to [-127, 127] / [-7, 7]. A channel (group) whose amax is 0, or whose scale
 * underflows to 0, gets scale 0 and q = 0: the operators then compute 0 for it. With clip_search
 * (A8W4), each group's scale is (amax * r) / 7 for the ratio r in {1.00, 0.99, ..., 0.50} whose
 * squared reconstruction error over the group is smallest (the first such r wins).
 *
 * Outputs, per options.weight_nd:
 *   FRACTAL_NZ (default): A8W8 int8 [E, N/32, K/16, 16, 32] (K % 16 == 0, N % 32 == 0); A8W4
 *     packed int4 [E, N/64, K/16, 16, 64] = the bytes of int32 [E, N/64, K/16, 16, 8]
 *     (K % 16 == 0, N % 64 == 0).
 *   ND: int8 [E, K, N]; packed int4 [E, K, N/2] bytes (N even) = int32 [E, K, N/8] when N % 8 == 0.
 *   scale: float32 [E, N] (per channel) or [E, K/group_size, N].
 *   bias (A8W4 only): the weight assist matrix float32 [E, N] (qmoe_layout_weight_assist_matrix of the
 *     quantized values and the scales); for A8W8 it may be NULL and is not written.
 *
 * Errors: QMOE_ERR_PARAM_NULLPTR / QMOE_ERR_PARAM_INVALID (sizes, alignment, options, a non-finite
 * weight — named by expert, row and column), QMOE_ERR_INNER (out of memory). On any error nothing
 * is written. Results are identical for every thread count.
 */
#ifndef QMOE_QUANTIZE_H
#define QMOE_QUANTIZE_H

#include <stdint.h>

#include "qmoe/export.h"
#include "qmoe/qmoe.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qmoe_quant_mode {
    QMOE_QUANT_A8W8 = 0, /* int8 weights, scale amax / 127 */
    QMOE_QUANT_A8W4 = 1, /* int4 weights, scale amax / 7, plus the assist matrix (bias) */
} qmoe_quant_mode;

/* Start from QMOE_QUANT_OPTIONS_INIT (or a zeroed struct: A8W8, per channel, FRACTAL_NZ, all
 * online cores). New fields are only ever appended. */
typedef struct qmoe_quant_options {
    uint32_t struct_size;   /* sizeof the struct the caller was compiled with; 0: this layout */
    qmoe_quant_mode mode;
    int weight_nd;          /* 0: FRACTAL_NZ, 1: ND */
    int clip_search;        /* 1: per-group MSE-optimal clipping ratio (A8W4 only) */
    int64_t group_size;     /* 0: per output channel; else a divisor of K (e.g. 128) */
    int threads;            /* 0: every online core */
} qmoe_quant_options;

#define QMOE_QUANT_OPTIONS_INIT {(uint32_t)sizeof(qmoe_quant_options), QMOE_QUANT_A8W8, 0, 0, 0, 0}

/* The sizes of one quantized weight of E experts with K inputs and N outputs. */
typedef struct qmoe_quant_sizes {
    int64_t weight_bytes; /* bytes of the weight buffer */
    int64_t groups;       /* G: 0 per channel, K / group_size per group */
    int64_t scale_count;  /* float32 elements of scale: E*N or E*G*N */
    int64_t bias_count;   /* float32 elements of bias: E*N for A8W4, 0 for A8W8 */
} qmoe_quant_sizes;

/* Validates the options and sizes (as the quantize calls do) and fills *sizes. */
QMOE_API qmoe_status qmoe_quant_sizes_of(const qmoe_quant_options *options, int64_t E, int64_t K,
                                         int64_t N, qmoe_quant_sizes *sizes);

/* One linear weight per expert: w[e] points at expert e's [N, K] row-major matrix of `dtype`
 * (QMOE_DTYPE_FLOAT32, FLOAT16 or BFLOAT16); the result is the operators' W [E, K, N]. */
QMOE_API qmoe_status qmoe_quant_linear(const void *const *w, qmoe_dtype dtype, int64_t E,
                                          int64_t N, int64_t K, const qmoe_quant_options *options,
                                          void *weight, float *scale, float *bias);

/* The fused gate/up weight of GroupedMatmulSwigluQuant: gate[e] and up[e] point at expert e's
 * [I, H] matrices; the result has K = H, N = 2I, gate_proj in columns [0, I). */
QMOE_API qmoe_status qmoe_quant_gate_up(const void *const *gate, const void *const *up,
                                           qmoe_dtype dtype, int64_t E, int64_t I, int64_t H,
                                           const qmoe_quant_options *options, void *weight,
                                           float *scale, float *bias);

#ifdef __cplusplus
}
#endif

#endif /* QMOE_QUANTIZE_H */
