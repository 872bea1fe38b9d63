/* A queued operator: one job per submission, one command per device of the group. */
#ifndef QMOE_RUNTIME_JOB_H
#define QMOE_RUNTIME_JOB_H

#include <stddef.h>

#include "runtime/device.h"

typedef struct qmoe_job qmoe_job;

struct qmoe_cmd {
    qmoe_cmd *next;
    qmoe_job *job;
    int index; /* the device's place in the group */
};

struct qmoe_job {
    qmoe_op_run_fn run;
    uint64_t slice_bytes;
    int ndev;
    qmoe_device *devs[QMOE_MAX_DEVICES];
    qmoe_fence_slot *fence; /* the stream's, one slot per device */
    uint32_t seq;           /* barriers of this job: seq + 1 (before), seq + 2 (after) */
    qmoe_stream *stream;
    int sync;      /* a caller waits for this job and frees it */
    int remaining; /* devices still running it (under the stream's lock) */
    int done;
    qmoe_status status; /* first error of the devices */
    char msg[256];
    qmoe_error_rule rule; /* msg's structured info (qmoe_last_error_info): an argument error */
    const char *arg;      /* found on the device, e.g. groupList data, keeps rule and argument */
    int msg_from_origin; /* msg is from the device where the error arose */
    qmoe_cmd cmds[QMOE_MAX_DEVICES];
    max_align_t op[]; /* the operator's data, copied at submission */
};

/* Runs the command's share of its job on the device (its command thread), fences included. */
void qmoe_job_run_on_device(qmoe_cmd *cmd, qmoe_device *dev);

void qmoe_device_enqueue(qmoe_device *dev, qmoe_cmd *cmd);
qmoe_status qmoe_device_reserve(qmoe_device *dev, uint64_t bytes);

#endif
