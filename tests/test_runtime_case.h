/*
 * Test helper for the runtime tests: a random A8W8 (int8 ND) or A8W4 (int4 ND) case over
 * 128-byte-aligned outputs (optionally misaligned to force the device-0 fallback), and the
 * expected output computed row by row on the calling thread by the single-thread reference
 * kernel (or any kernel) called directly, without the runtime.
 */
#ifndef QMOE_TEST_RUNTIME_CASE_H
#define QMOE_TEST_RUNTIME_CASE_H

#include <stdlib.h>
#include <string.h>

#include "ops/grouped_matmul_swiglu_quant/plan.h"
#include "kernels/kernel.h"
#include "kernels/swiglu_quant.h"
#include "qmoe/qmoe.h"
#include "qmoe/runtime.h"
#include "support/testlib.h"
#include "testing.h" /* the runtime's test hooks (qmoe_internal builds them in) */

#define RT_SENTINEL 0x5A

typedef struct rt_case {
    int64_t M, K, N, E, N2;
    int a8w4, count_list;
    int8_t *x;
    uint8_t *w;
    float *ws, *xs, *bias;
    int64_t *gl;
    unsigned char *out_mem, *scale_mem; /* allocations; out/out_scale may be offset into them */
    int8_t *out;
    float *out_scale;
    qmoe_tensor *t[8]; /* x w bias ws xs gl out out_scale */
} rt_case;

static void *rt_alloc(size_t bytes)
{
    void *p = aligned_alloc(128, (bytes + 127) / 128 * 128 + 128);
    if (!p) abort();
    return p;
}

/* Experts' rows: E groups over `rows` <= M, some empty; cumulative ends or counts. */
static void rt_case_init(rt_case *c, qt_rng *r, int64_t M, int64_t K, int64_t N, int64_t E,
                         int64_t rows, int a8w4, int count_list, int misalign)
{
    memset(c, 0, sizeof *c);
    c->M = M, c->K = K, c->N = N, c->E = E, c->N2 = N / 2, c->a8w4 = a8w4;
    c->count_list = count_list;
    c->x = rt_alloc((size_t)(M * K));
    for (int64_t i = 0; i < M * K; i++) c->x[i] = (int8_t)qt_range(r, -128, 127);
    int64_t welems = E * K * N;
    c->w = rt_alloc((size_t)(a8w4 ? (welems + 1) / 2 : welems));
    if (a8w4)
        for (int64_t i = 0; i < (welems + 1) / 2; i++) c->w[i] = (uint8_t)qt_range(r, 0, 255);
    else
        for (int64_t i = 0; i < welems; i++) c->w[i] = (uint8_t)qt_range(r, 0, 255);
    c->ws = rt_alloc((size_t)(E * N) * sizeof(float));
    for (int64_t i = 0; i < E * N; i++) c->ws[i] = qt_uniform(r, 0.001f, 0.01f);
    c->xs = rt_alloc((size_t)M * sizeof(float));
    for (int64_t i = 0; i < M; i++) c->xs[i] = qt_uniform(r, 0.01f, 0.05f);
    if (a8w4) {
        c->bias = rt_alloc((size_t)(E * N) * sizeof(float));
        for (int64_t i = 0; i < E * N; i++) c->bias[i] = qt_uniform(r, -2.0f, 2.0f);
    }
    c->gl = rt_alloc((size_t)E * sizeof(int64_t));
    int64_t end = 0;
    for (int64_t e = 0; e < E; e++) {
        int64_t next = e == E - 1 ? rows : end + qt_range(r, 0, rows - end);
        if (e < E - 1 && qt_range(r, 0, 3) == 0) next = end; /* empty experts */
        c->gl[e] = count_list ? next - end : next;
        end = next;
    }
    c->out_mem = rt_alloc((size_t)(M * c->N2) + 256);
    c->scale_mem = rt_alloc((size_t)M * sizeof(float) + 256);
    c->out = (int8_t *)c->out_mem + (misalign ? 16 : 0);
    c->out_scale = (float *)c->scale_mem;
    memset(c->out, RT_SENTINEL, (size_t)(M * c->N2));
    memset(c->out_scale, RT_SENTINEL, (size_t)M * sizeof(float));
    qmoe_dtype wd = a8w4 ? QMOE_DTYPE_INT4 : QMOE_DTYPE_INT8;
    int ok = 1;
    ok &= !qmoe_tensor_create((int64_t[]){M, K}, 2, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, c->x, &c->t[0]);
    ok &= !qmoe_tensor_create((int64_t[]){E, K, N}, 3, NULL, wd, QMOE_FORMAT_ND, c->w, &c->t[1]);
    if (a8w4)
        ok &= !qmoe_tensor_create((int64_t[]){E, N}, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, c->bias, &c->t[2]);
    ok &= !qmoe_tensor_create((int64_t[]){E, N}, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, c->ws, &c->t[3]);
    ok &= !qmoe_tensor_create((int64_t[]){M}, 1, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, c->xs, &c->t[4]);
    ok &= !qmoe_tensor_create((int64_t[]){E}, 1, NULL, QMOE_DTYPE_INT64, QMOE_FORMAT_ND, c->gl, &c->t[5]);
    ok &= !qmoe_tensor_create((int64_t[]){M, c->N2}, 2, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, c->out, &c->t[6]);
    ok &= !qmoe_tensor_create((int64_t[]){M}, 1, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, c->out_scale, &c->t[7]);
    if (!ok) {
        fprintf(stderr, "rt_case_init: %s\n", qmoe_last_error());
        abort();
    }
}

static void rt_case_free(rt_case *c)
{
    for (int i = 0; i < 8; i++) qmoe_tensor_destroy(c->t[i]);
    free(c->x), free(c->w), free(c->ws), free(c->xs), free(c->bias), free(c->gl);
    free(c->out_mem), free(c->scale_mem);
}

static qmoe_status rt_case_plan(rt_case *c, int threads, int devices, qmoe_kernel kernel,
                                qmoe_grouped_matmul_swiglu_quant_executor **ex, uint64_t *ws_bytes)
{
    qmoe_grouped_matmul_swiglu_quant_options o = {.threads = threads, .devices = devices, .kernel = kernel,
                         .group_list_type = c->count_list ? QMOE_GROUP_LIST_COUNT : QMOE_GROUP_LIST_CUMSUM};
    return qmoe_grouped_matmul_swiglu_quant_workspace_size(c->t[0], c->t[1], c->t[2], NULL, c->t[3], c->t[4],
                                                c->t[5], c->t[6], c->t[7], NULL, &o, ws_bytes, ex);
}

static void rt_case_reset_outputs(rt_case *c)
{
    memset(c->out, RT_SENTINEL, (size_t)(c->M * c->N2));
    memset(c->out_scale, RT_SENTINEL, (size_t)c->M * sizeof(float));
}

/* Plans, resets the outputs to the sentinel, runs on stream s (NULL: synchronous) and waits for
 * it. The executor is destroyed right after the launch: a queued operator holds its own copy of
 * the plan. Inline: not every test that includes this file uses it. */
static inline qmoe_status rt_case_run(rt_case *c, int threads, int devices, qmoe_kernel kernel,
                                      qmoe_stream *s)
{
    qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
    uint64_t wsb = 0;
    qmoe_status st = rt_case_plan(c, threads, devices, kernel, &ex, &wsb);
    if (st) return st;
    void *ws = wsb ? rt_alloc((size_t)wsb) : NULL;
    rt_case_reset_outputs(c);
    st = qmoe_grouped_matmul_swiglu_quant(ws, wsb, ex, s);
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
    if (!st && s) st = qmoe_stream_synchronize(s);
    free(ws);
    return st;
}

/* The expected outputs: the sentinel, then, for every row of every expert, the kernel called on
 * the calling thread for that one row and all columns. */
static void rt_expected(rt_case *c, qmoe_kernel kernel, int8_t *out, float *scale)
{
    qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
    uint64_t wsb = 0;
    if (rt_case_plan(c, 1, 1, kernel, &ex, &wsb)) abort();
    qmoe_gmm_params p = *qmoe_grouped_matmul_swiglu_quant_executor_params(ex);
    const qmoe_kernel_entry *k = qmoe_kernel_lookup(p.kernel);
    p.out = out;
    p.out_scale = scale;
    p.out_s[0] = c->N2, p.out_s[1] = 1, p.out_scale_s = 1;
    memset(out, RT_SENTINEL, (size_t)(c->M * c->N2));
    memset(scale, RT_SENTINEL, (size_t)c->M * sizeof(float));
    uint64_t sb = qmoe_swiglu_quant_scratch_bytes(k, &p, 1, c->N2);
    void *scratch = rt_alloc((size_t)sb + 64);
    float *row = rt_alloc((size_t)(c->N2 + 1) * sizeof(float));
    qmoe_thread_ctx ctx = {.thread = 0, .nthreads = 1, .scratch = scratch, .scratch_bytes = sb};
    int64_t start = 0;
    for (int64_t e = 0; e < c->E; e++) {
        int64_t end = c->count_list ? start + c->gl[e] : c->gl[e];
        for (int64_t m = start; m < end; m++) {
            qmoe_swiglu_quant_block(k, &p, &ctx, e, m, m + 1, 0, c->N2, row, c->N2);
            qmoe_swiglu_quant_rows(k, &p, row, c->N2, m, m + 1);
        }
        start = end;
    }
    free(scratch);
    free(row);
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
}

static int rt_same_outputs(const rt_case *c, const int8_t *out, const float *scale)
{
    return !memcmp(c->out, out, (size_t)(c->M * c->N2)) &&
           !memcmp(c->out_scale, scale, (size_t)c->M * sizeof(float));
}

#endif
