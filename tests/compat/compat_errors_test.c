/*
 * Error paths of the vendor-compatible API: every first-phase rule returns the vendor's code with
 * a message naming the argument; second-phase failures destroy the one-shot executor and leave the
 * outputs untouched; the runtime subset returns error codes (never crashes) for NULL pointers,
 * unknown handles (tensors destroyed twice included), unknown copy kinds and too-small
 * destinations. What a program forgets to free
 * is released by aclFinalize (the valgrind run of this program checks it).
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "acl/acl.h"
#include "aclnnop/aclnn_grouped_matmul_swiglu_quant.h"
#include "aclnnop/aclnn_grouped_matmul_swiglu_quant_weight_nz.h"
#include "qmoe/qmoe.h"
#include "support/testlib.h"

/* A failure with `code` whose message contains `word`; the message is then cleared. */
#define EXPECT_FAIL(call, code, word)                                                              \
    do {                                                                                           \
        long long got_ = (long long)(call);                                                        \
        const char *msg_ = aclGetRecentErrMsg();                                                   \
        CHECK_MSG(got_ == (code), "%s returned %lld, expected %lld (%s)", #call, got_,            \
                  (long long)(code), msg_);                                                        \
        CHECK_MSG(msg_ && strstr(msg_, word), "%s: message '%s' lacks '%s'", #call,              \
                  msg_ ? msg_ : "(null)", word);                                                   \
        CHECK_MSG(aclGetRecentErrMsg()[0] == '\0', "%s: message not cleared", #call);            \
    } while (0)

static int64_t arena[1 << 14]; /* phase one reads no data: every input may point here */
/* ... but outputs may not share memory with inputs or each other (no in-place execution). */
static int64_t out_arena[1 << 10], os_arena[1 << 10];

static aclTensor *mk_at(const int64_t *shape, uint64_t n, aclDataType dt, aclFormat fmt, void *data)
{
    return aclCreateTensor(shape, n, dt, NULL, 0, fmt, shape, n, data);
}

static aclTensor *mk(const int64_t *shape, uint64_t n, aclDataType dt, aclFormat fmt)
{
    return mk_at(shape, n, dt, fmt, arena);
}

/* A valid A8W8 NZ problem: E=2, M=4, K=32, N=64, and an A8W4 one with the same shapes. */
enum { E = 2, M = 4, K = 32, N = 64 };
static const int64_t sh_x[] = {M, K}, sh_w8[] = {E, N / 32, K / 16, 16, 32},
                     sh_w4[] = {E, N / 64, K / 16, 16, 64}, sh_en[] = {E, N}, sh_m[] = {M},
                     sh_g[] = {E}, sh_out[] = {M, N / 2};

typedef struct args {
    aclTensor *x, *w, *bias, *offset, *ws, *xs, *g, *out, *os, *oo;
} args;

static args valid(int a8w4)
{
    args a = {
        .x = mk(sh_x, 2, ACL_INT8, ACL_FORMAT_ND),
        .w = a8w4 ? mk(sh_w4, 5, ACL_INT4, ACL_FORMAT_FRACTAL_NZ) : mk(sh_w8, 5, ACL_INT8, ACL_FORMAT_FRACTAL_NZ),
        .bias = a8w4 ? mk(sh_en, 2, ACL_FLOAT, ACL_FORMAT_ND) : NULL,
        .ws = mk(sh_en, 2, ACL_FLOAT, ACL_FORMAT_ND),
        .xs = mk(sh_m, 1, ACL_FLOAT, ACL_FORMAT_ND),
        .g = mk(sh_g, 1, ACL_INT64, ACL_FORMAT_ND),
        .out = mk_at(sh_out, 2, ACL_INT8, ACL_FORMAT_ND, out_arena),
        .os = mk_at(sh_m, 1, ACL_FLOAT, ACL_FORMAT_ND, os_arena),
    };
    return a;
}

static void destroy(args *a)
{
    aclTensor *all[] = {a->x, a->w, a->bias, a->offset, a->ws, a->xs, a->g, a->out, a->os, a->oo};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) aclDestroyTensor(all[i]);
}

static aclnnStatus phase_one(const args *a, uint64_t *size, aclOpExecutor **ex)
{
    return aclnnGroupedMatmulSwigluQuantWeightNZGetWorkspaceSize(a->x, a->w, a->bias, a->offset,
                                                                 a->ws, a->xs, a->g, a->out, a->os,
                                                                 a->oo, size, ex);
}

/* Replaces one tensor of a valid problem and expects phase one to fail with `code`, `word`. */
#define EXPECT_PLAN_FAIL(a8w4, field, replacement, code, word)                                     \
    do {                                                                                           \
        args a_ = valid(a8w4);                                                                     \
        aclDestroyTensor(a_.field);                                                                \
        a_.field = (replacement);                                                                  \
        uint64_t size_ = 0;                                                                        \
        aclOpExecutor *ex_ = NULL;                                                                 \
        EXPECT_FAIL(phase_one(&a_, &size_, &ex_), code, word);                                     \
        CHECK(ex_ == NULL);                                                                        \
        destroy(&a_);                                                                              \
    } while (0)

static void test_before_init(void)
{
    void *p = NULL;
    EXPECT_FAIL(aclrtMalloc(&p, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_UNINITIALIZE, "aclInit");
    EXPECT_FAIL(aclFinalize(), ACL_ERROR_REPEAT_FINALIZE, "not initialized");
    char buf[4];
    EXPECT_FAIL(aclrtMemcpy(buf, 4, "abc", 4, ACL_MEMCPY_HOST_TO_HOST), ACL_ERROR_UNINITIALIZE, "aclInit");
    args a = valid(0);
    uint64_t size;
    aclOpExecutor *ex = NULL;
    EXPECT_FAIL(phase_one(&a, &size, &ex), ACLNN_ERR_RUNTIME_ERROR, "aclInit");
    destroy(&a);
}

static void test_init_and_devices(void)
{
    EXPECT_FAIL(aclInit("/nonexistent/qmoe-acl.json"), ACL_ERROR_INVALID_FILE, "config");
    setenv("QMOE_ACL_THREADS", "lots", 1);
    EXPECT_FAIL(aclInit(NULL), ACL_ERROR_INVALID_PARAM, "QMOE_ACL_THREADS");
    setenv("QMOE_ACL_THREADS", "2", 1);
    setenv("QMOE_ACL_DEVICES", "0", 1);
    EXPECT_FAIL(aclInit(NULL), ACL_ERROR_INVALID_PARAM, "QMOE_ACL_DEVICES");
    /* Two devices of two threads: device 1 exists, device 2 does not. */
    setenv("QMOE_ACL_DEVICES", "2", 1);
    CHECK(aclInit(NULL) == ACL_SUCCESS);
    CHECK(aclrtSetDevice(1) == ACL_SUCCESS);
    EXPECT_FAIL(aclrtSetDevice(2), ACL_ERROR_RT_INVALID_DEVICEID, "2 devices");
    int32_t got = -1;
    CHECK(aclrtGetDevice(&got) == ACL_SUCCESS && got == 1);
    CHECK(aclrtResetDevice(1) == ACL_SUCCESS);
    CHECK(aclFinalize() == ACL_SUCCESS);
    unsetenv("QMOE_ACL_DEVICES");
    unsetenv("QMOE_ACL_THREADS");
    CHECK(aclInit(NULL) == ACL_SUCCESS);
    EXPECT_FAIL(aclInit(NULL), ACL_ERROR_REPEAT_INITIALIZE, "already");
    int32_t dev = -7;
    EXPECT_FAIL(aclrtGetDevice(&dev), ACL_ERROR_RT_CONTEXT_NULL, "aclrtSetDevice");
    EXPECT_FAIL(aclrtGetDevice(NULL), ACL_ERROR_INVALID_PARAM, "NULL");
    EXPECT_FAIL(aclrtSetDevice(-1), ACL_ERROR_RT_INVALID_DEVICEID, "does not exist");
    EXPECT_FAIL(aclrtSetDevice(64), ACL_ERROR_RT_INVALID_DEVICEID, "does not exist");
    CHECK(aclrtSetDevice(0) == ACL_SUCCESS);
    CHECK(aclrtGetDevice(&dev) == ACL_SUCCESS && dev == 0);
}

static void test_memory(void)
{
    void *d = NULL, *h = NULL;
    EXPECT_FAIL(aclrtMalloc(NULL, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_INVALID_PARAM, "NULL");
    EXPECT_FAIL(aclrtMalloc(&d, 0, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_INVALID_PARAM, "size is 0");
    CHECK(aclrtMalloc(&d, 100, ACL_MEM_MALLOC_NORMAL_ONLY) == ACL_SUCCESS && d);
    CHECK(((uintptr_t)d & 63) == 0);
    CHECK(aclrtMallocHost(&h, 100) == ACL_SUCCESS && h);
    EXPECT_FAIL(aclrtFree(NULL), ACL_ERROR_INVALID_PARAM, "NULL");
    EXPECT_FAIL(aclrtFree(arena), ACL_ERROR_INVALID_PARAM, "not allocated");
    EXPECT_FAIL(aclrtFreeHost(d), ACL_ERROR_INVALID_PARAM, "aclrtMallocHost");
    EXPECT_FAIL(aclrtFree(h), ACL_ERROR_INVALID_PARAM, "aclrtMalloc");

    /* Copies: every published kind copies; bad arguments copy nothing. */
    unsigned char src[100], dst[100];
    for (int i = 0; i < 100; i++) src[i] = (unsigned char)(i * 7 + 1);
    for (int kind = ACL_MEMCPY_HOST_TO_HOST; kind <= ACL_MEMCPY_INTER_DEVICE_TO_DEVICE; kind++) {
        memset(d, 0, 100);
        CHECK(aclrtMemcpy(d, 100, src, 100, (aclrtMemcpyKind)kind) == ACL_SUCCESS);
        CHECK(memcmp(d, src, 100) == 0);
    }
    memset(dst, 0xEE, sizeof dst);
    EXPECT_FAIL(aclrtMemcpy(dst, 99, d, 100, ACL_MEMCPY_DEVICE_TO_HOST), ACL_ERROR_INVALID_PARAM, "destMax");
    EXPECT_FAIL(aclrtMemcpy(NULL, 100, d, 100, ACL_MEMCPY_DEVICE_TO_HOST), ACL_ERROR_INVALID_PARAM, "dst");
    EXPECT_FAIL(aclrtMemcpy(dst, 100, NULL, 100, ACL_MEMCPY_DEVICE_TO_HOST), ACL_ERROR_INVALID_PARAM, "src");
    EXPECT_FAIL(aclrtMemcpy(dst, 100, d, 100, (aclrtMemcpyKind)99), ACL_ERROR_INVALID_PARAM, "kind");
    EXPECT_FAIL(aclrtMemcpy(dst, 100, d, 100, (aclrtMemcpyKind)-1), ACL_ERROR_INVALID_PARAM, "kind");
    CHECK(dst[0] == 0xEE && dst[99] == 0xEE);
    CHECK(aclrtMemcpy(dst, 100, d, 0, ACL_MEMCPY_DEVICE_TO_HOST) == ACL_SUCCESS && dst[0] == 0xEE);
    CHECK(aclrtMemcpy(dst, 100, d, 100, ACL_MEMCPY_DEVICE_TO_HOST) == ACL_SUCCESS);
    CHECK(memcmp(dst, src, 100) == 0);

    EXPECT_FAIL(aclrtMemset(NULL, 100, 0, 100), ACL_ERROR_INVALID_PARAM, "NULL");
    EXPECT_FAIL(aclrtMemset(d, 50, 0, 51), ACL_ERROR_INVALID_PARAM, "maxCount");
    CHECK(aclrtMemset(d, 100, 0x1AB, 100) == ACL_SUCCESS);
    CHECK(((unsigned char *)d)[0] == 0xAB && ((unsigned char *)d)[99] == 0xAB);

    CHECK(aclrtFree(d) == ACL_SUCCESS);
    EXPECT_FAIL(aclrtFree(d), ACL_ERROR_INVALID_PARAM, "already freed");
    CHECK(aclrtFreeHost(h) == ACL_SUCCESS);
}

static void test_streams(void)
{
    aclrtStream s = NULL;
    EXPECT_FAIL(aclrtCreateStream(NULL), ACL_ERROR_INVALID_PARAM, "NULL");
    EXPECT_FAIL(aclrtDestroyStream(NULL), ACL_ERROR_INVALID_PARAM, "NULL");
    EXPECT_FAIL(aclrtDestroyStream(arena), ACL_ERROR_INVALID_RESOURCE_HANDLE, "not a live stream");
    EXPECT_FAIL(aclrtSynchronizeStream(arena), ACL_ERROR_INVALID_RESOURCE_HANDLE, "not a live stream");
    CHECK(aclrtCreateStream(&s) == ACL_SUCCESS && s);
    CHECK(aclrtSynchronizeStream(s) == ACL_SUCCESS);
    CHECK(aclrtSynchronizeStream(NULL) == ACL_SUCCESS);
    CHECK(aclrtDestroyStream(s) == ACL_SUCCESS);
    EXPECT_FAIL(aclrtDestroyStream(s), ACL_ERROR_INVALID_RESOURCE_HANDLE, "not a live stream");
}

static void test_create_tensor(void)
{
    int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1}, neg[2] = {2, -1}, ok[2] = {2, 2};
    CHECK(aclCreateTensor(nine, 9, ACL_INT8, NULL, 0, ACL_FORMAT_ND, nine, 9, arena) == NULL);
    CHECK(strstr(aclGetRecentErrMsg(), "rank") != NULL);
    CHECK(aclCreateTensor(neg, 2, ACL_INT8, NULL, 0, ACL_FORMAT_ND, ok, 2, arena) == NULL);
    CHECK(strstr(aclGetRecentErrMsg(), "negative") != NULL);
    CHECK(aclCreateTensor(NULL, 2, ACL_INT8, NULL, 0, ACL_FORMAT_ND, ok, 2, arena) == NULL);
    CHECK(strstr(aclGetRecentErrMsg(), "NULL") != NULL);
    CHECK(aclCreateTensor(ok, 2, ACL_INT8, NULL, -1, ACL_FORMAT_ND, ok, 2, arena) == NULL);
    CHECK(strstr(aclGetRecentErrMsg(), "offset") != NULL);
    CHECK(aclDestroyTensor(NULL) == ACLNN_SUCCESS);
}

/* Tensors are registered handles: a second destroy, a pointer that never was a tensor and a
 * destroyed tensor handed to phase one are error codes, not heap corruption. */
static void test_destroy_tensor(void)
{
    int64_t ok[2] = {2, 2}, not_a_tensor = 0;
    aclTensor *t = mk(ok, 2, ACL_INT8, ACL_FORMAT_ND);
    CHECK(t != NULL);
    CHECK(aclDestroyTensor(t) == ACLNN_SUCCESS);
    EXPECT_FAIL(aclDestroyTensor(t), ACLNN_ERR_PARAM_INVALID, "already destroyed");
    EXPECT_FAIL(aclDestroyTensor((const aclTensor *)&not_a_tensor), ACLNN_ERR_PARAM_INVALID,
                "not created by aclCreateTensor");

    args a = valid(0);
    CHECK(aclDestroyTensor(a.xs) == ACLNN_SUCCESS);
    uint64_t size = 0;
    aclOpExecutor *ex = NULL;
    EXPECT_FAIL(phase_one(&a, &size, &ex), ACLNN_ERR_PARAM_INVALID, "not a live tensor");
    CHECK(ex == NULL);
    a.xs = NULL;
    destroy(&a);

    /* many live at once (the registry grows and shrinks): each destroy succeeds exactly once */
    enum { MANY = 5000 };
    static aclTensor *many[MANY];
    for (int i = 0; i < MANY; i++) CHECK((many[i] = mk(ok, 2, ACL_INT8, ACL_FORMAT_ND)) != NULL);
    int bad = 0;
    for (int i = 0; i < MANY; i += 2) bad += aclDestroyTensor(many[i]) != ACLNN_SUCCESS;
    for (int i = MANY - 1; i >= 0; i -= 2) bad += aclDestroyTensor(many[i]) != ACLNN_SUCCESS;
    for (int i = 0; i < MANY; i += 7) bad += aclDestroyTensor(many[i]) != ACLNN_ERR_PARAM_INVALID;
    CHECK_MSG(bad == 0, "%d destroys with the wrong result", bad);
    (void)aclGetRecentErrMsg();
}

static void test_phase_one(void)
{
    /* Null pointers: every required tensor, bias for A8W4, the out-parameters. */
    EXPECT_PLAN_FAIL(0, x, NULL, ACLNN_ERR_PARAM_NULLPTR, "x is a null pointer");
    EXPECT_PLAN_FAIL(0, w, NULL, ACLNN_ERR_PARAM_NULLPTR, "weight is a null pointer");
    EXPECT_PLAN_FAIL(0, ws, NULL, ACLNN_ERR_PARAM_NULLPTR, "weightScale is a null pointer");
    EXPECT_PLAN_FAIL(0, xs, NULL, ACLNN_ERR_PARAM_NULLPTR, "xScale is a null pointer");
    EXPECT_PLAN_FAIL(0, g, NULL, ACLNN_ERR_PARAM_NULLPTR, "groupList is a null pointer");
    EXPECT_PLAN_FAIL(0, out, NULL, ACLNN_ERR_PARAM_NULLPTR, "output is a null pointer");
    EXPECT_PLAN_FAIL(0, os, NULL, ACLNN_ERR_PARAM_NULLPTR, "outputScale is a null pointer");
    EXPECT_PLAN_FAIL(1, bias, NULL, ACLNN_ERR_PARAM_NULLPTR, "bias");
    {
        args a = valid(0);
        aclOpExecutor *ex = NULL;
        uint64_t size;
        EXPECT_FAIL(phase_one(&a, NULL, &ex), ACLNN_ERR_PARAM_NULLPTR, "workspaceSize");
        EXPECT_FAIL(phase_one(&a, &size, NULL), ACLNN_ERR_PARAM_NULLPTR, "executor");
        destroy(&a);
    }

    /* Reserved arguments, A8W8 bias. */
    EXPECT_PLAN_FAIL(0, offset, mk(sh_en, 2, ACL_FLOAT, ACL_FORMAT_ND), ACLNN_ERR_PARAM_INVALID, "offset");
    EXPECT_PLAN_FAIL(0, oo, mk(sh_m, 1, ACL_FLOAT, ACL_FORMAT_ND), ACLNN_ERR_PARAM_INVALID, "outputOffset");
    EXPECT_PLAN_FAIL(0, bias, mk(sh_en, 2, ACL_FLOAT, ACL_FORMAT_ND), ACLNN_ERR_PARAM_INVALID, "bias");

    /* Rank, dtype, format. */
    static const int64_t r3[] = {1, M, K};
    EXPECT_PLAN_FAIL(0, x, mk(r3, 3, ACL_INT8, ACL_FORMAT_ND), ACLNN_ERR_PARAM_INVALID, "x");
    EXPECT_PLAN_FAIL(0, x, mk(sh_x, 2, ACL_FLOAT16, ACL_FORMAT_ND), ACLNN_ERR_PARAM_INVALID, "x");
    EXPECT_PLAN_FAIL(0, x, mk(sh_x, 2, ACL_BOOL, ACL_FORMAT_ND), ACLNN_ERR_PARAM_INVALID, "data type");
    EXPECT_PLAN_FAIL(0, x, mk(sh_x, 2, ACL_INT8, ACL_FORMAT_FRACTAL_NZ), ACLNN_ERR_PARAM_INVALID, "x");
    EXPECT_PLAN_FAIL(0, x, mk(sh_x, 2, ACL_INT8, ACL_FORMAT_NC1HWC0), ACLNN_ERR_PARAM_INVALID, "format");
    EXPECT_PLAN_FAIL(0, xs, mk(sh_m, 1, ACL_DOUBLE, ACL_FORMAT_ND), ACLNN_ERR_PARAM_INVALID, "xScale");
    EXPECT_PLAN_FAIL(0, ws, mk(sh_en, 2, ACL_UINT64, ACL_FORMAT_ND), ACLNN_ERR_PARAM_INVALID, "weightScale");
    EXPECT_PLAN_FAIL(0, w, mk(sh_w8, 5, ACL_FLOAT, ACL_FORMAT_FRACTAL_NZ), ACLNN_ERR_PARAM_INVALID, "weight");

    /* The WeightNZ variant's weight: 5-D storage, a view that matches it, NZ inner dims. */
    static const int64_t w4d[] = {E, N / 32, K / 16, 512}, w3[] = {E, K, N}, wbad3[] = {E, K, N + 32},
                         wbad5[] = {E, N / 32, K / 16, 16, 16};
    EXPECT_PLAN_FAIL(0, w, mk(w4d, 4, ACL_INT8, ACL_FORMAT_FRACTAL_NZ), ACLNN_ERR_PARAM_INVALID, "5-D storage");
    EXPECT_PLAN_FAIL(0, w, mk(w3, 3, ACL_INT8, ACL_FORMAT_FRACTAL_NZ), ACLNN_ERR_PARAM_INVALID, "5-D storage");
    EXPECT_PLAN_FAIL(0, w,
                     aclCreateTensor(wbad3, 3, ACL_INT8, NULL, 0, ACL_FORMAT_FRACTAL_NZ, sh_w8, 5, arena),
                     ACLNN_ERR_PARAM_INVALID, "does not match");
    EXPECT_PLAN_FAIL(0, w, mk(wbad5, 5, ACL_INT8, ACL_FORMAT_FRACTAL_NZ), ACLNN_ERR_PARAM_INVALID, "weight");

    /* One error channel: the vendor call's failure is also qmoe's structured last error. */
    {
        args a = valid(0);
        aclDestroyTensor(a.x);
        a.x = mk(r3, 3, ACL_INT8, ACL_FORMAT_ND);
        aclOpExecutor *ex = NULL;
        uint64_t size;
        CHECK(phase_one(&a, &size, &ex) == ACLNN_ERR_PARAM_INVALID);
        const qmoe_error_info *e = qmoe_last_error_info();
        CHECK_MSG(e->status == (qmoe_status)ACLNN_ERR_PARAM_INVALID && e->rule == QMOE_RULE_RANK &&
                      !strcmp(e->arg, "x") && !strcmp(e->message, qmoe_last_error()) &&
                      strstr(e->message, "aclnnGroupedMatmulSwigluQuant") != NULL,
                  "status %d rule %d arg '%s' message '%s'", (int)e->status, (int)e->rule, e->arg,
                  e->message);
        CHECK(strstr(aclGetRecentErrMsg(), "rank") != NULL);
        CHECK(qmoe_last_error()[0] == '\0' && qmoe_last_error_info()->status == QMOE_OK);
        destroy(&a);
    }

    /* Shapes and limits of the spec's table. */
    static const int64_t g3[] = {E + 1}, out_bad[] = {M, N}, os_bad[] = {M + 1}, ws_g3[] = {E, 3, N},
                         ws_bad[] = {E, N + 2};
    EXPECT_PLAN_FAIL(0, g, mk(g3, 1, ACL_INT64, ACL_FORMAT_ND), ACLNN_ERR_PARAM_INVALID, "groupList");
    EXPECT_PLAN_FAIL(0, out, mk(out_bad, 2, ACL_INT8, ACL_FORMAT_ND), ACLNN_ERR_PARAM_INVALID, "output");
    EXPECT_PLAN_FAIL(0, os, mk(os_bad, 1, ACL_FLOAT, ACL_FORMAT_ND), ACLNN_ERR_PARAM_INVALID, "outputScale");
    EXPECT_PLAN_FAIL(0, ws, mk(ws_g3, 3, ACL_FLOAT, ACL_FORMAT_ND), ACLNN_ERR_PARAM_INVALID, "multiple");
    EXPECT_PLAN_FAIL(0, ws, mk(ws_bad, 2, ACL_FLOAT, ACL_FORMAT_ND), ACLNN_ERR_PARAM_INVALID, "weightScale");
    static const int64_t w_bign[] = {E, 321, K / 16, 16, 32}, ws_bign[] = {E, 321 * 32},
                         out_bign[] = {M, 321 * 16};
    {
        args a = valid(0);
        aclDestroyTensor(a.w);
        aclDestroyTensor(a.ws);
        aclDestroyTensor(a.out);
        a.w = mk(w_bign, 5, ACL_INT8, ACL_FORMAT_FRACTAL_NZ);
        a.ws = mk(ws_bign, 2, ACL_FLOAT, ACL_FORMAT_ND);
        a.out = mk(out_bign, 2, ACL_INT8, ACL_FORMAT_ND);
        uint64_t size;
        aclOpExecutor *ex = NULL;
        EXPECT_FAIL(phase_one(&a, &size, &ex), ACLNN_ERR_PARAM_INVALID, "10240");
        destroy(&a);
    }
    static const int64_t x_k8[] = {M, 65536}, w_k8[] = {E, N / 32, 65536 / 16, 16, 32},
                         x_k4[] = {M, 20000}, w_k4[] = {E, N / 64, 20000 / 16, 16, 64};
    {
        args a = valid(0);
        aclDestroyTensor(a.x);
        aclDestroyTensor(a.w);
        a.x = mk(x_k8, 2, ACL_INT8, ACL_FORMAT_ND);
        a.w = mk(w_k8, 5, ACL_INT8, ACL_FORMAT_FRACTAL_NZ);
        uint64_t size;
        aclOpExecutor *ex = NULL;
        EXPECT_FAIL(phase_one(&a, &size, &ex), ACLNN_ERR_PARAM_INVALID, "65536");
        destroy(&a);
        a = valid(1);
        aclDestroyTensor(a.x);
        aclDestroyTensor(a.w);
        a.x = mk(x_k4, 2, ACL_INT8, ACL_FORMAT_ND);
        a.w = mk(w_k4, 5, ACL_INT4, ACL_FORMAT_FRACTAL_NZ);
        EXPECT_FAIL(phase_one(&a, &size, &ex), ACLNN_ERR_PARAM_INVALID, "20000");
        destroy(&a);
    }
    /* Odd N through the plain variant's ND weight. */
    {
        static const int64_t w_odd[] = {E, K, 63}, ws_odd[] = {E, 63};
        args a = valid(0);
        aclDestroyTensor(a.w);
        aclDestroyTensor(a.ws);
        a.w = mk(w_odd, 3, ACL_INT8, ACL_FORMAT_ND);
        a.ws = mk(ws_odd, 2, ACL_FLOAT, ACL_FORMAT_ND);
        uint64_t size;
        aclOpExecutor *ex = NULL;
        EXPECT_FAIL(aclnnGroupedMatmulSwigluQuantGetWorkspaceSize(a.x, a.w, NULL, NULL, a.ws, a.xs, a.g,
                                                                  a.out, a.os, NULL, &size, &ex),
                    ACLNN_ERR_PARAM_INVALID, "odd");
        destroy(&a);
    }

    /* Views: outside the storage, odd int4 offset. */
    static const int64_t small[] = {M * K - 1};
    EXPECT_PLAN_FAIL(0, x, aclCreateTensor(sh_x, 2, ACL_INT8, NULL, 0, ACL_FORMAT_ND, small, 1, arena),
                     ACLNN_ERR_PARAM_INVALID, "storage");
    {
        /* An int4 offset must land on a byte (ND weight through the plain variant). */
        static const int64_t w_nd[] = {E, K, N}, w4_big[] = {E * K * N + 2};
        args a = valid(1);
        aclDestroyTensor(a.w);
        a.w = aclCreateTensor(w_nd, 3, ACL_INT4, NULL, 1, ACL_FORMAT_ND, w4_big, 1, arena);
        uint64_t size;
        aclOpExecutor *ex = NULL;
        EXPECT_FAIL(aclnnGroupedMatmulSwigluQuantGetWorkspaceSize(a.x, a.w, a.bias, NULL, a.ws, a.xs,
                                                                  a.g, a.out, a.os, NULL, &size, &ex),
                    ACLNN_ERR_PARAM_INVALID, "even");
        /* ... and an in-bounds offset view is accepted (the executor is left to aclFinalize). */
        static const int64_t x_big[] = {M * K + 1};
        aclDestroyTensor(a.x);
        a.x = aclCreateTensor(sh_x, 2, ACL_INT8, NULL, 1, ACL_FORMAT_ND, x_big, 1, arena);
        CHECK(aclnnGroupedMatmulSwigluQuantGetWorkspaceSize(a.x, a.w, a.bias, NULL, a.ws, a.xs, a.g,
                                                            a.out, a.os, NULL, &size,
                                                            &ex) == ACLNN_ERR_PARAM_INVALID);
        CHECK(strstr(aclGetRecentErrMsg(), "even") != NULL); /* x is fine now; weight still odd */
        aclDestroyTensor(a.w);
        a.w = mk(sh_w4, 5, ACL_INT4, ACL_FORMAT_FRACTAL_NZ);
        CHECK(phase_one(&a, &size, &ex) == ACLNN_SUCCESS && ex != NULL);
        destroy(&a);
    }
}

/* Second phase: NULL and reused executors, bad groupList data (outputs untouched), a too-small
 * workspace and an unknown stream; each failure also consumes the executor. */
static void test_phase_two(void)
{
    int8_t x[M * K], w[E * K * N], out[M * N / 2];
    float ws[E * N], xs[M], os[M];
    int64_t g[E];
    memset(x, 1, sizeof x);
    memset(w, 1, sizeof w);
    for (int i = 0; i < E * N; i++) ws[i] = 0.01f;
    for (int i = 0; i < M; i++) xs[i] = 0.1f;
    memset(out, 0x5A, sizeof out);
    memset(os, 0x5A, sizeof os);
    g[0] = 3;
    g[1] = 2; /* decreasing */
    aclTensor *tx = aclCreateTensor(sh_x, 2, ACL_INT8, NULL, 0, ACL_FORMAT_ND, sh_x, 2, x);
    aclTensor *tw = aclCreateTensor(sh_w8, 5, ACL_INT8, NULL, 0, ACL_FORMAT_FRACTAL_NZ, sh_w8, 5, w);
    aclTensor *tws = aclCreateTensor(sh_en, 2, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, sh_en, 2, ws);
    aclTensor *txs = aclCreateTensor(sh_m, 1, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, sh_m, 1, xs);
    aclTensor *tg = aclCreateTensor(sh_g, 1, ACL_INT64, NULL, 0, ACL_FORMAT_ND, sh_g, 1, g);
    aclTensor *to = aclCreateTensor(sh_out, 2, ACL_INT8, NULL, 0, ACL_FORMAT_ND, sh_out, 2, out);
    aclTensor *tos = aclCreateTensor(sh_m, 1, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, sh_m, 1, os);
    aclrtStream s = NULL;
    CHECK(aclrtCreateStream(&s) == ACL_SUCCESS);
    uint64_t size = 0;
    aclOpExecutor *ex = NULL;
#define PLAN() \
    aclnnGroupedMatmulSwigluQuantWeightNZGetWorkspaceSize(tx, tw, NULL, NULL, tws, txs, tg, to, tos, NULL, &size, &ex)

    EXPECT_FAIL(aclnnGroupedMatmulSwigluQuantWeightNZ(NULL, 0, NULL, s), ACLNN_ERR_PARAM_NULLPTR, "executor");

    CHECK(PLAN() == ACLNN_SUCCESS && ex);
    void *work = NULL;
    if (size) CHECK(aclrtMalloc(&work, size, ACL_MEM_MALLOC_HUGE_FIRST) == ACL_SUCCESS);
    /* groupList is read on the device when the operator runs (an earlier operator on the stream
     * may write it): the launch is queued, the stream reports the error, once, and nothing is
     * written. */
    CHECK(aclnnGroupedMatmulSwigluQuantWeightNZ(work, size, ex, s) == ACLNN_SUCCESS);
    EXPECT_FAIL(aclrtSynchronizeStream(s), ACLNN_ERR_PARAM_INVALID, "groupList");
    int untouched = 1;
    for (size_t i = 0; i < sizeof out; i++) untouched &= (uint8_t)out[i] == 0x5A;
    CHECK(untouched);
    CHECK(((uint8_t *)os)[0] == 0x5A && ((uint8_t *)os)[sizeof os - 1] == 0x5A);
    CHECK(aclrtSynchronizeStream(s) == ACL_SUCCESS);
    /* The launch consumed the executor: it is one-shot. */
    EXPECT_FAIL(aclnnGroupedMatmulSwigluQuantWeightNZ(work, size, ex, s), ACLNN_ERR_PARAM_INVALID, "one-shot");
    /* On the default stream the launch waits, so the call itself reports it, nothing written. */
    CHECK(PLAN() == ACLNN_SUCCESS && ex);
    EXPECT_FAIL(aclnnGroupedMatmulSwigluQuantWeightNZ(work, size, ex, NULL), ACLNN_ERR_PARAM_INVALID,
                "groupList");
    untouched = 1;
    for (size_t i = 0; i < sizeof out; i++) untouched &= (uint8_t)out[i] == 0x5A;
    CHECK(untouched && ((uint8_t *)os)[0] == 0x5A);
    EXPECT_FAIL(aclrtSynchronizeStream(NULL), ACLNN_ERR_PARAM_INVALID, "launched");

    g[1] = 4;
    CHECK(PLAN() == ACLNN_SUCCESS);
    if (size) {
        EXPECT_FAIL(aclnnGroupedMatmulSwigluQuantWeightNZ(work, size - 1, ex, s), ACLNN_ERR_PARAM_INVALID,
                    "workspaceSize");
        CHECK(PLAN() == ACLNN_SUCCESS);
    }
    EXPECT_FAIL(aclnnGroupedMatmulSwigluQuantWeightNZ(work, size, ex, arena), ACLNN_ERR_PARAM_INVALID, "stream");
    CHECK(aclrtSynchronizeStream(s) == ACL_SUCCESS);

    /* A success on the default stream, then the same executor again. */
    CHECK(PLAN() == ACLNN_SUCCESS);
    CHECK(aclnnGroupedMatmulSwigluQuantWeightNZ(work, size, ex, NULL) == ACLNN_SUCCESS);
    CHECK(aclrtSynchronizeStream(NULL) == ACL_SUCCESS);
    CHECK(os[0] > 0.0f && os[3] > 0.0f);
    EXPECT_FAIL(aclnnGroupedMatmulSwigluQuantWeightNZ(work, size, ex, NULL), ACLNN_ERR_PARAM_INVALID, "one-shot");

    /* Left for aclFinalize: a planned executor never executed, the workspace, the stream. */
    CHECK(PLAN() == ACLNN_SUCCESS);
#undef PLAN
    aclTensor *all[] = {tx, tw, tws, txs, tg, to, tos};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) aclDestroyTensor(all[i]);
}

static void test_finalize(void)
{
    void *leftover = NULL;
    int64_t two[1] = {2};
    aclTensor *kept = mk(two, 1, ACL_FLOAT, ACL_FORMAT_ND); /* tensors do not need aclInit */
    CHECK(aclrtMalloc(&leftover, 4096, ACL_MEM_MALLOC_HUGE_FIRST) == ACL_SUCCESS);
    CHECK(aclrtResetDevice(0) == ACL_SUCCESS);
    int32_t dev;
    EXPECT_FAIL(aclrtGetDevice(&dev), ACL_ERROR_RT_CONTEXT_NULL, "no device");
    CHECK(aclFinalize() == ACL_SUCCESS);
    EXPECT_FAIL(aclrtFree(leftover), ACL_ERROR_UNINITIALIZE, "aclInit");
    EXPECT_FAIL(aclFinalize(), ACL_ERROR_REPEAT_FINALIZE, "not initialized");
    /* A second run in the same process starts clean. */
    CHECK(aclInit("") == ACL_SUCCESS);
    EXPECT_FAIL(aclrtGetDevice(&dev), ACL_ERROR_RT_CONTEXT_NULL, "no device");
    CHECK(aclFinalize() == ACL_SUCCESS);
    CHECK(aclDestroyTensor(kept) == ACLNN_SUCCESS); /* outlives aclFinalize, freed once */
}

int main(void)
{
    test_before_init();
    test_init_and_devices();
    test_memory();
    test_streams();
    test_create_tensor();
    test_destroy_tensor();
    test_phase_one();
    test_phase_two();
    test_finalize();
    return qt_finish("compat_errors");
}
