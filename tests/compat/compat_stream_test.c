/*
 * Streams of the vendor-compatible API: several operators launched on one stream before a single
 * aclrtSynchronizeStream, on two streams at once, and on the synchronous default stream, must all
 * produce what the same operator produces alone on the default stream (results are deterministic,
 * so bit-identical); destroying a stream with work in flight waits for it.
 */
#include <stdint.h>
#include <string.h>

#include "acl/acl.h"
#include "aclnnop/aclnn_grouped_matmul_swiglu_quant_weight_nz.h"
#include "support/testlib.h"

enum { E = 2, M = 24, K = 64, N = 64, RUNS = 4 };
static const int64_t sh_x[] = {M, K}, sh_w[] = {E, N / 32, K / 16, 16, 32}, sh_en[] = {E, N},
                     sh_m[] = {M}, sh_g[] = {E}, sh_out[] = {M, N / 2};

static int8_t x[M * K], w[E * K * N];
static float ws[E * N], xs[RUNS][M];
static int64_t groups[E] = {10, 20};

typedef struct result {
    int8_t out[M * N / 2];
    float scale[M];
} result;

static aclTensor *tensor(const int64_t *shape, uint64_t n, aclDataType dt, aclFormat f, void *data)
{
    return aclCreateTensor(shape, n, dt, NULL, 0, f, shape, n, data);
}

/* Plans run `r` (its own xScale, its own outputs) and launches it on `stream`. */
static void launch(int r, result *res, aclrtStream stream)
{
    aclTensor *t[] = {
        tensor(sh_x, 2, ACL_INT8, ACL_FORMAT_ND, x),
        tensor(sh_w, 5, ACL_INT8, ACL_FORMAT_FRACTAL_NZ, w),
        tensor(sh_en, 2, ACL_FLOAT, ACL_FORMAT_ND, ws),
        tensor(sh_m, 1, ACL_FLOAT, ACL_FORMAT_ND, xs[r]),
        tensor(sh_g, 1, ACL_INT64, ACL_FORMAT_ND, groups),
        tensor(sh_out, 2, ACL_INT8, ACL_FORMAT_ND, res->out),
        tensor(sh_m, 1, ACL_FLOAT, ACL_FORMAT_ND, res->scale),
    };
    uint64_t size = 0;
    aclOpExecutor *ex = NULL;
    aclnnStatus st = aclnnGroupedMatmulSwigluQuantWeightNZGetWorkspaceSize(
        t[0], t[1], NULL, NULL, t[2], t[3], t[4], t[5], t[6], NULL, &size, &ex);
    CHECK_MSG(st == ACLNN_SUCCESS, "plan: %s", aclGetRecentErrMsg());
    /* Tensor objects may go right after planning; their memory must live until the sync. The
     * workspace too: it is freed by aclFinalize here, as a program might forget to. */
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) aclDestroyTensor(t[i]);
    void *work = NULL;
    if (size) CHECK(aclrtMalloc(&work, size, ACL_MEM_MALLOC_HUGE_FIRST) == ACL_SUCCESS);
    st = aclnnGroupedMatmulSwigluQuantWeightNZ(work, size, ex, stream);
    CHECK_MSG(st == ACLNN_SUCCESS, "launch: %s", aclGetRecentErrMsg());
}

int main(void)
{
    qt_rng rng = {20261130};
    for (int i = 0; i < M * K; i++) x[i] = (int8_t)qt_range(&rng, -128, 127);
    for (int i = 0; i < E * K * N; i++) w[i] = (int8_t)qt_range(&rng, -128, 127);
    for (int i = 0; i < E * N; i++) ws[i] = qt_uniform(&rng, 0.001f, 0.01f);
    for (int r = 0; r < RUNS; r++)
        for (int m = 0; m < M; m++) xs[r][m] = qt_uniform(&rng, 0.01f, 0.1f);

    CHECK(aclInit(NULL) == ACL_SUCCESS);
    CHECK(aclrtSetDevice(0) == ACL_SUCCESS);

    /* Expected: each run alone on the synchronous default stream. */
    /* Rows past groupList's end are not written: every result starts from the same fill. */
    static result expect[RUNS], got[RUNS], other[RUNS];
    memset(expect, 0x5A, sizeof expect);
    for (int r = 0; r < RUNS; r++) launch(r, &expect[r], NULL);
    int distinct = 0;
    for (int r = 1; r < RUNS; r++) distinct += memcmp(&expect[r], &expect[0], sizeof expect[0]) != 0;
    CHECK(distinct == RUNS - 1); /* the runs differ, so a mix-up would show */

    /* All runs queued on one stream, one synchronization. */
    aclrtStream s1 = NULL, s2 = NULL;
    CHECK(aclrtCreateStream(&s1) == ACL_SUCCESS && aclrtCreateStream(&s2) == ACL_SUCCESS);
    memset(got, 0x5A, sizeof got);
    for (int r = 0; r < RUNS; r++) launch(r, &got[r], s1);
    CHECK(aclrtSynchronizeStream(s1) == ACL_SUCCESS);
    for (int r = 0; r < RUNS; r++) CHECK_MSG(memcmp(&got[r], &expect[r], sizeof got[r]) == 0, "run %d", r);

    /* Two streams at once; the second is destroyed (which waits) instead of synchronized. */
    memset(got, 0x5A, sizeof got);
    memset(other, 0x5A, sizeof other);
    for (int r = 0; r < RUNS; r++) {
        launch(r, &got[r], s1);
        launch(RUNS - 1 - r, &other[RUNS - 1 - r], s2);
    }
    CHECK(aclrtDestroyStream(s2) == ACL_SUCCESS);
    CHECK(aclrtSynchronizeStream(s1) == ACL_SUCCESS);
    for (int r = 0; r < RUNS; r++) {
        CHECK_MSG(memcmp(&got[r], &expect[r], sizeof got[r]) == 0, "stream 1 run %d", r);
        CHECK_MSG(memcmp(&other[r], &expect[r], sizeof other[r]) == 0, "stream 2 run %d", r);
    }

    CHECK(aclrtDestroyStream(s1) == ACL_SUCCESS);
    CHECK(aclrtResetDevice(0) == ACL_SUCCESS);
    CHECK(aclFinalize() == ACL_SUCCESS);
    return qt_finish("compat_stream");
}
