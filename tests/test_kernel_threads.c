/*
 * Every fast kernel this CPU runs, through the runtime: bit-identical outputs for plans of 1..4
 * threads on 1 and 2 devices (row splits for large groups, column splits for small ones), equal
 * to the same kernel called row by row on one thread, and within the spec's tolerance of the
 * reference kernel (test_kernel_<isa>.c checks the kernels themselves in depth).
 */
#include <math.h>

#include "kernels/cpu_features.h"
#include "test_runtime_case.h"

enum { MAX_T = 4, MAX_D = 2 };

static qmoe_device *devs[MAX_T + 1][MAX_D];
static qmoe_stream *streams[MAX_T + 1][MAX_D + 1];

/* Outputs within +-1 of the reference and scales within 1e-6 relative; counts identical ones. */
static int64_t near_reference(const rt_case *c, const int8_t *ro, const float *rs, int64_t *same)
{
    int64_t bad = 0;
    for (int64_t m = 0; m < c->M; m++) {
        float a = c->out_scale[m], b = rs[m];
        if (!(a == b || fabsf(a - b) <= 1e-6f * fabsf(b))) bad++;
        for (int64_t j = 0; j < c->N2; j++) {
            int d = abs(c->out[m * c->N2 + j] - ro[m * c->N2 + j]);
            bad += d > 1;
            *same += d == 0;
        }
    }
    return bad;
}

int main(void)
{
    for (int t = 1; t <= MAX_T; t++) {
        qmoe_device_options o = {.threads = t};
        for (int d = 0; d < MAX_D; d++) CHECK(qmoe_device_create(&o, &devs[t][d]) == QMOE_OK);
        for (int d = 1; d <= MAX_D; d++)
            CHECK(qmoe_stream_create_group(devs[t], d, &streams[t][d]) == QMOE_OK);
    }
    qt_rng r = {4242};
    int64_t total = 0, same = 0;
    for (int i = 0; i < 12; i++) {
        int64_t M = i % 3 == 0 ? qt_range(&r, 200, 400) : qt_range(&r, 1, 24);
        int64_t K = 16 * qt_range(&r, 1, 20), E = qt_range(&r, 1, 4);
        int64_t N = 64 * qt_range(&r, 2, 6); /* N2 >= 64: column splits possible */
        int a8w4 = i % 2;
        rt_case c;
        rt_case_init(&c, &r, M, K, N, E, M - qt_range(&r, 0, M / 4), a8w4, i % 4 == 3, 0);
        /* the bias as real callers build it, so no row is pure float noise */
        if (a8w4)
            for (int64_t e = 0; e < E; e++)
                for (int64_t n = 0; n < N; n++) {
                    double b = 0;
                    for (int64_t k = 0; k < K; k++) {
                        int64_t idx = (e * K + k) * N + n;
                        int v = (c.w[idx / 2] >> (idx % 2 * 4)) & 0xF;
                        b += 8.0 * (v >= 8 ? v - 16 : v) * c.ws[e * N + n];
                    }
                    c.bias[e * N + n] = (float)b;
                }
        int8_t *ro = rt_alloc((size_t)(M * c.N2)), *eo = rt_alloc((size_t)(M * c.N2));
        float *rs = rt_alloc((size_t)M * sizeof(float)), *es = rt_alloc((size_t)M * sizeof(float));
        rt_expected(&c, QMOE_KERNEL_REFERENCE, ro, rs);
        /* every kernel the library names (kernels/isa_list.h): the ids are dense */
        for (int32_t k = QMOE_KERNEL_PORTABLE; strcmp(qmoe_kernel_name((qmoe_kernel)k), "unknown");
             k++) {
            if (!qmoe_cpu_runs_kernel(k)) continue;
            rt_expected(&c, (qmoe_kernel)k, eo, es);
            for (int t = 1; t <= MAX_T; t++)
                for (int d = 1; d <= MAX_D; d++) {
                    qmoe_status st = rt_case_run(&c, t, d, (qmoe_kernel)k, streams[t][d]);
                    CHECK_MSG(st == QMOE_OK && rt_same_outputs(&c, eo, es),
                              "case %d %s M=%lld K=%lld N=%lld E=%lld a8w4=%d: threads %d "
                              "devices %d: %s %s",
                              i, qmoe_kernel_name((qmoe_kernel)k), (long long)M, (long long)K,
                              (long long)N, (long long)E, a8w4, t, d, qmoe_status_name(st),
                              qmoe_last_error());
                }
            int64_t s = 0;
            CHECK_MSG(near_reference(&c, ro, rs, &s) == 0, "case %d %s: outputs off the reference",
                      i, qmoe_kernel_name((qmoe_kernel)k));
            same += s;
            total += M * c.N2;
        }
        free(ro), free(rs), free(eo), free(es);
        rt_case_free(&c);
    }
    CHECK_MSG(same >= total - total / 1000, "%lld of %lld outputs identical to the reference",
              (long long)same, (long long)total);
    for (int t = 1; t <= MAX_T; t++) {
        for (int d = 1; d <= MAX_D; d++) qmoe_stream_destroy(streams[t][d]);
        for (int d = 0; d < MAX_D; d++) qmoe_device_destroy(devs[t][d]);
    }
    return qt_finish("test_kernel_threads");
}
