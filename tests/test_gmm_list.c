/*
 * The per-expert weight-list operator (qmoe/gmm_list.h): each expert's weight and scale in its
 * own allocation, every kernel this CPU runs, against support/oracle.c; the swiglu_limit clamp in
 * every kernel against a double-precision formula written here from the vendor's definition
 * (rows clamped on both halves, rows far past the limit, NaN rows); the argument
 * rules; a run queued on a stream whose executor is destroyed before the stream finishes; and a bad
 * groupList, reported when the operator runs.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "qmoe/gmm_list.h"
#include "qmoe/qmoe.h"
#include "qmoe/runtime.h"
#include "support/oracle.h"
#include "support/testlib.h"

enum { M = 37, K = 64, N = 128, E = 5, N2 = N / 2 };

typedef struct problem {
    int8_t x[M * K];
    int8_t w[E * K * N]; /* logical [E][K][N] */
    float ws[E * N];
    float xs[M];
    int64_t gl[E];
    void *w_exp[E];  /* per-expert storages, separately allocated */
    float *ws_exp[E];
    qmoe_tensor *tw[E], *tws[E], *tx, *txs, *tgl, *tout, *tscale;
    int8_t out[M * N2];
    float scale[M];
} problem;

static void make(problem *p, int nz, uint64_t seed)
{
    qt_rng r = {seed};
    memset(p, 0, sizeof *p);
    for (int i = 0; i < M * K; i++) p->x[i] = (int8_t)qt_range(&r, -128, 127);
    for (int i = 0; i < E * K * N; i++) p->w[i] = (int8_t)qt_range(&r, -128, 127);
    for (int i = 0; i < E * N; i++) p->ws[i] = qt_uniform(&r, 0.5f, 1.5f) / (8.0f * 70.0f * 40.0f);
    for (int i = 0; i < M; i++) p->xs[i] = qt_uniform(&r, 0.5f, 1.5f);
    int64_t ends[E] = {6, 6, 19, 30, 35}; /* an empty expert, rows past the end stay unwritten */
    memcpy(p->gl, ends, sizeof ends);
    oracle_wlayout layout = nz ? ORACLE_W_INT8_NZ : ORACLE_W_INT8_ND;
    for (int e = 0; e < E; e++) {
        p->w_exp[e] = malloc((size_t)oracle_weight_bytes(layout, 1, K, N));
        oracle_pack_weight(layout, p->w + (size_t)e * K * N, 1, K, N, p->w_exp[e]);
        p->ws_exp[e] = malloc(N * sizeof(float));
        memcpy(p->ws_exp[e], p->ws + e * N, N * sizeof(float));
        if (nz)
            qmoe_tensor_create((int64_t[]){N / 32, K / 16, 16, 32}, 4, NULL, QMOE_DTYPE_INT8,
                               QMOE_FORMAT_FRACTAL_NZ, p->w_exp[e], &p->tw[e]);
        else
            qmoe_tensor_create((int64_t[]){K, N}, 2, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND,
                               p->w_exp[e], &p->tw[e]);
        qmoe_tensor_create((int64_t[]){N}, 1, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND,
                           p->ws_exp[e], &p->tws[e]);
    }
    qmoe_tensor_create((int64_t[]){M, K}, 2, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, p->x, &p->tx);
    qmoe_tensor_create((int64_t[]){M}, 1, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, p->xs, &p->txs);
    qmoe_tensor_create((int64_t[]){E}, 1, NULL, QMOE_DTYPE_INT64, QMOE_FORMAT_ND, p->gl, &p->tgl);
    qmoe_tensor_create((int64_t[]){M, N2}, 2, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, p->out,
                       &p->tout);
    qmoe_tensor_create((int64_t[]){M}, 1, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, p->scale,
                       &p->tscale);
}

static void release(problem *p)
{
    for (int e = 0; e < E; e++) {
        qmoe_tensor_destroy(p->tw[e]);
        qmoe_tensor_destroy(p->tws[e]);
        free(p->w_exp[e]);
        free(p->ws_exp[e]);
    }
    qmoe_tensor_destroy(p->tx);
    qmoe_tensor_destroy(p->txs);
    qmoe_tensor_destroy(p->tgl);
    qmoe_tensor_destroy(p->tout);
    qmoe_tensor_destroy(p->tscale);
}

static qmoe_status plan(problem *p, qmoe_kernel kernel, float limit, qmoe_grouped_matmul_swiglu_quant_executor **ex,
                        uint64_t *size)
{
    qmoe_grouped_matmul_swiglu_quant_options o = {0};
    o.kernel = kernel;
    return qmoe_grouped_matmul_swiglu_quant_weight_list_workspace_size(
        p->tx, (const qmoe_tensor *const *)p->tw, (const qmoe_tensor *const *)p->tws, E, p->txs,
        p->tgl, limit, p->tout, p->tscale, &o, size, ex);
}

static qmoe_status run(problem *p, qmoe_kernel kernel, float limit)
{
    qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
    uint64_t size = 0;
    qmoe_status st = plan(p, kernel, limit, &ex, &size);
    if (st) return st;
    void *ws = aligned_alloc(64, (size_t)((size + 63) / 64 * 64));
    st = qmoe_grouped_matmul_swiglu_quant(ws, size, ex, NULL);
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
    free(ws);
    return st;
}

/* Rows the operator writes: [0, last end). */
static const int64_t LAST = 35;

static void check_against_oracle(problem *p, const char *what)
{
    double dws[E * N], dxs[M], S[M * N2], scale[M], noise[M];
    int8_t q[M * N2];
    uint8_t written[M];
    for (int i = 0; i < E * N; i++) dws[i] = p->ws[i];
    for (int i = 0; i < M; i++) dxs[i] = p->xs[i];
    oracle_case c = {.M = M, .K = K, .N = N, .E = E, .E_groups = E, .G = 1, .x = p->x,
                     .x_s0 = K, .x_s1 = 1, .w = p->w, .ws = dws, .xs = dxs, .gl = p->gl};
    oracle_run(&c, S, scale, q, written, noise);
    int64_t identical = 0, total = 0;
    for (int m = 0; m < M; m++) {
        CHECK_MSG(written[m] == (m < LAST), "%s: row %d written", what, m);
        if (!written[m]) {
            CHECK_MSG(p->scale[m] == 0.0f, "%s: unwritten row %d keeps its 0 scale", what, m);
            continue;
        }
        CHECK_MSG(noise[m] < 1e-3 * scale[m] * 127.0, "%s: row %d is determined in float32", what, m);
        CHECK_MSG(fabs(p->scale[m] - scale[m]) <= 1e-6 * fabs(scale[m]), "%s: row %d scale %g vs %g",
                  what, m, (double)p->scale[m], scale[m]);
        for (int j = 0; j < N2; j++) {
            int d = abs(p->out[m * N2 + j] - q[m * N2 + j]);
            CHECK_MSG(d <= 1, "%s: [%d,%d] %d vs %d", what, m, j, p->out[m * N2 + j], q[m * N2 + j]);
            identical += d == 0;
            total++;
        }
    }
    CHECK_MSG(identical * 1000 >= total * 999, "%s: %lld of %lld identical", what,
              (long long)identical, (long long)total);
}

/* Every kernel id (auto, reference, portable, the x86 sets, other architectures' after them);
 * the ones this build or CPU lacks are refused at phase one and skipped. */
static const qmoe_kernel kernels[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
enum { NKERNELS = sizeof kernels / sizeof kernels[0] };

/* A kernel this CPU (or build) does not run is refused at phase one naming the kernel. */
static int unavailable(qmoe_status st)
{
    return st == QMOE_ERR_PARAM_INVALID && strstr(qmoe_last_error(), "kernel") != NULL;
}

static void test_kernels_against_oracle(void)
{
    int ran = 0;
    for (int nz = 0; nz <= 1; nz++)
        for (size_t k = 0; k < NKERNELS; k++) {
            problem *p = malloc(sizeof *p);
            make(p, nz, 0x5eed + k);
            qmoe_status st = run(p, kernels[k], 0.0f);
            if (unavailable(st)) {
                release(p);
                free(p);
                continue; /* this CPU does not run it */
            }
            char what[64];
            snprintf(what, sizeof what, "%s %s", nz ? "NZ" : "ND", qmoe_kernel_name(kernels[k]));
            CHECK_MSG(st == QMOE_OK, "%s: %s", what, qmoe_last_error());
            if (st == QMOE_OK) check_against_oracle(p, what);
            ran++;
            release(p);
            free(p);
        }
    CHECK(ran >= 4); /* auto, reference and portable in both layouts at least */
}

/* The clamp, from the vendor kernel's definition, in double: C = acc * xScale * ws; the activated
 * half min(C, L); the linear half clip(C, -L, L) (a NaN stays NaN); SwiGLU; per-row int8.
 * nan[m]: the row has a NaN (its scale is then NaN and its output zeros, the spec's rule). */
static void clamp_oracle(const problem *p, double L, double *S, double *scale, int *nan)
{
    int64_t start = 0;
    for (int e = 0; e < E; e++) {
        for (int64_t m = start; m < p->gl[e]; m++) {
            double amax = 0;
            nan[m] = 0;
            for (int j = 0; j < N2; j++) {
                double c[2];
                for (int h = 0; h < 2; h++) {
                    int64_t acc = 0, n = j + h * N2;
                    for (int k = 0; k < K; k++)
                        acc += (int64_t)p->x[m * K + k] * p->w[((int64_t)e * K + k) * N + n];
                    c[h] = (double)acc * p->xs[m] * p->ws[e * N + n];
                }
                double a = c[0] > L ? L : c[0];
                double lin = c[1] > L ? L : c[1] < -L ? -L : c[1];
                S[m * N2 + j] = a / (1.0 + exp(-a)) * lin;
                if (isnan(S[m * N2 + j])) nan[m] = 1;
                else if (fabs(S[m * N2 + j]) > amax) amax = fabs(S[m * N2 + j]);
            }
            scale[m] = amax / 127.0;
        }
        start = p->gl[e];
    }
}

/* Row kinds of the clamp problem, by the row's xScale: ordinary rows whose C spans about
 * [-3, 3] (a good share clamped on both halves), rows scaled by 1e30 (every non-zero C far past
 * the limit on both sides: only the clamp keeps them finite and non-zero), and NaN rows. */
static int row_kind(int64_t m) { return m % 7 == 3 ? 1 : m % 11 == 5 ? 2 : 0; }

static void clamp_problem(problem *p, int nz, uint64_t seed)
{
    make(p, nz, seed);
    for (int64_t m = 0; m < M; m++) {
        if (row_kind(m) == 1) p->xs[m] = 1e30f;
        if (row_kind(m) == 2) p->xs[m] = NAN;
    }
}

/* Every kernel (both weight layouts) with a clamp against clamp_oracle; the reference and
 * portable kernels do the same float operations, so their bits must match too. */
static void test_swiglu_limit_every_kernel(void)
{
    const float L = 0.75f;
    static double S[M * N2], scale[M];
    int nan[M];
    int ran = 0;
    for (int nz = 0; nz <= 1; nz++) {
        int8_t ref_out[M * N2];
        float ref_scale[M];
        int have_ref = 0;
        for (size_t k = 0; k < NKERNELS; k++) {
            problem *p = malloc(sizeof *p);
            clamp_problem(p, nz, 0xc1a3); /* one problem for every kernel */
            qmoe_status st = run(p, kernels[k], L);
            char what[64];
            snprintf(what, sizeof what, "clamp %s %s", nz ? "NZ" : "ND",
                     qmoe_kernel_name(kernels[k]));
            if (unavailable(st)) {
                release(p);
                free(p);
                continue;
            }
            CHECK_MSG(st == QMOE_OK, "%s: %s", what, qmoe_last_error());
            ran++;
            clamp_oracle(p, L, S, scale, nan);
            int kinds[3] = {0};
            for (int m = 0; m < LAST; m++) {
                const int8_t *o = p->out + m * N2;
                if (nan[m]) {
                    CHECK_MSG(isnan(p->scale[m]), "%s: NaN row %d scale %g", what, m,
                              (double)p->scale[m]);
                    for (int j = 0; j < N2; j++)
                        CHECK_MSG(o[j] == 0, "%s: NaN row %d [%d] = %d", what, m, j, o[j]);
                    kinds[2]++;
                    continue;
                }
                CHECK_MSG(fabs(p->scale[m] - scale[m]) <= 1e-5 * scale[m],
                          "%s: row %d scale %g vs %g", what, m, (double)p->scale[m], scale[m]);
                /* |S| <= swish(L) * L once C is clamped (swish(L) > 0.279 >= |swish| below L),
                 * while unclamped rows here reach several units */
                CHECK_MSG(p->scale[m] * 127.0 <= L / (1.0 + exp(-L)) * L * (1.0 + 1e-6),
                          "%s: row %d is not clamped", what, m);
                for (int j = 0; j < N2; j++) {
                    double want = rint(S[m * N2 + j] / scale[m]);
                    CHECK_MSG(fabs(o[j] - want) <= 1, "%s: [%d,%d] %d vs %g", what, m, j, o[j],
                              want);
                }
                kinds[row_kind(m)]++;
            }
            CHECK_MSG(kinds[0] >= 20 && kinds[1] >= 4 && kinds[2] >= 2,
                      "%s: %d ordinary, %d huge, %d NaN rows", what, kinds[0], kinds[1], kinds[2]);
            if (kernels[k] == QMOE_KERNEL_REFERENCE) {
                memcpy(ref_out, p->out, sizeof ref_out);
                memcpy(ref_scale, p->scale, sizeof ref_scale);
                have_ref = 1;
            }
            if (kernels[k] == QMOE_KERNEL_PORTABLE && have_ref)
                CHECK_MSG(!memcmp(ref_out, p->out, sizeof ref_out) &&
                              !memcmp(ref_scale, p->scale, sizeof ref_scale),
                          "%s: bits differ from the reference kernel's", what);
            release(p);
            free(p);
        }
    }
    CHECK(ran >= 6); /* auto, reference and portable in both layouts at least */
}

static void test_swiglu_limit(void)
{
    problem *p = malloc(sizeof *p);
    make(p, 1, 0xc1a3);
    /* A limit at or below 1e-8 is no clamp, as the vendor's: the oracle without it holds. */
    CHECK(run(p, QMOE_KERNEL_AUTO, 1e-9f) == QMOE_OK);
    check_against_oracle(p, "limit 1e-9");
    /* With a clamp, AUTO picks the kernel it picks without one (no fallback to the reference). */
    qmoe_grouped_matmul_swiglu_quant_executor *ex0 = NULL, *ex1 = NULL;
    uint64_t size = 0;
    CHECK(plan(p, QMOE_KERNEL_AUTO, 0.0f, &ex0, &size) == QMOE_OK);
    CHECK(plan(p, QMOE_KERNEL_AUTO, 0.75f, &ex1, &size) == QMOE_OK);
    CHECK(ex0 && ex1 && qmoe_grouped_matmul_swiglu_quant_executor_kernel(ex0) == qmoe_grouped_matmul_swiglu_quant_executor_kernel(ex1));
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex0);
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex1);
    CHECK(run(p, QMOE_KERNEL_AUTO, NAN) == QMOE_ERR_PARAM_INVALID);
    CHECK(run(p, QMOE_KERNEL_AUTO, -1.0f) == QMOE_ERR_PARAM_INVALID);
    release(p);
    free(p);
}

static void test_rules(void)
{
    problem *p = malloc(sizeof *p);
    make(p, 1, 0x7e57);
    qmoe_grouped_matmul_swiglu_quant_executor *ex = (qmoe_grouped_matmul_swiglu_quant_executor *)(uintptr_t)0x1;
    uint64_t size = 12345;
    const qmoe_tensor *tw[E], *tws[E];
    memcpy(tw, p->tw, sizeof tw);
    memcpy(tws, p->tws, sizeof tws);
#define LIST(w, s, n)                                                                            \
    qmoe_grouped_matmul_swiglu_quant_weight_list_workspace_size(p->tx, w, s, n, p->txs, p->tgl, 0.0f, p->tout, \
                                                     p->tscale, NULL, &size, &ex)
    CHECK(LIST(NULL, tws, E) == QMOE_ERR_PARAM_NULLPTR);
    CHECK(LIST(tw, NULL, E) == QMOE_ERR_PARAM_NULLPTR);
    tw[2] = NULL;
    CHECK(LIST(tw, tws, E) == QMOE_ERR_PARAM_NULLPTR);
    CHECK(strstr(qmoe_last_error(), "weights[2]") != NULL);
    tw[2] = p->tw[2];
    CHECK(LIST(tw, tws, 0) == QMOE_ERR_PARAM_INVALID);
    /* groupList has E entries: fewer experts than that is refused */
    CHECK(LIST(tw, tws, E - 1) == QMOE_ERR_PARAM_INVALID);

    /* An expert laid out differently (transposed strides) */
    qmoe_tensor *odd = NULL;
    qmoe_tensor_create((int64_t[]){N / 32, K / 16, 16, 32}, 4, (int64_t[]){512, 16384, 32, 1},
                       QMOE_DTYPE_INT8, QMOE_FORMAT_FRACTAL_NZ, p->w_exp[1], &odd);
    tw[1] = odd;
    CHECK(LIST(tw, tws, E) == QMOE_ERR_PARAM_INVALID);
    CHECK(strstr(qmoe_last_error(), "weights[1]") != NULL);
    qmoe_tensor_destroy(odd);
    tw[1] = p->tw[1];

    /* An int4 expert list (A8W4) is not this operator */
    qmoe_tensor *w4 = NULL;
    qmoe_tensor_create((int64_t[]){K, N}, 2, NULL, QMOE_DTYPE_INT4, QMOE_FORMAT_ND, p->w_exp[0],
                       &w4);
    for (int e = 0; e < E; e++) tw[e] = w4;
    CHECK(LIST(tw, tws, E) == QMOE_ERR_PARAM_INVALID);
    qmoe_tensor_destroy(w4);
    memcpy(tw, p->tw, sizeof tw);

    /* The output over expert 3's weight: in-place execution is refused for every expert */
    qmoe_tensor *alias = NULL;
    qmoe_tensor_create((int64_t[]){M, N2}, 2, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, p->w_exp[3],
                       &alias);
    qmoe_tensor *keep = p->tout;
    p->tout = alias;
    CHECK(LIST(tw, tws, E) == QMOE_ERR_PARAM_INVALID);
    CHECK(strstr(qmoe_last_error(), "weights[3]") != NULL);
    p->tout = keep;
    qmoe_tensor_destroy(alias);

    /* Every refusal left the out-arguments alone */
    CHECK(size == 12345 && ex == (qmoe_grouped_matmul_swiglu_quant_executor *)(uintptr_t)0x1);
    CHECK(LIST(tw, tws, E) == QMOE_OK && ex && size > 0);
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
#undef LIST
    release(p);
    free(p);
}

/* The executor's tables go into the workspace: a queued run survives its executor. */
static void test_stream_outlives_executor(void)
{
    problem *p = malloc(sizeof *p);
    make(p, 1, 0xa5a5);
    qmoe_device *dev = NULL;
    qmoe_stream *s = NULL;
    CHECK(qmoe_device_create(NULL, &dev) == QMOE_OK);
    CHECK(dev && qmoe_stream_create(dev, &s) == QMOE_OK);
    qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
    uint64_t size = 0;
    CHECK(plan(p, QMOE_KERNEL_AUTO, 0.0f, &ex, &size) == QMOE_OK);
    void *ws = aligned_alloc(64, (size_t)((size + 63) / 64 * 64));
    CHECK(qmoe_grouped_matmul_swiglu_quant(ws, size, ex, s) == QMOE_OK);
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex); /* the sanitizer suites catch any later read of it */
    CHECK(qmoe_stream_synchronize(s) == QMOE_OK);
    check_against_oracle(p, "stream");
    free(ws);
    qmoe_stream_destroy(s);
    qmoe_device_destroy(dev);
    release(p);
    free(p);
}

/* groupList is read when the operator runs: a bad one (decreasing ends) is not refused at the
 * launch on a stream but by the stream's synchronize, and with a NULL stream by the call; both
 * outputs stay untouched either way. */
static void test_bad_group_list(void)
{
    problem *p = malloc(sizeof *p);
    make(p, 1, 0xbad1);
    qmoe_device *dev = NULL;
    qmoe_stream *s = NULL;
    CHECK(qmoe_device_create(NULL, &dev) == QMOE_OK);
    CHECK(dev && qmoe_stream_create(dev, &s) == QMOE_OK);
    p->gl[3] = 12; /* below groupList[2] = 19 */
    for (int queued = 0; queued < 2; queued++) {
        memset(p->out, 0x5A, sizeof p->out);
        memset(p->scale, 0x5A, sizeof p->scale);
        qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
        uint64_t size = 0;
        CHECK(plan(p, QMOE_KERNEL_AUTO, 0.75f, &ex, &size) == QMOE_OK);
        void *ws = aligned_alloc(64, (size_t)((size + 63) / 64 * 64));
        qmoe_status st = qmoe_grouped_matmul_swiglu_quant(ws, size, ex, queued ? s : NULL);
        qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
        if (queued) {
            CHECK(st == QMOE_OK);
            st = qmoe_stream_synchronize(s);
        }
        CHECK_MSG(st == QMOE_ERR_PARAM_INVALID && strstr(qmoe_last_error(), "groupList[3]"),
                  "%s: %d %s", queued ? "queued" : "synchronous", (int)st, qmoe_last_error());
        CHECK(qmoe_last_error_info()->rule == QMOE_RULE_VALUE);
        int untouched = 1;
        for (size_t i = 0; i < sizeof p->out; i++) untouched &= (uint8_t)p->out[i] == 0x5A;
        for (size_t i = 0; i < sizeof p->scale; i++)
            untouched &= ((uint8_t *)p->scale)[i] == 0x5A;
        CHECK(untouched);
        free(ws);
    }
    qmoe_stream_destroy(s);
    qmoe_device_destroy(dev);
    release(p);
    free(p);
}

int main(void)
{
    test_kernels_against_oracle();
    test_swiglu_limit_every_kernel();
    test_swiglu_limit();
    test_rules();
    test_stream_outlives_executor();
    test_bad_group_list();
    return qt_finish("test_gmm_list");
}
