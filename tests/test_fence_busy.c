/* The fence timeout measures lack of progress, not time (issue 16): a group operator on {d0, d1}
 * waits for d1 while another stream keeps d1 busy with ordinary work for several timeouts, and
 * succeeds; a d1 that is blocked (hung) still turns the operator into QMOE_ERR_RUNTIME. The test
 * waits on its own condition variables, never on the clock. */
#define _POSIX_C_SOURCE 200809L /* setenv, clock_gettime */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/stream.h"
#include "support/testlib.h"
#include "testing.h"

/* Long enough that a busy peer is never starved of the CPU for a whole timeout, even on a loaded
 * two-core machine running the suite under an emulator (200 ms was not). */
enum { TIMEOUT_MS = 1000 };

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Ordinary work: computes until this thread has used `ms` of CPU time. */
typedef struct busy_op {
    uint64_t ms;
} busy_op;

static volatile uint64_t sink;

static qmoe_status busy_run(const void *op, qmoe_device *dev, int index, int count)
{
    (void)dev, (void)index, (void)count;
    uint64_t end = thread_cpu_ns() + ((const busy_op *)op)->ms * 1000000u, x = 1;
    while (thread_cpu_ns() < end)
        for (int i = 0; i < 4096; i++) x = x * 6364136223846793005ull + 1442695040888963407ull;
    sink = x;
    return QMOE_OK;
}

/* The group operator: counts the devices that ran their share. */
static atomic_int shares;

static qmoe_status group_run(const void *op, qmoe_device *dev, int index, int count)
{
    (void)op, (void)dev, (void)index, (void)count;
    atomic_fetch_add(&shares, 1);
    return QMOE_OK;
}

/* Events the test waits for. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int hung, released, noticed;
static qmoe_status d0_group_status;

/* A hung device: blocks until the test releases it, using no CPU. */
static qmoe_status hang_run(const void *op, qmoe_device *dev, int index, int count)
{
    (void)op, (void)dev, (void)index, (void)count;
    pthread_mutex_lock(&mu);
    hung = 1;
    pthread_cond_broadcast(&cv);
    while (!released) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    return QMOE_OK;
}

/* Runs on d0 right after d0's share of the group operator: reports how that share ended. */
static qmoe_status notice_run(const void *op, qmoe_device *dev, int index, int count)
{
    (void)op, (void)index, (void)count;
    pthread_mutex_lock(&mu);
    d0_group_status = qmoe_device_last_status(dev);
    noticed = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    return QMOE_OK;
}

static void wait_for(int *flag)
{
    pthread_mutex_lock(&mu);
    while (!*flag) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
}

static qmoe_status submit(qmoe_stream *s, int ndev, qmoe_op_run_fn run, uint64_t ms)
{
    busy_op op = {ms};
    return qmoe_stream_submit(s, ndev, run, &op, sizeof op, 0);
}

int main(void)
{
    char ms[16];
    snprintf(ms, sizeof ms, "%d", TIMEOUT_MS);
    setenv("QMOE_FENCE_TIMEOUT_MS", ms, 1); /* before any device thread reads it */
    qmoe_device *d[2] = {NULL, NULL};
    qmoe_device_options one = {.threads = 1};
    CHECK(qmoe_device_create(&one, &d[0]) == QMOE_OK && qmoe_device_create(&one, &d[1]) == QMOE_OK);
    qmoe_stream *s0 = NULL, *s1 = NULL, *group = NULL;
    CHECK(qmoe_stream_create(d[0], &s0) == QMOE_OK && qmoe_stream_create(d[1], &s1) == QMOE_OK);
    CHECK(qmoe_stream_create_group(d, 2, &group) == QMOE_OK);

    /* Busy: one long operator (2 timeouts of CPU time) and two shorter ones queued on d1 ahead
     * of the group operator; d0 waits at the fence all that time. */
    CHECK(submit(s1, 1, busy_run, 2 * TIMEOUT_MS) == QMOE_OK);
    for (int i = 0; i < 2; i++) CHECK(submit(s1, 1, busy_run, TIMEOUT_MS / 2) == QMOE_OK);
    CHECK(submit(group, 2, group_run, 0) == QMOE_OK);
    qmoe_status st = qmoe_stream_synchronize(group);
    CHECK_MSG(st == QMOE_OK, "a busy peer failed the group operator: %s", qmoe_last_error());
    CHECK(atomic_load(&shares) == 2);
    CHECK(qmoe_stream_synchronize(s1) == QMOE_OK);

    /* Hung: d1 blocks in an operator; the group operator behind it fails on d0 with
     * QMOE_ERR_RUNTIME, and once d1 is released it adopts the error through the fence. */
    CHECK(submit(s1, 1, hang_run, 0) == QMOE_OK);
    wait_for(&hung);
    CHECK(submit(group, 2, group_run, 0) == QMOE_OK);
    CHECK(submit(s0, 1, notice_run, 0) == QMOE_OK);
    wait_for(&noticed);
    CHECK_MSG(d0_group_status == QMOE_ERR_RUNTIME, "d0's share ended with %d",
              (int)d0_group_status);
    pthread_mutex_lock(&mu);
    released = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    st = qmoe_stream_synchronize(group);
    CHECK(st == QMOE_ERR_RUNTIME);
    CHECK_MSG(strstr(qmoe_last_error(), "no progress") != NULL, "%s", qmoe_last_error());
    CHECK(qmoe_stream_synchronize(s1) == QMOE_OK && qmoe_stream_synchronize(s0) == QMOE_OK);
    CHECK(atomic_load(&shares) == 2); /* the failed operator ran on neither device */

    qmoe_stream_destroy(group);
    qmoe_stream_destroy(s0);
    qmoe_stream_destroy(s1);
    qmoe_device_destroy(d[0]);
    qmoe_device_destroy(d[1]);
    return qt_finish("test_fence_busy");
}
