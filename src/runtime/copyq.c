#include "runtime/copyq.h"

#include <string.h>

void qmoe_copyq_init(qmoe_copyq *q) { memset(q, 0, sizeof *q); }

void qmoe_copyq_push(qmoe_copyq *q, void *dst, const void *src, size_t rows, size_t row_bytes,
                     size_t dst_stride, size_t src_stride)
{
    if (q->tail - q->head >= QMOE_COPYQ_DEPTH) {
        /* A full ring is a pipeline bug: the caller pushed deeper than the queue. */
        q->violations++;
        q->head++;
    }
    q->ring[q->tail % QMOE_COPYQ_DEPTH] = (qmoe_copy_rec){dst, src};
    q->tail++;
    for (size_t r = 0; r < rows; r++)
        memcpy((char *)dst + r * dst_stride, (const char *)src + r * src_stride, row_bytes);
}

qmoe_copy_rec qmoe_copyq_pop(qmoe_copyq *q)
{
    if (q->head == q->tail) {
        q->violations++;
        return (qmoe_copy_rec){NULL, NULL};
    }
    return q->ring[q->head++ % QMOE_COPYQ_DEPTH];
}
