/*
 * aclnnGroupedMatmulV4 (the MoE subset) over the native qmoe_grouped_matmul of
 * qmoe/grouped_matmul.h. Phase one checks the vendor-only arguments (list lengths, splitItem,
 * groupType, actType, the unsupported optional lists), translates the tensors and lets the native
 * planner check the rest. The vendor's executor holds the native one (compat.h: its operator
 * tag makes every other operator's phase two refuse it).
 */
#include <stdlib.h>
#include <string.h>

#include "aclnnop/aclnn_grouped_matmul_v4.h"
#include "compat/compat.h"
#include "qmoe/grouped_matmul.h"
#include "qmoe/runtime.h"

#define API1 "aclnnGroupedMatmulV4GetWorkspaceSize"
#define API2 "aclnnGroupedMatmulV4"

/* One-tensor list -> its tensor; NULL list -> NULL. */
static aclnnStatus single(const char *name, const aclTensorList *list, int required,
                          const aclTensor **t)
{
    *t = NULL;
    if (!list) {
        if (required) return compat_fail(ACLNN_ERR_PARAM_NULLPTR, API1 ": %s is a null pointer", name);
        return ACLNN_SUCCESS;
    }
    if (list->size == 0 && !required) return ACLNN_SUCCESS;
    if (list->size != 1)
        return compat_fail(ACLNN_ERR_PARAM_INVALID,
                           API1 ": %s holds %llu tensors; this layer takes one (a single x, a stacked "
                           "weight [E, K, N], one out)", name, (unsigned long long)list->size);
    *t = list->items[0];
    return ACLNN_SUCCESS;
}

static int present(const aclTensorList *l) { return l && l->size > 0; }

aclnnStatus aclnnGroupedMatmulV4GetWorkspaceSize(
    const aclTensorList *x, const aclTensorList *weight, const aclTensorList *biasOptional,
    const aclTensorList *scaleOptional, const aclTensorList *offsetOptional,
    const aclTensorList *antiquantScaleOptional, const aclTensorList *antiquantOffsetOptional,
    const aclTensorList *perTokenScaleOptional, const aclTensor *groupListOptional,
    const aclTensorList *activationInputOptional, const aclTensorList *activationQuantScaleOptional,
    const aclTensorList *activationQuantOffsetOptional, int64_t splitItem, int64_t groupType,
    int64_t groupListType, int64_t actType, aclTensorList *out,
    aclTensorList *activationFeatureOutOptional, aclTensorList *dynQuantScaleOutOptional,
    uint64_t *workspaceSize, aclOpExecutor **executor)
{
    if (!compat_initialized())
        return compat_fail(ACLNN_ERR_RUNTIME_ERROR, API1 ": aclInit has not been called");
    enum { X, W, B, S, P, G, O, N };
    const aclTensor *in[N] = {0};
    static const char *const names[N] = {"x", "weight", "biasOptional", "scaleOptional",
                                         "perTokenScaleOptional", "groupListOptional", "out"};
    aclnnStatus st;
    if ((st = single("x", x, 1, &in[X])) || (st = single("weight", weight, 1, &in[W])) ||
        (st = single("biasOptional", biasOptional, 0, &in[B])) ||
        (st = single("scaleOptional", scaleOptional, 0, &in[S])) ||
        (st = single("perTokenScaleOptional", perTokenScaleOptional, 0, &in[P])) ||
        (st = single("out", out, 1, &in[O])))
        return st;
    if (!groupListOptional)
        return compat_fail(ACLNN_ERR_PARAM_NULLPTR, API1 ": groupListOptional is a null pointer; "
                           "this layer takes the MoE form (one x split by the group list)");
    in[G] = groupListOptional;
    if (!workspaceSize) return compat_fail(ACLNN_ERR_PARAM_NULLPTR, API1 ": workspaceSize is a null pointer");
    if (!executor) return compat_fail(ACLNN_ERR_PARAM_NULLPTR, API1 ": executor is a null pointer");
    const struct { const aclTensorList *l; const char *name; } unsupported[] = {
        {offsetOptional, "offsetOptional"}, {antiquantScaleOptional, "antiquantScaleOptional"},
        {antiquantOffsetOptional, "antiquantOffsetOptional"},
        {activationInputOptional, "activationInputOptional"},
        {activationQuantScaleOptional, "activationQuantScaleOptional"},
        {activationQuantOffsetOptional, "activationQuantOffsetOptional"},
        {activationFeatureOutOptional, "activationFeatureOutOptional"},
        {dynQuantScaleOutOptional, "dynQuantScaleOutOptional"}};
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++)
        if (present(unsupported[i].l))
            return compat_fail(ACLNN_ERR_PARAM_INVALID, API1 ": %s is not supported by this layer; pass NULL",
                               unsupported[i].name);
    if (splitItem != 2 && splitItem != 3)
        return compat_fail(ACLNN_ERR_PARAM_INVALID, API1 ": splitItem = %lld; this layer takes 2 or 3 (one out)",
                           (long long)splitItem);
    if (groupType != 0)
        return compat_fail(ACLNN_ERR_PARAM_INVALID, API1 ": groupType = %lld; this layer takes 0 (split on M)",
                           (long long)groupType);
    if (actType != 0)
        return compat_fail(ACLNN_ERR_PARAM_INVALID, API1 ": actType = %lld; this layer takes 0 (no activation)",
                           (long long)actType);
    qmoe_tensor *t[N] = {0};
    st = ACLNN_SUCCESS;
    for (int i = 0; i < N && !st; i++)
        if (in[i])
            st = compat_tensor_to_native(API1, names[i], in[i],
                                         i == W && compat_tensor_format(in[W]) == ACL_FORMAT_FRACTAL_NZ
                                             ? COMPAT_AS_NZ_WEIGHT
                                             : COMPAT_AS_VIEW,
                                         &t[i]);
    qmoe_grouped_matmul_executor *native = NULL;
    uint64_t size = 0;
    if (!st) {
        qmoe_grouped_matmul_options o = QMOE_GROUPED_MATMUL_OPTIONS_INIT;
        o.threads = compat_device_threads();
        qmoe_status ns = qmoe_grouped_matmul_workspace_size(t[X], t[W], t[B], t[S], t[P], t[G],
                                                            groupListType, t[O], &o, &size, &native);
        if (ns) st = compat_fail((aclnnStatus)ns, API1 ": %s", qmoe_last_error());
    }
    for (int i = 0; i < N; i++) qmoe_tensor_destroy(t[i]); /* the plan keeps only the memory */
    if (st) return st;
    aclOpExecutor *ex = calloc(1, sizeof *ex);
    if (ex) *ex = (aclOpExecutor){.op = COMPAT_OP_GROUPED_MATMUL, .gmm = native};
    else qmoe_grouped_matmul_executor_destroy(native);
    return compat_executor_publish(API1, ex, size, workspaceSize, executor);
}

aclnnStatus aclnnGroupedMatmulV4(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                 aclrtStream stream)
{
    qmoe_stream *native;
    aclnnStatus st = compat_executor_claim(API2, executor, COMPAT_OP_GROUPED_MATMUL, stream, &native);
    if (st) return st;
    st = (aclnnStatus)qmoe_grouped_matmul(workspace, workspaceSize, executor->gmm, native);
    return compat_executor_finish(API2, executor, st, stream, native);
}
