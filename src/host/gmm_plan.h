/* Phase one of GroupedMatmulSwigluQuant: validation and planning into qmoe_gmm_params. */
#ifndef QMOE_HOST_GMM_PLAN_H
#define QMOE_HOST_GMM_PLAN_H

#include "core/gmm_params.h"
#include "qmoe/qmoe.h"

/* Validates every argument that does not need device data and fills *plan. Allocates nothing;
 * on error *plan is unspecified and qmoe_last_error() says which argument broke which rule. */
qmoe_status qmoe_gmm_plan(const qmoe_tensor *x, const qmoe_tensor *weight,
                          const qmoe_tensor *bias, const qmoe_tensor *offset,
                          const qmoe_tensor *weight_scale, const qmoe_tensor *x_scale,
                          const qmoe_tensor *group_list, const qmoe_tensor *output,
                          const qmoe_tensor *output_scale, const qmoe_tensor *output_offset,
                          const qmoe_op_options *options, qmoe_gmm_params *plan);

struct qmoe_executor {
    qmoe_gmm_params plan;
    int one_shot; /* vendor executors are destroyed by their execution */
};

#endif
