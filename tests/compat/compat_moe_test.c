/*
 * The element-wise MoE operators through the vendor-compatible API: each entry point on values
 * whose results are known exactly (or follow from a formula computed here in double), on the
 * default stream and on a created stream, plus the vendor's codes for NULL arguments, refused
 * attributes, a reused executor and an executor of another operator.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "acl/acl.h"
#include "aclnnop/aclnn_dynamic_quant.h"
#include "aclnnop/aclnn_moe_finalize_routing_v2.h"
#include "aclnnop/aclnn_moe_gating_top_k.h"
#include "aclnnop/aclnn_moe_gating_top_k_softmax.h"
#include "aclnnop/aclnn_moe_init_routing_quant_v2.h"
#include "aclnnop/aclnn_moe_init_routing_v2.h"
#include "aclnnop/aclnn_swi_glu.h"
#include "support/testlib.h"

static aclTensor *tensor(const int64_t *shape, uint64_t n, aclDataType dt, void *data)
{
    return aclCreateTensor(shape, n, dt, NULL, 0, ACL_FORMAT_ND, shape, n, data);
}

static void destroy(aclTensor **t, int n)
{
    for (int i = 0; i < n; i++) aclDestroyTensor(t[i]);
}

/* Runs phase two on `stream` (synchronizing a created one); returns the status. */
static aclnnStatus launch(aclnnStatus (*run)(void *, uint64_t, aclOpExecutor *, aclrtStream),
                          uint64_t size, aclOpExecutor *ex, aclrtStream stream)
{
    void *work = NULL;
    if (size) CHECK(aclrtMalloc(&work, size, ACL_MEM_MALLOC_HUGE_FIRST) == ACL_SUCCESS);
    aclnnStatus st = run(work, size, ex, stream);
    if (stream && st == ACLNN_SUCCESS) st = aclrtSynchronizeStream(stream);
    if (work) aclrtFree(work);
    return st;
}

static void dynamic_quant(aclrtStream stream)
{
    float x[2][6] = {{127.0f, 0.5f, 1.5f, 2.5f, -2.5f, -0.5f}, {0, 0, 0, 0, 0, 0}};
    float smooth[6] = {1, 1, 1, 1, 1, 1};
    int8_t y[2][6];
    float s[2];
    int64_t xs[2] = {2, 6}, h = 6;
    aclTensor *t[] = {tensor(xs, 2, ACL_FLOAT, x), tensor(&h, 1, ACL_FLOAT, smooth),
                      tensor(xs, 2, ACL_INT8, y), tensor(xs, 1, ACL_FLOAT, s)};
    uint64_t size = 1;
    aclOpExecutor *ex = NULL;
    CHECK_MSG(aclnnDynamicQuantGetWorkspaceSize(t[0], t[1], t[2], t[3], &size, &ex) == 0, "%s",
              aclGetRecentErrMsg());
    destroy(t, 4);
    CHECK_MSG(launch(aclnnDynamicQuant, size, ex, stream) == 0, "%s", aclGetRecentErrMsg());
    static const int8_t want[6] = {127, 0, 2, 2, -2, 0};
    CHECK(s[0] == 1.0f && s[1] == 0.0f);
    for (int j = 0; j < 6; j++) CHECK(y[0][j] == want[j] && y[1][j] == 0);
    /* a one-shot executor cannot run twice */
    CHECK(aclnnDynamicQuant(NULL, 0, ex, NULL) == ACLNN_ERR_PARAM_INVALID);
    CHECK(strlen(aclGetRecentErrMsg()) > 0);
}

static void gating(aclrtStream stream)
{
    enum { R = 3, E = 16, K = 4 };
    float x[R * E], y[R * K], out[R * E];
    int32_t idx[R * K], ridx[R * K];
    for (int i = 0; i < R * E; i++) x[i] = (i % E == 9) ? 1.0f : 0.0f; /* expert 9, then ties */
    int64_t xs[2] = {R, E}, ys[2] = {R, K};
    aclTensor *t[] = {tensor(xs, 2, ACL_FLOAT, x), tensor(ys, 2, ACL_FLOAT, y),
                      tensor(ys, 2, ACL_INT32, idx), tensor(ys, 2, ACL_INT32, ridx)};
    uint64_t size = 1;
    aclOpExecutor *ex = NULL;
    CHECK_MSG(aclnnMoeGatingTopKSoftmaxGetWorkspaceSize(t[0], NULL, K, t[1], t[2], t[3], &size, &ex) == 0,
              "%s", aclGetRecentErrMsg());
    CHECK(launch(aclnnMoeGatingTopKSoftmax, size, ex, stream) == 0);
    double sum = exp(1.0) + 15.0;
    for (int r = 0; r < R; r++) {
        static const int32_t want[K] = {9, 0, 1, 2};
        for (int j = 0; j < K; j++) {
            CHECK(idx[r * K + j] == want[j]);
            CHECK(ridx[r * K + j] == j * R + r);
            CHECK(fabs(y[r * K + j] - (j ? 1.0 : exp(1.0)) / sum) < 1e-6);
        }
    }
    /* DeepSeek-style: sigmoid, 4 groups of 4, keep 2 groups by top-2 sums, k = 2 */
    aclTensor *t2[] = {tensor(xs, 2, ACL_FLOAT, out)};
    ys[1] = 2;
    aclTensor *ty = tensor(ys, 2, ACL_FLOAT, y), *ti = tensor(ys, 2, ACL_INT32, idx);
    CHECK_MSG(aclnnMoeGatingTopKGetWorkspaceSize(t[0], NULL, 2, 2, 4, 1, 0, 1, true, 1.0, 1e-20, ty,
                                                 ti, t2[0], &size, &ex) == 0,
              "%s", aclGetRecentErrMsg());
    CHECK(launch(aclnnMoeGatingTopK, size, ex, stream) == 0);
    double s1 = 1 / (1 + exp(-1.0)), s0 = 0.5;
    for (int r = 0; r < R; r++) {
        CHECK(idx[r * 2] == 9 && idx[r * 2 + 1] == 0); /* group 2 (has 9) and group 0 (ties) */
        CHECK(fabs(y[r * 2] - s1 / (s1 + s0)) < 1e-6 && fabs(y[r * 2 + 1] - s0 / (s1 + s0)) < 1e-6);
        CHECK(fabs(out[r * E + 9] - s1) < 1e-6 && out[r * E] == 0.5f);
    }
    /* refused: finished rows (bool tensors) and renorm 1 */
    int8_t fin[R] = {0};
    aclTensor *tf = tensor(xs, 1, ACL_BOOL, fin);
    CHECK(aclnnMoeGatingTopKSoftmaxGetWorkspaceSize(t[0], tf, K, t[1], t[2], t[3], &size, &ex) ==
          ACLNN_ERR_PARAM_INVALID);
    CHECK(aclnnMoeGatingTopKGetWorkspaceSize(t[0], NULL, 2, 2, 4, 1, 1, 1, false, 1.0, 1e-20, ty,
                                             ti, NULL, &size, &ex) == ACLNN_ERR_PARAM_INVALID);
    CHECK(aclnnMoeGatingTopKSoftmaxGetWorkspaceSize(NULL, NULL, K, t[1], t[2], t[3], &size, &ex) ==
          ACLNN_ERR_PARAM_NULLPTR);
    destroy(t, 4);
    destroy(t2, 1);
    aclDestroyTensor(ty);
    aclDestroyTensor(ti);
    aclDestroyTensor(tf);
}

/* init routing (plain and fused dynamic quant), then finalize back: tokens come back weighted */
static void routing(aclrtStream stream)
{
    enum { N = 5, K = 2, H = 8, E = 4 };
    float x[N * H], ex_x[N * K * H], out[N * H], sc[N * K], qs[N * K];
    int8_t q[N * K * H];
    int32_t idx[N * K] = {3, 1, 0, 3, 1, 2, 3, 3, 0, 1}, ri[N * K], ri2[N * K];
    int64_t cum[E], cnt[E];
    for (int i = 0; i < N * H; i++) x[i] = (float)(i % 13) - 6.0f;
    for (int i = 0; i < N * K; i++) sc[i] = 0.25f * (float)(1 + i % 3);
    int64_t xs[2] = {N, H}, is[2] = {N, K}, es[2] = {N * K, H}, nk = N * K, e = E;
    aclTensor *t[] = {tensor(xs, 2, ACL_FLOAT, x), tensor(is, 2, ACL_INT32, idx),
                      tensor(es, 2, ACL_FLOAT, ex_x), tensor(&nk, 1, ACL_INT32, ri),
                      tensor(&e, 1, ACL_INT64, cum), tensor(es, 2, ACL_INT8, q),
                      tensor(&nk, 1, ACL_INT32, ri2), tensor(&e, 1, ACL_INT64, cnt),
                      tensor(&nk, 1, ACL_FLOAT, qs), tensor(xs, 2, ACL_FLOAT, out),
                      tensor(is, 2, ACL_FLOAT, sc)};
    uint64_t size = 0;
    aclOpExecutor *ex = NULL;
    CHECK_MSG(aclnnMoeInitRoutingV2GetWorkspaceSize(t[0], t[1], 0, 0, E, 0, 1, false, t[2], t[3],
                                                    t[4], NULL, &size, &ex) == 0,
              "%s", aclGetRecentErrMsg());
    CHECK(launch(aclnnMoeInitRoutingV2, size, ex, stream) == 0);
    static const int64_t want_cum[E] = {2, 5, 6, 10};
    for (int i = 0; i < E; i++) CHECK(cum[i] == want_cum[i]);
    /* stable: expert 0 gets pairs 2 and 8, expert 1 gets 1, 4, 9, ... */
    static const int32_t want_ri[N * K] = {6, 2, 0, 7, 3, 5, 8, 9, 1, 4};
    for (int i = 0; i < N * K; i++) CHECK_MSG(ri[i] == want_ri[i], "ri[%d] = %d", i, ri[i]);
    for (int f = 0; f < N * K; f++)
        for (int h = 0; h < H; h++) CHECK(ex_x[ri[f] * H + h] == x[(f / K) * H + h]);

    CHECK_MSG(aclnnMoeInitRoutingQuantV2GetWorkspaceSize(t[0], t[1], NULL, NULL, 0, 0, E, 0, 2,
                                                         false, 1, t[5], t[6], t[7], NULL, t[8],
                                                         &size, &ex) == 0,
              "%s", aclGetRecentErrMsg());
    CHECK(launch(aclnnMoeInitRoutingQuantV2, size, ex, stream) == 0);
    static const int64_t want_cnt[E] = {2, 3, 1, 4};
    for (int i = 0; i < E; i++) CHECK(cnt[i] == want_cnt[i]);
    for (int f = 0; f < N * K; f++) {
        CHECK(ri2[f] == want_ri[f]);
        double amax = 0;
        for (int h = 0; h < H; h++) amax = fmax(amax, fabs(x[(f / K) * H + h]));
        CHECK(fabs(qs[ri2[f]] - amax / 127.0) < 1e-7);
        for (int h = 0; h < H; h++)
            CHECK(fabs(q[ri2[f] * H + h] - x[(f / K) * H + h] * 127.0 / amax) <= 0.5 + 1e-4);
    }

    CHECK_MSG(aclnnMoeFinalizeRoutingV2GetWorkspaceSize(t[2], t[3], t[0], NULL, NULL, t[10], t[1], 2,
                                                        t[9], &size, &ex) == 0,
              "%s", aclGetRecentErrMsg());
    CHECK(launch(aclnnMoeFinalizeRoutingV2, size, ex, stream) == 0);
    for (int i = 0; i < N; i++)
        for (int h = 0; h < H; h++) {
            double want = x[i * H + h] * (1.0 + sc[i * K] + sc[i * K + 1]);
            CHECK_MSG(fabs(out[i * H + h] - want) < 1e-5, "out[%d][%d]", i, h);
        }
    /* refused: drop/pad mode, static quant, an out-of-range expert id at phase two */
    CHECK(aclnnMoeFinalizeRoutingV2GetWorkspaceSize(t[2], t[3], NULL, NULL, NULL, NULL, NULL, 1,
                                                    t[9], &size, &ex) == ACLNN_ERR_PARAM_INVALID);
    CHECK(aclnnMoeInitRoutingQuantV2GetWorkspaceSize(t[0], t[1], NULL, NULL, 0, 0, E, 0, 2, false,
                                                     0, t[5], t[6], t[7], NULL, t[8], &size,
                                                     &ex) == ACLNN_ERR_PARAM_INVALID);
    CHECK(aclnnMoeInitRoutingV2GetWorkspaceSize(t[0], t[1], 0, 0, E, 0, 1, false, t[2], t[3],
                                                t[4], NULL, &size, &ex) == 0);
    idx[3] = E;
    memset(ri, 0x5A, sizeof ri);
    CHECK(launch(aclnnMoeInitRoutingV2, size, ex, stream) == ACLNN_ERR_PARAM_INVALID);
    for (int i = 0; i < N * K; i++) CHECK(ri[i] == 0x5A5A5A5A);
    /* on a created stream the data error surfaces at the synchronization (inside launch), once */
    if (stream) CHECK(aclrtSynchronizeStream(stream) == ACL_SUCCESS);
    idx[3] = 3;
    destroy(t, 11);
}

static void swiglu(aclrtStream stream)
{
    float x[2 * 8], out[2 * 4];
    for (int i = 0; i < 16; i++) x[i] = (float)i * 0.5f - 3.0f;
    int64_t xs[2] = {2, 8}, os[2] = {2, 4};
    aclTensor *t[] = {tensor(xs, 2, ACL_FLOAT, x), tensor(os, 2, ACL_FLOAT, out)};
    uint64_t size = 1;
    aclOpExecutor *ex = NULL, *other = NULL;
    CHECK_MSG(aclnnSwiGluGetWorkspaceSize(t[0], -1, t[1], &size, &ex) == 0, "%s", aclGetRecentErrMsg());
    CHECK_MSG(launch(aclnnSwiGlu, size, ex, stream) == 0, "%s", aclGetRecentErrMsg());
    for (int r = 0; r < 2; r++)
        for (int j = 0; j < 4; j++) {
            double a = x[r * 8 + j], b = x[r * 8 + 4 + j];
            CHECK(fabs(out[r * 4 + j] - a / (1 + exp(-a)) * b) < 1e-5);
        }
    CHECK(aclnnSwiGluGetWorkspaceSize(t[0], 2, t[1], &size, &ex) == ACLNN_ERR_PARAM_INVALID);
    CHECK(aclnnSwiGluGetWorkspaceSize(t[0], -1, NULL, &size, &ex) == ACLNN_ERR_PARAM_NULLPTR);
    CHECK(aclnnSwiGluGetWorkspaceSize(t[0], -1, t[1], NULL, &ex) == ACLNN_ERR_PARAM_NULLPTR);
    /* an executor of another operator: refused (and consumed) */
    CHECK(aclnnSwiGluGetWorkspaceSize(t[0], -1, t[1], &size, &other) == 0);
    CHECK(aclnnDynamicQuant(NULL, 0, other, NULL) == ACLNN_ERR_PARAM_INVALID);
    CHECK(aclnnSwiGlu(NULL, 0, NULL, NULL) == ACLNN_ERR_PARAM_NULLPTR);
    destroy(t, 2);
}

int main(void)
{
    CHECK(aclInit(NULL) == ACL_SUCCESS);
    CHECK(aclrtSetDevice(0) == ACL_SUCCESS);
    aclrtStream s = NULL;
    CHECK(aclrtCreateStream(&s) == ACL_SUCCESS);
    for (int pass = 0; pass < 2; pass++) {
        aclrtStream stream = pass ? s : NULL;
        dynamic_quant(stream);
        gating(stream);
        routing(stream);
        swiglu(stream);
    }
    CHECK(aclrtDestroyStream(s) == ACL_SUCCESS);
    /* executors left unexecuted are released by aclFinalize */
    float x[4] = {1, 2, 3, 4}, o[2];
    int64_t xs = 4, os = 2;
    aclTensor *tx = tensor(&xs, 1, ACL_FLOAT, x), *to = tensor(&os, 1, ACL_FLOAT, o);
    uint64_t size;
    aclOpExecutor *ex = NULL;
    CHECK(aclnnSwiGluGetWorkspaceSize(tx, 0, to, &size, &ex) == 0);
    aclDestroyTensor(tx);
    aclDestroyTensor(to);
    CHECK(aclFinalize() == ACL_SUCCESS);
    return qt_finish("compat_moe");
}
