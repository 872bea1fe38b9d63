/*
 * qmoe — the operator model: plan once from shapes, execute many times with data.
 *
 * Every qmoe operator is a qmoe_op. qmoe_op_create_<operator>() is phase one: it validates every
 * argument from shapes, dtypes, strides, formats and options only (tensor data is never read, and
 * tensors may be descriptors without data, see qmoe_tensor_desc_create), chooses the kernel, the
 * work split and the scratch, and returns the plan with its workspace size. The plan is immutable:
 * qmoe_op_execute() binds the data of one run (one pointer per tensor argument), checks what needs
 * data (outputs that overlap inputs or each other, the workspace), queues the operator on a stream,
 * and never re-decides; the index data (groupList, expert ids, row indices) is checked when the
 * operator runs, after the operators queued before it. Any number of threads may execute one op at
 * the same time; executing allocates nothing once a stream has run as many operators at once as it
 * will hold.
 *
 * The vendor-style two-phase calls (qmoe_grouped_matmul_swiglu_quant_workspace_size() +
 * qmoe_grouped_matmul_swiglu_quant(), the aclnn face) are built on this: their executors are an op
 * plus the data of the tensors given at phase one.
 *
 * Arguments of qmoe_op_execute: args[i] is the data of the op's i-th tensor argument, in the order
 * of the tensor parameters of its create function (qmoe_op_arg_name() names them):
 *   - NULL for an optional tensor that was absent (NULL) at planning; anything else is an error;
 *   - for a tensor given at planning, its data: the memory must hold the planned shape and
 *     strides from that address (NULL only when the tensor has no elements);
 *   - a prepacked weight view (qmoe/weights.h) is part of the plan: its entry, and those of the
 *     weight_scale and bias it folded in, must be NULL or the pointers given at planning.
 * The weight-list operator's arguments are x, weights[0..E), weight_scales[0..E), x_scale,
 * group_list, output, output_scale (E = num_experts; each list entry is named "weights" or
 * "weightScales"). A fused-operator plan for D > 1 devices (options.devices) cuts its rows at whole
 * 128-byte lines of output and outputScale: a run's output and outputScale must then be 128-byte
 * aligned. A failed call writes nothing and says why in qmoe_last_error() / qmoe_last_error_info().
 */
#ifndef QMOE_OP_H
#define QMOE_OP_H

#include <stdint.h>

#include "qmoe/export.h"
#include "qmoe/grouped_matmul.h"
#include "qmoe/moe_ops.h"
#include "qmoe/qmoe.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qmoe_op qmoe_op;

/* The operator a plan is for (qmoe_op_type_of). Values are stable; new ones are appended. */
typedef enum qmoe_op_type {
    QMOE_OP_GROUPED_MATMUL_SWIGLU_QUANT = 1,             /* GroupedMatmulSwigluQuant (qmoe.h) */
    QMOE_OP_GROUPED_MATMUL_SWIGLU_QUANT_WEIGHT_LIST = 2, /* per-expert weight lists (gmm_list.h) */
    QMOE_OP_GROUPED_MATMUL = 3,               /* GroupedMatmul (qmoe/grouped_matmul.h) */
    QMOE_OP_DYNAMIC_QUANT = 4,                /* the operators of qmoe/moe_ops.h */
    QMOE_OP_MOE_GATING_TOP_K_SOFTMAX = 5,
    QMOE_OP_MOE_GATING_TOP_K = 6,
    QMOE_OP_MOE_INIT_ROUTING = 7,
    QMOE_OP_MOE_FINALIZE_ROUTING = 8,
    QMOE_OP_SWIGLU = 9,
} qmoe_op_type;

/* A tensor descriptor: shape, strides (NULL: row-major), dtype and format, no data. Accepted by
 * every qmoe_op_create_* function; the two-phase calls that bind data at phase one refuse it
 * (QMOE_ERR_PARAM_NULLPTR, data is NULL). Errors as qmoe_tensor_create. Destroy it with
 * qmoe_tensor_destroy. */
QMOE_API qmoe_status qmoe_tensor_desc_create(const int64_t *shape, int ndim,
                                             const int64_t *strides, qmoe_dtype dtype,
                                             qmoe_format format, qmoe_tensor **out);

/* ---------------------------------------------------------------- phase one ------------------- */
/* Arguments, rules and errors as the operator's ..._workspace_size function (its header), less
 * the checks that need data; on error *op is left as it was and nothing is allocated. The tensor
 * objects may be destroyed after the call. */

QMOE_API qmoe_status qmoe_op_create_grouped_matmul_swiglu_quant(
    const qmoe_tensor *x, const qmoe_tensor *weight, const qmoe_tensor *bias,
    const qmoe_tensor *offset, const qmoe_tensor *weight_scale, const qmoe_tensor *x_scale,
    const qmoe_tensor *group_list, const qmoe_tensor *output, const qmoe_tensor *output_scale,
    const qmoe_tensor *output_offset, const qmoe_grouped_matmul_swiglu_quant_options *options,
    qmoe_op **op);

QMOE_API qmoe_status qmoe_op_create_grouped_matmul_swiglu_quant_weight_list(
    const qmoe_tensor *x, const qmoe_tensor *const *weights,
    const qmoe_tensor *const *weight_scales, int64_t num_experts, const qmoe_tensor *x_scale,
    const qmoe_tensor *group_list, float swiglu_limit, const qmoe_tensor *output,
    const qmoe_tensor *output_scale, const qmoe_grouped_matmul_swiglu_quant_options *options,
    qmoe_op **op);

QMOE_API qmoe_status qmoe_op_create_grouped_matmul(
    const qmoe_tensor *x, const qmoe_tensor *weight, const qmoe_tensor *bias,
    const qmoe_tensor *scale, const qmoe_tensor *per_token_scale, const qmoe_tensor *group_list,
    int64_t group_list_type, const qmoe_tensor *out, const qmoe_grouped_matmul_options *options,
    qmoe_op **op);

QMOE_API qmoe_status qmoe_op_create_dynamic_quant(const qmoe_tensor *x,
                                                  const qmoe_tensor *smooth_scales,
                                                  const qmoe_tensor *y, const qmoe_tensor *scale,
                                                  const qmoe_moe_options *options, qmoe_op **op);

QMOE_API qmoe_status qmoe_op_create_moe_gating_top_k_softmax(
    const qmoe_tensor *x, const qmoe_tensor *finished, int64_t k, const qmoe_tensor *y,
    const qmoe_tensor *expert_idx, const qmoe_tensor *row_idx, const qmoe_moe_options *options,
    qmoe_op **op);

QMOE_API qmoe_status qmoe_op_create_moe_gating_top_k(
    const qmoe_tensor *x, const qmoe_tensor *bias, const qmoe_moe_gating_attrs *attrs,
    const qmoe_tensor *y, const qmoe_tensor *expert_idx, const qmoe_tensor *out,
    const qmoe_moe_options *options, qmoe_op **op);

QMOE_API qmoe_status qmoe_op_create_moe_init_routing(
    const qmoe_tensor *x, const qmoe_tensor *expert_idx, const qmoe_tensor *scale,
    const qmoe_tensor *offset, const qmoe_moe_routing_attrs *attrs, const qmoe_tensor *expanded_x,
    const qmoe_tensor *expanded_row_idx, const qmoe_tensor *expert_tokens,
    const qmoe_tensor *expanded_scale, const qmoe_moe_options *options, qmoe_op **op);

QMOE_API qmoe_status qmoe_op_create_moe_finalize_routing(
    const qmoe_tensor *expanded_x, const qmoe_tensor *expanded_row_idx, const qmoe_tensor *x1,
    const qmoe_tensor *x2, const qmoe_tensor *bias, const qmoe_tensor *scales,
    const qmoe_tensor *expert_idx, int64_t drop_pad_mode, const qmoe_tensor *out,
    const qmoe_moe_options *options, qmoe_op **op);

QMOE_API qmoe_status qmoe_op_create_swiglu(const qmoe_tensor *x, int64_t dim,
                                           const qmoe_tensor *out,
                                           const qmoe_moe_options *options, qmoe_op **op);

/* ---------------------------------------------------------------- the plan -------------------- */

/* Bytes of workspace qmoe_op_execute needs (0: it may be NULL); 0 for NULL. */
QMOE_API uint64_t qmoe_op_workspace_size(const qmoe_op *op);

/* The operator; 0 for NULL. */
QMOE_API qmoe_op_type qmoe_op_type_of(const qmoe_op *op);

/* The operator's vendor name, e.g. "GroupedMatmulSwigluQuant"; "" for NULL. */
QMOE_API const char *qmoe_op_name(const qmoe_op *op);

/* Entries of qmoe_op_execute's args; -1 for NULL. */
QMOE_API int qmoe_op_arg_count(const qmoe_op *op);

/* The vendor's name of argument `index` ("x", "weight", "groupList", "weights[3]", ...); NULL
 * when out of range. */
QMOE_API const char *qmoe_op_arg_name(const qmoe_op *op, int index);

/* The kernel phase one chose for a matmul operator (never QMOE_KERNEL_AUTO); QMOE_KERNEL_AUTO
 * for NULL and for the element-wise operators. */
QMOE_API qmoe_kernel qmoe_op_kernel(const qmoe_op *op);

/* ---------------------------------------------------------------- phase two ------------------- */

/* Runs the plan on this data. `nargs` must equal qmoe_op_arg_count(op). `workspace` must hold
 * qmoe_op_workspace_size(op) bytes, aligned for int64 (64 bytes is best), and must not overlap
 * an argument. `stream` NULL runs synchronously on the process-wide default device group;
 * otherwise the operator is queued and its data errors are reported by qmoe_stream_synchronize()
 * (the workspace and the arguments' memory must stay valid until then; the op may be destroyed at
 * once). Errors: QMOE_ERR_PARAM_NULLPTR (op, a required argument or the workspace is NULL),
 * QMOE_ERR_PARAM_INVALID (nargs, an argument where none was planned, overlap, workspace size or
 * alignment, a stream with fewer devices than the plan; data rules when synchronous). */
QMOE_API qmoe_status qmoe_op_execute(const qmoe_op *op, void *const *args, int nargs,
                                     void *workspace, uint64_t workspace_size,
                                     qmoe_stream *stream);

/* NULL is a no-op. Operators already queued keep what they need. */
QMOE_API void qmoe_op_destroy(qmoe_op *op);

#ifdef __cplusplus
}
#endif

#endif /* QMOE_OP_H */
