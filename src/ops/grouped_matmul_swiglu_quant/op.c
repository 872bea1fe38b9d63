/* GroupedMatmulSwigluQuant in the operator model (ops/op.h): its descriptor, the create function
 * of qmoe/op.h and the two-phase entry points built on them. */
#include <stdlib.h>

#include "core/status.h"
#include "core/tensor.h"
#include "ops/grouped_matmul_swiglu_quant/plan.h"
#include "ops/grouped_matmul_swiglu_quant/groups.h"
#include "ops/grouped_matmul_swiglu_quant/run.h"
#include "ops/op.h"

enum { A_X, A_WEIGHT, A_BIAS, A_OFFSET, A_WSCALE, A_XSCALE, A_GROUPS, A_OUT, A_OSCALE, A_OOFFSET,
       A_COUNT };

static void gmm_bind(void *plan, const qmoe_op *op, void *const *args, void *workspace)
{
    (void)op;
    (void)workspace;
    qmoe_gmm_params *p = plan;
    if (args[A_X]) p->x = args[A_X];
    if (!p->pp) { /* prepacked weights hold weight, scale and bias: part of the plan */
        if (args[A_WEIGHT]) p->w = args[A_WEIGHT];
        if (args[A_WSCALE]) p->ws = args[A_WSCALE];
        if (args[A_BIAS]) p->bias = args[A_BIAS];
    }
    if (args[A_XSCALE]) p->xs = args[A_XSCALE];
    if (args[A_GROUPS]) p->gl = args[A_GROUPS];
    if (args[A_OUT]) p->out = args[A_OUT];
    if (args[A_OSCALE]) p->out_scale = args[A_OSCALE];
}

/* groupList is read on the device, once the operators queued before this one on the stream (which
 * may write it: init routing) have run on every device of the group, and checked before any output
 * is written; every device reads the same values, so all refuse or none does. */
qmoe_status qmoe_gmm_check(const void *plan, void *workspace)
{
    (void)workspace;
    return qmoe_gmm_check_groups(plan);
}

static const op_desc gmm_desc = {QMOE_OP_GROUPED_MATMUL_SWIGLU_QUANT, "GroupedMatmulSwigluQuant", gmm_bind,
                                 qmoe_gmm_check, qmoe_gmm_device_run};

qmoe_status qmoe_gmm_op_new(const op_desc *desc, const qmoe_gmm_params *plan, int nargs,
                            qmoe_op **out)
{
    qmoe_status st = op_new(desc, plan, sizeof *plan, nargs, out);
    if (st) return st;
    (*out)->devices = plan->devices;
    (*out)->kernel = plan->kernel;
    (*out)->workspace_bytes = plan->workspace_bytes;
    (*out)->slice_bytes = plan->thread_scratch_bytes;
    return QMOE_OK;
}

void qmoe_gmm_align_outputs(qmoe_op *op, const qmoe_gmm_params *plan, int out, int out_scale)
{
    /* the devices' row chunks were cut at 128-byte lines of the outputs, from descriptors or
     * from aligned data: each run's outputs must be aligned as well (a misaligned output made
     * at planning gives rows_per_chunk 0: device 0 does everything, nothing to require) */
    if (plan->devices > 1 && plan->rows_per_chunk > 0)
        op->args[out].align = op->args[out_scale].align = 128;
}

qmoe_status qmoe_op_create_grouped_matmul_swiglu_quant(
    const qmoe_tensor *x, const qmoe_tensor *weight, const qmoe_tensor *bias,
    const qmoe_tensor *offset, const qmoe_tensor *weight_scale, const qmoe_tensor *x_scale,
    const qmoe_tensor *group_list, const qmoe_tensor *output, const qmoe_tensor *output_scale,
    const qmoe_tensor *output_offset, const qmoe_grouped_matmul_swiglu_quant_options *options, qmoe_op **op)
{
    if (!op) return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "op", "op is a null pointer");
    qmoe_gmm_params plan;
    qmoe_status st = qmoe_gmm_plan(x, weight, bias, offset, weight_scale, x_scale, group_list,
                                   output, output_scale, output_offset, options, &plan);
    qmoe_op *o;
    if (st || (st = qmoe_gmm_op_new(&gmm_desc, &plan, A_COUNT, &o))) return st;
    op_arg_set(o, A_X, "x", x, OP_IN);
    op_arg_set(o, A_WEIGHT, "weight", weight, OP_IN);
    op_arg_set(o, A_BIAS, "bias", bias, OP_IN);
    op_arg_set(o, A_OFFSET, "offset", NULL, OP_IN); /* reserved: the planner refuses one */
    op_arg_set(o, A_WSCALE, "weightScale", weight_scale, OP_IN);
    op_arg_set(o, A_XSCALE, "xScale", x_scale, OP_IN);
    op_arg_set(o, A_GROUPS, "groupList", group_list, OP_IN);
    op_arg_set(o, A_OUT, "output", output, OP_OUT);
    op_arg_set(o, A_OSCALE, "outputScale", output_scale, OP_OUT);
    op_arg_set(o, A_OOFFSET, "outputOffset", NULL, OP_OUT);
    qmoe_gmm_align_outputs(o, &plan, A_OUT, A_OSCALE);
    if (plan.pp) { /* folded into the prepacked weights: their data is not read again */
        if (weight_scale) op_arg_planned(o, A_WSCALE, weight_scale->data);
        if (bias) op_arg_planned(o, A_BIAS, bias->data);
    }
    *op = o;
    qmoe_clear_error();
    return QMOE_OK;
}

qmoe_status qmoe_gmm_executor_new(qmoe_op *op, const qmoe_tensor *const *tensors,
                                  uint64_t *workspace_size, qmoe_grouped_matmul_swiglu_quant_executor **executor)
{
    void *ex;
    qmoe_status st = op_executor_new(sizeof(qmoe_grouped_matmul_swiglu_quant_executor), op, tensors, workspace_size, &ex);
    if (!st) *executor = ex;
    return st;
}

qmoe_status qmoe_grouped_matmul_swiglu_quant_workspace_size(
    const qmoe_tensor *x, const qmoe_tensor *weight, const qmoe_tensor *bias,
    const qmoe_tensor *offset, const qmoe_tensor *weight_scale, const qmoe_tensor *x_scale,
    const qmoe_tensor *group_list, const qmoe_tensor *output, const qmoe_tensor *output_scale,
    const qmoe_tensor *output_offset, const qmoe_grouped_matmul_swiglu_quant_options *options, uint64_t *workspace_size,
    qmoe_grouped_matmul_swiglu_quant_executor **executor)
{
    qmoe_status st = op_out_pointers(NULL, workspace_size, executor);
    if (st) return st;
    qmoe_op *op;
    st = qmoe_op_create_grouped_matmul_swiglu_quant(x, weight, bias, offset, weight_scale,
                                                     x_scale, group_list, output, output_scale,
                                                     output_offset, options, &op);
    if (st) return st;
    const qmoe_tensor *t[A_COUNT] = {x, weight, bias, offset, weight_scale, x_scale, group_list,
                                     output, output_scale, output_offset};
    return qmoe_gmm_executor_new(op, t, workspace_size, executor);
}

qmoe_status qmoe_grouped_matmul_swiglu_quant(void *workspace, uint64_t workspace_size,
                                  qmoe_grouped_matmul_swiglu_quant_executor *executor, qmoe_stream *stream)
{
    if (!executor)
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "executor",
                             "executor is a null pointer");
    return op_executor_run("GroupedMatmulSwigluQuant", &executor->b, workspace, workspace_size,
                           stream);
}

void qmoe_grouped_matmul_swiglu_quant_executor_destroy(qmoe_grouped_matmul_swiglu_quant_executor *executor)
{
    op_executor_free(executor ? &executor->b : NULL);
}

qmoe_kernel qmoe_grouped_matmul_swiglu_quant_executor_kernel(const qmoe_grouped_matmul_swiglu_quant_executor *executor)
{
    return executor ? qmoe_op_kernel(executor->b.op) : QMOE_KERNEL_AUTO;
}

qmoe_gmm_params *qmoe_grouped_matmul_swiglu_quant_executor_params(qmoe_grouped_matmul_swiglu_quant_executor *executor)
{
    return (qmoe_gmm_params *)(void *)executor->b.op->plan;
}
