/* qmoe_ep_layer_forward: the MoE layer with its experts spread over the ranks. Each rank gates
 * and quantizes its own tokens, dispatch moves the int8 rows to the experts' owners, each owner
 * runs its experts (and every rank the shared expert on its own tokens) with the layer's own
 * operators, combine brings the rows home and sums them in the single-process order. */
#include <stdlib.h>
#include <string.h>

#include "ep_internal.h"
#include "qmoe/moe_layer.h"
#include "qmoe/moe_ops.h"

static qmoe_status check_2d(const qmoe_tensor *t, const char *arg, int64_t rows, int64_t cols)
{
    if (qmoe_tensor_ndim(t) != 2 || qmoe_tensor_dim(t, 1) != cols ||
        (rows >= 0 && qmoe_tensor_dim(t, 0) != rows))
        return ep_fail(QMOE_ERR_PARAM_INVALID, "%s must be [%lld, %lld]", arg, (long long)rows,
                       (long long)cols);
    return QMOE_OK;
}

static int is_float(qmoe_dtype d)
{
    return d == QMOE_DTYPE_FLOAT32 || d == QMOE_DTYPE_FLOAT16 || d == QMOE_DTYPE_BFLOAT16;
}

/* This rank's own checks of the call. */
static qmoe_status check_forward(const qmoe_ep *ep, const qmoe_moe_layer *layer,
                                 const qmoe_tensor *hidden, const qmoe_tensor *logits,
                                 const qmoe_tensor *out, qmoe_moe_layer_config *c)
{
    if (!layer || !hidden || !logits || !out)
        return ep_fail(QMOE_ERR_PARAM_NULLPTR, "%s is NULL",
                       !layer    ? "layer"
                       : !hidden ? "hidden"
                       : !logits ? "router_logits"
                                 : "out");
    if (qmoe_moe_layer_config_of(layer, c))
        return ep_fail(QMOE_ERR_PARAM_INVALID, "layer: %s", qmoe_last_error());
    if (ep->x_dtype != QMOE_DTYPE_INT8)
        return ep_fail(QMOE_ERR_PARAM_INVALID, "the context's x_dtype must be INT8 for the layer");
    if (c->num_experts != ep->E || c->hidden_size != ep->H || c->top_k != ep->K)
        return ep_fail(QMOE_ERR_PARAM_INVALID,
                       "layer (E %lld, H %lld, top_k %lld) and context (E %lld, H %lld, top_k "
                       "%lld) differ",
                       (long long)c->num_experts, (long long)c->hidden_size, (long long)c->top_k,
                       (long long)ep->E, (long long)ep->H, (long long)ep->K);
    qmoe_status st = check_2d(hidden, "hidden", -1, ep->H);
    int64_t T = qmoe_tensor_dim(hidden, 0);
    if (!st) st = check_2d(logits, "router_logits", T, ep->E);
    if (!st) st = check_2d(out, "out", T, ep->H);
    if (st) return st;
    qmoe_dtype hd = qmoe_tensor_dtype(hidden), ld = qmoe_tensor_dtype(logits);
    if (!is_float(hd) || qmoe_tensor_dtype(out) != hd ||
        (ld != QMOE_DTYPE_FLOAT32 && ld != hd))
        return ep_fail(QMOE_ERR_PARAM_INVALID,
                       "hidden must be float32, float16 or bfloat16, out of hidden's dtype, "
                       "router_logits float32 or hidden's dtype");
    if (T > 0 && (qmoe_tensor_stride(out, 0) != ep->H || qmoe_tensor_stride(out, 1) != 1))
        return ep_fail(QMOE_ERR_PARAM_INVALID, "out must be contiguous");
    /* every local expert held by the layer (a shard of this rank, or the whole layer) */
    int64_t nh = qmoe_moe_layer_held_experts(layer), i = 0;
    for (int64_t l = 0; l < ep->nlocal; l++) {
        while (i < nh && qmoe_moe_layer_held_expert_id(layer, i) < ep->local_ids[l]) i++;
        if (i == nh || qmoe_moe_layer_held_expert_id(layer, i) != ep->local_ids[l])
            return ep_fail(QMOE_ERR_PARAM_INVALID,
                           "rank %d owns expert %lld, which the layer does not hold", ep->rank,
                           (long long)ep->local_ids[l]);
    }
    return QMOE_OK;
}

/* What must be the same on every rank beyond the context's shapes: the layer's arithmetic and
 * the inputs' dtypes (qmoe/mpi.h lists them). 64-bit patterns (the scaling factor's bits, the
 * bias's hash) travel as two 32-bit halves: ep_same_values negates its values, and a half
 * dropped would let factors a bit apart pass. */
static int same_everywhere(const qmoe_ep *ep, const qmoe_moe_layer_config *c, qmoe_dtype hd,
                           qmoe_dtype ld)
{
    uint64_t sf, bias = 1469598103934665603ull; /* FNV-1a of the selection bias */
    memcpy(&sf, &c->routed_scaling_factor, sizeof sf);
    if (c->correction_bias)
        for (size_t i = 0; i < (size_t)c->num_experts * sizeof(float); i++)
            bias = (bias ^ ((const unsigned char *)c->correction_bias)[i]) * 1099511628211ull;
    int64_t v[15] = {c->intermediate_size, (int64_t)c->mode, c->group_size, c->gating,
                     c->renormalize != 0, c->group_count, c->k_group, (int64_t)(sf >> 32),
                     (int64_t)(sf & 0xFFFFFFFFu), c->shared_intermediate_size, (int64_t)hd,
                     (int64_t)ld, (int64_t)(bias >> 32), (int64_t)(bias & 0xFFFFFFFFu),
                     c->clip_search != 0};
    int64_t scratch[30];
    return ep_same_values(ep->comm, v, 15, scratch);
}

/* hidden [T, H] -> ep->tq int8 rows and ep->tqs scales: the layer's own dynamic quant, planned
 * once for the shape (the last one is kept) and run with this call's data. */
static qmoe_status quant_tokens(qmoe_ep *ep, int threads, int64_t T, const qmoe_tensor *hidden)
{
    int64_t key[5] = {T, qmoe_tensor_dtype(hidden), qmoe_tensor_stride(hidden, 0),
                      qmoe_tensor_stride(hidden, 1), threads};
    if (!ep->quant || memcmp(key, ep->quant_key, sizeof key)) {
        qmoe_op_destroy(ep->quant);
        ep->quant = NULL;
        int64_t xs[2] = {T, ep->H}, hs[2] = {T, ep->H}, hst[2] = {key[2], key[3]};
        qmoe_tensor *th = NULL, *tq = NULL, *tqs = NULL;
        qmoe_moe_options mo = QMOE_MOE_OPTIONS_INIT;
        mo.threads = threads;
        qmoe_status st = qmoe_tensor_desc_create(hs, 2, hst, qmoe_tensor_dtype(hidden), QMOE_FORMAT_ND, &th);
        if (!st) st = qmoe_tensor_desc_create(xs, 2, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, &tq);
        if (!st) st = qmoe_tensor_desc_create(&T, 1, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, &tqs);
        if (!st) st = qmoe_op_create_dynamic_quant(th, NULL, tq, tqs, &mo, &ep->quant);
        qmoe_tensor_destroy(th), qmoe_tensor_destroy(tq), qmoe_tensor_destroy(tqs);
        if (st) return st;
        memcpy(ep->quant_key, key, sizeof key);
    }
    uint64_t w = qmoe_op_workspace_size(ep->quant);
    if (w && !ep_reserve_aligned(&ep->quant_ws, &ep->quant_ws_cap, (size_t)w, 1))
        return qmoe_error_set(QMOE_ERR_INNER, QMOE_RULE_NONE, "", "out of memory");
    void *args[4] = {qmoe_tensor_data(hidden), NULL, ep->tq, ep->tqs};
    return qmoe_op_execute(ep->quant, args, 4, ep->quant_ws, w, NULL);
}

/* The rank's tokens: int8 rows and scales (the layer's dynamic quantization), top-k ids and
 * weights (its gating; the weights widened to float32 for combine, exactly). */
static qmoe_status gate_tokens(qmoe_ep *ep, const qmoe_moe_layer *layer, int threads, int64_t T,
                               const qmoe_tensor *hidden, const qmoe_tensor *logits)
{
    const int64_t H = ep->H, K = ep->K;
    qmoe_dtype ld = qmoe_tensor_dtype(logits);
    size_t ls = ld == QMOE_DTYPE_FLOAT32 ? 4 : 2;
    if (!ep_reserve_aligned(&ep->tq, &ep->tq_cap, (size_t)T, (size_t)H) ||
        !ep_reserve_aligned(&ep->tqs, &ep->tqs_cap, (size_t)T, sizeof(float)) ||
        !ep_reserve_aligned(&ep->tids, &ep->tids_cap, (size_t)(T * K), sizeof(int32_t)) ||
        !ep_reserve_aligned(&ep->tw, &ep->tw_cap, (size_t)(T * K), ls) ||
        !ep_reserve_aligned(&ep->twf, &ep->twf_cap, (size_t)(T * K), sizeof(float)))
        return ep_fail(QMOE_ERR_INNER, "out of memory for %lld tokens", (long long)T);
    if (T == 0) return QMOE_OK;
    int64_t ks[2] = {T, K};
    qmoe_tensor *ti = NULL, *tw = NULL;
    qmoe_status st = quant_tokens(ep, threads, T, hidden);
    if (!st) st = qmoe_tensor_create(ks, 2, NULL, QMOE_DTYPE_INT32, QMOE_FORMAT_ND, ep->tids, &ti);
    if (!st) st = qmoe_tensor_create(ks, 2, NULL, ld, QMOE_FORMAT_ND, ep->tw, &tw);
    if (!st) st = qmoe_moe_layer_route(layer, logits, ti, tw);
    if (st) st = ep_fail(st, "%s", st == QMOE_ERR_INNER && !qmoe_last_error()[0] ? "out of memory" : qmoe_last_error());
    qmoe_tensor_destroy(ti), qmoe_tensor_destroy(tw);
    if (st) return st;
    /* widened exactly, by the library's public conversions (a face uses public headers only) */
    if (ld == QMOE_DTYPE_FLOAT32) memcpy(ep->twf, ep->tw, (size_t)(T * K) * sizeof(float));
    else if (ld == QMOE_DTYPE_BFLOAT16) qmoe_convert_bf16_to_f32(ep->tw, T * K, ep->twf);
    else qmoe_convert_f16_to_f32(ep->tw, T * K, ep->twf);
    return QMOE_OK;
}

/* The rows this rank's experts run: `total` received (grouped by local expert), then m copies
 * of its own T tokens for the shared expert's chunks; group_list over the layer's experts. Their
 * outputs (ep->ty) are followed by room for the rank's remote rows coming home. */
static qmoe_status run_experts(qmoe_ep *ep, const qmoe_moe_layer *layer, qmoe_dtype yd,
                               const int64_t *groups, int64_t total, int64_t T, int64_t m)
{
    const int64_t H = ep->H, nh = qmoe_moe_layer_held_experts(layer), A = total + m * T;
    /* shared memory: the outputs in this rank's segment (reserved), nothing comes home */
    const int64_t all = A + (ep->shm ? 0 : ep->route.nremote);
    size_t ys = ep_dtype_size(yd);
    void *ty = ep->shm ? ep->shm_base[ep->rank] : NULL;
    for (int64_t k = 0; k < m && T > 0; k++) {
        memcpy((int8_t *)ep->rx + (size_t)(total + k * T) * (size_t)H, ep->tq, (size_t)(T * H));
        memcpy((float *)ep->rxs + total + k * T, ep->tqs, (size_t)T * sizeof(float));
    }
    uint64_t wsz = 0;
    int64_t *cum = ep_alloc((size_t)(nh + m), sizeof *cum);
    if (!cum || (!ty && !ep_reserve_aligned(&ep->ty, &ep->ty_cap, (size_t)all, (size_t)H * ys)))
        return free(cum), ep_fail(QMOE_ERR_INNER, "out of memory for %lld expert rows", (long long)all);
    if (!ty) ty = ep->ty;
    for (int64_t i = 0, l = 0, at = 0; i < nh + m; i++) {
        if (i >= nh) at += T;
        else if (l < ep->nlocal && qmoe_moe_layer_held_expert_id(layer, i) == ep->local_ids[l])
            at += groups[l++];
        cum[i] = at;
    }
    int64_t xs[2] = {A, H}, gn = nh + m;
    qmoe_tensor *tx = NULL, *ts = NULL, *tg = NULL, *tyt = NULL;
    qmoe_status st = qmoe_moe_layer_experts_workspace_size(layer, A, yd, &wsz);
    if (!st && !ep_reserve_aligned(&ep->tws, &ep->tws_cap, (size_t)wsz, 1)) st = QMOE_ERR_INNER;
    if (!st) st = qmoe_tensor_create(xs, 2, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, ep->rx, &tx);
    if (!st) st = qmoe_tensor_create(&A, 1, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, ep->rxs, &ts);
    if (!st) st = qmoe_tensor_create(&gn, 1, NULL, QMOE_DTYPE_INT64, QMOE_FORMAT_ND, cum, &tg);
    if (!st) st = qmoe_tensor_create(xs, 2, NULL, yd, QMOE_FORMAT_ND, ty, &tyt);
    if (!st) st = qmoe_moe_layer_experts(layer, tx, ts, tg, tyt, ep->tws, wsz);
    if (st) st = ep_fail(st, "%s", st == QMOE_ERR_INNER && !qmoe_last_error()[0] ? "out of memory" : qmoe_last_error());
    qmoe_tensor_destroy(tx), qmoe_tensor_destroy(ts), qmoe_tensor_destroy(tg), qmoe_tensor_destroy(tyt);
    free(cum);
    return st;
}

/* The weighted sum in token order is the layer's own finalize operator (the single-process
 * forward's last step, so its bits) over ep->ty as the expanded rows, where every row already
 * is: the rank's own experts' outputs (grouped), the shared expert's m * T rows, then the remote
 * rows come home; weights [T, K + m] of the gating's dtype with 1 for the shared columns.
 * Planned (and its memory taken) before the ranks agree. */
typedef struct finish {
    qmoe_moe_executor *fin;
    qmoe_tensor *t[4];
    int32_t *ridx;
    void *w2, *ws;
    uint64_t wsz;
} finish;

static void finish_free(finish *f)
{
    qmoe_moe_executor_destroy(f->fin);
    for (int i = 0; i < 4; i++) qmoe_tensor_destroy(f->t[i]);
    free(f->ridx), free(f->w2), free(f->ws);
}

static qmoe_status plan_finish(qmoe_ep *ep, int threads, int64_t T, int64_t m, qmoe_dtype hd,
                               qmoe_dtype ld, const qmoe_tensor *out, finish *f)
{
    const int64_t K = ep->K, K2 = K + m, H = ep->H, A = T * K2;
    const size_t ls = ld == QMOE_DTYPE_FLOAT32 ? 4 : 2, row = (size_t)H * ep_dtype_size(hd);
    /* the rows finalize reads: messages: this rank's, then the remote ones come home; shared
     * memory: every rank's segment (segment d's rows from d * seg on) */
    const int64_t seg = ep->shm ? (int64_t)(ep->shm_cap / row) : 0, base = seg * ep->rank;
    const int64_t own = ep->route.recv_total + m * T;
    const int64_t rows = ep->shm ? seg * ep->size : own + ep->route.nremote;
    if (rows > INT32_MAX) /* row indices are int32 */
        return ep_fail(QMOE_ERR_PARAM_INVALID, "%lld expert rows at rank %d: over INT32_MAX",
                       (long long)rows, ep->rank);
    if (!(f->ridx = ep_alloc((size_t)A, sizeof *f->ridx)) || !(f->w2 = ep_alloc((size_t)A, ls)))
        return ep_fail(QMOE_ERR_INNER, "out of memory for %lld rows", (long long)A);
    const uint16_t one16 = ld == QMOE_DTYPE_FLOAT16 ? 0x3C00 : 0x3F80; /* 1.0 in fp16 / bf16 */
    const float one32 = 1.0f;
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < K2; j++) {
            int64_t at = t * K2 + j;
            int64_t s = j < K ? ep->route.src[t * K + j] : 0, far = 0;
            if (j < K && s >= 0 && ep->shm) far = ep->route.far[t * K + j];
            f->ridx[at] = (int32_t)(j >= K    ? base + ep->route.recv_total + (j - K) * T + t
                                    : s < 0   ? base - 1 - s
                                    : ep->shm ? (far % ep->size) * seg + far / ep->size
                                              : own + s);
            memcpy((char *)f->w2 + (size_t)at * ls,
                   j < K ? (const char *)ep->tw + (size_t)(t * K + j) * ls
                         : ls == 4 ? (const void *)&one32 : (const void *)&one16,
                   ls);
        }
    int64_t xs[2] = {rows, H}, ws[2] = {T, K2};
    qmoe_moe_options mo = QMOE_MOE_OPTIONS_INIT;
    mo.threads = threads;
    qmoe_status st = qmoe_tensor_create(xs, 2, NULL, hd, QMOE_FORMAT_ND,
                                        ep->shm ? ep->shm_base[0] : ep->ty, &f->t[0]);
    if (!st) st = qmoe_tensor_create(&A, 1, NULL, QMOE_DTYPE_INT32, QMOE_FORMAT_ND, f->ridx, &f->t[1]);
    if (!st) st = qmoe_tensor_create(ws, 2, NULL, ld, QMOE_FORMAT_ND, f->w2, &f->t[2]);
    if (!st)
        st = qmoe_moe_finalize_routing_workspace_size(f->t[0], f->t[1], NULL, NULL, NULL, f->t[2],
                                                      NULL, 2, out, &mo, &f->wsz, &f->fin);
    if (!st && f->wsz && !(f->ws = aligned_alloc(64, (size_t)((f->wsz + 63) & ~(uint64_t)63))))
        st = QMOE_ERR_INNER;
    if (st)
        return ep_fail(st, "%s",
                       !qmoe_last_error()[0] ? "out of memory for the weighted sum" : qmoe_last_error());
    return QMOE_OK;
}

qmoe_status qmoe_ep_layer_forward(qmoe_ep *ep, const qmoe_moe_layer *layer,
                                  const qmoe_tensor *hidden, const qmoe_tensor *router_logits,
                                  const qmoe_tensor *out)
{
    if (!ep) return ep_fail(QMOE_ERR_PARAM_NULLPTR, "ep is NULL"); /* no communicator to agree on */
    qmoe_moe_layer_config c;
    qmoe_status st = check_forward(ep, layer, hidden, router_logits, out, &c);
    if ((st = ep_agree(ep->comm, st)) != QMOE_OK) return st;
    qmoe_dtype hd = qmoe_tensor_dtype(hidden), ld = qmoe_tensor_dtype(router_logits);
    if (!same_everywhere(ep, &c, hd, ld))
        return ep_fail(QMOE_ERR_PARAM_INVALID, "the layer's configuration (intermediate size, "
                                               "quantization, clip search, gating, scaling, "
                                               "bias, shared expert) or the inputs' dtypes "
                                               "differ between ranks");
    const int64_t T = qmoe_tensor_dim(hidden, 0), m = c.shared_intermediate_size / c.intermediate_size;
    const size_t row = (size_t)ep->H * ep_dtype_size(hd);
    int64_t total = 0, *groups = ep_alloc((size_t)ep->nlocal, sizeof *groups);
    finish f = {0};
    st = groups ? QMOE_OK : ep_fail(QMOE_ERR_INNER, "out of memory");
    if (!st) st = gate_tokens(ep, layer, c.threads, T, hidden, router_logits);
    /* the shared expert's rows go after the received ones, in the same buffer */
    ep_recv to = {.capacity = -1, .extra = m * T};
    st = ep_dispatch(ep, st, T, ep->tq, ep->tqs, ep->tids, &to, groups, &total);
    if (st) goto done;
    /* shared memory: the expert outputs go to this rank's segment, where the other ranks'
     * finalize reads them once all are written */
    if (ep->shm && (st = ep_shm_reserve(ep, QMOE_OK, (size_t)(total + m * T) * row))) goto done;
    st = run_experts(ep, layer, hd, groups, total, T, m);
    if (!st && T > 0) st = plan_finish(ep, c.threads, T, m, hd, ld, out, &f);
    if (ep->shm)
        st = ep_shm_publish(ep, st);
    else
        st = ep_send_home(ep, st, hd, ep->ty, total,
                          st ? NULL : (char *)ep->ty + (size_t)(total + m * T) * row, NULL);
    if (st || T == 0) goto done;
    st = qmoe_moe_finalize_routing(f.ws, f.wsz, f.fin, NULL);
    if (st) st = ep_fail(st, "%s", qmoe_last_error()); /* not reached: checked when planned */
done:
    finish_free(&f);
    free(groups);
    return st;
}
