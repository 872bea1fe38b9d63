/*
 * Shared body of the per-kernel tests (tests/test_kernel_<isa>.c): a randomized sweep of shapes,
 * modes and weight layouts run through one fast kernel with large and randomly split blocks,
 * checked against
 *   - the exact int32 accumulators computed here from the logical weights (kernel-level entry
 *     point qmoe_fast_acc_block): identical;
 *   - the independent double oracle (tests/support/oracle.c), every row: within +-1 and >= 99.9%
 *     identical over the sweep, scales within 1e-6 relative; rows whose float32 noise reaches the
 *     quantization step under a widened bound (counted and printed, never skipped);
 *   - the reference kernel's output on the same rows: within +-1, >= 99.9% identical;
 *   - itself under another row/column split: bit-identical S (determinism for any thread count).
 * Weight storages come from the test oracle's packer (tests/support/oracle.c), not from src/.
 */
#ifndef QMOE_TEST_KERNEL_COMMON_H
#define QMOE_TEST_KERNEL_COMMON_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/gmm_params.h"
#include "kernels/cpu_features.h"
#include "kernels/gmm_fast.h"
#include "kernels/kernel.h"
#include "kernels/swiglu_quant.h"
#include "support/oracle.h"
#include "support/testlib.h"

typedef struct kcase {
    qmoe_gmm_params p;
    int8_t *w;    /* logical [E][K][N] */
    uint8_t *wst; /* storage */
    int8_t *x;
    float *ws, *bias, *xs;
    uint16_t *ws16;
    uint64_t *ws64;
    int64_t *gl;
    int64_t *ends;
} kcase;

static int64_t kc_stride_scale(oracle_wlayout l) { return l == ORACLE_W_INT32_ND || l == ORACLE_W_INT32_NZ ? 8 : 1; }

/* Random case: layout, mode, shapes (odd sizes where the layout allows), groups. */
static void kcase_make(kcase *c, qt_rng *r, int iter)
{
    memset(c, 0, sizeof *c);
    qmoe_gmm_params *p = &c->p;
    oracle_wlayout lay = (oracle_wlayout)(iter % 6);
    int a8w4 = lay != ORACLE_W_INT8_ND && lay != ORACLE_W_INT8_NZ;
    int nz = lay == ORACLE_W_INT8_NZ || lay == ORACLE_W_INT4_NZ || lay == ORACLE_W_INT32_NZ;
    int64_t ncols = lay == ORACLE_W_INT8_NZ ? 32 : (a8w4 && (nz || lay == ORACLE_W_INT32_ND)) ? 64 : 2;
    if (lay == ORACLE_W_INT32_ND) ncols = 16; /* N % 8 and N/2 even */
    int64_t E = qt_range(r, 1, 3);
    int64_t K = nz ? 16 * qt_range(r, 1, 24) : qt_range(r, 1, 300);
    if (iter % 7 == 3) K = nz ? 16 : iter % 2;              /* K at the low limit (ND: 0) */
    if (lay == ORACLE_W_INT32_ND || lay == ORACLE_W_INT4_ND) K += K & 1; /* even nibble rows */
    int64_t N = ncols * qt_range(r, 1, nz ? 4 : 80 / ncols + 1);
    if (N < 2) N = 2;
    int64_t G = 1;
    int per_group = (iter / 6) % 3 == 1 || (a8w4 && (iter / 6) % 3 == 2);
    if (per_group && K > 0) {
        /* odd group sizes included */
        int64_t divs[16], nd = 0;
        for (int64_t g = 1; g <= K && nd < 16; g++)
            if (K % g == 0) divs[nd++] = g;
        G = divs[qt_range(r, 0, nd - 1)];
    }
    int64_t M = qt_range(r, 0, 40);
    p->M = M;
    p->K = K;
    p->N = N;
    p->N2 = N / 2;
    p->E = E;
    p->E_groups = qt_range(r, 1, E);
    p->G = G;
    p->group_k = K / G;
    p->mode = a8w4 ? QMOE_MODE_A8W4 : QMOE_MODE_A8W8;
    p->per_group = per_group;

    c->w = malloc((size_t)(E * K * N));
    for (int64_t i = 0; i < E * K * N; i++)
        c->w[i] = (int8_t)(a8w4 ? qt_range(r, -8, 7) : qt_range(r, -128, 127));
    int64_t bytes = oracle_weight_bytes(lay, E, K, N);
    c->wst = malloc((size_t)bytes + 64);
    oracle_pack_weight(lay, c->w, E, K, N, c->wst);
    p->w = c->wst;
    static const int32_t wl[] = {QMOE_W_INT8_ND, QMOE_W_INT8_NZ, QMOE_W_INT4_ND,
                                 QMOE_W_INT4_NZ, QMOE_W_INT32_ND, QMOE_W_INT32_NZ};
    p->w_layout = wl[lay];
    int64_t sc = kc_stride_scale(lay);
    if (nz) {
        int64_t cols = lay == ORACLE_W_INT8_NZ ? 32 : 64;
        int64_t s[5] = {K * N, K * cols, 16 * cols, cols, 1};
        for (int i = 0; i < 5; i++) p->w_s[i] = i < 4 ? s[i] / sc : 1;
    } else {
        p->w_s[0] = K * N / sc;
        p->w_s[1] = N / sc;
        p->w_s[2] = 1;
    }

    /* x: sometimes padded rows, sometimes a column stride of 2 (the packed-x path) */
    int64_t xs1 = iter % 5 == 4 ? 2 : 1, xs0 = K * xs1 + (iter % 3 == 0 ? 5 : 0);
    c->x = malloc((size_t)(M * xs0 + 1));
    for (int64_t i = 0; i < M * xs0 + 1; i++) c->x[i] = (int8_t)qt_range(r, -128, 127);
    if (M > 0 && iter % 11 == 5) memset(c->x, 0, (size_t)xs0); /* an all-zero row */
    p->x = c->x;
    p->x_s[0] = xs0;
    p->x_s[1] = xs1;

    c->ws = malloc(sizeof(float) * (size_t)(E * G * N));
    for (int64_t i = 0; i < E * G * N; i++) c->ws[i] = qt_uniform(r, 0.001f, 0.02f);
    int wtype = iter % 4;
    if (wtype == 1) {
        c->ws16 = malloc(2 * (size_t)(E * G * N));
        for (int64_t i = 0; i < E * G * N; i++) {
            uint32_t b;
            memcpy(&b, &c->ws[i], 4);
            c->ws16[i] = (uint16_t)(b >> 16);
            b &= 0xFFFF0000u;
            memcpy(&c->ws[i], &b, 4);
        }
        p->ws = c->ws16;
        p->ws_type = QMOE_SCALE_BF16;
    } else if (wtype == 2 && a8w4) {
        c->ws64 = malloc(8 * (size_t)(E * G * N));
        for (int64_t i = 0; i < E * G * N; i++) {
            uint32_t b;
            memcpy(&b, &c->ws[i], 4);
            c->ws64[i] = 0xABCD000000000000ull | b;
        }
        p->ws = c->ws64;
        p->ws_type = QMOE_SCALE_U64_F32;
    } else {
        p->ws = c->ws;
        p->ws_type = QMOE_SCALE_F32;
    }
    p->ws_s[0] = G * N;
    p->ws_s[1] = per_group ? N : 0;
    p->ws_s[2] = 1;

    if (a8w4) {
        c->bias = malloc(sizeof(float) * (size_t)(E * N));
        int opaque = iter % 9 == 2;
        for (int64_t e = 0; e < E; e++)
            for (int64_t n = 0; n < N; n++) {
                double b = 0;
                for (int64_t k = 0; k < K; k++)
                    b += 8.0 * c->w[(e * K + k) * N + n] * c->ws[(e * G + k / (K / G)) * N + n];
                c->bias[e * N + n] = opaque ? qt_uniform(r, -2.0f, 2.0f) : (float)b;
            }
        p->bias = c->bias;
        p->bias_s[0] = N;
        p->bias_s[1] = 1;
    }
    c->xs = malloc(sizeof(float) * (size_t)(2 * M + 1));
    for (int64_t i = 0; i < 2 * M + 1; i++) c->xs[i] = qt_uniform(r, 0.01f, 0.1f);
    p->xs = c->xs;
    p->xs_s = 2;

    /* groups: empty and one-token experts */
    c->gl = malloc(sizeof(int64_t) * (size_t)p->E_groups);
    c->ends = malloc(sizeof(int64_t) * (size_t)p->E_groups);
    int64_t end = 0;
    for (int64_t e = 0; e < p->E_groups; e++) {
        int64_t left = M - end;
        int64_t take = e == p->E_groups - 1 ? qt_range(r, left / 2, left)
                                            : (qt_range(r, 0, 3) == 0 ? qt_range(r, 0, left < 1 ? left : 1)
                                                                      : qt_range(r, 0, left));
        end += take;
        c->gl[e] = end;
        c->ends[e] = end;
    }
    p->gl = c->gl;
    p->gl_s = 1;
    p->out_s[0] = p->N2;
    p->out_s[1] = 1;
    p->out_scale_s = 1;
}

static void kcase_free(kcase *c)
{
    free(c->w);
    free(c->wst);
    free(c->x);
    free(c->ws);
    free(c->ws16);
    free(c->ws64);
    free(c->bias);
    free(c->xs);
    free(c->gl);
    free(c->ends);
}

static int64_t kc_start(const kcase *c, int64_t e) { return e ? c->ends[e - 1] : 0; }

/* Runs one expert's rows through the kernel in blocks of random rows x random columns; the
 * scratchpad is sized by the kernel's own scratch_bytes for the largest block. */
static void run_expert(const qmoe_kernel_entry *k, const qmoe_gmm_params *p, int64_t e,
                       int64_t m0, int64_t m1, float *S, qt_rng *r, int split)
{
    int64_t rb = split ? qt_range(r, 1, 24) : (m1 - m0 > 0 ? m1 - m0 : 1);
    int64_t cb = split ? qt_range(r, 1, p->N2) : p->N2;
    uint64_t bytes = qmoe_swiglu_quant_scratch_bytes(k, p, rb, cb);
    void *scratch = aligned_alloc(64, (bytes + 63) & ~(uint64_t)63);
    qmoe_thread_ctx ctx = {.thread = 0, .nthreads = 1, .scratch = scratch, .scratch_bytes = bytes};
    for (int64_t m = m0; m < m1; m += rb) {
        int64_t me = m + rb < m1 ? m + rb : m1;
        for (int64_t j = 0; j < p->N2; j += cb) {
            int64_t je = j + cb < p->N2 ? j + cb : p->N2;
            qmoe_swiglu_quant_block(k, p, &ctx, e, m, me, j, je, S + m * p->N2 + j, p->N2);
        }
    }
    free(scratch);
}

static void check_acc(const qmoe_gemm_isa *isa, const kcase *c, qt_rng *r)
{
    const qmoe_gmm_params *p = &c->p;
    for (int64_t e = 0; e < p->E_groups; e++) {
        int64_t m0 = kc_start(c, e), m1 = c->ends[e];
        if (m1 == m0) continue;
        int64_t j0 = qt_range(r, 0, p->N2 - 1), j1 = qt_range(r, j0 + 1, p->N2);
        int64_t nc = j1 - j0, G = p->G, gk = p->group_k;
        int32_t *acc = malloc(sizeof(int32_t) * (size_t)((m1 - m0) * G * 2 * nc));
        qmoe_thread_ctx ctx = {.thread = 0, .nthreads = 1};
        qmoe_fast_acc_block(isa, p, &ctx, e, m0, m1, j0, j1, acc);
        int64_t bad = 0;
        for (int64_t m = m0; m < m1; m++)
            for (int64_t g = 0; g < G; g++)
                for (int64_t c2 = 0; c2 < 2 * nc; c2++) {
                    int64_t n = c2 < nc ? j0 + c2 : p->N2 + j0 + (c2 - nc);
                    int32_t want = 0;
                    for (int64_t k = g * gk; k < (g + 1) * gk; k++)
                        want += c->x[m * p->x_s[0] + k * p->x_s[1]] * c->w[(e * p->K + k) * p->N + n];
                    bad += acc[((m - m0) * G + g) * 2 * nc + c2] != want;
                }
        CHECK_MSG(bad == 0, "%s: %lld accumulators differ (e=%lld K=%lld N=%lld G=%lld layout=%d)",
                  isa->name, (long long)bad, (long long)e, (long long)p->K, (long long)p->N,
                  (long long)G, p->w_layout);
        free(acc);
    }
}

typedef struct kstats {
    int64_t total, same, off1, worse, scale_bad;   /* against the oracle, determined rows */
    int64_t ref_total, ref_same, ref_worse;        /* against the reference kernel, same rows */
    int64_t rows, widened, widened_bad;            /* every row; rows under the widened bound */
} kstats;

/* The independent double oracle (tests/support/oracle.c) on the case: S, scale amax/127, int8
 * result, and per row the bound on float32 noise in S (cancellation makes some rows pure noise,
 * e.g. an all-zero x row against the caller-built A8W4 bias). */
typedef struct koracle {
    double *S, *scale, *noise;
    int8_t *q;
    uint8_t *written;
} koracle;

static koracle oracle_of(const kcase *c)
{
    const qmoe_gmm_params *p = &c->p;
    int64_t M = p->M, N2 = p->N2, EGN = p->E * p->G * p->N;
    double *ws = malloc(sizeof(double) * (size_t)EGN), *xs = malloc(sizeof(double) * (size_t)(M + 1));
    double *bias = malloc(sizeof(double) * (size_t)(p->E * p->N));
    for (int64_t i = 0; i < EGN; i++) ws[i] = c->ws[i];
    for (int64_t i = 0; i < p->E * p->N; i++) bias[i] = c->bias ? c->bias[i] : 0.0;
    for (int64_t m = 0; m < M; m++) xs[m] = c->xs[m * p->xs_s];
    oracle_case oc = {M, p->K, p->N, p->E, p->E_groups, p->G, p->mode == QMOE_MODE_A8W4,
                      c->x, p->x_s[0], p->x_s[1], c->w, ws, bias, xs, c->gl, 0};
    koracle o;
    o.S = malloc(sizeof(double) * (size_t)(M * N2 + 1));
    o.scale = malloc(sizeof(double) * (size_t)(M + 1));
    o.q = malloc((size_t)(M * N2 + 1));
    o.written = malloc((size_t)(M + 1));
    o.noise = calloc((size_t)(M + 1), sizeof(double));
    oracle_run(&oc, o.S, o.scale, o.q, o.written, o.noise);
    free(ws);
    free(xs);
    free(bias);
    return o;
}

static void koracle_free(koracle *o)
{
    free(o->S);
    free(o->scale);
    free(o->q);
    free(o->written);
    free(o->noise);
}

/* Row m of the kernel's output against the oracle. A row whose float32 noise (oracle bound)
 * reaches a thousandth of its amax has no float32-determined int8 result: it is held to the
 * widened bound (scale within the noise, every value within one step plus the noise of the
 * oracle's S), never skipped. Other rows: output within +-1 of the oracle's, scales within 1e-6
 * relative (or float32's own error bound), and against the reference kernel within +-1. */
static void check_row(const kcase *c, const koracle *o, int64_t m, const int8_t *out, float sc,
                      const int8_t *outr, kstats *st)
{
    int64_t N2 = c->p.N2;
    double want = o->scale[m], noise = o->noise[m], got = sc;
    st->rows++;
    if (!(noise < 1e-3 * 127.0 * want)) {
        st->widened++;
        int ok = fabs(127.0 * got - 127.0 * want) <= 2.0 * noise + 1e-6 * 127.0 * want;
        for (int64_t j = 0; j < N2; j++) {
            double v = (double)out[m * N2 + j];
            ok &= got == 0.0 ? v == 0.0 : fabs(v * got - o->S[m * N2 + j]) <= got + 2.0 * noise;
        }
        st->widened_bad += !ok;
        return;
    }
    int ok = fabs(got - want) <= 1e-6 * want + 2.0 * noise / 127.0;
    st->scale_bad += !ok;
    for (int64_t j = 0; j < N2; j++) {
        int d = abs(out[m * N2 + j] - o->q[m * N2 + j]);
        int dr = abs(out[m * N2 + j] - outr[m * N2 + j]);
        st->total++;
        st->same += d == 0;
        st->off1 += d == 1;
        st->worse += d > 1;
        st->ref_total++;
        st->ref_same += dr == 0;
        st->ref_worse += dr > 1;
    }
}

static void check_outputs(const qmoe_kernel_entry *k, kcase *c, qt_rng *r, kstats *st)
{
    const qmoe_kernel_entry *ref = qmoe_kernel_lookup(QMOE_KERNEL_REFERENCE);
    qmoe_gmm_params *p = &c->p;
    int64_t M = p->M, N2 = p->N2;
    float *S = calloc((size_t)(M * N2 + 1), sizeof(float));
    float *S2 = calloc((size_t)(M * N2 + 1), sizeof(float));
    float *Sr = calloc((size_t)(M * N2 + 1), sizeof(float));
    int8_t *out = malloc((size_t)(M * N2 + 1)), *outr = malloc((size_t)(M * N2 + 1));
    float *sc = malloc(sizeof(float) * (size_t)(M + 1)), *scr = malloc(sizeof(float) * (size_t)(M + 1));
    memset(out, 0x55, (size_t)(M * N2 + 1));
    memset(outr, 0x55, (size_t)(M * N2 + 1));
    for (int64_t i = 0; i <= M; i++) sc[i] = scr[i] = -7.0f;
    for (int64_t e = 0; e < p->E_groups; e++) {
        int64_t m0 = kc_start(c, e), m1 = c->ends[e];
        run_expert(k, p, e, m0, m1, S, r, 0);
        run_expert(k, p, e, m0, m1, S2, r, 1);
        qmoe_swiglu_quant_block(ref, p, NULL, e, m0, m1, 0, N2, Sr + m0 * N2, N2);
    }
    CHECK_MSG(!memcmp(S, S2, sizeof(float) * (size_t)(M * N2)),
              "%s: S differs between one block and split blocks (K=%lld N=%lld)", k->name,
              (long long)p->K, (long long)p->N);
    int64_t last = p->E_groups ? c->ends[p->E_groups - 1] : 0;
    koracle o = oracle_of(c);
    p->out = out;
    p->out_scale = sc;
    qmoe_swiglu_quant_rows(k, p, S, N2, 0, last);
    p->out = outr;
    p->out_scale = scr;
    qmoe_swiglu_quant_rows(ref, p, Sr, N2, 0, last);
    for (int64_t m = 0; m < last; m++) check_row(c, &o, m, out, sc[m], outr, st);
    /* rows past the last group are not written */
    int untouched = 1;
    for (int64_t m = last; m < M; m++) {
        untouched &= sc[m] == -7.0f;
        for (int64_t j = 0; j < N2; j++) untouched &= out[m * N2 + j] == 0x55;
    }
    CHECK(untouched);
    koracle_free(&o);
    free(S);
    free(S2);
    free(Sr);
    free(out);
    free(outr);
    free(sc);
    free(scr);
}

/* K at the spec's limits with extreme values: the offset trick (x * (W + 128)) must stay exact
 * in int32 for K = 65535 - 15 (A8W8) and K = 19984 (A8W4). */
static void check_extremes(const qmoe_gemm_isa *isa)
{
    for (int a8w4 = 0; a8w4 < 2; a8w4++) {
        int64_t K = a8w4 ? 19984 : 65520, N = a8w4 ? 64 : 32, M = 3;
        int wmax = a8w4 ? 7 : 127, wmin = a8w4 ? -8 : -128;
        int8_t *w = malloc((size_t)(K * N)), *x = malloc((size_t)(M * K));
        for (int64_t k = 0; k < K; k++)
            for (int64_t n = 0; n < N; n++) w[k * N + n] = (int8_t)(n % 2 ? wmin : wmax);
        for (int64_t k = 0; k < K; k++) {
            x[k] = 127;
            x[K + k] = -128;
            x[2 * K + k] = (int8_t)(k % 3 ? 127 : -128);
        }
        oracle_wlayout lay = a8w4 ? ORACLE_W_INT4_NZ : ORACLE_W_INT8_NZ;
        uint8_t *st = malloc((size_t)oracle_weight_bytes(lay, 1, K, N));
        oracle_pack_weight(lay, w, 1, K, N, st);
        float ws[64], bias[64];
        for (int i = 0; i < 64; i++) ws[i] = 1.0f, bias[i] = 0.0f;
        qmoe_gmm_params p;
        memset(&p, 0, sizeof p);
        p.M = M, p.K = K, p.N = N, p.N2 = N / 2, p.E = 1, p.E_groups = 1, p.G = 1, p.group_k = K;
        p.mode = a8w4 ? QMOE_MODE_A8W4 : QMOE_MODE_A8W8;
        p.x = x, p.x_s[0] = K, p.x_s[1] = 1;
        p.w = st;
        p.w_layout = a8w4 ? QMOE_W_INT4_NZ : QMOE_W_INT8_NZ;
        int64_t cols = a8w4 ? 64 : 32, s5[5] = {K * N, K * cols, 16 * cols, cols, 1};
        memcpy(p.w_s, s5, sizeof s5);
        p.ws = ws, p.ws_type = QMOE_SCALE_F32, p.ws_s[2] = 1;
        p.bias = bias, p.bias_s[1] = 1;
        int32_t *acc = malloc(sizeof(int32_t) * (size_t)(M * N));
        qmoe_thread_ctx ctx = {.thread = 0, .nthreads = 1};
        qmoe_fast_acc_block(isa, &p, &ctx, 0, 0, M, 0, N / 2, acc);
        int64_t bad = 0;
        for (int64_t m = 0; m < M; m++)
            for (int64_t c = 0; c < N; c++) {
                int64_t n = c, want = 0; /* act columns then gate columns: all N in order */
                for (int64_t k = 0; k < K; k++) want += (int64_t)x[m * K + k] * w[k * N + n];
                bad += acc[m * N + c] != want;
            }
        CHECK_MSG(bad == 0, "%s: %lld accumulators wrong at K = %lld (%s)", isa->name,
                  (long long)bad, (long long)K, a8w4 ? "a8w4" : "a8w8");
        free(w);
        free(x);
        free(st);
        free(acc);
    }
}

/* The whole sweep for one kernel id; returns the process exit code. */
static int kernel_test_main(int32_t kernel_id, const char *suite, int cases)
{
    if (!qmoe_cpu_runs_kernel(kernel_id)) return qt_skip(suite, "this CPU cannot run the kernel");
    const qmoe_kernel_entry *k = qmoe_kernel_lookup(kernel_id);
    const qmoe_gemm_isa *isa = qmoe_gemm_isa_for(kernel_id);
    CHECK(k != NULL && isa != NULL && k->id == kernel_id && k->gemm == isa && k->eltwise);
    if (!k || !isa) return qt_finish(suite);
    check_extremes(isa);
    qt_rng r = {(uint64_t)kernel_id * 7919u};
    kstats st;
    memset(&st, 0, sizeof st);
    for (int i = 0; i < cases; i++) {
        kcase c;
        kcase_make(&c, &r, i);
        check_acc(isa, &c, &r);
        kstats before = st;
        check_outputs(k, &c, &r, &st);
        int64_t bad = st.worse + st.scale_bad + st.widened_bad + st.ref_worse;
        if (getenv("QMOE_TEST_VERBOSE") &&
            bad > before.worse + before.scale_bad + before.widened_bad + before.ref_worse)
            fprintf(stderr, "case %d: mode %d layout %d G %lld K %lld N %lld M %lld: worse %lld "
                    "scale %lld widened %lld vs reference %lld\n",
                    i, c.p.mode, c.p.w_layout, (long long)c.p.G, (long long)c.p.K, (long long)c.p.N,
                    (long long)c.p.M, (long long)(st.worse - before.worse),
                    (long long)(st.scale_bad - before.scale_bad),
                    (long long)(st.widened_bad - before.widened_bad),
                    (long long)(st.ref_worse - before.ref_worse));
        kcase_free(&c);
    }
    CHECK(st.total > 0); /* the sweep compared something */
    CHECK_MSG(st.worse == 0, "%lld outputs differ from the oracle by more than 1",
              (long long)st.worse);
    CHECK_MSG(st.same >= st.total - st.total / 1000, "only %lld of %lld outputs equal the oracle's",
              (long long)st.same, (long long)st.total);
    CHECK_MSG(st.scale_bad == 0, "%lld output scales off the oracle's by more than 1e-6 relative",
              (long long)st.scale_bad);
    CHECK_MSG(st.widened_bad == 0, "%lld noise-dominated rows outside the widened bound",
              (long long)st.widened_bad);
    CHECK_MSG(st.ref_worse == 0, "%lld outputs differ from the reference kernel's by more than 1",
              (long long)st.ref_worse);
    CHECK_MSG(st.ref_same >= st.ref_total - st.ref_total / 1000,
              "only %lld of %lld outputs equal the reference kernel's", (long long)st.ref_same,
              (long long)st.ref_total);
    printf("%s: %lld rows vs the double oracle, none skipped: %lld under the widened bound "
           "(float32 noise reaches the quantization step); the other rows' %lld outputs: %lld "
           "equal the oracle's, %lld off by one; %lld of them equal the reference kernel's\n",
           suite, (long long)st.rows, (long long)st.widened, (long long)st.total,
           (long long)st.same, (long long)st.off1, (long long)st.ref_same);
    return qt_finish(suite);
}

#endif
