/* Devices and streams at the API boundary: creation options (threads, CPU set, scratchpad),
 * queries, argument errors, the scratchpad growing between operators when a plan needs more,
 * and the default device. */
#include <unistd.h>

#include "test_runtime_case.h"

int main(void)
{
    qmoe_device *dev = NULL;
    qmoe_device_options o = {.threads = 3, .scratch_bytes = 4096};
    CHECK(qmoe_device_create(&o, &dev) == QMOE_OK);
    CHECK(qmoe_device_threads(dev) == 3);
    CHECK(qmoe_device_scratch_bytes(dev) == 3 * 4096);
    const char *isa = qmoe_device_isa(dev);
    CHECK(isa && strstr(isa, "portable"));

    /* a plan that needs more than the 4 KiB slices: the device grows them before running it */
    qt_rng r = {5};
    rt_case c;
    rt_case_init(&c, &r, 64, 300, 64, 2, 64, 0, 0, 0);
    int8_t *eo = rt_alloc((size_t)(c.M * c.N2));
    float *es = rt_alloc((size_t)c.M * sizeof(float));
    rt_expected(&c, QMOE_KERNEL_AUTO, eo, es);
    qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
    uint64_t wsb = 0;
    CHECK(rt_case_plan(&c, 3, 1, QMOE_KERNEL_AUTO, &ex, &wsb) == QMOE_OK);
    CHECK(qmoe_grouped_matmul_swiglu_quant_executor_params(ex)->thread_scratch_bytes > 4096);
    qmoe_stream *s = NULL;
    CHECK(qmoe_stream_create(dev, &s) == QMOE_OK);
    void *ws = wsb ? rt_alloc((size_t)wsb) : NULL;
    CHECK(qmoe_grouped_matmul_swiglu_quant(ws, wsb, ex, s) == QMOE_OK);
    CHECK(qmoe_stream_synchronize(s) == QMOE_OK);
    CHECK(rt_same_outputs(&c, eo, es));
    CHECK(qmoe_device_scratch_bytes(dev) >= 3 * qmoe_grouped_matmul_swiglu_quant_executor_params(ex)->thread_scratch_bytes);
    free(ws);
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);

    /* argument errors */
    qmoe_stream *bad = NULL;
    CHECK(qmoe_stream_create(NULL, &bad) == QMOE_ERR_PARAM_NULLPTR);
    CHECK(qmoe_stream_create_group((qmoe_device *[]){dev, dev}, 2, &bad) == QMOE_ERR_PARAM_INVALID);
    CHECK(qmoe_stream_create_group((qmoe_device *[]){dev}, 0, &bad) == QMOE_ERR_PARAM_INVALID);
    CHECK(qmoe_stream_create_group((qmoe_device *[]){dev}, QMOE_MAX_DEVICES + 1, &bad) ==
          QMOE_ERR_PARAM_INVALID);
    CHECK(bad == NULL);
    CHECK(qmoe_stream_synchronize(NULL) == QMOE_ERR_PARAM_NULLPTR);
    qmoe_device *d2 = NULL;
    qmoe_device_options neg = {.threads = -1};
    CHECK(qmoe_device_create(&neg, &d2) == QMOE_ERR_PARAM_INVALID);
    qmoe_device_options badcpu = {.cpus = (int[]){1 << 20}, .ncpus = 1};
    CHECK(qmoe_device_create(&badcpu, &d2) == QMOE_ERR_PARAM_INVALID);
    qmoe_device_options nocpus = {.ncpus = 2};
    CHECK(qmoe_device_create(&nocpus, &d2) == QMOE_ERR_PARAM_INVALID);
    CHECK(qmoe_device_create(NULL, NULL) == QMOE_ERR_PARAM_NULLPTR);
    CHECK(d2 == NULL);
    CHECK(qmoe_trace_write(NULL, &dev, 1) == QMOE_ERR_PARAM_NULLPTR);
    CHECK(qmoe_trace_write("unused.json", (qmoe_device *[]){dev, NULL}, 2) ==
          QMOE_ERR_PARAM_NULLPTR);
    /* a scratchpad size that would wrap when rounded up is refused, not made 0 bytes */
    qmoe_device_options huge = {.threads = 1, .scratch_bytes = UINT64_MAX - 10};
    CHECK(qmoe_device_create(&huge, &d2) == QMOE_ERR_INNER);
    CHECK(d2 == NULL);
    /* accessors on NULL answer instead of crashing */
    CHECK(qmoe_device_threads(NULL) == -1);
    CHECK(qmoe_device_scratch_bytes(NULL) == 0);
    CHECK(qmoe_device_id(NULL) == -1);
    CHECK(qmoe_device_last_status(NULL) == QMOE_ERR_PARAM_NULLPTR);
    CHECK(qmoe_device_ops_run(NULL) == UINT64_MAX);

    /* a CPU set: one thread per CPU by default, pinned; the operator still exact */
    qmoe_device_options pinned = {.cpus = (int[]){0, 0}, .ncpus = 2};
    CHECK(qmoe_device_create(&pinned, &d2) == QMOE_OK);
    CHECK(qmoe_device_threads(d2) == 2);
    qmoe_stream *s2 = NULL;
    CHECK(qmoe_stream_create(d2, &s2) == QMOE_OK);
    CHECK(rt_case_plan(&c, 2, 1, QMOE_KERNEL_AUTO, &ex, &wsb) == QMOE_OK);
    ws = wsb ? rt_alloc((size_t)wsb) : NULL;
    rt_case_reset_outputs(&c);
    CHECK(qmoe_grouped_matmul_swiglu_quant(ws, wsb, ex, s2) == QMOE_OK);
    qmoe_stream_destroy(s2); /* waits */
    CHECK(rt_same_outputs(&c, eo, es));
    free(ws);
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
    qmoe_device_destroy(d2);

    /* the default device: all online cores */
    qmoe_device *def = qmoe_device_default();
    CHECK(def && qmoe_device_threads(def) == qmoe_device_online_cores());
    CHECK(qmoe_device_online_cores() == (int)sysconf(_SC_NPROCESSORS_ONLN));

    qmoe_stream_destroy(s);
    qmoe_device_destroy(dev);
    qmoe_device_destroy(NULL);
    qmoe_stream_destroy(NULL);
    free(eo);
    free(es);
    rt_case_free(&c);
    return qt_finish("test_runtime_device");
}
