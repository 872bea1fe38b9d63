/* The MoE layer's shards and the forward's pieces that expert parallelism (libqmoe_mpi) runs on
 * their own: the gating on a rank's tokens, the experts on the rows other ranks sent. */
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/status.h"
#include "layer/internal.h"
#include "qmoe/runtime.h"

#define OP MOE_LAYER_OP

/* ---------------------------------------------------------------- shards ---------------------- */
/* Expert parallelism (libqmoe_mpi) runs the forward's pieces on their own: the gating on a rank's
 * tokens, the experts on the rows other ranks sent. Each piece plans the same operators with the
 * same options as plan_layer, so a row's bits do not depend on where it runs. */

static qmoe_status check_held(const qmoe_moe_layer_config *c, int64_t n, const int32_t *ids)
{
    if (n < 0 || n > c->num_experts)
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_LIMIT, "num_held",
                             OP ": num_held = %lld; expected 0..num_experts (%lld)", (long long)n,
                             (long long)c->num_experts);
    if (n && !ids)
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "expert_ids", OP ": expert_ids is a null pointer");
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= c->num_experts || (i && ids[i] <= ids[i - 1]))
            return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_OPTION, "expert_ids",
                                 OP ": expert_ids[%lld] = %d; expected strictly ascending ids in [0, %lld)",
                                 (long long)i, (int)ids[i], (long long)c->num_experts);
    if (c->gate_up_bias || c->down_bias || c->swiglu_alpha > 0.0f || c->swiglu_limit > 0.0f)
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_OPTION, "config",
                             OP ": a shard cannot have expert biases or a SwiGLU variant (gpt-oss) yet");
    if (c->shared_expert_gate) /* the ranks weigh the shared rows 1 (qmoe_ep_layer_forward) */
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_OPTION, "config",
                             OP ": a shard cannot have a gated shared expert (config.shared_expert_gate)");
    if (n == 0 && moe_layer_n_shared(c))
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_OPTION, "num_held",
                             OP ": a shard with a shared expert needs at least one routed expert");
    return QMOE_OK;
}

/* The configuration a shard's weights are made with: its n experts under plain top-1 softmax
 * (gating settings are the whole layer's, put back by adopt_shard). */
static qmoe_moe_layer_config shard_config(const qmoe_moe_layer_config *c, int64_t n)
{
    qmoe_moe_layer_config s = *c;
    s.num_experts = n, s.top_k = 1, s.gating = QMOE_MOE_GATING_SOFTMAX, s.renormalize = 1;
    s.group_count = 0, s.k_group = 0, s.routed_scaling_factor = 0, s.correction_bias = NULL;
    return s;
}

/* L, made from shard_config(c), becomes the shard of c holding experts ids[0 .. n). */
static qmoe_status adopt_shard(qmoe_moe_layer *L, const qmoe_moe_layer_config *c, int64_t n, const int32_t *ids)
{
    L->held = malloc((size_t)(n ? n : 1) * sizeof *L->held);
    float *bias = c->correction_bias ? malloc((size_t)c->num_experts * sizeof(float)) : NULL;
    if (!L->held || (c->correction_bias && !bias)) {
        free(bias);
        return qmoe_fail(QMOE_ERR_INNER, OP ": out of memory");
    }
    if (n) memcpy(L->held, ids, (size_t)n * sizeof *ids);
    if (bias) memcpy(bias, c->correction_bias, (size_t)c->num_experts * sizeof(float));
    free(L->bias);
    L->bias = bias;
    L->nheld = n;
    L->cfg = *c;
    L->cfg.correction_bias = bias;
    return QMOE_OK;
}

static qmoe_status finish_shard(qmoe_status st, qmoe_moe_layer *L, const qmoe_moe_layer_config *c, int64_t n,
                                const int32_t *ids, qmoe_moe_layer **layer)
{
    if (!st) st = adopt_shard(L, c, n, ids);
    if (st) {
        qmoe_moe_layer_destroy(L);
        return st;
    }
    *layer = L;
    qmoe_clear_error();
    return QMOE_OK;
}

qmoe_status qmoe_moe_layer_create_shard_from_float(const qmoe_moe_layer_config *config, int64_t num_held,
                                                   const int32_t *expert_ids, const void *const *gate,
                                                   const void *const *up, const void *const *down,
                                                   qmoe_dtype dtype, qmoe_moe_layer **layer)
{
    qmoe_moe_layer_config c;
    qmoe_status st = moe_layer_check_float_args(config, &c, gate, up, down, layer);
    if (st) return st;
    if ((st = check_held(&c, num_held, expert_ids))) return st;
    qmoe_moe_layer *L = NULL;
    if (num_held == 0) { /* a rank that owns no expert: nothing to quantize */
        L = calloc(1, sizeof *L);
        if (!L) return qmoe_fail(QMOE_ERR_INNER, OP ": out of memory");
        if (pthread_mutex_init(&L->lock, NULL)) {
            free(L);
            return qmoe_fail(QMOE_ERR_INNER, OP ": cannot make a mutex");
        }
        return finish_shard(QMOE_OK, L, &c, 0, expert_ids, layer);
    }
    const void **p = calloc((size_t)num_held * 3, sizeof *p);
    if (!p) return qmoe_fail(QMOE_ERR_INNER, OP ": out of memory");
    for (int64_t i = 0; i < num_held; i++) {
        p[i] = gate[expert_ids[i]];
        p[num_held + i] = up[expert_ids[i]];
        p[2 * num_held + i] = down[expert_ids[i]];
    }
    qmoe_moe_layer_config s = shard_config(&c, num_held);
    st = qmoe_moe_layer_create_from_float(&s, p, p + num_held, p + 2 * num_held, dtype, &L);
    free(p);
    if (st) return st;
    return finish_shard(st, L, &c, num_held, expert_ids, layer);
}

qmoe_status qmoe_moe_layer_create_shard(const qmoe_moe_layer_config *config, int64_t num_held,
                                        const int32_t *expert_ids, const qmoe_tensor *w13,
                                        const qmoe_tensor *w13_scale, const qmoe_tensor *w13_bias,
                                        const qmoe_tensor *w2, const qmoe_tensor *w2_scale,
                                        qmoe_moe_layer **layer)
{
    qmoe_moe_layer_config c;
    qmoe_status st = moe_layer_check_config(config, &c);
    if (st) return st;
    if (!layer)
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "layer", OP ": layer is a null pointer");
    if ((st = check_held(&c, num_held, expert_ids))) return st;
    if (num_held == 0)
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_OPTION, "num_held",
                             OP ": a shard from quantized weights holds at least one expert");
    qmoe_moe_layer_config s = shard_config(&c, num_held);
    qmoe_moe_layer *L = NULL;
    st = qmoe_moe_layer_create(&s, w13, w13_scale, w13_bias, w2, w2_scale, &L);
    if (st) return st;
    return finish_shard(st, L, &c, num_held, expert_ids, layer);
}

qmoe_status qmoe_moe_layer_config_of(const qmoe_moe_layer *L, qmoe_moe_layer_config *config)
{
    if (!L || !config)
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, !L ? "layer" : "config",
                             OP ": a required argument is a null pointer");
    *config = L->cfg;
    config->shared_gate = config->shared_up = config->shared_down = NULL;
    qmoe_clear_error();
    return QMOE_OK;
}

int64_t qmoe_moe_layer_held_experts(const qmoe_moe_layer *L)
{
    return !L ? -1 : L->held ? L->nheld : L->cfg.num_experts;
}

int64_t qmoe_moe_layer_held_expert_id(const qmoe_moe_layer *L, int64_t i)
{
    if (!L || i < 0 || i >= qmoe_moe_layer_held_experts(L)) return -1;
    return L->held ? L->held[i] : i;
}

qmoe_status qmoe_moe_layer_route(const qmoe_moe_layer *L, const qmoe_tensor *logits, const qmoe_tensor *ids,
                                 const qmoe_tensor *wts)
{
    if (!L || !logits || !ids || !wts)
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL,
                             !L ? "layer" : !logits ? "router_logits" : !ids ? "topk_ids" : "topk_weights",
                             OP ": a required argument is a null pointer");
    const qmoe_moe_layer_config *c = &L->cfg;
    int64_t K = c->top_k;
    qmoe_status st = moe_layer_check_2d(logits, "router_logits", -1, c->num_experts);
    int64_t T = qmoe_tensor_dim(logits, 0);
    if (!st) st = moe_layer_check_2d(ids, "topk_ids", T, K);
    if (!st) st = moe_layer_check_2d(wts, "topk_weights", T, K);
    if (st) return st;
    qmoe_dtype ld = qmoe_tensor_dtype(logits);
    if (!moe_layer_is_float(ld) || qmoe_tensor_dtype(ids) != QMOE_DTYPE_INT32 || qmoe_tensor_dtype(wts) != ld)
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_DTYPE, "router_logits",
                             OP ": router_logits must be a float dtype, topk_ids int32, topk_weights "
                                "router_logits' dtype");
    if (T == 0) {
        qmoe_clear_error();
        return QMOE_OK;
    }
    int64_t tk[2] = {T, K}, bias_sh = c->num_experts, n;
    qmoe_tensor *rowidx = NULL, *tb = NULL;
    qmoe_moe_executor *ex = NULL;
    void *ws = NULL;
    int32_t *ri = qmoe_mul_i64(T, K, &n) ? malloc((size_t)n * sizeof *ri) : NULL;
    if (!ri) return qmoe_fail(QMOE_ERR_INNER, OP ": out of memory for %lld routing rows", (long long)T);
    qmoe_moe_options mo = {sizeof mo, c->threads};
    uint64_t w = 0;
    int plain = moe_layer_gate_path(c) == MOE_GATE_SOFTMAX, raw = moe_layer_gate_path(c) == MOE_GATE_RAW;
    float *norm = NULL;
    qmoe_tensor *tn = NULL;
    int64_t te[2] = {T, c->num_experts};
    st = qmoe_tensor_create(tk, 2, NULL, QMOE_DTYPE_INT32, QMOE_FORMAT_ND, ri, &rowidx);
    if (!st && L->bias)
        st = qmoe_tensor_create(&bias_sh, 1, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, L->bias, &tb);
    if (!st && raw) {
        norm = qmoe_mul_i64(T, c->num_experts, &n) ? malloc((size_t)n * sizeof *norm) : NULL;
        st = norm ? qmoe_tensor_create(te, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, norm, &tn)
                  : qmoe_fail(QMOE_ERR_INNER, OP ": out of memory for %lld routing rows", (long long)T);
    }
    if (st) goto done;
    if (plain) { /* as plan_layer gates */
        st = qmoe_moe_gating_top_k_softmax_workspace_size(logits, NULL, K, wts, ids, rowidx, &mo, &w, &ex);
    } else {
        int sig = c->gating == QMOE_MOE_GATING_SIGMOID;
        qmoe_moe_gating_attrs ga = {.k = K, .k_group = c->k_group, .group_count = c->group_count,
                                    .group_select_mode = sig, .renorm = 0, .norm_type = sig, .out_flag = raw,
                                    .routed_scaling_factor = c->routed_scaling_factor, .eps = 1e-20};
        st = qmoe_moe_gating_top_k_workspace_size(logits, tb, &ga, wts, ids, tn, &mo, &w, &ex);
    }
    if (st) goto done;
    if (w && !(ws = aligned_alloc(64, (size_t)((w + 63) & ~(uint64_t)63)))) {
        st = qmoe_fail(QMOE_ERR_INNER, OP ": out of memory for the gating's workspace");
        goto done;
    }
    st = plain ? qmoe_moe_gating_top_k_softmax(ws, w, ex, NULL) : qmoe_moe_gating_top_k(ws, w, ex, NULL);
    if (!st && raw) /* the scores without renormalisation, as the forward's weights step */
        moe_layer_raw_weights(norm, T, c->num_experts, K, c->routed_scaling_factor, qmoe_tensor_data(ids),
                              qmoe_tensor_stride(ids, 0), qmoe_tensor_stride(ids, 1), qmoe_tensor_data(wts), ld,
                              qmoe_tensor_stride(wts, 0), qmoe_tensor_stride(wts, 1));
done:
    qmoe_moe_executor_destroy(ex);
    qmoe_tensor_destroy(rowidx), qmoe_tensor_destroy(tb), qmoe_tensor_destroy(tn);
    free(ri), free(ws), free(norm);
    return st;
}

/* The experts' intermediates in their workspace: int8 [R, I], then float32 [R], then the
 * operators' scratch; false on overflow. */
static int experts_layout(const qmoe_moe_layer_config *c, int64_t R, uint64_t *hs_off, uint64_t *ops_off)
{
    int64_t a, b;
    if (!qmoe_mul_i64(R, c->intermediate_size, &a) || !qmoe_add_i64(a, 63, &a) || !qmoe_mul_i64(R, 4, &b) ||
        !qmoe_add_i64(b, 63, &b))
        return 0;
    a &= ~(int64_t)63, b &= ~(int64_t)63;
    if (!qmoe_add_i64(a, b, &b)) return 0;
    *hs_off = (uint64_t)a, *ops_off = (uint64_t)b;
    return 1;
}

/* Plans gate/up and down once for the shapes of rows x grouped by group_list into y, the
 * intermediates in the workspace (bound per run). */
static qmoe_status plan_experts(const qmoe_moe_layer *L, const qmoe_tensor *x, const qmoe_tensor *xs,
                                const qmoe_tensor *gl, const qmoe_tensor *y, experts_plan *p)
{
    const qmoe_moe_layer_config *c = &L->cfg;
    int64_t R = qmoe_tensor_dim(x, 0), hq[2] = {R, c->intermediate_size};
    memset(p, 0, sizeof *p);
    if (!experts_layout(c, R, &p->hs_off, &p->ops_off))
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_LIMIT, "x", OP ": %lld rows overflow", (long long)R);
    enum { X, XS, GL, Y, HQ, HS, NT };
    qmoe_tensor *t[NT] = {0};
    qmoe_status st = moe_layer_desc_of(x, &t[X]);
    if (!st) st = moe_layer_desc_of(xs, &t[XS]);
    if (!st) st = moe_layer_desc_of(gl, &t[GL]);
    if (!st) st = moe_layer_desc_of(y, &t[Y]);
    if (!st) st = qmoe_tensor_desc_create(hq, 2, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, &t[HQ]);
    if (!st) st = qmoe_tensor_desc_create(&R, 1, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, &t[HS]);
    qmoe_grouped_matmul_swiglu_quant_options oo = QMOE_GROUPED_MATMUL_SWIGLU_QUANT_OPTIONS_INIT;
    oo.threads = c->threads;
    oo.swiglu_limit = c->swiglu_limit, oo.swiglu_alpha = c->swiglu_alpha, oo.swiglu_bias = L->gubias;
    if (!st)
        st = qmoe_op_create_grouped_matmul_swiglu_quant(t[X], L->t13, NULL, NULL, NULL, t[XS], t[GL], t[HQ], t[HS], NULL,
                                             &oo, &p->gu);
    qmoe_grouped_matmul_options go = QMOE_GROUPED_MATMUL_OPTIONS_INIT;
    go.threads = c->threads;
    int64_t dbs[2] = {qmoe_moe_layer_held_experts(L) + moe_layer_n_shared(c), c->hidden_size};
    qmoe_tensor *tdb = NULL; /* a whole layer's down bias (shards have none) */
    if (!st && L->dbias) st = qmoe_tensor_create(dbs, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, L->dbias, &tdb);
    if (!st) st = qmoe_op_create_grouped_matmul(t[HQ], L->t2, tdb, NULL, t[HS], t[GL], 0, t[Y], &go, &p->down);
    qmoe_tensor_destroy(tdb);
    for (int i = 0; i < NT; i++) qmoe_tensor_destroy(t[i]);
    if (st) {
        moe_experts_plan_free(p);
        return st;
    }
    uint64_t w1 = qmoe_op_workspace_size(p->gu), w2 = qmoe_op_workspace_size(p->down);
    p->need = p->ops_off + (w1 > w2 ? w1 : w2);
    return QMOE_OK;
}

static qmoe_status check_experts(const qmoe_moe_layer *L, const qmoe_tensor *x, const qmoe_tensor *xs,
                                 const qmoe_tensor *gl, const qmoe_tensor *y)
{
    int64_t groups = qmoe_moe_layer_held_experts(L) + moe_layer_n_shared(&L->cfg);
    qmoe_status st = moe_layer_check_2d(x, "x", -1, L->cfg.hidden_size);
    int64_t R = qmoe_tensor_dim(x, 0);
    if (!st) st = moe_layer_check_2d(y, "y", R, L->cfg.hidden_size);
    if (st) return st;
    if (qmoe_tensor_dtype(x) != QMOE_DTYPE_INT8 || !moe_layer_is_float(qmoe_tensor_dtype(y)))
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_DTYPE, "x", OP ": x must be int8 and y a float dtype");
    if (qmoe_tensor_ndim(xs) != 1 || qmoe_tensor_dim(xs, 0) != R || qmoe_tensor_dtype(xs) != QMOE_DTYPE_FLOAT32)
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_SHAPE, "x_scale", OP ": x_scale must be float32 [%lld]",
                             (long long)R);
    if (qmoe_tensor_ndim(gl) != 1 || qmoe_tensor_dim(gl, 0) != groups || qmoe_tensor_dtype(gl) != QMOE_DTYPE_INT64)
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_SHAPE, "group_list",
                             OP ": group_list must be int64 [%lld] (held experts + shared chunks)", (long long)groups);
    if (R > 0 && !L->t13)
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_OPTION, "layer", OP ": the shard holds no expert");
    return QMOE_OK;
}

qmoe_status qmoe_moe_layer_experts_workspace_size(const qmoe_moe_layer *L, int64_t rows, qmoe_dtype y_dtype,
                                                  uint64_t *workspace_size)
{
    if (!L || !workspace_size)
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, !L ? "layer" : "workspaceSize",
                             OP ": a required argument is a null pointer");
    if (rows < 0 || !moe_layer_is_float(y_dtype))
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, rows < 0 ? QMOE_RULE_LIMIT : QMOE_RULE_DTYPE, "rows",
                             OP ": rows = %lld, y_dtype %d; expected rows >= 0 and a float dtype", (long long)rows,
                             (int)y_dtype);
    if (rows == 0 || !L->t13) {
        *workspace_size = 0;
        qmoe_clear_error();
        return QMOE_OK;
    }
    /* Plan with descriptors (sizes depend on shapes only), as the forward plans. */
    int64_t H = L->cfg.hidden_size, g = qmoe_moe_layer_held_experts(L) + moe_layer_n_shared(&L->cfg);
    int64_t xs2[2] = {rows, H};
    qmoe_tensor *tx = NULL, *ts = NULL, *tg = NULL, *ty = NULL;
    qmoe_status st = qmoe_tensor_desc_create(xs2, 2, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, &tx);
    if (!st) st = qmoe_tensor_desc_create(&rows, 1, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, &ts);
    if (!st) st = qmoe_tensor_desc_create(&g, 1, NULL, QMOE_DTYPE_INT64, QMOE_FORMAT_ND, &tg);
    if (!st) st = qmoe_tensor_desc_create(xs2, 2, NULL, y_dtype, QMOE_FORMAT_ND, &ty);
    experts_plan p = {0};
    if (!st) st = plan_experts(L, tx, ts, tg, ty, &p);
    uint64_t need = p.need;
    moe_experts_plan_free(&p);
    qmoe_tensor_destroy(tx), qmoe_tensor_destroy(ts), qmoe_tensor_destroy(tg), qmoe_tensor_destroy(ty);
    if (st) return st;
    *workspace_size = need;
    qmoe_clear_error();
    return QMOE_OK;
}

qmoe_status qmoe_moe_layer_experts(const qmoe_moe_layer *L, const qmoe_tensor *x, const qmoe_tensor *x_scale,
                                   const qmoe_tensor *group_list, const qmoe_tensor *y, void *workspace,
                                   uint64_t workspace_size)
{
    if (!L || !x || !x_scale || !group_list || !y)
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL,
                             !L ? "layer" : !x ? "x" : !x_scale ? "x_scale" : !group_list ? "group_list" : "y",
                             OP ": a required argument is a null pointer");
    qmoe_status st = check_experts(L, x, x_scale, group_list, y);
    if (st) return st;
    if (qmoe_tensor_dim(x, 0) == 0) {
        qmoe_clear_error();
        return QMOE_OK;
    }
    if (!workspace || (uintptr_t)workspace % 64)
        return qmoe_fail_arg(workspace ? QMOE_ERR_PARAM_INVALID : QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_WORKSPACE,
                             "workspace", OP ": workspace %p is null or not 64-byte aligned", workspace);
    /* the plan of the last call's shapes is kept (trylock: a busy one is another thread's) */
    experts_key key = {qmoe_tensor_dim(x, 0), qmoe_tensor_dtype(y), qmoe_tensor_stride(x, 0),
                       qmoe_tensor_stride(y, 0), qmoe_tensor_stride(x_scale, 0),
                       qmoe_tensor_stride(group_list, 0)};
    qmoe_moe_layer *M = (qmoe_moe_layer *)L;
    int mine = !pthread_mutex_trylock(&M->lock);
    int hit = mine && M->experts_cached && !memcmp(&M->experts_key, &key, sizeof key);
    experts_plan p;
    if (hit) {
        p = M->experts;
    } else if ((st = plan_experts(L, x, x_scale, group_list, y, &p))) {
        if (mine) pthread_mutex_unlock(&M->lock);
        return st;
    }
    if (workspace_size < p.need) {
        st = qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_WORKSPACE, "workspaceSize",
                           OP ": workspaceSize = %llu is less than the %llu bytes needed",
                           (unsigned long long)workspace_size, (unsigned long long)p.need);
    } else {
        char *w = workspace, *ow = w + p.ops_off;
        uint64_t os = workspace_size - p.ops_off;
        void *gu_args[10] = {qmoe_tensor_data(x), NULL, NULL, NULL, NULL, qmoe_tensor_data(x_scale),
                             qmoe_tensor_data(group_list), w, w + p.hs_off, NULL};
        void *down_args[7] = {w, NULL, L->dbias, NULL, w + p.hs_off, qmoe_tensor_data(group_list),
                              qmoe_tensor_data(y)};
        st = qmoe_op_execute(p.gu, gu_args, 10, ow, os, NULL);
        if (!st) st = qmoe_op_execute(p.down, down_args, 7, ow, os, NULL);
    }
    if (mine && !hit) {
        if (M->experts_cached) moe_experts_plan_free(&M->experts);
        M->experts = p, M->experts_key = key, M->experts_cached = 1;
    } else if (!hit) {
        moe_experts_plan_free(&p);
    }
    if (mine) pthread_mutex_unlock(&M->lock);
    return st;
}
