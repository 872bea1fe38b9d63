/*
 * Test hooks of the library: fault injection and counters for the in-tree tests. Not installed,
 * not exported. The hooks that act inside the driver or the stream exist only in the objects
 * built with QMOE_TESTING (the qmoe_testing library that the tests link through
 * qmoe_internal); libqmoe itself is built without them, so no release path tests for a hook.
 */
#ifndef QMOE_TESTING_H
#define QMOE_TESTING_H

#include <stdint.h>

#include "qmoe/runtime.h"

/* Make the device fail the `op_count`-th operator it starts from now (1: the next) with
 * QMOE_ERR_RUNTIME, as a device fault would; 0 cancels. In a group, every device returns that
 * error for the operator (it is passed on through the fences). Acts only in QMOE_TESTING builds. */
qmoe_status qmoe_device_inject_failure(qmoe_device *device, uint64_t op_count);

/* The status the device returned for the last operator it ran. */
qmoe_status qmoe_device_last_status(const qmoe_device *device);

/* Operators the device has run. */
uint64_t qmoe_device_ops_run(const qmoe_device *device);

/* Faults in the driver's copy-queue pipeline, to show the checked build catches them. Set while
 * no operator is in flight; defined only in QMOE_TESTING builds (a link error elsewhere). */
typedef enum qmoe_gmm_fault {
    QMOE_GMM_FAULT_NONE = 0,
    QMOE_GMM_FAULT_SKIP_POP,         /* a part leaves its last x-scale push unpopped */
    QMOE_GMM_FAULT_POP_OUT_OF_ORDER, /* pops a block's x-scale before its x */
    QMOE_GMM_FAULT_READ_BEFORE_POP,  /* computes a block before popping its operands */
} qmoe_gmm_fault;

extern qmoe_gmm_fault qmoe_gmm_test_fault;

#endif
