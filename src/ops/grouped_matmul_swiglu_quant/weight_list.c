/*
 * Phase one of the per-expert weight-list operator (qmoe/gmm_list.h). The list is checked entry
 * by entry, then described to the ordinary planner as one stacked tensor with an expert stride
 * of 0 over expert 0's memory, so every other rule is the planner's. The plan then reads each
 * expert through a table of base pointers (qmoe_gmm_params.w_list / ws_list) that each run
 * writes at the end of its workspace from its arguments (the experts' data).
 */
#include <math.h>
#include <stdalign.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ops/grouped_matmul_swiglu_quant/plan.h"
#include "ops/grouped_matmul_swiglu_quant/run.h"
#include "ops/op.h"
#include "qmoe/gmm_list.h"

/* Argument errors with the structured info (rule, argument by the vendor's name). */
#define INVALID(rule, arg, ...) qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_##rule, arg, __VA_ARGS__)

/* Below this the vendor's kernel skips the clamp; qmoe follows it. */
#define SWIGLU_LIMIT_OFF 1e-8f

static int same_layout(const qmoe_tensor *a, const qmoe_tensor *b)
{
    if (a->ndim != b->ndim || a->dtype != b->dtype || a->format != b->format) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i] || (a->numel && a->strides[i] != b->strides[i])) return 0;
    return 1;
}

/* Every entry present and laid out like entry 0. */
static qmoe_status check_list(const char *name, const char *arg, const qmoe_tensor *const *list,
                              int64_t n)
{
    if (!list)
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, arg, "%s is a null pointer",
                             name);
    for (int64_t e = 0; e < n; e++)
        if (!list[e])
            return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, arg,
                                 "%s[%lld] is a null pointer", name, (long long)e);
    for (int64_t e = 1; e < n; e++)
        if (!same_layout(list[0], list[e]))
            return INVALID(SHAPE, arg,
                           "%s[%lld]: shape, dtype, format or strides differ from %s[0]; every "
                           "expert must have the same layout",
                           name, (long long)e, name);
    return QMOE_OK;
}

/* `one` with a leading expert axis of n entries and stride 0 (the planner's view). */
static qmoe_status stacked(const char *name, const char *arg, const qmoe_tensor *one, int64_t n,
                           qmoe_tensor *out)
{
    if (one->ndim + 1 > QMOE_MAX_DIMS)
        return INVALID(RANK, arg, "%s[0]: rank %d is too large", name, one->ndim);
    memset(out, 0, sizeof *out);
    out->ndim = one->ndim + 1;
    out->dtype = one->dtype;
    out->format = one->format;
    out->shape[0] = n;
    out->strides[0] = 0;
    for (int i = 0; i < one->ndim; i++) {
        out->shape[i + 1] = one->shape[i];
        out->strides[i + 1] = one->strides[i];
    }
    if (!qmoe_mul_i64(one->numel, n, &out->numel))
        return INVALID(LIMIT, arg, "%s: element count overflows", name);
    out->data = one->data;
    return QMOE_OK;
}

/* In-place execution is refused for every expert, not only expert 0 (the planner sees that one). */
static qmoe_status check_outputs_apart(const qmoe_tensor *const *list, const char *name, int64_t n,
                                       const qmoe_tensor *output, const qmoe_tensor *output_scale)
{
    for (int64_t e = 0; e < n; e++) {
        if (qmoe_tensor_overlaps(output, list[e]))
            return INVALID(OVERLAP, "output",
                           "output overlaps %s[%lld] in memory; in-place execution is not supported",
                           name, (long long)e);
        if (qmoe_tensor_overlaps(output_scale, list[e]))
            return INVALID(OVERLAP, "outputScale",
                           "outputScale overlaps %s[%lld] in memory; in-place execution is not "
                           "supported",
                           name, (long long)e);
    }
    return QMOE_OK;
}

/* Arguments: x, weights[0..E), weightScales[0..E), xScale, groupList, output, outputScale. */
static int arg_xscale(int64_t E) { return (int)(1 + 2 * E); }

static void list_bind(void *plan, const qmoe_op *op, void *const *args, void *workspace)
{
    (void)op;
    qmoe_gmm_params *p = plan;
    int64_t n = p->E;
    uintptr_t at = (uintptr_t)workspace + p->list_table_offset;
    at += (uintptr_t)(-(intptr_t)at) & (alignof(void *) - 1);
    const void **table = (const void **)at;
    for (int64_t e = 0; e < 2 * n; e++) table[e] = args[1 + e];
    p->w_list = table;
    p->ws_list = table + n;
    int i = arg_xscale(n);
    if (args[0]) p->x = args[0];
    if (args[i]) p->xs = args[i];
    if (args[i + 1]) p->gl = args[i + 1];
    if (args[i + 2]) p->out = args[i + 2];
    if (args[i + 3]) p->out_scale = args[i + 3];
}

static const op_desc list_desc = {QMOE_OP_GROUPED_MATMUL_SWIGLU_QUANT_WEIGHT_LIST,
                                  "GroupedMatmulSwigluQuantWeightNzTensorList", list_bind,
                                  qmoe_gmm_check, qmoe_gmm_device_run};

qmoe_status qmoe_op_create_grouped_matmul_swiglu_quant_weight_list(
    const qmoe_tensor *x, const qmoe_tensor *const *weights,
    const qmoe_tensor *const *weight_scales, int64_t num_experts, const qmoe_tensor *x_scale,
    const qmoe_tensor *group_list, float swiglu_limit, const qmoe_tensor *output,
    const qmoe_tensor *output_scale, const qmoe_grouped_matmul_swiglu_quant_options *options, qmoe_op **op)
{
    qmoe_status st;
    if (!op) return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "op", "op is a null pointer");
    if (num_experts < 1 || num_experts > QMOE_GMM_LIST_MAX_EXPERTS)
        return INVALID(LIMIT, "weight", "num_experts = %lld, expected 1 to %d",
                       (long long)num_experts, QMOE_GMM_LIST_MAX_EXPERTS);
    if ((st = check_list("weights", "weight", weights, num_experts)) ||
        (st = check_list("weightScales", "weightScale", weight_scales, num_experts)))
        return st;
    if (isnan(swiglu_limit) || swiglu_limit < 0.0f)
        return INVALID(LIMIT, "swigluLimit",
                       "swiglu_limit = %g, expected 0 (no clamp) or a positive number",
                       (double)swiglu_limit);

    const qmoe_tensor *w0 = weights[0], *s0 = weight_scales[0];
    if (w0->dtype != QMOE_DTYPE_INT8)
        return INVALID(DTYPE, "weight",
                       "weights[0]: dtype %s, expected int8 (the weight-list operator is A8W8)",
                       qmoe_dtype_name(w0->dtype));
    if (!(w0->format == QMOE_FORMAT_FRACTAL_NZ && w0->ndim == 4) &&
        !(w0->format == QMOE_FORMAT_ND && w0->ndim == 2))
        return INVALID(RANK, "weight",
                       "weights[0]: %s of rank %d, expected FRACTAL_NZ [N/32, K/16, 16, 32] or "
                       "ND [K, N]",
                       qmoe_format_name(w0->format), w0->ndim);
    if (s0->ndim != 1 && s0->ndim != 2)
        return INVALID(RANK, "weightScale", "weightScales[0]: rank %d, expected 1 [N] or 2 [G, N]",
                       s0->ndim);

    /* A local copy (force_weight_nz changes below) of the fields this library knows; a struct_size
     * too small for them goes to the planner as given, which refuses it. */
    qmoe_grouped_matmul_swiglu_quant_options o = {0};
    const qmoe_grouped_matmul_swiglu_quant_options *opts = &o;
    if (options && options->struct_size && options->struct_size < sizeof o) {
        opts = options;
    } else if (options) {
        const unsigned char *extra = (const unsigned char *)options;
        for (uint32_t i = (uint32_t)sizeof o; i < options->struct_size; i++)
            if (extra[i])
                return INVALID(OPTION, "options",
                               "options: struct_size = %u, and bytes past this library's %u are "
                               "not zero (fields it does not know)",
                               options->struct_size, (unsigned)sizeof o);
        memcpy(&o, options, sizeof o);
        o.struct_size = (uint32_t)sizeof o;
    }
    /* every kernel's SwiGLU step takes the clamp: the kernel is chosen as without one */
    int clamp = swiglu_limit > SWIGLU_LIMIT_OFF;
    o.force_weight_nz = 0; /* each expert's declared format is the truth */

    qmoe_tensor w, s;
    if ((st = stacked("weights", "weight", w0, num_experts, &w)) ||
        (st = stacked("weightScales", "weightScale", s0, num_experts, &s)))
        return st;
    /* The planner checks the rest; its messages name the stacked views "weight"/"weightScale". */
    if (output && output_scale &&
        ((st = check_outputs_apart(weights, "weights", num_experts, output, output_scale)) ||
         (st = check_outputs_apart(weight_scales, "weightScales", num_experts, output,
                                   output_scale))))
        return st;
    qmoe_gmm_params plan;
    if ((st = qmoe_gmm_plan(x, &w, NULL, NULL, &s, x_scale, group_list, output, output_scale, NULL,
                            opts, &plan)))
        return st;

    /* Workspace: the planner's bytes, then both tables (8 bytes of slack for their alignment). */
    uint64_t table_bytes = 2u * (uint64_t)num_experts * sizeof(void *);
    uint64_t offset = (plan.workspace_bytes + 63u) & ~(uint64_t)63u;
    if (offset < plan.workspace_bytes || offset > UINT64_MAX - table_bytes - alignof(void *))
        return INVALID(LIMIT, "workspace", "workspace size overflows");
    plan.list_table_offset = offset;
    plan.workspace_bytes = offset + table_bytes + alignof(void *);
    if (clamp) plan.swiglu_limit = swiglu_limit; /* else options.swiglu_limit's, as planned */

    plan.w_list = NULL; /* bound per run, from the arguments (list_bind) */
    plan.ws_list = NULL;
    if (num_experts > (INT32_MAX - 8) / 2)
        return INVALID(LIMIT, "weight", "num_experts = %lld is too many arguments",
                       (long long)num_experts);
    int nargs = arg_xscale(num_experts) + 4;
    qmoe_op *h;
    if ((st = qmoe_gmm_op_new(&list_desc, &plan, nargs, &h))) return st;
    op_arg_set(h, 0, "x", x, OP_IN);
    for (int64_t e = 0; e < num_experts; e++) {
        op_arg_set(h, (int)(1 + e), "weights", weights[e], OP_IN);
        op_arg_set(h, (int)(1 + num_experts + e), "weightScales", weight_scales[e], OP_IN);
    }
    int i = arg_xscale(num_experts);
    op_arg_set(h, i, "xScale", x_scale, OP_IN);
    op_arg_set(h, i + 1, "groupList", group_list, OP_IN);
    op_arg_set(h, i + 2, "output", output, OP_OUT);
    op_arg_set(h, i + 3, "outputScale", output_scale, OP_OUT);
    qmoe_gmm_align_outputs(h, &plan, i + 2, i + 3);
    *op = h;
    qmoe_clear_error();
    return QMOE_OK;
}

qmoe_status qmoe_grouped_matmul_swiglu_quant_weight_list_workspace_size(
    const qmoe_tensor *x, const qmoe_tensor *const *weights,
    const qmoe_tensor *const *weight_scales, int64_t num_experts, const qmoe_tensor *x_scale,
    const qmoe_tensor *group_list, float swiglu_limit, const qmoe_tensor *output,
    const qmoe_tensor *output_scale, const qmoe_grouped_matmul_swiglu_quant_options *options, uint64_t *workspace_size,
    qmoe_grouped_matmul_swiglu_quant_executor **executor)
{
    qmoe_status st = op_out_pointers(NULL, workspace_size, executor);
    if (st) return st;
    qmoe_op *op;
    st = qmoe_op_create_grouped_matmul_swiglu_quant_weight_list(
        x, weights, weight_scales, num_experts, x_scale, group_list, swiglu_limit, output,
        output_scale, options, &op);
    if (st) return st;
    int n = op->nargs, i = arg_xscale(num_experts);
    const qmoe_tensor **t = malloc((size_t)n * sizeof *t);
    if (!t) {
        qmoe_op_destroy(op);
        return qmoe_fail(QMOE_ERR_INNER, "out of memory for the executor");
    }
    t[0] = x;
    for (int64_t e = 0; e < num_experts; e++) {
        t[1 + e] = weights[e];
        t[1 + num_experts + e] = weight_scales[e];
    }
    t[i] = x_scale, t[i + 1] = group_list, t[i + 2] = output, t[i + 3] = output_scale;
    st = qmoe_gmm_executor_new(op, t, workspace_size, executor);
    free(t);
    return st;
}
