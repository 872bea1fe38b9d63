/* GroupedMatmulSwigluQuant's SwiGLU variants (qmoe/qmoe.h options swiglu_limit, swiglu_alpha,
 * swiglu_bias; docs/ops/grouped-matmul-swiglu-quant.md): for A8W8 and A8W4, raw and prepacked
 * weights, every fast kernel this CPU runs gives the portable kernel's bits with a variant (one
 * scalar routine computes it for all) and is within the spec's tolerance of them without one (the
 * vector epilogues' exp), and the reference and portable kernels agree with a float64 statement
 * of the formula (exact integer products, the bias, clamp and gpt-oss
 * form in float64, then the per-row int8 quantization). Bad options are refused. */
#include "kernels/kernel.h"
#include "qmoe/quantize.h"
#include "qmoe/weights.h"
#include "test_moe_common.h"

enum { M = 40, H = 64, I = 48, E = 3, N = 2 * I };

typedef struct weights13 {
    int a8w4;
    int64_t groups;
    void *w;     /* [E, H, N] int8 or int4 ND */
    float *sc;   /* [E, N] or [E, G, N] */
    float *asst; /* A8W4 assist [E, N] */
} weights13;

static float G_[E * I * H], U_[E * I * H], BIAS[E * N];
static int8_t X[M * H];
static float XS[M];
static int64_t GL[E] = {13, 13, M}; /* expert 1 gets no rows */

static void quantize(int a8w4, weights13 *q)
{
    qmoe_quant_options o = QMOE_QUANT_OPTIONS_INIT;
    o.mode = a8w4 ? QMOE_QUANT_A8W4 : QMOE_QUANT_A8W8, o.weight_nd = 1, o.group_size = a8w4 ? 32 : 0;
    qmoe_quant_sizes z;
    CHECK(qmoe_quant_sizes_of(&o, E, H, N, &z) == QMOE_OK);
    q->a8w4 = a8w4, q->groups = z.groups;
    q->w = malloc((size_t)z.weight_bytes), q->sc = malloc(4 * (size_t)z.scale_count);
    q->asst = malloc(4 * (size_t)(z.bias_count + 1));
    const void *g[E], *u[E];
    for (int e = 0; e < E; e++) g[e] = G_ + e * I * H, u[e] = U_ + e * I * H;
    CHECK(qmoe_quant_gate_up(g, u, QMOE_DTYPE_FLOAT32, E, I, H, &o, q->w, q->sc, q->asst) == QMOE_OK);
}

static double wget(const weights13 *q, int64_t e, int64_t k, int64_t n)
{
    int64_t i = (e * H + k) * N + n;
    double v;
    if (q->a8w4) {
        uint8_t b = ((const uint8_t *)q->w)[i / 2];
        int x = i % 2 ? b >> 4 : b & 15;
        v = x >= 8 ? x - 16 : x;
    } else {
        v = ((const int8_t *)q->w)[i];
    }
    int64_t G = q->groups;
    return v * q->sc[G ? (e * G + k / (H / G)) * N + n : e * N + n];
}

/* The float64 statement: C exact, then the variant, then int8 per row. */
static void reference(const weights13 *q, float limit, float alpha, const float *bias, int8_t *out, float *scale)
{
    for (int64_t m = 0; m < M; m++) {
        int64_t e = m < GL[0] ? 0 : m < GL[1] ? 1 : 2;
        double s[I], amax = 0;
        for (int64_t j = 0; j < I; j++) {
            double c[2];
            for (int h2 = 0; h2 < 2; h2++) {
                double acc = 0;
                for (int64_t k = 0; k < H; k++) acc += X[m * H + k] * wget(q, e, k, j + h2 * I);
                c[h2] = acc * XS[m] + (bias ? bias[e * N + j + h2 * I] : 0);
            }
            double a = c[0], l = c[1];
            if (limit > 0) a = fmin(a, limit), l = fmax(-limit, fmin(l, limit));
            s[j] = alpha > 0 ? a / (1 + exp(-alpha * a)) * (l + 1) : a / (1 + exp(-a)) * l;
            amax = fmax(amax, fabs(s[j]));
        }
        scale[m] = (float)(amax / 127);
        for (int64_t j = 0; j < I; j++) out[m * I + j] = (int8_t)(amax > 0 ? nearbyint(s[j] / (amax / 127)) : 0);
    }
}

/* Runs the operator with kernel k (raw or prepacked weights); 0 on success. */
static int run(const weights13 *q, int k, int packed, float limit, float alpha, const float *bias, int8_t *out,
               float *scale)
{
    int64_t ws3[3] = {E, H, N}, ss2[2] = {E, N}, ss3[3] = {E, q->groups, N}, xs2[2] = {M, H}, os[2] = {M, I};
    int64_t m1 = M, e1 = E;
    qmoe_tensor *tw = mt_tensor(q->w, q->a8w4 ? QMOE_DTYPE_INT4 : QMOE_DTYPE_INT8, 3, ws3, NULL);
    qmoe_tensor *ts = q->groups ? mt_tensor(q->sc, QMOE_DTYPE_FLOAT32, 3, ss3, NULL)
                                : mt_tensor(q->sc, QMOE_DTYPE_FLOAT32, 2, ss2, NULL);
    qmoe_tensor *tb = q->a8w4 ? mt_tensor(q->asst, QMOE_DTYPE_FLOAT32, 2, ss2, NULL) : NULL;
    qmoe_tensor *tx = mt_tensor(X, QMOE_DTYPE_INT8, 2, xs2, NULL), *txs = mt_tensor(XS, QMOE_DTYPE_FLOAT32, 1, &m1, NULL);
    qmoe_tensor *tg = mt_tensor(GL, QMOE_DTYPE_INT64, 1, &e1, NULL), *to = mt_tensor(out, QMOE_DTYPE_INT8, 2, os, NULL);
    qmoe_tensor *tos = mt_tensor(scale, QMOE_DTYPE_FLOAT32, 1, &m1, NULL), *view = NULL;
    qmoe_weights *pw = NULL;
    qmoe_grouped_matmul_swiglu_quant_options o = QMOE_GROUPED_MATMUL_SWIGLU_QUANT_OPTIONS_INIT;
    o.kernel = (qmoe_kernel)k, o.threads = 3, o.swiglu_limit = limit, o.swiglu_alpha = alpha, o.swiglu_bias = bias;
    qmoe_status st = QMOE_OK;
    if (packed) {
        qmoe_weights_options wo = QMOE_WEIGHTS_OPTIONS_INIT;
        wo.kernel = (qmoe_kernel)k;
        st = qmoe_weights_prepack(tw, ts, tb, &wo, &pw);
        if (!st) st = qmoe_weights_tensor(pw, &view);
    }
    qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
    uint64_t wsz = 0;
    if (!st)
        st = qmoe_grouped_matmul_swiglu_quant_workspace_size(tx, packed ? view : tw, packed ? NULL : tb, NULL,
                                                             packed ? NULL : ts, txs, tg, to, tos, NULL, &o, &wsz, &ex);
    void *w = st ? NULL : aligned_alloc(64, (size_t)(wsz + 64) / 64 * 64);
    if (!st) st = qmoe_grouped_matmul_swiglu_quant(w, wsz, ex, NULL);
    CHECK_MSG(st == QMOE_OK, "kernel %s%s: %s", qmoe_kernel_name((qmoe_kernel)k), packed ? " prepacked" : "",
              qmoe_last_error());
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
    free(w);
    qmoe_tensor *all[] = {tw, ts, tb, tx, txs, tg, to, tos, view};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) qmoe_tensor_destroy(all[i]);
    qmoe_weights_destroy(pw);
    return st != QMOE_OK;
}

static void variant_case(const char *name, int a8w4, float limit, float alpha, const float *bias)
{
    weights13 q;
    quantize(a8w4, &q);
    int8_t want[M * I], ref[M * I], got[M * I];
    float wscale[M], rscale[M], gscale[M];
    reference(&q, limit, alpha, bias, want, wscale);
    if (run(&q, QMOE_KERNEL_REFERENCE, 0, limit, alpha, bias, ref, rscale)) return;
    int off = 0, worst = 0;
    double sworst = 0;
    for (int i = 0; i < M * I; i++) {
        int d = abs(ref[i] - want[i]);
        off += d != 0;
        if (d > worst) worst = d;
    }
    for (int m = 0; m < M; m++) {
        double e = fabs(rscale[m] - wscale[m]) / wscale[m];
        if (e > sworst) sworst = e;
    }
    printf("%-34s vs float64: %d of %d int8 values off (at most %d), scale rel error %.3g\n", name, off, M * I,
           worst, sworst);
    CHECK_MSG(worst <= 1 && off <= M * I / 50, "%s: %d values off the float64 formula (worst %d)", name, off, worst);
    CHECK_MSG(sworst < 1e-4, "%s: scales off the float64 formula by %.3g", name, sworst);
    /* The fast kernels share one fold of the products (the reference sums A8W4's groups in its
     * own order, so it may differ from them in the last bit, with or without a variant): each
     * gives the portable kernel's bits, and those are the float64 formula's too. */
    int8_t base[M * I];
    float bscale[M];
    if (run(&q, QMOE_KERNEL_PORTABLE, 0, limit, alpha, bias, base, bscale)) return;
    off = worst = 0;
    for (int i = 0; i < M * I; i++) {
        int d = abs(base[i] - want[i]);
        off += d != 0;
        if (d > worst) worst = d;
    }
    CHECK_MSG(worst <= 1 && off <= M * I / 50, "%s: portable: %d values off the float64 formula", name, off);
    if (!a8w4) CHECK_MSG(memcmp(base, ref, sizeof base) == 0, "%s: portable differs from the reference", name);
    for (int k = QMOE_KERNEL_PORTABLE; k <= QMOE_KERNEL_NEON_I8MM; k++) {
        if (!qmoe_kernel_lookup(k)) continue;
        for (int packed = 0; packed < 2; packed++) {
            memset(got, 0x55, sizeof got);
            if (run(&q, k, packed, limit, alpha, bias, got, gscale)) continue;
            if (alpha > 0 || bias) { /* one scalar routine for every kernel: the same bits */
                CHECK_MSG(memcmp(got, base, sizeof got) == 0 && memcmp(gscale, bscale, sizeof gscale) == 0,
                          "%s: kernel %s%s differs from the portable kernel", name, qmoe_kernel_name((qmoe_kernel)k),
                          packed ? " (prepacked)" : "");
                continue;
            }
            /* the vector epilogues' exp is within about 1 ulp of expf: the spec's tolerance */
            int far = 0;
            for (int i = 0; i < M * I; i++) far += abs(got[i] - base[i]) > 1;
            for (int m = 0; m < M; m++) far += fabs(gscale[m] - bscale[m]) > 1e-6 * fabs(bscale[m]);
            CHECK_MSG(far == 0, "%s: kernel %s%s: %d values past the tolerance of the portable kernel's", name,
                      qmoe_kernel_name((qmoe_kernel)k), packed ? " (prepacked)" : "", far);
        }
    }
    free(q.w), free(q.sc), free(q.asst);
}

static void bad_options(void)
{
    weights13 q;
    quantize(0, &q);
    int8_t out[M * I];
    float sc[M];
    memset(out, 7, sizeof out);
    float bad[3][2] = {{-1.0f, 0.0f}, {0.0f, -0.5f}, {NAN, 0.0f}};
    for (int i = 0; i < 3; i++) {
        int64_t ws3[3] = {E, H, N}, ss2[2] = {E, N}, xs2[2] = {M, H}, os[2] = {M, I}, m1 = M, e1 = E;
        qmoe_tensor *tw = mt_tensor(q.w, QMOE_DTYPE_INT8, 3, ws3, NULL), *ts = mt_tensor(q.sc, QMOE_DTYPE_FLOAT32, 2, ss2, NULL),
                    *tx = mt_tensor(X, QMOE_DTYPE_INT8, 2, xs2, NULL), *txs = mt_tensor(XS, QMOE_DTYPE_FLOAT32, 1, &m1, NULL),
                    *tg = mt_tensor(GL, QMOE_DTYPE_INT64, 1, &e1, NULL), *to = mt_tensor(out, QMOE_DTYPE_INT8, 2, os, NULL),
                    *tos = mt_tensor(sc, QMOE_DTYPE_FLOAT32, 1, &m1, NULL);
        qmoe_grouped_matmul_swiglu_quant_options o = QMOE_GROUPED_MATMUL_SWIGLU_QUANT_OPTIONS_INIT;
        o.swiglu_limit = bad[i][0], o.swiglu_alpha = bad[i][1];
        qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
        uint64_t wsz = 0;
        MT_EXPECT_FAIL(qmoe_grouped_matmul_swiglu_quant_workspace_size(tx, tw, NULL, NULL, ts, txs, tg, to, tos, NULL,
                                                                       &o, &wsz, &ex),
                       QMOE_ERR_PARAM_INVALID);
        CHECK(ex == NULL);
        qmoe_tensor *all[] = {tw, ts, tx, txs, tg, to, tos};
        for (size_t j = 0; j < sizeof all / sizeof all[0]; j++) qmoe_tensor_destroy(all[j]);
    }
    for (int i = 0; i < M * I; i++) CHECK(out[i] == 7);
    free(q.w), free(q.sc), free(q.asst);
}

int main(void)
{
    qt_rng r = {77};
    for (int i = 0; i < E * I * H; i++) G_[i] = qt_uniform(&r, -0.2f, 0.2f), U_[i] = qt_uniform(&r, -0.2f, 0.2f);
    for (int i = 0; i < E * N; i++) BIAS[i] = qt_uniform(&r, -1.0f, 1.0f);
    for (int i = 0; i < M * H; i++) X[i] = (int8_t)qt_uniform(&r, -127.0f, 127.0f);
    for (int i = 0; i < M; i++) XS[i] = qt_uniform(&r, 0.01f, 0.05f);
    for (int a8w4 = 0; a8w4 < 2; a8w4++) {
        const char *mode = a8w4 ? "a8w4 g32" : "a8w8";
        char name[64];
        snprintf(name, sizeof name, "%s plain", mode);
        variant_case(name, a8w4, 0.0f, 0.0f, NULL);
        snprintf(name, sizeof name, "%s limit 0.5", mode);
        variant_case(name, a8w4, 0.5f, 0.0f, NULL);
        snprintf(name, sizeof name, "%s gpt-oss (alpha 1.702, 0.5)", mode);
        variant_case(name, a8w4, 0.5f, 1.702f, NULL);
        snprintf(name, sizeof name, "%s gpt-oss + bias", mode);
        variant_case(name, a8w4, 0.5f, 1.702f, BIAS);
        snprintf(name, sizeof name, "%s bias, plain SwiGLU", mode);
        variant_case(name, a8w4, 0.0f, 0.0f, BIAS);
        snprintf(name, sizeof name, "%s alpha, no clamp", mode);
        variant_case(name, a8w4, 0.0f, 1.702f, NULL);
    }
    bad_options();
    return qt_finish("swiglu_variant");
}
