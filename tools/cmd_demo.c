/*
 * qmoe demo (what `make run` runs): the vendor sample's workload built in memory, run through
 * the two-phase API with the fastest kernel, timed, and checked row by row against the
 * reference kernel run on single-row views (so the reference computes only the sampled rows).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "case.h"
#include "cli_args.h"
#include "cli_runtime.h"
#include "commands.h"
#include "gen_args.h"
#include "qmoe/runtime.h"

typedef struct demo_args {
    gen_params gen;
    int64_t verify_rows;
    qmoe_kernel kernel;
    cli_runtime rt;
} demo_args;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: qmoe demo [options]\n\n"
            "Builds the vendor sample's workload, runs it with the fastest kernel (once untimed,\n"
            "then timed), prints the execute time and int8 GOPS (2*M*K*N / time), and verifies\n"
            "sampled rows against the reference kernel (output within +-1, outputScale within\n"
            "1e-6 relative).\n\n%s"
            "  --verify-rows R           rows to verify, spread over the experts (default 16)\n"
            "  --kernel NAME             kernel to time (default auto)\n%s",
            gen_args_help(), cli_runtime_help());
}

/* Returns 0 to go on, 1 after --help, -1 after an error message. */
static int parse(int argc, char **argv, demo_args *a)
{
    for (int i = 1; i < argc;) {
        const char *opt = argv[i], *val;
        int r = gen_args_parse("demo", argc, argv, &i, &a->gen);
        if (!r) r = cli_runtime_parse(&a->rt, argc, argv, &i);
        if (r < 0) return -1;
        if (r) continue;
        if (!strcmp(opt, "--help") || !strcmp(opt, "-h")) {
            usage(stdout);
            return 1;
        }
        if (strcmp(opt, "--verify-rows") && strcmp(opt, "--kernel")) {
            fprintf(stderr, "qmoe demo: %s: unknown option (see qmoe demo --help)\n", opt);
            return -1;
        }
        if (args_value("demo", argc, argv, &i, &val)) return -1;
        if (!strcmp(opt, "--kernel") ? args_kernel("demo", val, &a->kernel)
                                     : args_int("demo", opt, val, 0, 1 << 20, &a->verify_rows))
            return -1;
    }
    return 0;
}

/* Row m of the timed run against the reference's single row; prints why on a mismatch. */
static int row_matches(const case_exec *fast, const case_exec *ref, int64_t m, int64_t e)
{
    int64_t n2 = ref->out.shape[1];
    const int8_t *q = (const int8_t *)fast->out.data + m * n2, *q_ref = ref->out.data;
    float s = ((const float *)fast->out_scale.data)[m], s_ref = *(const float *)ref->out_scale.data;
    int worst = 0;
    for (int64_t j = 0; j < n2; j++) {
        int d = abs(q[j] - q_ref[j]);
        if (d > worst) worst = d;
    }
    int scale_ok =
        fabsf(s - s_ref) <= 1e-6f * fmaxf(fabsf(s), fabsf(s_ref)) || (isnan(s) && isnan(s_ref));
    if (worst <= 1 && scale_ok) return 1;
    fprintf(stderr,
            "qmoe demo: row %lld (expert %lld): output differs by up to %d, outputScale %.9g vs "
            "reference %.9g\n",
            (long long)m, (long long)e, worst, (double)s, (double)s_ref);
    return 0;
}

/* Runs the reference on row m alone and compares. Returns 1 match, 0 mismatch, -1 error. */
static int verify_row(const op_case *c, const case_exec *fast, int64_t m, int64_t e)
{
    op_case row;
    case_exec ref;
    char err[CASE_ERR_LEN];
    qmoe_grouped_matmul_swiglu_quant_options o;
    memset(&o, 0, sizeof o);
    memset(&ref, 0, sizeof ref);
    o.kernel = QMOE_KERNEL_REFERENCE;
    int result = -1;
    if (case_row(c, m, e, &row, err) || case_plan(&row, &o, &ref, err) ||
        case_launch(&row, &ref, NULL, err))
        fprintf(stderr, "qmoe demo: reference on row %lld: %s\n", (long long)m, err);
    else
        result = row_matches(fast, &ref, m, e);
    case_exec_free(&ref);
    case_free(&row);
    return result;
}

/* Row i of `samples` rows of one expert [start, end): evenly spaced from its first to its last. */
static int64_t sample_row(int64_t start, int64_t end, int64_t i, int64_t samples)
{
    int64_t size = end - start;
    return samples == 1 ? start + size / 2 : start + i * (size - 1) / (samples - 1);
}

/* Verifies `rows` rows dealt round-robin over the non-empty experts; returns how many matched
 * (*checked: how many were checked), or -1 on an error. */
static int64_t verify_sample(const op_case *c, const case_exec *fast, int64_t rows,
                             int64_t *checked)
{
    int64_t E = c->in[CASE_GROUP_LIST].count, n = 0, matched = 0;
    int64_t *ends = malloc(sizeof *ends * (size_t)(E + 1)),
            *busy = malloc(sizeof *busy * (size_t)(E + 1));
    *checked = 0;
    if (!ends || !busy)
        matched = -1;
    else
        case_group_ends(c, ends);
    for (int64_t e = 0; matched >= 0 && e < E; e++)
        if (ends[e] > (e ? ends[e - 1] : 0)) busy[n++] = e;
    for (int64_t i = 0; matched >= 0 && n && i < rows; i++) {
        int64_t e = busy[i % n], samples = rows / n + (i % n < rows % n);
        int64_t start = e ? ends[e - 1] : 0;
        int r = verify_row(c, fast, sample_row(start, ends[e], i / n, samples), e);
        matched = r < 0 ? -1 : matched + r;
        ++*checked;
    }
    free(ends);
    free(busy);
    return matched;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void print_timing(const demo_args *a, const case_exec *ex, double seconds)
{
    const gen_params *p = &a->gen;
    double ops = 2.0 * (double)p->M * (double)p->K * (double)p->N;
    char threads[32] = "all";
    if (a->rt.threads) snprintf(threads, sizeof threads, "%d", a->rt.threads);
    printf("kernel: %s, threads: %s, devices: %d, weights: %s\n",
           qmoe_kernel_name(qmoe_grouped_matmul_swiglu_quant_executor_kernel(ex->executor)), threads,
           a->rt.devices > 1 ? a->rt.devices : 1, ex->weights ? "prepacked" : "raw");
    printf("execute: %.3f ms, %.1f int8 GOPS (2*M*K*N / time)\n", seconds * 1e3,
           seconds > 0 ? ops / seconds * 1e-9 : 0.0);
    fflush(stdout); /* before the progress lines on stderr */
}

/* Plans, then times phase two up to the drained stream (the trace, if any, is written after). */
static int run_timed(demo_args *a, const op_case *c, case_exec *ex, char *err)
{
    qmoe_grouped_matmul_swiglu_quant_options o;
    qmoe_stream *stream;
    memset(&o, 0, sizeof o);
    if (cli_runtime_begin(&a->rt, &o, &stream)) return -2; /* message already printed */
    o.kernel = a->kernel;
    /* Weights prepacked once, as an inference engine loads them (the reference kernel reads
     * raw weights only); the prepacking is not timed. */
    if (a->kernel == QMOE_KERNEL_REFERENCE ? case_plan(c, &o, ex, err)
                                           : case_plan_prepacked(c, &o, ex, err)) {
        cli_runtime_free(&a->rt); /* a failed run writes no trace */
        return -1;
    }
    fprintf(stderr, "qmoe demo: executing with the %s kernel\n",
            qmoe_kernel_name(qmoe_grouped_matmul_swiglu_quant_executor_kernel(ex->executor)));
    /* An untimed run first: the device sizes its scratchpad and the pages are touched once, as
     * in any real use where the operator runs layer after layer. Then the timed run. */
    int rc = case_launch(c, ex, stream, err);
    qmoe_status st = stream && !rc ? qmoe_stream_synchronize(stream) : QMOE_OK;
    double t0 = now_seconds();
    if (!rc && !st) {
        rc = case_launch(c, ex, stream, err);
        st = stream && !rc ? qmoe_stream_synchronize(stream) : QMOE_OK;
    }
    double seconds = now_seconds() - t0;
    qmoe_status end = QMOE_OK;
    if (!rc && !st) end = cli_runtime_end(&a->rt); /* after the timing: it may write a trace */
    else cli_runtime_free(&a->rt);                  /* a failed run writes no trace */
    if (!rc && (st || end)) {
        case_error(c, st ? st : end, err);
        rc = -1;
    }
    if (!rc) print_timing(a, ex, seconds);
    return rc;
}

static int verify(const demo_args *a, const op_case *c, const case_exec *fast)
{
    int64_t checked;
    fprintf(stderr, "qmoe demo: verifying %lld rows against the reference kernel\n",
            (long long)a->verify_rows);
    int64_t matched = verify_sample(c, fast, a->verify_rows, &checked);
    if (matched < 0) return -1;
    printf("verified rows: %lld/%lld match the reference kernel (output within +-1, outputScale "
           "within 1e-6 relative)\n",
           (long long)matched, (long long)checked);
    return matched == checked ? 0 : 1;
}

int cmd_demo(int argc, char **argv)
{
    demo_args a;
    op_case c;
    case_exec fast;
    char err[CASE_ERR_LEN], what[256];
    memset(&a, 0, sizeof a);
    memset(&fast, 0, sizeof fast);
    gen_defaults(&a.gen);
    a.verify_rows = 16;
    int rc = parse(argc, argv, &a);
    if (rc) return rc > 0 ? 0 : 2;
    gen_args_describe(&a.gen, what, sizeof what);
    /* phase one on the shapes first: a case the operator refuses costs no memory */
    qmoe_grouped_matmul_swiglu_quant_options o = {0};
    cli_runtime_options(&a.rt, &o);
    o.kernel = a.kernel;
    if (case_generate_headers(&a.gen, &c, err) || case_check(&c, &o, err)) {
        fprintf(stderr, "qmoe demo: %s: %s\n", what, err);
        return 1;
    }
    fprintf(stderr, "qmoe demo: building the case in memory\n");
    if (case_generate(&a.gen, &c, err)) {
        fprintf(stderr, "qmoe demo: %s: %s\n", what, err);
        return 1;
    }
    printf("qmoe demo: %s\n", what);
    fflush(stdout);
    rc = run_timed(&a, &c, &fast, err);
    if (rc == -1) fprintf(stderr, "qmoe demo: %s\n", err);
    if (!rc) rc = verify(&a, &c, &fast);
    case_exec_free(&fast);
    case_free(&c);
    return rc ? 1 : 0;
}
