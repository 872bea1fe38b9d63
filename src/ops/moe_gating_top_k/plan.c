/* Phase one of MoeGatingTopKSoftmax and MoeGatingTopK (docs/ops/moe-gating-top-k-softmax.md,
 * docs/ops/moe-gating-top-k.md). */
#include <math.h>
#include <string.h>

#include "core/status.h"
#include "core/tensor.h"
#include "ops/eltwise/exec.h"

qmoe_status qmoe_op_create_moe_gating_top_k_softmax(
    const qmoe_tensor *x, const qmoe_tensor *finished, int64_t k, const qmoe_tensor *y,
    const qmoe_tensor *expert_idx, const qmoe_tensor *row_idx, const qmoe_moe_options *options,
    qmoe_op **op_out)
{
    static const char *op = "MoeGatingTopKSoftmax";
    if (!x) return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "x", "%s: x is a null pointer", op);
    if (!y) return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "yOut", "%s: yOut is a null pointer", op);
    if (!expert_idx) return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "expertIdxOut", "%s: expertIdxOut is a null pointer", op);
    if (!row_idx) return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "rowIdxOut", "%s: rowIdxOut is a null pointer", op);
    qmoe_status st = moe_op_pointer(op, op_out);
    if (st || (st = moe_check_float(op, "x", x))) return st;
    int nd = x->ndim;
    if (nd != 2 && nd != 3)
        return qmoe_fail(QMOE_ERR_PARAM_INVALID, "%s: x has rank %d; expected 2 or 3", op, nd);
    if (x->format != QMOE_FORMAT_ND) return qmoe_fail(QMOE_ERR_PARAM_INVALID, "%s: x format must be ND", op);
    int64_t E = x->shape[nd - 1];
    if (k < 0 || k > E || k > 1024)
        return qmoe_fail(QMOE_ERR_PARAM_INVALID,
                         "%s: k = %lld; expected 0 <= k <= min(E = %lld, 1024)", op, (long long)k,
                         (long long)E);
    if (E > INT32_MAX - 1)
        return qmoe_fail(QMOE_ERR_PARAM_INVALID, "%s: %lld experts do not fit int32 ids", op,
                         (long long)E);
    int64_t oshape[3];
    memcpy(oshape, x->shape, sizeof oshape[0] * (size_t)nd);
    oshape[nd - 1] = k;
    if ((st = moe_check_dtype(op, "yOut", y, (qmoe_dtype)x->dtype)) ||
        (st = moe_check_shape(op, "yOut", y, nd, oshape)) ||
        (st = moe_check_dtype(op, "expertIdxOut", expert_idx, QMOE_DTYPE_INT32)) ||
        (st = moe_check_shape(op, "expertIdxOut", expert_idx, nd, oshape)) ||
        (st = moe_check_dtype(op, "rowIdxOut", row_idx, QMOE_DTYPE_INT32)) ||
        (st = moe_check_shape(op, "rowIdxOut", row_idx, nd, oshape)))
        return st;
    if (finished && ((st = moe_check_dtype(op, "finishedOptional", finished, QMOE_DTYPE_INT8)) ||
                     (st = moe_check_shape(op, "finishedOptional", finished, nd - 1, x->shape))))
        return st;
    int64_t rows = x->shape[0] * (nd == 3 ? x->shape[1] : 1);
    if (rows * k > INT32_MAX)
        return qmoe_fail(QMOE_ERR_PARAM_INVALID, "%s: rowIdxOut values up to %lld do not fit int32",
                         op, (long long)(rows * k));
    const qmoe_tensor *outs[] = {y, expert_idx, row_idx};
    const char *onames[] = {"yOut", "expertIdxOut", "rowIdxOut"};
    const qmoe_tensor *ins[] = {x, finished};
    const char *inames[] = {"x", "finishedOptional"};
    if ((st = moe_check_aliasing(op, outs, onames, 3, ins, inames, 2))) return st;
    moe_plan ex;
    memset(&ex, 0, sizeof ex);
    if ((st = moe_threads(op, options, &ex.threads))) return st;
    ex.kind = MOE_GATING_SOFTMAX;
    ex.slice_bytes = (uint64_t)E * sizeof(float) + (uint64_t)(k + 1) * sizeof(int32_t);
    moe_gating_plan *p = &ex.u.gating;
    moe_view_of(x, &p->x);
    moe_view_of(finished, &p->finished);
    moe_view_of(y, &p->y);
    moe_view_of(expert_idx, &p->idx);
    moe_view_of(row_idx, &p->row_idx);
    p->rows = rows;
    p->E = E;
    p->k = k;
    return moe_finish_plan(&ex, op_out);
}

qmoe_status qmoe_op_create_moe_gating_top_k(
    const qmoe_tensor *x, const qmoe_tensor *bias, const qmoe_moe_gating_attrs *attrs,
    const qmoe_tensor *y, const qmoe_tensor *expert_idx, const qmoe_tensor *out,
    const qmoe_moe_options *options, qmoe_op **op_out)
{
    static const char *op = "MoeGatingTopK";
    if (!x) return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "x", "%s: x is a null pointer", op);
    if (!attrs) return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "attrs", "%s: attrs is a null pointer", op);
    if (!y) return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "yOut", "%s: yOut is a null pointer", op);
    if (!expert_idx) return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "expertIdxOut", "%s: expertIdxOut is a null pointer", op);
    if (attrs->out_flag && !out)
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "outOut", "%s: outOut is a null pointer with outFlag set", op);
    qmoe_status st = moe_op_pointer(op, op_out);
    if (st || (st = moe_check_float(op, "x", x))) return st;
    int64_t any2[2] = {-1, -1};
    if ((st = moe_check_shape(op, "x", x, 2, any2))) return st;
    int64_t R = x->shape[0], E = x->shape[1];
    const qmoe_moe_gating_attrs *a = attrs;
    if (E < 1 || E > 2048)
        return qmoe_fail(QMOE_ERR_PARAM_INVALID, "%s: x has %lld experts; expected 1 to 2048", op,
                         (long long)E);
    if (a->group_count < 1 || E % a->group_count)
        return qmoe_fail(QMOE_ERR_PARAM_INVALID,
                         "%s: groupCount = %lld must be >= 1 and divide the %lld experts", op,
                         (long long)a->group_count, (long long)E);
    if (a->k_group < 1 || a->k_group > a->group_count)
        return qmoe_fail(QMOE_ERR_PARAM_INVALID, "%s: kGroup = %lld; expected 1..groupCount (%lld)",
                         op, (long long)a->k_group, (long long)a->group_count);
    int64_t per = E / a->group_count;
    if (a->k < 1 || a->k > 32 || a->k > per * a->k_group)
        return qmoe_fail(QMOE_ERR_PARAM_INVALID,
                         "%s: k = %lld; expected 1 <= k <= min(32, E / groupCount * kGroup = %lld)",
                         op, (long long)a->k, (long long)(per * a->k_group));
    if (a->group_select_mode != 0 && a->group_select_mode != 1)
        return qmoe_fail(QMOE_ERR_PARAM_INVALID, "%s: groupSelectMode = %lld; expected 0 or 1", op,
                         (long long)a->group_select_mode);
    if (a->group_select_mode == 1 && a->group_count > 1 && per < 2)
        return qmoe_fail(QMOE_ERR_PARAM_INVALID,
                         "%s: groupSelectMode 1 sums each group's top 2, but groups have %lld expert",
                         op, (long long)per);
    if (a->renorm != 0)
        return qmoe_fail(QMOE_ERR_PARAM_INVALID, "%s: renorm = %lld; only 0 is supported", op,
                         (long long)a->renorm);
    if (a->norm_type != 0 && a->norm_type != 1)
        return qmoe_fail(QMOE_ERR_PARAM_INVALID, "%s: normType = %lld; expected 0 (softmax) or 1 (sigmoid)",
                         op, (long long)a->norm_type);
    if (!isfinite(a->routed_scaling_factor) || !isfinite(a->eps))
        return qmoe_fail(QMOE_ERR_PARAM_INVALID, "%s: routedScalingFactor and eps must be finite", op);
    int64_t ys[2] = {R, a->k}, os[2] = {R, E};
    if ((st = moe_check_dtype(op, "yOut", y, (qmoe_dtype)x->dtype)) ||
        (st = moe_check_shape(op, "yOut", y, 2, ys)) ||
        (st = moe_check_dtype(op, "expertIdxOut", expert_idx, QMOE_DTYPE_INT32)) ||
        (st = moe_check_shape(op, "expertIdxOut", expert_idx, 2, ys)))
        return st;
    if (bias) {
        if (bias->dtype != x->dtype && bias->dtype != QMOE_DTYPE_FLOAT32)
            return qmoe_fail(QMOE_ERR_PARAM_INVALID, "%s: bias dtype is %s; expected x's or float32",
                             op, qmoe_dtype_name(bias->dtype));
        if ((st = moe_check_shape(op, "bias", bias, 1, &E))) return st;
    }
    if (!a->out_flag) out = NULL;
    if (out && ((st = moe_check_dtype(op, "outOut", out, QMOE_DTYPE_FLOAT32)) ||
                (st = moe_check_shape(op, "outOut", out, 2, os))))
        return st;
    const qmoe_tensor *outs[] = {y, expert_idx, out};
    const char *onames[] = {"yOut", "expertIdxOut", "outOut"};
    const qmoe_tensor *ins[] = {x, bias};
    const char *inames[] = {"x", "bias"};
    if ((st = moe_check_aliasing(op, outs, onames, 3, ins, inames, 2))) return st;
    moe_plan ex;
    memset(&ex, 0, sizeof ex);
    if ((st = moe_threads(op, options, &ex.threads))) return st;
    ex.kind = MOE_GATING_TOPK;
    /* norm, value, group scores (floats); group flags; the k chosen ids */
    ex.slice_bytes = (uint64_t)(2 * E + a->group_count) * sizeof(float) +
                     (uint64_t)a->group_count +
                     (uint64_t)((a->k > a->group_count ? a->k : a->group_count) + 1) * sizeof(int32_t) + 64;
    moe_gating_plan *p = &ex.u.gating;
    moe_view_of(x, &p->x);
    moe_view_of(bias, &p->bias);
    moe_view_of(y, &p->y);
    moe_view_of(expert_idx, &p->idx);
    moe_view_of(out, &p->out);
    p->rows = R;
    p->E = E;
    p->k = a->k;
    p->a = *a;
    return moe_finish_plan(&ex, op_out);
}

qmoe_status qmoe_moe_gating_top_k_softmax_workspace_size(
    const qmoe_tensor *x, const qmoe_tensor *finished, int64_t k, const qmoe_tensor *y,
    const qmoe_tensor *expert_idx, const qmoe_tensor *row_idx, const qmoe_moe_options *options,
    uint64_t *workspace_size, qmoe_moe_executor **executor)
{
    qmoe_op *op;
    qmoe_status st = moe_out_pointers("MoeGatingTopKSoftmax", workspace_size, executor);
    if (!st)
        st = qmoe_op_create_moe_gating_top_k_softmax(x, finished, k, y, expert_idx, row_idx,
                                                     options, &op);
    if (st) return st;
    const qmoe_tensor *t[] = {x, finished, y, expert_idx, row_idx};
    return moe_executor_new(op, t, workspace_size, executor);
}

qmoe_status qmoe_moe_gating_top_k_workspace_size(
    const qmoe_tensor *x, const qmoe_tensor *bias, const qmoe_moe_gating_attrs *attrs,
    const qmoe_tensor *y, const qmoe_tensor *expert_idx, const qmoe_tensor *out,
    const qmoe_moe_options *options, uint64_t *workspace_size, qmoe_moe_executor **executor)
{
    qmoe_op *op;
    qmoe_status st = moe_out_pointers("MoeGatingTopK", workspace_size, executor);
    if (!st) st = qmoe_op_create_moe_gating_top_k(x, bias, attrs, y, expert_idx, out, options, &op);
    if (st) return st;
    const qmoe_tensor *t[] = {x, bias, y, expert_idx, out};
    return moe_executor_new(op, t, workspace_size, executor);
}
