/*
 * Copy queue: the CPU form of the NPU's DMA queue. A strict FIFO per worker thread: every push
 * records {dst, src} and performs (or prefetches) a 2-D copy; every pop returns the oldest
 * record. A zero-row push is an ordering token. The checked build (QMOE_CHECKED) verifies the
 * discipline: no pop of an empty queue, no operator ending with pushes not popped.
 */
#ifndef QMOE_RUNTIME_COPYQ_H
#define QMOE_RUNTIME_COPYQ_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/thread_ctx.h"

typedef struct qmoe_copy_rec {
    void *dst;
    const void *src;
} qmoe_copy_rec;

enum { QMOE_COPYQ_DEPTH = 64 };

struct qmoe_copyq {
    qmoe_copy_rec ring[QMOE_COPYQ_DEPTH];
    uint32_t head, tail; /* pushes at tail, pops at head; tail - head = in flight */
    uint32_t violations; /* checked build: discipline errors seen */
};

void qmoe_copyq_init(qmoe_copyq *q);

/* Copies `rows` rows of `row_bytes` from src (stride src_stride bytes) to dst (dst_stride). */
void qmoe_copyq_push(qmoe_copyq *q, void *dst, const void *src, size_t rows, size_t row_bytes,
                     size_t dst_stride, size_t src_stride);

/* The record of the oldest push not yet popped. */
qmoe_copy_rec qmoe_copyq_pop(qmoe_copyq *q);

static inline uint32_t qmoe_copyq_pending(const qmoe_copyq *q) { return q->tail - q->head; }

#endif
