/* Phase one of GroupedMatmul (docs/ops/grouped-matmul.md): every check of the contract, in a
 * fixed order (null pointers first), then the plan. Nothing here reads tensor data. */
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/options.h"
#include "core/prepack.h"
#include "core/status.h"
#include "core/tensor.h"
#include "kernels/kernel.h"
#include "ops/grouped_matmul/run.h"
#include "qmoe/runtime.h"

#define OP "GroupedMatmul"
#define INVALID(rule, arg, ...) qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_##rule, arg, __VA_ARGS__)
#define NULLPTR(arg) qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, arg, OP ": " arg " is a null pointer")

/* int32 accumulators stay exact: 127 * 128 * K < 2^31; the driver's scratch bounds assume it. */
enum { MAX_K = 65536, MAX_N = 65536, MAX_E = 1024 };

static int is_float(int dtype)
{
    return dtype == QMOE_DTYPE_FLOAT32 || dtype == QMOE_DTYPE_FLOAT16 || dtype == QMOE_DTYPE_BFLOAT16;
}

static qmoe_status expect(const char *name, const qmoe_tensor *t, int dtype, int nd,
                          const int64_t *shape)
{
    qmoe_status st;
    if (t->format != QMOE_FORMAT_ND)
        return INVALID(FORMAT, name, OP ": %s: format %s, expected ND", name, qmoe_format_name(t->format));
    if (dtype >= 0 && (st = moe_check_dtype(OP, name, t, (qmoe_dtype)dtype))) return st;
    return moe_check_shape(OP, name, t, nd, shape);
}

/* The quantized weight: layout, E, K and N from its dtype, rank and format. */
static qmoe_status plan_weight(const qmoe_tensor *w, qmoe_gmm_params *p, int64_t *Kw)
{
    const int64_t *d = w->shape;
    p->mode = w->dtype == QMOE_DTYPE_INT8 ? QMOE_MODE_A8W8 : QMOE_MODE_A8W4;
    if (w->format == QMOE_FORMAT_FRACTAL_NZ) {
        int64_t cols = w->dtype == QMOE_DTYPE_INT8 ? 32 : 64;
        int64_t inner = w->dtype == QMOE_DTYPE_INT32 ? 8 : cols;
        if (w->ndim != 5)
            return INVALID(RANK, "weight", OP ": weight: FRACTAL_NZ needs rank 5 [E, N/%lld, K/16, 16, %lld], got rank %d",
                           (long long)cols, (long long)inner, w->ndim);
        if (d[3] != 16 || d[4] != inner)
            return INVALID(SHAPE, "weight", OP ": weight: FRACTAL_NZ inner dims [%lld, %lld], expected [16, %lld]",
                           (long long)d[3], (long long)d[4], (long long)inner);
        if (!qmoe_mul_i64(d[1], cols, &p->N) || !qmoe_mul_i64(d[2], 16, Kw))
            return INVALID(LIMIT, "weight", OP ": weight: N or K overflows");
        p->w_layout = w->dtype == QMOE_DTYPE_INT8   ? QMOE_W_INT8_NZ
                      : w->dtype == QMOE_DTYPE_INT4 ? QMOE_W_INT4_NZ
                                                    : QMOE_W_INT32_NZ;
        for (int i = 0; i < 5; i++) p->w_s[i] = w->strides[i];
    } else if (w->format == QMOE_FORMAT_ND) {
        if (w->ndim != 3)
            return INVALID(RANK, "weight", OP ": weight: ND needs rank 3 [E, K, N%s], got rank %d",
                           w->dtype == QMOE_DTYPE_INT32 ? "/8" : "", w->ndim);
        *Kw = d[1];
        if (!qmoe_mul_i64(d[2], w->dtype == QMOE_DTYPE_INT32 ? 8 : 1, &p->N))
            return INVALID(LIMIT, "weight", OP ": weight: N overflows");
        p->w_layout = w->dtype == QMOE_DTYPE_INT8   ? QMOE_W_INT8_ND
                      : w->dtype == QMOE_DTYPE_INT4 ? QMOE_W_INT4_ND
                                                    : QMOE_W_INT32_ND;
        for (int i = 0; i < 3; i++) p->w_s[i] = w->strides[i];
    } else {
        return INVALID(FORMAT, "weight", OP ": weight: format %s, expected ND or FRACTAL_NZ",
                       qmoe_format_name(w->format));
    }
    p->E = d[0];
    p->w = w->data;
    return QMOE_OK;
}

static qmoe_status plan_scale(const qmoe_tensor *t, qmoe_gmm_params *p)
{
    if (!qmoe_scale_type_of(t->dtype, p->mode, &p->ws_type))
        return INVALID(DTYPE, "scale", OP ": scale: dtype %s, expected float32, float16 or bfloat16%s",
                       qmoe_dtype_name(t->dtype), p->mode == QMOE_MODE_A8W4 ? " (or uint64/int64)" : "");
    if (t->format != QMOE_FORMAT_ND) return INVALID(FORMAT, "scale", OP ": scale: format must be ND");
    if (t->ndim != 2 && t->ndim != 3)
        return INVALID(RANK, "scale", OP ": scale: rank %d, expected 2 [E, N] or 3 [E, G, N]", t->ndim);
    if (t->shape[0] != p->E || t->shape[t->ndim - 1] != p->N)
        return INVALID(SHAPE, "scale", OP ": scale: E and N must be weight's %lld and %lld",
                       (long long)p->E, (long long)p->N);
    p->ws = t->data;
    p->ws_s[0] = t->strides[0];
    p->ws_s[2] = t->strides[t->ndim - 1];
    p->G = 1;
    p->ws_s[1] = 0;
    if (t->ndim == 3) {
        p->per_group = 1;
        p->G = t->shape[1];
        p->ws_s[1] = t->strides[1];
        if (p->G <= 0 || p->K % p->G)
            return INVALID(SHAPE, "scale", OP ": scale: G = %lld must be positive and divide K = %lld",
                           (long long)p->G, (long long)p->K);
    }
    p->group_k = p->K / p->G;
    return QMOE_OK;
}

enum { A_X, A_WEIGHT, A_BIAS, A_SCALE, A_PTS, A_GROUPS, A_OUT, A_COUNT };

static void bind(void *plan, const qmoe_op *op, void *const *args, void *workspace)
{
    (void)op;
    (void)workspace;
    grouped_matmul_plan *ex = plan;
    qmoe_gmm_params *p = &ex->p;
    if (args[A_X]) p->x = args[A_X], ex->x.data = args[A_X];
    if (!p->pp) { /* prepacked weights hold weight and scale: part of the plan */
        if (args[A_WEIGHT]) p->w = args[A_WEIGHT], ex->w.data = args[A_WEIGHT];
        if (args[A_SCALE]) p->ws = args[A_SCALE];
    }
    if (args[A_BIAS]) ex->o.bias.data = args[A_BIAS];
    if (args[A_PTS]) p->xs = args[A_PTS];
    if (args[A_GROUPS]) ex->gl.data = args[A_GROUPS];
    if (args[A_OUT]) ex->o.out.data = args[A_OUT];
}

static const op_desc desc = {QMOE_OP_GROUPED_MATMUL, OP, bind, qmoe_grouped_matmul_check,
                             qmoe_grouped_matmul_run};

qmoe_status qmoe_op_create_grouped_matmul(
    const qmoe_tensor *x, const qmoe_tensor *weight, const qmoe_tensor *bias,
    const qmoe_tensor *scale, const qmoe_tensor *per_token_scale, const qmoe_tensor *group_list,
    int64_t group_list_type, const qmoe_tensor *out, const qmoe_grouped_matmul_options *options,
    qmoe_op **op)
{
    if (!x) return NULLPTR("x");
    if (!weight) return NULLPTR("weight");
    if (!group_list) return NULLPTR("groupList");
    if (!out) return NULLPTR("out");
    if (!op) return NULLPTR("op");
    qmoe_grouped_matmul_options o;
    qmoe_status st = qmoe_read_options(options, &o, sizeof o, sizeof o, "options");
    if (st) return st;
    if (o.threads < 0 || o.threads > QMOE_MAX_THREADS)
        return INVALID(OPTION, "options", OP ": options.threads = %d; expected 0 to %d", o.threads,
                       QMOE_MAX_THREADS);

    grouped_matmul_plan ex;
    memset(&ex, 0, sizeof ex);
    qmoe_gmm_params *p = &ex.p;
    int fx = is_float(x->dtype);
    if (!fx && x->dtype != QMOE_DTYPE_INT8)
        return INVALID(DTYPE, "x", OP ": x: dtype %s, expected int8, float32, float16 or bfloat16",
                       qmoe_dtype_name(x->dtype));
    if (x->format != QMOE_FORMAT_ND) return INVALID(FORMAT, "x", OP ": x: format must be ND");
    if (x->ndim != 2) return INVALID(RANK, "x", OP ": x: rank %d, expected 2 [M, K]", x->ndim);
    /* Prepacked weights (qmoe/weights.h) hold the experts in the driver's panels of column
     * pairs (j, N/2 + j), the same pairing this operator's halves use, with the scales folded
     * in; the A8W4 SwiGLU correction they also hold is not used here. */
    const struct qmoe_weights *pp = weight->packed;
    if (pp && fx)
        return INVALID(DTYPE, "weight", OP ": weight: prepacked (int8/int4) weights need int8 x");
    int64_t Kw = 0;
    if (pp) {
        if ((st = qmoe_pp_plan_weight(pp, p, &Kw))) return st;
    } else if (fx) {
        if (weight->dtype != x->dtype)
            return INVALID(DTYPE, "weight", OP ": weight: dtype %s, expected x's %s", qmoe_dtype_name(weight->dtype),
                           qmoe_dtype_name(x->dtype));
        if (weight->format != QMOE_FORMAT_ND) return INVALID(FORMAT, "weight", OP ": weight: float weights must be ND");
        if (weight->ndim != 3) return INVALID(RANK, "weight", OP ": weight: rank %d, expected 3 [E, K, N]", weight->ndim);
        p->E = weight->shape[0];
        Kw = weight->shape[1];
        p->N = weight->shape[2];
    } else {
        if (weight->dtype != QMOE_DTYPE_INT8 && weight->dtype != QMOE_DTYPE_INT4 &&
            weight->dtype != QMOE_DTYPE_INT32)
            return INVALID(DTYPE, "weight", OP ": weight: dtype %s, expected int8, int4 or int32 (8 packed int4) with int8 x",
                           qmoe_dtype_name(weight->dtype));
        if ((st = plan_weight(weight, p, &Kw))) return st;
    }
    p->M = x->shape[0];
    p->K = x->shape[1];
    if (Kw != p->K)
        return INVALID(SHAPE, "weight", OP ": weight: K = %lld, x has K = %lld", (long long)Kw, (long long)p->K);
    if (p->E < 1 || p->E > MAX_E)
        return INVALID(LIMIT, "weight", OP ": weight: E = %lld, expected 1 to %d", (long long)p->E, MAX_E);
    if (p->K > MAX_K || p->N > MAX_N)
        return INVALID(LIMIT, "weight", OP ": K = %lld and N = %lld must be at most %d and %d",
                       (long long)p->K, (long long)p->N, MAX_K, MAX_N);
    int64_t sh[3] = {p->E, 0, 0};
    if ((st = expect("groupList", group_list, QMOE_DTYPE_INT64, 1, sh))) return st;
    if (group_list_type != 0 && group_list_type != 1)
        return INVALID(VALUE, "groupListType", OP ": groupListType = %lld, expected 0 (cumsum) or 1 (count)",
                       (long long)group_list_type);

    int scaled = scale || per_token_scale || pp;
    int out_dtype;
    if (fx) {
        if (scale) return INVALID(RESERVED, "scale", OP ": scale must be a null pointer for float x");
        if (per_token_scale)
            return INVALID(RESERVED, "perTokenScale", OP ": perTokenScale must be a null pointer for float x");
        out_dtype = x->dtype;
        ex.path = GMM_PATH_FLOAT;
    } else {
        if (p->mode == QMOE_MODE_A8W4 && !scaled)
            return NULLPTR("scale");
        if (scaled && !scale && !pp) return NULLPTR("scale");
        if (scaled && !per_token_scale) return NULLPTR("perTokenScale");
        if (scaled) {
            if (scale && (st = plan_scale(scale, p))) return st;
            if (pp && (st = qmoe_pp_plan_scale(pp, scale ? (int)scale->dtype : -1, p))) return st;
            sh[0] = p->M;
            if ((st = expect("perTokenScale", per_token_scale, QMOE_DTYPE_FLOAT32, 1, sh))) return st;
            p->xs = per_token_scale->data;
            p->xs_s = per_token_scale->strides[0];
            if (!is_float(out->dtype))
                return INVALID(DTYPE, "out", OP ": out: dtype %s, expected float32, float16 or bfloat16",
                               qmoe_dtype_name(out->dtype));
            out_dtype = out->dtype;
        } else {
            p->G = 1;
            p->group_k = p->K;
            out_dtype = QMOE_DTYPE_INT32;
        }
        ex.path = scaled && p->N % 2 == 0 ? GMM_PATH_INT8 : GMM_PATH_EXACT;
        ex.scaled = scaled;
    }
    sh[0] = p->M;
    sh[1] = p->N;
    if ((st = expect("out", out, out_dtype, 2, sh))) return st;
    if (bias) {
        int bd = fx ? (bias->dtype == QMOE_DTYPE_FLOAT32 ? QMOE_DTYPE_FLOAT32 : x->dtype)
                    : scaled ? QMOE_DTYPE_FLOAT32 : QMOE_DTYPE_INT32;
        sh[0] = p->E;
        if ((st = expect("bias", bias, bd, 2, sh))) return st;
    }
    /* distinct output elements are distinct memory; no output shares memory with an input */
    if (p->M > 1 && p->N > 1 && !(out->strides[1] > 0 && out->strides[0] >= out->strides[1] * p->N) &&
        !(out->strides[0] > 0 && out->strides[1] >= out->strides[0] * p->M))
        return INVALID(OVERLAP, "out", OP ": out: strides [%lld, %lld] make elements overlap",
                       (long long)out->strides[0], (long long)out->strides[1]);
    if ((p->M > 1 && out->strides[0] == 0) || (p->N > 1 && out->strides[1] == 0))
        return INVALID(OVERLAP, "out", OP ": out: a zero stride makes elements overlap");
    const qmoe_tensor *outs[] = {out};
    const char *onames[] = {"out"};
    const qmoe_tensor *ins[] = {x, weight, bias, scale, per_token_scale, group_list};
    const char *inames[] = {"x", "weight", "bias", "scale", "perTokenScale", "groupList"};
    if ((st = moe_check_aliasing(OP, outs, onames, 1, ins, inames, 6))) return st;

    const qmoe_kernel_entry *k = qmoe_kernel_lookup(o.kernel);
    if (!k)
        return INVALID(UNSUPPORTED, "options", OP ": options.kernel = %d is not available on this CPU", o.kernel);
    p->kernel = k->id;
    p->kernel_entry = k;
    ex.isa = k->gemm;
    if (pp && pp->kernel != k->id)
        return INVALID(UNSUPPORTED, "weight", OP ": weight: prepacked for kernel %s, the operator runs %s",
                       qmoe_kernel_name((qmoe_kernel)pp->kernel), qmoe_kernel_name((qmoe_kernel)k->id));
    if (ex.path == GMM_PATH_INT8 && !ex.isa) ex.path = GMM_PATH_EXACT; /* the reference kernel */
    ex.threads = o.threads ? o.threads : qmoe_device_online_cores();
    if (ex.threads < 1) ex.threads = 1;
    p->threads = ex.threads;
    p->devices = 1;
    p->E_groups = p->E;
    p->N2 = p->N / 2;
    p->x = x->data;
    p->x_s[0] = x->strides[0];
    p->x_s[1] = x->strides[1];
    ex.M = p->M;
    ex.K = p->K;
    ex.N = p->N;
    ex.E = p->E;
    ex.group_list_type = group_list_type;
    moe_view_of(x, &ex.x);
    moe_view_of(weight, &ex.w);
    moe_view_of(group_list, &ex.gl);
    moe_view_of(out, &ex.o.out);
    moe_view_of(bias, &ex.o.bias);
    /* Rows per work item: at most 256. The epilogue writes whole output rows (N wide, 14 KB at
     * N = 7168 in bf16) row after row of each column panel; over 2048 rows a panel touches more
     * pages than the TLB holds. Measured at E=4, M=8192, K=2048, N=7168 A8W8 on AMX, 2 threads:
     * 2048 rows 146 ms, 1024 154, 512 138, 256 118, 128 146 (repacking the panels per item
     * grows below 256). */
    int32_t krb = qmoe_kernel_row_block(k);
    ex.rb = krb > 0 && krb < 256 ? krb : 256;
    ex.workspace_bytes = 2 * (uint64_t)(p->E + 1) * sizeof(int64_t);
    /* the driver's scratch for a block of rb rows (its column panels are at most 64 wide) */
    if (ex.path == GMM_PATH_INT8)
        ex.slice_bytes = qmoe_gemm_scratch_bytes(ex.isa, p, ex.rb < p->M ? ex.rb : (p->M ? p->M : 1), 64);
    qmoe_op *h;
    if ((st = op_new(&desc, &ex, sizeof ex, A_COUNT, &h))) return st;
    h->kernel = p->kernel;
    h->workspace_bytes = ex.workspace_bytes;
    h->slice_bytes = ex.slice_bytes;
    op_arg_set(h, A_X, "x", x, OP_IN);
    op_arg_set(h, A_WEIGHT, "weight", weight, OP_IN);
    op_arg_set(h, A_BIAS, "bias", bias, OP_IN);
    op_arg_set(h, A_SCALE, "scale", scale, OP_IN);
    if (pp && scale) op_arg_planned(h, A_SCALE, scale->data);
    op_arg_set(h, A_PTS, "perTokenScale", per_token_scale, OP_IN);
    op_arg_set(h, A_GROUPS, "groupList", group_list, OP_IN);
    op_arg_set(h, A_OUT, "out", out, OP_OUT);
    *op = h;
    qmoe_clear_error();
    return QMOE_OK;
}

qmoe_status qmoe_grouped_matmul_workspace_size(
    const qmoe_tensor *x, const qmoe_tensor *weight, const qmoe_tensor *bias,
    const qmoe_tensor *scale, const qmoe_tensor *per_token_scale, const qmoe_tensor *group_list,
    int64_t group_list_type, const qmoe_tensor *out, const qmoe_grouped_matmul_options *options,
    uint64_t *workspace_size, qmoe_grouped_matmul_executor **executor)
{
    qmoe_status st = op_out_pointers(OP, workspace_size, executor);
    if (st) return st;
    qmoe_op *op;
    st = qmoe_op_create_grouped_matmul(x, weight, bias, scale, per_token_scale,
                                                   group_list, group_list_type, out, options, &op);
    if (st) return st;
    const qmoe_tensor *t[A_COUNT] = {x, weight, bias, scale, per_token_scale, group_list, out};
    void *ex;
    st = op_executor_new(sizeof(qmoe_grouped_matmul_executor), op, t, workspace_size, &ex);
    if (!st) *executor = ex;
    return st;
}
