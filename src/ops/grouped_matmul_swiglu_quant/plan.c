/*
 * Phase one: every check of the spec's error table, in a fixed order (null pointers first), then
 * the plan. Nothing here reads tensor data.
 */
#include "ops/grouped_matmul_swiglu_quant/plan.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/options.h"
#include "core/prepack.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ops/grouped_matmul_swiglu_quant/partition.h"
#include "kernels/kernel.h"

/* Every check names its argument and rule for qmoe_last_error_info(), in one call. */
#define INVALID(rule, arg, ...) qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_##rule, arg, __VA_ARGS__)

enum { MAX_N = 10240, MAX_K_A8W8 = 65536, MAX_K_A8W4 = 20000 };

static qmoe_status expect_rank(const char *name, const qmoe_tensor *t, int rank)
{
    if (t->ndim != rank)
        return INVALID(RANK, name, "%s: rank %d, expected %d", name, t->ndim, rank);
    return QMOE_OK;
}

static qmoe_status expect_nd(const char *name, const qmoe_tensor *t)
{
    if (t->format != QMOE_FORMAT_ND)
        return INVALID(FORMAT, name, "%s: format %s, expected ND", name, qmoe_format_name(t->format));
    return QMOE_OK;
}

static qmoe_status expect_dtype(const char *name, const qmoe_tensor *t, qmoe_dtype dtype)
{
    if (t->dtype != dtype)
        return INVALID(DTYPE, name, "%s: dtype %s, expected %s", name, qmoe_dtype_name(t->dtype),
                       qmoe_dtype_name(dtype));
    return QMOE_OK;
}

static qmoe_status expect_dim(const char *name, const qmoe_tensor *t, int axis, int64_t want,
                              const char *what)
{
    if (t->shape[axis] != want)
        return INVALID(SHAPE, name, "%s: shape[%d] = %lld, expected %lld (%s)", name, axis,
                       (long long)t->shape[axis], (long long)want, what);
    return QMOE_OK;
}

/* Checks a plain ND tensor of the given dtype and rank. */
static qmoe_status expect_plain(const char *name, const qmoe_tensor *t, qmoe_dtype dtype, int rank)
{
    qmoe_status st;
    if ((st = expect_dtype(name, t, dtype)) || (st = expect_rank(name, t, rank)) ||
        (st = expect_nd(name, t)))
        return st;
    return QMOE_OK;
}

/* The weight: layout, E, K and N from its dtype, rank and (declared or forced) format. */
static qmoe_status plan_weight(const qmoe_tensor *w, int force_nz, qmoe_gmm_params *p,
                               int64_t *Kw)
{
    if (w->packed) return qmoe_pp_plan_weight(w->packed, p, Kw); /* qmoe/weights.h */
    qmoe_format fmt = force_nz ? QMOE_FORMAT_FRACTAL_NZ : w->format;
    const int64_t *d = w->shape;
    if (w->dtype != QMOE_DTYPE_INT8 && w->dtype != QMOE_DTYPE_INT4 && w->dtype != QMOE_DTYPE_INT32)
        return INVALID(DTYPE, "weight", "weight: dtype %s, expected int8, int4 or int32 (8 packed int4)",
                       qmoe_dtype_name(w->dtype));
    p->mode = w->dtype == QMOE_DTYPE_INT8 ? QMOE_MODE_A8W8 : QMOE_MODE_A8W4;
    if (fmt == QMOE_FORMAT_FRACTAL_NZ) {
        int64_t cols = w->dtype == QMOE_DTYPE_INT8 ? 32 : 64;
        int64_t inner = w->dtype == QMOE_DTYPE_INT32 ? 8 : cols;
        if (w->ndim != 5)
            return INVALID(RANK, "weight", "weight: FRACTAL_NZ needs rank 5 [E, N/%lld, K/16, 16, %lld], got rank %d",
                           (long long)cols, (long long)inner, w->ndim);
        if (d[3] != 16 || d[4] != inner)
            return INVALID(SHAPE, "weight", "weight: FRACTAL_NZ %s inner dims [%lld, %lld], expected [16, %lld]",
                           qmoe_dtype_name(w->dtype), (long long)d[3], (long long)d[4],
                           (long long)inner);
        if (!qmoe_mul_i64(d[1], cols, &p->N) || !qmoe_mul_i64(d[2], 16, Kw))
            return INVALID(LIMIT, "weight", "weight: N or K overflows");
        p->w_layout = w->dtype == QMOE_DTYPE_INT8   ? QMOE_W_INT8_NZ
                      : w->dtype == QMOE_DTYPE_INT4 ? QMOE_W_INT4_NZ
                                                    : QMOE_W_INT32_NZ;
        for (int i = 0; i < 5; i++) p->w_s[i] = w->strides[i];
    } else {
        if (w->ndim != 3)
            return INVALID(RANK, "weight", "weight: ND needs rank 3 [E, K, N%s], got rank %d",
                           w->dtype == QMOE_DTYPE_INT32 ? "/8" : "", w->ndim);
        *Kw = d[1];
        if (!qmoe_mul_i64(d[2], w->dtype == QMOE_DTYPE_INT32 ? 8 : 1, &p->N))
            return INVALID(LIMIT, "weight", "weight: N overflows");
        p->w_layout = w->dtype == QMOE_DTYPE_INT8   ? QMOE_W_INT8_ND
                      : w->dtype == QMOE_DTYPE_INT4 ? QMOE_W_INT4_ND
                                                    : QMOE_W_INT32_ND;
        for (int i = 0; i < 3; i++) p->w_s[i] = w->strides[i];
    }
    p->E = d[0];
    p->w = w->data;
    return QMOE_OK;
}

static qmoe_status plan_weight_scale(const qmoe_tensor *t, qmoe_gmm_params *p)
{
    static const char *name = "weightScale";
    qmoe_status st;
    if (!qmoe_scale_type_of(t->dtype, p->mode, &p->ws_type)) {
        if (t->dtype == QMOE_DTYPE_UINT64 || t->dtype == QMOE_DTYPE_INT64)
            return INVALID(DTYPE, name, "%s: dtype %s is only accepted for A8W4 (float32 bits in the low word)",
                           name, qmoe_dtype_name(t->dtype));
        return INVALID(DTYPE, name, "%s: dtype %s, expected float32, float16 or bfloat16%s", name,
                       qmoe_dtype_name(t->dtype), p->mode == QMOE_MODE_A8W4 ? " (or uint64/int64)" : "");
    }
    if ((st = expect_nd(name, t))) return st;
    if (t->ndim != 2 && t->ndim != 3)
        return INVALID(RANK, name, "%s: rank %d, expected 2 [E, N] (per-channel) or 3 [E, G, N] (per-group)",
                       name, t->ndim);
    if ((st = expect_dim(name, t, 0, p->E, "E of weight")) ||
        (st = expect_dim(name, t, t->ndim - 1, p->N, "N of weight")))
        return st;
    p->ws = t->data;
    p->ws_s[0] = t->strides[0];
    p->ws_s[2] = t->strides[t->ndim - 1];
    if (t->ndim == 2) {
        p->per_group = 0;
        p->G = 1;
        p->ws_s[1] = 0;
    } else {
        p->per_group = 1;
        p->G = t->shape[1];
        p->ws_s[1] = t->strides[1];
        if (p->G <= 0) return INVALID(SHAPE, name, "%s: G = %lld, expected G > 0", name, (long long)p->G);
        if (p->K % p->G)
            return INVALID(SHAPE, name, "%s: K = %lld is not a multiple of G = %lld", name, (long long)p->K,
                           (long long)p->G);
    }
    p->group_k = p->K / p->G;
    return QMOE_OK;
}

/* Distinct output elements must be distinct memory: row-major-like or column-major-like strides. */
static qmoe_status expect_disjoint_2d(const char *name, const qmoe_tensor *t)
{
    int64_t rows = t->shape[0], cols = t->shape[1], s0 = t->strides[0], s1 = t->strides[1];
    int64_t span;
    int ok;
    if (rows <= 1 || cols <= 1)
        ok = (rows <= 1 || s0 > 0) && (cols <= 1 || s1 > 0);
    else
        ok = (s1 > 0 && qmoe_mul_i64(s1, cols, &span) && s0 >= span) ||
             (s0 > 0 && qmoe_mul_i64(s0, rows, &span) && s1 >= span);
    if (!ok)
        return INVALID(OVERLAP, name, "%s: strides [%lld, %lld] make elements overlap", name, (long long)s0,
                       (long long)s1);
    return QMOE_OK;
}

static qmoe_status expect_disjoint_1d(const char *name, const qmoe_tensor *t)
{
    if (t->shape[0] > 1 && t->strides[0] == 0)
        return INVALID(OVERLAP, name, "%s: stride[0] = 0 makes elements overlap", name);
    return QMOE_OK;
}

/* In-place execution is not supported: an output that shares memory with an input (or with the
 * other output) would be read after it was written, so phase one refuses it. */
static qmoe_status expect_no_alias(const qmoe_tensor *x, const qmoe_tensor *weight,
                                   const qmoe_tensor *bias, const qmoe_tensor *weight_scale,
                                   const qmoe_tensor *x_scale, const qmoe_tensor *group_list,
                                   const qmoe_tensor *output, const qmoe_tensor *output_scale)
{
    /* outputScale is last: output is checked against it, outputScale not against itself. The
     * skip goes by position, not by pointer, so one tensor object passed as both xScale and
     * outputScale is still refused. */
    const struct { const qmoe_tensor *t; const char *name; } inputs[] = {
        {x, "x"}, {weight, "weight"}, {bias, "bias"}, {weight_scale, "weightScale"},
        {x_scale, "xScale"}, {group_list, "groupList"}, {output_scale, "outputScale"},
    };
    const size_t n = sizeof inputs / sizeof inputs[0];
    for (size_t i = 0; i < n; i++) {
        if (!inputs[i].t) continue; /* bias is optional */
        if (i != n - 1 && qmoe_tensor_overlaps(output_scale, inputs[i].t))
            return INVALID(OVERLAP, "outputScale", "outputScale overlaps %s in memory; in-place execution is not supported",
                           inputs[i].name);
        if (qmoe_tensor_overlaps(output, inputs[i].t))
            return INVALID(OVERLAP, "output", "output overlaps %s in memory; in-place execution is not supported",
                           inputs[i].name);
    }
    return QMOE_OK;
}

/* The 0.2 layout, the first with struct_size (up to `devices`): what struct_size 0 stands for. */
#define OPTIONS_0_2_SIZE (offsetof(qmoe_grouped_matmul_swiglu_quant_options, devices) + sizeof(int))

void qmoe_grouped_matmul_swiglu_quant_options_init(qmoe_grouped_matmul_swiglu_quant_options *options)
{
    static const qmoe_grouped_matmul_swiglu_quant_options init = QMOE_GROUPED_MATMUL_SWIGLU_QUANT_OPTIONS_INIT;
    if (options) *options = init;
}

qmoe_status qmoe_gmm_plan(const qmoe_tensor *x, const qmoe_tensor *weight,
                          const qmoe_tensor *bias, const qmoe_tensor *offset,
                          const qmoe_tensor *weight_scale, const qmoe_tensor *x_scale,
                          const qmoe_tensor *group_list, const qmoe_tensor *output,
                          const qmoe_tensor *output_scale, const qmoe_tensor *output_offset,
                          const qmoe_grouped_matmul_swiglu_quant_options *options, qmoe_gmm_params *p)
{
    qmoe_grouped_matmul_swiglu_quant_options opts;
    qmoe_status st = qmoe_read_options(options, &opts, sizeof opts, OPTIONS_0_2_SIZE, "options");
    if (st) return st;
    const qmoe_grouped_matmul_swiglu_quant_options *o = &opts;
    /* prepacked weights hold their scales and the A8W4 correction: those may be NULL */
    const struct qmoe_weights *pp = weight ? weight->packed : NULL;
    const struct { const void *t; const char *name; } required[] = {
        {x, "x"}, {weight, "weight"}, {pp ? (const void *)pp : weight_scale, "weightScale"},
        {x_scale, "xScale"},
        {group_list, "groupList"}, {output, "output"}, {output_scale, "outputScale"},
    };
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
        if (!required[i].t)
            return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, required[i].name,
                                 "%s is a null pointer", required[i].name);
    if (!bias && !pp && (weight->dtype == QMOE_DTYPE_INT4 || weight->dtype == QMOE_DTYPE_INT32))
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "bias",
                             "bias (the weight assist matrix) is a null pointer; it is required for A8W4");

    memset(p, 0, sizeof *p);
    if (offset) return INVALID(RESERVED, "offset", "offset is reserved and must be a null pointer");
    if (output_offset) return INVALID(RESERVED, "outputOffset", "outputOffset is reserved and must be a null pointer");
    if (o->group_list_type != QMOE_GROUP_LIST_CUMSUM && o->group_list_type != QMOE_GROUP_LIST_COUNT)
        return INVALID(OPTION, "options", "options: group_list_type %d, expected 0 (cumsum) or 1 (count)",
                       (int)o->group_list_type);
    if (o->threads < 0) return INVALID(OPTION, "options", "options: threads = %d is negative", o->threads);
    if (o->devices < 0) return INVALID(OPTION, "options", "options: devices = %d is negative", o->devices);

    /* x [M, K] int8 */
    if ((st = expect_plain("x", x, QMOE_DTYPE_INT8, 2))) return st;
    p->M = x->shape[0];
    p->K = x->shape[1];
    p->x = x->data;
    p->x_s[0] = x->strides[0];
    p->x_s[1] = x->strides[1];

    int64_t Kw = 0;
    if ((st = plan_weight(weight, o->force_weight_nz, p, &Kw))) return st;
    if (Kw != p->K)
        return INVALID(SHAPE, "weight", "weight: K = %lld does not match x's last dim K = %lld", (long long)Kw,
                       (long long)p->K);
    if (p->N % 2) return INVALID(SHAPE, "weight", "weight: N = %lld is odd (SwiGLU splits N in halves)", (long long)p->N);
    if (p->N > MAX_N) return INVALID(LIMIT, "weight", "weight: N = %lld exceeds 10240", (long long)p->N);
    if (p->mode == QMOE_MODE_A8W8 && p->K >= MAX_K_A8W8)
        return INVALID(LIMIT, "x", "x: K = %lld, A8W8 needs K < 65536", (long long)p->K);
    if (p->mode == QMOE_MODE_A8W4 && p->K >= MAX_K_A8W4)
        return INVALID(LIMIT, "x", "x: K = %lld, A8W4 needs K < 20000", (long long)p->K);
    p->N2 = p->N / 2;

    if (p->mode == QMOE_MODE_A8W8) {
        if (bias) return INVALID(RESERVED, "bias", "bias must be a null pointer for A8W8 (int8 weight)");
    } else if (bias || !pp) {
        if ((st = expect_plain("bias", bias, QMOE_DTYPE_FLOAT32, 2)) ||
            (st = expect_dim("bias", bias, 0, p->E, "E of weight")) ||
            (st = expect_dim("bias", bias, 1, p->N, "N of weight")))
            return st;
        p->bias = bias->data;
        p->bias_s[0] = bias->strides[0];
        p->bias_s[1] = bias->strides[1];
    }

    if ((weight_scale || !pp) && (st = plan_weight_scale(weight_scale, p))) return st;
    if (pp && (st = qmoe_pp_plan_scale(pp, weight_scale ? (int)weight_scale->dtype : -1, p)))
        return st;

    if ((st = expect_plain("xScale", x_scale, QMOE_DTYPE_FLOAT32, 1)) ||
        (st = expect_dim("xScale", x_scale, 0, p->M, "M of x")))
        return st;
    p->xs = x_scale->data;
    p->xs_s = x_scale->strides[0];

    if ((st = expect_plain("groupList", group_list, QMOE_DTYPE_INT64, 1))) return st;
    p->E_groups = group_list->shape[0];
    if (p->E_groups > p->E)
        return INVALID(SHAPE, "groupList", "groupList: %lld entries, more than E = %lld experts",
                       (long long)p->E_groups, (long long)p->E);
    p->gl = group_list->data;
    p->gl_s = group_list->strides[0];

    if ((st = expect_plain("output", output, QMOE_DTYPE_INT8, 2)) ||
        (st = expect_dim("output", output, 0, p->M, "M of x")) ||
        (st = expect_dim("output", output, 1, p->N2, "N/2")) ||
        (st = expect_disjoint_2d("output", output)))
        return st;
    p->out = output->data;
    p->out_s[0] = output->strides[0];
    p->out_s[1] = output->strides[1];

    if ((st = expect_plain("outputScale", output_scale, QMOE_DTYPE_FLOAT32, 1)) ||
        (st = expect_dim("outputScale", output_scale, 0, p->M, "M of x")) ||
        (st = expect_disjoint_1d("outputScale", output_scale)))
        return st;
    p->out_scale = output_scale->data;
    p->out_scale_s = output_scale->strides[0];

    if ((st = expect_no_alias(x, weight, bias, weight_scale, x_scale, group_list, output,
                              output_scale)))
        return st;

    if (!(o->swiglu_limit >= 0.0f) || !(o->swiglu_alpha >= 0.0f) || isinf(o->swiglu_limit) ||
        isinf(o->swiglu_alpha))
        return INVALID(OPTION, "options", "options: swiglu_limit = %g, swiglu_alpha = %g; each must be 0 or a "
                       "positive finite number", (double)o->swiglu_limit, (double)o->swiglu_alpha);
    p->swiglu_limit = o->swiglu_limit, p->swiglu_alpha = o->swiglu_alpha;
    p->swiglu_bias = o->swiglu_bias, p->swiglu_bias_s0 = p->N; /* [E, N] row-major */

    p->group_list_type = o->group_list_type;
    const qmoe_kernel_entry *k = qmoe_kernel_lookup(o->kernel);
    if (!k)
        return INVALID(UNSUPPORTED, "options", "options: kernel %s (%d) is unknown or not supported by this CPU",
                       qmoe_kernel_name(o->kernel), (int)o->kernel);
    p->kernel = k->id;
    p->kernel_entry = k; /* the device runs this kernel; nothing chooses again */
    if (pp && pp->kernel != k->id)
        return INVALID(UNSUPPORTED, "weight", "weight: prepacked for kernel %s, the operator runs %s",
                       qmoe_kernel_name((qmoe_kernel)pp->kernel), qmoe_kernel_name((qmoe_kernel)k->id));
    /* Threads, devices, blocks, splits, scratchpad and workspace: src/ops/grouped_matmul_swiglu_quant/partition.c. */
    return qmoe_gmm_plan_execution(p, k, o->threads, o->devices);
}
