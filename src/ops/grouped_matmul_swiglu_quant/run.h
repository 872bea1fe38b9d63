/* The device side of GroupedMatmulSwigluQuant: executes a validated plan. */
#ifndef QMOE_OPS_GMM_RUN_H
#define QMOE_OPS_GMM_RUN_H

#include "core/gmm_params.h"
#include "runtime/device.h"

/* Device `index` of `count`'s share of a bound plan (its descriptor's run, ops/grouped_matmul_swiglu_quant/op.c): the
 * groupList was checked first (qmoe_gmm_check_groups), on every device. */
qmoe_status qmoe_gmm_device_run(const void *plan, void *workspace, qmoe_device *dev, int index,
                                int count);

#endif
