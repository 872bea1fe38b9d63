/* The device side of GroupedMatmulSwigluQuant: executes a validated plan. */
#ifndef QMOE_OPS_GMM_RUN_H
#define QMOE_OPS_GMM_RUN_H

#include "core/gmm_params.h"
#include "qmoe/qmoe.h"

/* Runs the plan (groupList already checked) on the stream's devices (NULL: the default device
 * group, synchronously). The plan is copied into the queued operator. */
qmoe_status qmoe_gmm_run(const qmoe_gmm_params *p, void *workspace, qmoe_stream *stream);

/* Test-only faults in the driver's copy-queue pipeline, to show the checked build catches them.
 * Set while no operator is in flight. */
typedef enum qmoe_gmm_fault {
    QMOE_GMM_FAULT_NONE = 0,
    QMOE_GMM_FAULT_SKIP_POP,        /* a part leaves its last x-scale push unpopped */
    QMOE_GMM_FAULT_POP_OUT_OF_ORDER, /* pops a block's x-scale before its x */
    QMOE_GMM_FAULT_READ_BEFORE_POP, /* computes a block before popping its operands */
} qmoe_gmm_fault;

extern qmoe_gmm_fault qmoe_gmm_test_fault;

#endif
