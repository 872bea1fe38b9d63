#include "runtime/copyq.h"

#include <string.h>

void qmoe_copyq_init(qmoe_copyq *q) { memset(q, 0, sizeof *q); }

static void copy_2d(const qmoe_copy_desc *d)
{
    for (size_t r = 0; r < d->rows; r++)
        memcpy((char *)d->dst + r * d->dst_stride, (const char *)d->src + r * d->src_stride,
               d->row_bytes);
}

#ifdef QMOE_CHECKED
static void poison_2d(const qmoe_copy_desc *d)
{
    for (size_t r = 0; r < d->rows; r++)
        memset((char *)d->dst + r * d->dst_stride, QMOE_COPYQ_POISON, d->row_bytes);
}
#endif

/* Completes the oldest record and removes it. */
static qmoe_copy_desc retire_oldest(qmoe_copyq *q)
{
    qmoe_copy_desc d = q->ring[q->head++ % QMOE_COPYQ_DEPTH];
#ifdef QMOE_CHECKED
    copy_2d(&d);
#endif
    return d;
}

void qmoe_copyq_push(qmoe_copyq *q, void *dst, const void *src, size_t rows, size_t row_bytes,
                     size_t dst_stride, size_t src_stride)
{
    if (q->tail - q->head >= QMOE_COPYQ_DEPTH) {
        /* A full ring is a pipeline bug: the caller pushed deeper than the queue. */
        q->violations++;
        retire_oldest(q);
    }
    qmoe_copy_desc d = {dst, src, rows, row_bytes, dst_stride, src_stride};
    q->ring[q->tail++ % QMOE_COPYQ_DEPTH] = d;
#ifdef QMOE_CHECKED
    poison_2d(&d);
#else
    copy_2d(&d);
#endif
}

qmoe_copy_rec qmoe_copyq_pop(qmoe_copyq *q)
{
    if (q->head == q->tail) {
        q->violations++;
        return (qmoe_copy_rec){NULL, NULL};
    }
    qmoe_copy_desc d = retire_oldest(q);
    return (qmoe_copy_rec){d.dst, d.src};
}

qmoe_copy_rec qmoe_copyq_pop_expect(qmoe_copyq *q, const void *dst)
{
    qmoe_copy_rec r = qmoe_copyq_pop(q);
    if (r.dst != dst) q->violations++;
    return r;
}

void qmoe_copyq_reset(qmoe_copyq *q)
{
    while (q->head != q->tail) retire_oldest(q);
    q->violations = 0;
}
