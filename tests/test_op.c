/*
 * The operator model (qmoe/op.h): a plan made from tensor descriptors only, executed many times
 * with new data; each run must equal the two-phase call on the same data with the reference
 * kernel (or a formula), on the default device, on a stream and from two threads at once; the
 * run's argument checks refuse and write nothing.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "qmoe/op.h"
#include "qmoe/runtime.h"
#include "support/testlib.h"

enum { M = 40, K = 64, N = 64, N2 = N / 2, E = 3, RUNS = 3 };

/* One run's data of the fused operator. */
typedef struct gmm_data {
    int8_t x[M * K];
    int8_t w[E * K * N];
    float ws[E * N], xs[M];
    int64_t gl[E];
    int8_t out[M * N2];
    float oscale[M];
} gmm_data;

static void fill(gmm_data *d, uint64_t seed)
{
    qt_rng r = {seed};
    for (int i = 0; i < M * K; i++) d->x[i] = (int8_t)qt_range(&r, -127, 127);
    for (int i = 0; i < E * K * N; i++) d->w[i] = (int8_t)qt_range(&r, -127, 127);
    for (int i = 0; i < E * N; i++) d->ws[i] = qt_uniform(&r, 0.001f, 0.01f);
    for (int i = 0; i < M; i++) d->xs[i] = qt_uniform(&r, 0.01f, 0.1f);
    int64_t a = qt_range(&r, 0, M / 2), b = qt_range(&r, a, M);
    d->gl[0] = a, d->gl[1] = b, d->gl[2] = M; /* cumulative ends */
    memset(d->out, 0x5A, sizeof d->out);
    memset(d->oscale, 0x5A, sizeof d->oscale);
}

static void *const *gmm_args(gmm_data *d, void *a[10])
{
    void *v[10] = {d->x, d->w, NULL, NULL, d->ws, d->xs, d->gl, d->out, d->oscale, NULL};
    memcpy(a, v, sizeof v);
    return a;
}

/* The tensors of the fused operator over d (d NULL: descriptors); 1 when all were made. No CHECK
 * here or in expected(): the worker threads call them (the harness's counters are not atomic). */
static int gmm_tensors(gmm_data *d, qmoe_tensor *t[7])
{
    const int64_t sx[2] = {M, K}, sw[3] = {E, K, N}, sws[2] = {E, N}, sxs[1] = {M}, sgl[1] = {E},
                  so[2] = {M, N2}, sos[1] = {M};
    const struct { const int64_t *sh; int nd; qmoe_dtype dt; void *data; } spec[7] = {
        {sx, 2, QMOE_DTYPE_INT8, d ? d->x : NULL},        {sw, 3, QMOE_DTYPE_INT8, d ? d->w : NULL},
        {sws, 2, QMOE_DTYPE_FLOAT32, d ? d->ws : NULL},   {sxs, 1, QMOE_DTYPE_FLOAT32, d ? d->xs : NULL},
        {sgl, 1, QMOE_DTYPE_INT64, d ? d->gl : NULL},     {so, 2, QMOE_DTYPE_INT8, d ? d->out : NULL},
        {sos, 1, QMOE_DTYPE_FLOAT32, d ? d->oscale : NULL}};
    int ok = 1;
    for (int i = 0; i < 7; i++) {
        qmoe_status st = d ? qmoe_tensor_create(spec[i].sh, spec[i].nd, NULL, spec[i].dt,
                                                QMOE_FORMAT_ND, spec[i].data, &t[i])
                           : qmoe_tensor_desc_create(spec[i].sh, spec[i].nd, NULL, spec[i].dt,
                                                     QMOE_FORMAT_ND, &t[i]);
        ok &= st == QMOE_OK;
    }
    return ok;
}

static void destroy_all(qmoe_tensor **t, int n)
{
    for (int i = 0; i < n; i++) qmoe_tensor_destroy(t[i]);
}

/* The expected outputs: the two-phase call with the reference kernel on the same data; 1 on
 * success. */
static int expected(gmm_data *d, int8_t *out, float *oscale)
{
    qmoe_tensor *t[7];
    int ok = gmm_tensors(d, t);
    qmoe_grouped_matmul_swiglu_quant_options o = QMOE_GROUPED_MATMUL_SWIGLU_QUANT_OPTIONS_INIT;
    o.kernel = QMOE_KERNEL_REFERENCE;
    o.threads = 1;
    qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
    uint64_t wsb = 0;
    ok &= qmoe_grouped_matmul_swiglu_quant_workspace_size(t[0], t[1], NULL, NULL, t[2], t[3], t[4],
                                                          t[5], t[6], NULL, &o, &wsb, &ex) == QMOE_OK;
    void *ws = wsb ? aligned_alloc(64, (wsb + 63) / 64 * 64) : NULL;
    ok &= ex && qmoe_grouped_matmul_swiglu_quant(ws, wsb, ex, NULL) == QMOE_OK;
    memcpy(out, d->out, sizeof d->out);
    memcpy(oscale, d->oscale, sizeof d->oscale);
    memset(d->out, 0x5A, sizeof d->out);
    memset(d->oscale, 0x5A, sizeof d->oscale);
    free(ws);
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
    destroy_all(t, 7);
    return ok;
}

static qmoe_op *plan_gmm(int threads)
{
    qmoe_tensor *t[7];
    CHECK(gmm_tensors(NULL, t));
    qmoe_grouped_matmul_swiglu_quant_options o = QMOE_GROUPED_MATMUL_SWIGLU_QUANT_OPTIONS_INIT;
    o.threads = threads;
    qmoe_op *op = NULL;
    CHECK(qmoe_op_create_grouped_matmul_swiglu_quant(t[0], t[1], NULL, NULL, t[2], t[3], t[4], t[5], t[6], NULL,
                                          &o, &op) == QMOE_OK);
    destroy_all(t, 7); /* the plan keeps shapes only */
    return op;
}

static int same(const gmm_data *d, const int8_t *out, const float *oscale)
{
    return !memcmp(d->out, out, sizeof d->out) && !memcmp(d->oscale, oscale, sizeof d->oscale);
}

static void test_runs(void)
{
    qmoe_op *op = plan_gmm(3);
    CHECK(op != NULL);
    if (!op) return;
    CHECK(qmoe_op_type_of(op) == QMOE_OP_GROUPED_MATMUL_SWIGLU_QUANT);
    CHECK(!strcmp(qmoe_op_name(op), "GroupedMatmulSwigluQuant"));
    CHECK(qmoe_op_arg_count(op) == 10);
    CHECK(!strcmp(qmoe_op_arg_name(op, 6), "groupList"));
    CHECK(qmoe_op_arg_name(op, 10) == NULL && qmoe_op_arg_name(op, -1) == NULL);
    CHECK(qmoe_op_kernel(op) != QMOE_KERNEL_AUTO);
    uint64_t wsb = qmoe_op_workspace_size(op);
    void *ws = wsb ? aligned_alloc(64, (wsb + 63) / 64 * 64) : NULL;
    qmoe_stream *s = NULL;
    CHECK(qmoe_stream_create(qmoe_device_default(), &s) == QMOE_OK);
    /* every run has its own data at its own addresses; the plan never changes */
    for (int run = 0; run < RUNS; run++) {
        gmm_data *d = malloc(sizeof *d);
        fill(d, 100 + (uint64_t)run);
        int8_t eo[M * N2];
        float es[M];
        CHECK(expected(d, eo, es));
        void *a[10];
        CHECK(qmoe_op_execute(op, gmm_args(d, a), 10, ws, wsb, NULL) == QMOE_OK);
        CHECK_MSG(same(d, eo, es), "run %d on the default device", run);
        memset(d->out, 0, sizeof d->out);
        CHECK(qmoe_op_execute(op, gmm_args(d, a), 10, ws, wsb, s) == QMOE_OK);
        CHECK(qmoe_stream_synchronize(s) == QMOE_OK);
        CHECK_MSG(same(d, eo, es), "run %d on a stream", run);
        free(d);
    }
    qmoe_stream_destroy(s);
    free(ws);
    qmoe_op_destroy(op);
}

/* ---------------------------------------------------------------- two threads, one op -------- */

typedef struct worker {
    const qmoe_op *op;
    uint64_t seed;
    int bad;
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    uint64_t wsb = qmoe_op_workspace_size(w->op);
    void *ws = wsb ? aligned_alloc(64, (wsb + 63) / 64 * 64) : NULL;
    gmm_data *d = malloc(sizeof *d);
    for (int i = 0; i < 8; i++) {
        fill(d, w->seed + (uint64_t)i);
        int8_t eo[M * N2];
        float es[M];
        void *a[10];
        if (!expected(d, eo, es) ||
            qmoe_op_execute(w->op, gmm_args(d, a), 10, ws, wsb, NULL) != QMOE_OK || !same(d, eo, es))
            w->bad++;
    }
    free(d);
    free(ws);
    return NULL;
}

static void test_threads(void)
{
    qmoe_op *op = plan_gmm(2);
    if (!op) return;
    worker w[2] = {{op, 1000, 0}, {op, 2000, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) CHECK(pthread_create(&th[i], NULL, work, &w[i]) == 0);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    CHECK(w[0].bad == 0 && w[1].bad == 0);
    qmoe_op_destroy(op);
}

/* ---------------------------------------------------------------- refusals -------------------- */

static int untouched(const gmm_data *d)
{
    for (size_t i = 0; i < sizeof d->out; i++)
        if ((uint8_t)d->out[i] != 0x5A) return 0;
    const uint8_t *s = (const uint8_t *)d->oscale;
    for (size_t i = 0; i < sizeof d->oscale; i++)
        if (s[i] != 0x5A) return 0;
    return 1;
}

static void expect_refused(const qmoe_op *op, void *const *a, int n, void *ws, uint64_t wsb,
                           qmoe_status st, qmoe_error_rule rule, const char *arg, const gmm_data *d)
{
    CHECK(qmoe_op_execute(op, a, n, ws, wsb, NULL) == st);
    const qmoe_error_info *e = qmoe_last_error_info();
    CHECK_MSG(e->rule == rule && !strcmp(e->arg, arg), "rule %d arg '%s' (%s)", (int)e->rule, e->arg,
              e->message);
    CHECK(untouched(d));
}

static void test_refusals(void)
{
    qmoe_op *op = plan_gmm(1);
    if (!op) return;
    uint64_t wsb = qmoe_op_workspace_size(op);
    char *ws = aligned_alloc(64, (wsb + 127) / 64 * 64 + 64);
    gmm_data *d = malloc(sizeof *d);
    fill(d, 7);
    void *a[10];
    gmm_args(d, a);
    expect_refused(op, a, 9, ws, wsb, QMOE_ERR_PARAM_INVALID, QMOE_RULE_VALUE, "args", d);
    expect_refused(op, NULL, 10, ws, wsb, QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "args", d);
    a[3] = d->x; /* offset was absent at planning */
    expect_refused(op, a, 10, ws, wsb, QMOE_ERR_PARAM_INVALID, QMOE_RULE_RESERVED, "offset", d);
    gmm_args(d, a);
    a[5] = NULL; /* xScale is required */
    expect_refused(op, a, 10, ws, wsb, QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "xScale", d);
    gmm_args(d, a);
    a[8] = d->xs; /* outputScale over xScale: in place */
    expect_refused(op, a, 10, ws, wsb, QMOE_ERR_PARAM_INVALID, QMOE_RULE_OVERLAP, "outputScale", d);
    gmm_args(d, a);
    a[7] = (int8_t *)d->x + 8; /* output over x */
    expect_refused(op, a, 10, ws, wsb, QMOE_ERR_PARAM_INVALID, QMOE_RULE_OVERLAP, "output", d);
    gmm_args(d, a);
    if (wsb) {
        expect_refused(op, a, 10, ws, wsb - 1, QMOE_ERR_PARAM_INVALID, QMOE_RULE_WORKSPACE,
                       "workspaceSize", d);
        expect_refused(op, a, 10, NULL, wsb, QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "workspace", d);
        expect_refused(op, a, 10, ws + 4, wsb, QMOE_ERR_PARAM_INVALID, QMOE_RULE_WORKSPACE,
                       "workspace", d);
        a[8] = (void *)(ws + 8); /* outputScale inside the workspace */
        expect_refused(op, a, 10, ws, wsb + 64, QMOE_ERR_PARAM_INVALID, QMOE_RULE_OVERLAP,
                       "outputScale", d);
        gmm_args(d, a);
    }
    /* a bad groupList is refused when the operator runs, outputs untouched */
    d->gl[1] = M + 1;
    expect_refused(op, a, 10, ws, wsb, QMOE_ERR_PARAM_INVALID, QMOE_RULE_VALUE, "groupList", d);
    CHECK(qmoe_op_execute(NULL, a, 10, ws, wsb, NULL) == QMOE_ERR_PARAM_NULLPTR);
    /* descriptors have no data: the two-phase call, which binds at phase one, refuses them */
    qmoe_tensor *t[7];
    CHECK(gmm_tensors(NULL, t));
    qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
    uint64_t n = 0;
    CHECK(qmoe_grouped_matmul_swiglu_quant_workspace_size(t[0], t[1], NULL, NULL, t[2], t[3], t[4], t[5], t[6],
                                               NULL, NULL, &n, &ex) == QMOE_ERR_PARAM_NULLPTR);
    CHECK(ex == NULL && !strcmp(qmoe_last_error_info()->arg, "x"));
    qmoe_op *none = NULL;
    CHECK(qmoe_op_create_grouped_matmul_swiglu_quant(t[0], t[1], NULL, NULL, t[2], t[3], t[4], t[5], t[6], NULL,
                                          NULL, NULL) == QMOE_ERR_PARAM_NULLPTR);
    CHECK(qmoe_op_create_grouped_matmul_swiglu_quant(t[0], t[1], NULL, NULL, t[2], t[3], t[4], t[0], t[6], NULL,
                                          NULL, &none) == QMOE_ERR_PARAM_INVALID && none == NULL);
    destroy_all(t, 7);
    CHECK(qmoe_op_workspace_size(NULL) == 0 && qmoe_op_arg_count(NULL) == -1 &&
          qmoe_op_kernel(NULL) == QMOE_KERNEL_AUTO && !strcmp(qmoe_op_name(NULL), ""));
    qmoe_op_destroy(NULL);
    free(d);
    free(ws);
    qmoe_op_destroy(op);
}

/* ---------------------------------------------------------------- an element-wise op ---------- */

/* round half to even, written here: the operator's rule stated independently */
static int8_t q_even(double v)
{
    double r = nearbyint(v);
    if (r > 127) r = 127;
    if (r < -127) r = -127;
    return (int8_t)r;
}

static void test_dynamic_quant(void)
{
    enum { R = 5, H = 48 };
    int64_t sx[2] = {R, H}, ss[1] = {R};
    qmoe_tensor *tx, *ty, *ts;
    CHECK(qmoe_tensor_desc_create(sx, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, &tx) == QMOE_OK);
    CHECK(qmoe_tensor_desc_create(sx, 2, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, &ty) == QMOE_OK);
    CHECK(qmoe_tensor_desc_create(ss, 1, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, &ts) == QMOE_OK);
    qmoe_op *op = NULL;
    CHECK(qmoe_op_create_dynamic_quant(tx, NULL, ty, ts, NULL, &op) == QMOE_OK);
    qmoe_tensor_destroy(tx), qmoe_tensor_destroy(ty), qmoe_tensor_destroy(ts);
    if (!op) return;
    CHECK(qmoe_op_type_of(op) == QMOE_OP_DYNAMIC_QUANT && qmoe_op_arg_count(op) == 4);
    uint64_t wsb = qmoe_op_workspace_size(op);
    void *ws = wsb ? aligned_alloc(64, (wsb + 63) / 64 * 64) : NULL;
    for (int run = 0; run < RUNS; run++) {
        float *x = malloc(sizeof(float) * R * H), *scale = malloc(sizeof(float) * R);
        int8_t *y = malloc(R * H);
        qt_rng r = {50 + (uint64_t)run};
        for (int i = 0; i < R * H; i++) x[i] = qt_uniform(&r, -3.0f, 3.0f) * (float)(run + 1);
        void *a[4] = {x, NULL, y, scale};
        CHECK(qmoe_op_execute(op, a, 4, ws, wsb, NULL) == QMOE_OK);
        for (int i = 0; i < R; i++) {
            float amax = 0;
            for (int j = 0; j < H; j++) amax = fmaxf(amax, fabsf(x[i * H + j]));
            float sc = amax / 127.0f;
            CHECK(scale[i] == sc);
            for (int j = 0; j < H; j++) CHECK(y[i * H + j] == q_even((double)(x[i * H + j] / sc)));
        }
        a[1] = x; /* smoothScales was absent at planning */
        CHECK(qmoe_op_execute(op, a, 4, ws, wsb, NULL) == QMOE_ERR_PARAM_INVALID);
        free(x), free(y), free(scale);
    }
    free(ws);
    qmoe_op_destroy(op);
}

/* A plan split over two devices assumed outputs on 128-byte lines: a run must give them so. */
static void test_devices(void)
{
    qmoe_tensor *t[7];
    CHECK(gmm_tensors(NULL, t));
    qmoe_grouped_matmul_swiglu_quant_options o = QMOE_GROUPED_MATMUL_SWIGLU_QUANT_OPTIONS_INIT;
    o.devices = 2;
    o.threads = 1;
    qmoe_op *op = NULL;
    CHECK(qmoe_op_create_grouped_matmul_swiglu_quant(t[0], t[1], NULL, NULL, t[2], t[3], t[4], t[5], t[6], NULL,
                                          &o, &op) == QMOE_OK);
    destroy_all(t, 7);
    if (!op) return;
    gmm_data *d = malloc(sizeof *d);
    fill(d, 77);
    int8_t eo[M * N2];
    float es[M];
    CHECK(expected(d, eo, es));
    int8_t *out = aligned_alloc(128, (128 + sizeof d->out + 127) / 128 * 128);
    float *os = aligned_alloc(128, (128 + sizeof d->oscale + 127) / 128 * 128);
    uint64_t wsb = qmoe_op_workspace_size(op);
    void *ws = wsb ? aligned_alloc(64, (wsb + 63) / 64 * 64) : NULL;
    void *a[10];
    gmm_args(d, a);
    a[7] = out, a[8] = os;
    CHECK(qmoe_op_execute(op, a, 10, ws, wsb, NULL) == QMOE_OK);
    CHECK(!memcmp(out, eo, sizeof eo) && !memcmp(os, es, sizeof es));
    memset(out + 64, 0x5A, sizeof d->out);
    a[7] = out + 64; /* off the lines the split was cut at */
    CHECK(qmoe_op_execute(op, a, 10, ws, wsb, NULL) == QMOE_ERR_PARAM_INVALID);
    CHECK(!strcmp(qmoe_last_error_info()->arg, "output"));
    int ok = 1;
    for (size_t i = 0; i < sizeof d->out; i++) ok &= (uint8_t)out[64 + i] == 0x5A;
    CHECK(ok);
    free(out), free(os), free(ws), free(d);
    qmoe_op_destroy(op);
}

/* An output whose strides put two elements in one place would be written by two threads at
 * once: every element-wise operator refuses it at planning, naming it. */
static qmoe_tensor *desc(int nd, const int64_t *sh, const int64_t *st, qmoe_dtype dt)
{
    qmoe_tensor *t = NULL;
    CHECK(qmoe_tensor_desc_create(sh, nd, st, dt, QMOE_FORMAT_ND, &t) == QMOE_OK);
    return t;
}

static void expect_overlap(qmoe_status st, qmoe_op *op, const char *arg)
{
    CHECK_MSG(st == QMOE_ERR_PARAM_INVALID && qmoe_last_error_info()->rule == QMOE_RULE_OVERLAP &&
                  !strcmp(qmoe_last_error_info()->arg, arg),
              "%s: status %d rule %d arg %s (%s)", arg, (int)st, (int)qmoe_last_error_info()->rule,
              qmoe_last_error_info()->arg, qmoe_last_error());
    qmoe_op_destroy(op);
}

static void test_self_overlapping_outputs(void)
{
    enum { R = 6, H = 16, E2 = 4, K2 = 2 };
    int64_t rh[2] = {R, H}, r1[1] = {R}, z2[2] = {0, 1}, z1[1] = {0}, re[2] = {R, E2}, rk[2] = {R, K2},
            half[2] = {R, H / 2}, ak[2] = {R * K2, H}, a1[1] = {R * K2}, e1[1] = {E2}, h2[2] = {1, 0};
    qmoe_tensor *xf = desc(2, rh, NULL, QMOE_DTYPE_FLOAT32), *y0 = desc(2, rh, z2, QMOE_DTYPE_INT8),
                *s1 = desc(1, r1, NULL, QMOE_DTYPE_FLOAT32), *s0 = desc(1, r1, z1, QMOE_DTYPE_FLOAT32),
                *y8 = desc(2, rh, NULL, QMOE_DTYPE_INT8);
    qmoe_op *op = NULL;
    expect_overlap(qmoe_op_create_dynamic_quant(xf, NULL, y0, s1, NULL, &op), op, "y");
    op = NULL;
    expect_overlap(qmoe_op_create_dynamic_quant(xf, NULL, y8, s0, NULL, &op), op, "scale");
    qmoe_tensor *h0 = desc(2, half, h2, QMOE_DTYPE_FLOAT32);
    op = NULL;
    expect_overlap(qmoe_op_create_swiglu(xf, -1, h0, NULL, &op), op, "out");
    qmoe_tensor *lg = desc(2, re, NULL, QMOE_DTYPE_FLOAT32), *yk0 = desc(2, rk, z2, QMOE_DTYPE_FLOAT32),
                *ik = desc(2, rk, NULL, QMOE_DTYPE_INT32), *rik = desc(2, rk, NULL, QMOE_DTYPE_INT32),
                *yk = desc(2, rk, NULL, QMOE_DTYPE_FLOAT32), *ik0 = desc(2, rk, z2, QMOE_DTYPE_INT32);
    op = NULL;
    expect_overlap(qmoe_op_create_moe_gating_top_k_softmax(lg, NULL, K2, yk0, ik, rik, NULL, &op), op,
                   "yOut");
    qmoe_moe_gating_attrs ga = {.k = K2, .k_group = 1, .group_count = 1, .routed_scaling_factor = 1,
                                .eps = 1e-20};
    op = NULL;
    expect_overlap(qmoe_op_create_moe_gating_top_k(lg, NULL, &ga, yk, ik0, NULL, NULL, &op), op,
                   "expertIdxOut");
    qmoe_tensor *ex0 = desc(2, ak, z2, QMOE_DTYPE_INT8), *ri = desc(1, a1, NULL, QMOE_DTYPE_INT32),
                *tok = desc(1, e1, NULL, QMOE_DTYPE_INT64), *es = desc(1, a1, NULL, QMOE_DTYPE_FLOAT32);
    qmoe_moe_routing_attrs ra = {.expert_num = E2, .tokens_mode = QMOE_MOE_TOKENS_CUMSUM,
                                 .quant_mode = QMOE_MOE_QUANT_DYNAMIC};
    op = NULL;
    expect_overlap(qmoe_op_create_moe_init_routing(xf, ik, NULL, NULL, &ra, ex0, ri, tok, es, NULL, &op),
                   op, "expandedXOut");
    qmoe_tensor *exf = desc(2, ak, NULL, QMOE_DTYPE_FLOAT32), *o0 = desc(2, rh, z2, QMOE_DTYPE_FLOAT32);
    op = NULL;
    expect_overlap(qmoe_op_create_moe_finalize_routing(exf, ri, NULL, NULL, NULL, yk, NULL, 2, o0, NULL,
                                                       &op),
                   op, "out");
    qmoe_tensor *all[] = {xf, y0, s1, s0, y8, h0, lg, yk0, ik, rik, yk, ik0, ex0, ri, tok, es, exf, o0};
    destroy_all(all, (int)(sizeof all / sizeof all[0]));
}

int main(void)
{
    test_self_overlapping_outputs();
    test_devices();
    test_runs();
    test_threads();
    test_refusals();
    test_dynamic_quant();
    return qt_finish("op");
}
