/*
 * Prepacked weights (qmoe/weights.h), through the public API:
 *   - for every kernel this CPU runs, every weight layout and every scale type (float32,
 *     float16, bfloat16, uint64 for A8W4), per-channel and per-group, A8W8 and A8W4: the
 *     prepacked operator's output and scales are bit-identical to the raw-weight operator's
 *     (1 and 3 threads), and agree with the double oracle (tests/support/oracle.c);
 *   - column ranges that do not start on a prepacked panel edge give the same bits;
 *   - a prepacked object used with a mismatched operator (K, N, E, weight-scale dtype and
 *     groups, bias, kernel) or made by another build, layout version or CPU is refused with
 *     QMOE_ERR_PARAM_INVALID and a message, outputs untouched;
 *   - memory: at most 1.1x the raw weight bytes at real shapes; float16 scales kept 16-bit.
 * Weight storages come from the test oracle's packer, not from src/.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/prepack.h"
#include "ops/grouped_matmul_swiglu_quant/plan.h"
#include "kernels/cpu_features.h"
#include "kernels/kernel.h"
#include "kernels/swiglu_quant.h"
#include "qmoe/qmoe.h"
#include "qmoe/weights.h"
#include "support/oracle.h"
#include "support/kernels.h"
#include "support/testlib.h"

enum { WS_F32, WS_F16, WS_BF16, WS_U64 };

typedef struct pcase {
    int64_t M, K, N, E, Eg, G, N2;
    oracle_wlayout lay;
    int a8w4, wtype, xs1;
    int8_t *w;  /* logical [E][K][N] */
    uint8_t *wst;
    int8_t *x;
    int64_t x_s0;
    void *ws;    /* typed storage */
    double *wsd; /* decoded */
    float *bias, *xs;
    int64_t *gl;
    qmoe_tensor *tx, *tw, *tb, *tws, *txs, *tgl;
} pcase;

static uint16_t f32_top(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return (uint16_t)(b >> 16);
}

/* float -> IEEE half bits (round to nearest even); values here are normal and small. */
static uint16_t f32_to_f16(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    uint32_t sign = (b >> 16) & 0x8000u, exp = (b >> 23) & 0xFF, man = b & 0x7FFFFFu;
    int e = (int)exp - 127 + 15;
    uint32_t h = sign | (uint32_t)e << 10 | man >> 13;
    uint32_t rest = man & 0x1FFFu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) h++;
    return (uint16_t)h;
}

static qmoe_tensor *mk(const int64_t *shape, int nd, const int64_t *strides, qmoe_dtype dt,
                       qmoe_format f, void *data)
{
    qmoe_tensor *t = NULL;
    CHECK(qmoe_tensor_create(shape, nd, strides, dt, f, data, &t) == QMOE_OK);
    return t;
}

static void pcase_make(pcase *c, qt_rng *r, oracle_wlayout lay, int wtype, int per_group,
                       int64_t M, int64_t K, int64_t N, int64_t E)
{
    memset(c, 0, sizeof *c);
    c->lay = lay;
    c->a8w4 = lay != ORACLE_W_INT8_ND && lay != ORACLE_W_INT8_NZ;
    c->wtype = wtype;
    c->M = M, c->K = K, c->N = N, c->E = E, c->N2 = N / 2;
    c->Eg = E;
    c->G = 1;
    if (per_group) {
        int64_t divs[32], nd = 0;
        for (int64_t g = 2; g <= K && nd < 32; g++)
            if (K % g == 0) divs[nd++] = g;
        if (nd) c->G = divs[qt_range(r, 0, nd - 1)];
    }
    c->w = malloc((size_t)(E * K * N));
    for (int64_t i = 0; i < E * K * N; i++)
        c->w[i] = (int8_t)(c->a8w4 ? qt_range(r, -8, 7) : qt_range(r, -128, 127));
    c->wst = calloc(1, (size_t)oracle_weight_bytes(lay, E, K, N) + 64);
    oracle_pack_weight(lay, c->w, E, K, N, c->wst);

    c->xs1 = qt_range(r, 0, 4) == 0 ? 2 : 1; /* sometimes a column stride: the packed-x path */
    c->x_s0 = K * c->xs1 + (qt_range(r, 0, 2) == 0 ? 3 : 0);
    c->x = malloc((size_t)(M * c->x_s0 + 1));
    for (int64_t i = 0; i < M * c->x_s0 + 1; i++) c->x[i] = (int8_t)qt_range(r, -128, 127);

    int64_t nws = E * c->G * N;
    c->wsd = malloc(sizeof(double) * (size_t)nws);
    float *f = malloc(sizeof(float) * (size_t)nws);
    for (int64_t i = 0; i < nws; i++) f[i] = qt_uniform(r, 0.001f, 0.02f);
    if (wtype == WS_F16 || wtype == WS_BF16) {
        uint16_t *h = malloc(2 * (size_t)nws);
        for (int64_t i = 0; i < nws; i++) {
            h[i] = wtype == WS_F16 ? f32_to_f16(f[i]) : f32_top(f[i]);
            c->wsd[i] = wtype == WS_F16 ? oracle_f16_to_double(h[i]) : oracle_bf16_to_double(h[i]);
        }
        c->ws = h;
        free(f);
    } else if (wtype == WS_U64) {
        uint64_t *u = malloc(8 * (size_t)nws);
        for (int64_t i = 0; i < nws; i++) {
            uint32_t b;
            memcpy(&b, &f[i], 4);
            u[i] = 0x5A5A000000000000ull | b;
            c->wsd[i] = f[i];
        }
        c->ws = u;
        free(f);
    } else {
        for (int64_t i = 0; i < nws; i++) c->wsd[i] = f[i];
        c->ws = f;
    }
    if (c->a8w4) {
        c->bias = malloc(sizeof(float) * (size_t)(E * N));
        int opaque = qt_range(r, 0, 3) == 0; /* any bias, not only the assist matrix */
        for (int64_t e = 0; e < E; e++)
            for (int64_t n = 0; n < N; n++) {
                double b = 0;
                for (int64_t k = 0; k < K; k++)
                    b += 8.0 * c->w[(e * K + k) * N + n] * c->wsd[(e * c->G + k / (K / c->G)) * N + n];
                c->bias[e * N + n] = opaque ? qt_uniform(r, -2.0f, 2.0f) : (float)b;
            }
    }
    c->xs = malloc(sizeof(float) * (size_t)(M + 1));
    for (int64_t i = 0; i < M; i++) c->xs[i] = qt_uniform(r, 0.01f, 0.1f);
    /* experts of decode, mid and prefill sizes, some empty */
    c->gl = malloc(sizeof(int64_t) * (size_t)E);
    int64_t end = 0;
    for (int64_t e = 0; e < E; e++) {
        int64_t take = e == E - 1 ? M - end : qt_range(r, 0, M - end);
        end += take;
        c->gl[e] = end;
    }

    int64_t xd[2] = {M, K}, xst[2] = {c->x_s0, c->xs1};
    c->tx = mk(xd, 2, xst, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, c->x);
    switch (lay) {
    case ORACLE_W_INT8_ND: {
        int64_t d[3] = {E, K, N};
        c->tw = mk(d, 3, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, c->wst);
    } break;
    case ORACLE_W_INT8_NZ: {
        int64_t d[5] = {E, N / 32, K / 16, 16, 32};
        c->tw = mk(d, 5, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_FRACTAL_NZ, c->wst);
    } break;
    case ORACLE_W_INT4_ND: {
        int64_t d[3] = {E, K, N};
        c->tw = mk(d, 3, NULL, QMOE_DTYPE_INT4, QMOE_FORMAT_ND, c->wst);
    } break;
    case ORACLE_W_INT4_NZ: {
        int64_t d[5] = {E, N / 64, K / 16, 16, 64};
        c->tw = mk(d, 5, NULL, QMOE_DTYPE_INT4, QMOE_FORMAT_FRACTAL_NZ, c->wst);
    } break;
    case ORACLE_W_INT32_ND: {
        int64_t d[3] = {E, K, N / 8};
        c->tw = mk(d, 3, NULL, QMOE_DTYPE_INT32, QMOE_FORMAT_ND, c->wst);
    } break;
    case ORACLE_W_INT32_NZ: {
        int64_t d[5] = {E, N / 64, K / 16, 16, 8};
        c->tw = mk(d, 5, NULL, QMOE_DTYPE_INT32, QMOE_FORMAT_FRACTAL_NZ, c->wst);
    } break;
    }
    static const qmoe_dtype wsdt[] = {QMOE_DTYPE_FLOAT32, QMOE_DTYPE_FLOAT16, QMOE_DTYPE_BFLOAT16,
                                      QMOE_DTYPE_UINT64};
    if (per_group) {
        int64_t d[3] = {E, c->G, N};
        c->tws = mk(d, 3, NULL, wsdt[wtype], QMOE_FORMAT_ND, c->ws);
    } else {
        int64_t d[2] = {E, N};
        c->tws = mk(d, 2, NULL, wsdt[wtype], QMOE_FORMAT_ND, c->ws);
    }
    if (c->a8w4) {
        int64_t d[2] = {E, N};
        c->tb = mk(d, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, c->bias);
    }
    c->txs = mk(&M, 1, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, c->xs);
    c->tgl = mk(&E, 1, NULL, QMOE_DTYPE_INT64, QMOE_FORMAT_ND, c->gl);
}

static void pcase_free(pcase *c)
{
    qmoe_tensor *ts[] = {c->tx, c->tw, c->tb, c->tws, c->txs, c->tgl};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) qmoe_tensor_destroy(ts[i]);
    free(c->w);
    free(c->wst);
    free(c->x);
    free(c->ws);
    free(c->wsd);
    free(c->bias);
    free(c->xs);
    free(c->gl);
}

typedef struct result {
    int8_t *q;
    float *scale;
} result;

/* Runs the operator with `weight` (raw or a prepacked view); NULL scale/bias when `folded`.
 * Outputs start as a sentinel. Returns the status of phase one or two. */
static qmoe_status run_op(const pcase *c, const qmoe_tensor *x, const qmoe_tensor *weight,
                          const qmoe_tensor *bias, const qmoe_tensor *ws, int64_t n2,
                          qmoe_kernel kernel, int threads, result *res)
{
    int64_t M = c->M, od[2] = {M, n2};
    res->q = malloc((size_t)(M * n2 + 1));
    res->scale = malloc(sizeof(float) * (size_t)(M + 1));
    memset(res->q, 0x5A, (size_t)(M * n2 + 1));
    memset(res->scale, 0x5A, sizeof(float) * (size_t)(M + 1));
    qmoe_tensor *to = mk(od, 2, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, res->q);
    qmoe_tensor *tos = mk(&M, 1, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, res->scale);
    qmoe_grouped_matmul_swiglu_quant_options o = {.kernel = kernel, .threads = threads};
    uint64_t wsb = 0;
    qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
    qmoe_status st = qmoe_grouped_matmul_swiglu_quant_workspace_size(x, weight, bias, NULL, ws, c->txs, c->tgl,
                                                          to, tos, NULL, &o, &wsb, &ex);
    if (st == QMOE_OK) {
        void *wsp = wsb ? aligned_alloc(64, (wsb + 63) / 64 * 64) : NULL;
        st = qmoe_grouped_matmul_swiglu_quant(wsp, wsb, ex, NULL);
        free(wsp);
        qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
    }
    qmoe_tensor_destroy(to);
    qmoe_tensor_destroy(tos);
    return st;
}

static void result_free(result *r)
{
    free(r->q);
    free(r->scale);
}

static int untouched(const pcase *c, const result *r)
{
    for (int64_t i = 0; i < c->M * c->N2; i++)
        if ((uint8_t)r->q[i] != 0x5A) return 0;
    const uint8_t *s = (const uint8_t *)r->scale;
    for (size_t i = 0; i < sizeof(float) * (size_t)c->M; i++)
        if (s[i] != 0x5A) return 0;
    return 1;
}

/* The prepacked output against the double oracle: int8 within 1, scale within 1e-5 relative,
 * for the rows whose result float32 evaluation determines. */
static void check_oracle(const pcase *c, const result *res, const char *what)
{
    int64_t M = c->M, N2 = c->N2;
    double *S = malloc(sizeof(double) * (size_t)(M * N2 + 1));
    double *scale = malloc(sizeof(double) * (size_t)(M + 1));
    double *noise = malloc(sizeof(double) * (size_t)(M + 1));
    double *bias = c->a8w4 ? malloc(sizeof(double) * (size_t)(c->E * c->N)) : NULL;
    double *xs = malloc(sizeof(double) * (size_t)(M + 1));
    int8_t *q = malloc((size_t)(M * N2 + 1));
    uint8_t *written = malloc((size_t)(M + 1));
    for (int64_t i = 0; bias && i < c->E * c->N; i++) bias[i] = c->bias[i];
    for (int64_t i = 0; i < M; i++) xs[i] = c->xs[i];
    oracle_case oc = {.M = M, .K = c->K, .N = c->N, .E = c->E, .E_groups = c->Eg, .G = c->G,
                      .a8w4 = c->a8w4, .x = c->x, .x_s0 = c->x_s0, .x_s1 = c->xs1, .w = c->w,
                      .ws = c->wsd, .bias = bias, .xs = xs, .gl = c->gl};
    oracle_run(&oc, S, scale, q, written, noise);
    int64_t bad = 0, checked = 0;
    for (int64_t m = 0; m < M; m++) {
        if (!written[m] || !(scale[m] * 127.0 > 1e3 * noise[m])) continue;
        checked++;
        if (fabs(res->scale[m] - scale[m]) > 1e-5 * scale[m]) bad++;
        for (int64_t j = 0; j < N2; j++)
            if (abs(res->q[m * N2 + j] - q[m * N2 + j]) > 1) bad++;
    }
    CHECK_MSG(bad == 0, "%s: %lld values off the oracle", what, (long long)bad);
    CHECK_MSG(checked > 0 || M == 0 || c->K == 0, "%s: no row checked against the oracle", what);
    free(S);
    free(scale);
    free(noise);
    free(bias);
    free(xs);
    free(q);
    free(written);
}

static const char *lay_name(oracle_wlayout l)
{
    static const char *n[] = {"int8_nd", "int8_nz", "int4_nd", "int4_nz", "int32_nd", "int32_nz"};
    return n[l];
}

/* Raw vs prepacked on one case, one kernel, 1 and 3 threads; then the oracle. */
static void check_identical(pcase *c, qmoe_kernel kernel)
{
    char what[160];
    snprintf(what, sizeof what, "%s %s ws%d G=%lld M=%lld K=%lld N=%lld E=%lld xs1=%d",
             qmoe_kernel_name(kernel), lay_name(c->lay), c->wtype, (long long)c->G,
             (long long)c->M, (long long)c->K, (long long)c->N, (long long)c->E, c->xs1);
    qmoe_weights_options po = {.kernel = kernel};
    qmoe_weights *pw = NULL;
    qmoe_status st = qmoe_weights_prepack(c->tw, c->tws, c->tb, &po, &pw);
    CHECK_MSG(st == QMOE_OK, "%s: prepack: %s", what, qmoe_last_error());
    if (st) return;
    CHECK(qmoe_weights_kernel(pw) == kernel);
    qmoe_tensor *view = NULL;
    CHECK(qmoe_weights_tensor(pw, &view) == QMOE_OK);
    for (int threads = 1; threads <= 3; threads += 2) {
        result raw, pre, pre2;
        st = run_op(c, c->tx, c->tw, c->tb, c->tws, c->N2, kernel, threads, &raw);
        CHECK_MSG(st == QMOE_OK, "%s: raw: %s", what, qmoe_last_error());
        /* scales and bias folded in: NULL ones, and the original ones (checked, not read) */
        st = run_op(c, c->tx, view, NULL, NULL, c->N2, kernel, threads, &pre);
        CHECK_MSG(st == QMOE_OK, "%s: prepacked: %s", what, qmoe_last_error());
        st = run_op(c, c->tx, view, c->tb, c->tws, c->N2, kernel, threads, &pre2);
        CHECK_MSG(st == QMOE_OK, "%s: prepacked with scales: %s", what, qmoe_last_error());
        size_t qb = (size_t)(c->M * c->N2), sb = sizeof(float) * (size_t)c->M;
        CHECK_MSG(!memcmp(raw.q, pre.q, qb) && !memcmp(raw.scale, pre.scale, sb),
                  "%s threads %d: prepacked output differs from raw", what, threads);
        CHECK_MSG(!memcmp(pre2.q, pre.q, qb) && !memcmp(pre2.scale, pre.scale, sb),
                  "%s threads %d: prepacked with scales differs", what, threads);
        if (threads == 1) check_oracle(c, &pre, what);
        result_free(&raw);
        result_free(&pre);
        result_free(&pre2);
    }
    qmoe_tensor_destroy(view);
    qmoe_weights_destroy(pw);
}

/* Kernel-level: column ranges off the 64-column panel edges, through the prepacked plan, give
 * the bits of whole-row blocks. */
static void check_ragged_columns(pcase *c, qmoe_kernel kernel, qt_rng *r)
{
    qmoe_weights_options po = {.kernel = kernel};
    qmoe_weights *pw = NULL;
    qmoe_tensor *view = NULL;
    if (qmoe_weights_prepack(c->tw, c->tws, c->tb, &po, &pw) != QMOE_OK ||
        qmoe_weights_tensor(pw, &view) != QMOE_OK) {
        CHECK_MSG(0, "ragged: prepack failed: %s", qmoe_last_error());
        qmoe_weights_destroy(pw);
        return;
    }
    int64_t M = c->M, od[2] = {M, c->N2};
    int8_t *q = malloc((size_t)(M * c->N2 + 1));
    float *sc = malloc(sizeof(float) * (size_t)(M + 1));
    qmoe_tensor *to = mk(od, 2, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, q);
    qmoe_tensor *tos = mk(&M, 1, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, sc);
    qmoe_grouped_matmul_swiglu_quant_options o = {.kernel = kernel, .threads = 1};
    uint64_t wsb;
    qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
    CHECK(qmoe_grouped_matmul_swiglu_quant_workspace_size(c->tx, view, NULL, NULL, NULL, c->txs, c->tgl, to,
                                               tos, NULL, &o, &wsb, &ex) == QMOE_OK);
    if (ex) {
        const qmoe_gmm_params *p = qmoe_grouped_matmul_swiglu_quant_executor_params(ex);
        const qmoe_kernel_entry *k = qmoe_kernel_lookup(kernel);
        int64_t N2 = c->N2;
        float *whole = malloc(sizeof(float) * (size_t)(M * N2 + 1));
        float *parts = malloc(sizeof(float) * (size_t)(M * N2 + 1));
        /* the kernel runs in the scratchpad its planner sizes for the largest block */
        uint64_t sb = qmoe_swiglu_quant_scratch_bytes(k, p, M > 0 ? M : 1, N2);
        void *scratch = aligned_alloc(64, (sb + 63) / 64 * 64);
        qmoe_thread_ctx ctx = {.thread = 0, .nthreads = 1, .scratch = scratch, .scratch_bytes = sb};
        int64_t bad = 0;
        for (int64_t e = 0, m0 = 0; e < c->E; m0 = c->gl[e], e++) {
            int64_t m1 = c->gl[e];
            if (m1 == m0) continue;
            qmoe_swiglu_quant_block(k, p, &ctx, e, m0, m1, 0, N2, whole + m0 * N2, N2);
            for (int64_t j = 0; j < N2;) {
                int64_t j1 = j + qt_range(r, 1, 90);
                if (j1 > N2) j1 = N2;
                /* the block alone, between guards: nothing outside [j, j1) may be written */
                int64_t w = j1 - j, n = (m1 - m0) * w, guard = 128;
                float *tmp = malloc(sizeof(float) * (size_t)(n + 2 * guard));
                for (int64_t i = 0; i < n + 2 * guard; i++) tmp[i] = -12345.0f;
                qmoe_swiglu_quant_block(k, p, &ctx, e, m0, m1, j, j1, tmp + guard, w);
                for (int64_t i = 0; i < guard; i++)
                    bad += tmp[i] != -12345.0f || tmp[guard + n + i] != -12345.0f;
                for (int64_t m = m0; m < m1; m++)
                    memcpy(parts + m * N2 + j, tmp + guard + (m - m0) * w, sizeof(float) * (size_t)w);
                free(tmp);
                j = j1;
            }
            for (int64_t i = m0 * N2; i < m1 * N2; i++)
                bad += memcmp(&whole[i], &parts[i], sizeof(float)) != 0;
        }
        CHECK_MSG(bad == 0, "%s %s: %lld S values differ between column splits",
                  qmoe_kernel_name(kernel), lay_name(c->lay), (long long)bad);
        free(whole);
        free(parts);
        free(scratch);
        qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
    }
    qmoe_tensor_destroy(to);
    qmoe_tensor_destroy(tos);
    free(q);
    free(sc);
    qmoe_tensor_destroy(view);
    qmoe_weights_destroy(pw);
}

/* A random shape the layout accepts: N2 often not a multiple of 64 (a short last panel). */
static void shape_for(qt_rng *r, oracle_wlayout lay, int64_t *K, int64_t *N)
{
    int nz = lay == ORACLE_W_INT8_NZ || lay == ORACLE_W_INT4_NZ || lay == ORACLE_W_INT32_NZ;
    int64_t ncols = lay == ORACLE_W_INT8_NZ ? 32 : (lay == ORACLE_W_INT8_ND || lay == ORACLE_W_INT4_ND) ? 2 : 64;
    if (lay == ORACLE_W_INT32_ND) ncols = 16;
    static const int64_t nz_k[] = {16, 64, 128, 192, 256, 320};
    *K = nz ? nz_k[qt_range(r, 0, 5)] : qt_range(r, 1, 260);
    if (lay == ORACLE_W_INT4_ND || lay == ORACLE_W_INT32_ND) *K += *K & 1;
    *N = ncols * qt_range(r, 1, 320 / ncols);
    if (*N < 2) *N = 2;
}

static void sweep(qt_rng *r)
{
    /* every kernel the library names but the reference (prepacking is for the fast ones);
     * those this CPU lacks are passed over */
    int kernels[QT_MAX_KERNELS], nk = qt_kernels(QMOE_KERNEL_PORTABLE, kernels, QT_MAX_KERNELS);
    int ran = 0;
    for (int ki = 0; ki < nk; ki++) {
        qmoe_kernel k = (qmoe_kernel)kernels[ki];
        if (!qmoe_kernel_lookup(k)) continue;
        ran++;
        for (int lay = 0; lay < 6; lay++) {
            int a8w4 = lay >= ORACLE_W_INT4_ND;
            for (int wt = 0; wt < (a8w4 ? 4 : 3); wt++)
                for (int pg = 0; pg < 2; pg++) {
                    int64_t K, N;
                    shape_for(r, (oracle_wlayout)lay, &K, &N);
                    /* rows: decode (<= 16 per expert), mid and AMX-sized experts */
                    int64_t M = qt_range(r, 0, 2) == 0 ? qt_range(r, 1, 12) : qt_range(r, 20, 90);
                    pcase c;
                    pcase_make(&c, r, (oracle_wlayout)lay, wt, pg, M, K, N, qt_range(r, 1, 3));
                    check_identical(&c, k);
                    if (wt == 0 && pg == 1) check_ragged_columns(&c, k, r);
                    pcase_free(&c);
                }
        }
    }
    CHECK_MSG(ran >= 1, "no kernel ran");
}

/* A case fit for the refusal checks: int4 NZ (A8W4) or int8 NZ, per-group. */
static void check_refusals(qt_rng *r)
{
    for (int a8w4 = 0; a8w4 <= 1; a8w4++) {
        pcase c;
        oracle_wlayout lay = a8w4 ? ORACLE_W_INT4_NZ : ORACLE_W_INT8_NZ;
        pcase_make(&c, r, lay, WS_F32, 1, 20, 128, 256, 3);
        qmoe_weights *pw = NULL;
        CHECK(qmoe_weights_prepack(c.tw, c.tws, c.tb, NULL, &pw) == QMOE_OK);
        qmoe_tensor *view = NULL;
        CHECK(qmoe_weights_tensor(pw, &view) == QMOE_OK);
        qmoe_kernel auto_k = qmoe_weights_kernel(pw);
        result res;
#define REFUSED(expr, word)                                                                     \
    do {                                                                                        \
        qmoe_status st_ = (expr);                                                               \
        CHECK_MSG(st_ == QMOE_ERR_PARAM_INVALID, "%s: status %d", #expr, (int)st_);             \
        CHECK_MSG(strstr(qmoe_last_error(), word) != NULL, "%s: message '%s' lacks '%s'", #expr, \
                  qmoe_last_error(), word);                                                     \
        CHECK_MSG(untouched(&c, &res), "%s: outputs were written", #expr);                      \
        result_free(&res);                                                                      \
    } while (0)
        /* other K: x of K + 16 */
        {
            int64_t xd[2] = {c.M, c.K + 16};
            int8_t *x2 = calloc(1, (size_t)(c.M * (c.K + 16)));
            qmoe_tensor *tx2 = mk(xd, 2, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, x2);
            REFUSED(run_op(&c, tx2, view, NULL, NULL, c.N2, QMOE_KERNEL_AUTO, 1, &res), "K");
            qmoe_tensor_destroy(tx2);
            free(x2);
        }
        /* other N: an output of N/2 + 64 columns */
        REFUSED(run_op(&c, c.tx, view, NULL, NULL, c.N2 + 64, QMOE_KERNEL_AUTO, 1, &res), "N/2");
        /* other E: a weight scale of E + 1 experts */
        {
            int64_t d[3] = {c.E + 1, c.G, c.N};
            float *ws2 = calloc(sizeof(float), (size_t)((c.E + 1) * c.G * c.N));
            qmoe_tensor *t = mk(d, 3, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, ws2);
            REFUSED(run_op(&c, c.tx, view, NULL, t, c.N2, QMOE_KERNEL_AUTO, 1, &res), "E");
            qmoe_tensor_destroy(t);
            free(ws2);
        }
        /* other scale dtype (bfloat16 instead of float32), other groups, per-channel */
        {
            int64_t d[3] = {c.E, c.G, c.N};
            uint16_t *h = calloc(2, (size_t)(c.E * c.G * c.N));
            qmoe_tensor *t = mk(d, 3, NULL, QMOE_DTYPE_BFLOAT16, QMOE_FORMAT_ND, h);
            REFUSED(run_op(&c, c.tx, view, NULL, t, c.N2, QMOE_KERNEL_AUTO, 1, &res), "dtype");
            qmoe_tensor_destroy(t);
            free(h);
            int64_t d1[3] = {c.E, 1, c.N}, d2[2] = {c.E, c.N};
            float *f = calloc(sizeof(float), (size_t)(c.E * c.N));
            t = mk(d1, 3, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, f);
            REFUSED(run_op(&c, c.tx, view, NULL, t, c.N2, QMOE_KERNEL_AUTO, 1, &res), "groups");
            qmoe_tensor_destroy(t);
            t = mk(d2, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, f);
            REFUSED(run_op(&c, c.tx, view, NULL, t, c.N2, QMOE_KERNEL_AUTO, 1, &res), "groups");
            qmoe_tensor_destroy(t);
            free(f);
        }
        /* a bias with A8W8 weights; a bias of the wrong shape with A8W4 */
        {
            int64_t d[2] = {c.E, c.N + (a8w4 ? 2 : 0)};
            float *b = calloc(sizeof(float), (size_t)(c.E * (c.N + 2)));
            qmoe_tensor *t = mk(d, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, b);
            REFUSED(run_op(&c, c.tx, view, t, NULL, c.N2, QMOE_KERNEL_AUTO, 1, &res), "bias");
            qmoe_tensor_destroy(t);
            free(b);
        }
        /* another kernel than the one it was made for */
        int kernels[QT_MAX_KERNELS], nk = qt_kernels(QMOE_KERNEL_PORTABLE, kernels, QT_MAX_KERNELS);
        for (int ki = 0; ki < nk; ki++)
            if (kernels[ki] != (int)auto_k && qmoe_kernel_lookup(kernels[ki])) {
                REFUSED(run_op(&c, c.tx, view, NULL, NULL, c.N2, (qmoe_kernel)kernels[ki], 1, &res),
                        "kernel");
                break;
            }
        REFUSED(run_op(&c, c.tx, view, NULL, NULL, c.N2, QMOE_KERNEL_REFERENCE, 1, &res), "kernel");
        /* another CPU, another build, another layout version, another operator */
        struct qmoe_weights *raw = pw;
        raw->cpu ^= 1u << 7;
        REFUSED(run_op(&c, c.tx, view, NULL, NULL, c.N2, QMOE_KERNEL_AUTO, 1, &res), "CPU");
        raw->cpu ^= 1u << 7;
        /* the CPU word holds the features of the kernel it was packed for, on every
         * architecture (the NEON kernels' were once left out: a word of 0 on ARM) */
        CHECK_MSG(auto_k == QMOE_KERNEL_PORTABLE || raw->cpu != 0, "%s: CPU word 0",
                  qmoe_kernel_name(auto_k));
        const void *b = raw->build;
        raw->build = &res;
        REFUSED(run_op(&c, c.tx, view, NULL, NULL, c.N2, QMOE_KERNEL_AUTO, 1, &res), "build");
        raw->build = b;
        raw->version++;
        REFUSED(run_op(&c, c.tx, view, NULL, NULL, c.N2, QMOE_KERNEL_AUTO, 1, &res), "version");
        raw->version--;
        raw->op = 99;
        REFUSED(run_op(&c, c.tx, view, NULL, NULL, c.N2, QMOE_KERNEL_AUTO, 1, &res), "operator");
        raw->op = QMOE_PP_OP_SWIGLU;
        /* restored: accepted again */
        CHECK(run_op(&c, c.tx, view, NULL, NULL, c.N2, QMOE_KERNEL_AUTO, 1, &res) == QMOE_OK);
        result_free(&res);
#undef REFUSED
        /* prepack's own refusals leave *out as it was */
        qmoe_weights *keep = (qmoe_weights *)&c, *o2 = keep;
        qmoe_weights_options ref = {.kernel = QMOE_KERNEL_REFERENCE};
        CHECK(qmoe_weights_prepack(c.tw, c.tws, c.tb, &ref, &o2) == QMOE_ERR_PARAM_INVALID);
        CHECK(qmoe_weights_prepack(view, c.tws, c.tb, NULL, &o2) == QMOE_ERR_PARAM_INVALID);
        CHECK(qmoe_weights_prepack(NULL, c.tws, c.tb, NULL, &o2) == QMOE_ERR_PARAM_NULLPTR);
        CHECK(qmoe_weights_prepack(c.tw, NULL, c.tb, NULL, &o2) == QMOE_ERR_PARAM_NULLPTR);
        CHECK(qmoe_weights_prepack(c.tw, c.tws, c.tb, NULL, NULL) == QMOE_ERR_PARAM_NULLPTR);
        CHECK(qmoe_weights_prepack(c.tw, c.tws, a8w4 ? NULL : c.tws, NULL, &o2) != QMOE_OK);
        /* options: a struct_size below the first layout, or a larger struct whose bytes past
         * this library's fields are not zero, is refused */
        struct {
            qmoe_weights_options o;
            uint32_t extra;
        } big = {{.struct_size = sizeof big}, 7};
        qmoe_weights_options small = {.struct_size = 2};
        CHECK(qmoe_weights_prepack(c.tw, c.tws, c.tb, &small, &o2) == QMOE_ERR_PARAM_INVALID);
        CHECK(qmoe_weights_prepack(c.tw, c.tws, c.tb, &big.o, &o2) == QMOE_ERR_PARAM_INVALID);
        CHECK(o2 == keep);
        big.extra = 0; /* a zero tail is accepted */
        CHECK(qmoe_weights_prepack(c.tw, c.tws, c.tb, &big.o, &o2) == QMOE_OK && o2 != keep);
        if (o2 != keep) qmoe_weights_destroy(o2);
        CHECK(qmoe_weights_tensor(NULL, &view) == QMOE_ERR_PARAM_NULLPTR);
        CHECK(qmoe_weights_bytes(NULL) == 0 && qmoe_weights_kernel(NULL) == QMOE_KERNEL_AUTO);
        qmoe_tensor_destroy(view);
        qmoe_weights_destroy(pw);
        qmoe_weights_destroy(NULL);
        pcase_free(&c);
    }
}

/* At the shapes (K = 2048, N = 1536), the object is at most 1.1x the raw weights. */
static void check_memory(qt_rng *r)
{
    static const struct { oracle_wlayout lay; int pg; } cases[] = {
        {ORACLE_W_INT8_NZ, 0}, {ORACLE_W_INT4_NZ, 0}, {ORACLE_W_INT4_NZ, 1}, {ORACLE_W_INT32_ND, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pcase c;
        memset(&c, 0, sizeof c);
        int a8w4 = cases[i].lay != ORACLE_W_INT8_NZ;
        int64_t E = 2, K = 2048, N = 1536, G = cases[i].pg ? K / 256 : 1;
        /* only the weight tensor and scales matter here: build them directly */
        uint8_t *w = calloc(1, (size_t)(E * K * N));
        float *ws = calloc(sizeof(float), (size_t)(E * G * N));
        float *bias = calloc(sizeof(float), (size_t)(E * N));
        for (int64_t j = 0; j < E * G * N; j++) ws[j] = qt_uniform(r, 0.001f, 0.01f);
        qmoe_tensor *tw, *tws, *tb = NULL;
        if (cases[i].lay == ORACLE_W_INT8_NZ) {
            int64_t d[5] = {E, N / 32, K / 16, 16, 32};
            tw = mk(d, 5, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_FRACTAL_NZ, w);
        } else if (cases[i].lay == ORACLE_W_INT4_NZ) {
            int64_t d[5] = {E, N / 64, K / 16, 16, 64};
            tw = mk(d, 5, NULL, QMOE_DTYPE_INT4, QMOE_FORMAT_FRACTAL_NZ, w);
        } else {
            int64_t d[3] = {E, K, N / 8};
            tw = mk(d, 3, NULL, QMOE_DTYPE_INT32, QMOE_FORMAT_ND, w);
        }
        if (G > 1) {
            int64_t d[3] = {E, G, N};
            tws = mk(d, 3, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, ws);
        } else {
            int64_t d[2] = {E, N};
            tws = mk(d, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, ws);
        }
        if (a8w4) {
            int64_t d[2] = {E, N};
            tb = mk(d, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, bias);
        }
        qmoe_weights *pw = NULL;
        CHECK(qmoe_weights_prepack(tw, tws, tb, NULL, &pw) == QMOE_OK);
        double raw = (double)(E * K * N) / (a8w4 ? 2.0 : 1.0);
        double ratio = (double)qmoe_weights_bytes(pw) / raw;
        CHECK_MSG(ratio <= 1.1 && ratio >= 1.0, "layout %d G=%lld: prepacked %.4fx the raw bytes",
                  (int)cases[i].lay, (long long)G, ratio);
        /* float16 scales stay 16-bit: 2 bytes less per scale, E x panels x G x 128 of them */
        uint16_t *wh = calloc(sizeof(uint16_t), (size_t)(E * G * N));
        for (int64_t j = 0; j < E * G * N; j++) wh[j] = f32_to_f16(ws[j]);
        int64_t hd[3] = {E, G, N}, hd2[2] = {E, N};
        qmoe_tensor *twh = G > 1 ? mk(hd, 3, NULL, QMOE_DTYPE_FLOAT16, QMOE_FORMAT_ND, wh)
                                 : mk(hd2, 2, NULL, QMOE_DTYPE_FLOAT16, QMOE_FORMAT_ND, wh);
        qmoe_weights *ph = NULL;
        CHECK(qmoe_weights_prepack(tw, twh, tb, NULL, &ph) == QMOE_OK);
        uint64_t saved = (uint64_t)(E * ((N / 2 + 63) / 64) * G * 128 * 2);
        CHECK_MSG(qmoe_weights_bytes(pw) - qmoe_weights_bytes(ph) == saved,
                  "layout %d G=%lld: float16 scales %llu bytes, float32 %llu", (int)cases[i].lay,
                  (long long)G, (unsigned long long)qmoe_weights_bytes(ph),
                  (unsigned long long)qmoe_weights_bytes(pw));
        qmoe_weights_destroy(ph);
        qmoe_tensor_destroy(twh);
        free(wh);
        qmoe_weights_destroy(pw);
        qmoe_tensor_destroy(tw);
        qmoe_tensor_destroy(tws);
        qmoe_tensor_destroy(tb);
        free(w);
        free(ws);
        free(bias);
    }
}

int main(void)
{
    qt_rng r = {0x9e3779b97f4a7c15ull};
    check_memory(&r);
    check_refusals(&r);
    sweep(&r);
    return qt_finish("prepack");
}
