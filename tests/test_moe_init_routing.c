/* MoeInitRoutingV2 (+ V3 dynamic quant and expert range) against an independent oracle: every
 * dtype, quant none/dynamic with and without smooth scales (per expert or shared), int8 input
 * with per-token scales carried along, active_num, cumsum/count (int32/int64), gather/scatter row
 * indices, local expert ranges (tokens routed to no local expert), empty experts, K = 1 and 8,
 * N = 0 and 1, strided inputs, thread counts, and the validation rules. */
#include "test_moe_common.h"

typedef struct ir_case {
    qmoe_dtype dt;
    int64_t N, K, H, E;
    int quant;            /* qmoe_moe_quant_mode */
    int smooth;           /* dynamic: 0 none, 1 per local expert, 2 shared [1, H]; none: 1 = scale */
    int64_t start, end;   /* 0, 0: all */
    int64_t active_num;
    int tokens;           /* qmoe_moe_tokens_mode */
    qmoe_dtype tokens_dt;
    int row_idx_type;
    int strided;
    int one_expert;       /* every choice goes to expert 3: the others are empty */
    int threads;
} ir_case;

static void run_case(qt_rng *r, const ir_case *c)
{
    int64_t N = c->N, K = c->K, H = c->H, NK = N * K;
    int64_t start = c->start, end = c->end ? c->end : c->E, L = end - start;
    int64_t A = c->active_num > 0 && c->active_num < NK ? c->active_num : NK;
    int dyn = c->quant == QMOE_MOE_QUANT_DYNAMIC;
    int64_t pitch = c->strided ? H + 7 : H, cs = c->strided ? 1 : 1;
    void *x = mt_alloc(N * pitch, c->dt);
    if (c->dt == QMOE_DTYPE_INT8)
        for (int64_t i = 0; i < N * pitch; i++) ((int8_t *)x)[i] = (int8_t)qt_range(r, -127, 127);
    else
        mt_fill(r, x, c->dt, N * pitch, -4, 4);
    int32_t *idx = mt_alloc(NK, QMOE_DTYPE_INT32);
    for (int64_t t = 0; t < NK; t++) idx[t] = c->one_expert ? 3 : (int32_t)qt_range(r, 0, c->E - 1);
    int64_t srows = c->smooth == 1 ? L : 1;
    float *scale = mt_alloc(dyn ? srows * H : N, QMOE_DTYPE_FLOAT32);
    mt_fill(r, scale, QMOE_DTYPE_FLOAT32, dyn ? srows * H : N, 0.5f, 2.0f);
    qmoe_dtype edt = dyn ? QMOE_DTYPE_INT8 : c->dt;
    void *ex = mt_alloc(A * H, edt);
    int32_t *ri = mt_alloc(NK, QMOE_DTYPE_INT32);
    void *tok = mt_alloc(L, c->tokens_dt);
    float *es = mt_alloc(A, QMOE_DTYPE_FLOAT32);

    int64_t xs[2] = {N, H}, xst[2] = {pitch, cs}, is[2] = {N, K}, exs[2] = {A, H};
    int64_t ss1[1] = {N}, ss2[2] = {srows, H};
    qmoe_tensor *tx = mt_tensor(x, c->dt, 2, xs, xst), *ti = mt_tensor(idx, QMOE_DTYPE_INT32, 2, is, NULL);
    qmoe_tensor *tsc = NULL;
    if (c->smooth) tsc = dyn ? mt_tensor(scale, QMOE_DTYPE_FLOAT32, 2, ss2, NULL)
                             : mt_tensor(scale, QMOE_DTYPE_FLOAT32, 1, ss1, NULL);
    qmoe_tensor *tex = mt_tensor(ex, edt, 2, exs, NULL), *tri = mt_tensor(ri, QMOE_DTYPE_INT32, 1, &NK, NULL);
    qmoe_tensor *ttok = c->tokens ? mt_tensor(tok, c->tokens_dt, 1, &L, NULL) : NULL;
    qmoe_tensor *tes = dyn || c->smooth ? mt_tensor(es, QMOE_DTYPE_FLOAT32, 1, &A, NULL) : NULL;
    qmoe_moe_routing_attrs a = {.active_num = c->active_num, .expert_num = c->E,
                                .tokens_mode = c->tokens, .quant_mode = c->quant,
                                .expert_start = c->start, .expert_end = c->end,
                                .row_idx_type = c->row_idx_type};
    qmoe_moe_options o = {.threads = c->threads};
    uint64_t ws = 0;
    qmoe_moe_executor *exe = NULL;
    qmoe_status st = qmoe_moe_init_routing_workspace_size(tx, ti, tsc, NULL, &a, tex, tri, ttok,
                                                          tes, &o, &ws, &exe);
    CHECK_MSG(st == QMOE_OK, "plan: %s", qmoe_last_error());
    void *w = malloc(ws ? ws : 1);
    if (!st) CHECK_MSG(qmoe_moe_init_routing(w, ws, exe, NULL) == QMOE_OK, "%s", qmoe_last_error());

    /* oracle: stable order by expert, then (token, choice) */
    int64_t *sorted = malloc(sizeof(int64_t) * (size_t)(NK + 1)), kept = 0;
    int64_t *count = calloc((size_t)L + 1, sizeof(int64_t));
    for (int64_t e = start; e < end; e++)
        for (int64_t t = 0; t < NK; t++)
            if (idx[t] == e) {
                sorted[kept++] = t;
                count[e - start]++;
            }
    int64_t rows = kept < A ? kept : A, run = 0;
    for (int64_t e = 0; e < L; e++) {
        run += count[e];
        if (c->tokens)
            CHECK_MSG((int64_t)mt_get(tok, c->tokens_dt, e) ==
                          (c->tokens == QMOE_MOE_TOKENS_COUNT ? count[e] : run),
                      "tokens[%lld]", (long long)e);
    }
    for (int64_t i = 0; i < NK; i++) {
        int64_t want = -1;
        if (c->row_idx_type == 1) {
            want = i < kept ? sorted[i] : -1;
        } else {
            for (int64_t p = 0; p < kept; p++)
                if (sorted[p] == i) want = p;
        }
        CHECK_MSG(ri[i] == want, "rowIdx[%lld] = %d, want %lld", (long long)i, ri[i], (long long)want);
    }
    double *v = malloc(sizeof(double) * (size_t)(H + 1));
    for (int64_t i = 0; i < A; i++) {
        if (i >= rows) { /* not routed: untouched */
            for (int64_t h = 0; h < H * (int64_t)mt_item(edt); h++) CHECK(((uint8_t *)ex)[i * H * (int64_t)mt_item(edt) + h] == 0x5A);
            continue;
        }
        int64_t t = sorted[i], n = t / K;
        if (!dyn) {
            for (int64_t h = 0; h < H; h++)
                CHECK(mt_get(ex, edt, i * H + h) == mt_get(x, c->dt, n * pitch + h));
            if (c->smooth) CHECK(es[i] == scale[n]);
            continue;
        }
        double amax = 0;
        int64_t srow = c->smooth == 1 ? idx[t] - start : 0;
        for (int64_t h = 0; h < H; h++) {
            v[h] = mt_get(x, c->dt, n * pitch + h) * (c->smooth ? scale[srow * H + h] : 1.0);
            if (fabs(v[h]) > amax) amax = fabs(v[h]);
        }
        double sref = amax / 127;
        CHECK_MSG(fabs(es[i] - sref) <= 1e-6 * sref, "row %lld scale %.9g vs %.9g", (long long)i, es[i], sref);
        for (int64_t h = 0; h < H; h++) {
            double q = sref > 0 ? nearbyint(v[h] / sref) : 0;
            CHECK_MSG(fabs(((int8_t *)ex)[i * H + h] - q) <= 1, "row %lld col %lld", (long long)i, (long long)h);
        }
    }
    free(v);
    free(sorted);
    free(count);
    free(w);
    qmoe_moe_executor_destroy(exe);
    qmoe_tensor *all[] = {tx, ti, tsc, tex, tri, ttok, tes};
    for (int i = 0; i < 7; i++) qmoe_tensor_destroy(all[i]);
    free(x);
    free(idx);
    free(scale);
    free(ex);
    free(ri);
    free(tok);
    free(es);
}

/* Phase two refuses an expert id out of range and writes nothing; phase one's rules. */
static void check_validation(void)
{
    enum { N = 4, K = 2, H = 8, E = 6 };
    static float x[N * H], scale[E * H], es[N * K];
    static int8_t xq[N * K * H];
    static int32_t idx[N * K], ri[N * K];
    static int64_t tok[E];
    int64_t xs[2] = {N, H}, is[2] = {N, K}, exs[2] = {N * K, H}, nk = N * K, e = E, e5 = 5,
            ss[2] = {E, H}, ss3[2] = {3, H};
    qmoe_tensor *tx = mt_tensor(x, QMOE_DTYPE_FLOAT32, 2, xs, NULL);
    qmoe_tensor *tx8 = mt_tensor(xq, QMOE_DTYPE_INT8, 2, xs, NULL);
    qmoe_tensor *ti = mt_tensor(idx, QMOE_DTYPE_INT32, 2, is, NULL);
    qmoe_tensor *ti64 = mt_tensor(tok, QMOE_DTYPE_INT64, 2, is, NULL);
    qmoe_tensor *tex = mt_tensor(xq, QMOE_DTYPE_INT8, 2, exs, NULL);
    qmoe_tensor *texf = mt_tensor(scale, QMOE_DTYPE_FLOAT32, 2, exs, NULL);
    qmoe_tensor *tri = mt_tensor(ri, QMOE_DTYPE_INT32, 1, &nk, NULL);
    qmoe_tensor *ttok = mt_tensor(tok, QMOE_DTYPE_INT64, 1, &e, NULL);
    qmoe_tensor *ttok5 = mt_tensor(tok, QMOE_DTYPE_INT64, 1, &e5, NULL);
    qmoe_tensor *tes = mt_tensor(es, QMOE_DTYPE_FLOAT32, 1, &nk, NULL);
    qmoe_tensor *tsm = mt_tensor(scale, QMOE_DTYPE_FLOAT32, 2, ss, NULL);
    qmoe_tensor *tsm3 = mt_tensor(scale, QMOE_DTYPE_FLOAT32, 2, ss3, NULL);
    qmoe_tensor *tri_on_x = mt_tensor(x, QMOE_DTYPE_INT32, 1, &nk, NULL);
    const qmoe_moe_routing_attrs ok = {.expert_num = E, .tokens_mode = QMOE_MOE_TOKENS_CUMSUM,
                                       .quant_mode = QMOE_MOE_QUANT_DYNAMIC};
    uint64_t ws;
    qmoe_moe_executor *ex = NULL;
    const qmoe_status NUL = QMOE_ERR_PARAM_NULLPTR, INV = QMOE_ERR_PARAM_INVALID;
#define PLAN(xx, ii, sc, off, at, exo, rio, to, eso) \
    qmoe_moe_init_routing_workspace_size(xx, ii, sc, off, at, exo, rio, to, eso, NULL, &ws, &ex)
    MT_EXPECT_FAIL(PLAN(NULL, ti, NULL, NULL, &ok, tex, tri, ttok, tes), NUL);
    MT_EXPECT_FAIL(PLAN(tx, NULL, NULL, NULL, &ok, tex, tri, ttok, tes), NUL);
    MT_EXPECT_FAIL(PLAN(tx, ti, NULL, NULL, NULL, tex, tri, ttok, tes), NUL);
    MT_EXPECT_FAIL(PLAN(tx, ti, NULL, NULL, &ok, NULL, tri, ttok, tes), NUL);
    MT_EXPECT_FAIL(PLAN(tx, ti, NULL, NULL, &ok, tex, NULL, ttok, tes), NUL);
    MT_EXPECT_FAIL(PLAN(tx, ti, NULL, NULL, &ok, tex, tri, NULL, tes), NUL);
    MT_EXPECT_FAIL(PLAN(tx, ti, NULL, NULL, &ok, tex, tri, ttok, NULL), NUL);
    MT_EXPECT_FAIL(PLAN(tx, ti, NULL, tsm, &ok, tex, tri, ttok, tes), INV); /* offset */
    MT_EXPECT_FAIL(PLAN(tx8, ti, NULL, NULL, &ok, tex, tri, ttok, tes), INV);
    MT_EXPECT_FAIL(PLAN(tx, ti64, NULL, NULL, &ok, tex, tri, ttok, tes), INV);
    MT_EXPECT_FAIL(PLAN(tx, ti, NULL, NULL, &ok, texf, tri, ttok, tes), INV);
    MT_EXPECT_FAIL(PLAN(tx, ti, NULL, NULL, &ok, tex, tri, ttok5, tes), INV);
    MT_EXPECT_FAIL(PLAN(tx, ti, tsm3, NULL, &ok, tex, tri, ttok, tes), INV);
    MT_EXPECT_FAIL(PLAN(tx, ti, NULL, NULL, &ok, tex, tri_on_x, ttok, tes), INV);
    qmoe_moe_routing_attrs bad[8];
    for (int i = 0; i < 8; i++) bad[i] = ok;
    bad[0].drop_pad_mode = 1;
    bad[1].expert_num = 0;
    bad[2].active_num = -1;
    bad[3].tokens_mode = 3;
    bad[4].quant_mode = 0;
    bad[5].row_idx_type = 2;
    bad[6].expert_start = 4, bad[6].expert_end = 2;
    bad[7].expert_start = 0, bad[7].expert_end = 7;
    for (int i = 0; i < 8; i++) MT_EXPECT_FAIL(PLAN(tx, ti, NULL, NULL, &bad[i], tex, tri, ttok, tes), INV);
    CHECK(ex == NULL);
    CHECK(PLAN(tx, ti, tsm, NULL, &ok, tex, tri, ttok, tes) == QMOE_OK);
#undef PLAN
    void *w = malloc(ws);
    for (int t = 0; t < N * K; t++) idx[t] = t % E;
    idx[5] = E; /* out of range */
    memset(ri, 0x5A, sizeof ri);
    memset(xq, 0x5A, sizeof xq);
    MT_EXPECT_FAIL(qmoe_moe_init_routing(w, ws, ex, NULL), INV);
    for (int t = 0; t < N * K; t++) CHECK(ri[t] == 0x5A5A5A5A);
    for (int t = 0; t < N * K * H; t++) CHECK(xq[t] == 0x5A);
    idx[5] = -1;
    MT_EXPECT_FAIL(qmoe_moe_init_routing(w, ws, ex, NULL), INV);
    MT_EXPECT_FAIL(qmoe_moe_init_routing(w, ws - 1, ex, NULL), INV);
    MT_EXPECT_FAIL(qmoe_moe_init_routing(NULL, ws, ex, NULL), NUL);
    idx[5] = 0;
    CHECK(qmoe_moe_init_routing(w, ws, ex, NULL) == QMOE_OK);
    free(w);
    qmoe_moe_executor_destroy(ex);
    qmoe_tensor *all[] = {tx, tx8, ti, ti64, tex, texf, tri, ttok, ttok5, tes, tsm, tsm3, tri_on_x};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) qmoe_tensor_destroy(all[i]);
}

int main(void)
{
    qt_rng r = {3};
    int n_case = 0;
    static const int64_t Ns[] = {0, 1, 33, 17};
    static const int64_t Ks[] = {1, 8, 2, 8};
    for (int di = 0; di < 3; di++)
        for (int quant = 0; quant < 2; quant++)
            for (int smooth = 0; smooth < 3; smooth++)
                for (int range = 0; range < 2; range++)
                    for (int active = 0; active < 2; active++)
                        for (int tokens = 0; tokens < 3; tokens++) {
                            if (!quant && smooth == 2) continue;
                            ir_case c = {
                                .dt = mt_float_dtypes[di],
                                .N = Ns[n_case % 4], .K = Ks[(n_case / 4) % 4], .H = 24, .E = 8,
                                .quant = quant ? QMOE_MOE_QUANT_DYNAMIC : QMOE_MOE_QUANT_NONE,
                                .smooth = smooth,
                                .start = range ? 2 : 0, .end = range ? 5 : 0,
                                .active_num = active ? 5 : 0,
                                .tokens = tokens,
                                .tokens_dt = n_case % 2 ? QMOE_DTYPE_INT32 : QMOE_DTYPE_INT64,
                                .row_idx_type = (n_case / 2) % 2,
                                .strided = (n_case / 3) % 2,
                                .one_expert = n_case % 7 == 3,
                                .threads = n_case % 5,
                            };
                            run_case(&r, &c);
                            n_case++;
                        }
    /* the int8 input with its per-token scales carried along (pre-quantized tokens) */
    ir_case q8 = {.dt = QMOE_DTYPE_INT8, .N = 19, .K = 8, .H = 32, .E = 16,
                  .quant = QMOE_MOE_QUANT_NONE, .smooth = 1, .tokens = QMOE_MOE_TOKENS_COUNT,
                  .tokens_dt = QMOE_DTYPE_INT64, .threads = 3};
    run_case(&r, &q8);
    /* a realistic prefill slice: 256 tokens, top-8 of 64 experts, hidden 7168 */
    ir_case big = {.dt = QMOE_DTYPE_BFLOAT16, .N = 256, .K = 8, .H = 7168, .E = 64,
                   .quant = QMOE_MOE_QUANT_DYNAMIC, .smooth = 0, .tokens = QMOE_MOE_TOKENS_CUMSUM,
                   .tokens_dt = QMOE_DTYPE_INT64, .threads = 0};
    run_case(&r, &big);
    check_validation();
    return qt_finish("moe_init_routing");
}
