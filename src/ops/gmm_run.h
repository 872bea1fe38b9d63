/* The device side of GroupedMatmulSwigluQuant: executes a validated plan. */
#ifndef QMOE_OPS_GMM_RUN_H
#define QMOE_OPS_GMM_RUN_H

#include "core/gmm_params.h"
#include "qmoe/qmoe.h"

/* Runs the plan (groupList already checked) on the stream's devices (NULL: the default device
 * group, synchronously). The plan is copied into the queued operator. */
qmoe_status qmoe_gmm_run(const qmoe_gmm_params *p, void *workspace, qmoe_stream *stream);

#endif
