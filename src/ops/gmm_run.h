/* The device side of GroupedMatmulSwigluQuant: executes a validated plan. */
#ifndef QMOE_OPS_GMM_RUN_H
#define QMOE_OPS_GMM_RUN_H

#include "core/gmm_params.h"
#include "qmoe/qmoe.h"

/* Runs the plan (groupList already checked). */
qmoe_status qmoe_gmm_run(const qmoe_gmm_params *p, void *workspace, qmoe_stream *stream);

/* Computes output rows [m0, m1) of expert e with the plan's kernel, using `row_buf` (ws_row_bytes)
 * for one S row at a time. Used by the single-threaded path and as the simplest worker body. */
void qmoe_gmm_rows(const qmoe_gmm_params *p, int64_t e, int64_t m0, int64_t m1, float *row_buf);

#endif
