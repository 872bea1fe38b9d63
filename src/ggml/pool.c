/* qmoe's device for the backend, on ggml's threads. With an OpenMP llama.cpp build (the same
 * libgomp as ggml-cpu) qmoe's parts run inside `omp parallel num_threads(n)`: the team threads
 * that ggml-cpu's last region left spinning take them, so the CPU and QMOE backends take turns
 * on the same n threads instead of two sets of threads competing for the cores. Otherwise (or
 * when OpenMP gives a smaller team than asked) they run on a pool of the backend's own that
 * sleeps on a condition variable between jobs, never spinning. */
#include <pthread.h>
#include <stdlib.h>

#include "qmoe_ggml.h"

#ifdef QG_OPENMP
#include <omp.h>
#endif

struct qg_pool {
    int threads;
    pthread_t *tid;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    unsigned gen;
    int stop, n, pending;
    qmoe_parallel_task task;
    void *arg;
};

typedef struct pool_worker {
    qg_pool *p;
    int t;
} pool_worker;

static void *pool_main(void *arg)
{
    pool_worker w = *(pool_worker *)arg;
    free(arg);
    qg_pool *p = w.p;
    unsigned seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->gen == seen && !p->stop) pthread_cond_wait(&p->wake, &p->mu);
        if (p->stop) break;
        seen = p->gen;
        if (w.t >= p->n) continue;
        qmoe_parallel_task task = p->task;
        void *targ = p->arg;
        pthread_mutex_unlock(&p->mu);
        task(targ, w.t);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

void qg_pool_destroy(qg_pool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int t = 1; t < p->threads; t++) pthread_join(p->tid[t], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p->tid);
    free(p);
}

qg_pool *qg_pool_create(int threads)
{
    qg_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    if (!(p->tid = calloc((size_t)threads, sizeof *p->tid))) {
        free(p);
        return NULL;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    p->threads = 1;
    for (int t = 1; t < threads; t++) {
        pool_worker *w = malloc(sizeof *w);
        if (w) *w = (pool_worker){p, t};
        if (!w || pthread_create(&p->tid[t], NULL, pool_main, w)) {
            free(w);
            qg_pool_destroy(p);
            return NULL;
        }
        p->threads = t + 1;
    }
    return p;
}

/* qmoe_parallel_fn: task 0 on the calling thread (ggml's), 1..n-1 on the pool's threads. */
static void pool_parallel(void *ctx, int n, qmoe_parallel_task task, void *arg)
{
    qg_pool *p = ctx;
    if (n > p->threads) n = p->threads; /* qmoe then reports the missing tasks as an error */
    pthread_mutex_lock(&p->mu);
    p->n = n;
    p->pending = n - 1;
    p->task = task;
    p->arg = arg;
    p->gen++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    task(arg, 0);
    pthread_mutex_lock(&p->mu);
    while (p->pending) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

#ifdef QG_OPENMP
static void omp_parallel(void *ctx, int n, qmoe_parallel_task task, void *arg)
{
    qg_context *g = ctx;
    int short_team = 0;
#pragma omp parallel num_threads(n)
    {
        /* every thread sees the same team size: all run their task, or none does */
        if (omp_get_num_threads() == n) task(arg, omp_get_thread_num());
        else if (omp_get_thread_num() == 0) short_team = 1;
    }
    if (!short_team) return;
    /* made on first need; if it cannot be, the tasks do not run and qmoe fails the operator */
    if (!g->pool) g->pool = qg_pool_create(g->dev_threads);
    if (g->pool) pool_parallel(g->pool, n, task, arg);
}
#endif

/* The backend's own work on the same threads: a task that hands fn its share. */
typedef struct share_task {
    void (*fn)(void *arg, int t, int n);
    void *arg;
    int n;
} share_task;

static void run_share(void *arg, int t)
{
    share_task *s = arg;
    s->fn(s->arg, t, s->n);
}

void qg_parallel(qg_context *ctx, void (*fn)(void *arg, int t, int n), void *arg)
{
    int n = ctx->device ? ctx->dev_threads : 1;
    share_task s = {fn, arg, n};
    if (n <= 1) {
        fn(arg, 0, 1);
        return;
    }
#ifdef QG_OPENMP
    omp_parallel(ctx, n, run_share, &s);
#else
    pool_parallel(ctx->pool, n, run_share, &s);
#endif
}

int qg_uses_openmp(void)
{
#ifdef QG_OPENMP
    return 1;
#else
    return 0;
#endif
}

/* A device of `threads` on ggml's OpenMP team, or on a pool made for it. The caller has
 * destroyed the previous device (the pool's user) and sets ctx->dev_threads. */
qmoe_status qg_device_create(qg_context *ctx, int threads, qmoe_device **device)
{
    qg_pool_destroy(ctx->pool);
    ctx->pool = NULL;
    ctx->dev_threads = threads;
    qmoe_device_options o = QMOE_DEVICE_OPTIONS_INIT;
    o.threads = threads;
#ifdef QG_OPENMP
    return qmoe_device_create_external(&o, omp_parallel, ctx, device);
#else
    if (!(ctx->pool = qg_pool_create(threads)))
        return qmoe_error_set(QMOE_ERR_INNER, QMOE_RULE_NONE, "", "cannot start the backend's threads");
    return qmoe_device_create_external(&o, pool_parallel, ctx->pool, device);
#endif
}
