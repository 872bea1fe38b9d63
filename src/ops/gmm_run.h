/* The device side of GroupedMatmulSwigluQuant: executes a validated plan. */
#ifndef QMOE_OPS_GMM_RUN_H
#define QMOE_OPS_GMM_RUN_H

#include "core/gmm_params.h"
#include "qmoe/qmoe.h"

/* Runs the plan on the stream's devices (NULL: the default device group, synchronously). The
 * plan is copied into the queued operator. groupList is read and checked on the devices, after
 * the operators queued before this one: a bad one fails the operator (QMOE_ERR_PARAM_INVALID,
 * nothing written), reported by this call when synchronous, by qmoe_stream_synchronize() when
 * queued. */
qmoe_status qmoe_gmm_run(const qmoe_gmm_params *p, void *workspace, qmoe_stream *stream);

#endif
