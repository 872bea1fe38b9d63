#define _GNU_SOURCE
#include "runtime/workq.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "core/status.h"

enum { SPIN_ROUNDS = 4000, BARRIER_SPIN = 2000, DEFAULT_WAIT_US = 5000 };

typedef struct worker_arg {
    qmoe_workq *q;
    int t;
} worker_arg;

struct qmoe_workq {
    int threads;
    qmoe_thread_ctx *ctx;
    pthread_t *tids;
    worker_arg *args;
    const int *cpus;
    int ncpus;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    atomic_uint gen; /* bumped once per job, and once at stop */
    atomic_int stop;
    /* the current job: written by the runner before the gen bump, read by workers after it */
    qmoe_work_fn fn;
    void *data;
    int nparts, active;
    atomic_int remaining; /* workers that have not yet reported back for the job */
    atomic_int bar_count;
    atomic_uint bar_phase;
    /* an external pool: the caller's parallel function, and a check that it kept its contract */
    qmoe_parallel_fn parallel;
    void *pctx;
    atomic_uint *seen; /* per thread: the last job whose task it ran */
    unsigned job;      /* the current job's number (from 1) */
    atomic_int ran;    /* tasks run for the current job */
    atomic_int fault;  /* sticky until qmoe_workq_take_fault */
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

int qmoe_pin_self(int cpu)
{
#ifdef __linux__
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
#else
    (void)cpu;
    return 0;
#endif
}

static void run_parts(qmoe_workq *q, int t)
{
    for (int part = t; part < q->nparts; part += q->threads)
        q->fn(&q->ctx[t], q->data, part, q->nparts);
}

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* How long an idle worker stays awake (yielding) before it sleeps: QMOE_WORKER_WAIT_US, default
 * 5 ms, 0 to sleep at once. A sleeping worker can take a millisecond or more to wake on a
 * virtual machine (its idle vCPU is halted), longer than a whole few-row call: with the
 * default, back-to-back calls find their workers awake (mid64 A8W8, 2 threads: median 2.1-2.6
 * ms -> 1.3 ms), as OpenMP runtimes keep theirs (Intel's KMP_BLOCKTIME: 200 ms). Yielding, not
 * pausing, so a worker that waits never keeps a runnable thread off its core. */
static uint64_t wait_budget_ns(void)
{
    static atomic_llong cached = -1;
    long long ns = atomic_load_explicit(&cached, memory_order_relaxed);
    if (ns < 0) {
        const char *env = getenv("QMOE_WORKER_WAIT_US");
        long long us = env ? atoll(env) : DEFAULT_WAIT_US;
        if (us < 0) us = 0;
        if (us > 10000000) us = 10000000; /* 10 s */
        ns = us * 1000;
        atomic_store_explicit(&cached, ns, memory_order_relaxed);
    }
    return (uint64_t)ns;
}

static unsigned wait_for_job(qmoe_workq *q, unsigned seen)
{
    unsigned g;
    for (int i = 0; i < SPIN_ROUNDS; i++) {
        if ((g = atomic_load_explicit(&q->gen, memory_order_acquire)) != seen) return g;
        cpu_relax();
    }
    uint64_t budget = wait_budget_ns();
    if (budget > 0) {
        uint64_t start = now_ns();
        do {
            if ((g = atomic_load_explicit(&q->gen, memory_order_acquire)) != seen) return g;
            sched_yield();
        } while (now_ns() - start < budget);
    }
    pthread_mutex_lock(&q->mu);
    while ((g = atomic_load_explicit(&q->gen, memory_order_acquire)) == seen)
        pthread_cond_wait(&q->wake, &q->mu);
    pthread_mutex_unlock(&q->mu);
    return g;
}

static void *worker_main(void *arg)
{
    worker_arg *a = arg;
    qmoe_workq *q = a->q;
    if (q->ncpus > 0) qmoe_pin_self(q->cpus[a->t % q->ncpus]);
    unsigned seen = 0;
    for (;;) {
        seen = wait_for_job(q, seen);
        if (atomic_load(&q->stop)) break;
        /* every worker reports back, active or not, so the runner may reuse the job fields */
        if (a->t < q->active) run_parts(q, a->t);
        if (atomic_fetch_sub_explicit(&q->remaining, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&q->mu);
            pthread_cond_broadcast(&q->done);
            pthread_mutex_unlock(&q->mu);
        }
    }
    return NULL;
}

qmoe_status qmoe_workq_create(int threads, qmoe_thread_ctx *ctx, const int *cpus, int ncpus,
                              qmoe_workq **out)
{
    qmoe_workq *q = calloc(1, sizeof *q);
    if (!q) return qmoe_fail(QMOE_ERR_INNER, "out of memory for a work queue");
    q->threads = threads;
    q->ctx = ctx;
    q->cpus = cpus;
    q->ncpus = ncpus;
    q->tids = calloc((size_t)threads, sizeof *q->tids);
    q->args = calloc((size_t)threads, sizeof *q->args);
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->wake, NULL);
    pthread_cond_init(&q->done, NULL);
    if (!q->tids || !q->args) {
        qmoe_workq_destroy(q);
        return qmoe_fail(QMOE_ERR_INNER, "out of memory for a work queue");
    }
    for (int t = 0; t < threads; t++) ctx[t].wq = q;
    for (int t = 1; t < threads; t++) {
        q->args[t] = (worker_arg){q, t};
        if (pthread_create(&q->tids[t], NULL, worker_main, &q->args[t])) {
            q->threads = t; /* join only those started */
            qmoe_workq_destroy(q);
            return qmoe_fail(QMOE_ERR_INNER, "cannot start worker thread %d of %d", t, threads);
        }
    }
    *out = q;
    return QMOE_OK;
}

void qmoe_workq_destroy(qmoe_workq *q)
{
    if (!q) return;
    pthread_mutex_lock(&q->mu);
    atomic_store(&q->stop, 1);
    atomic_fetch_add_explicit(&q->gen, 1, memory_order_release);
    pthread_cond_broadcast(&q->wake);
    pthread_mutex_unlock(&q->mu);
    for (int t = 1; t < q->threads; t++)
        if (q->tids && q->tids[t]) pthread_join(q->tids[t], NULL);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->wake);
    pthread_cond_destroy(&q->done);
    free(q->tids);
    free(q->args);
    free(q->seen);
    free(q);
}

qmoe_status qmoe_workq_create_external(int threads, qmoe_thread_ctx *ctx, qmoe_parallel_fn parallel,
                                       void *pctx, qmoe_workq **out)
{
    qmoe_workq *q = calloc(1, sizeof *q);
    if (q) q->seen = calloc((size_t)threads, sizeof *q->seen);
    if (!q || !q->seen) {
        free(q);
        return qmoe_fail(QMOE_ERR_INNER, "out of memory for a work queue");
    }
    q->threads = threads;
    q->ctx = ctx;
    q->parallel = parallel;
    q->pctx = pctx;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->wake, NULL);
    pthread_cond_init(&q->done, NULL);
    for (int t = 0; t < threads; t++) {
        ctx[t].wq = q;
        atomic_init(&q->seen[t], 0);
    }
    *out = q;
    return QMOE_OK;
}

/* What the caller's parallel function calls for thread index t: that thread's parts, once. */
static void external_task(void *arg, int t)
{
    qmoe_workq *q = arg;
    if (t < 0 || t >= q->active ||
        atomic_exchange_explicit(&q->seen[t], q->job, memory_order_relaxed) == q->job) {
        atomic_store_explicit(&q->fault, 1, memory_order_relaxed);
        return;
    }
    run_parts(q, t);
    atomic_fetch_add_explicit(&q->ran, 1, memory_order_relaxed);
}

int qmoe_workq_take_fault(qmoe_workq *q)
{
    return atomic_exchange_explicit(&q->fault, 0, memory_order_relaxed);
}

void qmoe_workq_run(qmoe_workq *q, qmoe_work_fn f, void *data, int nparts)
{
    int active = nparts < q->threads ? nparts : q->threads;
    q->fn = f;
    q->data = data;
    q->nparts = nparts;
    q->active = active;
    for (int t = 0; t < active; t++) q->ctx[t].nthreads = active;
    atomic_store_explicit(&q->bar_count, active, memory_order_relaxed);
    if (q->parallel) {
        /* one part runs here, on the caller's thread, without a parallel region */
        if (active <= 1) {
            if (nparts > 0) run_parts(q, 0);
            return;
        }
        if (++q->job == 0) { /* wrapped: no thread may look as if it had run this job */
            for (int t = 0; t < q->threads; t++) atomic_store(&q->seen[t], 0);
            q->job = 1;
        }
        atomic_store_explicit(&q->ran, 0, memory_order_relaxed);
        q->parallel(q->pctx, active, external_task, q);
        /* the parallel function returned after its tasks: what they did is visible here */
        if (atomic_load_explicit(&q->ran, memory_order_acquire) != active)
            atomic_store_explicit(&q->fault, 1, memory_order_relaxed);
        return;
    }
    atomic_store_explicit(&q->remaining, q->threads - 1, memory_order_relaxed);
    if (active > 1) {
        pthread_mutex_lock(&q->mu);
        atomic_fetch_add_explicit(&q->gen, 1, memory_order_release);
        pthread_cond_broadcast(&q->wake);
        pthread_mutex_unlock(&q->mu);
    }
    if (nparts > 0) run_parts(q, 0);
    if (active <= 1) return;
    for (int i = 0; i < SPIN_ROUNDS; i++) {
        if (atomic_load_explicit(&q->remaining, memory_order_acquire) == 0) return;
        cpu_relax();
    }
    pthread_mutex_lock(&q->mu);
    while (atomic_load_explicit(&q->remaining, memory_order_acquire) != 0)
        pthread_cond_wait(&q->done, &q->mu);
    pthread_mutex_unlock(&q->mu);
}

void qmoe_workq_barrier(qmoe_thread_ctx *ctx)
{
    qmoe_workq *q = ctx->wq;
    unsigned phase = atomic_load_explicit(&q->bar_phase, memory_order_acquire);
    if (atomic_fetch_sub_explicit(&q->bar_count, 1, memory_order_acq_rel) == 1) {
        atomic_store_explicit(&q->bar_count, q->active, memory_order_relaxed);
        atomic_fetch_add_explicit(&q->bar_phase, 1, memory_order_release);
        return;
    }
    for (int i = 0; atomic_load_explicit(&q->bar_phase, memory_order_acquire) == phase; i++) {
        if (i < BARRIER_SPIN) cpu_relax();
        else sched_yield();
    }
}

int qmoe_workq_threads(const qmoe_workq *q) { return q->threads; }
