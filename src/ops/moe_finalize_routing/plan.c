/* Phase one of MoeFinalizeRoutingV2, dropless (docs/ops/moe-finalize-routing-v2.md). */
#include <string.h>

#include "core/checked.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ops/eltwise/exec.h"

#define OP "MoeFinalizeRoutingV2"
#define INVALID(...) qmoe_fail(QMOE_ERR_PARAM_INVALID, OP ": " __VA_ARGS__)

qmoe_status qmoe_op_create_moe_finalize_routing(
    const qmoe_tensor *expanded_x, const qmoe_tensor *expanded_row_idx, const qmoe_tensor *x1,
    const qmoe_tensor *x2, const qmoe_tensor *bias, const qmoe_tensor *scales,
    const qmoe_tensor *expert_idx, int64_t drop_pad_mode, const qmoe_tensor *out,
    const qmoe_moe_options *options, qmoe_op **op_out)
{
    if (!op_out) return moe_op_pointer(OP, op_out);
    if (!expanded_x) return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "expandedX", OP ": expandedX is a null pointer");
    if (!expanded_row_idx)
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "expandedRowIdx", OP ": expandedRowIdx is a null pointer");
    if (!out) return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "out", OP ": out is a null pointer");
    if (bias && !expert_idx)
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "expertIdx", OP ": expertIdx is a null pointer; bias needs it");
    if (drop_pad_mode != 0 && drop_pad_mode != 2)
        return INVALID("dropPadMode = %lld; expected 0 or 2 (dropless; drop/pad modes 1 and 3 are "
                       "not supported)", (long long)drop_pad_mode);
    qmoe_status st = moe_check_float(OP, "expandedX", expanded_x);
    int64_t any2[2] = {-1, -1};
    if (st || (st = moe_check_shape(OP, "expandedX", expanded_x, 2, any2))) return st;
    int64_t A = expanded_x->shape[0], H = expanded_x->shape[1];
    qmoe_dtype dt = (qmoe_dtype)expanded_x->dtype;
    if ((st = moe_check_dtype(OP, "out", out, dt)) || (st = moe_check_shape(OP, "out", out, 2, any2)))
        return st;
    int64_t N = out->shape[0], os[2] = {N, H};
    if ((st = moe_check_shape(OP, "out", out, 2, os))) return st;
    if ((st = moe_check_dtype(OP, "expandedRowIdx", expanded_row_idx, QMOE_DTYPE_INT32)) ||
        (st = moe_check_shape(OP, "expandedRowIdx", expanded_row_idx, 1, any2)))
        return st;
    int64_t NK = expanded_row_idx->shape[0], K;
    /* int32 row indices address at most INT32_MAX rows: the same bound as init routing's N*K */
    if (NK > INT32_MAX)
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_LIMIT, "expandedRowIdx",
                             OP ": expandedRowIdx has %lld entries; at most %d (N*K as init "
                             "routing makes it)", (long long)NK, INT32_MAX);
    /* K from scales or expertIdx when given, else from the row index count */
    const qmoe_tensor *kt = scales ? scales : expert_idx;
    if (kt) {
        int64_t ks[2] = {N, -1};
        if ((st = moe_check_shape(OP, scales ? "scales" : "expertIdx", kt, 2, ks))) return st;
        K = kt->shape[1];
    } else if (N > 0) {
        K = NK / N;
    } else {
        K = NK ? 0 : 1;
    }
    int64_t prod;
    if (!qmoe_mul_i64(N, K, &prod) || prod != NK)
        return INVALID("expandedRowIdx has %lld entries; expected N*K = %lld*%lld", (long long)NK,
                       (long long)N, (long long)K);
    if (scales) {
        if (scales->dtype != dt && scales->dtype != QMOE_DTYPE_FLOAT32)
            return INVALID("scales dtype is %s; expected expandedX's (%s) or float32",
                           qmoe_dtype_name(scales->dtype), qmoe_dtype_name(dt));
    }
    if (expert_idx) {
        int64_t ks[2] = {N, K};
        if ((st = moe_check_dtype(OP, "expertIdx", expert_idx, QMOE_DTYPE_INT32)) ||
            (st = moe_check_shape(OP, "expertIdx", expert_idx, 2, ks)))
            return st;
    }
    if ((x1 && ((st = moe_check_dtype(OP, "x1", x1, dt)) || (st = moe_check_shape(OP, "x1", x1, 2, os)))) ||
        (x2 && ((st = moe_check_dtype(OP, "x2", x2, dt)) || (st = moe_check_shape(OP, "x2", x2, 2, os)))))
        return st;
    int64_t E = 0;
    if (bias) {
        int64_t bs[2] = {-1, H};
        if ((st = moe_check_dtype(OP, "bias", bias, dt)) || (st = moe_check_shape(OP, "bias", bias, 2, bs)))
            return st;
        E = bias->shape[0];
    }
    const qmoe_tensor *outs[] = {out};
    const char *onames[] = {"out"};
    const qmoe_tensor *ins[] = {expanded_x, expanded_row_idx, x1, x2, bias, scales, expert_idx};
    const char *inames[] = {"expandedX", "expandedRowIdx", "x1", "x2", "bias", "scales", "expertIdx"};
    if ((st = moe_check_aliasing(OP, outs, onames, 1, ins, inames, 7))) return st;
    int64_t hb;
    if (!qmoe_mul_i64(H, 3 * (int64_t)sizeof(float), &hb)) return INVALID("H = %lld is too large", (long long)H);
    moe_plan ex;
    memset(&ex, 0, sizeof ex);
    if ((st = moe_threads(OP, options, &ex.threads))) return st;
    ex.kind = MOE_FINALIZE;
    ex.slice_bytes = (uint64_t)hb;
    moe_finalize_plan *p = &ex.u.finalize;
    moe_view_of(expanded_x, &p->ex);
    moe_view_of(expanded_row_idx, &p->row_idx);
    moe_view_of(x1, &p->x1);
    moe_view_of(x2, &p->x2);
    moe_view_of(bias, &p->bias);
    moe_view_of(scales, &p->scales);
    moe_view_of(expert_idx, &p->idx);
    moe_view_of(out, &p->out);
    p->N = N;
    p->K = K;
    p->H = H;
    p->A = A;
    p->E = E;
    p->mode = drop_pad_mode;
    qmoe_rows_sum_pick(&p->rows_sum, &p->bf16_store);
    return moe_finish_plan(&ex, op_out);
}

qmoe_status qmoe_moe_finalize_routing_workspace_size(
    const qmoe_tensor *expanded_x, const qmoe_tensor *expanded_row_idx, const qmoe_tensor *x1,
    const qmoe_tensor *x2, const qmoe_tensor *bias, const qmoe_tensor *scales,
    const qmoe_tensor *expert_idx, int64_t drop_pad_mode, const qmoe_tensor *out,
    const qmoe_moe_options *options, uint64_t *workspace_size, qmoe_moe_executor **executor)
{
    qmoe_op *op;
    qmoe_status st = moe_out_pointers(OP, workspace_size, executor);
    if (!st)
        st = qmoe_op_create_moe_finalize_routing(expanded_x, expanded_row_idx, x1, x2, bias, scales,
                                                 expert_idx, drop_pad_mode, out, options, &op);
    if (st) return st;
    const qmoe_tensor *t[] = {expanded_x, expanded_row_idx, x1, x2, bias, scales, expert_idx, out};
    return moe_executor_new(op, t, workspace_size, executor);
}
