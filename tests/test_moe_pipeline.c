/* The MoE layer through the C API: MoeGatingTopKSoftmax -> MoeInitRoutingV2 with fused dynamic
 * int8 quant -> GroupedMatmulSwigluQuant (A8W8, ND weights) -> GroupedMatmul (the down
 * projection, per-token dequant) -> MoeFinalizeRoutingV2, against a
 * double MoE with the same quantization (per-token int8 activations, per-channel weights). */
#include "qmoe/grouped_matmul.h"
#include "test_moe_common.h"

enum { N = 40, H = 64, E = 8, K = 2, I = 32 }; /* tokens, hidden, experts, top-k, intermediate */

/* Per-row symmetric int8 of v[0..n) in double: q and the scale. */
static double quant_ref(const double *v, int n, double *q)
{
    double amax = 0;
    for (int j = 0; j < n; j++) amax = fmax(amax, fabs(v[j]));
    double s = amax / 127.0;
    for (int j = 0; j < n; j++) q[j] = s > 0 ? nearbyint(v[j] / s) : 0;
    return s;
}

/* gating -> init routing -> finalize queued on one stream with no synchronization between
 * them: each operator must read the indices its predecessor wrote (the buffers start as garbage
 * that would be refused). Identity experts: out[i] = x[i] * sum of the token's top-k weights. */
static void check_stream_chain(qt_rng *r)
{
    enum { SN = 33, SH = 48, SE = 16, SK = 4 };
    static float x[SN * SH], logits[SN * SE], y[SN * SK], rows[SN * SK * SH], out[SN * SH];
    static int32_t ids[SN * SK], rowi[SN * SK], ri[SN * SK];
    static int64_t cnt[SE];
    mt_fill(r, x, QMOE_DTYPE_FLOAT32, SN * SH, -2, 2);
    mt_fill(r, logits, QMOE_DTYPE_FLOAT32, SN * SE, -3, 3);
    memset(ids, 0x5A, sizeof ids);
    memset(ri, 0x5A, sizeof ri);
    int64_t xs[2] = {SN, SH}, ls[2] = {SN, SE}, ks[2] = {SN, SK}, rs[2] = {SN * SK, SH},
            nk = SN * SK, e = SE;
    qmoe_tensor *t[] = {mt_tensor(logits, QMOE_DTYPE_FLOAT32, 2, ls, NULL),
                        mt_tensor(y, QMOE_DTYPE_FLOAT32, 2, ks, NULL),
                        mt_tensor(ids, QMOE_DTYPE_INT32, 2, ks, NULL),
                        mt_tensor(rowi, QMOE_DTYPE_INT32, 2, ks, NULL),
                        mt_tensor(x, QMOE_DTYPE_FLOAT32, 2, xs, NULL),
                        mt_tensor(rows, QMOE_DTYPE_FLOAT32, 2, rs, NULL),
                        mt_tensor(ri, QMOE_DTYPE_INT32, 1, &nk, NULL),
                        mt_tensor(cnt, QMOE_DTYPE_INT64, 1, &e, NULL),
                        mt_tensor(out, QMOE_DTYPE_FLOAT32, 2, xs, NULL)};
    qmoe_device *dev = NULL;
    qmoe_device_options dopt = {.threads = 2};
    qmoe_stream *stream = NULL;
    CHECK(qmoe_device_create(&dopt, &dev) == QMOE_OK);
    CHECK(qmoe_stream_create(dev, &stream) == QMOE_OK);
    uint64_t ws;
    qmoe_moe_executor *g = NULL, *ir = NULL, *fin = NULL;
    qmoe_moe_routing_attrs ra = {.expert_num = SE, .tokens_mode = QMOE_MOE_TOKENS_COUNT,
                                 .quant_mode = QMOE_MOE_QUANT_NONE};
    CHECK(qmoe_moe_gating_top_k_softmax_workspace_size(t[0], NULL, SK, t[1], t[2], t[3], NULL, &ws,
                                                       &g) == QMOE_OK);
    CHECK(qmoe_moe_init_routing_workspace_size(t[4], t[2], NULL, NULL, &ra, t[5], t[6], t[7], NULL,
                                               NULL, &ws, &ir) == QMOE_OK);
    void *w = malloc(ws);
    uint64_t ws2;
    CHECK(qmoe_moe_finalize_routing_workspace_size(t[5], t[6], NULL, NULL, NULL, t[1], NULL, 2, t[8],
                                                   NULL, &ws2, &fin) == QMOE_OK);
    CHECK(qmoe_moe_gating_top_k_softmax(NULL, 0, g, stream) == QMOE_OK);
    CHECK(qmoe_moe_init_routing(w, ws, ir, stream) == QMOE_OK);
    CHECK(qmoe_moe_finalize_routing(NULL, 0, fin, stream) == QMOE_OK);
    CHECK_MSG(qmoe_stream_synchronize(stream) == QMOE_OK, "%s", qmoe_last_error());
    for (int n = 0; n < SN; n++) {
        double m = -INFINITY, s = 0, sel[SE], top = 0;
        for (int j = 0; j < SE; j++) m = fmax(m, logits[n * SE + j]);
        for (int j = 0; j < SE; j++) s += sel[j] = exp(logits[n * SE + j] - m);
        for (int j = 0; j < SK; j++) { /* the k largest, by repeated selection */
            int b = 0;
            for (int c = 1; c < SE; c++)
                if (sel[c] > sel[b]) b = c;
            top += sel[b] / s;
            sel[b] = -1;
        }
        for (int h = 0; h < SH; h++)
            CHECK_MSG(fabs(out[n * SH + h] - x[n * SH + h] * top) <= 1e-5 * (1 + fabs(x[n * SH + h])),
                      "token %d col %d", n, h);
    }
    free(w);
    qmoe_moe_executor_destroy(g);
    qmoe_moe_executor_destroy(ir);
    qmoe_moe_executor_destroy(fin);
    qmoe_stream_destroy(stream);
    qmoe_device_destroy(dev);
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) qmoe_tensor_destroy(t[i]);
}

int main(void)
{
    qt_rng r = {17};
    static uint16_t x[N * H];
    static float logits[N * E], y[N * K], w1s[E * 2 * I], w2s[E * H], xs[N * K], hs[N * K];
    static float down[N * K * H], out[N * H];
    static int8_t w1[E * H * 2 * I], w2[E * I * H], xq[N * K * H], hq[N * K * I];
    static int32_t ids[N * K], rowi[N * K], ri[N * K];
    static int64_t cum[E];
    mt_fill(&r, x, QMOE_DTYPE_BFLOAT16, N * H, -1, 1);
    mt_fill(&r, logits, QMOE_DTYPE_FLOAT32, N * E, -3, 3);
    for (int i = 0; i < E * H * 2 * I; i++) w1[i] = (int8_t)qt_range(&r, -127, 127);
    for (int i = 0; i < E * I * H; i++) w2[i] = (int8_t)qt_range(&r, -127, 127);
    mt_fill(&r, w1s, QMOE_DTYPE_FLOAT32, E * 2 * I, 0.001f, 0.01f);
    mt_fill(&r, w2s, QMOE_DTYPE_FLOAT32, E * H, 0.001f, 0.01f);

    int64_t xs2[2] = {N, H}, ls[2] = {N, E}, ks[2] = {N, K}, nk = N * K, e = E;
    int64_t qs[2] = {N * K, H}, w1sh[3] = {E, H, 2 * I}, w1ss[2] = {E, 2 * I}, hqs[2] = {N * K, I};
    int64_t ds[2] = {N * K, H};
    qmoe_tensor *t_logits = mt_tensor(logits, QMOE_DTYPE_FLOAT32, 2, ls, NULL);
    qmoe_tensor *t_y = mt_tensor(y, QMOE_DTYPE_FLOAT32, 2, ks, NULL);
    qmoe_tensor *t_ids = mt_tensor(ids, QMOE_DTYPE_INT32, 2, ks, NULL);
    qmoe_tensor *t_rowi = mt_tensor(rowi, QMOE_DTYPE_INT32, 2, ks, NULL);
    qmoe_tensor *t_x = mt_tensor(x, QMOE_DTYPE_BFLOAT16, 2, xs2, NULL);
    qmoe_tensor *t_xq = mt_tensor(xq, QMOE_DTYPE_INT8, 2, qs, NULL);
    qmoe_tensor *t_ri = mt_tensor(ri, QMOE_DTYPE_INT32, 1, &nk, NULL);
    qmoe_tensor *t_cum = mt_tensor(cum, QMOE_DTYPE_INT64, 1, &e, NULL);
    qmoe_tensor *t_xs = mt_tensor(xs, QMOE_DTYPE_FLOAT32, 1, &nk, NULL);
    qmoe_tensor *t_w1 = mt_tensor(w1, QMOE_DTYPE_INT8, 3, w1sh, NULL);
    qmoe_tensor *t_w1s = mt_tensor(w1s, QMOE_DTYPE_FLOAT32, 2, w1ss, NULL);
    qmoe_tensor *t_hq = mt_tensor(hq, QMOE_DTYPE_INT8, 2, hqs, NULL);
    qmoe_tensor *t_hs = mt_tensor(hs, QMOE_DTYPE_FLOAT32, 1, &nk, NULL);
    qmoe_tensor *t_down = mt_tensor(down, QMOE_DTYPE_FLOAT32, 2, ds, NULL);
    qmoe_tensor *t_out = mt_tensor(out, QMOE_DTYPE_FLOAT32, 2, xs2, NULL);
    uint64_t ws;
    qmoe_moe_executor *ex = NULL;

    CHECK(qmoe_moe_gating_top_k_softmax_workspace_size(t_logits, NULL, K, t_y, t_ids, t_rowi, NULL,
                                                       &ws, &ex) == QMOE_OK);
    CHECK(qmoe_moe_gating_top_k_softmax(NULL, ws, ex, NULL) == QMOE_OK);
    qmoe_moe_executor_destroy(ex);

    qmoe_moe_routing_attrs ra = {.expert_num = E, .tokens_mode = QMOE_MOE_TOKENS_CUMSUM,
                                 .quant_mode = QMOE_MOE_QUANT_DYNAMIC};
    CHECK_MSG(qmoe_moe_init_routing_workspace_size(t_x, t_ids, NULL, NULL, &ra, t_xq, t_ri, t_cum,
                                                   t_xs, NULL, &ws, &ex) == QMOE_OK,
              "%s", qmoe_last_error());
    void *w = malloc(ws);
    CHECK(qmoe_moe_init_routing(w, ws, ex, NULL) == QMOE_OK);
    free(w);
    qmoe_moe_executor_destroy(ex);

    qmoe_grouped_matmul_swiglu_quant_executor *gx = NULL;
    CHECK_MSG(qmoe_grouped_matmul_swiglu_quant_workspace_size(t_xq, t_w1, NULL, NULL, t_w1s, t_xs, t_cum, t_hq,
                                                   t_hs, NULL, NULL, &ws, &gx) == QMOE_OK,
              "%s", qmoe_last_error());
    w = malloc(ws ? ws : 1);
    CHECK(qmoe_grouped_matmul_swiglu_quant(w, ws, gx, NULL) == QMOE_OK);
    free(w);
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(gx);

    /* the down projection: GroupedMatmul, per-token dequant to float32 */
    int64_t w2sh[3] = {E, I, H}, w2ss[2] = {E, H};
    qmoe_tensor *t_w2 = mt_tensor(w2, QMOE_DTYPE_INT8, 3, w2sh, NULL);
    qmoe_tensor *t_w2s = mt_tensor(w2s, QMOE_DTYPE_FLOAT32, 2, w2ss, NULL);
    qmoe_grouped_matmul_executor *dx = NULL;
    CHECK_MSG(qmoe_grouped_matmul_workspace_size(t_hq, t_w2, NULL, t_w2s, t_hs, t_cum, 0, t_down, NULL,
                                                 &ws, &dx) == QMOE_OK,
              "%s", qmoe_last_error());
    w = malloc(ws ? ws : 1);
    CHECK(qmoe_grouped_matmul(w, ws, dx, NULL) == QMOE_OK);
    free(w);
    qmoe_grouped_matmul_executor_destroy(dx);
    qmoe_tensor_destroy(t_w2);
    qmoe_tensor_destroy(t_w2s);

    CHECK(qmoe_moe_finalize_routing_workspace_size(t_down, t_ri, NULL, NULL, NULL, t_y, t_ids, 2,
                                                   t_out, NULL, &ws, &ex) == QMOE_OK);
    CHECK(qmoe_moe_finalize_routing(NULL, ws, ex, NULL) == QMOE_OK);
    qmoe_moe_executor_destroy(ex);

    /* the reference MoE, token by token */
    double err_max = 0, ref_max = 0;
    for (int n = 0; n < N; n++) {
        double xv[H], q[2 * I > H ? 2 * I : H], c[2 * I], act[I], qa[I], ref[H] = {0};
        double lmax = -INFINITY, lsum = 0;
        for (int j = 0; j < E; j++) lmax = fmax(lmax, logits[n * E + j]);
        for (int j = 0; j < E; j++) lsum += exp(logits[n * E + j] - lmax);
        for (int h = 0; h < H; h++) xv[h] = mt_get(x, QMOE_DTYPE_BFLOAT16, n * H + h);
        double sx = quant_ref(xv, H, q);
        for (int j = 0; j < K; j++) {
            int ex_id = ids[n * K + j];
            double wgt = exp(logits[n * E + ex_id] - lmax) / lsum;
            for (int o = 0; o < 2 * I; o++) {
                double acc = 0;
                for (int h = 0; h < H; h++) acc += q[h] * w1[(ex_id * H + h) * 2 * I + o];
                c[o] = acc * sx * w1s[ex_id * 2 * I + o];
            }
            for (int o = 0; o < I; o++) act[o] = c[o] / (1 + exp(-c[o])) * c[I + o];
            double sa = quant_ref(act, I, qa);
            for (int h = 0; h < H; h++) {
                double acc = 0;
                for (int i = 0; i < I; i++) acc += qa[i] * w2[(ex_id * I + i) * H + h];
                ref[h] += wgt * acc * sa * w2s[ex_id * H + h];
            }
        }
        for (int h = 0; h < H; h++) {
            /* not fmax(): a float-minus-double fmax reduction crashes GCC 12's aarch64
             * vectorizer (ICE in vect_transform_reduction); NaN is ignored either way */
            double d = fabs(out[n * H + h] - ref[h]);
            if (d > err_max) err_max = d;
            ref_max = fmax(ref_max, fabs(ref[h]));
        }
    }
    CHECK_MSG(ref_max > 0 && err_max <= 0.03 * ref_max, "max error %.6g of max %.6g", err_max, ref_max);
    qmoe_tensor *all[] = {t_logits, t_y, t_ids, t_rowi, t_x, t_xq, t_ri, t_cum, t_xs, t_w1, t_w1s,
                          t_hq, t_hs, t_down, t_out};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) qmoe_tensor_destroy(all[i]);
    check_stream_chain(&r);
    return qt_finish("moe_pipeline");
}
