/*
 * The device on the caller's threads (qmoe_device_create_external): it starts no thread; what is
 * submitted to its streams waits until synchronize (or destroy) and then runs on the caller's
 * threads only, through the caller's parallel function (a pthread pool here, an OpenMP parallel
 * region too where the compiler has OpenMP). Its results equal a CPU device's bit for bit, for
 * the fused operator and the grouped matmul at 1..4 threads; errors behave as on every device
 * (a failed operator stops the later ones of its stream); a parallel function that breaks its
 * contract fails the operator instead of going unnoticed; bad options and groups are refused.
 */
#include <dirent.h>

#include "qmoe/grouped_matmul.h"
#include "test_runtime_case.h"
#include "test_runtime_pool.h"
#ifdef _OPENMP
#include <omp.h>
#endif

enum { MAX_T = 4 };

static test_pool pool;
static qmoe_device *cpu_dev[MAX_T + 1], *ext_dev[MAX_T + 1];
static qmoe_stream *cpu_s[MAX_T + 1], *ext_s[MAX_T + 1];

/* Threads of this process (Linux: /proc/self/task); -1 where that cannot be read. */
static int process_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* ---------------------------------------------------------------- the grouped matmul --------- */

typedef struct gmm_case {
    int64_t M, K, N, E;
    int8_t *x, *w;
    float *scale, *pts, *out;
    int64_t *gl;
    qmoe_tensor *t[6]; /* x w scale pts gl out */
} gmm_case;

static void gmm_init(gmm_case *c, qt_rng *r, int64_t M, int64_t K, int64_t N, int64_t E)
{
    memset(c, 0, sizeof *c);
    c->M = M, c->K = K, c->N = N, c->E = E;
    c->x = rt_alloc((size_t)(M * K));
    c->w = rt_alloc((size_t)(E * K * N));
    c->scale = rt_alloc((size_t)(E * N) * sizeof(float));
    c->pts = rt_alloc((size_t)M * sizeof(float));
    c->out = rt_alloc((size_t)(M * N) * sizeof(float));
    c->gl = rt_alloc((size_t)E * sizeof(int64_t));
    for (int64_t i = 0; i < M * K; i++) c->x[i] = (int8_t)qt_range(r, -128, 127);
    for (int64_t i = 0; i < E * K * N; i++) c->w[i] = (int8_t)qt_range(r, -128, 127);
    for (int64_t i = 0; i < E * N; i++) c->scale[i] = qt_uniform(r, 0.001f, 0.01f);
    for (int64_t i = 0; i < M; i++) c->pts[i] = qt_uniform(r, 0.01f, 0.05f);
    int64_t left = M - qt_range(r, 0, M / 4);
    for (int64_t e = 0; e < E; e++) {
        c->gl[e] = e == E - 1 ? left : qt_range(r, 0, left);
        left -= c->gl[e];
    }
    int ok = 1;
    ok &= !qmoe_tensor_create((int64_t[]){M, K}, 2, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, c->x, &c->t[0]);
    ok &= !qmoe_tensor_create((int64_t[]){E, K, N}, 3, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, c->w, &c->t[1]);
    ok &= !qmoe_tensor_create((int64_t[]){E, N}, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, c->scale, &c->t[2]);
    ok &= !qmoe_tensor_create((int64_t[]){M}, 1, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, c->pts, &c->t[3]);
    ok &= !qmoe_tensor_create((int64_t[]){E}, 1, NULL, QMOE_DTYPE_INT64, QMOE_FORMAT_ND, c->gl, &c->t[4]);
    ok &= !qmoe_tensor_create((int64_t[]){M, N}, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, c->out, &c->t[5]);
    if (!ok) {
        fprintf(stderr, "gmm_init: %s\n", qmoe_last_error());
        abort();
    }
}

static void gmm_free(gmm_case *c)
{
    for (int i = 0; i < 6; i++) qmoe_tensor_destroy(c->t[i]);
    free(c->x), free(c->w), free(c->scale), free(c->pts), free(c->out), free(c->gl);
}

/* Plans for `threads` parts, fills out with a sentinel, runs on s and synchronizes. */
static qmoe_status gmm_run(gmm_case *c, int threads, qmoe_stream *s)
{
    qmoe_grouped_matmul_options o = QMOE_GROUPED_MATMUL_OPTIONS_INIT;
    o.threads = threads;
    qmoe_grouped_matmul_executor *ex = NULL;
    uint64_t wsb = 0;
    qmoe_status st = qmoe_grouped_matmul_workspace_size(c->t[0], c->t[1], NULL, c->t[2], c->t[3], c->t[4],
                                                 QMOE_GROUP_LIST_COUNT, c->t[5], &o, &wsb, &ex);
    if (st) return st;
    void *ws = wsb ? rt_alloc((size_t)wsb) : NULL;
    memset(c->out, RT_SENTINEL, (size_t)(c->M * c->N) * sizeof(float));
    st = qmoe_grouped_matmul(ws, wsb, ex, s);
    qmoe_grouped_matmul_executor_destroy(ex);
    if (!st) st = qmoe_stream_synchronize(s);
    free(ws);
    return st;
}

/* ---------------------------------------------------------------- sweeps ---------------------- */

/* One random fused-operator case: every external stream equals the CPU device of as many
 * threads, bit for bit. */
static void fused_case(qt_rng *r, int index, qmoe_stream *const *ext)
{
    rt_case c;
    int64_t M = index % 3 == 1 ? qt_range(r, 128, 300) : qt_range(r, 1, 90);
    int64_t K = qt_range(r, 1, 300), E = qt_range(r, 1, 5), N = 2 * qt_range(r, 1, 160);
    if (index % 3 == 1) N = 8 * qt_range(r, 1, 20);
    int64_t rows = qt_range(r, 0, M);
    rt_case_init(&c, r, M, K, N, E, rows, index % 2, index % 3 == 2, 0);
    int8_t *eo = rt_alloc((size_t)(M * c.N2));
    float *es = rt_alloc((size_t)M * sizeof(float));
    for (int t = 1; t <= MAX_T; t++) {
        CHECK(rt_case_run(&c, t, 1, QMOE_KERNEL_AUTO, cpu_s[t]) == QMOE_OK);
        memcpy(eo, c.out, (size_t)(M * c.N2));
        memcpy(es, c.out_scale, (size_t)M * sizeof(float));
        qmoe_status st = rt_case_run(&c, t, 1, QMOE_KERNEL_AUTO, ext[t]);
        CHECK_MSG(st == QMOE_OK && rt_same_outputs(&c, eo, es),
                  "fused case %d M=%lld K=%lld N=%lld E=%lld a8w4=%d: %d threads: %s %s", index,
                  (long long)M, (long long)K, (long long)N, (long long)E, index % 2, t,
                  qmoe_status_name(st), qmoe_last_error());
    }
    /* more parts than the device has threads: shared round-robin, the column phase without
     * its barrier, as on the CPU device */
    CHECK(rt_case_run(&c, 4, 1, QMOE_KERNEL_AUTO, cpu_s[2]) == QMOE_OK);
    memcpy(eo, c.out, (size_t)(M * c.N2));
    memcpy(es, c.out_scale, (size_t)M * sizeof(float));
    CHECK_MSG(rt_case_run(&c, 4, 1, QMOE_KERNEL_AUTO, ext[2]) == QMOE_OK && rt_same_outputs(&c, eo, es),
              "fused case %d: 4 parts on 2 threads: %s", index, qmoe_last_error());
    free(eo);
    free(es);
    rt_case_free(&c);
}

static void gmm_sweep_case(qt_rng *r, int index, qmoe_stream *const *ext)
{
    gmm_case c;
    gmm_init(&c, r, qt_range(r, 1, 200), 4 * qt_range(r, 1, 80), 2 * qt_range(r, 1, 200),
             qt_range(r, 1, 6));
    size_t bytes = (size_t)(c.M * c.N) * sizeof(float);
    float *expect = rt_alloc(bytes);
    for (int t = 1; t <= MAX_T; t++) {
        CHECK(gmm_run(&c, t, cpu_s[t]) == QMOE_OK);
        memcpy(expect, c.out, bytes);
        qmoe_status st = gmm_run(&c, t, ext[t]);
        CHECK_MSG(st == QMOE_OK && !memcmp(expect, c.out, bytes),
                  "gmm case %d M=%lld K=%lld N=%lld E=%lld: %d threads: %s %s", index,
                  (long long)c.M, (long long)c.K, (long long)c.N, (long long)c.E, t,
                  qmoe_status_name(st), qmoe_last_error());
    }
    CHECK(gmm_run(&c, 4, cpu_s[2]) == QMOE_OK);
    memcpy(expect, c.out, bytes);
    CHECK_MSG(gmm_run(&c, 4, ext[2]) == QMOE_OK && !memcmp(expect, c.out, bytes),
              "gmm case %d: 4 parts on 2 threads: %s", index, qmoe_last_error());
    free(expect);
    gmm_free(&c);
}

/* ---------------------------------------------------------------- broken parallel functions --- */

static int broken; /* 0 duplicate index, 1 index out of range, 2 an index missing */

static void broken_parallel(void *ctx, int n, qmoe_parallel_task task, void *arg)
{
    if (broken == 2) {
        pool_parallel(ctx, n - 1, task, arg);
        return;
    }
    pool_parallel(ctx, n, task, arg);
    task(arg, broken == 0 ? 0 : n);
}

#ifdef _OPENMP
static void omp_parallel(void *ctx, int n, qmoe_parallel_task task, void *arg)
{
    (void)ctx;
#pragma omp parallel num_threads(n)
    {
        /* fewer threads than asked: no task runs, and qmoe reports the operator as failed */
        if (omp_get_num_threads() == n) task(arg, omp_get_thread_num());
    }
}
#endif

int main(void)
{
    qt_rng r = {20261201};
    pool_start(&pool, MAX_T);
    int before = process_threads();

    /* devices on the pool's threads start no thread of their own */
    for (int t = 1; t <= MAX_T; t++) {
        qmoe_device_options o = {.threads = t};
        CHECK(qmoe_device_create_external(&o, pool_parallel, &pool, &ext_dev[t]) == QMOE_OK);
        CHECK(qmoe_device_threads(ext_dev[t]) == t);
        CHECK(qmoe_stream_create(ext_dev[t], &ext_s[t]) == QMOE_OK);
    }

    /* queued, not run, until synchronize: nothing else could run it */
    rt_case c;
    rt_case_init(&c, &r, 200, 96, 64, 3, 190, 0, 0, 0);
    int8_t *eo = rt_alloc((size_t)(c.M * c.N2));
    float *es = rt_alloc((size_t)c.M * sizeof(float));
    rt_expected(&c, QMOE_KERNEL_AUTO, eo, es);
    qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
    uint64_t wsb = 0;
    CHECK(rt_case_plan(&c, 3, 1, QMOE_KERNEL_AUTO, &ex, &wsb) == QMOE_OK);
    void *ws = wsb ? rt_alloc((size_t)wsb) : NULL;
    long jobs = pool.jobs;
    CHECK(qmoe_grouped_matmul_swiglu_quant(ws, wsb, ex, ext_s[3]) == QMOE_OK);
    CHECK(c.out[0] == (int8_t)RT_SENTINEL && pool.jobs == jobs);
    CHECK(qmoe_stream_synchronize(ext_s[3]) == QMOE_OK);
    CHECK(rt_same_outputs(&c, eo, es));
    CHECK(pool.jobs > jobs && pool.foreign == 0); /* the pool ran it, and only the pool */
    CHECK_MSG(before < 0 || process_threads() == before, "%d threads, %d before", process_threads(),
              before);

    /* destroying a stream runs what it still holds */
    qmoe_stream *tmp = NULL;
    CHECK(qmoe_stream_create(ext_dev[2], &tmp) == QMOE_OK);
    rt_case_reset_outputs(&c);
    CHECK(qmoe_grouped_matmul_swiglu_quant(ws, wsb, ex, tmp) == QMOE_OK);
    qmoe_stream_destroy(tmp);
    CHECK(rt_same_outputs(&c, eo, es));

    /* two streams on one device: synchronizing one runs the device's queue in order, the
     * other's earlier operator included */
    qmoe_stream *other = NULL;
    CHECK(qmoe_stream_create(ext_dev[3], &other) == QMOE_OK);
    rt_case_reset_outputs(&c);
    CHECK(qmoe_grouped_matmul_swiglu_quant(ws, wsb, ex, other) == QMOE_OK);
    CHECK(qmoe_stream_synchronize(ext_s[3]) == QMOE_OK);
    CHECK(rt_same_outputs(&c, eo, es));
    CHECK(qmoe_stream_synchronize(other) == QMOE_OK);
    qmoe_stream_destroy(other);

    /* a failed operator stops the later ones of its stream, which are left untouched */
    CHECK(qmoe_device_inject_failure(ext_dev[3], 1) == QMOE_OK);
    rt_case_reset_outputs(&c);
    CHECK(qmoe_grouped_matmul_swiglu_quant(ws, wsb, ex, ext_s[3]) == QMOE_OK);
    CHECK(qmoe_grouped_matmul_swiglu_quant(ws, wsb, ex, ext_s[3]) == QMOE_OK);
    CHECK(qmoe_stream_synchronize(ext_s[3]) == QMOE_ERR_RUNTIME);
    CHECK(strstr(qmoe_last_error(), "injected") != NULL);
    CHECK(c.out[0] == (int8_t)RT_SENTINEL && c.out[c.M * c.N2 - 1] == (int8_t)RT_SENTINEL);
    CHECK(qmoe_grouped_matmul_swiglu_quant(ws, wsb, ex, ext_s[3]) == QMOE_OK);
    CHECK(qmoe_stream_synchronize(ext_s[3]) == QMOE_OK); /* the error was reported: runs again */
    CHECK(rt_same_outputs(&c, eo, es));
    free(ws);
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
    free(eo);
    free(es);
    rt_case_free(&c);

    /* the same bits as the CPU device of as many threads */
    for (int t = 1; t <= MAX_T; t++) {
        qmoe_device_options o = {.threads = t};
        CHECK(qmoe_device_create(&o, &cpu_dev[t]) == QMOE_OK);
        CHECK(qmoe_stream_create(cpu_dev[t], &cpu_s[t]) == QMOE_OK);
    }
    for (int i = 0; i < 12; i++) fused_case(&r, i, ext_s);
    for (int i = 0; i < 12; i++) gmm_sweep_case(&r, i, ext_s);
    CHECK(pool.foreign == 0);

    /* a parallel function that breaks its contract fails the operator, whatever the break */
    gmm_case g;
    gmm_init(&g, &r, 64, 64, 256, 2);
    for (broken = 0; broken < 3; broken++) {
        qmoe_device *bd = NULL;
        qmoe_stream *bs = NULL;
        qmoe_device_options o = {.threads = 3};
        CHECK(qmoe_device_create_external(&o, broken_parallel, &pool, &bd) == QMOE_OK);
        CHECK(qmoe_stream_create(bd, &bs) == QMOE_OK);
        CHECK_MSG(gmm_run(&g, 3, bs) == QMOE_ERR_RUNTIME, "break %d", broken);
        CHECK(strstr(qmoe_last_error(), "parallel function") != NULL);
        CHECK(gmm_run(&g, 1, bs) == QMOE_OK); /* one part: no parallel call, nothing to blame */
        qmoe_stream_destroy(bs);
        qmoe_device_destroy(bd);
    }
    gmm_free(&g);

#ifdef _OPENMP
    /* an OpenMP parallel region as the parallel function */
    omp_set_dynamic(0);
    qmoe_device *omp_dev[MAX_T + 1] = {0};
    qmoe_stream *omp_s[MAX_T + 1] = {0};
    for (int t = 1; t <= MAX_T; t++) {
        qmoe_device_options o = {.threads = t};
        CHECK(qmoe_device_create_external(&o, omp_parallel, NULL, &omp_dev[t]) == QMOE_OK);
        CHECK(qmoe_stream_create(omp_dev[t], &omp_s[t]) == QMOE_OK);
    }
    for (int i = 0; i < 6; i++) fused_case(&r, i, omp_s);
    for (int i = 0; i < 6; i++) gmm_sweep_case(&r, i, omp_s);
    for (int t = 1; t <= MAX_T; t++) {
        qmoe_stream_destroy(omp_s[t]);
        qmoe_device_destroy(omp_dev[t]);
    }
#endif

    /* argument errors */
    qmoe_device *d = NULL;
    qmoe_device_options neg = {.threads = -1}, many = {.threads = 4097};
    qmoe_device_options pinned = {.cpus = (int[]){0}, .ncpus = 1}, nocpus = {.ncpus = 1};
    CHECK(qmoe_device_create_external(NULL, NULL, NULL, &d) == QMOE_ERR_PARAM_NULLPTR);
    CHECK(qmoe_device_create_external(NULL, pool_parallel, &pool, NULL) == QMOE_ERR_PARAM_NULLPTR);
    CHECK(qmoe_device_create_external(&neg, pool_parallel, &pool, &d) == QMOE_ERR_PARAM_INVALID);
    CHECK(qmoe_device_create_external(&many, pool_parallel, &pool, &d) == QMOE_ERR_PARAM_INVALID);
    CHECK(qmoe_device_create_external(&pinned, pool_parallel, &pool, &d) == QMOE_ERR_PARAM_INVALID);
    CHECK(qmoe_device_create_external(&nocpus, pool_parallel, &pool, &d) == QMOE_ERR_PARAM_INVALID);
    CHECK(d == NULL);
    /* the options grow as qmoe_device_create's: struct_size 0 is the first layout, a larger
     * struct is read up to its size and its unknown fields must be zero */
    qmoe_device_options zero;
    memset(&zero, 0, sizeof zero);
    zero.threads = 2;
    CHECK(qmoe_device_create_external(&zero, pool_parallel, &pool, &d) == QMOE_OK);
    CHECK(qmoe_device_threads(d) == 2);
    qmoe_device_destroy(d), d = NULL;
    struct {
        qmoe_device_options o;
        uint64_t future_field;
    } big;
    memset(&big, 0, sizeof big);
    big.o.struct_size = sizeof big;
    big.o.threads = 1;
    big.future_field = 3;
    CHECK(qmoe_device_create_external(&big.o, pool_parallel, &pool, &d) == QMOE_ERR_PARAM_INVALID);
    CHECK(d == NULL);
    CHECK(qmoe_device_create_external(NULL, pool_parallel, &pool, &d) == QMOE_OK);
    CHECK(qmoe_device_threads(d) == qmoe_device_online_cores());
    qmoe_device_destroy(d);
    /* never one of a group: its commands run on whoever synchronizes */
    qmoe_stream *bad = NULL;
    CHECK(qmoe_stream_create_group((qmoe_device *[]){ext_dev[2], cpu_dev[2]}, 2, &bad) ==
          QMOE_ERR_PARAM_INVALID);
    CHECK(qmoe_stream_create_group((qmoe_device *[]){cpu_dev[2], ext_dev[2]}, 2, &bad) ==
          QMOE_ERR_PARAM_INVALID);
    CHECK(bad == NULL);
    CHECK(qmoe_stream_create_group((qmoe_device *[]){ext_dev[2]}, 1, &bad) == QMOE_OK);
    qmoe_stream_destroy(bad);

    for (int t = 1; t <= MAX_T; t++) {
        qmoe_stream_destroy(ext_s[t]);
        qmoe_stream_destroy(cpu_s[t]);
        qmoe_device_destroy(ext_dev[t]);
        qmoe_device_destroy(cpu_dev[t]);
    }
    pool_stop(&pool);
    return qt_finish("test_runtime_external");
}
