/*
 * qmoe bench moe-ops: the element-wise MoE operators at a prefill shape (default 4096 tokens x
 * 7168 hidden, bf16, top-8 of 256 experts), one JSON line per operator with the bytes it must
 * move, the median time, and the ratio to the DRAM read bandwidth measured in the same run.
 * These operators stream memory, so that ratio is their figure of merit (target: >= 50%).
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_moe_ops.h"
#include "cli_size.h"
#include "qmoe/moe_ops.h"
#include "qmoe/runtime.h"

typedef struct mo_args {
    int64_t tokens, hidden, experts, k;
    int repeat, threads;
    int64_t dram_mb, max_gib;
} mo_args;

static double mo_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---------------------------------------------------------------- DRAM read probe ----------- */

typedef struct mo_probe {
    const uint64_t *buf;
    size_t words;
    uint64_t sum;
    double seconds;
} mo_probe;

static void *mo_read(void *arg)
{
    mo_probe *p = arg;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    double t0 = mo_now();
    for (size_t i = 0; i + 4 <= p->words; i += 4) {
        s0 += p->buf[i];
        s1 += p->buf[i + 1];
        s2 += p->buf[i + 2];
        s3 += p->buf[i + 3];
    }
    p->seconds = mo_now() - t0;
    p->sum = s0 + s1 + s2 + s3;
    return NULL;
}

enum { MO_PROBES = 256 }; /* more readers do not read DRAM faster */

/* DRAM read GB/s on `threads` threads (at most MO_PROBES) over `mb` MB: best of 3 (0 when out
 * of memory). */
double mo_dram(int threads, int64_t mb)
{
    if (threads > MO_PROBES) threads = MO_PROBES; /* callers pass their own --threads */
    if (threads < 1) threads = 1;
    size_t bytes = (size_t)mb << 20, words = bytes / 8;
    uint64_t *buf = malloc(bytes);
    if (!buf) return 0;
    for (size_t i = 0; i < words; i++) buf[i] = i;
    mo_probe pr[MO_PROBES];
    pthread_t th[MO_PROBES];
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        for (int t = 0; t < threads; t++)
            pr[t] = (mo_probe){buf + words * (size_t)t / (size_t)threads,
                               words / (size_t)threads, 0, 0};
        int started = 1;
        for (int t = 1; t < threads; t++, started++)
            if (pthread_create(&th[t], NULL, mo_read, &pr[t])) break;
        mo_read(&pr[0]);
        double worst = pr[0].seconds;
        for (int t = 1; t < started; t++) {
            pthread_join(th[t], NULL);
            if (pr[t].seconds > worst) worst = pr[t].seconds;
        }
        if ((double)bytes / worst > best) best = (double)bytes / worst;
    }
    free(buf);
    return best * 1e-9;
}

/* ---------------------------------------------------------------- cases --------------------- */

typedef qmoe_status (*mo_run)(void *, uint64_t, qmoe_moe_executor *, qmoe_stream *);

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Times `repeat` runs after a warm one; prints the JSON line. */
static int mo_time(const char *name, const mo_args *a, mo_run run, qmoe_moe_executor *ex,
                   uint64_t ws, double bytes, double dram)
{
    void *work = ws ? malloc(ws) : NULL;
    double ms[64];
    int n = a->repeat < 64 ? a->repeat : 64;
    qmoe_status st = run(work, ws, ex, NULL);
    for (int r = 0; r < n && !st; r++) {
        double t0 = mo_now();
        st = run(work, ws, ex, NULL);
        ms[r] = (mo_now() - t0) * 1e3;
    }
    free(work);
    qmoe_moe_executor_destroy(ex);
    if (st) {
        fprintf(stderr, "qmoe bench moe-ops: %s: %s\n", name, qmoe_last_error());
        return 1;
    }
    qsort(ms, (size_t)n, sizeof ms[0], cmp_d);
    double med = ms[n / 2], gbps = bytes / (med * 1e-3) * 1e-9;
    printf("{\"op\":\"%s\",\"tokens\":%lld,\"hidden\":%lld,\"experts\":%lld,\"k\":%lld,"
           "\"threads\":%d,\"repeat\":%d,\"median_ms\":%.3f,\"min_ms\":%.3f,\"bytes\":%.0f,"
           "\"gbps\":%.2f,\"dram_read_gbps\":%.2f,\"pct_mem\":%.1f}\n",
           name, (long long)a->tokens, (long long)a->hidden, (long long)a->experts,
           (long long)a->k, a->threads, n, med, ms[0], bytes, gbps, dram,
           dram > 0 ? 100.0 * gbps / dram : 0.0);
    fflush(stdout);
    return 0;
}

/* The tensors of the run, destroyed together at the end. */
static qmoe_tensor *mo_made[64];
static int mo_nmade;

static qmoe_tensor *mo_t(void *data, qmoe_dtype dt, int nd, int64_t d0, int64_t d1)
{
    int64_t shape[2] = {d0, d1};
    qmoe_tensor *t = NULL;
    if (mo_nmade == 64 || qmoe_tensor_create(shape, nd, NULL, dt, QMOE_FORMAT_ND, data, &t))
        return NULL;
    return mo_made[mo_nmade++] = t;
}

static uint16_t mo_bf16(float f)
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return (uint16_t)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}

static int mo_parse(int argc, char **argv, mo_args *a)
{
    *a = (mo_args){4096, 7168, 256, 8, 5, 0, 512, 16};
    for (int i = 1; i < argc; i += 2) { /* every option takes one value */
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t *dst = !strcmp(o, "--tokens") ? &a->tokens : !strcmp(o, "--hidden") ? &a->hidden
                     : !strcmp(o, "--experts") ? &a->experts : !strcmp(o, "--k") ? &a->k
                     : !strcmp(o, "--dram-mb") ? &a->dram_mb : !strcmp(o, "--max-gib") ? &a->max_gib : NULL;
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            printf("usage: qmoe bench moe-ops [--tokens M] [--hidden H] [--experts E] [--k K]\n"
                   "                          [--threads T] [--repeat R] [--dram-mb MB]\n"
                   "                          [--max-gib N]  (refuse more memory; default 16)\n"
                   "One JSON line per element-wise MoE operator: median time, bytes moved and\n"
                   "the ratio to the DRAM read bandwidth measured in the same run.\n");
            return 1;
        }
        char *end = NULL;
        long long x = v ? strtoll(v, &end, 10) : 0;
        if (!v || !end || *end || x < 1 || x > (1ll << 24)) {
            fprintf(stderr, "qmoe bench moe-ops: bad option or value '%s'\n", o);
            return -1;
        }
        if (dst) *dst = x;
        else if (!strcmp(o, "--threads")) a->threads = (int)x;
        else if (!strcmp(o, "--repeat")) a->repeat = (int)x;
        else {
            fprintf(stderr, "qmoe bench moe-ops: unknown option '%s'\n", o);
            return -1;
        }
    }
    if (a->k > 32 || a->k > a->experts || a->experts > 2048 || a->experts % 8) {
        fprintf(stderr, "qmoe bench moe-ops: needs k <= 32, k <= experts <= 2048, experts %% 8 == 0\n");
        return -1;
    }
    /* every buffer of bench_moe_ops, before any is allocated */
    int64_t M = a->tokens, H = a->hidden, MK = M * a->k; /* each <= 2^24, k <= 32: no overflow */
    cli_bytes b = {0};
    cli_bytes_add(&b, M, 2 * H, 2);
    cli_bytes_add(&b, MK, H, 2);
    cli_bytes_add(&b, M, H, 2);
    cli_bytes_add(&b, M, a->experts, 2);
    cli_bytes_add(&b, MK, H, 1);
    cli_bytes_add(&b, MK, 5 * 4, 1);
    cli_bytes_add(&b, a->experts, 8, 1);
    cli_bytes_add(&b, a->dram_mb, 1 << 20, 1);
    char err[256];
    if (cli_bytes_check(&b, "the buffers", a->max_gib, err, sizeof err)) {
        fprintf(stderr, "qmoe bench moe-ops: --tokens %lld --hidden %lld --k %lld: %s\n", (long long)M,
                (long long)H, (long long)a->k, err);
        return -1;
    }
    return 0;
}

int bench_moe_ops(int argc, char **argv)
{
    mo_args a;
    int r = mo_parse(argc, argv, &a);
    if (r) return r > 0 ? 0 : 2;
    if (a.threads <= 0) a.threads = qmoe_device_online_cores();
    if (a.threads > 256) a.threads = 256;
    int64_t M = a.tokens, H = a.hidden, E = a.experts, K = a.k, MK = M * K;
    fprintf(stderr, "qmoe bench moe-ops: measuring the DRAM read bandwidth on %d threads\n", a.threads);
    double dram = mo_dram(a.threads, a.dram_mb);
    uint16_t *x = malloc((size_t)(M * 2 * H) * 2), *rows = malloc((size_t)(MK * H) * 2);
    uint16_t *out = malloc((size_t)(M * H) * 2), *logits = malloc((size_t)(M * E) * 2);
    int8_t *q = malloc((size_t)(MK * H));
    float *scale = malloc((size_t)MK * 4), *w = malloc((size_t)MK * 4);
    int32_t *idx = malloc((size_t)MK * 4), *ri = malloc((size_t)MK * 4), *rr = malloc((size_t)MK * 4);
    int64_t *tok = malloc((size_t)E * 8);
    if (!x || !rows || !out || !logits || !q || !scale || !w || !idx || !ri || !rr || !tok) {
        fprintf(stderr, "qmoe bench moe-ops: out of memory\n");
        return 1;
    }
    uint64_t s = 12345;
    for (int64_t i = 0; i < M * 2 * H; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = mo_bf16((float)((int64_t)(s >> 40) - (1 << 23)) / (float)(1 << 22));
    }
    for (int64_t i = 0; i < MK * H; i++) rows[i] = x[i % (M * 2 * H)];
    for (int64_t i = 0; i < M * E; i++) logits[i] = x[(i * 7) % (M * 2 * H)];
    qmoe_moe_options o = QMOE_MOE_OPTIONS_INIT;
    o.threads = a.threads;
    uint64_t ws = 0;
    qmoe_moe_executor *ex = NULL;
    int rc = 0;

    /* gating first: its expert ids feed the routing cases */
    qmoe_moe_gating_attrs ga = {K, 4, 8, 1, 0, 1, 0, 2.5, 1e-20};
    qmoe_tensor *tl = mo_t(logits, QMOE_DTYPE_BFLOAT16, 2, M, E), *tw = mo_t(w, QMOE_DTYPE_FLOAT32, 2, M, K);
    qmoe_tensor *tid = mo_t(idx, QMOE_DTYPE_INT32, 2, M, K);
    if (qmoe_moe_gating_top_k_workspace_size(tl, NULL, &ga, mo_t(out, QMOE_DTYPE_BFLOAT16, 2, M, K),
                                             tid, NULL, &o, &ws, &ex) == QMOE_OK)
        rc |= mo_time("moe_gating_top_k", &a, qmoe_moe_gating_top_k, ex, ws,
                      (double)(M * E * 2 + M * K * 6), dram);
    else rc |= 1;
    if (!rc && qmoe_moe_gating_top_k_softmax_workspace_size(
                   tl, NULL, K, mo_t(q, QMOE_DTYPE_BFLOAT16, 2, M, K), tid,
                   mo_t(rr, QMOE_DTYPE_INT32, 2, M, K), &o, &ws, &ex) == QMOE_OK)
        rc |= mo_time("moe_gating_top_k_softmax", &a, qmoe_moe_gating_top_k_softmax, ex, ws,
                      (double)(M * E * 2 + M * K * 10), dram);

    for (int64_t i = 0; i < MK; i++) w[i] = 1.0f / (float)K; /* finalize's weights */
    qmoe_tensor *tx = mo_t(x, QMOE_DTYPE_BFLOAT16, 2, M, H);
    if (!rc && qmoe_dynamic_quant_workspace_size(tx, NULL, mo_t(q, QMOE_DTYPE_INT8, 2, M, H),
                                                 mo_t(scale, QMOE_DTYPE_FLOAT32, 1, M, 0), &o, &ws,
                                                 &ex) == QMOE_OK)
        rc |= mo_time("dynamic_quant", &a, qmoe_dynamic_quant, ex, ws, (double)(M * H * 3 + M * 4), dram);

    qmoe_moe_routing_attrs ra = {.expert_num = E, .tokens_mode = QMOE_MOE_TOKENS_CUMSUM,
                                 .quant_mode = QMOE_MOE_QUANT_DYNAMIC};
    if (!rc && qmoe_moe_init_routing_workspace_size(
                   tx, tid, NULL, NULL, &ra, mo_t(q, QMOE_DTYPE_INT8, 2, MK, H),
                   mo_t(ri, QMOE_DTYPE_INT32, 1, MK, 0), mo_t(tok, QMOE_DTYPE_INT64, 1, E, 0),
                   mo_t(scale, QMOE_DTYPE_FLOAT32, 1, MK, 0), &o, &ws, &ex) == QMOE_OK)
        rc |= mo_time("moe_init_routing_quant", &a, qmoe_moe_init_routing, ex, ws,
                      (double)(M * H * 2 + MK * H + MK * 12), dram);
    ra.quant_mode = QMOE_MOE_QUANT_NONE;
    if (!rc && qmoe_moe_init_routing_workspace_size(
                   tx, tid, NULL, NULL, &ra, mo_t(rows, QMOE_DTYPE_BFLOAT16, 2, MK, H),
                   mo_t(ri, QMOE_DTYPE_INT32, 1, MK, 0), mo_t(tok, QMOE_DTYPE_INT64, 1, E, 0),
                   NULL, &o, &ws, &ex) == QMOE_OK)
        rc |= mo_time("moe_init_routing", &a, qmoe_moe_init_routing, ex, ws,
                      (double)(M * H * 2 + MK * H * 2 + MK * 8), dram);

    if (!rc && qmoe_moe_finalize_routing_workspace_size(
                   mo_t(rows, QMOE_DTYPE_BFLOAT16, 2, MK, H), mo_t(ri, QMOE_DTYPE_INT32, 1, MK, 0),
                   tx, NULL, NULL, tw, tid, 2, mo_t(out, QMOE_DTYPE_BFLOAT16, 2, M, H), &o, &ws,
                   &ex) == QMOE_OK)
        rc |= mo_time("moe_finalize_routing", &a, qmoe_moe_finalize_routing, ex, ws,
                      (double)(MK * H * 2 + M * H * 4 + MK * 8), dram);

    if (!rc && qmoe_swiglu_workspace_size(mo_t(x, QMOE_DTYPE_BFLOAT16, 2, M, 2 * H), -1,
                                          mo_t(out, QMOE_DTYPE_BFLOAT16, 2, M, H), &o, &ws,
                                          &ex) == QMOE_OK)
        rc |= mo_time("swiglu", &a, qmoe_swiglu, ex, ws, (double)(M * H * 6), dram);
    if (rc == 0 && qmoe_last_error()[0])
        fprintf(stderr, "qmoe bench moe-ops: %s\n", qmoe_last_error());
    for (int i = 0; i < mo_nmade; i++) qmoe_tensor_destroy(mo_made[i]);
    free(x), free(rows), free(out), free(logits), free(q), free(scale), free(w);
    free(idx), free(ri), free(rr), free(tok);
    return rc;
}
