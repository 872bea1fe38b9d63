/*
 * aclnnGroupedMatmulSwigluQuantWeightNzTensorList and aclTensorList: the vendor's per-expert
 * weight-list entry points over the native qmoe_gmm_swiglu_quant_weight_list_* API. Phase one
 * checks the vendor's null-pointer and reserved-argument rules, translates every tensor (views,
 * no copies) and lets the native planner do the rest; phase two is the shared one-shot execute.
 */
#include <stdio.h>
#include <stdlib.h>

#include "aclnnop/aclnn_grouped_matmul_swiglu_quant_weight_nz_tensor_list.h"
#include "compat/compat.h"
#include "qmoe/gmm_list.h"

aclTensorList *aclCreateTensorList(const aclTensor *const *value, uint64_t size)
{
    if (!value && size) {
        compat_fail(ACLNN_ERR_PARAM_NULLPTR, "aclCreateTensorList: value is a null pointer");
        return NULL;
    }
    for (uint64_t i = 0; i < size; i++)
        if (!value[i]) {
            compat_fail(ACLNN_ERR_PARAM_NULLPTR, "aclCreateTensorList: value[%llu] is a null pointer",
                        (unsigned long long)i);
            return NULL;
        }
    if (size > QMOE_GMM_LIST_MAX_EXPERTS) {
        compat_fail(ACLNN_ERR_PARAM_INVALID, "aclCreateTensorList: size %llu exceeds %d",
                    (unsigned long long)size, QMOE_GMM_LIST_MAX_EXPERTS);
        return NULL;
    }
    aclTensorList *list = malloc(sizeof *list);
    const aclTensor **items = size ? malloc((size_t)size * sizeof *items) : NULL;
    if (!list || (size && !items)) {
        free(list);
        free(items);
        compat_fail(ACLNN_ERR_INNER, "aclCreateTensorList: out of memory");
        return NULL;
    }
    for (uint64_t i = 0; i < size; i++) items[i] = value[i];
    list->size = size;
    list->items = items;
    return list;
}

aclnnStatus aclDestroyTensorList(const aclTensorList *array)
{
    if (!array) return ACLNN_SUCCESS;
    for (uint64_t i = 0; i < array->size; i++) aclDestroyTensor(array->items[i]);
    free(array->items);
    free((void *)array);
    return ACLNN_SUCCESS;
}

static const char *const API = "aclnnGroupedMatmulSwigluQuantWeightNzTensorListGetWorkspaceSize";

/* Native views of a list's tensors into out[0..size); destroys what it made on failure. */
static aclnnStatus translate_list(const char *name, const aclTensorList *list, qmoe_tensor **out)
{
    char entry[48];
    for (uint64_t i = 0; i < list->size; i++) {
        snprintf(entry, sizeof entry, "%s[%llu]", name, (unsigned long long)i);
        aclnnStatus st = compat_tensor_to_native(API, entry, list->items[i], COMPAT_AS_VIEW, &out[i]);
        if (st) {
            for (uint64_t j = 0; j < i; j++) qmoe_tensor_destroy(out[j]);
            return st;
        }
    }
    return ACLNN_SUCCESS;
}

aclnnStatus aclnnGroupedMatmulSwigluQuantWeightNzTensorListGetWorkspaceSize(
    const aclTensor *x, const aclTensorList *weight, const aclTensor *bias, const aclTensor *offset,
    const aclTensorList *weightScale, const aclTensor *xScale, const aclTensor *groupList,
    float swigluLimit, aclTensor *output, aclTensor *outputScale, aclTensor *outputOffset,
    uint64_t *workspaceSize, aclOpExecutor **executor)
{
    if (!compat_initialized())
        return compat_fail(ACLNN_ERR_RUNTIME_ERROR, "%s: aclInit has not been called", API);
    const struct { const void *p; const char *name; } required[] = {
        {x, "x"}, {weight, "weight"}, {weightScale, "weightScale"}, {xScale, "xScale"},
        {groupList, "groupList"}, {output, "output"}, {outputScale, "outputScale"},
        {workspaceSize, "workspaceSize"}, {executor, "executor"},
    };
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
        if (!required[i].p)
            return compat_fail(ACLNN_ERR_PARAM_NULLPTR, "%s: %s is a null pointer", API,
                               required[i].name);
    if (bias)
        return compat_fail(ACLNN_ERR_PARAM_INVALID,
                           "%s: bias must be a null pointer (the weight-list operator is A8W8 "
                           "without bias)",
                           API);
    if (offset)
        return compat_fail(ACLNN_ERR_PARAM_INVALID, "%s: offset is reserved and must be a null pointer",
                           API);
    if (outputOffset)
        return compat_fail(ACLNN_ERR_PARAM_INVALID,
                           "%s: outputOffset is reserved and must be a null pointer", API);
    if (weight->size == 0)
        return compat_fail(ACLNN_ERR_PARAM_INVALID, "%s: weight is an empty list", API);
    if (weightScale->size != weight->size)
        return compat_fail(ACLNN_ERR_PARAM_INVALID,
                           "%s: weightScale has %llu tensors for %llu weights", API,
                           (unsigned long long)weightScale->size, (unsigned long long)weight->size);

    uint64_t n = weight->size;
    qmoe_tensor **w = calloc((size_t)n, sizeof *w), **s = calloc((size_t)n, sizeof *s);
    enum { X, XS, GL, OUT, OUTS, NT };
    const aclTensor *plain[NT] = {x, xScale, groupList, output, outputScale};
    static const char *const plain_names[NT] = {"x", "xScale", "groupList", "output", "outputScale"};
    qmoe_tensor *t[NT] = {0};
    qmoe_grouped_matmul_swiglu_quant_executor *native = NULL;
    uint64_t size = 0;
    aclnnStatus st = ACLNN_SUCCESS;
    if (!w || !s) {
        st = compat_fail(ACLNN_ERR_INNER, "%s: out of memory", API);
        free(w);
        free(s);
        return st;
    }
    if ((st = translate_list("weight", weight, w))) goto done_lists;
    if ((st = translate_list("weightScale", weightScale, s))) goto done_weights;
    for (int i = 0; i < NT && !st; i++)
        st = compat_tensor_to_native(API, plain_names[i], plain[i], COMPAT_AS_VIEW, &t[i]);

    if (!st) {
        qmoe_grouped_matmul_swiglu_quant_options options = {.struct_size = (uint32_t)sizeof options,
                                   .threads = compat_device_threads()};
        qmoe_status ns = qmoe_grouped_matmul_swiglu_quant_weight_list_workspace_size(
            t[X], (const qmoe_tensor *const *)w, (const qmoe_tensor *const *)s, (int64_t)n, t[XS],
            t[GL], swigluLimit, t[OUT], t[OUTS], &options, &size, &native);
        if (ns) st = compat_fail((aclnnStatus)ns, "%s: %s", API, qmoe_last_error());
    }
    for (int i = 0; i < NT; i++) qmoe_tensor_destroy(t[i]); /* the plan keeps only the memory */
    for (uint64_t i = 0; i < n; i++) qmoe_tensor_destroy(s[i]);
done_weights:
    for (uint64_t i = 0; i < n; i++) qmoe_tensor_destroy(w[i]);
done_lists:
    free(w);
    free(s);
    if (st) return st;

    aclOpExecutor *ex = malloc(sizeof *ex);
    if (!ex) qmoe_grouped_matmul_swiglu_quant_executor_destroy(native);
    else *ex = (aclOpExecutor){.op = COMPAT_OP_GMM_SWIGLU_QUANT, .native = native};
    return compat_executor_publish(API, ex, size, workspaceSize, executor);
}

aclnnStatus aclnnGroupedMatmulSwigluQuantWeightNzTensorList(void *workspace, uint64_t workspaceSize,
                                                            aclOpExecutor *executor,
                                                            aclrtStream stream)
{
    return compat_gmm_execute("aclnnGroupedMatmulSwigluQuantWeightNzTensorList", workspace,
                              workspaceSize, executor, stream);
}
