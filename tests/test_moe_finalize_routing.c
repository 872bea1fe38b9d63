/* MoeFinalizeRoutingV2 against a double oracle: every dtype, drop_pad_mode 0 (choice-major row
 * index) and 2 (token-major), skip inputs x1/x2 in every combination, bias, scales (absent, x's
 * dtype, float32), rows routed to no local expert (-1), fewer expanded rows than N*K, K = 1 and
 * 8, N = 0 and 1, strided inputs, thread counts, and the validation rules. */
#include "test_moe_common.h"

typedef struct fr_case {
    qmoe_dtype dt;
    int64_t N, K, H, E;
    int64_t mode;
    int x1, x2, bias, scales; /* scales: 0 none, 1 x's dtype, 2 float32 */
    int dropped;              /* some choices have row index -1 */
    int short_rows;           /* expandedX has fewer rows than N*K */
    int strided;
    int threads;
} fr_case;

static void run_case(qt_rng *r, const fr_case *c)
{
    int64_t N = c->N, K = c->K, H = c->H, NK = N * K, E = c->E;
    int64_t A = c->short_rows ? NK / 2 + 1 : NK;
    qmoe_dtype dt = c->dt, sdt = c->scales == 2 ? QMOE_DTYPE_FLOAT32 : dt;
    int64_t pitch = c->strided ? H + 3 : H;
    void *ex = mt_alloc(A * pitch, dt), *x1 = mt_alloc(N * H, dt), *x2 = mt_alloc(N * H, dt);
    void *bias = mt_alloc(E * H, dt), *sc = mt_alloc(NK, sdt), *out = mt_alloc(N * pitch, dt);
    int32_t *ri = mt_alloc(NK, QMOE_DTYPE_INT32), *idx = mt_alloc(NK, QMOE_DTYPE_INT32);
    mt_fill(r, ex, dt, A * pitch, -2, 2);
    mt_fill(r, x1, dt, N * H, -1, 1);
    mt_fill(r, x2, dt, N * H, -1, 1);
    mt_fill(r, bias, dt, E * H, -0.5f, 0.5f);
    mt_fill(r, sc, sdt, NK, 0, 1);
    /* a permutation of the rows (repeated when there are fewer rows), some dropped */
    for (int64_t f = 0; f < NK; f++) ri[f] = (int32_t)(f % (A ? A : 1));
    for (int64_t f = NK - 1; f > 0; f--) {
        int64_t g = qt_range(r, 0, f);
        int32_t t = ri[f];
        ri[f] = ri[g];
        ri[g] = t;
    }
    if (c->dropped)
        for (int64_t f = 0; f < NK; f += 3) ri[f] = -1;
    for (int64_t f = 0; f < NK; f++) idx[f] = (int32_t)qt_range(r, 0, E - 1);
    int64_t exs[2] = {A, H}, exst[2] = {pitch, 1}, os[2] = {N, H}, ks[2] = {N, K}, bs[2] = {E, H};
    qmoe_tensor *tex = mt_tensor(ex, dt, 2, exs, exst), *tri = mt_tensor(ri, QMOE_DTYPE_INT32, 1, &NK, NULL);
    qmoe_tensor *tx1 = c->x1 ? mt_tensor(x1, dt, 2, os, NULL) : NULL;
    qmoe_tensor *tx2 = c->x2 ? mt_tensor(x2, dt, 2, os, NULL) : NULL;
    qmoe_tensor *tb = c->bias ? mt_tensor(bias, dt, 2, bs, NULL) : NULL;
    qmoe_tensor *tsc = c->scales ? mt_tensor(sc, sdt, 2, ks, NULL) : NULL;
    qmoe_tensor *tid = c->bias || (N % 2) ? mt_tensor(idx, QMOE_DTYPE_INT32, 2, ks, NULL) : NULL;
    qmoe_tensor *tout = mt_tensor(out, dt, 2, os, exst);
    qmoe_moe_options o = {.threads = c->threads};
    uint64_t ws = 1;
    qmoe_moe_executor *exe = NULL;
    qmoe_status st = qmoe_moe_finalize_routing_workspace_size(tex, tri, tx1, tx2, tb, tsc, tid,
                                                              c->mode, tout, &o, &ws, &exe);
    CHECK_MSG(st == QMOE_OK, "plan: %s", qmoe_last_error());
    CHECK(ws == 0);
    if (!st) CHECK_MSG(qmoe_moe_finalize_routing(NULL, 0, exe, NULL) == QMOE_OK, "%s", qmoe_last_error());
    for (int64_t i = 0; i < N; i++)
        for (int64_t h = 0; h < H; h++) {
            double ref = 0, mag = 0, term;
            /* the contract's own order in float32, to the bit: skips, then choices in order */
            float f32 = c->x1 ? (float)mt_get(x1, dt, i * H + h) : 0.0f;
            if (c->x2) f32 += (float)mt_get(x2, dt, i * H + h);
            if (c->x1) ref += term = mt_get(x1, dt, i * H + h), mag += fabs(term);
            if (c->x2) ref += term = mt_get(x2, dt, i * H + h), mag += fabs(term);
            for (int64_t j = 0; j < K; j++) {
                int64_t f = c->mode == 0 ? j * N + i : i * K + j;
                if (ri[f] < 0) continue;
                double w = c->scales ? mt_get(sc, sdt, i * K + j) : 1.0;
                double v = mt_get(ex, dt, ri[f] * pitch + h);
                float fv = (float)v;
                if (c->bias) fv += (float)mt_get(bias, dt, idx[i * K + j] * H + h);
                f32 += (float)w * fv;
                if (c->bias) v += mt_get(bias, dt, idx[i * K + j] * H + h);
                ref += term = w * v;
                mag += fabs(term) + fabs(v);
            }
            double got = mt_get(out, dt, i * pitch + h);
            double tol = 1e-6 * mag + (dt == QMOE_DTYPE_FLOAT32 ? 0 : mt_eps(dt) * fabs(ref)) + 1e-7;
            CHECK_MSG(fabs(got - ref) <= tol, "dtype %d mode %lld: out[%lld][%lld] %.8g vs %.8g",
                      (int)dt, (long long)c->mode, (long long)i, (long long)h, got, ref);
            CHECK_MSG(got == mt_round(dt, f32), "dtype %d mode %lld: out[%lld][%lld] %.9g, float32 in order %.9g",
                      (int)dt, (long long)c->mode, (long long)i, (long long)h, got, mt_round(dt, f32));
        }
    if (c->strided)
        for (int64_t i = 0; i < N; i++)
            for (int64_t h = H * (int64_t)mt_item(dt); h < pitch * (int64_t)mt_item(dt); h++)
                CHECK(((uint8_t *)out)[i * pitch * (int64_t)mt_item(dt) + h] == 0x5A);
    qmoe_moe_executor_destroy(exe);
    qmoe_tensor *all[] = {tex, tri, tx1, tx2, tb, tsc, tid, tout};
    for (int i = 0; i < 8; i++) qmoe_tensor_destroy(all[i]);
    void *bufs[] = {ex, x1, x2, bias, sc, out, ri, idx};
    for (int i = 0; i < 8; i++) free(bufs[i]);
}

/* bf16 output of NaN and infinity (the vector path's rounding): NaN stays NaN with the quiet
 * bit set, infinities stay, and sums that overflow float32 round to infinity. */
static void check_specials(void)
{
    enum { N = 2, K = 2, H = 80 };
    uint16_t ex[N * K * H], out[N * H];
    int32_t ri[N * K];
    for (int i = 0; i < N * K; i++) ri[i] = i; /* token-major: token i's rows 2i, 2i + 1 */
    for (int h = 0; h < N * K * H; h++) ex[h] = 0x3F80; /* 1.0 */
    ex[0 * H + 3] = 0x7F81;                             /* signalling NaN: quieted */
    ex[0 * H + 70] = 0xFF80;                            /* -inf */
    ex[2 * H + 5] = 0x7F7F, ex[3 * H + 5] = 0x7F7F;     /* the largest bf16, twice: overflows */
    int64_t exs[2] = {N * K, H}, nk = N * K, os[2] = {N, H};
    qmoe_tensor *tex = mt_tensor(ex, QMOE_DTYPE_BFLOAT16, 2, exs, NULL), *tri = mt_tensor(ri, QMOE_DTYPE_INT32, 1, &nk, NULL),
                *tout = mt_tensor(out, QMOE_DTYPE_BFLOAT16, 2, os, NULL);
    qmoe_moe_executor *exe = NULL;
    uint64_t ws = 0;
    CHECK(qmoe_moe_finalize_routing_workspace_size(tex, tri, NULL, NULL, NULL, NULL, NULL, 2, tout, NULL, &ws, &exe) ==
          QMOE_OK);
    CHECK(qmoe_moe_finalize_routing(NULL, 0, exe, NULL) == QMOE_OK);
    CHECK_MSG(out[3] == 0x7FC1, "NaN: 0x%04x, expected 0x7fc1", out[3]);
    CHECK_MSG(out[70] == 0xFF80, "-inf: 0x%04x", out[70]);
    CHECK_MSG(out[H + 5] == 0x7F80, "overflow: 0x%04x, expected +inf", out[H + 5]);
    CHECK(out[0] == 0x4000 && out[H + 79] == 0x4000); /* 1 + 1 */
    qmoe_moe_executor_destroy(exe);
    qmoe_tensor_destroy(tex), qmoe_tensor_destroy(tri), qmoe_tensor_destroy(tout);
}

static void check_validation(void)
{
    enum { N = 3, K = 2, H = 4, E = 5 };
    static float ex[N * K * H], x1[N * H], bias[E * H], sc[N * K], out[N * H];
    static uint16_t exh[N * K * H];
    static int32_t ri[N * K], idx[N * K];
    int64_t exs[2] = {N * K, H}, os[2] = {N, H}, ks[2] = {N, K}, bs[2] = {E, H}, nk = N * K,
            nk1 = N * K - 1, os5[2] = {N, 5}, ks3[2] = {N, 3};
    qmoe_tensor *tex = mt_tensor(ex, QMOE_DTYPE_FLOAT32, 2, exs, NULL);
    qmoe_tensor *texh = mt_tensor(exh, QMOE_DTYPE_FLOAT16, 2, exs, NULL);
    qmoe_tensor *tex8 = mt_tensor(exh, QMOE_DTYPE_INT8, 2, exs, NULL);
    qmoe_tensor *tri = mt_tensor(ri, QMOE_DTYPE_INT32, 1, &nk, NULL);
    qmoe_tensor *tri1 = mt_tensor(ri, QMOE_DTYPE_INT32, 1, &nk1, NULL);
    qmoe_tensor *tri64 = mt_tensor(ri, QMOE_DTYPE_INT64, 1, &nk1, NULL);
    qmoe_tensor *tx1 = mt_tensor(x1, QMOE_DTYPE_FLOAT32, 2, os, NULL);
    qmoe_tensor *tx1h = mt_tensor(exh, QMOE_DTYPE_FLOAT16, 2, os, NULL);
    qmoe_tensor *tb = mt_tensor(bias, QMOE_DTYPE_FLOAT32, 2, bs, NULL);
    qmoe_tensor *tsc = mt_tensor(sc, QMOE_DTYPE_FLOAT32, 2, ks, NULL);
    qmoe_tensor *tsc3 = mt_tensor(sc, QMOE_DTYPE_FLOAT32, 2, ks3, NULL);
    qmoe_tensor *tid = mt_tensor(idx, QMOE_DTYPE_INT32, 2, ks, NULL);
    qmoe_tensor *tout = mt_tensor(out, QMOE_DTYPE_FLOAT32, 2, os, NULL);
    qmoe_tensor *tout5 = mt_tensor(out, QMOE_DTYPE_FLOAT32, 2, os5, NULL);
    qmoe_tensor *touth = mt_tensor(out, QMOE_DTYPE_FLOAT16, 2, os, NULL);
    qmoe_tensor *tout_on_x = mt_tensor(ex, QMOE_DTYPE_FLOAT32, 2, os, NULL);
    uint64_t ws;
    qmoe_moe_executor *exe = NULL;
    const qmoe_status NUL = QMOE_ERR_PARAM_NULLPTR, INV = QMOE_ERR_PARAM_INVALID;
#define PLAN(a, b, c1, c2, d, e, f, m, o) \
    qmoe_moe_finalize_routing_workspace_size(a, b, c1, c2, d, e, f, m, o, NULL, &ws, &exe)
    MT_EXPECT_FAIL(PLAN(NULL, tri, NULL, NULL, NULL, NULL, NULL, 0, tout), NUL);
    MT_EXPECT_FAIL(PLAN(tex, NULL, NULL, NULL, NULL, NULL, NULL, 0, tout), NUL);
    MT_EXPECT_FAIL(PLAN(tex, tri, NULL, NULL, NULL, NULL, NULL, 0, NULL), NUL);
    MT_EXPECT_FAIL(PLAN(tex, tri, NULL, NULL, tb, NULL, NULL, 0, tout), NUL);
    MT_EXPECT_FAIL(PLAN(tex, tri, NULL, NULL, NULL, NULL, NULL, 1, tout), INV);
    MT_EXPECT_FAIL(PLAN(tex, tri, NULL, NULL, NULL, NULL, NULL, 3, tout), INV);
    MT_EXPECT_FAIL(PLAN(tex8, tri, NULL, NULL, NULL, NULL, NULL, 0, tout), INV);
    MT_EXPECT_FAIL(PLAN(texh, tri, NULL, NULL, NULL, NULL, NULL, 0, tout), INV);
    MT_EXPECT_FAIL(PLAN(tex, tri, NULL, NULL, NULL, NULL, NULL, 0, touth), INV);
    MT_EXPECT_FAIL(PLAN(tex, tri, NULL, NULL, NULL, NULL, NULL, 0, tout5), INV);
    MT_EXPECT_FAIL(PLAN(tex, tri1, NULL, NULL, NULL, NULL, NULL, 0, tout), INV);
    MT_EXPECT_FAIL(PLAN(tex, tri64, NULL, NULL, NULL, NULL, NULL, 0, tout), INV);
    MT_EXPECT_FAIL(PLAN(tex, tri, tx1h, NULL, NULL, NULL, NULL, 0, tout), INV);
    MT_EXPECT_FAIL(PLAN(tex, tri, NULL, tx1h, NULL, NULL, NULL, 0, tout), INV);
    MT_EXPECT_FAIL(PLAN(tex, tri, NULL, NULL, NULL, tsc3, NULL, 0, tout), INV);
    MT_EXPECT_FAIL(PLAN(tex, tri, NULL, NULL, NULL, tsc, tsc3, 0, tout), INV);
    MT_EXPECT_FAIL(PLAN(tex, tri, NULL, NULL, tsc, tsc, tid, 0, tout), INV); /* bias [N, K] */
    MT_EXPECT_FAIL(PLAN(tex, tri, NULL, NULL, NULL, NULL, NULL, 0, tout_on_x), INV);
    MT_EXPECT_FAIL(PLAN(tex, tri, tx1, NULL, NULL, NULL, NULL, 0, tx1), INV);
    CHECK(exe == NULL);
    CHECK(PLAN(tex, tri, tx1, NULL, tb, tsc, tid, 2, tout) == QMOE_OK);
#undef PLAN
    for (int f = 0; f < N * K; f++) ri[f] = f, idx[f] = f % E;
    memset(out, 0x5A, sizeof out);
    ri[4] = N * K; /* past the rows */
    MT_EXPECT_FAIL(qmoe_moe_finalize_routing(NULL, 0, exe, NULL), INV);
    ri[4] = -2;
    MT_EXPECT_FAIL(qmoe_moe_finalize_routing(NULL, 0, exe, NULL), INV);
    ri[4] = 4;
    idx[3] = E; /* not a row of bias */
    MT_EXPECT_FAIL(qmoe_moe_finalize_routing(NULL, 0, exe, NULL), INV);
    for (int i = 0; i < N * H; i++) CHECK(((uint32_t *)out)[i] == 0x5A5A5A5Au);
    idx[3] = 0;
    CHECK(qmoe_moe_finalize_routing(NULL, 0, exe, NULL) == QMOE_OK);
    qmoe_moe_executor_destroy(exe);
    qmoe_tensor *all[] = {tex, texh, tex8, tri, tri1, tri64, tx1, tx1h, tb, tsc, tsc3, tid, tout, tout5, touth, tout_on_x};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) qmoe_tensor_destroy(all[i]);
}

int main(void)
{
    qt_rng r = {9};
    int n = 0;
    static const int64_t Ns[] = {0, 1, 29, 8};
    static const int64_t Ks[] = {1, 8, 8, 2};
    for (int di = 0; di < 3; di++)
        for (int mode = 0; mode < 2; mode++)
            for (int skips = 0; skips < 4; skips++)
                for (int bias = 0; bias < 2; bias++)
                    for (int scales = 0; scales < 3; scales++) {
                        fr_case c = {.dt = mt_float_dtypes[di], .N = Ns[n % 4], .K = Ks[(n / 4) % 4],
                                     .H = 40, .E = 6, .mode = mode ? 2 : 0, .x1 = skips & 1,
                                     .x2 = skips >> 1, .bias = bias, .scales = scales,
                                     .dropped = n % 3 == 1, .short_rows = n % 5 == 2,
                                     .strided = n % 2, .threads = n % 4};
                        run_case(&r, &c);
                        n++;
                    }
    fr_case big = {.dt = QMOE_DTYPE_BFLOAT16, .N = 128, .K = 8, .H = 7168, .E = 64, .mode = 2,
                   .x1 = 1, .scales = 2, .threads = 0};
    run_case(&r, &big);
    /* the vector path: past one chunk of rows (K > 32), a column tail (H % 64), both dtypes */
    for (int di = 0; di < 2; di++) {
        fr_case wide = {.dt = di ? QMOE_DTYPE_BFLOAT16 : QMOE_DTYPE_FLOAT32, .N = 9, .K = 40, .H = 200, .E = 4,
                        .mode = di ? 0 : 2, .x2 = 1, .scales = di ? 1 : 2, .dropped = 1, .threads = 2};
        run_case(&r, &wide);
    }
    check_specials();
    check_validation();
    return qt_finish("moe_finalize_routing");
}
