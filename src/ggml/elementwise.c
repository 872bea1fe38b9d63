/* The element-wise nodes around the matmuls the backend takes: GLU (SwiGLU, GeGLU, the clamped
 * SwiGLU and gpt-oss's), ADD, MUL and ADD_ID in float32, each computed as ggml's CPU backend
 * computes it (the same float operations in the same order per value).
 *
 * Why they are here: ggml's fused MoE and FFN cases (test-backend-ops' MUL_MAT_ID_FUSION and
 * MUL_MAT_VEC_FUSION: a matmul, its bias, the GLU, the experts' weighting) are graphs a backend
 * must take whole. SwiGLU is taken anywhere (as before); the others only on a result made here —
 * by a matmul the backend takes or by another such node — with a leaf (a bias, a factor) as the
 * other input, so a model's other element-wise nodes (norms, residual sums, the experts' weighting
 * and combine, whose inputs or outputs would be copied between the backends' buffers) stay on the
 * CPU, where ggml's scheduler put them before. */
#include <math.h>

#include "ggml-impl.h" /* ggml_get_op_params_i32 / _f32, as ggml's CPU reads a node's parameters */
#include "qmoe_ggml.h"

/* how far back "made here" looks; below QG_SMALL values a node runs on one thread */
enum { QG_DEPTH = 16, QG_SMALL = 1 << 16 };

static int f32_rows(const struct ggml_tensor *t)
{
    return t && t->type == GGML_TYPE_F32 && ggml_is_contiguous_1(t);
}

static int supported(const struct ggml_tensor *op, int depth);

/* 1 when node t is computed by this backend: a matmul it takes or a node taken below. */
static int made_here(const struct ggml_tensor *t, int depth)
{
    if (!t || depth > QG_DEPTH) return 0;
    if (t->op == GGML_OP_MUL_MAT || t->op == GGML_OP_MUL_MAT_ID) return qg_supports_matmul(t);
    if (t->op == GGML_OP_VIEW || t->op == GGML_OP_RESHAPE) return made_here(t->src[0], depth + 1);
    return supported(t, depth + 1);
}

static int glu_kind_taken(enum ggml_glu_op g)
{
    return g == GGML_GLU_OP_SWIGLU || g == GGML_GLU_OP_GEGLU || g == GGML_GLU_OP_SWIGLU_CLAMP ||
           g == GGML_GLU_OP_SWIGLU_OAI;
}

static int glu_shape(const struct ggml_tensor *op)
{
    const struct ggml_tensor *a = op->src[0], *b = op->src[1];
    if (!f32_rows(a) || !f32_rows(op) || (b && !f32_rows(b))) return 0;
    int64_t nc = b ? a->ne[0] : a->ne[0] / 2;
    if (op->ne[0] != nc || ggml_nrows(op) != ggml_nrows(a)) return 0; /* odd: the last value unread, as ggml */
    return !b || (b->ne[0] == nc && ggml_nrows(b) == ggml_nrows(a));
}

/* float32 with rows of consecutive values (ggml's binary ops take any row strides) */
static int f32_values(const struct ggml_tensor *t)
{
    return t && t->type == GGML_TYPE_F32 && t->nb[0] == sizeof(float);
}

/* The node's types and shapes are ones computed here (whoever made its inputs). */
static int computable(const struct ggml_tensor *op)
{
    const struct ggml_tensor *a = op->src[0], *b = op->src[1], *ids = op->src[2];
    switch (op->op) {
    case GGML_OP_GLU:
        return glu_kind_taken(ggml_get_glu_op(op)) && glu_shape(op);
    case GGML_OP_ADD:
    case GGML_OP_MUL:
        return f32_values(op) && f32_values(a) && f32_values(b) && ggml_are_same_shape(op, a) &&
               ggml_can_repeat(b, a);
    case GGML_OP_ADD_ID:
        return f32_values(op) && f32_values(a) && f32_values(b) && ids && ids->type == GGML_TYPE_I32 &&
               ggml_are_same_shape(op, a) && b->ne[0] == a->ne[0] && ids->ne[0] == a->ne[1] &&
               ids->ne[1] == a->ne[2] && a->ne[3] == 1;
    default:
        return 0;
    }
}

/* a graph's leaf: a weight, a bias, an input (no node makes it) */
static int leaf(const struct ggml_tensor *t) { return t->op == GGML_OP_NONE; }

static int supported(const struct ggml_tensor *op, int depth)
{
    if (!computable(op)) return 0;
    const struct ggml_tensor *a = op->src[0], *b = op->src[1];
    switch (op->op) {
    case GGML_OP_GLU: /* SwiGLU anywhere; the others on a gate or up made here */
        return ggml_get_glu_op(op) == GGML_GLU_OP_SWIGLU || made_here(a, depth) || (b && made_here(b, depth));
    case GGML_OP_ADD: /* a bias on a result made here. Not a sum with a computed stream: taking a
                       * model's residual or its MoE combine (the experts' views summed) moved
                       * copies into and out of this backend's buffers (docs/ggml.md) */
        return (made_here(a, depth) && leaf(b)) || (leaf(a) && made_here(b, depth));
    case GGML_OP_MUL: /* by a leaf (a model's experts' weighting, a computed factor, stays on the CPU:
                       * its output's views are read there, each copied whole) */
        return made_here(a, depth) && leaf(b);
    default: /* ADD_ID: the experts' biases */
        return made_here(a, depth) && leaf(b);
    }
}

int qg_supports_elementwise(const struct ggml_tensor *op) { return supported(op, 0); }

int qg_supports_glu(const struct ggml_tensor *op)
{
    return op->op == GGML_OP_GLU && ggml_get_glu_op(op) == GGML_GLU_OP_SWIGLU && glu_shape(op);
}

/* ---- GLU: dst = act(g) * u per row, ggml's formulas (ggml-cpu ops.cpp / vec.h) ---- */

typedef struct job {
    const struct ggml_tensor *node;
    int64_t nr;
} job;

static float gelu(float x)
{
    /* ggml's tanh form; its CPU reads a float16 table of it, a difference far below the 5e-3
     * NMSE of ggml's fusion cases (the only place GeGLU is taken: an input made here) */
    const float c = 0.79788456080286535587989211986876f, a = 0.044715f;
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    return 0.5f * x * (1.0f + tanhf(c * x * (1.0f + a * x * x)));
}

static void glu_share(void *arg, int t, int n)
{
    const job *j = arg;
    const struct ggml_tensor *d = j->node, *a = d->src[0], *b = d->src[1];
    const enum ggml_glu_op op = ggml_get_glu_op(d);
    const int swapped = b ? 0 : ggml_get_op_params_i32(d, 1);
    const float alpha = ggml_get_op_params_f32(d, 2), limit = ggml_get_op_params_f32(d, 3);
    const int64_t nc = d->ne[0];
    for (int64_t r = j->nr * t / n; r < j->nr * (t + 1) / n; r++) {
        const float *g = (const float *)(const void *)((const char *)a->data + r * a->nb[1]);
        const float *u = b ? (const float *)(const void *)((const char *)b->data + r * b->nb[1]) : g;
        if (!b) {
            g += swapped ? nc : 0;
            u += swapped ? 0 : nc;
        }
        float *y = (float *)(void *)((char *)d->data + r * d->nb[1]);
        switch (op) {
        case GGML_GLU_OP_SWIGLU:
            for (int64_t k = 0; k < nc; k++) y[k] = g[k] / (1.0f + expf(-g[k])) * u[k];
            break;
        case GGML_GLU_OP_GEGLU:
            for (int64_t k = 0; k < nc; k++) y[k] = gelu(g[k]) * u[k];
            break;
        case GGML_GLU_OP_SWIGLU_CLAMP:
            for (int64_t k = 0; k < nc; k++) {
                const float x = fminf(g[k], limit), v = fminf(fmaxf(u[k], -limit), limit);
                y[k] = x / (1.0f + expf(-x)) * v;
            }
            break;
        default: /* SWIGLU_OAI (supported() took no other) */
            for (int64_t k = 0; k < nc; k++) {
                const float x = fminf(g[k], limit), v = fminf(fmaxf(u[k], -limit), limit);
                y[k] = x / (1.0f + expf(alpha * (-x))) * (v + 1.0f);
            }
            break;
        }
    }
}

/* ---- ADD / MUL: dst = a op b, b repeated over a's shape (ggml_can_repeat) ---- */

static void binary_share(void *arg, int t, int n)
{
    const job *j = arg;
    const struct ggml_tensor *d = j->node, *a = d->src[0], *b = d->src[1];
    const int mul = d->op == GGML_OP_MUL;
    const int64_t n0 = d->ne[0], nb0 = b->ne[0];
    for (int64_t r = j->nr * t / n; r < j->nr * (t + 1) / n; r++) {
        const int64_t i1 = r % d->ne[1], i2 = r / d->ne[1] % d->ne[2], i3 = r / d->ne[1] / d->ne[2];
        const float *x = (const float *)(const void *)((const char *)a->data + i1 * a->nb[1] +
                                                       i2 * a->nb[2] + i3 * a->nb[3]);
        const float *z = (const float *)(const void *)((const char *)b->data + i1 % b->ne[1] * b->nb[1] +
                                                       i2 % b->ne[2] * b->nb[2] + i3 % b->ne[3] * b->nb[3]);
        float *y = (float *)(void *)((char *)d->data + i1 * d->nb[1] + i2 * d->nb[2] + i3 * d->nb[3]);
        if (mul)
            for (int64_t k = 0; k < n0; k++) y[k] = x[k] * z[k % nb0];
        else
            for (int64_t k = 0; k < n0; k++) y[k] = x[k] + z[k % nb0];
    }
}

/* ---- ADD_ID: dst[:, i1, i2] = a[:, i1, i2] + b[:, ids[i1, i2]] (gpt-oss's expert biases) ---- */

static int32_t id_of(const struct ggml_tensor *ids, int64_t i1, int64_t i2)
{
    int32_t e;
    memcpy(&e, (const char *)ids->data + i1 * ids->nb[0] + i2 * ids->nb[1], sizeof e);
    return e;
}

static void add_id_share(void *arg, int t, int n)
{
    const job *j = arg;
    const struct ggml_tensor *d = j->node, *a = d->src[0], *b = d->src[1], *ids = d->src[2];
    for (int64_t r = j->nr * t / n; r < j->nr * (t + 1) / n; r++) {
        const int64_t i1 = r % d->ne[1], i2 = r / d->ne[1];
        const float *x = (const float *)(const void *)((const char *)a->data + i1 * a->nb[1] + i2 * a->nb[2]);
        const float *z = (const float *)(const void *)((const char *)b->data + id_of(ids, i1, i2) * b->nb[1]);
        float *y = (float *)(void *)((char *)d->data + i1 * d->nb[1] + i2 * d->nb[2]);
        for (int64_t k = 0; k < d->ne[0]; k++) y[k] = x[k] + z[k];
    }
}

enum ggml_status qg_compute_elementwise(qg_context *ctx, struct ggml_tensor *node)
{
    if (!computable(node)) { /* where its inputs were made decided where it runs, not whether it can */
        qmoe_error_set(QMOE_ERR_PARAM_INVALID, QMOE_RULE_UNSUPPORTED, "graph",
                       "an element-wise node the backend does not take");
        return qg_failed(ggml_op_desc(node));
    }
    void (*fn)(void *, int, int) = node->op == GGML_OP_GLU ? glu_share
                                   : node->op == GGML_OP_ADD_ID ? add_id_share : binary_share;
    if (node->op == GGML_OP_ADD_ID) { /* every id read before anything is written */
        const struct ggml_tensor *ids = node->src[2];
        for (int64_t i2 = 0; i2 < node->ne[2]; i2++)
            for (int64_t i1 = 0; i1 < node->ne[1]; i1++) {
                int32_t e = id_of(ids, i1, i2);
                if (e < 0 || e >= node->src[1]->ne[1]) {
                    qmoe_error_set(QMOE_ERR_PARAM_INVALID, QMOE_RULE_VALUE, "ids",
                                   "an id is outside the bias rows");
                    return qg_failed(ggml_op_desc(node));
                }
            }
    }
    job j = {node, ggml_nrows(node)};
    if ((uint64_t)ggml_nelements(node) < QG_SMALL) {
        fn(&j, 0, 1);
        return GGML_STATUS_SUCCESS;
    }
    if (!qg_context_ready(ctx)) return qg_failed("making the qmoe device");
    qg_parallel(ctx, fn, &j);
    return GGML_STATUS_SUCCESS;
}
