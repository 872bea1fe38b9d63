/* A device's command queue (cmdq.h). */
#include "runtime/cmdq.h"

void qmoe_cmdq_init(qmoe_cmdq *q, qmoe_device *dev, atomic_ullong *progress)
{
    *q = (qmoe_cmdq){.dev = dev, .progress = progress};
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
}

void qmoe_cmdq_destroy(qmoe_cmdq *q)
{
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
}

void qmoe_cmdq_push(qmoe_cmdq *q, qmoe_cmd *cmd)
{
    cmd->next = NULL;
    pthread_mutex_lock(&q->mu);
    if (q->tail) q->tail->next = cmd;
    else q->head = cmd;
    q->tail = cmd;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

/* Takes the head (there is one) and runs it outside mu, so that submit never waits for a
 * command; called and returns with mu held. */
static void run_head(qmoe_cmdq *q)
{
    qmoe_cmd *cmd = q->head;
    q->head = cmd->next;
    if (!q->head) q->tail = NULL;
    pthread_mutex_unlock(&q->mu);
    atomic_fetch_add_explicit(q->progress, 1, memory_order_relaxed);
    cmd->exec(cmd, q->dev);
    atomic_fetch_add_explicit(q->progress, 1, memory_order_relaxed);
    pthread_mutex_lock(&q->mu);
}

void qmoe_cmdq_serve(qmoe_cmdq *q)
{
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->head && !q->stop) pthread_cond_wait(&q->cv, &q->mu);
        if (!q->head) break; /* stop, and the queue is drained */
        run_head(q);
    }
    pthread_mutex_unlock(&q->mu);
}

void qmoe_cmdq_stop(qmoe_cmdq *q)
{
    pthread_mutex_lock(&q->mu);
    q->stop = 1;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

/* One thread at a time runs the queue, in order; a second caller leaves it to the first (which
 * runs what the second queued too: it stops only when it finds the queue empty, under mu) and
 * waits for its stream as for any device. */
void qmoe_cmdq_drain(qmoe_cmdq *q)
{
    pthread_mutex_lock(&q->mu);
    if (q->draining) {
        pthread_mutex_unlock(&q->mu);
        return;
    }
    q->draining = 1;
    while (q->head) run_head(q);
    q->draining = 0;
    pthread_mutex_unlock(&q->mu);
}
