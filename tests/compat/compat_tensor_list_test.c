/*
 * aclnnGroupedMatmulSwigluQuantWeightNzTensorList through the vendor-style API: per-expert NZ
 * weights in separate allocations, checked against a double-precision formula written here (with
 * and without the swiglu_limit clamp); its first-phase rules; one-shot executors; and tensor
 * lists that own their tensors (the sanitizer and valgrind suites see any leak or double free).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "acl/acl.h"
#include "aclnnop/aclnn_grouped_matmul_swiglu_quant_weight_nz_tensor_list.h"
#include "support/testlib.h"

enum { M = 24, K = 32, N = 64, E = 3, N2 = N / 2 };

static int8_t x[M * K], w[E][K * N], nz[E][K * N], out[M * N2];
static float ws[E][N], xs[M], scale[M];
static int64_t gl[E] = {5, 5, 20}; /* expert 1 empty; rows 20.. unwritten */

static aclTensor *mk(const int64_t *shape, uint64_t n, aclDataType dt, aclFormat fmt, void *data)
{
    return aclCreateTensor(shape, n, dt, NULL, 0, fmt, shape, n, data);
}

typedef struct args {
    aclTensor *x, *xs, *gl, *out, *scale;
    aclTensorList *w, *ws;
} args;

static void make_args(args *a)
{
    static const int64_t sh_x[] = {M, K}, sh_w[] = {N / 32, K / 16, 16, 32}, sh_s[] = {N},
                         sh_m[] = {M}, sh_g[] = {E}, sh_out[] = {M, N2};
    const aclTensor *tw[E], *ts[E];
    for (int e = 0; e < E; e++) {
        tw[e] = mk(sh_w, 4, ACL_INT8, ACL_FORMAT_FRACTAL_NZ, nz[e]);
        ts[e] = mk(sh_s, 1, ACL_FLOAT, ACL_FORMAT_ND, ws[e]);
    }
    a->w = aclCreateTensorList(tw, E);
    a->ws = aclCreateTensorList(ts, E);
    a->x = mk(sh_x, 2, ACL_INT8, ACL_FORMAT_ND, x);
    a->xs = mk(sh_m, 1, ACL_FLOAT, ACL_FORMAT_ND, xs);
    a->gl = mk(sh_g, 1, ACL_INT64, ACL_FORMAT_ND, gl);
    a->out = mk(sh_out, 2, ACL_INT8, ACL_FORMAT_ND, out);
    a->scale = mk(sh_m, 1, ACL_FLOAT, ACL_FORMAT_ND, scale);
}

static void free_args(args *a)
{
    aclDestroyTensorList(a->w); /* the lists destroy their tensors */
    aclDestroyTensorList(a->ws);
    aclDestroyTensor(a->x);
    aclDestroyTensor(a->xs);
    aclDestroyTensor(a->gl);
    aclDestroyTensor(a->out);
    aclDestroyTensor(a->scale);
}

static aclnnStatus phase_one(args *a, const aclTensor *bias, float limit, uint64_t *size,
                             aclOpExecutor **ex)
{
    return aclnnGroupedMatmulSwigluQuantWeightNzTensorListGetWorkspaceSize(
        a->x, a->w, bias, NULL, a->ws, a->xs, a->gl, limit, a->out, a->scale, NULL, size, ex);
}

static aclnnStatus run(float limit)
{
    args a;
    make_args(&a);
    uint64_t size = 0;
    aclOpExecutor *ex = NULL;
    aclnnStatus st = phase_one(&a, NULL, limit, &size, &ex);
    void *work = NULL;
    if (!st && size) st = aclrtMalloc(&work, size, ACL_MEM_MALLOC_HUGE_FIRST);
    if (!st) st = aclnnGroupedMatmulSwigluQuantWeightNzTensorList(work, size, ex, NULL);
    if (work) aclrtFree(work);
    free_args(&a);
    return st;
}

/* C = acc * xScale * ws, optionally clamped (activated half <= L, linear half in [-L, L]),
 * SwiGLU, per-row int8: checked against what the operator wrote. */
static void check(double L)
{
    int64_t start = 0;
    for (int e = 0; e < E; e++) {
        for (int64_t m = start; m < gl[e]; m++) {
            double S[N2], amax = 0;
            for (int j = 0; j < N2; j++) {
                double c[2];
                for (int h = 0; h < 2; h++) {
                    int64_t acc = 0;
                    for (int k = 0; k < K; k++) acc += x[m * K + k] * w[e][k * N + j + h * N2];
                    c[h] = (double)acc * xs[m] * ws[e][j + h * N2];
                }
                if (L > 1e-8) {
                    c[0] = c[0] > L ? L : c[0];
                    c[1] = c[1] > L ? L : c[1] < -L ? -L : c[1];
                }
                S[j] = c[0] / (1.0 + exp(-c[0])) * c[1];
                amax = fabs(S[j]) > amax ? fabs(S[j]) : amax;
            }
            double sc = amax / 127.0;
            CHECK_MSG(fabs(scale[m] - sc) <= 1e-5 * sc, "L %g row %lld scale %g vs %g", L,
                      (long long)m, (double)scale[m], sc);
            for (int j = 0; j < N2; j++)
                CHECK_MSG(fabs(out[m * N2 + j] - rint(S[j] / sc)) <= 1, "L %g [%lld,%d]", L,
                          (long long)m, j);
        }
        start = gl[e];
    }
    for (int64_t m = gl[E - 1]; m < M; m++) CHECK(scale[m] == -1.0f && out[m * N2] == 7);
}

int main(void)
{
    qt_rng r = {20261130};
    for (int i = 0; i < M * K; i++) x[i] = (int8_t)qt_range(&r, -128, 127);
    for (int i = 0; i < M; i++) xs[i] = qt_uniform(&r, 0.5f, 1.5f);
    for (int e = 0; e < E; e++) {
        for (int i = 0; i < K * N; i++) w[e][i] = (int8_t)qt_range(&r, -128, 127);
        for (int n = 0; n < N; n++) ws[e][n] = qt_uniform(&r, 0.5f, 1.5f) / (6.0f * 70.0f * 40.0f);
        /* FRACTAL_NZ [N/32][K/16][16][32] of W[k][n] */
        for (int k = 0; k < K; k++)
            for (int n = 0; n < N; n++)
                nz[e][((n / 32) * (K / 16) + k / 16) * 512 + (k % 16) * 32 + n % 32] = w[e][k * N + n];
    }
    CHECK(aclInit(NULL) == ACL_SUCCESS);
    CHECK(aclrtSetDevice(0) == ACL_SUCCESS);

    for (int pass = 0; pass < 2; pass++) {
        double L = pass ? 0.5 : 0.0;
        memset(out, 7, sizeof out);
        for (int m = 0; m < M; m++) scale[m] = -1.0f;
        CHECK_MSG(run((float)L) == ACLNN_SUCCESS, "%s", aclGetRecentErrMsg());
        check(L);
    }

    /* First-phase rules, each naming the argument; outputs and out-arguments untouched. */
    args a;
    make_args(&a);
    uint64_t size = 99;
    aclOpExecutor *ex = NULL;
    static float bias_mem[E * N];
    aclTensor *bias = mk((const int64_t[]){E, N}, 2, ACL_FLOAT, ACL_FORMAT_ND, bias_mem);
    CHECK(phase_one(&a, bias, 0.0f, &size, &ex) == ACLNN_ERR_PARAM_INVALID);
    CHECK(strstr(aclGetRecentErrMsg(), "bias") != NULL);
    aclDestroyTensor(bias);
    CHECK(aclnnGroupedMatmulSwigluQuantWeightNzTensorListGetWorkspaceSize(
              a.x, NULL, NULL, NULL, a.ws, a.xs, a.gl, 0.0f, a.out, a.scale, NULL, &size, &ex) ==
          ACLNN_ERR_PARAM_NULLPTR);
    CHECK(phase_one(&a, NULL, -2.0f, &size, &ex) == ACLNN_ERR_PARAM_INVALID);
    CHECK(strstr(aclGetRecentErrMsg(), "swiglu_limit") != NULL);
    aclTensorList *short_ws = aclCreateTensorList((const aclTensor *const[]){mk(
                                                      (const int64_t[]){N}, 1, ACL_FLOAT,
                                                      ACL_FORMAT_ND, ws[0])},
                                                  1);
    CHECK(aclnnGroupedMatmulSwigluQuantWeightNzTensorListGetWorkspaceSize(
              a.x, a.w, NULL, NULL, short_ws, a.xs, a.gl, 0.0f, a.out, a.scale, NULL, &size,
              &ex) == ACLNN_ERR_PARAM_INVALID);
    aclDestroyTensorList(short_ws);
    CHECK(size == 99 && ex == NULL);
    CHECK(aclCreateTensorList(NULL, 2) == NULL);
    CHECK(aclCreateTensorList((const aclTensor *const[]){a.x, NULL}, 2) == NULL);
    CHECK(aclDestroyTensorList(NULL) == ACLNN_SUCCESS);

    /* One-shot executors: the second execution is refused. */
    CHECK(phase_one(&a, NULL, 0.0f, &size, &ex) == ACLNN_SUCCESS);
    void *work = NULL;
    CHECK(aclrtMalloc(&work, size, ACL_MEM_MALLOC_HUGE_FIRST) == ACL_SUCCESS);
    CHECK(aclnnGroupedMatmulSwigluQuantWeightNzTensorList(work, size, ex, NULL) == ACLNN_SUCCESS);
    CHECK(aclnnGroupedMatmulSwigluQuantWeightNzTensorList(work, size, ex, NULL) ==
          ACLNN_ERR_PARAM_INVALID);
    aclrtFree(work);
    free_args(&a);

    CHECK(aclrtResetDevice(0) == ACL_SUCCESS);
    CHECK(aclFinalize() == ACL_SUCCESS);
    return qt_finish("compat_tensor_list");
}
