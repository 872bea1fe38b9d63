/* A device's command queue: the commands submitted to it, run one at a time in submission order,
 * each counted as the device's progress as it starts and as it ends. The thread-pool device's
 * command thread serves it (cpu_device.c); the device on the caller's threads drains it on the
 * caller's thread (external_device.c). */
#ifndef QMOE_RUNTIME_CMDQ_H
#define QMOE_RUNTIME_CMDQ_H

#include <pthread.h>
#include <stdatomic.h>

#include "runtime/device.h"

typedef struct qmoe_cmdq {
    qmoe_device *dev;        /* what each command's exec is given */
    atomic_ullong *progress; /* the device's liveness counter */
    pthread_mutex_t mu;
    pthread_cond_t cv;     /* a command queued, or stop */
    qmoe_cmd *head, *tail; /* under mu */
    int stop;              /* under mu: serve returns once the queue is empty */
    int draining;          /* a thread is running the queue (under mu) */
} qmoe_cmdq;

void qmoe_cmdq_init(qmoe_cmdq *q, qmoe_device *dev, atomic_ullong *progress);
/* Once nothing serves or drains it any more. */
void qmoe_cmdq_destroy(qmoe_cmdq *q);

/* Queues a command; never blocks on the commands ahead of it. */
void qmoe_cmdq_push(qmoe_cmdq *q, qmoe_cmd *cmd);

/* A command thread's loop: runs the commands as they come until stopped, then those still
 * queued, and returns. */
void qmoe_cmdq_serve(qmoe_cmdq *q);
void qmoe_cmdq_stop(qmoe_cmdq *q);

/* Runs the commands queued so far on the calling thread and returns when the queue is empty or
 * another thread is already running it. */
void qmoe_cmdq_drain(qmoe_cmdq *q);

#endif
