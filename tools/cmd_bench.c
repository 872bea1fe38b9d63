/*
 * qmoe bench: the operator on named shapes through the public two-phase API, one JSON line per
 * case, with the machine's limits measured in the same run by built-in micro-benchmarks: the
 * peak int8 rate of the selected kernel's dot-product instruction (a register-only loop on every
 * thread) and the DRAM read bandwidth (a streaming read of a buffer far larger than the caches,
 * on every thread), each probed before and after the timed runs, the higher value kept.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "case.h"
#include "cli_runtime.h"
#include "commands.h"
#include "bench.h"
#include "qmoe/runtime.h"
#include "bench_down_proj.h"
#include "bench_moe_ops.h"
#include "bench_moe_layer.h"
#ifdef QMOE_HAVE_BENCH_PEERS
#include "peer_mkl.h"
#include "peer_onednn.h"
#endif

typedef struct bench_shape {
    const char *name;
    int64_t E, M, K, N;
    int even; /* exactly M/E tokens per expert (decode) instead of an uneven spread */
} bench_shape;

static const bench_shape named[] = {
    {"prefill", 4, 8192, 7168, 4096, 0},
    {"decode", 8, 32, 7168, 4096, 1},
    {"mid", 8, 512, 2048, 1536, 0},
    {"mid64", 8, 512, 2048, 1536, 1},    /* the mid: E=8 x 64 rows each */
    {"qwen3", 128, 4096, 2048, 1536, 1}, /* Qwen3-30B-A3B gate/up: E=128 x 32 rows */
};

/* The peers of --peer: a bare int8 GEMM per expert on weights prepared once, each loaded at run
 * time (bench/peer_open.c); one timing call shape, so every peer's line is written alike. */
typedef int (*peer_time_fn)(const int64_t *rows, int64_t E, int64_t K, int64_t N, int threads,
                            int repeat, double *median_ms);
typedef struct bench_peer {
    const char *name, *what;
    peer_time_fn time;
} bench_peer;

static const bench_peer peers[] = {
#ifdef QMOE_HAVE_BENCH_PEERS
    {"onednn", "oneDNN's int8 matmul", peer_onednn_time},
    {"mkl", "oneMKL's packed int8 GEMM", peer_mkl_time},
#else
    {"onednn", "oneDNN's int8 matmul", NULL},
    {"mkl", "oneMKL's packed int8 GEMM", NULL},
#endif
};

typedef struct bench_args {
    bench_shape shapes[16];
    int nshapes;
    int a8w4;
    int64_t groups;
    int scale_f16; /* --scale-dtype: 0 float32, 1 float16, 2 bfloat16 */
    int repeat;
    const bench_peer *peer; /* --peer, or NULL */
    int raw;  /* time the raw-weight path instead of prepacked weights */
    int even; /* --even: custom shapes get exactly M/E tokens per expert */
    int64_t dram_mb;
    cli_runtime rt;
} bench_args;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: qmoe bench [SHAPE...] [options]\n\n"
            "Times the operator (FRACTAL_NZ weights, median of repeats) and prints one JSON line\n"
            "per shape with int8 GOPS, weight bytes read per second, and their ratios to the peak\n"
            "int8 rate and DRAM read bandwidth measured in the same run.\n\n"
            "  SHAPE                 prefill (E=4 M=8192 K=7168 N=4096, the default), decode (E=8,\n"
            "                        4 tokens each, K=7168 N=4096), mid (E=8 M=512 K=2048 N=1536),\n"
            "                        mid64 (mid with 64 tokens each), qwen3 (Qwen3-30B-A3B gate/up:\n"
            "                        E=128, 32 tokens each, K=2048 N=1536)\n"
            "  --shape E,M,K,N       any shape (repeatable)\n"
            "  --even                custom shapes: exactly M/E tokens per expert (default: uneven)\n"
            "  --mode a8w8|a8w4      weight type (default a8w4: int32-packed int4 NZ)\n"
            "  --groups G            per-group weight scale [E,G,N] (default: per-channel)\n"
            "  --scale-dtype f32|f16|bf16  the weight scale's dtype (default f32; 16-bit ones stay\n"
            "                        16-bit in prepacked weights)\n"
            "  --repeat R            timed runs after one warm-up (default 5)\n"
            "  --dram-mb MB          buffer of the bandwidth probe (default 1024)\n"
            "  --raw                 time the raw-weight path (default: weights prepacked once,\n"
            "                        outside the timing; each line says \"weights\")\n"
            "  --peer onednn|mkl     also time oneDNN's int8 matmul or oneMKL's packed int8 GEMM,\n"
            "                        expert by expert, weights prepared outside the timing (both\n"
            "                        found at run time in the bench venv: make bench-venv)\n%s",
            cli_runtime_help());
}

static int add_shape(bench_args *a, bench_shape s)
{
    if (a->nshapes == (int)(sizeof a->shapes / sizeof a->shapes[0])) {
        fprintf(stderr, "qmoe bench: too many shapes\n");
        return -1;
    }
    a->shapes[a->nshapes++] = s;
    return 0;
}

static int parse_i64(const char *opt, const char *text, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    long long v = strtoll(text, &end, 10);
    if (*text == '\0' || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "qmoe bench: %s needs an integer in [%lld, %lld], got '%s'\n", opt,
                (long long)lo, (long long)hi, text);
        return -1;
    }
    *out = v;
    return 0;
}

/* "E,M,K,N": four integers (strtoll, so an out-of-range one is caught, unlike with sscanf). */
static int parse_dims(const char *text, int64_t d[4])
{
    const char *p = text;
    for (int i = 0; i < 4; i++) {
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || *end != (i < 3 ? ',' : '\0')) return -1;
        d[i] = v;
        p = end + 1;
    }
    return 0;
}

/* Returns 0 to go on, 1 after --help, -1 after an error message. */
static int parse(int argc, char **argv, bench_args *a)
{
    memset(a, 0, sizeof *a);
    a->a8w4 = 1;
    a->repeat = 5;
    a->dram_mb = 1024;
    for (int i = 1; i < argc;) {
        int r = cli_runtime_parse(&a->rt, argc, argv, &i);
        if (r < 0) return -1;
        if (r > 0) continue;
        const char *o = argv[i];
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            usage(stdout);
            return 1;
        }
        if (!strcmp(o, "--raw") || !strcmp(o, "--even")) {
            if (o[2] == 'r') a->raw = 1;
            else a->even = 1;
            i++;
            continue;
        }
        int found = 0;
        for (size_t s = 0; s < sizeof named / sizeof named[0]; s++)
            if (!strcmp(o, named[s].name)) {
                if (add_shape(a, named[s])) return -1;
                found = 1;
            }
        if (found) {
            i++;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "qmoe bench: unknown argument or missing value: '%s'\n", o);
            return -1;
        }
        const char *v = argv[i + 1];
        int64_t n;
        if (!strcmp(o, "--shape")) {
            int64_t d[4];
            if (parse_dims(v, d) || d[0] < 1 || d[1] < 0 || d[2] < 1 || d[3] < 2 || d[0] > 4096 ||
                d[1] > (1ll << 24) || d[2] > 65535 || d[3] > 10240) {
                fprintf(stderr, "qmoe bench: --shape needs E,M,K,N (E>=1, K<65536, N<=10240)\n");
                return -1;
            }
            if (add_shape(a, (bench_shape){"custom", d[0], d[1], d[2], d[3], -1})) return -1;
        } else if (!strcmp(o, "--mode")) {
            if (strcmp(v, "a8w8") && strcmp(v, "a8w4")) {
                fprintf(stderr, "qmoe bench: --mode is a8w8 or a8w4, got '%s'\n", v);
                return -1;
            }
            a->a8w4 = !strcmp(v, "a8w4");
        } else if (!strcmp(o, "--groups")) {
            if (parse_i64(o, v, 0, 65535, &a->groups)) return -1;
        } else if (!strcmp(o, "--scale-dtype")) {
            static const char *const names[] = {"f32", "f16", "bf16"};
            a->scale_f16 = -1;
            for (int k = 0; k < 3; k++)
                if (!strcmp(v, names[k])) a->scale_f16 = k;
            if (a->scale_f16 < 0) {
                fprintf(stderr, "qmoe bench: --scale-dtype is f32, f16 or bf16, got '%s'\n", v);
                return -1;
            }
        } else if (!strcmp(o, "--repeat")) {
            if (parse_i64(o, v, 1, 100000, &n)) return -1;
            a->repeat = (int)n;
        } else if (!strcmp(o, "--dram-mb")) {
            if (parse_i64(o, v, 16, 1 << 20, &a->dram_mb)) return -1;
        } else if (!strcmp(o, "--peer")) {
            a->peer = NULL;
            for (size_t p = 0; p < sizeof peers / sizeof peers[0]; p++)
                if (!strcmp(v, peers[p].name)) a->peer = &peers[p];
            if (!a->peer) {
                fprintf(stderr, "qmoe bench: --peer is onednn or mkl, got '%s'\n", v);
                return -1;
            }
        } else {
            fprintf(stderr, "qmoe bench: unknown option '%s' (qmoe bench --help)\n", o);
            return -1;
        }
        i += 2;
    }
    if (!a->nshapes) add_shape(a, named[0]);
    for (int s = 0; s < a->nshapes; s++)
        if (a->shapes[s].even < 0) a->shapes[s].even = a->even;
    return 0;
}

/* ---------------------------------------------------------------- machine limits ------------ */

typedef struct probe {
    const qmoe_gemm_isa *isa;
    uint64_t iters, ops;
    const uint64_t *buf;
    size_t words;
    uint64_t sum;
    double seconds, cpu_seconds;
} probe;

static double thread_cpu(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void *peak_thread(void *arg)
{
    probe *p = arg;
    double t0 = now(), c0 = thread_cpu();
    p->ops = p->isa->peak_loop(p->iters);
    p->seconds = now() - t0;
    p->cpu_seconds = thread_cpu() - c0;
    return NULL;
}

static void *read_thread(void *arg)
{
    probe *p = arg;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    double t0 = now();
    for (size_t i = 0; i + 4 <= p->words; i += 4) {
        s0 += p->buf[i];
        s1 += p->buf[i + 1];
        s2 += p->buf[i + 2];
        s3 += p->buf[i + 3];
    }
    p->seconds = now() - t0;
    p->sum = s0 + s1 + s2 + s3;
    return NULL;
}

/* Runs fn on `threads` threads at once (the caller is thread 0); returns the slowest time. */
static double run_threads(int threads, probe *pr, void *(*fn)(void *))
{
    pthread_t th[256];
    int started = 1;
    for (int t = 1; t < threads; t++, started++)
        if (pthread_create(&th[t], NULL, fn, &pr[t])) break;
    fn(&pr[0]);
    double worst = pr[0].seconds;
    for (int t = 1; t < started; t++) {
        pthread_join(th[t], NULL);
        if (pr[t].seconds > worst) worst = pr[t].seconds;
    }
    return worst;
}

/* The peak as if each thread had its core to itself: the sum over threads of operations per
 * second of the thread's own CPU time, best over every probe of the run. On a shared machine it
 * shows the machine's rate while the wall-clock peak (what pct_peak divides by) shows the share
 * of it this run had. */
static double peak_cpu_gops;

/* Peak int8 GOPS of the kernel's instruction set on `threads` threads: best of 3. */
static double measure_peak(const qmoe_gemm_isa *isa, int threads)
{
    probe pr[256];
    uint64_t iters = 1;
    for (;;) { /* size one round to ~50 ms on one thread */
        double t0 = now();
        isa->peak_loop(iters);
        if (now() - t0 > 0.05 || iters > (1ull << 40)) break;
        iters *= 2;
    }
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        uint64_t ops = 0;
        for (int t = 0; t < threads; t++) pr[t] = (probe){isa, iters, 0, NULL, 0, 0, 0, 0};
        double sec = run_threads(threads, pr, peak_thread), cpu_rate = 0;
        for (int t = 0; t < threads; t++) {
            ops += pr[t].ops;
            if (pr[t].cpu_seconds > 0) cpu_rate += (double)pr[t].ops / pr[t].cpu_seconds * 1e-9;
        }
        if ((double)ops / sec > best) best = (double)ops / sec;
        if (cpu_rate > peak_cpu_gops) peak_cpu_gops = cpu_rate;
    }
    return best * 1e-9;
}

/* DRAM read GB/s on `threads` threads over `mb` megabytes: best of 3 passes (0 when the
 * buffer cannot be allocated). */
static double measure_dram(int threads, int64_t mb)
{
    size_t bytes = (size_t)mb << 20, words = bytes / 8;
    uint64_t *buf = malloc(bytes);
    if (!buf) return 0;
    for (size_t i = 0; i < words; i++) buf[i] = i; /* touch: real pages, not the zero page */
    probe pr[256];
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        for (int t = 0; t < threads; t++) {
            size_t w0 = words * (size_t)t / (size_t)threads, w1 = words * (size_t)(t + 1) / (size_t)threads;
            pr[t] = (probe){NULL, 0, 0, buf + w0, w1 - w0, 0, 0, 0};
        }
        double sec = run_threads(threads, pr, read_thread);
        if ((double)bytes / sec > best) best = (double)bytes / sec;
    }
    free(buf);
    return best * 1e-9;
}

/* ---------------------------------------------------------------- one case ------------------ */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int bench_case(const bench_args *a, const bench_shape *s, int threads, double *peak,
                      double *dram)
{
    char err[CASE_ERR_LEN];
    gen_params g;
    gen_defaults(&g);
    g.E = s->E, g.M = s->M, g.K = s->K, g.N = s->N;
    g.a8w4 = a->a8w4;
    g.groups = a->groups;
    static const gen_scale_dtype sdt[] = {GEN_SCALE_F32, GEN_SCALE_F16, GEN_SCALE_BF16};
    g.scale_dtype = sdt[a->scale_f16];
    g.weight_format = GEN_WEIGHT_NZ;
    fprintf(stderr, "qmoe bench: %s E=%lld M=%lld K=%lld N=%lld %s: generating the case\n",
            s->name, (long long)s->E, (long long)s->M, (long long)s->K, (long long)s->N,
            a->a8w4 ? "a8w4" : "a8w8");
    op_case c;
    qmoe_grouped_matmul_swiglu_quant_options check = {0};
    cli_runtime_options(&a->rt, &check);
    /* phase one on the shapes first: a case the operator refuses costs no memory */
    if (case_generate_headers(&g, &c, err) || case_check(&c, &check, err) ||
        case_generate(&g, &c, err)) {
        fprintf(stderr, "qmoe bench: %s\n", err);
        return 1;
    }
    int64_t *gl = c.in[CASE_GROUP_LIST].data;
    if (s->even && c.group_list_type == QMOE_GROUP_LIST_CUMSUM)
        for (int64_t e = 0; e < s->E; e++) gl[e] = (e + 1) * (s->M / s->E);
    int64_t ends[4096], busy = 0, prev = 0;
    case_group_ends(&c, ends);
    for (int64_t e = 0; e < c.in[CASE_GROUP_LIST].count; e++) {
        busy += ends[e] > prev;
        prev = ends[e];
    }
    int64_t rows = prev;

    cli_runtime rt = a->rt;
    qmoe_grouped_matmul_swiglu_quant_options opt;
    memset(&opt, 0, sizeof opt);
    qmoe_stream *stream = NULL;
    if (cli_runtime_begin(&rt, &opt, &stream)) {
        case_free(&c);
        return 1;
    }
    case_exec ex = {0};
    int rc = 1;
    double *ms = calloc((size_t)a->repeat, sizeof(double));
    if (!a->raw)
        fprintf(stderr, "qmoe bench: %s: prepacking the weights (outside the timing)\n", s->name);
    if (!ms || (a->raw ? case_plan(&c, &opt, &ex, err) : case_plan_prepacked(&c, &opt, &ex, err))) {
        fprintf(stderr, "qmoe bench: %s\n", ms ? err : "out of memory");
        goto done; /* case_plan may have allocated the outputs */
    }
    qmoe_kernel kid = qmoe_grouped_matmul_swiglu_quant_executor_kernel(ex.executor);
    const qmoe_gemm_isa *isa = qmoe_gemm_isa_for(kid);
    if (!isa) isa = &qmoe_isa_portable;
    if (*peak == 0) {
        fprintf(stderr, "qmoe bench: measuring the %s peak and DRAM bandwidth on %d threads\n",
                isa->name, threads);
        *peak = measure_peak(isa, threads);
        *dram = measure_dram(threads, a->dram_mb);
    }
    for (int r = -1; r < a->repeat; r++) {
        double t0 = now();
        qmoe_status sync = QMOE_OK;
        if (case_launch(&c, &ex, stream, err) ||
            (stream && (sync = qmoe_stream_synchronize(stream)) != QMOE_OK)) {
            if (sync) case_error(&c, sync, err); /* a launch failure has set err already */
            fprintf(stderr, "qmoe bench: %s\n", err);
            goto done;
        }
        double dt = now() - t0;
        if (r >= 0) ms[r] = dt * 1e3;
        fprintf(stderr, "qmoe bench: %s: run %d/%d: %.3f ms%s\n", s->name, r + 1, a->repeat,
                dt * 1e3, r < 0 ? " (warm-up)" : "");
    }
    /* The limits are probed before and after the timed runs and the higher value kept: on a
     * shared machine a probe that ran while another process held a core would understate them. */
    fprintf(stderr, "qmoe bench: measuring the %s peak and DRAM bandwidth on %d threads\n",
            isa->name, threads);
    double pk = measure_peak(isa, threads), dr = measure_dram(threads, a->dram_mb);
    if (pk > *peak) *peak = pk;
    if (dr > *dram) *dram = dr;
    qsort(ms, (size_t)a->repeat, sizeof(double), cmp_double);
    double med = a->repeat % 2 ? ms[a->repeat / 2] : 0.5 * (ms[a->repeat / 2 - 1] + ms[a->repeat / 2]);
    double gops = 2.0 * (double)rows * (double)s->K * (double)s->N / (med * 1e-3) * 1e-9;
    double wbytes = (double)busy * (double)s->K * (double)s->N * (a->a8w4 ? 0.5 : 1.0);
    double wgbps = wbytes / (med * 1e-3) * 1e-9;
    char peer[160] = "";
    if (a->peer && !a->peer->time) {
        fprintf(stderr, "qmoe bench: --peer %s: this build has no peers (bench/ was left out); "
                        "peer skipped\n", a->peer->name);
    } else if (a->peer) {
        int64_t per[4096], at = 0;
        for (int64_t e = 0; e < c.in[CASE_GROUP_LIST].count; e++) {
            per[e] = ends[e] - at;
            at = ends[e];
        }
        double pms;
        fprintf(stderr, "qmoe bench: %s: timing %s, expert by expert\n", s->name, a->peer->what);
        if (a->peer->time(per, c.in[CASE_GROUP_LIST].count, s->K, s->N, threads, a->repeat,
                          &pms) == 0)
            snprintf(peer, sizeof peer,
                     ",\"peer\":\"%s\",\"peer_median_ms\":%.3f,\"peer_int8_gops\":%.1f,"
                     "\"speedup_vs_peer\":%.2f",
                     a->peer->name, pms,
                     2.0 * (double)rows * (double)s->K * (double)s->N / (pms * 1e-3) * 1e-9,
                     pms / med);
    }
    printf("{\"shape\":\"%s\",\"E\":%lld,\"M\":%lld,\"K\":%lld,\"N\":%lld,\"mode\":\"%s\","
           "\"groups\":%lld,\"scale_dtype\":\"%s\",\"weight\":\"nz\",\"weights\":\"%s\",\"kernel\":\"%s\",\"threads\":%d,\"repeat\":%d,"
           "\"median_ms\":%.3f,\"best_ms\":%.3f,\"int8_gops\":%.1f,\"weight_gbps\":%.2f,"
           "\"peak_int8_gops\":%.1f,\"peak_cpu_int8_gops\":%.1f,\"dram_read_gbps\":%.2f,"
           "\"pct_peak\":%.1f,\"pct_mem\":%.1f%s}\n",
           s->name, (long long)s->E, (long long)s->M, (long long)s->K, (long long)s->N,
           a->a8w4 ? "a8w4" : "a8w8", (long long)a->groups,
           a->scale_f16 == 1 ? "f16" : a->scale_f16 == 2 ? "bf16" : "f32", a->raw ? "raw" : "prepacked",
           qmoe_kernel_name(kid), threads,
           a->repeat, med, ms[0], gops, wgbps, *peak, peak_cpu_gops, *dram,
           *peak > 0 ? 100.0 * gops / *peak : 0.0,
           *dram > 0 ? 100.0 * wgbps / *dram : 0.0, peer);
    fflush(stdout);
    rc = 0;
done:
    free(ms);
    case_exec_free(&ex);
    if (rc) {
        cli_runtime_free(&rt); /* a failed run writes no trace */
    } else if (cli_runtime_end(&rt) != QMOE_OK) {
        fprintf(stderr, "qmoe bench: %s\n", qmoe_last_error());
        rc = 1;
    }
    case_free(&c);
    return rc;
}

int cmd_bench(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "moe-ops")) return bench_moe_ops(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "moe")) return bench_moe_layer(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "down-proj")) return bench_down_proj(argc - 1, argv + 1);
    bench_args a;
    int r = parse(argc, argv, &a);
    if (r) return r > 0 ? 0 : 2;
    int threads = a.rt.threads;
    if (threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (int)n : 1;
    }
    if (threads > 256) threads = 256;
    double peak = 0, dram = 0;
    for (int i = 0; i < a.nshapes; i++)
        if (bench_case(&a, &a.shapes[i], threads, &peak, &dram)) return 1;
    return 0;
}
