/*
 * Streams: two threads each enqueue many operators onto their own stream; the streams share a
 * device (stream A runs on device 0, stream B on the group {device 1, device 0}). Each thread
 * alternates two operators with different inputs that write the same outputs, destroying each
 * executor right after enqueueing it; in-order execution leaves the last one's result. Every
 * operator runs (device counters), synchronize waits for all of them, and destroying a stream
 * with work in flight waits for that work.
 */
#include <pthread.h>

#include "test_runtime_case.h"

enum { OPS = 24 };

typedef struct lane {
    qmoe_stream *s;
    int devices;
    rt_case a, b; /* same shapes and outputs, different inputs */
    int8_t *ea, *eb;
    float *esa, *esb;
    qmoe_status enqueue_status;
} lane;

/* Points case b's output tensors at case a's outputs. */
static void share_outputs(rt_case *a, rt_case *b)
{
    qmoe_tensor_destroy(b->t[6]);
    qmoe_tensor_destroy(b->t[7]);
    CHECK(!qmoe_tensor_create((int64_t[]){a->M, a->N2}, 2, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND,
                              a->out, &b->t[6]));
    CHECK(!qmoe_tensor_create((int64_t[]){a->M}, 1, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND,
                              a->out_scale, &b->t[7]));
}

static void lane_init(lane *l, qt_rng *r, qmoe_stream *s, int devices)
{
    l->s = s;
    l->devices = devices;
    rt_case_init(&l->a, r, 160, 20, 96, 4, 150, 0, 0, 0);
    rt_case_init(&l->b, r, 160, 20, 96, 4, 150, 0, 0, 0);
    memcpy(l->b.gl, l->a.gl, 4 * sizeof(int64_t));
    size_t n = (size_t)(l->a.M * l->a.N2), ns = (size_t)l->a.M * sizeof(float);
    l->ea = rt_alloc(n), l->eb = rt_alloc(n), l->esa = rt_alloc(ns), l->esb = rt_alloc(ns);
    rt_expected(&l->a, QMOE_KERNEL_REFERENCE, l->ea, l->esa);
    rt_expected(&l->b, QMOE_KERNEL_REFERENCE, l->eb, l->esb);
    CHECK(memcmp(l->ea, l->eb, n) != 0); /* the two operators are told apart by their output */
    share_outputs(&l->a, &l->b);
    rt_case_reset_outputs(&l->a);
}

static void *lane_main(void *arg)
{
    lane *l = arg;
    for (int i = 0; i < OPS && !l->enqueue_status; i++) {
        rt_case *c = i % 2 ? &l->b : &l->a;
        qmoe_executor *ex = NULL;
        uint64_t wsb = 0;
        qmoe_status st = rt_case_plan(c, 2, l->devices, QMOE_KERNEL_REFERENCE, &ex, &wsb);
        if (!st && wsb) st = QMOE_ERR_INNER; /* these shapes need no workspace */
        if (!st) st = qmoe_gmm_swiglu_quant(NULL, 0, ex, l->s);
        qmoe_executor_destroy(ex);
        l->enqueue_status = st;
    }
    return NULL;
}

static void lane_free(lane *l)
{
    free(l->ea), free(l->eb), free(l->esa), free(l->esb);
    rt_case_free(&l->a);
    rt_case_free(&l->b);
}

int main(void)
{
    qmoe_device *d[2];
    qmoe_device_options o = {.threads = 2};
    CHECK(qmoe_device_create(&o, &d[0]) == QMOE_OK);
    CHECK(qmoe_device_create(&o, &d[1]) == QMOE_OK);
    qmoe_stream *sa, *sb;
    CHECK(qmoe_stream_create(d[0], &sa) == QMOE_OK);
    CHECK(qmoe_stream_create_group((qmoe_device *[]){d[1], d[0]}, 2, &sb) == QMOE_OK);
    qt_rng r = {314};
    lane la, lb;
    lane_init(&la, &r, sa, 1);
    lane_init(&lb, &r, sb, 2);

    for (int round = 0; round < 3; round++) {
        uint64_t ops0 = qmoe_device_ops_run(d[0]), ops1 = qmoe_device_ops_run(d[1]);
        la.enqueue_status = lb.enqueue_status = QMOE_OK;
        rt_case_reset_outputs(&la.a);
        rt_case_reset_outputs(&lb.a);
        pthread_t ta, tb;
        pthread_create(&ta, NULL, lane_main, &la);
        pthread_create(&tb, NULL, lane_main, &lb);
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        CHECK(la.enqueue_status == QMOE_OK && lb.enqueue_status == QMOE_OK);
        if (round < 2) {
            CHECK(qmoe_stream_synchronize(sa) == QMOE_OK);
            CHECK(qmoe_stream_synchronize(sb) == QMOE_OK);
        } else {
            qmoe_stream_destroy(sa); /* waits for the work in flight */
            qmoe_stream_destroy(sb);
        }
        /* the last operator of each lane (odd index: b) wrote last */
        CHECK(rt_same_outputs(&la.a, la.eb, la.esb));
        CHECK(rt_same_outputs(&lb.a, lb.eb, lb.esb));
        CHECK(qmoe_device_ops_run(d[0]) - ops0 == 2 * OPS); /* both streams' operators */
        CHECK(qmoe_device_ops_run(d[1]) - ops1 == OPS);
    }
    /* an odd count ends on a: the order is what decides */
    CHECK(qmoe_stream_create(d[0], &sa) == QMOE_OK);
    la.s = sa;
    for (int i = 0; i < 7; i++) {
        rt_case *c = i % 2 ? &la.b : &la.a;
        qmoe_executor *ex = NULL;
        uint64_t wsb = 0;
        CHECK(rt_case_plan(c, 2, 1, QMOE_KERNEL_REFERENCE, &ex, &wsb) == QMOE_OK);
        CHECK(qmoe_gmm_swiglu_quant(NULL, 0, ex, sa) == QMOE_OK);
        qmoe_executor_destroy(ex);
    }
    CHECK(qmoe_stream_synchronize(sa) == QMOE_OK);
    CHECK(rt_same_outputs(&la.a, la.ea, la.esa));
    qmoe_stream_destroy(sa);

    lane_free(&la);
    lane_free(&lb);
    qmoe_device_destroy(d[0]);
    qmoe_device_destroy(d[1]);
    return qt_finish("test_stream");
}
