#define _POSIX_C_SOURCE 200809L
/*
 * bench_kernel: one expert's qmoe_swiglu_quant_block + _rows called directly with large blocks
 * (rows split over threads), FRACTAL_NZ weights, for tuning the micro-kernels independently of
 * the driver. usage: bench_kernel KERNEL M K N a8w8|a8w4 G THREADS REPEAT
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

typedef struct job {
    const qmoe_kernel_entry *k;
    const qmoe_gmm_params *p;
    int64_t m0, m1;
    void *scratch;
    uint64_t bytes;
    float *s;
} job;

static void *run(void *arg)
{
    job *j = arg;
    qmoe_thread_ctx ctx = {.scratch = j->scratch, .scratch_bytes = j->bytes};
    int64_t N2 = j->p->N2;
    int64_t rb = getenv("ROWS") ? atoll(getenv("ROWS")) : 512;
    for (int64_t m = j->m0; m < j->m1; m += rb) {
        int64_t me = m + rb < j->m1 ? m + rb : j->m1;
        qmoe_swiglu_quant_block(j->k, j->p, &ctx, 0, m, me, 0, N2, j->s + (m - j->m0) * N2, N2);
        qmoe_swiglu_quant_rows(j->k, j->p, j->s + (m - j->m0) * N2, N2, m, me);
    }
    return NULL;
}

static double clock_s(clockid_t id)
{
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double now(void) { return clock_s(CLOCK_MONOTONIC); }

int main(int argc, char **argv)
{
    if (argc != 9) {
        fprintf(stderr, "usage: bench_kernel KERNEL(2-5) M K N a8w8|a8w4 G THREADS REPEAT\n");
        return 2;
    }
    int kid = atoi(argv[1]);
    int64_t M = atoll(argv[2]), K = atoll(argv[3]), N = atoll(argv[4]), G = atoll(argv[6]);
    int a8w4 = !strcmp(argv[5], "a8w4"), T = atoi(argv[7]), R = atoi(argv[8]);
    const qmoe_kernel_entry *k = qmoe_kernel_lookup(kid);
    if (!k) {
        fprintf(stderr, "kernel %d not available\n", kid);
        return 1;
    }
    qmoe_gmm_params p;
    memset(&p, 0, sizeof p);
    p.M = M, p.K = K, p.N = N, p.N2 = N / 2, p.E = 1, p.E_groups = 1, p.G = G, p.group_k = K / G;
    p.mode = a8w4 ? QMOE_MODE_A8W4 : QMOE_MODE_A8W8;
    p.per_group = G > 1;
    size_t wbytes = (size_t)(a8w4 ? K * N / 2 : K * N);
    uint8_t *w = malloc(wbytes);
    for (size_t i = 0; i < wbytes; i++) w[i] = (uint8_t)(rand() >> 7);
    p.w = w;
    p.w_layout = a8w4 ? QMOE_W_INT4_NZ : QMOE_W_INT8_NZ;
    int64_t cols = a8w4 ? 64 : 32;
    int64_t ws5[5] = {K * N, K * cols, 16 * cols, cols, 1};
    memcpy(p.w_s, ws5, sizeof ws5);
    int8_t *x = malloc((size_t)(M * K));
    for (int64_t i = 0; i < M * K; i++) x[i] = (int8_t)(rand() >> 7);
    p.x = x, p.x_s[0] = K, p.x_s[1] = 1;
    float *ws = malloc(sizeof(float) * (size_t)(G * N)), *bias = malloc(sizeof(float) * (size_t)N);
    for (int64_t i = 0; i < G * N; i++) ws[i] = 0.001f;
    for (int64_t i = 0; i < N; i++) bias[i] = 0.5f;
    p.ws = ws, p.ws_type = QMOE_SCALE_F32, p.ws_s[0] = G * N, p.ws_s[1] = G > 1 ? N : 0, p.ws_s[2] = 1;
    if (a8w4) p.bias = bias, p.bias_s[0] = N, p.bias_s[1] = 1;
    float *xs = malloc(sizeof(float) * (size_t)M);
    for (int64_t i = 0; i < M; i++) xs[i] = 0.01f;
    p.xs = xs, p.xs_s = 1;
    int8_t *out = malloc((size_t)(M * p.N2));
    float *osc = malloc(sizeof(float) * (size_t)M);
    p.out = out, p.out_s[0] = p.N2, p.out_s[1] = 1, p.out_scale = osc, p.out_scale_s = 1;
    job jobs[8];
    pthread_t th[8];
    for (int t = 0; t < T; t++) {
        jobs[t].k = k, jobs[t].p = &p;
        jobs[t].m0 = M * t / T, jobs[t].m1 = M * (t + 1) / T;
        jobs[t].bytes = qmoe_swiglu_quant_scratch_bytes(k, &p, getenv("ROWS") ? atoll(getenv("ROWS")) : 512, p.N2);
        jobs[t].scratch = aligned_alloc(64, (jobs[t].bytes + 63) & ~(uint64_t)63);
        jobs[t].s = malloc(sizeof(float) * (size_t)((jobs[t].m1 - jobs[t].m0) * p.N2));
    }
    double best = 1e9, best_cpu = 1e9;
    for (int r = 0; r < R; r++) {
        double t0 = now(), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
        for (int t = 1; t < T; t++) pthread_create(&th[t], NULL, run, &jobs[t]);
        run(&jobs[0]);
        for (int t = 1; t < T; t++) pthread_join(th[t], NULL);
        double dt = now() - t0, dc = (clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0) / T;
        if (dt < best) best = dt;
        if (dc < best_cpu) best_cpu = dc;
    }
    double ops = 2.0 * (double)M * (double)K * (double)N;
    printf("%s M=%lld K=%lld N=%lld %s G=%lld threads=%d: best %.3f ms, %.1f GOPS (CPU time per "
           "thread %.3f ms: %.1f GOPS)\n",
           k->name, (long long)M, (long long)K, (long long)N, a8w4 ? "a8w4" : "a8w8", (long long)G,
           T, best * 1e3, ops / best * 1e-9, best_cpu * 1e3, ops / best_cpu / T * 1e-9);
    return 0;
}
