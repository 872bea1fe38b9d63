/* Submitting an operator allocates nothing in steady state (issue 21): once a stream has had as
 * many operators in flight at once as it will again, with the largest op data it will see, its
 * job blocks are reused. The test replaces malloc and friends (glibc's documented way: the
 * program defines them, forwarding to __libc_*) and counts the calls made, by any thread,
 * while it submits and synchronizes many operators on a stream, on a two-device group and on
 * the synchronous NULL stream, on a device on the caller's threads (a pthread pool's), and
 * executing a planned operator (qmoe/op.h) on them. The operators really run: their outputs are
 * checked. */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "qmoe/op.h"
#include "runtime/stream.h"
#include "support/testlib.h"
#include "test_runtime_pool.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define SANITIZED 1
#endif
#endif

/* Only glibc documents replacing malloc this way; the sanitizers bring their own malloc. */
#if defined(__GLIBC__) && !defined(SANITIZED)
#define COUNTING 1
#endif

#ifdef COUNTING

static atomic_ullong allocs;
extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t size);
extern void *__libc_memalign(size_t align, size_t size);
extern void __libc_free(void *p);

void *malloc(size_t size)
{
    atomic_fetch_add_explicit(&allocs, 1, memory_order_relaxed);
    return __libc_malloc(size);
}

void *calloc(size_t n, size_t size)
{
    atomic_fetch_add_explicit(&allocs, 1, memory_order_relaxed);
    return __libc_calloc(n, size);
}

void *realloc(void *p, size_t size)
{
    atomic_fetch_add_explicit(&allocs, 1, memory_order_relaxed);
    return __libc_realloc(p, size);
}

void *aligned_alloc(size_t align, size_t size)
{
    atomic_fetch_add_explicit(&allocs, 1, memory_order_relaxed);
    return __libc_memalign(align, size);
}

void *memalign(size_t align, size_t size);
void *memalign(size_t align, size_t size)
{
    atomic_fetch_add_explicit(&allocs, 1, memory_order_relaxed);
    return __libc_memalign(align, size);
}

int posix_memalign(void **out, size_t align, size_t size)
{
    atomic_fetch_add_explicit(&allocs, 1, memory_order_relaxed);
    void *p = __libc_memalign(align, size);
    if (!p) return 12; /* ENOMEM */
    *out = p;
    return 0;
}

void free(void *p) { __libc_free(p); }

enum { PARTS = 4, DEPTH = 3, ROUNDS = 200 };

/* An operator: fills out[0..PARTS) with value + part on the device's pool. `pad` makes a larger
 * op block for the growth case. */
typedef struct fill_op {
    int64_t *out;
    int64_t value;
    char pad[8];
} fill_op;

typedef struct big_op {
    fill_op f;
    char pad[1000];
} big_op;

static void fill_part(qmoe_thread_ctx *ctx, void *data, int part, int nparts)
{
    (void)ctx, (void)nparts;
    const fill_op *op = data;
    op->out[part] = op->value + part;
}

static qmoe_status fill_run(const void *op, qmoe_device *dev, int index, int count)
{
    (void)count;
    fill_op f = *(const fill_op *)op;
    f.out += (size_t)index * PARTS; /* each device of a group its own share */
    qmoe_device_run(dev, fill_part, &f, PARTS);
    return QMOE_OK;
}

/* A gate: holds the device until the test opens it, so that the operators submitted behind it
 * are all in flight at once (the most a round has) whatever the threads' timing. */
static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static int gate_open;

static qmoe_status gate_run(const void *op, qmoe_device *dev, int index, int count)
{
    (void)op, (void)dev, (void)index, (void)count;
    pthread_mutex_lock(&gate_mu);
    while (!gate_open) pthread_cond_wait(&gate_cv, &gate_mu);
    pthread_mutex_unlock(&gate_mu);
    return QMOE_OK;
}

static void set_gate(int open)
{
    pthread_mutex_lock(&gate_mu);
    gate_open = open;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_mu);
}

static int64_t outs[DEPTH][2 * PARTS];

static int filled(int slot, int ndev, int64_t value)
{
    for (int i = 0; i < ndev * PARTS; i++)
        if (outs[slot][i] != value + i % PARTS) return 0;
    return 1;
}

/* DEPTH operators in flight (or one, synchronously, for the NULL stream), then synchronize;
 * returns the number of rounds whose outputs were all right. */
static int rounds(qmoe_stream *s, int ndev, int n, int64_t seed, int big)
{
    int good = 0;
    for (int r = 0; r < n; r++) {
        int depth = s ? DEPTH : 1, ok = 1;
        for (int k = 0; k < depth; k++) {
            int64_t v = seed + r * 16 + k;
            big_op op = {{outs[k], v, {0}}, {0}};
            ok &= qmoe_stream_submit(s, ndev, fill_run, &op, big ? sizeof op : sizeof op.f, 0) ==
                  QMOE_OK;
        }
        if (s) ok &= qmoe_stream_synchronize(s) == QMOE_OK;
        for (int k = 0; k < depth; k++) ok &= filled(k, ndev, seed + r * 16 + k);
        good += ok;
    }
    return good;
}

/* The first round on a stream: a gate, then a round's operators behind it, all in flight. */
static int warm_up(qmoe_stream *s, int ndev, int64_t seed, int big)
{
    big_op gate = {{NULL, 0, {0}}, {0}};
    set_gate(0);
    int ok = qmoe_stream_submit(s, ndev, gate_run, &gate, big ? sizeof gate : sizeof gate.f, 0) ==
             QMOE_OK;
    for (int k = 0; k < DEPTH; k++) {
        big_op op = {{outs[k], seed + k, {0}}, {0}};
        ok &= qmoe_stream_submit(s, ndev, fill_run, &op, big ? sizeof op : sizeof op.f, 0) == QMOE_OK;
    }
    set_gate(1);
    ok &= qmoe_stream_synchronize(s) == QMOE_OK;
    for (int k = 0; k < DEPTH; k++) ok &= filled(k, ndev, seed + k);
    return ok;
}

static unsigned long long counted(void) { return atomic_load(&allocs); }

/* A real operator through the public plan-once API: dynamic quant planned from descriptors,
 * executed `runs` times with new input on `stream` (NULL: synchronously); returns the runs
 * whose outputs equal the reference (scale = amax / 127, y = x / scale rounded half to even). */
enum { QR = 6, QH = 64 };

static int8_t q_even(double v)
{
    double r = nearbyint(v);
    return (int8_t)(r > 127 ? 127 : r < -127 ? -127 : r);
}

static int quant_runs(const qmoe_op *op, qmoe_stream *stream, int runs, uint64_t seed)
{
    static float x[QR * QH], scale[QR];
    static int8_t y[QR * QH];
    void *a[4] = {x, NULL, y, scale};
    int good = 0;
    for (int run = 0; run < runs; run++) {
        qt_rng r = {seed + (uint64_t)run};
        for (int i = 0; i < QR * QH; i++) x[i] = qt_uniform(&r, -4.0f, 4.0f);
        int ok = qmoe_op_execute(op, a, 4, NULL, 0, stream) == QMOE_OK;
        if (stream) ok &= qmoe_stream_synchronize(stream) == QMOE_OK;
        for (int i = 0; i < QR; i++) {
            float amax = 0;
            for (int j = 0; j < QH; j++) amax = fmaxf(amax, fabsf(x[i * QH + j]));
            float sc = amax / 127.0f;
            ok &= scale[i] == sc;
            for (int j = 0; j < QH; j++) ok &= y[i * QH + j] == q_even((double)(x[i * QH + j] / sc));
        }
        good += ok;
    }
    return good;
}

static void operator_executes(qmoe_stream *s)
{
    int64_t sx[2] = {QR, QH}, ss[1] = {QR};
    qmoe_tensor *tx = NULL, *ty = NULL, *ts = NULL;
    CHECK(qmoe_tensor_desc_create(sx, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, &tx) == QMOE_OK);
    CHECK(qmoe_tensor_desc_create(sx, 2, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, &ty) == QMOE_OK);
    CHECK(qmoe_tensor_desc_create(ss, 1, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, &ts) == QMOE_OK);
    qmoe_op *op = NULL;
    CHECK(qmoe_op_create_dynamic_quant(tx, NULL, ty, ts, NULL, &op) == QMOE_OK);
    qmoe_tensor_destroy(tx), qmoe_tensor_destroy(ty), qmoe_tensor_destroy(ts);
    if (!op) return;
    CHECK(qmoe_op_workspace_size(op) == 0);
    CHECK(quant_runs(op, s, 1, 100) == 1);
    CHECK(quant_runs(op, NULL, 1, 200) == 1);
    unsigned long long before = counted();
    CHECK(quant_runs(op, s, ROUNDS, 300) == ROUNDS);
    CHECK(quant_runs(op, NULL, ROUNDS, 400) == ROUNDS);
    CHECK_MSG(counted() == before, "%llu allocations over %d executes of a planned operator",
              counted() - before, 2 * ROUNDS);
    qmoe_op_destroy(op);
}

int main(void)
{
    qmoe_device *d[2] = {NULL, NULL};
    qmoe_device_options two = {.threads = 2};
    CHECK(qmoe_device_create(&two, &d[0]) == QMOE_OK && qmoe_device_create(&two, &d[1]) == QMOE_OK);
    qmoe_stream *s = NULL, *group = NULL;
    CHECK(qmoe_stream_create(d[0], &s) == QMOE_OK);
    CHECK(qmoe_stream_create_group(d, 2, &group) == QMOE_OK);

    /* One stream: the first round allocates its blocks, then none. */
    CHECK(warm_up(s, 1, 1000, 0));
    unsigned long long before = counted();
    CHECK(rounds(s, 1, ROUNDS, 2000, 0) == ROUNDS);
    CHECK_MSG(counted() == before, "%llu allocations over %d operators on a stream",
              counted() - before, ROUNDS * DEPTH);

    /* Larger op data: new blocks once, then none again, for large and small ops alike. */
    CHECK(warm_up(s, 1, 3000, 1));
    CHECK(counted() > before); /* the counter sees the library's allocations */
    before = counted();
    CHECK(rounds(s, 1, ROUNDS / 2, 4000, 1) == ROUNDS / 2);
    CHECK(rounds(s, 1, ROUNDS / 2, 5000, 0) == ROUNDS / 2);
    CHECK_MSG(counted() == before, "%llu allocations after the blocks grew", counted() - before);

    /* A group of two devices: one job, a command and fences per device. */
    CHECK(warm_up(group, 2, 6000, 0));
    before = counted();
    CHECK(rounds(group, 2, ROUNDS, 7000, 0) == ROUNDS);
    CHECK_MSG(counted() == before, "%llu allocations over %d group operators", counted() - before,
              ROUNDS * DEPTH);

    /* The synchronous NULL stream (the default device, made by the first call). */
    CHECK(rounds(NULL, 1, 1, 8000, 0) == 1);
    before = counted();
    CHECK(rounds(NULL, 1, ROUNDS, 9000, 0) == ROUNDS);
    CHECK_MSG(counted() == before, "%llu allocations over %d synchronous operators",
              counted() - before, ROUNDS);
    CHECK(rounds(NULL, 2, 1, 10000, 0) == 1); /* the default group of two devices */
    before = counted();
    CHECK(rounds(NULL, 2, ROUNDS, 11000, 0) == ROUNDS);
    CHECK_MSG(counted() == before, "%llu allocations over %d synchronous group operators",
              counted() - before, ROUNDS);

    /* An operator planned once, executed with new data: nothing allocated per execute. */
    operator_executes(s);

    /* A device on the caller's threads: its queue runs at synchronize, so a round's operators
     * are all in flight without a gate; after the first round, nothing is allocated. */
    static test_pool pool;
    pool_start(&pool, 2);
    qmoe_device *ext = NULL;
    qmoe_stream *es = NULL;
    CHECK(qmoe_device_create_external(&two, pool_parallel, &pool, &ext) == QMOE_OK);
    CHECK(qmoe_stream_create(ext, &es) == QMOE_OK);
    CHECK(rounds(es, 1, 1, 12000, 0) == 1);
    before = counted();
    CHECK(rounds(es, 1, ROUNDS, 13000, 0) == ROUNDS);
    CHECK_MSG(counted() == before, "%llu allocations over %d operators on the caller's threads",
              counted() - before, ROUNDS * DEPTH);
    CHECK(pool.jobs >= ROUNDS * DEPTH && pool.foreign == 0); /* they ran on the pool */
    operator_executes(es);
    qmoe_stream_destroy(es);
    qmoe_device_destroy(ext);
    pool_stop(&pool);

    qmoe_stream_destroy(group);
    qmoe_stream_destroy(s);
    qmoe_device_destroy(d[0]);
    qmoe_device_destroy(d[1]);
    return qt_finish("runtime_alloc");
}

#else /* !COUNTING */

int main(void)
{
    return qt_skip("runtime_alloc", "malloc cannot be counted here (not glibc, or a sanitizer's)");
}

#endif
