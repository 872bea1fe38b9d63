/* MoeGatingTopKSoftmax and MoeGatingTopK against double oracles: every dtype, k = 0/1/8/32 and
 * up to 1024, expert counts up to 1024, rows 0 and 1, 3-D input, finished rows, ties (inputs on a
 * coarse grid, so many scores are exactly equal: the lower expert index must win), group
 * selection modes, bias, softmax/sigmoid, the normalised-score output, and validation. */
#include "test_moe_common.h"

/* The j-th best of v[0..n) among allowed (NULL: all), strictly greater wins: first index on ties. */
static void oracle_topk(const double *v, int64_t n, const int *allowed, int64_t k, int64_t *ids)
{
    char *taken = calloc((size_t)n + 1, 1);
    for (int64_t j = 0; j < k; j++) {
        int64_t best = -1;
        for (int64_t e = 0; e < n; e++) {
            if (taken[e] || (allowed && !allowed[e])) continue;
            if (best < 0 || v[e] > v[best]) best = e;
        }
        ids[j] = best;
        if (best >= 0) taken[best] = 1;
    }
    free(taken);
}

static void grid_fill(qt_rng *r, void *buf, qmoe_dtype dt, int64_t n, int64_t levels, double step)
{
    for (int64_t i = 0; i < n; i++) mt_set(buf, dt, i, (double)qt_range(r, -levels, levels) * step);
}

static void softmax_case(qt_rng *r, qmoe_dtype dt, int nd, int64_t B, int64_t S, int64_t E,
                         int64_t k, int with_finished, int threads)
{
    int64_t rows = nd == 3 ? B * S : B;
    int64_t xs[3] = {B, S, E}, ys[3] = {B, S, k};
    if (nd == 2) {
        xs[1] = E;
        ys[1] = k;
    }
    void *x = mt_alloc(rows * E, dt), *y = mt_alloc(rows * k, dt);
    int32_t *idx = mt_alloc(rows * k, QMOE_DTYPE_INT32), *ridx = mt_alloc(rows * k, QMOE_DTYPE_INT32);
    int8_t *fin = mt_alloc(rows, QMOE_DTYPE_INT8);
    grid_fill(r, x, dt, rows * E, 24, 0.125);
    for (int64_t i = 0; i < rows; i++) fin[i] = (int8_t)(with_finished && i % 3 == 1);
    qmoe_tensor *tx = mt_tensor(x, dt, nd, xs, NULL), *ty = mt_tensor(y, dt, nd, ys, NULL);
    qmoe_tensor *ti = mt_tensor(idx, QMOE_DTYPE_INT32, nd, ys, NULL);
    qmoe_tensor *tr = mt_tensor(ridx, QMOE_DTYPE_INT32, nd, ys, NULL);
    qmoe_tensor *tf = with_finished ? mt_tensor(fin, QMOE_DTYPE_INT8, nd - 1, xs, NULL) : NULL;
    qmoe_moe_options o = {.threads = threads};
    uint64_t ws;
    qmoe_moe_executor *ex = NULL;
    qmoe_status st = qmoe_moe_gating_top_k_softmax_workspace_size(tx, tf, k, ty, ti, tr, &o, &ws, &ex);
    CHECK_MSG(st == QMOE_OK, "plan: %s", qmoe_last_error());
    if (!st) CHECK_MSG(qmoe_moe_gating_top_k_softmax(NULL, ws, ex, NULL) == QMOE_OK, "%s", qmoe_last_error());
    double *v = malloc(sizeof(double) * (size_t)E);
    int64_t *ids = malloc(sizeof(int64_t) * (size_t)(k + 1));
    for (int64_t i = 0; i < rows; i++) {
        double m = -INFINITY, s = 0;
        for (int64_t e = 0; e < E; e++) {
            v[e] = mt_get(x, dt, i * E + e);
            if (v[e] > m) m = v[e];
        }
        oracle_topk(v, E, NULL, k, ids);
        for (int64_t e = 0; e < E; e++) s += exp(v[e] - m);
        for (int64_t j = 0; j < k; j++) {
            double ref = exp(v[ids[j]] - m) / s, got = mt_get(y, dt, i * k + j);
            double tol = (dt == QMOE_DTYPE_FLOAT32 ? 2e-5 : mt_eps(dt)) * ref + 1e-9;
            CHECK_MSG(fabs(got - ref) <= tol, "row %lld j %lld: y %.8g vs %.8g", (long long)i,
                      (long long)j, got, ref);
            int64_t want = fin[i] ? E : ids[j];
            CHECK_MSG(idx[i * k + j] == want, "row %lld j %lld: expert %d vs %lld", (long long)i,
                      (long long)j, idx[i * k + j], (long long)want);
            CHECK(ridx[i * k + j] == j * rows + i);
        }
    }
    free(v);
    free(ids);
    qmoe_moe_executor_destroy(ex);
    qmoe_tensor *all[] = {tx, ty, ti, tr, tf};
    for (int i = 0; i < 5; i++) qmoe_tensor_destroy(all[i]);
    free(x);
    free(y);
    free(idx);
    free(ridx);
    free(fin);
}

static void topk_case(qt_rng *r, qmoe_dtype dt, qmoe_dtype bdt, int64_t R, int64_t E,
                      qmoe_moe_gating_attrs a, int with_bias, int threads)
{
    int64_t k = a.k, G = a.group_count, per = E / G;
    int64_t xs[2] = {R, E}, ys[2] = {R, k};
    void *x = mt_alloc(R * E, dt), *y = mt_alloc(R * k, dt), *bias = mt_alloc(E, bdt);
    int32_t *idx = mt_alloc(R * k, QMOE_DTYPE_INT32);
    float *out = mt_alloc(R * E, QMOE_DTYPE_FLOAT32);
    grid_fill(r, x, dt, R * E, 16, 0.25);
    grid_fill(r, bias, bdt, E, 4, 0.0625);
    qmoe_tensor *tx = mt_tensor(x, dt, 2, xs, NULL), *ty = mt_tensor(y, dt, 2, ys, NULL);
    qmoe_tensor *tb = with_bias ? mt_tensor(bias, bdt, 1, &E, NULL) : NULL;
    qmoe_tensor *ti = mt_tensor(idx, QMOE_DTYPE_INT32, 2, ys, NULL);
    qmoe_tensor *to = mt_tensor(out, QMOE_DTYPE_FLOAT32, 2, xs, NULL);
    qmoe_moe_options o = {.threads = threads};
    uint64_t ws;
    qmoe_moe_executor *ex = NULL;
    qmoe_status st = qmoe_moe_gating_top_k_workspace_size(tx, tb, &a, ty, ti, to, &o, &ws, &ex);
    CHECK_MSG(st == QMOE_OK, "plan: %s", qmoe_last_error());
    if (!st) CHECK_MSG(qmoe_moe_gating_top_k(NULL, ws, ex, NULL) == QMOE_OK, "%s", qmoe_last_error());
    double *norm = malloc(sizeof(double) * (size_t)E), *val = malloc(sizeof(double) * (size_t)E);
    double *gs = malloc(sizeof(double) * (size_t)G);
    int *allowed = malloc(sizeof(int) * (size_t)E);
    int64_t *ids = malloc(sizeof(int64_t) * (size_t)(E + G));
    for (int64_t i = 0; i < R; i++) {
        double m = -INFINITY, s = 0;
        for (int64_t e = 0; e < E; e++) {
            norm[e] = mt_get(x, dt, i * E + e);
            if (norm[e] > m) m = norm[e];
        }
        for (int64_t e = 0; e < E; e++) {
            if (a.norm_type == 0) s += exp(norm[e] - m);
            else norm[e] = 1.0 / (1.0 + exp(-norm[e]));
        }
        if (a.norm_type == 0)
            for (int64_t e = 0; e < E; e++) norm[e] = exp(norm[e] - m) / s;
        for (int64_t e = 0; e < E; e++) val[e] = norm[e] + (with_bias ? mt_get(bias, bdt, e) : 0);
        for (int64_t e = 0; e < E; e++) allowed[e] = 1;
        if (G > 1) {
            for (int64_t g = 0; g < G; g++) {
                int64_t b2[2];
                oracle_topk(val + g * per, per, NULL, a.group_select_mode ? 2 : 1, b2);
                gs[g] = val[g * per + b2[0]] + (a.group_select_mode ? val[g * per + b2[1]] : 0);
            }
            oracle_topk(gs, G, NULL, a.k_group, ids);
            for (int64_t e = 0; e < E; e++) allowed[e] = 0;
            for (int64_t j = 0; j < a.k_group; j++)
                for (int64_t e = ids[j] * per; e < (ids[j] + 1) * per; e++) allowed[e] = 1;
        }
        oracle_topk(val, E, allowed, k, ids);
        double sum = 0;
        for (int64_t j = 0; j < k; j++) sum += norm[ids[j]];
        for (int64_t j = 0; j < k; j++) {
            CHECK_MSG(idx[i * k + j] == ids[j], "row %lld j %lld: expert %d vs %lld",
                      (long long)i, (long long)j, idx[i * k + j], (long long)ids[j]);
            double ref = norm[ids[j]] / (sum + a.eps) * a.routed_scaling_factor;
            double got = mt_get(y, dt, i * k + j);
            double tol = (dt == QMOE_DTYPE_FLOAT32 ? 2e-5 : mt_eps(dt)) * fabs(ref) + 1e-9;
            CHECK_MSG(fabs(got - ref) <= tol, "row %lld j %lld: y %.8g vs %.8g", (long long)i,
                      (long long)j, got, ref);
        }
        for (int64_t e = 0; e < E; e++) {
            if (a.out_flag)
                CHECK_MSG(fabs(out[i * E + e] - norm[e]) <= 2e-5 * norm[e] + 1e-9,
                          "row %lld out[%lld] %.8g vs %.8g", (long long)i, (long long)e,
                          out[i * E + e], norm[e]);
            else
                CHECK(((uint32_t *)out)[i * E + e] == 0x5A5A5A5Au); /* not written */
        }
    }
    free(norm);
    free(val);
    free(gs);
    free(allowed);
    free(ids);
    qmoe_moe_executor_destroy(ex);
    qmoe_tensor *all[] = {tx, ty, tb, ti, to};
    for (int i = 0; i < 5; i++) qmoe_tensor_destroy(all[i]);
    free(x);
    free(y);
    free(bias);
    free(idx);
    free(out);
}

static void check_validation(void)
{
    enum { R = 4, E = 64 };
    static float x[R * E], y[R * 40], out[R * E], bias[E];
    static int32_t idx[R * 40], ridx[R * 40];
    static int8_t fin[R];
    int64_t xs[2] = {R, E}, ys[2] = {R, 8}, ys2[2] = {R, 2}, e63 = 63, x1[1] = {E};
    qmoe_tensor *tx = mt_tensor(x, QMOE_DTYPE_FLOAT32, 2, xs, NULL);
    qmoe_tensor *tx1 = mt_tensor(x, QMOE_DTYPE_FLOAT32, 1, x1, NULL);
    qmoe_tensor *ty = mt_tensor(y, QMOE_DTYPE_FLOAT32, 2, ys, NULL);
    qmoe_tensor *tyh = mt_tensor(y, QMOE_DTYPE_FLOAT16, 2, ys, NULL);
    qmoe_tensor *ti = mt_tensor(idx, QMOE_DTYPE_INT32, 2, ys, NULL);
    qmoe_tensor *ti64 = mt_tensor(idx, QMOE_DTYPE_INT64, 2, ys2, NULL);
    qmoe_tensor *tr = mt_tensor(ridx, QMOE_DTYPE_INT32, 2, ys, NULL);
    qmoe_tensor *tf = mt_tensor(fin, QMOE_DTYPE_INT8, 1, xs, NULL);
    qmoe_tensor *tff = mt_tensor(out, QMOE_DTYPE_FLOAT32, 1, xs, NULL);
    qmoe_tensor *to = mt_tensor(out, QMOE_DTYPE_FLOAT32, 2, xs, NULL);
    qmoe_tensor *tb = mt_tensor(bias, QMOE_DTYPE_FLOAT32, 1, x1, NULL);
    qmoe_tensor *tb63 = mt_tensor(bias, QMOE_DTYPE_FLOAT32, 1, &e63, NULL);
    qmoe_tensor *tyalias = mt_tensor(x, QMOE_DTYPE_FLOAT32, 2, ys, NULL);
    uint64_t ws;
    qmoe_moe_executor *ex = NULL;
    const qmoe_status NUL = QMOE_ERR_PARAM_NULLPTR, INV = QMOE_ERR_PARAM_INVALID;
    MT_EXPECT_FAIL(qmoe_moe_gating_top_k_softmax_workspace_size(NULL, NULL, 8, ty, ti, tr, NULL, &ws, &ex), NUL);
    MT_EXPECT_FAIL(qmoe_moe_gating_top_k_softmax_workspace_size(tx, NULL, 8, NULL, ti, tr, NULL, &ws, &ex), NUL);
    MT_EXPECT_FAIL(qmoe_moe_gating_top_k_softmax_workspace_size(tx, NULL, 8, ty, NULL, tr, NULL, &ws, &ex), NUL);
    MT_EXPECT_FAIL(qmoe_moe_gating_top_k_softmax_workspace_size(tx, NULL, 8, ty, ti, NULL, NULL, &ws, &ex), NUL);
    MT_EXPECT_FAIL(qmoe_moe_gating_top_k_softmax_workspace_size(tx1, NULL, 8, ty, ti, tr, NULL, &ws, &ex), INV);
    MT_EXPECT_FAIL(qmoe_moe_gating_top_k_softmax_workspace_size(tx, NULL, 65, ty, ti, tr, NULL, &ws, &ex), INV);
    MT_EXPECT_FAIL(qmoe_moe_gating_top_k_softmax_workspace_size(tx, NULL, -1, ty, ti, tr, NULL, &ws, &ex), INV);
    MT_EXPECT_FAIL(qmoe_moe_gating_top_k_softmax_workspace_size(tx, NULL, 7, ty, ti, tr, NULL, &ws, &ex), INV);
    MT_EXPECT_FAIL(qmoe_moe_gating_top_k_softmax_workspace_size(tx, NULL, 8, tyh, ti, tr, NULL, &ws, &ex), INV);
    MT_EXPECT_FAIL(qmoe_moe_gating_top_k_softmax_workspace_size(tx, tff, 8, ty, ti, tr, NULL, &ws, &ex), INV);
    MT_EXPECT_FAIL(qmoe_moe_gating_top_k_softmax_workspace_size(tx, NULL, 8, tyalias, ti, tr, NULL, &ws, &ex), INV);
    MT_EXPECT_FAIL(qmoe_moe_gating_top_k_softmax_workspace_size(tx, tf, 8, ty, ti, ti, NULL, &ws, &ex), INV);
    CHECK(ex == NULL);

    qmoe_moe_gating_attrs ok = {.k = 8, .k_group = 2, .group_count = 4, .group_select_mode = 1,
                                .norm_type = 1, .routed_scaling_factor = 1.0, .eps = 1e-20};
    CHECK(qmoe_moe_gating_top_k_workspace_size(tx, tb, &ok, ty, ti, NULL, NULL, &ws, &ex) == QMOE_OK);
    qmoe_moe_executor_destroy(ex);
    ex = NULL;
    qmoe_moe_gating_attrs bad[10];
    for (int i = 0; i < 10; i++) bad[i] = ok;
    bad[0].k = 0;
    bad[1].k = 33;
    bad[2].group_count = 5;  /* does not divide 64 */
    bad[3].k_group = 5;      /* more than the groups */
    bad[4].k = 8, bad[4].k_group = 1, bad[4].group_count = 16; /* k > 4 * 1 */
    bad[5].group_select_mode = 2;
    bad[6].renorm = 1;
    bad[7].norm_type = 2;
    bad[8].eps = NAN;
    bad[9].group_count = 64, bad[9].k_group = 8; /* groups of one expert with top-2 sums */
    for (int i = 0; i < 10; i++)
        MT_EXPECT_FAIL(qmoe_moe_gating_top_k_workspace_size(tx, tb, &bad[i], ty, ti, NULL, NULL, &ws, &ex), INV);
    MT_EXPECT_FAIL(qmoe_moe_gating_top_k_workspace_size(tx, tb63, &ok, ty, ti, NULL, NULL, &ws, &ex), INV);
    MT_EXPECT_FAIL(qmoe_moe_gating_top_k_workspace_size(tx, tb, &ok, ty, ti64, NULL, NULL, &ws, &ex), INV);
    MT_EXPECT_FAIL(qmoe_moe_gating_top_k_workspace_size(tx, tb, NULL, ty, ti, NULL, NULL, &ws, &ex), NUL);
    qmoe_moe_gating_attrs want_out = ok;
    want_out.out_flag = 1;
    MT_EXPECT_FAIL(qmoe_moe_gating_top_k_workspace_size(tx, tb, &want_out, ty, ti, NULL, NULL, &ws, &ex), NUL);
    MT_EXPECT_FAIL(qmoe_moe_gating_top_k_workspace_size(tx, tb, &want_out, ty, ti, ty, NULL, &ws, &ex), INV);
    CHECK(ex == NULL);
    qmoe_tensor *all[] = {tx, tx1, ty, tyh, ti, ti64, tr, tf, tff, to, tb, tb63, tyalias};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) qmoe_tensor_destroy(all[i]);
}

int main(void)
{
    qt_rng r = {5};
    for (int di = 0; di < 3; di++) {
        qmoe_dtype dt = mt_float_dtypes[di];
        softmax_case(&r, dt, 2, 0, 1, 16, 4, 0, 0);
        softmax_case(&r, dt, 2, 1, 1, 8, 1, 0, 1);
        softmax_case(&r, dt, 2, 13, 1, 256, 8, 1, 3);
        softmax_case(&r, dt, 3, 2, 3, 64, 32, 1, 2);
        softmax_case(&r, dt, 2, 5, 1, 1024, 8, 0, 4);
        softmax_case(&r, dt, 2, 3, 1, 40, 0, 0, 1);
        qmoe_moe_gating_attrs ds = {.k = 8, .k_group = 4, .group_count = 8,
                                    .group_select_mode = 1, .norm_type = 1,
                                    .routed_scaling_factor = 2.5, .eps = 1e-20};
        topk_case(&r, dt, dt, 9, 256, ds, 1, 3);
        topk_case(&r, dt, QMOE_DTYPE_FLOAT32, 1, 256, ds, 1, 1);
        topk_case(&r, dt, dt, 0, 256, ds, 1, 0);
        qmoe_moe_gating_attrs m0 = {.k = 6, .k_group = 2, .group_count = 4, .group_select_mode = 0,
                                    .norm_type = 0, .out_flag = 1, .routed_scaling_factor = 1.0,
                                    .eps = 1e-6};
        topk_case(&r, dt, dt, 7, 64, m0, 0, 2);
        topk_case(&r, dt, dt, 4, 64, m0, 1, 5);
        qmoe_moe_gating_attrs g1 = {.k = 1, .k_group = 1, .group_count = 1, .norm_type = 1,
                                    .out_flag = 1, .routed_scaling_factor = 1.0, .eps = 0};
        topk_case(&r, dt, dt, 5, 1024, g1, 1, 2);
        qmoe_moe_gating_attrs k32 = {.k = 32, .k_group = 8, .group_count = 8,
                                     .group_select_mode = 1, .norm_type = 1,
                                     .routed_scaling_factor = 1.0, .eps = 1e-20};
        topk_case(&r, dt, dt, 3, 128, k32, 1, 1);
    }
    check_validation();
    return qt_finish("moe_gating");
}
