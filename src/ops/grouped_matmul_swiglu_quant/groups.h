/* groupList: the data-dependent check of phase two, made on the device at execution time. */
#ifndef QMOE_OPS_GMM_GROUPS_H
#define QMOE_OPS_GMM_GROUPS_H

#include "core/gmm_params.h"
#include "qmoe/qmoe.h"

/* Reads groupList once: values must be >= 0, cumsum non-decreasing, and the last end (or the sum
 * of counts) <= M. Returns QMOE_ERR_PARAM_INVALID with a message naming the entry otherwise.
 * The driver (gmm_run.c) calls it on each device before it computes anything, then reads
 * groupList again (the split, the blocks) and relies on these rules without rechecking. */
qmoe_status qmoe_gmm_check_groups(const qmoe_gmm_params *p);

#endif
