/* SwiGlu against a double oracle: every dtype, split axes (last, middle, first, negative), M = 0
 * and 1, strided input and output, and the validation rules. */
#include "test_moe_common.h"

static void run_case(qt_rng *r, qmoe_dtype dt, int nd, const int64_t *shape, int64_t dim,
                     int strided, int threads)
{
    int d = (int)(dim < 0 ? dim + nd : dim);
    int64_t n = 1, os[4], on = 1;
    for (int i = 0; i < nd; i++) {
        n *= shape[i];
        os[i] = shape[i] / (i == d ? 2 : 1);
        on *= os[i];
    }
    int64_t step = strided ? 3 : 1;
    void *x = mt_alloc(n * step, dt), *out = mt_alloc(on * step, dt);
    mt_fill(r, x, dt, n * step, -6, 6);
    int64_t xst[4], ost[4], a = step, b = step;
    for (int i = nd - 1; i >= 0; i--) {
        xst[i] = a;
        ost[i] = b;
        a *= shape[i];
        b *= os[i];
    }
    qmoe_tensor *tx = mt_tensor(x, dt, nd, shape, xst), *to = mt_tensor(out, dt, nd, os, ost);
    qmoe_moe_options o = {.threads = threads};
    uint64_t ws = 1;
    qmoe_moe_executor *ex = NULL;
    qmoe_status st = qmoe_swiglu_workspace_size(tx, dim, to, &o, &ws, &ex);
    CHECK_MSG(st == QMOE_OK, "plan: %s", qmoe_last_error());
    CHECK(ws == 0);
    if (!st) CHECK_MSG(qmoe_swiglu(NULL, 0, ex, NULL) == QMOE_OK, "run: %s", qmoe_last_error());
    /* walk out's elements in row-major order; x's A partner has the same index, B is +half on d */
    for (int64_t e = 0; e < on; e++) {
        int64_t rem = e, xa = 0;
        for (int i = nd - 1; i >= 0; i--) {
            xa += (rem % os[i]) * xst[i];
            rem /= os[i];
        }
        double av = mt_get(x, dt, xa), bv = mt_get(x, dt, xa + os[d] * xst[d]);
        double ref = av / (1.0 + exp(-av)) * bv, got = mt_get(out, dt, e * step);
        double tol = (dt == QMOE_DTYPE_FLOAT32 ? 4e-6 : mt_eps(dt)) * fabs(ref) + 1e-6;
        CHECK_MSG(fabs(got - ref) <= tol, "dtype %d elem %lld: %.8g vs %.8g", (int)dt,
                  (long long)e, got, ref);
    }
    qmoe_moe_executor_destroy(ex);
    qmoe_tensor_destroy(tx);
    qmoe_tensor_destroy(to);
    free(x);
    free(out);
}

static void check_validation(void)
{
    float x[6 * 8], out[6 * 8];
    int8_t x8[6 * 8];
    int64_t xs[2] = {6, 8}, os[2] = {6, 4}, odd[2] = {6, 7}, bad[2] = {6, 5}, os0[2] = {3, 8};
    qmoe_tensor *tx = mt_tensor(x, QMOE_DTYPE_FLOAT32, 2, xs, NULL);
    qmoe_tensor *tx8 = mt_tensor(x8, QMOE_DTYPE_INT8, 2, xs, NULL);
    qmoe_tensor *todd = mt_tensor(x, QMOE_DTYPE_FLOAT32, 2, odd, NULL);
    qmoe_tensor *to = mt_tensor(out, QMOE_DTYPE_FLOAT32, 2, os, NULL);
    qmoe_tensor *to0 = mt_tensor(out, QMOE_DTYPE_FLOAT32, 2, os0, NULL);
    qmoe_tensor *toh = mt_tensor(out, QMOE_DTYPE_FLOAT16, 2, os, NULL);
    qmoe_tensor *tobad = mt_tensor(out, QMOE_DTYPE_FLOAT32, 2, bad, NULL);
    qmoe_tensor *toalias = mt_tensor(x, QMOE_DTYPE_FLOAT32, 2, os, NULL);
    uint64_t ws;
    qmoe_moe_executor *ex = NULL;
    const qmoe_status NUL = QMOE_ERR_PARAM_NULLPTR, INV = QMOE_ERR_PARAM_INVALID;
    MT_EXPECT_FAIL(qmoe_swiglu_workspace_size(NULL, -1, to, NULL, &ws, &ex), NUL);
    MT_EXPECT_FAIL(qmoe_swiglu_workspace_size(tx, -1, NULL, NULL, &ws, &ex), NUL);
    MT_EXPECT_FAIL(qmoe_swiglu_workspace_size(tx, -1, to, NULL, NULL, &ex), NUL);
    MT_EXPECT_FAIL(qmoe_swiglu_workspace_size(tx, -1, to, NULL, &ws, NULL), NUL);
    MT_EXPECT_FAIL(qmoe_swiglu_workspace_size(tx8, -1, to, NULL, &ws, &ex), INV);
    MT_EXPECT_FAIL(qmoe_swiglu_workspace_size(todd, -1, to, NULL, &ws, &ex), INV);
    MT_EXPECT_FAIL(qmoe_swiglu_workspace_size(tx, 2, to, NULL, &ws, &ex), INV);
    MT_EXPECT_FAIL(qmoe_swiglu_workspace_size(tx, -3, to, NULL, &ws, &ex), INV);
    MT_EXPECT_FAIL(qmoe_swiglu_workspace_size(tx, -1, toh, NULL, &ws, &ex), INV);
    MT_EXPECT_FAIL(qmoe_swiglu_workspace_size(tx, -1, tobad, NULL, &ws, &ex), INV);
    MT_EXPECT_FAIL(qmoe_swiglu_workspace_size(tx, -1, to0, NULL, &ws, &ex), INV);
    MT_EXPECT_FAIL(qmoe_swiglu_workspace_size(tx, -1, toalias, NULL, &ws, &ex), INV);
    CHECK(ex == NULL);
    CHECK(qmoe_swiglu_workspace_size(tx, 0, to0, NULL, &ws, &ex) == QMOE_OK); /* dim 0 halves 6 */
    MT_EXPECT_FAIL(qmoe_dynamic_quant(NULL, 0, ex, NULL), INV); /* wrong operator's executor */
    qmoe_moe_executor_destroy(ex);
    qmoe_tensor *all[] = {tx, tx8, todd, to, to0, toh, tobad, toalias};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) qmoe_tensor_destroy(all[i]);
}

int main(void)
{
    qt_rng r = {7};
    for (int di = 0; di < 3; di++) {
        qmoe_dtype dt = mt_float_dtypes[di];
        int64_t s0[2] = {0, 8}, s1[2] = {1, 4096}, s2[3] = {6, 4, 10}, s3[2] = {6, 7},
                s4[1] = {64};
        run_case(&r, dt, 2, s0, -1, 0, 0);
        run_case(&r, dt, 2, s1, -1, 0, 3);
        run_case(&r, dt, 2, s1, 1, 1, 2);
        run_case(&r, dt, 3, s2, 1, 0, 4);
        run_case(&r, dt, 3, s2, -1, 1, 1);
        run_case(&r, dt, 3, s2, -3, 0, 0);
        run_case(&r, dt, 2, s3, 0, 1, 5);
        run_case(&r, dt, 1, s4, 0, 0, 2);
    }
    check_validation();
    return qt_finish("moe_swiglu");
}
