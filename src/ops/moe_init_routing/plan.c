/* Phase one of MoeInitRoutingV2 with V3's dynamic quant and expert range
 * (docs/ops/moe-init-routing-v2.md). */
#include <string.h>

#include "core/checked.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ops/eltwise/exec.h"

#define OP "MoeInitRoutingV2"
#define INVALID(...) qmoe_fail(QMOE_ERR_PARAM_INVALID, OP ": " __VA_ARGS__)

static qmoe_status check_attrs(const qmoe_moe_routing_attrs *a, int64_t *start, int64_t *end)
{
    if (a->drop_pad_mode != 0)
        return INVALID("dropPadMode = %lld; only 0 (dropless) is supported", (long long)a->drop_pad_mode);
    if (a->expert_num < 1 || a->expert_num > INT32_MAX)
        return INVALID("expertNum = %lld; expected 1 to %d", (long long)a->expert_num, INT32_MAX);
    if (a->active_num < 0) return INVALID("activeNum = %lld is negative", (long long)a->active_num);
    if (a->tokens_mode < QMOE_MOE_TOKENS_NONE || a->tokens_mode > QMOE_MOE_TOKENS_COUNT)
        return INVALID("expertTokensCountOrCumsumFlag = %d; expected 0 (none), 1 (cumsum) or 2 (count)",
                       a->tokens_mode);
    if (a->quant_mode != QMOE_MOE_QUANT_NONE && a->quant_mode != QMOE_MOE_QUANT_DYNAMIC)
        return INVALID("quantMode = %d; expected -1 (none) or 1 (dynamic); static quant (0) is not "
                       "supported", a->quant_mode);
    if (a->row_idx_type != 0 && a->row_idx_type != 1)
        return INVALID("rowIdxType = %d; expected 0 (gather) or 1 (scatter)", a->row_idx_type);
    *start = a->expert_start;
    *end = a->expert_end;
    if (*start == 0 && *end == 0) *end = a->expert_num;
    if (*start < 0 || *start >= *end || *end > a->expert_num)
        return INVALID("activeExpertRange = [%lld, %lld); expected 0 <= start < end <= expertNum = %lld",
                       (long long)a->expert_start, (long long)a->expert_end, (long long)a->expert_num);
    return QMOE_OK;
}

qmoe_status qmoe_op_create_moe_init_routing(
    const qmoe_tensor *x, const qmoe_tensor *expert_idx, const qmoe_tensor *scale,
    const qmoe_tensor *offset, const qmoe_moe_routing_attrs *attrs, const qmoe_tensor *expanded_x,
    const qmoe_tensor *expanded_row_idx, const qmoe_tensor *expert_tokens,
    const qmoe_tensor *expanded_scale, const qmoe_moe_options *options, qmoe_op **op_out)
{
    if (!op_out) return moe_op_pointer(OP, op_out);
    if (!x) return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "x", OP ": x is a null pointer");
    if (!expert_idx) return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "expertIdx", OP ": expertIdx is a null pointer");
    if (!attrs) return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "attrs", OP ": attrs is a null pointer");
    if (!expanded_x) return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "expandedXOut", OP ": expandedXOut is a null pointer");
    if (!expanded_row_idx)
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "expandedRowIdxOut", OP ": expandedRowIdxOut is a null pointer");
    if (attrs->tokens_mode != QMOE_MOE_TOKENS_NONE && !expert_tokens)
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "expertTokensCountOrCumsumOut",
                         OP ": expertTokensCountOrCumsumOut is a null pointer but requested");
    if (attrs->quant_mode == QMOE_MOE_QUANT_DYNAMIC && !expanded_scale)
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "expandedScaleOut",
                         OP ": expandedScaleOut is a null pointer; dynamic quant writes it");
    if (offset) return INVALID("offset is for static quant, which is not supported; pass NULL");
    int64_t start = 0, end = 0;
    qmoe_status st = check_attrs(attrs, &start, &end);
    if (st) return st;
    int dynamic = attrs->quant_mode == QMOE_MOE_QUANT_DYNAMIC;
    int64_t any2[2] = {-1, -1};
    if ((st = moe_check_shape(OP, "x", x, 2, any2))) return st;
    if (x->dtype != QMOE_DTYPE_INT8 || dynamic)
        if ((st = moe_check_float(OP, "x", x))) return st;
    int64_t N = x->shape[0], H = x->shape[1];
    int64_t is[2] = {N, -1};
    if ((st = moe_check_dtype(OP, "expertIdx", expert_idx, QMOE_DTYPE_INT32)) ||
        (st = moe_check_shape(OP, "expertIdx", expert_idx, 2, is)))
        return st;
    int64_t K = expert_idx->shape[1], NK, L = end - start;
    if (!qmoe_mul_i64(N, K, &NK) || NK > INT32_MAX)
        return INVALID("N*K = %lld x %lld rows do not fit int32 row indices", (long long)N, (long long)K);
    int64_t A = attrs->active_num > 0 && attrs->active_num < NK ? attrs->active_num : NK;
    int64_t xs[2] = {A, H};
    if ((st = moe_check_dtype(OP, "expandedXOut", expanded_x,
                              dynamic ? QMOE_DTYPE_INT8 : (qmoe_dtype)x->dtype)) ||
        (st = moe_check_shape(OP, "expandedXOut", expanded_x, 2, xs)) ||
        (st = moe_check_dtype(OP, "expandedRowIdxOut", expanded_row_idx, QMOE_DTYPE_INT32)) ||
        (st = moe_check_shape(OP, "expandedRowIdxOut", expanded_row_idx, 1, &NK)))
        return st;
    if (attrs->tokens_mode == QMOE_MOE_TOKENS_NONE) expert_tokens = NULL;
    if (expert_tokens) {
        if (expert_tokens->dtype != QMOE_DTYPE_INT64 && expert_tokens->dtype != QMOE_DTYPE_INT32)
            return INVALID("expertTokensCountOrCumsumOut dtype is %s; expected int64 or int32",
                           qmoe_dtype_name(expert_tokens->dtype));
        if ((st = moe_check_shape(OP, "expertTokensCountOrCumsumOut", expert_tokens, 1, &L))) return st;
    }
    int smooth_per_expert = 0;
    if (scale) {
        if ((st = moe_check_dtype(OP, "scale", scale, QMOE_DTYPE_FLOAT32))) return st;
        if (!dynamic) {
            if ((st = moe_check_shape(OP, "scale", scale, 1, &N))) return st;
        } else {
            int64_t ss[2] = {-1, H};
            if ((st = moe_check_shape(OP, "scale", scale, 2, ss))) return st;
            if (scale->shape[0] != L && scale->shape[0] != 1)
                return INVALID("scale has %lld rows; dynamic quant takes [%lld, H] (one per local "
                               "expert) or [1, H]", (long long)scale->shape[0], (long long)L);
            smooth_per_expert = scale->shape[0] == L && L > 1;
        }
    }
    if (!dynamic && !scale) expanded_scale = NULL; /* nothing to carry: left untouched */
    if (expanded_scale && ((st = moe_check_dtype(OP, "expandedScaleOut", expanded_scale, QMOE_DTYPE_FLOAT32)) ||
                           (st = moe_check_shape(OP, "expandedScaleOut", expanded_scale, 1, &A))))
        return st;
    const qmoe_tensor *outs[] = {expanded_x, expanded_row_idx, expert_tokens, expanded_scale};
    const char *onames[] = {"expandedXOut", "expandedRowIdxOut", "expertTokensCountOrCumsumOut",
                            "expandedScaleOut"};
    const qmoe_tensor *ins[] = {x, expert_idx, scale};
    const char *inames[] = {"x", "expertIdx", "scale"};
    if ((st = moe_check_aliasing(OP, outs, onames, 4, ins, inames, 3))) return st;
    /* workspace: sorted pairs [N*K] and counts [L + 1] (int64); with quant_once, the N token
     * scales (float, padded to 8 bytes) and the int8 tokens [N, H] */
    int quant_once = dynamic && !smooth_per_expert;
    int64_t words, bytes, hb, qbytes = 0;
    if (!qmoe_add_i64(NK, L + 1, &words) || !qmoe_mul_i64(words, 8, &bytes) ||
        !qmoe_mul_i64(H, 2 * (int64_t)sizeof(float), &hb) ||
        (quant_once && (!qmoe_mul_i64(N, H, &qbytes) || !qmoe_add_i64(qbytes, (N + 1) / 2 * 8, &qbytes) ||
                        !qmoe_add_i64(bytes, qbytes, &qbytes))))
        return INVALID("sizes overflow");
    moe_plan ex;
    memset(&ex, 0, sizeof ex);
    if ((st = moe_threads(OP, options, &ex.threads))) return st;
    ex.kind = MOE_INIT_ROUTING;
    ex.workspace_bytes = (uint64_t)(quant_once ? qbytes : bytes);
    ex.slice_bytes = (uint64_t)hb;
    moe_routing_plan *p = &ex.u.routing;
    moe_view_of(x, &p->x);
    moe_view_of(expert_idx, &p->idx);
    moe_view_of(scale, &p->scale);
    moe_view_of(expanded_x, &p->ex);
    moe_view_of(expanded_row_idx, &p->row_idx);
    moe_view_of(expert_tokens, &p->tokens);
    moe_view_of(expanded_scale, &p->escale);
    p->N = N;
    p->K = K;
    p->H = H;
    p->A = A;
    p->L = L;
    p->a = *attrs;
    p->a.expert_start = start;
    p->a.expert_end = end;
    p->smooth_per_expert = smooth_per_expert;
    p->quant_once = quant_once;
    p->q_offset = (uint64_t)bytes;
    moe_swiglu_fn unused;
    moe_pick_kernels(&p->qrow, &unused);
    return moe_finish_plan(&ex, op_out);
}

qmoe_status qmoe_moe_init_routing_workspace_size(
    const qmoe_tensor *x, const qmoe_tensor *expert_idx, const qmoe_tensor *scale,
    const qmoe_tensor *offset, const qmoe_moe_routing_attrs *attrs, const qmoe_tensor *expanded_x,
    const qmoe_tensor *expanded_row_idx, const qmoe_tensor *expert_tokens,
    const qmoe_tensor *expanded_scale, const qmoe_moe_options *options, uint64_t *workspace_size,
    qmoe_moe_executor **executor)
{
    qmoe_op *op;
    qmoe_status st = moe_out_pointers(OP, workspace_size, executor);
    if (!st)
        st = qmoe_op_create_moe_init_routing(x, expert_idx, scale, offset, attrs, expanded_x,
                                             expanded_row_idx, expert_tokens, expanded_scale,
                                             options, &op);
    if (st) return st;
    const qmoe_tensor *t[] = {x, expert_idx, scale, offset, expanded_x, expanded_row_idx,
                              expert_tokens, expanded_scale};
    return moe_executor_new(op, t, workspace_size, executor);
}
