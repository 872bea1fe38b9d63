/* The MoE expert layer: prepacked weights made once, a forward pass that chains the pipeline
 * operators on one stream with every intermediate in the caller's workspace. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "qmoe/moe_layer.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/checked.h"
#include "core/halfconv.h"
#include "core/options.h"
#include "core/status.h"
#include "ops/eltwise/exec.h"
#include "layer/internal.h"
#include "layer/phases.h"
#include "qmoe/grouped_matmul.h"
#include "qmoe/moe_ops.h"
#include "qmoe/runtime.h"
#include "qmoe/weights.h"

#define OP MOE_LAYER_OP

/* Intermediates, in workspace order; each starts on a 64-byte boundary. */
enum { B_Y, B_IDS, B_ROWIDX, B_XQ, B_RI, B_CUM, B_XS, B_HQ, B_HS, B_DOWN, B_NORM, B_OPS, B_COUNT };

static size_t dtype_bytes(qmoe_dtype d)
{
    return d == QMOE_DTYPE_FLOAT16 || d == QMOE_DTYPE_BFLOAT16 ? 2 : 4;
}

int moe_layer_is_float(qmoe_dtype d)
{
    return d == QMOE_DTYPE_FLOAT32 || d == QMOE_DTYPE_FLOAT16 || d == QMOE_DTYPE_BFLOAT16;
}

/* Experts the shared expert runs as (chunks of I). */
int64_t moe_layer_n_shared(const qmoe_moe_layer_config *c)
{
    return c->shared_intermediate_size / c->intermediate_size;
}

/* Offsets of the intermediates for T tokens; false on overflow. */
static int layout(const qmoe_moe_layer_config *c, int64_t T, qmoe_dtype dtype,
                  uint64_t off[B_COUNT])
{
    int64_t A, tk, bytes[B_OPS], T0 = T;
    if (!qmoe_mul_i64(T, c->top_k + moe_layer_n_shared(c), &A)) return 0;
    tk = A;
    bytes[B_Y] = 0, bytes[B_IDS] = 0, bytes[B_ROWIDX] = 0;
    int ok = qmoe_mul_i64(tk, 4, &bytes[B_Y]) && qmoe_mul_i64(tk, 4, &bytes[B_IDS]) &&
             qmoe_mul_i64(T0 * c->top_k, 4, &bytes[B_ROWIDX]) && qmoe_mul_i64(A, c->hidden_size, &bytes[B_XQ]) &&
             qmoe_mul_i64(A, 4, &bytes[B_RI]) && qmoe_mul_i64(c->num_experts + moe_layer_n_shared(c), 8, &bytes[B_CUM]) &&
             qmoe_mul_i64(A, 4, &bytes[B_XS]) &&
             qmoe_mul_i64(A, c->intermediate_size, &bytes[B_HQ]) && qmoe_mul_i64(A, 4, &bytes[B_HS]) &&
             qmoe_mul_i64(A, c->hidden_size, &bytes[B_DOWN]) &&
             qmoe_mul_i64(bytes[B_DOWN], (int64_t)dtype_bytes(dtype), &bytes[B_DOWN]) &&
             qmoe_mul_i64(T0, c->num_experts, &bytes[B_NORM]) &&
             qmoe_mul_i64(bytes[B_NORM], moe_layer_gate_path(c) == MOE_GATE_RAW ? 4 : 0, &bytes[B_NORM]);
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

qmoe_status moe_layer_check_config(const qmoe_moe_layer_config *in, qmoe_moe_layer_config *c)
{
    if (!in) return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "config", OP ": config is a null pointer");
    /* a caller built before shared_expert_gate passes the smaller struct: still read */
    qmoe_status st = qmoe_read_options(in, c, sizeof *c, offsetof(qmoe_moe_layer_config, shared_expert_gate), "config");
    if (st) return st;
#define BAD(...) qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_OPTION, "config", OP ": " __VA_ARGS__)
    if (c->hidden_size < 1 || c->intermediate_size < 1 || c->num_experts < 1)
        return BAD("config: hidden_size %lld, intermediate_size %lld, num_experts %lld; each must be >= 1",
                   (long long)c->hidden_size, (long long)c->intermediate_size, (long long)c->num_experts);
    if (c->num_experts > 2048)
        return BAD("config.num_experts = %lld; at most 2048", (long long)c->num_experts);
    if (c->gating != QMOE_MOE_GATING_SOFTMAX && c->gating != QMOE_MOE_GATING_SIGMOID)
        return BAD("config.gating = %d; expected 0 (softmax) or 1 (sigmoid)", c->gating);
    if (c->routed_scaling_factor == 0) c->routed_scaling_factor = 1.0;
    if (!isfinite(c->routed_scaling_factor))
        return BAD("config.routed_scaling_factor is not finite");
    int64_t kmax = moe_layer_gate_path(c) == MOE_GATE_SOFTMAX ? 1024 : 32;
    if (c->top_k < 1 || c->top_k > c->num_experts || c->top_k > kmax)
        return BAD("config.top_k = %lld; expected 1..min(num_experts %lld, %lld)", (long long)c->top_k,
                   (long long)c->num_experts, (long long)kmax);
    if (c->group_count == 0) c->group_count = 1;
    if (c->k_group == 0) c->k_group = 1;
    if (c->gating == QMOE_MOE_GATING_SOFTMAX && (c->group_count != 1 || c->k_group != 1))
        return BAD("config: group_count and k_group are for sigmoid gating only");
    if (c->group_count < 1 || c->num_experts % c->group_count)
        return BAD("config.group_count = %lld does not divide num_experts = %lld",
                   (long long)c->group_count, (long long)c->num_experts);
    if (c->k_group < 1 || c->k_group > c->group_count ||
        c->top_k > c->num_experts / c->group_count * c->k_group)
        return BAD("config.k_group = %lld: expected 1..group_count (%lld) keeping >= top_k experts",
                   (long long)c->k_group, (long long)c->group_count);
    if (c->mode != QMOE_QUANT_A8W8 && c->mode != QMOE_QUANT_A8W4)
        return BAD("config.mode = %d; expected QMOE_QUANT_A8W8 or QMOE_QUANT_A8W4", (int)c->mode);
    if (c->group_size < 0 || (c->group_size &&
                              (c->hidden_size % c->group_size || c->intermediate_size % c->group_size)))
        return BAD("config.group_size = %lld must divide hidden_size %lld and intermediate_size %lld",
                   (long long)c->group_size, (long long)c->hidden_size, (long long)c->intermediate_size);
    if (c->threads < 0 || c->threads > QMOE_MAX_THREADS)
        return BAD("config.threads = %d; expected 0 to %d", c->threads, QMOE_MAX_THREADS);
    if (c->shared_intermediate_size < 0 || c->shared_intermediate_size % c->intermediate_size ||
        c->shared_intermediate_size / c->intermediate_size > 64)
        return BAD("config.shared_intermediate_size = %lld: expected 0 or a multiple (at most 64) of "
                   "intermediate_size %lld", (long long)c->shared_intermediate_size, (long long)c->intermediate_size);
    if (!(c->swiglu_limit >= 0.0f) || !(c->swiglu_alpha >= 0.0f) || isinf(c->swiglu_limit) || isinf(c->swiglu_alpha))
        return BAD("config: swiglu_limit = %g, swiglu_alpha = %g; each must be 0 or a positive finite number",
                   (double)c->swiglu_limit, (double)c->swiglu_alpha);
    if (c->shared_expert_gate && !c->shared_intermediate_size)
        return BAD("config.shared_expert_gate is set without a shared expert (shared_intermediate_size 0)");
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

/* A bias of E float32 rows of n, copied into E + m rows (the shared chunks' rows zero). */
static qmoe_status copy_bias(const void *in, int64_t E, int64_t m, int64_t n, float **out)
{
    *out = NULL;
    if (!in) return QMOE_OK;
    int64_t rows = E + m, cnt;
    if (!qmoe_mul_i64(rows, n, &cnt) || !qmoe_mul_i64(cnt, (int64_t)sizeof(float), &(int64_t){0}) ||
        !(*out = calloc((size_t)cnt, sizeof(float))))
        return qmoe_fail(QMOE_ERR_INNER, OP ": out of memory");
    memcpy(*out, in, (size_t)(E * n) * sizeof(float));
    return QMOE_OK;
}

qmoe_status qmoe_moe_layer_create(const qmoe_moe_layer_config *config, const qmoe_tensor *w13,
                                  const qmoe_tensor *w13_scale, const qmoe_tensor *w13_bias,
                                  const qmoe_tensor *w2, const qmoe_tensor *w2_scale,
                                  qmoe_moe_layer **layer)
{
    qmoe_moe_layer_config c;
    qmoe_status st = moe_layer_check_config(config, &c);
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
    if (c.shared_expert_gate) {
        L->sgate = malloc((size_t)c.hidden_size * sizeof(float));
        if (!L->sgate) {
            st = qmoe_fail(QMOE_ERR_INNER, OP ": out of memory");
            goto fail;
        }
        memcpy(L->sgate, c.shared_expert_gate, (size_t)c.hidden_size * sizeof(float));
        L->cfg.shared_expert_gate = L->sgate;
    }
    if ((st = copy_bias(c.gate_up_bias, c.num_experts, moe_layer_n_shared(&c), 2 * c.intermediate_size, &L->gubias)) ||
        (st = copy_bias(c.down_bias, c.num_experts, moe_layer_n_shared(&c), c.hidden_size, &L->dbias)))
        goto fail;
    L->cfg.gate_up_bias = L->gubias, L->cfg.down_bias = L->dbias;
    qmoe_weights_options wo = QMOE_WEIGHTS_OPTIONS_INIT;
    wo.threads = c.threads; /* the layer's own limit, 0: every online core */
    st = qmoe_weights_prepack(w13, w13_scale, a8w4 ? w13_bias : NULL, &wo, &L->w13);
    if (!st) st = qmoe_weights_tensor(L->w13, &L->t13);
    if (!st) st = check_view(L->t13, "w13", c.num_experts + moe_layer_n_shared(&c), c.hidden_size, 2 * c.intermediate_size);
    if (st) goto fail;
    qmoe_tensor *tz = NULL;
    if (a8w4) { /* GroupedMatmul folds no assist matrix: prepack it with a zero one */
        int64_t zs[2] = {c.num_experts + moe_layer_n_shared(&c), c.hidden_size}, n;
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
    if (!st) st = check_view(L->t2, "w2", c.num_experts + moe_layer_n_shared(&c), c.intermediate_size, c.hidden_size);
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

/* Here, with the layer's own plan: the layer frees both, the shard's file only calls this one. */
void moe_experts_plan_free(experts_plan *p)
{
    qmoe_op_destroy(p->gu);
    qmoe_op_destroy(p->down);
    p->gu = p->down = NULL;
}

void qmoe_moe_layer_destroy(qmoe_moe_layer *L)
{
    if (!L) return;
    if (L->cached) plan_free(&L->plan);
    if (L->experts_cached) moe_experts_plan_free(&L->experts);
    pthread_mutex_destroy(&L->lock);
    qmoe_tensor_destroy(L->t13);
    qmoe_tensor_destroy(L->t2);
    qmoe_weights_destroy(L->w13);
    qmoe_weights_destroy(L->w2);
    free(L->bias);
    free(L->sgate);
    free(L->gubias), free(L->dbias);
    free(L->held);
    free(L);
}

uint64_t qmoe_moe_layer_weight_bytes(const qmoe_moe_layer *L)
{
    return L ? qmoe_weights_bytes(L->w13) + qmoe_weights_bytes(L->w2) : 0;
}

/* The configuration and the pointers of a layer made from float weights (whole or shard). */
qmoe_status moe_layer_check_float_args(const qmoe_moe_layer_config *config, qmoe_moe_layer_config *c,
                                    const void *const *gate, const void *const *up,
                                    const void *const *down, qmoe_moe_layer **layer)
{
    qmoe_status st = moe_layer_check_config(config, c);
    if (st) return st;
    if (!gate || !up || !down || !layer)
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL,
                             !gate ? "gate" : !up ? "up" : !down ? "down" : "layer",
                             OP ": a required argument is a null pointer");
    return QMOE_OK;
}

/* rows x cols values of a float dtype as float32 (NULL in: *out NULL). */
static qmoe_status float_copy(const void *in, qmoe_dtype d, int64_t rows, int64_t cols, float **out)
{
    int64_t n;
    *out = NULL;
    if (!in) return QMOE_OK;
    if (!qmoe_mul_i64(rows, cols, &n) || !qmoe_mul_i64(n, (int64_t)sizeof(float), &(int64_t){0}) ||
        !(*out = malloc((size_t)n * sizeof(float))))
        return qmoe_fail(QMOE_ERR_INNER, OP ": out of memory for a bias of %lld x %lld", (long long)rows,
                         (long long)cols);
    for (int64_t i = 0; i < n; i++)
        (*out)[i] = d == QMOE_DTYPE_FLOAT32   ? ((const float *)in)[i]
                    : d == QMOE_DTYPE_FLOAT16 ? qmoe_f16_to_f32(((const uint16_t *)in)[i])
                                              : qmoe_bf16_to_f32(((const uint16_t *)in)[i]);
    return QMOE_OK;
}

qmoe_status qmoe_moe_layer_create_from_float(const qmoe_moe_layer_config *config,
                                             const void *const *gate, const void *const *up,
                                             const void *const *down, qmoe_dtype dtype,
                                             qmoe_moe_layer **layer)
{
    qmoe_moe_layer_config c;
    qmoe_status st = moe_layer_check_float_args(config, &c, gate, up, down, layer);
    if (st) return st;
    int64_t m = moe_layer_n_shared(&c);
    if (m && (!c.shared_gate || !c.shared_up || !c.shared_down))
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "config",
                             OP ": config.shared_gate, shared_up and shared_down are needed with a shared expert");
    if (dtype != QMOE_DTYPE_FLOAT32 && dtype != QMOE_DTYPE_FLOAT16 && dtype != QMOE_DTYPE_BFLOAT16)
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_DTYPE, "dtype",
                             OP ": weights must be float32, float16 or bfloat16");
    qmoe_quant_options qo = QMOE_QUANT_OPTIONS_INIT;
    qo.mode = c.mode, qo.weight_nd = 1, qo.clip_search = c.clip_search, qo.group_size = c.group_size;
    qo.threads = c.threads;
    int64_t E = c.num_experts + m, H = c.hidden_size, I = c.intermediate_size;
    size_t item = dtype == QMOE_DTYPE_FLOAT32 ? 4 : 2;
    /* the routed experts, then the shared expert's chunks of I: gate/up rows are contiguous,
     * down's columns are copied out ([H, Is] -> m times [H, I]) */
    const void **pg = calloc((size_t)E, sizeof *pg), **pu = calloc((size_t)E, sizeof *pu),
               **pd = calloc((size_t)E, sizeof *pd);
    char *chunks = m ? malloc((size_t)(m * H * I) * item) : NULL;
    if (!pg || !pu || !pd || (m && !chunks)) {
        free(pg), free(pu), free(pd), free(chunks);
        return qmoe_fail(QMOE_ERR_INNER, OP ": out of memory");
    }
    for (int64_t e = 0; e < c.num_experts; e++) pg[e] = gate[e], pu[e] = up[e], pd[e] = down[e];
    for (int64_t k = 0; k < m; k++) {
        const char *sg = c.shared_gate, *su = c.shared_up, *sd = c.shared_down;
        char *dst = chunks + (size_t)(k * H * I) * item;
        pg[c.num_experts + k] = sg + (size_t)(k * I * H) * item;
        pu[c.num_experts + k] = su + (size_t)(k * I * H) * item;
        for (int64_t h = 0; h < H; h++)
            memcpy(dst + (size_t)(h * I) * item, sd + (size_t)(h * m * I + k * I) * item, (size_t)I * item);
        pd[c.num_experts + k] = dst;
    }
    for (int64_t e = 0; e < E; e++)
        if (!pg[e] || !pu[e] || !pd[e]) {
            free(pg), free(pu), free(pd), free(chunks);
            return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "gate",
                                 OP ": expert %lld's weight pointer is NULL", (long long)e);
        }
    gate = pg, up = pu, down = pd;
    float *sgate = NULL;
    if (c.shared_expert_gate) { /* to float32, as qmoe_moe_layer_create takes it */
        if (!(sgate = malloc((size_t)H * sizeof(float)))) {
            free(pg), free(pu), free(pd), free(chunks);
            return qmoe_fail(QMOE_ERR_INNER, OP ": out of memory");
        }
        for (int64_t h = 0; h < H; h++)
            sgate[h] = dtype == QMOE_DTYPE_FLOAT32 ? ((const float *)c.shared_expert_gate)[h]
                       : dtype == QMOE_DTYPE_FLOAT16 ? qmoe_f16_to_f32(((const uint16_t *)c.shared_expert_gate)[h])
                                                     : qmoe_bf16_to_f32(((const uint16_t *)c.shared_expert_gate)[h]);
        c.shared_expert_gate = sgate;
    }
    float *gub = NULL, *db = NULL;
    if ((st = float_copy(c.gate_up_bias, dtype, c.num_experts, 2 * I, &gub)) ||
        (st = float_copy(c.down_bias, dtype, c.num_experts, H, &db))) {
        free(pg), free(pu), free(pd), free(chunks), free(sgate), free(gub);
        return st;
    }
    if (gub) c.gate_up_bias = gub;
    if (db) c.down_bias = db;
    qmoe_quant_sizes s13, s2;
    st = qmoe_quant_sizes_of(&qo, E, H, 2 * I, &s13);
    if (!st) st = qmoe_quant_sizes_of(&qo, E, I, H, &s2);
    if (st) {
        free(pg), free(pu), free(pd), free(chunks), free(sgate), free(gub), free(db);
        return st;
    }
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
    st = qmoe_quant_gate_up(gate, up, dtype, E, I, H, &qo, w13, sc13, b13);
    if (!st) st = qmoe_quant_linear(down, dtype, E, H, I, &qo, w2, sc2, b2);
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
    free(pg), free(pu), free(pd), free(chunks), free(sgate), free(gub), free(db);
    return st;
}

/* ---------------------------------------------------------------- forward --------------------- */

static void plan_free(layer_plan *p)
{
    qmoe_op_destroy(p->gate);
    qmoe_op_destroy(p->weights);
    qmoe_op_destroy(p->route);
    qmoe_op_destroy(p->gu);
    qmoe_op_destroy(p->down);
    qmoe_op_destroy(p->fin);
}

qmoe_status moe_layer_tensor_at(uintptr_t base, uint64_t off, qmoe_dtype d, int nd, const int64_t *shape,
                             qmoe_tensor **t)
{
    return qmoe_tensor_create(shape, nd, NULL, d, QMOE_FORMAT_ND, (void *)(base + (uintptr_t)off), t);
}

qmoe_status moe_layer_desc_of(const qmoe_tensor *t, qmoe_tensor **d)
{
    *d = NULL;
    if (!t) return QMOE_OK;
    int n = qmoe_tensor_ndim(t);
    int64_t sh[2] = {0, 0}, st[2] = {0, 0};
    for (int i = 0; i < n && i < 2; i++) sh[i] = qmoe_tensor_dim(t, i), st[i] = qmoe_tensor_stride(t, i);
    return qmoe_tensor_desc_create(sh, n, st, qmoe_tensor_dtype(t), QMOE_FORMAT_ND, d);
}

static qmoe_status desc_at(qmoe_dtype d, int nd, const int64_t *shape, qmoe_tensor **t)
{
    return qmoe_tensor_desc_create(shape, nd, NULL, d, QMOE_FORMAT_ND, t);
}

static void keep_max(uint64_t *m, uint64_t v)
{
    if (v > *m) *m = v;
}

/* Whether the forward gates with the softmax operator (else MoeGatingTopK). */
static int plain_softmax(const qmoe_moe_layer_config *c)
{
    return moe_layer_gate_path(c) == MOE_GATE_SOFTMAX;
}

/* Plans the five operators once for the shapes of hidden [T, H] and either logits or (ids,
 * weights): every tensor is a descriptor, the intermediates' addresses are bound per forward. */
static qmoe_status plan_layer(const qmoe_moe_layer *L, const qmoe_tensor *hidden, const qmoe_tensor *logits,
                              const qmoe_tensor *ids_in, const qmoe_tensor *w_in, const qmoe_tensor *out,
                              layer_plan *p)
{
    const qmoe_moe_layer_config *c = &L->cfg;
    memset(p, 0, sizeof *p);
    int64_t T = qmoe_tensor_dim(hidden, 0), K = c->top_k, E = c->num_experts, H = c->hidden_size,
            I = c->intermediate_size;
    qmoe_dtype hd = qmoe_tensor_dtype(hidden);
    int64_t m = moe_layer_n_shared(c), K2 = K + m;
    int64_t A = T * K2, tk[2] = {T, K}, tk2[2] = {T, K2}, vs[2] = {K2, 1}, xq[2] = {A, H}, hq[2] = {A, I},
            e1 = E + m, bias_sh = E;
    enum { Y, IDS, ROWIDX, XQ, RI, CUM, XS, HQ, HS, DOWN, YV, IDSV, HID, LOG, IDIN, WIN, OUT, NORM, NT };
    qmoe_tensor *t[NT] = {0}, *tb = NULL, *tdb = NULL;
    qmoe_status st = QMOE_OK;
    qmoe_dtype yd = qmoe_tensor_dtype(logits ? logits : w_in);
    int own = logits || m; /* the routing lives in the workspace ([T, K + m]: shared columns) */
    if (own) {
        st = desc_at(yd, 2, tk2, &t[Y]);
        if (!st) st = desc_at(QMOE_DTYPE_INT32, 2, tk2, &t[IDS]);
        /* the gating writes the first K columns */
        if (!st) st = qmoe_tensor_desc_create(tk, 2, vs, yd, QMOE_FORMAT_ND, &t[YV]);
        if (!st) st = qmoe_tensor_desc_create(tk, 2, vs, QMOE_DTYPE_INT32, QMOE_FORMAT_ND, &t[IDSV]);
        if (!st) st = desc_at(QMOE_DTYPE_INT32, 2, tk, &t[ROWIDX]);
    }
    int64_t te[2] = {T, E};
    int raw = logits && moe_layer_gate_path(c) == MOE_GATE_RAW;
    if (!st && raw) st = desc_at(QMOE_DTYPE_FLOAT32, 2, te, &t[NORM]);
    if (!st) st = desc_at(QMOE_DTYPE_INT8, 2, xq, &t[XQ]);
    if (!st) st = desc_at(QMOE_DTYPE_INT32, 1, &A, &t[RI]);
    if (!st) st = desc_at(QMOE_DTYPE_INT64, 1, &e1, &t[CUM]);
    if (!st) st = desc_at(QMOE_DTYPE_FLOAT32, 1, &A, &t[XS]);
    if (!st) st = desc_at(QMOE_DTYPE_INT8, 2, hq, &t[HQ]);
    if (!st) st = desc_at(QMOE_DTYPE_FLOAT32, 1, &A, &t[HS]);
    if (!st) st = desc_at(hd, 2, xq, &t[DOWN]);
    if (!st) st = moe_layer_desc_of(hidden, &t[HID]);
    if (!st) st = moe_layer_desc_of(logits, &t[LOG]);
    if (!st) st = moe_layer_desc_of(ids_in, &t[IDIN]);
    if (!st) st = moe_layer_desc_of(w_in, &t[WIN]);
    if (!st) st = moe_layer_desc_of(out, &t[OUT]);
    if (!st && L->bias)
        st = qmoe_tensor_create(&bias_sh, 1, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, L->bias, &tb);
    if (st) goto done;
    const qmoe_tensor *ids = own ? t[IDS] : t[IDIN], *wts = own ? t[Y] : t[WIN];
    qmoe_moe_options mo = {sizeof mo, c->threads};
    if (logits && plain_softmax(c)) {
        st = qmoe_op_create_moe_gating_top_k_softmax(t[LOG], NULL, K, t[YV], t[IDSV], t[ROWIDX], &mo, &p->gate);
    } else if (logits) {
        int sig = c->gating == QMOE_MOE_GATING_SIGMOID;
        qmoe_moe_gating_attrs ga = {.k = K, .k_group = c->k_group, .group_count = c->group_count,
                                    .group_select_mode = sig, .renorm = 0, .norm_type = sig, .out_flag = raw,
                                    .routed_scaling_factor = c->routed_scaling_factor, .eps = 1e-20};
        st = qmoe_op_create_moe_gating_top_k(t[LOG], tb, &ga, t[YV], t[IDSV], t[NORM], &mo, &p->gate);
    }
    if (!st && own) st = moe_layer_weights_op(L, t[NORM], t[IDS], t[HID], t[Y], &p->weights);
    if (st) goto done;
    qmoe_moe_routing_attrs ra = {.expert_num = E + m, .tokens_mode = QMOE_MOE_TOKENS_CUMSUM,
                                 .quant_mode = QMOE_MOE_QUANT_DYNAMIC};
    st = qmoe_op_create_moe_init_routing(t[HID], ids, NULL, NULL, &ra, t[XQ], t[RI], t[CUM], t[XS], &mo,
                                         &p->route);
    if (st) goto done;
    qmoe_grouped_matmul_swiglu_quant_options oo = QMOE_GROUPED_MATMUL_SWIGLU_QUANT_OPTIONS_INIT;
    oo.threads = c->threads;
    oo.swiglu_limit = c->swiglu_limit, oo.swiglu_alpha = c->swiglu_alpha, oo.swiglu_bias = L->gubias;
    st = qmoe_op_create_grouped_matmul_swiglu_quant(t[XQ], L->t13, NULL, NULL, NULL, t[XS], t[CUM], t[HQ], t[HS],
                                         NULL, &oo, &p->gu);
    if (st) goto done;
    qmoe_grouped_matmul_options go = QMOE_GROUPED_MATMUL_OPTIONS_INIT;
    go.threads = c->threads;
    int64_t dbs[2] = {e1, H};
    if (L->dbias) st = qmoe_tensor_create(dbs, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, L->dbias, &tdb);
    if (!st) st = qmoe_op_create_grouped_matmul(t[HQ], L->t2, tdb, NULL, t[HS], t[CUM], 0, t[DOWN], &go, &p->down);
    if (st) goto done;
    st = qmoe_op_create_moe_finalize_routing(t[DOWN], t[RI], NULL, NULL, NULL, wts, NULL, 2, t[OUT], &mo,
                                             &p->fin);
    if (st) goto done;
    p->ops_bytes = 0;
    qmoe_op *ops[6] = {p->gate, p->weights, p->route, p->gu, p->down, p->fin};
    for (int i = 0; i < 6; i++) keep_max(&p->ops_bytes, qmoe_op_workspace_size(ops[i]));
done:
    for (int i = 0; i < NT; i++) qmoe_tensor_destroy(t[i]);
    qmoe_tensor_destroy(tb), qmoe_tensor_destroy(tdb);
    if (st) {
        plan_free(p);
        memset(p, 0, sizeof *p);
    }
    return st;
}

qmoe_status moe_layer_check_2d(const qmoe_tensor *t, const char *arg, int64_t rows, int64_t cols)
{
    if (qmoe_tensor_ndim(t) != 2 || qmoe_tensor_dim(t, 1) != cols || (rows >= 0 && qmoe_tensor_dim(t, 0) != rows))
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_SHAPE, arg,
                             OP ": %s must be [%lld, %lld] (rank %d, [%lld, %lld] given)", arg, (long long)rows,
                             (long long)cols, qmoe_tensor_ndim(t), (long long)qmoe_tensor_dim(t, 0),
                             (long long)qmoe_tensor_dim(t, 1));
    return QMOE_OK;
}

/* A shard holds some experts only: it runs under qmoe_ep_layer_forward (qmoe/mpi.h). */
static qmoe_status not_shard(const qmoe_moe_layer *L)
{
    if (!L->held) return QMOE_OK;
    return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_OPTION, "layer",
                         OP ": the layer is a shard (%lld of %lld experts); run it with qmoe_ep_layer_forward",
                         (long long)L->nheld, (long long)L->cfg.num_experts);
}

/* The boundary checks of both forwards, with the layer's own words (the operators check again). */
static qmoe_status check_io(const qmoe_moe_layer *L, const qmoe_tensor *hidden, const qmoe_tensor *route,
                            const char *route_arg, int64_t route_cols, const qmoe_tensor *out)
{
    if (!L || !hidden || !route || !out)
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL,
                             !L ? "layer" : !hidden ? "hidden" : !route ? route_arg : "out",
                             OP ": a required argument is a null pointer");
    qmoe_status st = moe_layer_check_2d(hidden, "hidden", -1, L->cfg.hidden_size);
    int64_t T = qmoe_tensor_dim(hidden, 0);
    if (!st) st = moe_layer_check_2d(route, route_arg, T, route_cols);
    if (!st) st = moe_layer_check_2d(out, "out", T, L->cfg.hidden_size);
    if (st) return st;
    qmoe_dtype hd = qmoe_tensor_dtype(hidden);
    if (!moe_layer_is_float(hd))
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_DTYPE, "hidden",
                             OP ": hidden must be float32, float16 or bfloat16");
    if (qmoe_tensor_dtype(out) != hd)
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_DTYPE, "out", OP ": out must have hidden's dtype");
    return QMOE_OK;
}

/* With a shared expert: its columns of the routing (expert E + k, weight 1) and, for a routed
 * forward, the caller's ids and weights copied in front of them. */
static void fill_routing(const qmoe_moe_layer *L, int64_t T, const qmoe_tensor *ids_in, const qmoe_tensor *w_in,
                         qmoe_dtype yd, char *ws, const uint64_t *off)
{
    int64_t K = L->cfg.top_k, m = moe_layer_n_shared(&L->cfg), K2 = K + m, E = L->cfg.num_experts;
    if (!m) return;
    int32_t *ids = (int32_t *)(void *)(ws + off[B_IDS]);
    char *y = ws + off[B_Y];
    size_t item = yd == QMOE_DTYPE_FLOAT32 ? 4 : 2;
    float one32 = 1.0f;
    uint16_t one16 = yd == QMOE_DTYPE_FLOAT16 ? 0x3C00 : 0x3F80; /* 1.0 in fp16 / bf16 */
    const void *one = item == 4 ? (const void *)&one32 : (const void *)&one16;
    for (int64_t t = 0; t < T; t++)
        for (int64_t k = 0; k < m; k++) {
            ids[t * K2 + K + k] = (int32_t)(E + k);
            memcpy(y + (size_t)(t * K2 + K + k) * item, one, item);
        }
    if (!ids_in) return;
    const int32_t *si = qmoe_tensor_data(ids_in);
    const char *sw = qmoe_tensor_data(w_in);
    int64_t i0 = qmoe_tensor_stride(ids_in, 0), i1 = qmoe_tensor_stride(ids_in, 1),
            w0 = qmoe_tensor_stride(w_in, 0), w1 = qmoe_tensor_stride(w_in, 1);
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < K; j++) {
            ids[t * K2 + j] = si[t * i0 + j * i1];
            memcpy(y + (size_t)(t * K2 + j) * item, sw + (size_t)(t * w0 + j * w1) * item, item);
        }
}

/* Bytes [*lo, *hi) a 2-D tensor's elements span (any stride signs). */
static void span(const qmoe_tensor *t, uintptr_t *lo, uintptr_t *hi)
{
    intptr_t item = (intptr_t)dtype_bytes(qmoe_tensor_dtype(t)), a = 0, b = 0; /* float or int32 */
    for (int d = 0; d < 2; d++) {
        intptr_t reach = (intptr_t)(qmoe_tensor_dim(t, d) - 1) * (intptr_t)qmoe_tensor_stride(t, d) * item;
        if (reach < 0) a += reach;
        else b += reach;
    }
    *lo = (uintptr_t)qmoe_tensor_data(t) + (uintptr_t)a;
    *hi = (uintptr_t)qmoe_tensor_data(t) + (uintptr_t)b + (uintptr_t)item;
}

/* out may share memory with hidden: init routing reads hidden in full before finalize writes out
 * (in place, as engines run a residual stream). out must not overlap the routing tensors or the
 * workspace, and no input may overlap the workspace. */
static qmoe_status check_apart(const qmoe_tensor *const io[4], const void *workspace, uint64_t size)
{
    const char *names[4] = {"hidden", io[2] ? "topk_ids" : "router_logits", "topk_weights", "out"};
    uintptr_t lo[5] = {0}, hi[5] = {0};
    for (int i = 0; i < 4; i++)
        if (io[i]) span(io[i], &lo[i], &hi[i]);
    lo[4] = (uintptr_t)workspace, hi[4] = lo[4] + (uintptr_t)size;
    for (int i = 0; i < 4; i++)
        for (int j = i + 1; j < 5; j++) {
            if (!(j == 3 || j == 4) || (i == 0 && j == 3) || !io[i] || (j < 4 && !io[j])) continue;
            if (lo[i] < hi[j] && lo[j] < hi[i])
                return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_OVERLAP, j == 3 ? "out" : names[i],
                                     OP ": %s shares memory with %s", j == 3 ? "out" : names[i],
                                     j == 3 ? names[i] : "the workspace");
        }
    return QMOE_OK;
}

static double now_s(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* phase (NULL: not timed): the end time of each operator, the stream synchronized after each
 * (moe_layer_phases.h); phase[0] the start; then the same in the process's CPU time. */
static qmoe_status run(const qmoe_moe_layer *L, const qmoe_tensor *hidden, const qmoe_tensor *logits,
                       const qmoe_tensor *ids, const qmoe_tensor *wts, const qmoe_tensor *out, void *workspace,
                       uint64_t workspace_size, qmoe_stream *stream, double *phase)
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
    const qmoe_tensor *kt[4] = {hidden, logits ? logits : ids, wts, out};
    qmoe_status st = check_apart(kt, workspace, workspace_size);
    if (st) return st;
    layer_plan p = {0};
    plan_key key;
    memset(&key, 0, sizeof key);
    for (int i = 0; i < 4; i++)
        if (kt[i]) {
            key.t[i].dtype = qmoe_tensor_dtype(kt[i]);
            key.t[i].d0 = qmoe_tensor_dim(kt[i], 0), key.t[i].d1 = qmoe_tensor_dim(kt[i], 1);
            key.t[i].s0 = qmoe_tensor_stride(kt[i], 0), key.t[i].s1 = qmoe_tensor_stride(kt[i], 1);
        }
    key.routed = logits == NULL;
    qmoe_moe_layer *M = (qmoe_moe_layer *)L; /* the cache is not part of the layer's value */
    int mine = !pthread_mutex_trylock(&M->lock), hit = mine && M->cached && !memcmp(&M->key, &key, sizeof key);
    if (hit) {
        p = M->plan;
    } else {
        st = plan_layer(L, hidden, logits, ids, wts, out, &p);
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
    fill_routing(L, qmoe_tensor_dim(hidden, 0), ids, wts, qmoe_tensor_dtype(logits ? logits : wts), workspace, off);
    /* The operators run one after another on the stream: they share one scratch region. */
    void *ow = (char *)workspace + off[B_OPS];
    uint64_t os = workspace_size - off[B_OPS];
#define PHASE(i)                                                                                   \
    do {                                                                                           \
        if (phase) {                                                                               \
            if (!st && stream) st = qmoe_stream_synchronize(stream);                               \
            phase[i] = now_s(CLOCK_MONOTONIC);                                                     \
            phase[MOE_LAYER_PHASES + 1 + i] = now_s(CLOCK_PROCESS_CPUTIME_ID);                     \
        }                                                                                          \
    } while (0)
    /* This forward's data: the caller's tensors and the intermediates in the workspace. */
    uintptr_t w = (uintptr_t)workspace;
#define AT(b) ((void *)(w + (uintptr_t)off[b]))
    int own = logits || moe_layer_n_shared(&L->cfg);
    void *hid = qmoe_tensor_data(hidden), *o = qmoe_tensor_data(out);
    void *rid = own ? AT(B_IDS) : qmoe_tensor_data(ids), *rw = own ? AT(B_Y) : qmoe_tensor_data(wts);
    void *gate_args[5] = {qmoe_tensor_data(logits), NULL, AT(B_Y), AT(B_IDS), NULL};
    if (plain_softmax(&L->cfg)) gate_args[4] = AT(B_ROWIDX);
    else gate_args[1] = L->bias;
    void *weights_args[4] = {NULL, NULL, L->sgate ? hid : NULL, AT(B_Y)};
    if (logits && moe_layer_gate_path(&L->cfg) == MOE_GATE_RAW) {
        gate_args[4] = weights_args[0] = AT(B_NORM);
        weights_args[1] = AT(B_IDS);
    }
    void *route_args[8] = {hid, rid, NULL, NULL, AT(B_XQ), AT(B_RI), AT(B_CUM), AT(B_XS)};
    void *gu_args[10] = {AT(B_XQ), NULL, NULL, NULL, NULL, AT(B_XS), AT(B_CUM), AT(B_HQ), AT(B_HS), NULL};
    void *down_args[7] = {AT(B_HQ), NULL, L->dbias, NULL, AT(B_HS), AT(B_CUM), AT(B_DOWN)};
    void *fin_args[8] = {AT(B_DOWN), AT(B_RI), NULL, NULL, NULL, rw, NULL, o};
#undef AT
    PHASE(0);
    if (p.gate) st = qmoe_op_execute(p.gate, gate_args, 5, ow, os, stream);
    if (!st && p.weights) st = qmoe_op_execute(p.weights, weights_args, 4, ow, os, stream);
    PHASE(1);
    if (!st) st = qmoe_op_execute(p.route, route_args, 8, ow, os, stream);
    PHASE(2);
    if (!st) st = qmoe_op_execute(p.gu, gu_args, 10, ow, os, stream);
    PHASE(3);
    if (!st) st = qmoe_op_execute(p.down, down_args, 7, ow, os, stream);
    PHASE(4);
    if (!st) st = qmoe_op_execute(p.fin, fin_args, 8, ow, os, stream);
    PHASE(5);
#undef PHASE
    if (mine && !hit) { /* keep the new plan in place of the old one */
        if (M->cached) plan_free(&M->plan);
        M->plan = p, M->cached = 1;
        M->key = key;
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
    if (!st) st = not_shard(L);
    if (st) return st;
    qmoe_dtype ld = qmoe_tensor_dtype(router_logits);
    if (ld != QMOE_DTYPE_FLOAT32 && ld != qmoe_tensor_dtype(hidden))
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_DTYPE, "router_logits",
                             OP ": router_logits must be float32 or hidden's dtype");
    return run(L, hidden, router_logits, NULL, NULL, out, workspace, workspace_size, stream, NULL);
}

qmoe_status moe_layer_forward_phases(const qmoe_moe_layer *L, const qmoe_tensor *hidden,
                                     const qmoe_tensor *router_logits, const qmoe_tensor *out, void *workspace,
                                     uint64_t workspace_size, qmoe_stream *stream, double seconds[2 * MOE_LAYER_PHASES])
{
    qmoe_status st = check_io(L, hidden, router_logits, "router_logits", L ? L->cfg.num_experts : 0, out);
    if (!st && !seconds) st = qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "seconds", OP ": seconds is a null pointer");
    if (st) return st;
    double t[2 * (MOE_LAYER_PHASES + 1)] = {0};
    st = run(L, hidden, router_logits, NULL, NULL, out, workspace, workspace_size, stream, t);
    for (int i = 0; i < MOE_LAYER_PHASES; i++) {
        seconds[i] = st ? 0 : t[i + 1] - t[i];
        seconds[MOE_LAYER_PHASES + i] = st ? 0 : t[MOE_LAYER_PHASES + 2 + i] - t[MOE_LAYER_PHASES + 1 + i];
    }
    return st;
}

qmoe_status qmoe_moe_layer_forward_routed(const qmoe_moe_layer *L, const qmoe_tensor *hidden,
                                          const qmoe_tensor *topk_ids, const qmoe_tensor *topk_weights,
                                          const qmoe_tensor *out, void *workspace, uint64_t workspace_size,
                                          qmoe_stream *stream)
{
    int64_t K = L ? L->cfg.top_k : 0;
    qmoe_status st = check_io(L, hidden, topk_ids, "topk_ids", K, out);
    if (!st) st = check_io(L, hidden, topk_weights, "topk_weights", K, out);
    if (!st) st = not_shard(L);
    if (st) return st;
    qmoe_dtype wd = qmoe_tensor_dtype(topk_weights);
    if (qmoe_tensor_dtype(topk_ids) != QMOE_DTYPE_INT32)
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_DTYPE, "topk_ids", OP ": topk_ids must be int32");
    if (wd != QMOE_DTYPE_FLOAT32 && wd != qmoe_tensor_dtype(hidden))
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_DTYPE, "topk_weights",
                             OP ": topk_weights must be float32 or hidden's dtype");
    return run(L, hidden, NULL, topk_ids, topk_weights, out, workspace, workspace_size, stream, NULL);
}

qmoe_status qmoe_moe_layer_workspace_size(const qmoe_moe_layer *L, int64_t tokens, qmoe_dtype dtype,
                                          uint64_t *workspace_size)
{
    if (!L || !workspace_size)
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, !L ? "layer" : "workspaceSize",
                             OP ": a required argument is a null pointer");
    qmoe_status sh = not_shard(L);
    if (sh) return sh;
    if (tokens < 0 || !moe_layer_is_float(dtype))
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
    /* Phase one reads shapes only: plan with descriptors to learn the operators' workspace. */
    int64_t hs[2] = {tokens, L->cfg.hidden_size}, ls[2] = {tokens, L->cfg.num_experts};
    qmoe_tensor *th = NULL, *tl = NULL, *to = NULL;
    qmoe_status st = desc_at(dtype, 2, hs, &th);
    if (!st) st = desc_at(QMOE_DTYPE_FLOAT32, 2, ls, &tl);
    if (!st) st = desc_at(dtype, 2, hs, &to);
    layer_plan p = {0};
    if (!st) st = plan_layer(L, th, tl, NULL, NULL, to, &p);
    qmoe_tensor_destroy(th), qmoe_tensor_destroy(tl), qmoe_tensor_destroy(to);
    if (st) return st;
    plan_free(&p);
    *workspace_size = off[B_OPS] + p.ops_bytes;
    qmoe_clear_error();
    return QMOE_OK;
}
