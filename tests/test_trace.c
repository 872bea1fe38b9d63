/*
 * Tracing and the plan/driver contract. The exported trace parses as JSON and holds compute
 * events from every thread that worked; and the driver honours the plan it is given: the row
 * split balances rows, not blocks (uneven experts still give every thread its share), a plan
 * for 3 threads on a 4-thread device leaves thread 3 idle, a column-split plan makes every
 * thread compute, and a multi-device plan makes every device compute. Outputs stay exact in
 * each case.
 */
#include "ops/grouped_matmul_swiglu_quant/partition.h"
#include "runtime/trace.h"
#include "test_runtime_case.h"
#include "test_trace_json.h"

/* ---------------------------------------------------------------- cases ----------------------- */

static const char *PATH = "test_trace_out.json";

enum { EDIT_NONE, EDIT_NO_COLUMNS, EDIT_NO_SPLIT };

/* Plans the case, applies an edit the way the planner would derive it, runs it on the stream,
 * exports the devices' trace and returns it (NULL on failure). Outputs are checked exact. */
static char *traced_run(rt_case *c, int threads, int devices, int edit, qmoe_device **devs,
                        qmoe_stream *s)
{
    int8_t *eo = rt_alloc((size_t)(c->M * c->N2));
    float *es = rt_alloc((size_t)c->M * sizeof(float));
    rt_expected(c, QMOE_KERNEL_REFERENCE, eo, es);
    qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
    uint64_t wsb = 0;
    CHECK(rt_case_plan(c, threads, devices, QMOE_KERNEL_REFERENCE, &ex, &wsb) == QMOE_OK);
    qmoe_gmm_params *p = qmoe_grouped_matmul_swiglu_quant_executor_params(ex);
    if (edit == EDIT_NO_COLUMNS) {
        p->col_max_rows = 0;
    } else if (edit == EDIT_NO_SPLIT) {
        p->rows_per_chunk = 0;
    }
    for (int d = 0; d < devices; d++) CHECK(qmoe_device_trace(devs[d], 1, 0) == QMOE_OK);
    void *ws = wsb ? rt_alloc((size_t)wsb) : NULL;
    rt_case_reset_outputs(c);
    CHECK(qmoe_grouped_matmul_swiglu_quant(ws, wsb, ex, s) == QMOE_OK);
    CHECK(qmoe_stream_synchronize(s) == QMOE_OK);
    CHECK(rt_same_outputs(c, eo, es));
    CHECK(qmoe_trace_write(PATH, devs, devices) == QMOE_OK);
    char *text = slurp(PATH);
    CHECK(text && json_valid(text));
    for (int d = 0; d < devices; d++) CHECK(qmoe_device_trace(devs[d], 0, 0) == QMOE_OK);
    if (!getenv("KEEP_TRACE")) remove(PATH);
    free(ws);
    free(eo);
    free(es);
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
    return text;
}

int main(void)
{
    qmoe_device *devs[2];
    qmoe_device_options o = {.threads = 4};
    CHECK(qmoe_device_create(&o, &devs[0]) == QMOE_OK);
    CHECK(qmoe_device_create(&o, &devs[1]) == QMOE_OK);
    qmoe_stream *s1, *s2;
    CHECK(qmoe_stream_create(devs[0], &s1) == QMOE_OK);
    CHECK(qmoe_stream_create_group(devs, 2, &s2) == QMOE_OK);
    int id0 = qmoe_device_id(devs[0]), id1 = qmoe_device_id(devs[1]);
    qt_rng r = {7};

    /* row split: 128 rows in blocks of 32 over 4 threads -> every thread computes one block */
    rt_case c;
    rt_case_init(&c, &r, 128, 16, 64, 1, 128, 0, 0, 0);
    char *t = traced_run(&c, 4, 1, EDIT_NONE, devs, s1);
    for (int th = 0; th < 4; th++) CHECK_MSG(count_compute(t, id0, th) == 1, "thread %d", th);
    CHECK(strstr(t, "\"name\":\"epilogue\"") && strstr(t, "\"name\":\"copy\"") &&
          strstr(t, "\"name\":\"plan\""));
    free(t);
    /* two devices, 128 rows in chunks of 32 -> both devices compute, on every thread */
    t = traced_run(&c, 2, 2, EDIT_NONE, devs, s2);
    for (int th = 0; th < 2; th++) {
        CHECK_MSG(count_compute(t, id0, th) >= 1, "device 0 thread %d", th);
        CHECK_MSG(count_compute(t, id1, th) >= 1, "device 1 thread %d", th);
    }
    CHECK(strstr(t, "\"name\":\"fence\""));
    free(t);
    /* the same plan told the split is unsafe -> device 0 does everything */
    t = traced_run(&c, 2, 2, EDIT_NO_SPLIT, devs, s2);
    CHECK(count_compute(t, id0, 0) >= 1 && count_compute(t, id1, 0) == 0 &&
          count_compute(t, id1, 1) == 0);
    free(t);
    rt_case_free(&c);

    /* uneven experts, 100 + 28 rows in blocks of 32 over 4 threads -> 32 rows each: threads 0-2
     * one block, thread 3 two (the first expert's last 4 rows, then the second's 28); a split
     * of the blocks (4 + 1 of them, 2 a thread) left thread 3 idle and gave thread 0 64 rows */
    rt_case_init(&c, &r, 128, 16, 64, 2, 128, 0, 0, 0);
    c.gl[0] = 100, c.gl[1] = 128;
    t = traced_run(&c, 4, 1, EDIT_NONE, devs, s1);
    for (int th = 0; th < 3; th++) CHECK_MSG(count_compute(t, id0, th) == 1, "thread %d", th);
    CHECK_MSG(count_compute(t, id0, 3) == 2, "thread 3: %d", count_compute(t, id0, 3));
    free(t);
    rt_case_free(&c);

    /* a plan for 3 threads on a 4-thread device: 96 rows, 3 blocks -> thread 3 stays idle */
    rt_case_init(&c, &r, 96, 16, 64, 1, 96, 0, 0, 0);
    t = traced_run(&c, 3, 1, EDIT_NONE, devs, s1);
    for (int th = 0; th < 3; th++) CHECK_MSG(count_compute(t, id0, th) == 1, "thread %d", th);
    CHECK(count_compute(t, id0, 3) == 0);
    free(t);
    rt_case_free(&c);

    /* column split: 8 rows, 256 output columns, 4 threads -> 64 columns each, all compute */
    rt_case_init(&c, &r, 8, 16, 512, 1, 8, 0, 0, 0);
    t = traced_run(&c, 4, 1, EDIT_NONE, devs, s1);
    for (int th = 0; th < 4; th++)
        CHECK_MSG(count_compute(t, id0, th) == 1, "thread %d: %d", th, count_compute(t, id0, th));
    free(t);
    /* the same plan without the column split -> a row split: 2 rows a thread (the reference
     * kernel aligns rows to nothing) */
    t = traced_run(&c, 4, 1, EDIT_NO_COLUMNS, devs, s1);
    for (int th = 0; th < 4; th++) CHECK_MSG(count_compute(t, id0, th) == 1, "thread %d", th);
    free(t);
    rt_case_free(&c);

    /* the tracing API itself: buffers fill up without overflowing */
    qmoe_trace_buf *b = qmoe_trace_buf_create(4, 0, 0);
    for (int i = 0; i < 10; i++) qmoe_trace_record(b, QMOE_EV_COMPUTE, i % 2 == 0, (uint16_t)i);
    CHECK(b->count == 4 && b->dropped == 6);
    qmoe_trace_buf_destroy(b);
    CHECK(qmoe_trace_write("/nonexistent-dir/x.json", devs, 1) == QMOE_ERR_PARAM_INVALID);

    qmoe_stream_destroy(s1);
    qmoe_stream_destroy(s2);
    qmoe_device_destroy(devs[0]);
    qmoe_device_destroy(devs[1]);
    return qt_finish("test_trace");
}
