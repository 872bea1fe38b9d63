/* The MoE expert layer: prepacked weights made once, a forward pass that chains the pipeline
 * operators on one stream with every intermediate in the caller's workspace. */
#include "qmoe/moe_layer.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/options.h"
#include "core/status.h"
#include "qmoe/grouped_matmul.h"
#include "qmoe/moe_ops.h"
#include "qmoe/weights.h"

#define OP "MoeLayer"

/* What a plan was made for: the forward's tensors (data, dtype, shape, strides) and workspace. */
typedef struct plan_key {
    struct {
        const void *data;
        int64_t dtype, d0, d1, s0, s1;
    } t[4];
    const void *workspace;
} plan_key;

typedef struct layer_plan {
    qmoe_moe_executor *gate, *route, *fin;
    qmoe_executor *gu;
    qmoe_grouped_matmul_executor *down;
    uint64_t ops_bytes; /* the largest operator workspace */
} layer_plan;

struct qmoe_moe_layer {
    qmoe_moe_layer_config cfg;
    qmoe_weights *w13, *w2;
    qmoe_tensor *t13, *t2; /* views of the prepacked objects */
    float *bias;           /* [E] selection bias (sigmoid gating), or NULL */
    /* The last forward's plan: a forward with the same tensors and workspace (an engine's
     * steady state) reuses it and allocates nothing. Taken with trylock: a forward that finds it
     * busy (another thread's) plans on its own. */
    pthread_mutex_t lock;
    int cached;
    plan_key key;
    layer_plan plan;
};

/* Intermediates, in workspace order; each starts on a 64-byte boundary. */
enum { B_Y, B_IDS, B_ROWIDX, B_XQ, B_RI, B_CUM, B_XS, B_HQ, B_HS, B_DOWN, B_OPS, B_COUNT };

static size_t dtype_bytes(qmoe_dtype d)
{
    return d == QMOE_DTYPE_FLOAT16 || d == QMOE_DTYPE_BFLOAT16 ? 2 : 4;
}

static int is_float(qmoe_dtype d)
{
    return d == QMOE_DTYPE_FLOAT32 || d == QMOE_DTYPE_FLOAT16 || d == QMOE_DTYPE_BFLOAT16;
}

/* Offsets of the intermediates for T tokens; false on overflow. */
static int layout(const qmoe_moe_layer_config *c, int64_t T, qmoe_dtype dtype,
                  uint64_t off[B_COUNT])
{
    int64_t A, tk, bytes[B_OPS];
    if (!qmoe_mul_i64(T, c->top_k, &A)) return 0;
    tk = A;
    bytes[B_Y] = 0, bytes[B_IDS] = 0, bytes[B_ROWIDX] = 0;
    int ok = qmoe_mul_i64(tk, 4, &bytes[B_Y]) && qmoe_mul_i64(tk, 4, &bytes[B_IDS]) &&
             qmoe_mul_i64(tk, 4, &bytes[B_ROWIDX]) && qmoe_mul_i64(A, c->hidden_size, &bytes[B_XQ]) &&
             qmoe_mul_i64(A, 4, &bytes[B_RI]) && qmoe_mul_i64(c->num_experts, 8, &bytes[B_CUM]) &&
             qmoe_mul_i64(A, 4, &bytes[B_XS]) &&
             qmoe_mul_i64(A, c->intermediate_size, &bytes[B_HQ]) && qmoe_mul_i64(A, 4, &bytes[B_HS]) &&
             qmoe_mul_i64(A, c->hidden_size, &bytes[B_DOWN]) &&
             qmoe_mul_i64(bytes[B_DOWN], (int64_t)dtype_bytes(dtype), &bytes[B_DOWN]);
    if (!ok) return 0;
    int64_t at = 0;
    for (int i = 0; i < B_OPS; i++) {
        off[i] = (uint64_t)at;
        if (!qmoe_add_i64(at, bytes[i], &at) || !qmoe_add_i64(at, 63, &at)) return 0;
        at &= ~(int64_t)63;
    }
    off[B_OPS] = (uint64_t)at;
    return 1;
}

/* ---------------------------------------------------------------- create ---------------------- */

static qmoe_status check_config(const qmoe_moe_layer_config *in, qmoe_moe_layer_config *c)
{
    if (!in) return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "config", OP ": config is a null pointer");
    qmoe_status st = qmoe_read_options(in, c, sizeof *c, sizeof *c, "config");
    if (st) return st;
#define BAD(...) qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_OPTION, "config", OP ": " __VA_ARGS__)
    if (c->hidden_size < 1 || c->intermediate_size < 1 || c->num_experts < 1)
        return BAD("config: hidden_size %lld, intermediate_size %lld, num_experts %lld; each must be >= 1",
                   (long long)c->hidden_size, (long long)c->intermediate_size, (long long)c->num_experts);
    if (c->num_experts > 2048)
        return BAD("config.num_experts = %lld; at most 2048", (long long)c->num_experts);
    if (c->gating != QMOE_MOE_GATING_SOFTMAX && c->gating != QMOE_MOE_GATING_SIGMOID)
        return BAD("config.gating = %d; expected 0 (softmax) or 1 (sigmoid)", c->gating);
    int64_t kmax = c->gating == QMOE_MOE_GATING_SOFTMAX && !c->renormalize ? 1024 : 32;
    if (c->top_k < 1 || c->top_k > c->num_experts || c->top_k > kmax)
        return BAD("config.top_k = %lld; expected 1..min(num_experts %lld, %lld)", (long long)c->top_k,
                   (long long)c->num_experts, (long long)kmax);
    if (c->group_count == 0) c->group_count = 1;
    if (c->k_group == 0) c->k_group = 1;
    if (c->gating == QMOE_MOE_GATING_SOFTMAX && (c->group_count != 1 || c->k_group != 1 || c->correction_bias))
        return BAD("config: group_count, k_group and correction_bias are for sigmoid gating only");
    if (c->group_count < 1 || c->num_experts % c->group_count)
        return BAD("config.group_count = %lld does not divide num_experts = %lld",
                   (long long)c->group_count, (long long)c->num_experts);
    if (c->k_group < 1 || c->k_group > c->group_count ||
        c->top_k > c->num_experts / c->group_count * c->k_group)
        return BAD("config.k_group = %lld: expected 1..group_count (%lld) keeping >= top_k experts",
                   (long long)c->k_group, (long long)c->group_count);
    if (c->routed_scaling_factor == 0) c->routed_scaling_factor = 1.0;
    if (!isfinite(c->routed_scaling_factor))
        return BAD("config.routed_scaling_factor is not finite");
    if (c->mode != QMOE_QUANT_A8W8 && c->mode != QMOE_QUANT_A8W4)
        return BAD("config.mode = %d; expected QMOE_QUANT_A8W8 or QMOE_QUANT_A8W4", (int)c->mode);
    if (c->group_size < 0 || (c->group_size &&
                              (c->hidden_size % c->group_size || c->intermediate_size % c->group_size)))
        return BAD("config.group_size = %lld must divide hidden_size %lld and intermediate_size %lld",
                   (long long)c->group_size, (long long)c->hidden_size, (long long)c->intermediate_size);
    if (c->threads < 0 || c->threads > 4096)
        return BAD("config.threads = %d; expected 0 to 4096", c->threads);
    int64_t n2;
    if (!qmoe_mul_i64(c->intermediate_size, 2, &n2))
        return BAD("config.intermediate_size = %lld overflows", (long long)c->intermediate_size);
#undef BAD
    return QMOE_OK;
}

static qmoe_status check_view(const qmoe_tensor *t, const char *arg, int64_t E, int64_t K, int64_t N)
{
    if (qmoe_tensor_dim(t, 0) != E || qmoe_tensor_dim(t, 1) != K || qmoe_tensor_dim(t, 2) != N)
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_SHAPE, arg,
                             OP ": %s is [%lld, %lld, %lld]; the configuration needs [%lld, %lld, %lld]", arg,
                             (long long)qmoe_tensor_dim(t, 0), (long long)qmoe_tensor_dim(t, 1),
                             (long long)qmoe_tensor_dim(t, 2), (long long)E, (long long)K, (long long)N);
    return QMOE_OK;
}

qmoe_status qmoe_moe_layer_create(const qmoe_moe_layer_config *config, const qmoe_tensor *w13,
                                  const qmoe_tensor *w13_scale, const qmoe_tensor *w13_bias,
                                  const qmoe_tensor *w2, const qmoe_tensor *w2_scale,
                                  qmoe_moe_layer **layer)
{
    qmoe_moe_layer_config c;
    qmoe_status st = check_config(config, &c);
    if (st) return st;
    if (!w13 || !w13_scale || !w2 || !w2_scale || !layer)
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL,
                             !w13 ? "w13" : !w13_scale ? "w13_scale" : !w2 ? "w2" : !w2_scale ? "w2_scale" : "layer",
                             OP ": a required argument is a null pointer");
    int a8w4 = c.mode == QMOE_QUANT_A8W4;
    qmoe_dtype wd13 = qmoe_tensor_dtype(w13), wd2 = qmoe_tensor_dtype(w2);
    if ((wd13 == QMOE_DTYPE_INT8) == a8w4 || (wd2 == QMOE_DTYPE_INT8) == a8w4)
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_DTYPE, wd13 == QMOE_DTYPE_INT8 ? "w2" : "w13",
                             OP ": weights must be int8 for A8W8 and int4/int32 for A8W4 (config.mode = %d)",
                             (int)c.mode);
    if (a8w4 && !w13_bias)
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "w13_bias",
                             OP ": A8W4 needs w13_bias (the assist matrix)");
    qmoe_moe_layer *L = calloc(1, sizeof *L);
    float *zero = NULL;
    if (!L) return qmoe_fail(QMOE_ERR_INNER, OP ": out of memory");
    if (pthread_mutex_init(&L->lock, NULL)) {
        free(L);
        return qmoe_fail(QMOE_ERR_INNER, OP ": cannot make a mutex");
    }
    L->cfg = c;
    if (c.correction_bias) {
        L->bias = malloc((size_t)c.num_experts * sizeof(float));
        if (!L->bias) {
            st = qmoe_fail(QMOE_ERR_INNER, OP ": out of memory");
            goto fail;
        }
        memcpy(L->bias, c.correction_bias, (size_t)c.num_experts * sizeof(float));
        L->cfg.correction_bias = L->bias;
    }
    qmoe_weights_options wo = QMOE_WEIGHTS_OPTIONS_INIT;
    st = qmoe_weights_prepack(w13, w13_scale, a8w4 ? w13_bias : NULL, &wo, &L->w13);
    if (!st) st = qmoe_weights_tensor(L->w13, &L->t13);
    if (!st) st = check_view(L->t13, "w13", c.num_experts, c.hidden_size, 2 * c.intermediate_size);
    if (st) goto fail;
    qmoe_tensor *tz = NULL;
    if (a8w4) { /* GroupedMatmul folds no assist matrix: prepack it with a zero one */
        int64_t zs[2] = {c.num_experts, c.hidden_size}, n;
        if (!qmoe_mul_i64(zs[0], zs[1], &n) || !(zero = calloc((size_t)n, sizeof(float)))) {
            st = qmoe_fail(QMOE_ERR_INNER, OP ": out of memory");
            goto fail;
        }
        st = qmoe_tensor_create(zs, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, zero, &tz);
        if (st) goto fail;
    }
    st = qmoe_weights_prepack(w2, w2_scale, tz, &wo, &L->w2);
    qmoe_tensor_destroy(tz);
    if (!st) st = qmoe_weights_tensor(L->w2, &L->t2);
    if (!st) st = check_view(L->t2, "w2", c.num_experts, c.intermediate_size, c.hidden_size);
    if (st) goto fail;
    free(zero);
    *layer = L;
    qmoe_clear_error();
    return QMOE_OK;
fail:
    free(zero);
    qmoe_moe_layer_destroy(L);
    return st;
}

static void plan_free(layer_plan *p);

void qmoe_moe_layer_destroy(qmoe_moe_layer *L)
{
    if (!L) return;
    if (L->cached) plan_free(&L->plan);
    pthread_mutex_destroy(&L->lock);
    qmoe_tensor_destroy(L->t13);
    qmoe_tensor_destroy(L->t2);
    qmoe_weights_destroy(L->w13);
    qmoe_weights_destroy(L->w2);
    free(L->bias);
    free(L);
}

uint64_t qmoe_moe_layer_weight_bytes(const qmoe_moe_layer *L)
{
    return L ? qmoe_weights_bytes(L->w13) + qmoe_weights_bytes(L->w2) : 0;
}

qmoe_status qmoe_moe_layer_create_from_float(const qmoe_moe_layer_config *config,
                                             const void *const *gate, const void *const *up,
                                             const void *const *down, qmoe_dtype dtype,
                                             qmoe_moe_layer **layer)
{
    qmoe_moe_layer_config c;
    qmoe_status st = check_config(config, &c);
    if (st) return st;
    if (!gate || !up || !down || !layer)
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL,
                             !gate ? "gate" : !up ? "up" : !down ? "down" : "layer",
                             OP ": a required argument is a null pointer");
    qmoe_quant_options qo = QMOE_QUANT_OPTIONS_INIT;
    qo.mode = c.mode, qo.weight_nd = 1, qo.clip_search = c.clip_search, qo.group_size = c.group_size;
    qo.threads = c.threads;
    int64_t E = c.num_experts, H = c.hidden_size, I = c.intermediate_size;
    qmoe_quant_sizes s13, s2;
    st = qmoe_quant_sizes_of(&qo, E, H, 2 * I, &s13);
    if (!st) st = qmoe_quant_sizes_of(&qo, E, I, H, &s2);
    if (st) return st;
    void *w13 = malloc((size_t)s13.weight_bytes), *w2 = malloc((size_t)s2.weight_bytes);
    float *sc13 = malloc((size_t)s13.scale_count * sizeof(float)),
          *sc2 = malloc((size_t)s2.scale_count * sizeof(float));
    float *b13 = malloc((size_t)(s13.bias_count ? s13.bias_count : 1) * sizeof(float)),
          *b2 = malloc((size_t)(s2.bias_count ? s2.bias_count : 1) * sizeof(float));
    qmoe_tensor *t[5] = {0};
    if (!w13 || !w2 || !sc13 || !sc2 || !b13 || !b2) {
        st = qmoe_fail(QMOE_ERR_INNER, OP ": out of memory quantizing the weights");
        goto done;
    }
    st = qmoe_quantize_gate_up(gate, up, dtype, E, I, H, &qo, w13, sc13, b13);
    if (!st) st = qmoe_quantize_linear(down, dtype, E, H, I, &qo, w2, sc2, b2);
    if (st) goto done;
    qmoe_dtype wd = c.mode == QMOE_QUANT_A8W4 ? QMOE_DTYPE_INT4 : QMOE_DTYPE_INT8;
    int64_t sh13[3] = {E, H, 2 * I}, sh2[3] = {E, I, H};
    int64_t ss13[3] = {E, s13.groups, 2 * I}, ss2[3] = {E, s2.groups, H}, bs[2] = {E, 2 * I};
    int64_t ps13[2] = {E, 2 * I}, ps2[2] = {E, H};
    st = qmoe_tensor_create(sh13, 3, NULL, wd, QMOE_FORMAT_ND, w13, &t[0]);
    if (!st) st = qmoe_tensor_create(sh2, 3, NULL, wd, QMOE_FORMAT_ND, w2, &t[1]);
    if (!st) st = s13.groups ? qmoe_tensor_create(ss13, 3, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, sc13, &t[2])
                             : qmoe_tensor_create(ps13, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, sc13, &t[2]);
    if (!st) st = s2.groups ? qmoe_tensor_create(ss2, 3, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, sc2, &t[3])
                            : qmoe_tensor_create(ps2, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, sc2, &t[3]);
    if (!st && s13.bias_count) st = qmoe_tensor_create(bs, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, b13, &t[4]);
    if (!st) st = qmoe_moe_layer_create(&c, t[0], t[2], t[4], t[1], t[3], layer);
done:
    for (int i = 0; i < 5; i++) qmoe_tensor_destroy(t[i]);
    free(w13), free(w2), free(sc13), free(sc2), free(b13), free(b2);
    return st;
}

/* ---------------------------------------------------------------- forward --------------------- */

static void plan_free(layer_plan *p)
{
    qmoe_moe_executor_destroy(p->gate);
    qmoe_moe_executor_destroy(p->route);
    qmoe_moe_executor_destroy(p->fin);
    qmoe_executor_destroy(p->gu);
    qmoe_grouped_matmul_executor_destroy(p->down);
}

static qmoe_status tensor_at(uintptr_t base, uint64_t off, qmoe_dtype d, int nd, const int64_t *shape,
                             qmoe_tensor **t)
{
    return qmoe_tensor_create(shape, nd, NULL, d, QMOE_FORMAT_ND, (void *)(base + (uintptr_t)off), t);
}

static void keep_max(uint64_t *m, uint64_t v)
{
    if (v > *m) *m = v;
}

/* Plans the five operators for hidden [T, H] and either logits or (ids, weights), with the
 * intermediates at `ws` (an address: the size query plans at a made-up one and never runs). */
static qmoe_status plan_layer(const qmoe_moe_layer *L, const qmoe_tensor *hidden, const qmoe_tensor *logits,
                              const qmoe_tensor *ids_in, const qmoe_tensor *w_in, const qmoe_tensor *out,
                              uintptr_t ws, layer_plan *p)
{
    const qmoe_moe_layer_config *c = &L->cfg;
    int64_t T = qmoe_tensor_dim(hidden, 0), K = c->top_k, E = c->num_experts, H = c->hidden_size,
            I = c->intermediate_size;
    qmoe_dtype hd = qmoe_tensor_dtype(hidden);
    uint64_t off[B_COUNT];
    if (!layout(c, T, hd, off))
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_LIMIT, "hidden", OP ": %lld tokens overflow the workspace size", (long long)T);
    int64_t A = T * K, tk[2] = {T, K}, xq[2] = {A, H}, hq[2] = {A, I}, e1 = E, bias_sh = E;
    qmoe_tensor *t[12] = {0}, *tb = NULL;
    qmoe_status st = QMOE_OK;
    enum { Y, IDS, ROWIDX, XQ, RI, CUM, XS, HQ, HS, DOWN };
    qmoe_dtype yd = logits ? qmoe_tensor_dtype(logits) : QMOE_DTYPE_FLOAT32;
    if (logits) {
        st = tensor_at(ws, off[B_Y], yd, 2, tk, &t[Y]);
        if (!st) st = tensor_at(ws, off[B_IDS], QMOE_DTYPE_INT32, 2, tk, &t[IDS]);
        if (!st) st = tensor_at(ws, off[B_ROWIDX], QMOE_DTYPE_INT32, 2, tk, &t[ROWIDX]);
    }
    if (!st) st = tensor_at(ws, off[B_XQ], QMOE_DTYPE_INT8, 2, xq, &t[XQ]);
    if (!st) st = tensor_at(ws, off[B_RI], QMOE_DTYPE_INT32, 1, &A, &t[RI]);
    if (!st) st = tensor_at(ws, off[B_CUM], QMOE_DTYPE_INT64, 1, &e1, &t[CUM]);
    if (!st) st = tensor_at(ws, off[B_XS], QMOE_DTYPE_FLOAT32, 1, &A, &t[XS]);
    if (!st) st = tensor_at(ws, off[B_HQ], QMOE_DTYPE_INT8, 2, hq, &t[HQ]);
    if (!st) st = tensor_at(ws, off[B_HS], QMOE_DTYPE_FLOAT32, 1, &A, &t[HS]);
    if (!st) st = tensor_at(ws, off[B_DOWN], hd, 2, xq, &t[DOWN]);
    if (!st && L->bias)
        st = qmoe_tensor_create(&bias_sh, 1, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, L->bias, &tb);
    if (st) goto done;
    const qmoe_tensor *ids = logits ? t[IDS] : ids_in, *wts = logits ? t[Y] : w_in;
    qmoe_moe_options mo = {sizeof mo, c->threads};
    uint64_t w = 0;
    p->ops_bytes = 0;
    if (logits && c->gating == QMOE_MOE_GATING_SOFTMAX && !c->renormalize) {
        st = qmoe_moe_gating_top_k_softmax_workspace_size(logits, NULL, K, t[Y], t[IDS], t[ROWIDX], &mo, &w,
                                                          &p->gate);
    } else if (logits) {
        int sig = c->gating == QMOE_MOE_GATING_SIGMOID;
        qmoe_moe_gating_attrs ga = {.k = K, .k_group = c->k_group, .group_count = c->group_count,
                                    .group_select_mode = sig, .renorm = 0, .norm_type = sig,
                                    .routed_scaling_factor = c->routed_scaling_factor, .eps = 1e-20};
        st = qmoe_moe_gating_top_k_workspace_size(logits, tb, &ga, t[Y], t[IDS], NULL, &mo, &w, &p->gate);
    }
    if (st) goto done;
    keep_max(&p->ops_bytes, w);
    qmoe_moe_routing_attrs ra = {.expert_num = E, .tokens_mode = QMOE_MOE_TOKENS_CUMSUM,
                                 .quant_mode = QMOE_MOE_QUANT_DYNAMIC};
    st = qmoe_moe_init_routing_workspace_size(hidden, ids, NULL, NULL, &ra, t[XQ], t[RI], t[CUM], t[XS], &mo,
                                              &w, &p->route);
    if (st) goto done;
    keep_max(&p->ops_bytes, w);
    qmoe_op_options oo = QMOE_OP_OPTIONS_INIT;
    oo.threads = c->threads;
    st = qmoe_gmm_swiglu_quant_workspace_size(t[XQ], L->t13, NULL, NULL, NULL, t[XS], t[CUM], t[HQ], t[HS],
                                              NULL, &oo, &w, &p->gu);
    if (st) goto done;
    keep_max(&p->ops_bytes, w);
    qmoe_grouped_matmul_options go = QMOE_GROUPED_MATMUL_OPTIONS_INIT;
    go.threads = c->threads;
    st = qmoe_grouped_matmul_workspace_size(t[HQ], L->t2, NULL, NULL, t[HS], t[CUM], 0, t[DOWN], &go, &w,
                                            &p->down);
    if (st) goto done;
    keep_max(&p->ops_bytes, w);
    st = qmoe_moe_finalize_routing_workspace_size(t[DOWN], t[RI], NULL, NULL, NULL, wts, NULL, 2, out, &mo,
                                                  &w, &p->fin);
    if (st) goto done;
    keep_max(&p->ops_bytes, w);
done:
    for (int i = 0; i < 12; i++) qmoe_tensor_destroy(t[i]);
    qmoe_tensor_destroy(tb);
    if (st) {
        plan_free(p);
        memset(p, 0, sizeof *p);
    }
    return st;
}

static qmoe_status check_2d(const qmoe_tensor *t, const char *arg, int64_t rows, int64_t cols)
{
    if (qmoe_tensor_ndim(t) != 2 || qmoe_tensor_dim(t, 1) != cols || (rows >= 0 && qmoe_tensor_dim(t, 0) != rows))
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_SHAPE, arg,
                             OP ": %s must be [%lld, %lld] (rank %d, [%lld, %lld] given)", arg, (long long)rows,
                             (long long)cols, qmoe_tensor_ndim(t), (long long)qmoe_tensor_dim(t, 0),
                             (long long)qmoe_tensor_dim(t, 1));
    return QMOE_OK;
}

/* The boundary checks of both forwards, with the layer's own words (the operators check again). */
static qmoe_status check_io(const qmoe_moe_layer *L, const qmoe_tensor *hidden, const qmoe_tensor *route,
                            const char *route_arg, int64_t route_cols, const qmoe_tensor *out)
{
    if (!L || !hidden || !route || !out)
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL,
                             !L ? "layer" : !hidden ? "hidden" : !route ? route_arg : "out",
                             OP ": a required argument is a null pointer");
    qmoe_status st = check_2d(hidden, "hidden", -1, L->cfg.hidden_size);
    int64_t T = qmoe_tensor_dim(hidden, 0);
    if (!st) st = check_2d(route, route_arg, T, route_cols);
    if (!st) st = check_2d(out, "out", T, L->cfg.hidden_size);
    if (st) return st;
    qmoe_dtype hd = qmoe_tensor_dtype(hidden);
    if (!is_float(hd))
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_DTYPE, "hidden",
                             OP ": hidden must be float32, float16 or bfloat16");
    if (qmoe_tensor_dtype(out) != hd)
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_DTYPE, "out", OP ": out must have hidden's dtype");
    return QMOE_OK;
}

static qmoe_status run(const qmoe_moe_layer *L, const qmoe_tensor *hidden, const qmoe_tensor *logits,
                       const qmoe_tensor *ids, const qmoe_tensor *wts, const qmoe_tensor *out, void *workspace,
                       uint64_t workspace_size, qmoe_stream *stream)
{
    if (qmoe_tensor_dim(hidden, 0) == 0) {
        qmoe_clear_error();
        return QMOE_OK;
    }
    if (!workspace)
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "workspace", OP ": workspace is a null pointer");
    if ((uintptr_t)workspace % 64)
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_WORKSPACE, "workspace",
                             OP ": workspace %p is not 64-byte aligned", workspace);
    uint64_t off[B_COUNT];
    if (!layout(&L->cfg, qmoe_tensor_dim(hidden, 0), qmoe_tensor_dtype(hidden), off))
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_LIMIT, "hidden", OP ": too many tokens");
    if (workspace_size < off[B_OPS])
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_WORKSPACE, "workspaceSize",
                             OP ": workspaceSize = %llu; the intermediates alone need %llu",
                             (unsigned long long)workspace_size, (unsigned long long)off[B_OPS]);
    layer_plan p = {0};
    plan_key key;
    const qmoe_tensor *kt[4] = {hidden, logits ? logits : ids, wts, out};
    memset(&key, 0, sizeof key);
    for (int i = 0; i < 4; i++)
        if (kt[i]) {
            key.t[i].data = qmoe_tensor_data(kt[i]), key.t[i].dtype = qmoe_tensor_dtype(kt[i]);
            key.t[i].d0 = qmoe_tensor_dim(kt[i], 0), key.t[i].d1 = qmoe_tensor_dim(kt[i], 1);
            key.t[i].s0 = qmoe_tensor_stride(kt[i], 0), key.t[i].s1 = qmoe_tensor_stride(kt[i], 1);
        }
    key.workspace = workspace;
    qmoe_moe_layer *M = (qmoe_moe_layer *)L; /* the cache is not part of the layer's value */
    int mine = !pthread_mutex_trylock(&M->lock), hit = mine && M->cached && !memcmp(&M->key, &key, sizeof key);
    qmoe_status st = QMOE_OK;
    if (hit) {
        p = M->plan;
    } else {
        st = plan_layer(L, hidden, logits, ids, wts, out, (uintptr_t)workspace, &p);
        if (st) {
            if (mine) pthread_mutex_unlock(&M->lock);
            return st;
        }
    }
    uint64_t need = off[B_OPS] + p.ops_bytes;
    if (workspace_size < need) {
        if (!hit) plan_free(&p);
        if (mine) pthread_mutex_unlock(&M->lock);
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_WORKSPACE, "workspaceSize",
                             OP ": workspaceSize = %llu is less than the %llu bytes needed",
                             (unsigned long long)workspace_size, (unsigned long long)need);
    }
    /* The operators run one after another on the stream: they share one scratch region. */
    void *ow = (char *)workspace + off[B_OPS];
    uint64_t os = workspace_size - off[B_OPS];
    if (p.gate) {
        st = logits && L->cfg.gating == QMOE_MOE_GATING_SOFTMAX && !L->cfg.renormalize
                 ? qmoe_moe_gating_top_k_softmax(ow, os, p.gate, stream)
                 : qmoe_moe_gating_top_k(ow, os, p.gate, stream);
    }
    if (!st) st = qmoe_moe_init_routing(ow, os, p.route, stream);
    if (!st) st = qmoe_gmm_swiglu_quant(ow, os, p.gu, stream);
    if (!st) st = qmoe_grouped_matmul(ow, os, p.down, stream);
    if (!st) st = qmoe_moe_finalize_routing(ow, os, p.fin, stream);
    if (mine && !hit) { /* keep the new plan in place of the old one */
        if (M->cached) plan_free(&M->plan);
        M->plan = p, M->cached = 1;
        memcpy(&M->key, &key, sizeof key);
    } else if (!hit) {
        plan_free(&p);
    }
    if (mine) pthread_mutex_unlock(&M->lock);
    return st;
}

qmoe_status qmoe_moe_layer_forward(const qmoe_moe_layer *L, const qmoe_tensor *hidden,
                                   const qmoe_tensor *router_logits, const qmoe_tensor *out,
                                   void *workspace, uint64_t workspace_size, qmoe_stream *stream)
{
    qmoe_status st = check_io(L, hidden, router_logits, "router_logits", L ? L->cfg.num_experts : 0, out);
    if (st) return st;
    qmoe_dtype ld = qmoe_tensor_dtype(router_logits);
    if (ld != QMOE_DTYPE_FLOAT32 && ld != qmoe_tensor_dtype(hidden))
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_DTYPE, "router_logits",
                             OP ": router_logits must be float32 or hidden's dtype");
    return run(L, hidden, router_logits, NULL, NULL, out, workspace, workspace_size, stream);
}

qmoe_status qmoe_moe_layer_forward_routed(const qmoe_moe_layer *L, const qmoe_tensor *hidden,
                                          const qmoe_tensor *topk_ids, const qmoe_tensor *topk_weights,
                                          const qmoe_tensor *out, void *workspace, uint64_t workspace_size,
                                          qmoe_stream *stream)
{
    int64_t K = L ? L->cfg.top_k : 0;
    qmoe_status st = check_io(L, hidden, topk_ids, "topk_ids", K, out);
    if (!st) st = check_io(L, hidden, topk_weights, "topk_weights", K, out);
    if (st) return st;
    qmoe_dtype wd = qmoe_tensor_dtype(topk_weights);
    if (qmoe_tensor_dtype(topk_ids) != QMOE_DTYPE_INT32)
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_DTYPE, "topk_ids", OP ": topk_ids must be int32");
    if (wd != QMOE_DTYPE_FLOAT32 && wd != qmoe_tensor_dtype(hidden))
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_DTYPE, "topk_weights",
                             OP ": topk_weights must be float32 or hidden's dtype");
    return run(L, hidden, NULL, topk_ids, topk_weights, out, workspace, workspace_size, stream);
}

qmoe_status qmoe_moe_layer_workspace_size(const qmoe_moe_layer *L, int64_t tokens, qmoe_dtype dtype,
                                          uint64_t *workspace_size)
{
    if (!L || !workspace_size)
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, !L ? "layer" : "workspaceSize",
                             OP ": a required argument is a null pointer");
    if (tokens < 0 || !is_float(dtype))
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, tokens < 0 ? QMOE_RULE_LIMIT : QMOE_RULE_DTYPE, "tokens",
                             OP ": tokens = %lld, dtype %d; expected tokens >= 0 and a float dtype",
                             (long long)tokens, (int)dtype);
    uint64_t off[B_COUNT];
    if (!layout(&L->cfg, tokens, dtype, off))
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_LIMIT, "tokens", OP ": %lld tokens overflow", (long long)tokens);
    if (tokens == 0) {
        *workspace_size = 0;
        qmoe_clear_error();
        return QMOE_OK;
    }
    /* Phase one reads no tensor data: plan at made-up, disjoint addresses to learn the
     * operators' workspace sizes (they depend on shapes only). */
    int64_t hb, lb;
    if (!qmoe_mul_i64(tokens, L->cfg.hidden_size * 4, &hb) || !qmoe_mul_i64(tokens, L->cfg.num_experts * 4, &lb) ||
        off[B_OPS] > (UINTPTR_MAX >> 3) || (uint64_t)hb > (UINTPTR_MAX >> 3) - off[B_OPS] ||
        (uint64_t)lb > (UINTPTR_MAX >> 3) - off[B_OPS] - 2 * (uint64_t)hb)
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_LIMIT, "tokens", OP ": %lld tokens overflow", (long long)tokens);
    uintptr_t ws = 4096, hid = ws + (uintptr_t)off[B_OPS] + 64, lg = hid + (uintptr_t)hb + 64,
              ou = lg + (uintptr_t)lb + 64;
    int64_t hs[2] = {tokens, L->cfg.hidden_size}, ls[2] = {tokens, L->cfg.num_experts};
    qmoe_tensor *th = NULL, *tl = NULL, *to = NULL;
    qmoe_status st = tensor_at(hid, 0, dtype, 2, hs, &th);
    if (!st) st = tensor_at(lg, 0, QMOE_DTYPE_FLOAT32, 2, ls, &tl);
    if (!st) st = tensor_at(ou, 0, dtype, 2, hs, &to);
    layer_plan p = {0};
    if (!st) st = plan_layer(L, th, tl, NULL, NULL, to, ws, &p);
    qmoe_tensor_destroy(th), qmoe_tensor_destroy(tl), qmoe_tensor_destroy(to);
    if (st) return st;
    plan_free(&p);
    *workspace_size = off[B_OPS] + p.ops_bytes;
    qmoe_clear_error();
    return QMOE_OK;
}
