/*
 * The operator through the runtime is bit-identical to the single-thread reference kernel called
 * row by row, for plans of 1..4 threads on groups of 1..4 devices, over a randomized sweep of
 * shapes: small and large groups (row and column splits), empty experts, counts and cumulative
 * groupLists, A8W8 and A8W4, and misaligned outputs that force the device-0 fallback. Also plans
 * with more parts than the device has threads, the default (stream NULL) path, and the fastest
 * kernel against itself called on one thread.
 */
#include "test_runtime_case.h"

enum { MAX_T = 4, MAX_D = 4 };

static qmoe_device *devs[MAX_T + 1][MAX_D]; /* devs[t]: devices of t threads */
static qmoe_stream *streams[MAX_T + 1][MAX_D + 1];
static int split4_cases, fallback_cases; /* coverage: real 4-way splits, forced fallbacks */

static void sweep_case(qt_rng *r, int index)
{
    rt_case c;
    int64_t M = index % 4 == 1 ? qt_range(r, 128, 300) : qt_range(r, 1, 90);
    int64_t K = qt_range(r, 1, 40), E = qt_range(r, 1, 5);
    int64_t N = 2 * qt_range(r, 1, index % 3 == 0 ? 160 : 40);
    if (index % 4 == 1) N = 8 * qt_range(r, 1, 20); /* 32-row chunks: 4-way splits fit */
    int64_t rows = index % 4 == 1 ? M - qt_range(r, 0, 8) : qt_range(r, 0, M);
    int a8w4 = index % 2, misalign = index % 4 == 1 ? index % 8 == 5 : index % 5 == 4;
    /* chunks of whole 128-byte lines of output (N2 bytes a row) and outputScale (4 bytes) */
    int64_t g = 128;
    for (int64_t a = N / 2, b; a; a = b) b = g % a, g = a;
    int64_t chunk = 128 / g > 32 ? 128 / g : 32;
    if (!misalign && rows / chunk >= 4) split4_cases++;
    if (misalign && rows / chunk >= 2) fallback_cases++;
    rt_case_init(&c, r, M, K, N, E, rows, a8w4, index % 3 == 1, misalign);
    int8_t *eo = rt_alloc((size_t)(M * c.N2));
    float *es = rt_alloc((size_t)M * sizeof(float));
    rt_expected(&c, QMOE_KERNEL_REFERENCE, eo, es);
    for (int t = 1; t <= MAX_T; t++)
        for (int d = 1; d <= MAX_D; d++) {
            qmoe_status st = rt_case_run(&c, t, d, QMOE_KERNEL_REFERENCE, streams[t][d]);
            CHECK_MSG(st == QMOE_OK && rt_same_outputs(&c, eo, es),
                      "case %d M=%lld K=%lld N=%lld E=%lld rows=%lld a8w4=%d misalign=%d: "
                      "threads %d devices %d: %s %s",
                      index, (long long)M, (long long)K, (long long)N, (long long)E,
                      (long long)rows, a8w4, misalign, t, d, qmoe_status_name(st),
                      qmoe_last_error());
        }
    /* 4 parts on 1- and 2-thread devices: parts shared round-robin, column phase as two jobs */
    CHECK(rt_case_run(&c, 4, 2, QMOE_KERNEL_REFERENCE, streams[2][2]) == QMOE_OK &&
          rt_same_outputs(&c, eo, es));
    CHECK(rt_case_run(&c, 3, 1, QMOE_KERNEL_REFERENCE, streams[1][1]) == QMOE_OK &&
          rt_same_outputs(&c, eo, es));
    /* the default device group, synchronously */
    if (index % 4 == 0) {
        CHECK(rt_case_run(&c, 0, 1 + index % 3, QMOE_KERNEL_REFERENCE, NULL) == QMOE_OK &&
              rt_same_outputs(&c, eo, es));
    }
    /* the fastest kernel: split-invariant too */
    if (index % 3 == 0) {
        rt_expected(&c, QMOE_KERNEL_AUTO, eo, es);
        for (int t = 1; t <= MAX_T; t += 3)
            for (int d = 1; d <= MAX_D; d += 2) {
                qmoe_status st = rt_case_run(&c, t, d, QMOE_KERNEL_AUTO, streams[t][d]);
                CHECK_MSG(st == QMOE_OK && rt_same_outputs(&c, eo, es),
                          "case %d M=%lld K=%lld N=%lld a8w4=%d: fastest kernel, threads %d "
                          "devices %d: %s %s",
                          index, (long long)M, (long long)K, (long long)N, a8w4, t, d,
                          qmoe_status_name(st), qmoe_last_error());
            }
    }
    free(eo);
    free(es);
    rt_case_free(&c);
}

int main(void)
{
    for (int t = 1; t <= MAX_T; t++) {
        qmoe_device_options o = {.threads = t};
        for (int d = 0; d < MAX_D; d++) CHECK(qmoe_device_create(&o, &devs[t][d]) == QMOE_OK);
        for (int d = 1; d <= MAX_D; d++)
            CHECK(qmoe_stream_create_group(devs[t], d, &streams[t][d]) == QMOE_OK);
        CHECK(qmoe_device_threads(devs[t][0]) == t);
    }
    qt_rng r = {20261130};
    for (int i = 0; i < 36; i++) sweep_case(&r, i);
    CHECK_MSG(split4_cases >= 3 && fallback_cases >= 2, "coverage: %d four-way splits, %d fallbacks",
              split4_cases, fallback_cases);

    /* a plan for more devices than the stream has is refused, with nothing written */
    rt_case c;
    rt_case_init(&c, &r, 8, 4, 8, 1, 8, 0, 0, 0);
    qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
    uint64_t wsb = 0;
    CHECK(rt_case_plan(&c, 1, 3, QMOE_KERNEL_REFERENCE, &ex, &wsb) == QMOE_OK);
    void *ws = wsb ? rt_alloc((size_t)wsb) : NULL;
    CHECK(qmoe_grouped_matmul_swiglu_quant(ws, wsb, ex, streams[1][2]) == QMOE_ERR_PARAM_INVALID);
    CHECK(c.out[0] == (int8_t)RT_SENTINEL);
    free(ws);
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
    rt_case_free(&c);

    for (int t = 1; t <= MAX_T; t++) {
        for (int d = 1; d <= MAX_D; d++) qmoe_stream_destroy(streams[t][d]);
        for (int d = 0; d < MAX_D; d++) qmoe_device_destroy(devs[t][d]);
    }
    return qt_finish("test_runtime_gmm");
}
