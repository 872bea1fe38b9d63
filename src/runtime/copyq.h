/*
 * Copy queue: the CPU form of the NPU's DMA queue. A strict FIFO per worker thread: every push
 * records {dst, src} and a 2-D copy; every pop returns the oldest record. A zero-row push is an
 * ordering token. The copy is complete when its pop returns: the normal build copies at the push
 * (the "DMA" finished early), the checked build (QMOE_CHECKED) poisons the destination at the push
 * and copies at the pop, so a read before the pop sees poison and fails the reference comparison.
 * The checked build also counts discipline errors: a pop of an empty queue, a pop whose record is
 * not the one the caller expected (out of order), a push into a full ring. The operator that owns
 * the queue fails when it ends with pushes not popped or with violations.
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

typedef struct qmoe_copy_desc {
    void *dst;
    const void *src;
    size_t rows, row_bytes, dst_stride, src_stride;
} qmoe_copy_desc;

enum { QMOE_COPYQ_DEPTH = 64 };

/* The byte the checked build fills pushed destinations with until their pop. */
enum { QMOE_COPYQ_POISON = 0xA5 };

struct qmoe_copyq {
    qmoe_copy_desc ring[QMOE_COPYQ_DEPTH];
    uint32_t head, tail; /* pushes at tail, pops at head; tail - head = in flight */
    uint32_t violations; /* discipline errors seen */
};

void qmoe_copyq_init(qmoe_copyq *q);

/* Copies `rows` rows of `row_bytes` from src (stride src_stride bytes) to dst (dst_stride). */
void qmoe_copyq_push(qmoe_copyq *q, void *dst, const void *src, size_t rows, size_t row_bytes,
                     size_t dst_stride, size_t src_stride);

/* The record of the oldest push not yet popped ({NULL, NULL} and a violation when empty). */
qmoe_copy_rec qmoe_copyq_pop(qmoe_copyq *q);

/* Pops and checks that the oldest push was the one to `dst`; a mismatch is a violation. */
qmoe_copy_rec qmoe_copyq_pop_expect(qmoe_copyq *q, const void *dst);

static inline uint32_t qmoe_copyq_pending(const qmoe_copyq *q) { return q->tail - q->head; }

/* Forgets everything in flight (performing pending copies) and the violation count. */
void qmoe_copyq_reset(qmoe_copyq *q);

#endif
