/* Phase one of DynamicQuant (docs/ops/dynamic-quant.md). */
#include <string.h>

#include "core/checked.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ops/eltwise/exec.h"

#define OP "DynamicQuant"

qmoe_status qmoe_op_create_dynamic_quant(const qmoe_tensor *x, const qmoe_tensor *smooth,
                                              const qmoe_tensor *y, const qmoe_tensor *scale,
                                              const qmoe_moe_options *options,
                                              qmoe_op **op_out)
{
    if (!op_out) return moe_op_pointer(OP, op_out);
    if (!x) return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "x", OP ": x is a null pointer");
    if (!y) return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "y", OP ": y is a null pointer");
    if (!scale) return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "scale", OP ": scale is a null pointer");
    moe_plan ex;
    memset(&ex, 0, sizeof ex);
    qmoe_status st = moe_threads(OP, options, &ex.threads);
    if (!st) st = moe_plan_dynamic_quant(x, smooth, y, scale, &ex);
    if (st) return st;
    return moe_finish_plan(&ex, op_out);
}

qmoe_status moe_plan_dynamic_quant(const qmoe_tensor *x, const qmoe_tensor *smooth,
                                   const qmoe_tensor *y, const qmoe_tensor *scale,
                                   moe_plan *ex)
{
    qmoe_status st = moe_check_float(OP, "x", x);
    if (st) return st;
    int nd = x->ndim;
    if (nd < 2 || nd > 8)
        return qmoe_fail(QMOE_ERR_PARAM_INVALID, OP ": x has rank %d; expected 2 to 8", nd);
    if (x->format != QMOE_FORMAT_ND)
        return qmoe_fail(QMOE_ERR_PARAM_INVALID, OP ": x format must be ND");
    int64_t H = x->shape[nd - 1];
    if ((st = moe_check_dtype(OP, "y", y, QMOE_DTYPE_INT8)) ||
        (st = moe_check_shape(OP, "y", y, nd, x->shape)) ||
        (st = moe_check_dtype(OP, "scale", scale, QMOE_DTYPE_FLOAT32)) ||
        (st = moe_check_shape(OP, "scale", scale, nd - 1, x->shape)))
        return st;
    if (smooth) {
        if (smooth->dtype != x->dtype && smooth->dtype != QMOE_DTYPE_FLOAT32)
            return qmoe_fail(QMOE_ERR_PARAM_INVALID,
                             OP ": smoothScales dtype is %s; expected x's (%s) or float32",
                             qmoe_dtype_name(smooth->dtype), qmoe_dtype_name(x->dtype));
        if ((st = moe_check_shape(OP, "smoothScales", smooth, 1, &H))) return st;
    }
    const qmoe_tensor *outs[] = {y, scale};
    const char *onames[] = {"y", "scale"};
    const qmoe_tensor *ins[] = {x, smooth};
    const char *inames[] = {"x", "smoothScales"};
    if ((st = moe_check_aliasing(OP, outs, onames, 2, ins, inames, 2))) return st;
    int64_t rows = 1, bytes;
    for (int d = 0; d < nd - 1; d++) rows *= x->shape[d]; /* bounded by x's element count */
    if (!qmoe_mul_i64(H, 2 * (int64_t)sizeof(float), &bytes))
        return qmoe_fail(QMOE_ERR_PARAM_INVALID, OP ": row of %lld elements is too long",
                         (long long)H);
    ex->kind = MOE_DYNAMIC_QUANT;
    ex->slice_bytes = (uint64_t)bytes;
    moe_quant_plan *p = &ex->u.quant;
    moe_view_of(x, &p->x);
    moe_view_of(smooth, &p->smooth);
    moe_view_of(y, &p->y);
    moe_view_of(scale, &p->scale);
    p->rows = rows;
    p->H = H;
    moe_swiglu_fn unused;
    moe_pick_kernels(&p->qrow, &unused);
    return QMOE_OK;
}

qmoe_status qmoe_dynamic_quant_workspace_size(const qmoe_tensor *x, const qmoe_tensor *smooth,
                                              const qmoe_tensor *y, const qmoe_tensor *scale,
                                              const qmoe_moe_options *options,
                                              uint64_t *workspace_size,
                                              qmoe_moe_executor **executor)
{
    qmoe_op *op;
    qmoe_status st = moe_out_pointers(OP, workspace_size, executor);
    if (!st) st = qmoe_op_create_dynamic_quant(x, smooth, y, scale, options, &op);
    if (st) return st;
    const qmoe_tensor *t[] = {x, smooth, y, scale};
    return moe_executor_new(op, t, workspace_size, executor);
}
