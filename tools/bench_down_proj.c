/*
 * qmoe bench down-proj: GroupedMatmul A8W8 with per-token dequant to bf16 (FRACTAL_NZ int8
 * weights, float32 scales) at the down projection's shape (default E=4, K=2048, N=7168) for a
 * prefill (2048 tokens per expert, M=8192) and a decode (4 tokens per expert) case. One JSON line
 * per case: median, min and max of the timed runs (the machine is shared: read the spread), int8
 * GOPS and its ratio to the peak of the kernel's instruction, weight bytes per second and its
 * ratio to the DRAM read bandwidth, both limits measured in the same run.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_down_proj.h"
#include "bench_moe_ops.h"
#include "cli_size.h"
#include "bench.h"
#include "qmoe/grouped_matmul.h"
#include "qmoe/runtime.h"
#include "qmoe/weights.h"

typedef struct dp_args {
    int64_t experts, k, n, prefill, decode, dram_mb, copies, max_gib;
    int repeat, threads, prepacked;
} dp_args;

static double dp_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int dp_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Peak int8 GOPS of one thread's loop times the threads (the loop is register-only, so the
 * threads do not contend): best of 3 rounds of ~50 ms. */
static double dp_peak(const qmoe_gemm_isa *isa, int threads)
{
    uint64_t iters = 1;
    double best = 0;
    for (;;) {
        double t0 = dp_now();
        isa->peak_loop(iters);
        if (dp_now() - t0 > 0.05 || iters > (1ull << 40)) break;
        iters *= 2;
    }
    for (int r = 0; r < 3; r++) {
        double t0 = dp_now();
        uint64_t ops = isa->peak_loop(iters);
        double g = (double)ops / (dp_now() - t0) * 1e-9;
        if (g > best) best = g;
    }
    return best * threads;
}

/* copies > 1: that many copies of the weights, used in turn, so the timed runs stream them from
 * memory instead of a cache that holds one copy (this machine's L3 is 480 MB). */
enum { MAX_COPIES = 32 };

/* Every buffer of a case (dp_case) and the probe's, checked against --max-gib before any is
 * allocated: -1 with err when over it or past 64 bits. */
static int dp_size(const dp_args *a, int64_t per_expert, int64_t copies, char *err, size_t len)
{
    int64_t E = a->experts, K = a->k, N = a->n, M;
    cli_bytes b = {0};
    if (cli_mul(E, per_expert, &M)) b.overflow = 1, M = 0;
    if (copies > MAX_COPIES) copies = MAX_COPIES;
    cli_bytes_add(&b, M, K, 1); /* x */
    cli_bytes_add(&b, E, K, N); /* the weights */
    for (int64_t c = 1; c < copies + a->prepacked * copies; c++) /* more copies, prepacked ones */
        cli_bytes_add(&b, E, K, N);
    cli_bytes_add(&b, E, N, 4);                /* weight scales */
    cli_bytes_add(&b, M, 4, 1);                /* x scales */
    cli_bytes_add(&b, E, 8, 1);                /* group list */
    cli_bytes_add(&b, M, N, 2);                /* out */
    cli_bytes_add(&b, a->dram_mb, 1 << 20, 1); /* the bandwidth probe */
    return cli_bytes_check(&b, "the case", a->max_gib, err, len);
}

static int dp_case(const dp_args *a, const char *name, int64_t per_expert, int copies, double peak,
                   double dram)
{
    int64_t E = a->experts, K = a->k, N = a->n, M = E * per_expert;
    size_t wbytes = (size_t)(E * K * N);
    int8_t *x = malloc((size_t)(M * K)), *w = malloc(wbytes);
    float *ws = malloc(sizeof(float) * (size_t)(E * N)), *xs = malloc(sizeof(float) * (size_t)M);
    /* 64-byte aligned, as an engine's activation buffers are: whole output lines */
    uint16_t *out = aligned_alloc(64, (2 * (size_t)(M * N) + 63) / 64 * 64);
    int64_t *gl = malloc(sizeof(int64_t) * (size_t)E);
    if (!x || !w || !ws || !xs || !out || !gl) {
        fprintf(stderr, "qmoe bench down-proj: out of memory\n");
        return 1;
    }
    uint64_t s = 88172645463325252ull;
    for (size_t i = 0; i < wbytes; i++) w[i] = (int8_t)((s = s * 6364136223846793005ull + 1442695040888963407ull) >> 56);
    for (int64_t i = 0; i < M * K; i++) x[i] = (int8_t)((s = s * 6364136223846793005ull + 1) >> 56);
    for (int64_t i = 0; i < E * N; i++) ws[i] = 0.001f;
    for (int64_t i = 0; i < M; i++) xs[i] = 0.01f;
    for (int64_t e = 0; e < E; e++) gl[e] = per_expert;
    int64_t xsh[2] = {M, K}, wsh[5] = {E, N / 32, K / 16, 16, 32}, ssh[2] = {E, N}, msh[1] = {M},
            esh[1] = {E}, osh[2] = {M, N};
    if (copies > MAX_COPIES) copies = MAX_COPIES;
    int8_t *wc[MAX_COPIES] = {w};
    qmoe_tensor *tx = NULL, *tw[MAX_COPIES] = {NULL}, *ts = NULL, *tp = NULL, *tg = NULL, *to = NULL;
    qmoe_grouped_matmul_executor *ex[MAX_COPIES] = {NULL};
    qmoe_weights *pw[MAX_COPIES] = {NULL};
    qmoe_tensor *tv[MAX_COPIES] = {NULL};
    qmoe_status st = qmoe_tensor_create(xsh, 2, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, x, &tx);
    if (!st) st = qmoe_tensor_create(ssh, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, ws, &ts);
    if (!st) st = qmoe_tensor_create(msh, 1, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, xs, &tp);
    if (!st) st = qmoe_tensor_create(esh, 1, NULL, QMOE_DTYPE_INT64, QMOE_FORMAT_ND, gl, &tg);
    if (!st) st = qmoe_tensor_create(osh, 2, NULL, QMOE_DTYPE_BFLOAT16, QMOE_FORMAT_ND, out, &to);
    qmoe_grouped_matmul_options o = QMOE_GROUPED_MATMUL_OPTIONS_INIT;
    o.threads = a->threads;
    uint64_t wsz = 0;
    for (int c = 0; c < copies && !st; c++) {
        if (c && !(wc[c] = malloc(wbytes))) {
            fprintf(stderr, "qmoe bench down-proj: out of memory for weight copy %d\n", c);
            copies = c;
            break;
        }
        if (c) memcpy(wc[c], w, wbytes);
        st = qmoe_tensor_create(wsh, 5, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_FRACTAL_NZ, wc[c], &tw[c]);
        qmoe_tensor *use = tw[c];
        if (!st && a->prepacked) { /* made once, outside the timing */
            st = qmoe_weights_prepack(tw[c], ts, NULL, NULL, &pw[c]);
            if (!st) st = qmoe_weights_tensor(pw[c], &tv[c]);
            use = tv[c];
        }
        if (!st) st = qmoe_grouped_matmul_workspace_size(tx, use, NULL, ts, tp, tg, 1, to, &o, &wsz, &ex[c]);
    }
    void *work = st ? NULL : malloc(wsz);
    double ms[64];
    int n = a->repeat < 64 ? a->repeat : 64;
    for (int c = 0; c < copies && !st; c++) st = qmoe_grouped_matmul(work, wsz, ex[c], NULL); /* warm */
    for (int r = 0; r < n && !st; r++) {
        double t0 = dp_now();
        st = qmoe_grouped_matmul(work, wsz, ex[r % copies], NULL);
        ms[r] = (dp_now() - t0) * 1e3;
    }
    if (st) fprintf(stderr, "qmoe bench down-proj: %s: %s\n", name, qmoe_last_error());
    else {
        qsort(ms, (size_t)n, sizeof ms[0], dp_cmp);
        double med = ms[n / 2], gops = 2.0 * (double)M * (double)K * (double)N / (med * 1e-3) * 1e-9;
        double wgbps = (double)wbytes / (med * 1e-3) * 1e-9;
        printf("{\"op\":\"grouped_matmul\",\"case\":\"%s\",\"mode\":\"A8W8\",\"weight\":\"FRACTAL_NZ\","
               "\"out\":\"bfloat16\",\"weights\":\"%s\",\"weight_copies\":%d,\"E\":%lld,\"M\":%lld,\"K\":%lld,\"N\":%lld,\"threads\":%d,"
               "\"repeat\":%d,\"median_ms\":%.3f,\"min_ms\":%.3f,\"max_ms\":%.3f,\"gops\":%.1f,"
               "\"weight_gbps\":%.2f,\"peak_int8_gops\":%.1f,\"dram_read_gbps\":%.2f,"
               "\"pct_peak\":%.1f,\"pct_mem\":%.1f}\n",
               name, a->prepacked ? "prepacked" : "raw", copies, (long long)E, (long long)M, (long long)K, (long long)N, a->threads, n, med,
               ms[0], ms[n - 1], gops, wgbps, peak, dram, peak > 0 ? 100 * gops / peak : 0.0,
               dram > 0 ? 100 * wgbps / dram : 0.0);
        fflush(stdout);
    }
    for (int c = 0; c < copies; c++) {
        qmoe_grouped_matmul_executor_destroy(ex[c]);
        qmoe_tensor_destroy(tw[c]);
        qmoe_tensor_destroy(tv[c]);
        qmoe_weights_destroy(pw[c]);
        if (c) free(wc[c]);
    }
    qmoe_tensor *t_[] = {tx, ts, tp, tg, to};
    for (int i = 0; i < 5; i++) qmoe_tensor_destroy(t_[i]);
    free(x), free(w), free(ws), free(xs), free(out), free(gl), free(work);
    return st != QMOE_OK;
}

int bench_down_proj(int argc, char **argv)
{
    dp_args a = {4, 2048, 7168, 2048, 4, 1024, 12, 16, 20, 0, 0};
    for (int i = 1; i < argc; i += 2) {
        const char *opt = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(opt, "--prepacked")) {
            a.prepacked = 1;
            i--;
            continue;
        }
        if (!strcmp(opt, "--help") || !strcmp(opt, "-h")) {
            printf("usage: qmoe bench down-proj [--experts E] [--k K] [--n N] [--prefill T]\n"
                   "                            [--decode T] [--threads T] [--repeat R] [--dram-mb MB]\n"
                   "                            [--copies C] [--prepacked] [--max-gib N]\n"
                   "  N GiB: refuse a case needing more memory (default 16)\n"
                   "  C weight copies the decode case cycles through (default 12: past the L3)\n"
                   "  --prepacked: weights prepacked once (qmoe_weights_prepack), outside the timing\n"
                   "  T tokens per expert (0: skip the case); N a multiple of 32, K of 16\n");
            return 0;
        }
        char *end = NULL;
        long long x = v ? strtoll(v, &end, 10) : -1;
        if (!v || *end || x < 0 || x > (1ll << 30)) {
            fprintf(stderr, "qmoe bench down-proj: %s needs a number\n", opt);
            return 2;
        }
        if (!strcmp(opt, "--experts")) a.experts = x;
        else if (!strcmp(opt, "--k")) a.k = x;
        else if (!strcmp(opt, "--n")) a.n = x;
        else if (!strcmp(opt, "--prefill")) a.prefill = x;
        else if (!strcmp(opt, "--decode")) a.decode = x;
        else if (!strcmp(opt, "--threads")) a.threads = (int)x;
        else if (!strcmp(opt, "--repeat")) a.repeat = x < 1 ? 1 : (int)x;
        else if (!strcmp(opt, "--dram-mb")) a.dram_mb = x < 16 ? 16 : x;
        else if (!strcmp(opt, "--copies")) a.copies = x < 1 ? 1 : x;
        else if (!strcmp(opt, "--max-gib")) a.max_gib = x;
        else {
            fprintf(stderr, "qmoe bench down-proj: unknown option %s\n", opt);
            return 2;
        }
    }
    if (a.threads <= 0) a.threads = qmoe_device_online_cores();
    if (a.threads > 256) a.threads = 256;
    if (a.experts < 1 || a.k < 16 || a.k % 16 || a.n < 32 || a.n % 32) {
        fprintf(stderr, "qmoe bench down-proj: E >= 1, K a multiple of 16, N of 32\n");
        return 2;
    }
    /* both cases' sizes, checked before the probes and any allocation */
    char err[256];
    if ((a.prefill && dp_size(&a, a.prefill, 1, err, sizeof err)) ||
        (a.decode && dp_size(&a, a.decode, a.copies, err, sizeof err))) {
        fprintf(stderr, "qmoe bench down-proj: E=%lld K=%lld N=%lld: %s\n", (long long)a.experts, (long long)a.k,
                (long long)a.n, err);
        return 2;
    }
    const qmoe_kernel_entry *k = qmoe_kernel_lookup(QMOE_KERNEL_AUTO);
    const qmoe_gemm_isa *isa = k ? qmoe_gemm_isa_for(k->id) : NULL;
    if (!isa) isa = &qmoe_isa_portable;
    fprintf(stderr, "qmoe bench down-proj: measuring the %s peak and DRAM bandwidth on %d threads\n",
            isa->name, a.threads);
    double peak = dp_peak(isa, a.threads), dram = mo_dram(a.threads, a.dram_mb);
    int rc = 0;
    if (a.prefill) rc |= dp_case(&a, "prefill", a.prefill, 1, peak, dram);
    if (a.decode) rc |= dp_case(&a, "decode", a.decode, (int)a.copies, peak, dram);
    return rc;
}
