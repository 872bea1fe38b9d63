/*
 * Soak: thousands of small operators of random shapes and layouts through several streams on
 * single devices and on device groups that share those devices, with injected device failures
 * and streams torn down while work is queued (the runtime has no cancel call: destroying a
 * stream with work in flight is the nearest thing, and it must finish that work cleanly).
 *
 * Afterwards: every operator that succeeded matches the reference kernel (output +-1, scale
 * 1e-6 relative or within float32's error bound under cancellation, rows past the last group
 * untouched), every failed one reported
 * QMOE_ERR_RUNTIME with a message, each injected failure failed exactly one operator that used
 * the device, and resident memory (VmRSS) did not grow across the second half by more than
 * RSS_BOUND_KB (checked without sanitizers, whose allocators hold freed memory on purpose).
 *
 * QMOE_SOAK_OPS sets the number of operators (default 50000, ~20 s; the sanitizer builds use
 * fewer).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qmoe/qmoe.h"
#include "qmoe/runtime.h"
#include "support/oracle.h"
#include "support/testlib.h"
#include "testing.h" /* qmoe_device_inject_failure */

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define UNDER_SANITIZER 1
#endif
#endif
#ifndef UNDER_SANITIZER
#define UNDER_SANITIZER 0
#endif

enum { NDEV = 4, NSTREAMS = 6, RSS_BOUND_KB = 8192, SENTINEL = 0x5A };

/* ------------------------------------------------------------------ one operator ------------ */

typedef struct soak_op {
    int64_t M, K, N, E, Eg;
    int layout; /* oracle_wlayout */
    int per_group, count_list, devices;
    int8_t *x, *wl; /* wl: logical weight [E][K][N] for the oracle's noise bound */
    uint8_t *w;
    float *ws, *bias, *xs;
    int64_t *gl, rows;
    int8_t *out, *ref;
    float *outs, *ref_s;
    void *work;
    qmoe_status status;
} soak_op;

static void *zalloc(size_t n)
{
    void *p = calloc(n ? n : 1, 1);
    if (!p) abort();
    return p;
}

static void make_op(soak_op *op, qt_rng *r, int devices)
{
    memset(op, 0, sizeof *op);
    op->layout = (int)qt_range(r, 0, 5);
    int a8w4 = op->layout >= ORACLE_W_INT4_ND;
    int nz = op->layout == ORACLE_W_INT8_NZ || op->layout == ORACLE_W_INT4_NZ ||
             op->layout == ORACLE_W_INT32_NZ;
    op->M = qt_range(r, 0, 48);
    op->K = nz ? 16 * qt_range(r, 1, 4) : qt_range(r, 1, 64);
    op->N = nz ? (a8w4 ? 64 : 32) * qt_range(r, 1, 2)
               : (op->layout == ORACLE_W_INT32_ND ? 8 * qt_range(r, 1, 8) : 2 * qt_range(r, 1, 40));
    op->E = qt_range(r, 1, 6);
    op->Eg = qt_range(r, 0, op->E);
    op->per_group = op->K % 16 == 0 && qt_range(r, 0, 2) == 0;
    op->count_list = (int)qt_range(r, 0, 1);
    op->devices = devices;
    int64_t G = op->per_group ? 4 : 1, E = op->E, K = op->K, N = op->N, M = op->M;

    op->x = zalloc((size_t)(M * K));
    for (int64_t i = 0; i < M * K; i++) op->x[i] = (int8_t)qt_range(r, -128, 127);
    int8_t *wl = op->wl = zalloc((size_t)(E * K * N));
    for (int64_t i = 0; i < E * K * N; i++)
        wl[i] = (int8_t)(a8w4 ? qt_range(r, -8, 7) : qt_range(r, -128, 127));
    op->w = zalloc((size_t)oracle_weight_bytes(op->layout, E, K, N));
    oracle_pack_weight(op->layout, wl, E, K, N, op->w);
    op->ws = zalloc((size_t)(E * G * N) * sizeof(float));
    for (int64_t i = 0; i < E * G * N; i++) op->ws[i] = qt_uniform(r, 0.0005f, 0.004f);
    if (a8w4) {
        op->bias = zalloc((size_t)(E * N) * sizeof(float));
        CHECK(qmoe_layout_weight_assist_matrix(wl, E, K, N, op->ws, op->per_group ? G : 0, op->bias) == 0);
    }
    op->xs = zalloc((size_t)M * sizeof(float));
    for (int64_t m = 0; m < M; m++) op->xs[m] = qt_uniform(r, 0.01f, 0.1f);
    op->gl = zalloc((size_t)op->Eg * sizeof(int64_t));
    int64_t end = 0;
    for (int64_t e = 0; e < op->Eg; e++) {
        int64_t cnt = qt_range(r, 0, (M - end) / 2 + (e == op->Eg - 1 ? (M - end + 1) / 2 : 0));
        end += cnt;
        op->gl[e] = op->count_list ? cnt : end;
    }
    op->rows = end;
    size_t ob = (size_t)(M * N / 2), sb = (size_t)M * sizeof(float);
    op->out = zalloc(ob);
    op->ref = zalloc(ob);
    op->outs = zalloc(sb);
    op->ref_s = zalloc(sb);
    memset(op->out, SENTINEL, ob);
    memset(op->ref, SENTINEL, ob);
    memset(op->outs, SENTINEL, sb);
    memset(op->ref_s, SENTINEL, sb);
}

static void free_op(soak_op *op)
{
    void *all[] = {op->x, op->wl, op->w, op->ws, op->bias, op->xs, op->gl, op->out, op->ref, op->outs,
                   op->ref_s, op->work};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    memset(op, 0, sizeof *op);
}

static qmoe_tensor *tensor(int ndim, const int64_t *shape, qmoe_dtype dt, qmoe_format fmt, void *data)
{
    qmoe_tensor *t = NULL;
    qmoe_status st = qmoe_tensor_create(shape, ndim, NULL, dt, fmt, data, &t);
    CHECK_MSG(st == QMOE_OK, "tensor: %s", qmoe_last_error());
    return t;
}

static qmoe_tensor *weight(const soak_op *op)
{
    int64_t E = op->E, K = op->K, N = op->N;
    switch (op->layout) {
    case ORACLE_W_INT8_ND: return tensor(3, (int64_t[]){E, K, N}, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, op->w);
    case ORACLE_W_INT8_NZ:
        return tensor(5, (int64_t[]){E, N / 32, K / 16, 16, 32}, QMOE_DTYPE_INT8, QMOE_FORMAT_FRACTAL_NZ, op->w);
    case ORACLE_W_INT4_ND: return tensor(3, (int64_t[]){E, K, N}, QMOE_DTYPE_INT4, QMOE_FORMAT_ND, op->w);
    case ORACLE_W_INT4_NZ:
        return tensor(5, (int64_t[]){E, N / 64, K / 16, 16, 64}, QMOE_DTYPE_INT4, QMOE_FORMAT_FRACTAL_NZ, op->w);
    case ORACLE_W_INT32_ND: return tensor(3, (int64_t[]){E, K, N / 8}, QMOE_DTYPE_INT32, QMOE_FORMAT_ND, op->w);
    default:
        return tensor(5, (int64_t[]){E, N / 64, K / 16, 16, 8}, QMOE_DTYPE_INT32, QMOE_FORMAT_FRACTAL_NZ, op->w);
    }
}

/* Phase one (into out/outs, or ref/ref_s for the reference run); NULL on failure. */
static qmoe_grouped_matmul_swiglu_quant_executor *plan(soak_op *op, int reference, uint64_t *size)
{
    int64_t M = op->M, E = op->E, N = op->N;
    qmoe_tensor *t[8] = {
        tensor(2, (int64_t[]){M, op->K}, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, op->x),
        weight(op),
        op->bias ? tensor(2, (int64_t[]){E, N}, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, op->bias) : NULL,
        op->per_group ? tensor(3, (int64_t[]){E, 4, N}, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, op->ws)
                      : tensor(2, (int64_t[]){E, N}, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, op->ws),
        tensor(1, (int64_t[]){M}, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, op->xs),
        tensor(1, (int64_t[]){op->Eg}, QMOE_DTYPE_INT64, QMOE_FORMAT_ND, op->gl),
        tensor(2, (int64_t[]){M, N / 2}, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, reference ? op->ref : op->out),
        tensor(1, (int64_t[]){M}, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, reference ? op->ref_s : op->outs),
    };
    qmoe_grouped_matmul_swiglu_quant_options o = {
        .group_list_type = op->count_list ? QMOE_GROUP_LIST_COUNT : QMOE_GROUP_LIST_CUMSUM,
        .kernel = reference ? QMOE_KERNEL_REFERENCE : QMOE_KERNEL_AUTO,
        .threads = reference ? 1 : 0,
        .devices = reference ? 1 : op->devices,
    };
    qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
    qmoe_status st = qmoe_grouped_matmul_swiglu_quant_workspace_size(t[0], t[1], t[2], NULL, t[3], t[4], t[5],
                                                          t[6], t[7], NULL, &o, size, &ex);
    CHECK_MSG(st == QMOE_OK, "plan: %s", qmoe_last_error());
    for (int i = 0; i < 8; i++) qmoe_tensor_destroy(t[i]);
    return st == QMOE_OK ? ex : NULL;
}

static void run_reference(soak_op *op)
{
    uint64_t size = 0;
    qmoe_grouped_matmul_swiglu_quant_executor *ex = plan(op, 1, &size);
    if (!ex) return;
    void *work = size ? malloc(size) : NULL;
    CHECK_MSG(qmoe_grouped_matmul_swiglu_quant(work, size, ex, NULL) == QMOE_OK, "reference: %s", qmoe_last_error());
    free(work);
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
}

/* Queues the operator; the executor goes at once (the queued operator holds a copy). */
static qmoe_status submit(soak_op *op, qmoe_stream *s)
{
    uint64_t size = 0;
    qmoe_grouped_matmul_swiglu_quant_executor *ex = plan(op, 0, &size);
    if (!ex) return QMOE_ERR_PARAM_INVALID;
    op->work = size ? malloc(size) : NULL;
    qmoe_status st = qmoe_grouped_matmul_swiglu_quant(op->work, size, ex, s);
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
    return st;
}

static double *to_double(const float *v, int64_t n)
{
    double *d = zalloc((size_t)n * sizeof *d);
    for (int64_t i = 0; i < n; i++) d[i] = v[i];
    return d;
}

/* Per row, the oracle's bound on float32 rounding noise in S (large where the A8W4 bias cancels
 * most of the product). Written to noise[0 .. M). */
static void row_noise(const soak_op *op, double *noise)
{
    int64_t G = op->per_group ? 4 : 1, n2 = op->N / 2;
    double *ws = to_double(op->ws, op->E * G * op->N), *xs = to_double(op->xs, op->M);
    double *bias = op->bias ? to_double(op->bias, op->E * op->N) : NULL;
    oracle_case oc = {.M = op->M, .K = op->K, .N = op->N, .E = op->E, .E_groups = op->Eg, .G = G,
                      .a8w4 = op->bias != NULL, .x = op->x, .x_s0 = op->K, .x_s1 = 1, .w = op->wl,
                      .ws = ws, .bias = bias, .xs = xs, .gl = op->gl, .count_list = op->count_list};
    double *S = zalloc((size_t)(op->M * n2) * sizeof(double)), *scale = zalloc((size_t)op->M * sizeof(double));
    int8_t *q = zalloc((size_t)(op->M * n2));
    uint8_t *written = zalloc((size_t)op->M);
    oracle_run(&oc, S, scale, q, written, noise);
    free(ws), free(xs), free(bias), free(S), free(scale), free(q), free(written);
}

/* Compares with the reference run by the project's acceptance rule: scale within 1e-6 relative,
 * or within float32's own error where cancellation makes that larger; output within +-1 on rows
 * whose amax stands well above that error (test_reference.c uses the same rule). Prints the
 * first difference. */
static int matches_reference(const soak_op *op)
{
    int64_t n2 = op->N / 2;
    if (memcmp(op->out + op->rows * n2, op->ref + op->rows * n2, (size_t)((op->M - op->rows) * n2)) ||
        memcmp(op->outs + op->rows, op->ref_s + op->rows, (size_t)(op->M - op->rows) * sizeof(float))) {
        fprintf(stderr, "soak: rows past the last group (%lld) were written\n", (long long)op->rows);
        return 0; /* both hold the sentinel there */
    }
    double *noise = zalloc((size_t)op->M * sizeof(double));
    row_noise(op, noise);
    int ok = 1;
    for (int64_t m = 0; m < op->rows && ok; m++) {
        double a = op->outs[m], b = op->ref_s[m];
        if (fabs(a - b) > 1e-6 * fmax(fabs(a), fabs(b)) && fabs(a - b) > 4.0 * noise[m] / 127.0) {
            fprintf(stderr, "soak: row %lld scale %.9g, reference %.9g (noise bound %.3g)\n",
                    (long long)m, a, b, 4.0 * noise[m] / 127.0);
            ok = 0;
        }
        if (127.0 * b < 600.0 * noise[m]) continue; /* int8 not determined by float32 here */
        for (int64_t j = 0; j < n2 && ok; j++) {
            int d = op->out[m * n2 + j] - op->ref[m * n2 + j];
            if (d < -1 || d > 1) {
                fprintf(stderr, "soak: row %lld column %lld: %d, reference %d\n", (long long)m,
                        (long long)j, op->out[m * n2 + j], op->ref[m * n2 + j]);
                ok = 0;
            }
        }
    }
    free(noise);
    return ok;
}

/* ------------------------------------------------------------------ the soak ---------------- */

static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kb = strtol(line + 6, NULL, 10);
    if (f) fclose(f);
    return kb;
}

typedef struct soak_stream {
    qmoe_stream *s;
    int ndev, dev[3]; /* devices of the stream, in group order */
} soak_stream;

static void open_stream(soak_stream *ss, qmoe_device **devs)
{
    qmoe_device *g[3];
    for (int i = 0; i < ss->ndev; i++) g[i] = devs[ss->dev[i]];
    qmoe_status st = ss->ndev == 1 ? qmoe_stream_create(g[0], &ss->s)
                                   : qmoe_stream_create_group(g, ss->ndev, &ss->s);
    CHECK_MSG(st == QMOE_OK, "stream: %s", qmoe_last_error());
}

int main(void)
{
    const char *env = getenv("QMOE_SOAK_OPS");
    long total = env ? strtol(env, NULL, 10) : 50000;
    if (total < NSTREAMS * 4) total = NSTREAMS * 4;
    qt_rng r = {0x50A4};

    qmoe_device *devs[NDEV];
    for (int d = 0; d < NDEV; d++) {
        qmoe_device_options o = {.threads = 1 + d % 2};
        CHECK_MSG(qmoe_device_create(&o, &devs[d]) == QMOE_OK, "device: %s", qmoe_last_error());
    }
    /* Single-device streams and groups that share devices with them. */
    soak_stream streams[NSTREAMS] = {
        {NULL, 1, {0}}, {NULL, 1, {1}}, {NULL, 1, {2}},
        {NULL, 2, {0, 1}}, {NULL, 3, {3, 2, 1}}, {NULL, 2, {3, 0}},
    };
    for (int i = 0; i < NSTREAMS; i++) open_stream(&streams[i], devs);

    long done = 0, ok = 0, failed = 0, injected = 0, destroyed = 0, wrong = 0, unexplained = 0;
    long rss_start = rss_kb(), rss_half = -1;
    soak_op ops[NSTREAMS];
    while (done < total) {
        /* One operator per stream per round, so each synchronize reports exactly one. */
        int inject = qt_range(&r, 0, 3) == 0 ? (int)qt_range(&r, 0, NDEV - 1) : -1;
        int uses[NSTREAMS] = {0}, any_use = 0;
        for (int i = 0; i < NSTREAMS; i++) {
            make_op(&ops[i], &r, (int)qt_range(&r, 1, streams[i].ndev));
            for (int k = 0; k < ops[i].devices; k++) uses[i] |= streams[i].dev[k] == inject;
            any_use |= uses[i];
        }
        if (inject >= 0 && !any_use) inject = -1;
        if (inject >= 0) {
            CHECK(qmoe_device_inject_failure(devs[inject], 1) == QMOE_OK);
            injected++;
        }
        for (int i = 0; i < NSTREAMS; i++) {
            run_reference(&ops[i]);
            qmoe_status st = submit(&ops[i], streams[i].s);
            CHECK_MSG(st == QMOE_OK, "submit: %s", qmoe_last_error());
        }
        /* Without an injection this round, one stream may be torn down with its work queued. */
        int teardown = inject < 0 && qt_range(&r, 0, 9) == 0 ? (int)qt_range(&r, 0, NSTREAMS - 1) : -1;
        int failures_this_round = 0;
        for (int i = 0; i < NSTREAMS; i++) {
            if (i == teardown) {
                qmoe_stream_destroy(streams[i].s); /* waits for the queued operator */
                open_stream(&streams[i], devs);
                destroyed++;
                ops[i].status = QMOE_OK;
            } else {
                ops[i].status = qmoe_stream_synchronize(streams[i].s);
            }
            if (ops[i].status == QMOE_OK) {
                ok++;
                if (!matches_reference(&ops[i])) {
                    wrong++;
                    CHECK_MSG(0, "op %ld (stream %d, M=%lld K=%lld N=%lld layout %d, %d devices): "
                                 "differs from the reference", done + i, i, (long long)ops[i].M,
                              (long long)ops[i].K, (long long)ops[i].N, ops[i].layout, ops[i].devices);
                }
            } else {
                failed++;
                failures_this_round++;
                CHECK_MSG(ops[i].status == QMOE_ERR_RUNTIME && qmoe_last_error()[0],
                          "op %ld failed with %d: %s", done + i, (int)ops[i].status, qmoe_last_error());
                if (!uses[i]) unexplained++;
            }
        }
        CHECK_MSG(failures_this_round == (inject >= 0),
                  "round at op %ld: %d failures, %d injected", done, failures_this_round, inject >= 0);
        for (int i = 0; i < NSTREAMS; i++) free_op(&ops[i]);
        done += NSTREAMS;
        if (rss_half < 0 && done >= total / 2) rss_half = rss_kb();
    }
    for (int i = 0; i < NSTREAMS; i++) qmoe_stream_destroy(streams[i].s);
    long rss_end = rss_kb();
    for (int d = 0; d < NDEV; d++) qmoe_device_destroy(devs[d]);

    CHECK(unexplained == 0);
    CHECK(wrong == 0);
    CHECK(ok + failed == done);
    CHECK(failed == injected);
    printf("soak: %ld operators on %d devices, %d streams (3 groups): %ld ok, %ld failed, "
           "%ld failures injected, %ld streams torn down with work queued\n",
           done, NDEV, NSTREAMS, ok, failed, injected, destroyed);
    printf("soak: VmRSS start %ld kB, half-way %ld kB, end %ld kB (second half %+ld kB, bound %d kB%s)\n",
           rss_start, rss_half, rss_end, rss_end - rss_half, RSS_BOUND_KB,
           UNDER_SANITIZER ? ", not checked under a sanitizer" : "");
    if (!UNDER_SANITIZER) CHECK(rss_end - rss_half <= RSS_BOUND_KB);
    return qt_finish("test_soak");
}
