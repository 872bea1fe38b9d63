/*
 * The element-wise MoE operators in the operator model (ops/op.h): phase one's helpers (host/
 * moe_common_plan.c), the op of a filled plan and the two-phase executors (ops/eltwise/exec.c).
 * Their plans and device side: ops/eltwise/plan.h.
 */
#ifndef QMOE_OPS_MOE_EXEC_H
#define QMOE_OPS_MOE_EXEC_H

#include "ops/eltwise/plan.h"
#include "ops/op.h"

/* ---------------------------------------------------------------- phase one helpers ----------- */

/* Copies a tensor (NULL: an absent view) into a view. */
void moe_view_of(const qmoe_tensor *t, moe_view *v);
/* Fails with QMOE_ERR_PARAM_INVALID naming `name` unless t's dtype is float32/float16/bfloat16. */
qmoe_status moe_check_float(const char *op, const char *name, const qmoe_tensor *t);
/* Fails unless t has rank nd and the given shape (entries < 0 are not checked). */
qmoe_status moe_check_shape(const char *op, const char *name, const qmoe_tensor *t, int nd,
                            const int64_t *shape);
qmoe_status moe_check_dtype(const char *op, const char *name, const qmoe_tensor *t,
                            qmoe_dtype dtype);
/* Fails unless outs[i] overlaps neither ins[] nor another output (NULL entries are skipped). */
qmoe_status moe_check_aliasing(const char *op, const qmoe_tensor *const *outs,
                               const char *const *out_names, int nout,
                               const qmoe_tensor *const *ins, const char *const *in_names,
                               int nin);
/* This CPU's vector row quantizer and SwiGLU (portable ones without a faster table). */
void moe_pick_kernels(moe_qrow_fn *qrow, moe_swiglu_fn *sw);
/* The plan's thread count from options (validated) or the online cores. */
qmoe_status moe_threads(const char *op, const qmoe_moe_options *options, int32_t *threads);
/* The op of a filled plan (its arguments from the plan's views, in the create function's order;
 * ops/eltwise/exec.c). */
qmoe_status moe_finish_plan(const moe_plan *plan, qmoe_op **op);
/* A two-phase executor over `op` bound to `tensors` (the create function's tensor arguments in
 * order); takes op. */
qmoe_status moe_executor_new(qmoe_op *op, const qmoe_tensor *const *tensors,
                             uint64_t *workspace_size, qmoe_moe_executor **executor);
/* Fails naming `op` unless both pointers of a two-phase phase one are given. */
qmoe_status moe_out_pointers(const char *op, uint64_t *workspace_size,
                             qmoe_moe_executor **executor);
/* Fails naming `name` unless the op out-pointer is given. */
qmoe_status moe_op_pointer(const char *name, qmoe_op **op);

qmoe_status moe_plan_dynamic_quant(const qmoe_tensor *x, const qmoe_tensor *smooth,
                                   const qmoe_tensor *y, const qmoe_tensor *scale,
                                   moe_plan *ex);

/* ---------------------------------------------------------------- phase two ------------------- */

/* Phase two of a two-phase executor: refuses one planned for another operator, then runs it. */
qmoe_status moe_execute(const char *op, int32_t kind, void *workspace, uint64_t workspace_size,
                        qmoe_moe_executor *executor, qmoe_stream *stream);

#endif
