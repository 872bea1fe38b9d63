/*
 * aclnnGroupedMatmulV4 (MoE subset) through the vendor-compatible API: A8W8 per-token dequant
 * (float32 and bfloat16 out) and the unscaled int32 form against sums computed here in double,
 * on the default stream and on a created stream; the vendor's codes for NULL arguments, list
 * lengths, splitItem / groupType / actType, unsupported optional lists, a reused executor and
 * executors of another operator (both ways).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "acl/acl.h"
#include "aclnnop/aclnn_grouped_matmul_v4.h"
#include "aclnnop/aclnn_swi_glu.h"
#include "support/testlib.h"

enum { M = 7, K = 32, N = 16, E = 2 };

static aclTensor *tensor(const int64_t *shape, uint64_t n, aclDataType dt, void *data)
{
    return aclCreateTensor(shape, n, dt, NULL, 0, ACL_FORMAT_ND, shape, n, data);
}

static aclTensorList *list1(aclTensor *t) { return aclCreateTensorList((const aclTensor *const *)&t, 1); }

static int8_t x[M][K], w[E][K][N];
static float scale[E][N], pts[M];
static int64_t gl[E] = {3, 6}; /* cumsum; row 6 is past the list */

static double ref(int m, int n, int scaled)
{
    int e = m < 3 ? 0 : 1;
    double acc = 0;
    for (int k = 0; k < K; k++) acc += (double)x[m][k] * w[e][k][n];
    return scaled ? acc * pts[m] * scale[e][n] : acc;
}

static void run(aclrtStream stream, aclDataType out_dt)
{
    float of[M][N];
    uint16_t ob[M][N];
    int32_t oi[M][N];
    memset(of, 0x5A, sizeof of), memset(ob, 0x5A, sizeof ob), memset(oi, 0x5A, sizeof oi);
    int scaled = out_dt != ACL_INT32;
    void *out = out_dt == ACL_FLOAT ? (void *)of : out_dt == ACL_BF16 ? (void *)ob : (void *)oi;
    int64_t xs[2] = {M, K}, ws[3] = {E, K, N}, ss[2] = {E, N}, ps = M, gs = E, os[2] = {M, N};
    aclTensor *tx = tensor(xs, 2, ACL_INT8, x), *tw = tensor(ws, 3, ACL_INT8, w),
              *ts = tensor(ss, 2, ACL_FLOAT, scale), *tp = tensor(&ps, 1, ACL_FLOAT, pts),
              *tg = tensor(&gs, 1, ACL_INT64, gl), *to = tensor(os, 2, out_dt, out);
    aclTensorList *lx = list1(tx), *lw = list1(tw), *ls = scaled ? list1(ts) : NULL,
                  *lp = scaled ? list1(tp) : NULL, *lo = list1(to);
    uint64_t size = 1;
    aclOpExecutor *ex = NULL;
    aclnnStatus st = aclnnGroupedMatmulV4GetWorkspaceSize(lx, lw, NULL, ls, NULL, NULL, NULL, lp, tg, NULL,
                                                          NULL, NULL, 3, 0, 0, 0, lo, NULL, NULL, &size, &ex);
    CHECK_MSG(st == 0, "%s", aclGetRecentErrMsg());
    void *work = NULL;
    if (!st && size) CHECK(aclrtMalloc(&work, size, ACL_MEM_MALLOC_HUGE_FIRST) == ACL_SUCCESS);
    if (!st) CHECK_MSG((st = aclnnGroupedMatmulV4(work, size, ex, stream)) == 0, "%s", aclGetRecentErrMsg());
    if (!st && stream) CHECK(aclrtSynchronizeStream(stream) == ACL_SUCCESS);
    if (work) aclrtFree(work);
    for (int m = 0; m < 6; m++)
        for (int n = 0; n < N; n++) {
            double want = ref(m, n, scaled);
            if (out_dt == ACL_INT32) CHECK(oi[m][n] == (int32_t)want);
            else if (out_dt == ACL_FLOAT) CHECK_MSG(fabs(of[m][n] - want) <= 1e-5 * fabs(want) + 1e-30, "%g %g", of[m][n], want);
            else {
                uint32_t b = (uint32_t)ob[m][n] << 16;
                float got;
                memcpy(&got, &b, sizeof got);
                CHECK_MSG(fabs(got - want) <= fabs(want) / 128 + 1e-30, "%g %g", got, want);
            }
        }
    /* row 6 is past the group list: untouched */
    for (int n = 0; n < N; n++) CHECK(oi[6][n] == 0x5A5A5A5A || out_dt != ACL_INT32);
    for (int n = 0; n < N; n++) CHECK(ob[6][n] == 0x5A5A || out_dt != ACL_BF16);
    /* one-shot */
    CHECK(aclnnGroupedMatmulV4(NULL, 0, ex, NULL) == ACLNN_ERR_PARAM_INVALID);
    aclTensorList *lists[] = {lx, lw, ls, lp, lo};
    for (int i = 0; i < 5; i++)
        if (lists[i]) aclDestroyTensorList(lists[i]);
    aclTensor *ts_[] = {tx, tw, ts, tp, tg, to};
    for (int i = 0; i < 6; i++) aclDestroyTensor(ts_[i]);
}

static void errors(void)
{
    float of[M][N];
    int64_t xs[2] = {M, K}, ws[3] = {E, K, N}, ss[2] = {E, N}, ps = M, gs = E, os[2] = {M, N};
    aclTensor *tx = tensor(xs, 2, ACL_INT8, x), *tw = tensor(ws, 3, ACL_INT8, w),
              *ts = tensor(ss, 2, ACL_FLOAT, scale), *tp = tensor(&ps, 1, ACL_FLOAT, pts),
              *tg = tensor(&gs, 1, ACL_INT64, gl), *to = tensor(os, 2, ACL_FLOAT, of);
    aclTensorList *lx = list1(tx), *lw = list1(tw), *ls = list1(ts), *lp = list1(tp), *lo = list1(to);
    const aclTensor *two[2] = {tx, tx};
    aclTensorList *lx2 = aclCreateTensorList(two, 2);
    uint64_t size;
    aclOpExecutor *ex = NULL;
#define V4(X, W, S, P, G, SPLIT, GT, ACT, O, OFF) \
    aclnnGroupedMatmulV4GetWorkspaceSize(X, W, NULL, S, OFF, NULL, NULL, P, G, NULL, NULL, NULL, SPLIT, GT, 0, ACT, O, NULL, NULL, &size, &ex)
    CHECK(V4(NULL, lw, ls, lp, tg, 3, 0, 0, lo, NULL) == ACLNN_ERR_PARAM_NULLPTR);
    CHECK(V4(lx, lw, ls, lp, NULL, 3, 0, 0, lo, NULL) == ACLNN_ERR_PARAM_NULLPTR);
    CHECK(V4(lx, lw, ls, NULL, tg, 3, 0, 0, lo, NULL) == ACLNN_ERR_PARAM_NULLPTR);
    CHECK(V4(lx2, lw, ls, lp, tg, 3, 0, 0, lo, NULL) == ACLNN_ERR_PARAM_INVALID);
    CHECK(V4(lx, lw, ls, lp, tg, 0, 0, 0, lo, NULL) == ACLNN_ERR_PARAM_INVALID);
    CHECK(V4(lx, lw, ls, lp, tg, 3, 1, 0, lo, NULL) == ACLNN_ERR_PARAM_INVALID);
    CHECK(V4(lx, lw, ls, lp, tg, 3, 0, 1, lo, NULL) == ACLNN_ERR_PARAM_INVALID);
    CHECK(V4(lx, lw, ls, lp, tg, 3, 0, 0, lo, ls) == ACLNN_ERR_PARAM_INVALID);
    CHECK(strlen(aclGetRecentErrMsg()) > 0);
    /* executors of another operator, both ways */
    CHECK(V4(lx, lw, ls, lp, tg, 2, 0, 0, lo, NULL) == 0);
    CHECK(aclnnSwiGlu(NULL, 0, ex, NULL) == ACLNN_ERR_PARAM_INVALID);
    int64_t fs = 4, hs = 2;
    float f4[4] = {1, 2, 3, 4}, h2[2];
    aclTensor *tf = tensor(&fs, 1, ACL_FLOAT, f4), *th = tensor(&hs, 1, ACL_FLOAT, h2);
    CHECK(aclnnSwiGluGetWorkspaceSize(tf, 0, th, &size, &ex) == 0);
    CHECK(aclnnGroupedMatmulV4(NULL, 0, ex, NULL) == ACLNN_ERR_PARAM_INVALID);
    aclDestroyTensor(tf), aclDestroyTensor(th);
    aclTensorList *lists[] = {lx, lw, ls, lp, lo, lx2};
    for (int i = 0; i < 6; i++) aclDestroyTensorList(lists[i]);
    aclTensor *ts_[] = {tx, tw, ts, tp, tg, to};
    for (int i = 0; i < 6; i++) aclDestroyTensor(ts_[i]);
}

int main(void)
{
    qt_rng r = {3};
    for (int m = 0; m < M; m++) {
        pts[m] = qt_uniform(&r, 0.01f, 0.1f);
        for (int k = 0; k < K; k++) x[m][k] = (int8_t)qt_range(&r, -128, 127);
    }
    for (int e = 0; e < E; e++)
        for (int n = 0; n < N; n++) {
            scale[e][n] = qt_uniform(&r, 0.001f, 0.01f);
            for (int k = 0; k < K; k++) w[e][k][n] = (int8_t)qt_range(&r, -128, 127);
        }
    CHECK(aclInit(NULL) == ACL_SUCCESS);
    CHECK(aclrtSetDevice(0) == ACL_SUCCESS);
    aclrtStream s = NULL;
    CHECK(aclrtCreateStream(&s) == ACL_SUCCESS);
    const aclDataType outs[] = {ACL_FLOAT, ACL_BF16, ACL_INT32};
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < 3; i++) run(pass ? s : NULL, outs[i]);
    errors();
    CHECK(aclrtDestroyStream(s) == ACL_SUCCESS);
    CHECK(aclFinalize() == ACL_SUCCESS);
    return qt_finish("compat_grouped_matmul");
}
