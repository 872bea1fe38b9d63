/* Phase-one helpers shared by the element-wise MoE operators: views, dtype/shape rules, aliasing,
 * threads, and handing out the executor. */
#include <stdlib.h>
#include <string.h>

#include "core/options.h"
#include "core/status.h"
#include "core/tensor.h"
#include "kernels/gmm_fast.h"
#include "kernels/kernel.h"
#include "ops/eltwise/exec.h"
#include "qmoe/runtime.h"

static char moe_empty_marker;

void moe_view_of(const qmoe_tensor *t, moe_view *v)
{
    memset(v, 0, sizeof *v);
    if (!t) return;
    v->data = t->data;
    v->dtype = t->dtype;
    v->nd = t->ndim;
    for (int d = 0; d < t->ndim; d++) {
        v->shape[d] = t->shape[d];
        v->st[d] = t->strides[d];
    }
    /* an empty view is never read: a non-NULL base keeps "present" distinct from "absent" */
    if (!v->data) v->data = &moe_empty_marker;
}

qmoe_status moe_check_float(const char *op, const char *name, const qmoe_tensor *t)
{
    if (t->dtype != QMOE_DTYPE_FLOAT32 && t->dtype != QMOE_DTYPE_FLOAT16 &&
        t->dtype != QMOE_DTYPE_BFLOAT16)
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_DTYPE, name,
                         "%s: %s dtype is %s; expected float32, float16 or bfloat16", op, name,
                         qmoe_dtype_name(t->dtype));
    return QMOE_OK;
}

qmoe_status moe_check_dtype(const char *op, const char *name, const qmoe_tensor *t,
                            qmoe_dtype dtype)
{
    if (t->dtype != dtype)
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_DTYPE, name,
                             "%s: %s dtype is %s; expected %s", op, name,
                         qmoe_dtype_name(t->dtype), qmoe_dtype_name(dtype));
    return QMOE_OK;
}

qmoe_status moe_check_shape(const char *op, const char *name, const qmoe_tensor *t, int nd,
                            const int64_t *shape)
{
    if (t->format != QMOE_FORMAT_ND)
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_FORMAT, name,
                             "%s: %s format is %s; expected ND", op, name,
                         qmoe_format_name(t->format));
    if (t->ndim != nd)
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_RANK, name,
                             "%s: %s has rank %d; expected %d", op, name,
                         t->ndim, nd);
    for (int d = 0; d < nd; d++)
        if (shape[d] >= 0 && t->shape[d] != shape[d])
            return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_SHAPE, name,
                             "%s: %s dim %d is %lld; expected %lld", op, name, d,
                             (long long)t->shape[d], (long long)shape[d]);
    return QMOE_OK;
}

qmoe_status moe_check_aliasing(const char *op, const qmoe_tensor *const *outs,
                               const char *const *out_names, int nout,
                               const qmoe_tensor *const *ins, const char *const *in_names, int nin)
{
    for (int o = 0; o < nout; o++) {
        if (!outs[o]) continue;
        for (int i = 0; i < nin; i++)
            if (ins[i] && qmoe_tensor_overlaps(outs[o], ins[i]))
                return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_OVERLAP, out_names[o],
                                 "%s: output %s shares memory with input %s (no in-place "
                                 "execution)", op, out_names[o], in_names[i]);
        for (int p = o + 1; p < nout; p++)
            if (outs[p] && qmoe_tensor_overlaps(outs[o], outs[p]))
                return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_OVERLAP, out_names[p],
                                     "%s: outputs %s and %s share memory", op,
                                 out_names[o], out_names[p]);
    }
    return QMOE_OK;
}

void moe_pick_kernels(moe_qrow_fn *qrow, moe_swiglu_fn *sw)
{
    const qmoe_kernel_entry *k = qmoe_kernel_lookup(QMOE_KERNEL_AUTO); /* never NULL */
    *qrow = k->eltwise->quantize_row;
    *sw = k->eltwise->swiglu;
}

qmoe_status moe_threads(const char *op, const qmoe_moe_options *options, int32_t *threads)
{
    /* the library's one reader of growable options: struct_size 0 is this first layout */
    qmoe_moe_options o;
    qmoe_status st = qmoe_read_options(options, &o, sizeof o, sizeof o, "options");
    if (st) return st;
    int t = o.threads;
    if (t < 0 || t > QMOE_MAX_THREADS)
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_OPTION, "options",
                             "%s: options.threads = %d; expected 0 to %d", op, t, QMOE_MAX_THREADS);
    if (t == 0) t = qmoe_device_online_cores();
    *threads = t > 0 ? t : 1;
    return QMOE_OK;
}
