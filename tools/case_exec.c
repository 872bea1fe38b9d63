/*
 * A case through the public two-phase API: the .npy dtype and rank of each input say which
 * tensor it is; outputs are zero-filled so rows past the last group read as 0 / 0.0.
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, MAP_NORESERVE */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "case.h"

typedef struct tensor_desc {
    qmoe_dtype dtype;
    qmoe_format format;
    int ndim;
    int64_t shape[NPY_MAX_DIMS];
} tensor_desc;

/* The file name if known, else the tensor name, for messages. */
static const char *input_name(const op_case *c, int which)
{
    return c->source[which] ? c->source[which] : case_inputs[which].tensor;
}

/* Plain inputs: the .npy dtype maps to the qmoe dtype of the same bits; the operator checks
 * whether it is the right one. */
static int plain_desc(const op_case *c, int which, tensor_desc *d, char *err)
{
    const npy_array *a = &c->in[which];
    static const qmoe_dtype map[] = {
        [NPY_INT8] = QMOE_DTYPE_INT8,       [NPY_INT32] = QMOE_DTYPE_INT32,
        [NPY_INT64] = QMOE_DTYPE_INT64,     [NPY_UINT64] = QMOE_DTYPE_UINT64,
        [NPY_FLOAT32] = QMOE_DTYPE_FLOAT32, [NPY_FLOAT16] = QMOE_DTYPE_FLOAT16,
        [NPY_UINT16] = QMOE_DTYPE_BFLOAT16,
    };
    int is_scale = which == CASE_WEIGHT_SCALE;
    if (is_scale && c->scale_bf16 && a->dtype != NPY_UINT16) {
        snprintf(err, CASE_ERR_LEN,
                 "%s: dtype %s, but --weight-scale-bf16 needs <u2 (bfloat16 bits)",
                 input_name(c, which), npy_descr(a->dtype));
        return -1;
    }
    if (a->dtype == NPY_UINT8 || (a->dtype == NPY_UINT16 && !(is_scale && c->scale_bf16))) {
        snprintf(err, CASE_ERR_LEN, "%s: dtype %s is not accepted for %s%s", input_name(c, which),
                 npy_descr(a->dtype), case_inputs[which].tensor,
                 is_scale ? " (bfloat16 bits as <u2 need --weight-scale-bf16)" : "");
        return -1;
    }
    d->dtype = map[a->dtype];
    d->format = QMOE_FORMAT_ND;
    d->ndim = a->ndim;
    memcpy(d->shape, a->shape, sizeof d->shape);
    return 0;
}

static int weight_kind_error(const op_case *c, char *err)
{
    const npy_array *w = &c->in[CASE_WEIGHT];
    snprintf(err, CASE_ERR_LEN,
             "%s: dtype %s rank %d is not a weight layout: int8 or int32 of rank 5 (FRACTAL_NZ) "
             "or 3 (ND)%s",
             input_name(c, CASE_WEIGHT), npy_descr(w->dtype), w->ndim,
             c->weight_int4_nd ? "; --weight-int4-nd needs int8/uint8 [E, K, N/2]"
                               : "; packed int4 bytes [E, K, N/2] need --weight-int4-nd");
    return -1;
}

/* The weight's kind from its dtype and rank; N (logical columns) for sizing the outputs. */
static int weight_desc(const op_case *c, tensor_desc *d, int64_t *N, char *err)
{
    const npy_array *w = &c->in[CASE_WEIGHT];
    int byte = w->dtype == NPY_INT8 || w->dtype == NPY_UINT8;
    int64_t per_unit;
    memcpy(d->shape, w->shape, sizeof d->shape);
    d->ndim = w->ndim;
    if (c->weight_int4_nd) {
        if (!byte || w->ndim != 3) return weight_kind_error(c, err);
        d->dtype = QMOE_DTYPE_INT4;
        d->format = QMOE_FORMAT_ND;
        per_unit = 2; /* two int4 per byte along N */
    } else if ((w->dtype == NPY_INT8 || w->dtype == NPY_INT32) && (w->ndim == 5 || w->ndim == 3)) {
        d->dtype = w->dtype == NPY_INT8 ? QMOE_DTYPE_INT8 : QMOE_DTYPE_INT32;
        d->format = w->ndim == 5 ? QMOE_FORMAT_FRACTAL_NZ : QMOE_FORMAT_ND;
        per_unit = w->ndim == 5 ? (w->dtype == NPY_INT8 ? 32 : 64) : (w->dtype == NPY_INT8 ? 1 : 8);
    } else {
        return weight_kind_error(c, err);
    }
    /* NZ: N = shape[1] * tile columns; ND: N = last dim * values per element */
    int axis = w->ndim == 5 ? 1 : 2;
    if (__builtin_mul_overflow(w->shape[axis], per_unit, N)) {
        snprintf(err, CASE_ERR_LEN, "%s: N overflows", input_name(c, CASE_WEIGHT));
        return -1;
    }
    if (d->dtype == QMOE_DTYPE_INT4) d->shape[2] = *N;
    return 0;
}

static int make_tensor(const tensor_desc *d, void *data, qmoe_tensor **t, const char *name,
                       char *err)
{
    qmoe_status st = qmoe_tensor_create(d->shape, d->ndim, NULL, d->dtype, d->format, data, t);
    if (st) snprintf(err, CASE_ERR_LEN, "%s: %s", name, qmoe_last_error());
    return st ? -1 : 0;
}

static int array_tensor(const npy_array *a, qmoe_dtype dtype, qmoe_tensor **t, const char *name,
                        char *err)
{
    tensor_desc d = {dtype, QMOE_FORMAT_ND, a->ndim, {0}};
    memcpy(d.shape, a->shape, sizeof d.shape);
    return make_tensor(&d, a->data, t, name, err);
}

enum { T_OUT = CASE_INPUTS, T_OUT_SCALE, T_COUNT };

static void destroy_tensors(qmoe_tensor **t)
{
    for (int i = 0; i < T_COUNT; i++) qmoe_tensor_destroy(t[i]);
}

/* Every tensor of the call; t[CASE_BIAS] stays NULL without a bias. */
static int make_tensors(const op_case *c, case_exec *ex, const tensor_desc *wd, qmoe_tensor **t,
                        char *err)
{
    for (int i = 0; i < CASE_INPUTS; i++) {
        tensor_desc d;
        if (i == CASE_BIAS && !c->in[i].data) continue;
        if (i == CASE_WEIGHT)
            d = *wd;
        else if (plain_desc(c, i, &d, err))
            return -1;
        if (make_tensor(&d, c->in[i].data, &t[i], input_name(c, i), err)) return -1;
    }
    if (array_tensor(&ex->out, QMOE_DTYPE_INT8, &t[T_OUT], "output", err) ||
        array_tensor(&ex->out_scale, QMOE_DTYPE_FLOAT32, &t[T_OUT_SCALE], "outputScale", err))
        return -1;
    return 0;
}

static int alloc_outputs(const op_case *c, int64_t N, case_exec *ex, char *err)
{
    const npy_array *x = &c->in[CASE_X];
    int64_t M = x->ndim >= 1 ? x->shape[0] : 0;
    int64_t out_shape[2] = {M, N / 2};
    char why[NPY_ERR_LEN];
    if (npy_alloc(&ex->out, NPY_INT8, 2, out_shape, why) ||
        npy_alloc(&ex->out_scale, NPY_FLOAT32, 1, &M, why)) {
        snprintf(err, CASE_ERR_LEN, "output: %s", why);
        return -1;
    }
    return 0;
}

static int alloc_workspace(case_exec *ex, char *err)
{
    if (ex->workspace_size == 0) return 0;
    if (ex->workspace_size > SIZE_MAX - 64 ||
        !(ex->workspace = aligned_alloc(64, (size_t)(ex->workspace_size + 63) & ~(size_t)63))) {
        snprintf(err, CASE_ERR_LEN, "workspace: out of memory for %llu bytes",
                 (unsigned long long)ex->workspace_size);
        return -1;
    }
    return 0;
}

/* The outputs' shapes and sizes, without memory. */
static int output_headers(const op_case *c, int64_t N, npy_array *out, npy_array *out_scale,
                          char *err)
{
    const npy_array *x = &c->in[CASE_X];
    int64_t M = x->ndim >= 1 ? x->shape[0] : 0, half = N / 2, bytes;
    memset(out, 0, sizeof *out);
    memset(out_scale, 0, sizeof *out_scale);
    *out = (npy_array){.dtype = NPY_INT8, .ndim = 2, .shape = {M, half}};
    *out_scale = (npy_array){.dtype = NPY_FLOAT32, .ndim = 1, .shape = {M}};
    if (__builtin_mul_overflow(M, half, &bytes) || M > INT64_MAX / 4) {
        snprintf(err, CASE_ERR_LEN, "output: [%lld, %lld] overflows", (long long)M,
                 (long long)half);
        return -1;
    }
    out->count = bytes;
    out->nbytes = (size_t)bytes;
    out_scale->count = M;
    out_scale->nbytes = (size_t)M * 4;
    return 0;
}

int case_check(const op_case *c, const qmoe_grouped_matmul_swiglu_quant_options *options, char *err)
{
    tensor_desc wd;
    int64_t N;
    op_case fake = *c; /* same shapes, data in the reservation; never freed */
    case_exec ex;
    memset(&ex, 0, sizeof ex);
    if (weight_desc(c, &wd, &N, err) || output_headers(c, N, &ex.out, &ex.out_scale, err))
        return -1;
    npy_array *arrays[T_COUNT];
    size_t offset[T_COUNT], total = 0;
    for (int i = 0; i < T_COUNT; i++) {
        arrays[i] = i == T_OUT ? &ex.out : i == T_OUT_SCALE ? &ex.out_scale : &fake.in[i];
        size_t bytes = (arrays[i]->nbytes + 127) & ~(size_t)127; /* nbytes < INT64_MAX - 128 */
        int present = i >= CASE_INPUTS || c->in[i].data || c->source[i] || c->in[i].ndim;
        offset[i] = total;
        if (present && __builtin_add_overflow(total, bytes ? bytes : 128, &total)) {
            snprintf(err, CASE_ERR_LEN, "the inputs and outputs together overflow the address space");
            return -1;
        }
        if (!present) arrays[i]->data = NULL;
    }
    /* address space only: no page is ever touched (PROT_NONE would fault a read) */
    void *base = mmap(NULL, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) {
        snprintf(err, CASE_ERR_LEN, "the inputs and outputs need %zu bytes, more than this process "
                 "can address", total);
        return -1;
    }
    for (int i = 0; i < T_COUNT; i++)
        if (i >= CASE_INPUTS || c->in[i].data || c->source[i] || c->in[i].ndim)
            arrays[i]->data = (char *)base + offset[i];
    qmoe_tensor *t[T_COUNT] = {0};
    qmoe_grouped_matmul_swiglu_quant_options o = *options;
    o.group_list_type = c->group_list_type;
    int rc = make_tensors(&fake, &ex, &wd, t, err);
    if (!rc) {
        uint64_t ws;
        qmoe_grouped_matmul_swiglu_quant_executor *exec = NULL;
        qmoe_status st = qmoe_grouped_matmul_swiglu_quant_workspace_size(
            t[CASE_X], t[CASE_WEIGHT], t[CASE_BIAS], NULL, t[CASE_WEIGHT_SCALE], t[CASE_X_SCALE],
            t[CASE_GROUP_LIST], t[T_OUT], t[T_OUT_SCALE], NULL, &o, &ws, &exec);
        if (st) case_error(c, st, err);
        qmoe_grouped_matmul_swiglu_quant_executor_destroy(exec);
        rc = st ? -1 : 0;
    }
    destroy_tensors(t);
    munmap(base, total);
    return rc;
}

/* Prepacks the weight (with its scale and bias, which the operator then gets as NULL) for the
 * planned kernel; t[CASE_WEIGHT] becomes the object's view. */
static qmoe_status prepack(const qmoe_grouped_matmul_swiglu_quant_options *o, case_exec *ex, qmoe_tensor **t)
{
    qmoe_weights_options po = {.kernel = o->kernel, .force_weight_nz = o->force_weight_nz};
    qmoe_tensor *view = NULL;
    qmoe_status st = qmoe_weights_prepack(t[CASE_WEIGHT], t[CASE_WEIGHT_SCALE], t[CASE_BIAS], &po,
                                          &ex->weights);
    if (st || (st = qmoe_weights_tensor(ex->weights, &view))) return st;
    qmoe_tensor_destroy(t[CASE_WEIGHT]);
    qmoe_tensor_destroy(t[CASE_WEIGHT_SCALE]);
    qmoe_tensor_destroy(t[CASE_BIAS]);
    t[CASE_WEIGHT] = view;
    t[CASE_WEIGHT_SCALE] = t[CASE_BIAS] = NULL;
    return QMOE_OK;
}

static int plan(const op_case *c, const qmoe_grouped_matmul_swiglu_quant_options *options, case_exec *ex, char *err,
                int prepacked)
{
    tensor_desc wd;
    int64_t N;
    qmoe_tensor *t[T_COUNT] = {0};
    qmoe_grouped_matmul_swiglu_quant_options o = *options;
    o.group_list_type = c->group_list_type;
    memset(ex, 0, sizeof *ex);
    if (weight_desc(c, &wd, &N, err) || alloc_outputs(c, N, ex, err) ||
        make_tensors(c, ex, &wd, t, err)) {
        destroy_tensors(t);
        return -1;
    }
    qmoe_status st = prepacked ? prepack(&o, ex, t) : QMOE_OK;
    if (st == QMOE_OK)
        st = qmoe_grouped_matmul_swiglu_quant_workspace_size(
            t[CASE_X], t[CASE_WEIGHT], t[CASE_BIAS], NULL, t[CASE_WEIGHT_SCALE], t[CASE_X_SCALE],
            t[CASE_GROUP_LIST], t[T_OUT], t[T_OUT_SCALE], NULL, &o, &ex->workspace_size,
            &ex->executor);
    if (st) case_error(c, st, err);
    destroy_tensors(t); /* the executor keeps what it needs */
    return st ? -1 : alloc_workspace(ex, err);
}

int case_plan(const op_case *c, const qmoe_grouped_matmul_swiglu_quant_options *options, case_exec *ex, char *err)
{
    return plan(c, options, ex, err, 0);
}

int case_plan_prepacked(const op_case *c, const qmoe_grouped_matmul_swiglu_quant_options *options, case_exec *ex,
                        char *err)
{
    return plan(c, options, ex, err, 1);
}

int case_launch(const op_case *c, case_exec *ex, qmoe_stream *stream, char *err)
{
    qmoe_status st = qmoe_grouped_matmul_swiglu_quant(ex->workspace, ex->workspace_size, ex->executor, stream);
    if (st) case_error(c, st, err);
    return st ? -1 : 0;
}

void case_error(const op_case *c, qmoe_status st, char *err)
{
    const char *msg = qmoe_last_error();
    for (int i = 0; i < CASE_INPUTS; i++) {
        size_t n = strlen(case_inputs[i].tensor);
        if (c->source[i] && !strncmp(msg, case_inputs[i].tensor, n) &&
            (msg[n] == ':' || msg[n] == '[')) {
            snprintf(err, CASE_ERR_LEN, "%s: %s", c->source[i], msg);
            return;
        }
    }
    if (*msg)
        snprintf(err, CASE_ERR_LEN, "%s", msg);
    else
        snprintf(err, CASE_ERR_LEN, "the operator failed with %s", qmoe_status_name(st));
}

void case_exec_free(case_exec *ex)
{
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex->executor);
    qmoe_weights_destroy(ex->weights);
    free(ex->workspace);
    npy_free(&ex->out);
    npy_free(&ex->out_scale);
    memset(ex, 0, sizeof *ex);
}
