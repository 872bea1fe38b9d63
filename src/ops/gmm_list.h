/* Phase two's part of the per-expert weight-list operator (src/ops/gmm_list_op.c). */
#ifndef QMOE_OPS_GMM_LIST_H
#define QMOE_OPS_GMM_LIST_H

#include "core/gmm_params.h"

/* For a weight-list plan, copies its per-expert tables into `workspace` (at list_table_offset)
 * and points `run` at that copy, so a queued run outlives the executor; other plans are left as
 * they are. `workspace` holds the plan's workspace_bytes. */
void qmoe_gmm_list_bind(qmoe_gmm_params *run, void *workspace);

#endif
