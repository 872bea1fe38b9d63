/* Phase one of GroupedMatmulSwigluQuant: validation and planning into qmoe_gmm_params. */
#ifndef QMOE_HOST_GMM_PLAN_H
#define QMOE_HOST_GMM_PLAN_H

#include "core/gmm_params.h"
#include "ops/op.h"
#include "qmoe/qmoe.h"

/* Validates every argument that does not need device data and fills *plan. Allocates nothing;
 * on error *plan is unspecified and qmoe_last_error() says which argument broke which rule. */
qmoe_status qmoe_gmm_plan(const qmoe_tensor *x, const qmoe_tensor *weight,
                          const qmoe_tensor *bias, const qmoe_tensor *offset,
                          const qmoe_tensor *weight_scale, const qmoe_tensor *x_scale,
                          const qmoe_tensor *group_list, const qmoe_tensor *output,
                          const qmoe_tensor *output_scale, const qmoe_tensor *output_offset,
                          const qmoe_grouped_matmul_swiglu_quant_options *options, qmoe_gmm_params *plan);

/* The op of a filled plan (devices, kernel, workspace and scratch from it), nargs entries. */
qmoe_status qmoe_gmm_op_new(const op_desc *desc, const qmoe_gmm_params *plan, int nargs,
                            qmoe_op **out);
/* Marks arguments out and out_scale of a multi-device plan as needing 128-byte lines. */
void qmoe_gmm_align_outputs(qmoe_op *op, const qmoe_gmm_params *plan, int out, int out_scale);
/* The descriptors' data check: the groupList rules (ops/grouped_matmul_swiglu_quant/groups.c). */
qmoe_status qmoe_gmm_check(const void *plan, void *workspace);
/* A two-phase executor over op bound to tensors (the create function's order); takes op. */
qmoe_status qmoe_gmm_executor_new(qmoe_op *op, const qmoe_tensor *const *tensors,
                                  uint64_t *workspace_size, qmoe_grouped_matmul_swiglu_quant_executor **executor);

/* The plan of a two-phase executor (the tests inspect and edit it). */
qmoe_gmm_params *qmoe_grouped_matmul_swiglu_quant_executor_params(qmoe_grouped_matmul_swiglu_quant_executor *executor);

#endif
