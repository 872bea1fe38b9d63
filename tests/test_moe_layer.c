/* The MoE layer object (qmoe/moe_layer.h) against (1) the pipeline operators chained by hand on
 * the same quantized weights (identical bits), (2) a float64 layer with the float weights (the
 * error is the quantization's: at most 1.05x that of a float64 simulation of the scheme), for
 * every gating variant, A8W8 / A8W4, T = 0 and 1, thread counts and streams, and its errors. */
#include <pthread.h>

#include "qmoe/grouped_matmul.h"
#include "qmoe/moe_layer.h"
#include "test_moe_common.h"

typedef struct setup {
    int64_t T, H, I, E;
    qmoe_moe_layer_config cfg;
    float *gate, *up, *down, *bias; /* [E, I, H], [E, I, H], [E, H, I], [E] */
    float *logits;                  /* [T, E] */
    void *hidden;                   /* [T, H] of hd */
    qmoe_dtype hd;
} setup;

static double gauss(qt_rng *r)
{
    double u = qt_uniform(r, 1e-7f, 1.0f), v = qt_uniform(r, 0, 1);
    return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

static void make(setup *s, qt_rng *r, int64_t T, int64_t H, int64_t I, int64_t E, qmoe_dtype hd)
{
    s->T = T, s->H = H, s->I = I, s->E = E, s->hd = hd;
    s->gate = malloc(sizeof(float) * (size_t)(E * I * H));
    s->up = malloc(sizeof(float) * (size_t)(E * I * H));
    s->down = malloc(sizeof(float) * (size_t)(E * H * I));
    s->bias = malloc(sizeof(float) * (size_t)E);
    s->logits = malloc(sizeof(float) * (size_t)(T * E + 1));
    s->hidden = mt_alloc(T * H, hd);
    for (int64_t i = 0; i < E * I * H; i++) s->gate[i] = (float)(gauss(r) / sqrt((double)H));
    for (int64_t i = 0; i < E * I * H; i++) s->up[i] = (float)(gauss(r) / sqrt((double)H));
    for (int64_t i = 0; i < E * H * I; i++) s->down[i] = (float)(gauss(r) / sqrt((double)I));
    for (int64_t i = 0; i < E; i++) s->bias[i] = qt_uniform(r, -0.5f, 0.5f);
    for (int64_t i = 0; i < T * E; i++) s->logits[i] = (float)gauss(r);
    for (int64_t i = 0; i < T * H; i++) mt_set(s->hidden, hd, i, gauss(r));
    qmoe_moe_layer_config c = QMOE_MOE_LAYER_CONFIG_INIT;
    c.hidden_size = H, c.intermediate_size = I, c.num_experts = E, c.top_k = 2;
    s->cfg = c;
}

static void unmake(setup *s)
{
    free(s->gate), free(s->up), free(s->down), free(s->bias), free(s->logits), free(s->hidden);
}

static const void **ptrs(const float *base, int64_t E, int64_t stride)
{
    const void **p = malloc(sizeof(void *) * (size_t)E);
    for (int64_t e = 0; e < E; e++) p[e] = base + e * stride;
    return p;
}

static qmoe_moe_layer *layer_of(const setup *s)
{
    const void **g = ptrs(s->gate, s->E, s->I * s->H), **u = ptrs(s->up, s->E, s->I * s->H),
               **d = ptrs(s->down, s->E, s->H * s->I);
    qmoe_moe_layer *L = NULL;
    qmoe_status st = qmoe_moe_layer_create_from_float(&s->cfg, g, u, d, QMOE_DTYPE_FLOAT32, &L);
    CHECK_MSG(st == QMOE_OK, "create: %s", qmoe_last_error());
    free(g), free(u), free(d);
    return L;
}

/* Runs the layer on s's hidden/logits into a fresh output buffer; NULL on failure. */
static void *layer_run(const qmoe_moe_layer *L, const setup *s, qmoe_stream *stream)
{
    int64_t hs[2] = {s->T, s->H}, ls[2] = {s->T, s->E};
    void *out = mt_alloc(s->T * s->H, s->hd);
    uint64_t wsz = 0;
    CHECK_MSG(qmoe_moe_layer_workspace_size(L, s->T, s->hd, &wsz) == QMOE_OK, "%s", qmoe_last_error());
    void *ws = aligned_alloc(64, (size_t)((wsz + 63) / 64 * 64 + 64));
    qmoe_tensor *th = mt_tensor(s->hidden, s->hd, 2, hs, NULL), *tl = mt_tensor(s->logits, QMOE_DTYPE_FLOAT32, 2, ls, NULL),
                *to = mt_tensor(out, s->hd, 2, hs, NULL);
    qmoe_status st = qmoe_moe_layer_forward(L, th, tl, to, ws, wsz, stream);
    if (!st && stream) st = qmoe_stream_synchronize(stream);
    CHECK_MSG(st == QMOE_OK, "forward: %s", qmoe_last_error());
    qmoe_tensor_destroy(th), qmoe_tensor_destroy(tl), qmoe_tensor_destroy(to);
    free(ws);
    return out;
}

/* The quantized weights, ND, as qmoe/quantize.h makes them. */
typedef struct qweights {
    void *w13, *w2;
    float *s13, *s2, *b13, *b2;
    qmoe_quant_sizes z13, z2;
} qweights;

static void quantize(const setup *s, qweights *q)
{
    qmoe_quant_options o = QMOE_QUANT_OPTIONS_INIT;
    o.mode = s->cfg.mode, o.weight_nd = 1, o.group_size = s->cfg.group_size, o.clip_search = s->cfg.clip_search;
    CHECK(qmoe_quant_sizes_of(&o, s->E, s->H, 2 * s->I, &q->z13) == QMOE_OK);
    CHECK(qmoe_quant_sizes_of(&o, s->E, s->I, s->H, &q->z2) == QMOE_OK);
    q->w13 = malloc((size_t)q->z13.weight_bytes), q->w2 = malloc((size_t)q->z2.weight_bytes);
    q->s13 = malloc(4 * (size_t)q->z13.scale_count), q->s2 = malloc(4 * (size_t)q->z2.scale_count);
    q->b13 = malloc(4 * (size_t)(q->z13.bias_count + 1)), q->b2 = malloc(4 * (size_t)(q->z2.bias_count + 1));
    const void **g = ptrs(s->gate, s->E, s->I * s->H), **u = ptrs(s->up, s->E, s->I * s->H),
               **d = ptrs(s->down, s->E, s->H * s->I);
    CHECK(qmoe_quant_gate_up(g, u, QMOE_DTYPE_FLOAT32, s->E, s->I, s->H, &o, q->w13, q->s13, q->b13) == QMOE_OK);
    CHECK(qmoe_quant_linear(d, QMOE_DTYPE_FLOAT32, s->E, s->H, s->I, &o, q->w2, q->s2, q->b2) == QMOE_OK);
    free(g), free(u), free(d);
}

static void qfree(qweights *q)
{
    free(q->w13), free(q->w2), free(q->s13), free(q->s2), free(q->b13), free(q->b2);
}

static qmoe_tensor *scale_tensor(float *s, int64_t E, int64_t G, int64_t N)
{
    int64_t s3[3] = {E, G, N}, s2[2] = {E, N};
    return G ? mt_tensor(s, QMOE_DTYPE_FLOAT32, 3, s3, NULL) : mt_tensor(s, QMOE_DTYPE_FLOAT32, 2, s2, NULL);
}

/* The six operators chained by hand with the raw ND weights; returns the output, fills ids. */
static void *chain(const setup *s, const qweights *q, int32_t *ids)
{
    const qmoe_moe_layer_config *c = &s->cfg;
    int64_t T = s->T, H = s->H, I = s->I, E = s->E, K = c->top_k, A = T * K;
    int a8w4 = c->mode == QMOE_QUANT_A8W4;
    qmoe_dtype wd = a8w4 ? QMOE_DTYPE_INT4 : QMOE_DTYPE_INT8;
    float *y = malloc(4 * (size_t)A), *xs = malloc(4 * (size_t)A), *hs = malloc(4 * (size_t)A);
    int32_t *rowi = malloc(4 * (size_t)A), *ri = malloc(4 * (size_t)A);
    int64_t *cum = malloc(8 * (size_t)E);
    int8_t *xq = malloc((size_t)(A * H)), *hq = malloc((size_t)(A * I));
    void *down = mt_alloc(A * H, s->hd), *out = mt_alloc(T * H, s->hd);
    int64_t hsh[2] = {T, H}, lsh[2] = {T, E}, ksh[2] = {T, K}, xqs[2] = {A, H}, hqs[2] = {A, I};
    int64_t w13s[3] = {E, H, 2 * I}, w2s[3] = {E, I, H}, b13s[2] = {E, 2 * I};
    qmoe_tensor *tl = mt_tensor(s->logits, QMOE_DTYPE_FLOAT32, 2, lsh, NULL), *ty = mt_tensor(y, QMOE_DTYPE_FLOAT32, 2, ksh, NULL),
                *tid = mt_tensor(ids, QMOE_DTYPE_INT32, 2, ksh, NULL), *trow = mt_tensor(rowi, QMOE_DTYPE_INT32, 2, ksh, NULL),
                *tx = mt_tensor(s->hidden, s->hd, 2, hsh, NULL), *txq = mt_tensor(xq, QMOE_DTYPE_INT8, 2, xqs, NULL),
                *tri = mt_tensor(ri, QMOE_DTYPE_INT32, 1, &A, NULL), *tcum = mt_tensor(cum, QMOE_DTYPE_INT64, 1, &E, NULL),
                *txs = mt_tensor(xs, QMOE_DTYPE_FLOAT32, 1, &A, NULL), *thq = mt_tensor(hq, QMOE_DTYPE_INT8, 2, hqs, NULL),
                *ths = mt_tensor(hs, QMOE_DTYPE_FLOAT32, 1, &A, NULL), *tdn = mt_tensor(down, s->hd, 2, xqs, NULL),
                *tout = mt_tensor(out, s->hd, 2, hsh, NULL), *tw13 = mt_tensor(q->w13, wd, 3, w13s, NULL),
                *tw2 = mt_tensor(q->w2, wd, 3, w2s, NULL), *ts13 = scale_tensor(q->s13, E, q->z13.groups, 2 * I),
                *ts2 = scale_tensor(q->s2, E, q->z2.groups, H), *tb13 = mt_tensor(q->b13, QMOE_DTYPE_FLOAT32, 2, b13s, NULL),
                *tbias = mt_tensor(s->bias, QMOE_DTYPE_FLOAT32, 1, &E, NULL);
    uint64_t ws;
    void *w;
    qmoe_moe_executor *ex = NULL;
    if (c->gating == QMOE_MOE_GATING_SOFTMAX && !c->renormalize) {
        CHECK(qmoe_moe_gating_top_k_softmax_workspace_size(tl, NULL, K, ty, tid, trow, NULL, &ws, &ex) == QMOE_OK);
        CHECK(qmoe_moe_gating_top_k_softmax(NULL, ws, ex, NULL) == QMOE_OK);
    } else {
        int sig = c->gating == QMOE_MOE_GATING_SIGMOID;
        qmoe_moe_gating_attrs ga = {.k = K, .k_group = c->k_group ? c->k_group : 1,
                                    .group_count = c->group_count ? c->group_count : 1, .group_select_mode = sig,
                                    .norm_type = sig, .eps = 1e-20,
                                    .routed_scaling_factor = c->routed_scaling_factor ? c->routed_scaling_factor : 1};
        CHECK_MSG(qmoe_moe_gating_top_k_workspace_size(tl, c->correction_bias ? tbias : NULL, &ga, ty, tid, NULL, NULL,
                                                       &ws, &ex) == QMOE_OK, "%s", qmoe_last_error());
        w = malloc(ws + 8);
        CHECK(qmoe_moe_gating_top_k(w, ws, ex, NULL) == QMOE_OK);
        free(w);
    }
    qmoe_moe_executor_destroy(ex);
    qmoe_moe_routing_attrs ra = {.expert_num = E, .tokens_mode = QMOE_MOE_TOKENS_CUMSUM,
                                 .quant_mode = QMOE_MOE_QUANT_DYNAMIC};
    CHECK(qmoe_moe_init_routing_workspace_size(tx, tid, NULL, NULL, &ra, txq, tri, tcum, txs, NULL, &ws, &ex) == QMOE_OK);
    w = malloc(ws + 8);
    CHECK(qmoe_moe_init_routing(w, ws, ex, NULL) == QMOE_OK);
    free(w);
    qmoe_moe_executor_destroy(ex);
    qmoe_grouped_matmul_swiglu_quant_executor *gx = NULL;
    CHECK_MSG(qmoe_grouped_matmul_swiglu_quant_workspace_size(txq, tw13, a8w4 ? tb13 : NULL, NULL, ts13, txs, tcum, thq, ths, NULL,
                                                   NULL, &ws, &gx) == QMOE_OK, "%s", qmoe_last_error());
    w = malloc(ws + 8);
    CHECK(qmoe_grouped_matmul_swiglu_quant(w, ws, gx, NULL) == QMOE_OK);
    free(w);
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(gx);
    qmoe_grouped_matmul_executor *dx = NULL;
    CHECK_MSG(qmoe_grouped_matmul_workspace_size(thq, tw2, NULL, ts2, ths, tcum, 0, tdn, NULL, &ws, &dx) == QMOE_OK,
              "%s", qmoe_last_error());
    w = malloc(ws + 8);
    CHECK(qmoe_grouped_matmul(w, ws, dx, NULL) == QMOE_OK);
    free(w);
    qmoe_grouped_matmul_executor_destroy(dx);
    CHECK(qmoe_moe_finalize_routing_workspace_size(tdn, tri, NULL, NULL, NULL, ty, NULL, 2, tout, NULL, &ws, &ex) ==
          QMOE_OK);
    CHECK(qmoe_moe_finalize_routing(NULL, ws, ex, NULL) == QMOE_OK);
    qmoe_moe_executor_destroy(ex);
    qmoe_tensor *all[] = {tl, ty, tid, trow, tx, txq, tri, tcum, txs, thq, ths, tdn, tout, tw13, tw2, ts13, ts2, tb13, tbias};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) qmoe_tensor_destroy(all[i]);
    free(y), free(xs), free(hs), free(rowi), free(ri), free(cum), free(xq), free(hq), free(down);
    return out;
}

/* The routing weights of token n's chosen experts, in double, as the configuration says. */
static void route_weights(const setup *s, int64_t n, const int32_t *ids, double *wt)
{
    const qmoe_moe_layer_config *c = &s->cfg;
    int64_t E = s->E, K = c->top_k;
    const float *l = s->logits + n * E;
    double m = -INFINITY, sum = 0, sel = 0;
    /* not fmax(): this float-to-double fmax reduction crashes GCC 12's aarch64 vectorizer (ICE
     * in vect_transform_reduction), as in test_moe_pipeline.c */
    for (int64_t j = 0; j < E; j++)
        if (l[j] > m) m = l[j];
    for (int64_t j = 0; j < E; j++) sum += exp(l[j] - m);
    for (int64_t j = 0; j < K; j++) {
        int32_t e = ids[n * K + j];
        wt[j] = c->gating == QMOE_MOE_GATING_SIGMOID ? 1 / (1 + exp(-(double)l[e])) : exp(l[e] - m) / sum;
        sel += wt[j];
    }
    if (c->gating == QMOE_MOE_GATING_SIGMOID || c->renormalize)
        for (int64_t j = 0; j < K; j++)
            wt[j] = wt[j] / sel * (c->routed_scaling_factor ? c->routed_scaling_factor : 1);
}

static double qrow(const double *v, int64_t n, double *q)
{
    double amax = 0;
    for (int64_t j = 0; j < n; j++) amax = fmax(amax, fabs(v[j]));
    double sc = (float)(amax / 127.0);
    for (int64_t j = 0; j < n; j++) q[j] = sc > 0 ? fmin(127, fmax(-127, nearbyint(v[j] / sc))) : 0;
    return sc;
}

/* Dequantized ND weight element (e, k, n) of K x N. */
static double wq(const void *w, const float *sc, int a8w4, int64_t G, int64_t e, int64_t K, int64_t N, int64_t k,
                 int64_t n)
{
    int64_t i = (e * K + k) * N + n;
    double v;
    if (a8w4) {
        uint8_t b = ((const uint8_t *)w)[i / 2];
        int x = i % 2 ? b >> 4 : b & 15;
        v = x >= 8 ? x - 16 : x;
    } else {
        v = ((const int8_t *)w)[i];
    }
    return v * sc[G ? (e * G + k / (K / G)) * N + n : e * N + n];
}

/* out64: the float64 layer with float weights; sim: the float64 simulation of the scheme. */
static void references(const setup *s, const qweights *q, const int32_t *ids, double *out64, double *sim)
{
    int64_t H = s->H, I = s->I, K = s->cfg.top_k;
    int a8w4 = s->cfg.mode == QMOE_QUANT_A8W4;
    double *x = malloc(8 * (size_t)H), *xq = malloc(8 * (size_t)H), *a = malloc(8 * (size_t)I),
           *aq = malloc(8 * (size_t)I), *b = malloc(8 * (size_t)I), *wt = malloc(8 * (size_t)K);
    for (int64_t n = 0; n < s->T; n++) {
        for (int64_t h = 0; h < H; h++) x[h] = mt_get(s->hidden, s->hd, n * H + h);
        double sx = qrow(x, H, xq);
        route_weights(s, n, ids, wt);
        for (int64_t h = 0; h < H; h++) out64[n * H + h] = sim[n * H + h] = 0;
        for (int64_t j = 0; j < K; j++) {
            int32_t e = ids[n * K + j];
            for (int pass = 0; pass < 2; pass++) {
                for (int64_t i = 0; i < I; i++) {
                    double g = 0, u = 0;
                    for (int64_t h = 0; h < H; h++) {
                        if (pass == 0) {
                            g += s->gate[(e * I + i) * H + h] * x[h], u += s->up[(e * I + i) * H + h] * x[h];
                        } else {
                            g += xq[h] * wq(q->w13, q->s13, a8w4, q->z13.groups, e, H, 2 * I, h, i);
                            u += xq[h] * wq(q->w13, q->s13, a8w4, q->z13.groups, e, H, 2 * I, h, I + i);
                        }
                    }
                    if (pass) g *= sx, u *= sx;
                    a[i] = g / (1 + exp(-g)) * u;
                }
                double sa = pass ? qrow(a, I, aq) : 1;
                for (int64_t h = 0; h < H; h++) {
                    double acc = 0;
                    for (int64_t i = 0; i < I; i++)
                        acc += pass ? aq[i] * wq(q->w2, q->s2, a8w4, q->z2.groups, e, I, H, i, h)
                                    : a[i] * s->down[(e * H + h) * I + i];
                    (pass ? sim : out64)[n * H + h] += wt[j] * acc * sa;
                }
            }
        }
    }
    (void)b;
    free(x), free(xq), free(a), free(aq), free(b), free(wt);
}

static double rel_l2(const double *ref, const void *got, qmoe_dtype d, const double *got64, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double g = got ? mt_get(got, d, i) : got64[i];
        num += (g - ref[i]) * (g - ref[i]), den += ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0);
}

/* One configuration: layer == hand chain bit for bit, and within the quantization error. */
static void check_case(const char *name, setup *s, double err_cap)
{
    qmoe_moe_layer *L = layer_of(s);
    if (!L) return;
    qweights q;
    quantize(s, &q);
    int32_t *ids = malloc(4 * (size_t)(s->T * s->cfg.top_k + 1));
    void *want = chain(s, &q, ids), *got = layer_run(L, s, NULL);
    size_t bytes = (size_t)(s->T * s->H) * mt_item(s->hd);
    CHECK_MSG(memcmp(want, got, bytes) == 0, "%s: the layer differs from the operators chained by hand", name);
    double *r64 = malloc(8 * (size_t)(s->T * s->H + 1)), *sim = malloc(8 * (size_t)(s->T * s->H + 1));
    references(s, &q, ids, r64, sim);
    double e_layer = rel_l2(r64, got, s->hd, NULL, s->T * s->H), e_sim = rel_l2(r64, NULL, 0, sim, s->T * s->H);
    printf("%-28s rel L2 vs float64: layer %.4f%%, simulation %.4f%%\n", name, 100 * e_layer, 100 * e_sim);
    /* the dtype's output rounding is the only other error */
    CHECK_MSG(e_layer <= 1.05 * e_sim + mt_eps(s->hd) / 2, "%s: error %.5g vs simulation %.5g", name, e_layer, e_sim);
    CHECK_MSG(e_sim <= err_cap, "%s: simulated quantization error %.5g over %.5g", name, e_sim, err_cap);
    free(ids), free(want), free(got), free(r64), free(sim);
    qfree(&q);
    qmoe_moe_layer_destroy(L);
}

static void gating_and_modes(void)
{
    qt_rng r = {131};
    setup s;
    make(&s, &r, 40, 64, 32, 8, QMOE_DTYPE_BFLOAT16);
    check_case("softmax, a8w8, bf16", &s, 0.05);
    s.cfg.renormalize = 0;
    check_case("softmax no renorm, a8w8", &s, 0.05);
    unmake(&s);

    make(&s, &r, 33, 128, 64, 8, QMOE_DTYPE_FLOAT32);
    check_case("softmax renorm, a8w8 fp32", &s, 0.05);
    s.cfg.mode = QMOE_QUANT_A8W4, s.cfg.group_size = 32;
    check_case("a8w4 group 32, fp32", &s, 0.30);
    s.cfg.group_size = 0;
    check_case("a8w4 per channel, fp32", &s, 0.30);
    s.cfg.group_size = 32, s.cfg.clip_search = 1;
    check_case("a8w4 group 32 clip search", &s, 0.30);
    unmake(&s);

    /* DeepSeek-style: sigmoid, selection bias, 4 groups keep 2, routed scaling */
    make(&s, &r, 24, 64, 32, 16, QMOE_DTYPE_FLOAT16);
    s.cfg.gating = QMOE_MOE_GATING_SIGMOID, s.cfg.group_count = 4, s.cfg.k_group = 2, s.cfg.top_k = 4;
    s.cfg.routed_scaling_factor = 2.5, s.cfg.correction_bias = s.bias;
    check_case("sigmoid group top-k, fp16", &s, 0.05);
    /* every token's experts in one group (group 1: experts 4..7) */
    for (int64_t n = 0; n < s.T; n++)
        for (int64_t e = 0; e < s.E; e++) s.logits[n * s.E + e] = e / 4 == 1 ? 3 + s.logits[n * s.E + e] : -6;
    s.cfg.k_group = 1;
    check_case("sigmoid, all in one group", &s, 0.05);
    unmake(&s);

    make(&s, &r, 1, 64, 32, 8, QMOE_DTYPE_BFLOAT16);
    check_case("T = 1", &s, 0.05);
    unmake(&s);
}

/* Bits equal for any thread count, synchronous or queued on a stream; T = 0; routed forward. */
static void threads_streams_routed(void)
{
    qt_rng r = {7};
    setup s;
    make(&s, &r, 50, 64, 32, 8, QMOE_DTYPE_BFLOAT16);
    s.cfg.threads = 1;
    qmoe_moe_layer *L1 = layer_of(&s);
    s.cfg.threads = 5;
    qmoe_moe_layer *L5 = layer_of(&s);
    qmoe_device *dev = NULL;
    qmoe_device_options dopt = {.threads = 3};
    qmoe_stream *st = NULL;
    CHECK(qmoe_device_create(&dopt, &dev) == QMOE_OK);
    CHECK(qmoe_stream_create(dev, &st) == QMOE_OK);
    if (L1 && L5 && st) {
        void *a = layer_run(L1, &s, NULL), *b = layer_run(L5, &s, NULL), *c = layer_run(L5, &s, st);
        size_t bytes = (size_t)(s.T * s.H) * 2;
        CHECK_MSG(memcmp(a, b, bytes) == 0, "1 and 5 threads differ");
        CHECK_MSG(memcmp(a, c, bytes) == 0, "synchronous and stream differ");

        /* routed: the gating's own ids and weights give the same bits */
        qweights q;
        quantize(&s, &q);
        int32_t *ids = malloc(4 * (size_t)(s.T * 2));
        void *want = chain(&s, &q, ids);
        /* the routing the gating operator gives (renormalised softmax), passed as given */
        float *wt = malloc(4 * (size_t)(s.T * 2));
        int64_t ks[2] = {s.T, 2}, ls[2] = {s.T, s.E}, hs[2] = {s.T, s.H};
        qmoe_tensor *tl = mt_tensor(s.logits, QMOE_DTYPE_FLOAT32, 2, ls, NULL), *ty = mt_tensor(wt, QMOE_DTYPE_FLOAT32, 2, ks, NULL);
        int32_t *ids2 = malloc(4 * (size_t)(s.T * 2));
        qmoe_tensor *ti = mt_tensor(ids2, QMOE_DTYPE_INT32, 2, ks, NULL);
        qmoe_moe_gating_attrs ga = {.k = 2, .k_group = 1, .group_count = 1, .routed_scaling_factor = 1, .eps = 1e-20};
        qmoe_moe_executor *ex = NULL;
        uint64_t ws = 0;
        CHECK(qmoe_moe_gating_top_k_workspace_size(tl, NULL, &ga, ty, ti, NULL, NULL, &ws, &ex) == QMOE_OK);
        void *w = malloc(ws + 8);
        CHECK(qmoe_moe_gating_top_k(w, ws, ex, NULL) == QMOE_OK);
        free(w);
        qmoe_moe_executor_destroy(ex);
        CHECK(memcmp(ids, ids2, 4 * (size_t)(s.T * 2)) == 0);
        void *out = mt_alloc(s.T * s.H, s.hd);
        uint64_t wsz = 0;
        uint64_t wsz5 = 0;
        CHECK(qmoe_moe_layer_workspace_size(L1, s.T, s.hd, &wsz) == QMOE_OK);
        CHECK(qmoe_moe_layer_workspace_size(L5, s.T, s.hd, &wsz5) == QMOE_OK);
        if (wsz5 > wsz) wsz = wsz5; /* one workspace for both layers */
        void *lw = aligned_alloc(64, (size_t)(wsz + 63) / 64 * 64);
        qmoe_tensor *th = mt_tensor(s.hidden, s.hd, 2, hs, NULL), *to = mt_tensor(out, s.hd, 2, hs, NULL);
        CHECK_MSG(qmoe_moe_layer_forward_routed(L1, th, ti, ty, to, lw, wsz, NULL) == QMOE_OK, "%s", qmoe_last_error());
        CHECK_MSG(memcmp(out, want, bytes) == 0, "routed forward differs from the chain");

        /* an expert id out of range: refused, nothing written */
        ids2[3] = (int32_t)s.E;
        memset(out, 0x5A, bytes);
        CHECK(qmoe_moe_layer_forward_routed(L1, th, ti, ty, to, lw, wsz, NULL) == QMOE_ERR_PARAM_INVALID);
        int untouched = 1;
        for (size_t i = 0; i < bytes; i++) untouched &= ((uint8_t *)out)[i] == 0x5A;
        CHECK_MSG(untouched, "a refused forward wrote its output");
        /* ... and on a stream: the forward is queued (QMOE_OK), synchronize reports the bad id,
         * and the chain stopped at init routing, so out is untouched there as well */
        for (int bad = 0; bad < 2; bad++) {
            ids2[3] = bad ? -1 : (int32_t)s.E;
            CHECK(qmoe_moe_layer_forward_routed(L1, th, ti, ty, to, lw, wsz, st) == QMOE_OK);
            CHECK(qmoe_stream_synchronize(st) == QMOE_ERR_PARAM_INVALID);
            untouched = 1;
            for (size_t i = 0; i < bytes; i++) untouched &= ((uint8_t *)out)[i] == 0x5A;
            CHECK_MSG(untouched, "a forward refused on a stream wrote its output (id %d)", ids2[3]);
        }
        ids2[3] = (int32_t)s.E;
        CHECK(qmoe_stream_synchronize(st) == QMOE_OK); /* the error was reported once */
        /* in place: out may be hidden itself (read in full before out is written) */
        void *io = mt_alloc(s.T * s.H, s.hd);
        memcpy(io, s.hidden, bytes);
        qmoe_tensor *tio = mt_tensor(io, s.hd, 2, hs, NULL), *tlg = mt_tensor(s.logits, QMOE_DTYPE_FLOAT32, 2, ls, NULL);
        CHECK_MSG(qmoe_moe_layer_forward(L1, tio, tlg, tio, lw, wsz, NULL) == QMOE_OK, "%s", qmoe_last_error());
        CHECK_MSG(memcmp(io, a, bytes) == 0, "the forward in place differs");
        /* out inside the workspace, or over the router logits: refused, nothing written */
        qmoe_tensor *tow = mt_tensor((char *)lw + 64, s.hd, 2, hs, NULL);
        CHECK(qmoe_moe_layer_forward(L1, th, tlg, tow, lw, wsz, NULL) == QMOE_ERR_PARAM_INVALID &&
              qmoe_last_error_info()->rule == QMOE_RULE_OVERLAP);
        qmoe_tensor *tol = mt_tensor(s.logits, s.hd, 2, hs, NULL);
        float *lcopy = malloc(4 * (size_t)(s.T * s.E));
        memcpy(lcopy, s.logits, 4 * (size_t)(s.T * s.E));
        CHECK(qmoe_moe_layer_forward(L1, th, tlg, tol, lw, wsz, NULL) == QMOE_ERR_PARAM_INVALID &&
              !strcmp(qmoe_last_error_info()->arg, "out"));
        CHECK(!memcmp(lcopy, s.logits, 4 * (size_t)(s.T * s.E)));
        free(lcopy), free(io);
        qmoe_tensor_destroy(tio), qmoe_tensor_destroy(tlg), qmoe_tensor_destroy(tow), qmoe_tensor_destroy(tol);

        /* the plan kept for the same buffers: new contents are read, a new output is written */
        void *o1 = mt_alloc(s.T * s.H, s.hd), *o2 = mt_alloc(s.T * s.H, s.hd);
        qmoe_tensor *tl1 = mt_tensor(s.logits, QMOE_DTYPE_FLOAT32, 2, ls, NULL), *to1 = mt_tensor(o1, s.hd, 2, hs, NULL),
                    *to2 = mt_tensor(o2, s.hd, 2, hs, NULL);
        for (int rep = 0; rep < 2; rep++) CHECK(qmoe_moe_layer_forward(L5, th, tl1, to1, lw, wsz, NULL) == QMOE_OK);
        CHECK_MSG(memcmp(o1, a, bytes) == 0, "repeated forward differs");
        for (int64_t i = 0; i < s.T * s.H; i++) ((uint16_t *)s.hidden)[i] ^= 0x0100; /* other values */
        CHECK(qmoe_moe_layer_forward(L5, th, tl1, to1, lw, wsz, NULL) == QMOE_OK);
        CHECK(qmoe_moe_layer_forward(L5, th, tl1, to2, lw, wsz, NULL) == QMOE_OK);
        void *fresh = layer_run(L1, &s, NULL);
        CHECK_MSG(memcmp(o1, fresh, bytes) == 0 && memcmp(o2, fresh, bytes) == 0 && memcmp(o1, a, bytes) != 0,
                  "a kept plan must read the new contents and write the output it is given");
        /* the kept plan with other buffers of the same shapes (an engine's steady state): the
         * plan is pointed at them, the same bits as a plan of their own */
        void *h3 = mt_alloc(s.T * s.H, s.hd), *o3 = mt_alloc(s.T * s.H, s.hd);
        float *l3 = malloc(4 * (size_t)(s.T * s.E));
        memcpy(h3, s.hidden, bytes), memcpy(l3, s.logits, 4 * (size_t)(s.T * s.E));
        qmoe_tensor *th3 = mt_tensor(h3, s.hd, 2, hs, NULL), *tl3 = mt_tensor(l3, QMOE_DTYPE_FLOAT32, 2, ls, NULL),
                    *to3 = mt_tensor(o3, s.hd, 2, hs, NULL);
        CHECK(qmoe_moe_layer_forward(L5, th3, tl3, to3, lw, wsz, NULL) == QMOE_OK);
        CHECK_MSG(memcmp(o3, fresh, bytes) == 0, "a kept plan pointed at new buffers differs");
        for (int64_t i = 0; i < s.T * s.H; i++) ((uint16_t *)s.hidden)[i] ^= 0x0100; /* back to the first values */
        /* routed, the caller's ids and weights read in place: new buffers, the chain's bits */
        ids2[3] = ids[3];
        int32_t *ids3 = malloc(4 * (size_t)(s.T * 2));
        float *wt3 = malloc(4 * (size_t)(s.T * 2));
        memcpy(ids3, ids2, 4 * (size_t)(s.T * 2)), memcpy(wt3, wt, 4 * (size_t)(s.T * 2));
        qmoe_tensor *ti3 = mt_tensor(ids3, QMOE_DTYPE_INT32, 2, ks, NULL), *ty3 = mt_tensor(wt3, QMOE_DTYPE_FLOAT32, 2, ks, NULL);
        CHECK(qmoe_moe_layer_forward_routed(L1, th, ti, ty, to, lw, wsz, NULL) == QMOE_OK);
        memset(o3, 0, bytes);
        CHECK(qmoe_moe_layer_forward_routed(L1, th, ti3, ty3, to3, lw, wsz, NULL) == QMOE_OK);
        CHECK_MSG(memcmp(o3, want, bytes) == 0, "routed forward on a repointed plan differs from the chain");
        ids3[5] = -1; /* the repointed plan reads the new ids: refused as a fresh plan would be */
        CHECK(qmoe_moe_layer_forward_routed(L1, th, ti3, ty3, to3, lw, wsz, NULL) == QMOE_ERR_PARAM_INVALID);
        qmoe_tensor *more[] = {th3, tl3, to3, ti3, ty3};
        for (int i = 0; i < 5; i++) qmoe_tensor_destroy(more[i]);
        free(h3), free(o3), free(l3), free(ids3), free(wt3);
        qmoe_tensor_destroy(tl1), qmoe_tensor_destroy(to1), qmoe_tensor_destroy(to2);
        free(o1), free(o2), free(fresh);

        /* T = 0: nothing to do, workspace 0 */
        int64_t z[2] = {0, s.H}, zl[2] = {0, s.E};
        qmoe_tensor *t0 = mt_tensor(NULL, s.hd, 2, z, NULL), *tl0 = mt_tensor(NULL, QMOE_DTYPE_FLOAT32, 2, zl, NULL),
                    *to0 = mt_tensor(NULL, s.hd, 2, z, NULL);
        CHECK(qmoe_moe_layer_workspace_size(L1, 0, s.hd, &wsz) == QMOE_OK && wsz == 0);
        CHECK_MSG(qmoe_moe_layer_forward(L1, t0, tl0, to0, NULL, 0, NULL) == QMOE_OK, "%s", qmoe_last_error());
        qmoe_tensor *all[] = {tl, ty, ti, th, to, t0, tl0, to0};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) qmoe_tensor_destroy(all[i]);
        free(a), free(b), free(c), free(ids), free(ids2), free(want), free(wt), free(out), free(lw);
        qfree(&q);
    }
    qmoe_stream_destroy(st);
    qmoe_device_destroy(dev);
    qmoe_moe_layer_destroy(L1);
    qmoe_moe_layer_destroy(L5);
    unmake(&s);
}

/* Bad configurations and mismatched shapes: a clear error, nothing made or written. */
static void errors(void)
{
    qt_rng r = {99};
    setup s;
    make(&s, &r, 8, 64, 32, 8, QMOE_DTYPE_FLOAT32);
    qmoe_moe_layer *sentinel = (qmoe_moe_layer *)&s, *L = sentinel;
    const void **g = ptrs(s.gate, s.E, s.I * s.H), **u = ptrs(s.up, s.E, s.I * s.H), **d = ptrs(s.down, s.E, s.H * s.I);
    qmoe_moe_layer_config c0 = s.cfg, c;
#define BAD_CFG(stmt, want)                                                                        \
    do {                                                                                           \
        c = c0;                                                                                    \
        stmt;                                                                                      \
        MT_EXPECT_FAIL(qmoe_moe_layer_create_from_float(&c, g, u, d, QMOE_DTYPE_FLOAT32, &L), want); \
        CHECK_MSG(L == sentinel, "%s: *layer written", #stmt);                                     \
    } while (0)
    BAD_CFG(c.top_k = 9, QMOE_ERR_PARAM_INVALID);
    BAD_CFG(c.top_k = 0, QMOE_ERR_PARAM_INVALID);
    BAD_CFG(c.hidden_size = 0, QMOE_ERR_PARAM_INVALID);
    BAD_CFG(c.gating = 7, QMOE_ERR_PARAM_INVALID);
    BAD_CFG((c.gating = QMOE_MOE_GATING_SIGMOID, c.group_count = 3), QMOE_ERR_PARAM_INVALID);
    BAD_CFG((c.gating = QMOE_MOE_GATING_SIGMOID, c.group_count = 4, c.k_group = 5), QMOE_ERR_PARAM_INVALID);
    BAD_CFG(c.group_count = 2, QMOE_ERR_PARAM_INVALID); /* groups need sigmoid gating */
    BAD_CFG(c.group_size = 48, QMOE_ERR_PARAM_INVALID);
    BAD_CFG(c.mode = (qmoe_quant_mode)5, QMOE_ERR_PARAM_INVALID);
    BAD_CFG(c.threads = -1, QMOE_ERR_PARAM_INVALID);
    BAD_CFG(c.routed_scaling_factor = NAN, QMOE_ERR_PARAM_INVALID);
    MT_EXPECT_FAIL(qmoe_moe_layer_create_from_float(NULL, g, u, d, QMOE_DTYPE_FLOAT32, &L), QMOE_ERR_PARAM_NULLPTR);
    MT_EXPECT_FAIL(qmoe_moe_layer_create_from_float(&c0, g, NULL, d, QMOE_DTYPE_FLOAT32, &L), QMOE_ERR_PARAM_NULLPTR);
    CHECK(L == sentinel);

    /* quantized weights of the wrong shape: w2 for another H */
    qweights q;
    quantize(&s, &q);
    int64_t w13s[3] = {s.E, s.H, 2 * s.I}, w2bad[3] = {s.E, s.I, s.H / 2}, s2bad[2] = {s.E, s.H / 2};
    qmoe_tensor *t13 = mt_tensor(q.w13, QMOE_DTYPE_INT8, 3, w13s, NULL), *ts13 = scale_tensor(q.s13, s.E, 0, 2 * s.I),
                *t2 = mt_tensor(q.w2, QMOE_DTYPE_INT8, 3, w2bad, NULL), *ts2 = mt_tensor(q.s2, QMOE_DTYPE_FLOAT32, 2, s2bad, NULL);
    MT_EXPECT_FAIL(qmoe_moe_layer_create(&c0, t13, ts13, NULL, t2, ts2, &L), QMOE_ERR_PARAM_INVALID);
    CHECK_MSG(strstr(qmoe_last_error(), "w2") != NULL, "message names w2: %s", qmoe_last_error());
    CHECK(L == sentinel);
    qmoe_tensor_destroy(t13), qmoe_tensor_destroy(ts13), qmoe_tensor_destroy(t2), qmoe_tensor_destroy(ts2);
    qfree(&q);

    /* forward with mismatched shapes, wrong dtypes, short workspace: nothing written */
    L = layer_of(&s);
    uint64_t wsz = 0;
    CHECK(L && qmoe_moe_layer_workspace_size(L, s.T, s.hd, &wsz) == QMOE_OK);
    void *ws = aligned_alloc(64, (size_t)(wsz + 63) / 64 * 64);
    float *out = mt_alloc(s.T * s.H, QMOE_DTYPE_FLOAT32);
    int64_t hs[2] = {s.T, s.H}, hbad[2] = {s.T, s.H - 1}, ls[2] = {s.T, s.E}, lbad[2] = {s.T - 1, s.E};
    qmoe_tensor *th = mt_tensor(s.hidden, QMOE_DTYPE_FLOAT32, 2, hs, NULL), *tl = mt_tensor(s.logits, QMOE_DTYPE_FLOAT32, 2, ls, NULL),
                *to = mt_tensor(out, QMOE_DTYPE_FLOAT32, 2, hs, NULL), *thb = mt_tensor(s.hidden, QMOE_DTYPE_FLOAT32, 2, hbad, NULL),
                *tlb = mt_tensor(s.logits, QMOE_DTYPE_FLOAT32, 2, lbad, NULL), *tob = mt_tensor(out, QMOE_DTYPE_BFLOAT16, 2, hs, NULL),
                *tli = mt_tensor(s.logits, QMOE_DTYPE_INT32, 2, ls, NULL);
    MT_EXPECT_FAIL(qmoe_moe_layer_forward(L, thb, tl, to, ws, wsz, NULL), QMOE_ERR_PARAM_INVALID);
    MT_EXPECT_FAIL(qmoe_moe_layer_forward(L, th, tlb, to, ws, wsz, NULL), QMOE_ERR_PARAM_INVALID);
    MT_EXPECT_FAIL(qmoe_moe_layer_forward(L, th, tl, tob, ws, wsz, NULL), QMOE_ERR_PARAM_INVALID);
    MT_EXPECT_FAIL(qmoe_moe_layer_forward(L, th, tli, to, ws, wsz, NULL), QMOE_ERR_PARAM_INVALID);
    MT_EXPECT_FAIL(qmoe_moe_layer_forward(L, th, tl, to, ws, wsz - 1, NULL), QMOE_ERR_PARAM_INVALID);
    MT_EXPECT_FAIL(qmoe_moe_layer_forward(L, th, tl, to, (char *)ws + 8, wsz - 8, NULL), QMOE_ERR_PARAM_INVALID);
    MT_EXPECT_FAIL(qmoe_moe_layer_forward(L, th, tl, to, NULL, wsz, NULL), QMOE_ERR_PARAM_NULLPTR);
    MT_EXPECT_FAIL(qmoe_moe_layer_forward(L, th, NULL, to, ws, wsz, NULL), QMOE_ERR_PARAM_NULLPTR);
    MT_EXPECT_FAIL(qmoe_moe_layer_forward(NULL, th, tl, to, ws, wsz, NULL), QMOE_ERR_PARAM_NULLPTR);
    MT_EXPECT_FAIL(qmoe_moe_layer_workspace_size(L, -1, s.hd, &wsz), QMOE_ERR_PARAM_INVALID);
    int untouched = 1;
    for (int64_t i = 0; i < s.T * s.H; i++) untouched &= memcmp(&out[i], "\x5A\x5A\x5A\x5A", 4) == 0;
    CHECK_MSG(untouched, "a refused forward wrote its output");
    CHECK(qmoe_moe_layer_weight_bytes(L) > 0 && qmoe_moe_layer_weight_bytes(NULL) == 0);
    qmoe_tensor *all[] = {th, tl, to, thb, tlb, tob, tli};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) qmoe_tensor_destroy(all[i]);
    free(ws), free(out), free(g), free(u), free(d);
    qmoe_moe_layer_destroy(L);
    qmoe_moe_layer_destroy(NULL);
    unmake(&s);
}

/* A shared expert of Is = 2I (two chunks): equal to a layer of E + 2 experts (the routed ones
 * plus the shared weights split by the test) routed to the gating's choice plus both chunks with
 * weight 1; and within A8W8's error of the float64 layer with the shared expert. */
static void shared_expert(void)
{
    qt_rng r = {57};
    setup s;
    enum { M = 2 };
    make(&s, &r, 20, 64, 32, 8, QMOE_DTYPE_BFLOAT16);
    int64_t T = s.T, H = s.H, I = s.I, E = s.E, K = 2, Is = M * 32, K2 = K + M;
    float *sg = malloc(4 * (size_t)(Is * H)), *su = malloc(4 * (size_t)(Is * H)), *sd = malloc(4 * (size_t)(H * Is));
    for (int64_t i = 0; i < Is * H; i++) sg[i] = (float)(gauss(&r) / 8), su[i] = (float)(gauss(&r) / 8);
    for (int64_t i = 0; i < H * Is; i++) sd[i] = (float)(gauss(&r) / 8);
    s.cfg.gating = QMOE_MOE_GATING_SIGMOID, s.cfg.group_count = 4, s.cfg.k_group = 2;
    s.cfg.routed_scaling_factor = 2.5, s.cfg.correction_bias = s.bias;
    s.cfg.shared_intermediate_size = Is, s.cfg.shared_gate = sg, s.cfg.shared_up = su, s.cfg.shared_down = sd;
    qmoe_moe_layer *L = layer_of(&s);
    /* the big layer: experts 0..E-1, then the shared expert's chunks of I */
    setup b = s;
    b.E = E + M;
    b.gate = malloc(4 * (size_t)(b.E * I * H)), b.up = malloc(4 * (size_t)(b.E * I * H));
    b.down = malloc(4 * (size_t)(b.E * H * I));
    memcpy(b.gate, s.gate, 4 * (size_t)(E * I * H)), memcpy(b.up, s.up, 4 * (size_t)(E * I * H));
    memcpy(b.down, s.down, 4 * (size_t)(E * H * I));
    memcpy(b.gate + E * I * H, sg, 4 * (size_t)(Is * H)), memcpy(b.up + E * I * H, su, 4 * (size_t)(Is * H));
    for (int64_t k = 0; k < M; k++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < I; i++) b.down[((E + k) * H + h) * I + i] = sd[h * Is + k * I + i];
    qmoe_moe_layer_config bc = QMOE_MOE_LAYER_CONFIG_INIT;
    bc.hidden_size = H, bc.intermediate_size = I, bc.num_experts = b.E, bc.top_k = K2;
    b.cfg = bc;
    qmoe_moe_layer *B = layer_of(&b);
    if (L && B) {
        void *got = layer_run(L, &s, NULL);
        /* the routing the gating operator gives, plus the shared columns */
        float *y = malloc(4 * (size_t)(T * K)), *y2 = malloc(4 * (size_t)(T * K2));
        int32_t *ids = malloc(4 * (size_t)(T * K)), *ids2 = malloc(4 * (size_t)(T * K2));
        int64_t ls[2] = {T, E}, ks[2] = {T, K}, ks2[2] = {T, K2}, hs[2] = {T, H};
        qmoe_tensor *tl = mt_tensor(s.logits, QMOE_DTYPE_FLOAT32, 2, ls, NULL), *ty = mt_tensor(y, QMOE_DTYPE_FLOAT32, 2, ks, NULL),
                    *ti = mt_tensor(ids, QMOE_DTYPE_INT32, 2, ks, NULL), *tbias = mt_tensor(s.bias, QMOE_DTYPE_FLOAT32, 1, &E, NULL);
        qmoe_moe_gating_attrs ga = {.k = K, .k_group = 2, .group_count = 4, .group_select_mode = 1, .norm_type = 1,
                                    .routed_scaling_factor = 2.5, .eps = 1e-20};
        qmoe_moe_executor *ex = NULL;
        uint64_t ws = 0;
        CHECK(qmoe_moe_gating_top_k_workspace_size(tl, tbias, &ga, ty, ti, NULL, NULL, &ws, &ex) == QMOE_OK);
        void *w = malloc(ws + 8);
        CHECK(qmoe_moe_gating_top_k(w, ws, ex, NULL) == QMOE_OK);
        free(w);
        qmoe_moe_executor_destroy(ex);
        for (int64_t t = 0; t < T; t++)
            for (int64_t j = 0; j < K2; j++) {
                ids2[t * K2 + j] = j < K ? ids[t * K + j] : (int32_t)(E + j - K);
                y2[t * K2 + j] = j < K ? y[t * K + j] : 1.0f;
            }
        void *want = mt_alloc(T * H, s.hd);
        uint64_t wsz = 0;
        CHECK(qmoe_moe_layer_workspace_size(B, T, s.hd, &wsz) == QMOE_OK);
        void *lw = aligned_alloc(64, (size_t)(wsz + 63) / 64 * 64);
        qmoe_tensor *th = mt_tensor(s.hidden, s.hd, 2, hs, NULL), *to = mt_tensor(want, s.hd, 2, hs, NULL),
                    *ti2 = mt_tensor(ids2, QMOE_DTYPE_INT32, 2, ks2, NULL), *ty2 = mt_tensor(y2, QMOE_DTYPE_FLOAT32, 2, ks2, NULL);
        CHECK_MSG(qmoe_moe_layer_forward_routed(B, th, ti2, ty2, to, lw, wsz, NULL) == QMOE_OK, "%s", qmoe_last_error());
        CHECK_MSG(memcmp(got, want, (size_t)(T * H) * 2) == 0, "shared expert: differs from E + 2 experts routed by hand");
        /* routed forward of the shared layer: the same */
        void *got2 = mt_alloc(T * H, s.hd);
        qmoe_tensor *to2 = mt_tensor(got2, s.hd, 2, hs, NULL);
        uint64_t wsz2 = 0;
        CHECK(qmoe_moe_layer_workspace_size(L, T, s.hd, &wsz2) == QMOE_OK);
        void *lw2 = aligned_alloc(64, (size_t)(wsz2 + 63) / 64 * 64);
        CHECK_MSG(qmoe_moe_layer_forward_routed(L, th, ti, ty, to2, lw2, wsz2, NULL) == QMOE_OK, "%s", qmoe_last_error());
        CHECK_MSG(memcmp(got2, want, (size_t)(T * H) * 2) == 0, "shared expert, routed forward differs");
        /* float64 layer with the shared expert */
        double num = 0, den = 0;
        for (int64_t t = 0; t < T; t++) {
            double x[64], acc[64] = {0}, wt[2];
            for (int64_t h = 0; h < H; h++) x[h] = mt_get(s.hidden, s.hd, t * H + h);
            route_weights(&s, t, ids, wt);
            for (int64_t j = 0; j < K2; j++) {
                int64_t e = ids2[t * K2 + j];
                for (int64_t i = 0; i < I; i++) {
                    double g = 0, u = 0;
                    for (int64_t h = 0; h < H; h++)
                        g += b.gate[(e * I + i) * H + h] * x[h], u += b.up[(e * I + i) * H + h] * x[h];
                    double a = g / (1 + exp(-g)) * u * (j < K ? wt[j] : 1);
                    for (int64_t h = 0; h < H; h++) acc[h] += a * b.down[(e * H + h) * I + i];
                }
            }
            for (int64_t h = 0; h < H; h++) {
                double d = mt_get(got, s.hd, t * H + h) - acc[h];
                num += d * d, den += acc[h] * acc[h];
            }
        }
        printf("%-28s rel L2 vs float64: layer %.4f%%\n", "shared expert (Is = 2I)", 100 * sqrt(num / den));
        CHECK_MSG(sqrt(num / den) < 0.04, "shared expert: error %.5g vs float64", sqrt(num / den));
        qmoe_tensor *all[] = {tl, ty, ti, tbias, th, to, ti2, ty2, to2};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) qmoe_tensor_destroy(all[i]);
        free(got), free(got2), free(want), free(y), free(y2), free(ids), free(ids2), free(lw), free(lw2);
    }
    /* Is not a multiple of I: refused */
    qmoe_moe_layer *bad = NULL;
    s.cfg.shared_intermediate_size = 48;
    const void **g = ptrs(s.gate, E, I * H), **u = ptrs(s.up, E, I * H), **d = ptrs(s.down, E, H * I);
    MT_EXPECT_FAIL(qmoe_moe_layer_create_from_float(&s.cfg, g, u, d, QMOE_DTYPE_FLOAT32, &bad), QMOE_ERR_PARAM_INVALID);
    s.cfg.shared_intermediate_size = Is, s.cfg.shared_down = NULL;
    MT_EXPECT_FAIL(qmoe_moe_layer_create_from_float(&s.cfg, g, u, d, QMOE_DTYPE_FLOAT32, &bad), QMOE_ERR_PARAM_NULLPTR);
    CHECK(bad == NULL);
    free(g), free(u), free(d);
    qmoe_moe_layer_destroy(L), qmoe_moe_layer_destroy(B);
    free(b.gate), free(b.up), free(b.down), free(sg), free(su), free(sd);
    unmake(&s);
}

/* Several threads run one layer at once (each its own workspace and output; one of them may
 * hold the kept plan, the others plan on their own): every output has the same bits. */
typedef struct conc_arg {
    const qmoe_moe_layer *L;
    const setup *s;
    void *out;
} conc_arg;

/* No CHECK here (its counters are not thread-safe): a failure leaves a->out NULL. */
static void *conc_run(void *p)
{
    conc_arg *a = p;
    const setup *s = a->s;
    int64_t hs[2] = {s->T, s->H}, ls[2] = {s->T, s->E};
    uint64_t wsz = 0;
    void *out = malloc((size_t)(s->T * s->H) * 4), *ws = NULL;
    qmoe_tensor *th = NULL, *tl = NULL, *to = NULL;
    int ok = out && !qmoe_moe_layer_workspace_size(a->L, s->T, s->hd, &wsz) &&
             (ws = aligned_alloc(64, (size_t)(wsz + 63) / 64 * 64)) &&
             !qmoe_tensor_create(hs, 2, NULL, s->hd, QMOE_FORMAT_ND, s->hidden, &th) &&
             !qmoe_tensor_create(ls, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, s->logits, &tl) &&
             !qmoe_tensor_create(hs, 2, NULL, s->hd, QMOE_FORMAT_ND, out, &to);
    for (int rep = 0; ok && rep < 3; rep++) ok = !qmoe_moe_layer_forward(a->L, th, tl, to, ws, wsz, NULL);
    qmoe_tensor_destroy(th), qmoe_tensor_destroy(tl), qmoe_tensor_destroy(to);
    free(ws);
    if (!ok) free(out);
    a->out = ok ? out : NULL;
    return NULL;
}

static void concurrent(void)
{
    qt_rng r = {77};
    setup s;
    make(&s, &r, 30, 64, 32, 8, QMOE_DTYPE_FLOAT32);
    s.cfg.threads = 2;
    qmoe_moe_layer *L = layer_of(&s);
    if (L) {
        enum { N = 3 };
        pthread_t th[N];
        conc_arg a[N];
        for (int i = 0; i < N; i++) {
            a[i] = (conc_arg){L, &s, NULL};
            CHECK(pthread_create(&th[i], NULL, conc_run, &a[i]) == 0);
        }
        for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
        void *want = layer_run(L, &s, NULL);
        for (int i = 0; i < N; i++)
            CHECK_MSG(a[i].out && memcmp(a[i].out, want, (size_t)(s.T * s.H) * 4) == 0, "thread %d differs", i);
        for (int i = 0; i < N; i++) free(a[i].out);
        free(want);
    }
    qmoe_moe_layer_destroy(L);
    unmake(&s);
}

int main(void)
{
    gating_and_modes();
    threads_streams_routed();
    shared_expert();
    concurrent();
    errors();
    return qt_finish("moe_layer");
}
