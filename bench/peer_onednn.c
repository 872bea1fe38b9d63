/*
 * The oneDNN peer of `qmoe bench --peer onednn` (built into the qmoe program only when CMake finds
 * oneDNN; the library never depends on it): what a user without qmoe would run, oneDNN's plain
 * int8 matmul x[rows, K] s8 x W[K, N] s8 -> s32, one expert after another, with the weights in
 * the layout oneDNN prefers (reordered once, outside the timing) and no SwiGLU or quantization.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <dnnl.h>

#include "peer_onednn.h"

typedef struct peer_expert {
    dnnl_primitive_t mm;
    dnnl_memory_t src, wei, dst;
} peer_expert;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define TRY(call)                                                                                \
    do {                                                                                         \
        if ((call) != dnnl_success) {                                                            \
            fprintf(stderr, "qmoe bench: oneDNN: %s failed\n", #call);                          \
            goto fail;                                                                           \
        }                                                                                        \
    } while (0)

/* One expert: primitive for its rows, operands filled with a pattern, weights reordered. */
static int setup(dnnl_engine_t eng, dnnl_stream_t st, int64_t rows, int64_t K, int64_t N,
                 peer_expert *x)
{
    dnnl_memory_desc_t a_md, b_md, b_any, c_md;
    dnnl_dims_t ad = {rows, K}, bd = {K, N}, cd = {rows, N};
    dnnl_matmul_desc_t desc;
    dnnl_primitive_desc_t pd = NULL, rpd = NULL;
    dnnl_primitive_t reorder = NULL;
    dnnl_memory_t plain = NULL;
    memset(x, 0, sizeof *x);
    TRY(dnnl_memory_desc_init_by_tag(&a_md, 2, ad, dnnl_s8, dnnl_ab));
    TRY(dnnl_memory_desc_init_by_tag(&b_md, 2, bd, dnnl_s8, dnnl_ab));
    TRY(dnnl_memory_desc_init_by_tag(&b_any, 2, bd, dnnl_s8, dnnl_format_tag_any));
    TRY(dnnl_memory_desc_init_by_tag(&c_md, 2, cd, dnnl_s32, dnnl_ab));
    TRY(dnnl_matmul_desc_init(&desc, &a_md, &b_any, NULL, &c_md));
    TRY(dnnl_primitive_desc_create(&pd, &desc, NULL, eng, NULL));
    const dnnl_memory_desc_t *w_md = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    TRY(dnnl_primitive_create(&x->mm, pd));
    TRY(dnnl_memory_create(&x->src, &a_md, eng, DNNL_MEMORY_ALLOCATE));
    TRY(dnnl_memory_create(&x->dst, &c_md, eng, DNNL_MEMORY_ALLOCATE));
    TRY(dnnl_memory_create(&x->wei, w_md, eng, DNNL_MEMORY_ALLOCATE));
    TRY(dnnl_memory_create(&plain, &b_md, eng, DNNL_MEMORY_ALLOCATE));
    void *p;
    TRY(dnnl_memory_get_data_handle(x->src, &p));
    for (int64_t i = 0; i < rows * K; i++) ((int8_t *)p)[i] = (int8_t)(i * 7 % 251 - 125);
    TRY(dnnl_memory_get_data_handle(plain, &p));
    for (int64_t i = 0; i < K * N; i++) ((int8_t *)p)[i] = (int8_t)(i * 13 % 255 - 127);
    TRY(dnnl_reorder_primitive_desc_create(&rpd, &b_md, eng, w_md, eng, NULL));
    TRY(dnnl_primitive_create(&reorder, rpd));
    dnnl_exec_arg_t rargs[2] = {{DNNL_ARG_FROM, plain}, {DNNL_ARG_TO, x->wei}};
    TRY(dnnl_primitive_execute(reorder, st, 2, rargs));
    TRY(dnnl_stream_wait(st));
    dnnl_primitive_destroy(reorder);
    dnnl_primitive_desc_destroy(rpd);
    dnnl_memory_destroy(plain);
    dnnl_primitive_desc_destroy(pd);
    return 0;
fail:
    if (reorder) dnnl_primitive_destroy(reorder);
    if (rpd) dnnl_primitive_desc_destroy(rpd);
    if (plain) dnnl_memory_destroy(plain);
    if (pd) dnnl_primitive_desc_destroy(pd);
    return -1;
}

static void teardown(peer_expert *x)
{
    if (x->mm) dnnl_primitive_destroy(x->mm);
    if (x->src) dnnl_memory_destroy(x->src);
    if (x->wei) dnnl_memory_destroy(x->wei);
    if (x->dst) dnnl_memory_destroy(x->dst);
}

int peer_onednn_time(const int64_t *rows, int64_t E, int64_t K, int64_t N, int threads,
                     int repeat, double *median_ms)
{
    char nt[16];
    snprintf(nt, sizeof nt, "%d", threads);
    setenv("OMP_NUM_THREADS", nt, 0); /* oneDNN's OpenMP pool; an explicit setting wins */
    dnnl_engine_t eng = NULL;
    dnnl_stream_t st = NULL;
    peer_expert *xs = calloc((size_t)E, sizeof *xs);
    double *ms = calloc((size_t)repeat, sizeof *ms);
    int rc = -1;
    if (!xs || !ms) goto fail;
    TRY(dnnl_engine_create(&eng, dnnl_cpu, 0));
    TRY(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
    for (int64_t e = 0; e < E; e++)
        if (rows[e] > 0 && setup(eng, st, rows[e], K, N, &xs[e])) goto fail;
    for (int r = -1; r < repeat; r++) {
        double t0 = now();
        for (int64_t e = 0; e < E; e++) {
            if (rows[e] <= 0) continue;
            dnnl_exec_arg_t args[3] = {
                {DNNL_ARG_SRC, xs[e].src}, {DNNL_ARG_WEIGHTS, xs[e].wei}, {DNNL_ARG_DST, xs[e].dst}};
            TRY(dnnl_primitive_execute(xs[e].mm, st, 3, args));
        }
        TRY(dnnl_stream_wait(st));
        if (r >= 0) ms[r] = (now() - t0) * 1e3;
    }
    qsort(ms, (size_t)repeat, sizeof *ms, cmp_double);
    *median_ms = repeat % 2 ? ms[repeat / 2] : 0.5 * (ms[repeat / 2 - 1] + ms[repeat / 2]);
    rc = 0;
fail:
    if (xs)
        for (int64_t e = 0; e < E; e++) teardown(&xs[e]);
    free(xs);
    free(ms);
    if (st) dnnl_stream_destroy(st);
    if (eng) dnnl_engine_destroy(eng);
    return rc;
}
