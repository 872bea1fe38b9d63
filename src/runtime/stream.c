/*
 * Streams: FIFOs of operators on a device group. Submission takes one global lock while it
 * queues a job's commands on all of its devices, so every device sees every job in the same
 * order and multi-device fences never wait on a job a peer has not been given yet.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "runtime/stream.h"

typedef struct qmoe_job qmoe_job;

/* A device's share of a job: the command it is given. */
typedef struct job_cmd {
    qmoe_cmd cmd; /* first: the device hands back this */
    qmoe_job *job;
    int index; /* the device's place in the group */
} job_cmd;

/* A queued operator: one job per submission, one command per device of the group. Blocks are
 * kept on their stream's free list and reused (`cap` bytes of op data each). */
struct qmoe_job {
    qmoe_op_run_fn run;
    uint64_t slice_bytes;
    int ndev;
    qmoe_device *devs[QMOE_MAX_DEVICES];
    qmoe_fence_slot *fence; /* the stream's, one slot per device */
    uint32_t seq;           /* barriers of this job: seq + 1 (before), seq + 2 (after) */
    qmoe_stream *stream;
    qmoe_job *free_next; /* the stream's free list (under its lock) */
    size_t cap;          /* bytes of op[] */
    int sync;      /* a caller waits for this job and gives it back */
    int remaining; /* devices still running it (under the stream's lock) */
    int done;
    qmoe_status status; /* first error of the devices */
    char msg[256];
    qmoe_error_rule rule; /* msg's structured info (qmoe_last_error_info): an argument error */
    const char *arg;      /* found on the device, e.g. groupList data, keeps rule and argument */
    int msg_from_origin; /* msg is from the device where the error arose */
    job_cmd cmds[QMOE_MAX_DEVICES];
    max_align_t op[]; /* the operator's data, copied at submission */
};

struct qmoe_stream {
    int ndev;
    qmoe_device *devs[QMOE_MAX_DEVICES];
    qmoe_fence_slot *fence;
    uint32_t seq; /* under submit_lock */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t submitted, completed;
    qmoe_status status; /* sticky first error since the last synchronize */
    char msg[256];
    qmoe_error_rule rule; /* and its structured info */
    const char *arg;
    qmoe_job *free_jobs; /* finished job blocks, each of job_cap bytes of op data */
    size_t job_cap;      /* the largest op_bytes seen */
};

static pthread_mutex_t submit_lock = PTHREAD_MUTEX_INITIALIZER;

qmoe_status qmoe_stream_create_group(qmoe_device *const *devices, int count, qmoe_stream **stream)
{
    if (!devices || !stream) return qmoe_fail(QMOE_ERR_PARAM_NULLPTR, "devices or stream is NULL");
    if (count < 1 || count > QMOE_MAX_DEVICES)
        return qmoe_fail(QMOE_ERR_PARAM_INVALID, "stream: %d devices, expected 1..%d", count,
                         QMOE_MAX_DEVICES);
    for (int i = 0; i < count; i++) {
        if (!devices[i]) return qmoe_fail(QMOE_ERR_PARAM_NULLPTR, "devices[%d] is NULL", i);
        for (int j = 0; j < i; j++)
            if (devices[j] == devices[i])
                return qmoe_fail(QMOE_ERR_PARAM_INVALID,
                                 "stream: devices[%d] and devices[%d] are the same device", j, i);
        /* its commands run on whoever drains it: two such devices would wait for each other */
        if (count > 1 && qmoe_device_is_external(devices[i]))
            return qmoe_fail(QMOE_ERR_PARAM_INVALID,
                             "stream: devices[%d] runs on the caller's threads and cannot be one "
                             "of a group",
                             i);
    }
    qmoe_stream *s = calloc(1, sizeof *s);
    if (!s || !(s->fence = qmoe_fence_alloc(count))) {
        free(s);
        return qmoe_fail(QMOE_ERR_INNER, "out of memory for a stream");
    }
    s->ndev = count;
    memcpy(s->devs, devices, (size_t)count * sizeof *devices);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    *stream = s;
    qmoe_clear_error();
    return QMOE_OK;
}

qmoe_status qmoe_stream_create(qmoe_device *device, qmoe_stream **stream)
{
    if (!device) return qmoe_fail(QMOE_ERR_PARAM_NULLPTR, "device is a null pointer");
    return qmoe_stream_create_group(&device, 1, stream);
}

/* A device without threads of its own runs its queue on the thread that waits for it. */
static void drain(qmoe_stream *s)
{
    for (int d = 0; d < s->ndev; d++) qmoe_device_drain(s->devs[d]);
}

static void wait_idle(qmoe_stream *s)
{
    drain(s);
    pthread_mutex_lock(&s->mu);
    while (s->completed != s->submitted) pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

qmoe_status qmoe_stream_synchronize(qmoe_stream *s)
{
    if (!s) return qmoe_fail(QMOE_ERR_PARAM_NULLPTR, "stream is a null pointer");
    drain(s);
    pthread_mutex_lock(&s->mu);
    while (s->completed != s->submitted) pthread_cond_wait(&s->cv, &s->mu);
    qmoe_status st = s->status;
    char msg[sizeof s->msg];
    memcpy(msg, s->msg, sizeof msg);
    qmoe_error_rule rule = s->rule;
    const char *arg = s->arg;
    s->status = QMOE_OK;
    s->msg[0] = '\0';
    pthread_mutex_unlock(&s->mu);
    if (st) return qmoe_fail_arg(st, rule, arg, "%s", msg);
    qmoe_clear_error();
    return QMOE_OK;
}

void qmoe_stream_destroy(qmoe_stream *s)
{
    if (!s) return;
    wait_idle(s);
    while (s->free_jobs) {
        qmoe_job *j = s->free_jobs;
        s->free_jobs = j->free_next;
        free(j);
    }
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    qmoe_fence_free(s->fence);
    free(s);
}

/* A job block for op_bytes of op data: a free one of the stream, or a new one of the largest
 * size seen (blocks smaller than that are freed as they come back). */
static qmoe_job *take_job(qmoe_stream *s, size_t op_bytes)
{
    pthread_mutex_lock(&s->mu);
    if (op_bytes > s->job_cap) {
        s->job_cap = op_bytes;
        while (s->free_jobs) { /* all too small now */
            qmoe_job *j = s->free_jobs;
            s->free_jobs = j->free_next;
            free(j);
        }
    }
    size_t cap = s->job_cap;
    qmoe_job *job = s->free_jobs;
    if (job) s->free_jobs = job->free_next;
    pthread_mutex_unlock(&s->mu);
    if (!job) {
        size_t bytes;
        if (__builtin_add_overflow(sizeof *job, cap, &bytes) || !(job = malloc(bytes))) return NULL;
        job->cap = cap;
    }
    return job;
}

/* Gives a finished job block back to its stream; the caller holds the stream's lock. */
static void give_back_locked(qmoe_stream *s, qmoe_job *job)
{
    if (job->cap < s->job_cap) {
        free(job);
        return;
    }
    job->free_next = s->free_jobs;
    s->free_jobs = job;
}

/* A device is done with its command: record its status; the last device completes the job. */
static void job_finish(qmoe_job *job, qmoe_status st, const char *msg, int origin)
{
    qmoe_stream *s = job->stream;
    pthread_mutex_lock(&s->mu);
    /* the status is the group's; the message, the device where the error arose */
    if (st && (!job->status || (origin && !job->msg_from_origin))) {
        if (!job->status) job->status = st;
        job->msg_from_origin = origin;
        snprintf(job->msg, sizeof job->msg, "%s", msg);
        const qmoe_error_info *info = qmoe_last_error_info(); /* the device thread's */
        job->rule = info->rule;
        job->arg = info->arg;
    }
    if (--job->remaining == 0) {
        s->completed++;
        if (!job->sync && job->status && !s->status) {
            s->status = job->status;
            memcpy(s->msg, job->msg, sizeof s->msg);
            s->rule = job->rule;
            s->arg = job->arg;
        }
        job->done = 1;
        pthread_cond_broadcast(&s->cv);
        if (!job->sync) give_back_locked(s, job);
    }
    pthread_mutex_unlock(&s->mu);
}

/* Counts the operator; in the tests' build (QMOE_TESTING) also fires an injected failure
 * (src/testing.h). The library itself never looks at inject_at. */
static int injected(qmoe_device *dev)
{
    uint64_t n = atomic_fetch_add(&dev->ops_run, 1) + 1;
#ifdef QMOE_TESTING
    uint64_t at = atomic_load(&dev->inject_at);
    if (at && at == n) {
        atomic_store(&dev->inject_at, 0);
        return 1;
    }
#else
    (void)n;
#endif
    return 0;
}

static int stream_failed(qmoe_stream *s)
{
    pthread_mutex_lock(&s->mu);
    int failed = s->status != QMOE_OK;
    pthread_mutex_unlock(&s->mu);
    return failed;
}

/* Runs the command's share of its job on the device (its command thread), fences included. */
static void job_exec(qmoe_cmd *c, qmoe_device *dev)
{
    job_cmd *cmd = (job_cmd *)c;
    qmoe_job *job = cmd->job;
    int k = cmd->index, n = job->ndev;
    qmoe_status st = QMOE_OK;
    qmoe_clear_error();
    if (injected(dev))
        st = qmoe_fail(QMOE_ERR_RUNTIME, "device %d: injected failure (test hook)", dev->id);
    if (!st) st = qmoe_device_reserve(dev, job->slice_bytes);
    qmoe_status own = st; /* an error of this device, not one adopted from a peer */
    qmoe_fence_watch watch = {qmoe_device_progress_of, job->devs}; /* busy peers are not late */
    if (n > 1) st = qmoe_device_fence(dev, job->fence, k, n, job->seq + 1, st, &watch);
    /* An operator queued after a failed one on the same stream is not run: its inputs are what
     * the failed one did not write, so its outputs stay untouched too (a chain stops at the
     * failing operator). The failure is already the stream's; this one adds none. Every device
     * of the group reads the same status here: the previous job finished on all of them before
     * this job's first fence (and with one device, before this command started). */
    if (!st && !job->sync && stream_failed(job->stream)) {
        atomic_store(&dev->last_status, (int)QMOE_OK);
        if (n > 1) qmoe_device_fence(dev, job->fence, k, n, job->seq + 2, QMOE_OK, &watch);
        job_finish(job, QMOE_OK, "", 0);
        return;
    }
    if (!st) own = st = qmoe_device_finish(dev, job->run(job->op, dev, k, n));
    if (n > 1) st = qmoe_device_fence(dev, job->fence, k, n, job->seq + 2, st, &watch);
    if (st && !qmoe_last_error()[0])
        qmoe_fail(st, "device %d: a peer device of the group failed", dev->id);
    atomic_store(&dev->last_status, (int)st);
    job_finish(job, st, st ? qmoe_last_error() : "", own != QMOE_OK);
}

/* ---------------------------------------------------------------- default devices ------------- */

static pthread_mutex_t default_lock = PTHREAD_MUTEX_INITIALIZER;
static qmoe_stream *default_streams[QMOE_MAX_DEVICES + 1];
static qmoe_device *default_dev;

static qmoe_device *default_device_locked(void)
{
    if (!default_dev && qmoe_device_create(NULL, &default_dev)) default_dev = NULL;
    return default_dev;
}

qmoe_device *qmoe_device_default(void)
{
    pthread_mutex_lock(&default_lock);
    qmoe_device *dev = default_device_locked();
    pthread_mutex_unlock(&default_lock);
    return dev;
}

/* The default group of `ndev` devices: device 0 is the default device when ndev == 1; otherwise
 * ndev devices of max(1, cores / ndev) threads. Kept until the process exits. */
static qmoe_stream *default_stream(int ndev)
{
    pthread_mutex_lock(&default_lock);
    qmoe_stream *s = default_streams[ndev];
    if (!s) {
        qmoe_device *devs[QMOE_MAX_DEVICES] = {0};
        int ok = 1;
        if (ndev == 1) {
            ok = (devs[0] = default_device_locked()) != NULL;
        } else {
            int per = qmoe_device_online_cores() / ndev;
            qmoe_device_options o = {.threads = per > 0 ? per : 1};
            for (int d = 0; d < ndev && ok; d++) ok = !qmoe_device_create(&o, &devs[d]);
        }
        if (ok && !qmoe_stream_create_group(devs, ndev, &s)) default_streams[ndev] = s;
        else if (ndev > 1)
            for (int d = 0; d < ndev; d++) qmoe_device_destroy(devs[d]);
    }
    pthread_mutex_unlock(&default_lock);
    return s;
}

/* ---------------------------------------------------------------- submission ------------------ */

qmoe_status qmoe_stream_submit(qmoe_stream *stream, int ndev, qmoe_op_run_fn run, const void *op,
                               size_t op_bytes, uint64_t slice_bytes)
{
    int sync = stream == NULL;
    qmoe_stream *s = sync ? default_stream(ndev) : stream;
    if (!s) return qmoe_fail(QMOE_ERR_INNER, "cannot create the default device group of %d", ndev);
    if (ndev > s->ndev)
        return qmoe_fail(QMOE_ERR_PARAM_INVALID,
                         "the plan is for %d devices but the stream has %d; plan with "
                         "options.devices <= %d",
                         ndev, s->ndev, s->ndev);
    qmoe_job *job = take_job(s, op_bytes);
    if (!job) return qmoe_fail(QMOE_ERR_INNER, "out of memory for a queued operator");
    memcpy(job->op, op, op_bytes);
    job->done = 0;
    job->status = QMOE_OK;
    job->msg[0] = '\0';
    job->rule = QMOE_RULE_NONE;
    job->arg = NULL;
    job->msg_from_origin = 0;
    job->run = run;
    job->slice_bytes = slice_bytes;
    job->ndev = ndev;
    job->fence = s->fence;
    job->stream = s;
    job->sync = sync;
    job->remaining = ndev;
    for (int d = 0; d < ndev; d++) {
        job->devs[d] = s->devs[d];
        job->cmds[d] = (job_cmd){{NULL, job_exec}, job, d};
    }
    pthread_mutex_lock(&submit_lock);
    pthread_mutex_lock(&s->mu);
    s->submitted++;
    pthread_mutex_unlock(&s->mu);
    job->seq = s->seq;
    s->seq += 2;
    for (int d = 0; d < ndev; d++) qmoe_device_submit(job->devs[d], &job->cmds[d].cmd);
    pthread_mutex_unlock(&submit_lock);
    if (!sync) return QMOE_OK;
    pthread_mutex_lock(&s->mu);
    while (!job->done) pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    qmoe_status st = job->status;
    if (st) qmoe_fail_arg(st, job->rule, job->arg, "%s", job->msg);
    pthread_mutex_lock(&s->mu);
    give_back_locked(s, job);
    pthread_mutex_unlock(&s->mu);
    return st;
}
