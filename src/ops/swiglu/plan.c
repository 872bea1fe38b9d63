/* Phase one of SwiGlu (docs/ops/swiglu.md). */
#include <string.h>

#include "core/status.h"
#include "core/tensor.h"
#include "ops/eltwise/exec.h"

#define OP "SwiGlu"

qmoe_status qmoe_op_create_swiglu(const qmoe_tensor *x, int64_t dim, const qmoe_tensor *out,
                                       const qmoe_moe_options *options, qmoe_op **op_out)
{
    if (!op_out) return moe_op_pointer(OP, op_out);
    if (!x) return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "x", OP ": x is a null pointer");
    if (!out) return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "out", OP ": out is a null pointer");
    qmoe_status st = moe_check_float(OP, "x", x);
    if (st) return st;
    int nd = x->ndim;
    if (nd < 1) return qmoe_fail(QMOE_ERR_PARAM_INVALID, OP ": x is a scalar; rank >= 1 is needed");
    if (x->format != QMOE_FORMAT_ND) return qmoe_fail(QMOE_ERR_PARAM_INVALID, OP ": x format must be ND");
    if (dim < -nd || dim >= nd)
        return qmoe_fail(QMOE_ERR_PARAM_INVALID, OP ": dim = %lld; expected %d to %d", (long long)dim,
                         -nd, nd - 1);
    int d = (int)(dim < 0 ? dim + nd : dim);
    if (x->shape[d] % 2)
        return qmoe_fail(QMOE_ERR_PARAM_INVALID, OP ": x dim %d is %lld, not even", d,
                         (long long)x->shape[d]);
    int64_t os[QMOE_MAX_DIMS];
    memcpy(os, x->shape, sizeof os[0] * (size_t)nd);
    os[d] /= 2;
    if ((st = moe_check_dtype(OP, "out", out, (qmoe_dtype)x->dtype)) ||
        (st = moe_check_shape(OP, "out", out, nd, os)))
        return st;
    const qmoe_tensor *outs[] = {out};
    const char *onames[] = {"out"};
    const qmoe_tensor *ins[] = {x};
    const char *inames[] = {"x"};
    if ((st = moe_check_aliasing(OP, outs, onames, 1, ins, inames, 1))) return st;
    moe_plan ex;
    memset(&ex, 0, sizeof ex);
    if ((st = moe_threads(OP, options, &ex.threads))) return st;
    ex.kind = MOE_SWIGLU;
    moe_swiglu_plan *p = &ex.u.swiglu;
    moe_view_of(x, &p->x);
    moe_view_of(out, &p->out);
    p->dim = d;
    p->half = os[d];
    p->rows = 1;
    for (int i = 0; i < nd - 1; i++) p->rows *= os[i];
    moe_qrow_fn unused;
    moe_pick_kernels(&unused, &p->sw);
    if (d == nd - 1) { /* the vector path keeps a float row, a zero row and the result: 5 half */
        if (os[d] > INT64_MAX / 20) return qmoe_fail(QMOE_ERR_PARAM_INVALID, OP ": x is too wide");
        ex.slice_bytes = (uint64_t)os[d] * 5 * sizeof(float);
    }
    return moe_finish_plan(&ex, op_out);
}

qmoe_status qmoe_swiglu_workspace_size(const qmoe_tensor *x, int64_t dim, const qmoe_tensor *out,
                                       const qmoe_moe_options *options, uint64_t *workspace_size,
                                       qmoe_moe_executor **executor)
{
    qmoe_op *op;
    qmoe_status st = moe_out_pointers(OP, workspace_size, executor);
    if (!st) st = qmoe_op_create_swiglu(x, dim, out, options, &op);
    if (st) return st;
    const qmoe_tensor *t[] = {x, out};
    return moe_executor_new(op, t, workspace_size, executor);
}
