/* A caller's thread pool for the tests of the device on the caller's threads: `threads - 1`
 * pthreads that sleep on a condition variable between jobs, and the calling thread as index 0.
 * pool_parallel is a qmoe_parallel_fn; it records which OS threads ran the tasks, so a test can
 * check that the work ran on the pool's threads and nowhere else. It allocates nothing per job.
 * Inline: not every build of a test that includes it uses it (the counting one does). */
#ifndef QMOE_TEST_RUNTIME_POOL_H
#define QMOE_TEST_RUNTIME_POOL_H

#include <pthread.h>
#include <stdlib.h>

#include "qmoe/runtime.h"

enum { POOL_MAX = 8 };

typedef struct test_pool {
    int threads;
    pthread_t tid[POOL_MAX];
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    unsigned gen;
    int stop, pending, n;
    qmoe_parallel_task task;
    void *arg;
    int foreign; /* tasks run on a thread that is neither the caller nor a pool thread */
    pthread_t caller;
    long jobs;
} test_pool;

typedef struct pool_worker {
    test_pool *p;
    int t;
} pool_worker;

static pool_worker pool_workers[POOL_MAX];

static inline int pool_is_own(test_pool *p, pthread_t self)
{
    if (pthread_equal(self, p->caller)) return 1;
    for (int t = 1; t < p->threads; t++)
        if (pthread_equal(self, p->tid[t])) return 1;
    return 0;
}

static inline void *pool_main(void *arg)
{
    pool_worker *w = arg;
    test_pool *p = w->p;
    unsigned seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->gen == seen && !p->stop) pthread_cond_wait(&p->wake, &p->mu);
        if (p->stop) break;
        seen = p->gen;
        int run = w->t < p->n;
        qmoe_parallel_task task = p->task;
        void *targ = p->arg;
        pthread_mutex_unlock(&p->mu);
        if (run) task(targ, w->t);
        pthread_mutex_lock(&p->mu);
        if (run && --p->pending == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static inline void pool_start(test_pool *p, int threads)
{
    p->threads = threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    for (int t = 1; t < threads; t++) {
        pool_workers[t] = (pool_worker){p, t};
        if (pthread_create(&p->tid[t], NULL, pool_main, &pool_workers[t])) abort();
    }
}

static inline void pool_stop(test_pool *p)
{
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int t = 1; t < p->threads; t++) pthread_join(p->tid[t], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
}

/* The task of a job, wrapped to check where it runs. */
typedef struct pool_job {
    test_pool *p;
    qmoe_parallel_task task;
    void *arg;
} pool_job;

static inline void pool_checked_task(void *arg, int t)
{
    pool_job *j = arg;
    if (!pool_is_own(j->p, pthread_self())) {
        pthread_mutex_lock(&j->p->mu);
        j->p->foreign++;
        pthread_mutex_unlock(&j->p->mu);
    }
    j->task(j->arg, t);
}

/* qmoe_parallel_fn: tasks 1..n-1 on the pool's threads, task 0 on the calling thread. */
static inline void pool_parallel(void *ctx, int n, qmoe_parallel_task task, void *arg)
{
    test_pool *p = ctx;
    pool_job j = {p, task, arg};
    pthread_mutex_lock(&p->mu);
    p->caller = pthread_self();
    if (n < 1 || n > p->threads) p->foreign += 1000; /* more than the pool has: a test failure */
    p->n = n < p->threads ? n : p->threads;
    p->pending = p->n - 1;
    p->task = pool_checked_task;
    p->arg = &j;
    p->jobs++;
    p->gen++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    pool_checked_task(&j, 0);
    pthread_mutex_lock(&p->mu);
    while (p->pending) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

#endif
