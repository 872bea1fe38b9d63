/*
 * Copy-queue discipline. The queue itself: strict FIFO records, zero-length ordering tokens,
 * violations for an empty pop and an out-of-order pop; in the checked build (QMOE_CHECKED) a
 * pushed destination holds poison until its pop. The operator: a driver that leaves a push
 * unpopped or pops out of order fails with QMOE_ERR_INNER in every build, and one that reads a
 * staged operand before its pop produces wrong output in the checked build (caught by comparison
 * with the reference), while the normal build, which copies at the push, stays exact.
 * `make test-checked` (mk/runtime.mk) builds and runs this in the checked configuration.
 */
#include "ops/grouped_matmul_swiglu_quant/run.h"
#include "runtime/copyq.h"
#include "test_runtime_case.h"

static void queue_contract(void)
{
    static qmoe_copyq q;
    qmoe_copyq_init(&q);
    char src[4][16], dst[4][16];
    for (int i = 0; i < 4; i++) memset(src[i], 'a' + i, sizeof src[i]);
    memset(dst, 0, sizeof dst);
    qmoe_copyq_push(&q, dst[0], src[0], 1, 16, 16, 16);
    qmoe_copyq_push(&q, dst[1], NULL, 0, 0, 0, 0); /* ordering token */
    qmoe_copyq_push(&q, dst[2], src[2], 2, 8, 8, 8);
    CHECK(qmoe_copyq_pending(&q) == 3);
#ifdef QMOE_CHECKED
    CHECK(dst[0][0] == (char)QMOE_COPYQ_POISON && dst[2][7] == (char)QMOE_COPYQ_POISON);
#else
    CHECK(dst[0][0] == 'a');
#endif
    qmoe_copy_rec r = qmoe_copyq_pop(&q);
    CHECK(r.dst == dst[0] && r.src == src[0] && dst[0][15] == 'a');
    r = qmoe_copyq_pop(&q);
    CHECK(r.dst == dst[1] && r.src == NULL);
    r = qmoe_copyq_pop_expect(&q, dst[2]);
    CHECK(r.dst == dst[2] && dst[2][15] == 'c' && q.violations == 0);
    r = qmoe_copyq_pop(&q); /* empty */
    CHECK(r.dst == NULL && q.violations == 1);
    qmoe_copyq_push(&q, dst[0], src[1], 1, 16, 16, 16);
    qmoe_copyq_push(&q, dst[3], src[3], 1, 16, 16, 16);
    qmoe_copyq_pop_expect(&q, dst[3]); /* out of order */
    CHECK(q.violations == 2);
    qmoe_copyq_reset(&q);
    CHECK(qmoe_copyq_pending(&q) == 0 && q.violations == 0);
}

static qmoe_status run_with_fault(rt_case *c, qmoe_stream *s, qmoe_gmm_fault fault)
{
    qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
    uint64_t wsb = 0;
    qmoe_status st = rt_case_plan(c, 2, 1, QMOE_KERNEL_REFERENCE, &ex, &wsb);
    if (st) return st;
    void *ws = wsb ? rt_alloc((size_t)wsb) : NULL;
    rt_case_reset_outputs(c);
    qmoe_gmm_test_fault = fault;
    st = qmoe_grouped_matmul_swiglu_quant(ws, wsb, ex, s);
    if (!st) st = qmoe_stream_synchronize(s);
    qmoe_gmm_test_fault = QMOE_GMM_FAULT_NONE;
    free(ws);
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
    return st;
}

int main(void)
{
    queue_contract();

    qmoe_device *dev;
    qmoe_device_options o = {.threads = 2};
    CHECK(qmoe_device_create(&o, &dev) == QMOE_OK);
    qmoe_stream *s;
    CHECK(qmoe_stream_create(dev, &s) == QMOE_OK);
    qt_rng r = {11};
    rt_case c;
    rt_case_init(&c, &r, 100, 24, 64, 3, 100, 0, 0, 0);
    int8_t *eo = rt_alloc((size_t)(c.M * c.N2));
    float *es = rt_alloc((size_t)c.M * sizeof(float));
    rt_expected(&c, QMOE_KERNEL_REFERENCE, eo, es);

    CHECK(run_with_fault(&c, s, QMOE_GMM_FAULT_NONE) == QMOE_OK && rt_same_outputs(&c, eo, es));
    CHECK(run_with_fault(&c, s, QMOE_GMM_FAULT_SKIP_POP) == QMOE_ERR_INNER);
    CHECK(strstr(qmoe_last_error(), "not popped") != NULL);
    CHECK(run_with_fault(&c, s, QMOE_GMM_FAULT_POP_OUT_OF_ORDER) == QMOE_ERR_INNER);
    qmoe_status st = run_with_fault(&c, s, QMOE_GMM_FAULT_READ_BEFORE_POP);
    CHECK(st == QMOE_OK);
#ifdef QMOE_CHECKED
    CHECK_MSG(!rt_same_outputs(&c, eo, es), "a read before the pop went unnoticed");
#else
    CHECK(rt_same_outputs(&c, eo, es));
#endif
    /* the queues were left clean: the next operator is exact */
    CHECK(run_with_fault(&c, s, QMOE_GMM_FAULT_NONE) == QMOE_OK && rt_same_outputs(&c, eo, es));

    qmoe_stream_destroy(s);
    qmoe_device_destroy(dev);
    free(eo);
    free(es);
    rt_case_free(&c);
#ifdef QMOE_CHECKED
    return qt_finish("test_runtime_checked (checked build)");
#else
    return qt_finish("test_runtime_checked");
#endif
}
