/*
 * Every rule of the spec's error table, one case each: the status code, a message that names the
 * argument, the executor and workspace-size out-pointers left alone, and, for the data-dependent
 * groupList rules of phase two, both outputs byte-for-byte untouched.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "qmoe/qmoe.h"
#include "support/testlib.h"

enum { M = 4, K = 32, N = 64, N2 = 32, E = 2 };
static const qmoe_status NUL = QMOE_ERR_PARAM_NULLPTR, INV = QMOE_ERR_PARAM_INVALID;

/* Input buffers; phase one never reads them, phase two reads the base ones. */
static _Alignas(64) uint8_t big[1 << 20]; /* holds the largest view below (weight, N = 10240) */
static _Alignas(64) int8_t big_out[M * 10240 / 2]; /* outputs may not share memory with inputs */
static int8_t x_buf[M * K], w_buf[E * K * N];
static float bias_buf[E * N], ws_buf[E * N], xs_buf[M];
static int64_t gl_buf[E];
static int8_t out_buf[M * N2];
static float oscale_buf[M];

static qmoe_tensor *pool[4096];
static int npool;

static qmoe_tensor *mk_strided(qmoe_dtype dt, qmoe_format fmt, void *data, int nd,
                               const int64_t *shape, const int64_t *strides)
{
    qmoe_tensor *t = NULL;
    qmoe_status st = qmoe_tensor_create(shape, nd, strides, dt, fmt, data, &t);
    CHECK_MSG(st == QMOE_OK, "tensor_create: %s", qmoe_last_error());
    if (npool < (int)(sizeof pool / sizeof pool[0])) pool[npool++] = t;
    return t;
}

#define DIMS(...)                                                                                  \
    (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]) { __VA_ARGS__ }
#define MK(dt, fmt, data, ...) mk_strided(dt, fmt, data, DIMS(__VA_ARGS__), NULL)
#define ND QMOE_FORMAT_ND
#define NZ QMOE_FORMAT_FRACTAL_NZ

typedef struct args {
    const qmoe_tensor *x, *w, *bias, *offset, *ws, *xs, *gl, *out, *oscale, *ooffset;
    qmoe_grouped_matmul_swiglu_quant_options opt;
} args;

/* A valid case: A8W8 with int8 NZ weight, or A8W4 with int32 NZ weight and a bias. */
static args base(int a8w4)
{
    args a = {0};
    a.x = MK(QMOE_DTYPE_INT8, ND, x_buf, M, K);
    if (a8w4) {
        a.w = MK(QMOE_DTYPE_INT32, NZ, w_buf, E, N / 64, K / 16, 16, 8);
        a.bias = MK(QMOE_DTYPE_FLOAT32, ND, bias_buf, E, N);
    } else {
        a.w = MK(QMOE_DTYPE_INT8, NZ, w_buf, E, N / 32, K / 16, 16, 32);
    }
    a.ws = MK(QMOE_DTYPE_FLOAT32, ND, ws_buf, E, N);
    a.xs = MK(QMOE_DTYPE_FLOAT32, ND, xs_buf, M);
    a.gl = MK(QMOE_DTYPE_INT64, ND, gl_buf, E);
    a.out = MK(QMOE_DTYPE_INT8, ND, out_buf, M, N2);
    a.oscale = MK(QMOE_DTYPE_FLOAT32, ND, oscale_buf, M);
    a.opt.kernel = QMOE_KERNEL_REFERENCE;
    return a;
}

/* Whether `msg` contains `name` as a whole word (not part of a longer identifier). */
static int names(const char *msg, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = strstr(msg, name); p; p = strstr(p + 1, name)) {
        int before = p == msg || !(isalnum((unsigned char)p[-1]) || p[-1] == '_');
        int after = !(isalnum((unsigned char)p[len]) || p[len] == '_');
        if (before && after) return 1;
    }
    return 0;
}

static qmoe_status plan(const args *a, uint64_t *size, qmoe_grouped_matmul_swiglu_quant_executor **ex)
{
    return qmoe_grouped_matmul_swiglu_quant_workspace_size(a->x, a->w, a->bias, a->offset, a->ws, a->xs,
                                                a->gl, a->out, a->oscale, a->ooffset, &a->opt,
                                                size, ex);
}

static qmoe_grouped_matmul_swiglu_quant_executor *const SENTINEL = (qmoe_grouped_matmul_swiglu_quant_executor *)(uintptr_t)0x5eed;

/* Phase one must fail with `code` naming `name`, and leave both out-pointers alone. */
static void plan_fails(const char *rule, const args *a, qmoe_status code, const char *name)
{
    qmoe_grouped_matmul_swiglu_quant_executor *ex = SENTINEL;
    uint64_t size = 777;
    qmoe_status st = plan(a, &size, &ex);
    CHECK_MSG(st == code, "%s: got %d, want %d (%s)", rule, (int)st, (int)code, qmoe_last_error());
    CHECK_MSG(ex == SENTINEL && size == 777, "%s: out-pointers written", rule);
    CHECK_MSG(qmoe_last_error()[0] != '\0', "%s: empty message", rule);
    CHECK_MSG(names(qmoe_last_error(), name), "%s: message '%s' does not name '%s'", rule,
              qmoe_last_error(), name);
}

static void plan_passes(const char *rule, const args *a)
{
    qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
    uint64_t size = 0;
    qmoe_status st = plan(a, &size, &ex);
    CHECK_MSG(st == QMOE_OK && ex != NULL, "%s: got %d (%s)", rule, (int)st, qmoe_last_error());
    CHECK_MSG(qmoe_last_error()[0] == '\0', "%s: message after success", rule);
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
}

static void test_valid_bases(void)
{
    args a = base(0);
    plan_passes("A8W8 base", &a);
    a = base(1);
    plan_passes("A8W4 base", &a);
}

static void test_null_pointers(void)
{
    args a;
    a = base(0), a.x = NULL, plan_fails("x NULL", &a, NUL, "x");
    a = base(0), a.w = NULL, plan_fails("weight NULL", &a, NUL, "weight");
    a = base(0), a.ws = NULL, plan_fails("weightScale NULL", &a, NUL, "weightScale");
    a = base(0), a.xs = NULL, plan_fails("xScale NULL", &a, NUL, "xScale");
    a = base(0), a.gl = NULL, plan_fails("groupList NULL", &a, NUL, "groupList");
    a = base(0), a.out = NULL, plan_fails("output NULL", &a, NUL, "output");
    a = base(0), a.oscale = NULL, plan_fails("outputScale NULL", &a, NUL, "outputScale");
    a = base(1), a.bias = NULL, plan_fails("bias NULL for A8W4", &a, NUL, "bias");
    /* the int4 weight dtype is A8W4 too */
    a = base(1), a.bias = NULL;
    a.w = MK(QMOE_DTYPE_INT4, NZ, w_buf, E, N / 64, K / 16, 16, 64);
    plan_fails("bias NULL for int4 A8W4", &a, NUL, "bias");

    qmoe_grouped_matmul_swiglu_quant_executor *ex = SENTINEL;
    uint64_t size = 777;
    a = base(0);
    CHECK(qmoe_grouped_matmul_swiglu_quant_workspace_size(a.x, a.w, a.bias, NULL, a.ws, a.xs, a.gl, a.out,
                                               a.oscale, NULL, NULL, NULL, &ex) == NUL);
    CHECK(ex == SENTINEL && names(qmoe_last_error(), "workspaceSize"));
    CHECK(qmoe_grouped_matmul_swiglu_quant_workspace_size(a.x, a.w, a.bias, NULL, a.ws, a.xs, a.gl, a.out,
                                               a.oscale, NULL, NULL, &size, NULL) == NUL);
    CHECK(size == 777 && names(qmoe_last_error(), "executor"));
    CHECK(qmoe_grouped_matmul_swiglu_quant(NULL, 0, NULL, NULL) == NUL);
    CHECK(names(qmoe_last_error(), "executor"));
}

static void test_reserved_and_options(void)
{
    args a;
    qmoe_tensor *any = MK(QMOE_DTYPE_FLOAT32, ND, big, E, N);
    a = base(0), a.offset = any, plan_fails("offset non-null", &a, INV, "offset");
    a = base(1), a.ooffset = any, plan_fails("outputOffset non-null", &a, INV, "outputOffset");
    a = base(0), a.opt.group_list_type = (qmoe_group_list_type)7;
    plan_fails("group_list_type unknown", &a, INV, "group_list_type");
    a = base(0), a.opt.threads = -1, plan_fails("threads negative", &a, INV, "threads");
    a = base(0), a.opt.devices = -2, plan_fails("devices negative", &a, INV, "devices");
    a = base(0), a.opt.kernel = (qmoe_kernel)99, plan_fails("kernel unknown", &a, INV, "kernel");
}

static void test_x(void)
{
    args a;
    a = base(0), a.x = MK(QMOE_DTYPE_INT8, ND, big, M, K, 1), plan_fails("x rank 3", &a, INV, "x");
    a = base(0), a.x = MK(QMOE_DTYPE_INT8, ND, big, M * K), plan_fails("x rank 1", &a, INV, "x");
    a = base(0), a.x = MK(QMOE_DTYPE_INT32, ND, big, M, K), plan_fails("x dtype", &a, INV, "x");
    a = base(0), a.x = MK(QMOE_DTYPE_INT8, NZ, big, M, K), plan_fails("x format", &a, INV, "x");
    a = base(0), a.x = MK(QMOE_DTYPE_INT8, ND, big, M, K + 16);
    plan_fails("x K differs from weight K", &a, INV, "weight");
}

static void test_weight(void)
{
    args a;
    a = base(0), a.w = MK(QMOE_DTYPE_FLOAT32, NZ, big, E, N / 32, K / 16, 16, 32);
    plan_fails("weight dtype float32", &a, INV, "weight");
    a = base(0), a.w = MK(QMOE_DTYPE_INT8, NZ, big, E, N / 32, K / 16, 16);
    plan_fails("weight NZ rank 4", &a, INV, "weight");
    a = base(0), a.w = MK(QMOE_DTYPE_INT8, ND, big, E, K);
    plan_fails("weight ND rank 2", &a, INV, "weight");
    a = base(0), a.w = MK(QMOE_DTYPE_INT8, NZ, big, E, N / 16, K / 16, 16, 16);
    plan_fails("weight int8 NZ inner dims [16, 16]", &a, INV, "weight");
    a = base(0), a.w = MK(QMOE_DTYPE_INT8, NZ, big, E, N / 32, K / 8, 8, 32);
    plan_fails("weight int8 NZ inner dims [8, 32]", &a, INV, "weight");
    a = base(1), a.w = MK(QMOE_DTYPE_INT4, NZ, big, E, N / 32, K / 16, 16, 32);
    plan_fails("weight int4 NZ inner dims [16, 32]", &a, INV, "weight");
    a = base(1), a.w = MK(QMOE_DTYPE_INT32, NZ, big, E, N / 64, K / 16, 16, 64);
    plan_fails("weight int32 NZ inner dims [16, 64]", &a, INV, "weight");
    /* force_weight_nz (the vendor entry point) reads a 3-D weight as NZ and rejects its rank */
    a = base(0), a.w = MK(QMOE_DTYPE_INT8, ND, big, E, K, N), a.opt.force_weight_nz = 1;
    plan_fails("weight ND forced to NZ", &a, INV, "weight");
    a = base(0), a.w = MK(QMOE_DTYPE_INT8, ND, big, E, K, N - 1);
    a.ws = MK(QMOE_DTYPE_FLOAT32, ND, big, E, N - 1);
    plan_fails("N odd", &a, INV, "N");
    a = base(0), a.w = MK(QMOE_DTYPE_INT8, NZ, big, E, 10272 / 32, K / 16, 16, 32);
    a.ws = MK(QMOE_DTYPE_FLOAT32, ND, big, E, 10272);
    a.out = MK(QMOE_DTYPE_INT8, ND, big, M, 10272 / 2);
    plan_fails("N > 10240", &a, INV, "N");
    a = base(0), a.w = MK(QMOE_DTYPE_INT8, NZ, big, E, 10240 / 32, K / 16, 16, 32);
    a.ws = MK(QMOE_DTYPE_FLOAT32, ND, big, E, 10240);
    a.out = MK(QMOE_DTYPE_INT8, ND, big_out, M, 10240 / 2);
    plan_passes("N = 10240", &a);
    a = base(0), a.gl = MK(QMOE_DTYPE_INT64, ND, big, E + 1);
    plan_fails("E' > E", &a, INV, "groupList");
}

/* The K limits, with everything else consistent. */
static args with_k(int a8w4, int64_t k, int nz)
{
    args a = base(a8w4);
    a.x = MK(QMOE_DTYPE_INT8, ND, big, M, k);
    if (a8w4 && nz) a.w = MK(QMOE_DTYPE_INT32, NZ, big, E, N / 64, k / 16, 16, 8);
    else if (a8w4) a.w = MK(QMOE_DTYPE_INT4, ND, big, E, k, N);
    else if (nz) a.w = MK(QMOE_DTYPE_INT8, NZ, big, E, N / 32, k / 16, 16, 32);
    else a.w = MK(QMOE_DTYPE_INT8, ND, big, E, k, N);
    return a;
}

static void test_k_limits(void)
{
    args a;
    a = with_k(0, 65536, 1), plan_fails("K >= 65536 A8W8", &a, INV, "K");
    a = with_k(0, 65537, 0), plan_fails("K >= 65536 A8W8 (ND)", &a, INV, "K");
    a = with_k(0, 65520, 1), plan_passes("K = 65520 A8W8", &a);
    a = with_k(0, 65535, 0), plan_passes("K = 65535 A8W8 (ND)", &a);
    a = with_k(1, 20000, 1), plan_fails("K >= 20000 A8W4", &a, INV, "K");
    a = with_k(1, 20000, 0), plan_fails("K >= 20000 A8W4 (ND int4)", &a, INV, "K");
    a = with_k(1, 19984, 1), plan_passes("K = 19984 A8W4", &a);
    a = with_k(1, 19999, 0), plan_passes("K = 19999 A8W4 (ND int4)", &a);
}

static void test_weight_scale(void)
{
    args a;
    a = base(1), a.ws = MK(QMOE_DTYPE_FLOAT32, ND, big, E, 3, N);
    plan_fails("K % G != 0", &a, INV, "G");
    a = base(1), a.ws = MK(QMOE_DTYPE_FLOAT32, ND, big, E, 0, N);
    plan_fails("G == 0", &a, INV, "G");
    a = base(1), a.ws = MK(QMOE_DTYPE_FLOAT32, ND, big, E, 4, N);
    plan_passes("G = 4 divides K", &a);
    a = base(0), a.ws = MK(QMOE_DTYPE_UINT64, ND, big, E, N);
    plan_fails("uint64 scale on A8W8", &a, INV, "weightScale");
    a = base(0), a.ws = MK(QMOE_DTYPE_INT64, ND, big, E, N);
    plan_fails("int64 scale on A8W8", &a, INV, "weightScale");
    a = base(1), a.ws = MK(QMOE_DTYPE_UINT64, ND, big, E, N);
    plan_passes("uint64 scale on A8W4", &a);
    a = base(1), a.ws = MK(QMOE_DTYPE_INT8, ND, big, E, N);
    plan_fails("weightScale dtype int8", &a, INV, "weightScale");
    a = base(0), a.ws = MK(QMOE_DTYPE_FLOAT32, ND, big, E * N);
    plan_fails("weightScale rank 1", &a, INV, "weightScale");
    a = base(0), a.ws = MK(QMOE_DTYPE_FLOAT32, ND, big, E, 1, 1, N);
    plan_fails("weightScale rank 4", &a, INV, "weightScale");
    a = base(0), a.ws = MK(QMOE_DTYPE_FLOAT32, ND, big, E + 1, N);
    plan_fails("weightScale E mismatch", &a, INV, "weightScale");
    a = base(0), a.ws = MK(QMOE_DTYPE_FLOAT32, ND, big, E, N / 2);
    plan_fails("weightScale N mismatch", &a, INV, "weightScale");
    a = base(0), a.ws = MK(QMOE_DTYPE_FLOAT32, NZ, big, E, N);
    plan_fails("weightScale format", &a, INV, "weightScale");
}

static void test_bias(void)
{
    args a;
    a = base(0), a.bias = MK(QMOE_DTYPE_FLOAT32, ND, big, E, N);
    plan_fails("A8W8 with bias", &a, INV, "bias");
    a = base(1), a.bias = MK(QMOE_DTYPE_FLOAT16, ND, big, E, N);
    plan_fails("bias dtype", &a, INV, "bias");
    a = base(1), a.bias = MK(QMOE_DTYPE_FLOAT32, ND, big, E * N);
    plan_fails("bias rank", &a, INV, "bias");
    a = base(1), a.bias = MK(QMOE_DTYPE_FLOAT32, ND, big, E, N + 2);
    plan_fails("bias shape", &a, INV, "bias");
    a = base(1), a.bias = MK(QMOE_DTYPE_FLOAT32, NZ, big, E, N);
    plan_fails("bias format", &a, INV, "bias");
}

static void test_small_inputs(void)
{
    args a;
    a = base(0), a.xs = MK(QMOE_DTYPE_FLOAT32, ND, big, M + 1);
    plan_fails("xScale shape", &a, INV, "xScale");
    a = base(0), a.xs = MK(QMOE_DTYPE_FLOAT16, ND, big, M);
    plan_fails("xScale dtype", &a, INV, "xScale");
    a = base(0), a.xs = MK(QMOE_DTYPE_FLOAT32, ND, big, M, 1);
    plan_fails("xScale rank", &a, INV, "xScale");
    a = base(0), a.gl = MK(QMOE_DTYPE_INT32, ND, big, E);
    plan_fails("groupList dtype", &a, INV, "groupList");
    a = base(0), a.gl = MK(QMOE_DTYPE_INT64, ND, big, 1, E);
    plan_fails("groupList rank", &a, INV, "groupList");
    a = base(0), a.gl = MK(QMOE_DTYPE_INT64, NZ, big, E);
    plan_fails("groupList format", &a, INV, "groupList");
}

static void test_outputs(void)
{
    args a;
    a = base(0), a.out = MK(QMOE_DTYPE_INT8, ND, big, M, N);
    plan_fails("output [M, N]", &a, INV, "output");
    a = base(0), a.out = MK(QMOE_DTYPE_INT8, ND, big, M + 1, N2);
    plan_fails("output [M+1, N/2]", &a, INV, "output");
    a = base(0), a.out = MK(QMOE_DTYPE_INT32, ND, big, M, N2);
    plan_fails("output dtype", &a, INV, "output");
    a = base(0), a.out = MK(QMOE_DTYPE_INT8, ND, big, M * N2);
    plan_fails("output rank", &a, INV, "output");
    a = base(0), a.out = MK(QMOE_DTYPE_INT8, NZ, big, M, N2);
    plan_fails("output format", &a, INV, "output");
    a = base(0), a.out = mk_strided(QMOE_DTYPE_INT8, ND, big, DIMS(M, N2), (int64_t[]){N2 / 2, 1});
    plan_fails("output rows overlap", &a, INV, "output");
    a = base(0), a.out = mk_strided(QMOE_DTYPE_INT8, ND, big, DIMS(M, N2), (int64_t[]){0, 1});
    plan_fails("output row stride 0", &a, INV, "output");
    a = base(0), a.out = mk_strided(QMOE_DTYPE_INT8, ND, big, DIMS(M, N2), (int64_t[]){1, M - 1});
    plan_fails("output column-major overlap", &a, INV, "output");
    /* padded rows and a column-major view are fine */
    a = base(0), a.out = mk_strided(QMOE_DTYPE_INT8, ND, big, DIMS(M, N2), (int64_t[]){N2 + 5, 1});
    plan_passes("output padded rows", &a);
    a = base(0), a.out = mk_strided(QMOE_DTYPE_INT8, ND, big, DIMS(M, N2), (int64_t[]){1, M});
    plan_passes("output column-major", &a);
    a = base(0), a.oscale = MK(QMOE_DTYPE_FLOAT32, ND, big, M - 1);
    plan_fails("outputScale shape", &a, INV, "outputScale");
    a = base(0), a.oscale = MK(QMOE_DTYPE_FLOAT16, ND, big, M);
    plan_fails("outputScale dtype", &a, INV, "outputScale");
    a = base(0), a.oscale = MK(QMOE_DTYPE_FLOAT32, ND, big, M, 1);
    plan_fails("outputScale rank", &a, INV, "outputScale");
    a = base(0), a.oscale = MK(QMOE_DTYPE_FLOAT32, NZ, big, M);
    plan_fails("outputScale format", &a, INV, "outputScale");
    a = base(0), a.oscale = mk_strided(QMOE_DTYPE_FLOAT32, ND, big, DIMS(M), (int64_t[]){0});
    plan_fails("outputScale stride 0", &a, INV, "outputScale");
    /* no in-place execution: one tensor object as an input and an output is refused too */
    a = base(0), a.oscale = a.xs;
    plan_fails("xScale object as outputScale", &a, INV, "outputScale");
    a = base(0), a.out = MK(QMOE_DTYPE_INT8, ND, x_buf, M, N2); /* K == N/2: x's exact bytes */
    plan_fails("x memory as output", &a, INV, "output");
}

/* tensor_create is where shapes, strides and byte extents are first checked. */
static void test_tensor_create_rules(void)
{
    qmoe_tensor *t = (qmoe_tensor *)(uintptr_t)0x77;
    CHECK(qmoe_tensor_create((int64_t[]){M, -K}, 2, NULL, QMOE_DTYPE_INT8, ND, big, &t) == INV);
    CHECK(t == (qmoe_tensor *)(uintptr_t)0x77 && names(qmoe_last_error(), "shape"));
    CHECK(qmoe_tensor_create((int64_t[]){M, K}, 2, (int64_t[]){-K, 1}, QMOE_DTYPE_INT8, ND, big,
                             &t) == INV);
    CHECK(t == (qmoe_tensor *)(uintptr_t)0x77 && names(qmoe_last_error(), "stride"));
    CHECK(qmoe_tensor_create((int64_t[]){INT64_C(1) << 32, INT64_C(1) << 32}, 2, NULL,
                             QMOE_DTYPE_FLOAT32, ND, big, &t) == INV);
    CHECK(t == (qmoe_tensor *)(uintptr_t)0x77 && strstr(qmoe_last_error(), "overflow"));
    CHECK(qmoe_tensor_create((int64_t[]){2, 2}, 2, (int64_t[]){INT64_MAX / 2 + 1, 1},
                             QMOE_DTYPE_INT8, ND, big, &t) == INV);
    CHECK(t == (qmoe_tensor *)(uintptr_t)0x77 && strstr(qmoe_last_error(), "overflow"));
}

/* ---- phase two ---------------------------------------------------------------------------- */

static void fill_sentinels(void)
{
    memset(out_buf, 0x6B, sizeof out_buf);
    memset(oscale_buf, 0x6B, sizeof oscale_buf);
}

static int is_sentinel(const void *p, size_t n)
{
    const uint8_t *c = p;
    for (size_t i = 0; i < n; i++)
        if (c[i] != 0x6B) return 0;
    return 1;
}

static int outputs_untouched(void)
{
    return is_sentinel(out_buf, sizeof out_buf) && is_sentinel(oscale_buf, sizeof oscale_buf);
}

/* Plans the base case with groupList `gl` (entries) and executes it; returns the status. */
static qmoe_status execute(int a8w4, qmoe_group_list_type type, const int64_t *gl, int entries)
{
    args a = base(a8w4);
    a.opt.group_list_type = type;
    a.gl = MK(QMOE_DTYPE_INT64, ND, gl_buf, entries);
    memcpy(gl_buf, gl, sizeof(int64_t) * (size_t)entries);
    for (int i = 0; i < M * K; i++) x_buf[i] = (int8_t)(i % 7 - 3);
    for (int i = 0; i < E * K * N; i++) w_buf[i] = (int8_t)(i % 5 - 2);
    for (int i = 0; i < E * N; i++) ws_buf[i] = 0.01f, bias_buf[i] = 0.0f;
    for (int i = 0; i < M; i++) xs_buf[i] = 0.1f;
    qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
    uint64_t size = 0;
    qmoe_status st = plan(&a, &size, &ex);
    CHECK_MSG(st == QMOE_OK, "plan: %s", qmoe_last_error());
    if (st) return st;
    void *ws = malloc(size + 1);
    fill_sentinels();
    st = qmoe_grouped_matmul_swiglu_quant(ws, size, ex, NULL);
    free(ws);
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
    return st;
}

static void run_fails(const char *rule, int a8w4, qmoe_group_list_type type, const int64_t *gl,
                      int entries, const char *name)
{
    qmoe_status st = execute(a8w4, type, gl, entries);
    CHECK_MSG(st == INV, "%s: got %d", rule, (int)st);
    CHECK_MSG(names(qmoe_last_error(), name), "%s: message '%s' does not name '%s'", rule,
              qmoe_last_error(), name);
    CHECK_MSG(outputs_untouched(), "%s: outputs written", rule);
}

static void test_group_list_values(void)
{
    const qmoe_group_list_type CUM = QMOE_GROUP_LIST_CUMSUM, CNT = QMOE_GROUP_LIST_COUNT;
    run_fails("groupList decreasing", 0, CUM, (int64_t[]){3, 1}, 2, "groupList");
    run_fails("groupList negative", 1, CUM, (int64_t[]){-1, 2}, 2, "groupList");
    run_fails("groupList last > M", 0, CUM, (int64_t[]){2, M + 1}, 2, "groupList");
    run_fails("groupList first > M", 1, CUM, (int64_t[]){M + 1}, 1, "groupList");
    run_fails("groupList counts past M", 0, CNT, (int64_t[]){3, M - 2}, 2, "groupList");
    run_fails("groupList count negative", 1, CNT, (int64_t[]){3, -1}, 2, "groupList");
    run_fails("groupList count overflow", 0, CNT, (int64_t[]){INT64_MAX, INT64_MAX}, 2,
              "groupList");

    /* successes that write nothing */
    CHECK(execute(0, CUM, (int64_t[]){0}, 0) == QMOE_OK && outputs_untouched());
    CHECK(execute(1, CUM, (int64_t[]){0, 0}, 2) == QMOE_OK && outputs_untouched());
    CHECK(execute(0, CNT, (int64_t[]){0, 0}, 2) == QMOE_OK && outputs_untouched());
    /* an empty groupList may have no memory at all; so may every tensor of an M = 0 case */
    args a = base(1);
    a.gl = MK(QMOE_DTYPE_INT64, ND, NULL, 0);
    qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
    uint64_t size = 0;
    CHECK(plan(&a, &size, &ex) == QMOE_OK);
    void *work = malloc(size + 1);
    fill_sentinels();
    CHECK(qmoe_grouped_matmul_swiglu_quant(work, size, ex, NULL) == QMOE_OK && outputs_untouched());
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
    a = base(0);
    a.x = MK(QMOE_DTYPE_INT8, ND, NULL, 0, K);
    a.xs = MK(QMOE_DTYPE_FLOAT32, ND, NULL, 0);
    a.out = MK(QMOE_DTYPE_INT8, ND, NULL, 0, N2);
    a.oscale = MK(QMOE_DTYPE_FLOAT32, ND, NULL, 0);
    gl_buf[0] = gl_buf[1] = 0;
    ex = NULL;
    CHECK(plan(&a, &size, &ex) == QMOE_OK);
    free(work);
    work = malloc(size + 1);
    CHECK(ex && qmoe_grouped_matmul_swiglu_quant(work, size, ex, NULL) == QMOE_OK);
    gl_buf[1] = 1; /* past M = 0 */
    CHECK(ex && qmoe_grouped_matmul_swiglu_quant(work, size, ex, NULL) == INV);
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
    free(work);

    /* a valid list writes exactly its rows: rows >= g[last] keep the sentinel */
    CHECK(execute(1, CUM, (int64_t[]){1, 3}, 2) == QMOE_OK);
    CHECK(is_sentinel(&oscale_buf[3], sizeof(float)) && is_sentinel(&out_buf[3 * N2], N2));
    CHECK(!is_sentinel(&oscale_buf[2], sizeof(float)));

}

/* Phase two refuses a workspace smaller than phase one asked for, or a NULL one, before it
 * writes anything. The planner needs a workspace when threads split the columns of a wide N. */
static void test_workspace(void)
{
    enum { NW = 256 };
    static int8_t wout[M * NW / 2];
    static float wscale[M];
    static int64_t ends[E] = {2, M};
    args a = base(0);
    a.w = MK(QMOE_DTYPE_INT8, NZ, big, E, NW / 32, K / 16, 16, 32);
    a.ws = MK(QMOE_DTYPE_FLOAT32, ND, big, E, NW);
    a.gl = MK(QMOE_DTYPE_INT64, ND, ends, E);
    a.out = MK(QMOE_DTYPE_INT8, ND, wout, M, NW / 2);
    a.oscale = MK(QMOE_DTYPE_FLOAT32, ND, wscale, M);
    qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
    uint64_t size = 0;
    for (int threads = 2; threads <= 16 && size == 0; threads *= 2) {
        qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
        a.opt.threads = threads;
        CHECK(plan(&a, &size, &ex) == QMOE_OK);
    }
    CHECK_MSG(size > 0, "no plan needed a workspace");
    if (size == 0) return;
    void *work = malloc(size);
    memset(wout, 0x6B, sizeof wout);
    memset(wscale, 0x6B, sizeof wscale);
    CHECK(qmoe_grouped_matmul_swiglu_quant(work, size - 1, ex, NULL) == INV);
    CHECK(names(qmoe_last_error(), "workspaceSize"));
    CHECK(qmoe_grouped_matmul_swiglu_quant(NULL, size, ex, NULL) == NUL);
    CHECK(names(qmoe_last_error(), "workspace"));
    /* the driver keeps float rows there: a misaligned workspace is refused */
    char *odd = malloc(size + 1);
    CHECK(qmoe_grouped_matmul_swiglu_quant(odd + 1, size, ex, NULL) == INV);
    CHECK(names(qmoe_last_error(), "workspace"));
    free(odd);
    CHECK(is_sentinel(wout, sizeof wout) && is_sentinel(wscale, sizeof wscale));
    /* the same executor then runs with the full workspace */
    CHECK(qmoe_grouped_matmul_swiglu_quant(work, size, ex, NULL) == QMOE_OK);
    CHECK(!is_sentinel(wscale, sizeof wscale));
    free(work);
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
}

int main(void)
{
    test_valid_bases();
    test_null_pointers();
    test_reserved_and_options();
    test_x();
    test_weight();
    test_k_limits();
    test_weight_scale();
    test_bias();
    test_small_inputs();
    test_outputs();
    test_tensor_create_rules();
    test_group_list_values();
    test_workspace();
    for (int i = 0; i < npool; i++) qmoe_tensor_destroy(pool[i]);
    return qt_finish("test_validation");
}
