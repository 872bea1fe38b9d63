/*
 * The vendor's two-phase entry points of the element-wise MoE operators (aclnnDynamicQuant,
 * aclnnMoeGatingTopKSoftmax, aclnnMoeGatingTopK, aclnnMoeInitRoutingV2, aclnnMoeInitRoutingQuantV2,
 * aclnnMoeFinalizeRoutingV2, aclnnSwiGlu) over the native qmoe_* API of qmoe/moe_ops.h.
 *
 * The executor is one block: the common aclOpExecutor head (compat.h) followed by a copy of the
 * native executor. Phase two claims it from the registry (one-shot), queues it on the stream's
 * native stream, and frees it (acl_executor.c).
 */
#include <stdlib.h>
#include <string.h>

#include "aclnnop/aclnn_dynamic_quant.h"
#include "aclnnop/aclnn_moe_finalize_routing_v2.h"
#include "aclnnop/aclnn_moe_gating_top_k.h"
#include "aclnnop/aclnn_moe_gating_top_k_softmax.h"
#include "aclnnop/aclnn_moe_init_routing_quant_v2.h"
#include "aclnnop/aclnn_moe_init_routing_v2.h"
#include "aclnnop/aclnn_swi_glu.h"
#include "compat/compat.h"
#include "qmoe/moe_ops.h"
#include "qmoe/runtime.h"

typedef qmoe_status (*moe_run_fn)(void *, uint64_t, qmoe_moe_executor *, qmoe_stream *);

enum { MAX_ARGS = 8 };

/* The tensors of one call, translated to native views; absent ones stay NULL. */
typedef struct moe_args {
    const char *api;
    qmoe_tensor *t[MAX_ARGS];
} moe_args;

static aclnnStatus begin(const char *api, uint64_t *workspace_size, aclOpExecutor **executor)
{
    if (!compat_initialized())
        return compat_fail(ACLNN_ERR_RUNTIME_ERROR, "%s: aclInit has not been called", api);
    if (!workspace_size)
        return compat_fail(ACLNN_ERR_PARAM_NULLPTR, "%s: workspaceSize is a null pointer", api);
    if (!executor) return compat_fail(ACLNN_ERR_PARAM_NULLPTR, "%s: executor is a null pointer", api);
    return ACLNN_SUCCESS;
}

/* Translates the given tensors (NULL entries stay NULL); required ones are checked by the native
 * planner, which names them. */
static aclnnStatus translate(moe_args *a, const aclTensor *const *in, const char *const *names,
                             int n)
{
    memset(a->t, 0, sizeof a->t);
    for (int i = 0; i < n; i++)
        if (in[i]) {
            aclnnStatus st = compat_tensor_to_native(a->api, names[i], in[i], COMPAT_AS_VIEW, &a->t[i]);
            if (st) return st;
        }
    return ACLNN_SUCCESS;
}

static void release(moe_args *a)
{
    for (int i = 0; i < MAX_ARGS; i++) qmoe_tensor_destroy(a->t[i]);
}

/* Wraps a planned native executor (or the planner's failure) into the vendor's executor. */
static aclnnStatus finish(moe_args *a, qmoe_status ns, qmoe_moe_executor *native, uint64_t size,
                          uint64_t *workspace_size, aclOpExecutor **executor)
{
    release(a);
    if (ns) return compat_fail((aclnnStatus)ns, "%s: %s", a->api, qmoe_last_error());
    aclOpExecutor *ex = calloc(1, sizeof *ex);
    if (ex) *ex = (aclOpExecutor){.op = COMPAT_OP_MOE, .moe = native};
    else qmoe_moe_executor_destroy(native);
    return compat_executor_publish(a->api, ex, size, workspace_size, executor);
}

static aclnnStatus execute(const char *api, moe_run_fn run, void *workspace,
                           uint64_t workspace_size, aclOpExecutor *executor, aclrtStream stream)
{
    qmoe_stream *native;
    aclnnStatus st = compat_executor_claim(api, executor, COMPAT_OP_MOE, stream, &native);
    if (st) return st;
    st = (aclnnStatus)run(workspace, workspace_size, executor->moe, native);
    return compat_executor_finish(api, executor, st, stream, native);
}

static qmoe_moe_options options(void)
{
    qmoe_moe_options o = QMOE_MOE_OPTIONS_INIT;
    o.threads = compat_device_threads();
    return o;
}

/* ------------------------------------------------------------------ DynamicQuant ------------- */

aclnnStatus aclnnDynamicQuantGetWorkspaceSize(const aclTensor *x,
                                              const aclTensor *smoothScalesOptional,
                                              const aclTensor *yOut, const aclTensor *scaleOut,
                                              uint64_t *workspaceSize, aclOpExecutor **executor)
{
    moe_args a = {.api = "aclnnDynamicQuantGetWorkspaceSize"};
    aclnnStatus st = begin(a.api, workspaceSize, executor);
    const aclTensor *in[] = {x, smoothScalesOptional, yOut, scaleOut};
    static const char *names[] = {"x", "smoothScalesOptional", "yOut", "scaleOut"};
    if (st || (st = translate(&a, in, names, 4))) return release(&a), st;
    qmoe_moe_options o = options();
    uint64_t size = 0;
    qmoe_moe_executor *ex = NULL;
    qmoe_status ns = qmoe_dynamic_quant_workspace_size(a.t[0], a.t[1], a.t[2], a.t[3], &o, &size, &ex);
    return finish(&a, ns, ex, size, workspaceSize, executor);
}

aclnnStatus aclnnDynamicQuant(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                              aclrtStream stream)
{
    return execute("aclnnDynamicQuant", qmoe_dynamic_quant, workspace, workspaceSize, executor,
                   stream);
}

/* ------------------------------------------------------------------ gating ------------------- */

aclnnStatus aclnnMoeGatingTopKSoftmaxGetWorkspaceSize(const aclTensor *x,
                                                      const aclTensor *finishedOptional, int64_t k,
                                                      const aclTensor *yOut,
                                                      const aclTensor *expertIdxOut,
                                                      const aclTensor *rowIdxOut,
                                                      uint64_t *workspaceSize,
                                                      aclOpExecutor **executor)
{
    moe_args a = {.api = "aclnnMoeGatingTopKSoftmaxGetWorkspaceSize"};
    aclnnStatus st = begin(a.api, workspaceSize, executor);
    if (st) return st;
    if (finishedOptional)
        return compat_fail(ACLNN_ERR_PARAM_INVALID,
                           "%s: finishedOptional (an ACL_BOOL tensor) is not supported by this "
                           "layer; pass NULL (the native and Python faces take finished rows)",
                           a.api);
    const aclTensor *in[] = {x, yOut, expertIdxOut, rowIdxOut};
    static const char *names[] = {"x", "yOut", "expertIdxOut", "rowIdxOut"};
    if ((st = translate(&a, in, names, 4))) return release(&a), st;
    qmoe_moe_options o = options();
    uint64_t size = 0;
    qmoe_moe_executor *ex = NULL;
    qmoe_status ns = qmoe_moe_gating_top_k_softmax_workspace_size(a.t[0], NULL, k, a.t[1], a.t[2],
                                                                  a.t[3], &o, &size, &ex);
    return finish(&a, ns, ex, size, workspaceSize, executor);
}

aclnnStatus aclnnMoeGatingTopKSoftmax(void *workspace, uint64_t workspaceSize,
                                      aclOpExecutor *executor, aclrtStream stream)
{
    return execute("aclnnMoeGatingTopKSoftmax", qmoe_moe_gating_top_k_softmax, workspace,
                   workspaceSize, executor, stream);
}

aclnnStatus aclnnMoeGatingTopKGetWorkspaceSize(const aclTensor *x, const aclTensor *biasOptional,
                                               int64_t k, int64_t kGroup, int64_t groupCount,
                                               int64_t groupSelectMode, int64_t renorm,
                                               int64_t normType, bool outFlag,
                                               double routedScalingFactor, double eps,
                                               const aclTensor *yOut,
                                               const aclTensor *expertIdxOut,
                                               const aclTensor *outOut, uint64_t *workspaceSize,
                                               aclOpExecutor **executor)
{
    moe_args a = {.api = "aclnnMoeGatingTopKGetWorkspaceSize"};
    aclnnStatus st = begin(a.api, workspaceSize, executor);
    const aclTensor *in[] = {x, biasOptional, yOut, expertIdxOut, outFlag ? outOut : NULL};
    static const char *names[] = {"x", "biasOptional", "yOut", "expertIdxOut", "outOut"};
    if (st || (st = translate(&a, in, names, 5))) return release(&a), st;
    qmoe_moe_gating_attrs attrs = {k, kGroup, groupCount, groupSelectMode, renorm, normType,
                                   outFlag ? 1 : 0, routedScalingFactor, eps};
    qmoe_moe_options o = options();
    uint64_t size = 0;
    qmoe_moe_executor *ex = NULL;
    qmoe_status ns = qmoe_moe_gating_top_k_workspace_size(a.t[0], a.t[1], &attrs, a.t[2], a.t[3],
                                                          a.t[4], &o, &size, &ex);
    return finish(&a, ns, ex, size, workspaceSize, executor);
}

aclnnStatus aclnnMoeGatingTopK(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                               aclrtStream stream)
{
    return execute("aclnnMoeGatingTopK", qmoe_moe_gating_top_k, workspace, workspaceSize,
                   executor, stream);
}

/* ------------------------------------------------------------------ init routing ------------- */

static aclnnStatus init_routing(moe_args *a, const aclTensor *x, const aclTensor *expertIdx,
                                const aclTensor *scale, const aclTensor *offset, int64_t activeNum,
                                int64_t expertNum, int64_t dropPadMode, int64_t tokensFlag,
                                int quant, aclTensor *expandedXOut, aclTensor *expandedRowIdxOut,
                                aclTensor *tokensOut, aclTensor *scaleOut,
                                uint64_t *workspaceSize, aclOpExecutor **executor)
{
    aclnnStatus st = begin(a->api, workspaceSize, executor);
    if (st) return st;
    if (offset)
        return compat_fail(ACLNN_ERR_PARAM_INVALID,
                           "%s: offsetOptional is for static quant, which is not supported", a->api);
    const aclTensor *in[] = {x, expertIdx, scale, expandedXOut, expandedRowIdxOut,
                             tokensFlag ? tokensOut : NULL, scaleOut};
    static const char *names[] = {"x", "expertIdx", "scaleOptional", "expandedXOut",
                                  "expandedRowIdxOut", "expertTokensCountOrCumsumOut",
                                  "dynamicQuantScaleOut"};
    if ((st = translate(a, in, names, 7))) return release(a), st;
    if (tokensFlag < 0 || tokensFlag > 2) {
        release(a);
        return compat_fail(ACLNN_ERR_PARAM_INVALID,
                           "%s: expertTokensCountOrCumsumFlag = %lld; expected 0, 1 or 2", a->api,
                           (long long)tokensFlag);
    }
    qmoe_moe_routing_attrs attrs = {.active_num = activeNum, .expert_num = expertNum,
                                    .drop_pad_mode = dropPadMode, .tokens_mode = (int)tokensFlag,
                                    .quant_mode = quant};
    qmoe_moe_options o = options();
    uint64_t size = 0;
    qmoe_moe_executor *ex = NULL;
    qmoe_status ns = qmoe_moe_init_routing_workspace_size(a->t[0], a->t[1], a->t[2], NULL, &attrs,
                                                          a->t[3], a->t[4], a->t[5], a->t[6], &o,
                                                          &size, &ex);
    return finish(a, ns, ex, size, workspaceSize, executor);
}

aclnnStatus aclnnMoeInitRoutingV2GetWorkspaceSize(
    const aclTensor *x, const aclTensor *expertIdx, int64_t activeNum, int64_t expertCapacity,
    int64_t expertNum, int64_t dropPadMode, int64_t expertTokensCountOrCumsumFlag,
    bool expertTokensBeforeCapacityFlag, aclTensor *expandedXOut, aclTensor *expandedRowIdxOut,
    aclTensor *expertTokensCountOrCumsumOut, aclTensor *expertTokensBeforeCapacityOut,
    uint64_t *workspaceSize, aclOpExecutor **executor)
{
    /* capacity and the before-capacity output belong to the drop/pad mode, refused below */
    (void)expertCapacity;
    (void)expertTokensBeforeCapacityFlag;
    (void)expertTokensBeforeCapacityOut;
    moe_args a = {.api = "aclnnMoeInitRoutingV2GetWorkspaceSize"};
    return init_routing(&a, x, expertIdx, NULL, NULL, activeNum, expertNum, dropPadMode,
                        expertTokensCountOrCumsumFlag, QMOE_MOE_QUANT_NONE, expandedXOut,
                        expandedRowIdxOut, expertTokensCountOrCumsumOut, NULL, workspaceSize,
                        executor);
}

aclnnStatus aclnnMoeInitRoutingV2(void *workspace, uint64_t workspaceSize,
                                  aclOpExecutor *executor, aclrtStream stream)
{
    return execute("aclnnMoeInitRoutingV2", qmoe_moe_init_routing, workspace, workspaceSize,
                   executor, stream);
}

aclnnStatus aclnnMoeInitRoutingQuantV2GetWorkspaceSize(
    const aclTensor *x, const aclTensor *expertIdx, const aclTensor *scaleOptional,
    const aclTensor *offsetOptional, int64_t activeNum, int64_t expertCapacity, int64_t expertNum,
    int64_t dropPadMode, int64_t expertTokensCountOrCumsumFlag,
    bool expertTokensBeforeCapacityFlag, int64_t quantMode, aclTensor *expandedXOut,
    aclTensor *expandedRowIdxOut, aclTensor *expertTokensCountOrCumsumOut,
    aclTensor *expertTokensBeforeCapacityOut, aclTensor *dynamicQuantScaleOut,
    uint64_t *workspaceSize, aclOpExecutor **executor)
{
    (void)expertCapacity;
    (void)expertTokensBeforeCapacityFlag;
    (void)expertTokensBeforeCapacityOut;
    moe_args a = {.api = "aclnnMoeInitRoutingQuantV2GetWorkspaceSize"};
    if (quantMode != 1 && compat_initialized() && workspaceSize && executor)
        return compat_fail(ACLNN_ERR_PARAM_INVALID,
                           "%s: quantMode = %lld; only 1 (dynamic) is supported", a.api,
                           (long long)quantMode);
    return init_routing(&a, x, expertIdx, scaleOptional, offsetOptional, activeNum, expertNum,
                        dropPadMode, expertTokensCountOrCumsumFlag, QMOE_MOE_QUANT_DYNAMIC,
                        expandedXOut, expandedRowIdxOut, expertTokensCountOrCumsumOut,
                        dynamicQuantScaleOut, workspaceSize, executor);
}

aclnnStatus aclnnMoeInitRoutingQuantV2(void *workspace, uint64_t workspaceSize,
                                       aclOpExecutor *executor, aclrtStream stream)
{
    return execute("aclnnMoeInitRoutingQuantV2", qmoe_moe_init_routing, workspace, workspaceSize,
                   executor, stream);
}

/* ------------------------------------------------------------------ finalize routing --------- */

aclnnStatus aclnnMoeFinalizeRoutingV2GetWorkspaceSize(
    const aclTensor *expandedX, const aclTensor *expandedRowIdx, const aclTensor *x1Optional,
    const aclTensor *x2Optional, const aclTensor *biasOptional, const aclTensor *scalesOptional,
    const aclTensor *expertIdxOptional, int64_t dropPadMode, const aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor)
{
    moe_args a = {.api = "aclnnMoeFinalizeRoutingV2GetWorkspaceSize"};
    aclnnStatus st = begin(a.api, workspaceSize, executor);
    const aclTensor *in[] = {expandedX, expandedRowIdx, x1Optional, x2Optional, biasOptional,
                             scalesOptional, expertIdxOptional, out};
    static const char *names[] = {"expandedX", "expandedRowIdx", "x1Optional", "x2Optional",
                                  "biasOptional", "scalesOptional", "expertIdxOptional", "out"};
    if (st || (st = translate(&a, in, names, 8))) return release(&a), st;
    qmoe_moe_options o = options();
    uint64_t size = 0;
    qmoe_moe_executor *ex = NULL;
    qmoe_status ns = qmoe_moe_finalize_routing_workspace_size(
        a.t[0], a.t[1], a.t[2], a.t[3], a.t[4], a.t[5], a.t[6], dropPadMode, a.t[7], &o, &size, &ex);
    return finish(&a, ns, ex, size, workspaceSize, executor);
}

aclnnStatus aclnnMoeFinalizeRoutingV2(void *workspace, uint64_t workspaceSize,
                                      aclOpExecutor *executor, aclrtStream stream)
{
    return execute("aclnnMoeFinalizeRoutingV2", qmoe_moe_finalize_routing, workspace,
                   workspaceSize, executor, stream);
}

/* ------------------------------------------------------------------ SwiGlu ------------------- */

aclnnStatus aclnnSwiGluGetWorkspaceSize(const aclTensor *x, int64_t dim, const aclTensor *out,
                                        uint64_t *workspaceSize, aclOpExecutor **executor)
{
    moe_args a = {.api = "aclnnSwiGluGetWorkspaceSize"};
    aclnnStatus st = begin(a.api, workspaceSize, executor);
    const aclTensor *in[] = {x, out};
    static const char *names[] = {"x", "out"};
    if (st || (st = translate(&a, in, names, 2))) return release(&a), st;
    qmoe_moe_options o = options();
    uint64_t size = 0;
    qmoe_moe_executor *ex = NULL;
    qmoe_status ns = qmoe_swiglu_workspace_size(a.t[0], dim, a.t[1], &o, &size, &ex);
    return finish(&a, ns, ex, size, workspaceSize, executor);
}

aclnnStatus aclnnSwiGlu(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                        aclrtStream stream)
{
    return execute("aclnnSwiGlu", qmoe_swiglu, workspace, workspaceSize, executor, stream);
}
