/* groupList: the data-dependent check of phase two and the row range of each expert. */
#ifndef QMOE_OPS_GMM_GROUPS_H
#define QMOE_OPS_GMM_GROUPS_H

#include "core/gmm_params.h"
#include "qmoe/qmoe.h"

/* Reads groupList once: values must be >= 0, cumsum non-decreasing, and the last end <= M.
 * Writes the end row of each listed expert to ends[0 .. E_groups) (cumsum form) when ends is not
 * NULL. Returns QMOE_ERR_PARAM_INVALID with a message naming the entry otherwise. */
qmoe_status qmoe_gmm_check_groups(const qmoe_gmm_params *p, int64_t *ends);

#endif
