/* MUL_MAT and MUL_MAT_ID on qmoe: the routed rows are grouped by matrix (expert), quantized per
 * row with qmoe's dynamic quant, multiplied with qmoe's grouped matmul over the prepacked weight
 * (one qmoe expert per ggml matrix) and scattered back into ggml's output layout.
 *   MUL_MAT_ID: as [K, N, E], b [K, B1, T], ids int32 [n_used, T],
 *               dst[:, i, t] = as[ids[i, t]] . b[:, i % B1, t]
 *   MUL_MAT:    a [K, N, A2, A3], b [K, M, B2, B3], dst[:, m, i2, i3] = a[i2 / (B2/A2), i3 / (B3/A3)] . b[:, m, i2, i3]
 * Plans are made once per shape (row count) and kept; every run binds that run's data.
 * q4_K / q5_K: their dmin·m term is added after the matmul from each row's int8 group sums. */
#include <stdlib.h>
#include <string.h>

#include "qmoe/runtime.h"
#include "qmoe_ggml.h"

static int fail(const char *arg, const char *msg)
{
    qmoe_error_set(QMOE_ERR_PARAM_INVALID, QMOE_RULE_VALUE, arg, msg);
    return 0;
}

static const struct ggml_tensor *weight_home(const struct ggml_tensor *t)
{
    return t->view_src ? t->view_src : t;
}

int qg_fuse_moe(void)
{
    const char *v = getenv("QMOE_GGML_FUSE");
    return !(v && v[0] == '0' && v[1] == 0);
}

int qg_supports_matmul(const struct ggml_tensor *op)
{
    if (op->op != GGML_OP_MUL_MAT && op->op != GGML_OP_MUL_MAT_ID) return 0;
    const struct ggml_tensor *a = op->src[0], *b = op->src[1];
    if (!a || !b || op->type != GGML_TYPE_F32) return 0;
    /* activations: f32 (any strides), or f16 / bf16 rows, widened to f32 as they are gathered */
    if (b->type != GGML_TYPE_F32 &&
        ((b->type != GGML_TYPE_F16 && b->type != GGML_TYPE_BF16) || b->nb[0] != ggml_type_size(b->type)))
        return 0;
    const qg_format *f = qg_format_of(a->type);
    if (!f || a->ne[0] % f->blk) return 0;
    if (a->nb[0] != ggml_type_size(a->type) || op->nb[0] != sizeof(float)) return 0;
    /* qmoe's K limits (A8W8 K < 65536, A8W4 K < 20000): by the weight's shape, never the batch */
    if (a->ne[0] >= (f->int4 ? 20000 : 65536)) return 0;
    if (op->op == GGML_OP_MUL_MAT_ID) {
        const struct ggml_tensor *ids = op->src[2];
        if (!ids || ids->type != GGML_TYPE_I32 || a->ne[3] != 1 || b->ne[3] != 1 ||
            ids->ne[2] != 1 || ids->ne[3] != 1)
            return 0;
    }
    /* Weights are converted once from their bytes: only those in this backend's buffers, whose
     * every write is seen (a weight elsewhere, or none yet: the loader's probe, says no buffer) */
    ggml_backend_buffer_t wb = weight_home(a)->buffer;
    if (wb && !qg_buffer_is_ours(wb)) return 0;
    /* llama.cpp's loader asks with a zero-byte buffer of ours (docs/ggml.md, "Which weights"):
     * a dense 2-D weight is taken there where qmoe's kernel is faster than ggml's at prefill
     * (qg_take_dense; QMOE_GGML_DENSE=0 / 1 decides instead). A weight already in our buffer is
     * never declined. */
    if (op->op == GGML_OP_MUL_MAT && wb && !qg_buffer_holds_data(wb)) return qg_take_dense();
    return 1;
}

void *qg_scratch(qg_context *ctx, int slot, size_t bytes)
{
    if (bytes <= ctx->cap[slot] && ctx->scratch[slot]) return ctx->scratch[slot];
    size_t n = bytes < 64 ? 64 : bytes;
    if (n > SIZE_MAX - 63) return NULL;
    n = (n + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, n);
    if (!p) return NULL;
    free(ctx->scratch[slot]);
    ctx->scratch[slot] = p;
    ctx->cap[slot] = n;
    return p;
}

void qg_context_release(qg_context *ctx)
{
    for (int i = 0; i < 2 * QG_PLANS; i++) qmoe_op_destroy(ctx->small[i].op);
    memset(ctx->small, 0, sizeof ctx->small);
    qmoe_stream_destroy(ctx->stream);
    qmoe_device_destroy(ctx->device);
    ctx->stream = NULL;
    ctx->device = NULL;
    for (int i = 0; i < QG_S_SLOTS; i++) {
        free(ctx->scratch[i]);
        ctx->scratch[i] = NULL;
        ctx->cap[i] = 0;
    }
}

/* The qmoe device runs with ggml's thread count (ggml_backend_set_n_threads), made again when
 * that changes; the default is the online cores. */
static int ensure_device(qg_context *ctx, int threads)
{
    if (ctx->device && ctx->dev_threads == threads) return 1;
    qmoe_stream_destroy(ctx->stream);
    qmoe_device_destroy(ctx->device);
    ctx->stream = NULL;
    ctx->device = NULL;
    if (qg_device_create(ctx, threads, &ctx->device) ||
        qmoe_stream_create(ctx->device, &ctx->stream)) {
        qmoe_device_destroy(ctx->device);
        ctx->device = NULL;
        return 0;
    }
    return 1;
}

static qmoe_status desc(qmoe_tensor **t, qmoe_dtype dt, int ndim, int64_t d0, int64_t d1,
                        const int64_t *strides)
{
    int64_t shape[2] = {d0, d1};
    return qmoe_tensor_desc_create(shape, ndim, strides, dt, QMOE_FORMAT_ND, t);
}

/* The plan of a small row-wise operator over R rows: kind 0 the dynamic quant of [R, K] floats
 * (ld apart) into int8 [R, K] + scales [R]; kind 1 the SwiGLU of [R, 2 K] (ld apart: gate columns
 * [0, K), up [K, 2 K)) into floats [R, K]. Kept by shape (the last 2 QG_PLANS). */
qmoe_op *qg_small_plan(qg_context *ctx, int kind, int64_t R, int64_t K, int64_t ld, int threads)
{
    for (int i = 0; i < 2 * QG_PLANS; i++)
        if (ctx->small[i].op && ctx->small[i].kind == kind && ctx->small[i].rows == R &&
            ctx->small[i].K == K && ctx->small[i].ld == ld && ctx->small[i].threads == threads)
            return ctx->small[i].op;
    qmoe_tensor *x = NULL, *y = NULL, *s = NULL;
    qmoe_op *op = NULL;
    qmoe_moe_options mo = QMOE_MOE_OPTIONS_INIT;
    mo.threads = threads;
    int64_t xstr[2] = {ld, 1};
    if (kind == 0) {
        if (!desc(&x, QMOE_DTYPE_FLOAT32, 2, R, K, xstr) && !desc(&y, QMOE_DTYPE_INT8, 2, R, K, NULL) &&
            !desc(&s, QMOE_DTYPE_FLOAT32, 1, R, 0, NULL))
            (void)qmoe_op_create_dynamic_quant(x, NULL, y, s, &mo, &op);
    } else if (!desc(&x, QMOE_DTYPE_FLOAT32, 2, R, 2 * K, xstr) &&
               !desc(&y, QMOE_DTYPE_FLOAT32, 2, R, K, NULL)) {
        (void)qmoe_op_create_swiglu(x, -1, y, &mo, &op);
    }
    qmoe_tensor_destroy(x);
    qmoe_tensor_destroy(y);
    qmoe_tensor_destroy(s);
    if (!op) return NULL;
    int i = ctx->next_small;
    ctx->next_small = (i + 1) % (2 * QG_PLANS);
    qmoe_op_destroy(ctx->small[i].op);
    ctx->small[i].op = op;
    ctx->small[i].kind = kind;
    ctx->small[i].rows = R;
    ctx->small[i].K = K;
    ctx->small[i].ld = ld;
    ctx->small[i].threads = threads;
    return op;
}

/* The grouped matmul of object `view` (chunk c's weight or min object, K rows) over Rc rows,
 * writing columns [n0, n0 + nc + pad) of rows ld floats apart; plans kept in `pl`. */
/* op (NULL: a failed plan, returned as is) into the cache in place of its oldest plan. */
static qmoe_op *keep_plan(qg_plans *pl, qmoe_op *op, int64_t rows, int64_t ld, int threads)
{
    if (!op) return NULL;
    int i = pl->next;
    pl->next = (i + 1) % QG_PLANS;
    qmoe_op_destroy(pl->p[i].op);
    pl->p[i].op = op;
    pl->p[i].rows = rows;
    pl->p[i].ld = ld;
    pl->p[i].threads = threads;
    return op;
}

static qmoe_op *gmm_plan(const qg_chunk *c, qmoe_tensor *view, qg_plans *pl, int64_t K, int64_t Rc,
                         int64_t ld, int threads)
{
    for (int i = 0; i < QG_PLANS; i++)
        if (pl->p[i].op && pl->p[i].rows == Rc && pl->p[i].ld == ld && pl->p[i].threads == threads)
            return pl->p[i].op;
    int64_t ostr[2] = {ld, 1};
    qmoe_tensor *x = NULL, *pts = NULL, *gl = NULL, *out = NULL;
    qmoe_op *op = NULL;
    qmoe_grouped_matmul_options go = QMOE_GROUPED_MATMUL_OPTIONS_INIT;
    go.threads = threads;
    if (!desc(&x, QMOE_DTYPE_INT8, 2, Rc, K, NULL) && !desc(&pts, QMOE_DTYPE_FLOAT32, 1, Rc, 0, NULL) &&
        !desc(&gl, QMOE_DTYPE_INT64, 1, c->ne, 0, NULL) &&
        !desc(&out, QMOE_DTYPE_FLOAT32, 2, Rc, qg_chunk_cols(c), ostr))
        (void)qmoe_op_create_grouped_matmul(x, view, NULL, NULL, pts, gl, QMOE_GROUP_LIST_COUNT, out,
                                            &go, &op);
    qmoe_tensor_destroy(x);
    qmoe_tensor_destroy(pts);
    qmoe_tensor_destroy(gl);
    qmoe_tensor_destroy(out);
    return keep_plan(pl, op, Rc, ld, threads);
}

/* The fused GroupedMatmulSwigluQuant over a paired gate's object (gate | up columns): int8
 * [Rc, I] and scales [Rc] out; plans kept by row count as gmm_plan's. */
static qmoe_op *fused_plan(qg_chunk *c, int64_t K, int64_t Rc, int threads)
{
    qg_plans *pl = &c->fplans;
    for (int i = 0; i < QG_PLANS; i++)
        if (pl->p[i].op && pl->p[i].rows == Rc && pl->p[i].threads == threads) return pl->p[i].op;
    qmoe_tensor *x = NULL, *xs = NULL, *gl = NULL, *out = NULL, *os = NULL;
    qmoe_op *op = NULL;
    qmoe_grouped_matmul_swiglu_quant_options fo = QMOE_GROUPED_MATMUL_SWIGLU_QUANT_OPTIONS_INIT;
    fo.group_list_type = QMOE_GROUP_LIST_COUNT;
    fo.threads = threads;
    if (!desc(&x, QMOE_DTYPE_INT8, 2, Rc, K, NULL) && !desc(&xs, QMOE_DTYPE_FLOAT32, 1, Rc, 0, NULL) &&
        !desc(&gl, QMOE_DTYPE_INT64, 1, c->ne, 0, NULL) &&
        !desc(&out, QMOE_DTYPE_INT8, 2, Rc, qg_chunk_cols(c) / 2, NULL) &&
        !desc(&os, QMOE_DTYPE_FLOAT32, 1, Rc, 0, NULL))
        (void)qmoe_op_create_grouped_matmul_swiglu_quant(x, c->view, NULL, NULL, NULL, xs, gl, out, os,
                                                         NULL, &fo, &op);
    qmoe_tensor_destroy(x);
    qmoe_tensor_destroy(xs);
    qmoe_tensor_destroy(gl);
    qmoe_tensor_destroy(out);
    qmoe_tensor_destroy(os);
    return keep_plan(pl, op, Rc, qg_chunk_cols(c) / 2, threads);
}

int64_t qg_weight_fusable(const qg_weight *w)
{
    const qg_chunk *c = w->nchunks == 1 ? &w->chunks[0] : NULL;
    if (!c || c->col || w->fmt->mins || qg_chunk_cols(c) % 2 || (w->fmt->int4 && !w->assist)) return 0;
    if (w->mate) return w->mate->chunks[0].col == c->nc ? c->nc : 0; /* a paired gate */
    return c->pad ? 0 : c->nc / 2; /* one gate | up tensor */
}

int qg_weight_swiglu_quant(qg_context *ctx, qg_weight *wg, const qg_acts *a, int8_t *hq, float *hs)
{
    qg_chunk *c = &wg->chunks[0];
    if (!qg_weight_fusable(wg)) {
        qmoe_error_set(QMOE_ERR_PARAM_INVALID, QMOE_RULE_UNSUPPORTED, "weight", "not a gate | up weight");
        return 0;
    }
    pthread_mutex_lock(&wg->run);
    qmoe_op *op = fused_plan(c, wg->K, a->R, ctx->dev_threads);
    void *args[10] = {a->xq, NULL, NULL, NULL, NULL, a->xs, a->counts, hq, hs, NULL};
    int ok = op && qg_run(ctx, op, args, 10);
    pthread_mutex_unlock(&wg->run);
    return ok;
}

/* The routed rows of the node: which matrix, which row of b, which row of dst. */
static int route(const struct ggml_tensor *node, int64_t E, qg_row *rows)
{
    const struct ggml_tensor *a = node->src[0], *b = node->src[1];
    int64_t r = 0;
    if (node->op == GGML_OP_MUL_MAT_ID) {
        const struct ggml_tensor *ids = node->src[2];
        for (int64_t t = 0; t < ids->ne[1]; t++)
            for (int64_t i = 0; i < ids->ne[0]; i++, r++) {
                int32_t e;
                memcpy(&e, (const uint8_t *)ids->data + i * ids->nb[0] + t * ids->nb[1], sizeof e);
                if (e < 0 || e >= E) return fail("ids", "ids: an expert id is outside [0, E)");
                rows[r].mat = e;
                rows[r].src = (const uint8_t *)b->data + (i % b->ne[1]) * b->nb[1] + t * b->nb[2];
                rows[r].dst = (uint8_t *)node->data + i * node->nb[1] + t * node->nb[2];
                rows[r].mul = NULL;
            }
        return 1;
    }
    int64_t r2 = b->ne[2] / a->ne[2], r3 = b->ne[3] / a->ne[3];
    for (int64_t i3 = 0; i3 < b->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < b->ne[2]; i2++)
            for (int64_t i1 = 0; i1 < b->ne[1]; i1++, r++) {
                rows[r].mat = i2 / r2 + (i3 / r3) * a->ne[2];
                rows[r].src = (const uint8_t *)b->data + i1 * b->nb[1] + i2 * b->nb[2] + i3 * b->nb[3];
                rows[r].dst = (uint8_t *)node->data + i1 * node->nb[1] + i2 * node->nb[2] + i3 * node->nb[3];
                rows[r].mul = NULL;
            }
    return 1;
}

static void gather_row(const struct ggml_tensor *b, const uint8_t *src, int64_t K, float *x)
{
    if (b->type != GGML_TYPE_F32) { /* f16 / bf16 rows (contiguous, checked by supports_op) */
        ggml_get_type_traits(b->type)->to_float(src, x, K);
        return;
    }
    if (b->nb[0] == sizeof(float)) {
        memcpy(x, src, (size_t)K * sizeof(float));
        return;
    }
    for (int64_t k = 0; k < K; k++) memcpy(&x[k], src + k * b->nb[0], sizeof(float));
}

/* The gather of activation rows and the scatter of output rows, a share of the rows per thread:
 * on 2 threads of the development VM a single thread's copies were a third of a Qwen3-30B-A3B
 * layer's pp512 time. Work of a few rows stays on the calling thread (a parallel region costs
 * more than it saves). */
typedef struct moved {
    const struct ggml_tensor *b;
    const qg_row *rows;
    const int64_t *perm;
    float *x;
    const float *y;
    int64_t K, N, Np, R;
} moved;

static void share_of(const moved *m, int t, int n, int64_t *lo, int64_t *hi)
{
    *lo = m->R * t / n;
    *hi = m->R * (t + 1) / n;
}

static void gather_share(void *arg, int t, int n)
{
    const moved *m = arg;
    int64_t lo, hi;
    share_of(m, t, n, &lo, &hi);
    for (int64_t r = lo; r < hi; r++)
        gather_row(m->b, m->rows[m->perm[r]].src, m->K, m->x + (size_t)r * (size_t)m->K);
}

static void scatter_share(void *arg, int t, int n)
{
    const moved *m = arg;
    int64_t lo, hi;
    share_of(m, t, n, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const qg_row *to = &m->rows[m->perm[r]];
        const float *y = m->y + (size_t)r * (size_t)m->Np;
        if (!to->mul) {
            memcpy(to->dst, y, (size_t)m->N * sizeof(float));
            continue;
        }
        const float f = *to->mul; /* ggml's MUL: each value times the row's factor */
        float *d = (float *)(void *)to->dst;
        for (int64_t c = 0; c < m->N; c++) d[c] = y[c] * f;
    }
}

enum { QG_PARALLEL_COPY_BYTES = 1 << 18, QG_SMALL_QUANT = 1 << 16, QG_QUANT_ROWS = 256 };

/* fn's row shares on ggml's threads, or all on this one below QG_PARALLEL_COPY_BYTES of work */
static void rows_on_threads(qg_context *ctx, void (*fn)(void *, int, int), void *arg, size_t bytes)
{
    if (bytes < QG_PARALLEL_COPY_BYTES) fn(arg, 0, 1);
    else qg_parallel(ctx, fn, arg);
}

static int64_t routed_rows(const struct ggml_tensor *node)
{
    if (node->op == GGML_OP_MUL_MAT_ID) return node->src[2]->ne[0] * node->src[2]->ne[1];
    return node->src[1]->ne[1] * node->src[1]->ne[2] * node->src[1]->ne[3];
}

/* a * b * c bytes, 0 when that does not fit in a size_t */
int qg_bytes3(int64_t a, int64_t b, size_t c, size_t *out)
{
    if (a < 0 || b < 0) return 0;
    uint64_t ab = (uint64_t)a * (uint64_t)b; /* both below 2^63 and a tensor's extent */
    if (a && ab / (uint64_t)a != (uint64_t)b) return 0;
    if (c && ab > SIZE_MAX / c) return 0;
    *out = (size_t)ab * c;
    return 1;
}

/* The K-quants' min term: value (k, n) of matrix e is s_j q - dmin_b m_j for sub-block j = k / 32
 * of super-block b = k / 256, and the main matmul computed the first part. The second, for row
 * r: xs[r] * sum_j xsum_j (-dmin_b m_j), xsum_j the sum of the row's int8 values over sub-block j
 * (the int8 activations the matmul used, so the weights stay exact). That is a grouped matmul of
 * the sums [xsum] by the chunk's min object (the m_j, groups of 8, scales -dmin_b). The sums
 * (|.| <= 4096) are not int8, so each row is given twice, its low 6 bits and the rest (xsum = lo
 * + 64 hi, exactly), both in one run: matrix e's rows [start_e, start_e + n_e) become rows
 * 2 start_e + i (lo) and 2 start_e + n_e + i (hi), so its min weights stream once for both (a
 * row's result does not depend on the rows beside it). */
typedef struct min_rows {
    int8_t *x;      /* [2 R, K2]: K2 = K/32 */
    float *xs;      /* [2 R] */
    int64_t *count; /* [E]: 2 n_e */
} min_rows;

/* The min term's row work for one pass (sorted rows [q0, q0 + R)), shared by rows over ggml's
 * threads (each row's values are computed by one thread in one order: the same bits for any
 * thread count and any pass size). The pass's rows of matrix e are its local rows
 * [start_e, start_e + n_e), sorted row q0 + start_e + i; its lo and hi rows in m and ym are
 * 2 start_e + i and 2 start_e + n_e + i. */
typedef struct min_job {
    const int8_t *xq;
    const float *xs;
    int64_t q0, R;                /* the pass */
    const int64_t *start, *count; /* [E + 1], [E]: the pass's local rows of each matrix */
    int64_t E, K, K2;
    const min_rows *m;
    float *y;        /* the main matmul's outputs, [all rows, ld] */
    const float *ym; /* the min term's, [2 R, Np]: lo then hi rows of each matrix */
    int64_t ld, Np, N;
} min_job;

static void min_sums_share(void *arg, int t, int n)
{
    const min_job *j = arg;
    const int64_t R = j->R, r0 = R * t / n, r1 = R * (t + 1) / n, J = j->K / 32, K2 = j->K2;
    for (int64_t e = 0; e < j->E; e++) {
        const int64_t s = j->start[e], c = j->count[e];
        for (int64_t i = (r0 > s ? r0 - s : 0); i < c && s + i < r1; i++) {
            const int8_t *x = j->xq + (size_t)(j->q0 + s + i) * (size_t)j->K;
            const size_t lo = (size_t)(2 * s + i), hi = lo + (size_t)c;
            int8_t *l = j->m->x + lo * (size_t)K2, *h = j->m->x + hi * (size_t)K2;
            j->m->xs[lo] = j->m->xs[hi] = j->xs[j->q0 + s + i];
            for (int64_t g = 0; g < J; g++) {
                int32_t sum = 0;
                for (int k = 0; k < 32; k++) sum += x[g * 32 + k];
                l[g] = (int8_t)(sum & 63);
                h[g] = (int8_t)((sum - (sum & 63)) / 64); /* in [-64, 63] */
            }
        }
    }
}

static void min_add_share(void *arg, int t, int n)
{
    const min_job *j = arg;
    const int64_t R = j->R, r0 = R * t / n, r1 = R * (t + 1) / n;
    for (int64_t e = 0; e < j->E; e++) {
        const int64_t s = j->start[e], c = j->count[e];
        for (int64_t i = (r0 > s ? r0 - s : 0); i < c && s + i < r1; i++) {
            const size_t lo = (size_t)(2 * s + i), hi = lo + (size_t)c;
            float *y = j->y + (size_t)(j->q0 + s + i) * (size_t)j->ld;
            const float *a = j->ym + lo * (size_t)j->Np, *b = j->ym + hi * (size_t)j->Np;
            for (int64_t k = 0; k < j->N; k++) y[k] += a[k] + 64.0f * b[k];
        }
    }
}

enum ggml_status qg_failed(const char *what)
{
    qg_log_error(what);
    return GGML_STATUS_FAILED;
}

int qg_context_ready(qg_context *ctx)
{
    int threads = ctx->n_threads > 0 ? ctx->n_threads : qmoe_device_online_cores();
    return ensure_device(ctx, threads) ? threads : 0;
}

qg_weight *qg_node_weight(const struct ggml_tensor *node)
{
    const struct ggml_tensor *a = node->src[0];
    if (!qg_supports_matmul(node) || !qg_buffer_holds_data(a->buffer)) {
        qmoe_error_set(QMOE_ERR_PARAM_INVALID, QMOE_RULE_UNSUPPORTED, "weight",
                       "the node's weight is not a tensor of a taken type in a QMOE buffer");
        return NULL;
    }
    return qg_buffer_weight(a->buffer, a);
}

int qg_small_threads(const qg_context *ctx, int64_t R, int64_t K)
{
    /* a few rows take microseconds: a parallel region would cost more than the work */
    return (uint64_t)R * (uint64_t)K < QG_SMALL_QUANT ? 1 : ctx->dev_threads;
}

int qg_run(qg_context *ctx, qmoe_op *op, void **args, int nargs)
{
    uint64_t wsz = qmoe_op_workspace_size(op);
    void *ws = wsz ? qg_scratch(ctx, QG_S_WS, (size_t)wsz) : NULL;
    if (wsz && !ws) {
        qmoe_error_set(QMOE_ERR_INNER, QMOE_RULE_NONE, "workspace", "out of memory for the workspace");
        return 0;
    }
    if (qmoe_op_execute(op, args, nargs, ws, wsz, ctx->stream)) {
        (void)qmoe_stream_synchronize(ctx->stream);
        return 0;
    }
    return qmoe_stream_synchronize(ctx->stream) == 0;
}

int qg_acts_prepare(qg_context *ctx, const struct ggml_tensor *node, const qg_weight *w, qg_acts *a)
{
    const struct ggml_tensor *b = node->src[1];
    const int64_t K = w->K, E = w->E, R = routed_rows(node);
    memset(a, 0, sizeof *a);
    a->R = R;
    a->K = K;
    if (R == 0) return 1;
    size_t fR = (size_t)R, nx;
    /* R rows of K floats: broadcast activations may make R * K exceed any tensor's size;
     * K >= 32 makes R * K * 4 the bound of the per-row arrays below too */
    if (!qg_bytes3(R, K, sizeof(float), &nx)) {
        qmoe_error_set(QMOE_ERR_PARAM_INVALID, QMOE_RULE_LIMIT, "", "the activations' size overflows");
        return 0;
    }
    a->rows = qg_scratch(ctx, QG_S_ROWS, fR * sizeof(qg_row));
    a->perm = qg_scratch(ctx, QG_S_PERM, fR * sizeof(int64_t));
    a->counts = qg_scratch(ctx, QG_S_COUNTS, (2 * (size_t)E + 1) * sizeof(int64_t));
    /* floats gathered QG_QUANT_ROWS rows at a time and quantized from there: per-row scales make
     * the blocks' results the whole's, and R x K floats (33.5 MB at a 512-token prompt of a
     * 2048-wide model) are never held */
    const int64_t B = R < QG_QUANT_ROWS ? R : QG_QUANT_ROWS;
    float *x = qg_scratch(ctx, QG_S_X, (size_t)B * (size_t)K * sizeof(float));
    a->xq = qg_scratch(ctx, QG_S_XQ, nx / sizeof(float));
    a->xs = qg_scratch(ctx, QG_S_XS, fR * sizeof(float));
    if (!a->rows || !a->perm || !a->counts || !x || !a->xq || !a->xs) {
        qmoe_error_set(QMOE_ERR_INNER, QMOE_RULE_NONE, "", "out of memory for the activations");
        return 0;
    }
    if (!route(node, E, a->rows)) return 0;
    /* counting sort by matrix: counts[e] rows of matrix e, starting at start[e] */
    int64_t *counts = a->counts, *start = counts + E, *perm = a->perm;
    a->start = start;
    memset(counts, 0, (size_t)E * sizeof(int64_t));
    for (int64_t r = 0; r < R; r++) counts[a->rows[r].mat]++;
    start[0] = 0;
    for (int64_t e = 0; e < E; e++) start[e + 1] = start[e] + counts[e];
    for (int64_t r = 0; r < R; r++) perm[start[a->rows[r].mat]++] = r;
    for (int64_t e = E; e > 0; e--) start[e] = start[e - 1];
    start[0] = 0;
    for (int64_t r0 = 0; r0 < R; r0 += B) {
        const int64_t n = R - r0 < B ? R - r0 : B;
        moved m = {b, a->rows, perm + r0, x, NULL, K, 0, 0, n};
        rows_on_threads(ctx, gather_share, &m, (size_t)n * (size_t)K * sizeof(float));
        qmoe_op *qop = qg_small_plan(ctx, 0, n, K, K, qg_small_threads(ctx, n, K));
        if (!qop) return 0;
        void *qargs[4] = {x, NULL, a->xq + (size_t)r0 * (size_t)K, a->xs + r0};
        if (!qg_run(ctx, qop, qargs, 4)) return 0;
    }
    return 1;
}

static int weight_run(qg_context *ctx, qg_weight *w, const qg_acts *a, int64_t s0, int64_t R,
                      const int8_t *xq, const float *xs, float *y, int64_t ld)
{
    const int threads = ctx->dev_threads;
    const int64_t K = w->K, N = w->N, Np = N + N % 2;
    const size_t fK = (size_t)K;
    /* the window's rows of each matrix, local: start[e] its first, counts[e] how many */
    int64_t *start = qg_scratch(ctx, QG_S_WIN, (2 * (size_t)w->E + 1) * sizeof(int64_t)), *counts;
    if (!start) {
        qmoe_error_set(QMOE_ERR_INNER, QMOE_RULE_NONE, "", "out of memory for the row window");
        return 0;
    }
    counts = start + w->E + 1;
    for (int64_t e = 0; e <= w->E; e++) {
        int64_t v = a->start[e] - s0;
        start[e] = v < 0 ? 0 : v > R ? R : v;
    }
    for (int64_t e = 0; e < w->E; e++) counts[e] = start[e + 1] - start[e];
    /* the min term, in passes of P sorted rows (its outputs, 2 P rows of Np floats, are at
     * most QG_MIN_Y_BYTES however long the prompt: at 512 tokens all at once they were 64 MiB
     * of the backend's peak memory): 2 P rows of K2 bytes, their 2 P scales, the doubled row
     * counts, each matrix's local start and count, and the 2 P outputs */
    const int mins = w->fmt->mins;
    const int64_t K2 = qg_min_rows(K), P0 = QG_MIN_Y_BYTES / (2 * Np * (int64_t)sizeof(float)),
                  P = R < P0 ? R : P0 > 0 ? P0 : 1;
    const size_t fP = (size_t)P, fE = (size_t)w->E;
    size_t ny = 0, nx = 2 * fP * (size_t)K2, nxa = (nx + 63) & ~(size_t)63;
    min_rows mr = {NULL, NULL, NULL};
    float *ym = NULL;
    int64_t *pstart = NULL, *pcount = NULL;
    if (mins) {
        uint8_t *m = qg_scratch(ctx, QG_S_MIN,
                                nxa + 2 * fP * sizeof(float) + (3 * fE + 1) * sizeof(int64_t));
        ym = qg_bytes3(2 * P, Np, sizeof(float), &ny) ? qg_scratch(ctx, QG_S_MINY, ny) : NULL;
        if (!m || !ym) {
            qmoe_error_set(QMOE_ERR_INNER, QMOE_RULE_NONE, "", "out of memory for the min term");
            return 0;
        }
        mr.x = (int8_t *)m;
        mr.xs = (float *)(void *)(m + nxa);
        mr.count = (int64_t *)(void *)(m + nxa + 2 * fP * sizeof(float));
        pstart = mr.count + fE;
        pcount = pstart + fE + 1;
    }
    /* plans first (they fix the workspace), then the run: every chunk's matmul */
    qmoe_op *ops[64], *mops[64];
    uint64_t wsz = 0;
    int nops = 0;
    for (int i = 0; i < w->nchunks; i++) {
        qg_chunk *c = &w->chunks[i];
        int64_t Rc = start[c->e0 + c->ne] - start[c->e0];
        if (Rc == 0) continue;
        if (nops == 64) {
            qmoe_error_set(QMOE_ERR_PARAM_INVALID, QMOE_RULE_LIMIT, "weight", "more than 64 weight chunks");
            return 0;
        }
        qmoe_op *op = gmm_plan(c, c->view, &c->plans, K, Rc, ld, threads);
        /* a pass holds at most P of the chunk's rows; fewer leave the plan's last rows unwritten */
        qmoe_op *mop = mins ? gmm_plan(c, c->mview, &c->mplans, K2, 2 * (Rc < P ? Rc : P), Np, threads)
                            : NULL;
        if (!op || (mins && !mop)) return 0;
        mops[nops] = mop;
        ops[nops++] = op;
        if (qmoe_op_workspace_size(op) > wsz) wsz = qmoe_op_workspace_size(op);
        if (mop && qmoe_op_workspace_size(mop) > wsz) wsz = qmoe_op_workspace_size(mop);
    }
    void *ws = wsz ? qg_scratch(ctx, QG_S_WS, (size_t)wsz) : NULL;
    if (wsz && !ws) {
        qmoe_error_set(QMOE_ERR_INNER, QMOE_RULE_NONE, "workspace", "out of memory for the workspace");
        return 0;
    }
    /* one stream runs its operators in order, sharing the workspace one after another */
    int k = 0;
    for (int i = 0; i < w->nchunks; i++) {
        qg_chunk *c = &w->chunks[i];
        int64_t rb = start[c->e0], Rc = start[c->e0 + c->ne] - rb;
        if (Rc == 0) continue;
        void *args[7] = {(void *)(xq + (size_t)rb * fK), NULL, NULL, NULL, (void *)(xs + rb),
                         (void *)(counts + c->e0), y + (size_t)rb * (size_t)ld + (size_t)c->n0};
        if (qmoe_op_execute(ops[k++], args, 7, ws, wsz, ctx->stream)) {
            (void)qmoe_stream_synchronize(ctx->stream);
            return 0;
        }
    }
    if (qmoe_stream_synchronize(ctx->stream)) return 0;
    if (!mins) return 1;
    for (int64_t q0 = 0; q0 < R; q0 += P) {
        const int64_t Rp = R - q0 < P ? R - q0 : P;
        for (int64_t e = 0; e <= w->E; e++) { /* the pass's rows of each matrix, local */
            int64_t v = start[e] - q0;
            pstart[e] = v < 0 ? 0 : v > Rp ? Rp : v;
        }
        for (int64_t e = 0; e < w->E; e++) {
            pcount[e] = pstart[e + 1] - pstart[e];
            mr.count[e] = 2 * pcount[e];
        }
        min_job mj = {xq, xs, q0, Rp, pstart, pcount, w->E, K, K2, &mr, y, ym, ld, Np, N};
        rows_on_threads(ctx, min_sums_share, &mj, (size_t)Rp * fK);
        k = 0;
        for (int i = 0; i < w->nchunks; i++) {
            qg_chunk *c = &w->chunks[i];
            if (start[c->e0 + c->ne] - start[c->e0] == 0) continue;
            qmoe_op *mop = mops[k++];
            int64_t rb = pstart[c->e0], Rc = pstart[c->e0 + c->ne] - rb;
            if (Rc == 0) continue;
            void *margs[7] = {mr.x + (size_t)(2 * rb) * (size_t)K2, NULL, NULL, NULL, mr.xs + 2 * rb,
                              mr.count + c->e0, ym + (size_t)(2 * rb) * (size_t)Np + (size_t)c->n0};
            if (qmoe_op_execute(mop, margs, 7, ws, wsz, ctx->stream)) {
                (void)qmoe_stream_synchronize(ctx->stream);
                return 0;
            }
        }
        if (qmoe_stream_synchronize(ctx->stream)) return 0;
        rows_on_threads(ctx, min_add_share, &mj, (size_t)Rp * (size_t)N * sizeof(float));
    }
    return 1;
}

int64_t qg_weight_out_cols(const qg_weight *w)
{
    /* by the objects, not the mate: a half whose mate was dropped (rewritten) keeps both halves */
    int64_t cols = 0;
    for (int i = 0; i < w->nchunks; i++) {
        int64_t z = w->chunks[i].n0 + qg_chunk_cols(&w->chunks[i]);
        cols = z > cols ? z : cols;
    }
    return cols;
}

int64_t qg_weight_col(const qg_weight *w) { return w->nchunks ? w->chunks[0].col : 0; }

int qg_weight_run(qg_context *ctx, qg_weight *w, const qg_acts *a, int64_t s0, int64_t n,
                  const int8_t *xq, const float *xs, float *y, int64_t ld)
{
    pthread_mutex_lock(&w->run);
    int ok = weight_run(ctx, w, a, s0, n, xq, xs, y, ld);
    pthread_mutex_unlock(&w->run);
    return ok;
}

void qg_rows_to_mul(qg_acts *a, const struct ggml_tensor *mul)
{
    const struct ggml_tensor *s = mul->src[1];
    const int64_t n_used = mul->ne[1];
    for (int64_t r = 0; r < a->R; r++) {
        const int64_t i = r % n_used, t = r / n_used;
        a->rows[r].dst = (uint8_t *)mul->data + i * mul->nb[1] + t * mul->nb[2];
        a->rows[r].mul = (const float *)(const void *)((const uint8_t *)s->data + i % s->ne[1] * s->nb[1] +
                                                       t % s->ne[2] * s->nb[2]);
    }
}

void qg_scatter(qg_context *ctx, const qg_acts *a, int64_t s0, int64_t n, const float *y, int64_t ld,
                int64_t N)
{
    size_t ny = (size_t)n * (size_t)ld * sizeof(float); /* below the checked n * ld floats */
    moved m = {NULL, a->rows, a->perm + s0, NULL, y, 0, N, ld, n};
    rows_on_threads(ctx, scatter_share, &m, ny);
}

int64_t qg_pass_rows(int64_t R, size_t row_bytes)
{
    const size_t p = row_bytes ? QG_Y_BYTES / row_bytes : (size_t)R;
    return p < 1 ? 1 : p < (size_t)R ? (int64_t)p : R;
}

enum ggml_status qg_compute_matmul(qg_context *ctx, struct ggml_tensor *node, struct ggml_tensor *mul)
{
    int threads = qg_context_ready(ctx);
    if (!threads) return qg_failed("making the qmoe device");
    qg_weight *w = qg_node_weight(node);
    if (!w) return qg_failed(ggml_op_desc(node));
    const int64_t N = w->N, Np = qg_weight_out_cols(w); /* a paired weight: its mate's too */
    qg_acts a;
    if (!qg_acts_prepare(ctx, node, w, &a)) return qg_failed(ggml_op_desc(node));
    if (a.R == 0) return GGML_STATUS_SUCCESS;
    /* in passes of sorted rows whose outputs fit QG_Y_BYTES, each scattered before the next */
    size_t ny;
    const int64_t P = qg_pass_rows(a.R, (size_t)Np * sizeof(float));
    float *y = qg_bytes3(P, Np, sizeof(float), &ny) ? qg_scratch(ctx, QG_S_Y, ny) : NULL;
    if (!y) {
        qmoe_error_set(QMOE_ERR_INNER, QMOE_RULE_NONE, "", "out of memory for the outputs");
        return qg_failed(ggml_op_desc(node));
    }
    if (mul) qg_rows_to_mul(&a, mul);
    for (int64_t s0 = 0; s0 < a.R; s0 += P) {
        const int64_t n = a.R - s0 < P ? a.R - s0 : P;
        if (!qg_weight_run(ctx, w, &a, s0, n, a.xq + (size_t)s0 * (size_t)w->K, a.xs + s0, y, Np))
            return qg_failed("grouped matmul");
        qg_scatter(ctx, &a, s0, n, y + qg_weight_col(w), Np, N);
    }
    return GGML_STATUS_SUCCESS;
}
