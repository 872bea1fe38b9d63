/* DynamicQuant against a double oracle: every input dtype, with and without smooth scales (x's
 * dtype and float32), ranks 2 and 3, M = 0 and 1, strided inputs and outputs, thread counts,
 * streams, the rounding rule, and every validation rule. */
#include "test_moe_common.h"

typedef struct dq_case {
    qmoe_dtype dt, sdt; /* sdt: smooth dtype, or -1 for none */
    int nd;
    int64_t shape[3];
    int strided;
    int threads;
} dq_case;

/* Runs one case; returns the number of quantized values off the oracle by one. */
static void run_case(qt_rng *r, const dq_case *c)
{
    int nd = c->nd;
    int64_t H = c->shape[nd - 1], rows = 1;
    for (int d = 0; d < nd - 1; d++) rows *= c->shape[d];
    int64_t n = rows * H, step = c->strided ? 2 : 1;
    void *x = mt_alloc(n * step, c->dt);
    mt_fill(r, x, c->dt, n * step, -3.0f, 3.0f);
    void *sm = NULL;
    if ((int)c->sdt >= 0) {
        sm = mt_alloc(H, c->sdt);
        mt_fill(r, sm, c->sdt, H, 0.25f, 2.0f);
    }
    int64_t ypitch = c->strided ? H + 5 : H;
    int8_t *y = mt_alloc(rows * ypitch, QMOE_DTYPE_INT8);
    float *scale = mt_alloc(rows * step, QMOE_DTYPE_FLOAT32);

    int64_t xst[3], yst[3], sst[2];
    int64_t acc = step;
    for (int d = nd - 1; d >= 0; d--) {
        xst[d] = acc;
        acc *= c->shape[d];
    }
    acc = 1;
    for (int d = nd - 1; d >= 0; d--) {
        yst[d] = acc;
        acc *= d == nd - 1 ? ypitch : c->shape[d];
    }
    acc = step;
    for (int d = nd - 2; d >= 0; d--) {
        sst[d] = acc;
        acc *= c->shape[d];
    }
    qmoe_tensor *tx = mt_tensor(x, c->dt, nd, c->shape, xst);
    qmoe_tensor *ts = sm ? mt_tensor(sm, c->sdt, 1, &H, NULL) : NULL;
    qmoe_tensor *ty = mt_tensor(y, QMOE_DTYPE_INT8, nd, c->shape, yst);
    qmoe_tensor *tsc = mt_tensor(scale, QMOE_DTYPE_FLOAT32, nd - 1, c->shape, sst);
    qmoe_moe_options o = {.threads = c->threads};
    uint64_t ws = 1;
    qmoe_moe_executor *ex = NULL;
    qmoe_status st = qmoe_dynamic_quant_workspace_size(tx, ts, ty, tsc, &o, &ws, &ex);
    CHECK_MSG(st == QMOE_OK, "plan: %s", qmoe_last_error());
    CHECK(ws == 0);
    if (st == QMOE_OK) {
        st = qmoe_dynamic_quant(NULL, 0, ex, NULL);
        CHECK_MSG(st == QMOE_OK, "run: %s", qmoe_last_error());
    }
    int64_t off_by_one = 0, values = 0;
    double *v = malloc(sizeof(double) * (size_t)(H > 0 ? H : 1));
    for (int64_t rr = 0; rr < rows; rr++) {
        double amax = 0;
        for (int64_t j = 0; j < H; j++) {
            v[j] = mt_get(x, c->dt, (rr * H + j) * step) * (sm ? mt_get(sm, c->sdt, j) : 1.0);
            if (fabs(v[j]) > amax) amax = fabs(v[j]);
        }
        double sref = amax / 127.0, sgot = scale[rr * step];
        CHECK_MSG(fabs(sgot - sref) <= 1e-6 * sref, "row %lld scale %.9g vs %.9g", (long long)rr,
                  sgot, sref);
        for (int64_t j = 0; j < H; j++) {
            double q = sref > 0 ? nearbyint(v[j] / sref) : 0;
            int got = y[rr * ypitch + j];
            values++;
            if (got != (int)q) off_by_one++;
            CHECK_MSG(fabs(got - q) <= 1, "row %lld col %lld: %d vs %.0f", (long long)rr,
                      (long long)j, got, q);
        }
        if (c->strided) /* the gaps of strided outputs are untouched */
            for (int64_t j = H; j < ypitch; j++) CHECK(y[rr * ypitch + j] == 0x5A);
    }
    CHECK_MSG(off_by_one * 100 <= values + 100, "%lld of %lld values off by one",
              (long long)off_by_one, (long long)values);
    free(v);
    qmoe_moe_executor_destroy(ex);
    qmoe_tensor_destroy(tx);
    qmoe_tensor_destroy(ts);
    qmoe_tensor_destroy(ty);
    qmoe_tensor_destroy(tsc);
    free(x);
    free(sm);
    free(y);
    free(scale);
}

/* Halves round to even (the vendor's round), an all-zero row gets scale 0 and zeros. */
static void check_rounding(void)
{
    float x[2][6] = {{127.0f, 0.5f, 1.5f, 2.5f, -2.5f, -0.5f}, {0, 0, 0, 0, 0, 0}};
    int8_t y[2][6];
    float s[2];
    int64_t xs[2] = {2, 6};
    qmoe_tensor *tx = mt_tensor(x, QMOE_DTYPE_FLOAT32, 2, xs, NULL);
    qmoe_tensor *ty = mt_tensor(y, QMOE_DTYPE_INT8, 2, xs, NULL);
    qmoe_tensor *ts = mt_tensor(s, QMOE_DTYPE_FLOAT32, 1, xs, NULL);
    uint64_t ws;
    qmoe_moe_executor *ex = NULL;
    CHECK(qmoe_dynamic_quant_workspace_size(tx, NULL, ty, ts, NULL, &ws, &ex) == QMOE_OK);
    CHECK(qmoe_dynamic_quant(NULL, 0, ex, NULL) == QMOE_OK);
    static const int8_t want[6] = {127, 0, 2, 2, -2, 0};
    CHECK(s[0] == 1.0f && s[1] == 0.0f);
    for (int j = 0; j < 6; j++) {
        CHECK_MSG(y[0][j] == want[j], "col %d: %d, want %d", j, y[0][j], want[j]);
        CHECK(y[1][j] == 0);
    }
    qmoe_moe_executor_destroy(ex);
    qmoe_tensor_destroy(tx);
    qmoe_tensor_destroy(ty);
    qmoe_tensor_destroy(ts);
}

/* The same input gives the same bytes for 1, 2 and 7 threads and on an asynchronous stream. */
static void check_determinism(qt_rng *r)
{
    int64_t xs[2] = {61, 300};
    float *x = mt_alloc(xs[0] * xs[1], QMOE_DTYPE_FLOAT32);
    mt_fill(r, x, QMOE_DTYPE_FLOAT32, xs[0] * xs[1], -5, 5);
    int8_t *y[4];
    float *s[4];
    qmoe_device *dev = NULL;
    qmoe_device_options dopt = {.threads = 3};
    CHECK(qmoe_device_create(&dopt, &dev) == QMOE_OK);
    qmoe_stream *stream = NULL;
    CHECK(qmoe_stream_create(dev, &stream) == QMOE_OK);
    int threads[4] = {1, 2, 7, 3};
    for (int t = 0; t < 4; t++) {
        y[t] = mt_alloc(xs[0] * xs[1], QMOE_DTYPE_INT8);
        s[t] = mt_alloc(xs[0], QMOE_DTYPE_FLOAT32);
        qmoe_tensor *tx = mt_tensor(x, QMOE_DTYPE_FLOAT32, 2, xs, NULL);
        qmoe_tensor *ty = mt_tensor(y[t], QMOE_DTYPE_INT8, 2, xs, NULL);
        qmoe_tensor *ts = mt_tensor(s[t], QMOE_DTYPE_FLOAT32, 1, xs, NULL);
        qmoe_moe_options o = {.threads = threads[t]};
        uint64_t ws;
        qmoe_moe_executor *ex = NULL;
        CHECK(qmoe_dynamic_quant_workspace_size(tx, NULL, ty, ts, &o, &ws, &ex) == QMOE_OK);
        qmoe_tensor_destroy(tx); /* the executor keeps only the memory */
        qmoe_tensor_destroy(ty);
        qmoe_tensor_destroy(ts);
        CHECK(qmoe_dynamic_quant(NULL, 0, ex, t == 3 ? stream : NULL) == QMOE_OK);
        qmoe_moe_executor_destroy(ex); /* the queued operator holds a copy */
        if (t == 3) CHECK(qmoe_stream_synchronize(stream) == QMOE_OK);
    }
    for (int t = 1; t < 4; t++) {
        CHECK(memcmp(y[0], y[t], (size_t)(xs[0] * xs[1])) == 0);
        CHECK(memcmp(s[0], s[t], sizeof(float) * (size_t)xs[0]) == 0);
    }
    for (int t = 0; t < 4; t++) {
        free(y[t]);
        free(s[t]);
    }
    qmoe_stream_destroy(stream);
    qmoe_device_destroy(dev);
    free(x);
}

static void check_validation(void)
{
    float x[4 * 8], sm[8], x3[8];
    uint16_t xh[4 * 8];
    int8_t y[4 * 8];
    float s[4];
    int64_t xs[2] = {4, 8}, h = 8, h7 = 7, xs1[1] = {8}, ys_bad[2] = {4, 7};
    qmoe_tensor *tx = mt_tensor(x, QMOE_DTYPE_FLOAT32, 2, xs, NULL);
    qmoe_tensor *txh = mt_tensor(xh, QMOE_DTYPE_FLOAT16, 2, xs, NULL);
    qmoe_tensor *tx8 = mt_tensor(y, QMOE_DTYPE_INT8, 2, xs, NULL);
    qmoe_tensor *tx1 = mt_tensor(x3, QMOE_DTYPE_FLOAT32, 1, xs1, NULL);
    qmoe_tensor *ty = mt_tensor(y, QMOE_DTYPE_INT8, 2, xs, NULL);
    qmoe_tensor *tybad = mt_tensor(y, QMOE_DTYPE_INT8, 2, ys_bad, NULL);
    qmoe_tensor *tyf = mt_tensor(x, QMOE_DTYPE_FLOAT32, 2, xs, NULL);
    qmoe_tensor *ts = mt_tensor(s, QMOE_DTYPE_FLOAT32, 1, xs, NULL);
    qmoe_tensor *tsi = mt_tensor(s, QMOE_DTYPE_INT32, 1, xs, NULL);
    qmoe_tensor *tsm = mt_tensor(sm, QMOE_DTYPE_FLOAT32, 1, &h, NULL);
    qmoe_tensor *tsm7 = mt_tensor(sm, QMOE_DTYPE_FLOAT32, 1, &h7, NULL);
    qmoe_tensor *tsmh = mt_tensor(xh, QMOE_DTYPE_BFLOAT16, 1, &h, NULL);
    uint64_t ws;
    qmoe_moe_executor *ex = NULL;
    const qmoe_status NUL = QMOE_ERR_PARAM_NULLPTR, INV = QMOE_ERR_PARAM_INVALID;
    MT_EXPECT_FAIL(qmoe_dynamic_quant_workspace_size(NULL, NULL, ty, ts, NULL, &ws, &ex), NUL);
    MT_EXPECT_FAIL(qmoe_dynamic_quant_workspace_size(tx, NULL, NULL, ts, NULL, &ws, &ex), NUL);
    MT_EXPECT_FAIL(qmoe_dynamic_quant_workspace_size(tx, NULL, ty, NULL, NULL, &ws, &ex), NUL);
    MT_EXPECT_FAIL(qmoe_dynamic_quant_workspace_size(tx, NULL, ty, ts, NULL, NULL, &ex), NUL);
    MT_EXPECT_FAIL(qmoe_dynamic_quant_workspace_size(tx, NULL, ty, ts, NULL, &ws, NULL), NUL);
    MT_EXPECT_FAIL(qmoe_dynamic_quant_workspace_size(tx8, NULL, ty, ts, NULL, &ws, &ex), INV);
    MT_EXPECT_FAIL(qmoe_dynamic_quant_workspace_size(tx1, NULL, ty, ts, NULL, &ws, &ex), INV);
    MT_EXPECT_FAIL(qmoe_dynamic_quant_workspace_size(tx, NULL, tybad, ts, NULL, &ws, &ex), INV);
    MT_EXPECT_FAIL(qmoe_dynamic_quant_workspace_size(tx, NULL, tyf, ts, NULL, &ws, &ex), INV);
    MT_EXPECT_FAIL(qmoe_dynamic_quant_workspace_size(tx, NULL, ty, tsi, NULL, &ws, &ex), INV);
    MT_EXPECT_FAIL(qmoe_dynamic_quant_workspace_size(tx, tsm7, ty, ts, NULL, &ws, &ex), INV);
    MT_EXPECT_FAIL(qmoe_dynamic_quant_workspace_size(txh, tsmh, ty, ts, NULL, &ws, &ex), INV);
    /* y over x's memory: no in-place execution */
    qmoe_tensor *ty_on_x = mt_tensor(x, QMOE_DTYPE_INT8, 2, xs, NULL);
    MT_EXPECT_FAIL(qmoe_dynamic_quant_workspace_size(tx, tsm, ty_on_x, ts, NULL, &ws, &ex), INV);
    CHECK(qmoe_last_error_info()->rule == QMOE_RULE_OVERLAP);
    CHECK(strcmp(qmoe_last_error_info()->arg, "y") == 0);
    MT_EXPECT_FAIL(qmoe_dynamic_quant_workspace_size(tx, NULL, ty, NULL, NULL, &ws, &ex), NUL);
    CHECK(qmoe_last_error_info()->rule == QMOE_RULE_NULL);
    CHECK(strcmp(qmoe_last_error_info()->arg, "scale") == 0);
    qmoe_moe_options grown = {.struct_size = 3};
    MT_EXPECT_FAIL(qmoe_dynamic_quant_workspace_size(tx, tsm, ty, ts, &grown, &ws, &ex), INV);
    CHECK(qmoe_last_error_info()->rule == QMOE_RULE_OPTION);
    struct {
        qmoe_moe_options o;
        uint32_t later_field;
    } bigger = {{.struct_size = (uint32_t)sizeof bigger}, 0};
    CHECK(qmoe_dynamic_quant_workspace_size(tx, tsm, ty, ts, &bigger.o, &ws, &ex) == QMOE_OK);
    qmoe_moe_executor_destroy(ex);
    ex = NULL;
    bigger.later_field = 1; /* a field this library does not know is set */
    MT_EXPECT_FAIL(qmoe_dynamic_quant_workspace_size(tx, tsm, ty, ts, &bigger.o, &ws, &ex), INV);
    qmoe_moe_options init = QMOE_MOE_OPTIONS_INIT;
    CHECK(qmoe_dynamic_quant_workspace_size(tx, tsm, ty, ts, &init, &ws, &ex) == QMOE_OK);
    qmoe_moe_executor_destroy(ex);
    ex = NULL;
    qmoe_moe_options neg = {.threads = -1};
    MT_EXPECT_FAIL(qmoe_dynamic_quant_workspace_size(tx, tsm, ty, ts, &neg, &ws, &ex), INV);
    CHECK(ex == NULL);
    /* phase two: a NULL executor, or one planned for another operator, writes nothing */
    MT_EXPECT_FAIL(qmoe_dynamic_quant(NULL, 0, NULL, NULL), NUL);
    int64_t sw[2] = {4, 8}, so[2] = {4, 4};
    float sx[32], sout[16];
    qmoe_tensor *tsx = mt_tensor(sx, QMOE_DTYPE_FLOAT32, 2, sw, NULL);
    qmoe_tensor *tso = mt_tensor(sout, QMOE_DTYPE_FLOAT32, 2, so, NULL);
    CHECK(qmoe_swiglu_workspace_size(tsx, -1, tso, NULL, &ws, &ex) == QMOE_OK);
    memset(y, 0x5A, sizeof y);
    MT_EXPECT_FAIL(qmoe_dynamic_quant(NULL, 0, ex, NULL), INV);
    for (int i = 0; i < 32; i++) CHECK(y[i] == 0x5A);
    qmoe_moe_executor_destroy(ex);
    qmoe_tensor *all[] = {tx, txh, tx8, tx1, ty, tybad, tyf, ts, tsi, tsm, tsm7, tsmh, ty_on_x, tsx, tso};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) qmoe_tensor_destroy(all[i]);
}

int main(void)
{
    qt_rng r = {11};
    for (int di = 0; di < 3; di++) {
        qmoe_dtype dt = mt_float_dtypes[di];
        int sdts[3] = {-1, (int)dt, QMOE_DTYPE_FLOAT32};
        for (int si = 0; si < 3; si++) {
            dq_case cases[] = {
                {dt, (qmoe_dtype)sdts[si], 2, {0, 16, 0}, 0, 0},
                {dt, (qmoe_dtype)sdts[si], 2, {1, 7168, 0}, 0, 2},
                {dt, (qmoe_dtype)sdts[si], 2, {37, 129, 0}, 0, 3},
                {dt, (qmoe_dtype)sdts[si], 2, {9, 64, 0}, 1, 1},
                {dt, (qmoe_dtype)sdts[si], 3, {2, 5, 33}, 0, 4},
                {dt, (qmoe_dtype)sdts[si], 3, {3, 2, 48}, 1, 0},
            };
            for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&r, &cases[i]);
        }
    }
    check_rounding();
    check_determinism(&r);
    check_validation();
    return qt_finish("moe_dynamic_quant");
}
