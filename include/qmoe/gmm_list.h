/*
 * GroupedMatmulSwigluQuant with per-expert weight lists: the entry point inference engines call
 * when every expert's weight (and scale) is its own tensor, e.g. after experts were moved or
 * reloaded one by one. The vendor's name is GroupedMatmulSwigluQuantWeightNzTensorList; qmoe reads
 * each expert where it lies (a table of per-expert base pointers, no copy of weights).
 *
 * The operator is GroupedMatmulSwigluQuant (docs/ops/grouped-matmul-swiglu-quant.md) with one
 * addition, the `swiglu_limit` clamp (docs/ops/grouped-matmul-swiglu-quant-weight-list.md): when
 * swiglu_limit > 1e-8, C[m, j] (activated half, j < N/2) is clamped to at most swiglu_limit and
 * C[m, j + N/2] (linear half) to [-swiglu_limit, swiglu_limit] before SwiGLU; a NaN stays NaN.
 */
#ifndef QMOE_GMM_LIST_H
#define QMOE_GMM_LIST_H

#include "qmoe/export.h"
#include "qmoe/qmoe.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Limits of the list: 1 <= num_experts <= QMOE_GMM_LIST_MAX_EXPERTS. */
#define QMOE_GMM_LIST_MAX_EXPERTS 65536

/*
 * Phase one. Arguments as qmoe_grouped_matmul_swiglu_quant_workspace_size, except:
 *   weights[e], e < num_experts: int8 (A8W8) per-expert weights, all of one layout: FRACTAL_NZ
 *     rank 4 [N/32, K/16, 16, 32], or ND rank 2 [K, N]. Same shape, dtype, format and strides
 *     for every expert; each may live anywhere (its own allocation).
 *   weight_scales[e]: [N] per-channel or [G, N] per-group scales of expert e (float32, float16 or
 *     bfloat16), all of one shape, dtype and strides.
 *   swiglu_limit: 0 (or anything <= 1e-8): no clamp; > 1e-8: the clamp above. NaN and negative
 *     values are QMOE_ERR_PARAM_INVALID. The clamp is computed by the reference kernel: with
 *     options->kernel AUTO it is chosen, another explicit kernel is QMOE_ERR_PARAM_INVALID.
 * There is no bias and no offset (A8W8 only, as the vendor's). groupList may have up to num_experts
 * entries. Phase two is qmoe_grouped_matmul_swiglu_quant() with the executor returned here; the
 * weights' memory must stay valid as long as for any executor, the arrays `weights` and
 * `weight_scales` (and the tensor objects) only during this call. Errors: QMOE_ERR_PARAM_NULLPTR
 * for a NULL list, entry or required tensor; QMOE_ERR_PARAM_INVALID naming the entry ("weights[3]:
 * ...") for a bad one; nothing is allocated on error.
 */
QMOE_API qmoe_status qmoe_grouped_matmul_swiglu_quant_weight_list_workspace_size(
    const qmoe_tensor *x, const qmoe_tensor *const *weights,
    const qmoe_tensor *const *weight_scales, int64_t num_experts, const qmoe_tensor *x_scale,
    const qmoe_tensor *group_list, float swiglu_limit, const qmoe_tensor *output,
    const qmoe_tensor *output_scale, const qmoe_grouped_matmul_swiglu_quant_options *options,
    uint64_t *workspace_size,
    qmoe_grouped_matmul_swiglu_quant_executor **executor);

#ifdef __cplusplus
}
#endif

#endif /* QMOE_GMM_LIST_H */
