/* A device's command queue (runtime/cmdq.h), on its own: commands run one at a time in the order
 * pushed, each given the queue's device and counted as progress as it starts and ends; a command
 * may push another (push never waits for the running one); serve runs on its thread until stopped
 * and then what is still queued; drain runs on the caller's thread, and a second drainer, from
 * another thread or from inside a command, returns at once, leaving its commands to the first. */
#include <pthread.h>
#include <stdatomic.h>

#include "runtime/cmdq.h"
#include "support/testlib.h"

enum { N = 100, MAXLOG = 2 * N };

typedef struct run_log {
    qmoe_cmdq *q;
    int n;
    int id[MAXLOG];
    int on_server[MAXLOG]; /* ran on the thread named by `server` */
    unsigned long long progress_at[MAXLOG];
    int bad_dev;
    pthread_t server;
    int check_server;
} run_log;

typedef struct test_cmd test_cmd;
struct test_cmd {
    qmoe_cmd cmd; /* first: a qmoe_cmd * is a test_cmd * */
    run_log *log;
    int id;
    void (*also)(test_cmd *self); /* what the command does besides logging itself */
};

static qmoe_device fake_dev;
static atomic_ullong progress;

static void test_exec(qmoe_cmd *c, qmoe_device *dev)
{
    test_cmd *t = (test_cmd *)c;
    run_log *l = t->log;
    if (dev != &fake_dev) l->bad_dev++;
    if (l->n < MAXLOG) {
        l->id[l->n] = t->id;
        l->on_server[l->n] = !l->check_server || pthread_equal(pthread_self(), l->server);
        l->progress_at[l->n] = atomic_load(&progress);
        l->n++;
    }
    if (t->also) t->also(t);
}

static void cmd_init(test_cmd *t, run_log *l, int id, void (*also)(test_cmd *))
{
    *t = (test_cmd){.cmd = {.exec = test_exec}, .log = l, .id = id, .also = also};
}

/* ---------------------------------------------------------------- serve ---------------------- */

static test_cmd serve_cmds[N + 1];

/* Command 0 pushes command N while it runs: it runs after all pushed before it. */
static void push_follow_up(test_cmd *self)
{
    cmd_init(&serve_cmds[N], self->log, N, NULL);
    qmoe_cmdq_push(self->log->q, &serve_cmds[N].cmd);
}

static void *serve_main(void *arg)
{
    qmoe_cmdq_serve(arg);
    return NULL;
}

static void test_serve(void)
{
    static run_log l;
    qmoe_cmdq q;
    atomic_store(&progress, 0);
    qmoe_cmdq_init(&q, &fake_dev, &progress);
    l = (run_log){.q = &q, .check_server = 1};
    /* everything is pushed and stopped before the server may start: it runs all that is queued */
    for (int i = 0; i < N; i++) {
        cmd_init(&serve_cmds[i], &l, i, i == 0 ? push_follow_up : NULL);
        qmoe_cmdq_push(&q, &serve_cmds[i].cmd);
    }
    qmoe_cmdq_stop(&q);
    CHECK(pthread_create(&l.server, NULL, serve_main, &q) == 0);
    pthread_join(l.server, NULL);
    CHECK_MSG(l.n == N + 1, "serve ran %d commands, expected %d", l.n, N + 1);
    for (int i = 0; i < l.n; i++) {
        CHECK_MSG(l.id[i] == i, "serve: command %d ran at %d", l.id[i], i);
        CHECK(l.on_server[i]);
        CHECK_MSG(l.progress_at[i] == 2ull * (unsigned)i + 1, "serve: progress %llu at %d",
                  l.progress_at[i], i);
    }
    CHECK(atomic_load(&progress) == 2ull * (N + 1));
    CHECK(l.bad_dev == 0);
    qmoe_cmdq_destroy(&q);
}

/* A server started first, fed while it waits, then stopped: it runs everything, in order. */
static void test_serve_live(void)
{
    static run_log l;
    static test_cmd cmds[N];
    qmoe_cmdq q;
    atomic_store(&progress, 0);
    qmoe_cmdq_init(&q, &fake_dev, &progress);
    l = (run_log){.q = &q, .check_server = 1};
    CHECK(pthread_create(&l.server, NULL, serve_main, &q) == 0);
    for (int i = 0; i < N; i++) {
        cmd_init(&cmds[i], &l, i, NULL);
        qmoe_cmdq_push(&q, &cmds[i].cmd);
    }
    qmoe_cmdq_stop(&q);
    pthread_join(l.server, NULL);
    CHECK_MSG(l.n == N, "live serve ran %d commands, expected %d", l.n, N);
    for (int i = 0; i < l.n; i++) {
        CHECK(l.id[i] == i);
        CHECK(l.on_server[i]);
    }
    CHECK(atomic_load(&progress) == 2ull * N);
    qmoe_cmdq_destroy(&q);
}

/* ---------------------------------------------------------------- drain ---------------------- */

static test_cmd drain_cmds[4];
static int second_saw; /* commands run when the second drainer returned */

static void *second_drainer(void *arg)
{
    run_log *l = arg;
    cmd_init(&drain_cmds[2], l, 2, NULL);
    qmoe_cmdq_push(l->q, &drain_cmds[2].cmd);
    qmoe_cmdq_drain(l->q); /* the first drainer is inside command 0: returns at once */
    return NULL;
}

/* Command 0: another thread queues command 2 and drains (returns without running it), then this
 * thread drains from inside the command (returns too); the first drain runs 1 and 2 after it. */
static void drain_twice(test_cmd *self)
{
    run_log *l = self->log;
    pthread_t t;
    CHECK(pthread_create(&t, NULL, second_drainer, l) == 0);
    pthread_join(t, NULL);
    second_saw = l->n;
    qmoe_cmdq_drain(l->q);
    CHECK_MSG(l->n == 1, "a drain inside a command ran %d commands", l->n - 1);
}

static void test_drain(void)
{
    static run_log l;
    qmoe_cmdq q;
    atomic_store(&progress, 0);
    qmoe_cmdq_init(&q, &fake_dev, &progress);
    l = (run_log){.q = &q};
    qmoe_cmdq_drain(&q); /* empty: nothing to run */
    CHECK(l.n == 0 && atomic_load(&progress) == 0);
    cmd_init(&drain_cmds[0], &l, 0, drain_twice);
    cmd_init(&drain_cmds[1], &l, 1, NULL);
    qmoe_cmdq_push(&q, &drain_cmds[0].cmd);
    qmoe_cmdq_push(&q, &drain_cmds[1].cmd);
    CHECK(l.n == 0); /* nothing runs until drained */
    qmoe_cmdq_drain(&q);
    CHECK_MSG(second_saw == 1, "the second drainer returned after %d commands", second_saw);
    CHECK_MSG(l.n == 3, "drain ran %d commands, expected 3", l.n);
    for (int i = 0; i < l.n; i++) {
        CHECK_MSG(l.id[i] == i, "drain: command %d ran at %d", l.id[i], i);
        CHECK(l.progress_at[i] == 2ull * (unsigned)i + 1);
    }
    CHECK(atomic_load(&progress) == 6);
    CHECK(l.bad_dev == 0);
    /* drained again later: the queue is usable after a drain */
    cmd_init(&drain_cmds[3], &l, 3, NULL);
    qmoe_cmdq_push(&q, &drain_cmds[3].cmd);
    qmoe_cmdq_drain(&q);
    CHECK(l.n == 4 && l.id[3] == 3 && atomic_load(&progress) == 8);
    qmoe_cmdq_destroy(&q);
}

int main(void)
{
    test_serve();
    test_serve_live();
    test_drain();
    return qt_finish("test_runtime_cmdq");
}
