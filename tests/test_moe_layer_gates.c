/* The layer's gating variants the operators alone do not give (qmoe/moe_layer.h): weights kept
 * unnormalised (renormalize 0) with sigmoid gating, a selection bias with softmax gating, the
 * scaling factor without renormalisation; Qwen2-MoE's gated shared expert; gpt-oss's expert
 * biases and clamped SwiGLU. Routing against
 * a float64 statement of the rule (the same experts, weights within 1e-6); the forward against
 * qmoe_moe_layer_forward_routed with those ids and weights (identical bits) and against a
 * float64 layer (within A8W8's error). */
#include "qmoe/moe_layer.h"
#include "test_moe_common.h"

enum { T = 32, H = 64, I = 32, E = 16 };

static double gauss(qt_rng *r)
{
    double u = qt_uniform(r, 1e-7f, 1.0f), v = qt_uniform(r, 0, 1);
    return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

typedef struct weights {
    float gate[E * I * H], up[E * I * H], down[E * H * I], bias[E], logits[T * E];
    float sg[2 * I * H], su[2 * I * H], sd[H * 2 * I], sgate[H];
    float hidden[T * H];
    float gub[E * 2 * I], db[E * H]; /* gpt-oss biases */
} weights;

static weights W;

static void fill(qt_rng *r)
{
    for (int i = 0; i < E * I * H; i++) W.gate[i] = (float)(gauss(r) / 8), W.up[i] = (float)(gauss(r) / 8);
    for (int i = 0; i < E * H * I; i++) W.down[i] = (float)(gauss(r) / 6);
    for (int i = 0; i < 2 * I * H; i++) W.sg[i] = (float)(gauss(r) / 8), W.su[i] = (float)(gauss(r) / 8);
    for (int i = 0; i < H * 2 * I; i++) W.sd[i] = (float)(gauss(r) / 8);
    for (int i = 0; i < H; i++) W.sgate[i] = (float)(gauss(r) / 8);
    for (int i = 0; i < E; i++) W.bias[i] = qt_uniform(r, -0.3f, 0.3f);
    for (int i = 0; i < T * E; i++) W.logits[i] = (float)gauss(r);
    for (int i = 0; i < T * H; i++) W.hidden[i] = (float)gauss(r);
    for (int i = 0; i < E * 2 * I; i++) W.gub[i] = (float)(gauss(r) / 2);
    for (int i = 0; i < E * H; i++) W.db[i] = (float)(gauss(r) / 4);
}

static qmoe_status make(const qmoe_moe_layer_config *c, qmoe_moe_layer **L)
{
    const void *g[E], *u[E], *d[E];
    for (int e = 0; e < E; e++) g[e] = W.gate + e * I * H, u[e] = W.up + e * I * H, d[e] = W.down + e * H * I;
    return qmoe_moe_layer_create_from_float(c, g, u, d, QMOE_DTYPE_FLOAT32, L);
}

/* The rule in float64: scores (softmax or sigmoid), + bias for selection, group-limited top-k
 * (group score: the sum of its two best, sigmoid), weights the scores, renormalised or not, times
 * the factor. */
static void reference_route(const qmoe_moe_layer_config *c, int64_t t, int32_t *ids, double *wt)
{
    const float *l = W.logits + t * E;
    double s[E], v[E], m = -INFINITY, sum = 0;
    for (int e = 0; e < E; e++)
        if (l[e] > m) m = l[e];
    for (int e = 0; e < E; e++) sum += exp(l[e] - m);
    for (int e = 0; e < E; e++) {
        s[e] = c->gating == QMOE_MOE_GATING_SIGMOID ? 1 / (1 + exp(-(double)l[e])) : exp(l[e] - m) / sum;
        v[e] = s[e] + (c->correction_bias ? c->correction_bias[e] : 0);
    }
    int64_t G = c->group_count ? c->group_count : 1, kg = c->k_group ? c->k_group : 1, per = E / G;
    int keep[E];
    for (int e = 0; e < E; e++) keep[e] = 1;
    if (G > 1) {
        double gs[E];
        for (int64_t g = 0; g < G; g++) {
            double a = -INFINITY, b = -INFINITY;
            for (int64_t j = 0; j < per; j++) {
                double x = v[g * per + j];
                if (x > a) b = a, a = x;
                else if (x > b) b = x;
            }
            gs[g] = a + b;
        }
        int kept[E] = {0};
        for (int64_t n = 0; n < kg; n++) {
            int64_t best = -1;
            for (int64_t g = 0; g < G; g++)
                if (!kept[g] && (best < 0 || gs[g] > gs[best])) best = g;
            kept[best] = 1;
        }
        for (int e = 0; e < E; e++) keep[e] = kept[e / per];
    }
    double tot = 0;
    for (int64_t j = 0; j < c->top_k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++)
            if (keep[e] && (best < 0 || v[e] > v[best])) best = e;
        keep[best] = 0;
        ids[j] = best, wt[j] = s[best], tot += s[best];
    }
    double f = c->routed_scaling_factor ? c->routed_scaling_factor : 1;
    for (int64_t j = 0; j < c->top_k; j++) wt[j] = (c->renormalize ? wt[j] / tot : wt[j]) * f;
}

static void *run_forward(const qmoe_moe_layer *L, const int32_t *ids, const float *wts, int64_t K, qmoe_dtype hd)
{
    int64_t hs[2] = {T, H}, ls[2] = {T, E}, ks[2] = {T, K};
    void *x = mt_alloc(T * H, hd), *out = mt_alloc(T * H, hd);
    for (int i = 0; i < T * H; i++) mt_set(x, hd, i, W.hidden[i]);
    uint64_t wsz = 0;
    CHECK_MSG(qmoe_moe_layer_workspace_size(L, T, hd, &wsz) == QMOE_OK, "%s", qmoe_last_error());
    void *ws = aligned_alloc(64, (size_t)(wsz + 63) / 64 * 64);
    qmoe_tensor *th = mt_tensor(x, hd, 2, hs, NULL), *to = mt_tensor(out, hd, 2, hs, NULL), *tl = NULL, *ti = NULL,
                *tw = NULL;
    qmoe_status st;
    if (ids) {
        ti = mt_tensor((void *)ids, QMOE_DTYPE_INT32, 2, ks, NULL), tw = mt_tensor((void *)wts, QMOE_DTYPE_FLOAT32, 2, ks, NULL);
        st = qmoe_moe_layer_forward_routed(L, th, ti, tw, to, ws, wsz, NULL);
    } else {
        tl = mt_tensor(W.logits, QMOE_DTYPE_FLOAT32, 2, ls, NULL);
        st = qmoe_moe_layer_forward(L, th, tl, to, ws, wsz, NULL);
    }
    CHECK_MSG(st == QMOE_OK, "forward: %s", qmoe_last_error());
    qmoe_tensor_destroy(th), qmoe_tensor_destroy(to), qmoe_tensor_destroy(tl), qmoe_tensor_destroy(ti);
    qmoe_tensor_destroy(tw);
    free(ws), free(x);
    return out;
}

static void route_case(const char *name, const qmoe_moe_layer_config *c)
{
    qmoe_moe_layer *L = NULL;
    qmoe_status st = make(c, &L);
    CHECK_MSG(st == QMOE_OK, "%s: create: %s", name, qmoe_last_error());
    if (st) return;
    int64_t K = c->top_k, ls[2] = {T, E}, ks[2] = {T, K};
    int32_t ids[T * 8];
    float wts[T * 8];
    qmoe_tensor *tl = mt_tensor(W.logits, QMOE_DTYPE_FLOAT32, 2, ls, NULL),
                *ti = mt_tensor(ids, QMOE_DTYPE_INT32, 2, ks, NULL), *tw = mt_tensor(wts, QMOE_DTYPE_FLOAT32, 2, ks, NULL);
    CHECK_MSG(qmoe_moe_layer_route(L, tl, ti, tw) == QMOE_OK, "%s: route: %s", name, qmoe_last_error());
    int bad_ids = 0;
    double worst = 0;
    for (int64_t t = 0; t < T; t++) {
        int32_t rid[8];
        double rw[8];
        reference_route(c, t, rid, rw);
        for (int64_t j = 0; j < K; j++) {
            bad_ids += rid[j] != ids[t * K + j];
            double d = fabs(wts[t * K + j] - rw[j]) / fmax(fabs(rw[j]), 1e-30);
            if (d > worst) worst = d;
        }
    }
    printf("%-36s ids differing %d, worst weight rel error %.3g\n", name, bad_ids, worst);
    CHECK_MSG(bad_ids == 0, "%s: %d ids differ from the float64 rule", name, bad_ids);
    CHECK_MSG(worst < 1e-6, "%s: weights differ from the float64 rule by %.3g", name, worst);
    /* the forward routes by exactly these bits */
    for (int hd = 0; hd < 2; hd++) {
        qmoe_dtype d = hd ? QMOE_DTYPE_BFLOAT16 : QMOE_DTYPE_FLOAT32;
        void *got = run_forward(L, NULL, NULL, K, d), *want = run_forward(L, ids, wts, K, d);
        CHECK_MSG(memcmp(got, want, (size_t)(T * H) * mt_item(d)) == 0,
                  "%s: the forward differs from forward_routed with the layer's own routing", name);
        free(got), free(want);
    }
    qmoe_tensor_destroy(tl), qmoe_tensor_destroy(ti), qmoe_tensor_destroy(tw);
    qmoe_moe_layer_destroy(L);
}

static qmoe_moe_layer_config base(void)
{
    qmoe_moe_layer_config c = QMOE_MOE_LAYER_CONFIG_INIT;
    c.hidden_size = H, c.intermediate_size = I, c.num_experts = E, c.top_k = 4;
    return c;
}

static void gatings(void)
{
    qmoe_moe_layer_config c = base();
    c.gating = QMOE_MOE_GATING_SIGMOID, c.renormalize = 0;
    route_case("sigmoid, not renormalised", &c);
    c.group_count = 4, c.k_group = 2, c.correction_bias = W.bias, c.routed_scaling_factor = 2.5;
    route_case("sigmoid groups + bias, not renorm", &c);
    c.renormalize = 1;
    route_case("sigmoid groups + bias, renormalised", &c);
    c = base();
    c.correction_bias = W.bias;
    route_case("softmax + bias, renormalised", &c);
    c.renormalize = 0;
    route_case("softmax + bias, not renormalised", &c);
    c.correction_bias = NULL, c.routed_scaling_factor = 2.0;
    route_case("softmax, not renorm, scaled", &c);
    c.routed_scaling_factor = 0;
    route_case("softmax, not renormalised", &c);
    /* groups stay a sigmoid-gating setting */
    c.group_count = 4, c.k_group = 2;
    qmoe_moe_layer *L = NULL;
    MT_EXPECT_FAIL(make(&c, &L), QMOE_ERR_PARAM_INVALID);
    CHECK(L == NULL);
}

/* sigmoid(x . g) as the header states it: float32, h in order. */
static float shared_weight(const void *x, qmoe_dtype hd, int64_t t)
{
    float s = 0.0f;
    for (int64_t h = 0; h < H; h++) s = s + (float)mt_get(x, hd, t * H + h) * W.sgate[h];
    return 1.0f / (1.0f + expf(-s));
}

static void gated_shared(void)
{
    qmoe_moe_layer_config c = base();
    c.top_k = 2, c.shared_intermediate_size = 2 * I;
    c.shared_gate = W.sg, c.shared_up = W.su, c.shared_down = W.sd, c.shared_expert_gate = W.sgate;
    qmoe_moe_layer *L = NULL;
    CHECK_MSG(make(&c, &L) == QMOE_OK, "gated shared: %s", qmoe_last_error());
    /* the same layer ungated, and its routing */
    qmoe_moe_layer_config u = c;
    u.shared_expert_gate = NULL;
    qmoe_moe_layer *U = NULL;
    CHECK_MSG(make(&u, &U) == QMOE_OK, "ungated: %s", qmoe_last_error());
    if (!L || !U) return;
    int64_t K = 2, ls[2] = {T, E}, ks[2] = {T, K};
    int32_t ids[T * 2];
    float wts[T * 2];
    qmoe_tensor *tl = mt_tensor(W.logits, QMOE_DTYPE_FLOAT32, 2, ls, NULL),
                *ti = mt_tensor(ids, QMOE_DTYPE_INT32, 2, ks, NULL), *tw = mt_tensor(wts, QMOE_DTYPE_FLOAT32, 2, ks, NULL);
    CHECK(qmoe_moe_layer_route(L, tl, ti, tw) == QMOE_OK);
    for (int hd = 0; hd < 2; hd++) {
        qmoe_dtype d = hd ? QMOE_DTYPE_BFLOAT16 : QMOE_DTYPE_FLOAT32;
        void *got = run_forward(L, NULL, NULL, K, d), *routed = run_forward(L, ids, wts, K, d);
        CHECK_MSG(memcmp(got, routed, (size_t)(T * H) * mt_item(d)) == 0, "gated shared: routed forward differs");
        /* the gate's own effect: differs from the ungated layer */
        void *plain = run_forward(U, NULL, NULL, K, d);
        CHECK_MSG(memcmp(got, plain, (size_t)(T * H) * mt_item(d)) != 0, "gated shared: the gate changed nothing");
        /* float64 layer: routed experts by wts, the shared expert by sigmoid(x . g) */
        void *x = mt_alloc(T * H, d);
        for (int i = 0; i < T * H; i++) mt_set(x, d, i, W.hidden[i]);
        double num = 0, den = 0;
        for (int64_t t = 0; t < T; t++) {
            double xv[H], acc[H] = {0}, sw = shared_weight(x, d, t);
            for (int64_t h = 0; h < H; h++) xv[h] = mt_get(x, d, t * H + h);
            for (int64_t j = 0; j < K + 1; j++) {
                int64_t e = j < K ? ids[t * K + j] : -1, n = j < K ? I : 2 * I;
                const float *gw = j < K ? W.gate + e * I * H : W.sg, *uw = j < K ? W.up + e * I * H : W.su;
                for (int64_t i = 0; i < n; i++) {
                    double g = 0, up = 0;
                    for (int64_t h = 0; h < H; h++) g += gw[i * H + h] * xv[h], up += uw[i * H + h] * xv[h];
                    double a = g / (1 + exp(-g)) * up * (j < K ? wts[t * K + j] : sw);
                    for (int64_t h = 0; h < H; h++)
                        acc[h] += a * (j < K ? W.down[(e * H + h) * I + i] : W.sd[h * 2 * I + i]);
                }
            }
            for (int64_t h = 0; h < H; h++) {
                double dd = mt_get(got, d, t * H + h) - acc[h];
                num += dd * dd, den += acc[h] * acc[h];
            }
        }
        printf("gated shared expert (%s): rel L2 vs float64 %.4f%%\n", hd ? "bf16" : "fp32", 100 * sqrt(num / den));
        CHECK_MSG(sqrt(num / den) < 0.04, "gated shared: error %.5g vs float64", sqrt(num / den));
        free(got), free(routed), free(plain), free(x);
    }
    qmoe_tensor_destroy(tl), qmoe_tensor_destroy(ti), qmoe_tensor_destroy(tw);
    /* a gate without a shared expert, and in a shard: refused */
    qmoe_moe_layer *bad = NULL;
    qmoe_moe_layer_config b = base();
    b.shared_expert_gate = W.sgate;
    MT_EXPECT_FAIL(make(&b, &bad), QMOE_ERR_PARAM_INVALID);
    const void *g[E], *up[E], *dn[E];
    for (int e = 0; e < E; e++) g[e] = W.gate + e * I * H, up[e] = W.up + e * I * H, dn[e] = W.down + e * H * I;
    int32_t held[2] = {0, 1};
    MT_EXPECT_FAIL(qmoe_moe_layer_create_shard_from_float(&c, 2, held, g, up, dn, QMOE_DTYPE_FLOAT32, &bad),
                   QMOE_ERR_PARAM_INVALID);
    CHECK(bad == NULL);
    qmoe_moe_layer_destroy(L), qmoe_moe_layer_destroy(U);
}

/* gpt-oss: expert biases and the clamped SwiGLU, against a float64 layer. */
static void gpt_oss(void)
{
    const float limit = 0.8f, alpha = 1.702f;
    qmoe_moe_layer_config c = base();
    c.gate_up_bias = W.gub, c.down_bias = W.db, c.swiglu_limit = limit, c.swiglu_alpha = alpha;
    qmoe_moe_layer *L = NULL, *P = NULL;
    CHECK_MSG(make(&c, &L) == QMOE_OK, "gpt-oss: %s", qmoe_last_error());
    qmoe_moe_layer_config pc = base();
    CHECK(make(&pc, &P) == QMOE_OK);
    if (!L || !P) return;
    int64_t K = c.top_k, ls[2] = {T, E}, ks[2] = {T, K};
    int32_t ids[T * 4];
    float wts[T * 4];
    qmoe_tensor *tl = mt_tensor(W.logits, QMOE_DTYPE_FLOAT32, 2, ls, NULL),
                *ti = mt_tensor(ids, QMOE_DTYPE_INT32, 2, ks, NULL), *tw = mt_tensor(wts, QMOE_DTYPE_FLOAT32, 2, ks, NULL);
    CHECK(qmoe_moe_layer_route(L, tl, ti, tw) == QMOE_OK);
    void *got = run_forward(L, NULL, NULL, K, QMOE_DTYPE_FLOAT32), *routed = run_forward(L, ids, wts, K, QMOE_DTYPE_FLOAT32),
         *plain = run_forward(P, NULL, NULL, K, QMOE_DTYPE_FLOAT32);
    CHECK_MSG(memcmp(got, routed, (size_t)(T * H) * 4) == 0, "gpt-oss: routed forward differs");
    double num = 0, den = 0, pnum = 0;
    int clamped = 0;
    for (int64_t t = 0; t < T; t++) {
        const float *x = W.hidden + t * H;
        double acc[H] = {0};
        for (int64_t j = 0; j < K; j++) {
            int64_t e = ids[t * K + j];
            for (int64_t h = 0; h < H; h++) acc[h] += wts[t * K + j] * W.db[e * H + h];
            for (int64_t i = 0; i < I; i++) {
                double g = W.gub[e * 2 * I + i], u = W.gub[e * 2 * I + I + i];
                for (int64_t h = 0; h < H; h++)
                    g += (double)W.gate[(e * I + i) * H + h] * x[h], u += (double)W.up[(e * I + i) * H + h] * x[h];
                clamped += g > limit || fabs(u) > limit;
                g = fmin(g, limit), u = fmax(-limit, fmin(u, limit));
                double a = g / (1 + exp(-alpha * g)) * (u + 1) * wts[t * K + j];
                for (int64_t h = 0; h < H; h++) acc[h] += a * W.down[(e * H + h) * I + i];
            }
        }
        for (int64_t h = 0; h < H; h++) {
            double d = ((float *)got)[t * H + h] - acc[h], dp = ((float *)plain)[t * H + h] - acc[h];
            num += d * d, den += acc[h] * acc[h], pnum += dp * dp;
        }
    }
    printf("gpt-oss experts (biases, alpha, limit; %d of %d clamped): rel L2 vs float64 %.4f%% (plain layer %.1f%%)\n",
           clamped, T * 4 * I, 100 * sqrt(num / den), 100 * sqrt(pnum / den));
    CHECK_MSG(sqrt(num / den) < 0.04, "gpt-oss: error %.5g vs float64", sqrt(num / den));
    CHECK(clamped > 0 && sqrt(pnum / den) > 0.2);
    /* refused: a negative alpha, a shard */
    qmoe_moe_layer *bad = NULL;
    qmoe_moe_layer_config b = c;
    b.swiglu_alpha = -1.0f;
    MT_EXPECT_FAIL(make(&b, &bad), QMOE_ERR_PARAM_INVALID);
    const void *g[E], *up[E], *dn[E];
    for (int e = 0; e < E; e++) g[e] = W.gate + e * I * H, up[e] = W.up + e * I * H, dn[e] = W.down + e * H * I;
    int32_t held[2] = {0, 1};
    MT_EXPECT_FAIL(qmoe_moe_layer_create_shard_from_float(&c, 2, held, g, up, dn, QMOE_DTYPE_FLOAT32, &bad),
                   QMOE_ERR_PARAM_INVALID);
    CHECK(bad == NULL);
    qmoe_tensor_destroy(tl), qmoe_tensor_destroy(ti), qmoe_tensor_destroy(tw);
    free(got), free(routed), free(plain);
    qmoe_moe_layer_destroy(L), qmoe_moe_layer_destroy(P);
}

int main(void)
{
    qt_rng r = {2025};
    fill(&r);
    gatings();
    gated_shared();
    gpt_oss();
    return qt_finish("moe_layer_gates");
}
