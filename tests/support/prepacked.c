#include "support/prepacked.h"

#include <stdlib.h>
#include <string.h>

#include "support/testlib.h"

qmoe_tensor *qt_tensor(const int64_t *shape, int nd, qmoe_dtype dt, void *data)
{
    qmoe_tensor *t = NULL;
    CHECK(qmoe_tensor_create(shape, nd, NULL, dt, QMOE_FORMAT_ND, data, &t) == QMOE_OK);
    return t;
}

void qt_run_prepacked(qmoe_weights *pw, int kernel, int threads, int64_t M, int64_t K, int64_t N,
                      int64_t E, const int8_t *x, const float *xs, const int64_t *gl, int8_t *q,
                      float *scale)
{
    int64_t xd[2] = {M, K}, od[2] = {M, N / 2};
    qmoe_tensor *view = NULL, *tx = qt_tensor(xd, 2, QMOE_DTYPE_INT8, (void *)(uintptr_t)x);
    qmoe_tensor *txs = qt_tensor(&M, 1, QMOE_DTYPE_FLOAT32, (void *)(uintptr_t)xs);
    qmoe_tensor *tgl = qt_tensor(&E, 1, QMOE_DTYPE_INT64, (void *)(uintptr_t)gl);
    qmoe_tensor *to = qt_tensor(od, 2, QMOE_DTYPE_INT8, q);
    qmoe_tensor *tos = qt_tensor(&M, 1, QMOE_DTYPE_FLOAT32, scale);
    CHECK(qmoe_weights_tensor(pw, &view) == QMOE_OK);
    qmoe_grouped_matmul_swiglu_quant_options o = {.kernel = (qmoe_kernel)kernel, .threads = threads};
    uint64_t wsb = 0;
    qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
    qmoe_status st = qmoe_grouped_matmul_swiglu_quant_workspace_size(tx, view, NULL, NULL, NULL, txs, tgl, to,
                                                                     tos, NULL, &o, &wsb, &ex);
    CHECK_MSG(st == QMOE_OK, "plan: %s", qmoe_last_error());
    if (!st) {
        void *wsp = wsb ? aligned_alloc(64, (wsb + 63) / 64 * 64) : NULL;
        CHECK(qmoe_grouped_matmul_swiglu_quant(wsp, wsb, ex, NULL) == QMOE_OK);
        free(wsp);
    }
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
    qmoe_tensor_destroy(view);
    qmoe_tensor_destroy(tx);
    qmoe_tensor_destroy(txs);
    qmoe_tensor_destroy(tgl);
    qmoe_tensor_destroy(to);
    qmoe_tensor_destroy(tos);
}

void qt_check_same_outputs(qt_rng *r, qmoe_weights *a, qmoe_weights *b, int kernel, int64_t K,
                           int64_t N, int64_t E, const char *what)
{
    for (int64_t M = 1; M <= 40; M += 13) {
        int8_t *x = malloc((size_t)(M * K)), *q1 = malloc((size_t)(M * N)), *q2 = malloc((size_t)(M * N));
        float *xs = malloc(sizeof(float) * (size_t)M), *s1 = malloc(sizeof(float) * (size_t)M),
              *s2 = malloc(sizeof(float) * (size_t)M);
        int64_t *gl = malloc(sizeof(int64_t) * (size_t)E);
        for (int64_t i = 0; i < M * K; i++) x[i] = (int8_t)qt_range(r, -128, 127);
        for (int64_t i = 0; i < M; i++) xs[i] = qt_uniform(r, 0.001f, 0.01f);
        for (int64_t e = 0, at = 0; e < E; e++)
            gl[e] = at = M == 1 || e == E - 1 ? M : at + qt_range(r, 0, M - at);
        for (int threads = 1; threads <= 3; threads += 2) {
            memset(q1, 0x5A, (size_t)(M * N / 2));
            memset(q2, 0x3C, (size_t)(M * N / 2));
            qt_run_prepacked(a, kernel, threads, M, K, N, E, x, xs, gl, q1, s1);
            qt_run_prepacked(b, kernel, threads, M, K, N, E, x, xs, gl, q2, s2);
            CHECK_MSG(!memcmp(q1, q2, (size_t)(M * N / 2)) && !memcmp(s1, s2, sizeof(float) * (size_t)M),
                      "%s %s M=%lld threads %d: outputs differ", qmoe_kernel_name((qmoe_kernel)kernel),
                      what, (long long)M, threads);
        }
        free(x), free(q1), free(q2), free(xs), free(s1), free(s2), free(gl);
    }
}

qmoe_status qt_prepack_int8(const int8_t *w, const float *ws, int64_t E, int64_t K, int64_t N,
                            int64_t G, const qmoe_weights_options *o, int64_t slice,
                            qmoe_weights **out)
{
    qmoe_weights_options opt = *o;
    opt.experts = slice ? E : 0;
    int64_t n0 = slice ? slice : E;
    qmoe_status st = QMOE_OK;
    for (int64_t e0 = 0, ne; !st && e0 < E; e0 += ne) {
        ne = E - e0 < n0 ? E - e0 : n0;
        int64_t wd[3] = {ne, K, N}, sd[3] = {ne, G, N};
        qmoe_tensor *tw = qt_tensor(wd, 3, QMOE_DTYPE_INT8, (void *)(uintptr_t)(w + e0 * K * N));
        qmoe_tensor *ts = qt_tensor(sd, 3, QMOE_DTYPE_FLOAT32, (void *)(uintptr_t)(ws + e0 * G * N));
        st = e0 == 0 ? qmoe_weights_prepack(tw, ts, NULL, &opt, out) : qmoe_weights_append(*out, tw, ts, NULL);
        qmoe_tensor_destroy(tw);
        qmoe_tensor_destroy(ts);
    }
    return st;
}

void qt_check_bad_append(const int8_t *good, const int8_t *bad, const float *ws, int64_t K,
                         int64_t N, int64_t G, const qmoe_weights_options *o, const char *want)
{
    qmoe_weights_options opt = *o;
    opt.experts = 4;
    int64_t wd[3] = {2, K, N}, sd[3] = {2, G, N};
    qmoe_tensor *tw = qt_tensor(wd, 3, QMOE_DTYPE_INT8, (void *)(uintptr_t)good);
    qmoe_tensor *ts = qt_tensor(sd, 3, QMOE_DTYPE_FLOAT32, (void *)(uintptr_t)ws);
    qmoe_weights *pw = NULL;
    CHECK(qmoe_weights_prepack(tw, ts, NULL, &opt, &pw) == QMOE_OK);
    qmoe_tensor_destroy(tw);
    qmoe_tensor_destroy(ts);
    tw = qt_tensor(wd, 3, QMOE_DTYPE_INT8, (void *)(uintptr_t)(bad + 2 * K * N));
    ts = qt_tensor(sd, 3, QMOE_DTYPE_FLOAT32, (void *)(uintptr_t)(ws + 2 * G * N));
    CHECK(qmoe_weights_append(pw, tw, ts, NULL) == QMOE_ERR_PARAM_INVALID);
    CHECK_MSG(strstr(qmoe_last_error(), want) != NULL, "message: %s (expected %s)", qmoe_last_error(), want);
    int8_t *back = malloc((size_t)(K * N));
    CHECK(qmoe_weights_unpack(pw, 2, back) == QMOE_ERR_PARAM_INVALID); /* still not packed */
    qmoe_tensor_destroy(tw);
    tw = qt_tensor(wd, 3, QMOE_DTYPE_INT8, (void *)(uintptr_t)(good + 2 * K * N));
    CHECK(qmoe_weights_append(pw, tw, ts, NULL) == QMOE_OK); /* the good slice completes it */
    CHECK(qmoe_weights_unpack(pw, 3, back) == QMOE_OK && !memcmp(back, good + 3 * K * N, (size_t)(K * N)));
    qmoe_tensor_destroy(tw);
    qmoe_tensor_destroy(ts);
    qmoe_weights_destroy(pw);
    free(back);
}
