/*
 * The MoE layer's forward with each operator timed (for `qmoe bench moe --breakdown`, not part of
 * the public API): the same plan and bits as qmoe_moe_layer_forward, the stream synchronized after
 * each operator so its wall time is its own. seconds: each operator's wall time, then its CPU time
 * (every thread of the process: steadier than wall time on a shared machine).
 */
#ifndef QMOE_OPS_MOE_LAYER_PHASES_H
#define QMOE_OPS_MOE_LAYER_PHASES_H

#include "qmoe/moe_layer.h"

/* gating, init routing (sort + per-token quant + row copies), gate/up (GroupedMatmulSwigluQuant),
 * down (GroupedMatmul), finalize routing */
enum { MOE_LAYER_PHASES = 5 };

qmoe_status moe_layer_forward_phases(const qmoe_moe_layer *layer, const qmoe_tensor *hidden,
                                     const qmoe_tensor *router_logits, const qmoe_tensor *out,
                                     void *workspace, uint64_t workspace_size, qmoe_stream *stream,
                                     double seconds[2 * MOE_LAYER_PHASES]);

#endif
