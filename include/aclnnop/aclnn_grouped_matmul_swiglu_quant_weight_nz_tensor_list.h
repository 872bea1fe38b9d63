/*
 * qmoe's source-compatible aclnnGroupedMatmulSwigluQuantWeightNzTensorList: the fused MoE step
 * with every expert's weight and weight scale its own tensor (an aclTensorList each), as
 * inference engines call it. Written for qmoe from the published interface; the operator is
 * docs/ops/grouped-matmul-swiglu-quant.md (A8W8) plus the swiglu_limit clamp
 * (docs/ops/grouped-matmul-swiglu-quant-weight-list.md), over the native qmoe/gmm_list.h.
 *
 * Phase one: x int8 [M, K]; weight a list of E int8 tensors, each FRACTAL_NZ with view
 * [N/32, K/16, 16, 32] (or ND [K, N]), all of one layout; bias and offset must be NULL (the list
 * operator is A8W8 without bias); weightScale a list of E scales [N] (float32, float16 or
 * bfloat16); xScale float32 [M]; groupList int64 [E'] (E' <= E); swigluLimit as below; output
 * int8 [M, N/2]; outputScale float32 [M]; outputOffset reserved (NULL). Codes and messages as
 * aclnnGroupedMatmulSwigluQuantWeightNZGetWorkspaceSize.
 * swigluLimit <= 1e-8: no clamp. > 1e-8: C is clamped before SwiGLU, the activated half C[:, :N/2]
 * to at most swigluLimit and the linear half C[:, N/2:] to [-swigluLimit, swigluLimit].
 * Phase two as aclnnGroupedMatmulSwigluQuantWeightNZ (one-shot executor, stream semantics).
 * The weights stay where they are: their memory must stay valid until the stream is
 * synchronized; the lists may be destroyed after phase one.
 */
#ifndef QMOE_ACLNNOP_GROUPED_MATMUL_SWIGLU_QUANT_WEIGHT_NZ_TENSOR_LIST_H
#define QMOE_ACLNNOP_GROUPED_MATMUL_SWIGLU_QUANT_WEIGHT_NZ_TENSOR_LIST_H

#include "aclnnop/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifndef QMOE_ACL_TENSOR_LIST_DECLARED
#define QMOE_ACL_TENSOR_LIST_DECLARED
typedef struct aclTensorList aclTensorList;

/* A list of `size` tensors (each non-NULL); the list takes ownership of them:
 * aclDestroyTensorList destroys the tensors too. NULL (with a message) for a NULL array, a NULL
 * entry, or out of memory. */
ACL_FUNC_VISIBILITY aclTensorList *aclCreateTensorList(const aclTensor *const *value, uint64_t size);
/* Destroys the list and its tensors; NULL is a no-op. */
ACL_FUNC_VISIBILITY aclnnStatus aclDestroyTensorList(const aclTensorList *array);
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnGroupedMatmulSwigluQuantWeightNzTensorListGetWorkspaceSize(
    const aclTensor *x, const aclTensorList *weight, const aclTensor *bias, const aclTensor *offset,
    const aclTensorList *weightScale, const aclTensor *xScale, const aclTensor *groupList,
    float swigluLimit, aclTensor *output, aclTensor *outputScale, aclTensor *outputOffset,
    uint64_t *workspaceSize, aclOpExecutor **executor);

ACL_FUNC_VISIBILITY aclnnStatus aclnnGroupedMatmulSwigluQuantWeightNzTensorList(
    void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
