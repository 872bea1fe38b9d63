/* GroupedMatmul against a double oracle (tests/support/oracle.c packs the weight storages):
 * every weight layout, per-channel and per-group scales, bf16/fp16/fp32/int32 outputs, the float
 * path, cumsum and count group lists, empty experts, M = 0 and 1, non-contiguous x, every kernel
 * of this CPU, 1 and 3 threads (bit-identical); rows past the group list and failed calls write
 * nothing; the validation rules return the vendor codes. */
#include "kernels/kernel.h"
#include "qmoe/grouped_matmul.h"
#include "qmoe/weights.h"
#include "support/oracle.h"
#include "test_moe_common.h"

typedef struct qcase {
    oracle_wlayout layout;
    int64_t E, K, N, G;
    const int64_t *counts; /* rows per expert; M = their sum + tail */
    int64_t tail;          /* rows past the group list (never written) */
    int count_list, strided_x, bias, scaled;
    qmoe_dtype out_dtype;
} qcase;

static const qmoe_dtype wdtype[] = {QMOE_DTYPE_INT8, QMOE_DTYPE_INT8, QMOE_DTYPE_INT4,
                                    QMOE_DTYPE_INT4, QMOE_DTYPE_INT32, QMOE_DTYPE_INT32};

static qmoe_tensor *weight_tensor(oracle_wlayout l, int64_t E, int64_t K, int64_t N, void *data)
{
    int64_t nd[3] = {E, K, l == ORACLE_W_INT32_ND ? N / 8 : N};
    int64_t cols = l == ORACLE_W_INT8_NZ ? 32 : 64;
    int64_t nz[5] = {E, N / cols, K / 16, 16, l == ORACLE_W_INT32_NZ ? 8 : cols};
    int is_nz = l == ORACLE_W_INT8_NZ || l == ORACLE_W_INT4_NZ || l == ORACLE_W_INT32_NZ;
    qmoe_tensor *t = NULL;
    qmoe_status st = qmoe_tensor_create(is_nz ? nz : nd, is_nz ? 5 : 3, NULL, wdtype[l],
                                        is_nz ? QMOE_FORMAT_FRACTAL_NZ : QMOE_FORMAT_ND, data, &t);
    CHECK_MSG(st == QMOE_OK, "weight tensor: %s", qmoe_last_error());
    return t;
}

/* Runs one case with `kernel` and `threads`; returns the output buffer (caller frees). */
static void *run_q(const qcase *c, qt_rng *r, int32_t kernel, int threads, int64_t *Mout)
{
    int a8w4 = c->layout >= ORACLE_W_INT4_ND;
    int64_t E = c->E, K = c->K, N = c->N, G = c->G, M = c->tail;
    for (int64_t e = 0; e < E; e++) M += c->counts[e];
    *Mout = M;
    int64_t ldx = c->strided_x ? K + 5 : K;
    int8_t *x = malloc((size_t)(M * ldx + 1));
    int8_t *w = malloc((size_t)(E * K * N));
    for (int64_t i = 0; i < M * ldx; i++) x[i] = (int8_t)qt_range(r, -128, 127);
    for (int64_t i = 0; i < E * K * N; i++) w[i] = (int8_t)(a8w4 ? qt_range(r, -8, 7) : qt_range(r, -128, 127));
    uint8_t *wst = calloc(1, (size_t)oracle_weight_bytes(c->layout, E, K, N));
    oracle_pack_weight(c->layout, w, E, K, N, wst);
    float *ws = malloc(sizeof(float) * (size_t)(E * G * N)), *xs = malloc(sizeof(float) * (size_t)(M + 1));
    for (int64_t i = 0; i < E * G * N; i++) ws[i] = qt_uniform(r, 0.001f, 0.02f);
    for (int64_t i = 0; i < M; i++) xs[i] = qt_uniform(r, 0.001f, 0.05f);
    float *bf = malloc(sizeof(float) * (size_t)(E * N));
    int32_t *bi = malloc(sizeof(int32_t) * (size_t)(E * N));
    for (int64_t i = 0; i < E * N; i++) {
        bf[i] = qt_uniform(r, -2, 2);
        bi[i] = (int32_t)qt_range(r, -100000, 100000);
    }
    int64_t *gl = malloc(sizeof(int64_t) * (size_t)E), at = 0;
    for (int64_t e = 0; e < E; e++) {
        at += c->counts[e];
        gl[e] = c->count_list ? c->counts[e] : at;
    }
    qmoe_dtype od = c->scaled ? c->out_dtype : QMOE_DTYPE_INT32;
    /* 64-byte aligned (whole bf16 output lines go out as streaming stores) or 32 bytes off
     * (plain stores): both store paths meet the oracle */
    size_t ob = (size_t)(M * N > 0 ? M * N : 1) * mt_item(od);
    char *oblk = aligned_alloc(64, (ob + 32 + 63) / 64 * 64);
    void *out = oblk + (c->strided_x ? 32 : 0);
    memset(out, 0x5A, ob);

    int64_t xsh[2] = {M, K}, xst[2] = {ldx, 1}, ssh[3] = {E, G, N}, s2[2] = {E, N}, msh[1] = {M},
            esh[1] = {E}, osh[2] = {M, N};
    qmoe_tensor *tx = mt_tensor(x, QMOE_DTYPE_INT8, 2, xsh, xst);
    qmoe_tensor *tw = weight_tensor(c->layout, E, K, N, wst);
    qmoe_tensor *ts = c->scaled ? (G > 1 ? mt_tensor(ws, QMOE_DTYPE_FLOAT32, 3, ssh, NULL)
                                         : mt_tensor(ws, QMOE_DTYPE_FLOAT32, 2, s2, NULL))
                                : NULL;
    qmoe_tensor *tp = c->scaled ? mt_tensor(xs, QMOE_DTYPE_FLOAT32, 1, msh, NULL) : NULL;
    qmoe_tensor *tb = !c->bias ? NULL
                      : c->scaled ? mt_tensor(bf, QMOE_DTYPE_FLOAT32, 2, s2, NULL)
                                  : mt_tensor(bi, QMOE_DTYPE_INT32, 2, s2, NULL);
    qmoe_tensor *tg = mt_tensor(gl, QMOE_DTYPE_INT64, 1, esh, NULL);
    qmoe_tensor *to = mt_tensor(out, od, 2, osh, NULL);
    qmoe_grouped_matmul_options o = QMOE_GROUPED_MATMUL_OPTIONS_INIT;
    o.threads = threads;
    o.kernel = kernel;
    uint64_t wsz = 0;
    qmoe_grouped_matmul_executor *ex = NULL;
    qmoe_status st = qmoe_grouped_matmul_workspace_size(tx, tw, tb, ts, tp, tg, c->count_list, to,
                                                        &o, &wsz, &ex);
    CHECK_MSG(st == QMOE_OK, "plan: %s", qmoe_last_error());
    if (!st) {
        void *wk = malloc(wsz);
        CHECK_MSG(qmoe_grouped_matmul(wk, wsz, ex, NULL) == QMOE_OK, "run: %s", qmoe_last_error());
        free(wk);
    }
    /* the oracle, in double */
    int64_t row = 0;
    for (int64_t e = 0; e < E; row += c->counts[e], e++)
        for (int64_t m = row; m < row + c->counts[e]; m++)
            for (int64_t n = 0; n < N; n++) {
                double ref = 0, mag = 0;
                int64_t iacc = 0;
                for (int64_t g = 0; g < G; g++) {
                    int64_t acc = 0;
                    for (int64_t k = g * (K / G); k < (g + 1) * (K / G); k++)
                        acc += (int64_t)x[m * ldx + k] * w[(e * K + k) * N + n];
                    iacc += acc;
                    double t = (double)acc * ws[(e * G + g) * N + n] * xs[m];
                    ref += t;
                    mag += fabs(t);
                }
                double got = mt_get(out, od, m * N + n);
                if (!c->scaled) {
                    if (c->bias) iacc += bi[e * N + n];
                    CHECK_MSG(got == (double)iacc, "int32 m %lld n %lld: %.17g vs %lld", (long long)m,
                              (long long)n, got, (long long)iacc);
                    continue;
                }
                if (c->bias) {
                    ref += bf[e * N + n];
                    mag += fabs(bf[e * N + n]);
                }
                /* fp16 subnormals: absolute spacing 2^-24 */
                double tol = mag * (double)(G + 4) * 1.2e-7 + mt_eps(od) * (fabs(ref) + mag * 1e-6) +
                             (od == QMOE_DTYPE_FLOAT16 ? 6e-8 : 1e-30);
                CHECK_MSG(fabs(got - ref) <= tol, "layout %d G %lld out %d m %lld n %lld: %.9g vs %.9g",
                          (int)c->layout, (long long)G, (int)od, (long long)m, (long long)n, got, ref);
            }
    /* rows past the group list: untouched */
    void *pattern = mt_alloc(1, od);
    for (int64_t i = row * N; i < M * N; i++)
        CHECK(memcmp((char *)out + i * (int64_t)mt_item(od), pattern, mt_item(od)) == 0);
    free(pattern);
    qmoe_grouped_matmul_executor_destroy(ex);
    qmoe_tensor *ts_[] = {tx, tw, ts, tp, tb, tg, to};
    for (int i = 0; i < 7; i++) qmoe_tensor_destroy(ts_[i]);
    free(x), free(w), free(wst), free(ws), free(xs), free(bf), free(bi), free(gl);
    void *ret = malloc(ob);
    memcpy(ret, out, ob);
    free(oblk);
    return ret;
}

static void quantized_cases(void)
{
    static const int64_t c4[] = {5, 0, 23, 1}, c1[] = {1}, c0[] = {0, 0}, big[] = {40, 17};
    qt_rng r = {11};
    const qmoe_dtype outs[] = {QMOE_DTYPE_BFLOAT16, QMOE_DTYPE_FLOAT16, QMOE_DTYPE_FLOAT32};
    int cases = 0;
    for (int l = 0; l < 6; l++)
        for (int variant = 0; variant < 7; variant++) {
            qcase c = {(oracle_wlayout)l, 4, 128, 128, 1, c4, 3, variant & 1, variant % 3 == 1,
                       variant % 2 == 0, 1, outs[variant % 3]};
            if (variant == 3) c.G = 2;               /* per group */
            if (variant == 4) c.counts = c1, c.E = 1, c.tail = 0; /* M = 1 */
            if (variant == 5) c.counts = c0, c.E = 2, c.tail = 0; /* M = 0 */
            if (variant == 6) c.counts = big, c.E = 2, c.N = 192, c.K = 256, c.G = l >= 2 ? 4 : 1;
            if (l == 0 && variant == 2) c.scaled = 0; /* int32 output */
            if (l == 0 && variant == 1) c.N = 70;     /* N not a multiple of 16 */
            if (l == 0 && variant == 0) c.N = 33;     /* N odd: the plain loop */
            /* AUTO and every kernel the library names */
            for (int32_t k = QMOE_KERNEL_AUTO; strcmp(qmoe_kernel_name((qmoe_kernel)k), "unknown"); k++) {
                if (k != QMOE_KERNEL_AUTO && (k == QMOE_KERNEL_REFERENCE || !qmoe_kernel_lookup(k)))
                    continue;
                qt_rng r1 = r, r3 = r;
                int64_t M;
                void *a = run_q(&c, &r1, k, 1, &M);
                void *b = run_q(&c, &r3, k, 3, &M);
                CHECK_MSG(memcmp(a, b, (size_t)(M * c.N) * mt_item(c.scaled ? c.out_dtype : QMOE_DTYPE_INT32)) == 0,
                          "layout %d variant %d kernel %d: 1 and 3 threads differ", l, variant, (int)k);
                free(a);
                free(b);
                cases++;
            }
            (void)qt_next(&r);
        }
    CHECK(cases >= 42);
}

/* Prepacked weights (qmoe/weights.h, made for the fused operator) give the raw path's bits:
 * int8 ND / NZ and int32-packed int4 NZ, per channel and per group; without scale too. */
static void prepacked_cases(void)
{
    static const oracle_wlayout layouts[] = {ORACLE_W_INT8_ND, ORACLE_W_INT8_NZ, ORACLE_W_INT32_NZ};
    qt_rng r = {23};
    for (int li = 0; li < 3; li++)
        for (int G = 1; G <= 2; G++) {
            oracle_wlayout l = layouts[li];
            int a8w4 = l == ORACLE_W_INT32_NZ;
            enum { E = 3, K = 128, N = 192, M = 50 };
            int64_t counts[E] = {17, 0, 30}, gl[E] = {17, 17, 47};
            int8_t *x = malloc(M * K), *w = malloc(E * K * N);
            for (int i = 0; i < M * K; i++) x[i] = (int8_t)qt_range(&r, -128, 127);
            for (int i = 0; i < E * K * N; i++) w[i] = (int8_t)(a8w4 ? qt_range(&r, -8, 7) : qt_range(&r, -128, 127));
            uint8_t *wst = calloc(1, (size_t)oracle_weight_bytes(l, E, K, N));
            oracle_pack_weight(l, w, E, K, N, wst);
            float ws[E * 2 * N], xs[M], zero[E * N];
            for (int i = 0; i < E * G * N; i++) ws[i] = qt_uniform(&r, 0.001f, 0.02f);
            for (int i = 0; i < M; i++) xs[i] = qt_uniform(&r, 0.001f, 0.05f);
            memset(zero, 0, sizeof zero);
            uint16_t raw[M * N], pre[M * N], pre2[M * N];
            int64_t xsh[2] = {M, K}, ssh[3] = {E, G, N}, s2[2] = {E, N}, msh[1] = {M}, esh[1] = {E}, osh[2] = {M, N};
            qmoe_tensor *tx = mt_tensor(x, QMOE_DTYPE_INT8, 2, xsh, NULL), *tw = weight_tensor(l, E, K, N, wst);
            qmoe_tensor *ts = G > 1 ? mt_tensor(ws, QMOE_DTYPE_FLOAT32, 3, ssh, NULL) : mt_tensor(ws, QMOE_DTYPE_FLOAT32, 2, s2, NULL);
            qmoe_tensor *tz = mt_tensor(zero, QMOE_DTYPE_FLOAT32, 2, s2, NULL), *tp = mt_tensor(xs, QMOE_DTYPE_FLOAT32, 1, msh, NULL);
            qmoe_tensor *tg = mt_tensor(gl, QMOE_DTYPE_INT64, 1, esh, NULL);
            qmoe_tensor *tr = mt_tensor(raw, QMOE_DTYPE_BFLOAT16, 2, osh, NULL), *tq = mt_tensor(pre, QMOE_DTYPE_BFLOAT16, 2, osh, NULL);
            qmoe_tensor *tq2 = mt_tensor(pre2, QMOE_DTYPE_BFLOAT16, 2, osh, NULL);
            qmoe_weights *pw = NULL;
            CHECK_MSG(qmoe_weights_prepack(tw, ts, a8w4 ? tz : NULL, NULL, &pw) == QMOE_OK, "prepack: %s", qmoe_last_error());
            qmoe_tensor *tpw = NULL;
            if (pw) CHECK(qmoe_weights_tensor(pw, &tpw) == QMOE_OK);
            const struct { qmoe_tensor *w, *s, *o; } runs[3] = {{tw, ts, tr}, {tpw, ts, tq}, {tpw, NULL, tq2}};
            memset(raw, 0, sizeof raw), memset(pre, 0, sizeof pre), memset(pre2, 0, sizeof pre2);
            for (int i = 0; i < 3 && tpw; i++) {
                uint64_t wsz = 0;
                qmoe_grouped_matmul_executor *ex = NULL;
                qmoe_status st = qmoe_grouped_matmul_workspace_size(tx, runs[i].w, NULL, runs[i].s, tp, tg, 0,
                                                                    runs[i].o, NULL, &wsz, &ex);
                CHECK_MSG(st == QMOE_OK, "plan %d: %s", i, qmoe_last_error());
                void *wk = malloc(wsz ? wsz : 1);
                if (!st) CHECK_MSG(qmoe_grouped_matmul(wk, wsz, ex, NULL) == QMOE_OK, "run: %s", qmoe_last_error());
                free(wk);
                qmoe_grouped_matmul_executor_destroy(ex);
            }
            CHECK_MSG(memcmp(raw, pre, sizeof raw) == 0, "layout %d G %d: prepacked bits differ", (int)l, G);
            CHECK_MSG(memcmp(raw, pre2, sizeof raw) == 0, "layout %d G %d: prepacked (no scale) bits differ", (int)l, G);
            /* and the values are the matmul's: one spot check against the double sum */
            double ref = 0;
            for (int g = 0; g < G; g++) {
                double acc = 0;
                for (int k = g * (K / G); k < (g + 1) * (K / G); k++) acc += (double)x[20 * K + k] * w[(2 * K + k) * N + 5];
                ref += acc * ws[(2 * G + g) * N + 5] * xs[20];
            }
            CHECK_MSG(fabs(mt_get(raw, QMOE_DTYPE_BFLOAT16, 20 * N + 5) - ref) <= fabs(ref) / 128 + 1e-6, "spot");
            (void)counts;
            qmoe_tensor *t_[] = {tx, tw, ts, tz, tp, tg, tr, tq, tq2, tpw};
            for (int i = 0; i < 10; i++) qmoe_tensor_destroy(t_[i]);
            qmoe_weights_destroy(pw);
            free(x), free(w), free(wst);
        }
}

static void float_cases(void)
{
    static const int64_t counts[] = {3, 0, 9};
    qt_rng r = {5};
    for (int d = 0; d < 3; d++)
        for (int variant = 0; variant < 2; variant++) {
            qmoe_dtype dt = mt_float_dtypes[d];
            int64_t E = 3, K = 40, N = 24, M = 14, ldx = variant ? K + 3 : K;
            void *x = mt_alloc(M * ldx, dt), *w = mt_alloc(E * K * N, dt), *b = mt_alloc(E * N, dt),
                 *out = mt_alloc(M * N, dt);
            mt_fill(&r, x, dt, M * ldx, -2, 2);
            mt_fill(&r, w, dt, E * K * N, -2, 2);
            mt_fill(&r, b, dt, E * N, -2, 2);
            int64_t gl[3] = {3, 0, 9}, at = 0;
            if (!variant) gl[1] = 3, gl[2] = 12;
            int64_t xsh[2] = {M, K}, xst[2] = {ldx, 1}, wsh[3] = {E, K, N}, bsh[2] = {E, N}, gsh[1] = {E},
                    osh[2] = {M, N};
            qmoe_tensor *tx = mt_tensor(x, dt, 2, xsh, xst), *tw = mt_tensor(w, dt, 3, wsh, NULL),
                        *tb = mt_tensor(b, dt, 2, bsh, NULL), *tg = mt_tensor(gl, QMOE_DTYPE_INT64, 1, gsh, NULL),
                        *to = mt_tensor(out, dt, 2, osh, NULL);
            uint64_t wsz = 0;
            qmoe_grouped_matmul_executor *ex = NULL;
            qmoe_status st = qmoe_grouped_matmul_workspace_size(tx, tw, variant ? tb : NULL, NULL, NULL, tg,
                                                                variant, to, NULL, &wsz, &ex);
            CHECK_MSG(st == QMOE_OK, "float plan: %s", qmoe_last_error());
            void *wk = malloc(wsz);
            if (!st) CHECK_MSG(qmoe_grouped_matmul(wk, wsz, ex, NULL) == QMOE_OK, "float run: %s", qmoe_last_error());
            for (int64_t e = 0; e < E; at += counts[e], e++)
                for (int64_t m = at; m < at + counts[e]; m++)
                    for (int64_t n = 0; n < N; n++) {
                        double ref = 0, mag = 0;
                        for (int64_t k = 0; k < K; k++) {
                            double t = mt_get(x, dt, m * ldx + k) * mt_get(w, dt, (e * K + k) * N + n);
                            ref += t;
                            mag += fabs(t);
                        }
                        if (variant) ref += mt_get(b, dt, e * N + n), mag += fabs(mt_get(b, dt, e * N + n));
                        double got = mt_get(out, dt, m * N + n);
                        double tol = mag * (double)(K + 2) * 6e-8 + mt_eps(dt) * (fabs(ref) + mag * 1e-5);
                        CHECK_MSG(fabs(got - ref) <= tol, "float dt %d m %lld n %lld: %.9g vs %.9g", (int)dt,
                                  (long long)m, (long long)n, got, ref);
                    }
            void *pattern = mt_alloc(1, dt);
            for (int64_t i = at * N; i < M * N; i++)
                CHECK(memcmp((char *)out + i * (int64_t)mt_item(dt), pattern, mt_item(dt)) == 0);
            free(pattern);
            qmoe_grouped_matmul_executor_destroy(ex);
            qmoe_tensor *t_[] = {tx, tw, tb, tg, to};
            for (int i = 0; i < 5; i++) qmoe_tensor_destroy(t_[i]);
            free(x), free(w), free(b), free(out), free(wk);
        }
}

static void validation(void)
{
    int8_t x[8 * 32], w[2 * 32 * 16];
    float ws[2 * 16], xs[8], out[8 * 16], fx[8 * 32];
    int32_t o32[8 * 16];
    int64_t gl[2] = {3, 8};
    int64_t xsh[2] = {8, 32}, wsh[3] = {2, 32, 16}, ssh[2] = {2, 16}, psh[1] = {8}, gsh[1] = {2},
            osh[2] = {8, 16}, bad[2] = {8, 17}, gbad[1] = {3};
    qmoe_tensor *tx = mt_tensor(x, QMOE_DTYPE_INT8, 2, xsh, NULL), *tw = mt_tensor(w, QMOE_DTYPE_INT8, 3, wsh, NULL),
                *ts = mt_tensor(ws, QMOE_DTYPE_FLOAT32, 2, ssh, NULL), *tp = mt_tensor(xs, QMOE_DTYPE_FLOAT32, 1, psh, NULL),
                *tg = mt_tensor(gl, QMOE_DTYPE_INT64, 1, gsh, NULL), *to = mt_tensor(out, QMOE_DTYPE_FLOAT32, 2, osh, NULL),
                *tbad = mt_tensor(out, QMOE_DTYPE_FLOAT32, 2, bad, NULL), *tg3 = mt_tensor(gl, QMOE_DTYPE_INT64, 1, gbad, NULL),
                *t32 = mt_tensor(o32, QMOE_DTYPE_INT32, 2, osh, NULL), *tfx = mt_tensor(fx, QMOE_DTYPE_FLOAT32, 2, xsh, NULL),
                *txo = mt_tensor(out, QMOE_DTYPE_INT8, 2, xsh, NULL);
    uint64_t wsz;
    qmoe_grouped_matmul_executor *ex = NULL;
    const qmoe_status NUL = QMOE_ERR_PARAM_NULLPTR, INV = QMOE_ERR_PARAM_INVALID;
    MT_EXPECT_FAIL(qmoe_grouped_matmul_workspace_size(NULL, tw, NULL, ts, tp, tg, 0, to, NULL, &wsz, &ex), NUL);
    MT_EXPECT_FAIL(qmoe_grouped_matmul_workspace_size(tx, NULL, NULL, ts, tp, tg, 0, to, NULL, &wsz, &ex), NUL);
    MT_EXPECT_FAIL(qmoe_grouped_matmul_workspace_size(tx, tw, NULL, ts, tp, NULL, 0, to, NULL, &wsz, &ex), NUL);
    MT_EXPECT_FAIL(qmoe_grouped_matmul_workspace_size(tx, tw, NULL, ts, tp, tg, 0, NULL, NULL, &wsz, &ex), NUL);
    MT_EXPECT_FAIL(qmoe_grouped_matmul_workspace_size(tx, tw, NULL, ts, tp, tg, 0, to, NULL, NULL, &ex), NUL);
    MT_EXPECT_FAIL(qmoe_grouped_matmul_workspace_size(tx, tw, NULL, ts, tp, tg, 0, to, NULL, &wsz, NULL), NUL);
    MT_EXPECT_FAIL(qmoe_grouped_matmul_workspace_size(tx, tw, NULL, ts, NULL, tg, 0, to, NULL, &wsz, &ex), NUL);
    MT_EXPECT_FAIL(qmoe_grouped_matmul_workspace_size(tx, tw, NULL, NULL, tp, tg, 0, to, NULL, &wsz, &ex), NUL);
    MT_EXPECT_FAIL(qmoe_grouped_matmul_workspace_size(tx, tw, NULL, ts, tp, tg, 2, to, NULL, &wsz, &ex), INV);
    MT_EXPECT_FAIL(qmoe_grouped_matmul_workspace_size(tx, tw, NULL, ts, tp, tg, 0, tbad, NULL, &wsz, &ex), INV);
    MT_EXPECT_FAIL(qmoe_grouped_matmul_workspace_size(tx, tw, NULL, ts, tp, tg3, 0, to, NULL, &wsz, &ex), INV);
    MT_EXPECT_FAIL(qmoe_grouped_matmul_workspace_size(tx, tw, NULL, ts, tp, tg, 0, t32, NULL, &wsz, &ex), INV);
    MT_EXPECT_FAIL(qmoe_grouped_matmul_workspace_size(tx, tw, NULL, NULL, NULL, tg, 0, to, NULL, &wsz, &ex), INV);
    MT_EXPECT_FAIL(qmoe_grouped_matmul_workspace_size(tfx, tw, NULL, NULL, NULL, tg, 0, to, NULL, &wsz, &ex), INV);
    MT_EXPECT_FAIL(qmoe_grouped_matmul_workspace_size(tx, tw, NULL, ts, tp, tg, 0, txo, NULL, &wsz, &ex), INV);
    MT_EXPECT_FAIL(qmoe_grouped_matmul_workspace_size(tx, tw, tp, ts, tp, tg, 0, to, NULL, &wsz, &ex), INV);
    /* aliasing: out over x */
    qmoe_tensor *tov = mt_tensor(x, QMOE_DTYPE_FLOAT32, 2, osh, NULL);
    MT_EXPECT_FAIL(qmoe_grouped_matmul_workspace_size(tx, tw, NULL, ts, tp, tg, 0, tov, NULL, &wsz, &ex), INV);
    qmoe_tensor_destroy(tov);
    /* group list data, phase two: decreasing cumsum, count over M, negative count; nothing written */
    CHECK(qmoe_grouped_matmul_workspace_size(tx, tw, NULL, ts, tp, tg, 0, to, NULL, &wsz, &ex) == QMOE_OK);
    int64_t wk[8];
    CHECK(wsz <= sizeof wk);
    memset(out, 0x5A, sizeof out);
    float before[8 * 16];
    memcpy(before, out, sizeof out);
    const int64_t bad_lists[3][2] = {{5, 4}, {3, 9}, {-1, 2}};
    for (int i = 0; i < 3; i++) {
        gl[0] = bad_lists[i][0];
        gl[1] = bad_lists[i][1];
        MT_EXPECT_FAIL(qmoe_grouped_matmul(wk, wsz, ex, NULL), INV);
        CHECK(memcmp(before, out, sizeof out) == 0);
    }
    qmoe_grouped_matmul_executor_destroy(ex);
    /* counts whose running total would overflow int64 ({2, INT64_MAX}: a signed overflow if
     * summed before its range check; UBSan builds catch one) */
    CHECK(qmoe_grouped_matmul_workspace_size(tx, tw, NULL, ts, tp, tg, 1, to, NULL, &wsz, &ex) == QMOE_OK);
    const int64_t huge_lists[3][2] = {{2, INT64_MAX}, {INT64_MAX, 2}, {INT64_MAX, INT64_MAX}};
    for (int i = 0; i < 3; i++) {
        gl[0] = huge_lists[i][0];
        gl[1] = huge_lists[i][1];
        MT_EXPECT_FAIL(qmoe_grouped_matmul(wk, wsz, ex, NULL), INV);
        CHECK(memcmp(before, out, sizeof out) == 0);
    }
    MT_EXPECT_FAIL(qmoe_grouped_matmul(NULL, wsz, ex, NULL), NUL);
    MT_EXPECT_FAIL(qmoe_grouped_matmul(wk, wsz - 1, ex, NULL), INV);
    MT_EXPECT_FAIL(qmoe_grouped_matmul(wk, wsz, NULL, NULL), NUL);
    qmoe_grouped_matmul_executor_destroy(ex);
    qmoe_tensor *t_[] = {tx, tw, ts, tp, tg, to, tbad, tg3, t32, tfx, txo};
    for (int i = 0; i < 11; i++) qmoe_tensor_destroy(t_[i]);
}

int main(void)
{
    quantized_cases();
    prepacked_cases();
    float_cases();
    validation();
    return qt_finish("grouped_matmul");
}
