/*
 * Fault injection: device k of a group fails an operator. Every device of the group returns the
 * error (adopted through the fences), the stream reports it at synchronize (sticky until read),
 * nothing is written (the devices learn of it before computing), no thread hangs, and the next
 * operator on the same stream works. Also the default device on the synchronous path.
 */
#include "test_runtime_case.h"

enum { D = 3 };

static unsigned char workspace[1 << 20]; /* shared by the ops: a stream runs them in turn */

static qmoe_status enqueue(rt_case *c, int threads, int devices, qmoe_stream *s)
{
    qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
    uint64_t wsb = 0;
    qmoe_status st = rt_case_plan(c, threads, devices, QMOE_KERNEL_REFERENCE, &ex, &wsb);
    if (!st && wsb > sizeof workspace) st = QMOE_ERR_INNER;
    if (!st) st = qmoe_grouped_matmul_swiglu_quant(workspace, wsb, ex, s);
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
    return st;
}

static int untouched(const rt_case *c)
{
    for (int64_t i = 0; i < c->M * c->N2; i++)
        if (c->out[i] != (int8_t)RT_SENTINEL) return 0;
    return 1;
}

int main(void)
{
    qmoe_device *devs[D];
    qmoe_device_options o = {.threads = 2};
    for (int d = 0; d < D; d++) CHECK(qmoe_device_create(&o, &devs[d]) == QMOE_OK);
    qmoe_stream *s;
    CHECK(qmoe_stream_create_group(devs, D, &s) == QMOE_OK);
    qt_rng r = {99};
    rt_case c;
    rt_case_init(&c, &r, 192, 24, 64, 3, 192, 1, 0, 0); /* 6 chunks of 32 rows: a real split */
    int8_t *eo = rt_alloc((size_t)(c.M * c.N2));
    float *es = rt_alloc((size_t)c.M * sizeof(float));
    rt_expected(&c, QMOE_KERNEL_REFERENCE, eo, es);

    for (int k = 0; k < D; k++) {
        /* device k fails the next operator */
        rt_case_reset_outputs(&c);
        CHECK(qmoe_device_inject_failure(devs[k], 1) == QMOE_OK);
        CHECK(enqueue(&c, 2, D, s) == QMOE_OK); /* queued: the error comes at synchronize */
        CHECK(qmoe_stream_synchronize(s) == QMOE_ERR_RUNTIME);
        CHECK(strstr(qmoe_last_error(), "injected") != NULL);
        for (int d = 0; d < D; d++)
            CHECK_MSG(qmoe_device_last_status(devs[d]) == QMOE_ERR_RUNTIME,
                      "fault on %d: device %d returned %s", k, d,
                      qmoe_status_name(qmoe_device_last_status(devs[d])));
        CHECK(untouched(&c));
        /* the error was read: the stream is clean, and the next operator works */
        CHECK(qmoe_stream_synchronize(s) == QMOE_OK);
        CHECK(enqueue(&c, 2, D, s) == QMOE_OK);
        CHECK(qmoe_stream_synchronize(s) == QMOE_OK);
        CHECK(rt_same_outputs(&c, eo, es));
        for (int d = 0; d < D; d++) CHECK(qmoe_device_last_status(devs[d]) == QMOE_OK);
    }

    /* the second of three queued operators fails: synchronize reports it once */
    CHECK(qmoe_device_inject_failure(devs[2], 2) == QMOE_OK);
    for (int i = 0; i < 3; i++) CHECK(enqueue(&c, 2, D, s) == QMOE_OK);
    CHECK(qmoe_stream_synchronize(s) == QMOE_ERR_RUNTIME);
    CHECK(qmoe_stream_synchronize(s) == QMOE_OK);
    CHECK(rt_same_outputs(&c, eo, es)); /* the third ran after the failure */

    /* the synchronous path on the default device */
    qmoe_device *def = qmoe_device_default();
    CHECK(def != NULL);
    rt_case_reset_outputs(&c);
    CHECK(qmoe_device_inject_failure(def, 1) == QMOE_OK);
    CHECK(enqueue(&c, 0, 1, NULL) == QMOE_ERR_RUNTIME);
    CHECK(untouched(&c));
    CHECK(enqueue(&c, 0, 1, NULL) == QMOE_OK);
    CHECK(rt_same_outputs(&c, eo, es));

    qmoe_stream_destroy(s);
    for (int d = 0; d < D; d++) qmoe_device_destroy(devs[d]);
    free(eo);
    free(es);
    rt_case_free(&c);
    return qt_finish("test_runtime_fault");
}
